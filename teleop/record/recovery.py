"""Recovering a recording cut short by a crash.

How it works: the recorder flushes whole MCAP chunks to the operating system at least
every ``flush_interval_s`` (0.5 s by default), and the kernel keeps written data when a
process is killed. A killed recording is therefore a valid MCAP data section followed by
at most one partly written chunk, with no summary or footer. The scan of
:mod:`teleop.record.mcap_index` reads it record by record, checking each length against
the file size and each chunk's CRC, and stops at the damaged tail; :func:`recover` reports
what was saved and can write a complete copy (summary, indexes, footer) that any MCAP tool
opens, including the ``mcap`` CLI and Foxglove Studio, which need the footer.

A chunk damaged inside a file (bit rot, a bad copy; crashed or complete) costs only its own
messages: :func:`recover` checks every chunk, reports the damaged ones and writes every
intact chunk's messages.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .reader import Recording, open_recording
from .rewrite import write_copy


@dataclass
class RecoveryReport:
    """What a recovery found.

    Attributes:
        path: the recording examined.
        complete: True if it was closed properly (nothing to recover).
        messages: messages recovered (readable: those of damaged chunks left out).
        channel_counts: messages recovered per topic.
        first_ns, last_ns: log times of the first and last recovered message [ns].
        discarded_bytes: size of the damaged tail that was dropped [bytes].
        problem: what ended the readable part (None if the file ends cleanly).
        output: the complete copy written, if one was asked for.
        damaged_chunks: damaged chunks skipped within the file (their messages are lost).
        damage: one line on them (None without any).
    """

    path: Path
    complete: bool
    messages: int
    channel_counts: dict[str, int]
    first_ns: int
    last_ns: int
    discarded_bytes: int
    problem: str | None
    output: Path | None = None
    damaged_chunks: int = 0
    damage: str | None = None

    def summary(self) -> str:
        """One line for logs and the CLI."""
        if self.complete:
            state = "complete"
        else:
            state = f"recovered, {self.discarded_bytes} bytes of damaged tail dropped"
            if self.problem:
                state += f" ({self.problem})"
        if self.damage:
            state += f"; {self.damage}"
        text = f"{self.path}: {state}; {self.messages} messages, {(self.last_ns - self.first_ns) * 1e-9:.2f} s"
        return text + (f"; complete copy written to {self.output}" if self.output else "")


def recover(path: str | os.PathLike, output: str | os.PathLike | None = None,
            recording: Recording | None = None, *, progress: bool = True) -> RecoveryReport:
    """Read what a recording holds, complete or crashed, and optionally write a complete copy.

    Every chunk is checked first (a complete file's are otherwise read only when needed), so
    the report counts the damaged chunks, which the copy leaves out; the report says it, so no
    warning is printed about them.

    Args:
        path: the recording.
        output: where to write a complete, properly closed copy (None: only report).
        recording: ``path`` already opened by the caller (its index is not read twice).
        progress: progress bars on stderr while checking and copying.

    Raises:
        RecordingFormatError: not an MCAP file, or cut short before its header ended, or
            nothing intact left to copy.
    """
    recording = recording if recording is not None else open_recording(path)
    index = recording.index
    index.verify_chunks(progress=progress)
    warn, index.warn_damaged = index.warn_damaged, False
    try:
        written = None if output is None else write_copy(recording, output, operation="recover", progress=progress)
    finally:
        index.warn_damaged = warn
    readable = index.readable_counts()
    return RecoveryReport(recording.path, recording.complete, index.readable_message_count,
                          {topic: sum(readable.get(i, 0) for i in info.channel_ids)
                           for topic, info in recording.channels.items()},
                          recording.start_ns, recording.end_ns, recording.discarded_bytes,
                          recording.problem, written, index.damaged_chunks, index.damage_report())
