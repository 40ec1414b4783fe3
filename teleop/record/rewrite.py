"""Writing a new recording from an existing one: trimmed, relabelled or repaired.

MCAP files are append-only, so every edit (trim, relabel, repair of a crashed file) writes
a complete copy: same schemas, channels, metadata and messages (bytes, times and sequence
numbers untouched) within a log-time window, with the ``/episodes`` markers regenerated
from a list of episodes clipped to the window, and a ``teleop.rewrite`` metadata record
saying what was done. Damaged chunks of the source are skipped with a warning (see
:mod:`teleop.record.mcap_index`).

The copy is written to a hidden temporary file with a unique name next to the output and
renamed onto it (atomically; onto the file a symlink points to, which stays a link) only
once it is complete (:func:`teleop.output_set.write_outputs_together`). An error, Ctrl-C or
a full disk removes the temporary: the output is
either what it was (absent, or the source itself when editing in place) or complete, never
half-written, so a retry is not refused by a leftover.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from mcap.writer import CompressionType, Writer

from teleop.output_set import write_outputs_together
from teleop.progress import progress_bar

from .channels import EPISODE_SPEC, EPISODES
from .messages import EpisodeMarker
from .mcap_index import DataBlock, FileIndex, RecordingFormatError, iter_block_messages, select_blocks
from .reader import Episode, Recording
from .recorder import CHUNK_SIZE_BYTES, LIBRARY, RECORDER_STATS_METADATA

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
               operation: str = "copy", progress: bool = True) -> Path:
    """Write ``recording`` (messages with ``start_ns <= log_time < end_ns``) as a complete file.

    Args:
        recording: the source (complete or recovered).
        output: the new file; may be the source itself (replaced atomically).
        start_ns, end_ns: log-time window [ns]; None = unbounded.
        episodes: episodes to write as markers (default: the recording's own).
        operation: what was done, for the ``teleop.rewrite`` metadata record.
        progress: a progress bar over the source's chunks on stderr (off for JSON output).

    Returns the output path. On any error or interrupt ``output`` is left as it was.
    """
    output = Path(output)
    # (Its folder is made by write_outputs_together, and removed again if the copy fails or
    # is interrupted: made here, it stayed behind, empty.)
    markers = episode_markers(recording.episodes() if episodes is None else episodes, start_ns, end_ns)
    index = recording.index

    def write(temporary: Path) -> None:
        with open(temporary, "wb") as f:
            # The recorder's chunk size: a copy in 4 MB chunks made each seek in it decompress 4 MB.
            writer = Writer(f, chunk_size=CHUNK_SIZE_BYTES, compression=CompressionType.ZSTD)
            writer.start(profile=index.header.profile, library=LIBRARY)
            channel_ids, episodes_id = _register_channels(writer, index, bool(markers))
            whole = start_ns is None and end_ns is None and operation != "recover"
            for record in index.metadata:
                if record.name == RECORDER_STATS_METADATA and not whole:
                    # The recorder's counts are the source's: a trimmed copy holding 4515 of its
                    # 4929 messages said "logged=4929, written=4929".
                    continue
                writer.add_metadata(record.name, dict(record.metadata))
            writer.add_metadata(REWRITE_METADATA, {"source": str(recording.path), "operation": operation,
                                                   "source_complete": str(recording.complete).lower()})
            pending = _Markers(markers, episodes_id)
            blocks = select_blocks(index, None, start_ns, end_ns)
            with progress_bar(total=len(blocks), desc=f"writing {output.name}", enabled=progress) as bar:
                for _ in _copy_messages(writer, recording, blocks, channel_ids, pending, start_ns, end_ns):
                    bar.update()
            pending.write(writer)
            writer.finish()

    write_outputs_together({output: write})
    return output


def _register_channels(writer: Writer, index: FileIndex, need_episodes: bool) -> tuple[dict[int, int], int | None]:
    """Register the source's schemas and channels (and an ``/episodes`` channel if markers
    need one and it has none); (new channel id by old one, the ``/episodes`` channel id)."""
    schema_ids: dict[int, int] = {}
    channel_ids: dict[int, int] = {}
    episodes_id = None
    for old_id, channel in sorted(index.channels.items()):
        schema = index.schemas.get(channel.schema_id)
        if schema is not None and schema.id not in schema_ids:
            schema_ids[schema.id] = writer.register_schema(schema.name, schema.encoding, schema.data)
        channel_ids[old_id] = writer.register_channel(channel.topic, channel.message_encoding,
                                                      schema_ids.get(channel.schema_id, 0), dict(channel.metadata))
        if channel.topic == EPISODES:
            episodes_id = channel_ids[old_id]
    if need_episodes and episodes_id is None:
        episodes_schema = writer.register_schema(EPISODE_SPEC.schema_name, "jsonschema", EPISODE_SPEC.schema_bytes)
        episodes_id = writer.register_channel(EPISODES, "json", episodes_schema, {})
    return channel_ids, episodes_id


class _Markers:
    """Episode markers still to write, in log-time order, on the ``/episodes`` channel with
    their own sequence numbers."""

    def __init__(self, markers: list[tuple[int, EpisodeMarker]], channel_id: int | None) -> None:
        self._markers = markers
        self._next = 0
        self._channel_id = channel_id

    def write(self, writer: Writer, until_ns: int | None = None) -> None:
        """Write the markers at or before ``until_ns`` (all of them when None)."""
        while self._next < len(self._markers) and (until_ns is None or self._markers[self._next][0] <= until_ns):
            log_ns, marker = self._markers[self._next]
            assert self._channel_id is not None   # _register_channels adds one whenever there are markers
            writer.add_message(self._channel_id, log_ns, EPISODE_SPEC.encode(marker), log_ns, self._next)
            self._next += 1


def _copy_messages(writer: Writer, recording: Recording, blocks: list[DataBlock], channel_ids: dict[int, int],
                   markers: _Markers, start_ns: int | None, end_ns: int | None) -> Iterator[None]:
    """Copy the messages of the window from ``blocks`` of the source, the episode markers
    among them in log-time order; yields after each block (for the progress bar)."""
    index = recording.index
    regenerated = {old_id for old_id, channel in index.channels.items() if channel.topic == EPISODES}
    for _, messages in iter_block_messages(index, blocks, None, start_ns, end_ns):
        for message in messages:
            if message.channel_id in regenerated:
                continue  # written from the episodes instead
            markers.write(writer, message.log_time)
            if message.channel_id not in channel_ids:
                raise RecordingFormatError(
                    f"{recording.path}: damaged MCAP file (message at log time {message.log_time} ns "
                    f"names channel id {message.channel_id}, which no Channel record defines)")
            writer.add_message(channel_ids[message.channel_id], message.log_time, message.data,
                               message.publish_time, message.sequence)
        yield
