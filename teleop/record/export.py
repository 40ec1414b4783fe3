"""Exporting labelled episodes as ReferenceTrajectory files for ProMP training.

Layout written (the one ``teleop train`` reads: one folder per task)::

    OUTDIR/<task>/<recording-name>_<episode-number>.npz

Each file is :meth:`retarget.references.ReferenceTrajectory.save_npz` of the episode's
references, times in seconds from the episode start (log-time clock; with
``use_message_time``, the samples' own times from the episode's first sample), label = task,
source = "<recording path>#episode<k>". Unlabelled episodes, episodes with fewer than two
samples, recordings without the channel and unreadable files are skipped and reported.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from .channels import resolve_topic
from .mcap_index import RecordingFormatError
from .reader import open_recording


@dataclass
class ExportResult:
    """Files written and episodes skipped (with the reason) by :func:`export_episodes`."""

    written: list[Path] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def recordings_in(path: str | os.PathLike) -> list[Path]:
    """``path`` itself if it is a file, else every ``*.mcap`` below it, sorted."""
    path = Path(path)
    if path.is_dir():
        return sorted(p for p in path.rglob("*.mcap") if p.is_file())
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file or directory")
    return [path]


def task_folder_name(task: str) -> str:
    """A folder name for a task label (path separators and odd characters replaced)."""
    return re.sub(r"[^\w.+-]+", "_", task.strip()).strip("._") or "unnamed"


def export_episodes(sources: str | os.PathLike | Iterable[str | os.PathLike], output_dir: str | os.PathLike,
                    channel: str = "references", *, use_message_time: bool = False) -> ExportResult:
    """Write one ReferenceTrajectory .npz per labelled episode of the given recordings.

    Args:
        sources: a recording, a directory of recordings, or several of either.
        output_dir: root of the per-task folders.
        channel: the RobotReferences channel to export ("references", "compensated"...).
        use_message_time: time samples by their own ``t`` instead of their log time.
    """
    if isinstance(sources, (str, os.PathLike)):
        sources = [sources]
    files = [f for source in sources for f in recordings_in(source)]
    output_dir = Path(output_dir)
    result = ExportResult()
    for file in files:
        try:
            recording = open_recording(file)
        except RecordingFormatError as exc:
            result.skipped.append(f"{file.name}: {exc}")
            continue
        has_channel = resolve_topic(channel) in recording.channels
        for episode in recording.episodes():
            name = f"{file.name}#episode{episode.number}"
            if not episode.task:
                result.skipped.append(f"{name}: no task label")
                continue
            if not has_channel:
                result.skipped.append(f"{name}: no channel {resolve_topic(channel)}")
                continue
            trajectory = recording.reference_trajectory(
                channel, episode.start_ns, episode.stop_ns + 1,
                time_origin_ns=0 if use_message_time else episode.start_ns,
                use_message_time=use_message_time, label=episode.task, source=f"{file}#episode{episode.number}")
            if use_message_time and len(trajectory):
                # Producer clocks have their own origin: count from the episode's first sample.
                trajectory.times = trajectory.times - trajectory.times[0]
            if len(trajectory) < 2:
                result.skipped.append(f"{name}: {len(trajectory)} samples on {channel}")
                continue
            folder = output_dir / task_folder_name(episode.task)
            folder.mkdir(parents=True, exist_ok=True)
            out = folder / f"{file.stem}_{episode.number}.npz"
            trajectory.save_npz(out)
            result.written.append(out)
    return result
