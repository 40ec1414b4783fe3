"""Bad input to the live commands (robot, operator, record, dataset, stream-mvn, tune,
calibrate-sim, jog, calibrate-camera, netem, demo): refused early, with a message naming the
option and saying what is expected; and an operator with nobody at the other end says so.

Every test runs the real ``teleop`` entry point in-process on fixtures made in tmp_path.
"""

from __future__ import annotations

import re
import socket
from pathlib import Path

import numpy as np

import pytest

from conftest import free_port
from retarget.references import FLAT_SIZE, RobotReferences
from teleop.cli import main
from teleop.record import Recorder


def usage_error(capsys, argv: list[str]) -> str:
    """Run ``teleop argv``, expect argparse's usage error (exit 2); returns its message."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


# ------------------------------------------------------------------ 1. robot / operator
@pytest.mark.parametrize("argv, expected", [
    (["robot", "--listen", "nonsense"], "argument --listen: address 'nonsense' must look like host:port"),
    (["robot", "--listen", "127.0.0.1:99999"], "argument --listen: port out of range"),
    (["operator", "--robot", "nonsense"], "argument --robot"),
    (["operator", "--bind", "nonsense"], "argument --bind"),
    (["operator", "--video-listen", "nonsense"], "argument --video-listen"),
    (["robot", "--stale-timeout", "0"], "argument --stale-timeout: must be > 0"),   # the watchdog needs a timeout
    (["operator", "--jitter-buffer", "-1"], "argument --jitter-buffer: must be in [0, 10] s, got -1"),
    (["robot", "--video-hz", "-5"], "argument --video-hz: must be >= 0"),
    (["operator", "--port", "99999"], "argument --port: port must be 0-65535"),
])
def test_station_values_are_checked_by_argparse(capsys, argv, expected):
    assert expected in usage_error(capsys, argv)


@pytest.mark.parametrize("command, option", [("robot", "--record"), ("operator", "--record"),
                                             ("robot", "--secret-file"), ("operator", "--secret-file")])
def test_station_files_that_are_folders_are_refused(capsys, tmp_path, command, option):
    """What is on disk, not a malformed value: exit code 1, as every output of the wrong kind
    (it was argparse's exit code 2 here and 1 for train -o and dataset -o)."""
    assert main([command, option, str(tmp_path), "--duration", "0.1"]) == 1
    assert f"teleop {command}: error: {option} {tmp_path} is a folder: give a file name" in capsys.readouterr().err


@pytest.mark.skipif(not Path("/proc/self").exists(), reason="needs Linux's /proc, where no file can be made")
@pytest.mark.parametrize("command", ["robot", "operator"])
def test_a_recording_folder_that_cannot_be_written_is_refused_before_the_station_starts(capsys, command):
    """It said "[Errno 30] Read-only file system" once the station had started, naming no
    option, with the TELEOP_DEBUG hint."""
    assert main([command, "--record", "/proc/session.mcap", "--duration", "0.1"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"teleop {command}: error: --record /proc/session.mcap: cannot write in /proc")
    assert "TELEOP_DEBUG" not in err


@pytest.mark.parametrize("command", ["robot", "operator"])
def test_station_recordings_are_not_overwritten_without_force(capsys, tmp_path, command):
    existing = tmp_path / "session.mcap"
    existing.write_bytes(b"the only copy")
    assert main([command, "--record", str(existing), "--duration", "0.1"]) == 1
    assert f"--record {existing} exists: pass --force" in capsys.readouterr().err
    assert existing.read_bytes() == b"the only copy"


@pytest.mark.parametrize("argv, own", [
    (["robot", "--listen", "127.0.0.1:{p}", "--video-to", "localhost:{p}"], "--video-to localhost:{p} is this "
     "station's own --listen 127.0.0.1:{p}: the video would come back to it"),
    (["operator", "--bind", "127.0.0.1:{p}", "--robot", "127.0.0.1:{p}"], "--robot 127.0.0.1:{p} is this station's "
     "own --bind 127.0.0.1:{p}: the commands would come back to it"),
    (["operator", "--video-listen", "0.0.0.0:{p}", "--allow-remote", "--robot", "127.0.0.1:{p}"],
     "--robot 127.0.0.1:{p} is this station's own --video-listen 0.0.0.0:{p}"),
])
def test_a_station_pointed_at_its_own_port_is_refused(capsys, secret, argv, own):
    """The robot's video sent to its own command socket, the operator's commands to its own
    video socket: each was dropped there as garbage, and all the user saw was a robot that
    never answered or a video that never came."""
    port = free_port()
    assert main([a.format(p=port) for a in argv] + ["--secret-file", str(secret), "--duration", "0.1"]) == 2
    err = capsys.readouterr().err
    assert own.format(p=port) in err, err


# ------------------------------------------------------------------ 2. silent robot / MVN stream
def test_an_operator_that_fails_to_start_leaves_no_web_viewer_or_socket_open(capsys, secret):
    """A bad --input after the web viewer had started: the viewer thread and its port, and the
    UDP sockets, stayed open in the process (a second attempt found the port in use)."""
    import threading

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        web_port = probe.getsockname()[1]
    before = {t.name for t in threading.enumerate()}
    for _ in range(2):
        with pytest.raises(SystemExit, match="no such file"):
            main(["operator", "--view", "web", "--port", str(web_port), "--input", "/nonexistent/take.npz",
                  "--robot", f"127.0.0.1:{free_port()}", "--video-listen", "127.0.0.1:0",
                  "--secret-file", str(secret), "--duration", "0.1"])
    assert {t.name for t in threading.enumerate()} <= before
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as again:
        again.bind(("127.0.0.1", web_port))                    # free again


@pytest.mark.parametrize("command", ["robot", "operator"])
def test_a_missing_secret_file_is_the_station_commands_error(capsys, tmp_path, command):
    """It said "teleop: error: ...", not which command failed."""
    with pytest.raises(SystemExit) as exit_:
        main([command, "--secret-file", str(tmp_path / "absent"), "--duration", "0.1"])
    assert str(exit_.value.code).startswith(f"teleop {command}: error: secret file {tmp_path / 'absent'} "
                                            "does not exist")


def test_operator_warns_when_neither_robot_nor_mvn_stream_is_there(capsys, secret):
    robot, mvn = free_port(), free_port()
    assert main(["operator", "--duration", "1.5", "--robot", f"127.0.0.1:{robot}", "--video-listen", "127.0.0.1:0",
                 "--source", f"xsens-live:{mvn}", "--secret-file", str(secret)]) == 1
    out, err = capsys.readouterr()
    assert "received 0 feedback packets" in out
    # Exit code 1, said last: it was 0, and a script took the session for one that happened.
    assert err.splitlines()[-1] == (f"teleop operator: error: the robot at 127.0.0.1:{robot} never answered: no "
                                    "feedback and no video in the whole session")
    assert re.search(rf"no feedback or video from the robot at 127.0.0.1:{robot} in \d+\.\d s: "
                     r"is `teleop robot` running there\?", err)
    assert re.search(rf"no MVN poses received on port {mvn} in \d+\.\d s: is MVN's network streamer", err)


def test_operator_says_which_mvn_stream_arrives_when_it_is_not_quaternion_poses(capsys, secret):
    """MVN's streamer set to Euler angles (type 01): datagrams arrive, no pose is ever made,
    and the warning says what to tick instead of asking whether MVN is running."""
    import threading

    from teleop.inputs.mvn_protocol import MvnCodec

    robot, mvn = free_port(), free_port()
    datagram = MvnCodec().encode_pose_euler(0, 0, {1: (np.zeros(3), np.zeros(3))})[0]
    stop = threading.Event()

    def stream():
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
            while not stop.wait(0.01):
                sender.sendto(datagram, ("127.0.0.1", mvn))

    thread = threading.Thread(target=stream, daemon=True)
    thread.start()
    try:
        assert main(["operator", "--duration", "1.5", "--robot", f"127.0.0.1:{robot}", "--video-listen",
                     "127.0.0.1:0", "--source", f"xsens-live:{mvn}", "--secret-file", str(secret)]) == 1
    finally:
        stop.set()
        thread.join()
    err = capsys.readouterr().err
    assert re.search(rf"no MVN poses received on port {mvn} in \d+\.\d s: MVN sends message types "
                     r"01 \(pose, Euler angles\) but no 02 \(pose, quaternions\): tick "
                     r'"Position \+ Orientation \(Quaternion\)"', err), err


def test_silence_after_the_robot_answered_is_reported_once_per_silence(capsys):
    """The robot dies mid-session: one warning per silence, not repeated at the end."""
    import time

    from teleop.stations.watches import SilenceWatch

    count = [0]
    watch = SilenceWatch(lambda: count[0], "feedback from the robot", "is it running?", after=0.05)
    count[0] = 5
    watch.check()
    time.sleep(0.1)
    watch.check()
    watch.check()
    watch.finish()
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "no feedback from the robot for the last" in err[0], err
    silent = SilenceWatch(lambda: count[0], "feedback from the robot", "is it running?", after=60.0)
    silent.finish()                  # a session shorter than `after` that heard nothing: said at the end
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "no feedback from the robot in " in err[0], err


def test_what_arrives_again_after_a_silence_warning_is_said_once(capsys):
    """The robot station restarted (or the suit came back): the warning is answered."""
    import time

    from teleop.stations.watches import SilenceWatch

    count = [0]
    watch = SilenceWatch(lambda: count[0], "feedback from the robot", "is it running?", after=0.05)
    count[0] = 5
    watch.check()                    # it answered
    time.sleep(0.1)
    watch.check()                    # the warning
    count[0] = 6
    watch.check()                    # back
    count[0] = 7
    watch.check()                    # still flowing: nothing more to say
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and "no feedback from the robot for the last" in err[0]
    # The silence lasted at least the 0.1 s slept (more on a loaded machine: no upper bound).
    again = re.fullmatch(r"\[operator\] feedback from the robot: arriving again after (\d+\.\d) s of silence", err[1])
    assert again and float(again[1]) >= 0.1, err

    late = SilenceWatch(lambda: count[0], "MVN poses", "is MVN streaming?", after=0.05)
    time.sleep(0.1)
    late.check()                     # nothing yet
    count[0] = 8
    late.check()                     # the first poses: not "again"
    err = capsys.readouterr().err.splitlines()
    first = (re.fullmatch(r"\[operator\] MVN poses: arriving (\d+\.\d) s after the start", err[1])
             if len(err) == 2 else None)
    assert first and float(first[1]) >= 0.1, err


# ------------------------------------------------------------------ 3. record
def test_record_refuses_to_overwrite_without_force(capsys, tmp_path):
    out = tmp_path / "take.mcap"
    assert main(["record", "--duration", "0.3", "-o", str(out)]) == 0
    before = out.read_bytes()
    assert main(["record", "--duration", "0.2", "-o", str(out)]) == 1     # what is on disk: 1, as --record's
    assert f"{out} exists: pass --force" in capsys.readouterr().err
    assert out.read_bytes() == before
    assert main(["record", "--duration", "0.2", "-o", str(out), "--force"]) == 0
    assert out.read_bytes() != before


@pytest.mark.parametrize("argv, expected", [
    (["--duration", "-2"], "argument --duration: must be > 0"),
    (["--flush-interval", "0"], "argument --flush-interval: must be > 0"),
])
def test_record_values(capsys, tmp_path, argv, expected):
    assert expected in usage_error(capsys, ["record", "-o", str(tmp_path / "r.mcap"), *argv])
    assert not (tmp_path / "r.mcap").exists()


# ------------------------------------------------------------------ 4. stream-mvn
@pytest.mark.parametrize("argv, expected", [
    (["--port", "99999"], "argument --port: port must be 1-65535"),     # 0 is no destination
    (["--port", "-1"], "argument --port: port must be 1-65535"),
    (["--speed", "0"], "argument --speed: must be > 0"),
    (["--unit", "0"], "argument --unit: must be in [1e-06, 1000] m, got 0"),
    (["--unit", "1e300"], "argument --unit: must be in [1e-06, 1000] m, got 1e300"),   # sent every position as 0
    (["--rate-hz", "-5"], "argument --rate-hz/--rate: must be in (0, 10000] Hz"),
    (["--rate", "0"], "argument --rate-hz/--rate: must be in (0, 10000] Hz"),
    (["--rate-hz", "1e9"], "argument --rate-hz/--rate: must be in (0, 10000] Hz"),
])
def test_stream_mvn_values(capsys, motion_file, argv, expected):
    assert expected in usage_error(capsys, ["stream-mvn", str(motion_file), *argv])


def test_stream_mvn_refuses_a_single_pose(capsys, tmp_path):
    # It went out as "1 frames, 0 Hz", which retarget and the operator station refuse.
    from retarget.human import SEGMENTS, HumanMotion

    path = tmp_path / "pose.npz"
    HumanMotion(np.zeros(1), SEGMENTS[:1], np.zeros((1, 1, 3)), np.tile([1.0, 0.0, 0.0, 0.0], (1, 1, 1)),
                rate_hz=100.0).save_npz(path)
    assert main(["stream-mvn", str(path), "--port", str(free_port())]) == 1
    assert capsys.readouterr().err == (f"teleop stream-mvn: error: {path}: 1 frame: a motion needs at least 2\n")


def test_stream_mvn_unknown_host_fails_before_streaming(capsys, motion_file):
    assert main(["stream-mvn", str(motion_file), "--host", "nosuchhost.invalid"]) == 1   # as netem --target
    out, err = capsys.readouterr()
    assert "--host nosuchhost.invalid: cannot resolve it" in err and "sent" not in out
    assert "[Errno" not in err


# ------------------------------------------------------------------ 5. tune (never without --quick)
@pytest.mark.parametrize("setups", ["9", "", "1,x"])
def test_tune_setups(capsys, setups):
    assert "argument --setups: expected comma-separated setups from 1-4" in usage_error(
        capsys, ["tune", "--quick", "--no-save", "--setups", setups])


def test_tune_setup_numbers_match_the_setups():
    from teleop.tuning.cli import SETUP_NUMBERS
    from teleop.tuning.setups import SETUPS

    assert SETUP_NUMBERS == tuple(sorted(SETUPS))


def test_tune_binary_gains_file(tmp_path, capsys):
    gains = tmp_path / "gains.npz"
    np.savez(gains, kp=np.ones(5))
    assert main(["tune", "--quick", "--no-save", "--setups", "2", "--jobs", "1", "--gains", str(gains)]) == 1
    err = capsys.readouterr().err
    assert f"{gains}: not a JSON gains file" in err and "TELEOP_DEBUG" not in err


@pytest.mark.parametrize("option", ["--eval-motions", "--train-motions"])
def test_tune_bad_motion_file_is_named_before_the_experiment(capsys, tmp_path, monkeypatch, option):
    import teleop.tuning.experiment as experiment

    started = []
    monkeypatch.setattr(experiment, "run_experiment", lambda *a, **k: started.append(1) or {})
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    assert main(["tune", "--quick", "--no-save", "--json", "--setups", "2", "--jobs", "1", option, str(bad)]) == 1
    assert f"teleop tune: error: {bad}" in capsys.readouterr().err
    assert not started, "the file was read only once the experiment had started"


# ------------------------------------------------------------------ 6. calibrate-sim
@pytest.mark.parametrize("argv, expected", [
    (["--make-test-recording", "X.npz", "--duration", "0"], "argument --duration: must be > 0"),
    (["--make-test-recording", "X.npz", "--noise", "-1"], "argument --noise: must be >= 0"),
    (["--data", "X.npz", "--max-evaluations", "-1"], "argument --max-evaluations: must be >= 1"),
])
def test_calibrate_sim_values(capsys, argv, expected):
    assert expected in usage_error(capsys, ["calibrate-sim", *argv])


# ------------------------------------------------------------------ 7. jog
@pytest.mark.parametrize("argv, expected", [
    (["--view", "web", "--port", "99999"], "argument --port: port must be 0-65535"),
    (["--hfov", "0"], "argument --hfov: must be in (0, 180) degrees"),
    (["--hfov", "-10"], "argument --hfov: must be in (0, 180) degrees"),
    (["--hfov", "200"], "argument --hfov: must be in (0, 180) degrees"),
    (["--hfov", "nan"], "argument --hfov: must be in (0, 180) degrees"),
])
def test_jog_values(capsys, argv, expected):
    assert expected in usage_error(capsys, ["jog", "--camera", "0", *argv])


# ------------------------------------------------------------------ 8. calibrate-camera
@pytest.fixture
def image(tmp_path):
    import cv2

    path = tmp_path / "board.png"
    cv2.imwrite(str(path), np.full((48, 64), 255, np.uint8))
    return path


def test_calibrate_camera_marker_must_be_smaller_than_square(tmp_path, image, capsys):
    out = tmp_path / "camera.json"
    # Two options that cannot go together: exit code 2, with the pointer to --help.
    assert main(["calibrate-camera", "--images", str(image), "--pattern", "charuco", "--board", "5x7",
                 "--marker-size", "1", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--marker-size (1 m) must be smaller than --square-size (0.025 m)" in err
    assert "teleop calibrate-camera --help" in err
    assert not out.exists()


def test_calibrate_camera_min_views_and_dictionary(capsys, image):
    assert "argument --min-views: must be >= 1" in usage_error(
        capsys, ["calibrate-camera", "--images", str(image), "--min-views", "0"])
    message = usage_error(capsys, ["calibrate-camera", "--images", str(image), "--dictionary", "NOPE"])
    assert "argument --dictionary: invalid choice: 'NOPE'" in message and "DICT_4X4_50" in message


def test_calibrate_camera_dictionaries_exist_in_opencv():
    import cv2

    from teleop.jog.cli import ARUCO_DICTIONARIES

    assert all(hasattr(cv2.aruco, name) for name in ARUCO_DICTIONARIES)


# ------------------------------------------------------------------ 9. netem
@pytest.mark.parametrize("argv, expected", [
    (["--stats-interval", "-1"], "argument --stats-interval: must be >= 0"),
    (["--delay-ms", "nan"], "argument --delay-ms: 'nan' is not a finite number"),
    (["--loss", "2"], "argument --loss: must be in [0, 1]"),
])
def test_netem_values(capsys, argv, expected):
    assert expected in usage_error(capsys, ["netem", *argv])


def test_netem_refuses_to_forward_to_itself_and_names_a_listen_address_in_use(capsys):
    port = free_port()
    assert main(["netem", "--listen", f"127.0.0.1:{port}", "--target", f"localhost:{port}", "--duration", "0.1"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"teleop netem: error: --target localhost:{port} is the proxy's own --listen 127.0.0.1:{port}: it would "
        "forward to itself; --target is the robot station's address\n(teleop netem --help lists the options)")
    # A wildcard --listen is reached on loopback too: the datagrams went round in a loop.
    assert main(["netem", "--listen", f"0.0.0.0:{port}", "--allow-remote", "--target", f"127.0.0.1:{port}",
                 "--duration", "0.1"]) == 2
    assert "is the proxy's own --listen" in capsys.readouterr().err
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as taken:
        taken.bind(("127.0.0.1", 0))
        busy = taken.getsockname()[1]
        assert main(["netem", "--listen", f"127.0.0.1:{busy}", "--duration", "0.1"]) == 1
    # The error line of every command: one line, and where to look for more.
    assert capsys.readouterr().err.splitlines() == [f"teleop netem: error: --listen 127.0.0.1:{busy}: "
                                                    "Address already in use",
                                                    "(TELEOP_DEBUG=1 shows where it happened)"]


# ------------------------------------------------------------------ 10. dataset
@pytest.fixture
def unlabelled(tmp_path):
    """A 1 s recording at 100 Hz with one episode that has no task label."""
    path = tmp_path / "take.mcap"
    with Recorder(path, threaded=False) as rec:
        rec.start_episode(None, log_time_ns=0)
        for i in range(101):
            rec.log("references", RobotReferences.from_flat(i * 0.01, np.zeros(FLAT_SIZE)),
                    log_time_ns=i * 10_000_000)
        rec.stop_episode(log_time_ns=1_000_000_000)
    return path


def test_dataset_trim_start_nan_and_past_the_end(capsys, tmp_path, unlabelled):
    out = tmp_path / "trimmed.mcap"
    assert "argument --start: 'nan' is not a finite number" in usage_error(
        capsys, ["dataset", "trim", str(unlabelled), "--start", "nan", "-o", str(out)])
    assert main(["dataset", "trim", str(unlabelled), "--start", "100", "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert "nothing from --start 100 s on (the recording lasts 1.000 s)" in err
    assert not out.exists()


def test_dataset_label_refuses_an_empty_task(capsys, unlabelled):
    assert "argument --task: the task name must not be empty" in usage_error(
        capsys, ["dataset", "label", str(unlabelled), "--episode", "0", "--task", ""])


def test_dataset_export_says_why_nothing_was_exported(capsys, tmp_path, unlabelled):
    assert main(["dataset", "export", str(unlabelled), "-o", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert "1 episode(s) have no task label" in err and "teleop dataset label" in err


# ------------------------------------------------------------------ 11. demo
@pytest.mark.parametrize("argv, expected", [
    (["--rtt", "-1"], "argument --rtt: must be >= 0"),
    (["--duration", "0"], "argument --duration: must be in (0, 3600] s, got 0"),
])
def test_demo_values(capsys, argv, expected):
    assert expected in usage_error(capsys, ["demo", *argv])


def test_checks_made_before_the_work_starts_say_what_to_change_and_no_more(capsys, tmp_path):
    """README: the TELEOP_DEBUG hint is for errors raised from inside the work. An output that
    exists, a file given for a folder: exit code 1 and the error line alone (before: the
    hint too, as if something had run). Two options that cannot go together: exit code 2."""
    out = tmp_path / "take.mcap"
    out.write_bytes(b"x")
    assert main(["record", "--duration", "0.2", "-o", str(out)]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"teleop record: error: -o {out} exists: pass --force to overwrite it, or choose another file"]
    assert main(["eval", "promp", "--train", "datasets/synthetic", "--test", "datasets/synthetic",
                 "--out", str(out)]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"teleop eval: error: --out {out} is a file: give a folder for the summary and the plot"]
    assert main(["netem", "--delay-ms", "20000", "--duration", "0.1"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "teleop netem: error: --delay-ms 20000 exceeds --max-delay-ms 10000; raise --max-delay-ms",
        "(teleop netem --help lists the options)"]


def _command_link_ticker(capsys, watch, station, video):
    """(ticks, until_said) for a :class:`CommandLinkWatch` test. ``ticks(n)`` runs n checks
    10 ms apart and returns what they printed; ``until_said()`` checks until something is
    printed and returns (it, the time of the check that printed it). Waits on the watch, not
    on a count of ticks: on a loaded machine a tick may take far longer than 10 ms, so a
    warning that ``after`` allows may come in fewer ticks than planned, or need more."""
    import time

    def tick(video_flows: bool, sending: bool, feedback: bool) -> float:
        video.receiver.stats.datagrams += video_flows
        station.sent += sending
        station.feedback_received += feedback
        watch.check()
        checked = time.monotonic()
        time.sleep(0.01)
        return checked

    def ticks(n: int, video_flows: bool = True, sending: bool = True, feedback: bool = False) -> str:
        for _ in range(n):
            tick(video_flows, sending, feedback)
        return capsys.readouterr().err

    def until_said(video_flows: bool = True, sending: bool = True, feedback: bool = False,
                   bound_s: float = 30.0) -> tuple[str, float]:
        deadline = time.monotonic() + bound_s      # a guard against never, not a timing check
        while True:
            checked = tick(video_flows, sending, feedback)
            said = capsys.readouterr().err
            if said or time.monotonic() > deadline:
                return said, checked

    return ticks, until_said


def test_the_operator_says_when_its_commands_stop_reaching_the_robot(capsys):
    """A proxy killed on the command link: the robot held its pose for 6 s while the video
    still flowed, and the operator's console said nothing."""
    import time
    from types import SimpleNamespace

    from teleop.net.watchdog import WatchdogState
    from teleop.stations.watches import CommandLinkWatch

    video = SimpleNamespace(receiver=SimpleNamespace(stats=SimpleNamespace(datagrams=0)))

    def feedback(state):
        return SimpleNamespace(watchdog_state=state, forward_delay=0.0)

    station = SimpleNamespace(feedback=feedback(WatchdogState.ACTIVE), feedback_received=1, sent=100)
    after = 0.5
    watch = CommandLinkWatch(station, video, after=after)
    ticks, until_said = _command_link_ticker(capsys, watch, station, video)

    warned, _ = until_said()
    assert warned.count("\n") == 1 and "our commands no longer reach the robot" in warned, warned
    # Not before `after` without feedback (no upper bound: a loaded machine may be late).
    silence = re.search(r"no feedback for (\d+\.\d) s while its video arrives", warned)
    assert silence and float(silence[1]) >= after, warned
    assert ticks(3) == ""                                                       # said once
    station.feedback_received += 1
    assert ticks(1) == "[operator] the robot receives our commands again\n"
    station.feedback = feedback(WatchdogState.STALE)                            # one-way: feedback still comes
    station.feedback_received += 1
    assert until_said()[0].startswith("[operator] warning: the robot reports our commands stale")
    assert ticks(5) == ""                                                       # said once
    # The operator stopped sending (a replay that ended): the robot going stale is expected.
    station.feedback = feedback(WatchdogState.ACTIVE)
    station.feedback_received += 1
    assert ticks(1) == "[operator] the robot receives our commands again\n"
    station.feedback = feedback(WatchdogState.STALE)
    station.feedback_received += 1
    time.sleep(1.05)
    assert ticks(3, sending=False) == ""
    # No video and no feedback: the robot is not there at all, which another warning says.
    quiet = CommandLinkWatch(SimpleNamespace(feedback=None, feedback_received=0, sent=100), video, after=0.01)
    time.sleep(0.05)
    quiet.check()
    assert capsys.readouterr().err == ""


def test_stale_reports_after_our_own_input_paused_are_not_blamed_on_the_link(capsys):
    """An MVN stream stopped for a while: the robot rightly went stale, and its STALE reports
    keep arriving for a round trip after our commands resume. Before, the operator warned
    "our commands no longer reach the robot (check --robot and the link or proxy)". Only
    when we have been sending without a gap for `after` plus a round trip is STALE the link."""
    import time
    from types import SimpleNamespace

    from teleop.net.watchdog import WatchdogState
    from teleop.stations.watches import CommandLinkWatch

    after, forward_delay = 0.1, 0.25                      # a round trip of 0.5 s
    video = SimpleNamespace(receiver=SimpleNamespace(stats=SimpleNamespace(datagrams=0)))
    station = SimpleNamespace(feedback=SimpleNamespace(watchdog_state=WatchdogState.ACTIVE,
                                                       forward_delay=forward_delay),
                              feedback_received=1, sent=100)
    watch = CommandLinkWatch(station, video, after=after)
    ticks, until_said = _command_link_ticker(capsys, watch, station, video)

    assert ticks(30, feedback=True) == ""
    assert ticks(30, sending=False, feedback=True) == ""      # our input paused (>= 0.3 s: a gap)...
    station.feedback = SimpleNamespace(watchdog_state=WatchdogState.STALE, forward_delay=forward_delay)
    assert ticks(20, sending=False, feedback=True) == ""      # ...and the robot, rightly, holds
    resumed = time.monotonic()
    # Back: its STALE reports still arrive for a round trip. Sending without a gap for longer,
    # still STALE: the link. Not before `after` plus the round trip (a lower bound only: a
    # loaded machine may be late, never early).
    warned, said_at = until_said(feedback=True)
    assert warned.startswith("[operator] warning: the robot reports our commands stale"), warned
    assert said_at - resumed > after + 2 * forward_delay


def test_the_robot_silence_hint_says_why_nothing_was_sent():
    from teleop.stations.watches import robot_silence_hint

    # A robot that follows another operator refuses us silently: the hint names it too.
    assert robot_silence_hint(5) == "is `teleop robot` running there, and not following another operator?"
    assert "nothing was sent to it yet, the input gave no pose" in robot_silence_hint(0)
    assert "every command was withheld as one the robot would refuse" in robot_silence_hint(0, withheld=3)


def test_a_station_loop_that_falls_behind_says_so(capsys):
    """An overloaded machine showed only as a robot that went stale for no visible reason."""
    import time

    from teleop.stations.loop_timing import run_loop

    calls = [0]

    def body():
        calls[0] += 1
        if calls[0] == 3:
            time.sleep(1.1)                      # one tick that takes a second too long

    run_loop(0.01, 1.3, body, "robot")
    err = capsys.readouterr().err
    # At least the 1.1 s the tick overran (more on a loaded machine: no upper bound).
    fell = re.match(r"\[robot\] warning: the 100 Hz loop fell (\d+\.\d) s behind", err)
    assert err.count("\n") == 1 and fell and float(fell[1]) >= 1.0, err
    assert "behind (the machine is overloaded?): carrying on from now" in err


def test_a_link_that_drops_commands_in_bursts_is_said_in_few_lines(capsys):
    """`teleop netem --loss 0.2 --loss-burst 60`: the robot went stale and back every few
    seconds, and each time the operator printed a warning and "receives our commands again",
    burying every other line of the console. The first dropouts are said one by one, the
    rest counted and said once per quiet period (and at the end)."""
    import time
    from types import SimpleNamespace

    from teleop.net.watchdog import WatchdogState
    from teleop.stations.watches import CommandLinkWatch

    video = SimpleNamespace(receiver=SimpleNamespace(stats=SimpleNamespace(datagrams=0)))
    station = SimpleNamespace(feedback=SimpleNamespace(watchdog_state=WatchdogState.ACTIVE, forward_delay=0.0),
                              feedback_received=1, sent=100)
    watch = CommandLinkWatch(station, video, after=0.05, quiet=600.0, said_per_quiet=2)
    ticks, _ = _command_link_ticker(capsys, watch, station, video)

    def flaps(n: int) -> str:
        said = ""
        for _ in range(n):
            station.feedback = SimpleNamespace(watchdog_state=WatchdogState.STALE, forward_delay=0.0)
            said += ticks(3, feedback=True)
            station.feedback = SimpleNamespace(watchdog_state=WatchdogState.ACTIVE, forward_delay=0.0)
            said += ticks(3, feedback=True)
        return said

    ticks(10, feedback=True)                        # sending for longer than `after`
    said = flaps(6)
    assert said.count("our commands no longer reach the robot") == 2, said
    assert said.count("the robot receives our commands again") == 2, said
    watch.finish()
    summary = capsys.readouterr().err
    assert summary.startswith("[operator] warning: our commands stopped reaching the robot 4 more times in the "
                              "last "), summary
    assert summary.count("\n") == 1 and "the longest 0." in summary
    # Still dropping out: one line per quiet period, not single warnings again.
    watch.quiet = 0.3
    said = flaps(1)
    assert said == "", said
    time.sleep(0.3)
    said = ticks(1, feedback=True)
    assert said.startswith("[operator] warning: our commands stopped reaching the robot 1 more time in the last"), said
