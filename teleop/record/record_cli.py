"""``teleop record``: record a source (the test pattern) to an MCAP file for N seconds or until Ctrl-C.

Live sessions are recorded by the stations (``teleop operator|robot --record``); this
command tries the recorder and the dataset tools without them.

::

    teleop record --source test-pattern --duration 10 -o runs/recordings/demo.mcap --task wave

Sources come from :data:`teleop.record.sources.SOURCES` (see that module for the item
format). Ctrl-C, SIGTERM or SIGHUP stops cleanly: the open episode is stopped and the file is
closed with its summary. A SIGKILL leaves a file that ``teleop dataset recover`` repairs.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path

from teleop.cli import runs_on_without_its_reader
from teleop.cli_types import MAX_RECORDING_S, UsageError, nonempty_path, positive_float, task_label
from teleop.stop_request import raise_if_stop_lost, stop_handled

from .messages import EpisodeMarker
from .recorder import Recorder
from .sources import SOURCES, SourceItem


def record_from_source(items: Iterable[SourceItem], recorder: Recorder, *, duration_s: float | None = None,
                       clock_ns=time.time_ns) -> int:
    """Log the items of a source until it ends or ``duration_s`` has passed on ``clock_ns``.

    Items on the "episodes" channel start/stop episodes (an :class:`EpisodeMarker` or a dict
    with "event" and optionally "task"). Returns the number of items handled.
    """
    deadline = None if duration_s is None else clock_ns() + round(duration_s * 1e9)
    handled = 0
    for channel, time_s, message in items:
        raise_if_stop_lost()
        log_ns = None if time_s is None else round(time_s * 1e9)
        if channel in ("episodes", "/episodes"):
            event = message.event if isinstance(message, EpisodeMarker) else message["event"]
            task = message.task if isinstance(message, EpisodeMarker) else message.get("task")
            if event == "start":
                recorder.start_episode(task, log_time_ns=log_ns)
            else:
                recorder.stop_episode(log_time_ns=log_ns)
        else:
            recorder.log(channel, message, log_time_ns=log_ns)
        handled += 1
        if recorder.error is not None:   # a full disk: stop now, not at the end of the session
            break
        if deadline is not None and clock_ns() >= deadline:
            break
    return handled


def recording_duration(text: str) -> float:
    """argparse type of ``--duration``: seconds, > 0 and at most :data:`MAX_RECORDING_S`
    (the time range of an MCAP file). Beyond, ``--duration 1e300`` ended in a traceback
    (OverflowError converting the deadline to nanoseconds)."""
    value = positive_float(text)
    if value > MAX_RECORDING_S:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_RECORDING_S:.3g} s (the time range of a recording: "
                                         f"MCAP log times are 64-bit nanoseconds), got {text}")
    return value


def _default_output() -> Path:
    return Path("runs") / "recordings" / f"session-{datetime.now():%Y%m%d-%H%M%S}.mcap"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``teleop record`` (shared by :func:`register` and :func:`main`)."""
    parser.add_argument("--source", choices=SOURCES, default="test-pattern",
                        help="live source to record (default: test-pattern)")
    parser.add_argument("--duration", type=recording_duration, default=None, metavar="S",
                        help="stop after S seconds (default: until Ctrl-C or the source ends)")
    # nonempty_path: -o '' (an unset shell variable) was "-o . is a folder".
    parser.add_argument("-o", "--output", type=nonempty_path, default=None,
                        help="output .mcap file (default: runs/recordings/session-<date>-<time>.mcap)")
    parser.add_argument("--force", action="store_true", help="overwrite the output file if it exists")
    parser.add_argument("--task", type=task_label, default=None,
                        help="record the whole session as one episode with this task label")
    parser.add_argument("--flush-interval", type=positive_float, default=0.5, metavar="S",
                        help="longest time data waits in memory, i.e. what a crash can lose [s] (default 0.5)")
    parser.set_defaults(func=runs_on_without_its_reader(run))


def register(subparsers) -> argparse.ArgumentParser:
    """Add the ``record`` subcommand to a ``teleop`` subparsers object; ``func`` runs it."""
    parser = subparsers.add_parser("record", help="record a test source to an MCAP file, to try the recorder "
                                   "(sessions are recorded by teleop operator|robot --record)",
                                   description=__doc__.split("\n\n")[0].replace("``", ""))
    add_arguments(parser)
    return parser


def run(args: argparse.Namespace) -> int:
    """Record according to parsed options; returns the exit code."""
    if args.source not in SOURCES:
        raise UsageError(f"unknown source {args.source!r} (known: {', '.join(SOURCES)})")
    output = args.output or _default_output()
    from teleop.data_args import check_recording_output

    check_recording_output(output, "-o", args.force)     # before the source starts
    items = SOURCES[args.source](args)
    recorder = Recorder(output, flush_interval_s=args.flush_interval,
                        metadata={"source": args.source, "command": "teleop record"})
    interrupted = False
    # Ctrl-C and SIGTERM arrive as KeyboardInterrupt (teleop.cli.sigterm_as_interrupt, which
    # also ignores the duplicate signal `timeout` sends): the file is finished either way.
    try:
        if args.task:
            recorder.start_episode(args.task)
        record_from_source(items, recorder, duration_s=args.duration)
    except KeyboardInterrupt:
        stop_handled()
        interrupted = True
    finally:
        if hasattr(items, "close"):
            items.close()
        stats = recorder.close()
    drops = f", {stats.dropped_total} dropped" if stats.dropped_total else ""
    print(f"{output}: {stats.written} messages{drops}{' (interrupted)' if interrupted else ''}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point for ``teleop record`` on its own (tests, ``python -m``): ``teleop record
    ARGV``, with its error reporting and exit codes."""
    from teleop.cli import main as teleop_main

    return teleop_main(["record", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
