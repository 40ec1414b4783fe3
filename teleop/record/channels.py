"""The recorded channels: topic names, schemas and codecs, in one table.

==========================  ==========================  ===========================================
topic                       schema (jsonschema, json)   message
==========================  ==========================  ===========================================
/operator/segments          teleop.OperatorSegments     raw operator input: segment poses (1 frame)
/references                 teleop.RobotReferences      retargeted references (operator side)
/commands/delivered         teleop.RobotReferences      references as delivered to the robot (delayed)
/commands/compensated       teleop.RobotReferences      delay-compensated commands (ProMP output)
/robot/state                teleop.RobotState           joint positions/velocities, CoM, measured CoP;
                                                        optional: commanded joints [rad], watchdog
                                                        and compensation state (per tick)
/camera/<name>              foxglove.CompressedImage    JPEG frames (base64 in JSON)
/network/stats              teleop.NetworkStats         free-form network statistics
/episodes                   teleop.EpisodeMarker        episode start/stop markers with task labels
==========================  ==========================  ===========================================

Channels can be named by topic ("/references") or by short name ("references",
"robot_state", "camera/head", ...): :func:`resolve_topic` maps one to the other.
Messages are decoded by *schema name*, so a renamed topic still decodes.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import codecs, snapshots

OPERATOR_INPUT = "/operator/segments"
REFERENCES = "/references"
COMMANDS_DELIVERED = "/commands/delivered"
COMMANDS_COMPENSATED = "/commands/compensated"
ROBOT_STATE = "/robot/state"
NETWORK_STATS = "/network/stats"
EPISODES = "/episodes"
CAMERA_PREFIX = "/camera/"

#: Short names accepted wherever a topic is expected.
ALIASES: dict[str, str] = {
    "operator": OPERATOR_INPUT, "operator_input": OPERATOR_INPUT,
    "references": REFERENCES,
    "delivered": COMMANDS_DELIVERED, "commands_delivered": COMMANDS_DELIVERED,
    "compensated": COMMANDS_COMPENSATED, "commands_compensated": COMMANDS_COMPENSATED,
    "robot_state": ROBOT_STATE, "state": ROBOT_STATE,
    "network": NETWORK_STATS, "network_stats": NETWORK_STATS,
    "episodes": EPISODES,
    "camera": CAMERA_PREFIX + "main",
}


@dataclass(frozen=True)
class ChannelSpec:
    """How one kind of message is written and read.

    Attributes:
        schema_name: MCAP schema name (also the JSON schema title).
        schema: the JSON schema (dict).
        snapshot: message -> checked private copy; runs in the caller's thread, must be cheap.
        encode: snapshot -> bytes; runs in the writer thread.
        decode: bytes -> message.
        metadata: channel metadata written with the channel (strings).
    """

    schema_name: str
    schema: dict
    snapshot: Callable[[Any], Any]
    encode: Callable[[Any], bytes]
    decode: Callable[[bytes], Any]
    metadata: dict[str, str] = field(default_factory=dict)

    @property
    def schema_bytes(self) -> bytes:
        return json.dumps(self.schema, separators=(",", ":")).encode()

    def to_bytes(self, message: Any) -> bytes:
        """Snapshot and encode in one go (outside the recorder)."""
        return self.encode(self.snapshot(message))


def _already_encoded(data: bytes) -> bytes:
    return data


OPERATOR_SPEC = ChannelSpec(codecs.OPERATOR_SCHEMA_NAME, codecs.OPERATOR_SCHEMA, snapshots.snapshot_operator_frame,
                            codecs.encode_operator_frame, codecs.decode_operator_frame)
REFERENCES_SPEC = ChannelSpec(codecs.REFERENCES_SCHEMA_NAME, codecs.REFERENCES_SCHEMA,
                              snapshots.snapshot_references, codecs.encode_references, codecs.decode_references)
ROBOT_STATE_SPEC = ChannelSpec(codecs.ROBOT_STATE_SCHEMA_NAME, codecs.ROBOT_STATE_SCHEMA,
                               snapshots.snapshot_robot_state, codecs.encode_robot_state, codecs.decode_robot_state)
CAMERA_SPEC = ChannelSpec(codecs.CAMERA_SCHEMA_NAME, codecs.CAMERA_SCHEMA, snapshots.snapshot_camera_frame,
                          codecs.encode_camera_frame, codecs.decode_camera_frame)
NETWORK_SPEC = ChannelSpec(codecs.NETWORK_SCHEMA_NAME, codecs.NETWORK_SCHEMA, snapshots.snapshot_network_stats,
                           _already_encoded, codecs.decode_network_stats)
EPISODE_SPEC = ChannelSpec(codecs.EPISODE_SCHEMA_NAME, codecs.EPISODE_SCHEMA, snapshots.snapshot_episode_marker,
                           codecs.encode_episode_marker, codecs.decode_episode_marker)

#: Spec of every fixed topic (cameras are matched by prefix in :func:`spec_for_topic`).
STANDARD_CHANNELS: dict[str, ChannelSpec] = {
    OPERATOR_INPUT: OPERATOR_SPEC,
    REFERENCES: REFERENCES_SPEC,
    COMMANDS_DELIVERED: REFERENCES_SPEC,
    COMMANDS_COMPENSATED: REFERENCES_SPEC,
    ROBOT_STATE: ROBOT_STATE_SPEC,
    NETWORK_STATS: NETWORK_SPEC,
    EPISODES: EPISODE_SPEC,
}

#: Decoder of every schema name this package writes.
DECODERS_BY_SCHEMA: dict[str, Callable[[bytes], Any]] = {
    spec.schema_name: spec.decode
    for spec in (OPERATOR_SPEC, REFERENCES_SPEC, ROBOT_STATE_SPEC, CAMERA_SPEC, NETWORK_SPEC, EPISODE_SPEC)
}


def resolve_topic(name: str) -> str:
    """Topic of a channel given by topic or short name ("references" -> "/references")."""
    if name.startswith("/"):
        return name
    if name in ALIASES:
        return ALIASES[name]
    return "/" + name


def spec_for_topic(topic: str) -> ChannelSpec | None:
    """The spec of a standard topic (any ``/camera/<name>`` is a camera), else None."""
    if topic in STANDARD_CHANNELS:
        return STANDARD_CHANNELS[topic]
    if topic.startswith(CAMERA_PREFIX) and len(topic) > len(CAMERA_PREFIX):
        return CAMERA_SPEC
    return None


def known_topics() -> list[str]:
    """Standard topics, for error messages and help texts."""
    return list(STANDARD_CHANNELS) + [CAMERA_PREFIX + "<name>"]
