"""Acclaim ASF (skeleton) + AMC (motion) reader, e.g. the HDM05 and CMU databases.

Forward kinematics per the Acclaim specification:

* Each bone has ``direction`` (unit vector, world frame, rest pose), ``length``,
  ``axis ax ay az ORDER`` (the bone's local frame C, Euler angles in degrees/radians per
  ``:units angle``) and ``dof`` (its rotational degrees of freedom, in the order the AMC
  lists their values).
* Euler rotations compose in the listed order about fixed axes, e.g. ``XYZ`` or
  ``dof rx ry rz`` give Rz Ry Rx (column vectors): the first listed is applied first.
* A bone's world rotation is L = L_parent C M C^-1 with M the AMC rotation; its end point
  is its start point (the parent's end point) plus length * L * direction.
* The root has ``order`` (which AMC values are TX TY TZ RX RY RZ, in which order) and an
  ``axis`` order; its AMC translation is its world position.
* Lengths are in ASF units; ``:units length s`` means 1 unit = 1/s inch (HDM05: 0.45), so
  metres = units * 0.0254 / s. Y is up.

Canonical segments (origin = bone start = the joint centre, orientation = the bone's):
pelvis <- root (origin: midpoint of the hip joints, i.e. the ends of l/rhipjoint),
l3 <- lowerback, t12 <- upperback, t8 <- thorax, neck <- lowerneck, head <- head,
*_shoulder <- *clavicle, *_upper_arm <- *humerus, *_forearm <- *radius,
*_hand <- *hand (its start is the wrist; the *wrist bone between radius and hand carries
the forearm twist, which reaches the hand orientation), *_upper_leg <- *femur,
*_lower_leg <- *tibia, *_foot <- *foot, *_toe <- *toes. Segment frames are aligned with
the N-pose as described in :mod:`retarget.readers.articulated`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any, cast
from pathlib import Path

import numpy as np
import numpy.typing as npt

from .. import quat
from ..human import HumanMotion
from ._text import error, floats, quote, read_lines
from .articulated import SegmentTrack, to_human_motion

INCH = 0.0254

#: canonical segment -> ASF bone (the l/r prefix is the person's side).
ASF_SEGMENT_MAP: dict[str, str] = {
    "l3": "lowerback", "t12": "upperback", "t8": "thorax", "neck": "lowerneck", "head": "head",
    "left_shoulder": "lclavicle", "left_upper_arm": "lhumerus", "left_forearm": "lradius", "left_hand": "lhand",
    "right_shoulder": "rclavicle", "right_upper_arm": "rhumerus", "right_forearm": "rradius", "right_hand": "rhand",
    "left_upper_leg": "lfemur", "left_lower_leg": "ltibia", "left_foot": "lfoot", "left_toe": "ltoes",
    "right_upper_leg": "rfemur", "right_lower_leg": "rtibia", "right_foot": "rfoot", "right_toe": "rtoes",
}
_HIP_BONES = ("lhipjoint", "rhipjoint")


@dataclass
class Bone:
    name: str
    direction: npt.NDArray[np.floating[Any]]
    length: float
    axis: npt.NDArray[np.floating[Any]]            # (3,) angles [rad]
    axis_order: str             # e.g. "XYZ"
    dof: list[str] = field(default_factory=list)   # e.g. ["rx", "ry", "rz"]
    line: int = 0


@dataclass
class AsfSkeleton:
    """A parsed ASF file (lengths still in ASF units, angles in radians)."""

    path: str
    length_scale: float              # the ``length`` of :units
    angle_unit: str                  # "deg" or "rad"
    root_order: list[str]            # e.g. ["TX", "TY", "TZ", "RX", "RY", "RZ"]
    root_axis_order: str
    root_orientation: npt.NDArray[np.floating[Any]]     # (3,) [rad]
    bones: dict[str, Bone]
    children: dict[str, list[str]]   # hierarchy, "root" included

    @property
    def unit_m(self) -> float:
        """Metres per ASF length unit."""
        return INCH / self.length_scale

    def order(self) -> list[str]:
        """Bones parents-first."""
        out, stack = [], list(reversed(self.children.get("root", [])))
        while stack:
            b = stack.pop()
            out.append(b)
            stack.extend(reversed(self.children.get(b, [])))
        return out


def _euler(angles: npt.NDArray[np.floating[Any]], order: str) -> npt.NDArray[np.floating[Any]]:
    """Fixed-axis Euler rotation, first listed axis applied first: (..., 3) -> (..., 4)."""
    q: npt.NDArray[np.floating[Any]] | None = None
    axes = {"X": quat.about_x, "Y": quat.about_y, "Z": quat.about_z}
    for i, a in enumerate(order.upper()):
        r = axes[a](angles[..., i])
        q = r if q is None else quat.mul(r, q)
    if q is None:
        raise ValueError("an Euler rotation needs at least one axis")
    return q


def read_asf(path: str | os.PathLike[str]) -> AsfSkeleton:
    """Parse an ASF skeleton; errors name the file and line."""
    lines = read_lines(path)
    section = None
    length_scale, angle_unit = 1.0, "deg"
    root_orient: npt.NDArray[np.floating[Any]]
    root_order, root_axis, root_orient = ["TX", "TY", "TZ", "RX", "RY", "RZ"], "XYZ", np.zeros(3)
    bones: dict[str, Bone] = {}
    children: dict[str, list[str]] = {}
    current: dict[str, Any] | None = None
    pending_axis: list[tuple[int, list[str]]] = []
    saw_bonedata = saw_hierarchy = False

    for no, raw in enumerate(lines, start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        tok = line.split()
        if tok[0].startswith(":"):
            section = tok[0][1:].lower()
            saw_bonedata |= section == "bonedata"
            saw_hierarchy |= section == "hierarchy"
            continue
        if section == "units":
            if tok[0] == "length":
                length_scale = float(floats(path, no, tok[1:2], 1, "length unit")[0])
                if length_scale <= 0:   # metres = units * 0.0254 / length: 0 divides, < 0 mirrors
                    raise error(path, no, f"length unit must be positive, found {tok[1]}")
            elif tok[0] == "angle":
                angle_unit = tok[1].lower() if len(tok) > 1 else "deg"
                if angle_unit not in ("deg", "rad"):
                    raise error(path, no, f"unknown angle unit {quote(tok[1])}")
        elif section == "root":
            if tok[0] == "order":
                root_order = [t.upper() for t in tok[1:]]
                if sorted(root_order) != sorted(["TX", "TY", "TZ", "RX", "RY", "RZ"]):
                    raise error(path, no, f"unsupported root order {' '.join(tok[1:])}")
            elif tok[0] == "axis":
                # Checked here as for a bone: "XYQ" failed later as a KeyError, "XY" dropped an angle.
                if len(tok) != 2 or not re.fullmatch(r"[XYZxyz]{3}", tok[1]):
                    raise error(path, no, "root axis needs an order like XYZ")
                root_axis = tok[1].upper()
            elif tok[0] == "orientation":
                pending_axis.append((no, tok[1:4]))
                root_orient = floats(path, no, tok[1:4], 3, "root orientation angles")
        elif section == "bonedata":
            if tok[0] == "begin":
                current = {"line": no, "dof": []}
            elif tok[0] == "end":
                if current is None:
                    raise error(path, no, "'end' without 'begin'")
                missing = {"name", "direction", "length", "axis"} - set(current)
                if missing:
                    raise error(path, no, f"bone ends without {sorted(missing)}")
                b = Bone(current["name"], current["direction"], current["length"], current["axis"],
                         current["axis_order"], current["dof"], current["line"])
                bones[b.name] = b
                current = None
            elif current is None:
                raise error(path, no, f"bone data outside begin/end: {quote(line)}")
            elif tok[0] == "name":
                if len(tok) != 2:
                    raise error(path, no, "'name' needs exactly one bone name")
                current["name"] = tok[1]
            elif tok[0] == "direction":
                d = floats(path, no, tok[1:4], 3, "direction components")
                current["direction"] = d / cast(float, max(np.linalg.norm(d), 1e-12))   # max() loses the type
            elif tok[0] == "length":
                current["length"] = float(floats(path, no, tok[1:2], 1, "length")[0])
            elif tok[0] == "axis":
                if len(tok) != 5 or not re.fullmatch(r"[XYZxyz]{3}", tok[4]):
                    raise error(path, no, "axis needs three angles and an order like XYZ")
                current["axis"] = floats(path, no, tok[1:4], 3, "axis angles")
                current["axis_order"] = tok[4].upper()
            elif tok[0] == "dof":
                dof = [t.lower() for t in tok[1:]]
                bad = [d for d in dof if d not in ("rx", "ry", "rz")]
                if bad:
                    raise error(path, no, f"unsupported dof {bad} (only rotations rx ry rz)")
                current["dof"] = dof
        elif section == "hierarchy":
            if tok[0] in ("begin", "end"):
                continue
            children.setdefault(tok[0], []).extend(tok[1:])

    if not saw_bonedata or not bones:
        raise error(path, len(lines), "no :bonedata section: not an ASF skeleton")
    if not saw_hierarchy or "root" not in children:
        raise error(path, len(lines), "no :hierarchy with a root: truncated ASF skeleton?")
    if current is not None:
        raise error(path, len(lines), f"file ends inside the bone that begins at line {current['line']} (truncated?)")
    unknown = {c for cs in children.values() for c in cs} | (set(children) - {"root"})
    unknown -= set(bones)
    if unknown:
        raise error(path, None, f"hierarchy names unknown bones {sorted(unknown)}")
    # Every bone must hang from the root exactly once: forward kinematics walks the
    # hierarchy from the root (a bone left out has no parent, a cycle never ends).
    reached, stack = set(), list(children["root"])
    while stack:
        name = stack.pop()
        if name in reached:
            raise error(path, None, f"bone {quote(name)} appears more than once in the :hierarchy (or in a cycle)")
        reached.add(name)
        stack.extend(children.get(name, []))
    if set(bones) - reached:
        raise error(path, None, f"bones {sorted(set(bones) - reached)} are not connected to the root in the :hierarchy")
    to_rad = np.pi / 180.0 if angle_unit == "deg" else 1.0
    for b in bones.values():
        b.axis = b.axis * to_rad
    return AsfSkeleton(str(path), length_scale, angle_unit, root_order, root_axis, root_orient * to_rad,
                       bones, children)


def read_amc(path: str | os.PathLike[str], skel: AsfSkeleton
             ) -> tuple[dict[str, npt.NDArray[np.floating[Any]]], int]:
    """Parse an AMC file -> ({bone: (T, n_values)}, first line of frame data).

    Every frame must give every bone that has dofs (and the root), each once; a missing or
    repeated bone or a wrong value count is reported with its line. Frame numbers count up
    by 1 from the first: a gap or a repeat is reported with its line (without frame numbers,
    or with all "1", the takes read as one frame whose bones the later lines overwrote).
    """
    lines = read_lines(path)
    expected = {"root": 6} | {n: len(b.dof) for n, b in skel.bones.items() if b.dof}
    frames: list[dict[str, npt.NDArray[np.floating[Any]]]] = []
    current: dict[str, npt.NDArray[np.floating[Any]]] | None = None
    current_line = 0
    bone_lines: dict[str, int] = {}      # line of each bone of the current frame
    number = None                        # the current frame's number
    first_data = None
    # The AMC's own ":DEGREES" / ":RADIANS" header line, None without one (the ASF's
    # ``:units angle`` then applies).
    amc_angle_unit: str | None = None

    def close(at_line: int) -> None:
        if current is None:
            return
        missing = set(expected) - set(current)
        if missing:
            raise error(path, at_line, f"frame {len(frames) + 1} (line {current_line}) lacks "
                        f"{sorted(missing)}: truncated or not matching {Path(skel.path).name}")
        frames.append(current)

    for no, raw in enumerate(lines, start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith(":"):
            # Both header keywords count: only ":RADIANS" did, so an AMC that says
            # ":DEGREES" under an ASF with ``angle rad`` had its degrees read as radians
            # (the same take failed as "moves 1.01 m in 8.33 ms", or mapped to garbage).
            if line.upper().startswith(":RADIANS"):
                amc_angle_unit = "rad"
            elif line.upper().startswith(":DEGREES"):
                amc_angle_unit = "deg"
            continue
        tok = line.split()
        if len(tok) == 1 and re.fullmatch(r"[+-]?\d+", tok[0]):
            new = int(tok[0])
            if number is None and new < 0:
                raise error(path, no, f"frame number {new} is negative")
            if number is not None and new != number + 1:
                raise error(path, no, f"frame number {new} after frame {number} (line {current_line}): frame "
                            f"numbers count up by 1 (a frame {'repeated' if new <= number else 'missing'}?)")
            close(no)
            current, current_line, number, bone_lines = {}, no, new, {}
            first_data = first_data or no
            continue
        if current is None:
            raise error(path, no, f"expected a frame number, found {quote(line)}: not an AMC file, or a "
                        "file whose bone lines come without frame numbers")
        name = tok[0]
        if name not in expected:
            raise error(path, no, f"bone {quote(name)} is not in the skeleton {Path(skel.path).name}")
        if name in current:
            # The second line overwrote the first; with the frame number lines lost, a whole
            # take read as its one first frame.
            raise error(path, no, f"bone {name} given twice in frame {number} (line {current_line}; first at "
                        f"line {bone_lines[name]}): a frame number line missing?")
        current[name] = floats(path, no, tok[1:], expected[name], f"values for {name}")
        bone_lines[name] = no
    close(len(lines))
    if not frames:
        raise error(path, len(lines), "no frames")
    data = {n: np.stack([f[n] for f in frames]) for n in expected}
    if (amc_angle_unit or skel.angle_unit) == "deg":
        for n in data:
            if n == "root":
                data[n] = data[n].copy()
                rot = [i for i, c in enumerate(skel.root_order) if c.startswith("R")]
                data[n][:, rot] = np.radians(data[n][:, rot])
            else:
                data[n] = np.radians(data[n])
    return data, first_data or 1


def forward_kinematics(skel: AsfSkeleton, data: dict[str, npt.NDArray[np.floating[Any]]]
                       ) -> tuple[dict[str, npt.NDArray[np.floating[Any]]], dict[str, npt.NDArray[np.floating[Any]]],
                                  dict[str, npt.NDArray[np.floating[Any]]]]:
    """World rotations (T, 4) and start/end points (T, 3) of every bone (ASF units)."""
    root = data["root"]
    n_t = len(root)
    order = skel.root_order
    trans = np.stack([root[:, order.index(a)] for a in ("TX", "TY", "TZ")], axis=1)
    rot_order = "".join(c[1] for c in order if c.startswith("R"))
    rot_vals = np.stack([root[:, order.index("R" + a)] for a in rot_order], axis=1)
    c_root = _euler(skel.root_orientation, skel.root_axis_order)
    m_root = _euler(rot_vals, rot_order)
    rot = {"root": quat.mul(quat.mul(c_root, m_root), quat.conj(c_root))}
    end = {"root": trans}
    start = {}
    parent_of = {c: p for p, cs in skel.children.items() for c in cs}
    for name in skel.order():
        b = skel.bones[name]
        parent = parent_of[name]
        c = _euler(b.axis, b.axis_order)
        if b.dof:
            # AMC values come in dof order, which is also the order of application.
            m = _euler(data[name], "".join(d[1].upper() for d in b.dof))
        else:
            m = np.broadcast_to(quat.IDENTITY, (n_t, 4))
        rot[name] = quat.mul(rot[parent], quat.mul(quat.mul(c, m), quat.conj(c)))
        start[name] = end[parent]
        end[name] = start[name] + b.length * quat.rotate(rot[name], b.direction)
    return rot, start, end


def read_asf_amc(amc_path: str | os.PathLike[str], asf_path: str | os.PathLike[str] | None = None,
                 rate_hz: float = 120.0, label: str | None = None) -> HumanMotion:
    """Read an AMC take with its ASF skeleton -> canonical :class:`HumanMotion`.

    Args:
        amc_path: the motion.
        asf_path: the skeleton; default: found by :func:`find_asf` (HDM05 layout).
        rate_hz: frame rate (AMC files do not store it; HDM05 and CMU: 120 Hz).
        label: task label; default: HDM05's task from the file name (e.g. "grabHighR").
    """
    amc_path = Path(amc_path)
    asf_path = Path(asf_path) if asf_path is not None else find_asf(amc_path)
    skel = read_asf(asf_path)
    data, _ = read_amc(amc_path, skel)
    rot, start, end = forward_kinematics(skel, data)
    missing = sorted({*ASF_SEGMENT_MAP.values(), *_HIP_BONES} - set(skel.bones))
    if missing:
        raise error(asf_path, None, f"skeleton lacks bones {missing} needed for the canonical segments")
    tracks = {"pelvis": SegmentTrack(0.5 * (end["lhipjoint"] + end["rhipjoint"]), rot["root"], None)}
    for seg, bone in ASF_SEGMENT_MAP.items():
        tracks[seg] = SegmentTrack(start[bone], rot[bone], skel.bones[bone].direction)
    n_t = len(data["root"])
    m = re.match(r"HDM_([a-z]+)_(.+?)_\d+_\d+$", amc_path.stem)
    if label is None:
        label = m.group(2) if m else ""
    meta = {"format": "asf/amc", "skeleton": str(asf_path), "label": label,
            "performer": m.group(1) if m else "",
            "units": f"ASF length unit = 1/{skel.length_scale} inch"}
    return to_human_motion(tracks, np.arange(n_t) / rate_hz, skel.unit_m, str(amc_path), rate_hz, meta)


def find_asf(amc_path: str | os.PathLike[str]) -> Path:
    """The skeleton of an AMC take: HDM05's ``../skeletons/HDM_<performer>.asf`` for
    ``HDM_<performer>_...amc``, else the only .asf (or the same stem) next to the take."""
    amc_path = Path(amc_path)
    m = re.match(r"(HDM_[a-z]+)_", amc_path.name)
    candidates = []
    if m:
        candidates += [amc_path.parent.parent / "skeletons" / f"{m.group(1)}.asf",
                       amc_path.parent / f"{m.group(1)}.asf"]
    candidates.append(amc_path.with_suffix(".asf"))
    for c in candidates:
        if c.is_file():
            return c
    local = sorted(amc_path.parent.glob("*.asf"))
    if len(local) == 1:
        return local[0]
    raise error(amc_path, None, f"cannot find its ASF skeleton: put it next to the take as {amc_path.stem}.asf "
                "(or as the folder's only .asf, or HDM05's ../skeletons/HDM_<performer>.asf)")
