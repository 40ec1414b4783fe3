"""Per-tick kinematics shared by every task and constraint of the controller.

One :func:`pinocchio.computeJointJacobians` call per tick computes the placements and the
Jacobians of all joints; frame placements, frame Jacobians and the CoM Jacobian are then
read from it on demand and cached until the next :meth:`Kinematics.update`. Asking for
the same frame from two tasks (e.g. the waist for a height task and an orientation task)
costs one evaluation.

Conventions (all tasks use them):

* Frame Jacobians are ``LOCAL_WORLD_ALIGNED``: rows 0-2 map ``v`` to the linear velocity
  of the frame origin in world axes, rows 3-5 to the angular velocity in world axes.
* ``v`` is pinocchio's free-flyer tangent vector (base twist in the base frame, then the
  joint velocities), so ``J v`` is a world-axes velocity whatever the base orientation.
"""

from __future__ import annotations

import numpy as np
import pinocchio as pin

from teleop.robot.model import RobotModel

LOCAL_WORLD_ALIGNED = pin.ReferenceFrame.LOCAL_WORLD_ALIGNED
LOCAL = pin.ReferenceFrame.LOCAL


class Kinematics:
    """Forward kinematics and Jacobians at one configuration ``q``.

    Args:
        robot: the robot model; this object owns a separate ``pinocchio.Data`` so it
            never disturbs ``robot.data``.
    """

    def __init__(self, robot: RobotModel) -> None:
        self.robot = robot
        self.model: pin.Model = robot.model
        self.data: pin.Data = robot.model.createData()
        self.q = robot.home_configuration()
        self._placements: dict[int, pin.SE3] = {}
        self._jacobians: dict[int, np.ndarray] = {}
        self._com: np.ndarray | None = None
        self._com_jacobian: np.ndarray | None = None

    def update(self, q: np.ndarray) -> None:
        """Recompute joint placements and Jacobians at ``q`` and drop the caches."""
        self.q = q
        pin.computeJointJacobians(self.model, self.data, q)
        self._placements.clear()
        self._jacobians.clear()
        self._com = None
        self._com_jacobian = None

    def placement(self, frame_id: int) -> pin.SE3:
        """World placement of a frame (cached for this tick)."""
        placement = self._placements.get(frame_id)
        if placement is None:
            placement = pin.updateFramePlacement(self.model, self.data, frame_id)
            self._placements[frame_id] = placement
        return placement

    def jacobian(self, frame_id: int) -> np.ndarray:
        """(6, nv) LOCAL_WORLD_ALIGNED Jacobian of a frame (cached; do not modify)."""
        jacobian = self._jacobians.get(frame_id)
        if jacobian is None:
            jacobian = pin.getFrameJacobian(self.model, self.data, frame_id, LOCAL_WORLD_ALIGNED)
            self._jacobians[frame_id] = jacobian
        return jacobian

    def local_jacobian(self, frame_id: int) -> np.ndarray:
        """(6, nv) Jacobian of a frame in its own axes (LOCAL; not cached)."""
        return pin.getFrameJacobian(self.model, self.data, frame_id, LOCAL)

    def com(self) -> np.ndarray:
        """(3,) centre of mass in the world frame [m] (cached)."""
        if self._com is None:
            self.com_jacobian()
        assert self._com is not None  # com_jacobian() fills both caches
        return self._com

    def com_jacobian(self) -> np.ndarray:
        """(3, nv) Jacobian of the centre of mass (cached; do not modify)."""
        if self._com_jacobian is None:
            # This overload reuses the joint placements of computeJointJacobians instead
            # of running forward kinematics again (half the cost); it also fills data.com.
            self._com_jacobian = pin.jacobianCenterOfMass(self.model, self.data, False)
            self._com = self.data.com[0].copy()
        return self._com_jacobian
