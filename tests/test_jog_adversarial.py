"""Adversarial inputs to ``teleop jog`` and ``teleop calibrate-camera`` that found defects.

Real components throughout: boards rendered through a known camera and calibrated by the
command line, tag videos written with OpenCV and jogged by the command line.
"""

from __future__ import annotations

import shutil

import cv2
import numpy as np
import pytest

from teleop.cli import main
from teleop.jog.render import (FACING_CAMERA, MILD_DISTORTION, default_camera_matrix, render_board_view,
                               rotation_from_rpy)


def _one_board_view(path) -> None:
    """The first view of ``teleop calibrate-camera --make-test-images`` (its board_00.png):
    a 9x6 board tilted by 25 deg in the image's top-left, through a 70 deg camera with a mild
    barrel distortion."""
    K = default_camera_matrix(640, 480, hfov_deg=70.0)
    rng = np.random.default_rng(0)
    R = rotation_from_rpy(np.radians(25), 0.0, rng.uniform(-0.2, 0.2)) @ FACING_CAMERA
    cv2.imwrite(str(path), render_board_view(K, MILD_DISTORTION, R, np.array([-0.13, -0.08, 0.42]), rng))


@pytest.mark.parametrize("copies", ["same file", "copied files"])
def test_repeated_board_images_do_not_count_as_views(tmp_path, capsys, copies):
    """Five copies of one board image were five views ("board found in 5 of 5 images"): they
    met --min-views 5 with one board, and the calibration written (fx 383.5 px against the
    camera's 457.0, cy 196 against 239.5) passed every plausibility check. One view is one
    view, however many times it is given: too few, refused (exit code 1), nothing written."""
    first = tmp_path / "board.png"
    _one_board_view(first)
    images = [first] * 5
    if copies == "copied files":
        images = [first] + [shutil.copyfile(first, tmp_path / f"copy_{i}.png") for i in range(4)]
    out = tmp_path / "camera.json"
    with pytest.raises(SystemExit) as exc:
        main(["calibrate-camera", "--images", *map(str, images), "--out", str(out)])
    assert "found in 1 images; need 5" in str(exc.value)
    assert not out.exists()
    assert "4 of the images given repeat another one" in capsys.readouterr().err


def test_a_flipped_first_detection_does_not_turn_the_hand_of_a_still_tag():
    """Absolute mode takes the tag's orientation when first seen as the one meaning the
    hand's. A small or distant tag's pose flips between IPPE's two solutions (of a tag
    tilted 12 deg, the other is tilted -12 deg); when the first detection was the flipped
    one, the filter rejected it as an outlier, but it stayed the reference: when the
    orientation gate opened (about 1 s in) the hand turned by 21-24 deg, the tag still."""
    import pinocchio as pin

    from teleop.jog.session import JogController, JogSettings

    settings = JogSettings(collision_checks=False)
    jog = JogController(settings=settings)
    try:
        R_true = rotation_from_rpy(0.0, np.radians(12), 0.0) @ FACING_CAMERA
        R_flip = rotation_from_rpy(0.0, np.radians(-12), 0.0) @ FACING_CAMERA
        p = np.array([0.0, 0.0, 0.5])
        home = jog.hand_pose(jog.q).rotation
        # What JogRun._accept does with the first detection (absolute mode, no --offset).
        jog.align_absolute(p)
        settings.mapping.tag_reference = R_flip.copy()
        jog.reference_pending = True
        followed, turned = False, []
        for k in range(150):          # 1.5 s at 100 Hz, a 33 Hz camera
            if k % 3 == 0:
                jog.measure(k * 0.01, p, R_flip if k == 0 else R_true)
            followed |= jog.tick(k * 0.01).orientation_followed
            turned.append(np.degrees(np.linalg.norm(pin.log3(home.T @ jog.hand_pose(jog.q).rotation))))
    finally:
        jog.close()
    assert followed                   # the orientation is followed, from its gate's opening
    assert max(turned) < 2.0, f"the hand turned {max(turned):.1f} deg for a tag that never moved"
