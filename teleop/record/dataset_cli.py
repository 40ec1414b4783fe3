"""``teleop dataset``: list, inspect, plot, trim, label, export and recover recordings.

::

    teleop dataset list DIR                                   recordings and their episodes
    teleop dataset inspect FILE                               channels, rates, counts, duration
    teleop dataset plot FILE [-o PNG] [--start S] [--end E]   one PNG summarising it (default FILE.png)
    teleop dataset trim FILE --start S --end E -o OUT         keep S..E seconds from the start
    teleop dataset label FILE --task NAME [--start S] [--end E] [-o OUT]   add a labelled episode
    teleop dataset label FILE --episode N --task NAME [-o OUT]             relabel episode N
    teleop dataset export FILE|DIR... [--channel references] -o OUTDIR
    teleop dataset recover FILE -o OUT                        complete copy of a crashed file

A station recording (``teleop operator --record FILE``) has no episodes unless the record
button was pressed: ``label FILE --task NAME`` makes all of it (or ``--start``..``--end``,
seconds from the first message, end inclusive) one labelled episode, which ``export`` then
writes as training data.

Editing and MCAP: the format is append-only, so ``trim`` and ``label`` write a new complete
file (``label`` without ``-o`` replaces FILE through a temporary file and an atomic rename,
keeping every message; a FILE without its footer, cut short by a crash, needs ``-o`` or
``--force``, as what is not readable yet would be lost). An existing ``-o`` file is never
overwritten without ``--force``, and a file a recorder is still writing (its lock) not even
with it: the rest of the session would be lost.
Crashed recordings are read as far as they are intact, by every subcommand.

``plot`` draws, on one time axis (seconds from the first message), the panels the recording
has data for: hand references (operator: ``/references``; robot: delivered dashed,
compensated solid), commanded vs measured angles of the joints that moved most with the RMS
tracking error per joint group, CoP and CoM, the watchdog and compensation states and the
episodes as coloured bands, and the delays in ``/network/stats``. Long recordings are read
in windows and each drawn series is decimated to a few thousand samples (errors and bands
use every sample): see :mod:`teleop.record.plot`.

``export`` writes ``OUTDIR/<task>/<recording>_<episode>.npz`` ReferenceTrajectory files, one
folder per task: the layout ``teleop train`` reads. Files from a robot station's recording
also hold, per control tick, the joint angles the controller commanded and the watchdog and
compensation states (``joint_commands``, ``watchdog``, ``compensation`` at ``robot_times``:
see :mod:`teleop.record.export`); ``inspect`` says whether a recording has them. A file
exported from another recording, or from another channel of the same one (a robot
recording's delivered and compensated commands get the same names), is kept unless
``--force``: one channel per OUTDIR; so is the file of an episode relabelled since it was
exported, in its earlier task's folder (``--force`` removes it once the new one is written).
Two labels that would share a folder (``pick up`` and ``pick_up``) are refused: ``teleop
train`` would learn them as one task. A recording or episode that cannot be read is skipped
and said, the others exported, and the exit code is 1; an episode with no sample for longer
than ``--max-gap`` (a damaged chunk skipped, a link gone quiet), or with fewer samples than
``teleop train`` takes of a take, is skipped and said by rule (exit code 0 if others were
written, 1 if nothing was).
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
from collections.abc import Callable
from pathlib import Path

from teleop.cli import describe, end_output_quietly, stdout_reader_gone
from teleop.cli_types import (PreconditionError, UsageError, int_at_least, nonempty_path, positive_or_inf,
                              recording_seconds, task_label)
from teleop.data_args import check_out_folder, check_output_location, check_recording_name
from teleop.takes import MIN_TAKE_FRAMES

from .channels import EPISODES, ROBOT_STATE
from .file_lock import being_written
from .export import DEFAULT_MAX_GAP_S, NO_EPISODES, NO_TASK_LABEL, export_episodes, recordings_in, reference_channels
from .labels import add_episode, printable_label, relabel_episode
from .mcap_index import RecordingFormatError
from .messages import RobotStateSample
from .plot import draw_plot, gather_plot_data
from .reader import Recording, open_recording
from .recovery import recover
from .rewrite import write_copy


def _state(recording: Recording) -> str:
    """"complete", or "incomplete" with why: a file without its footer is either still being
    written (a live session: its recorder's lock says so) or was cut short by a crash; its
    readable part is listed (``dataset recover`` writes a complete copy of it)."""
    if recording.complete:
        return "complete"
    if being_written(recording.path):
        return "incomplete (still being written: a recorder has it open)"
    return "incomplete" + (f" ({recording.problem})" if recording.problem else
                           " (no footer: cut short, or written by a recorder that does not lock its file)")


def _task(task: str) -> str:
    """An episode's label as printed: escaped where a terminal cannot print it (a label read
    from a file may hold a newline or an escape sequence, which broke the tables)."""
    return printable_label(task) if task else "(unlabelled)"


def _episode_number(text: str) -> int:
    """``--episode N``: an episode number, 0 or more (-1 was "no episode -1", exit code 1)."""
    return int_at_least(text, 0)


def cmd_list(args: argparse.Namespace) -> int:
    """Recordings under each DIR with their duration and episodes."""
    roots = [Path(d) for d in args.directories]
    found = [(root, recordings_in(root)) for root in roots]      # every path checked before any is listed
    # Each file once: one given twice (`list d d`, a folder and a file in it) was listed twice,
    # as two recordings (`export` reads it once).
    seen: set[Path] = set()
    entries = []
    for root, in_root in found:
        for file in in_root:
            if file.resolve() not in seen:
                seen.add(file.resolve())
                entries.append((root, file))
    files = [file for _, file in entries]
    if not files:
        print(f"{', '.join(map(str, roots))}: no .mcap recordings")
        return 0
    # Below one folder, named from it; from several, by their paths (two may share a name).
    names = [str(file.relative_to(root) if root.is_dir() and len(roots) == 1 else file) for root, file in entries]
    width = max(len(name) for name in names)
    unreadable = 0
    for file, name in zip(files, names):
        try:
            recording = open_recording(file)
            episodes = recording.episodes()
        except (RecordingFormatError, OSError) as exc:   # one damaged file: the others are still listed
            print(f"{name:{width}s}  unreadable: {describe(exc)}")
            unreadable += 1
            continue
        # A file without its footer was not recovered (nothing was): it is being written, or
        # was cut short, and what is listed is its readable part.
        print(f"{name:{width}s}  {recording.duration_s:8.2f} s  {recording.message_count:7d} msgs  "
              f"{len(episodes)} episode(s)  {'complete' if recording.complete else 'incomplete (no footer)'}")
        for ep in episodes:
            note = "" if ep.stopped else "  (no stop marker: recording ended)"
            print(f"    #{ep.number:<3d} {_task(ep.task):20s} {ep.duration_s:8.2f} s{note}")
    if unreadable:
        # Listed, and an exit code a script can see (it was 0, a single unreadable file too).
        print(f"teleop dataset list: error: {unreadable} of {len(files)} recording(s) unreadable (above)",
              file=sys.stderr)
        return 1
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    """Channels, schemas, counts, rates, duration and episodes of one recording."""
    recording = _open_file(args.file)
    # A complete file's chunks are otherwise read only by the commands that need them:
    # checked here, a damaged one is reported by the command meant to find what is wrong.
    damage = recording.index.verify_chunks(progress=True) and recording.index.damage_report()
    recording.index.warn_damaged = False   # said below, not again as a warning
    print(f"file:      {recording.path}")
    print(f"state:     {_state(recording)}" + (f", {recording.discarded_bytes} bytes dropped"
                                               if recording.discarded_bytes else ""))
    if damage:
        print(f"damaged:   {damage}")
    # With damaged chunks, the counts are what can be read (what `recover` copies): the
    # summary's counted the lost messages too, beside the line saying they were lost.
    readable = recording.index.readable_counts() if damage else None
    messages = (f"{recording.index.readable_message_count} readable of {recording.message_count}" if damage
                else f"{recording.message_count}")
    print(f"duration:  {recording.duration_s:.3f} s   messages: {messages}   "
          f"start: {recording.start_ns * 1e-9:.3f} s (log time)")
    print(f"\n{'topic':28s} {'schema':26s} {'count':>7s} {'rate [Hz]':>10s} {'first [s]':>10s} {'last [s]':>10s}")
    origin = recording.start_ns
    for info in recording.channels.values():
        first = (info.first_ns - origin) * 1e-9 if info.count else float("nan")
        last = (info.last_ns - origin) * 1e-9 if info.count else float("nan")
        count = info.count if readable is None else sum(readable.get(i, 0) for i in info.channel_ids)
        print(f"{info.topic:28s} {info.schema_name:26s} {count:7d} {info.rate_hz:10.2f} "
              f"{first:10.3f} {last:10.3f}")
    robot = _robot_state_summary(recording)
    if robot:
        print(f"\n{robot}")
    episodes = recording.episodes()
    if episodes:
        print("\nepisodes:")
        for ep in episodes:
            print(f"    #{ep.number:<3d} {_task(ep.task):20s} {(ep.start_ns - origin) * 1e-9:9.3f} s"
                  f" .. {(ep.stop_ns - origin) * 1e-9:9.3f} s  ({ep.duration_s:.3f} s)"
                  + ("" if ep.stopped else "  no stop marker"))
    if recording.metadata:
        print("\nmetadata:")
        for name, values in recording.metadata:
            print(f"    {name}: " + ", ".join(f"{k}={v}" for k, v in values.items()))
    return 0


def _robot_state_summary(recording: Recording) -> str | None:
    """What the robot states hold besides the measured joints, from the first message (one
    decoded, however long the recording); None without our robot states."""
    info = recording.channels.get(ROBOT_STATE)
    if info is None or not info.count:
        return None
    try:
        _, state = next(recording.decoded(ROBOT_STATE), (0, None))
    except RecordingFormatError as exc:   # inspect is how one finds out what is wrong: go on
        return f"robot state: {exc}"
    if not isinstance(state, RobotStateSample):   # none readable, or another tool's /robot/state
        return None
    extras = [what for what, value in (("joint commands", state.joint_commands), ("watchdog state", state.watchdog),
                                       ("compensation state", state.compensation)) if value is not None]
    joints = f"robot state: {len(state.joint_positions)} joints"
    if not extras:
        return f"{joints}; no joint commands, watchdog or compensation state (not recorded)"
    return f"{joints}; per tick also: {', '.join(extras)}"


def _open_file(file: str) -> Recording:
    """The recording FILE names; a folder is refused in words that say what to give (it
    was "FILE: Is a directory", but for ``plot``)."""
    if Path(file).is_dir():
        raise PreconditionError(f"{file} is a folder: give one recording (`teleop dataset list {file}` "
                                "lists those in it)")
    return open_recording(file)


def _check_output(output: Path, force: bool) -> None:
    """Refuse an output that is a folder, or an existing file without --force (a recording
    is often the only copy of a session), or one whose folder cannot be written in (found
    before the copy, not after it, as "/proc/.x.<hex>.tmp.mcap: No such file or directory")."""
    if output.is_dir():
        raise PreconditionError(f"-o {output} is a folder: give a file name")
    check_output_location(output, "-o")     # below a file: the OS's "File exists" when written
    check_out_folder(output.parent, "-o", file=output)
    _refuse_live_recording(output, f"-o {output}", "choose another -o")
    if output.exists() and not force:
        raise ValueError(f"-o {output} exists: pass --force to overwrite it, or choose another -o")


def _refuse_live_recording(path: Path, named: str, instead: str) -> None:
    """Refuse to replace a file a live recorder holds (its lock, :mod:`.file_lock`), --force or
    not: the recorder goes on writing into the file it opened, now unlinked, and the rest of the
    session is lost (``trim``/``label --force`` over a station's live --record kept the 3 s it
    had so far, and the station ended with "this session's recording is lost"). The recorders
    refuse such a file the same way."""
    if being_written(path):
        raise ValueError(f"{named} is being written by a recorder (a session under way): replacing it would lose "
                         f"the rest of the session, --force or not; {instead}")


def _window_ns(recording: Recording, args: argparse.Namespace) -> tuple[int | None, int | None]:
    """Log-time window [start, end) [ns] of --start/--end (seconds from the first message,
    --end inclusive); None = unbounded."""
    origin = recording.start_ns
    start_ns = None if args.start is None else origin + round(args.start * 1e9)
    # --end is inclusive: the window passed on is [start, end + 1 ns).
    end_ns = None if args.end is None else origin + round(args.end * 1e9) + 1
    if start_ns is not None and end_ns is not None and end_ns <= start_ns:
        raise UsageError(f"--end ({args.end} s) must not come before --start ({args.start} s)")
    return start_ns, end_ns


def _check_window_has_messages(recording: Recording, args: argparse.Namespace, start_ns: int | None,
                               end_ns: int | None, what: str) -> None:
    """Refuse a window without messages (an empty copy or figure helps nobody); ``what`` is
    "to copy", "to plot"... Episode markers do not count: a copy makes its own at the window's
    edges, and a copy of those alone held no data."""
    data = [topic for topic in recording.channels if topic != EPISODES]
    if data and next(iter(recording.messages(data, start_ns, end_ns)), None) is not None:
        return
    window = (f"between --start {args.start:g} s and --end {args.end:g} s" if args.end is not None and
              args.start is not None else f"from --start {args.start:g} s on" if args.start is not None else
              f"up to --end {args.end:g} s" if args.end is not None else what)
    raise ValueError(f"{args.file}: nothing {window} (the recording lasts {recording.duration_s:.3f} s); "
                     "nothing written")


def cmd_trim(args: argparse.Namespace) -> int:
    """Copy the part between --start and --end (seconds from the first message)."""
    check_recording_name(args.output, "-o")
    recording = _open_file(args.file)
    _check_output(args.output, args.force)
    start_ns, end_ns = _window_ns(recording, args)
    _check_window_has_messages(recording, args, start_ns, end_ns, "to copy")
    cut = _episodes_cut(recording, start_ns, end_ns)     # before the copy may replace the file
    out = write_copy(recording, args.output, start_ns=start_ns, end_ns=end_ns,
                     operation=f"trim start={args.start} end={args.end} (s from first message)")
    print(f"{out}: {open_recording(out).message_count} messages")
    for line in cut:
        print(f"teleop dataset trim: warning: {line}", file=sys.stderr)
    return 0


def _episodes_cut(recording: Recording, start_ns: int | None, end_ns: int | None) -> list[str]:
    """The labelled episodes the window [start_ns, end_ns) cuts into, one line each: the
    copy keeps the part inside, as a whole episode (a 4.9 s one trimmed to a 1.2 s fragment
    was listed like any other, and exported as a take of its task)."""
    lines = []
    origin = recording.start_ns
    for episode in recording.episodes():
        inside_start = episode.start_ns if start_ns is None else max(episode.start_ns, start_ns)
        inside_stop = episode.stop_ns if end_ns is None else min(episode.stop_ns, end_ns - 1)
        if inside_stop < inside_start or (inside_start, inside_stop) == (episode.start_ns, episode.stop_ns):
            continue                                  # outside the window, or whole inside it
        label = f" {episode.task!r}" if episode.task else ""
        lines.append(f"episode #{episode.number}{label} ({(episode.start_ns - origin) * 1e-9:.2f} s .. "
                     f"{(episode.stop_ns - origin) * 1e-9:.2f} s) is cut by the window: the copy keeps "
                     f"{(inside_stop - inside_start) * 1e-9:.2f} s of its {episode.duration_s:.2f} s"
                     + (", a fragment of the task if exported" if episode.task else ""))
    return lines


def cmd_plot(args: argparse.Namespace) -> int:
    """One PNG summarising a recording (see :mod:`teleop.record.plot`)."""
    if args.output is not None and args.output.suffix.lower() != ".png" and not args.output.is_dir():
        # A folder: _check_output says so.
        raise UsageError(f"-o {args.output}: the plot is a PNG image: give a .png file name")
    recording = _open_file(args.file)
    output = Path(args.output) if args.output is not None else recording.path.with_suffix(".png")
    _check_plot_output(output, recording, args.force, default=args.output is None)
    if not recording.message_count:
        raise ValueError(f"{args.file}: the recording holds no messages: nothing to plot")
    start_ns, end_ns = _window_ns(recording, args)
    if args.end is not None and args.end <= (args.start or 0.0):
        # One instant: every panel a single point, nothing a figure can show.
        raise UsageError(f"--end {args.end:g} s: a plot shows a time span: give an --end after --start "
                         f"({args.start or 0:g} s)")
    _check_window_has_messages(recording, args, start_ns, end_ns, "to plot")
    data = gather_plot_data(recording, args.start, args.end, progress=True)
    if not data.panels:
        window = "" if args.start is None and args.end is None else " in the window"
        raise ValueError(f"{args.file}: nothing to plot{window}: no hand references, robot states, episodes or "
                         f"network delays (channels: {', '.join(sorted(recording.channels))}); nothing written")
    print(draw_plot(data, output))
    return 0


def _check_plot_output(output: Path, recording: Recording, force: bool, default: bool = False) -> None:
    """Where ``plot`` writes: a .png file in an existing folder, not over the recording (even
    with --force), nor over another file without --force. ``default``: no -o was given
    (``output`` is the file next to the recording), which the messages say."""
    if output.exists() and output.resolve() == recording.path.resolve():
        raise ValueError(f"-o {output} is the recording itself: choose another -o")
    if default and output.exists() and not force:
        # No -o given: say so, not "-o X exists".
        raise ValueError(f"{output} exists (the plot's default file, next to the recording): pass --force to "
                         "overwrite it, or give -o")
    _check_output(output, force)
    if not output.parent.is_dir():               # before the work, not when the figure is saved
        raise ValueError(f"-o {output}: no folder {output.parent}")


def _label_output(args: argparse.Namespace, recording: Recording) -> Path:
    """Where ``label`` writes: -o OUT (not over another file without --force), or FILE itself.

    Replacing FILE keeps every readable message, so it is the default; but not for a FILE
    without its footer (see :func:`_check_complete`).
    """
    output = Path(args.output or args.file)
    if output.exists() and output.resolve() == recording.path.resolve():
        if not args.force:
            _check_complete(args.file, recording)
        # --force replaces a crashed FILE, not one a recorder is still writing (see _refuse_live_recording).
        _refuse_live_recording(output, str(args.file), "label it once the session is over, or write a labelled "
                               "copy of what it holds so far with -o OUT")
        return output
    _check_output(output, args.force)
    return output


def _check_complete(file: str, recording: Recording) -> None:
    """Refuse to replace a FILE without its footer: a recorder still writing it would go on
    writing to the replaced file, its data lost, and a crashed one would lose its damaged
    tail, which a better repair might still read."""
    if recording.complete:
        return
    tail = f", {recording.discarded_bytes} bytes of damaged tail" if recording.discarded_bytes else ""
    raise ValueError(f"{file} is incomplete (no MCAP footer{tail}: still being written, or cut short by a "
                     "crash): replacing it would lose what is not readable yet; label it once it is closed, "
                     f"a crashed one after `teleop dataset recover {file} -o OUT`, or write the labelled copy "
                     # --force does not replace a file a recorder holds (_refuse_live_recording): not offered then.
                     "with -o OUT" + (" (a recorder has it open: a session under way)" if being_written(file) else
                                      " (--force: replace it anyway)"))


def cmd_label(args: argparse.Namespace) -> int:
    """Label episode N, or add a labelled episode (all of FILE, or --start..--end)."""
    window = args.start is not None or args.end is not None
    if args.episode is not None and window:
        raise UsageError("--episode N relabels an existing episode and --start/--end add a new one: "
                         "give one or the other")
    if args.start is not None and args.end is not None and args.end < args.start:
        raise UsageError(f"--end ({args.end} s) must not come before --start ({args.start} s)")
    if args.start is not None and args.end is not None and args.end == args.start:
        # An instant holds one sample at most: `export` would skip it as too short.
        raise UsageError(f"--end {args.end:g} s: an episode is a time span: give an --end after --start "
                         f"({args.start:g} s)")
    if args.output is not None:
        check_recording_name(args.output, "-o")
    recording = _open_file(args.file)
    output = _label_output(args, recording)
    existing = [ep.number for ep in recording.episodes()]
    if args.episode is not None:
        if not existing:
            raise ValueError(f"{args.file}: no episode {args.episode} (episodes: none): leave out --episode to "
                             "label the whole recording as a new episode (or a part with --start S --end E)")
        episodes, previous = relabel_episode(recording, args.episode, args.task)
        operation = f"label episode {args.episode}: {previous!r} -> {args.task!r}"
        done = f"episode {args.episode} labelled {args.task!r}"
    else:
        if existing and not window:  # "all of it" is ambiguous next to episodes someone marked
            raise ValueError(f"{args.file} has episodes {existing}: relabel one with --episode N, or add a new "
                             "episode with --start S --end E (--start 0: the whole recording)")
        episodes, new = add_episode(recording, args.task, args.start, args.end)
        origin = recording.start_ns
        span = f"{(new.start_ns - origin) * 1e-9:.3f} s .. {(new.stop_ns - origin) * 1e-9:.3f} s"
        _check_new_episode(recording, new, span)
        _check_episode_samples(recording, new, span)
        operation = f"add episode {new.number} {args.task!r}: {span} from the first message"
        done = f"episode {new.number} ({span} from the first message) labelled {args.task!r}"
    out = write_copy(recording, output, episodes=episodes, operation=operation)
    print(f"{out}: {done}")
    return 0


def _check_new_episode(recording: Recording, new, span: str) -> None:
    """Refuse an episode over the very window of one the recording has (the same command run
    twice doubled the episode, and the export the take), and warn of one that overlaps
    another: its samples are then in two takes."""
    origin = recording.start_ns
    for episode in recording.episodes():
        if (episode.start_ns, episode.stop_ns) == (new.start_ns, new.stop_ns):
            raise ValueError(f"{recording.path}: episode {episode.number} ({episode.task or 'unlabelled'}) spans "
                             f"{span} already: relabel it with --episode {episode.number} --task NAME")
        if episode.start_ns <= new.stop_ns and new.start_ns <= episode.stop_ns:
            label = f" {episode.task!r}" if episode.task else ""
            print(f"teleop dataset label: warning: the new episode ({span}) overlaps episode {episode.number}{label} "
                  f"({(episode.start_ns - origin) * 1e-9:.3f} s .. {(episode.stop_ns - origin) * 1e-9:.3f} s): "
                  "exported, the samples they share are in both takes", file=sys.stderr)


def _check_episode_samples(recording: Recording, new, span: str) -> None:
    """Refuse a new episode with fewer than two samples on every references channel:
    ``export`` skips it (a take of one sample shows no motion); warn of one with fewer than
    :data:`MIN_TAKE_FRAMES`, which ``export`` skips too (``teleop train`` refuses it)."""
    channels = reference_channels(recording)
    counts = {topic: sum(1 for _ in itertools.islice(recording.messages(topic, new.start_ns, new.stop_ns + 1),
                                                     MIN_TAKE_FRAMES))
              for topic in channels}
    held = ", ".join(f"{n} on {topic}" for topic, n in counts.items())
    if counts and max(counts.values()) < 2:
        raise ValueError(f"{recording.path}: the new episode ({span}) holds {held}: `export` needs two samples at "
                         "least; give a longer --start..--end; nothing written")
    if counts and max(counts.values()) < MIN_TAKE_FRAMES:
        # Labelled, but `export` skips it (teleop train refuses such a take): said now, not at export.
        print(f"teleop dataset label: warning: the new episode ({span}) holds {held}: `export` skips an episode "
              f"of fewer than {MIN_TAKE_FRAMES} samples (teleop train refuses such a take); give a longer "
              "--start..--end", file=sys.stderr)


def cmd_export(args: argparse.Namespace) -> int:
    """Labelled episodes -> OUTDIR/<task>/<recording>_<episode>.npz."""
    check_out_folder(args.output, "-o")  # before the work, not when the first file is written
    result = export_episodes(args.paths, args.output, args.channel, use_message_time=args.message_time,
                             force=args.force, progress=True, max_gap_s=args.max_gap)
    for path in result.written:
        print(path)
    for path in result.removed:
        print(f"removed {path}: its episode was exported under an earlier label (--force)", file=sys.stderr)
    for reason in result.skipped:
        print(f"skipped {reason}", file=sys.stderr)
    for path in result.incomplete:
        if being_written(path):
            print(f"warning: {path} is still being written (a recorder has it open): its last episode ends where "
                  "the file ends now; export it again once the session is over", file=sys.stderr)
        else:
            print(f"warning: {path} is incomplete (no footer: cut short by a crash): its last episode may end "
                  f"early; `teleop dataset recover {path} -o OUT` makes a complete copy", file=sys.stderr)
    if not result.written:  # nothing exported is worth a failing exit code in scripts, and a reason
        print(f"teleop dataset export: error: {_why_nothing_exported(result.skipped)}", file=sys.stderr)
        return 1
    print(f"{len(result.written)} trajectories written to {args.output}")
    if result.errors:       # a damaged recording among good ones: the others exported, said, and exit 1
        print(f"teleop dataset export: error: {len(result.errors)} recording(s) or episode(s) could not be "
              f"exported (\"skipped\" above); the {len(result.written)} trajectories listed were written",
              file=sys.stderr)
        return 1
    return 0


def _why_nothing_exported(skipped: list[str]) -> str:
    unlabelled = sum(reason.endswith(NO_TASK_LABEL) for reason in skipped)
    without = sum(reason.endswith(NO_EPISODES) for reason in skipped)
    if not skipped:
        return "nothing exported: no .mcap recordings in the given paths"
    if unlabelled or without:
        found = ([f"{without} recording(s) hold no episodes"] if without else []) + \
                ([f"{unlabelled} episode(s) have no task label"] if unlabelled else [])
        return (f"nothing exported: {' and '.join(found)}, and only labelled episodes are "
                "exported; make a recording one labelled episode with `teleop dataset label FILE --task NAME` "
                "(a part of it: add --start S --end E), or label episode N with `teleop dataset label FILE "
                "--episode N --task NAME` (`teleop dataset list` shows the episodes)")
    return "nothing exported: every episode was skipped (reasons above)"


def cmd_recover(args: argparse.Namespace) -> int:
    """Report what a (crashed) recording holds and write a complete copy."""
    check_recording_name(args.output, "-o")
    _check_output(args.output, args.force)
    found = _open_file(args.file)
    # Checked before writing: the messages of damaged chunks are not there to recover.
    damage = found.index.verify_chunks(progress=True) and found.index.damage_report()
    if not found.index.readable_message_count:   # a copy of nothing helps no one
        why = damage or f"no message survived before {found.problem or 'the end of the file'}"
        raise ValueError(f"{args.file}: nothing readable to recover ({why}); no copy written")
    print(recover(args.file, args.output, recording=found).summary())
    if being_written(args.file):    # not crashed: a session under way, which the copy cuts short
        print(f"teleop dataset recover: warning: {args.file} is still being written (a recorder has it open): the "
              "copy holds the session so far; recover it again once the session is over, or it will have its "
              "footer and need no recovery", file=sys.stderr)
    return 0


def _guarded(handler: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Turn expected failures (bad file, unknown channel...) into a message and exit code 1."""
    def run(args: argparse.Namespace) -> int:
        try:
            return handler(args)
        except UsageError as exc:     # options that cannot go together: argparse's exit code
            if os.environ.get("TELEOP_DEBUG"):   # as every command: the traceback, where it happened
                raise
            print(exc.report(f"dataset {args.dataset_command}"), file=sys.stderr)
            return exc.EXIT_CODE
        except (RecordingFormatError, OSError, KeyError, ValueError, TypeError) as exc:
            if isinstance(exc, BrokenPipeError) and stdout_reader_gone():
                return end_output_quietly()   # `teleop dataset inspect FILE | head`: not an error
            if os.environ.get("TELEOP_DEBUG"):
                raise
            # describe(): "FILE: No such file or directory", not "[Errno 2] ...: 'FILE'"
            message = exc.args[0] if isinstance(exc, KeyError) and exc.args else describe(exc)
            print(f"teleop dataset {args.dataset_command}: error: {message}", file=sys.stderr)
            return 1
    run.__doc__ = handler.__doc__
    return run


#: One line per subcommand: its entry in ``teleop dataset -h`` and the description of its own ``-h``.
COMMAND_SUMMARIES: dict[str, str] = {
    "list": "list the recordings below a folder with their duration and episodes (from each file's summary: "
            "`inspect` checks every chunk)",
    "inspect": "show the channels, rates, counts, duration and episodes of a recording",
    "plot": "write one PNG summarising a recording: hand references, commanded vs measured joints, balance, "
            "watchdog/compensation states and episodes, network delays",
    "trim": "copy a time window of a recording to a new file",
    "label": "label an episode with its task, or make all or part of a recording a labelled episode",
    "export": "write the labelled episodes as ReferenceTrajectory .npz files, one folder per task "
              "(the layout `teleop train` reads)",
    "recover": "write a complete copy of a recording cut short by a crash",
}


def _subcommand(sub, name: str, handler: Callable[[argparse.Namespace], int]) -> argparse.ArgumentParser:
    summary = COMMAND_SUMMARIES[name]
    parser = sub.add_parser(name, help=summary, description=f"teleop dataset {name}: {summary}.")
    parser.set_defaults(func=_guarded(handler))
    return parser


def _force(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--force", action="store_true", help="overwrite the output file if it exists")


def add_subcommands(parser: argparse.ArgumentParser) -> None:
    """The subcommands of ``teleop dataset`` (shared by :func:`register` and :func:`main`)."""
    sub = parser.add_subparsers(dest="dataset_command", required=True, metavar="COMMAND")

    p = _subcommand(sub, "list", cmd_list)
    p.add_argument("directories", nargs="+", metavar="DIR",
                   help="folders searched for .mcap files (or recordings), one or more")

    p = _subcommand(sub, "inspect", cmd_inspect)
    p.add_argument("file", metavar="FILE", help="the recording (.mcap)")

    p = _subcommand(sub, "plot", cmd_plot)
    p.add_argument("file", metavar="FILE", help="the recording (.mcap)")
    p.add_argument("-o", "--output", type=nonempty_path, default=None, metavar="PNG",
                   help="the image (default: next to FILE, with the extension .png)")
    p.add_argument("--start", type=recording_seconds, default=None, metavar="S", help="seconds from the first message")
    p.add_argument("--end", type=recording_seconds, default=None, metavar="E",
                   help="seconds from the first message (inclusive)")
    _force(p)

    p = _subcommand(sub, "trim", cmd_trim)
    p.add_argument("file", metavar="FILE", help="the recording (.mcap)")
    p.add_argument("--start", type=recording_seconds, default=None, metavar="S", help="seconds from the first message")
    p.add_argument("--end", type=recording_seconds, default=None, metavar="E",
                   help="seconds from the first message (inclusive)")
    p.add_argument("-o", "--output", required=True, type=nonempty_path, metavar="OUT", help="the trimmed copy (.mcap)")
    _force(p)

    p = _subcommand(sub, "label", cmd_label)
    p.add_argument("file", metavar="FILE", help="the recording (.mcap)")
    p.add_argument("--task", required=True, type=task_label, metavar="NAME",
                   help="task label (the folder `export` writes the episode to)")
    p.add_argument("--episode", type=_episode_number, default=None, metavar="N",
                   help="relabel existing episode N (see list/inspect); without it a new episode is added")
    p.add_argument("--start", type=recording_seconds, default=None, metavar="S",
                   help="new episode: start, seconds from the first message (default: the first message)")
    p.add_argument("--end", type=recording_seconds, default=None, metavar="E",
                   help="new episode: end, seconds from the first message, inclusive (default: the last message)")
    p.add_argument("-o", "--output", type=nonempty_path, default=None, metavar="OUT",
                   help="write a labelled copy here (default: replace FILE atomically, every message kept)")
    p.add_argument("--force", action="store_true",
                   help="overwrite an existing OUT, or replace a FILE without its footer (cut short by a "
                        "crash: what is not readable yet is lost; one a recorder is still writing is refused)")

    p = _subcommand(sub, "export", cmd_export)
    p.add_argument("paths", nargs="+", metavar="FILE|DIR", help="recordings, or folders searched for .mcap files")
    p.add_argument("--channel", default="references",
                   help="RobotReferences channel (default: references; robot recordings: delivered or compensated)")
    p.add_argument("-o", "--output", required=True, type=nonempty_path, metavar="OUTDIR",
                   help="root of the per-task folders")
    p.add_argument("--message-time", action="store_true",
                   help="time samples by their own t (producer clock) instead of the log time (delivered: every "
                        "command at its send time; without it, at its arrival, packets overtaken by a newer one "
                        "left out)")
    p.add_argument("--max-gap", type=positive_or_inf, default=DEFAULT_MAX_GAP_S, metavar="S",
                   help="skip (and say) an episode with no sample for longer than S seconds somewhere: a damaged "
                        "chunk, or a link that went quiet (default %(default)g s, the robot's stale timeout; "
                        "inf: export it anyway)")
    p.add_argument("--force", action="store_true",
                   help="replace files in OUTDIR exported from other recordings of the same name, or from "
                        "another --channel of the same recording, and remove the file an episode relabelled since "
                        "(`label --episode N`) left in its earlier task's folder (re-exporting the same recording "
                        "and channel needs it for nothing else)")

    p = _subcommand(sub, "recover", cmd_recover)
    p.add_argument("file", metavar="FILE", help="the recording (.mcap)")
    p.add_argument("-o", "--output", required=True, type=nonempty_path, metavar="OUT", help="the complete copy (.mcap)")
    _force(p)


def register(subparsers) -> argparse.ArgumentParser:
    """Add ``dataset`` to a ``teleop`` subparsers object; each subcommand sets ``func``."""
    parser = subparsers.add_parser("dataset", help="list, inspect, plot, trim, label, export and recover recordings",
                                   description=__doc__.split("\n\n")[0].replace("``", ""),
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    add_subcommands(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point for ``teleop dataset`` on its own (tests, ``python -m``)."""
    parser = argparse.ArgumentParser(prog="teleop dataset", description=__doc__.split("\n\n")[0].replace("``", ""))
    add_subcommands(parser)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
