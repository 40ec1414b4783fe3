"""What the retargeting measures on the human, frame by frame, in the human stance frame.

The *human stance frame* is fixed at calibration: origin on the ground at the midpoint of
the feet (or under the pelvis/head for sparse sources), x along the person's facing
direction, z up. Expressing every measurement in it makes the mapping independent of
where the person stood in the capture volume and of which way they faced.

Every signal is computed only when its segments are present; sparse sources (VR: head +
hands, optional pelvis/feet) get ``None`` for what they cannot give and documented
estimates for the few points the hand mapping needs:

* pelvis point: the pelvis origin, else the head (only its *displacement* is used: the
  hands then follow the head's displacement scaled like the body's);
* shoulder points: the upper-arm origins (shoulder joint centres), else the head (the
  hand mapping then scales the hand's displacement relative to the head by the arm ratio,
  and the head's displacement relative to the pelvis by the trunk ratio);
* torso with a pelvis tracker and no chest: pitch and roll of the pelvis -> head direction
  in the pelvis frame (0 when the head is straight above the pelvis); the yaw is unknown
  (NaN: the mapping marks it absent). It over-reads the trunk angle by the neck flexion's
  share of the head's displacement (a few degrees);
* neck without a chest: the head read against the chest estimated above (pelvis tracker),
  else against the stance frame (upright, facing forward): the robot looks where the
  operator looks, the whole head rotation going to the neck.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from . import quat
from .anthropometry import can_compute_com, com_from_arrays
from .human import HumanMotion
from .postures import arm_angles, neck_angles, torso_angles

SIDES = ("left", "right")


@dataclass
class Stance:
    """The human stance frame: ``origin`` (3,) on the ground [m], heading ``yaw`` [rad]."""

    origin: npt.NDArray[np.floating[Any]]
    yaw: float

    def __post_init__(self) -> None:
        self.origin = np.asarray(self.origin, dtype=float)
        self.yaw = float(self.yaw)
        self._inverse = quat.about_z(-self.yaw)   # stance_from_world, computed once

    @property
    def rotation(self) -> npt.NDArray[np.floating[Any]]:
        """(4,) world_from_stance quaternion."""
        return quat.about_z(self.yaw)

    def points(self, p: npt.NDArray[np.floating[Any]]) -> npt.NDArray[np.floating[Any]]:
        """World points (..., 3) -> stance frame (..., 3)."""
        return quat.rotate(self._inverse, np.asarray(p, dtype=float) - self.origin)

    def orientations(self, q: npt.NDArray[np.floating[Any]]) -> npt.NDArray[np.floating[Any]]:
        """world_from_segment (..., 4) -> stance_from_segment (..., 4)."""
        return quat.mul(self._inverse, q)


@dataclass
class BodyMeasures:
    """Human measurements over T frames, stance frame, metres and radians.

    Attributes:
        pelvis: (T, 3) pelvis point (see module docstring).
        shoulders: (T, 2, 3) left, right shoulder points.
        hands: (T, 2, 3) left, right hand (wrist) positions, or None.
        head: (T, 4) stance_from_head orientation, or None.
        com_xy: (T, 2) CoM ground projection, or None.
        foot_centers: (T, 2, 2) left, right sole centres on the ground, or None.
        foot_corners: (T, 8, 2) sole corners of both feet on the ground, or None.
        left_arm, right_arm: (T, 3) arm angles (see :mod:`retarget.postures`), or None.
        neck: (T, 2) neck pitch, yaw, or None.
        torso: (T, 3) torso pitch, roll, yaw, or None (NaN columns: not observable).
        pelvis_measured: whether ``pelvis`` is the pelvis (False: the head stands in).
    """

    pelvis: npt.NDArray[np.floating[Any]]
    shoulders: npt.NDArray[np.floating[Any]]
    hands: npt.NDArray[np.floating[Any]] | None
    head: npt.NDArray[np.floating[Any]] | None
    com_xy: npt.NDArray[np.floating[Any]] | None
    foot_centers: npt.NDArray[np.floating[Any]] | None
    foot_corners: npt.NDArray[np.floating[Any]] | None
    left_arm: npt.NDArray[np.floating[Any]] | None
    right_arm: npt.NDArray[np.floating[Any]] | None
    neck: npt.NDArray[np.floating[Any]] | None
    torso: npt.NDArray[np.floating[Any]] | None
    pelvis_measured: bool = True

    def posture(self, name: str) -> npt.NDArray[np.floating[Any]] | None:
        return getattr(self, name)


def foot_geometry(positions: npt.NDArray[np.floating[Any]], orientations: npt.NDArray[np.floating[Any]],
                  corners_local: npt.NDArray[np.floating[Any]]
                  ) -> tuple[npt.NDArray[np.floating[Any]], npt.NDArray[np.floating[Any]]]:
    """Sole corners and centres on the ground.

    Args:
        positions: (T, 2, 3) left, right foot origins (ankles) [m].
        orientations: (T, 2, 4) left, right foot orientations.
        corners_local: (4, 3) sole corners in the foot segment frame [m].
    Returns:
        ((T, 2, 2) centres, (T, 8, 2) corners), in the frame of the inputs.
    """
    corners = (positions[:, :, None] + quat.rotate(orientations[:, :, None], corners_local))[..., :2]
    return corners.mean(axis=2), corners.reshape(len(corners), 8, 2)


def measure(motion: HumanMotion, stance: Stance, foot_corners_local: npt.NDArray[np.floating[Any]]) -> BodyMeasures:
    """Everything the mapping needs from ``motion``, vectorised over its frames."""
    has = motion.has
    idx = {s: i for i, s in enumerate(motion.segment_names)}
    # Everything in the stance frame at once (one rotation per array, not per segment).
    P = stance.points(motion.positions)                   # (T, S, 3)
    Q = motion.orientations                               # relative rotations need no change

    if has("pelvis"):
        pelvis = P[:, idx["pelvis"]]
    elif has("head"):
        pelvis = P[:, idx["head"]]
    else:
        raise KeyError(f"{motion.source}: a motion needs at least a pelvis or a head segment")
    if has("left_upper_arm", "right_upper_arm"):
        shoulders = P[:, [idx["left_upper_arm"], idx["right_upper_arm"]]]
    else:
        top = P[:, idx["head"]] if has("head") else pelvis
        shoulders = np.stack([top, top], axis=1)
    hands = P[:, [idx["left_hand"], idx["right_hand"]]] if has("left_hand", "right_hand") else None
    head = stance.orientations(Q[:, idx["head"]]) if has("head") else None

    centres = corners = com_xy = None
    if has("left_foot", "right_foot"):
        feet = [idx["left_foot"], idx["right_foot"]]
        centres, corners = foot_geometry(P[:, feet], stance.orientations(Q[:, feet]), foot_corners_local)
        if motion.com is not None:
            com_xy = stance.points(motion.com)[:, :2]
        elif can_compute_com(motion.segment_names):
            com_xy = com_from_arrays(motion.segment_names, P, stance.orientations(Q))[:, :2]

    arms: dict[str, npt.NDArray[np.floating[Any]] | None] = {}
    for s in SIDES:
        parent = f"{s}_shoulder" if has(f"{s}_shoulder") else "t8"
        if has(parent, f"{s}_upper_arm", f"{s}_forearm", f"{s}_hand"):
            arms[s] = arm_angles(Q[:, idx[parent]], Q[:, idx[f"{s}_upper_arm"]],
                                 Q[:, idx[f"{s}_forearm"]], Q[:, idx[f"{s}_hand"]], s)
        else:
            arms[s] = None

    torso = None
    if has("t8", "head"):
        neck = neck_angles(Q[:, idx["t8"]], Q[:, idx["head"]])
    elif has("pelvis", "head"):
        # Sparse with a pelvis tracker: chest = pelvis swung onto the pelvis -> head line.
        q_pelvis = Q[:, idx["pelvis"]]
        up = quat.rotate(quat.conj(q_pelvis), motion.positions[:, idx["head"]] - motion.positions[:, idx["pelvis"]])
        swing = quat.between(np.broadcast_to([0.0, 0.0, 1.0], up.shape), up)
        torso = quat.euler_yxz(swing)
        torso[:, 2] = np.nan                                   # the yaw is not observable
        neck = neck_angles(quat.mul(q_pelvis, swing), Q[:, idx["head"]])
    elif head is not None:
        neck = neck_angles(np.broadcast_to(quat.IDENTITY, head.shape), head)
    else:
        neck = None
    if has("pelvis", "t8"):
        torso = torso_angles(Q[:, idx["pelvis"]], Q[:, idx["t8"]])

    return BodyMeasures(pelvis=pelvis, shoulders=shoulders, hands=hands, head=head, com_xy=com_xy,
                        foot_centers=centres, foot_corners=corners, left_arm=arms["left"],
                        right_arm=arms["right"], neck=neck, torso=torso, pelvis_measured=has("pelvis"))
