"""Recovering a recording cut short by a crash.

How it works: the recorder flushes whole MCAP chunks to the operating system at least
every ``flush_interval_s`` (0.5 s by default), and the kernel keeps written data when a
process is killed. A killed recording is therefore a valid MCAP data section followed by
at most one partly written chunk, with no summary or footer. The scan of
:mod:`teleop.record.mcap_index` reads it record by record, checking each length against
the file size and each chunk's CRC, and stops at the damaged tail; :func:`recover` reports
what was saved and can write a complete copy (summary, indexes, footer) that any MCAP tool
opens, including the ``mcap`` CLI and Foxglove Studio, which need the footer.
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
        messages: messages recovered.
        channel_counts: messages recovered per topic.
        first_ns, last_ns: log times of the first and last recovered message [ns].
        discarded_bytes: size of the damaged tail that was dropped [bytes].
        problem: what ended the readable part (None if the file ends cleanly).
        output: the complete copy written, if one was asked for.
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

    def summary(self) -> str:
        """One line for logs and the CLI."""
        if self.complete:
            state = "complete"
        else:
            state = f"recovered, {self.discarded_bytes} bytes of damaged tail dropped"
            if self.problem:
                state += f" ({self.problem})"
        text = f"{self.path}: {state}; {self.messages} messages, {(self.last_ns - self.first_ns) * 1e-9:.2f} s"
        return text + (f"; complete copy written to {self.output}" if self.output else "")


def recover(path: str | os.PathLike, output: str | os.PathLike | None = None,
            recording: Recording | None = None) -> RecoveryReport:
    """Read what a recording holds, complete or crashed, and optionally write a complete copy.

    Args:
        path: the recording.
        output: where to write a complete, properly closed copy (None: only report).
        recording: ``path`` already opened by the caller (its index is not read twice).

    Raises:
        RecordingFormatError: not an MCAP file, or cut short before its header ended.
    """
    recording = recording if recording is not None else open_recording(path)
    written = None
    if output is not None:
        written = write_copy(recording, output, operation="recover")
    return RecoveryReport(recording.path, recording.complete, recording.message_count,
                          {topic: info.count for topic, info in recording.channels.items()},
                          recording.start_ns, recording.end_ns, recording.discarded_bytes,
                          recording.problem, written)
