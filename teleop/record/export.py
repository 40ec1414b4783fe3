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
:func:`_overwrite_problems`: the channels of one recording share the file names, and a
folder holds one of them). Recordings without episodes (label them with
``teleop dataset label FILE --task NAME``), unlabelled episodes, episodes with fewer than
:data:`teleop.takes.MIN_TAKE_FRAMES` samples, with NaN or infinite references (``teleop train``
refuses them), or with a gap between samples longer than ``max_gap_s`` (a damaged chunk
skipped, a link that went quiet: ``teleop train`` would learn a straight line across the
hole), and recordings without the channel are skipped and reported; so are unreadable recordings and
episodes, and files that cannot be written, which :attr:`ExportResult.errors` also lists:
one damaged file among many does not stop the others' export.

Refused before anything is written: two labels that get one folder
(:func:`~teleop.record.labels.task_folder_name`: ``pick up`` and ``pick_up``, two emoji;
``teleop train`` would learn them as one task), and,
without ``force``, a file of an episode exported under an earlier label into another task
folder (after ``teleop dataset label --episode N``: the demonstration would train both
tasks), which ``force`` removes once the episode's new file is written.

A recording whose metadata notes the robot it was made for (both stations note theirs)
passes that note to each file, as the string members ``robot``, ``robot_dimensions`` and
``robot_geometry`` (:data:`teleop.robot.target.ROBOT_NOTE_KEYS`): ``teleop train`` notes
it in the library, or refuses takes made for different robots, and ``teleop info`` shows
it. A robot station's recording also adds what the robot did in the episode, one row per
control tick of its ``/robot/state`` (arrays that
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
states were recorded, and operator recordings, give no robot arrays (and recordings made
before stations noted their robot, no note).
"""

from __future__ import annotations

import io
import math
import os
import zipfile
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from retarget.npz_checks import CheckedNpz
from retarget.references import FLAT_LABELS, ReferenceTrajectory
from teleop.output_set import OutputSet, is_hidden
from teleop.progress import progress_bar
from teleop.takes import MIN_TAKE_FRAMES

from .channels import COMMANDS_DELIVERED, REFERENCES_SPEC, ROBOT_STATE, ROBOT_STATE_SPEC, resolve_topic
from .labels import printable_label, task_folder_name
from .mcap_index import RecordingFormatError
from .reader import Episode, Recording, open_recording


#: Endings of the skip reasons for a recording without episodes and an unlabelled episode
#: (the CLI counts them to say how to fix it).
NO_EPISODES = ": no episodes"
NO_TASK_LABEL = ": no task label"


@dataclass
class ExportResult:
    """What :func:`export_episodes` did.

    Attributes:
        written: the files written.
        skipped: the recordings and episodes not exported, each "<file>[#episode<n>]: why".
        errors: those of ``skipped`` that failed (an unreadable recording or episode, a file
            that could not be written), not left out by rule (no label, no channel...).
        incomplete: recordings exported although incomplete (no footer: a live session's
            file, or one cut short; their last episode may end early).
        removed: copies of episodes exported under an earlier label, removed (``force``)
            once the episode's new file was written.
    """

    written: list[Path] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    incomplete: list[Path] = field(default_factory=list)
    removed: list[Path] = field(default_factory=list)

    def failed(self, reason: str) -> None:
        """Skip what ``reason`` names, as an error."""
        self.skipped.append(reason)
        self.errors.append(reason)


def recordings_in(path: str | os.PathLike) -> list[Path]:
    """``path`` itself if it is a file, else every ``*.mcap`` below it, sorted, but for the
    hidden ones (:func:`teleop.output_set.is_hidden`: an interrupted copy's temporary file)."""
    path = Path(path)
    if path.is_dir():
        # A named pipe or a device named *.mcap is kept (not is_file()): opening it refuses it
        # by name, so it is listed as unreadable rather than silently left out.
        return sorted(p for p in path.rglob("*.mcap") if p.exists() and not p.is_dir()
                      and not any(is_hidden(Path(part)) for part in p.relative_to(path).parts))
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


def robot_note_arrays_of(recording: Recording) -> dict[str, np.ndarray]:
    """The note of the robot a station recording's references were made for (the station's
    robot: keys :data:`teleop.robot.target.ROBOT_NOTE_KEYS` of its ``teleop.recording``
    metadata record), as members of the exported files; {} for a recording without one."""
    from teleop.robot.target import ROBOT_NOTE_KEYS

    from .recorder import RECORDING_METADATA

    for name, values in recording.metadata:
        if name == RECORDING_METADATA:
            return {key: np.array(str(values[key])) for key in ROBOT_NOTE_KEYS if key in values}
    return {}


def save_with_arrays(trajectory: ReferenceTrajectory, path: Path, arrays: dict[str, np.ndarray]) -> None:
    """``trajectory.save_npz(path)`` with ``arrays`` added to the same file (``path``: the
    export's temporary file, see :class:`teleop.output_set.OutputSet`)."""
    # The trajectory's keys are taken as save_npz writes them, so its format has one owner.
    buffer = io.BytesIO()
    trajectory.save_npz(buffer)
    buffer.seek(0)
    with np.load(buffer, allow_pickle=False) as saved:
        keys = dict(saved)
    # mypy checks **arrays against savez_compressed's `allow_pickle: bool` too (no array key is named so).
    np.savez_compressed(path, **keys, **arrays)  # type: ignore[arg-type]


#: Seconds of recording an export reads before it shows a progress bar: a shorter one ends
#: before a bar would tell anything (a 166 MB recording's export took 12 s), and a log or a
#: script's stderr is spared the bar.
PROGRESS_AFTER_S = 60

#: Longest gap between an episode's samples that is exported [s]: the robot station's default
#: --stale-timeout, after which it no longer follows the commands either.
DEFAULT_MAX_GAP_S = 0.5

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


@dataclass
class _Planned:
    """A recording to export: its file, its output name (see the module docstring), the
    opened recording and its episodes (read once, before anything is written)."""

    file: Path
    name: str
    recording: Recording
    episodes: list[Episode]

    def exported(self, topic: str) -> list[Episode]:
        """The episodes an export of ``topic`` writes (unless skipped when read): the labelled
        ones, if the recording has the channel."""
        return [ep for ep in self.episodes if ep.task] if topic in self.recording.channels else []

    def file_name(self, episode: Episode) -> str:
        return f"{self.name}_{episode.number}.npz"


def _episode_name(file: Path, episode: Episode) -> str:
    """How messages name an episode: ``session.mcap#episode2``."""
    return f"{file.name}#episode{episode.number}"


def _quoted(task: str) -> str:
    return f"'{printable_label(task)}'"


def _check_shared_folders(planned: list[_Planned], output_dir: Path, topic: str) -> None:
    """Refuse (ValueError, before anything is written) labels that would share a task folder
    (see :func:`task_folder_name`): ``pick up`` and ``pick_up``, or two emoji (both
    ``unnamed``), were written to one folder, and ``teleop train`` learned them as one task.
    ``--force`` does not change this: it replaces files, it does not merge tasks."""
    labels: dict[str, dict[str, list[str]]] = {}   # folder -> label -> episodes
    for plan in planned:
        for episode in plan.exported(topic):
            labels.setdefault(task_folder_name(episode.task), {}).setdefault(episode.task, []).append(
                _episode_name(plan.file, episode))
    shared = [(folder, by_label) for folder, by_label in labels.items() if len(by_label) > 1]
    if not shared:
        return
    said = "; ".join(f"{output_dir / folder}/ would get " + " and ".join(
        f"{_quoted(task)} ({_listed(episodes)})" for task, episodes in by_label.items()) for folder, by_label in shared)
    raise ValueError(f"task labels that differ would be exported to one folder, which teleop train learns as one "
                     f"task: {said}; relabel them (`teleop dataset label FILE --episode N --task NAME`, a name of "
                     "letters, digits and _ - + .) or export them separately; nothing written")


def _overwrite_problems(planned: list[_Planned], output_dir: Path, topic: str) -> list[str]:
    """Why the export would replace an exported file that holds an episode of another
    recording, or of this recording's other channel than ``topic`` (refused without
    ``force``, before anything is written): two recordings of the same name exported in
    turn into one folder (``a/operator.mcap``, then ``b/operator.mcap``) replaced the first
    one's demonstrations without a word, and so did a robot recording's compensated
    commands exported after its delivered ones (the same file names). Re-exporting the same
    recording and channel is allowed, from any working folder (the files name the recording
    by its resolved path), and a damaged file (unreadable: nothing in it is lost) is
    replaced."""
    others, channels = [], []
    for plan in planned:
        # A file exported before the files named their channel holds the recording's only
        # references channel if it has one; of a robot recording's two, which is unknown.
        held = reference_channels(plan.recording)
        unnamed = held[0] if len(held) == 1 else None
        for episode in plan.exported(topic):
            out = output_dir / task_folder_name(episode.task) / plan.file_name(episode)
            if out.exists():
                earlier = _exported_from(out)
                if earlier is None:
                    continue
                if not _same_episode(*earlier[:2], plan.file, episode.number):
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
    return problems


def _stale_copies(plan: _Planned, episode: Episode, output_dir: Path) -> list[Path]:
    """Files of ``episode`` in the task folders of ``output_dir`` other than its label's: an
    export made before it was relabelled (``teleop dataset label --episode N``). Left
    there, the one demonstration trained both tasks. Known by the name the export gives it
    and the recording and episode stored in the file; an unreadable file is not known to be
    one, and is left alone."""
    if not output_dir.is_dir():
        return []
    folder = task_folder_name(episode.task)
    stale = []
    for other in sorted(output_dir.iterdir()):
        candidate = other / plan.file_name(episode)
        if other.name == folder or not other.is_dir() or not candidate.is_file():
            continue
        earlier = _exported_from(candidate)
        if earlier is not None and _same_episode(*earlier[:2], plan.file, episode.number):
            stale.append(candidate)
    return stale


def _non_finite(trajectory: ReferenceTrajectory) -> str | None:
    """Where a trajectory first holds NaN or inf ("frame 12 of 300 (r.hand x)"), or None:
    ``teleop train`` refuses such a take (in the words of :func:`teleop.takes.load_take`), so
    the export says it of the episode, not the training of a file later."""
    bad = ~np.isfinite(trajectory.values).all(axis=1) | ~np.isfinite(trajectory.times)
    if not bad.any():
        return None
    frame = int(np.argmax(bad))
    columns = np.flatnonzero(~np.isfinite(trajectory.values[frame]))
    signal = "time" if not math.isfinite(trajectory.times[frame]) else ", ".join(FLAT_LABELS[c] for c in columns)
    return f"non-finite values (NaN or inf) at frame {frame} of {len(bad)} ({signal})"


class _ReadProgress:
    """A progress bar of the log time an export reads, in whole seconds: one long episode
    moves it as its messages are read (see :attr:`Recording.on_message`), not only once
    done (a 166 MB recording's export ran 12 s without a word). An episode's window is
    read once per :func:`_reads`."""

    def __init__(self, bar, total: int) -> None:
        self._bar = bar
        self._total = total               # the bar's end [s]: the episodes' windows, read as often as read
        self._done = 0.0                  # seconds of the episodes read to the end
        self._window = (0, 0)             # [start, stop] of the episode being read [ns]
        self._reads = 1                   # times it is read
        self._read = 0                    # reads of it finished
        self._at = 0.0                    # seconds read of the current read
        self._shown = 0

    def begin(self, start_ns: int, stop_ns: int, reads: int) -> None:
        """The reads of an episode's window [start_ns, stop_ns] begin."""
        self._window, self._reads, self._read, self._at = (start_ns, stop_ns), reads, 0, 0.0

    def next_read(self) -> None:
        """The episode's window is read again (the robot's states after the references)."""
        self._read, self._at = min(self._read + 1, self._reads - 1), 0.0

    def __call__(self, log_ns: int) -> None:
        start, stop = self._window
        at = (min(max(log_ns, start), stop) - start) * 1e-9
        if at > self._at:                 # messages come in file order: nearly, not exactly, time order
            self._at = at
            self._show(self._done + self._read * (stop - start) * 1e-9 + at)

    def end(self) -> None:
        """The episode is done (written, or skipped): all its reads count."""
        start, stop = self._window
        self._done += self._reads * (stop - start) * 1e-9
        self._window, self._read, self._at = (0, 0), 0, 0.0
        self._show(self._done)

    def complete(self) -> None:
        """Everything was read: the bar at its end (the seconds counted whole fall short of it)."""
        self._show(self._total)

    def _show(self, seconds: float) -> None:
        whole = min(int(seconds), self._total)
        if whole > self._shown:
            self._bar.update(whole - self._shown)
            self._shown = whole


def _reads(plan: _Planned) -> int:
    """How many times an export reads each episode's window of ``plan``: its references,
    and the robot's states when :func:`robot_arrays` reads them."""
    info = plan.recording.channels.get(ROBOT_STATE)
    return 2 if info is not None and info.schema_name == ROBOT_STATE_SPEC.schema_name else 1


def _failure(exc: BaseException) -> str:
    """The reason of an episode or recording that could not be exported: the message, with
    the file when the OS names one ("OUT/...: File name too long")."""
    if isinstance(exc, OSError) and exc.filename is not None and str(exc.filename) not in str(exc.strerror or ""):
        return f"{exc.filename}: {exc.strerror or exc}"
    return str(exc).strip() or type(exc).__name__


def export_episodes(sources: str | os.PathLike | Iterable[str | os.PathLike], output_dir: str | os.PathLike,
                    channel: str = "references", *, use_message_time: bool = False,
                    force: bool = False, progress: bool = False,
                    max_gap_s: float = DEFAULT_MAX_GAP_S) -> ExportResult:
    """Write one ReferenceTrajectory .npz per labelled episode of the given recordings.

    Args:
        sources: a recording, a directory of recordings, or several of either.
        output_dir: root of the per-task folders.
        channel: the RobotReferences channel to export ("references", "compensated"...).
        use_message_time: time samples by their own ``t`` instead of their log time.
        force: replace files exported from other recordings, or from another channel of the
            same recording (see :func:`_overwrite_problems`), and remove the files of
            episodes exported under an earlier label (see :func:`_stale_copies`).
        progress: show a progress bar on stderr (the log time read), when there is more than
            :data:`PROGRESS_AFTER_S` to read.
        max_gap_s: an episode whose samples are further apart than this somewhere [s] is
            skipped and said (``math.inf``: exported whatever its gaps).

    A robot recording's files also hold its joint commands and watchdog and compensation
    states (see the module docstring). A recording or episode that cannot be read, and a
    file that cannot be written, is skipped and listed in ``errors`` (the others are
    exported).

    Raises ValueError, before writing anything, if two recordings would get the same output
    names (see the module docstring), if two labels would get one folder, or, without
    ``force``, if a file there holds an episode of another recording or another channel's
    export of one of these, or an episode exported under its earlier label.
    """
    if isinstance(sources, (str, os.PathLike)):
        sources = [sources]
    files = _named_recordings(sources)
    output_dir = Path(output_dir)
    topic = resolve_topic(channel)
    result = ExportResult()
    planned: list[_Planned] = []
    for file, recording_name in files:
        try:
            recording = open_recording(file)
            episodes = recording.episodes()
        except (RecordingFormatError, OSError) as exc:  # one damaged file does not stop the others
            result.failed(f"{file.name}: {_failure(exc)}")
            continue
        planned.append(_Planned(file, recording_name, recording, episodes))
    _check_shared_folders(planned, output_dir, topic)
    problems = [] if force else _overwrite_problems(planned, output_dir, topic)
    stale = {(plan.name, episode.number): copies for plan in planned for episode in plan.exported(topic)
             if (copies := _stale_copies(plan, episode, output_dir))}
    if stale and not force:
        listed = [f"{path} ({_episode_name(plan.file, episode)}, now {_quoted(episode.task)})"
                  for plan in planned for episode in plan.exported(topic)
                  for path in stale.get((plan.name, episode.number), ())]
        problems.append(f"{len(listed)} file(s) in {output_dir} hold episodes exported under an earlier label, "
                        f"which teleop train would learn as both tasks: {_listed(listed)}; pass --force to remove "
                        "them as the episodes are written to their new folders, or export to another -o")
    if problems:
        raise ValueError("; and ".join(problems))
    total = math.ceil(sum(episode.duration_s * _reads(plan) for plan in planned for episode in plan.exported(topic)))
    with progress_bar(total=total, desc="exporting", enabled=progress and total > PROGRESS_AFTER_S) as bar:
        bar.unit = "s"                    # of recording read
        reading = _ReadProgress(bar, total)
        # One set: the files appear (and the stale copies go) together once every episode is
        # done, so an interrupted export of several recordings leaves the earlier export whole.
        with OutputSet() as outputs:
            for plan in planned:
                _export_recording(plan, output_dir, channel, topic, use_message_time, max_gap_s, stale, reading,
                                  result, outputs)
        reading.complete()
    return result


def _export_recording(plan: _Planned, output_dir: Path, channel: str, topic: str, use_message_time: bool,
                      max_gap_s: float, stale: dict[tuple[str, int], list[Path]], reading: _ReadProgress,
                      result: ExportResult, outputs: OutputSet) -> None:
    """Write the labelled episodes of one recording (see :func:`export_episodes`) into
    ``outputs``, and what became of them into ``result``; an episode that cannot be read
    or written is skipped as an error."""
    file, recording = plan.file, plan.recording
    if not recording.complete:
        result.incomplete.append(file)
    if not plan.episodes:
        result.skipped.append(f"{file.name}{NO_EPISODES}")
        return
    others = reference_channels(recording)
    missing = f"no channel {topic}" + (f" (references are on {', '.join(others)})" if others else "")
    for episode in plan.episodes:
        name = _episode_name(file, episode)
        if not episode.task:
            result.skipped.append(f"{name}{NO_TASK_LABEL}")
            continue
        if topic not in recording.channels:
            result.skipped.append(f"{name}: {missing}")
            continue
        reading.begin(episode.start_ns, episode.stop_ns, _reads(plan))
        recording.on_message = reading
        try:
            out = _export_episode(plan, episode, output_dir, channel, topic, use_message_time, max_gap_s, reading,
                                  result, outputs)
        except (RecordingFormatError, OSError, ValueError) as exc:   # damaged data, a file not written
            result.failed(f"{name}: {_failure(exc)}")
            continue
        finally:
            recording.on_message = None
            reading.end()
        if out is None:
            continue
        result.written.append(out)
        copies = stale.get((plan.name, episode.number), ())       # only once its new file is there
        outputs.remove_with(copies)
        result.removed.extend(copies)


def _export_episode(plan: _Planned, episode: Episode, output_dir: Path, channel: str, topic: str,
                    use_message_time: bool, max_gap_s: float, reading: _ReadProgress, result: ExportResult,
                    outputs: OutputSet) -> Path | None:
    """Write one episode's file into ``outputs``; None (and the reason in ``result``) when it
    is skipped."""
    file, recording = plan.file, plan.recording
    name = _episode_name(file, episode)
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
        return None
    if len(trajectory) < MIN_TAKE_FRAMES:
        # `teleop train` refuses such a take, and with it the whole folder: a 0.05 s episode
        # (`teleop record --duration 0.05 --task T`, a short --start..--end) was written, and
        # training from the export then failed on it, to be found and deleted by hand.
        result.skipped.append(f"{name}: {len(trajectory)} samples on {channel} "
                              f"({trajectory.times[-1] - trajectory.times[0]:.2g} s): not exported, as teleop train "
                              f"refuses a take of fewer than {MIN_TAKE_FRAMES} frames (label a longer window)")
        return None
    problem = _non_finite(trajectory)
    if problem is not None:
        result.skipped.append(f"{name}: {problem}: not exported (teleop train refuses such a take)")
        return None
    gaps = np.diff(trajectory.times)
    if gaps.max() > max_gap_s:
        at = int(np.argmax(gaps))
        result.skipped.append(f"{name}: no sample on {channel} for {gaps[at]:.2f} s from {trajectory.times[at]:.2f} s "
                              f"into the episode (a damaged chunk skipped, or a link that went quiet): not exported, "
                              f"as teleop train would learn a straight line across it (trim it out with `teleop "
                              f"dataset label`, or --max-gap {math.ceil(gaps[at] * 10) / 10:g} exports it)")
        return None
    reading.next_read()
    arrays = {**robot_arrays(recording, episode.start_ns, episode.stop_ns + 1), **robot_note_arrays_of(recording),
              RECORDING_KEY: np.array(str(file.resolve())), CHANNEL_KEY: np.array(topic)}
    out = output_dir / task_folder_name(episode.task) / plan.file_name(episode)
    outputs.write(out, lambda tmp: save_with_arrays(trajectory, tmp, arrays))
    return out
