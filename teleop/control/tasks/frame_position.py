"""Position of a frame origin (all axes or a subset)."""

from __future__ import annotations

import numpy as np

from teleop.control.kinematics import Kinematics
from teleop.control.tasks.point import PointTask


class FramePositionTask(PointTask):
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
        super().__init__(name, axes, weight, gain)
        self.frame_id = frame_id

    def _position(self, kin: Kinematics) -> np.ndarray:
        return kin.placement(self.frame_id).translation

    def _position_jacobian(self, kin: Kinematics) -> np.ndarray:
        return kin.jacobian(self.frame_id)
