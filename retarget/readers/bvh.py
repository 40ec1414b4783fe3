"""BVH reader (Biovision hierarchy), e.g. the CMU database's BVH conversion.

Forward kinematics per the BVH convention: a joint's rotation channels compose in the
listed order as intrinsic rotations (``Zrotation Yrotation Xrotation`` -> Rz Ry Rx with
column vectors); its world rotation is R = R_parent R_local; its position is the parent's
position plus R_parent * OFFSET. Position channels, where present, replace the OFFSET (the
root's are its world position).

Units: BVH does not store them. ``unit_m`` (metres per file unit) can be given; by default
it is chosen among metres, centimetres, millimetres, inches and Acclaim units
(1/0.45 inch) as the one that makes the rest-pose body (feet to head end) closest to
1.70 m tall. The CMU conversion (cgspeed) keeps the Acclaim units of the source ASF files
(its hips are 17.98 units high: 1.02 m in Acclaim units, 0.46 m if they were inches), and
the auto-detection picks 0.0254/0.45 for it. Axes: Y up, X to the person's left, Z forward
in the rest pose (as CMU), converted by :mod:`retarget.readers.articulated`.

CMU BVH files start with a rest-pose frame (no root rotation, limbs at the converter's
zero) that is not part of the take; it is dropped when its root rotation is exactly zero
and the next frame's is not (``drop_rest_frame=None``, automatic).

Canonical segments from CMU joint names (origin = the joint, orientation = the joint's,
bone direction = towards the named distal joint in the rest pose):
pelvis <- Hips (origin: midpoint of the hip joints Left/RightUpLeg), l3 <- LowerBack,
t12 <- Spine, t8 <- Spine1 (carries the clavicles), neck <- Neck1 (at the base of the
neck; the zero-length Neck joint before it is part of the thorax), head <- Head,
*_shoulder <- *Shoulder, *_upper_arm <- *Arm, *_forearm <- *ForeArm, *_hand <- *Hand,
*_upper_leg <- *UpLeg, *_lower_leg <- *Leg, *_foot <- *Foot, *_toe <- *ToeBase.
Other skeletons: pass ``segment_map`` {segment: (joint, distal joint or "end")}.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from .. import quat
from ..human import MAX_SAMPLE_STEP_S, MIN_SAMPLE_STEP_S, HumanMotion
from ._text import error, floats, quote, read_lines
from .articulated import SegmentTrack, to_human_motion

#: segment -> (joint, distal joint giving the bone direction; "end" = the joint's End Site).
CMU_SEGMENT_MAP: dict[str, tuple[str, str]] = {
    "pelvis": ("Hips", ""),
    "l3": ("LowerBack", "Spine"), "t12": ("Spine", "Spine1"), "t8": ("Spine1", "Neck1"),
    "neck": ("Neck1", "Head"), "head": ("Head", "end"),
    "left_shoulder": ("LeftShoulder", "LeftArm"), "left_upper_arm": ("LeftArm", "LeftForeArm"),
    "left_forearm": ("LeftForeArm", "LeftHand"), "left_hand": ("LeftHand", "LeftHandIndex1"),
    "right_shoulder": ("RightShoulder", "RightArm"), "right_upper_arm": ("RightArm", "RightForeArm"),
    "right_forearm": ("RightForeArm", "RightHand"), "right_hand": ("RightHand", "RightHandIndex1"),
    "left_upper_leg": ("LeftUpLeg", "LeftLeg"), "left_lower_leg": ("LeftLeg", "LeftFoot"),
    "left_foot": ("LeftFoot", "LeftToeBase"), "left_toe": ("LeftToeBase", "end"),
    "right_upper_leg": ("RightUpLeg", "RightLeg"), "right_lower_leg": ("RightLeg", "RightFoot"),
    "right_foot": ("RightFoot", "RightToeBase"), "right_toe": ("RightToeBase", "end"),
}
_HIPS = ("LeftUpLeg", "RightUpLeg")

#: Candidate units [m per file unit] for auto-detection.
UNITS = {"m": 1.0, "cm": 0.01, "mm": 0.001, "inch": 0.0254, "acclaim (1/0.45 inch)": 0.0254 / 0.45}
_TYPICAL_HEIGHT = 1.70


@dataclass
class BvhJoint:
    name: str
    parent: str | None
    offset: npt.NDArray[np.floating[Any]]
    channels: list[str]
    first_channel: int
    end_site: npt.NDArray[np.floating[Any]] | None = None
    children: list[str] = field(default_factory=list)


@dataclass
class BvhFile:
    path: str
    joints: dict[str, BvhJoint]     # in file order (parents first)
    frame_time: float
    data: npt.NDArray[np.floating[Any]]                # (T, n_channels)


def read_bvh_file(path: str | os.PathLike[str]) -> BvhFile:
    """Parse a BVH file; every error names the file and line."""
    lines = read_lines(path)
    joints: dict[str, BvhJoint] = {}
    stack: list[str | None] = []
    n_channels = 0
    i = 0
    pending: BvhJoint | None = None
    in_end = False
    end_owner: str | None = None

    def nonempty(start: int) -> int:
        while start < len(lines) and not lines[start].strip():
            start += 1
        return start

    i = nonempty(0)
    if i >= len(lines) or lines[i].strip().upper() != "HIERARCHY":
        raise error(path, i + 1, "expected 'HIERARCHY': not a BVH file")
    i += 1
    while True:
        i = nonempty(i)
        if i >= len(lines):
            raise error(path, len(lines), "file ends inside the HIERARCHY (truncated?)")
        tok = lines[i].split()
        no = i + 1
        key = tok[0].upper()
        if key in ("ROOT", "JOINT"):
            if len(tok) < 2:
                raise error(path, no, f"{tok[0]} without a name")
            if in_end:
                raise error(path, no, f"{tok[0]} inside an End Site")
            if key == "ROOT" and joints:
                raise error(path, no, "several ROOTs are not supported")
            parent = stack[-1] if stack else None
            name = tok[1]
            if name in joints:
                raise error(path, no, f"duplicate joint name {quote(name)}")
            pending = BvhJoint(name, parent, np.zeros(3), [], n_channels)
            joints[name] = pending
            if parent is not None:
                joints[parent].children.append(name)
        elif key == "END":
            in_end, end_owner = True, stack[-1] if stack else None
            if end_owner is None:
                raise error(path, no, "End Site outside a joint")
        elif key == "{":
            if in_end:
                if not stack or stack[-1] is None:
                    raise error(path, no, "unexpected '{' inside an End Site")
                stack.append(None)
            elif pending is not None:
                stack.append(pending.name)
                pending = None
            else:
                raise error(path, no, "unexpected '{'")
        elif key == "}":
            if not stack:
                raise error(path, no, "unbalanced '}'")
            top = stack.pop()
            if top is None:
                in_end = False
            if not stack:
                i += 1
                break
        elif key == "OFFSET":
            if not in_end and not stack:
                raise error(path, no, "OFFSET outside a joint")
            off = floats(path, no, tok[1:], 3, "OFFSET values")
            # None is on the stack only at its top, only inside an End Site (set with end_owner).
            if in_end:
                assert end_owner is not None
                joints[end_owner].end_site = off
            else:
                owner = stack[-1]
                assert owner is not None
                joints[owner].offset = off
        elif key == "CHANNELS":
            if in_end or not stack:
                raise error(path, no, "CHANNELS outside a joint")
            try:
                count = int(tok[1])
            except (IndexError, ValueError):
                raise error(path, no, "CHANNELS needs a count") from None
            chans = tok[2:]
            if len(chans) != count:
                raise error(path, no, f"CHANNELS announces {count} channels but lists {len(chans)}")
            valid = {"Xposition", "Yposition", "Zposition", "Xrotation", "Yrotation", "Zrotation"}
            bad = [c for c in chans if c not in valid]
            if bad:
                raise error(path, no, f"unknown channels {', '.join(quote(c) for c in bad)}")
            owner = stack[-1]
            assert owner is not None              # not in an End Site (see OFFSET)
            j = joints[owner]
            j.channels, j.first_channel = chans, n_channels
            n_channels += count
        else:
            raise error(path, no, f"unexpected {quote(tok[0])} in the HIERARCHY")
        i += 1

    i = nonempty(i)
    if i >= len(lines) or lines[i].strip().upper() != "MOTION":
        raise error(path, min(i + 1, len(lines)), "expected 'MOTION' after the hierarchy (truncated?)")
    i = nonempty(i + 1)
    try:
        if not lines[i].strip().lower().startswith("frames:"):
            raise IndexError
        n_frames = int(lines[i].split(":", 1)[1])
    except (IndexError, ValueError):
        raise error(path, i + 1, "expected 'Frames: <count>'") from None
    i = nonempty(i + 1)
    try:
        if not lines[i].strip().lower().startswith("frame time:"):
            raise IndexError
        frame_time = float(lines[i].split(":", 1)[1])
    except (IndexError, ValueError):
        raise error(path, i + 1, "expected 'Frame Time: <seconds>'") from None
    # The frame time sets every sample time: 1e300 or 1e-300 s passed and gave a take of
    # 1e302 s or 1e-298 s, inf failed later without a line (see MIN_SAMPLE_STEP_S).
    if not MIN_SAMPLE_STEP_S <= frame_time <= MAX_SAMPLE_STEP_S:
        raise error(path, i + 1, f"frame time {frame_time:g} s: a BVH frame time must be "
                    f"{MIN_SAMPLE_STEP_S:g} to {MAX_SAMPLE_STEP_S:g} s ({1 / MAX_SAMPLE_STEP_S:g} to "
                    f"{1 / MIN_SAMPLE_STEP_S:g} frames per second)")
    first = i + 1
    rows = []
    for k in range(first, len(lines)):
        if not lines[k].strip():
            continue
        rows.append(floats(path, k + 1, lines[k].split(), n_channels, "channel values"))
    if len(rows) < n_frames:
        raise error(path, len(lines), f"announces {n_frames} frames but has {len(rows)} (truncated?)")
    if len(rows) > n_frames:
        raise error(path, first + n_frames + 1, f"more frame lines than the {n_frames} announced")
    if n_frames == 0:
        raise error(path, first, "no frames")
    return BvhFile(str(path), joints, frame_time, np.stack(rows))


def forward_kinematics(bvh: BvhFile, data: npt.NDArray[np.floating[Any]] | None = None
                       ) -> tuple[dict[str, npt.NDArray[np.floating[Any]]], dict[str, npt.NDArray[np.floating[Any]]],
                                  dict[str, npt.NDArray[np.floating[Any]]]]:
    """World positions (T, 3) and rotations (T, 4) of every joint, plus end sites (file units)."""
    data = bvh.data if data is None else data
    n_t = len(data)
    pos: dict[str, npt.NDArray[np.floating[Any]]] = {}
    rot: dict[str, npt.NDArray[np.floating[Any]]] = {}
    ends: dict[str, npt.NDArray[np.floating[Any]]] = {}
    axes = {"X": quat.about_x, "Y": quat.about_y, "Z": quat.about_z}
    for name, j in bvh.joints.items():
        local = np.broadcast_to(quat.IDENTITY, (n_t, 4))
        translation = np.broadcast_to(j.offset, (n_t, 3)).copy()
        for k, ch in enumerate(j.channels):
            v = data[:, j.first_channel + k]
            if ch.endswith("rotation"):
                local = quat.mul(local, axes[ch[0]](np.radians(v)))   # intrinsic, in order
            else:
                translation[:, "XYZ".index(ch[0])] = v
        if j.parent is None:
            pos[name], rot[name] = translation, quat.normalize(local)
        else:
            pos[name] = pos[j.parent] + quat.rotate(rot[j.parent], translation)
            rot[name] = quat.mul(rot[j.parent], local)
        if j.end_site is not None:
            ends[name] = pos[name] + quat.rotate(rot[name], j.end_site)
    return pos, rot, ends


def _rest_height(bvh: BvhFile) -> float:
    zero = np.zeros((1, bvh.data.shape[1]))
    pos, _, ends = forward_kinematics(bvh, zero)
    ys = [p[0, 1] for p in pos.values()] + [p[0, 1] for p in ends.values()]
    return float(max(ys) - min(ys))


def detect_unit(bvh: BvhFile) -> tuple[str, float]:
    """(name, metres per unit) making the rest-pose height closest to a typical adult."""
    h = _rest_height(bvh)
    name = min(UNITS, key=lambda n: abs(np.log(max(h * UNITS[n], 1e-9) / _TYPICAL_HEIGHT)))
    return name, UNITS[name]


def read_bvh(path: str | os.PathLike[str], unit_m: float | None = None, drop_rest_frame: bool | None = None,
             segment_map: dict[str, tuple[str, str]] | None = None, label: str = "") -> HumanMotion:
    """Read a BVH take -> canonical :class:`HumanMotion` (see module docstring)."""
    bvh = read_bvh_file(path)
    seg_map = CMU_SEGMENT_MAP if segment_map is None else segment_map
    needed = {j for j, _ in seg_map.values()} | {d for _, d in seg_map.values() if d not in ("", "end")} | set(_HIPS)
    missing = sorted(needed - set(bvh.joints))
    if missing:
        if segment_map is not None:
            raise error(path, None, f"joints {missing} of segment_map are not in this BVH")
        # The command line has no segment map to give: say what it reads and what the file has.
        def listed(names: list[str]) -> str:
            return ", ".join(names[:5]) + (f"... ({len(names)})" if len(names) > 5 else "")

        raise error(path, None, f"joints not named as in the CMU conversion, which teleop reads: no "
                                f"{listed(missing)}; it has {listed(list(bvh.joints))}: rename them, or use "
                                "retarget.readers.read_bvh(path, segment_map=...) in Python")
    if unit_m is None:
        unit_name, unit_m = detect_unit(bvh)
    else:
        unit_name = "given"

    root = next(iter(bvh.joints.values()))
    rot_cols = [root.first_channel + k for k, c in enumerate(root.channels) if c.endswith("rotation")]
    data = bvh.data
    if drop_rest_frame is None:
        drop_rest_frame = bool(len(data) > 1 and np.all(data[0, rot_cols] == 0.0)
                               and np.any(data[1, rot_cols] != 0.0))
    if drop_rest_frame:
        data = data[1:]
        if len(data) < 2:
            # Said here: the commands counted the frames left ("1 frame"), of a file of 2.
            raise error(path, None, f"{len(data) + 1} frames, the first a rest pose (no root rotation), which is "
                                    "dropped: a motion needs at least 2 more")

    pos, rot, ends = forward_kinematics(bvh, data)
    rest_pos, _, rest_ends = forward_kinematics(bvh, np.zeros((1, data.shape[1])))
    tracks = {}
    for seg, (joint, distal) in seg_map.items():
        if seg == "pelvis":
            origin = 0.5 * (pos[_HIPS[0]] + pos[_HIPS[1]])
            tracks[seg] = SegmentTrack(origin, rot[joint], None)
            continue
        tip = rest_ends.get(joint) if distal == "end" else rest_pos[distal]
        if tip is None:
            raise error(path, None, f"joint {quote(joint)} has no End Site for the {seg} direction")
        direction = (tip - rest_pos[joint])[0]
        if np.linalg.norm(direction) < 1e-9:
            raise error(path, None, f"{quote(joint)} -> {quote(distal)} has zero length in the rest pose")
        tracks[seg] = SegmentTrack(pos[joint], rot[joint], direction)
    n_t = len(data)
    rate = 1.0 / bvh.frame_time
    meta = {"format": "bvh", "label": label, "length_unit": unit_name, "dropped_rest_frame": bool(drop_rest_frame),
            "frame_time_s": bvh.frame_time}
    return to_human_motion(tracks, np.arange(n_t) * bvh.frame_time, unit_m, str(Path(path)), rate, meta)
