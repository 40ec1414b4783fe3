"""Defects of a ``teleop jog`` walkthrough: a goal out of the arm's reach reported "ok" (and
the test video's own trajectory leaving reach), test videos whose tag cannot be detected,
"orientation followed: True" under --no-orientation, calibration-file errors in Python's and
OpenCV's words, and option-value errors with exit code 1 instead of argparse's 2."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from teleop.cli import main
from teleop.jog.render import FACING_CAMERA, write_tag_video

REPO = Path(__file__).resolve().parents[1]
DT = 0.01


@pytest.fixture(scope="module")
def robot():
    from teleop.robot.model import RobotModel

    return RobotModel()


@pytest.fixture(scope="module")
def still_video(tmp_path_factory):
    """0.5 s of a tag standing 0.5 m in front of the camera."""
    path = tmp_path_factory.mktemp("reach") / "still.avi"
    write_tag_video(path, lambda t: (FACING_CAMERA, np.array([0.0, 0.0, 0.5])), duration_s=0.5, fps=30.0)
    return path


def _controller(robot, **settings):
    from teleop.jog.session import JogController, JogSettings

    return JogController(robot, JogSettings(**{"collision_checks": False, "orientation": False, **settings}))


def _hold(jog, tag, ticks: int, t0: float = 0.0) -> list:
    """``ticks`` control ticks with the tag at ``tag`` (camera frame [m]), one measurement each."""
    reports = []
    for k in range(ticks):
        jog.measure(t0 + k * DT, tag, FACING_CAMERA)
        reports.append(jog.tick(t0 + k * DT))
    return reports


def _offset_for(jog, tag, hand_offset) -> np.ndarray:
    """The --offset that maps ``tag`` onto the hand's start plus ``hand_offset`` (base frame [m])."""
    return jog.settings.mapping.offset_for(tag, jog.hand_pose(jog.q).position + np.asarray(hand_offset))


# ------------------------------------------------------------------ 1. out of reach
def test_a_goal_99_m_away_is_out_of_reach_not_ok(robot):
    """--offset 100,0,0: the goal 99 m ahead, and every tick said "ok"."""
    jog = _controller(robot)
    jog.settings.mapping.offset = np.array([100.0, 0.0, 0.0])
    reports = _hold(jog, np.array([0.0, 0.0, 0.5]), 30)
    jog.close()
    assert jog.counts == {"out of reach": 30}
    assert reports[-1].status.startswith("out of reach: hand 99") and reports[-1].hand_to_goal_m > 99.0


def test_a_goal_the_arm_cannot_reach_inside_the_reach_sphere(robot):
    """20 cm behind the hand: inside the sphere around the shoulder, but the arm stops 29 mm
    short of it. Reported once the hand is as close as it gets."""
    jog = _controller(robot)
    tag = np.array([0.0, 0.0, 0.5])
    jog.settings.mapping.offset = _offset_for(jog, tag, [-0.20, 0.0, 0.0])
    reports = _hold(jog, tag, 200)
    jog.close()
    assert all(r.reachable for r in reports)          # the sphere alone would not tell
    assert all(r.status.startswith("out of reach") for r in reports[-100:])
    assert reports[-1].hand_to_goal_m > jog.settings.reach_tolerance_m


def test_a_hand_on_its_way_to_a_reachable_goal_is_not_out_of_reach(robot):
    """A goal 10 cm above the hand: more than the tolerance away for ~0.3 s, but closing in."""
    jog = _controller(robot)
    tag = np.array([0.0, 0.0, 0.5])
    jog.settings.mapping.offset = _offset_for(jog, tag, [0.0, 0.0, 0.10])
    reports = _hold(jog, tag, 150)
    jog.close()
    assert max(r.hand_to_goal_m for r in reports) > 0.09
    assert jog.counts == {"ok": 150} and reports[-1].hand_to_goal_m < 1e-3


@pytest.mark.parametrize("hand", ["right", "left"])
def test_the_test_video_trajectory_stays_within_reach(robot, hand):
    """The trajectory of --make-test-video, fed to the controller as teleop jog does (absolute
    mode, orientation and collision checks on). Before: the right hand's goal went 40 mm
    beyond reach (the hand 40 mm short, every tick "ok"); the left arm was stopped before
    the hip for 7.9 s of the 10. Now within 5 mm of the goal throughout, every tick "ok"."""
    from teleop.jog.render import demo_tag_trajectory

    jog = _controller(robot, hand=hand, orientation=True, collision_checks=True)
    R0, p0 = demo_tag_trajectory(0.0)
    jog.align_absolute(p0)
    jog.settings.mapping.tag_reference = R0.copy()
    frame, worst = 0, 0.0
    for tick in range(1000):                      # 10 s, the video's default length
        t = tick * DT
        while frame / 30.0 <= t + 1e-9:           # 30 frames/s
            R, p = demo_tag_trajectory(frame / 30.0)
            jog.measure(frame / 30.0, p, R)
            frame += 1
        worst = max(worst, jog.tick(t).hand_to_goal_m)
    jog.close()
    assert jog.counts == {"ok": 1000}
    assert worst < 0.005


def test_out_of_reach_is_counted_in_the_summary_and_warned_about_once(still_video, capsys):
    assert main(["jog", "--camera", str(still_video), "--offset", "100,0,0", "--no-collision-checks", "--json"]) == 0
    captured = capsys.readouterr()
    summary = json.loads(captured.out.strip().splitlines()[-1])
    assert summary["statuses"] == {"out of reach": 50}
    assert summary["hand_to_goal_max_mm"] > 99e3 and summary["reach_tolerance_mm"] == 15.0
    warnings = [line for line in captured.err.splitlines() if "out of the arm's reach" in line]
    assert len(warnings) == 1
    assert warnings[0].startswith("teleop jog: warning: at 0.00 s the hand's goal went out of the arm's reach: "
                                  "the hand stays 99.3 m short of it (more than 15 mm is 'out of reach'")
    assert "check --offset and --scale" in warnings[0]


# ------------------------------------------------------------------ 2. test videos the detectors cannot use
@pytest.mark.parametrize("argv, expected", [
    (["--tag-size", "0.005"], "--tag-size 0.005 m with --hfov 60 deg: the tag's black square would be 5 px wide in "
                              "the 640x480 video, too small to detect in every frame: the detectors need 24 px; "
                              "give --tag-size 0.024 to 0.16, or a narrower --hfov"),
    (["--tag-size", "0.5"], "--tag-size 0.5 m with --hfov 60 deg: the tag (with its white border) would not stay "
                            "12 px inside the 640x480 video (it leaves at 0.0 s): give --tag-size 0.024 to 0.16, or a "
                            "wider --hfov"),
    (["--hfov", "10"], "would leave the 640x480 frame at any --tag-size large enough to detect: give a wider --hfov"),
    (["--hfov", "179"], "too small to detect at any --tag-size"),
    (["--hfov", "30", "--tag-size", "0.012"], "the tag's black square would be 30 px wide in the 640x480 video, too "
                                              "small to detect in every frame: moving 6.8 px during a frame, it needs "
                                              "36 px (motion blur over at most 1.5 of its 8 cells); give --tag-size "
                                              "0.015 to 0.02"),
    (["--duration", "0.01"], "--duration 0.01 s is shorter than one frame at 30 frames/s"),
])
def test_a_test_video_whose_tag_cannot_be_detected_is_refused(tmp_path, capsys, argv, expected):
    """Each used to write the video (a tag of 5 px, one larger than the frame, one that left
    it, an empty video), exit code 0."""
    out = tmp_path / "tag.avi"
    assert main(["jog", "--make-test-video", str(out), *argv]) == 2
    err = capsys.readouterr().err
    assert expected in err and "(teleop jog --help lists the options)" in err
    assert list(tmp_path.iterdir()) == []          # nothing written, not even a partial file


def _detected_fraction(backend: str, tag_size_m: float, hfov_deg: float, frames: np.ndarray) -> float:
    """Fraction of the given frames of --make-test-video (rendered as it does, without the
    codec) in which ``backend`` detects the tag."""
    from teleop.jog.camera_intrinsics import CameraCalibration
    from teleop.jog.detection import make_detector
    from teleop.jog.render import default_camera_matrix, demo_tag_trajectory, exposure_times, tag_scene

    K = default_camera_matrix(640, 480, hfov_deg)
    scene = tag_scene(tag_size_m, K)
    detector = make_detector(backend, CameraCalibration.pinhole(640, 480, hfov_deg), tag_size_m)
    rng = np.random.default_rng(0)
    times = exposure_times(10.0, 30.0, 3)[frames]
    hits = [bool(detector.detect(scene.render([demo_tag_trajectory(float(t)) for t in exposure], 2.0, rng)))
            for exposure in times]
    return float(np.mean(hits))


def test_the_tag_size_limits_are_the_detectors_limits():
    """The smallest size the refusal suggests is detected in every sampled frame (among them
    the frames where the tag is smallest and moves fastest); at half of it (12 px) the
    detectors miss many frames (pupil-apriltags 40 %, ArUco most)."""
    from teleop.jog.tag_video import check_test_video_options
    from teleop.jog.detection import pupil_available

    message = check_test_video_options(0.005, 60.0, 10.0)
    smallest, largest = (float(x) for x in re.search(r"give --tag-size ([\d.]+) to ([\d.]+)", message).groups())
    assert check_test_video_options(smallest, 60.0, 10.0) is None
    assert check_test_video_options(largest, 60.0, 10.0) is None
    assert check_test_video_options(largest * 1.1, 60.0, 10.0) is not None
    frames = np.arange(0, 300, 10)                     # every third of a second, over the whole video
    for backend in ["aruco"] + (["pupil"] if pupil_available() else []):
        assert _detected_fraction(backend, smallest, 60.0, frames) == 1.0, backend
        assert _detected_fraction(backend, smallest / 2, 60.0, frames) < 0.9, backend


# ------------------------------------------------------------------ 3. what orientation did
def test_no_orientation_is_not_reported_as_orientation_followed(still_video, capsys):
    """The summary said "orientation followed: True" (the filter's noise gate) under
    --no-orientation."""
    assert main(["jog", "--camera", str(still_video), "--no-orientation", "--no-collision-checks"]) == 0
    assert "orientation followed: no (--no-orientation)" in capsys.readouterr().out
    assert main(["jog", "--camera", str(still_video), "--no-collision-checks", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["orientation_followed"] and 0 < summary["orientation_ticks"] <= summary["goal_ticks"] == 50


@pytest.mark.parametrize("orientation", [False, True])
def test_tick_reports_say_whether_the_goal_followed_the_tags_orientation(robot, orientation):
    jog = _controller(robot, orientation=orientation)
    reports = _hold(jog, np.array([0.0, 0.0, 0.5]), 30)
    jog.close()
    assert reports[-1].orientation_followed is orientation


# ------------------------------------------------------------------ 4. calibration files, option values
_K = "[[500, 0, 320], [0, 500, 240], [0, 0, 1]]"
_YAML_K = "camera_matrix: !!opencv-matrix\n  rows: 3\n  cols: 3\n  dt: d\n  data: [500,0,320,0,500,240,0,0,1]\n"


@pytest.mark.parametrize("name, content, expected", [
    ("cal.json", "{}", "not a calibration file: no 'camera_matrix' (expected {\"image_size\": [width, height]"),
    ("cal.json", '{"camera_matrix": [1, 2, 3], "image_size": [640, 480]}',
     "'camera_matrix' must be 3 rows of 3 numbers [[fx, 0, cx], [0, fy, cy], [0, 0, 1]], got [1, 2, 3]"),
    ("cal.json", '{"camera_matrix": ' + _K + ', "image_size": 640}',
     "'image_size' must be [width, height] in pixels, got 640"),
    ("cal.json", '{"camera_matrix": ' + _K + ', "image_size": [640, 480], "dist_coeffs": "abc"}',
     "'dist_coeffs' must be a list of 4, 5, 8, 12 or 14 numbers, got \"abc\""),
    ("cal.json", "", "the file is empty"),
    # OpenCV 5 says where and why; 4.10 says only "Input file is invalid", which adds nothing.
    ("cal.yaml", "garbage: [unclosed\n", ("not an OpenCV calibration file: OpenCV cannot parse it: line 1: Missing , "
                                          "between the elements (expected the nodes camera_matrix",
                                          "not an OpenCV calibration file: OpenCV cannot parse it (expected the nodes "
                                          "camera_matrix")),
    ("cal.yaml", "%YAML:1.0\n---\ncamera_matrix: 5\nimage_width: 640\nimage_height: 480\n",
     "'camera_matrix' is not a matrix (an !!opencv-matrix with rows, cols, dt and data)"),
    ("cal.yaml", "%YAML:1.0\n---\n" + _YAML_K, "no 'image_width' node"),
    ("cal.xml", '<?xml version="1.0"?><opencv_storage><camera_matrix>abc</camera_matrix></opencv_storage>',
     "'camera_matrix' is not a matrix"),
    ("folder.json", None, "is a folder, not a calibration file"),
], ids=["empty-object", "reshape", "size-not-a-list", "dist-string", "empty-file", "unparsable-yaml",
        "yaml-scalar-matrix", "yaml-without-size", "xml-string-matrix", "folder"])
def test_bad_calibration_files_are_named_with_what_is_wrong(tmp_path, name, content, expected):
    """Each used to say KeyError: 'camera_matrix', 'cannot reshape array of size 3 into shape
    (3,3)', "'int' object is not iterable", "<class 'cv2.FileStorage'> returned a result with
    an exception set", "isMap()", 'image_size must be ...' (a YAML file has image_width) or
    'does not exist' (a folder)."""
    path = tmp_path / name
    if content is None:
        path.mkdir()
    else:
        path.write_text(content)
    with pytest.raises(SystemExit) as exc:   # checked before the camera is opened
        main(["jog", "--camera", str(tmp_path / "no-camera.mp4"), "--calibration", str(path)])
    message = exc.value.code
    assert isinstance(message, str)          # a message: exit code 1, like every unusable file
    assert message.startswith(f"teleop jog: error: --calibration {path}")
    assert any(e in message for e in ((expected,) if isinstance(expected, str) else expected)), message
    for internal in ("KeyError", "TypeError", "reshape", "isMap", "<class", "cv2", "SystemError", "iterable"):
        assert internal not in message
    assert "\n" not in message


def test_a_bad_calibration_exits_1_without_a_traceback(tmp_path):
    path = tmp_path / "cal.yaml"
    path.write_text("garbage: [unclosed\n")
    result = subprocess.run([sys.executable, "-m", "teleop", "jog", "--camera", "0", "--calibration", str(path)],
                            cwd=REPO, capture_output=True, text=True, timeout=60,
                            env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert f"teleop jog: error: --calibration {path}: not an OpenCV calibration file" in result.stderr


@pytest.mark.parametrize("argv, expected", [
    (["--damping", "0"], "argument --damping: must be in [0.1, 1], got 0"),
    (["--damping", "nan"], "argument --damping: must be in [0.1, 1], got nan"),
    (["--tag-id", "600"], "argument --tag-id: AprilTag 36h11 id must be 0-586, got 600"),
    (["--axis-map", "x,x,y"], "argument --axis-map: axis map 'x,x,y': each of x, y, z exactly once"),
    (["--offset", "1,2"], "argument --offset: must be three comma-separated numbers x,y,z [m], got '1,2'"),
    (["--offset", "inf,0,0"], "argument --offset: must be three comma-separated numbers"),
])
def test_jog_option_values_are_refused_with_exit_code_2(capsys, argv, expected):
    """They exited 1 (a SystemExit message), unlike --hfov and --port (argparse: 2)."""
    with pytest.raises(SystemExit) as exc:
        main(["jog", "--camera", "0", *argv])
    assert exc.value.code == 2
    assert expected in capsys.readouterr().err


def test_make_test_video_refuses_a_bad_name_with_exit_code_2_and_what_is_on_disk_with_1(tmp_path, capsys):
    """Another container is a malformed value: exit code 2. A folder or an existing file
    (without --force) is what is on disk: exit code 1, as every output of the wrong kind."""
    assert main(["jog", "--make-test-video", str(tmp_path / "v.mkv"), "--duration", "0.1"]) == 2
    assert "give a .mp4 or .avi file name" in capsys.readouterr().err
    assert main(["jog", "--make-test-video", str(tmp_path), "--duration", "0.1"]) == 1
    assert "is a folder: give the video file to write" in capsys.readouterr().err
    existing = tmp_path / "old.avi"
    existing.write_bytes(b"an earlier video")
    assert main(["jog", "--make-test-video", str(existing), "--duration", "0.1"]) == 1
    assert "exists: pass --force to overwrite it" in capsys.readouterr().err
