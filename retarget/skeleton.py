"""The canonical body tree: parents, N-pose directions, forward kinematics.

Every :class:`~retarget.human.HumanMotion` uses segment frames that are world-aligned in
the N-pose. With that convention a body is fully described by its *offsets*: the origin
of every segment expressed in its parent's frame, which is constant for rigid bones.
Setting every orientation to the identity and chaining the offsets gives the person's
N-pose (:func:`npose`), whatever posture the recording starts in. Calibration uses this
to measure waist height, arm lengths and the N-pose hand positions from any frame.

Frames and units: z up, x forward, y to the person's left, metres, quaternions (w,x,y,z).
"""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np
import numpy.typing as npt

from . import quat
from .human import SEGMENTS, HumanMotion

#: Parent of every canonical segment (the pelvis is the root).
PARENT: dict[str, str | None] = {
    "pelvis": None,
    "l5": "pelvis", "l3": "l5", "t12": "l3", "t8": "t12", "neck": "t8", "head": "neck",
    "right_shoulder": "t8", "right_upper_arm": "right_shoulder",
    "right_forearm": "right_upper_arm", "right_hand": "right_forearm",
    "left_shoulder": "t8", "left_upper_arm": "left_shoulder",
    "left_forearm": "left_upper_arm", "left_hand": "left_forearm",
    "right_upper_leg": "pelvis", "right_lower_leg": "right_upper_leg",
    "right_foot": "right_lower_leg", "right_toe": "right_foot",
    "left_upper_leg": "pelvis", "left_lower_leg": "left_upper_leg",
    "left_foot": "left_lower_leg", "left_toe": "left_foot",
}

#: Direction from a segment's origin to its distal end in the N-pose (world = segment
#: frame there), used to align a mocap skeleton's rest pose with the N-pose. None where
#: the rest pose already is the N-pose posture of that segment: the pelvis (no long axis),
#: the clavicles (T-pose and N-pose differ at the shoulder joint, not at the clavicle,
#: whose rest elevation is the person's) and the feet (which point forward and down by an
#: amount that depends on the person; only their sideways splay is removed).
NPOSE_DIRECTION: dict[str, npt.NDArray[np.floating[Any]] | None] = {
    "pelvis": None,
    "l5": np.array([0.0, 0.0, 1.0]), "l3": np.array([0.0, 0.0, 1.0]),
    "t12": np.array([0.0, 0.0, 1.0]), "t8": np.array([0.0, 0.0, 1.0]),
    "neck": np.array([0.0, 0.0, 1.0]), "head": np.array([0.0, 0.0, 1.0]),
    "right_shoulder": None, "left_shoulder": None,
    "right_upper_arm": np.array([0.0, 0.0, -1.0]), "left_upper_arm": np.array([0.0, 0.0, -1.0]),
    "right_forearm": np.array([0.0, 0.0, -1.0]), "left_forearm": np.array([0.0, 0.0, -1.0]),
    "right_hand": np.array([0.0, 0.0, -1.0]), "left_hand": np.array([0.0, 0.0, -1.0]),
    "right_upper_leg": np.array([0.0, 0.0, -1.0]), "left_upper_leg": np.array([0.0, 0.0, -1.0]),
    "right_lower_leg": np.array([0.0, 0.0, -1.0]), "left_lower_leg": np.array([0.0, 0.0, -1.0]),
    "right_foot": None, "left_foot": None,
    "right_toe": np.array([1.0, 0.0, 0.0]), "left_toe": np.array([1.0, 0.0, 0.0]),
}

#: N-pose offsets (segment origin in the parent frame [m]) of the Xsens MVN subject in
#: /work/shared/data/xsens_putaside_box (stature about 1.81 m, estimated from its C1
#: height 1.686 m); :func:`standard_offsets` scales them to any stature. Used for
#: synthetic motions and as proportions for sparse (VR) sources.
_MVN_SUBJECT_OFFSETS: dict[str, tuple[float, float, float]] = {
    "l5": (0.0, 0.0, 0.1054), "l3": (0.0, 0.0, 0.1119), "t12": (0.0, 0.0, 0.1011),
    "t8": (0.0, 0.0, 0.1011), "neck": (0.0, 0.0, 0.1402), "head": (0.0, 0.0, 0.0942),
    "right_shoulder": (0.0, -0.0296, 0.0783), "left_shoulder": (0.0, 0.0296, 0.0783),
    "right_upper_arm": (0.0, -0.1413, 0.0), "left_upper_arm": (0.0, 0.1413, 0.0),
    "right_forearm": (0.0, 0.0, -0.3145), "left_forearm": (0.0, 0.0, -0.3145),
    "right_hand": (0.0, 0.0, -0.2574), "left_hand": (0.0, 0.0, -0.2574),
    "right_upper_leg": (0.0, -0.0862, 0.0), "left_upper_leg": (0.0, 0.0862, 0.0),
    "right_lower_leg": (0.0, 0.0, -0.4515), "left_lower_leg": (0.0, 0.0, -0.4515),
    "right_foot": (0.0, 0.0, -0.4500), "left_foot": (0.0, 0.0, -0.4500),
    "right_toe": (0.1678, 0.0, -0.1140), "left_toe": (0.1678, 0.0, -0.1140),
}
_MVN_SUBJECT_STATURE = 1.686 / 0.93
_MVN_SUBJECT_ANKLE_HEIGHT = 0.131

#: Height of the C1 joint (the head segment origin) as a fraction of stature
#: (approximately the mastoid height, about 0.93 H in adult anthropometric tables).
C1_HEIGHT_FRACTION = 0.93


def standard_offsets(stature: float = 1.75) -> dict[str, npt.NDArray[np.floating[Any]]]:
    """N-pose offsets [m] of an adult of the given stature [m] (see the table above)."""
    k = stature / _MVN_SUBJECT_STATURE
    return {s: k * np.array(v) for s, v in _MVN_SUBJECT_OFFSETS.items()}


def standard_ankle_height(stature: float = 1.75) -> float:
    """Height of the ankle (foot segment origin) above the ground [m] when standing."""
    return _MVN_SUBJECT_ANKLE_HEIGHT * stature / _MVN_SUBJECT_STATURE


def present_parent(segment: str, present: tuple[str, ...] | set[str]) -> str | None:
    """Nearest ancestor of ``segment`` that is present (None for a root)."""
    p = PARENT[segment]
    while p is not None and p not in present:
        p = PARENT[p]
    return p


def topological(segments: Iterable[str]) -> list[str]:
    """The given segments ordered parents first (canonical order already is)."""
    segs = set(segments)
    return [s for s in SEGMENTS if s in segs]


def offsets_from_motion(motion: HumanMotion, frame: int | slice = 0) -> dict[str, npt.NDArray[np.floating[Any]]]:
    """Offsets (3,) [m] of every present non-root segment, in its present parent's frame.

    For a rigid chain the offset is the same in every frame; with a slice the median
    over those frames is returned, which is robust to the small joint slack of inertial
    suits (a few millimetres at MVN's hips and ankles).
    """
    present = set(motion.segment_names)
    frames = frame if isinstance(frame, slice) else slice(frame, frame + 1)
    out = {}
    for s in motion.segment_names:
        p = present_parent(s, present)
        if p is None:
            continue
        d = motion.positions[frames, motion.index(s)] - motion.positions[frames, motion.index(p)]
        local = quat.rotate(quat.conj(motion.orientations[frames, motion.index(p)]), d)
        out[s] = np.median(local, axis=0)
    return out


def forward_kinematics(offsets: dict[str, npt.NDArray[np.floating[Any]]], root_position: npt.NDArray[np.floating[Any]],
                       local_rotations: dict[str, npt.NDArray[np.floating[Any]]], root_name: str = "pelvis",
                       segments: Iterable[str] | None = None
                       ) -> tuple[tuple[str, ...], npt.NDArray[np.floating[Any]], npt.NDArray[np.floating[Any]]]:
    """Segment poses from offsets and local rotations, vectorised over frames.

    Args:
        offsets: segment -> (3,) origin in the parent frame [m] (N-pose offsets).
        root_position: (T, 3) root origin in the world [m].
        local_rotations: segment -> (T, 4) or (4,) parent_from_segment rotation relative
            to the N-pose (identity = N-pose); the root's entry is world_from_root.
            Missing segments keep their N-pose (identity) rotation.
        root_name: the root segment.
        segments: segments to produce (default: the root and every offset key).

    Returns:
        (segment_names, positions (T, S, 3), orientations (T, S, 4)).
    """
    root_position = np.atleast_2d(np.asarray(root_position, dtype=float))
    n_t = len(root_position)
    names = topological(segments if segments is not None else [root_name, *offsets])
    present = set(names)
    pos: dict[str, npt.NDArray[np.floating[Any]]] = {}
    ori: dict[str, npt.NDArray[np.floating[Any]]] = {}
    for s in names:
        local = np.broadcast_to(np.asarray(local_rotations.get(s, quat.IDENTITY), dtype=float), (n_t, 4))
        parent = present_parent(s, present)
        if parent is None:
            pos[s] = root_position
            ori[s] = quat.normalize(local)
        else:
            pos[s] = pos[parent] + quat.rotate(ori[parent], offsets[s])
            ori[s] = quat.mul(ori[parent], local)
    return (tuple(names), np.stack([pos[s] for s in names], axis=1),
            np.stack([ori[s] for s in names], axis=1))


def npose(offsets: dict[str, npt.NDArray[np.floating[Any]]], ankle_height: float
          ) -> dict[str, npt.NDArray[np.floating[Any]]]:
    """Segment origins (3,) [m] of the N-pose, pelvis above the origin, soles at z = 0.

    The pelvis height is chosen so the lower ankle sits ``ankle_height`` above the ground.
    """
    names, pos, _ = forward_kinematics(offsets, np.zeros((1, 3)), {})
    pos = pos[0]
    feet = [i for i, s in enumerate(names) if s in ("left_foot", "right_foot")]
    if feet:
        lift = ankle_height - pos[feet, 2].min()
    else:
        lift = 0.0
    return {s: pos[i] + np.array([0.0, 0.0, lift]) for i, s in enumerate(names)}


def heading_from_lines(left_points: list[npt.NDArray[np.floating[Any]]],
                       right_points: list[npt.NDArray[np.floating[Any]]]) -> npt.NDArray[np.floating[Any]]:
    """Facing direction [rad] (yaw of 'forward' in a z-up world) from left-right pairs.

    Each pair (e.g. left/right hip joints, left/right shoulders) gives a leftward vector;
    their horizontal sum rotated by -90 degrees about z is forward (forward = left x up).
    Args are lists of (..., 3) arrays; returns (...) yaw angles.
    """
    left = sum(np.asarray(lp, dtype=float) - np.asarray(rp, dtype=float)
               for lp, rp in zip(left_points, right_points))
    return np.arctan2(-left[..., 0], left[..., 1])


def standard_body_motion(times: npt.NDArray[np.floating[Any]],
                         local_rotations: dict[str, npt.NDArray[np.floating[Any]]] | None = None,
                         root_positions: npt.NDArray[np.floating[Any]] | None = None, stature: float = 1.75,
                         source: str = "standard body",
                         offsets: dict[str, npt.NDArray[np.floating[Any]]] | None = None) -> HumanMotion:
    """A full-body :class:`HumanMotion` of the standard body posed by local rotations.

    Args:
        times: (T,) sample times [s].
        local_rotations: segment -> (T, 4) or (4,) parent_from_segment rotation relative to
            the N-pose (the pelvis entry is world_from_pelvis); missing = N-pose.
        root_positions: (T, 3) pelvis origin [m]; default: standing, feet on the ground.
        stature: body height [m] (scales :func:`standard_offsets`).
        offsets: explicit N-pose offsets instead of the standard ones.
    """
    times = np.asarray(times, dtype=float)
    offsets = standard_offsets(stature) if offsets is None else offsets
    if root_positions is None:
        pelvis = npose(offsets, standard_ankle_height(stature))["pelvis"]
        root_positions = np.tile(pelvis, (len(times), 1))
    names, pos, ori = forward_kinematics(offsets, root_positions, local_rotations or {}, segments=SEGMENTS)
    return HumanMotion(times, names, pos, ori, source=source,
                       rate_hz=1.0 / float(np.median(np.diff(times))) if len(times) > 1 else 0.0)
