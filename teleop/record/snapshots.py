"""Snapshots: the only work :meth:`Recorder.log` does in the caller's thread.

A snapshot checks a message's type and shapes and copies its arrays, so that

* a wrong message fails at the call site, with a clear error, not later in the writer;
* the caller may reuse or modify its arrays right after ``log()`` returns;
* the expensive part, JSON encoding (float formatting dominates, ~1 us per number), runs
  in the writer thread, keeping the control loop's cost per ``log()`` to a few microseconds.

Each function returns a message of the same type that the encoder of
:mod:`teleop.record.codecs` can always encode.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from retarget.human import HumanMotion
from retarget.references import FLAT_SIZE, RobotReferences

from .codecs import encode_network_stats
from .messages import CameraFrame, EpisodeMarker, RobotStateSample


def _copy(value: Any, shape: tuple[int, ...] | None, what: str) -> np.ndarray:
    array = np.array(value, dtype=float)  # always a copy
    if shape is not None and array.shape != shape:
        raise ValueError(f"{what} must have shape {shape}, got {array.shape}")
    return array


def snapshot_references(message: Any) -> RobotReferences:
    """A private copy of RobotReferences (shape-checked by ``from_flat``), validity mask included."""
    if not isinstance(message, RobotReferences):
        raise TypeError(f"references must be RobotReferences, got {type(message).__name__}")
    extras = {}
    for name, size in (("head_orientation", 4), ("left_leg", 6), ("right_leg", 6)):
        value = getattr(message, name)
        if value is not None:
            extras[name] = _copy(value, (size,), name)
    if message.valid is not None:
        valid = np.array(message.valid, dtype=bool)  # always a copy
        if valid.shape != (FLAT_SIZE,):
            raise ValueError(f"valid must have shape ({FLAT_SIZE},), got {valid.shape}")
        extras["valid"] = valid
    return RobotReferences.from_flat(float(message.t), message.to_flat(), **extras)


def snapshot_operator_frame(message: Any) -> HumanMotion:
    """One frame of operator input, copied: a one-frame HumanMotion or (HumanMotion, index)."""
    if isinstance(message, HumanMotion):
        if len(message) != 1:
            raise ValueError(f"log one operator frame at a time (got {len(message)}); "
                             "use Recorder.log_operator_input(motion, index)")
        motion, index = message, 0
    elif isinstance(message, tuple) and len(message) == 2 and isinstance(message[0], HumanMotion):
        motion, index = message
    else:
        raise TypeError(f"operator input must be a one-frame HumanMotion or (HumanMotion, index), "
                        f"got {type(message).__name__}")
    i = range(len(motion))[index]  # IndexError for a bad index, negative indices allowed
    com = None if motion.com is None else motion.com[i:i + 1].copy()
    # Raw: the operator's input is recorded as it came, a glitched segment's NaN included.
    return HumanMotion.raw(motion.times[i:i + 1].copy(), motion.segment_names, motion.positions[i:i + 1].copy(),
                           motion.orientations[i:i + 1].copy(), com, motion.source, motion.rate_hz)


def _field(message: Any, name: str) -> Any:
    if isinstance(message, Mapping):
        if name not in message:
            raise KeyError(f"robot state has no {name!r}")
        return message[name]
    if not hasattr(message, name):
        raise TypeError(f"robot state {type(message).__name__} has no attribute {name!r}")
    return getattr(message, name)


def _optional(message: Any, name: str) -> Any:
    return message.get(name) if isinstance(message, Mapping) else getattr(message, name, None)


def _optional_state(message: Any, name: str) -> str | None:
    """A state name ("ACTIVE", "passthrough"...) as a plain str, or None when absent."""
    value = _optional(message, name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"robot state {name} must be a string, got {type(value).__name__}")
    return str.__str__(value)   # a plain str: a str Enum member gives its value


def snapshot_robot_state(message: Any) -> RobotStateSample:
    """A RobotStateSample copied from any object or mapping with its fields; the optional
    ones (joint names and commands, watchdog and compensation states) may be absent."""
    positions = _copy(_field(message, "joint_positions"), None, "joint_positions").ravel()
    velocities = _copy(_field(message, "joint_velocities"), positions.shape, "joint_velocities")
    names = _optional(message, "joint_names")
    if names is not None:
        names = tuple(str(n) for n in names)
        if len(names) != len(positions):
            raise ValueError(f"{len(names)} joint names for {len(positions)} joints")
    commands = _optional(message, "joint_commands")
    if commands is not None:
        commands = _copy(commands, positions.shape, "joint_commands")
    return RobotStateSample(float(_field(message, "t")), positions, velocities,
                            _copy(_field(message, "com"), (3,), "com"), _copy(_field(message, "cop"), (2,), "cop"),
                            names, commands, _optional_state(message, "watchdog"),
                            _optional_state(message, "compensation"))


def snapshot_camera_frame(message: Any) -> CameraFrame:
    """A CameraFrame whose data is immutable bytes (no copy when it already is)."""
    if not isinstance(message, CameraFrame):
        raise TypeError(f"camera frames must be CameraFrame (bare bytes carry no capture time), "
                        f"got {type(message).__name__}")
    data = message.data if isinstance(message.data, bytes) else bytes(message.data)
    return CameraFrame(float(message.t), data, str(message.format), str(message.frame_id))


def snapshot_network_stats(message: Any) -> bytes:
    """Network statistics are free-form: encoded right away (10 Hz, cheap), so bad values fail here."""
    return encode_network_stats(message)


def snapshot_episode_marker(message: Any) -> EpisodeMarker:
    if not isinstance(message, EpisodeMarker):
        raise TypeError(f"episode markers must be EpisodeMarker, got {type(message).__name__}")
    return EpisodeMarker(message.event, message.episode, message.task)
