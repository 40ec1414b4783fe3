"""``teleop stream-mvn FILE --port N``: play a motion file as an Xsens MVN network stream.

Stands in for MVN Analyze/Animate's network streamer: every frame of a motion file (any
format the retarget readers take; an Xsens CSV pair gives the real suit data) is sent at
its true rate as MVN datagrams over UDP -- type 02 (segment positions + quaternions), type
24 (centre of mass) when the motion has one, and type 12 (character name) once per second
of motion time.
A ``teleop operator --input xsens-live:PORT`` on the other end receives it.

::

    teleop stream-mvn ../shared/data/xsens_putaside_box/p1.csv --port 9763 --loop
"""

from __future__ import annotations

import argparse
import socket
import sys
import time
from typing import Callable

import numpy as np

from retarget.human import HumanMotion
from teleop.cli import runs_on_without_its_reader
from teleop.cli_types import (PreconditionError, float_in_interval, int_in_range, nonempty_path,
                              positive_float, sample_rate_hz)
from teleop.inputs.mvn_protocol import DEFAULT_PORT, FLOAT32_MAX, MvnCodec
from teleop.stop_request import raise_if_stop_lost, stop_handled


def motion_datagrams(codec: MvnCodec, motion: HumanMotion, index: int, sample_counter: int,
                     time_code_ms: int) -> list[bytes]:
    """The datagrams of frame ``index`` of ``motion``: pose (02) and, if known, CoM (24)."""
    pose = {name: (motion.positions[index, s], motion.orientations[index, s])
            for s, name in enumerate(motion.segment_names)}
    datagrams = codec.encode_pose(sample_counter, time_code_ms, pose)
    if motion.com is not None:
        datagrams += codec.encode_center_of_mass(sample_counter, time_code_ms, motion.com[index])
    return datagrams


def unstreamable(motion: HumanMotion, position_unit_m: float) -> str | None:
    """Why ``motion`` cannot be sent as MVN datagrams with ``position_unit_m`` metres per wire
    unit, or None: fewer than 2 frames, or the first frame holding a value beyond the protocol's 32-bit floats (spec
    2.5: positions, quaternions and the CoM are float32). Found before streaming starts:
    else the stream broke off at that frame with struct's OverflowError as a traceback."""
    if len(motion) < 2:
        # A pose, not a motion: it went out as "1 frames, 0 Hz", which retarget and the
        # operator station refuse.
        return f"{len(motion)} frame{'s' if len(motion) != 1 else ''}: a motion needs at least 2"
    limit = FLOAT32_MAX * position_unit_m                       # [m]
    signals = [("position", motion.positions, limit), ("orientation", motion.orientations, FLOAT32_MAX)]
    if motion.com is not None:
        signals.append(("centre of mass", np.asarray(motion.com, dtype=float)[:, None], limit))
    first = None
    for what, values, bound in signals:
        with np.errstate(invalid="ignore"):
            # Non-finite values go on the wire as they are (float32 holds NaN and inf): the
            # receiver drops them, counted, as it would MVN's.
            bad = np.isfinite(values) & (np.abs(values) > bound)
        if bad.any():
            frame, segment = (int(i) for i in np.argwhere(bad)[0][:2])
            if first is None or frame < first[0]:
                value = float(values[frame, segment][bad[frame, segment]][0])
                name = what if what == "centre of mass" else f"{what} of {motion.segment_names[segment]}"
                unit = "" if what == "orientation" else " m"
                first = (frame, f"frame {frame}: {name} ({value:g}{unit}, more than {bound:.3g}{unit}) cannot be "
                                f"streamed (beyond the MVN protocol's 32-bit floats)")
    return None if first is None else first[1]


def stream_motion(motion: HumanMotion, destination: tuple[str, int], *, speed: float = 1.0, loop: bool = False,
                  duration_s: float | None = None, codec: MvnCodec | None = None, name: str = "teleop",
                  clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
                  stats: dict | None = None) -> dict:
    """Send ``motion`` to ``destination`` as MVN datagrams at its true rate (times ``speed``).

    Returns counters {"samples", "datagrams", "bytes", "send_errors"}, kept up to date in
    ``stats`` if given: a caller interrupted by Ctrl-C (how a --loop stream ends) still has them.
    """
    if speed <= 0:
        raise ValueError("speed must be positive")
    if len(motion) < 1:
        raise ValueError(f"{motion.source}: nothing to stream")
    codec = codec or MvnCodec()
    if loop:    # back to the first pose between laps, as an operator --input file --loop
        from teleop.inputs.replay import with_return_to_start

        motion = with_return_to_start(motion)
    times = motion.times - motion.times[0]
    period = float(times[1] - times[0]) if len(times) > 1 else 0.01
    stats = {} if stats is None else stats
    stats.update({"samples": 0, "datagrams": 0, "bytes": 0, "send_errors": 0})
    sock = socket.socket(socket.AF_INET6 if ":" in destination[0] else socket.AF_INET, socket.SOCK_DGRAM)
    start = clock()
    lap_offset, counter, next_meta = 0.0, 0, 0.0
    try:
        while True:
            for i in range(len(motion)):
                raise_if_stop_lost()
                t = lap_offset + times[i]                      # motion time of this sample [s]
                if duration_s is not None and t / speed > duration_s:
                    return stats
                wait = start + t / speed - clock()
                if wait > 0:
                    sleep(wait)
                # MVN's time code is the stream's clock [ms]: at --speed it runs with the
                # sending, not with the motion (the receiver times the frames by it).
                time_code = int(round(t / speed * 1000))
                datagrams = motion_datagrams(codec, motion, i, counter, time_code)
                if t >= next_meta:
                    datagrams += codec.encode_meta(counter, time_code, {"name": name})
                    next_meta = t + 1.0
                for datagram in datagrams:
                    try:
                        sock.sendto(datagram, destination)
                    except OSError:                            # receiver not up yet: keep streaming
                        stats["send_errors"] += 1
                        continue
                    stats["datagrams"] += 1
                    stats["bytes"] += len(datagram)
                stats["samples"] += 1
                counter += 1
            if not loop:
                return stats
            lap_offset += times[-1] + period
    finally:
        sock.close()


def _destination_port(text: str) -> int:
    """A port to send to: 1-65535 (``port`` also takes 0, "any free port", which only
    means something when listening: every datagram sent to port 0 fails, and with --loop
    the stream would go on failing silently until Ctrl-C)."""
    if text.strip() == "0":
        raise argparse.ArgumentTypeError("port 0 is not a destination: give the receiver's port (1-65535)")
    # 1, not 0: ``port``'s range message ("must be 0-65535") offered the 0 refused above.
    return int_in_range(text, 1, 65535, "port")


#: Range of ``--unit`` [m per wire unit]: MVN sends cm or m. Beyond it the positions on the
#: wire lose their precision: with --unit 1e300 every position went out as 0 (float32
#: underflow), without a word.
MIN_UNIT_M, MAX_UNIT_M = 1e-6, 1e3


def _position_unit(text: str) -> float:
    """``--unit``: metres per position unit on the wire, within [MIN_UNIT_M, MAX_UNIT_M]."""
    return float_in_interval(text, MIN_UNIT_M, MAX_UNIT_M, unit="m")


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("stream-mvn", help="stream a motion file as Xsens MVN network datagrams (UDP)",
                            description=__doc__.split("\n\n")[1].replace("\n", " "))
    # Not an empty path: Path("") is ".", refused as "a folder, not a motion file".
    parser.add_argument("file", type=nonempty_path,
                        help="motion file (Xsens CSV pair, MVNX, BVH, ASF/AMC, VR CSV, .npz), or an operator "
                             "recording (.mcap: its raw input)")
    parser.add_argument("--host", default="127.0.0.1", help="receiver address (default 127.0.0.1)")
    parser.add_argument("--port", type=_destination_port, default=DEFAULT_PORT,
                        help=f"receiver port (default {DEFAULT_PORT})")
    # --rate-hz as every other command that reads motion files names it (--rate: its older name).
    parser.add_argument("--rate-hz", "--rate", dest="rate", type=sample_rate_hz, default=None,
                        help="rate of an Xsens CSV or AMC file, which do not state it [Hz] (default: 100 and 120); "
                             "other formats state theirs")
    parser.add_argument("--speed", type=positive_float, default=1.0, help="playback speed factor")
    parser.add_argument("--loop", action="store_true",
                        help="start over at the end (after returning to the first pose over 0.5-3 s)")
    parser.add_argument("--duration", type=positive_float, default=None, help="stop after this many seconds")
    parser.add_argument("--unit", type=_position_unit, default=0.01,
                        help="metres per position unit on the wire (the spec's cm: 0.01; MVN's metres: 1), "
                             f"{MIN_UNIT_M:g} to {MAX_UNIT_M:g}")
    parser.set_defaults(func=runs_on_without_its_reader(_run))


def _run(args: argparse.Namespace) -> int:
    from teleop.takes import check_rate_hz, read_motion_file

    try:
        # Resolved first: with a host that does not resolve, every send fails and the stream
        # would "succeed" with 0 datagrams sent.
        family = socket.AF_INET6 if ":" in args.host else socket.AF_INET  # as stream_motion's socket
        socket.getaddrinfo(args.host, args.port, family, socket.SOCK_DGRAM)
    except (socket.gaierror, UnicodeError) as exc:   # the name service, not the command line: 1
        reason = getattr(exc, "strerror", None) or exc
        raise OSError(f"--host {args.host}: cannot resolve it ({reason})") from None
    # A file it cannot use (OSError, or ValueError: MotionFormatError and the recording's /
    # references' errors): exit code 1 and one line from teleop.cli.run_command. A recording
    # (.mcap) gives its operator input; robot references are refused with what to give instead,
    # as retarget and operator --input say.
    # Else silently ignored (BVH), while `teleop retarget --rate-hz` refused it: one rule for
    # both, said before the reading (seconds for a long take).
    check_rate_hz(args.rate, [args.file])
    motion = read_motion_file(args.file, args.rate)
    problem = unstreamable(motion, args.unit)
    if problem:      # checked before the first datagram: one line, exit code 1, nothing sent
        raise PreconditionError(f"{args.file}: {problem}")
    print(f"streaming {args.file} ({len(motion)} frames, {motion.rate_hz:g} Hz) to {args.host}:{args.port}",
          file=sys.stderr)
    stats = {"samples": 0, "datagrams": 0, "bytes": 0, "send_errors": 0}
    try:
        stream_motion(motion, (args.host, args.port), speed=args.speed, loop=args.loop,
                      duration_s=args.duration, codec=MvnCodec(args.unit), name=args.file.stem, stats=stats)
    except KeyboardInterrupt:
        stop_handled()     # how a --loop stream ends: what was sent, and what could not be, is still said
    print(f"sent {stats['samples']} samples in {stats['datagrams']} datagrams ({stats['bytes']} bytes)")
    if stats["send_errors"]:
        print(f"teleop stream-mvn: warning: {stats['send_errors']} datagrams could not be sent to "
              f"{args.host}:{args.port}", file=sys.stderr)
    return 0 if stats["datagrams"] or not stats["samples"] else 1
