"""Constraints of the whole-body controller, one class per module."""

from teleop.control.limits.contacts import ContactConstraint, Reduction, identity_reduction
from teleop.control.limits.joint_limits import (JointAccelerationLimit, JointPositionLimit, JointVelocityLimit,
                                                joint_velocity_bounds)
from teleop.control.limits.support_polygon import SupportPolygonConstraint

__all__ = ["ContactConstraint", "Reduction", "identity_reduction", "JointAccelerationLimit", "JointPositionLimit",
           "JointVelocityLimit", "joint_velocity_bounds", "SupportPolygonConstraint"]
