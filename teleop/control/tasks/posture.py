"""Joint-space posture of a group of joints."""

from __future__ import annotations

import numpy as np

from teleop.control.kinematics import Kinematics
from teleop.control.tasks.base import InvalidTarget, Task, finite_vector
from teleop.robot.model import NQ_BASE, NV_BASE, RobotModel


class PostureTask(Task):
    r"""Bring a set of joints to target angles (``neck_q``, ``torso_q``, ``larm_q``...).

    With :math:`S` the selection of the task's joints in the tangent space (a constant
    0/1 matrix) and :math:`q_j` their angles:

    .. math::

        e = q_j^* - q_j, \qquad J = S, \qquad b = \dot q_{j,ff} + \lambda e

    (the iCub's joints are all revolute with limits, so :math:`\ominus` is a subtraction).

    Args:
        name: task name.
        robot: the model (resolves joint names and groups).
        joints: a group name of the robot description (``"neck"``, ``"left_forearm"``...)
            or a list of joint names / group names.
    """

    def __init__(self, name: str, robot: RobotModel, joints: str | list[str],
                 weight: float = 1.0, gain: float = 1.0) -> None:
        names = resolve_joints(robot, joints)
        super().__init__(name, len(names), weight, gain)
        self.joint_names = names
        self.joint_indices = np.array([robot.joint_index(n) for n in names], dtype=int)
        self._q_indices = NQ_BASE + self.joint_indices
        #: Columns of the task's joints in the tangent space.
        self.velocity_indices = NV_BASE + self.joint_indices
        self._selection = np.zeros((self.dim, robot.nv))
        self._selection[np.arange(self.dim), self.velocity_indices] = 1.0
        self._selection.setflags(write=False)
        self.target = np.zeros(self.dim)
        self._subsets: dict[tuple[str, ...], list[int]] = {}

    def set_target(self, angles, velocity=None, joints: list[str] | None = None) -> None:
        """Target angles [rad] (and velocities [rad/s]) of all the task's joints, or of the
        subset ``joints`` (the other targets are kept)."""
        if joints is None:
            target = finite_vector(angles, self.dim, "target", self._label)
            if velocity is not None or self._has_feedforward:
                self.set_feedforward(velocity)
            self.target = target
            return
        key = tuple(joints)
        positions = self._subsets.get(key)
        if positions is None:
            for joint in joints:
                if joint not in self.joint_names:
                    raise InvalidTarget(f"task {self.name!r} has no joint {joint!r}")
            positions = self._subsets[key] = [self.joint_names.index(j) for j in joints]
        values = finite_vector(angles, len(positions), "target", self._label)
        speeds = None if velocity is None else finite_vector(velocity, len(positions), "feed-forward", self._label)
        self.target = self.target.copy()
        self.target[positions] = values
        if speeds is not None or self._has_feedforward:
            feedforward = self.feedforward.copy()
            feedforward[positions] = 0.0 if speeds is None else speeds
            self.feedforward = feedforward
            self._has_feedforward = bool(np.any(feedforward))

    def current(self, kin: Kinematics) -> np.ndarray:
        return kin.q[self._q_indices]

    def set_target_from(self, kin: Kinematics) -> None:
        self.target = self.current(kin).copy()

    def error(self, kin: Kinematics) -> np.ndarray:
        return self.target - kin.q[self._q_indices]

    def jacobian(self, kin: Kinematics) -> np.ndarray:
        return self._selection


class PostureRows:
    """Fills the weighted rows of several :class:`PostureTask` with one set of numpy calls.

    Same math as :meth:`PostureTask.fill`, vectorised over the tasks: ~8 numpy calls per
    tick for all the posture tasks instead of ~5 per task (a call costs 1-3 us here and
    the default stack has six posture tasks). Only the ones of the selections are written,
    and only when a weight changes or the matrix is new: the rest of the tasks' rows must be
    (and stay) zero, and nothing else may write into them.

    Args:
        placed: (task, first row) of each posture task in the matrix it fills.
    """

    def __init__(self, placed: list[tuple[PostureTask, int]]) -> None:
        self.tasks = [task for task, _ in placed]
        self._rows = np.concatenate([np.arange(first, first + t.dim) for t, first in placed])
        self._columns = np.concatenate([t.velocity_indices for t in self.tasks])
        self._q_indices = np.concatenate([t._q_indices for t in self.tasks])
        self._dims = [t.dim for t in self.tasks]
        self._version = -1
        self._written: np.ndarray | None = None

    def fill(self, kin: Kinematics, rows: np.ndarray, targets: np.ndarray) -> None:
        """Write sqrt(w) S and sqrt(w) (ff + gain e) of every task into ``rows``/``targets``."""
        if Task.parameters_version != self._version or rows is not self._written:
            # Weights and gains rarely change: the scales, and the selection entries of the
            # rows (nothing else writes there), are only rewritten when they do.
            self._version = Task.parameters_version
            self._written = rows
            self._scale = np.repeat([t.sqrt_weight for t in self.tasks], self._dims)
            self._gain_scale = np.repeat([t.sqrt_weight * t._gain for t in self.tasks], self._dims)
            rows[self._rows, self._columns] = self._scale
        error = np.concatenate([t.target for t in self.tasks])
        error -= kin.q[self._q_indices]
        error *= self._gain_scale
        if any(t._has_feedforward for t in self.tasks):
            error += np.concatenate([t.feedforward for t in self.tasks]) * self._scale
        targets[self._rows] = error


def resolve_joints(robot: RobotModel, joints: str | list[str]) -> list[str]:
    """Joint names from a group name, a joint name, or a list of either (order kept,
    duplicates dropped)."""
    items = [joints] if isinstance(joints, str) else list(joints)
    names: list[str] = []
    for item in items:
        group = robot.description.groups.get(item)
        for name in group if group is not None else [item]:
            if name not in robot.joint_names:
                raise ValueError(f"{robot.description.name} has no joint or group {name!r}")
            if name not in names:
                names.append(name)
    if not names:
        raise ValueError("a posture task needs at least one joint")
    return names
