"""Centre of mass: ground projection (x, y), height (z) or both."""

from __future__ import annotations

import numpy as np

from teleop.control.kinematics import Kinematics
from teleop.control.tasks.base import Task, finite_vector
from teleop.control.tasks.frame_position import axis_rows, parse_axes


class ComTask(Task):
    r"""Bring the centre of mass to a target, on the selected world axes.

    With :math:`S` the axes selection (``"xy"``: the ground projection ``com_g`` of the
    thesis; ``"z"``: the CoM height task :math:`T_{cz}` of controller C1), :math:`c(q)` the
    CoM and :math:`J_c` its Jacobian:

    .. math::

        e = S (c^* - c(q)), \qquad J = S J_c(q), \qquad b = S \dot c_{ff} + \lambda e
    """

    def __init__(self, name: str = "com", axes: str = "xy", weight: float = 1.0, gain: float = 1.0) -> None:
        self.axes = parse_axes(axes)
        super().__init__(name, len(self.axes), weight, gain)
        self.target = np.zeros(self.dim)
        self._rows = axis_rows(self.axes)

    def set_target(self, position: np.ndarray, velocity: np.ndarray | None = None) -> None:
        """Target CoM position on the task's axes [m] (and its velocity [m/s])."""
        target = finite_vector(position, self.dim, "target", self._label)
        if velocity is not None or self._has_feedforward:
            self.set_feedforward(velocity)
        self.target = target

    def current(self, kin: Kinematics) -> np.ndarray:
        return kin.com()[self._rows]

    def set_target_from(self, kin: Kinematics) -> None:
        self.target = self.current(kin).copy()

    def error(self, kin: Kinematics) -> np.ndarray:
        return self.target - kin.com()[self._rows]

    def jacobian(self, kin: Kinematics) -> np.ndarray:
        return kin.com_jacobian()[self._rows]

    def fill(self, kin: Kinematics, jacobian_out: np.ndarray, b_out: np.ndarray) -> None:
        # Task.fill with jacobian() and error() inlined: this runs every tick.
        rows, weight = self._rows, self.sqrt_weight
        np.multiply(kin.com_jacobian()[rows], weight, out=jacobian_out)
        np.subtract(self.target, kin.com()[rows], out=b_out)
        b_out *= self._gain * weight
        if self._has_feedforward:
            b_out += weight * self.feedforward
