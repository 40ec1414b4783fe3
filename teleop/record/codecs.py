"""Encoders, decoders and JSON schemas of every recorded message type.

Every channel is written with message encoding ``json`` and a ``jsonschema`` schema, the
pair Foxglove Studio and the ``mcap`` CLI read without plug-ins. JSON keeps the recordings
readable by any tool at a cost that does not matter at these rates (a few tens of
microseconds per message, measured by ``teleop.benchmarks.record_bench``).

Camera frames use Foxglove's ``foxglove.CompressedImage`` JSON form (image bytes in base64)
so the Image panel shows them as they are.

Non-finite numbers are written as ``null`` (JSON has no NaN) and read back as NaN.

The schemas keep to what Foxglove's JSON-schema reader turns into message definitions: every
object lists its ``properties`` (no free-form maps), one ``type`` per field (no unions),
arrays of numbers, strings, integers, booleans or objects.
"""

from __future__ import annotations

import base64
import dataclasses
import json
from collections.abc import Mapping
from typing import Any

import numpy as np

from retarget.human import SEGMENTS, HumanMotion
from retarget.references import FLAT_SIZE, SIGNALS, RobotReferences
from teleop.json_safe import json_safe

from .messages import CameraFrame, EpisodeMarker, RobotStateSample

# ----------------------------------------------------------------------------- helpers


def _number_array(size: int | None = None, description: str = "") -> dict:
    schema: dict[str, Any] = {"type": "array", "items": {"type": "number"}}
    if size is not None:
        schema["minItems"] = schema["maxItems"] = size
    if description:
        schema["description"] = description
    return schema


def _dumps(obj: Any) -> bytes:
    """Compact JSON; non-finite numbers become null so the output is standard JSON."""
    try:
        return json.dumps(obj, separators=(",", ":"), allow_nan=False).encode()
    except ValueError:
        return json.dumps(json_safe(obj), separators=(",", ":"), allow_nan=False).encode()


def _float(value: Any) -> float:
    return float("nan") if value is None else float(value)


def _array(value: Any) -> np.ndarray:
    # np.asarray maps None (a written NaN) back to nan for float dtype.
    return np.asarray(value, dtype=float)


def _sized(value: Any, name: str, size: int) -> np.ndarray:
    """``_array`` of a field that must hold ``size`` numbers (ValueError naming it otherwise)."""
    out = _array(value)
    if out.shape != (size,):
        raise ValueError(f"{name} must have {size} numbers, got shape {out.shape}")
    return out


def _field(obj: Any, name: str) -> Any:
    return obj[name] if isinstance(obj, Mapping) else getattr(obj, name)


def _optional_field(obj: Any, name: str) -> Any:
    return obj.get(name) if isinstance(obj, Mapping) else getattr(obj, name, None)


def _list(value: Any) -> list:
    return np.asarray(value, dtype=float).ravel().tolist()


# -------------------------------------------------------------------- robot references

_REFERENCE_EXTRAS: tuple[tuple[str, int], ...] = (("head_orientation", 4), ("left_leg", 6), ("right_leg", 6))

REFERENCES_SCHEMA_NAME = "teleop.RobotReferences"
REFERENCES_SCHEMA: dict = {
    "title": REFERENCES_SCHEMA_NAME,
    "description": "Robot references in the stance frame (retarget/references.py): positions [m], angles [rad].",
    "type": "object",
    "properties": {
        "t": {"type": "number", "description": "time the sample was produced, producer clock [s]"},
        **{name: (_number_array(size) if size > 1 else {"type": "number"}) for name, size in SIGNALS},
        **{name: _number_array(size, "optional") for name, size in _REFERENCE_EXTRAS},
        "valid": {"type": "array", "items": {"type": "boolean"}, "minItems": FLAT_SIZE, "maxItems": FLAT_SIZE,
                  "description": "optional: True where the scalar of the flat vector was measured (absent: all)"},
    },
    "required": ["t"] + [name for name, _ in SIGNALS],
}


def encode_references(refs: RobotReferences) -> bytes:
    """JSON object with ``t`` [s], one field per signal of :data:`retarget.references.SIGNALS`,
    the optional extras and, when the references carry one, the (20,) ``valid`` mask (booleans)."""
    obj: dict[str, Any] = {"t": float(refs.t)}
    for name, size in SIGNALS:
        value = getattr(refs, name)
        obj[name] = float(value) if size == 1 else _list(value)
    for name, _ in _REFERENCE_EXTRAS:
        value = getattr(refs, name)
        if value is not None:
            obj[name] = _list(value)
    if refs.valid is not None:
        obj["valid"] = np.asarray(refs.valid, dtype=bool).ravel().tolist()
    return _dumps(obj)


def decode_references(data: bytes) -> RobotReferences:
    """RobotReferences; ``valid`` is None for messages without a mask (all recordings before it)."""
    obj = json.loads(data)
    values: dict[str, Any] = {name: (_float(obj[name]) if size == 1 else _sized(obj[name], name, size))
                              for name, size in SIGNALS}
    extras: dict[str, Any] = {name: _sized(obj[name], name, size)
                              for name, size in _REFERENCE_EXTRAS if obj.get(name) is not None}
    if obj.get("valid") is not None:
        valid = np.asarray(obj["valid"], dtype=bool)
        if valid.shape != (FLAT_SIZE,):
            raise ValueError(f"valid must have {FLAT_SIZE} booleans, got shape {valid.shape}")
        extras["valid"] = valid
    return RobotReferences(t=_float(obj["t"]), **values, **extras)


# ---------------------------------------------------------------------- operator input

OPERATOR_SCHEMA_NAME = "teleop.OperatorSegments"
OPERATOR_SCHEMA: dict = {
    "title": OPERATOR_SCHEMA_NAME,
    "description": ("One frame of raw operator input (retarget/human.py conventions): world frame z up, "
                    "positions [m], world_from_segment quaternions (w, x, y, z)."),
    "type": "object",
    "properties": {
        "t": {"type": "number", "description": "sample time, producer clock [s]"},
        "segments": {
            "type": "object",
            "description": "pose of each segment present (a subset of the MVN segments)",
            "properties": {
                name: {"type": "object",
                       "properties": {"position": _number_array(3, "[m]"),
                                      "orientation": _number_array(4, "unit quaternion (w, x, y, z)")}}
                for name in SEGMENTS
            },
        },
        "com": _number_array(3, "optional centre of mass [m]"),
    },
    "required": ["t", "segments"],
}


def encode_operator_frame(motion: HumanMotion, index: int = 0) -> bytes:
    """Encode frame ``index`` of ``motion`` (segment poses, optional CoM)."""
    positions = motion.positions[index].tolist()
    orientations = motion.orientations[index].tolist()
    obj: dict[str, Any] = {
        "t": float(motion.times[index]),
        "segments": {name: {"position": positions[i], "orientation": orientations[i]}
                     for i, name in enumerate(motion.segment_names)},
    }
    if motion.com is not None:
        obj["com"] = motion.com[index].tolist()
    return _dumps(obj)


def decode_operator_frame(data: bytes) -> HumanMotion:
    """A one-frame :class:`HumanMotion`, raw (:meth:`~retarget.human.HumanMotion.raw`): a
    glitched segment's NaN, written as null, reads back as NaN rather than making the
    channel undecodable; the reader stacks frames into a longer, checked one."""
    obj = json.loads(data)
    names = tuple(obj["segments"])
    positions = np.array([[_array(obj["segments"][n]["position"]) for n in names]]).reshape(1, len(names), 3)
    orientations = np.array([[_array(obj["segments"][n]["orientation"]) for n in names]]).reshape(1, len(names), 4)
    com = _array(obj["com"]).reshape(1, 3) if obj.get("com") is not None else None
    return HumanMotion.raw(np.array([_float(obj["t"])]), names, positions, orientations, com)


# ------------------------------------------------------------------------- robot state

ROBOT_STATE_SCHEMA_NAME = "teleop.RobotState"
ROBOT_STATE_SCHEMA: dict = {
    "title": ROBOT_STATE_SCHEMA_NAME,
    "description": "Measured robot state, stance frame.",
    "type": "object",
    "properties": {
        "t": {"type": "number", "description": "measurement time [s]"},
        "joint_positions": _number_array(None, "[rad]"),
        "joint_velocities": _number_array(None, "[rad/s]"),
        "com": _number_array(3, "centre of mass [m]"),
        "cop": _number_array(2, "measured centre of pressure (x, y) [m]"),
        "joint_names": {"type": "array", "items": {"type": "string"}, "description": "optional"},
        "joint_commands": _number_array(None, "optional: joint angles the whole-body controller commanded "
                                              "this tick, in joint_positions' order [rad]"),
        "watchdog": {"type": "string",
                     "description": "optional: stale-command watchdog state (WAITING, ACTIVE, STALE, RESUMING)"},
        "compensation": {"type": "string", "description": "optional: delay compensation state "
                                                          "(passthrough, blend_in, predicting, blend_out)"},
    },
    "required": ["t", "joint_positions", "joint_velocities", "com", "cop"],
}


def encode_robot_state(state: RobotStateSample | Mapping) -> bytes:
    """Encode a :class:`RobotStateSample` or anything with the same attributes / keys; the
    optional fields (joint names, joint commands, watchdog and compensation states) are
    written only when present."""
    obj: dict[str, Any] = {"t": float(_field(state, "t"))}
    for name in ("joint_positions", "joint_velocities", "com", "cop"):
        obj[name] = _list(_field(state, name))
    names = _optional_field(state, "joint_names")
    if names is not None:
        obj["joint_names"] = [str(n) for n in names]
    commands = _optional_field(state, "joint_commands")
    if commands is not None:
        obj["joint_commands"] = _list(commands)
    for name in ("watchdog", "compensation"):
        value = _optional_field(state, name)
        if value is not None:   # a str Enum member is written as its value by json
            obj[name] = value if isinstance(value, str) else str(value)
    return _dumps(obj)


def _optional_string(obj: dict, name: str) -> str | None:
    """The string field ``name`` of a decoded message, None when absent (ValueError naming it otherwise)."""
    value = obj.get(name)
    if value is not None and not isinstance(value, str):
        raise ValueError(f"{name} must be a string, got {type(value).__name__}")
    return value


def decode_robot_state(data: bytes) -> RobotStateSample:
    """RobotStateSample; the optional fields are None for messages without them (joint
    commands and the watchdog and compensation states: all recordings made before them).
    A ``joint_commands`` of another length than ``joint_positions`` or a state that is not a
    string raises ValueError naming the field."""
    obj = json.loads(data)
    names = obj.get("joint_names")
    positions = _array(obj["joint_positions"])
    commands = obj.get("joint_commands")
    return RobotStateSample(t=_float(obj["t"]), joint_positions=positions,
                            joint_velocities=_array(obj["joint_velocities"]), com=_array(obj["com"]),
                            cop=_array(obj["cop"]), joint_names=tuple(names) if names is not None else None,
                            joint_commands=None if commands is None else _sized(commands, "joint_commands",
                                                                                positions.size),
                            watchdog=_optional_string(obj, "watchdog"),
                            compensation=_optional_string(obj, "compensation"))


# ------------------------------------------------------------------------ camera frames

CAMERA_SCHEMA_NAME = "foxglove.CompressedImage"
CAMERA_SCHEMA: dict = {
    "title": CAMERA_SCHEMA_NAME,
    "description": "A compressed image (Foxglove's CompressedImage, JSON form).",
    "type": "object",
    "properties": {
        "timestamp": {
            "type": "object",
            "title": "time",
            "description": "capture time",
            "properties": {"sec": {"type": "integer", "minimum": 0},
                           "nsec": {"type": "integer", "minimum": 0, "maximum": 999999999}},
        },
        "frame_id": {"type": "string", "description": "optical frame of the camera"},
        "data": {"type": "string", "contentEncoding": "base64", "description": "compressed image bytes"},
        "format": {"type": "string", "description": "image format: jpeg, png, webp"},
    },
}


def encode_camera_frame(frame: CameraFrame) -> bytes:
    """foxglove.CompressedImage JSON; the image bytes are base64 (no JSON escaping needed)."""
    t_ns = max(0, round(frame.t * 1e9))
    head = _dumps({"timestamp": {"sec": t_ns // 1_000_000_000, "nsec": t_ns % 1_000_000_000},
                   "frame_id": frame.frame_id, "format": frame.format})
    # Splice the base64 text in by hand: json.dumps would scan the ~100 kB string for
    # characters to escape, which costs 5x the base64 encoding itself.
    return head[:-1] + b',"data":"' + base64.b64encode(frame.data) + b'"}'


def decode_camera_frame(data: bytes) -> CameraFrame:
    obj = json.loads(data)
    stamp = obj.get("timestamp") or {"sec": 0, "nsec": 0}
    return CameraFrame(t=stamp["sec"] + stamp["nsec"] * 1e-9, data=base64.b64decode(obj["data"]),
                       format=obj.get("format", "jpeg"), frame_id=obj.get("frame_id", ""))


# -------------------------------------------------------------------- network statistics

NETWORK_SCHEMA_NAME = "teleop.NetworkStats"
NETWORK_SCHEMA: dict = {
    "title": NETWORK_SCHEMA_NAME,
    "description": "Network statistics. Messages may carry more keys than listed here.",
    "type": "object",
    "properties": {
        "delay_s": {"type": "number", "description": "one-way delay [s]"},
        "jitter_s": {"type": "number", "description": "delay variation [s]"},
        "rtt_s": {"type": "number", "description": "round-trip time [s]"},
        "loss_fraction": {"type": "number", "description": "lost packets / sent packets [0..1]"},
        "bandwidth_bps": {"type": "number", "description": "throughput [bit/s]"},
        "packets_sent": {"type": "integer"},
        "packets_received": {"type": "integer"},
    },
}


def _json_default(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"cannot record {type(value).__name__} in a JSON message")


def encode_network_stats(stats: Mapping | Any) -> bytes:
    """Encode a mapping (or a dataclass) of statistics; numpy values are converted."""
    if dataclasses.is_dataclass(stats) and not isinstance(stats, type):
        stats = dataclasses.asdict(stats)
    if not isinstance(stats, Mapping):
        raise TypeError(f"network statistics must be a mapping or a dataclass, got {type(stats).__name__}")
    try:
        return json.dumps(dict(stats), separators=(",", ":"), allow_nan=False, default=_json_default).encode()
    except ValueError:
        plain = json.loads(json.dumps(dict(stats), default=_json_default))
        return _dumps(plain)


def decode_network_stats(data: bytes) -> dict:
    return json.loads(data)


# ---------------------------------------------------------------------- episode markers

EPISODE_SCHEMA_NAME = "teleop.EpisodeMarker"
EPISODE_SCHEMA: dict = {
    "title": EPISODE_SCHEMA_NAME,
    "description": "Start or stop of an episode (one demonstration of one task).",
    "type": "object",
    "properties": {
        "event": {"type": "string", "enum": ["start", "stop"]},
        "episode": {"type": "integer", "minimum": 0, "description": "episode number, in start order"},
        "task": {"type": "string", "description": "task label, empty when not labelled"},
    },
    "required": ["event", "episode", "task"],
}


def encode_episode_marker(marker: EpisodeMarker) -> bytes:
    return _dumps({"event": marker.event, "episode": int(marker.episode), "task": marker.task})


def decode_episode_marker(data: bytes) -> EpisodeMarker:
    obj = json.loads(data)
    return EpisodeMarker(obj["event"], obj["episode"], obj.get("task", ""))
