"""``teleop calibrate-camera`` on chessboards rendered with known intrinsics, and the
calibration file."""

from __future__ import annotations

import json

import cv2
import numpy as np
import pytest

from conftest import refused_camera_calibration
from teleop.cli import main
from teleop.jog.camera_intrinsics import MAX_RMS_PX, MIN_TILT_DEG, CalibrationError, CameraCalibration
from teleop.jog.render import FACING_CAMERA, PlanarScene, chessboard_texture, default_camera_matrix, rotation_from_rpy

SQUARE_M = 0.025


def _write_boards(folder, K, n=10, seed=1, tilt=0.4):
    """n views of a 10x7-square chessboard (9x6 inner corners) at random poses (roll, pitch
    and yaw each within +-tilt rad), spread over the image: boards within 0.05 m x 0.04 m of
    the centre reached 38 % of the way to the image corners, and their distortion, fitted
    there, put the corners 77 px off (now a problem: MIN_IMAGE_REACH)."""
    texture = chessboard_texture(10, 7, square_px=40)  # 12 x 9 squares with the margin
    scene = PlanarScene(texture, 12 * SQUARE_M, K)
    rng = np.random.default_rng(seed)
    for i in range(n):
        R = rotation_from_rpy(*rng.uniform(-tilt, tilt, 3)) @ FACING_CAMERA
        t = np.array([rng.uniform(-0.14, 0.14), rng.uniform(-0.09, 0.09), rng.uniform(0.4, 0.5)])
        cv2.imwrite(str(folder / f"board_{i:02d}.png"), scene.render([(R, t)], 2.0, rng))


def test_calibrate_camera_recovers_focal_length(tmp_path, capsys):
    K = default_camera_matrix(640, 480, hfov_deg=70.0)  # fx = fy ~ 457 px
    _write_boards(tmp_path, K)
    out = tmp_path / "camera.json"
    assert main(["calibrate-camera", "--images", str(tmp_path / "*.png"), "--board", "9x6",
                 "--square-size", str(SQUARE_M), "--out", str(out), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["views"] == 10
    assert result["rms_px"] < 0.5
    assert result["problems"] == []      # the plausibility checks pass a correct calibration
    assert abs(result["fx"] / K[0, 0] - 1) < 0.03 and abs(result["fy"] / K[1, 1] - 1) < 0.03
    assert abs(result["cx"] - K[0, 2]) < 10 and abs(result["cy"] - K[1, 2]) < 10
    cal = CameraCalibration.load(out)
    assert cal.image_size == (640, 480) and np.allclose(cal.K[0, 0], result["fx"])
    # Text output names the RMS reprojection error.
    main(["calibrate-camera", "--images", str(tmp_path), "--out", str(tmp_path / "b.json")])
    assert "RMS reprojection error" in capsys.readouterr().out


def test_calibrate_camera_from_charuco_boards(tmp_path, capsys):
    """A 7x5-square ChArUco board (OpenCV's own image of it, 4x4 markers), rendered at
    random poses, some partly out of view: ChArUco's point of use."""
    K = default_camera_matrix(640, 480, hfov_deg=60.0)
    board = cv2.aruco.CharucoBoard((7, 5), SQUARE_M, 0.75 * SQUARE_M,
                                   cv2.aruco.getPredefinedDictionary(cv2.aruco.DICT_4X4_50))
    square_px = 60
    texture = cv2.copyMakeBorder(board.generateImage((7 * square_px, 5 * square_px)), square_px, square_px,
                                 square_px, square_px, cv2.BORDER_CONSTANT, value=255)
    scene = PlanarScene(texture, 9 * SQUARE_M, K)
    rng = np.random.default_rng(3)
    for i in range(12):
        R = rotation_from_rpy(*rng.uniform(-0.45, 0.45, 3)) @ FACING_CAMERA
        t = np.array([rng.uniform(-0.08, 0.08), rng.uniform(-0.06, 0.06), rng.uniform(0.25, 0.45)])
        cv2.imwrite(str(tmp_path / f"charuco_{i:02d}.png"), scene.render([(R, t)], 2.0, rng))
    out = tmp_path / "camera.json"
    assert main(["calibrate-camera", "--images", str(tmp_path), "--pattern", "charuco", "--board", "7x5",
                 "--square-size", str(SQUARE_M), "--out", str(out), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["views"] >= 10
    assert result["rms_px"] < 0.5
    assert result["problems"] == []
    assert abs(result["fx"] / K[0, 0] - 1) < 0.03 and abs(result["fy"] / K[1, 1] - 1) < 0.03
    assert abs(result["cx"] - K[0, 2]) < 10 and abs(result["cy"] - K[1, 2]) < 10
    assert json.loads(out.read_text())["source"].startswith("charuco 7x5")


def test_too_few_boards_is_a_clear_error(tmp_path):
    _write_boards(tmp_path, default_camera_matrix(640, 480, hfov_deg=70.0), n=2)
    cv2.imwrite(str(tmp_path / "blank.png"), np.full((480, 640), 128, np.uint8))
    with pytest.raises(SystemExit) as exc:
        main(["calibrate-camera", "--images", str(tmp_path), "--out", str(tmp_path / "c.json")])
    assert "found in 2 images; need 5" in str(exc.value) and "of 3 images" in str(exc.value)
    with pytest.raises(SystemExit) as exc:
        main(["calibrate-camera", "--images", str(tmp_path / "nothing*.png")])
    assert "no image matches" in str(exc.value)


def test_a_folder_without_images_is_named(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(SystemExit) as exc:
        main(["calibrate-camera", "--images", str(empty)])
    message = str(exc.value)
    assert message.startswith(f"teleop calibrate-camera: error: --images: {empty}: folder holds no images")
    assert "*.png" in message and "*.jpg" in message
    (empty / "notes.txt").write_text("boards")
    (empty / "board.heic").write_bytes(b"")
    with pytest.raises(SystemExit) as exc:
        main(["calibrate-camera", "--images", str(empty)])
    assert "found only .heic, .txt files" in str(exc.value)


def test_margin_of_a_correct_calibration_to_the_plausibility_limits(tmp_path):
    """The rendered boards of the tests above, calibrated: well inside every limit."""
    from teleop.jog.camera_intrinsics import calibrate_chessboard, images_from_paths

    K = default_camera_matrix(640, 480, hfov_deg=70.0)
    _write_boards(tmp_path, K)
    cal, views = calibrate_chessboard(images_from_paths([tmp_path]), 9, 6, SQUARE_M)
    assert cal.problems() == []
    assert cal.rms_px < MAX_RMS_PX / 2
    assert cal.coverage["max_tilt_deg"] > 1.5 * MIN_TILT_DEG


def test_face_on_boards_are_refused_unless_accepted(tmp_path, capsys):
    """Boards all facing the camera squarely leave the focal length undetermined (here it
    comes out tens of percent wrong): not written without --accept-problems."""
    K = default_camera_matrix(640, 480, hfov_deg=70.0)
    _write_boards(tmp_path, K, n=6, seed=2, tilt=0.02)
    out = tmp_path / "camera.json"
    assert "faces the camera squarely" in refused_camera_calibration(tmp_path, out)
    assert main(["calibrate-camera", "--images", str(tmp_path), "--out", str(out), "--accept-problems",
                 "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["problems"] and out.is_file()
    assert "teleop calibrate-camera: warning: every board faces the camera squarely" in captured.err


def test_absurd_intrinsics_are_named():
    """The walkthrough's result from bad images: fx 36039, fy 2322, k2 -7365."""
    cal = CameraCalibration(np.array([[36039.0, 0.0, 900.0], [0.0, 2322.0, 240.0], [0.0, 0.0, 1.0]]),
                            np.array([0.5, -7365.0, 0.0, 0.0, 0.0]), (640, 480), rms_px=2.4)
    cal.coverage = {"max_radius": 0.15, "max_tilt_deg": 25.0}
    problems = " | ".join(cal.problems())
    assert "RMS reprojection error 2.40 px" in problems
    assert "fx 36039.0 and fy 2322.0 px differ" in problems
    assert "principal point (900, 240) px is outside the image" in problems
    assert "folds the image over" in problems
    assert CameraCalibration.pinhole(640, 480, 60.0).problems() == []   # no coverage known: those checks skipped


def test_calibration_file_errors(tmp_path):
    with pytest.raises(CalibrationError, match="does not exist"):
        CameraCalibration.load(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("not json")
    with pytest.raises(CalibrationError, match="not a calibration file"):
        CameraCalibration.load(bad)
    bad.write_text(json.dumps({"image_size": [640, 480], "camera_matrix": [[0, 0, 320], [0, 0, 240], [0, 0, 1]]}))
    with pytest.raises(CalibrationError, match="fx, fy > 0"):
        CameraCalibration.load(bad)
    # Round trip, and OpenCV's own YAML format.
    cal = CameraCalibration.pinhole(640, 480, 60.0)
    cal.save(tmp_path / "ok.json")
    assert np.allclose(CameraCalibration.load(tmp_path / "ok.json").K, cal.K)
    fs = cv2.FileStorage(str(tmp_path / "cam.yaml"), cv2.FILE_STORAGE_WRITE)
    fs.write("image_width", 640)
    fs.write("image_height", 480)
    fs.write("camera_matrix", cal.K)
    fs.write("distortion_coefficients", np.zeros((5, 1)))
    fs.release()
    loaded = CameraCalibration.load(tmp_path / "cam.yaml")
    assert np.allclose(loaded.K, cal.K) and loaded.image_size == (640, 480)
    assert np.allclose(cal.scaled_to(320, 240).K[0, 0], cal.K[0, 0] / 2)


@pytest.mark.parametrize("content, suffix, message", [
    ('{"camera_matrix": [[500, 0, 320], [0, 500, 240], [0, 0, 1]], "image_size": [640, 480], "rms_px": "n/a"}',
     ".json", "not a calibration file.*n/a"),
    ("[1, 2, 3]", ".json", "expected a JSON object"),
    ("just some text\nnot yaml at all: [\n", ".yaml", "not an OpenCV calibration file"),
    ("%YAML:1.0\n---\n- 1\n- 2\n", ".yml", "not an OpenCV calibration file"),
])
def test_malformed_calibration_files_are_clear_errors(tmp_path, content, suffix, message):
    """Each used to end in a TypeError, SystemError or cv2.error traceback."""
    path = tmp_path / f"camera{suffix}"
    path.write_text(content)
    with pytest.raises(CalibrationError, match=message):
        CameraCalibration.load(path)


_YAML_HEAD = ("%YAML:1.0\n---\ncamera_matrix: !!opencv-matrix\n   rows: 3\n   cols: 3\n   dt: d\n"
              "   data: [ 500., 0., 320., 0., 500., 240., 0., 0., 1. ]\n")


@pytest.mark.parametrize("content, suffix", [
    ('{"camera_matrix": [[1' + "0" * 400 + ', 0, 320], [0, 500, 240], [0, 0, 1]], "image_size": [640, 480]}',
     ".json"),
    ('{"camera_matrix": [[500, 0, 320], [0, 500, 240], [0, 0, 1]], "image_size": [1e999, 480]}', ".json"),
    ('{"camera_matrix": [[500, 0, 320], [0, 500, 240], [0, 0, 1]], "image_size": [NaN, 480]}', ".json"),
    ('{"camera_matrix": [[500, 0, 320], [0, 500, 240], [0, 0, 1]], "image_size": [1e300, 480]}', ".json"),
    ('{"camera_matrix": [[500, 0, 320], [0, 500, 240], [0, 0, 1]], "image_size": [640, 480], "rms_px": 1'
     + "0" * 400 + "}", ".json"),
    ('{"image_size": [640, 480], "camera_matrix": ' + "[" * 100000 + "]" * 100000 + "}", ".json"),
    ('{"image_size": [640, ' + "4" * 5000 + "]}", ".json"),
    ('{"image_size": [640, 480], "source": "\xe9"}', ".json"),
    (_YAML_HEAD + "image_width: .Inf\nimage_height: 480\n", ".yaml"),
    (_YAML_HEAD + "image_width: .NaN\nimage_height: 480\n", ".yaml"),
], ids=["huge-int-K", "inf-size", "nan-size", "1e300-size", "huge-int-rms", "deep", "5000-digit-int", "latin1",
        "yaml-inf-width", "yaml-nan-width"])
def test_hostile_numbers_and_nesting_are_calibration_errors(tmp_path, content, suffix):
    """Each used to escape as OverflowError, RecursionError or a plain ValueError (fuzzer)."""
    path = tmp_path / f"camera{suffix}"
    path.write_bytes(content.encode("latin-1" if "\xe9" in content else "utf-8"))
    with pytest.raises(CalibrationError) as info:
        CameraCalibration.load(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_a_calibration_is_not_scaled_to_another_aspect_ratio():
    calibration = CameraCalibration.pinhole(1280, 720)
    assert calibration.scaled_to(640, 360).K[0, 0] == pytest.approx(calibration.K[0, 0] / 2)
    with pytest.raises(CalibrationError, match="another aspect ratio"):
        calibration.scaled_to(640, 480)


def test_the_calibration_is_never_written_over_one_of_its_images(tmp_path, capsys):
    """`--out boards/board_00.png --force` replaced the board image with the JSON."""
    K = default_camera_matrix(640, 480, hfov_deg=70.0)
    _write_boards(tmp_path, K)
    image = sorted(tmp_path.glob("*.png"))[0]
    before = image.read_bytes()
    for images in (str(tmp_path), str(image)):
        with pytest.raises(SystemExit) as exc:
            main(["calibrate-camera", "--images", images, "--board", "9x6", "--square-size", str(SQUARE_M),
                  "--out", str(image), "--force"])
        assert str(exc.value) == (f"teleop calibrate-camera: error: --out {image} is one of the --images: choose "
                                  "another file (even --force does not replace an input)")
    assert image.read_bytes() == before
