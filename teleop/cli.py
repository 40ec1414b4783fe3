"""The ``teleop`` command: one entry point, one subcommand per job.

Each subcommand lives with the code it drives and registers itself through a
``register(subparsers)`` function; heavy imports (pinocchio, pybullet) happen inside the
handlers so that ``teleop --help`` stays instant.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import functools
import importlib
import os
import signal
import sys
import threading
import time
import warnings
import zipfile

from teleop.cli_types import PreconditionError, UsageError
from teleop.stop_request import request_stop, stop_handled

#: Errors that mean "this input or setting is wrong", not "the program is wrong": the user
#: gets the message (which names the file or value) without a traceback. Anything else
#: is a bug and keeps its traceback. TELEOP_DEBUG=1 shows the traceback for these too.
USER_ERRORS = (OSError, ValueError, zipfile.BadZipFile)

#: What writing to a reader that has gone gives: a pipe closed at the other end (EPIPE), a
#: hung-up terminal (EIO).
OUTPUT_LOST_ERRNOS = (errno.EPIPE, errno.EIO)

#: Modules that contribute subcommands, in the order ``teleop --help`` lists them.
COMMAND_MODULES = (
    "teleop.demo_cli",
    "teleop.stations.cli",
    "teleop.trial_cli",
    "teleop.retarget_cli",
    "teleop.train_cli",
    "teleop.inputs.mvn_cli",
    "teleop.net.cli",
    "teleop.record.record_cli",
    "teleop.record.dataset_cli",
    "teleop.jog.cli",
    "teleop.tuning.cli",
    "teleop.sim.calibrate_cli",
    "teleop.sim.lockstep_cli",
    "teleop.benchmarks.cli",
    "teleop.info_cli",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="teleop",
        description="Whole-body teleoperation of a humanoid robot across delayed networks, "
                    "with ProMP-based prescient delay compensation.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name and name.startswith(exc.name):  # a command module not built yet
                continue
            raise
        module.register(sub)
    return parser


def _parse(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """``parser.parse_args(argv)``, except that an unknown option is refused by the
    subcommand's own parser (its usage, "teleop demo: error: unrecognized arguments"), not by
    the top-level one (whose usage lists no option of the command the user typed), nor by a
    command's own when the user typed one of its actions (``dataset inspect A B``)."""
    args, extra = parser.parse_known_args(argv)
    if extra:
        chosen = parser
        while (commands := next((a for a in chosen._actions if isinstance(a, argparse._SubParsersAction)), None)) \
                and (sub := commands.choices.get(getattr(args, commands.dest, None) or "")) is not None:
            chosen = sub
        chosen.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def main(argv: list[str] | None = None) -> int:
    try:
        # Building the parser imports every command's module (OpenCV's among them: a second
        # or so): a Ctrl-C then printed a traceback and died by the signal, and a SIGTERM
        # (an IDE's stop button, `timeout`) ended it with code 143 and not a word.
        with sigterm_as_interrupt():
            parser = build_parser()
            args = _parse(parser, argv)
    except KeyboardInterrupt:
        stop_handled()
        _tell("interrupted")
        return 130
    if not getattr(args, "func", None):
        parser.print_help()
        return 0 if args.command is None else 2
    return run_command(args)


def command_label(args: argparse.Namespace) -> str:
    """The command as typed, with its action where it has one ("lockstep serve", "dataset
    export"): the name an error line starts with, and whose --help lists the options."""
    action = getattr(args, f"{args.command}_command", None)
    return f"{args.command} {action}" if isinstance(action, str) else str(args.command)


def run_command(args: argparse.Namespace) -> int:
    """Run a parsed subcommand (``args.func``, ``args.command``) and turn what goes wrong into
    the exit-code rule of every command: 2 and the command line's fault said for a
    :class:`UsageError`, 1 and one line for a file, data or network error, 130 when
    interrupted. ``TELEOP_DEBUG=1`` lets the traceback through."""
    from teleop.blas_threads import limit_blas_threads

    limit_blas_threads()      # small matrix products: threads only wait (teleop/blas_threads.py)
    try:
        with sigterm_as_interrupt(), _our_warnings_as_lines(command_label(args)):
            result = args.func(args)
    except KeyboardInterrupt:
        _end_progress_bars()
        _tell("interrupted")
        return 130
    except OSError as exc:
        if exc.errno in OUTPUT_LOST_ERRNOS and silence_lost_output():
            # Our reader went away (`teleop info | head`), or our terminal did (a hang-up:
            # the command had stopped cleanly, its final statistics had nowhere to go).
            return 0
        if isinstance(exc, BrokenPipeError) or not os.environ.get("TELEOP_DEBUG"):
            return _user_error(args, exc)      # a socket's peer went away, a missing file: real errors
        raise
    except UsageError as exc:
        if os.environ.get("TELEOP_DEBUG"):
            raise
        _tell(exc.report(command_label(args)))
        return exc.EXIT_CODE
    except PreconditionError as exc:
        if os.environ.get("TELEOP_DEBUG"):
            raise
        return _user_error(args, exc)
    except USER_ERRORS as exc:
        if os.environ.get("TELEOP_DEBUG"):
            raise
        return _user_error(args, exc)
    finally:
        stop_handled()     # the stop, if any, ended this command: not the next one's (tests run several)
    return int(result or 0)


#: Packages whose warnings are the product's own, said as one line each.
OWN_PACKAGES = ("teleop", "retarget", "promp")


@contextlib.contextmanager
def _our_warnings_as_lines(command: str):
    """While inside, a warning of the product's own (a damaged joint-angle file ignored, a
    take skipped) is one line, ``teleop CMD: warning: ...``, as the commands' own warnings
    are; Python's format added the file, line and source line of where it was raised.
    Other libraries' warnings keep Python's format (they are rarer, and where matters)."""
    previous = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if category.__module__.split(".")[0] in OWN_PACKAGES:
            _tell(f"teleop {command}: warning: {message}")
        else:
            previous(message, category, filename, lineno, file, line)

    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = previous


def _end_progress_bars() -> None:
    """End the progress bars the failed command left open (none unless tqdm was imported:
    not imported for this, the CLI starts without it)."""
    if "tqdm" in sys.modules:
        from teleop.progress import end_progress_bars

        end_progress_bars()


def _user_error(args: argparse.Namespace, exc: BaseException) -> int:
    """The error line, exit code 1. A check made before the work started (PreconditionError,
    or an error marked ``before_work`` such as a non-loopback address refused) says what to
    change and no more; an error from inside the work adds where to look."""
    _end_progress_bars()
    before_work = isinstance(exc, PreconditionError) or getattr(exc, "before_work", False)
    hint = "" if before_work else "\n(TELEOP_DEBUG=1 shows where it happened)"
    _tell(f"teleop {command_label(args)}: error: {describe(exc)}{hint}")
    return 1


def _tell(message: str) -> None:
    """Print ``message`` on stderr, unless stderr is gone (a hung-up terminal): not a traceback."""
    try:
        print(message, file=sys.stderr)
    except OSError as exc:
        if exc.errno not in OUTPUT_LOST_ERRNOS or not silence_lost_output():
            raise


def end_output_quietly() -> int:
    """The reader of our output went away (`teleop info | head`): not an error, exit code 0.
    Python would report the pipe again when it flushes stdout at exit: stdout goes to
    devnull."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def stdout_reader_gone() -> bool:
    """Whether our standard output's reader has gone (writing to it breaks the pipe)."""
    return reader_gone(sys.stdout)


def reader_gone(stream) -> bool:
    """Whether the reader of ``stream`` (our stdout or stderr) has gone: a pipe whose read
    end is closed, a terminal that hung up (closed, the ssh session dropped).

    Asked of the file itself (POLLERR on a pipe's write end once the read end is closed,
    POLLHUP on a hung-up terminal): the failed write may have emptied the buffer, so a
    flush alone can succeed."""
    import select

    try:
        poller = select.poll()
        poller.register(stream.fileno(), select.POLLOUT)
        if any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0)):
            return True
    except (AttributeError, OSError, ValueError):   # no poll here, or the stream is no file
        pass
    try:
        stream.flush()
    except OSError as exc:
        return exc.errno in OUTPUT_LOST_ERRNOS
    return False


def silence_lost_output() -> bool:
    """Send our stdout and stderr to devnull if their reader has gone (see ``reader_gone``);
    whether either had. Python would otherwise report the failed write again when it flushes
    them at exit (exit code 120); a stream whose reader is still there keeps its output."""
    lost = False
    for stream in (sys.stdout, sys.stderr):
        if reader_gone(stream):
            os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())
            lost = True
    return lost


class _LossTolerantStream:
    """A text stream (our stdout or stderr) whose writes, once its reader has gone, go to
    devnull instead of raising: see :func:`runs_on_without_its_reader`."""

    def __init__(self, stream) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError as exc:
            self._reader_lost(exc)
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as exc:
            self._reader_lost(exc)

    def _reader_lost(self, exc: OSError) -> None:
        if exc.errno not in OUTPUT_LOST_ERRNOS or not silence_lost_output():
            raise exc

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def runs_on_without_its_reader(command):
    """``command`` (a subcommand's function) keeps running when the reader of its output goes
    away: a station's log piped into ``head`` or a ``tee`` that was killed. Its output then
    goes to devnull. Without this the first status line after that raised EPIPE and the
    station stopped mid-session, exit code 0, its recording cut short: a robot whose control
    loop ends because nobody reads its log."""
    @functools.wraps(command)
    def tolerant(*args, **kwargs):
        saved = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = _LossTolerantStream(sys.stdout), _LossTolerantStream(sys.stderr)
        try:
            return command(*args, **kwargs)
        finally:
            sys.stdout, sys.stderr = saved
    return tolerant


#: A second stop signal this soon after the first is the same stop delivered twice [s]:
#: coreutils ``timeout`` signals the command and then its whole process group.
DUPLICATE_STOP_SIGNAL_S = 1.0
#: How long a stopped command waits, from the first stop signal, for its duplicate before it
#: exits [s] (at most: `timeout` sends both within microseconds).
DUPLICATE_WAIT_S = 0.2


#: The signals that stop a command as Ctrl-C does (see ``sigterm_as_interrupt``): SIGTERM, and
#: SIGHUP where there is one (not on Windows).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP) if hasattr(signal, "SIGHUP") else (signal.SIGTERM,)


@contextlib.contextmanager
def sigterm_as_interrupt():
    """While inside, SIGTERM (``kill``, a service manager, ``timeout``) and SIGHUP (the
    terminal closed, the ssh session dropped, ``kill -HUP``) raise KeyboardInterrupt like
    Ctrl-C, so a command's cleanup runs: the stations close their recordings complete and
    print their final statistics instead of vanishing mid-tick. After a hang-up those
    statistics may have nowhere to go: ``main`` then ends quietly (``silence_lost_output``).
    A SIGHUP ignored when we started (``nohup``) stays ignored: the user asked to outlive the
    terminal.

    A SIGINT, SIGTERM or SIGHUP within ``DUPLICATE_STOP_SIGNAL_S`` of the first one is
    ignored: ``timeout`` delivers its signal twice (to the command, then to its process
    group), a hang-up may reach us from the terminal and again from the shell, and the second
    interrupt used to abort the cleanup the first had started (no statistics, exit code
    130). A later one interrupts again (a user insisting).

    Only in the process and thread that entered it (signal handlers are the main
    thread's): a forked worker (``teleop tune --jobs``) inherits the handlers, and is then
    stopped the default way.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    owner = os.getpid()
    first_stop: list[float] = []

    def interrupt(signum, frame):
        if os.getpid() != owner:
            if signum != signal.SIGINT:
                signal.signal(signum, signal.SIG_DFL)
                os.kill(os.getpid(), signum)
                return
            raise KeyboardInterrupt
        now = time.monotonic()
        if first_stop and now - first_stop[-1] < DUPLICATE_STOP_SIGNAL_S:
            return
        first_stop.append(now)
        # Kept as well: a KeyboardInterrupt raised inside an import may be swallowed, and
        # the loops then raise it again (teleop/stop_request.py).
        request_stop()
        raise KeyboardInterrupt

    signals = [*STOP_SIGNALS, signal.SIGINT]
    if hasattr(signal, "SIGHUP") and signal.getsignal(signal.SIGHUP) is signal.SIG_IGN:
        signals.remove(signal.SIGHUP)     # nohup: the user asked to outlive the terminal
    stop_handled()      # a stop of an earlier command run in this process is not ours
    previous = {sig: signal.signal(sig, interrupt) for sig in signals}
    try:
        yield
    finally:
        if first_stop:
            # Let a duplicate already on its way land here, where it is ignored, and not
            # after the handlers are put back (by then the cleanup may be over: the default
            # handler killed the finished process, exit code -15 instead of 0).
            time.sleep(max(0.0, DUPLICATE_WAIT_S - (time.monotonic() - first_stop[-1])))
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def describe(exc: BaseException) -> str:
    """One line saying what went wrong: the message, with the file when the OS names one."""
    if isinstance(exc, OSError) and exc.filename is not None and str(exc.filename) not in str(exc.strerror or ""):
        return f"{exc.filename}: {exc.strerror or exc}"
    text = str(exc).strip() or type(exc).__name__
    return text


if __name__ == "__main__":
    sys.exit(main())
