"""Robot descriptions: what the product needs to know about a robot beyond its URDF.

A description is a TOML file (see ``descriptions/icub.toml``): the URDF to load, which
URDF frames play which role (soles, hands, head, chest, waist, eye cameras), the sole
contact corners, the joint groups, which joints realise the posture signals of the robot
references, a home posture, and the limits the URDF lacks. Adding a robot is adding a file.
"""

from __future__ import annotations

import fnmatch
import importlib
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

DESCRIPTIONS_DIR = Path(__file__).with_name("descriptions")

#: Frame roles every description must define.
REQUIRED_FRAMES = ("left_sole", "right_sole", "left_hand", "right_hand", "head", "chest", "waist")
#: Joint groups every description must define.
REQUIRED_GROUPS = ("left_leg", "right_leg", "torso", "left_arm", "right_arm", "neck")
#: Posture signals of the robot references every description must map onto joints.
REFERENCE_POSTURE_SIGNALS = ("left_arm", "right_arm", "neck", "torso")


class DescriptionError(ValueError):
    """A robot description that is missing something or contradicts its URDF."""


@dataclass(frozen=True)
class ExtraFrame:
    """A frame the URDF lacks: a parent frame plus an offset [m] in stance-aligned axes."""

    name: str
    parent: str
    xyz_stance: tuple[float, float, float]


@dataclass
class RobotDescription:
    """A parsed robot description file.

    Attributes:
        name: robot name.
        urdf_path: resolved URDF path.
        root_frame: the URDF's root (floating-base) frame.
        root_yaw_in_stance: yaw [rad] of the root frame in the stance frame.
        frames: role -> URDF frame name (roles of :data:`REQUIRED_FRAMES`).
        extra_frames: frames added on top of the URDF (e.g. eye cameras).
        sole_corners: {"left", "right"} -> (4, 3) contact corners in the sole frame [m].
        groups: group name -> joint names.
        reference_joints: posture signal -> [(joint, sign)].
        home: joint -> angle [rad] of the home posture (others 0).
        velocity_limits, effort_limits: joint-name patterns -> limit overrides.
        sim: simulator settings.
    """

    name: str
    urdf_path: Path
    root_frame: str
    root_yaw_in_stance: float
    frames: dict[str, str]
    extra_frames: dict[str, ExtraFrame]
    sole_corners: dict[str, np.ndarray]
    groups: dict[str, list[str]]
    reference_joints: dict[str, list[tuple[str, float]]]
    home: dict[str, float]
    velocity_limits: dict[str, float] = field(default_factory=dict)
    effort_limits: dict[str, float] = field(default_factory=dict)
    sim: dict = field(default_factory=dict)
    source: Path | None = None

    def limit_override(self, table: dict[str, float], joint: str) -> float | None:
        """The override for ``joint`` in a limits table: exact name first, then patterns."""
        if joint in table:
            return table[joint]
        for pattern, value in table.items():
            if fnmatch.fnmatchcase(joint, pattern):
                return value
        return None


def resolve_urdf(spec: str, base_dir: Path) -> Path:
    """Resolve a description's ``urdf`` entry to a file path.

    ``package:<module>:<model>`` asks the Python package (e.g. icub_models) for the file;
    anything else is a path, relative to the description file.
    """
    if spec.startswith("package:"):
        try:
            _, module_name, model = spec.split(":", 2)
        except ValueError:
            raise DescriptionError(f"urdf {spec!r}: expected package:<module>:<model>") from None
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise DescriptionError(f"urdf {spec!r}: Python package {module_name!r} is not installed ({exc})") from None
        path = Path(module.get_model_file(model))
    else:
        path = (base_dir / spec).resolve()
    if not path.is_file():
        raise DescriptionError(f"URDF not found: {path}")
    return path


def _numbers(path: Path, key: str, values: dict) -> dict[str, float]:
    """A table of joint name -> number, or DescriptionError naming the entry."""
    try:
        return {str(k): float(v) for k, v in values.items()}
    except (TypeError, ValueError):
        bad = next(k for k, v in values.items() if not isinstance(v, (int, float)))
        raise DescriptionError(f"{path}: [{key}] {bad} must be a number, got {values[bad]!r}") from None


def _reference_joints(path: Path, table) -> dict[str, list[tuple[str, float]]]:
    """The [reference_joints] table: signal -> [(joint, sign)], or DescriptionError naming
    the entry. The posture signals of the robot references must all be there, one joint per
    scalar of the signal (teleop/robot/target.py writes them into the joint vector)."""
    from retarget.references import SIGNALS

    if not isinstance(table, dict):
        raise DescriptionError(f"{path}: reference_joints must be a table [reference_joints], got {table!r}")
    out = {}
    for signal, pairs in table.items():
        try:
            out[signal] = [(j, float(s)) for j, s in pairs]
            if not all(isinstance(j, str) and isinstance(s, (int, float)) for j, s in pairs):
                raise ValueError
        except (TypeError, ValueError):
            raise DescriptionError(f"{path}: [reference_joints] {signal} must be a list of "
                                   f"[\"<joint>\", <sign>] pairs, got {pairs!r}") from None
    sizes = dict(SIGNALS)
    for signal in REFERENCE_POSTURE_SIGNALS:
        if signal not in out:
            raise DescriptionError(f"{path}: [reference_joints] lacks {signal}")
        if len(out[signal]) != sizes[signal]:
            raise DescriptionError(f"{path}: [reference_joints] {signal} needs {sizes[signal]} joints (one per "
                                   f"angle of the reference signal), got {len(out[signal])}")
    return out


def load_description(name_or_path: str | Path = "icub") -> RobotDescription:
    """Load a description by name (a file in ``descriptions/``) or by path."""
    path = Path(name_or_path)
    if not path.suffix:
        path = DESCRIPTIONS_DIR / f"{name_or_path}.toml"
    if not path.is_file():
        available = sorted(p.stem for p in DESCRIPTIONS_DIR.glob("*.toml"))
        raise DescriptionError(f"no robot description {name_or_path!r} (available: {', '.join(available) or 'none'}; "
                               "or the path of a description .toml)")
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise DescriptionError(f"{path}: not valid TOML ({exc})") from None
    except UnicodeDecodeError:
        # A binary file (an image, a mesh): the decoder's own message names no file.
        raise DescriptionError(f"{path}: not a text file: a robot description is a TOML file "
                               f"(see {DESCRIPTIONS_DIR / 'icub.toml'})") from None

    def need(key: str):
        if key not in raw:
            raise DescriptionError(f"{path}: missing [{key}]")
        return raw[key]

    frames = dict(need("frames"))
    missing = [r for r in REQUIRED_FRAMES if r not in frames]
    if missing:
        raise DescriptionError(f"{path}: [frames] lacks roles {missing}")
    for role, frame in frames.items():
        if not isinstance(frame, str):   # pinocchio would end in a Boost.Python signature dump
            raise DescriptionError(f"{path}: [frames] {role} must be a frame name in quotes, got {frame!r}")
    groups = dict(need("groups"))
    for group, joints in groups.items():
        # A bare string would be read as a list of one-letter joints.
        if not isinstance(joints, list) or not all(isinstance(j, str) for j in joints):
            raise DescriptionError(f"{path}: [groups] {group} must be a list of joint names, got {joints!r}")
    missing = [g for g in REQUIRED_GROUPS if g not in groups]
    if missing:
        raise DescriptionError(f"{path}: [groups] lacks {missing}")

    def table(key: str) -> dict:
        value = raw.get(key, {})
        if not isinstance(value, dict):
            raise DescriptionError(f"{path}: {key} must be a table [{key}], got {value!r}")
        return value

    extra = {}
    for name, spec in table("extra_frames").items():
        try:
            xyz = tuple(float(x) for x in spec["xyz_stance"])
            if len(xyz) != 3 or not isinstance(spec["parent"], str):
                raise ValueError
        except (KeyError, TypeError, ValueError):
            raise DescriptionError(f"{path}: extra_frames.{name} needs parent = \"<frame>\" and "
                                   "xyz_stance = [x, y, z]") from None
        extra[name] = ExtraFrame(name, spec["parent"], xyz)
    soles: dict[str, np.ndarray] = {}
    sole_table = need("soles")
    for side in ("left", "right"):
        try:
            corners = np.asarray(sole_table[side], dtype=float)
        except (KeyError, TypeError, ValueError):
            corners = None
        if corners is None or corners.shape != (4, 3):
            raise DescriptionError(f"{path}: soles.{side} must be 4 corners of 3 coordinates [m]")
        soles[side] = corners
    reference_joints = _reference_joints(path, need("reference_joints"))
    yaw = raw.get("root_yaw_in_stance", 0.0)
    if not isinstance(yaw, (int, float)):
        raise DescriptionError(f"{path}: root_yaw_in_stance must be a number [rad], got {yaw!r}")
    return RobotDescription(
        name=str(raw.get("name", path.stem)),
        urdf_path=resolve_urdf(str(need("urdf")), path.parent),
        root_frame=str(need("root_frame")),
        root_yaw_in_stance=float(yaw),
        frames=frames,
        extra_frames=extra,
        sole_corners=soles,
        groups=groups,
        reference_joints=reference_joints,
        home=_numbers(path, "home", table("home")),
        velocity_limits=_numbers(path, "velocity_limits", table("velocity_limits")),
        effort_limits=_numbers(path, "effort_limits", table("effort_limits")),
        sim=dict(raw.get("sim", {})),
        source=path,
    )
