"""Xsens MVN conventions shared by the CSV and MVNX readers.

Verified on the MVN export in /work/shared/data/xsens_putaside_box (all 8 takes):

* world: x forward, y left, z up, metres, ground at z ~ 0 (toe origins 1.7-2.9 cm high);
* segment origins are the proximal joint centres, and the offset of each child origin in
  its parent's frame is constant over a take (rigid chain, a few mm of slack at the hips
  and ankles);
* trunk, head and leg frames are world-aligned in the upright neutral stance (spine
  children at +z, leg children at -z, toe at +x/-z of the foot);
* **arm frames are not**: the upper arm, forearm and hand children lie along the segment
  y axis (-y right arm, +y left arm), i.e. the arm frames are world-aligned with the arms
  held horizontally sideways, the T-pose. (MVN defines its segment frames in the T-pose;
  the trunk and legs are the same in T- and N-pose.)

HumanMotion requires N-pose-aligned frames, so the readers re-express the arm frames:
R_seg = R_mvn S^-1 with S the smallest rotation taking the T-pose arm direction onto the
hanging one, a rotation of +90 degrees about x for the right arm (-y -> -z) and -90 degrees
for the left arm. With the T-pose palms facing down this gives N-pose palms facing the
thighs. The fix is applied only when the data shows the T-pose convention (child offsets
along y), so an export already in N-pose convention passes unchanged; the writer applies
the inverse so MVNX files this package writes follow MVN's convention.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from .. import quat

#: MVN segment labels in MVN order, and their canonical names.
MVN_SEGMENTS: tuple[str, ...] = (
    "Pelvis", "L5", "L3", "T12", "T8", "Neck", "Head",
    "RightShoulder", "RightUpperArm", "RightForeArm", "RightHand",
    "LeftShoulder", "LeftUpperArm", "LeftForeArm", "LeftHand",
    "RightUpperLeg", "RightLowerLeg", "RightFoot", "RightToe",
    "LeftUpperLeg", "LeftLowerLeg", "LeftFoot", "LeftToe",
)
MVN_TO_CANONICAL: dict[str, str] = {
    "Pelvis": "pelvis", "L5": "l5", "L3": "l3", "T12": "t12", "T8": "t8", "Neck": "neck", "Head": "head",
    "RightShoulder": "right_shoulder", "RightUpperArm": "right_upper_arm", "RightForeArm": "right_forearm",
    "RightHand": "right_hand", "LeftShoulder": "left_shoulder", "LeftUpperArm": "left_upper_arm",
    "LeftForeArm": "left_forearm", "LeftHand": "left_hand", "RightUpperLeg": "right_upper_leg",
    "RightLowerLeg": "right_lower_leg", "RightFoot": "right_foot", "RightToe": "right_toe",
    "LeftUpperLeg": "left_upper_leg", "LeftLowerLeg": "left_lower_leg", "LeftFoot": "left_foot",
    "LeftToe": "left_toe",
}
CANONICAL_TO_MVN = {v: k for k, v in MVN_TO_CANONICAL.items()}

_ARM_CHAIN = {"right": ("right_upper_arm", "right_forearm", "right_hand"),
              "left": ("left_upper_arm", "left_forearm", "left_hand")}
#: S per side: T-pose arm frame -> N-pose arm frame.
_TPOSE_TO_NPOSE = {"right": quat.about_x(np.pi / 2), "left": quat.about_x(-np.pi / 2)}


def arm_convention(names: tuple[str, ...], positions: npt.NDArray[np.floating[Any]],
                   orientations: npt.NDArray[np.floating[Any]], side: str) -> str:
    """"tpose" or "npose": where the forearm lies in the upper-arm frame (first frame).

    Args:
        names: canonical segment names; positions (T, S, 3), orientations (T, S, 4).
    """
    ua, fa, _ = _ARM_CHAIN[side]
    if ua not in names or fa not in names:
        return "npose"
    i, j = names.index(ua), names.index(fa)
    local = quat.rotate(quat.conj(orientations[0, i]), positions[0, j] - positions[0, i])
    return "tpose" if abs(local[1]) > abs(local[2]) else "npose"


def mvn_to_npose_frames(names: tuple[str, ...], positions: npt.NDArray[np.floating[Any]],
                        orientations: npt.NDArray[np.floating[Any]]
                        ) -> tuple[npt.NDArray[np.floating[Any]], dict[str, str]]:
    """Orientations (T, S, 4) with MVN's T-pose arm frames re-expressed in N-pose frames.

    Returns (orientations, {side: convention found}).
    """
    out = orientations.copy()
    found = {}
    for side, chain in _ARM_CHAIN.items():
        found[side] = arm_convention(names, positions, orientations, side)
        if found[side] == "tpose":
            for seg in chain:
                if seg in names:
                    k = names.index(seg)
                    out[:, k] = quat.mul(out[:, k], quat.conj(_TPOSE_TO_NPOSE[side]))
    return out, found


def npose_to_mvn_frames(names: tuple[str, ...], orientations: npt.NDArray[np.floating[Any]]
                        ) -> npt.NDArray[np.floating[Any]]:
    """Inverse of :func:`mvn_to_npose_frames` (for writing MVN files)."""
    out = orientations.copy()
    for side, chain in _ARM_CHAIN.items():
        for seg in chain:
            if seg in names:
                k = names.index(seg)
                out[:, k] = quat.mul(out[:, k], _TPOSE_TO_NPOSE[side])
    return out
