"""Review of the stations and the demo: what a user hits at start-up, across hosts, in the
recordings and at the end of a short demo."""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path

import numpy as np
import pytest

from teleop.cli import main

SECRET = "stations-review-test-secret-0123456789"


@pytest.fixture()
def secret(monkeypatch):
    monkeypatch.setenv("TELEOP_SECRET", SECRET)


def _taken_udp_port():
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    return sock, sock.getsockname()[1]


def _free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_operator_keeps_the_valid_mask_of_a_sparse_source_for_its_recording():
    """A VR source (head, hands, waist) measures a few signals; the others are fill-ins.
    The references the station returns (which `teleop operator --record` records) keep the
    mask; before, the station cleared it for the wire on the same object, and every
    recording claimed every signal measured."""
    from teleop.clock import VirtualClock
    from teleop.inputs.synthetic import SyntheticOperator
    from teleop.net.delay import LinkModel
    from teleop.net.protocol import PacketCodec
    from teleop.net.virtual import connect_virtual
    from teleop.robot.model import RobotModel
    from teleop.robot.target import robot_target
    from teleop.stations.operator_station import OperatorStation
    from retarget.references import SIGNAL_SLICES

    vr = ("head", "left_hand", "right_hand", "pelvis")
    clock = VirtualClock(0.0)
    operator_ep, robot_ep = connect_virtual(PacketCodec(os.urandom(32)), LinkModel.thesis(0.0), clock, seed=1)
    with SyntheticOperator(seed=1, clock=clock.now) as synthetic:
        class Trackers:
            def poll(self, now=None):
                frame = synthetic.poll(now)
                return None if frame is None else (frame[0], {k: v for k, v in frame[1].items() if k in vr})

        station = OperatorStation(operator_ep, robot_ep.address, Trackers(), robot_target(RobotModel()))
        sent = []
        for k in range(5):
            clock.set(k * 0.01)
            refs = station.tick()
            if refs is not None:
                sent.append(refs)
    assert sent
    for refs in sent:
        assert refs.valid is not None and not refs.valid.all()
        assert refs.valid[SIGNAL_SLICES["right_hand"]].all()
    assert station.current.valid is not None
    # The wire still carries the 20 signals (the robot tracks them all).
    assert [r.packet.message.to_flat().shape for r in robot_ep.poll()][:1] == [(20,)]


def test_the_demo_prints_a_session_in_which_the_operator_did_not_move(monkeypatch, tmp_path, capsys):
    """`teleop demo --duration 1`: the synthetic operator is still at rest, so no tick gives
    an error while moving (None in the summary); the command used to end in a TypeError
    traceback after the whole run."""
    import teleop.demo

    summary = {"round_trip_s": 1.5, "duration_s": 1.99, "library": {"tasks": ["a", "b"], "demonstrations": 12},
               "robot": {"fell": False, "max_foot_slip_mm": 0.1, "min_cop_margin_mm": 5.1,
                         "max_joint_speed_ratio": 0.9,
                         "sessions": {"compensated": {"min_cop_margin_mm": 7.2},
                                      "delayed": {"min_cop_margin_mm": 5.1}}},
               "seen_hand_error_cm": {"compensated": {"moving_cm": None, "all_cm": 0.13, "predicting_cm": None},
                                      "delayed": {"moving_cm": None, "all_cm": 0.13, "predicting_cm": None}},
               "controller_timing_ms": {}, "video": {"frames_displayed": 7}}
    monkeypatch.setattr(teleop.demo, "run_demo", lambda out, settings, progress: summary)
    assert main(["demo", "--duration", "1", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "none measured" in out and "Robot: fell=False" in out
    assert "min CoP margin +7.2 mm with compensation, +5.1 mm without" in out


@pytest.mark.parametrize("failure", ["input", "video-port"])
def test_an_operator_that_cannot_start_leaves_no_recording_behind(secret, tmp_path, capsys, failure):
    """A typo in --input or a video port in use: the station does not start, and no empty
    recording is left to refuse the corrected command ("exists: pass --force")."""
    record = tmp_path / "session.mcap"
    taken, port = _taken_udp_port()
    args = ["operator", "--robot", f"127.0.0.1:{_free_udp_port()}", "--record", str(record), "--duration", "0.2"]
    try:
        if failure == "input":
            args += ["--input", str(tmp_path / "no_such_take.bvh"), "--video-listen", f"127.0.0.1:{_free_udp_port()}"]
            with pytest.raises(SystemExit, match="no_such_take"):
                main(args)
        else:
            assert main(args + ["--video-listen", f"127.0.0.1:{port}"]) == 1
            assert f"--video-listen 127.0.0.1:{port}" in capsys.readouterr().err
    finally:
        taken.close()
    assert not record.exists()


@pytest.mark.parametrize("command, option", [("operator", "--bind"), ("operator", "--video-listen"),
                                             ("robot", "--listen")])
def test_a_port_in_use_is_named_by_its_option(secret, capsys, command, option):
    """"[Errno 98] Address already in use" did not say which of a station's ports it was."""
    taken, port = _taken_udp_port()
    args = [command, option, f"127.0.0.1:{port}", "--duration", "0.1"]
    if command == "operator":
        free = _free_udp_port()
        args += ["--robot", f"127.0.0.1:{free}"] + (["--video-listen", f"127.0.0.1:{_free_udp_port()}"]
                                                    if option != "--video-listen" else [])
    try:
        assert main(args) == 1
    finally:
        taken.close()
    err = capsys.readouterr().err
    assert f"{option} 127.0.0.1:{port}: Address already in use" in err
    # Found as the station starts: what to change, without the hint meant for errors inside the work.
    assert "TELEOP_DEBUG" not in err, err


def test_the_web_viewer_on_port_0_prints_the_port_it_bound(secret, capsys):
    # No robot there: exit code 1.
    assert main(["operator", "--robot", f"127.0.0.1:{_free_udp_port()}", "--video-listen",
                 f"127.0.0.1:{_free_udp_port()}", "--view", "web", "--port", "0", "--duration", "0.2"]) == 1
    url = re.search(r"web viewer on http://127\.0\.0\.1:(\d+)/", capsys.readouterr().err)
    assert url is not None and int(url.group(1)) != 0


@pytest.mark.parametrize("robot, expected", [("10.1.2.3:9001", "--allow-remote"),
                                             ("[::1]:9001", "--bind [::1]:0")])
def test_the_operator_refuses_a_command_link_that_cannot_reach_the_robot(secret, capsys, robot, expected):
    """The command link is bound to 127.0.0.1 by default: every reference to a robot on
    another host failed with EINVAL (to an IPv6 address, with an address-family error),
    counted in the statistics and never said; the operator only heard "no feedback from the
    robot", and `--bind 0.0.0.0:0` was refused for lack of an --allow-remote it did not
    have. Nothing is sent here: the command is refused before the station starts."""
    assert main(["operator", "--robot", robot, "--video-listen", f"127.0.0.1:{_free_udp_port()}",
                 "--duration", "0.3"]) == 2          # --robot and --bind cannot go together
    err = capsys.readouterr().err
    assert f"--robot {robot}" in err and expected in err
    # The option the message asks for exists.
    from teleop.cli import build_parser

    args = build_parser().parse_args(["operator", "--robot", "10.1.2.3:9001", "--bind", "0.0.0.0:0", "--allow-remote"])
    assert args.allow_remote


def test_the_operator_sends_to_the_robot_resolved_once(secret, monkeypatch):
    """--robot localhost:PORT works, and is resolved once at start, not at every send."""
    from teleop.stations import operator_station

    addresses = []
    original = operator_station.OperatorStation.__init__

    def spy(self, endpoint, robot_address, *args, **kwargs):
        addresses.append(robot_address)
        original(self, endpoint, robot_address, *args, **kwargs)

    monkeypatch.setattr(operator_station.OperatorStation, "__init__", spy)
    port = _free_udp_port()
    # No robot there: exit code 1.
    assert main(["operator", "--robot", f"localhost:{port}", "--video-listen", f"127.0.0.1:{_free_udp_port()}",
                 "--duration", "0.1"]) == 1
    assert addresses and addresses[0][1] == port and addresses[0][0] != "localhost"


def test_the_robot_recording_keeps_only_the_operator_the_station_follows(tmp_path, robot):
    """A second operator sending while the first is active is refused by the station; its
    references used to be recorded as delivered all the same, interleaved with the first's
    (`dataset export --channel delivered` then exported both as one demonstration)."""
    import time

    from retarget.references import RobotReferences
    from teleop.clock import WallClock
    from teleop.control.tracker import references_from_configuration
    from teleop.net.protocol import PacketCodec
    from teleop.net.udp import UdpEndpoint
    from teleop.record import open_recording
    from teleop.sim.simulator import Simulation
    from teleop.stations.recording import RobotRecording
    from teleop.stations.robot_station import RobotStation, RobotStationConfig

    secret = os.urandom(32)
    robot_ep = UdpEndpoint(PacketCodec(secret), ("127.0.0.1", 0), clock=WallClock())
    a = UdpEndpoint(PacketCodec(secret), ("127.0.0.1", 0), clock=WallClock())
    b = UdpEndpoint(PacketCodec(secret), ("127.0.0.1", 0), clock=WallClock())
    first = a.address
    recording = RobotRecording(tmp_path / "robot.mcap", robot_ep.clock, robot.joint_names)
    with Simulation(robot, visual=False) as sim:
        station = RobotStation(robot_ep, robot, sim, None,
                               RobotStationConfig(video_hz=0, stale_timeout=0.5))
        home = references_from_configuration(robot, station.tracker.q).to_flat()
        other = home.copy()
        other[6] += 0.3                     # the second operator's right hand, 30 cm ahead
        try:
            for k in range(40):
                a.send(RobotReferences.from_flat(a.clock.now(), home), robot_ep.address)
                if k >= 10:
                    b.send(RobotReferences.from_flat(b.clock.now(), other), robot_ep.address)
                time.sleep(0.002)
                recording.after_tick(station, station.tick())
        finally:
            recording.close()
            for ep in (robot_ep, a, b):
                ep.close()
    assert station.operator == first and station.foreign_references > 0
    delivered = [refs.to_flat() for _, refs in open_recording(tmp_path / "robot.mcap").decoded("/commands/delivered")]
    assert len(delivered) >= 30
    assert all(abs(flat[6] - home[6]) < 1e-9 for flat in delivered)


def test_the_demo_folder_holds_only_the_last_runs_frames(monkeypatch, tmp_path):
    """out/demo/frames is "the last camera frames the operator was shown"; their names carry
    their times, so a second run (another --duration or --rtt) used to add its six to the
    first run's six."""
    import teleop.demo
    from teleop.demo import SessionLog, run_demo

    def fake_session(settings, library, *, with_video, progress):
        log = SessionLog()
        t = np.arange(200) * 0.01
        log.times = list(t)
        log.operator = [np.r_[np.zeros(3), 0.1 * np.sin(x), np.zeros(16)] for x in t]
        log.hands = [np.zeros((2, 3)) for _ in t]
        log.cop = [np.zeros(2) for _ in t]
        log.states = ["passthrough"] * len(t)
        log.frames = [(x + settings.rtt, x, b"jpeg") for x in t[::20]] if with_video else []
        log.min_cop_margin_mm = 5.0
        return log

    class Library:
        labels = ["reach"]

    monkeypatch.setattr(teleop.demo, "train_library", lambda dataset: (Library(), 1))
    monkeypatch.setattr(teleop.demo, "run_session", fake_session)
    monkeypatch.setattr(teleop.demo, "plot_session", lambda logs, tau_b, path, headline="": path)
    for rtt in (1.5, 3.0):
        run_demo(tmp_path, teleop.demo.DemoSettings(rtt=rtt), progress=False)
    frames = sorted(p.name for p in (tmp_path / "frames").iterdir())
    assert len(frames) == 6 and all("shown_" in name for name in frames)
    assert all(name.endswith(f"shown_{float(name.split('_')[3][:-1]) + 3.0:.2f}s.jpg") for name in frames)


def test_the_operator_listens_for_a_remote_mvn_stream_only_with_allow_remote():
    """MVN usually streams from another PC: `--input xsens-live:0.0.0.0:PORT` said "pass
    allow_remote=True", which no command-line option gave; --allow-remote now does."""
    import argparse

    import pytest

    from teleop.stations.cli import _make_source

    args = argparse.Namespace(source="xsens-live:0.0.0.0:0", speed=1.0, loop=False, seed=0, vr_config=None,
                              allow_remote=False)
    with pytest.raises(SystemExit, match="--allow-remote"):
        _make_source(args)
    args.allow_remote = True
    source = _make_source(args)
    try:
        assert source.address[0] == "0.0.0.0"
    finally:
        source.close()


def test_the_eye_camera_keeps_its_rate_when_ticks_land_late(robot):
    """Frames are scheduled on a fixed grid: counted from each (late) tick instead, a 10 Hz
    camera ran at 9.5 Hz on a loaded machine whose ticks came ~10.5 ms apart."""
    from teleop.clock import VirtualClock
    from teleop.net.delay import LinkModel
    from teleop.net.protocol import PacketCodec
    from teleop.net.secret import session_secret
    from teleop.net.virtual import connect_virtual
    from teleop.sim.simulator import Simulation
    from teleop.stations.robot_station import RobotStation, RobotStationConfig

    clock = VirtualClock(0.0)
    robot_ep, _ = connect_virtual(PacketCodec(session_secret()), LinkModel(), clock)
    frames = []
    with Simulation(robot, visual=False) as sim:
        station = RobotStation(robot_ep, robot, sim, None, RobotStationConfig(video_hz=10.0),
                               video_out=lambda image, t: frames.append(t), render=lambda q: None)
        for _ in range(400):                      # 4.2 s of ticks 10.5 ms apart
            station.tick()
            clock.advance(0.0105)
    assert len(frames) == pytest.approx(42, abs=1)


def test_the_operator_says_when_a_replayed_file_has_ended(secret, tmp_path, capsys):
    """Without --loop a replayed take ended in silence: the station kept running, sending
    nothing, and the operator was never told why the robot stood still."""
    from retarget.human import HumanMotion

    take = tmp_path / "short.npz"
    motion = HumanMotion.load_npz(
        Path(__file__).resolve().parents[1] / "datasets" / "synthetic" / "squat" / "squat_0.npz")
    motion.slice(0, 10).save_npz(take)                          # 0.2 s at 50 Hz
    # No robot there: exit code 1.
    assert main(["operator", "--robot", f"127.0.0.1:{_free_udp_port()}", "--video-listen",
                 f"127.0.0.1:{_free_udp_port()}", "--input", str(take), "--duration", "0.6"]) == 1
    err = capsys.readouterr().err
    assert err.count("has ended: nothing more is sent") == 1, err


def test_a_pose_with_a_nan_segment_is_held_like_a_lost_device():
    """A device glitch (NaN in one segment) ran through the retargeting into the references
    sent; it is now a segment not tracked: nothing is sent and it is named."""
    from teleop.clock import VirtualClock
    from teleop.inputs.synthetic import generate
    from teleop.net.delay import LinkModel
    from teleop.net.protocol import PacketCodec
    from teleop.net.virtual import connect_virtual
    from teleop.robot.model import RobotModel
    from teleop.robot.target import robot_target
    from teleop.stations.operator_station import OperatorStation

    motion = generate("reach_forward", seed=3, rate_hz=50.0)
    glitch = range(40, 45)

    class Source:
        k = 0

        def poll(self, now):
            k, self.k = self.k, self.k + 1
            pose = {name: (motion.positions[k, i].copy(), motion.orientations[k, i].copy())
                    for i, name in enumerate(motion.segment_names)}
            if k in glitch:
                pose["right_hand"][0][1] = np.nan
            return float(motion.times[k]), pose

    clock = VirtualClock(0.0)
    operator_ep, robot_ep = connect_virtual(PacketCodec(b"k" * 32), LinkModel.thesis(0.0), clock, seed=1)
    station = OperatorStation(operator_ep, robot_ep.address, Source(), robot_target(RobotModel()))
    sent, missing = [], set()
    for k in range(60):
        clock.set(k / 50.0)
        refs = station.tick()
        sent.append(refs)
        missing.update(station.missing_segments)
    assert all(sent[k] is None for k in glitch) and station.nonfinite_poses == len(glitch)
    assert missing == {"right_hand"}
    assert all(np.all(np.isfinite(r.to_flat())) for r in sent if r is not None)


def test_video_from_a_robot_with_another_secret_is_refused_and_the_operator_told(monkeypatch, capsys):
    """The video link was not authenticated: anyone reaching the operator's video port could
    show a robot that is not there, and two stations with different secrets looked fine on
    the operator's side (video shown, no warning) while the robot dropped every command."""
    import threading

    from teleop.net.auth import video_mac
    from teleop.video.sender import VideoSender

    video_port = _free_udp_port()
    stop = threading.Event()

    def robot_with_another_secret():
        auth = video_mac(b"another-secret-0123456789abcdef!")[0]
        with VideoSender(("127.0.0.1", video_port), authenticate=auth) as sender:
            image = np.zeros((120, 160, 3), np.uint8)
            t = 0.0
            while not stop.wait(0.02):
                sender.send_image(image, t)
                t += 0.02

    monkeypatch.setenv("TELEOP_SECRET", SECRET)
    thread = threading.Thread(target=robot_with_another_secret, daemon=True)
    thread.start()
    try:
        assert main(["operator", "--robot", f"127.0.0.1:{_free_udp_port()}", "--video-listen",
                     f"127.0.0.1:{video_port}", "--duration", "1.5", "--json"]) == 1
    finally:
        stop.set()
        thread.join()
    captured = capsys.readouterr()
    import json

    assert json.loads(captured.out)["video_frames_displayed"] == 0
    assert "fails authentication" in captured.err
    # Forged video is no answer: the session ends as one that never reached its robot (it
    # ended with exit code 0, the forged datagrams counted as the robot's video).
    assert re.fullmatch(r"teleop operator: error: the robot at 127\.0\.0\.1:\d+ never answered: no feedback and "
                        r"no video in the whole session \(\d+ video datagrams failed authentication: do both "
                        r"stations use the same secret\?\)", captured.err.splitlines()[-1])


def test_the_operator_video_port_is_off_loopback_only_with_allow_remote(secret, capsys):
    assert main(["operator", "--robot", f"127.0.0.1:{_free_udp_port()}", "--video-listen", "0.0.0.0:0",
                 "--duration", "0.2"]) == 1
    assert "--video-listen 0.0.0.0:0: refusing to listen on non-loopback" in capsys.readouterr().err
    # No robot there: exit code 1.
    assert main(["operator", "--robot", f"127.0.0.1:{_free_udp_port()}", "--video-listen", "0.0.0.0:0",
                 "--allow-remote", "--duration", "0.2"]) == 1


def test_the_robot_says_a_foreign_packet_warning_as_its_own_line(monkeypatch, capsys):
    """The library's warning (packets failing authentication) came bare, unlike every
    other line of the station: now `[robot] warning: ...`."""
    import threading
    import time

    from retarget.references import RobotReferences
    from teleop.net.protocol import PacketCodec

    port = _free_udp_port()
    monkeypatch.setenv("TELEOP_SECRET", SECRET)
    stop = threading.Event()

    def operator_with_another_secret():
        codec = PacketCodec(b"another-secret-0123456789abcdef!")
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            seq = 0
            while not stop.wait(0.05):
                seq += 1
                now = time.monotonic()
                sock.sendto(codec.encode(RobotReferences.from_flat(now, np.zeros(20)), source_id=7, stream_id=0,
                                         seq=seq, send_time=now), ("127.0.0.1", port))

    thread = threading.Thread(target=operator_with_another_secret, daemon=True)
    thread.start()
    try:
        assert main(["robot", "--listen", f"127.0.0.1:{port}", "--duration", "1.5", "--video-hz", "0"]) == 0
    finally:
        stop.set()
        thread.join(5)
    lines = [line for line in capsys.readouterr().err.splitlines() if "fail authentication" in line]
    assert len(lines) == 1 and lines[0].startswith("[robot] warning: packets from 127.0.0.1:"), lines


def test_the_operator_says_when_the_robot_answers_but_its_video_goes_elsewhere(secret, capsys):
    """The robot's --video-to named another port than our --video-listen: its feedback came,
    so no silence warning, and the status lines' "video 0.0 fps" went unexplained."""
    import subprocess
    import sys

    robot_port, robot_video_to, our_video = _free_udp_port(), _free_udp_port(), _free_udp_port()
    robot = subprocess.Popen([sys.executable, "-m", "teleop", "robot", "--listen", f"127.0.0.1:{robot_port}",
                              "--video-to", f"127.0.0.1:{robot_video_to}", "--duration", "20"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             cwd=Path(__file__).resolve().parents[1], env={**os.environ, "TELEOP_SECRET": SECRET})
    try:
        assert main(["operator", "--robot", f"127.0.0.1:{robot_port}", "--video-listen", f"127.0.0.1:{our_video}",
                     "--duration", "12"]) == 0
    finally:
        robot.terminate()
        robot.wait(30)
    err = capsys.readouterr().err
    assert (f"[operator] warning: the robot answers but no video has come to --video-listen 127.0.0.1:{our_video} "
            "in 3 s: does `teleop robot --video-to` name this address (and its --video-hz exceed 0)?") in err, err


def test_the_robot_says_which_operator_it_follows_and_when_another_takes_over(monkeypatch, capsys, robot):
    """A restarted operator took over once the first was silent for --stale-timeout, and the
    only sign was tau_f and tau_b starting again in the status line."""
    import threading
    import time

    from retarget.references import RobotReferences
    from teleop.control.tracker import references_from_configuration
    from teleop.net.protocol import PacketCodec

    port = _free_udp_port()
    monkeypatch.setenv("TELEOP_SECRET", SECRET)
    home = references_from_configuration(robot, robot.home_configuration()).to_flat()
    addresses: list = []

    def two_operators_one_after_the_other():
        codec = PacketCodec(SECRET.encode())
        for source_id in (7, 8):                               # a restarted station: a new source id
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
                sock.bind(("127.0.0.1", 0))
                sock.settimeout(0.01)
                addresses.append(f"127.0.0.1:{sock.getsockname()[1]}")
                seq, answered_at, deadline = 0, None, time.monotonic() + 60
                # Each operator sends until the robot answers (the station is running: not a
                # fixed wait, which a slow start outlasted), then 40 packets more.
                while (seq - answered_at < 40) if answered_at is not None else time.monotonic() < deadline:
                    seq += 1
                    now = time.monotonic()
                    try:
                        sock.sendto(codec.encode(RobotReferences.from_flat(now, home), source_id=source_id,
                                                 stream_id=1, seq=seq, send_time=now), ("127.0.0.1", port))
                        sock.recv(65536)
                        answered_at = seq if answered_at is None else answered_at
                    except OSError:                            # no answer yet, or not listening yet
                        pass
                    time.sleep(0.01)                           # 100 packets/s, as an operator sends
            time.sleep(0.6)                                    # silent for longer than --stale-timeout 0.2

    thread = threading.Thread(target=two_operators_one_after_the_other, daemon=True)
    thread.start()
    try:
        assert main(["robot", "--listen", f"127.0.0.1:{port}", "--duration", "4", "--video-hz", "0",
                     "--stale-timeout", "0.2"]) == 0
    finally:
        thread.join(10)
    said = [line for line in capsys.readouterr().err.splitlines() if "following the operator" in line]
    first, second = addresses
    assert said == [f"[robot] following the operator at {first}",
                    f"[robot] following the operator at {second} (the previous one, {first}, silent for "
                    "--stale-timeout): a fresh clock estimate and compensation"], said


def test_a_robot_station_whose_robot_fell_ends_with_exit_code_1(secret, monkeypatch, capsys):
    """The station said "the robot fell" and ended with exit code 0, as `teleop demo` and
    `teleop jog` no longer do: a script took the session for one that went well. The fall is
    what the simulator reports as a body part other than the feet on the ground, here from
    the first second on (a real fall needs an operator who pushes the robot over)."""
    from teleop.sim.simulator import Simulation

    def contacts_after_a_second(self) -> int:
        return int(self.t > 1.0)        # simulated time [s] since the station started

    monkeypatch.setattr(Simulation, "other_contacts", contacts_after_a_second)
    assert main(["robot", "--listen", f"127.0.0.1:{_free_udp_port()}", "--duration", "2", "--video-hz", "0"]) == 1
    err = capsys.readouterr().err
    assert "warning: the robot fell" in err
    assert err.splitlines()[-1].startswith("teleop robot: error: the robot fell (a body part other than the feet")
