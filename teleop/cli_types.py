"""Argument types shared by the subcommands: bad values are refused by argparse, before any
work starts, with a usage message that names the option.

Use as ``p.add_argument("--loss", type=probability)``.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path


class UsageError(ValueError):
    """The command line cannot work: a value, or a combination of options, that argparse
    could not check alone (it needs another option, a file's size, the robot's joints).
    ``teleop``'s entry point reports it as argparse reports its own refusals: an error
    line, a hint to ``--help``, exit code 2. Whatever else fails (a file, the data, the
    network) is a ValueError or OSError: exit code 1."""

    #: The exit code of a refused command line (argparse's).
    EXIT_CODE = 2

    def report(self, command: str) -> str:
        """The lines said on stderr: ``teleop COMMAND: error: ...`` and where the options are."""
        return f"teleop {command}: error: {self}\n(teleop {command} --help lists the options)"


class PreconditionError(ValueError):
    """A check made before a command's work starts failed on something the command line
    alone cannot tell: an output that exists (pass --force), a file given where a folder
    goes. Exit code 1 like any file error, and the error line alone: the TELEOP_DEBUG hint
    ("shows where it happened") is for errors raised from inside the work, and here nothing
    has run yet (README: the checks before a command starts say what to change, no more)."""


def _refuse_underscore(text: str) -> None:
    if "_" in text:
        # Python reads "1_5" as 15: a typo for 1.5 became a ten times longer value.
        raise argparse.ArgumentTypeError(f"{text!r}: write the number without '_' (e.g. 1.5)")


def _number(text: str) -> float:
    _refuse_underscore(text)
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def finite_float(text: str) -> float:
    """Any finite number, of either sign (offsets, amplitudes): nan and inf are refused."""
    return _number(text)


def positive_float(text: str) -> float:
    """A finite number > 0 (rates, durations, speeds, sizes)."""
    value = _number(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def positive_or_inf(text: str) -> float:
    """A finite number > 0, or ``inf`` (a limit that can be lifted)."""
    if text.strip().lower() in ("inf", "infinity"):
        return math.inf
    return positive_float(text)


def non_negative_float(text: str) -> float:
    """A finite number >= 0 (delays, timeouts, jitter)."""
    value = _number(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def float_in_interval(text: str, low: float, high: float, *, low_open: bool = False, high_open: bool = False,
                      unit: str = "") -> float:
    """A number in the interval from ``low`` to ``high`` (either end excluded); the message
    writes the interval and ``unit`` ("must be in (0, 180) degrees, got 200"); nan is outside."""
    _refuse_underscore(text)
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    above = value > low if low_open else value >= low
    below = value < high if high_open else value <= high
    if not (above and below):     # (False for nan)
        interval = f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
        raise argparse.ArgumentTypeError(f"must be in {interval}{' ' + unit if unit else ''}, got {text}")
    return value


#: Highest sampling rate a motion file is taken to have [Hz]: optical mocap runs at up to a
#: few kHz; ``--rate-hz 1e9`` made a 3 s take last 3 ns.
MAX_SAMPLE_RATE_HZ = 10_000.0
#: Lowest: a motion's samples are at most 1 s apart (``retarget.human.MAX_SAMPLE_STEP_S``);
#: ``teleop retarget take.amc --rate-hz 0.5`` was refused as the file's fault ("samples are
#: 2 s apart: times in the wrong unit, or a corrupt file?"), exit code 1.
MIN_SAMPLE_RATE_HZ = 1.0


def sample_rate_hz(text: str) -> float:
    """A motion file's sampling rate [Hz]: in [1, 10000]."""
    _number(text)
    value = float_in_interval(text, 0.0, MAX_SAMPLE_RATE_HZ, low_open=True, unit="Hz")
    if value < MIN_SAMPLE_RATE_HZ:
        raise argparse.ArgumentTypeError(f"must be at least {MIN_SAMPLE_RATE_HZ:g} Hz (a motion's samples are at "
                                         f"most 1 s apart), got {text}")
    return value


def _in_unit_interval(text: str, low_open: bool, high_open: bool) -> float:
    """A finite number in [0, 1] with either end excluded."""
    _number(text)          # nan and inf: "not a finite number", as the other numbers
    return float_in_interval(text, 0.0, 1.0, low_open=low_open, high_open=high_open)


def probability(text: str) -> float:
    """A probability in [0, 1) (packet loss, duplication: 1 would lose or repeat everything)."""
    return _in_unit_interval(text, low_open=False, high_open=True)


def burst_length(text: str) -> float:
    """A mean run length of lost packets: a finite number >= 1 (``--loss-burst``)."""
    value = _number(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"is a mean number of packets lost in a row, >= 1, got {text}")
    return value


def check_loss_burst(loss: float, burst: float | None, loss_option: str = "--loss",
                     burst_option: str = "--loss-burst") -> None:
    """UsageError unless a ``--loss-burst`` comes with a loss it can shape: in (0, 1)."""
    if burst is None:
        return
    if loss <= 0:
        raise UsageError(f"{burst_option} {burst:g} shapes the losses of {loss_option}, which loses none: "
                         f"give {loss_option} P with P > 0")
    if loss >= 1:
        raise UsageError(f"{burst_option} needs a loss below 1 (at {loss_option} 1 every packet is lost)")


def fraction(text: str) -> float:
    """A probability in [0, 1], 1 included (netem may simulate a dead link)."""
    return _in_unit_interval(text, low_open=False, high_open=False)


def unit_fraction(text: str) -> float:
    """A scale in (0, 1]: a fraction of a nominal value (e.g. of the description's torques)."""
    return _in_unit_interval(text, low_open=True, high_open=False)


def int_at_least(text: str, minimum: int, why: str = "") -> int:
    """``text`` as an integer >= ``minimum`` (for argparse types built on it); ``why`` ends
    the message of a value below it ("(... fewer cannot)")."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {text}" + (f" {why}" if why else ""))
    return value


def positive_int(text: str) -> int:
    """An integer >= 1 (counts)."""
    return int_at_least(text, 1)


def int_in_range(text: str, low: int, high: int, what: str) -> int:
    """``text`` as an integer in [low, high]; ``what`` names it in the message ("port",
    "AprilTag 36h11 id")."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a {what}") from None
    if not low <= value <= high:
        raise argparse.ArgumentTypeError(f"{what} must be {low}-{high}, got {text}")
    return value


def port(text: str) -> int:
    """A UDP/TCP port number, 0-65535 (0: any free port)."""
    return int_in_range(text, 0, 65535, "port")


def checked_text(text: str, parse, prefix: str = "") -> str:
    """``text``, once ``parse(text)`` accepted it: for options kept as written but parsed by
    the command (an address, an axis map); its ValueError becomes argparse's refusal (with
    ``prefix`` before the message)."""
    try:
        parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{prefix}{exc}") from None
    return text


def address(text: str) -> str:
    """``host:port``, ``[v6host]:port`` or ``:port``; checked here, parsed by the command."""
    from teleop.net.udp import parse_address

    return checked_text(text, parse_address)


def _destination(text: str) -> None:
    from teleop.net.udp import parse_address

    if parse_address(text)[1] == 0:
        raise ValueError(f"port 0 of {text} is no destination (it means any free port when binding): "
                         "give the port the other side listens on")


def destination(text: str) -> str:
    """An address to send to: as :func:`address`, but port 0 (which means "any free port"
    when binding) is refused: ``--video-to 127.0.0.1:0`` sent the video nowhere, silently."""
    return checked_text(text, _destination)


#: Longest round trip [s] a demo or trial accepts. The compensation predicts one motion a
#: few seconds ahead (the thesis's trials go to 4 s); past ~10 s the operator has finished any
#: motion of the libraries before its first command arrives, and a trial would score only how
#: early the robot reaches the final pose (and pad every take with a round trip of rest: 1e9 s
#: exhausted the memory).
MAX_ROUND_TRIP_S = 10.0


def round_trip(text: str) -> float:
    """A round-trip delay [s] in [0, :data:`MAX_ROUND_TRIP_S`]."""
    value = non_negative_float(text)
    if value > MAX_ROUND_TRIP_S:
        raise argparse.ArgumentTypeError(
            f"round trip {text} s is above the {MAX_ROUND_TRIP_S:g} s this product models: the operator would "
            "finish a motion long before its first command reached the robot")
    return value


def delay_list(text: str) -> list[str]:
    """A comma-separated, non-empty list of round-trip delays [s] in [0, :data:`MAX_ROUND_TRIP_S`],
    e.g. ``0,0.5,1.5``.

    Returned as the items' text, checked (results are keyed by the delays as written), in
    the order given. A delay given twice, even written differently (``3,3.0``), is refused:
    the two runs would be merged under one delay. An empty item (``1,,2``) is refused: it is
    a typo, not a delay.
    """
    items = [x.strip() for x in text.split(",")]
    if not any(items):
        raise argparse.ArgumentTypeError("give at least one delay, e.g. 1.5 or 0,1.5,3")
    if not all(items):
        raise argparse.ArgumentTypeError(f"{text!r} has an empty item; write the delays as e.g. 0,1.5,3")
    seen: dict[float, str] = {}
    for item in items:
        value = round_trip(item)
        if value in seen:
            raise argparse.ArgumentTypeError(f"delay {item} is given twice ({seen[value]} and {item}); "
                                             "list each delay once")
        seen[value] = item
    return items


def task_label(text: str) -> str:
    """argparse type of ``--task`` (``teleop dataset label``, ``teleop record`` and ``teleop
    operator|robot --record FILE --task NAME``): a non-empty name (an empty one would mean "unlabelled")
    that is, as typed, the name of the task's folder in an export (``dataset export`` writes
    DIR/<task>/, and ``train`` reads the folder name as the task), at most 100 bytes long: see
    :func:`teleop.record.labels.task_problem` (a label the folder name changed could share its
    folder with another, and the two were learned as one task)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("the task name must not be empty, e.g. --task wave")
    from teleop.record.labels import task_problem   # the export's rule, in one place

    problem = task_problem(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return text


#: Latest time an MCAP file can hold [s]: its log times are unsigned 64-bit nanoseconds
#: (about 1.8e10 s, 584 years).
MAX_RECORDING_S = (2**64 - 1) * 1e-9


def recording_seconds(text: str) -> float:
    """argparse type of ``--start``/``--end`` of ``teleop dataset plot|trim|label``: seconds
    from a recording's first message, finite, in [0, :data:`MAX_RECORDING_S`]. Beyond, no
    message can be (and ``--start 1e308`` gave a traceback: OverflowError converting to
    nanoseconds)."""
    value = non_negative_float(text)
    if value > MAX_RECORDING_S:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_RECORDING_S:.3g} s (the time range of a recording: "
                                         f"MCAP log times are 64-bit nanoseconds), got {text}")
    return value


def nonempty_path(text: str) -> Path:
    """argparse type of a path (``--out`` of ``eval``, ``trial``, ``bench``, the stations'
    ``--secret-file`` and ``--record``): any path but an empty or blank one, which
    ``Path("")`` reads as ``.``, so ``--out ''`` (an unset shell variable) wrote the results
    into the current folder without a word, and ``--secret-file ''`` was "a folder"."""
    if not text.strip():
        raise argparse.ArgumentTypeError("the path must not be empty")
    return Path(text)
