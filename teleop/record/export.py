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
source = "<recording path>#episode<k>" (the path as given), ``recording``, the
recording's resolved path, and ``channel``, the exported channel's topic
("/commands/delivered"), which an export into the same folder compares (see
:func:`_check_overwrites`: the channels of one recording share the file names, and a
folder holds one of them). Recordings without episodes (label them with
``teleop dataset label FILE --task NAME``), unlabelled episodes, episodes with fewer than
two samples, recordings without the channel and unreadable files are skipped and reported.

A robot station's recording adds what the robot did in the episode, one row per control
tick of its ``/robot/state``, to the same file (arrays that
:meth:`~retarget.references.ReferenceTrajectory.load_npz` and ``teleop train`` ignore):

==================  ==========  ===========================================================
key                 shape       content
==================  ==========  ===========================================================
``robot_times``     (M,)        log time from the episode start [s]: the trajectory's
                                ``times`` clock, except with ``use_message_time``
``joint_commands``  (M, N)      joint angles the whole-body controller commanded [rad]
``joint_names``     (N,)        joint names, in the columns' order
``watchdog``        (M,)        watchdog state per tick ("ACTIVE", "STALE", "RESUMING"...)
``compensation``    (M,)        compensation state per tick ("passthrough", "predicting"...)
==================  ==========  ===========================================================

Each is written when the recording holds it: recordings made before the joint commands and
states were recorded, and operator recordings, give the trajectory alone.
"""

from __future__ import annotations

import io
import os
import re
import zipfile
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from retarget.npz_checks import CheckedNpz
from retarget.references import ReferenceTrajectory

from .channels import COMMANDS_DELIVERED, REFERENCES_SPEC, ROBOT_STATE, ROBOT_STATE_SPEC, resolve_topic
from .mcap_index import RecordingFormatError
from .reader import Recording, open_recording


#: Endings of the skip reasons for a recording without episodes and an unlabelled episode
#: (the CLI counts them to say how to fix it).
NO_EPISODES = ": no episodes"
NO_TASK_LABEL = ": no task label"


@dataclass
class ExportResult:
    """Files written, episodes skipped (with the reason) and recordings exported although
    incomplete (no footer: a live session's file, or one cut short; their last episode may
    end early) by :func:`export_episodes`."""

    written: list[Path] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    incomplete: list[Path] = field(default_factory=list)


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


def robot_arrays(recording: Recording, start_ns: int, end_ns: int) -> dict[str, np.ndarray]:
    """The robot arrays of the log-time window ``start_ns <= t < end_ns`` written next to an
    episode's trajectory (see the module docstring), times from ``start_ns``; {} when the
    recording has no robot state with joint commands or states."""
    info = recording.channels.get(ROBOT_STATE)
    if info is None or info.schema_name != ROBOT_STATE_SPEC.schema_name:   # none, or another tool's
        return {}
    series = recording.robot_states(ROBOT_STATE, start_ns, end_ns, time_origin_ns=start_ns)
    arrays = {name: value for name, value in (("joint_commands", series.joint_commands),
                                              ("watchdog", series.watchdog),
                                              ("compensation", series.compensation)) if value is not None}
    if not arrays:   # measured states alone are in the recording; the file stays a plain trajectory
        return {}
    arrays["robot_times"] = series.times
    if series.joint_names is not None:
        arrays["joint_names"] = np.array(series.joint_names, dtype=str)
    return arrays


def save_with_arrays(trajectory: ReferenceTrajectory, path: Path, arrays: dict[str, np.ndarray]) -> None:
    """``trajectory.save_npz(path)`` with ``arrays`` added to the same file, written to a
    temporary file beside ``path`` and renamed into place: an interrupted export leaves the
    earlier file or none, never a truncated one (which the next export could not read)."""
    # The trajectory's keys are taken as save_npz writes them, so its format has one owner.
    buffer = io.BytesIO()
    trajectory.save_npz(buffer)
    buffer.seek(0)
    with np.load(buffer, allow_pickle=False) as saved:
        keys = dict(saved)
    partial = path.with_name(f".{path.stem}.{os.getpid()}.partial.npz")   # savez wants the .npz
    try:
        np.savez_compressed(partial, **keys, **arrays)
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)


#: Key of the exported files that names the recording, resolved (its ``source`` keeps the
#: path as given, which means nothing from another working folder).
RECORDING_KEY = "recording"
#: Key of the exported files that names the channel exported, by topic (``delivered`` and
#: ``/commands/delivered`` are one channel).
CHANNEL_KEY = "channel"


def _exported_from(path: Path) -> tuple[str | None, str | None, str | None] | None:
    """(recording, source, channel) of an earlier export's file (each None if absent), or
    None when the file cannot be read (damaged: nothing in it is lost by replacing it)."""
    try:
        with np.load(path, allow_pickle=False) as data:
            members = CheckedNpz(data)    # an output file is input here: sizes checked first
            recording = str(members[RECORDING_KEY]) if RECORDING_KEY in members else None
            source = str(members["source"]) if "source" in members else None
            channel = str(members[CHANNEL_KEY]) if CHANNEL_KEY in members else None
            return recording, source, channel
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile, zlib.error):
        return None


def _same_episode(recording: str | None, source: str | None, file: Path, number: int) -> bool:
    """Whether an exported file holds episode ``number`` of recording ``file``: by its
    resolved recording path and its source's episode number. Files exported before the
    recording path was stored count as another recording's unless their source is an
    absolute path to ``file`` (a relative one depends on where it was run)."""
    if source is None or "#episode" not in source:
        return False
    path, _, episode = source.rpartition("#episode")
    if episode != str(number):
        return False
    if recording is not None:
        return recording == str(file.resolve())
    return Path(path).is_absolute() and Path(path).resolve() == file.resolve()


def _listed(clashes: list[str]) -> str:
    return f"{', '.join(clashes[:3])}{' ...' if len(clashes) > 3 else ''}"


def reference_channels(recording) -> list[str]:
    """The topics of a recording's channels that hold robot references."""
    return [topic for topic, info in recording.channels.items() if info.schema_name == REFERENCES_SPEC.schema_name]


def _check_overwrites(files: list[tuple[Path, str]], output_dir: Path, topic: str) -> None:
    """Refuse (ValueError, before anything is written) to replace an exported file that
    holds an episode of another recording, or of this recording's other channel than
    ``topic``: two recordings of the same name exported in turn into one folder
    (``a/operator.mcap``, then ``b/operator.mcap``) replaced the first one's demonstrations
    without a word, and so did a robot recording's compensated commands exported after its
    delivered ones (the same file names). Re-exporting the same recording and channel is
    allowed, from any working folder (the files name the recording by its resolved path),
    and a damaged file (unreadable: nothing in it is lost) is replaced."""
    others, channels = [], []
    for file, recording_name in files:
        try:
            recording = open_recording(file)
            episodes = recording.episodes()
        except RecordingFormatError:
            continue                     # skipped, and said, by the export itself
        if topic not in recording.channels:
            continue                     # its episodes are skipped (and said): nothing replaced
        # A file exported before the files named their channel holds the recording's only
        # references channel if it has one; of a robot recording's two, which is unknown.
        held = reference_channels(recording)
        unnamed = held[0] if len(held) == 1 else None
        for episode in episodes:
            if not episode.task:
                continue
            out = output_dir / task_folder_name(episode.task) / f"{recording_name}_{episode.number}.npz"
            if out.exists():
                earlier = _exported_from(out)
                if earlier is None:
                    continue
                if not _same_episode(*earlier[:2], file, episode.number):
                    others.append(f"{out} (from {earlier[0] or earlier[1] or 'another file'})")
                elif (earlier[2] or unnamed) != topic:
                    channels.append(f"{out} (holds {earlier[2] or 'a channel it does not name: an earlier export'})")
    problems = []
    if others:
        problems.append(f"{len(others)} file(s) in {output_dir} hold episodes of another recording and would be "
                        f"replaced: {_listed(others)}; pass --force to replace them, or export to another -o "
                        "(or rename the recording)")
    if channels:
        problems.append(f"{len(channels)} file(s) in {output_dir} hold episodes of this recording exported from "
                        f"another channel and would be replaced with its {topic}: {_listed(channels)}; export to "
                        "another -o to keep both (teleop train learns from every file of a folder: one channel "
                        "per folder), or pass --force to replace them")
    if problems:
        raise ValueError("; and ".join(problems))


def export_episodes(sources: str | os.PathLike | Iterable[str | os.PathLike], output_dir: str | os.PathLike,
                    channel: str = "references", *, use_message_time: bool = False,
                    force: bool = False) -> ExportResult:
    """Write one ReferenceTrajectory .npz per labelled episode of the given recordings.

    Args:
        sources: a recording, a directory of recordings, or several of either.
        output_dir: root of the per-task folders.
        channel: the RobotReferences channel to export ("references", "compensated"...).
        use_message_time: time samples by their own ``t`` instead of their log time.
        force: replace files exported from other recordings, or from another channel of the
            same recording (see :func:`_check_overwrites`).

    A robot recording's files also hold its joint commands and watchdog and compensation
    states (see the module docstring).

    Raises ValueError, before writing anything, if two recordings would get the same output
    names (see the module docstring), or, without ``force``, if a file there holds an episode
    of another recording or another channel's export of one of these.
    """
    if isinstance(sources, (str, os.PathLike)):
        sources = [sources]
    files = _named_recordings(sources)
    output_dir = Path(output_dir)
    topic = resolve_topic(channel)
    if not force:
        _check_overwrites(files, output_dir, topic)
    result = ExportResult()
    for file, recording_name in files:
        try:
            recording = open_recording(file)
        except RecordingFormatError as exc:
            result.skipped.append(f"{file.name}: {exc}")
            continue
        if not recording.complete:
            result.incomplete.append(file)
        episodes = recording.episodes()
        if not episodes:
            result.skipped.append(f"{file.name}{NO_EPISODES}")
            continue
        others = reference_channels(recording)
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
                use_message_time=use_message_time, label=episode.task, source=f"{file}#episode{episode.number}",
                # In log time, the delivered commands as the robot executed them (the newest
                # by time stamp); by message time, every sample at its own time.
                newest_only=topic == COMMANDS_DELIVERED and not use_message_time)
            if use_message_time and len(trajectory):
                # Producer clocks have their own origin: count from the episode's first sample.
                trajectory.times = trajectory.times - trajectory.times[0]
            if len(trajectory) < 2:
                result.skipped.append(f"{name}: {len(trajectory)} samples on {channel}")
                continue
            folder = output_dir / task_folder_name(episode.task)
            folder.mkdir(parents=True, exist_ok=True)
            out = folder / f"{recording_name}_{episode.number}.npz"
            arrays = {**robot_arrays(recording, episode.start_ns, episode.stop_ns + 1),
                      RECORDING_KEY: np.array(str(file.resolve())), CHANNEL_KEY: np.array(topic)}
            save_with_arrays(trajectory, out, arrays)
            result.written.append(out)
    return result
