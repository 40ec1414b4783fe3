"""Review of AprilTag jogging: the goal between camera frames, the relative clutch after a
lost tag and beyond reach, the reachable sphere at the start, calibration image sizes,
``--tag-id``."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from teleop.cli import main
from teleop.jog.camera_intrinsics import CalibrationError, calibrate_chessboard
from teleop.jog.render import FACING_CAMERA, PlanarScene, chessboard_texture, default_camera_matrix, \
    rotation_from_rpy, write_tag_video

FACING = np.diag([1.0, -1.0, -1.0])
DT = 0.01


def _controller(**settings):
    from teleop.jog.session import JogController, JogSettings
    from teleop.robot.model import RobotModel

    return JogController(RobotModel(), JogSettings(orientation=False, collision_checks=False, **settings))


class _Clock:
    """Drives a JogController one 10 ms tick at a time, one tag measurement per tick."""

    def __init__(self, jog) -> None:
        self.jog, self.t = jog, 0.0

    def run(self, tag, clutch: bool, ticks: int):
        report = None
        for _ in range(ticks):
            self.jog.measure(self.t, tag, None if tag is None else FACING)
            report = self.jog.tick(self.t, clutch=clutch)
            self.t += DT
        return report


def test_a_late_frame_does_not_pull_the_goal_back():
    """A 15 frames/s camera (66.7 ms between frames) and a tag moving steadily up: the goal
    moves up monotonically. It used to be extrapolated for 50 ms (predict_s) and then
    recomputed from the unextrapolated position, 14 mm back, at every frame."""
    jog = _controller()
    tag0 = np.array([0.0, 0.0, 0.5])
    jog.align_absolute(tag0)
    velocity = np.array([0.0, -0.2, 0.0])  # camera up = base +z, 0.2 m/s
    fps, k, z = 15.0, 0, []
    for tick in range(150):
        t = tick * DT
        while k / fps <= t + 1e-9:
            jog.measure(k / fps, tag0 + velocity * (k / fps), FACING)
            k += 1
        z.append(jog.tick(t).goal.position[2])
    steps = np.diff(z)
    assert steps.min() > -1e-4, f"goal pulled back by {-steps.min() * 1e3:.1f} mm"
    # ... and it still follows the tag: 0.2 m/s for 1.5 s.
    assert z[-1] - z[0] > 0.25
    jog.close()


def test_a_missed_detection_does_not_pull_the_goal_back():
    """30 frames/s, one frame without a detection (motion blur) while the tag moves at
    0.2 m/s: the goal went 15 mm back at the missed frame (and 13 mm forward again). What
    is left is the extrapolation's own overshoot (the One-Euro speed estimate includes the
    filter's lag): about 1 mm per frame, 2.2 mm after the missed one."""
    jog = _controller()
    tag0 = np.array([0.0, 0.0, 0.5])
    jog.align_absolute(tag0)
    velocity = np.array([0.0, -0.2, 0.0])
    fps, k, z = 30.0, 0, []
    for tick in range(100):
        t = tick * DT
        while k / fps <= t + 1e-9:
            jog.measure(k / fps, None if k == 20 else tag0 + velocity * (k / fps), FACING)
            k += 1
        z.append(jog.tick(t).goal.position[2])
    assert np.diff(z).min() > -3e-3, f"goal pulled back by {-np.diff(z).min() * 1e3:.1f} mm"
    jog.close()


def test_relative_clutch_reanchors_when_the_lost_tag_is_found_elsewhere():
    """Relative mode, clutch held: the tag is put down (lost for 2 s) and picked up elsewhere.
    The hand stays (like lifting a mouse) instead of jumping 0.2 m by the difference, and
    then follows the tag's motion from where it was found."""
    jog = _controller(mode="relative")
    clock = _Clock(jog)
    clock.run(np.array([0.0, 0.0, 0.5]), True, 50)
    goal = jog.goal.position.copy()
    clock.run(None, True, 200)
    found = np.array([0.15, -0.10, 0.6])
    clock.run(found, True, 100)
    assert np.linalg.norm(jog.goal.position - goal) < 1e-3
    clock.run(found + [0.0, -0.03, 0.0], True, 100)  # 3 cm up
    assert np.allclose(jog.goal.position - goal, [0.0, 0.0, 0.03], atol=1e-3)
    jog.close()


def test_relative_clutch_pressed_while_the_goal_is_out_of_reach():
    """The tag pushed the goal 25 cm forward, beyond reach; the clutch is released, the tag
    brought back, the clutch pressed again: a 5 cm tag motion towards the body now moves the
    hand 5 cm (it moved 17 mm: the goal was anchored beyond reach)."""
    jog = _controller(mode="relative")
    clock = _Clock(jog)
    tag = np.array([0.0, 0.0, 0.5])
    clock.run(tag, True, 20)
    assert not clock.run(tag + [0.0, 0.0, -0.25], True, 150).reachable
    clock.run(tag, False, 50)
    clock.run(tag, True, 10)
    before = jog.hand_pose(jog.q).position.copy()
    clock.run(tag + [0.0, 0.0, 0.05], True, 100)
    moved = jog.hand_pose(jog.q).position - before
    assert np.allclose(moved, [-0.05, 0.0, 0.0], atol=0.005), moved
    jog.close()


@pytest.mark.parametrize("hand", ["right", "left"])
def test_the_hand_stays_put_when_the_tag_is_first_seen_standing_still(hand):
    """Absolute mode aligned on the first sighting ("no jump at start-up"): the iCub's home
    hand is at 97 % of the arm's reach, and the 95 % sphere pulled the goal 7 mm in."""
    jog = _controller(hand=hand)
    start = jog.hand_pose(jog.q).position.copy()
    tag = np.array([0.0, 0.0, 0.5])
    jog.align_absolute(tag)
    report = _Clock(jog).run(tag, False, 100)
    assert report.reachable
    assert np.linalg.norm(jog.hand_pose(jog.q).position - start) < 5e-4
    jog.close()


def _boards(K, size, n=8, seed=1):
    texture = chessboard_texture(10, 7, square_px=40)
    scene = PlanarScene(texture, 12 * 0.025, K, image_size=size)
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        R = rotation_from_rpy(*rng.uniform(-0.4, 0.4, 3)) @ FACING_CAMERA
        # Spread over the image (calibration.MIN_IMAGE_REACH: the distortion is not extrapolated).
        t = np.array([rng.uniform(-0.14, 0.14), rng.uniform(-0.09, 0.09), rng.uniform(0.4, 0.5)])
        out.append(scene.render([(R, t)], 2.0, rng))
    return out


def test_calibration_image_size_is_that_of_the_boards():
    """A folder of 640x480 boards plus one 1024x768 picture without a board (sorted last):
    the file said 1024x768 (the last image's size), which teleop jog then scaled to its
    640x480 frames, fx 456 -> 285 px, without any warning. Boards of two sizes are refused."""
    K = default_camera_matrix(640, 480, hfov_deg=70.0)
    images = _boards(K, (640, 480)) + [np.full((768, 1024), 128, np.uint8)]
    calibration, views = calibrate_chessboard(images, 9, 6, 0.025)
    assert views == 8
    assert calibration.image_size == (640, 480)
    assert calibration.problems() == []
    big = cv2.resize(_boards(K, (640, 480), n=1, seed=5)[0], (1280, 960))
    with pytest.raises(CalibrationError, match="different sizes.*640x480"):
        calibrate_chessboard(_boards(K, (640, 480)) + [big], 9, 6, 0.025)


def test_a_tag_id_outside_the_family_is_refused(tmp_path, capsys):
    video = tmp_path / "tag.avi"
    write_tag_video(video, lambda t: (FACING_CAMERA, np.array([0.0, 0.0, 0.5])), duration_s=0.3, fps=30.0)
    with pytest.raises(SystemExit) as exc:        # a bad option value: argparse's usage error
        main(["jog", "--camera", str(video), "--tag-id", "600", "--json"])
    assert exc.value.code == 2
    assert "argument --tag-id: AprilTag 36h11 id must be 0-586, got 600" in capsys.readouterr().err


def test_a_refused_calibration_is_not_announced_as_scaled(tmp_path, capsys):
    from teleop.jog.camera_intrinsics import CameraCalibration

    video = tmp_path / "tag.avi"
    write_tag_video(video, lambda t: (FACING_CAMERA, np.array([0.0, 0.0, 0.5])), duration_s=0.1, fps=30.0)
    calibration = tmp_path / "wide.json"
    CameraCalibration.pinhole(1280, 720).save(calibration)      # the video is 640x480
    with pytest.raises(SystemExit, match="another aspect ratio"):
        main(["jog", "--camera", str(video), "--calibration", str(calibration)])
    assert "intrinsics scaled" not in capsys.readouterr().err
