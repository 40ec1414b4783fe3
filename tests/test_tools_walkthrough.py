"""Defects a fresh user met in the tool commands (calibrate-sim, jog --make-test-video,
calibrate-camera, tune, lockstep serve): each error is one line naming the option and the
file, refused before any work, and no output is overwritten or left stale unasked."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from teleop.cli import main

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def _error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert err, "no error printed"
    return err[0]


# ----------------------------------------------------------------------- calibrate-sim
def test_calibrate_sim_test_recording_is_not_overwritten_without_force(recording, capsys):
    before = recording.read_bytes()
    assert main(["calibrate-sim", "--make-test-recording", str(recording), "--groups", "r_elbow",
                 "--duration", "0.2", "--seed", "5"]) == 1
    assert _error_line(capsys) == (f"teleop calibrate-sim: error: --make-test-recording {recording} exists: "
                                   "pass --force to overwrite it, or choose another file")
    assert recording.read_bytes() == before
    assert main(["calibrate-sim", "--make-test-recording", str(recording), "--groups", "r_elbow",
                 "--duration", "0.2", "--seed", "5", "--force"]) == 0
    assert recording.read_bytes() != before


def test_calibrate_sim_unknown_group_names_the_option_plainly(recording, tmp_path, capsys):
    assert main(["calibrate-sim", "--data", str(recording), "--groups", "nosuch",
                 "--out", str(tmp_path / "cal")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.splitlines()[1:] == ["(teleop calibrate-sim --help lists the options)"]
    assert err.startswith("teleop calibrate-sim: error: --groups nosuch: nosuch is neither a joint group (")
    assert "right_arm" in err and "\"'" not in err and "['" not in err


def test_calibrate_sim_perturb_out_of_range_names_the_option(tmp_path, capsys):
    assert main(["calibrate-sim", "--make-test-recording", str(tmp_path / "r.json"), "--perturb", "2"]) == 2
    assert _error_line(capsys) == "teleop calibrate-sim: error: --perturb must be in [0, 0.7), got 2"
    assert not (tmp_path / "r.json").exists()


def test_calibrate_sim_test_recording_into_a_folder_is_refused(tmp_path, capsys):
    folder = tmp_path / "demo"
    folder.mkdir()
    assert main(["calibrate-sim", "--make-test-recording", str(folder)]) == 1
    assert _error_line(capsys) == (f"teleop calibrate-sim: error: --make-test-recording {folder} is a folder: "
                                   "give a .npz or .json file")


# ------------------------------------------------------------------ jog --make-test-video
def _partials(path: Path) -> list[Path]:
    return sorted(path.parent.glob(f".{path.name}*partial*"))


def test_interrupted_test_video_leaves_the_previous_file(tmp_path):
    """Ctrl-C while rendering: the previous video stays whole and the temporary file goes."""
    video = tmp_path / "over.mp4"
    video.write_bytes(b"the previous video")
    proc = subprocess.Popen([sys.executable, "-m", "teleop", "jog", "--make-test-video", str(video), "--force",
                             "--duration", "120"], cwd=REPO, env=ENV,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60   # a guard against hanging, not a timing check
        # Interrupt once the rendering has started writing (to the temporary file, or to
        # the video itself as it used to).
        while not _partials(video) and video.read_bytes() == b"the previous video":
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
            time.sleep(0.02)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert "interrupted" in err
    assert video.read_bytes() == b"the previous video"
    assert _partials(video) == []


def test_interrupt_leaving_a_string_exec_still_exits_130(tmp_path):
    """A Ctrl-C that lands in a string exec/eval (a namedtuple's or a dataclass's methods being
    built: numpy.random is imported mid-render) ended `python -m teleop` by SIGINT (-2) after
    "interrupted": CPython took it for unhandled (teleop/stop_request.py)."""
    (tmp_path / "interrupted_in_exec.py").write_text(
        "import argparse, sys\n"
        "from teleop.cli import run_command\n"
        "def command(args):\n"
        "    exec('raise KeyboardInterrupt', {})\n"
        "sys.exit(run_command(argparse.Namespace(func=command, command='jog')))\n")
    proc = subprocess.run([sys.executable, "-m", "interrupted_in_exec"], cwd=tmp_path, env=ENV,
                          capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stderr) == (130, "interrupted\n")


def test_complete_test_video_replaces_the_file_and_leaves_no_temporary(tmp_path, capsys):
    video = tmp_path / "tag.avi"
    video.write_bytes(b"old")
    assert main(["jog", "--make-test-video", str(video), "--duration", "0.1", "--force", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["video"] == str(video)
    assert video.stat().st_size > 1000
    assert _partials(video) == []


# ------------------------------------------------------------------------ calibrate-camera
def test_calibrate_camera_out_folder_is_refused_before_calibrating(tmp_path, monkeypatch):
    import cv2

    import teleop.jog.camera_intrinsics as calibration

    images = tmp_path / "images"
    images.mkdir()
    cv2.imwrite(str(images / "a.png"), np.full((48, 64), 128, np.uint8))
    out = tmp_path / "demo"
    out.mkdir()

    def no_work(*args, **kwargs):
        raise AssertionError("images read before --out was checked")

    monkeypatch.setattr(calibration, "images_from_paths", no_work)
    with pytest.raises(SystemExit) as exc:
        main(["calibrate-camera", "--images", str(images), "--out", str(out)])
    assert str(exc.value) == (f"teleop calibrate-camera: error: --out {out} is a folder: give the calibration "
                              f"file to write, e.g. {out / 'camera.json'}")


# ----------------------------------------------------------------------------------- tune
class _Recording:
    def __init__(self, motion: str) -> None:
        self.motion = motion

    def save(self, path: Path) -> None:
        Path(path).write_text("{}")


def _fake_results(numbers) -> dict:
    """What run_experiment returns, reduced to what saving and --json read: one method
    (PDControl) per setup."""
    return {n: {"setup": n, "name": f"setup {n}", "rows": {}, "gains": {"PDControl": {}}, "relay": {},
                "evaluations": {"PDControl": {}}, "recordings": {"PDControl": [_Recording("dance"),
                                                                               _Recording("step")]},
                "target": {"met": True}} for n in numbers}


def test_tune_removes_its_own_outputs_of_setups_not_in_this_run(tmp_path, monkeypatch, capsys):
    import teleop.tuning.experiment as experiment
    import teleop.tuning.report as report

    monkeypatch.setattr(experiment, "run_experiment", lambda numbers, settings, jobs: _fake_results(numbers))
    monkeypatch.setattr(report, "plot_errors", lambda result, path: (path.write_bytes(b"png"), path)[1])
    out = tmp_path / "tune"
    assert main(["tune", "--quick", "--json", "--out", str(out)]) == 0
    # Things that are not the command's own: they stay.
    (out / "setup3" / "notes.txt").write_text("mine")
    (out / "setup4" / "PDControl" / "my_analysis.csv").write_text("mine")
    (out / "my_plot.png").write_bytes(b"mine")
    # An earlier run's row that this run does not have (e.g. --gains mine.json): its files,
    # and its row in the earlier run's summary.json, which says they are the command's own.
    (out / "setup1" / "mine").mkdir()
    for name in ("gains.json", "evaluation.json", "dance.json", "step.json"):
        (out / "setup1" / "mine" / name).write_text("{}")
    summary = json.loads((out / "summary.json").read_text())
    summary["setups"]["1"]["gains"]["mine"] = {}
    (out / "summary.json").write_text(json.dumps(summary))
    capsys.readouterr()

    assert main(["tune", "--quick", "--json", "--setups", "1", "--out", str(out)]) == 0
    assert list(json.loads(capsys.readouterr().out)["setups"]) == ["1"]
    left = sorted(str(p.relative_to(out)) for p in out.rglob("*"))
    assert left == ["my_plot.png", "setup1", "setup1/PDControl", "setup1/PDControl/dance.json",
                    "setup1/PDControl/evaluation.json", "setup1/PDControl/gains.json",
                    "setup1/PDControl/step.json", "setup1_errors.png", "setup3", "setup3/notes.txt",
                    "setup4", "setup4/PDControl", "setup4/PDControl/my_analysis.csv", "summary.json"]


@pytest.mark.parametrize("option, value, message", [
    ("--gains", "nonexist.json", "--gains {}: no such file"),
    ("--eval-motions", "nonexist.npz", "--eval-motions {}: no such file"),
    ("--train-motions", "nonexist.npz", "--train-motions {}: no such file"),
])
def test_tune_missing_input_files_are_prefixed_errors_before_any_work(tmp_path, monkeypatch, capsys, option, value,
                                                                      message):
    import teleop.tuning.experiment as experiment

    def no_work(*args, **kwargs):
        raise AssertionError("the experiment ran before the inputs were checked")

    monkeypatch.setattr(experiment, "run_experiment", no_work)
    path = tmp_path / value
    assert main(["tune", "--quick", option, str(path), "--out", str(tmp_path / "tune")]) == 1
    assert capsys.readouterr().err == "teleop tune: error: " + message.format(path) + "\n"   # no TELEOP_DEBUG hint


# --------------------------------------------------------------------------- lockstep serve
def test_lockstep_serve_json_prints_only_json_on_stdout():
    from teleop.sim import lockstep as ls
    from teleop.sim.lockstep_client import LockstepClient

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "teleop", "lockstep", "serve", "--json", "--port", str(port),
                             "--sessions", "1", "--max-steps", "5", "--joints", "r_elbow"],
                            cwd=REPO, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60   # a guard against hanging, not a timing check
        while True:
            try:
                client = LockstepClient(port=port, timeout=30)
                break
            except ConnectionRefusedError:
                assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
                time.sleep(0.05)
        with client:
            k = len(client.controlled_joints)
            client.run(lambda state: (ls.MODE_TORQUE, np.zeros(k)))
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    lines = out.splitlines()
    assert lines, err
    for line in lines:
        json.loads(line)
    assert "lock-step server on 127.0.0.1:" in err


def test_an_interrupted_tune_leaves_no_empty_out_folder(tmp_path, monkeypatch):
    """--out was made before the minutes of simulation: Ctrl-C left it there, empty."""
    import teleop.tuning.experiment as experiment

    def interrupted(numbers, settings, jobs):
        raise KeyboardInterrupt

    monkeypatch.setattr(experiment, "run_experiment", interrupted)
    assert main(["tune", "--quick", "--setups", "2", "--out", str(tmp_path / "tune")]) == 130   # Ctrl-C
    assert not (tmp_path / "tune").exists()


def test_tune_writes_its_outputs_as_one_set(tmp_path, monkeypatch, capsys):
    """Saved one file after another, a Ctrl-C left a summary.json whose gains were not
    those of the files beside it, and a full disk a truncated step recording and an error
    naming no file. Now a failed save leaves the earlier run whole and names the output."""
    import errno

    import teleop.tuning.experiment as experiment
    import teleop.tuning.report as report

    monkeypatch.setattr(experiment, "run_experiment", lambda numbers, settings, jobs: _fake_results(numbers))
    monkeypatch.setattr(report, "plot_errors", lambda result, path: (path.write_bytes(b"png"), path)[1])
    out = tmp_path / "tune"
    assert main(["tune", "--quick", "--json", "--setups", "1", "--out", str(out)]) == 0
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert out / "summary.json" in before and out / "setup1_errors.png" in before

    def disk_full(result, path):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(report, "plot_errors", disk_full)
    monkeypatch.setattr(experiment, "run_experiment", lambda numbers, settings, jobs: {
        n: {**r, "name": "another run"} for n, r in _fake_results(numbers).items()})
    capsys.readouterr()
    assert main(["tune", "--quick", "--json", "--setups", "1", "--out", str(out)]) == 1
    assert f"{out / 'setup1_errors.png'}: No space left on device" in capsys.readouterr().err
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before     # no temporaries either
