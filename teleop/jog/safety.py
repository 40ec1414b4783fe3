r"""Joint-space safety checks of a commanded step q_from -> q_to (reference Part B, §B.5 E,
§B.8, §B.9).

jog_control rejects any IK solution that moves a joint by more than 90 deg (§B.3 D, §B.5 E)
because IK wraps +-180 deg joints around; on the PR2's continuous wrist and elbow joints
that guard froze the robot in ordinary poses (§B.8, outages up to 6 s). The fix the thesis
proposes (§B.9.1) is applied *before* the guard here: for each continuous joint,

.. math:: q_t \leftarrow q_t + 2\pi\,\mathrm{round}\!\left(\frac{q_c - q_t}{2\pi}\right)

so a target of -179 deg seen from 175 deg becomes 181 deg (a 6 deg step, not 354 deg).
Then: the 90 deg jump guard, joint position limits, and per-joint velocity limits (the
reference's extension has no velocity limit apart from s, §B.5 [Note]); a step faster
than allowed is shortened along its own direction, so the hand keeps its path.

Vectors: (n,) actuated joint angles [rad] in :attr:`RobotModel.joint_names` order.
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from dataclasses import dataclass

import numpy as np

from teleop.robot.model import RobotModel

MAX_JOINT_JUMP_RAD = math.pi / 2


def continuous_joint_mask(robot: RobotModel) -> np.ndarray:
    """(n,) bool: True for the joints the URDF declares ``continuous`` (none on the iCub)."""
    root = ET.parse(robot.description.urdf_path).getroot()
    continuous = {j.get("name") for j in root.iter("joint") if j.get("type") == "continuous"}
    return np.array([name in continuous for name in robot.joint_names], dtype=bool)


def unwrap_continuous(q_to: np.ndarray, q_from: np.ndarray, continuous: np.ndarray) -> np.ndarray:
    """(n,) ``q_to`` with each continuous joint shifted by whole turns to lie within pi of
    ``q_from`` (§B.9.1)."""
    q = np.array(q_to, dtype=float)
    turns = np.round((np.asarray(q_from)[continuous] - q[continuous]) / (2 * math.pi))
    q[continuous] += 2 * math.pi * turns
    return q


@dataclass
class StepCheck:
    """Outcome of :meth:`JointSafety.check`.

    Attributes:
        q: (n,) the joint angles to command (equal to the input, unwrapped, or shortened).
        ok: False if the step was refused (``q`` then equals ``q_from``).
        reason: why it was refused or changed ("" when untouched).
        velocity_scale: fraction of the step kept by the velocity limit (1 = whole step).
    """

    q: np.ndarray
    ok: bool
    reason: str = ""
    velocity_scale: float = 1.0


class JointSafety:
    """Unwrap, jump guard, position limits, velocity limits for one control period.

    Args:
        robot: the model (limits, continuous joints).
        continuous: (n,) bool override of which joints are continuous.
        max_jump_rad: largest single-joint change accepted in one step (default 90 deg).
        velocity_scale: fraction of the description's joint velocity limits allowed.
    """

    def __init__(self, robot: RobotModel, continuous: np.ndarray | None = None,
                 max_jump_rad: float = MAX_JOINT_JUMP_RAD, velocity_scale: float = 1.0) -> None:
        self.robot = robot
        self.continuous = continuous_joint_mask(robot) if continuous is None else np.asarray(continuous, dtype=bool)
        self.max_jump_rad = float(max_jump_rad)
        self.velocity_limit = robot.limits.velocity * float(velocity_scale)
        self.lower = np.where(self.continuous, -np.inf, robot.limits.lower)
        self.upper = np.where(self.continuous, np.inf, robot.limits.upper)

    def check(self, q_from: np.ndarray, q_to: np.ndarray, dt: float) -> StepCheck:
        """Check the step from ``q_from`` to ``q_to`` (both (n,) [rad]) taken in ``dt`` [s]."""
        q_from = np.asarray(q_from, dtype=float)
        q = unwrap_continuous(q_to, q_from, self.continuous)
        if not np.all(np.isfinite(q)):
            return StepCheck(q_from.copy(), False, "non-finite joint target")
        step = q - q_from
        jump = np.abs(step)
        if np.any(jump > self.max_jump_rad):
            i = int(np.argmax(jump))
            return StepCheck(q_from.copy(), False,
                             f"joint {self.robot.joint_names[i]} would jump {math.degrees(jump[i]):.0f} deg (> 90)")
        # Tolerance: the QP's own limit handling may leave ~1e-9 rad outside.
        if np.any(q < self.lower - 1e-6) or np.any(q > self.upper + 1e-6):
            i = int(np.argmax(np.maximum(self.lower - q, q - self.upper)))
            return StepCheck(q_from.copy(), False, f"joint {self.robot.joint_names[i]} outside its limits")
        ratio = float(np.max(jump / (self.velocity_limit * dt)))
        if ratio > 1.0:
            return StepCheck(q_from + step / ratio, True, "velocity limited", 1.0 / ratio)
        return StepCheck(q, True, "unwrapped" if not np.array_equal(q, q_to) else "")
