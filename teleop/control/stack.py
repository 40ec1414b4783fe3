"""Stacks of tasks: the controller's configuration, read from TOML files.

A stack file (presets in ``teleop/control/stacks/``) looks like::

    name = "default"
    description = "..."
    mode = "strict"            # "strict": levels are strict priorities; "weighted": one level
    dt = 0.01                  # nominal control period [s] (converts per-tick gains, below)
    damping = 1e-4             # epsilon of the regularisation eps * ||v||^2 in every level

    [contacts]                 # frames held fixed (equality constraints J_c v = b_c)
    frames = ["left_sole", "right_sole"]
    elimination = "auto"       # "nullspace" (eliminate the 12 rows), "equality" (keep them in
                               # the QP) or "auto": nullspace in strict mode, equality in weighted
    gain = 100.0               # [1/s] drift correction of the held contacts (capped at 1/dt)

    [support_polygon]          # CoM ground projection inside the soles' hull
    enabled = true
    margin = 0.02              # [m]
    active_distance = inf      # [m] edges farther than this from the CoM are not emitted
    recovery_speed = 0.05      # [m/s] if the CoM starts outside
    zmp_margin = 0.03          # [m] optional: ZMP rows too (absent: none)
    zmp_model = "lip"          # "centroidal" (multi-body ZMP) or "lip" (CoM only, cheaper)

    [limits]
    position_gain = 1.0        # (q_min - q)/dt * gain <= v <= (q_max - q)/dt * gain
    velocity_scale = 1.0       # fraction of the description's velocity limits
    acceleration = 20.0        # [rad/s^2] optional: bound on each joint's velocity change,
                               # or per joint group: { default = 20.0, left_leg = 10.0 }

    [[task]]
    name = "com"               # unique; the ReferenceTracker and users find tasks by name
    type = "com"               # com | waist_height | frame_position | frame_orientation
                               # | frame_pose | posture
    level = 2                  # 1 = highest priority
    weight = 1.0
    gain = 10.0                # [1/s]; or lambda = 0.1 (OpenSoT per-tick gain: gain = lambda/dt)
    axes = "xy"                # com / frame_position: subset of "xyz"
    reference = "com_xy"       # RobotReferences signal that drives the target (optional)

Task keys by type: ``frame`` (a frame role such as ``left_hand`` or a URDF frame name) for
the frame tasks; ``joints`` (a group, or a list of joints / groups) for postures;
``orientation_gain`` (or ``sigma``, per tick) and ``orientation_weight`` for frame poses and
for the waist height (whose orientation rows are off unless ``orientation_weight > 0``).
A posture task with a ``reference`` takes the targets of the joints the description's
``[reference_joints]`` assigns to that signal (with their signs); its other joints hold
the posture they had at reset. Without ``joints`` it controls exactly those joints.
"""

from __future__ import annotations

import math
import numbers
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from teleop.control.tasks import (ComTask, FrameOrientationTask, FramePoseTask, FramePositionTask,
                                  PostureTask, Task, WaistHeightTask)
from teleop.robot.model import RobotModel

STACKS_DIR = Path(__file__).with_name("stacks")

TASK_TYPES = ("com", "waist_height", "frame_position", "frame_orientation", "frame_pose", "posture")
#: RobotReferences signals a task may be bound to, and the task types that can track them.
REFERENCE_SIGNALS = {
    "com_xy": ("com",),
    "waist_height": ("waist_height",),
    "left_hand": ("frame_position",),
    "right_hand": ("frame_position",),
    "head_orientation": ("frame_orientation",),
    "left_arm": ("posture",),
    "right_arm": ("posture",),
    "neck": ("posture",),
    "torso": ("posture",),
    "left_leg": ("posture",),
    "right_leg": ("posture",),
}
_COMMON_KEYS = {"name", "type", "level", "weight", "gain", "lambda", "reference"}
_TYPE_KEYS = {
    "com": {"axes"},
    "waist_height": {"frame", "orientation_weight", "orientation_gain", "sigma"},
    "frame_position": {"frame", "axes"},
    "frame_orientation": {"frame"},
    "frame_pose": {"frame", "orientation_gain", "sigma", "orientation_weight"},
    "posture": {"joints"},
}
_TOP_KEYS = {"name", "description", "mode", "dt", "damping", "contacts", "support_polygon", "limits", "task", "source"}


class StackError(ValueError):
    """A stack file that is malformed or refers to unknown frames, joints or signals."""


@dataclass
class TaskSpec:
    """One task of a stack file (gains already converted to 1/s)."""

    name: str
    type: str
    level: int
    weight: float
    gain: float
    reference: str | None = None
    frame: str | None = None
    axes: str | None = None
    joints: str | list[str] | None = None
    orientation_gain: float | None = None
    orientation_weight: float | None = None


@dataclass
class StackConfig:
    """A parsed stack file."""

    name: str
    tasks: list[TaskSpec]
    description: str = ""
    mode: str = "strict"
    dt: float = 0.01
    damping: float = 1e-4
    contact_frames: tuple[str, ...] = ("left_sole", "right_sole")
    contact_elimination: str = "auto"
    contact_gain: float = 100.0
    polygon_enabled: bool = True
    polygon_margin: float = 0.02
    polygon_active_distance: float = float("inf")
    polygon_recovery_speed: float = 0.05
    #: Multi-body ZMP kept this far inside the polygon [m] (None: no ZMP rows), see
    #: :class:`teleop.control.limits.SupportPolygonConstraint`.
    zmp_margin: float | None = None
    #: "centroidal" (multi-body ZMP) or "lip" (linear inverted pendulum) ZMP rows.
    zmp_model: str = "centroidal"
    position_limit_gain: float = 1.0
    velocity_limit_scale: float = 1.0
    #: Joint acceleration bound [rad/s^2]: one for every joint, per joint group
    #: ({"default": a, "<group>": a}), or None (no bound).
    acceleration_limit: float | dict[str, float] | None = None
    source: Path | None = None
    meta: dict = field(default_factory=dict)

    @property
    def levels(self) -> list[int]:
        """The distinct priority levels, highest priority first."""
        return sorted({t.level for t in self.tasks})

    def expression(self) -> str:
        """The stack in the thesis's notation, e.g. ``(1 neck) / (1 com + 0.73 left_hand)``."""
        groups = []
        for level in self.levels:
            terms = [f"{t.weight:g} {t.name}" for t in self.tasks if t.level == level]
            groups.append("(" + " + ".join(terms) + ")")
        return (" + " if self.mode == "weighted" else " / ").join(groups)


def list_presets() -> list[str]:
    """Names of the stack presets shipped in ``teleop/control/stacks/``."""
    return sorted(p.stem for p in STACKS_DIR.glob("*.toml"))


def load_stack(name_or_path: str | Path = "default") -> StackConfig:
    """Load a stack preset by name or a stack file by path."""
    path = Path(name_or_path)
    if not path.suffix:
        path = STACKS_DIR / f"{name_or_path}.toml"
    if not path.is_file():
        raise StackError(f"no stack {name_or_path!r} (presets: {list_presets()})")
    try:
        raw = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise StackError(f"{path}: not valid TOML ({exc})") from None
    return parse_stack(raw, source=path)


def parse_stack(raw: dict, source: Path | None = None) -> StackConfig:
    """Build a :class:`StackConfig` from the dict of a stack file (see module docstring).

    Every entry is checked here (type and range), so that a bad file is refused with an
    error naming the file and the entry, not later by a constructor or a tick."""
    where = str(source) if source else "stack"
    unknown = set(raw) - _TOP_KEYS
    if unknown:
        raise StackError(f"{where}: unknown keys {sorted(unknown)}")
    mode = raw.get("mode", "strict")
    if mode not in ("strict", "weighted"):
        raise StackError(f"{where}: mode must be 'strict' or 'weighted', got {mode!r}")
    dt = _number(raw, "dt", 0.01, where, "dt", positive=True)
    damping = _number(raw, "damping", 1e-4, where, "damping")
    contacts, polygon, limits = (_table(raw, key, where) for key in ("contacts", "support_polygon", "limits"))
    for table, keys in ((contacts, {"frames", "elimination", "gain"}),
                        (polygon, {"enabled", "margin", "active_distance", "recovery_speed", "zmp_margin",
                                   "zmp_model"}),
                        (limits, {"position_gain", "velocity_scale", "acceleration"})):
        if set(table) - keys:
            raise StackError(f"{where}: unknown keys {sorted(set(table) - keys)}")
    if polygon.get("zmp_model", "centroidal") not in ("centroidal", "lip"):
        raise StackError(f"{where}: support_polygon.zmp_model must be 'centroidal' or 'lip'")
    elimination = contacts.get("elimination", "auto")
    if elimination not in ("auto", "nullspace", "equality"):
        raise StackError(f"{where}: contacts.elimination must be 'auto', 'nullspace' or 'equality'")
    frames = contacts.get("frames", ("left_sole", "right_sole"))
    if isinstance(frames, str) or not all(isinstance(f, str) for f in frames):
        raise StackError(f"{where}: contacts.frames must be a list of frame names, got {frames!r}")
    enabled = polygon.get("enabled", True)
    if not isinstance(enabled, bool):
        raise StackError(f"{where}: support_polygon.enabled must be true or false, got {enabled!r}")
    raw_tasks = raw.get("task", [])
    if not isinstance(raw_tasks, list) or not all(isinstance(t, dict) for t in raw_tasks):
        raise StackError(f"{where}: tasks must be [[task]] tables")
    tasks = [_parse_task(t, dt, where) for t in raw_tasks]
    if not tasks:
        raise StackError(f"{where}: a stack needs at least one [[task]]")
    names = [t.name for t in tasks]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise StackError(f"{where}: duplicate task names {duplicates}")
    return StackConfig(
        name=str(raw.get("name", source.stem if source else "stack")),
        description=str(raw.get("description", "")),
        tasks=tasks,
        mode=mode,
        dt=dt,
        damping=damping,
        contact_frames=tuple(frames),
        contact_elimination=elimination,
        contact_gain=_number(contacts, "gain", 100.0, where, "contacts.gain"),
        polygon_enabled=enabled,
        polygon_margin=_number(polygon, "margin", 0.02, where, "support_polygon.margin"),
        polygon_active_distance=_number(polygon, "active_distance", float("inf"), where,
                                        "support_polygon.active_distance", positive=True, infinite=True),
        polygon_recovery_speed=_number(polygon, "recovery_speed", 0.05, where, "support_polygon.recovery_speed",
                                       positive=True),
        zmp_margin=(None if polygon.get("zmp_margin") is None
                    else _number(polygon, "zmp_margin", None, where, "support_polygon.zmp_margin")),
        zmp_model=str(polygon.get("zmp_model", "centroidal")),
        position_limit_gain=_number(limits, "position_gain", 1.0, where, "limits.position_gain",
                                    positive=True, at_most_one=True),
        velocity_limit_scale=_number(limits, "velocity_scale", 1.0, where, "limits.velocity_scale",
                                     positive=True, at_most_one=True),
        acceleration_limit=_acceleration_limit(limits.get("acceleration"), where),
        source=source,
    )


def _table(raw: dict, key: str, where: str) -> dict:
    """The [key] table of a stack file (empty if absent)."""
    table = raw.get(key, {})
    if not isinstance(table, dict):
        raise StackError(f"{where}: {key} must be a [{key}] table, got {table!r}")
    return dict(table)


def _number(table: dict, key: str, default: float | None, where: str, entry: str, *, positive: bool = False,
            at_most_one: bool = False, infinite: bool = False) -> float:
    """``table[key]`` (or ``default``) as a float, refused with a :class:`StackError` naming
    the file and ``entry`` unless it is a number, >= 0 (> 0 if ``positive``), <= 1 if
    ``at_most_one``, and finite (or +inf if ``infinite``). NaN is never accepted."""
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise StackError(f"{where}: {entry} must be a number, got {value!r}")
    value = float(value)
    valid = ((value > 0.0 if positive else value >= 0.0) and (not at_most_one or value <= 1.0)
             and (math.isfinite(value) or (infinite and value == math.inf)))
    if not valid:
        expected = ("> 0" if positive else ">= 0") + (" and <= 1" if at_most_one else "")
        raise StackError(f"{where}: {entry} must be {expected}{'' if infinite else ' and finite'}, got {value}")
    return value


def _acceleration_limit(raw, where: str) -> float | dict[str, float] | None:
    """The [limits] acceleration entry: None, a number, or {group: number} (with "default")."""
    if raw is None:
        return None
    if isinstance(raw, dict):
        try:
            limits = {str(group): float(value) for group, value in raw.items()}
        except (TypeError, ValueError):
            raise StackError(f"{where}: limits.acceleration values must be numbers [rad/s^2]") from None
    else:
        try:
            limits = {"default": float(raw)}
        except (TypeError, ValueError):
            raise StackError(f"{where}: limits.acceleration must be a number or a table of numbers") from None
    if not all(value > 0 for value in limits.values()):
        raise StackError(f"{where}: limits.acceleration must be > 0")
    return limits if isinstance(raw, dict) else limits["default"]


def _parse_task(raw: dict, dt: float, where: str) -> TaskSpec:
    name = raw.get("name")
    kind = raw.get("type")
    if not name or not isinstance(name, str) or kind not in TASK_TYPES:
        raise StackError(f"{where}: every task needs a name and a type in {TASK_TYPES} (got {raw})")
    unknown = set(raw) - _COMMON_KEYS - _TYPE_KEYS[kind]
    if unknown:
        raise StackError(f"{where}: task {name!r} ({kind}) has unknown keys {sorted(unknown)}")
    if "gain" in raw and "lambda" in raw:
        raise StackError(f"{where}: task {name!r}: give gain [1/s] or lambda [per tick], not both")
    entry = f"task {name!r}"
    gain = (_number(raw, "gain", None, where, f"{entry} gain") if "gain" in raw
            else _number(raw, "lambda", 0.1, where, f"{entry} lambda") / dt)
    orientation_gain = (None if raw.get("orientation_gain") is None
                        else _number(raw, "orientation_gain", None, where, f"{entry} orientation_gain"))
    if "sigma" in raw:
        if orientation_gain is not None:
            raise StackError(f"{where}: task {name!r}: give orientation_gain or sigma, not both")
        orientation_gain = _number(raw, "sigma", None, where, f"{entry} sigma") / dt
    reference = raw.get("reference")
    if reference is not None and (reference not in REFERENCE_SIGNALS or kind not in REFERENCE_SIGNALS[reference]):
        raise StackError(f"{where}: task {name!r} ({kind}) cannot track reference {reference!r}")
    level = raw.get("level", 1)
    if isinstance(level, bool) or not isinstance(level, numbers.Integral) or level < 1:
        raise StackError(f"{where}: task {name!r}: level must be an integer >= 1, got {level!r}")
    if kind in ("frame_position", "frame_orientation", "frame_pose") and "frame" not in raw:
        raise StackError(f"{where}: task {name!r} needs a frame")
    if kind == "posture" and "joints" not in raw and reference is None:
        raise StackError(f"{where}: posture task {name!r} needs joints or a reference")
    for key in ("frame", "axes"):
        if key in raw and not isinstance(raw[key], str):
            raise StackError(f"{where}: task {name!r}: {key} must be a string, got {raw[key]!r}")
    joints = raw.get("joints")
    if joints is not None and not (isinstance(joints, str) or
                                   (isinstance(joints, list) and all(isinstance(j, str) for j in joints))):
        raise StackError(f"{where}: task {name!r}: joints must be a group or joint name or a list of them, "
                         f"got {joints!r}")
    return TaskSpec(name=name, type=kind, level=int(level),
                    weight=_number(raw, "weight", 1.0, where, f"{entry} weight"),
                    gain=gain, reference=reference, frame=raw.get("frame"), axes=raw.get("axes"), joints=joints,
                    orientation_gain=orientation_gain,
                    orientation_weight=(None if raw.get("orientation_weight") is None else
                                        _number(raw, "orientation_weight", None, where, f"{entry} orientation_weight")))


def build_task(spec: TaskSpec, robot: RobotModel) -> Task:
    """Instantiate the task of a spec on a robot (resolving frames and joints)."""
    try:
        if spec.type == "com":
            return ComTask(spec.name, spec.axes or "xy", spec.weight, spec.gain)
        if spec.type == "waist_height":
            return WaistHeightTask(spec.name, robot.frame_id(spec.frame or "waist"), spec.weight, spec.gain,
                                   spec.orientation_weight or 0.0, spec.orientation_gain)
        if spec.type == "frame_position":
            return FramePositionTask(spec.name, _frame_id(spec, robot), spec.axes or "xyz", spec.weight, spec.gain)
        if spec.type == "frame_orientation":
            return FrameOrientationTask(spec.name, _frame_id(spec, robot), spec.weight, spec.gain)
        if spec.type == "frame_pose":
            return FramePoseTask(spec.name, _frame_id(spec, robot), spec.weight, spec.gain,
                                 spec.orientation_gain, spec.orientation_weight)
        joints = spec.joints
        if joints is None:
            if spec.reference is None:
                raise ValueError("a posture task needs joints or a reference")
            joints = [j for j, _ in reference_joints(robot, spec.reference)]
        return PostureTask(spec.name, robot, joints, spec.weight, spec.gain)
    except (KeyError, ValueError) as exc:
        raise StackError(f"task {spec.name!r}: {exc}") from None


def _frame_id(spec: TaskSpec, robot: RobotModel) -> int:
    """The frame of a frame task (a spec made in code may lack one: pinocchio would be
    given None)."""
    if spec.frame is None:
        raise ValueError(f"a {spec.type} task needs a frame")
    return robot.frame_id(spec.frame)


def reference_joints(robot: RobotModel, signal: str) -> list[tuple[str, float]]:
    """(joint, sign) pairs realising a posture signal; legs default to the leg groups."""
    table = robot.description.reference_joints
    if signal in table:
        return table[signal]
    if signal in ("left_leg", "right_leg"):
        return [(j, 1.0) for j in robot.description.groups[signal]]
    raise StackError(f"{robot.description.name} has no [reference_joints] entry for {signal!r}")
