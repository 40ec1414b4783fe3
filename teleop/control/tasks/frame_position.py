"""Position of a frame origin (all axes or a subset)."""

from __future__ import annotations

import numpy as np

from teleop.control.kinematics import Kinematics
from teleop.control.tasks.base import Task, finite_vector

AXES = {"x": 0, "y": 1, "z": 2}


def parse_axes(axes: str) -> np.ndarray:
    """Indices of an axes string such as ``"xyz"``, ``"xy"`` or ``"z"``."""
    if not axes or any(a not in AXES for a in axes) or len(set(axes)) != len(axes):
        raise ValueError(f"axes must be a non-empty subset of 'xyz', got {axes!r}")
    return np.array([AXES[a] for a in axes], dtype=int)


def axis_rows(axes: np.ndarray) -> slice | np.ndarray:
    """Row selector of parsed axes: a slice where contiguous, so that selecting rows of a
    cached Jacobian is a view (no copy); "xz" needs fancy indexing."""
    first = int(axes[0])
    return slice(first, first + len(axes)) if axes.tolist() == list(range(first, first + len(axes))) else axes


class FramePositionTask(Task):
    r"""Bring the origin of a frame to a target position, on the selected world axes.

    With :math:`S` the selection of the axes (e.g. ``"xyz"`` or ``"z"``), :math:`p(q)` the
    frame origin in the world and :math:`J_p` the linear rows of its LOCAL_WORLD_ALIGNED
    Jacobian:

    .. math::

        e = S (p^* - p(q)), \qquad J = S J_p(q), \qquad b = S \dot p_{ff} + \lambda e

    Args:
        name: task name.
        frame_id: pinocchio frame id (resolve roles with ``RobotModel.frame_id``).
        axes: which world axes to control.
        weight, gain: see :class:`Task`.
    """

    def __init__(self, name: str, frame_id: int, axes: str = "xyz", weight: float = 1.0,
                 gain: float = 1.0) -> None:
        self.axes = parse_axes(axes)
        super().__init__(name, len(self.axes), weight, gain)
        self.frame_id = frame_id
        self.target = np.zeros(self.dim)
        self._rows = axis_rows(self.axes)

    def set_target(self, position: np.ndarray, velocity: np.ndarray | None = None) -> None:
        """Target position on the task's axes [m] (and its velocity [m/s])."""
        target = finite_vector(position, self.dim, "target", self._label)
        if velocity is not None or self._has_feedforward:
            self.set_feedforward(velocity)
        self.target = target

    def current(self, kin: Kinematics) -> np.ndarray:
        """Current position on the task's axes [m]."""
        return kin.placement(self.frame_id).translation[self._rows]

    def set_target_from(self, kin: Kinematics) -> None:
        self.target = self.current(kin).copy()

    def error(self, kin: Kinematics) -> np.ndarray:
        return self.target - kin.placement(self.frame_id).translation[self._rows]

    def jacobian(self, kin: Kinematics) -> np.ndarray:
        return kin.jacobian(self.frame_id)[self._rows]

    def fill(self, kin: Kinematics, jacobian_out: np.ndarray, b_out: np.ndarray) -> None:
        # Task.fill with jacobian() and error() inlined: this runs every tick.
        rows, weight = self._rows, self.sqrt_weight
        np.multiply(kin.jacobian(self.frame_id)[rows], weight, out=jacobian_out)
        np.subtract(self.target, kin.placement(self.frame_id).translation[rows], out=b_out)
        b_out *= self._gain * weight
        if self._has_feedforward:
            b_out += weight * self.feedforward
