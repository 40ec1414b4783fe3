"""From a mocap skeleton's forward kinematics to a canonical :class:`HumanMotion`.

Shared by the ASF/AMC and BVH readers, which produce, per canonical segment, the
segment origin, the bone's world rotation and the bone's rest-pose direction, all in the
source's frame and units. This module then

1. scales lengths to metres (``unit_m``);
2. converts the source axes (Y up, X to the person's left, Z forward in the rest pose, as
   in Acclaim and CMU BVH) to z up, x forward, y left: (x, y, z)_new = (z, x, y)_source;
3. aligns segment frames with the world in the N-pose. A source's zero pose (its rest
   pose) is not the N-pose: HDM05 and CMU rest poses are T-poses with the legs spread
   about 20 degrees. For each segment, the constant rotation S taking the bone's rest
   direction onto its N-pose direction (:data:`retarget.skeleton.NPOSE_DIRECTION`: spine
   and head up, arms and legs down, clavicles sideways, toes forward; the foot keeps its
   rest pitch but loses its sideways splay) by the smallest rotation defines the N-pose
   of that bone as "rest pose swung by S". The segment orientation is then
   R_seg = C R_bone C^-1 S^-1 (C the axis change), which is the identity exactly when the
   bone is in that N-pose. The smallest rotation keeps the rest-pose twist: the T-pose
   palms (facing down) become N-pose palms facing the thighs, as MVN defines them;
4. turns the world about the vertical so the person faces +x at the first frame: the
   facing direction is perpendicular to the sum of the right->left hip-joint and
   shoulder-joint vectors (forward = left x up), which is robust to arm and head motion;
5. moves the origin horizontally under the first frame's pelvis, keeping the source's
   floor (y = 0) as the ground, z = 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from .. import quat, skeleton
from ..human import SEGMENTS, HumanMotion, check_finite_motion

#: Source (x left, y up, z forward) -> target (x forward, y left, z up).
Y_UP_TO_Z_UP = np.array([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])


@dataclass
class SegmentTrack:
    """One canonical segment as the source skeleton gives it (source frame and units).

    Attributes:
        origin: (T, 3) segment origin (proximal joint centre).
        rotation: (T, 4) world_from_bone rotation of the source bone.
        rest_direction: (3,) the bone's direction in the rest pose (zero rotations), or
            None for segments without a long axis (pelvis).
    """

    origin: npt.NDArray[np.floating[Any]]
    rotation: npt.NDArray[np.floating[Any]]
    rest_direction: npt.NDArray[np.floating[Any]] | None


def npose_direction(segment: str, rest_direction_target: npt.NDArray[np.floating[Any]] | None
                    ) -> npt.NDArray[np.floating[Any]] | None:
    """The N-pose direction of a segment (target frame), given its rest direction there."""
    d = skeleton.NPOSE_DIRECTION[segment]
    if d is not None or rest_direction_target is None:
        return d
    if segment.endswith("_foot"):
        r = rest_direction_target / np.linalg.norm(rest_direction_target)
        return np.array([np.hypot(r[0], r[1]), 0.0, r[2]])
    return None


def to_human_motion(tracks: dict[str, SegmentTrack], times: npt.NDArray[np.floating[Any]], unit_m: float,
                    source: str, rate_hz: float, meta: dict[str, Any]) -> HumanMotion:
    """Canonical motion from per-segment tracks (see module docstring for the steps)."""
    c = Y_UP_TO_Z_UP
    qc = quat.from_matrix(c)
    names = tuple(s for s in SEGMENTS if s in tracks)
    positions = np.stack([tracks[s].origin for s in names], axis=1) * unit_m @ c.T
    per_segment: list[npt.NDArray[np.floating[Any]]] = []
    for s in names:
        tr = tracks[s]
        rest = None if tr.rest_direction is None else c @ tr.rest_direction
        target = npose_direction(s, rest)
        if target is None:
            swing = quat.IDENTITY
        elif rest is None:
            raise ValueError(f"{source}: segment {s} has no rest direction (only a segment without a long "
                             "axis, such as the pelvis, may lack one)")
        else:
            swing = quat.between(rest, target)
        # R_seg = C R_bone C^-1 S^-1
        q = quat.mul(quat.mul(quat.mul(qc, tr.rotation), quat.conj(qc)), quat.conj(swing))
        per_segment.append(q)
    orientations = np.stack(per_segment, axis=1)

    # Facing direction at the first frame -> +x.
    idx = {s: i for i, s in enumerate(names)}
    pairs = [(f"left_{p}", f"right_{p}") for p in ("upper_leg", "upper_arm")
             if f"left_{p}" in idx and f"right_{p}" in idx]
    if pairs:
        yaw = float(skeleton.heading_from_lines([positions[0, idx[a]] for a, _ in pairs],
                                                [positions[0, idx[b]] for _, b in pairs]))
    else:
        yaw = float(quat.yaw_of(orientations[0, idx["pelvis"]]))
    turn = quat.about_z(-yaw)
    positions = quat.rotate(turn, positions)
    orientations = quat.make_continuous(quat.normalize(quat.mul(turn, orientations)))
    root = positions[0, idx["pelvis"]] if "pelvis" in idx else positions[0].mean(axis=0)
    positions = positions - np.array([root[0], root[1], 0.0])

    meta = dict(meta)
    meta.update({"length_unit_m": unit_m, "initial_heading_deg_in_source": float(np.degrees(yaw)),
                 "axes": "z up, x forward (facing at frame 0), y left; source was Y up"})
    # Built raw, then checked here: the constructor would refuse the same values, but
    # without saying why a file of finite numbers holds them.
    motion = HumanMotion.raw(times, names, positions, orientations, source=source, rate_hz=rate_hz, meta=meta)
    # The readers check each number is finite, but a huge one (1e308) still overflows to
    # inf / NaN in unit scaling and forward kinematics: refuse the result, naming the frame.
    check_finite_motion(motion, source, "a value in the file too large")
    return motion
