"""Orientation of a frame."""

from __future__ import annotations

import numpy as np
import pinocchio as pin

from teleop.control.kinematics import Kinematics
from teleop.control.tasks.base import InvalidTarget, Task, finite_vector


def rotation_matrix(orientation) -> np.ndarray:
    """A (3, 3) rotation from a matrix or a unit quaternion given as (w, x, y, z)."""
    array = np.asarray(orientation, dtype=float)
    if array.shape == (3, 3):
        if not np.all(np.isfinite(array)):
            raise InvalidTarget(f"non-finite rotation matrix {array}")
        if np.abs(array @ array.T - np.eye(3)).max() > 1e-6 or np.linalg.det(array) < 0:
            raise InvalidTarget("target matrix is not a rotation")
        return array.copy()
    wxyz = finite_vector(array, 4, "orientation quaternion (w, x, y, z)")
    norm = np.linalg.norm(wxyz)
    if not 0.9 < norm < 1.1:
        raise InvalidTarget(f"orientation quaternion is not unit (norm {norm:.3f})")
    w, x, y, z = wxyz / norm
    return pin.Quaternion(w, x, y, z).toRotationMatrix()


class FrameOrientationTask(Task):
    r"""Bring the orientation of a frame to a target orientation.

    With :math:`R(q)` the frame orientation in the world, :math:`R^*` the target and
    :math:`J_\omega` the angular rows of the LOCAL_WORLD_ALIGNED Jacobian:

    .. math::

        e = \log_3(R^* R(q)^T), \qquad J = J_\omega(q), \qquad b = \omega_{ff} + \lambda e

    :math:`e` is the rotation vector (world axes) that takes the frame to the target, so
    :math:`\omega = \lambda e` turns the frame towards it; the first-order relation
    :math:`\dot e \approx -\omega` is exact at the target and good for small errors.
    """

    def __init__(self, name: str, frame_id: int, weight: float = 1.0, gain: float = 1.0) -> None:
        super().__init__(name, 3, weight, gain)
        self.frame_id = frame_id
        self.target = np.eye(3)

    def set_target(self, orientation, angular_velocity: np.ndarray | None = None) -> None:
        """Target orientation: (3, 3) rotation or (w, x, y, z) quaternion, world frame
        (and the target's angular velocity [rad/s], world axes)."""
        target = rotation_matrix(orientation)
        self.set_feedforward(angular_velocity)
        self.target = target

    def current(self, kin: Kinematics) -> np.ndarray:
        """Current (3, 3) orientation in the world."""
        return kin.placement(self.frame_id).rotation

    def set_target_from(self, kin: Kinematics) -> None:
        self.target = self.current(kin).copy()

    def error(self, kin: Kinematics) -> np.ndarray:
        return pin.log3(self.target @ kin.placement(self.frame_id).rotation.T)

    def jacobian(self, kin: Kinematics) -> np.ndarray:
        return kin.jacobian(self.frame_id)[3:6]

    def fill(self, kin: Kinematics, jacobian_out: np.ndarray, b_out: np.ndarray) -> None:
        # Task.fill with jacobian() and error() inlined: this runs every tick.
        weight = self.sqrt_weight
        np.multiply(kin.jacobian(self.frame_id)[3:6], weight, out=jacobian_out)
        np.multiply(pin.log3(self.target @ kin.placement(self.frame_id).rotation.T), self._gain * weight, out=b_out)
        if self._has_feedforward:
            b_out += weight * self.feedforward
