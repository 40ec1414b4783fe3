"""A named pipe or a device given where a file is read: refused by name, at once.

Opening a named pipe for reading waits for a writer: ``dataset inspect``, ``robot
--library`` and ``calibrate-camera`` hung in silence; ``info`` called such a file "a folder",
``retarget``, ``operator --input`` and ``calibrate-sim`` "no such file", ``jog --calibration``
"does not exist". A regression fails instead of stalling the suite: the ``fifo`` fixture lets
a waiting reader go, and the commands that hung run in a subprocess with a timeout as well.
"""

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from conftest import REPO_ROOT, error_line, run_cli
from teleop.cli import main

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes (POSIX)")

#: Long for a command refused before any work (a second or two), short for a hung one.
TIMEOUT_S = 60


@pytest.fixture
def fifo():
    """``fifo(folder, name)`` makes a named pipe. A command that opens one to read it (the
    defect) is let go: a writer comes and goes as soon as a reader waits, so the reader sees
    an empty file and the test fails on the message rather than hanging."""
    made: list[Path] = []
    done = threading.Event()

    def release_readers() -> None:
        while not done.wait(0.2):
            for path in made:
                try:   # without a reader waiting, a non-blocking open for writing fails (ENXIO)
                    os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
                except OSError:
                    pass

    def make(folder: Path, name: str) -> Path:
        path = folder / name
        os.mkfifo(path, 0o600)
        made.append(path)
        return path

    watcher = threading.Thread(target=release_readers, daemon=True)
    watcher.start()
    yield make
    done.set()
    watcher.join()


def run_teleop(*args) -> subprocess.CompletedProcess:
    """``teleop ARGS`` in a subprocess: a command that hangs fails the test (TimeoutExpired)."""
    return subprocess.run([sys.executable, "-m", "teleop", *map(str, args)], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=TIMEOUT_S)


def test_the_shared_check_names_the_kind_of_file(tmp_path, fifo):
    from retarget.file_checks import NotRegularFileError, refuse_special_file

    pipe = fifo(tmp_path, "pipe")
    with pytest.raises(NotRegularFileError, match=f"^{pipe}: not a regular file \\(a named pipe\\)$"):
        refuse_special_file(pipe)
    with pytest.raises(ValueError, match="^/dev/null: not a regular file \\(a character device\\)$"):
        refuse_special_file("/dev/null", ValueError)
    regular = tmp_path / "file"
    regular.write_text("x")
    for fine in (regular, tmp_path, tmp_path / "missing"):   # the callers' own words for those
        refuse_special_file(fine)


@pytest.mark.parametrize("subcommand", ["inspect", "plot"])
def test_dataset_commands_refuse_a_pipe_at_once(tmp_path, subcommand, fifo):
    pipe = fifo(tmp_path, "session.mcap")
    proc = run_teleop("dataset", subcommand, pipe)
    assert proc.returncode == 1, proc.stderr
    assert error_line(proc.stderr) == f"{pipe}: not a regular file (a named pipe)"


@pytest.mark.parametrize("argv", [["trim", "-o", "{out}.mcap"], ["recover", "-o", "{out}.mcap"],
                                  ["label", "--task", "squat"]])
def test_other_dataset_commands_refuse_a_pipe(tmp_path, capsys, argv, fifo):
    pipe = fifo(tmp_path, "session.mcap")
    subcommand, *options = argv
    options = [o.format(out=tmp_path / "out") for o in options]
    rc, _, err = run_cli(capsys, "dataset", subcommand, pipe, *options)
    assert rc == 1
    assert error_line(err) == f"{pipe}: not a regular file (a named pipe)"


def test_dataset_export_skips_a_pipe_as_unreadable(tmp_path, capsys, fifo):
    pipe = fifo(tmp_path, "session.mcap")
    rc, out, err = run_cli(capsys, "dataset", "export", pipe, "-o", tmp_path / "out")
    assert rc == 1
    assert f"{pipe}: not a regular file (a named pipe)" in out + err


def test_dataset_list_shows_a_pipe_as_unreadable_and_lists_the_others(tmp_path, capsys, fifo):
    from teleop.record import Recorder

    with Recorder(tmp_path / "good.mcap", threaded=False) as recorder:
        recorder.start_episode("squat")
        recorder.stop_episode()
    pipe = fifo(tmp_path, "pipe.mcap")
    rc, out, err = run_cli(capsys, "dataset", "list", tmp_path)
    assert rc == 1 and err.endswith("1 of 2 recording(s) unreadable (above)\n"), err
    lines = out.splitlines()
    assert lines[0].startswith("good.mcap ") and "unreadable" not in lines[0]
    assert any(line.startswith("pipe.mcap ") and line.endswith(f"unreadable: {pipe}: not a regular file (a named "
                                                                   "pipe)") for line in lines), out


def test_robot_refuses_a_pipe_as_its_library(tmp_path, secret, fifo):
    pipe = fifo(tmp_path, "library.npz")
    proc = run_teleop("robot", "--library", pipe, "--secret-file", secret, "--listen", "127.0.0.1:0",
                      "--duration", "0.1")
    assert proc.returncode == 1, proc.stderr
    assert error_line(proc.stderr) == f"{pipe}: not a regular file (a named pipe)"


def test_a_task_library_load_refuses_a_pipe(tmp_path, fifo):
    from promp.library import LibraryFormatError, TaskLibrary

    pipe = fifo(tmp_path, "library.npz")
    with pytest.raises(LibraryFormatError, match="not a regular file \\(a named pipe\\)"):
        TaskLibrary.load(pipe)


@pytest.mark.parametrize("name", ["take.csv", "take.npz", "take.bvh"])
def test_info_names_a_pipe_not_a_folder(tmp_path, capsys, name, fifo):
    pipe = fifo(tmp_path, name)
    rc, _, err = run_cli(capsys, "info", pipe)
    assert rc == 1
    assert error_line(err) == f"{pipe}: not a regular file (a named pipe)"


def test_info_names_a_device(capsys):
    rc, _, err = run_cli(capsys, "info", "/dev/null")
    assert rc == 1
    assert error_line(err) == "/dev/null: not a regular file (a character device)"


@pytest.mark.parametrize("name", ["take.csv", "take.npz", "take"])
def test_retarget_refuses_a_pipe(tmp_path, capsys, name, fifo):
    pipe = fifo(tmp_path, name)
    rc, _, err = run_cli(capsys, "retarget", pipe, "--out", tmp_path / "refs")
    assert rc == 1
    assert error_line(err) == f"{pipe}: not a regular file (a named pipe)"


def test_retarget_refuses_a_pipe_as_the_skeleton_beside_a_take(tmp_path, capsys, fifo):
    # The ASF skeleton is found beside the AMC take (the folder's only .asf): not sniffed first.
    (tmp_path / "take.amc").write_text(":FULLY-SPECIFIED\n:DEGREES\n1\nroot 0 0 0 0 0 0\n")
    pipe = fifo(tmp_path, "skeleton.asf")
    rc, _, err = run_cli(capsys, "retarget", tmp_path / "take.amc", "--out", tmp_path / "refs")
    assert rc == 1
    assert error_line(err) == f"{pipe}: not a regular file (a named pipe)"


@pytest.mark.parametrize("name", ["take.csv", "take.npz", "session.mcap"])
def test_operator_refuses_a_pipe_as_its_input(tmp_path, secret, name, fifo):
    from conftest import free_port

    pipe = fifo(tmp_path, name)
    with pytest.raises(SystemExit) as exc:
        main(["operator", "--input", str(pipe), "--robot", f"127.0.0.1:{free_port()}", "--bind", "127.0.0.1:0",
              "--video-listen", "127.0.0.1:0", "--secret-file", str(secret), "--duration", "0.1"])
    assert str(exc.value) == f"teleop operator: error: --input {pipe}: not a regular file (a named pipe)"


@pytest.mark.parametrize("name, argv", [("take.npz", ["train", "{pipe}", "-o", "{tmp}/library.npz"]),
                                        ("recording.npz", ["calibrate-sim", "--data", "{pipe}", "--out", "{tmp}/fit"])])
def test_train_and_calibrate_sim_refuse_a_pipe_as_their_data(tmp_path, capsys, fifo, name, argv):
    pipe = fifo(tmp_path, name)
    rc, _, err = run_cli(capsys, *[a.format(pipe=pipe, tmp=tmp_path) for a in argv])
    assert rc == 1
    assert error_line(err) == f"{pipe}: not a regular file (a named pipe)"


@pytest.mark.parametrize("special", ["pipe", "/dev/null"])
def test_jog_refuses_a_special_file_as_its_calibration(tmp_path, special, fifo):
    path = fifo(tmp_path, "camera.json") if special == "pipe" else Path(special)
    kind = "a named pipe" if special == "pipe" else "a character device"
    with pytest.raises(SystemExit) as exc:
        main(["jog", "--camera", "0", "--calibration", str(path)])
    assert str(exc.value) == f"teleop jog: error: --calibration {path}: not a regular file ({kind})"


def test_calibrate_camera_refuses_a_pipe_among_the_images(tmp_path, fifo):
    pipe = fifo(tmp_path, "view.png")
    proc = run_teleop("calibrate-camera", "--images", tmp_path, "--out", tmp_path / "camera.json")
    assert proc.returncode == 1, proc.stderr
    assert error_line(proc.stderr) == f"--images: {pipe}: not a regular file (a named pipe)"
