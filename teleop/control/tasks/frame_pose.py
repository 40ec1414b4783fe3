"""Full pose (position and orientation) of a frame."""

from __future__ import annotations

import math

import numpy as np
import pinocchio as pin

from teleop.control.kinematics import Kinematics
from teleop.control.tasks.base import Task, finite_vector
from teleop.control.tasks.frame_orientation import rotation_matrix


class FramePoseTask(Task):
    r"""Bring a frame to a target placement :math:`(p^*, R^*)`.

    Stacks :class:`FramePositionTask` (all axes) over :class:`FrameOrientationTask`, with
    their own gains (the thesis's :math:`\lambda` for positions and :math:`\sigma` for
    orientations) and an optional separate orientation weight:

    .. math::

        e = \begin{bmatrix} p^* - p(q) \\ \log_3(R^* R(q)^T) \end{bmatrix}, \quad
        J = J_{LWA}(q), \quad
        b = \begin{bmatrix} \dot p_{ff} + \lambda_p e_p \\ \omega_{ff} + \lambda_R e_R \end{bmatrix}

    The cost is :math:`w_p \|J_p v - b_p\|^2 + w_R \|J_\omega v - b_R\|^2` (position rows
    scaled by :math:`\sqrt{w_p}`, orientation rows by :math:`\sqrt{w_R}`).

    Args:
        gain: position gain [1/s]; ``orientation_gain`` defaults to it.
        weight: position weight; ``orientation_weight`` defaults to it [cost/rad^2 vs cost/m^2].
    """

    def __init__(self, name: str, frame_id: int, weight: float = 1.0, gain: float = 1.0,
                 orientation_gain: float | None = None, orientation_weight: float | None = None) -> None:
        super().__init__(name, 6, weight, gain)
        self.frame_id = frame_id
        self.orientation_gain = float(gain if orientation_gain is None else orientation_gain)
        if not (math.isfinite(self.orientation_gain) and self.orientation_gain >= 0):   # NaN < 0 is False
            raise ValueError(f"task {name!r}: orientation gain must be finite and >= 0 [1/s], "
                             f"got {self.orientation_gain}")
        self.orientation_weight = weight if orientation_weight is None else orientation_weight
        self.target = pin.SE3.Identity()

    @property
    def orientation_weight(self) -> float:
        return self._orientation_weight

    @orientation_weight.setter
    def orientation_weight(self, value: float) -> None:
        value = float(value)
        if not (np.isfinite(value) and value >= 0.0):
            raise ValueError(f"task {self.name!r}: orientation gain and weight must be >= 0")
        self._orientation_weight = value
        # A weight of 0 makes the orientation rows zero, which the controller must know
        # (a zero row must not take a direction from the lower priority levels).
        Task.parameters_version += 1

    @property
    def has_zero_rows(self) -> bool:
        return self.weight == 0.0 or self._orientation_weight == 0.0

    def set_target(self, placement: pin.SE3 | None = None, position=None, orientation=None,
                   velocity: np.ndarray | None = None) -> None:
        """Target placement (world) as an SE3, or as a position and an orientation (3x3
        or (w, x, y, z)); ``velocity`` is the (6,) feed-forward (linear, angular; world)."""
        if placement is not None:
            position, orientation = placement.translation, placement.rotation
        p = finite_vector(position, 3, "target position", self._label)
        R = rotation_matrix(orientation)
        self.set_feedforward(velocity)
        self.target = pin.SE3(R, p)

    def set_target_from(self, kin: Kinematics) -> None:
        self.target = pin.SE3(kin.placement(self.frame_id))

    def error(self, kin: Kinematics) -> np.ndarray:
        current = kin.placement(self.frame_id)
        return np.concatenate((self.target.translation - current.translation,
                               pin.log3(self.target.rotation @ current.rotation.T)))

    def jacobian(self, kin: Kinematics) -> np.ndarray:
        """(6, nv) LOCAL_WORLD_ALIGNED Jacobian (unscaled; the orientation weight is
        applied in :meth:`fill`)."""
        return kin.jacobian(self.frame_id)

    def fill(self, kin: Kinematics, jacobian_out: np.ndarray, b_out: np.ndarray) -> None:
        position_scale = self.sqrt_weight
        orientation_scale = float(np.sqrt(self.orientation_weight))
        jacobian = kin.jacobian(self.frame_id)
        np.multiply(jacobian[:3], position_scale, out=jacobian_out[:3])
        np.multiply(jacobian[3:], orientation_scale, out=jacobian_out[3:])
        error = self.error(kin)
        np.multiply(error[:3], self.gain * position_scale, out=b_out[:3])
        np.multiply(error[3:], self.orientation_gain * orientation_scale, out=b_out[3:])
        if self._has_feedforward:
            b_out[:3] += position_scale * self.feedforward[:3]
            b_out[3:] += orientation_scale * self.feedforward[3:]
