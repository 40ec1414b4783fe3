"""Exporting labelled episodes as ReferenceTrajectory files for ProMP training.

Layout written (the one ``teleop train`` reads: one folder per task)::

    OUTDIR/<task>/<recording-name>_<episode-number>.npz

``<recording-name>`` is the file's stem for a recording given as a file, and its path
relative to the given folder for one found in a folder, with the separators replaced by
``__`` (``data/day1/session.mcap`` from ``data`` -> ``day1__session``), so recordings with
the same name in different sub-folders do not overwrite each other. Two recordings that
would still get the same name (``a/s.mcap`` and ``b/s.mcap`` given as files) are an error,
raised before anything is written.

Each file is :meth:`retarget.references.ReferenceTrajectory.save_npz` of the episode's
references, times in seconds from the episode start (log-time clock; with
``use_message_time``, the samples' own times from the episode's first sample), label = task,
source = "<recording path>#episode<k>". Recordings without episodes (label them with
``teleop dataset label FILE --task NAME``), unlabelled episodes, episodes with fewer than
two samples, recordings without the channel and unreadable files are skipped and reported.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from .channels import REFERENCES_SPEC, resolve_topic
from .mcap_index import RecordingFormatError
from .reader import open_recording


#: Endings of the skip reasons for a recording without episodes and an unlabelled episode
#: (the CLI counts them to say how to fix it).
NO_EPISODES = ": no episodes"
NO_TASK_LABEL = ": no task label"


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


def _named_recordings(sources: Iterable[str | os.PathLike]) -> list[tuple[Path, str]]:
    """(recording, output name) for every recording of ``sources`` (see the module docstring).

    A recording listed twice (a folder and a file in it) is exported once. Raises
    ValueError naming both files if two recordings get the same output name.
    """
    named: list[tuple[Path, str]] = []
    seen: set[Path] = set()
    owner: dict[str, Path] = {}
    for source in sources:
        source = Path(source)
        for file in recordings_in(source):
            if file.resolve() in seen:
                continue
            seen.add(file.resolve())
            relative = file.relative_to(source) if source.is_dir() else Path(file.name)
            name = "__".join(relative.with_suffix("").parts)
            if name in owner:
                raise ValueError(f"{owner[name]} and {file} would both be exported as {name}_<episode>.npz: "
                                 "export them separately or rename one")
            owner[name] = file
            named.append((file, name))
    return named


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

    Raises ValueError, before writing anything, if two recordings would get the same output
    names (see the module docstring).
    """
    if isinstance(sources, (str, os.PathLike)):
        sources = [sources]
    files = _named_recordings(sources)
    output_dir = Path(output_dir)
    result = ExportResult()
    for file, recording_name in files:
        try:
            recording = open_recording(file)
        except RecordingFormatError as exc:
            result.skipped.append(f"{file.name}: {exc}")
            continue
        topic = resolve_topic(channel)
        episodes = recording.episodes()
        if not episodes:
            result.skipped.append(f"{file.name}{NO_EPISODES}")
            continue
        others = [t for t, info in recording.channels.items() if info.schema_name == REFERENCES_SPEC.schema_name]
        missing = f"no channel {topic}" + (f" (references are on {', '.join(others)})" if others else "")
        for episode in episodes:
            name = f"{file.name}#episode{episode.number}"
            if not episode.task:
                result.skipped.append(f"{name}{NO_TASK_LABEL}")
                continue
            if topic not in recording.channels:
                result.skipped.append(f"{name}: {missing}")
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
            out = folder / f"{recording_name}_{episode.number}.npz"
            trajectory.save_npz(out)
            result.written.append(out)
    return result
