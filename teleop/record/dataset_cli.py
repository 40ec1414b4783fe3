"""``teleop dataset``: list, inspect, trim, label, export and recover recordings.

::

    teleop dataset list DIR                                   recordings and their episodes
    teleop dataset inspect FILE                               channels, rates, counts, duration
    teleop dataset trim FILE --start S --end E -o OUT         keep S..E seconds from the start
    teleop dataset label FILE --episode N --task NAME [-o OUT]
    teleop dataset export FILE|DIR... [--channel references] -o OUTDIR
    teleop dataset recover FILE -o OUT                        complete copy of a crashed file

Editing and MCAP: the format is append-only, so ``trim`` and ``label`` write a new complete
file (``label`` without ``-o`` replaces FILE through a temporary file and an atomic rename).
Crashed recordings are read as far as they are intact, by every subcommand.

``export`` writes ``OUTDIR/<task>/<recording>_<episode>.npz`` ReferenceTrajectory files, one
folder per task: the layout ``teleop train`` reads.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from teleop.cli_types import non_negative_float

from .export import export_episodes, recordings_in
from .mcap_index import RecordingFormatError
from .reader import Recording, open_recording
from .recovery import recover
from .rewrite import write_copy


def _state(recording: Recording) -> str:
    if recording.complete:
        return "complete"
    return "recovered" + (f" ({recording.problem})" if recording.problem else " (no footer)")


def _task(task: str) -> str:
    return task or "(unlabelled)"


def cmd_list(args: argparse.Namespace) -> int:
    """Recordings under DIR with their duration and episodes."""
    files = recordings_in(args.directory)
    if not files:
        print(f"{args.directory}: no .mcap recordings")
        return 0
    root = Path(args.directory)
    names = [str(file.relative_to(root) if root.is_dir() else file) for file in files]
    width = max(len(name) for name in names)
    for file, name in zip(files, names):
        try:
            recording = open_recording(file)
        except RecordingFormatError as exc:
            print(f"{name:{width}s}  unreadable: {exc}")
            continue
        episodes = recording.episodes()
        print(f"{name:{width}s}  {recording.duration_s:8.2f} s  {recording.message_count:7d} msgs  "
              f"{len(episodes)} episode(s)  {'complete' if recording.complete else 'recovered'}")
        for ep in episodes:
            note = "" if ep.stopped else "  (no stop marker: recording ended)"
            print(f"    #{ep.number:<3d} {_task(ep.task):20s} {ep.duration_s:8.2f} s{note}")
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    """Channels, schemas, counts, rates, duration and episodes of one recording."""
    recording = open_recording(args.file)
    print(f"file:      {recording.path}")
    print(f"state:     {_state(recording)}" + (f", {recording.discarded_bytes} bytes dropped"
                                                if recording.discarded_bytes else ""))
    print(f"duration:  {recording.duration_s:.3f} s   messages: {recording.message_count}   "
          f"start: {recording.start_ns * 1e-9:.3f} s (log time)")
    print(f"\n{'topic':28s} {'schema':26s} {'count':>7s} {'rate [Hz]':>10s} {'first [s]':>10s} {'last [s]':>10s}")
    origin = recording.start_ns
    for info in recording.channels.values():
        first = (info.first_ns - origin) * 1e-9 if info.count else float("nan")
        last = (info.last_ns - origin) * 1e-9 if info.count else float("nan")
        print(f"{info.topic:28s} {info.schema_name:26s} {info.count:7d} {info.rate_hz:10.2f} {first:10.3f} {last:10.3f}")
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


def cmd_trim(args: argparse.Namespace) -> int:
    """Copy the part between --start and --end (seconds from the first message)."""
    recording = open_recording(args.file)
    origin = recording.start_ns
    start_ns = None if args.start is None else origin + round(args.start * 1e9)
    # --end is inclusive: the window passed on is [start, end + 1 ns).
    end_ns = None if args.end is None else origin + round(args.end * 1e9) + 1
    if start_ns is not None and end_ns is not None and end_ns <= start_ns:
        raise ValueError(f"--end ({args.end} s) must not come before --start ({args.start} s)")
    if next(iter(recording.messages(None, start_ns, end_ns)), None) is None:  # an empty copy helps nobody
        window = (f"between --start {args.start:g} s and --end {args.end:g} s" if args.end is not None and
                  args.start is not None else f"from --start {args.start:g} s on" if args.start is not None else
                  f"up to --end {args.end:g} s")
        raise ValueError(f"{args.file}: nothing {window} (the recording lasts {recording.duration_s:.3f} s); "
                         "nothing written")
    out = write_copy(recording, args.output, start_ns=start_ns, end_ns=end_ns,
                     operation=f"trim start={args.start} end={args.end} (s from first message)")
    print(f"{out}: {open_recording(out).message_count} messages")
    return 0


def cmd_label(args: argparse.Namespace) -> int:
    """Set the task label of one episode (new file, or FILE replaced atomically)."""
    recording = open_recording(args.file)
    episodes = recording.episodes()
    numbers = [ep.number for ep in episodes]
    if args.episode not in numbers:
        raise ValueError(f"{args.file}: no episode {args.episode} (episodes: {numbers or 'none'})")
    for ep in episodes:
        if ep.number == args.episode:
            previous, ep.task = ep.task, args.task
    out = write_copy(recording, args.output or args.file, episodes=episodes,
                     operation=f"label episode {args.episode}: {previous!r} -> {args.task!r}")
    print(f"{out}: episode {args.episode} labelled {args.task!r}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    """Labelled episodes -> OUTDIR/<task>/<recording>_<episode>.npz."""
    result = export_episodes(args.paths, args.output, args.channel, use_message_time=args.message_time)
    for path in result.written:
        print(path)
    for reason in result.skipped:
        print(f"skipped {reason}", file=sys.stderr)
    print(f"{len(result.written)} trajectories written to {args.output}")
    if not result.written:  # nothing exported is worth a failing exit code in scripts, and a reason
        print(f"teleop dataset export: error: {_why_nothing_exported(result.skipped)}", file=sys.stderr)
        return 1
    return 0


def _why_nothing_exported(skipped: list[str]) -> str:
    unlabelled = sum(reason.endswith(": no task label") for reason in skipped)
    if unlabelled:
        return (f"nothing exported: {unlabelled} episode(s) have no task label, and only labelled episodes are "
                "exported; label them with `teleop dataset label FILE --episode N --task NAME` "
                "(`teleop dataset list` shows the episodes)")
    if not skipped:
        return ("nothing exported: the recording(s) hold no episodes; record with `teleop record --task NAME` "
                "(the whole session as one labelled episode)")
    return "nothing exported: every episode was skipped (reasons above)"


def cmd_recover(args: argparse.Namespace) -> int:
    """Report what a (crashed) recording holds and write a complete copy."""
    print(recover(args.file, args.output).summary())
    return 0


def _task_label(text: str) -> str:
    """``label --task``: a non-empty name (an empty one would mean "unlabelled")."""
    if not text.strip():
        raise argparse.ArgumentTypeError("the task name must not be empty, e.g. --task wave")
    return text


def _guarded(handler: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Turn expected failures (bad file, unknown channel...) into a message and exit code 1."""
    def run(args: argparse.Namespace) -> int:
        try:
            return handler(args)
        except (RecordingFormatError, OSError, KeyError, ValueError, TypeError) as exc:
            message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
            print(f"teleop dataset {args.dataset_command}: error: {message}", file=sys.stderr)
            return 1
    run.__doc__ = handler.__doc__
    return run


def add_subcommands(parser: argparse.ArgumentParser) -> None:
    """The subcommands of ``teleop dataset`` (shared by :func:`register` and :func:`main`)."""
    sub = parser.add_subparsers(dest="dataset_command", required=True, metavar="COMMAND")

    p = sub.add_parser("list", help="recordings in a directory and their episodes")
    p.add_argument("directory", metavar="DIR")
    p.set_defaults(func=_guarded(cmd_list))

    p = sub.add_parser("inspect", help="channels, rates, counts and duration of a recording")
    p.add_argument("file", metavar="FILE")
    p.set_defaults(func=_guarded(cmd_inspect))

    p = sub.add_parser("trim", help="keep a time window of a recording (new file)")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--start", type=non_negative_float, default=None, metavar="S", help="seconds from the first message")
    p.add_argument("--end", type=non_negative_float, default=None, metavar="E", help="seconds from the first message (inclusive)")
    p.add_argument("-o", "--output", required=True, type=Path, metavar="OUT")
    p.set_defaults(func=_guarded(cmd_trim))

    p = sub.add_parser("label", help="set the task label of an episode")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--episode", type=int, required=True, metavar="N", help="episode number (see list/inspect)")
    p.add_argument("--task", required=True, type=_task_label, metavar="NAME")
    p.add_argument("-o", "--output", type=Path, default=None, metavar="OUT",
                   help="write a labelled copy here (default: replace FILE atomically)")
    p.set_defaults(func=_guarded(cmd_label))

    p = sub.add_parser("export", help="labelled episodes as ReferenceTrajectory .npz, one folder per task")
    p.add_argument("paths", nargs="+", metavar="FILE|DIR")
    p.add_argument("--channel", default="references", help="RobotReferences channel (default: references)")
    p.add_argument("-o", "--output", required=True, type=Path, metavar="OUTDIR")
    p.add_argument("--message-time", action="store_true",
                   help="time samples by their own t (producer clock) instead of the log time")
    p.set_defaults(func=_guarded(cmd_export))

    p = sub.add_parser("recover", help="write a complete copy of a crashed recording")
    p.add_argument("file", metavar="FILE")
    p.add_argument("-o", "--output", required=True, type=Path, metavar="OUT")
    p.set_defaults(func=_guarded(cmd_recover))


def register(subparsers) -> argparse.ArgumentParser:
    """Add ``dataset`` to a ``teleop`` subparsers object; each subcommand sets ``func``."""
    parser = subparsers.add_parser("dataset", help="list, inspect, trim, label and export recordings",
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
