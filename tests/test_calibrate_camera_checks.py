"""``teleop calibrate-camera``'s checks of its result and of its output file.

The boards are rendered here through a pinhole camera with OpenCV's distortion model (each
image pixel is undistorted to its ray, the ray meets the board's plane at a texture point),
so a test knows the true intrinsics. A user audit found that 8 distortion-free views of
boards near the image centre gave "distortion 0.0144, -1.8416, 0.0006, 0.0003, 37.3762"
with no problem reported: the distortion, fitted where the boards were, is extrapolated to
the rest of the image, where it crushes or folds it.
"""

from __future__ import annotations

import json

import cv2
import numpy as np
import pytest

from conftest import refused_camera_calibration
from teleop.cli import main
from teleop.jog.camera_intrinsics import CameraCalibration, calibrate_chessboard, images_from_paths
from teleop.jog.render import (
    FACING_CAMERA, MILD_DISTORTION, default_camera_matrix, render_board_view, rotation_from_rpy, spread_board_views,
    undistort_precisely,
)

SQUARE_M = 0.025


def _centred_boards(folder, seed: int) -> np.ndarray:
    """The audit's case: 8 views of a 9x6 board 0.7-0.8 m away near the image centre, tilted
    by 20-28 degrees (about the board's x, y or both), through a distortion-free 60-degree
    camera. Returns its K."""
    K = default_camera_matrix(640, 480, hfov_deg=60.0)
    rng = np.random.default_rng(seed)
    tilts_deg = [(28, 0), (-28, 0), (0, 28), (0, -28), (20, 20), (-20, 20), (20, -20), (-20, -20)]
    for i, (roll, pitch) in enumerate(tilts_deg):
        R = rotation_from_rpy(np.radians(roll), np.radians(pitch), np.radians(rng.uniform(-10, 10))) @ FACING_CAMERA
        t = np.array([rng.uniform(-0.02, 0.02), rng.uniform(-0.02, 0.02), rng.uniform(0.7, 0.8)])
        cv2.imwrite(str(folder / f"board_{i:02d}.png"), render_board_view(K, np.zeros(5), R, t, rng))
    return K


def _spread_boards(folder, seed: int = 0) -> np.ndarray:
    """The product's good calibration session (:func:`teleop.jog.render.spread_board_views`:
    12 views reaching the image's edges and corners, through a 70-degree camera with
    :data:`MILD_DISTORTION`) written to ``folder``. Returns its K."""
    K, _, images = spread_board_views(seed)
    for i, image in enumerate(images):
        cv2.imwrite(str(folder / f"board_{i:02d}.png"), image)
    return K


@pytest.mark.parametrize("seed, folds", [(1, True), (0, False)], ids=["folding-fit", "crushing-fit"])
def test_boards_near_the_centre_only_are_refused(tmp_path, capsys, seed, folds):
    """The audit's case, reproduced: RMS about 0.25 px, fx within 0.5 %, and a k2, k3 in the
    tens and hundreds. Seed 1's model folds the image between the boards and the corners
    (pixel (0, 0) has no undistorted point); seed 0's crushes it (pixel (0, 0) undistorts to
    about (145, 101)). Both were written with "problems": []."""
    _centred_boards(tmp_path, seed)
    out = tmp_path / "camera.json"
    message = refused_camera_calibration(tmp_path, out)
    assert "the board corners reach only" in message
    assert ("folds the image over" in message) == folds
    assert main(["calibrate-camera", "--images", str(tmp_path), "--out", str(out), "--accept-problems",
                 "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["views"] == 8 and result["rms_px"] < 0.5 and out.is_file()
    reach = [p for p in result["problems"] if "the board corners reach only" in p]
    assert len(reach) == 1 and "of the way from the image centre to its corners" in reach[0]


def test_well_spread_boards_through_a_mild_distortion_pass(tmp_path, capsys):
    """Boards reaching the image's edges and corners: no problem, and the fitted distortion
    puts the image corners within a few pixels of where the true one does."""
    K = _spread_boards(tmp_path)
    out = tmp_path / "camera.json"
    assert main(["calibrate-camera", "--images", str(tmp_path), "--out", str(out), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["views"] == 12 and result["problems"] == []
    assert abs(result["fx"] / K[0, 0] - 1) < 0.01 and abs(result["dist"][0] - MILD_DISTORTION[0]) < 0.02
    cal = CameraCalibration.load(out)
    corners = np.array([[[0.0, 0.0]], [[639.0, 0.0]], [[0.0, 479.0]], [[639.0, 479.0]]])
    truth = undistort_precisely(corners, K, MILD_DISTORTION, P=K)
    fitted = undistort_precisely(corners, cal.K, cal.dist, P=cal.K)
    assert np.max(np.linalg.norm((fitted - truth).reshape(-1, 2), axis=1)) < 8.0
    assert cal.problems() == []    # a loaded file: the coverage is not known, the fold is still checked


def test_reach_of_the_board_corners_is_measured(tmp_path):
    """The fraction of the image's half-diagonal the detected corners reach, on both sides of
    the limit."""
    from teleop.jog.camera_intrinsics import MIN_IMAGE_REACH

    centred_folder, spread_folder = tmp_path / "centred", tmp_path / "spread"
    centred_folder.mkdir()
    spread_folder.mkdir()
    _centred_boards(centred_folder, seed=0)
    centred, _ = calibrate_chessboard(images_from_paths([centred_folder]), 9, 6, SQUARE_M)
    assert 0.15 < centred.coverage["image_reach"] < MIN_IMAGE_REACH - 0.1
    _spread_boards(spread_folder)
    spread, _ = calibrate_chessboard(images_from_paths([spread_folder]), 9, 6, SQUARE_M)
    assert MIN_IMAGE_REACH + 0.1 < spread.coverage["image_reach"] <= 1.0


def _fitted(dist, max_radius=0.19, image_reach=0.9) -> CameraCalibration:
    """A 640x480, 60-degree camera with distortion ``dist``, its boards having reached
    normalised radius ``max_radius`` and ``image_reach`` of the image's half-diagonal."""
    cal = CameraCalibration(default_camera_matrix(640, 480, hfov_deg=60.0), np.asarray(dist, float), (640, 480),
                            rms_px=0.25)
    cal.coverage = {"max_radius": max_radius, "max_tilt_deg": 28.0, "image_reach": image_reach}
    return cal


def test_a_fold_between_the_boards_and_the_image_corners_is_named():
    """A fit of seed 1 above: monotonic out to the boards' radius (0.19), folded before the
    image corners (normalised radius 0.72). Only the boards' radius used to be checked."""
    problems = " | ".join(_fitted([-0.2736, 19.7494, -0.0011, 0.0029, -367.4884]).problems())
    assert "folds the image over between the area the boards covered (normalised radius 0.19) and " \
        "the image corners (0.72)" in problems
    assert "inside the area the boards covered" not in problems
    # Folded inside the boards' area: said so (once).
    problems = _fitted([0.5, -7365.0, 0.0, 0.0, 0.0]).problems()
    assert sum("folds the image over" in p for p in problems) == 1
    assert any("inside the area the boards covered" in p for p in problems)


def test_the_audits_model_is_refused_for_its_coverage_not_a_fold():
    """The audit's coefficients keep the distorted radius increasing (no fold: the corner
    pixels undistort, if iterated enough, to about (99, 74)), but come from boards that
    reached about a quarter of the way to the corners: named for that."""
    from teleop.jog.camera_intrinsics import MIN_IMAGE_REACH

    audit = [0.0144, -1.8416, 0.0006, 0.0003, 37.3762]
    problems = _fitted(audit, image_reach=0.27).problems()
    assert len(problems) == 1 and "the board corners reach only 27 %" in problems[0]
    assert _fitted(audit, image_reach=0.9).problems() == []
    assert _fitted(MILD_DISTORTION, image_reach=0.9).problems() == []
    assert _fitted(MILD_DISTORTION, image_reach=MIN_IMAGE_REACH).problems() == []


# ----------------------------------------------------------------------- --out and --force
def test_an_existing_out_is_not_replaced_without_force(tmp_path, monkeypatch, capsys):
    """As every command's output (record -o, calibrate-sim --out, jog --make-test-video):
    refused before the images are read, exit code 1 (what is on disk, not a malformed
    value); --force replaces it."""
    import teleop.jog.camera_intrinsics as calibration

    _spread_boards(tmp_path)
    out = tmp_path / "camera.json"
    out.write_text("an earlier calibration")
    read = calibration.images_from_paths

    def no_work(*args, **kwargs):
        raise AssertionError("images read before --out was checked")

    monkeypatch.setattr(calibration, "images_from_paths", no_work)
    with pytest.raises(SystemExit) as exc:
        main(["calibrate-camera", "--images", str(tmp_path), "--out", str(out)])
    assert exc.value.code == (f"teleop calibrate-camera: error: --out {out} exists: pass --force to overwrite it, "
                              "or choose another file")   # a message: exit status 1
    assert out.read_text() == "an earlier calibration"
    # --accept-problems is not --force: it does not replace a file either.
    with pytest.raises(SystemExit, match="exists: pass --force"):
        main(["calibrate-camera", "--images", str(tmp_path), "--out", str(out), "--accept-problems"])
    monkeypatch.setattr(calibration, "images_from_paths", read)
    assert main(["calibrate-camera", "--images", str(tmp_path), "--out", str(out), "--force", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["problems"] == []
    assert CameraCalibration.load(out).image_size == (640, 480)


def test_force_does_not_write_a_calibration_with_problems(tmp_path):
    """--force only replaces an existing file; a calibration that looks wrong still needs
    --accept-problems (and the existing file is left as it was)."""
    _centred_boards(tmp_path, seed=0)
    out = tmp_path / "camera.json"
    out.write_text("an earlier calibration")
    with pytest.raises(SystemExit) as exc:
        main(["calibrate-camera", "--images", str(tmp_path), "--out", str(out), "--force"])
    assert "the calibration looks wrong, not written to" in str(exc.value)
    assert out.read_text() == "an earlier calibration"
    assert main(["calibrate-camera", "--images", str(tmp_path), "--out", str(out), "--force",
                 "--accept-problems"]) == 0
    assert CameraCalibration.load(out).rms_px < 0.5


def test_make_test_images_gives_a_session_that_calibrates_to_its_truth(tmp_path, capsys):
    """Without a camera: the rendered session and its camera, calibrated back to it; written
    once, replaced only with --force, never into a file."""
    boards = tmp_path / "boards"
    assert main(["calibrate-camera", "--make-test-images", str(boards)]) == 0
    assert f"teleop calibrate-camera --images {boards}" in capsys.readouterr().out
    truth = json.loads((boards / "truth.json").read_text())
    assert len(list(boards.glob("board_*.png"))) == 12
    out = tmp_path / "camera.json"
    assert main(["calibrate-camera", "--images", str(boards), "--out", str(out), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["problems"] == [] and abs(result["fx"] / truth["K"][0][0] - 1) < 0.01
    assert abs(result["dist"][0] - truth["dist"][0]) < 0.02
    assert main(["calibrate-camera", "--make-test-images", str(boards)]) == 1
    assert "holds test images already: pass --force" in capsys.readouterr().err
    assert main(["calibrate-camera", "--make-test-images", str(boards), "--force"]) == 0
    assert main(["calibrate-camera", "--make-test-images", str(out)]) == 1
    assert "is a file: give a folder" in capsys.readouterr().err


@pytest.mark.parametrize("pattern", ["chessboard", "charuco"])
def test_an_image_too_small_for_a_board_is_named_not_an_opencv_assertion(tmp_path, capsys, pattern):
    # A stray thumbnail among the boards made OpenCV's chessboard finder fail an assertion
    # ("blockSize % 2 == 1 && blockSize > 1"), which named neither the file nor the problem.
    boards = tmp_path / "boards"
    assert main(["calibrate-camera", "--make-test-images", str(boards)]) == 0
    tiny = boards / "zz_thumbnail.png"
    cv2.imwrite(str(tiny), np.full((4, 4), 128, np.uint8))
    with pytest.raises(SystemExit) as exc:
        main(["calibrate-camera", "--images", str(boards), "--out", str(tmp_path / "c.json"), "--pattern", pattern])
    assert str(exc.value) == (f"teleop calibrate-camera: error: --images: {tiny}: an image of 4x4 px, too small to "
                              "show a calibration board (at least 16 px a side); remove it from the images given")
    assert not (tmp_path / "c.json").exists()
    # The library skips such images rather than raise.
    grey = cv2.imread(str(next(boards.glob("*.png"))), cv2.IMREAD_GRAYSCALE)
    with pytest.raises(Exception, match="found in 1 images; need 5"):
        calibrate_chessboard([np.full((4, 4), 128, np.uint8), grey], 9, 6, SQUARE_M)
