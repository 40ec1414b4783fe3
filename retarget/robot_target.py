"""What the retargeting needs to know about the robot.

The application fills a :class:`RobotTarget` from its robot model (e.g. pinocchio
kinematics of the iCub URDF) at the robot's initial posture. This package never loads a
robot model itself.

Frames and units: everything Cartesian is in the robot's *stance frame* at the initial
posture (origin on the ground midway between the soles, x forward, y to the robot's left,
z up; the frame of :mod:`retarget.references`), in metres. Angles are radians, in the
sign conventions of :mod:`retarget.postures` (anatomical: e.g. positive elbow = flexion);
the application converts them to and from its joint signs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from .references import RobotReferences


@dataclass
class RobotTarget:
    """The robot's geometry and initial posture, as the retargeting needs them.

    Attributes:
        left_sole_corners, right_sole_corners: (4, 3) corners of each sole's contact
            rectangle (toe and heel corners, any order) [m], stance frame.
        waist_height: height of the waist (root/pelvis frame) above the ground [m].
        left_hand, right_hand: (3,) hand reference points [m] (the points the controller
            tracks as hand positions), stance frame.
        left_shoulder, right_shoulder: (3,) shoulder joint centres [m] (the point where the
            shoulder pitch/roll/yaw axes meet), stance frame.
        arm_length: shoulder centre -> hand reference point with the arm straight [m].
        leg_length: hip joint centre -> ankle joint centre with the leg straight [m].
        com_height: CoM height above the ground [m].
        com_xy: (2,) CoM ground projection [m], stance frame.
        left_arm, right_arm: (3,) initial shoulder rotation, elbow flexion, forearm
            pronosupination [rad] (q_R^0 of Eq. 2.1).
        neck: (2,) initial neck pitch, yaw [rad].
        torso: (3,) initial torso pitch, roll, yaw [rad].
        name: free text (robot model, posture name).
    """

    left_sole_corners: npt.NDArray[np.floating[Any]]
    right_sole_corners: npt.NDArray[np.floating[Any]]
    waist_height: float
    left_hand: npt.NDArray[np.floating[Any]]
    right_hand: npt.NDArray[np.floating[Any]]
    left_shoulder: npt.NDArray[np.floating[Any]]
    right_shoulder: npt.NDArray[np.floating[Any]]
    arm_length: float
    leg_length: float
    com_height: float
    com_xy: npt.NDArray[np.floating[Any]]
    left_arm: npt.NDArray[np.floating[Any]] = field(default_factory=lambda: np.zeros(3))
    right_arm: npt.NDArray[np.floating[Any]] = field(default_factory=lambda: np.zeros(3))
    neck: npt.NDArray[np.floating[Any]] = field(default_factory=lambda: np.zeros(2))
    torso: npt.NDArray[np.floating[Any]] = field(default_factory=lambda: np.zeros(3))
    name: str = ""

    def __post_init__(self) -> None:
        shapes = {"left_sole_corners": (4, 3), "right_sole_corners": (4, 3), "left_hand": (3,),
                  "right_hand": (3,), "left_shoulder": (3,), "right_shoulder": (3,), "com_xy": (2,),
                  "left_arm": (3,), "right_arm": (3,), "neck": (2,), "torso": (3,)}
        for name, shape in shapes.items():
            value = np.asarray(getattr(self, name), dtype=float)
            if value.shape != shape:
                raise ValueError(f"RobotTarget.{name} must have shape {shape}, got {value.shape}")
            if not np.all(np.isfinite(value)):
                raise ValueError(f"RobotTarget.{name} is not finite")
            setattr(self, name, value)
        for name in ("waist_height", "arm_length", "leg_length", "com_height"):
            length = float(getattr(self, name))
            if not (np.isfinite(length) and length > 0):
                raise ValueError(f"RobotTarget.{name} must be a positive length, got {length}")
            setattr(self, name, length)
        if not self.trunk_height > 0:
            raise ValueError(f"RobotTarget: the shoulders are {self.trunk_height:.3f} m above the waist: the trunk "
                             "height (the trunk ratio of the hand mapping) must be positive (inconsistent model data)")
        for side in ("left", "right"):
            reach = float(np.linalg.norm(getattr(self, f"{side}_hand") - getattr(self, f"{side}_shoulder")))
            if reach > self.arm_length + 1e-3:
                raise ValueError(f"RobotTarget: the initial {side} hand is {reach:.3f} m from its shoulder, "
                                 f"beyond arm_length {self.arm_length:.3f} m (inconsistent model data)")

    # ------------------------------------------------------------------ derived
    @property
    def left_foot_center(self) -> npt.NDArray[np.floating[Any]]:
        """(2,) centroid of the left sole's corners on the ground [m]."""
        return self.left_sole_corners[:, :2].mean(axis=0)

    @property
    def right_foot_center(self) -> npt.NDArray[np.floating[Any]]:
        """(2,) centroid of the right sole's corners on the ground [m]."""
        return self.right_sole_corners[:, :2].mean(axis=0)

    @property
    def support_polygon(self) -> npt.NDArray[np.floating[Any]]:
        """(8, 2) ground corners of both soles (double support) [m]."""
        return np.vstack([self.left_sole_corners[:, :2], self.right_sole_corners[:, :2]])

    @property
    def trunk_height(self) -> float:
        """Shoulder-centre height above the waist [m]."""
        return float(0.5 * (self.left_shoulder[2] + self.right_shoulder[2]) - self.waist_height)

    def initial_references(self, t: float = 0.0) -> RobotReferences:
        """The references that hold the robot in its initial posture."""
        return RobotReferences(t=float(t), com_xy=self.com_xy.copy(), waist_height=self.waist_height,
                               left_hand=self.left_hand.copy(), right_hand=self.right_hand.copy(),
                               left_arm=self.left_arm.copy(), right_arm=self.right_arm.copy(),
                               neck=self.neck.copy(), torso=self.torso.copy())

    # ----------------------------------------------------------------- examples
    @classmethod
    def approximate_icub(cls) -> "RobotTarget":
        """A hand-written iCub-sized target for tests, benchmarks and examples.

        The numbers are rounded from the published iCub v2 dimensions (1.04 m tall, soles
        about 0.12 m x 0.05 m, feet 0.14 m apart, thigh 0.22 m, shank 0.21 m, upper arm
        0.15 m, forearm 0.14 m) in a slightly crouched posture with the elbows bent. They
        are NOT read from the robot model: the application must build its RobotTarget
        from the model it controls.
        """
        def sole(y: float) -> npt.NDArray[np.floating[Any]]:
            return np.array([[0.08, y + 0.025, 0.0], [0.08, y - 0.025, 0.0],
                             [-0.04, y - 0.025, 0.0], [-0.04, y + 0.025, 0.0]])

        return cls(
            left_sole_corners=sole(0.07), right_sole_corners=sole(-0.07),
            waist_height=0.56,
            left_hand=np.array([0.18, 0.13, 0.62]), right_hand=np.array([0.18, -0.13, 0.62]),
            left_shoulder=np.array([0.0, 0.11, 0.85]), right_shoulder=np.array([0.0, -0.11, 0.85]),
            arm_length=0.33, leg_length=0.43, com_height=0.50, com_xy=np.array([0.02, 0.0]),
            left_arm=np.array([0.0, np.deg2rad(50.0), 0.0]),
            right_arm=np.array([0.0, np.deg2rad(50.0), 0.0]),
            name="approximate iCub (hand-written, not from the model)")
