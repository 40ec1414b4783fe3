"""``teleop robot`` and ``teleop operator``: the two stations as separate processes over UDP."""

from __future__ import annotations

import argparse
import contextlib
import functools
import logging
import socket
import sys
import time
from pathlib import Path
from typing import Callable

from teleop.cli import runs_on_without_its_reader
from teleop.cli_types import (MAX_ROUND_TRIP_S, PreconditionError, UsageError, address, checked_text, destination,
                              float_in_interval, int_in_range, non_negative_float, nonempty_path, port,
                              positive_float, sample_rate_hz, task_label)
from teleop.json_safe import dumps
from teleop.stations.loop_timing import LoopTiming, run_loop
from teleop.stations.watches import STATUS_INTERVAL_S, CommandLinkWatch, SilenceWatch, robot_silence_hint
from teleop.stop_request import stop_handled
from teleop.video.wire import DEFAULT_FEC_GROUP
from teleop.wording import dropped_by_the_kernel


#: Shortest --stale-timeout [s]: 10 commands at 100 Hz. With 0.02 the robot held its pose at
#: every ordinary gap between commands on loopback (17 holds in 6 s) and never followed.
MIN_STALE_TIMEOUT_S = 0.1

#: Longest --stale-timeout [s]. Until it runs out, a robot whose operator went silent goes on
#: executing the compensator's predictions (which bridge lost packets) and then its last
#: command: 1e9 switched the safe hold off without a word.
MAX_STALE_TIMEOUT_S = 10.0


def _stale_timeout(text: str) -> float:
    """--stale-timeout [s]: from :data:`MIN_STALE_TIMEOUT_S` to :data:`MAX_STALE_TIMEOUT_S`."""
    value = positive_float(text)
    if value < MIN_STALE_TIMEOUT_S:
        raise argparse.ArgumentTypeError(f"must be at least {MIN_STALE_TIMEOUT_S:g} s (the operator sends 100 commands "
                                         f"a second: a shorter timeout holds the robot between them), got {text}")
    if value > MAX_STALE_TIMEOUT_S:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_STALE_TIMEOUT_S:g} s (until it runs out a silent "
                                         f"operator's robot goes on moving, unheld), got {text}")
    return value


def _parity_group(text: str) -> int:
    """--video-fec: video datagrams per parity datagram, 0 (none) to 255."""
    return int_in_range(text, 0, 255, "parity group size")


def register(sub: argparse._SubParsersAction) -> None:
    robot = sub.add_parser("robot",
                           help="run the robot station: simulated iCub, whole-body control, compensation, video out",
                           description="Listens for the operator's references over UDP (authenticated with the shared "
                                       "secret), compensates the delay with a ProMP library, tracks the references "
                                       "with the whole-body QP on the simulated iCub in real time and streams the eye "
                                       "camera.")
    robot.add_argument("--listen", type=address, default="127.0.0.1:9001",
                       help="address to listen on (default: 127.0.0.1:9001)")
    robot.add_argument("--allow-remote", action="store_true",
                       help="allow listening on, and sending the eye camera to, a non-loopback address")
    robot.add_argument("--library", type=nonempty_path,
                       help="ProMP task library from `teleop train` (default: none, no compensation)")
    robot.add_argument("--video-to", type=destination, default="127.0.0.1:9003",
                       help="where to send the eye camera (default: 127.0.0.1:9003)")
    robot.add_argument("--video-hz", type=non_negative_float, default=10.0,
                       help="eye camera frame rate [Hz] (default: 10; 0 = no video)")
    robot.add_argument("--video-fec", type=_parity_group, default=DEFAULT_FEC_GROUP, metavar="N",
                       help=f"one parity datagram per N video datagrams, which restores any one of them lost on "
                            f"the way (default: {DEFAULT_FEC_GROUP}, 1/{DEFAULT_FEC_GROUP} more bytes; 0 = none)")
    robot.add_argument("--stale-timeout", type=_stale_timeout, default=0.5,
                       help=f"hold a safe pose after this long without commands [s], "
                            f"{MIN_STALE_TIMEOUT_S:g} to {MAX_STALE_TIMEOUT_S:g} (default: 0.5)")
    robot.add_argument("--duration", type=positive_float,
                       help="stop after this many seconds (default: run until Ctrl-C)")
    robot.add_argument("--secret-file", type=nonempty_path,
                       help="shared secret file (default: $TELEOP_SECRET or ~/.config/teleop/secret)")
    robot.add_argument("--force", action="store_true", help="with --record: overwrite the file if it exists")
    robot.add_argument("--gui", action="store_true", help="show pybullet's GUI window")
    robot.add_argument("--json", action="store_true", help="print the final telemetry as JSON")
    robot.add_argument("--record", type=nonempty_path, metavar="FILE", help="record every stream to this MCAP file "
                       "(delivered and compensated commands, robot state, camera frames, network statistics)")
    robot.add_argument("--task", type=task_label, metavar="NAME", help="with --record: the session is one episode "
                       "labelled NAME, ready for `teleop dataset export --channel delivered` (the record button "
                       "stops it; its later episodes get the same label)")
    robot.set_defaults(func=runs_on_without_its_reader(_said_as("robot", _run_robot)))

    op = sub.add_parser("operator", help="run the operator station: input, retargeting, references out, video in",
                        description="Reads the operator's motion (the synthetic operator, or a motion file replayed at "
                                    "its true rate), retargets it, sends the references to the robot station, receives "
                                    "the robot's video through a jitter buffer and reports the backward delay.")
    op.add_argument("--robot", type=destination, default="127.0.0.1:9001",
                    help="robot station address (default: 127.0.0.1:9001)")
    op.add_argument("--bind", type=address, default="127.0.0.1:0",
                    help="local address for the command link (default: 127.0.0.1:0; a robot on another host "
                         "needs e.g. 0.0.0.0:0 with --allow-remote)")
    op.add_argument("--allow-remote", action="store_true",
                    help="allow non-loopback addresses: --bind and --video-listen (a robot on another host) and "
                         "xsens-live:HOST:PORT (MVN streaming from another PC)")
    op.add_argument("--source", "--input", dest="source", type=_input_spec, default="synthetic",
                    help="'synthetic', 'xsens-live[:PORT]' (MVN network stream, default port 9763), "
                         "'openvr' (SteamVR), or a motion file replayed at its true rate (default: synthetic)")
    op.add_argument("--vr-config", type=nonempty_path,
                    help="OpenVR tracker roles and buttons (JSON, see teleop/inputs/openvr_input.py)")
    op.add_argument("--record", type=nonempty_path, metavar="FILE", help="record every stream to this MCAP file "
                    "(raw input, references, received camera frames, network statistics)")
    op.add_argument("--task", type=task_label, metavar="NAME", help="with --record: the session is one episode "
                    "labelled NAME, ready for `teleop dataset export` and `teleop train` (the record button stops "
                    "it; its later episodes get the same label)")
    op.add_argument("--force", action="store_true", help="with --record: overwrite the file if it exists")
    op.add_argument("--speed", type=positive_float, default=None,
                    help="replay speed factor for a file source (default: 1)")
    op.add_argument("--loop", action="store_true",
                    help="loop a file source (it returns to its first pose over 0.5-3 s between laps)")
    op.add_argument("--rate-hz", type=sample_rate_hz, default=None,
                    help="rate of an Xsens CSV or AMC file source [Hz] (default 100 and 120: they do not state it)")
    op.add_argument("--seed", type=int, default=0, help="seed of the synthetic operator (default: 0)")
    op.add_argument("--video-listen", type=address, default="127.0.0.1:9003",
                    help="where to receive the robot's video (default: 127.0.0.1:9003)")
    op.add_argument("--jitter-buffer", type=_jitter_buffer_s, default=0.0,
                    help="video jitter buffer length [s], at most 10 (default: 0, none)")
    op.add_argument("--view", choices=("none", "web", "headset"), default="none",
                    help="display: none, the local web viewer, or the VR headset (SteamVR) (default: none)")
    op.add_argument("--port", type=port, default=None, help="web viewer port (default: 8080)")
    op.add_argument("--duration", type=positive_float, help="stop after this many seconds")
    op.add_argument("--secret-file", type=nonempty_path,
                    help="shared secret file (default: $TELEOP_SECRET or ~/.config/teleop/secret)")
    op.add_argument("--json", action="store_true", help="print the final statistics as JSON")
    op.set_defaults(func=runs_on_without_its_reader(_said_as("operator", _run_operator)))


def _said_as(station: str, run: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """``run`` with the warnings its libraries log (``teleop.*``: a packet failing
    authentication, a secret file created) said as the station's own lines,
    ``[robot] warning: ...``: they came bare, unlike every other line of the station."""
    @functools.wraps(run)
    def wrapped(args: argparse.Namespace) -> int:
        logger = logging.getLogger("teleop")
        handler = logging.StreamHandler(sys.stderr)     # this run's stderr
        handler.setFormatter(_StationFormatter(station))
        handler.setLevel(logging.WARNING)
        logger.addHandler(handler)
        try:
            return run(args)
        finally:
            logger.removeHandler(handler)
    return wrapped


class _StationFormatter(logging.Formatter):
    """``[station] warning: message`` (the level in lower case, as the stations' own lines)."""

    def __init__(self, station: str) -> None:
        super().__init__()
        self.station = station

    def format(self, record: logging.LogRecord) -> str:
        return f"[{self.station}] {record.levelname.lower()}: {record.getMessage()}"


def _input_spec(text: str) -> str:
    """``--input``: an ``xsens-live[:[HOST:]PORT]`` spec's port checked by argparse (exit
    code 2, as --robot's); the other inputs (a file, openvr) are checked when opened."""
    if text.startswith("xsens-live:"):
        from teleop.inputs.xsens_live import parse_bind

        return checked_text(text, lambda spec: parse_bind(spec[len("xsens-live:"):]), prefix=f"{text}: ")
    return text


def _bound(option: str, value, open_: Callable):
    """``open_()``, which binds the address given by ``option``: an address in use (another
    station, a proxy) or not available here fails naming the option and the address, as
    "[Errno 98] Address already in use" does not (a station binds up to three ports)."""
    try:
        return open_()
    except OSError as exc:
        # A refusal made before anything opened keeps its kind.
        kind = type(exc) if getattr(exc, "before_work", False) else OSError
        error = kind(f"{option} {value}: {_in_cli_words(exc.strerror or str(exc))}")
        # Found while the station starts, before its work: the error line says what to change,
        # without the TELEOP_DEBUG hint meant for errors from inside the work (README).
        error.before_work = True      # type: ignore[attr-defined]
        raise error from None


def _in_cli_words(message: str) -> str:
    """A library's refusal as this command says it: the libraries name both the option and
    their Python keyword ("give --allow-remote (allow_remote=True)"); a command's user only
    has the option."""
    return message.replace(" (allow_remote=True)", "")


def _jitter_buffer_s(text: str) -> float:
    """``--jitter-buffer``: seconds in [0, 10]. A buffer longer than the longest round trip
    the product takes only delays the video (1e9 s: nothing was ever shown)."""
    return float_in_interval(text, 0.0, MAX_ROUND_TRIP_S, unit="s")


def _check_command_link(args: argparse.Namespace) -> tuple:
    """The robot's socket address, resolved once (not at every send: a host name would be
    looked up 100 times a second). Refuses, before the station starts, a --bind that cannot
    reach --robot: a socket bound to loopback cannot send to another host (EINVAL), nor an
    IPv4 socket to an IPv6 address; every reference would fail, counted but never said, and
    the operator would only hear that the robot is silent."""
    from teleop.net.udp import is_loopback, parse_address, reaches_own_socket, resolve

    family, bind = _bound("--bind", args.bind, lambda: resolve(parse_address(args.bind)))
    if reaches_own_socket(args.video_listen, args.bind):
        # Said as a clash of two options, not as the second's "Address already in use".
        raise UsageError(f"--video-listen {args.video_listen} is this station's own --bind {args.bind}: give the "
                         "video and the commands ports of their own (--bind 127.0.0.1:0 picks a free one)")
    for option, own in (("--bind", args.bind), ("--video-listen", args.video_listen)):
        # The commands would come back to this station, dropped as its own or as no video,
        # and the only sign was a robot that never answered.
        if reaches_own_socket(args.robot, own):
            raise UsageError(f"--robot {args.robot} is this station's own {option} {own}: the commands would "
                             "come back to it; --robot is the address `teleop robot --listen` (or a proxy's "
                             "--listen) gives, default 127.0.0.1:9001")
    if args.source == "xsens-live" or args.source.startswith("xsens-live:"):
        from teleop.inputs.xsens_live import parse_bind

        mvn_host, mvn_port = parse_bind(args.source[len("xsens-live:"):] if ":" in args.source else "")
        mvn = f"[{mvn_host}]:{mvn_port}" if ":" in mvn_host else f"{mvn_host}:{mvn_port}"
        if reaches_own_socket(args.robot, mvn):
            # As the two ports above: the commands would land on the MVN receiver, refused
            # there as malformed poses, and the session end as "the robot never answered".
            raise UsageError(f"--robot {args.robot} is this station's own MVN port (--input {args.source}): the "
                             "commands would go to the suit's receiver; give the robot's address (`teleop robot "
                             "--listen`, default 127.0.0.1:9001) or another MVN port")
    host, port = parse_address(args.robot)
    try:   # the robot's address as this socket's family sees it ("localhost" may have both)
        robot = socket.getaddrinfo(host, port, family=family, type=socket.SOCK_DGRAM)[0][4]
    except socket.gaierror:
        robot_family, _ = _bound("--robot", args.robot, lambda: resolve((host, port)))
        raise UsageError(f"--robot {args.robot} and --bind {args.bind} are of different address families "
                         f"(IPv4 and IPv6): bind an address of the robot's family, e.g. --bind "
                         f"{'[::1]:0' if robot_family == socket.AF_INET6 else '127.0.0.1:0'}") from None
    if is_loopback(bind[0]) and not is_loopback(str(robot[0])):   # an IP address text (AF_INET/AF_INET6)
        raise UsageError(f"--robot {args.robot} is not on this host, and the command link is bound to loopback "
                         f"(--bind {args.bind}), which cannot reach it: pass --bind "
                         f"{'[::]:0' if family == socket.AF_INET6 else '0.0.0.0:0'} --allow-remote "
                         f"(or this host's address on that network)")
    return robot


def _check_station_files(args: argparse.Namespace) -> None:
    """Refuse a folder given as --record or --secret-file, and a recording (often the only
    copy of a session) that would be overwritten without --force, before anything starts."""
    from teleop.data_args import check_recording_output

    if args.secret_file is not None and args.secret_file.is_dir():
        raise PreconditionError(f"--secret-file {args.secret_file} is a folder: give a file name")
    if args.record is not None:
        # Its folder too: a read-only one said "Read-only file system" once the station had
        # started, with the TELEOP_DEBUG hint and no word of --record.
        check_recording_output(args.record, "--record", args.force)
    if args.task and args.record is None:
        raise UsageError("--task NAME labels the recording: give --record FILE too")
    if args.force and args.record is None:
        raise UsageError("--force overwrites an existing recording: give --record FILE too")


def _is_file_source(spec: str) -> bool:
    """Whether ``--input spec`` is a motion file (what :func:`teleop.inputs.base.open_source`
    does not read as a live input)."""
    return not (spec in ("synthetic", "openvr", "xsens-live") or spec.startswith("xsens-live:"))


def _check_operator_options(args: argparse.Namespace) -> None:
    """Refuse, before anything starts, an option that the chosen input or view would ignore
    (as --task without --record): the user expects it to act. Only options given are
    refused (their defaults are None or False), never a default."""
    from teleop.takes import check_rate_hz      # here, not at the top: `teleop --help` loads no readers

    if args.vr_config is not None and args.source != "openvr":
        raise UsageError(f"--vr-config configures the OpenVR input: give --input openvr too "
                         f"(not --input {args.source})")
    if not _is_file_source(args.source):
        for option, given in (("--loop", args.loop), ("--speed", args.speed is not None),
                              ("--rate-hz", args.rate_hz is not None)):
            if given:
                raise UsageError(f"{option} is about replaying a motion file: give --input FILE "
                                 f"(not --input {args.source})")
    else:
        # As `teleop retarget` says it: else silently ignored, the take played at its own rate.
        check_rate_hz(args.rate_hz, [Path(args.source)])
    if args.port is not None and args.view != "web":
        raise UsageError("--port is the web viewer's port: give --view web too")


def _secret(path, command: str):
    from teleop.net.secret import SecretError, load_secret

    try:
        return load_secret(path, create_default=True)
    except SecretError as exc:  # a user error: say what is wrong, no traceback
        raise SystemExit(f"teleop {command}: error: {exc}") from None


def _close_recording(recording) -> OSError | None:
    """Close a station's recording (None: none); its failure (a full disk) is returned, to be
    reported after the session's statistics, not instead of them."""
    if recording is None:
        return None
    try:
        recording.close()
    except OSError as exc:
        return exc
    return None


def _seconds(value: float | None) -> str:
    """A delay for the status lines: "0.750 s", or "n/a" before any packet measured it (not
    "nan s"; "-" read as a minus sign: "tau_f - tau_b 0.750 s")."""
    return f"{value:.3f} s" if value is not None and value == value else "n/a"


def _recognised(output) -> str:
    """The task compensation follows, for the robot's status line: " squat p=0.97 x1.10" (its
    posterior probability and the operator's speed relative to the demonstrations), or ""
    in pass-through and before any task was recognised."""
    from teleop.prescient.compensator import CompensationState

    if output is None or output.task is None or output.state is CompensationState.PASSTHROUGH:
        return ""
    return f" {output.task} p={output.task_probability:.2f} x{output.speed:.2f}"


def _tau_b(telemetry: dict, video_hz: float) -> str:
    """τ̂_b for the status lines, saying when it is the assumed default, not a measurement
    (and, with ``video_hz`` 0, that no report will come: "no video report yet" promised one)."""
    if telemetry["tau_b_measured"]:
        return f"{telemetry['tau_b_s']:.3f} s"
    why = "no video, --video-hz 0" if video_hz == 0 else "no video report yet"
    return f"{telemetry['tau_b_s']:.3f} s (assumed: {why})"


def _run_robot(args: argparse.Namespace) -> int:
    _check_station_files(args)
    from promp.library import TaskLibrary
    from retarget.references import FLAT_SIZE
    from teleop.net.auth import video_mac
    from teleop.net.protocol import PacketCodec
    from teleop.net.udp import UdpEndpoint, parse_address, reaches_own_socket
    from teleop.net.watchdog import HOLDING_STATES, WatchdogState
    from teleop.robot.model import RobotModel
    from teleop.robot.target import library_robot_mismatch, robot_target
    from teleop.sim.camera import CameraIntrinsics
    from teleop.sim.lowpoly import LowPolyEyeCamera
    from teleop.sim.scene import add_to_simulation
    from teleop.sim.simulator import Simulation
    from teleop.stations.robot_events import RobotEvents
    from teleop.stations.robot_station import RobotStation, RobotStationConfig
    from teleop.video.sender import VideoSender

    if reaches_own_socket(args.video_to, args.listen):
        # Each frame would arrive at the command socket and be dropped there, unsaid.
        raise UsageError(f"--video-to {args.video_to} is this station's own --listen {args.listen}: the video would "
                         "come back to it; --video-to is the operator's --video-listen (default 127.0.0.1:9003)")
    from teleop.net.udp import NonLoopbackRefused, is_loopback, resolve

    video_to = _bound("--video-to", args.video_to, lambda: resolve(parse_address(args.video_to)))[1]
    if not args.allow_remote and not is_loopback(str(video_to[0])):
        # The camera went to another host unasked, as nothing else the stations open does.
        raise NonLoopbackRefused(f"--video-to {args.video_to}: refusing to send the eye camera to non-loopback "
                                 f"address {video_to[0]}; give --allow-remote to send it to another host")
    if args.library is not None and args.library.is_dir():
        raise PreconditionError(f"--library {args.library} is a folder: give the task library file `teleop train "
                                "-o FILE` wrote (it learns one from folders of takes)")
    if args.library is not None and not args.library.exists():
        raise PreconditionError(f"--library {args.library}: no such file (`teleop train DIR -o FILE` writes one; "
                                "without --library the robot runs without compensation)")
    library = TaskLibrary.load(args.library) if args.library else None
    if library is not None and library.n_signals != FLAT_SIZE:
        # A ProMP library of other signals (promp is a library of its own): the compensator
        # said only "ood_indices must be signal indices in 0..4".
        raise PreconditionError(f"--library {args.library}: its ProMPs have {library.n_signals} signals, the robot's "
                                f"references {FLAT_SIZE}: not a library `teleop train` made")
    if library is not None:
        mismatch = library_robot_mismatch(library.metadata, robot_target(RobotModel()))
        if mismatch:
            # Its predictions would be the other robot's references: hands and CoM elsewhere.
            raise PreconditionError(f"--library {args.library} was {mismatch}: learn it again for this robot "
                                    "(teleop train without --robot)")
    secret = _secret(args.secret_file, args.command)
    codec = PacketCodec(secret)
    endpoint = _bound("--listen", args.listen, lambda: UdpEndpoint(codec, args.listen, allow_remote=args.allow_remote))
    listening_since = endpoint.clock.now()
    # Every resource is closed however the station ends, a failed start included.
    with contextlib.ExitStack() as resources:
        resources.callback(endpoint.close)
        robot = RobotModel()
        sim = Simulation(robot, gui=args.gui, visual=args.gui)
        resources.callback(sim.close)
        scene = add_to_simulation(sim, static=True)
        camera = LowPolyEyeCamera(sim, robot, "left_eye", CameraIntrinsics(320, 240), scene=scene)
        sender = VideoSender(parse_address(args.video_to), authenticate=video_mac(secret)[0], fec_group=args.video_fec)
        resources.callback(sender.close)
        config = RobotStationConfig(video_hz=args.video_hz, stale_timeout=args.stale_timeout)
        recording = None
        if args.record:
            from teleop.stations.recording import RobotRecording

            from teleop.robot.target import library_metadata, robot_target

            # The robot note: `dataset export` passes it to the references files, `train` to a library.
            recording = RobotRecording(args.record, endpoint.clock, robot.joint_names,
                                       metadata={"command": "teleop robot", **library_metadata(robot_target(robot))},
                                       task=args.task, task_since=listening_since)
            resources.callback(recording.close)     # if the session fails: closed below otherwise
        station = RobotStation(endpoint, robot, sim, library, config,
                               video_out=recording.video_out(sender) if recording else
                               (lambda image, t: sender.send_image(image[:, :, ::-1], t)), render=camera.render)
        station.name_scene(scene)
        host, port = endpoint.address[:2]
        print(f"robot station listening on {host}:{port}, video to {args.video_to}, "
              f"compensation {'on: ' + str(args.library) if library else 'off'}", file=sys.stderr)
        last_print = [time.monotonic()]
        loop_timing = LoopTiming(station.dt)     # filled by run_loop, read by the status lines

        events = RobotEvents()

        def tick():
            record = station.tick()
            if recording is not None:
                recording.after_tick(station, record)
            events.say_new(station)
            if time.monotonic() - last_print[0] > STATUS_INTERVAL_S:
                last_print[0] = time.monotonic()
                tel = station.telemetry()
                doing = "holding" if WatchdogState[record.watchdog] in HOLDING_STATES else record.compensation
                print(f"[robot] {record.watchdog:8s} {doing:11s}"
                      f"{_recognised(station.last_compensator_output)} "
                      f"tau_f {_seconds(tel['tau_f_mean_s'])} "
                      f"tau_b {_tau_b(tel, args.video_hz)}  "
                      f"qp p50 {tel['controller_timing_ms'].get('total_p50_ms', 0):.2f} ms  "
                      f"{loop_timing.short()}{_status_kernel_drops(endpoint.stats.kernel_dropped)}",
                      file=sys.stderr)

        try:
            run_loop(station.dt, args.duration, tick, "robot", loop_timing)
        except KeyboardInterrupt:
            stop_handled()
        events.finish()
        endpoint.count_late_kernel_drops()   # those after the last command read too (Linux)
        # The watchdog's holds: said as they happen, and counted here (a --json summary
        # said nothing of a session in which the robot held its pose for want of commands).
        telemetry = {**station.telemetry(), "loop": loop_timing.summary(),
                     "watchdog": {"state": station.watchdog.state.name, "stale_events": station.watchdog.stale_events,
                                  "stale_timeout_s": station.config.stale_timeout}}
        recording_error = _close_recording(recording)
    if args.json:
        print(dumps(telemetry))
    else:
        network = telemetry["network"]
        reasons = {k[len("dropped_"):]: v for k, v in network.items() if k.startswith("dropped_") and v}
        # Why, not only how many: "replayed" are the network's own duplicates, "bad_mac" a
        # wrong secret or forged packets.
        dropped = f"{sum(reasons.values())} dropped" + (
            ": " + ", ".join(f"{reason} {n}" for reason, n in sorted(reasons.items())) if reasons else "")
        # Never read, so neither accepted nor among the reasons: lost to a full receive buffer.
        kernel = _kernel_dropped(network.get("kernel_dropped"), "more")
        dropped += f"; {kernel}" if kernel else ""
        timing = telemetry["controller_timing_ms"]
        print(f"accepted {network.get('accepted', 0)} packets{_accepted_kinds(network)} ({dropped}), "
              "whole-body control "
              f"per tick p50 {timing.get('total_p50_ms', float('nan')):.2f} ms, p99 "
              f"{timing.get('total_p99_ms', float('nan')):.2f} ms, tau_f {_seconds(telemetry['tau_f_mean_s'])}, "
              f"tau_b {_tau_b(telemetry, args.video_hz)}, {loop_timing.short()}, joint speeds up to "
              f"{telemetry['max_joint_speed_ratio']:.2f} of their limits"
              + (f" (it touched the scene for {telemetry['scene_contact_s']:.2f} s: {telemetry['first_scene_contact']})"
                 if telemetry["scene_contact_s"] else "")
              + (", the robot fell" if telemetry["fell"] else "")
              + (f", it held a safe pose {_times(telemetry['watchdog']['stale_events'])} for want of commands"
                 if telemetry["watchdog"]["stale_events"] else "")
              + (f", {telemetry['refused_other_operator']} commands of another operator refused"
                 if telemetry["refused_other_operator"] else "")
              + (f", {telemetry['refused_implausible']} implausible commands refused"
                 if telemetry["refused_implausible"] else "")
              + _controller_holds(telemetry["controller_status_ticks"], station.dt)
              + (f", {telemetry['coalesced_references']} commands coalesced (more in one tick than the "
                 "prediction is conditioned on)" if telemetry["coalesced_references"] else ""))
    if recording_error is not None:
        raise recording_error
    if telemetry["fell"]:
        # Exit code 1, as `teleop demo` and `teleop jog`: a script running the station took
        # exit 0 for a session that went well, and the figures of a fallen robot mean nothing.
        print("teleop robot: error: the robot fell (a body part other than the feet touched the ground); "
              "restart the robot station to stand it up again", file=sys.stderr)
        return 1
    return 0


def _controller_holds(status_ticks: dict[str, int], dt: float) -> str:
    """", the whole-body controller held its command for 1.23 s (references out of the
    workspace: 0.80 s)" for the final line, or "" when it never did."""
    held, refused = status_ticks.get("held", 0), status_ticks.get("rejected_target", 0)
    if not held + refused:
        return ""
    return (f", the whole-body controller held its command for {(held + refused) * dt:.2f} s"
            + (f" (references out of the workspace: {refused * dt:.2f} s)" if refused else ""))


def _times(n: int) -> str:
    return "once" if n == 1 else f"{n} times"


#: How the robot's summary names the packets it accepts, by type (see FilterStats.accepted_by_type).
_ACCEPTED_KINDS = {"references": "commands", "clock_ping": "clock pings", "clock_pong": "clock replies",
                   "video_report": "video reports"}


def _accepted_kinds(network: dict) -> str:
    """": 1200 commands, 60 clock pings, 14 video reports" from an endpoint's counters: the
    total alone mixed the commands with the link's own traffic."""
    kinds = [(key[len("accepted_"):], n) for key, n in network.items() if key.startswith("accepted_") and n]
    if not kinds:
        return ""
    order = list(_ACCEPTED_KINDS)
    kinds.sort(key=lambda kind_n: (order.index(kind_n[0]) if kind_n[0] in order else len(order), kind_n[0]))
    return ": " + ", ".join(f"{n} {_ACCEPTED_KINDS.get(kind, kind)}" for kind, n in kinds)


def _make_source(args: argparse.Namespace):
    from teleop.inputs.base import open_source
    from teleop.inputs.openvr_input import OpenVRUnavailable

    try:
        return open_source(args.source, speed=1.0 if args.speed is None else args.speed, loop=args.loop,
                           seed=args.seed, vr_config=getattr(args, "vr_config", None),
                           allow_remote=getattr(args, "allow_remote", False), rate_hz=getattr(args, "rate_hz", None))
    except (OpenVRUnavailable, OSError, ValueError) as exc:   # no SteamVR, port in use, bad file/spec
        message = _in_cli_words(str(exc))   # most name the file already: "--input F: F: no such file" says it twice
        where = "--input " if message.startswith(args.source) else f"--input {args.source}: "
        raise SystemExit(f"teleop operator: error: {where}{message}") from None


def _web_viewer(args: argparse.Namespace, resources: contextlib.ExitStack, *, robot_pose: Callable[[], dict],
                stats: Callable[[], dict]):
    """The web viewer of ``--view web``, started on ``--port`` (closed with ``resources``);
    ``robot_pose`` and ``stats`` feed its 3D view and stats panel. Its URL is for the
    caller to say, once the whole station has started."""
    from teleop.video.web import VideoWebViewer

    web_port = 8080 if args.port is None else args.port
    viewer = VideoWebViewer(port=web_port, streams=("left",), title="Teleoperation: operator view",
                            robot_pose_provider=robot_pose, stats_provider=stats)
    _bound("--port", web_port, viewer.start)
    resources.callback(viewer.stop)
    return viewer


def _status_kernel_drops(count: int | None) -> str:
    """"  835 packets dropped by the kernel" (since the start) to end the robot's status line,
    or "" (none, or not known): last, so that the columns before stay where they were."""
    kernel = dropped_by_the_kernel([(count, "packets")])
    return f"  {kernel}" if kernel else ""


def _kernel_dropped(count: int | None, what: str) -> str:
    """"N <what> dropped by the kernel: ..." for a final line, or "" (none, or not known)."""
    return f"{count} {what} dropped by the kernel: receive buffer full" if count else ""


def _headset(resources: contextlib.ExitStack):
    """The VR headset display of ``--view headset`` (closed with ``resources``), or None
    after saying that SteamVR is not there."""
    from teleop.inputs.openvr_input import OpenVRUnavailable
    from teleop.video.openvr_display import HeadsetDisplay

    try:
        headset = HeadsetDisplay()
    except OpenVRUnavailable as exc:
        print(f"teleop operator: error: --view headset: {exc}", file=sys.stderr)
        return None
    resources.callback(headset.close)
    return headset


def _operator_view_stats(station, video, endpoint) -> dict:
    """The operator's figures for the web viewer's stats panel (read from the HTTP thread)."""
    if station is None or video is None:
        return {"operator": "starting"}
    out: dict = {"operator": {"references_sent": station.sent, "video_frames_displayed": video.displayed}}
    feedback = station.feedback
    if feedback is not None:
        out["feedback"] = {"forward_delay_s": feedback.forward_delay, "forward_delay_std_s": feedback.forward_delay_std,
                           "clock_offset_s": feedback.clock_offset, "packets_accepted": feedback.packets_accepted,
                           "packets_dropped": feedback.packets_dropped}
    try:  # the station thread mutates these while we read: a failed read only skips them
        out["video"] = video.buffer.report()
        out["network"] = endpoint.stats.summary()
    except RuntimeError:
        pass
    return out  # NaN ("not known yet") becomes null in the viewer's JSON


def _run_operator(args: argparse.Namespace) -> int:
    _check_station_files(args)
    _check_operator_options(args)
    robot_address = _check_command_link(args)
    from teleop.clock import WallClock
    from teleop.net.auth import video_mac
    from teleop.net.protocol import PacketCodec
    from teleop.net.udp import NonLoopbackRefused, UdpEndpoint, is_loopback, parse_address, resolve

    video_host = parse_address(args.video_listen)[0]
    if not args.allow_remote and not is_loopback(_bound("--video-listen", args.video_listen,
                                                        lambda: resolve(parse_address(args.video_listen)))[1][0]):
        # As every other port the stations open: off loopback only when asked for.
        raise NonLoopbackRefused(f"--video-listen {args.video_listen}: refusing to listen on non-loopback address "
                                 f"{video_host}; give --allow-remote to receive the robot's video from another host")
    from teleop.robot.model import RobotModel
    from teleop.robot.target import robot_target
    from teleop.stations.operator_station import OperatorStation, OperatorStationConfig, VideoPath

    secret = _secret(args.secret_file, args.command)
    codec = PacketCodec(secret)
    endpoint = _bound("--bind", args.bind, lambda: UdpEndpoint(codec, args.bind, allow_remote=args.allow_remote,
                                                               clock=WallClock()))
    # Every resource is closed however the station ends, including a failed start (a bad
    # --input, a port in use), which used to leave the web viewer and the sockets open.
    with contextlib.ExitStack() as resources:
        resources.callback(endpoint.close)
        # Bound below; on_display and the viewer's providers read them when a frame comes or
        # a page asks, both only once the loop runs.
        viewer = headset = recording = station = video = None

        def on_display(frame, now):
            if viewer is not None:
                viewer.publish_jpeg("left", frame.payload)
            if headset is not None:
                from teleop.stations.recording import camera_name

                headset.show_jpeg(camera_name(frame.timing.stream_id), frame.payload)
            if recording is not None:
                recording.camera_frame(frame, now)

        video = _bound("--video-listen", args.video_listen,
                       lambda: VideoPath(endpoint.clock, args.jitter_buffer, parse_address(args.video_listen),
                                         on_display, verify=video_mac(secret)[1]))
        resources.callback(video.close)
        from teleop.inputs.base import GatedSource
        from teleop.stations.recording import input_event_handler

        if args.view == "headset":
            # Before the input, as it always was: with --input openvr too, SteamVR is started
            # as the overlay application the display needs. It says nothing when it starts.
            headset = _headset(resources)
            if headset is None:
                return 1     # what is missing is SteamVR, not a usage error: as for --input openvr
        # Opened before the web viewer: an input that cannot be opened (no SteamVR, the MVN
        # port in use, a missing or malformed file) is then the only line the user sees, not
        # one after "web viewer on http://...", a page that would never show anything.
        source = raw_source = _make_source(args)
        if hasattr(source, "close"):
            resources.callback(source.close)
        if args.view == "web":
            from teleop.video.robot_view import RobotPoseView

            # 3D view: ghost (operator's current references), actual and predicted robot pose
            # (measured / commanded q of the FEEDBACK packets).
            pose_view = RobotPoseView()
            viewer = _web_viewer(args, resources, robot_pose=lambda: pose_view.from_station(station),
                                 stats=lambda: _operator_view_stats(station, video, endpoint))
        target = robot_target(RobotModel())
        if args.record:
            # Opened once the ports, the input and the view are there: a station that cannot
            # start (a typo in --input, a port in use) leaves no empty recording behind to
            # refuse the next run without --force.
            from teleop.robot.target import library_metadata
            from teleop.stations.recording import OperatorRecording

            # The robot note of the target it retargets to: `dataset export` passes it on.
            recording = OperatorRecording(args.record, endpoint.clock, task=args.task,
                                          metadata={"command": "teleop operator", "input": args.source,
                                                    **library_metadata(target)})
            resources.callback(recording.close)     # if the session fails: closed below otherwise
        if viewer is not None:
            # Said once everything the station opens is open: the page is worth opening.
            print(f"web viewer on {viewer.url}", file=sys.stderr)   # the port bound (--port 0: any free one)
        # Pause / emergency stop buttons gate what is sent; calibrate and record act on the station.
        source = GatedSource(recording.wrap_source(source) if recording else source)
        station = OperatorStation(endpoint, robot_address, source, target, video,
                                  OperatorStationConfig(jitter_buffer_s=args.jitter_buffer))
        # The handler acts on the station, which is built on the source: given to the source
        # once both exist (events come only when the station polls it).
        source.on_event = input_event_handler(station, recording,
                                              log=lambda m: print(f"[operator] {m}", file=sys.stderr))
        watches = [SilenceWatch(lambda: station.feedback_received + video.receiver.stats.datagrams,
                                f"feedback or video from the robot at {args.robot}",
                                lambda: robot_silence_hint(station.sent, station.implausible))]
        command_link = CommandLinkWatch(station, video)
        from teleop.inputs.xsens_live import XsensLiveSource

        if isinstance(raw_source, XsensLiveSource):
            watches.append(SilenceWatch(lambda: raw_source.stats["samples"],
                                        f"MVN poses received on port {raw_source.address[1]}",
                                        raw_source.pose_stream_hint))

        from teleop.stations.operator_events import OperatorEvents

        events = OperatorEvents(station, video, args.source, raw_source, args.video_listen)

        def tick():
            video.poll_socket()
            station.tick()
            for watch in watches:
                watch.check()
            command_link.check()
            events.say_new()
            if recording is not None:
                for sent in station.sent_in_tick:
                    recording.references(sent)
                recording.after_tick(endpoint, video)
            if events.status_due():
                events.print_status(loop_timing)

        loop_timing = LoopTiming(0.01)
        try:
            run_loop(loop_timing.period, args.duration, tick, "operator", loop_timing)
        except KeyboardInterrupt:
            stop_handled()
        for watch in watches:
            watch.finish()
        command_link.finish()
        # Those after the last datagram read too (Linux), while the sockets are open.
        endpoint.count_late_kernel_drops()
        video.receiver.count_late_kernel_drops()
        recording_error = _close_recording(recording)
    from teleop.stations.operator_status import image_age_s

    report = video.buffer.report()
    # The buffer's delays are our arrival minus the robot's capture, two clocks: the age of the
    # images shown needs the offset the robot measured (None until it has).
    stats = {"references_sent": station.sent, "references_implausible": station.implausible,
             "feedback_received": station.feedback_received, "video_frames_displayed": video.displayed,
             "image_age_s": image_age_s(report, station.feedback),
             # Lost and rebuilt from parity (not those the parity merely overtook).
             "video": report, "video_datagrams_restored": video.receiver.stats.chunks_lost_recovered,
             "video_kernel_dropped": video.receiver.stats.kernel_dropped,
             "network": endpoint.stats.summary(), "loop": loop_timing.summary()}
    if args.json:
        print(dumps(stats))
    else:
        age = f", {stats['image_age_s']:.3f} s old" if stats["image_age_s"] is not None else ""
        shown = (f"displayed {video.displayed} video frames{age}" if args.view != "none" else
                 f"received {video.displayed} video frames on time for display{age} (not shown: --view none)")
        withheld = f" ({station.implausible} withheld: outside the robot's reach)" if station.implausible else ""
        restored = stats["video_datagrams_restored"]
        shown += f" ({restored} lost video datagrams rebuilt from parity)" if restored else ""
        video_lost = _kernel_dropped(stats["video_kernel_dropped"], "video datagrams")
        shown += f" ({video_lost})" if video_lost else ""
        feedback_lost = _kernel_dropped(stats["network"].get("kernel_dropped"), "packets")
        feedback_lost = f" ({feedback_lost})" if feedback_lost else ""
        print(f"sent {station.sent} reference packets{withheld}, received {station.feedback_received} feedback "
              f"packets{feedback_lost}, {shown}, {loop_timing.short()}")
    if recording_error is not None:
        raise recording_error
    video_stats = video.receiver.stats
    if station.feedback_received == 0 and video_stats.authenticated == 0:
        # Exit code 1: the session never reached a robot (warned above with the likely cause);
        # exit 0 told a script that the teleoperation had happened. Video that fails the MAC
        # check is not the robot's answer: another secret, whose robot drops our commands.
        forged = video_stats.datagrams - video_stats.authenticated
        print(f"teleop operator: error: the robot at {args.robot} never answered: no feedback and no video in "
              "the whole session" + (f" ({forged} video datagrams failed authentication: do both stations use "
                                     "the same secret?)" if forged else ""), file=sys.stderr)
        return 1
    return 0
