"""``teleop jog`` end to end on a video file written by the product's renderer: camera ->
detection -> filter -> mapping -> whole-body controller -> safety -> simulated robot."""

from __future__ import annotations

import json
import re
import socket
import threading
import time
import urllib.request
from pathlib import Path

import cv2
import numpy as np
import pytest

from teleop.cli import main
from teleop.jog.render import FACING_CAMERA, write_tag_video

#: The tag's motion in the camera frame [m]: 4 cm to the image's left, 6 cm up.
MOVE_CAM = np.array([-0.04, -0.06, 0.0])
#: The same motion in the base frame with the default axis map "-z,x,-y" and scale 1:
#: the hand goes 4 cm outwards (-y, away from the body) and 6 cm up.
MOVE_BASE = np.array([0.0, -0.04, 0.06])


def _trajectory(t: float):
    """Still 0.5 s, a smooth 1.5 s move, still 0.6 s, then the tag leaves the view (lost)."""
    if t >= 2.6:
        return FACING_CAMERA, np.array([2.0, 0.0, 0.5])  # far outside the field of view
    u = min(max(t - 0.5, 0.0) / 1.5, 1.0)
    s = u * u * (3 - 2 * u)
    return FACING_CAMERA, np.array([0.0, 0.0, 0.5]) + s * MOVE_CAM


@pytest.fixture(scope="module")
def video(tmp_path_factory):
    path = tmp_path_factory.mktemp("jog") / "tag.avi"
    assert write_tag_video(path, _trajectory, duration_s=3.2, fps=30.0) == 96
    return path


def _jog(capsys, *args) -> dict:
    assert main(["jog", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def _check_followed(s: dict, frames: int = 96, tolerance_m: float = 0.01) -> None:
    assert s["frames"] == frames
    # Tag visible until 2.6 s (78 frames, give or take the frame blurred across the jump).
    assert 76 <= s["frames_with_tag"] <= 80
    hand_move = np.subtract(s["sim_hand_end"], s["sim_hand_start"])
    assert np.linalg.norm(hand_move - MOVE_BASE) < tolerance_m, hand_move
    # Tag lost for the last 0.6 s: the last target is held, and the hand stays on it.
    assert np.linalg.norm(np.subtract(s["goal_end"], s["goal_start"]) - MOVE_BASE) < 0.005
    assert s["hand_to_goal_mm"] < 10.0
    # The rest of the robot kept its balance.
    assert not s["fell"]
    assert s["base_height_min_m"] > 0.95 * s["base_height_start_m"]


def test_absolute_jogging_follows_tag_on_video_file(video, capsys):
    s = _jog(capsys, "--camera", str(video))
    assert s["mode"] == "absolute" and not s["realtime"]
    _check_followed(s)
    assert s["statuses"].get("stopped before collision", 0) == 0


def test_relative_jogging_with_clutch_and_damping(video, capsys):
    s = _jog(capsys, "--camera", str(video), "--mode", "relative", "--clutch", "held", "--damping", "0.5",
             "--no-orientation", "--duration", "2.7")
    assert s["mode"] == "relative"
    assert s["duration_s"] == pytest.approx(2.7, abs=0.02)
    _check_followed(s, frames=81, tolerance_m=0.012)  # 2.7 s at 30 frames/s


def test_text_summary(video, capsys):
    assert main(["jog", "--camera", str(video), "--duration", "0.3", "--no-collision-checks"]) == 0
    out = capsys.readouterr().out
    assert "kept its balance" in out and "frames" in out


@pytest.mark.parametrize("source, message", [
    ("missing_video.mp4", "no such file"),
    ("9", "cannot open camera device"),
])
def test_bad_camera_source_is_a_clear_error(tmp_path, source, message):
    if source.endswith(".mp4"):
        source = str(tmp_path / source)
    with pytest.raises(SystemExit) as exc:
        main(["jog", "--camera", source])
    assert message in str(exc.value)


def test_frames_too_small_for_a_tag_are_refused(tmp_path):
    tiny = tmp_path / "tiny.png"
    cv2.imwrite(str(tiny), np.full((4, 4, 3), 128, np.uint8))
    with pytest.raises(SystemExit) as exc:
        main(["jog", "--camera", str(tiny)])
    assert str(exc.value) == (f"teleop jog: error: camera source '{tiny}' gives frames of 4x4 px: too small to "
                              "hold an AprilTag (at least 16 px a side)")


def test_unreadable_video_and_bad_calibration(tmp_path, video, capsys):
    junk = tmp_path / "junk.mp4"
    junk.write_bytes(b"this is not a video")
    with pytest.raises(SystemExit) as exc:
        main(["jog", "--camera", str(junk)])
    assert "cannot open camera file" in str(exc.value)
    bad = tmp_path / "cal.json"
    bad.write_text("{}")
    with pytest.raises(SystemExit) as exc:
        main(["jog", "--camera", str(video), "--calibration", str(bad)])
    assert f"--calibration {bad}: not a calibration file: no 'camera_matrix'" in str(exc.value)
    with pytest.raises(SystemExit) as exc:       # a bad option value: argparse's usage error
        main(["jog", "--camera", str(video), "--damping", "0"])
    assert exc.value.code == 2
    assert "argument --damping: must be in [0.1, 1], got 0" in capsys.readouterr().err


def test_live_loop_with_web_viewer(video, capsys):
    """Wall-clock loop (camera, detection and control threads) with the browser view: the
    page serves the camera image with the detection drawn, and the robot's pose."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = {}
    runner = threading.Thread(target=lambda: result.update(rc=main(
        ["jog", "--camera", str(video), "--view", "web", "--port", str(port), "--duration", "3", "--json",
         "--no-collision-checks"])))
    runner.start()
    base = f"http://127.0.0.1:{port}"
    image = pose = stats = None
    deadline = time.monotonic() + 15
    while runner.is_alive() and time.monotonic() < deadline and not (image and pose and stats):
        try:
            with urllib.request.urlopen(base + "/frame/camera.jpg", timeout=2) as r:
                image = r.read()
            with urllib.request.urlopen(base + "/robot-pose", timeout=2) as r:
                pose = json.loads(r.read())
            with urllib.request.urlopen(base + "/stats", timeout=2) as r:
                stats = json.loads(r.read())
        except OSError:  # not serving yet / no frame yet (503)
            time.sleep(0.1)
    runner.join(timeout=30)
    assert result.get("rc") == 0
    assert image and image[:2] == b"\xff\xd8"  # a JPEG
    assert pose["poses"]["actual"] is not None and pose["poses"]["predicted"] is not None
    assert stats["detected"] >= 1 and stats["mode"] == "absolute"
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["realtime"] and summary["frames_with_tag"] > 0 and not summary["fell"]


def test_make_test_video_then_jog_on_it(tmp_path, capsys):
    """--make-test-video writes a tag video that teleop jog follows (the README's way to try
    jogging without a camera)."""
    video = tmp_path / "tag.avi"
    assert main(["jog", "--make-test-video", str(video), "--duration", "3", "--tag-size", "0.1", "--json"]) == 0
    made = json.loads(capsys.readouterr().out)
    assert made["frames"] == 90 and made["try"] == f"teleop jog --camera {video} --tag-size 0.1"
    assert main(["jog", "--make-test-video", str(tmp_path / "b.avi"), "--duration", "0.1"]) == 0
    captured = capsys.readouterr()
    assert "written:" in captured.out and "rendering 3 frames" in captured.err
    s = _jog(capsys, "--camera", str(video), "--tag-size", "0.1", "--no-collision-checks")
    assert s["frames"] == 90 and s["frames_with_tag"] == 90
    # Still for 1 s, then half a turn of the 8 cm tall ellipse: 8 cm up, and the hand follows.
    assert s["goal_moved_mm"] == pytest.approx(80, abs=10)
    assert s["hand_moved_mm"] > 40 and not s["fell"]
    assert s["statuses"] == {"ok": 300} and s["hand_to_goal_max_mm"] < 5.0


def test_jog_needs_a_camera_or_a_video_to_make(tmp_path, capsys):
    assert main(["jog"]) == 2
    assert "teleop jog: error: --camera SOURCE is required" in capsys.readouterr().err
    assert main(["jog", "--camera", "0", "--make-test-video", str(tmp_path / "v.mp4")]) == 2
    assert "not both" in capsys.readouterr().err
    assert main(["jog", "--make-test-video", str(tmp_path / "v.mkv")]) == 2
    assert "give a .mp4 or .avi file name" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["jog", "calibrate-camera"])
def test_help(command, capsys):
    with pytest.raises(SystemExit) as exc:
        main([command, "--help"])
    assert exc.value.code == 0
    assert "--camera" in capsys.readouterr().out if command == "jog" else True


def test_the_hand_follows_one_tag_while_others_come_and_go():
    from teleop.jog.run import followed_tag
    from teleop.jog.detection import TagDetection

    def tag(tag_id: int) -> TagDetection:
        return TagDetection(tag_id, np.zeros((4, 2)), np.eye(3), np.array([0.1 * tag_id, 0.0, 0.5]), 0.1)

    frames = [[tag(3)], [tag(1), tag(3)], [tag(3), tag(1)], [tag(1)], [], [tag(1), tag(3)]]
    followed, seen = None, []
    for detections in frames:
        d, followed = followed_tag(detections, followed)
        seen.append(None if d is None else d.tag_id)
    assert seen == [3, 3, 3, None, None, 3]     # tag 1 never drives the hand
    assert followed_tag([tag(1), tag(2)], 2)[0].tag_id == 2     # --tag-id chose it


def test_a_calibration_of_another_aspect_ratio_is_refused(tmp_path, video):
    from teleop.jog.camera_intrinsics import CameraCalibration

    calibration = tmp_path / "wide.json"
    CameraCalibration.pinhole(1280, 720).save(calibration)      # the video is 640x480
    with pytest.raises(SystemExit, match="another aspect ratio"):
        main(["jog", "--camera", str(video), "--calibration", str(calibration)])


def test_a_detector_that_fails_in_the_live_loop_stops_jogging_with_its_error(video, monkeypatch, capsys):
    """The detection thread died on the exception; the loop held the target for good, saying
    the camera delivered no frame, and never reached the end of the video."""
    import teleop.jog.detection as detection

    make = detection.make_detector

    def failing_detector(*args, **kwargs):
        detector = make(*args, **kwargs)
        calls = [0]
        real = detector.detect

        def detect(image):
            calls[0] += 1
            if calls[0] == 5:
                raise RuntimeError("the AprilTag library gave up")
            return real(image)

        detector.detect = detect
        return detector

    monkeypatch.setattr(detection, "make_detector", failing_detector)
    # The session ends there, its summary said (it was discarded), then the error line.
    assert main(["jog", "--camera", str(video), "--realtime", "--duration", "20", "--no-collision-checks",
                 "--json"]) == 1
    out, err = capsys.readouterr()
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["error"] == "tag detection failed: RuntimeError: the AprilTag library gave up"
    assert summary["duration_s"] < 10
    assert err.strip().splitlines()[-1] == \
        "teleop jog: error: tag detection failed: RuntimeError: the AprilTag library gave up"


def test_a_test_video_is_not_overwritten_without_force_and_write_errors_name_it(tmp_path, capsys):
    """Like calibrate-sim's --make-test-recording: an existing OUT is kept unless --force
    (before, it was replaced silently); a folder that cannot be written in is named by OUT,
    not by the hidden temporary file (before: '.t.mp4.<pid>.partial.mp4: Read-only file
    system', or OpenCV's 'cannot write' with a hint to try .avi)."""
    video = tmp_path / "tag.avi"
    video.write_bytes(b"an earlier video")
    assert main(["jog", "--make-test-video", str(video), "--duration", "0.1"]) == 1   # the disk, not a value
    assert "exists: pass --force" in capsys.readouterr().err
    assert video.read_bytes() == b"an earlier video"
    assert main(["jog", "--make-test-video", str(video), "--duration", "0.1", "--force"]) == 0
    assert video.stat().st_size > 1000
    if Path("/proc/self").exists():             # Linux: no file can be made in /proc
        with pytest.raises(SystemExit) as exc:
            main(["jog", "--make-test-video", "/proc/tag.avi", "--duration", "0.1"])
        assert str(exc.value).startswith("teleop jog: error: --make-test-video /proc/tag.avi: cannot write it (")
        assert "partial" not in str(exc.value)


def test_a_video_without_the_tag_ends_with_a_warning_and_exit_code_1(video, capsys):
    """Nothing was jogged: say so, with what to check (before: exit 0, 'tag seen in 0')."""
    assert main(["jog", "--camera", str(video), "--tag-id", "5", "--no-collision-checks"]) == 1
    captured = capsys.readouterr()
    assert "tag seen in 0" in captured.out
    assert "warning: no AprilTag 36h11 id 5 was seen in any of the 96 frames" in captured.err


def test_a_clutch_that_stdin_can_never_toggle_is_said(video, capsys, monkeypatch):
    """`--clutch enter` with standard input at its end (</dev/null): the clutch was never
    engaged, nothing said so, and the summary blamed the tag ("no tag seen", seen in every frame)."""
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    assert main(["jog", "--camera", str(video), "--mode", "relative", "--clutch", "enter", "--duration", "0.5",
                 "--no-collision-checks"]) == 0
    out, err = capsys.readouterr()
    assert "teleop jog: warning: standard input ended: the clutch stays released (--clutch held engages it" in err
    assert "orientation followed: no (the clutch was never engaged)" in out


@pytest.mark.skipif(int(cv2.__version__.split(".")[0]) < 5,
                    reason="marginal (the base dips to 0.36 m, the limit is 0.46 m) and OpenCV 4's encoder makes a "
                           "test video the robot stays up on")
def test_a_fall_or_a_sink_is_said_with_exit_code_1(tmp_path, capsys):
    """`--scale 20` sent the hand 2 m out of reach: the robot fell (its base at 0.24 m) with
    exit code 1 and only "robot FELL" at the end of the summary. Since the controller no
    longer keeps accelerating through collision stops it stays up, but crouches: its base
    goes down to 0.36 m (42 %), which is no balance kept either (README: a fall, or a base
    sinking by more than a quarter of its height, exit code 1)."""
    video = tmp_path / "tag.mp4"
    assert main(["jog", "--make-test-video", str(video)]) == 0
    capsys.readouterr()
    assert main(["jog", "--camera", str(video), "--scale", "20"]) == 1
    err = capsys.readouterr().err
    assert re.search(r"teleop jog: error: the robot fell at \d+\.\d\d s \(base height 0\.\d+ m, from 0\.619 m\): "
                     r"the run stopped", err) or \
        re.search(r"teleop jog: error: the robot did not keep its balance: at \d+\.\d\d s its base sank below 75% of "
                  r"its starting height \(to 0\.\d+ m at the lowest, from 0\.619 m\)", err), err


def test_a_calibration_that_looks_wrong_is_said_and_named_when_no_tag_is_seen(video, tmp_path, capsys):
    """--calibration with fx = 1e12: the run ended "no AprilTag 36h11 was seen ... (check
    --tag-id, the tag family, lighting and focus)", sending the user the wrong way."""
    from teleop.jog.camera_intrinsics import CameraCalibration

    height, width = cv2.VideoCapture(str(video)).read()[1].shape[:2]
    wrong = CameraCalibration(np.array([[1e12, 0, width / 2], [0, 1e12, height / 2], [0, 0, 1]]), np.zeros(5),
                              (width, height), 0.2, "typed in")
    path = tmp_path / "camera.json"
    wrong.save(path)
    rc = main(["jog", "--camera", str(video), "--calibration", str(path), "--duration", "0.5",
               "--no-collision-checks", "--json"])
    err = capsys.readouterr().err
    assert f"teleop jog: warning: --calibration {path} looks wrong: fx 1e+12 px gives a horizontal field of view " \
           "of" in err, err
    # The tag went unseen (found, but no pose could be solved with it): the calibration is named first.
    assert rc == 1 and f"pose could not be solved from its corners in any: check --calibration {path}, which looks " \
        "wrong (above), and --tag-size 0.08 m" in err, err


def test_a_broken_video_or_image_gets_the_products_error_alone(tmp_path, capfd):
    """FFmpeg's "[mov,mp4,... @ 0x...] moov atom not found" and libpng's "libpng error: Read
    Error", written straight to descriptor 2, came before the product's own error line."""
    video = tmp_path / "tag.mp4"
    assert write_tag_video(video, _trajectory, duration_s=0.5, fps=30.0) == 15
    truncated = tmp_path / "truncated.mp4"
    truncated.write_bytes(video.read_bytes()[: video.stat().st_size // 3])
    capfd.readouterr()
    with pytest.raises(SystemExit) as failed:
        main(["jog", "--camera", str(truncated), "--duration", "0.2"])
    assert str(failed.value) == f"teleop jog: error: cannot open camera file {str(truncated)!r} with OpenCV"
    assert capfd.readouterr().err == ""             # (the error line is printed as the process exits)
    board = tmp_path / "board.png"
    cv2.imwrite(str(board), np.full((480, 640), 255, np.uint8))
    (tmp_path / "broken.png").write_bytes(board.read_bytes()[:200])
    with pytest.raises(SystemExit):
        main(["calibrate-camera", "--images", str(tmp_path / "broken.png"), "--out", str(tmp_path / "c.json")])
    assert "libpng" not in capfd.readouterr().err


def test_a_truncated_video_is_said_and_ends_with_exit_code_1(video, tmp_path, capsys):
    """Half an AVI was read as a whole video: 'frames 151', exit code 0, no word."""
    cut = tmp_path / "cut.avi"
    data = video.read_bytes()
    cut.write_bytes(data[: len(data) // 2])
    assert main(["jog", "--camera", str(cut), "--json"]) == 1
    err = capsys.readouterr().err
    assert "ended after" in err and "of the 96 frames it declares: the file looks truncated or damaged" in err
