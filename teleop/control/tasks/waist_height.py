"""Height of the waist (floating base) above the ground, optionally with its orientation."""

from __future__ import annotations

import math

import numpy as np
import pinocchio as pin

from teleop.control.kinematics import Kinematics
from teleop.control.tasks.base import finite_vector
from teleop.control.tasks.frame_orientation import rotation_matrix
from teleop.control.tasks.frame_position import FramePositionTask


class WaistHeightTask(FramePositionTask):
    r"""Bring the waist frame origin to a target height (``base_h`` of the thesis), and
    optionally hold the waist's orientation.

    Height row, with :math:`p_z` the waist height and :math:`J_{p_z}` the z row of the
    LOCAL_WORLD_ALIGNED Jacobian:

    .. math::

        e_h = h^* - p_z(q), \qquad J_h = J_{p_z}(q), \qquad b_h = \dot h_{ff} + \lambda e_h

    With ``orientation_weight`` :math:`w_R > 0`, three more rows keep the waist at the
    orientation :math:`R^*` (by default the one it had at reset: upright):
    :math:`e_R = \log_3(R^* R^T)`, :math:`J_R = J_\omega`, :math:`b_R = \lambda_R e_R`, with
    cost :math:`w_R \|J_R v - b_R\|^2`. Without it nothing constrains the three rotational
    degrees of freedom of the base-and-legs chain, and hand tasks slowly tilt the pelvis.
    (One task for both, as pink's single root FrameTask: one Jacobian lookup per tick.)
    """

    def __init__(self, name: str, frame_id: int, weight: float = 1.0, gain: float = 1.0,
                 orientation_weight: float = 0.0, orientation_gain: float | None = None) -> None:
        super().__init__(name, frame_id, axes="z", weight=weight, gain=gain)
        if not (math.isfinite(orientation_weight) and orientation_weight >= 0.0):
            raise ValueError(f"task {name!r}: orientation weight must be >= 0")
        self._orientation_weight = float(orientation_weight)
        self._orientation_scale = math.sqrt(self._orientation_weight)
        self.orientation_gain = float(gain if orientation_gain is None else orientation_gain)
        if not (math.isfinite(self.orientation_gain) and self.orientation_gain >= 0):
            raise ValueError(f"task {name!r}: orientation gain must be finite and >= 0 [1/s], "
                             f"got {self.orientation_gain}")
        self.orientation_target = np.eye(3)
        if self._orientation_weight > 0.0:
            self.dim = 4
            self.feedforward = np.zeros(4)

    @property
    def orientation_weight(self) -> float:
        return self._orientation_weight

    @orientation_weight.setter
    def orientation_weight(self, value: float) -> None:
        value = float(value)
        if not (math.isfinite(value) and value > 0.0 and self.dim == 4):
            raise ValueError(f"{self._label}: the orientation weight can be changed to another value > 0, "
                             "not switched on or off after construction")
        self._orientation_weight = value
        self._orientation_scale = math.sqrt(value)

    def set_target(self, height, velocity=None) -> None:
        """Target height [m] (and vertical velocity [m/s]); scalars or 1-element arrays."""
        target = finite_vector(height, 1, "target", self._label)
        if velocity is not None:
            speed = finite_vector(velocity, 1, "feed-forward", self._label)[0]
            self.feedforward = np.zeros(self.dim)
            self.feedforward[0] = speed
            self._has_feedforward = speed != 0.0
        elif self._has_feedforward:
            self.feedforward = np.zeros(self.dim)
            self._has_feedforward = False
        self.target = target

    def set_orientation_target(self, orientation) -> None:
        """Waist orientation to hold: (3, 3) rotation or (w, x, y, z) quaternion."""
        self.orientation_target = rotation_matrix(orientation)

    def set_target_from(self, kin: Kinematics) -> None:
        super().set_target_from(kin)
        self.orientation_target = kin.placement(self.frame_id).rotation.copy()

    def error(self, kin: Kinematics) -> np.ndarray:
        height_error = super().error(kin)
        if self.dim == 1:
            return height_error
        rotation = kin.placement(self.frame_id).rotation
        return np.concatenate((height_error, pin.log3(self.orientation_target @ rotation.T)))

    def jacobian(self, kin: Kinematics) -> np.ndarray:
        jacobian = kin.jacobian(self.frame_id)
        return jacobian[2:3] if self.dim == 1 else jacobian[2:6]

    def fill(self, kin: Kinematics, jacobian_out: np.ndarray, b_out: np.ndarray) -> None:
        weight = self.sqrt_weight
        jacobian = kin.jacobian(self.frame_id)
        placement = kin.placement(self.frame_id)
        height = float(placement.translation[2])  # Python floats: numpy scalars cost more
        b_out[0] = weight * (self._gain * (float(self.target[0]) - height) + float(self.feedforward[0]))
        if self.dim == 1:
            np.multiply(jacobian[2:3], weight, out=jacobian_out)
            return
        # One product for the height row and the angular rows, then the orientation scale.
        orientation_scale = self._orientation_scale
        np.multiply(jacobian[2:6], orientation_scale, out=jacobian_out)
        jacobian_out[0] *= weight / orientation_scale
        np.multiply(pin.log3(self.orientation_target @ placement.rotation.T),
                    self.orientation_gain * orientation_scale, out=b_out[1:])
