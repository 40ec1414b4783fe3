"""Review of `teleop jog`, `teleop calibrate-camera` and `teleop bench jog`: a named pipe as
the camera, a collision stop that left the controller's velocities stale (the arm froze, then
the base sank 29 cm and the summary said "kept its balance"), device indices OpenCV cannot
take, file:// URLs, a camera that stops delivering frames, the clutch's reason in the summary,
exit codes of refused command lines, tags whose pose could not be solved, the --hfov advice
of --make-test-video, and options --make-test-video ignored."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from teleop.cli import main

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def video(tmp_path_factory):
    """A 1 s test video (30 frames) of the product's own tag."""
    path = tmp_path_factory.mktemp("review_jog") / "tag.avi"
    assert main(["jog", "--make-test-video", str(path), "--duration", "1", "--json"]) == 0
    return path


def _json_summary(out: str) -> dict:
    return json.loads(out.strip().splitlines()[-1])


# --------------------------------------------------------------------------- 1. named pipe
@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes (os.mkfifo: POSIX only, not Windows)")
def test_a_named_pipe_as_camera_is_refused_instead_of_hanging(tmp_path):
    """OpenCV opened it and waited for a writer for ever, deaf to Ctrl-C and SIGTERM."""
    fifo = tmp_path / "fifo.mp4"
    os.mkfifo(fifo)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("TELEOP_DEBUG", None)
    done = subprocess.run([sys.executable, "-m", "teleop", "jog", "--camera", str(fifo)], env=env,
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 1, done.stderr
    assert f"teleop jog: error: camera source {fifo}: not a regular file (a named pipe)" in done.stderr
    assert "TELEOP_DEBUG" not in done.stderr


# --------------------------------------------------------------------------- 2. collision stop
def _demo_measurements(jog, times):
    """Feed the test video's tag (its camera-frame pose at each time of ``times``) as measurements."""
    from teleop.jog.render import demo_tag_trajectory

    for t_meas, t_tag in times:
        R, p = demo_tag_trajectory(t_tag)
        jog.measure(t_meas, p, R)


def test_a_looping_videos_jump_does_not_freeze_the_arm_nor_sink_the_base(robot):
    """`--make-test-video --duration 4` played with --loop: at the loop the goal jumps back
    ~6 cm to the start, the step the controller made met the pelvis (stopped before collision),
    and the controller, believing its refused steps taken, kept accelerating a robot that
    stood still: the arm stayed stopped for 1.4 s, then the base sank 29 cm. Now the hand
    goes round the contact and is back on the goal within half a second; the base stays."""
    from teleop.jog.session import JogController, JogSettings

    jog = JogController(robot, JogSettings())
    z0 = float(jog.q[2])
    fps, dt = 30.0, 0.01
    frame = 0
    statuses_after, hand_to_goal_after, lowest = [], [], z0
    try:
        # The tag from the end of its still second to 4 s (a frame every 1/30 s), then the
        # video's first frames again: the start pose.
        for tick in range(int(4.4 / dt)):
            t = tick * dt
            while frame / fps <= t:
                t_tag = 1.0 + frame / fps
                _demo_measurements(jog, [(frame / fps, t_tag if t_tag < 4.0 else 0.0)])
                if frame == 0:   # what JogRun does when the tag is first seen (absolute mode)
                    from teleop.jog.render import demo_tag_trajectory

                    R, p = demo_tag_trajectory(1.0)
                    jog.align_absolute(p)
                    jog.settings.mapping.tag_reference = R.copy()
                frame += 1
            report = jog.tick(t)
            lowest = min(lowest, float(jog.q[2]))
            if t >= 3.0 + 0.5:          # half a second after the jump (at 3.0 s here)
                statuses_after.append(report.status)
                hand_to_goal_after.append(report.hand_to_goal_m)
            assert jog.collisions.contact(jog.q) == ""
    finally:
        jog.close()
    assert not any(s.startswith("stopped before collision") for s in statuses_after), statuses_after[:5]
    assert max(hand_to_goal_after) < 0.015
    assert z0 - lowest < 0.01


def test_a_refused_step_is_not_remembered_as_commanded(robot):
    """The controller's recorded joint velocities (which centre the next tick's acceleration
    window) are those of the step committed, whether safety and the collision checks kept
    all of it, part of it or none: they were those of the step it solved, which a collision
    stop never took."""
    import pinocchio as pin

    from teleop.jog.mapping import HandPose
    from teleop.jog.session import JogController, JogSettings

    jog = JogController(robot, JogSettings(orientation=False))
    home = jog.hand_pose(jog.q)
    changed = 0
    try:
        for k in range(150):
            q_before = jog.q.copy()
            jog.goal = HandPose(home.position + [0.0, 0.12, 0.0], home.rotation)   # into the body
            report = jog.tick(k * 0.01)
            changed += report.status.startswith(("stopped before collision", "slid along a collision"))
            v = pin.difference(robot.model, q_before, report.q) / 0.01
            assert np.allclose(jog.controller.acceleration_limit.previous, v[6:], atol=1e-9), report.status
    finally:
        jog.close()
    assert changed


def test_a_sunk_base_is_not_reported_as_balance_kept(video, capsys, monkeypatch):
    """The base 29 cm down was "robot kept its balance (base height 0.619 m, min 0.332 m)",
    exit code 0. A sink beyond SINK_FRACTION of the base's height is said as one, with an
    error line and exit code 1 (here the fraction is made tiny so that the test video's
    millimetre of sway crosses it)."""
    import teleop.jog.run as run

    monkeypatch.setattr(run, "SINK_FRACTION", 1e-4)
    assert main(["jog", "--camera", str(video), "--no-collision-checks", "--duration", "0.5"]) == 1
    out, err = capsys.readouterr()
    assert "kept its balance" not in out
    assert "robot stayed up but SANK" in out
    assert "teleop jog: error: the robot did not keep its balance: at " in err


def test_the_balance_line_says_how_far_the_base_went_down():
    from teleop.jog.run import balance_line

    s = {"fell": False, "sank": True, "sink_fraction": 0.25, "base_height_start_m": 0.619, "base_height_min_m": 0.332}
    assert balance_line(s).startswith("robot stayed up but SANK: its base went 29 cm down")
    s.update(sank=False, base_height_min_m=0.539)
    assert balance_line(s) == ("robot kept its balance (base height 0.619 m, min 0.539 m: 8.0 cm down, 13% of "
                               "its height)")
    s.update(base_height_min_m=0.618)
    assert balance_line(s) == "robot kept its balance (base height 0.619 m, min 0.618 m)"


# --------------------------------------------------------------------------- 3. device index
def test_a_device_index_opencv_cannot_take_is_a_bad_value(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["jog", "--camera", "99999999999999999999"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "argument --camera: device index 99999999999999999999 is too large" in err
    assert "Traceback" not in err


def test_a_non_ascii_digit_is_no_device_index():
    from teleop.jog.camera import parse_source

    assert parse_source("²") == "²"          # str.isdigit() is True for it; int() refused it
    assert parse_source(" 3 ") == 3


# --------------------------------------------------------------------------- 4. file:// and a camera that stops
def test_a_file_url_is_a_file(video, capsys):
    """Taken for a stream: played unpaced on the wall clock, and its end reported as a camera
    that "stopped delivering frames", with no summary."""
    from teleop.jog.camera import CameraSource

    with CameraSource(video.as_uri()) as camera:
        assert camera.is_file and camera.source == str(video)
    assert main(["jog", "--camera", video.as_uri(), "--no-collision-checks", "--json"]) == 0
    s = _json_summary(capsys.readouterr().out)
    assert s["realtime"] is False and s["frames"] == 30 and s["error"] is None


def test_a_camera_that_stops_delivering_still_gets_its_summary(video, capsys, monkeypatch):
    """A webcam unplugged mid-session: SystemExit discarded the session's summary."""
    from teleop.jog.camera import CameraError, CameraSource

    real = CameraSource.read

    def read(self):
        if self.frames_read >= 10:
            raise CameraError(f"camera {self.source!r} stopped delivering frames")
        return real(self)

    monkeypatch.setattr(CameraSource, "read", read)
    assert main(["jog", "--camera", str(video), "--realtime", "--duration", "10", "--no-collision-checks",
                 "--json"]) == 1
    out, err = capsys.readouterr()
    s = _json_summary(out)
    assert s["error"] == f"camera {str(video)!r} stopped delivering frames"
    assert 1 <= s["frames"] <= 10
    assert err.strip().splitlines()[-1] == f"teleop jog: error: camera {str(video)!r} stopped delivering frames"


# --------------------------------------------------------------------------- 5. clutch reason
def test_a_clutch_never_engaged_while_the_tag_was_seen_is_not_called_no_tag_seen():
    """`(echo; echo; sleep 8) | teleop jog --mode relative --clutch enter`: the clutch went on
    and off before a tick; "tag seen in 120" was followed by "no (no tag seen)"."""
    from teleop.jog.run import format_summary

    s = {"camera": "tag.avi", "mode": "relative", "realtime": False, "detector": "pupil", "duration_s": 4.0,
         "wall_s": 4.0, "realtime_factor": None, "frames": 120, "frames_with_tag": 120, "frames_tag_unposed": 0,
         "detect_ms_mean": 5.0, "goal_moved_mm": None, "hand_moved_mm": 0.9, "hand_to_goal_mm": None,
         "hand_to_goal_max_mm": None, "reach_tolerance_mm": 15.0, "statuses": {"held": 400},
         "orientation_enabled": True, "goal_ticks": 0, "orientation_ticks": 0, "clutch_never_engaged": False,
         "fell": False, "sank": False, "sink_fraction": 0.25, "base_height_start_m": 0.619,
         "base_height_min_m": 0.618}
    text = format_summary(s)
    assert "orientation followed: no (the clutch was not engaged while the tag was seen)" in text
    assert "no tag seen" not in text


# --------------------------------------------------------------------------- 6-8. exit codes
def test_a_charuco_marker_larger_than_its_square_is_a_usage_error(tmp_path, capsys):
    assert main(["calibrate-camera", "--images", str(tmp_path), "--pattern", "charuco", "--marker-size", "0.03",
                 "--out", str(tmp_path / "cam.json")]) == 2
    err = capsys.readouterr().err
    assert "--marker-size (0.03 m) must be smaller than --square-size (0.025 m)" in err
    assert "teleop calibrate-camera --help" in err


def test_a_test_video_below_a_file_is_refused_by_name(tmp_path, capsys):
    text = tmp_path / "text.txt"
    text.write_text("notes")
    out = text / "x.mp4"
    assert main(["jog", "--make-test-video", str(out), "--duration", "0.1"]) == 1
    err = capsys.readouterr().err
    assert err.strip() == f"teleop jog: error: --make-test-video {out}: {text} is a file, not a folder"


def test_bench_jog_plots_below_a_file_are_refused_without_the_debug_hint(tmp_path, capsys):
    text = tmp_path / "text.txt"
    text.write_text("notes")
    assert main(["bench", "jog", "--quick", "--out", str(text)]) == 1
    err = capsys.readouterr().err
    assert f"--out {text} is a file: give a folder for the plots" in err
    assert "TELEOP_DEBUG" not in err


# --------------------------------------------------------------------------- 9. pose not solved
@pytest.mark.parametrize("option, value, named", [("--tag-size", "1e-9", "--tag-size 1e-09 m"),
                                                  ("--hfov", "0.01", "--hfov 0.01 deg")])
def test_tags_found_whose_pose_cannot_be_solved_are_said(video, capsys, option, value, named):
    """The detector found the tag's corners, solvePnP failed, and the run blamed "the tag
    family, lighting and focus" for a tag "seen in none of the frames"."""
    assert main(["jog", "--camera", str(video), "--duration", "0.5", option, value, "--no-collision-checks"]) == 1
    out, err = capsys.readouterr()
    assert "tag seen in 0, found but its pose not solved in 15" in out
    assert "orientation followed: no (the tag's pose could not be solved)" in out
    assert "a tag was found in 15 of the 15 frames, but its pose could not be solved from its corners in any" in err
    assert named in err
    assert "lighting and focus" not in err


# --------------------------------------------------------------------------- 10. --hfov advice
def test_the_hfov_advice_of_make_test_video_points_the_right_way():
    """At 178 deg the error said "give a wider --hfov": a wider one is refused, 175 works."""
    import re

    from teleop.jog.tag_video import _TagSizes, check_test_video_options

    wide = check_test_video_options(0.08, 178.0, 10.0)
    assert "give a narrower --hfov (" in wide and "give a wider" not in wide
    suggested = float(re.search(r"narrower --hfov \(([\d.]+) deg or less", wide).group(1))
    assert _TagSizes(suggested, 10.0).sizes()[1] is not None      # some --tag-size works there
    narrow = check_test_video_options(0.08, 5.0, 10.0)
    assert "give a wider --hfov (" in narrow
    suggested = float(re.search(r"wider --hfov \(([\d.]+) deg or more", narrow).group(1))
    assert _TagSizes(suggested, 10.0).sizes()[1] is not None


# --------------------------------------------------------------------------- 11. ignored options
def test_options_make_test_video_would_ignore_are_refused(tmp_path, capsys):
    out = tmp_path / "v.mp4"
    calibration = tmp_path / "cam.json"
    assert main(["jog", "--make-test-video", str(out), "--calibration", str(calibration), "--mode", "relative",
                 "--view", "web", "--duration", "0.1"]) == 2
    err = capsys.readouterr().err
    assert "--calibration, --mode, --view have no effect with --make-test-video" in err
    assert "ideal (distortion-free) 640x480 camera of --hfov" in err
    assert not out.exists()
    # Those it uses are fine.
    assert main(["jog", "--make-test-video", str(out), "--duration", "0.1", "--tag-id", "3", "--hfov", "60",
                 "--json"]) == 0
    assert out.exists()
