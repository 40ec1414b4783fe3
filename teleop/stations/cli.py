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
    robot.add_argument("--record", type=Path, metavar="FILE", help="record every stream to this MCAP file "
                       "(delivered and compensated commands, robot state, camera frames, network statistics)")
    robot.set_defaults(func=_run_robot)

    op = sub.add_parser("operator", help="run the operator station: input, retargeting, references out, video in",
                        description="Reads the operator's motion (the synthetic operator, or a motion file replayed at its "
                                    "true rate), retargets it, sends the references to the robot station, receives the "
                                    "robot's video through a jitter buffer and reports the backward delay.")
    op.add_argument("--robot", default="127.0.0.1:9001", help="robot station address (default: 127.0.0.1:9001)")
    op.add_argument("--bind", default="127.0.0.1:0", help="local address for the command link")
    op.add_argument("--source", "--input", dest="source", default="synthetic",
                    help="'synthetic', 'xsens-live[:PORT]' (MVN network stream, default port 9763), 'openvr' (SteamVR), "
                         "or a motion file replayed at its true rate (default: synthetic)")
    op.add_argument("--vr-config", type=Path, help="OpenVR tracker roles and buttons (JSON, see teleop/inputs/openvr_input.py)")
    op.add_argument("--record", type=Path, metavar="FILE", help="record every stream to this MCAP file "
                    "(raw input, references, received camera frames, network statistics)")
    op.add_argument("--speed", type=float, default=1.0, help="replay speed factor for a file source")
    op.add_argument("--loop", action="store_true", help="loop a file source")
    op.add_argument("--seed", type=int, default=0, help="seed of the synthetic operator")
    op.add_argument("--video-listen", default="127.0.0.1:9003", help="where to receive the robot's video")
    op.add_argument("--jitter-buffer", type=float, default=0.0, help="video jitter buffer length [s]")
    op.add_argument("--view", choices=("none", "web", "headset"), default="none",
                    help="display: none, the local web viewer, or the VR headset (SteamVR)")
    op.add_argument("--port", type=int, default=8080, help="web viewer port (default: 8080)")
    op.add_argument("--duration", type=float, help="stop after this many seconds")
    op.add_argument("--secret-file", type=Path, help="shared secret file")
    op.add_argument("--json", action="store_true", help="print the final statistics as JSON")
    op.set_defaults(func=_run_operator)


def _secret(path):
    from teleop.net.secret import SecretError, load_secret

    try:
        return load_secret(path, create_default=True)
    except SecretError as exc:  # a user error: say what is wrong, no traceback
        raise SystemExit(f"teleop: error: {exc}") from None


def _loop(period: float, duration: float | None, body) -> None:
    """Call ``body()`` every ``period`` seconds (monotonic schedule) until ``duration``."""
    start = began = time.monotonic()
    k = 0
    # The duration counts from `began`: `start` moves when the schedule resynchronises.
    while duration is None or time.monotonic() - began < duration:
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
    recording = None
    if args.record:
        from teleop.stations.recording import RobotRecording

        recording = RobotRecording(args.record, endpoint.clock, robot.joint_names, metadata={"command": "teleop robot"})
    station = RobotStation(recording.wrap_endpoint(endpoint) if recording else endpoint, robot, sim, library, config,
                           video_out=recording.video_out(sender) if recording else
                           (lambda image, t: sender.send_image(image[:, :, ::-1], t)), render=camera.render)
    print(f"robot station listening on {endpoint.address}, video to {args.video_to}, "
          f"compensation {'on: ' + str(args.library) if library else 'off'}", file=sys.stderr)
    last_print = [time.monotonic()]

    def tick():
        record = station.tick()
        if recording is not None:
            recording.after_tick(station, record)
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
        if recording is not None:
            recording.close()
        sender.close()
        endpoint.close()
        sim.close()
    if args.json:
        print(json.dumps(telemetry, default=float))
    return 0


def _make_source(args: argparse.Namespace):
    from teleop.inputs.base import open_source
    from teleop.inputs.openvr_input import OpenVRUnavailable

    try:
        return open_source(args.source, speed=args.speed, loop=args.loop, seed=args.seed,
                           vr_config=getattr(args, "vr_config", None))
    except (OpenVRUnavailable, OSError, ValueError) as exc:   # no SteamVR, port in use, bad file/spec
        raise SystemExit(f"teleop operator: error: --input {args.source}: {exc}") from None


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
    from teleop.clock import WallClock
    from teleop.net.protocol import PacketCodec
    from teleop.net.udp import UdpEndpoint, parse_address
    from teleop.robot.model import RobotModel
    from teleop.robot.target import robot_target
    from teleop.stations.operator_station import OperatorStation, OperatorStationConfig, VideoPath

    endpoint = UdpEndpoint(PacketCodec(_secret(args.secret_file)), args.bind, clock=WallClock())
    viewer = None
    station = video = None  # bound below; the viewer's providers read them when a page asks
    if args.view == "web":
        from teleop.video.robot_view import RobotPoseView
        from teleop.video.web import VideoWebViewer

        # 3D view: ghost (operator's current references), actual and predicted robot pose
        # (measured / commanded q of the FEEDBACK packets).
        pose_view = RobotPoseView()
        viewer = VideoWebViewer(port=args.port, streams=("left",), title="Teleoperation: operator view",
                                robot_pose_provider=lambda: pose_view.from_station(station),
                                stats_provider=lambda: _operator_view_stats(station, video, endpoint))
        viewer.start()
        print(f"web viewer on http://127.0.0.1:{args.port}/", file=sys.stderr)
    headset = recording = None
    if args.view == "headset":
        from teleop.inputs.openvr_input import OpenVRUnavailable
        from teleop.video.openvr_display import HeadsetDisplay

        try:
            headset = HeadsetDisplay()
        except OpenVRUnavailable as exc:
            print(f"teleop operator: error: --view headset: {exc}", file=sys.stderr)
            endpoint.close()
            return 2
    if args.record:
        from teleop.stations.recording import OperatorRecording

        recording = OperatorRecording(args.record, endpoint.clock, metadata={"command": "teleop operator",
                                                                             "input": args.source})

    def on_display(frame, now):
        if viewer is not None:
            viewer.publish_jpeg("left", frame.payload)
        if headset is not None:
            from teleop.stations.recording import camera_name

            headset.show_jpeg(camera_name(frame.timing.stream_id), frame.payload)
        if recording is not None:
            recording.camera_frame(frame, now)

    video = VideoPath(endpoint.clock, args.jitter_buffer, parse_address(args.video_listen), on_display)
    from teleop.inputs.base import GatedSource
    from teleop.stations.recording import input_event_handler

    source = _make_source(args)
    # Pause / emergency stop buttons gate what is sent; calibrate and record act on the station.
    source = GatedSource(recording.wrap_source(source) if recording else source,
                         on_event=lambda event: handle_event(event))
    station = OperatorStation(endpoint, parse_address(args.robot), source, robot_target(RobotModel()), video,
                              OperatorStationConfig(jitter_buffer_s=args.jitter_buffer))
    handle_event = input_event_handler(station, recording, log=lambda m: print(f"[operator] {m}", file=sys.stderr))

    def tick():
        video.poll_socket()
        refs = station.tick()
        if recording is not None:
            if refs is not None:
                recording.references(refs)
            recording.after_tick(endpoint, video)

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
        if headset is not None:
            headset.close()
        if recording is not None:
            recording.close()
    stats = {"references_sent": station.sent, "video_frames_displayed": video.displayed,
             "video": video.buffer.report(), "network": endpoint.stats.summary()}
    if args.json:
        print(json.dumps(stats, default=float))
    else:
        print(f"sent {station.sent} reference packets, displayed {video.displayed} video frames")
    return 0
