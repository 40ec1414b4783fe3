"""Review of `teleop demo`, `teleop info`, `teleop stream-mvn` and `teleop calibrate-camera`:
empty paths, an option silently ignored, the demo's outputs written as one set, and board
sizes that ended in a traceback or in OpenCV's assertion text."""

from __future__ import annotations

import json

import cv2
import numpy as np
import pytest

from tests.conftest import error_line, needs_proc, run_cli
from tests.test_demo_metrics import _still_session


def _usage_error(capsys, *argv) -> str:
    """``teleop ARGV`` refused by argparse (exit 2): its stderr."""
    with pytest.raises(SystemExit) as exit_:
        run_cli(capsys, *argv)
    assert exit_.value.code == 2
    return capsys.readouterr().err


# --------------------------------------------------------------------------- empty paths
@pytest.mark.parametrize("argv, option", [
    (["demo", "--duration", "1", "--out"], "--out"),
    (["info"], "FILE"),
    (["stream-mvn"], "file"),
])
def test_an_empty_path_is_a_usage_error_and_nothing_is_written(tmp_path, capsys, monkeypatch, argv, option):
    """`demo --out ''` (an unset shell variable) wrote summary.json, demo.png and frames/
    into the current folder; `info ''` and `stream-mvn ''` called "." a folder."""
    monkeypatch.chdir(tmp_path)
    err = _usage_error(capsys, *argv, "")
    assert f"argument {option}: the path must not be empty" in err
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------- info --robot
def test_info_refuses_robot_with_a_file(tmp_path, capsys, motion_file):
    """`teleop info FILE --robot other` described FILE as without it, not a word said."""
    rc, out, err = run_cli(capsys, "info", motion_file, "--robot", "other")
    assert rc == 2 and out == ""
    assert "--robot picks the robot model `teleop info` describes without FILE" in error_line(err)
    assert "teleop info --help" in err
    rc, out, _ = run_cli(capsys, "info", motion_file, "--json")
    assert rc == 0 and json.loads(out)["frames"] == 10


def test_info_without_a_file_still_takes_robot(capsys):
    rc, out, _ = run_cli(capsys, "info", "--robot", "icub", "--json")
    assert rc == 0 and json.loads(out)["robot"] == "iCub"


# --------------------------------------------------------------------------- demo outputs
def _fake_demo(monkeypatch):
    """run_demo on sessions that take no time (no library learned, no simulation)."""
    import teleop.demo as demo

    class Library:
        labels = ["reach"]

    monkeypatch.setattr(demo, "train_library", lambda dataset: (Library(), 1))
    monkeypatch.setattr(demo, "run_session", _still_session)
    return demo


def _earlier_run(out):
    """An earlier demo's outputs in ``out``: {relative path: bytes}."""
    (out / "frames").mkdir(parents=True)
    files = {"summary.json": b'{"earlier": true}', "demo.png": b"earlier plot",
             "frames/frame_0_captured_9.99s_shown_10.74s.jpg": b"earlier frame"}
    for name, data in files.items():
        (out / name).write_bytes(data)
    return files


def _files(out) -> dict:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def test_an_interrupted_demo_write_leaves_the_earlier_outputs_whole(tmp_path, monkeypatch):
    """The frames, demo.png and summary.json were written one by one in place, the earlier
    frames deleted first: a Ctrl-C while writing left new frames beside the earlier summary
    (or a cut summary.json). Now all appear together, or none does."""
    demo = _fake_demo(monkeypatch)
    out = tmp_path / "out"
    earlier = _earlier_run(out)

    def interrupted_plot(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(demo, "plot_session", interrupted_plot)
    with pytest.raises(KeyboardInterrupt):
        demo.run_demo(out, demo.DemoSettings(duration=1.0), progress=False)
    assert _files(out) == earlier          # nothing new, nothing removed, no hidden temporaries


def test_a_demo_replaces_the_earlier_outputs_as_one_set(tmp_path, monkeypatch):
    demo = _fake_demo(monkeypatch)
    out = tmp_path / "out"
    _earlier_run(out)
    summary = demo.run_demo(out, demo.DemoSettings(duration=1.0), progress=False)
    files = _files(out)
    assert json.loads(files["summary.json"])["round_trip_s"] == summary["round_trip_s"] == 1.5
    assert files["demo.png"].startswith(b"\x89PNG")
    frames = sorted(name for name in files if name.startswith("frames/"))
    assert frames and all(files[name] == b"jpeg" for name in frames)   # the earlier frame is gone
    assert not [p for p in out.rglob(".*")]


# --------------------------------------------------------------------------- calibrate-camera
@pytest.fixture()
def grey_image(tmp_path):
    """A plain 640x480 image (no board in it)."""
    folder = tmp_path / "images"
    folder.mkdir()
    cv2.imwrite(str(folder / "plain.png"), np.full((480, 640), 128, np.uint8))
    return folder


def _failure(capsys, *argv) -> str:
    """``teleop calibrate-camera ARGV`` failing as its own errors do (SystemExit with the
    error line, exit code 1): that line."""
    with pytest.raises(SystemExit) as exit_:
        run_cli(capsys, "calibrate-camera", *argv)
    assert isinstance(exit_.value.code, str) and "Traceback" not in capsys.readouterr().err
    return exit_.value.code


def test_a_chessboard_under_3x3_is_a_usage_error(tmp_path, capsys, grey_image):
    """--board 2x2 passed the option's check and ended in OpenCV's assertion text (exit 1)."""
    rc, _, err = run_cli(capsys, "calibrate-camera", "--images", grey_image, "--board", "2x5",
                         "--out", tmp_path / "cam.json")
    assert rc == 2
    assert error_line(err) == "--board 2x5: a chessboard needs at least 3x3 inner corners (OpenCV's finder)"


def test_a_huge_chessboard_is_not_found_rather_than_a_traceback(tmp_path, capsys, grey_image):
    """--board 100000x100000 allocated its 10^10 corners first: a MemoryError traceback."""
    message = _failure(capsys, "--images", grey_image, "--board", "100000x100000", "--out", tmp_path / "cam.json")
    assert message.startswith("teleop calibrate-camera: error: chessboard 100000x100000 found in 0 images; need 5")
    assert not (tmp_path / "cam.json").exists()


@pytest.mark.parametrize("board, dictionary, markers, available", [
    ("11x11", "DICT_4X4_50", 60, 50),
    ("1000x1000", "DICT_4X4_50", 500000, 50),     # took OpenCV minutes to lay out
])
def test_a_charuco_board_with_more_markers_than_its_dictionary_is_a_usage_error(
        tmp_path, capsys, grey_image, board, dictionary, markers, available):
    """Such a board cannot exist: it was looked for anyway ("found in 0 images")."""
    rc, _, err = run_cli(capsys, "calibrate-camera", "--images", grey_image, "--pattern", "charuco",
                         "--board", board, "--dictionary", dictionary, "--out", tmp_path / "cam.json")
    assert rc == 2
    assert error_line(err).startswith(f"--board {board}: a ChArUco board of that many squares holds {markers} "
                                      f"markers, and --dictionary {dictionary} has {available}")


def test_a_charuco_board_the_dictionary_holds_is_still_looked_for(tmp_path, capsys, grey_image):
    message = _failure(capsys, "--images", grey_image, "--pattern", "charuco", "--board", "10x10",
                       "--out", tmp_path / "cam.json")
    assert message.startswith("teleop calibrate-camera: error: ChArUco board found in 0 images; need 5")


@pytest.mark.parametrize("argv, said", [
    (["--square-size", "1e10"], "argument --square-size: must be in [0.001, 1] m, got 1e10"),
    (["--square-size", "1e-30"], "argument --square-size: must be in [0.001, 1] m, got 1e-30"),
    (["--pattern", "charuco", "--marker-size", "0"], "argument --marker-size: must be in [0.001, 1] m, got 0"),
])
def test_a_board_length_out_of_any_board_is_a_usage_error(tmp_path, capsys, grey_image, argv, said):
    """--square-size 1e10 wrote a wrong calibration that passed the plausibility checks;
    1e-30 ended in OpenCV's assertion text."""
    err = _usage_error(capsys, "calibrate-camera", "--images", grey_image, *argv, "--out", tmp_path / "cam.json")
    assert said in err


def test_an_empty_images_item_is_a_usage_error(tmp_path, capsys, monkeypatch):
    """--images '' read the current folder: "holds no images", exit code 1."""
    monkeypatch.chdir(tmp_path)
    err = _usage_error(capsys, "calibrate-camera", "--images", "")
    assert "argument --images: an image file, folder or pattern must not be empty" in err


@needs_proc
def test_an_output_that_cannot_be_made_is_refused_before_the_work(capsys, grey_image):
    """--out below a folder that cannot be made, and --make-test-images there, failed after
    the calibration or the rendering, unnamed ("/proc/x: No such file or directory"). /proc
    refuses new folders even to root (a read-only folder does not)."""
    message = _failure(capsys, "--images", grey_image, "--out", "/proc/x/cam.json", "--force")
    assert message.startswith("teleop calibrate-camera: error: --out /proc/x/cam.json: cannot write in /proc/x")
    rc, _, err = run_cli(capsys, "calibrate-camera", "--make-test-images", "/proc/x")
    assert rc == 1 and error_line(err).startswith("--make-test-images /proc/x: cannot write there")
