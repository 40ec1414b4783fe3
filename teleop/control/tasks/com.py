"""Centre of mass: ground projection (x, y), height (z) or both."""

from __future__ import annotations

import numpy as np

from teleop.control.kinematics import Kinematics
from teleop.control.tasks.point import PointTask


class ComTask(PointTask):
    r"""Bring the centre of mass to a target, on the selected world axes.

    With :math:`S` the axes selection (``"xy"``: the ground projection ``com_g`` of the
    thesis; ``"z"``: the CoM height task :math:`T_{cz}` of controller C1), :math:`c(q)` the
    CoM and :math:`J_c` its Jacobian:

    .. math::

        e = S (c^* - c(q)), \qquad J = S J_c(q), \qquad b = S \dot c_{ff} + \lambda e
    """

    def __init__(self, name: str = "com", axes: str = "xy", weight: float = 1.0, gain: float = 1.0) -> None:
        super().__init__(name, axes, weight, gain)

    def _position(self, kin: Kinematics) -> np.ndarray:
        return kin.com()

    def _position_jacobian(self, kin: Kinematics) -> np.ndarray:
        return kin.com_jacobian()
