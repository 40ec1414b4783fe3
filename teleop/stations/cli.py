"""``teleop robot`` and ``teleop operator``: the two stations as separate processes over UDP."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    robot = sub.add_parser("robot", help="run the robot station: simulated iCub, whole-body control, compensation, video out",
                           description="Listens for the operator's references over UDP (authenticated with the shared "
                                       "secret), compensates the delay with a ProMP library, tracks the references with "
                                       "the whole-body QP on the simulated iCub in real time and streams the eye camera.")
    robot.add_argument("--listen", default="127.0.0.1:9001", help="address to listen on (default: 127.0.0.1:9001)")
    robot.add_argument("--allow-remote", action="store_true", help="allow listening on a non-loopback address")
    robot.add_argument("--library", type=Path, help="ProMP task library from `teleop train` (default: none, no compensation)")
    robot.add_argument("--video-to", default="127.0.0.1:9003", help="where to send the eye camera (default: 127.0.0.1:9003)")
    robot.add_argument("--video-hz", type=float, default=10.0, help="eye camera frame rate (default: 10)")
    robot.add_argument("--stale-timeout", type=float, default=0.5, help="hold a safe pose after this long without commands [s]")
    robot.add_argument("--duration", type=float, help="stop after this many seconds (default: run until Ctrl-C)")
    robot.add_argument("--secret-file", type=Path, help="shared secret file (default: $TELEOP_SECRET or ~/.config/teleop/secret)")
    robot.add_argument("--gui", action="store_true", help="show pybullet's GUI window")
    robot.add_argument("--json", action="store_true", help="print the final telemetry as JSON")
    robot.set_defaults(func=_run_robot)

    op = sub.add_parser("operator", help="run the operator station: input, retargeting, references out, video in",
                        description="Reads the operator's motion (the synthetic operator, or a motion file replayed at its "
                                    "true rate), retargets it, sends the references to the robot station, receives the "
                                    "robot's video through a jitter buffer and reports the backward delay.")
    op.add_argument("--robot", default="127.0.0.1:9001", help="robot station address (default: 127.0.0.1:9001)")
    op.add_argument("--bind", default="127.0.0.1:0", help="local address for the command link")
    op.add_argument("--source", default="synthetic", help="'synthetic' or a motion file replayed at its true rate (default: synthetic)")
    op.add_argument("--speed", type=float, default=1.0, help="replay speed factor for a file source")
    op.add_argument("--loop", action="store_true", help="loop a file source")
    op.add_argument("--seed", type=int, default=0, help="seed of the synthetic operator")
    op.add_argument("--video-listen", default="127.0.0.1:9003", help="where to receive the robot's video")
    op.add_argument("--jitter-buffer", type=float, default=0.0, help="video jitter buffer length [s]")
    op.add_argument("--view", choices=("none", "web"), default="none", help="display: none, or the local web viewer")
    op.add_argument("--port", type=int, default=8080, help="web viewer port (default: 8080)")
    op.add_argument("--duration", type=float, help="stop after this many seconds")
    op.add_argument("--secret-file", type=Path, help="shared secret file")
    op.add_argument("--json", action="store_true", help="print the final statistics as JSON")
    op.set_defaults(func=_run_operator)


def _secret(path):
    from teleop.net.secret import load_secret

    return load_secret(path, create_default=True)


def _loop(period: float, duration: float | None, body) -> None:
    """Call ``body()`` every ``period`` seconds (monotonic schedule) until ``duration``."""
    start = time.monotonic()
    k = 0
    while duration is None or time.monotonic() - start < duration:
        body()
        k += 1
        delay = start + k * period - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        elif delay < -1.0:  # fell behind by a second: resynchronise instead of bursting
            start, k = time.monotonic(), 0


def _run_robot(args: argparse.Namespace) -> int:
    from promp.library import TaskLibrary
    from teleop.net.protocol import PacketCodec
    from teleop.net.udp import UdpEndpoint, parse_address
    from teleop.robot.model import RobotModel
    from teleop.sim.camera import CameraIntrinsics
    from teleop.sim.lowpoly_render import LowPolyEyeCamera
    from teleop.sim.scene import add_to_simulation
    from teleop.sim.simulator import Simulation
    from teleop.stations.robot_station import RobotStation, RobotStationConfig
    from teleop.video.sender import VideoSender

    library = TaskLibrary.load(args.library) if args.library else None
    endpoint = UdpEndpoint(PacketCodec(_secret(args.secret_file)), args.listen, allow_remote=args.allow_remote)
    robot = RobotModel()
    sim = Simulation(robot, gui=args.gui, visual=args.gui)
    scene = add_to_simulation(sim, static=True)
    camera = LowPolyEyeCamera(sim, RobotModel(), "left_eye", CameraIntrinsics(320, 240), scene=scene)
    sender = VideoSender(parse_address(args.video_to))
    config = RobotStationConfig(video_hz=args.video_hz, stale_timeout=args.stale_timeout)
    station = RobotStation(endpoint, robot, sim, library, config,
                           video_out=lambda image, t: sender.send_image(image[:, :, ::-1], t), render=camera.render)
    print(f"robot station listening on {endpoint.address}, video to {args.video_to}, "
          f"compensation {'on: ' + str(args.library) if library else 'off'}", file=sys.stderr)
    last_print = [time.monotonic()]

    def tick():
        record = station.tick()
        if time.monotonic() - last_print[0] > 2.0:
            last_print[0] = time.monotonic()
            tel = station.telemetry()
            print(f"[robot] {record.watchdog:8s} {record.compensation:11s} tau_f {tel['tau_f_mean_s']:.3f} s "
                  f"tau_b {tel['tau_b_s']:.3f} s  qp p50 {tel['controller_timing_ms'].get('total_p50_ms', 0):.2f} ms",
                  file=sys.stderr)

    try:
        _loop(station.dt, args.duration, tick)
    except KeyboardInterrupt:
        pass
    finally:
        telemetry = station.telemetry()
        sender.close()
        endpoint.close()
        sim.close()
    if args.json:
        print(json.dumps(telemetry, default=float))
    return 0


def _make_source(args: argparse.Namespace):
    if args.source == "synthetic":
        from teleop.inputs.synthetic import SyntheticOperator

        return SyntheticOperator(seed=args.seed)
    from teleop.inputs.replay import FileReplay

    return FileReplay(args.source, speed=args.speed, loop=args.loop)


def _run_operator(args: argparse.Namespace) -> int:
    from teleop.clock import WallClock
    from teleop.net.protocol import PacketCodec
    from teleop.net.udp import UdpEndpoint, parse_address
    from teleop.robot.model import RobotModel
    from teleop.robot.target import robot_target
    from teleop.stations.operator_station import OperatorStation, OperatorStationConfig, VideoPath

    endpoint = UdpEndpoint(PacketCodec(_secret(args.secret_file)), args.bind, clock=WallClock())
    viewer = None
    if args.view == "web":
        from teleop.video.web import VideoWebViewer

        viewer = VideoWebViewer(port=args.port)
        viewer.start()
        print(f"web viewer on http://127.0.0.1:{args.port}/", file=sys.stderr)

    def on_display(frame, now):
        if viewer is not None:
            viewer.publish_jpeg("left", frame.payload)

    video = VideoPath(endpoint.clock, args.jitter_buffer, parse_address(args.video_listen), on_display)
    source = _make_source(args)
    station = OperatorStation(endpoint, parse_address(args.robot), source, robot_target(RobotModel()), video,
                              OperatorStationConfig(jitter_buffer_s=args.jitter_buffer))

    def tick():
        video.poll_socket()
        station.tick()

    try:
        _loop(0.01, args.duration, tick)
    except KeyboardInterrupt:
        pass
    finally:
        video.close()
        endpoint.close()
        if viewer is not None:
            viewer.stop()
        if hasattr(source, "close"):
            source.close()
    stats = {"references_sent": station.sent, "video_frames_displayed": video.displayed,
             "video": video.buffer.report(), "network": endpoint.stats.summary()}
    if args.json:
        print(json.dumps(stats, default=float))
    else:
        print(f"sent {station.sent} reference packets, displayed {video.displayed} video frames")
    return 0
