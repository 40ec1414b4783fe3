"""Writing a new recording from an existing one: trimmed, relabelled or repaired.

MCAP files are append-only, so every edit (trim, relabel, repair of a crashed file) writes
a complete copy: same schemas, channels, metadata and messages (bytes, times and sequence
numbers untouched) within a log-time window, with the ``/episodes`` markers regenerated
from a list of episodes clipped to the window, and a ``teleop.rewrite`` metadata record
saying what was done. Writing over the source file goes through a temporary file and an
atomic rename (onto the file a symlink points to, which stays a link), so an interrupted
edit leaves the original intact.
"""

from __future__ import annotations

import os
from pathlib import Path

from mcap.writer import CompressionType, Writer

from .channels import EPISODE_SPEC, EPISODES
from .messages import EpisodeMarker
from .mcap_index import RecordingFormatError
from .reader import Episode, Recording
from .recorder import LIBRARY

#: Name of the metadata record a rewrite adds.
REWRITE_METADATA = "teleop.rewrite"


def episode_markers(episodes: list[Episode], start_ns: int | None = None,
                    end_ns: int | None = None) -> list[tuple[int, EpisodeMarker]]:
    """(log_time_ns, marker) pairs for ``episodes`` clipped to ``start_ns <= t < end_ns``.

    An episode cut by the window gets its start/stop marker at the window's edge; an
    episode that was never stopped (crash) keeps no stop marker unless the window cuts it.
    """
    markers: list[tuple[int, EpisodeMarker]] = []
    for ep in episodes:
        if end_ns is not None and ep.start_ns >= end_ns:
            continue
        if start_ns is not None and ep.stop_ns < start_ns:
            continue
        start = ep.start_ns if start_ns is None else max(ep.start_ns, start_ns)
        markers.append((start, EpisodeMarker("start", ep.number, ep.task)))
        if end_ns is not None and ep.stop_ns >= end_ns:
            markers.append((end_ns - 1, EpisodeMarker("stop", ep.number, ep.task)))
        elif ep.stopped:
            markers.append((ep.stop_ns, EpisodeMarker("stop", ep.number, ep.task)))
    markers.sort(key=lambda m: m[0])
    return markers


def write_copy(recording: Recording, output: str | os.PathLike, *, start_ns: int | None = None,
               end_ns: int | None = None, episodes: list[Episode] | None = None,
               operation: str = "copy") -> Path:
    """Write ``recording`` (messages with ``start_ns <= log_time < end_ns``) as a complete file.

    Args:
        recording: the source (complete or recovered).
        output: the new file; may be the source itself (replaced atomically).
        start_ns, end_ns: log-time window [ns]; None = unbounded.
        episodes: episodes to write as markers (default: the recording's own).
        operation: what was done, for the ``teleop.rewrite`` metadata record.

    Returns the output path.
    """
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    in_place = output.exists() and output.resolve() == recording.path.resolve()
    # In place, the rename must land on the file itself: renamed onto a symlink naming it,
    # the new file would replace the link and leave the recording it points to unchanged.
    replaced = output.resolve() if in_place else output
    target = replaced.with_name(replaced.name + ".tmp") if in_place else output
    markers = episode_markers(recording.episodes() if episodes is None else episodes, start_ns, end_ns)
    index = recording.index
    try:
        with open(target, "wb") as f:
            writer = Writer(f, chunk_size=4 << 20, compression=CompressionType.ZSTD)
            writer.start(profile=index.header.profile, library=LIBRARY)
            schema_ids: dict[int, int] = {}
            channel_ids: dict[int, int] = {}
            episodes_id = None
            for old_id, channel in sorted(index.channels.items()):
                schema = index.schemas.get(channel.schema_id)
                if schema is not None and schema.id not in schema_ids:
                    schema_ids[schema.id] = writer.register_schema(schema.name, schema.encoding, schema.data)
                channel_ids[old_id] = writer.register_channel(channel.topic, channel.message_encoding,
                                                              schema_ids.get(channel.schema_id, 0),
                                                              dict(channel.metadata))
                if channel.topic == EPISODES:
                    episodes_id = channel_ids[old_id]
            if markers and episodes_id is None:
                episodes_schema = writer.register_schema(EPISODE_SPEC.schema_name, "jsonschema",
                                                         EPISODE_SPEC.schema_bytes)
                episodes_id = writer.register_channel(EPISODES, "json", episodes_schema, {})
            for record in index.metadata:
                writer.add_metadata(record.name, dict(record.metadata))
            writer.add_metadata(REWRITE_METADATA, {"source": str(recording.path), "operation": operation,
                                                   "source_complete": str(recording.complete).lower()})

            pending = iter(markers)
            next_marker = next(pending, None)
            sequence = 0
            for message in recording.messages(None, start_ns, end_ns):
                if message.topic == EPISODES:
                    continue  # regenerated from `episodes`
                # Markers go in log-time order among the messages.
                while next_marker is not None and next_marker[0] <= message.log_time_ns:
                    writer.add_message(episodes_id, next_marker[0], EPISODE_SPEC.encode(next_marker[1]),
                                       next_marker[0], sequence)
                    sequence += 1
                    next_marker = next(pending, None)
                if message.channel_id not in channel_ids:
                    raise RecordingFormatError(
                        f"{recording.path}: damaged MCAP file (message at log time {message.log_time_ns} ns "
                        f"names channel id {message.channel_id}, which no Channel record defines)")
                writer.add_message(channel_ids[message.channel_id], message.log_time_ns,
                                   message.data, message.publish_time_ns, message.sequence)
            while next_marker is not None:
                writer.add_message(episodes_id, next_marker[0], EPISODE_SPEC.encode(next_marker[1]),
                                   next_marker[0], sequence)
                sequence += 1
                next_marker = next(pending, None)
            writer.finish()
        if in_place:
            os.replace(target, replaced)
    except BaseException:
        if in_place and target.exists():
            target.unlink()
        raise
    return output
