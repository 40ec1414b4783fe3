"""A point of the robot (a frame origin, the centre of mass) brought to a target position
on a subset of the world axes: the shared part of :class:`ComTask` and
:class:`FramePositionTask`."""

from __future__ import annotations

import abc

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


class PointTask(Task):
    r"""Bring a point :math:`p(q)` to a target on the selected world axes :math:`S`:

    .. math::

        e = S (p^* - p(q)), \qquad J = S J_p(q), \qquad b = S \dot p_{ff} + \lambda e

    Subclasses say which point: :meth:`_position` (3,) [m] in the world and
    :meth:`_position_jacobian`, whose first three rows are :math:`J_p` (world-aligned).
    """

    def __init__(self, name: str, axes: str, weight: float = 1.0, gain: float = 1.0) -> None:
        self.axes = parse_axes(axes)
        super().__init__(name, len(self.axes), weight, gain)
        self.target = np.zeros(self.dim)
        self._rows = axis_rows(self.axes)

    @abc.abstractmethod
    def _position(self, kin: Kinematics) -> np.ndarray:
        """(3,) the point in the world [m]."""

    @abc.abstractmethod
    def _position_jacobian(self, kin: Kinematics) -> np.ndarray:
        """(>= 3, nv) Jacobian whose rows 0-2 are the point's world-aligned linear velocity."""

    def set_target(self, position: np.ndarray, velocity: np.ndarray | None = None) -> None:
        """Target position on the task's axes [m] (and its velocity [m/s])."""
        target = finite_vector(position, self.dim, "target", self._label)
        if velocity is not None or self._has_feedforward:
            self.set_feedforward(velocity)
        self.target = target

    def current(self, kin: Kinematics) -> np.ndarray:
        """Current position on the task's axes [m]."""
        return self._position(kin)[self._rows]

    def set_target_from(self, kin: Kinematics) -> None:
        self.target = self.current(kin).copy()

    def error(self, kin: Kinematics) -> np.ndarray:
        return self.target - self._position(kin)[self._rows]

    def jacobian(self, kin: Kinematics) -> np.ndarray:
        return self._position_jacobian(kin)[self._rows]

    def fill(self, kin: Kinematics, jacobian_out: np.ndarray, b_out: np.ndarray) -> None:
        # Task.fill with jacobian() and error() inlined: this runs every tick.
        rows, weight = self._rows, self.sqrt_weight
        np.multiply(self._position_jacobian(kin)[rows], weight, out=jacobian_out)
        np.subtract(self.target, self._position(kin)[rows], out=b_out)
        b_out *= self._gain * weight
        if self._has_feedforward:
            b_out += weight * self.feedforward
