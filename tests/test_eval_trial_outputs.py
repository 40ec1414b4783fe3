"""Outputs of ``teleop eval promp`` and ``teleop trial``: written together or not at all (an
interrupted run leaves the previous run's files as they were), --out checked before the work
and never empty, and a --train/--test file that is no motion said as such, not as a task
mismatch."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO_ROOT, SYNTHETIC, error_line, run_cli, synthetic_dataset

SQUAT = SYNTHETIC / "squat"
TRIAL_FILES = {"summary.json", "table.txt", "takes.csv", "error_vs_delay.png", "take0_rtt1.5.png",
               "worst_rtt1.5.png"}


def _snapshot(folder: Path) -> dict[str, bytes]:
    """Every file in ``folder`` (hidden ones too: a temporary left behind shows) and its bytes."""
    return {p.name: p.read_bytes() for p in folder.iterdir()} if folder.exists() else {}


def _interrupt(*_args, **_kwargs):
    raise KeyboardInterrupt


# ------------------------------------------------------------ 1. all outputs of a run together
def test_an_interrupted_trial_leaves_the_previous_runs_files_as_they_were(tmp_path, capsys, monkeypatch):
    """Before: a Ctrl-C while the take plots were drawn left the new summary.json, table.txt,
    takes.csv and error_vs_delay.png beside the previous run's take plots."""
    import teleop.trials.report as report

    out = tmp_path / "trial"
    argv = ["trial", "--train", SQUAT, "--test", SQUAT, "--rtt", "1.5", "--json", "--out", out]
    rc, _, err = run_cli(capsys, *argv)
    assert rc == 0, err
    before = _snapshot(out)
    assert set(before) == TRIAL_FILES

    monkeypatch.setattr(report, "plot_take", _interrupt)         # Ctrl-C while drawing a take plot
    rc, _, _ = run_cli(capsys, *argv, "--seed", "1")
    assert rc == 130
    assert _snapshot(out) == before                                # untouched, and no temporaries


def test_an_interrupted_trial_into_a_new_folder_leaves_nothing(tmp_path, capsys, monkeypatch):
    import teleop.trials.report as report

    monkeypatch.setattr(report, "plot_error_vs_delay", _interrupt)
    out = tmp_path / "new" / "trial"
    rc, _, _ = run_cli(capsys, "trial", "--train", SQUAT, "--test", SQUAT, "--rtt", "0", "--json", "--out", out)
    assert rc == 130
    assert not (tmp_path / "new").exists()


def test_an_interrupted_eval_leaves_the_previous_runs_files_as_they_were(tmp_path, capsys, monkeypatch):
    """Before: a Ctrl-C while predictions.png was drawn left the new summary.json beside the
    earlier run's predictions.png."""
    import teleop.train_cli as train_cli

    out = tmp_path / "eval"
    argv = ["eval", "promp", "--train", SQUAT, "--test", SQUAT, "--json", "--out", out]
    rc, _, err = run_cli(capsys, *argv)
    assert rc == 0, err
    before = _snapshot(out)
    assert set(before) == {"summary.json", "predictions.png"}

    def half_a_plot(train, test, leave_one_out, path):
        Path(path).write_bytes(b"\x89PNG half")
        raise KeyboardInterrupt

    monkeypatch.setattr(train_cli, "_plot_examples", half_a_plot)
    rc, _, _ = run_cli(capsys, *argv[:-2], "--leave-one-out", "--out", out)   # another result
    assert rc == 130
    assert _snapshot(out) == before


def test_a_stop_signal_during_the_renames_waits_until_all_files_are_in_place(tmp_path, monkeypatch):
    """The renames run with Ctrl-C held: one arriving between two renames interrupts only after
    the last, so no interruption leaves a new file beside an old one."""
    import teleop.output_set as output_set

    for name in ("a.json", "b.txt", "stale.png"):
        (tmp_path / name).write_text("old")
    real_replace, calls = os.replace, []

    def replace_then_interrupt(src, dst):
        real_replace(src, dst)
        calls.append(dst)
        if len(calls) == 1:
            os.kill(os.getpid(), signal.SIGINT)      # Ctrl-C after the first rename
            time.sleep(0.05)

    monkeypatch.setattr(output_set.os, "replace", replace_then_interrupt)
    # Ctrl-C as a terminal delivers it: a suite started in the background by a shell without
    # job control (`make test &` in a script) inherits SIGINT ignored, and nothing is raised.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            output_set.write_outputs_together({tmp_path / "a.json": lambda tmp: tmp.write_text("new"),
                                              tmp_path / "b.txt": lambda tmp: tmp.write_text("new")},
                                              remove=[tmp_path / "stale.png"])
    finally:
        signal.signal(signal.SIGINT, previous)
    assert len(calls) == 2
    assert _snapshot(tmp_path) == {"a.json": b"new", "b.txt": b"new"}


def test_a_failing_writer_renames_nothing_into_place(tmp_path):
    from teleop.output_set import write_outputs_together

    (tmp_path / "a.json").write_text("old")

    def fail(tmp):
        tmp.write_text("half")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        write_outputs_together({tmp_path / "a.json": lambda tmp: tmp.write_text("new"), tmp_path / "b.png": fail})
    assert _snapshot(tmp_path) == {"a.json": b"old"}


def test_sigint_to_a_running_trial_leaves_the_previous_set_or_nothing_new(tmp_path):
    """The real signal, to a real process: sent once the sweep's progress has started (the
    writing follows it within a fraction of a second), the folder holds the previous run's
    complete set, or this run's complete set if it finished first; never a mix or a temporary."""
    out = tmp_path / "trial"
    out.mkdir()
    old = {name: f"previous {name}".encode() for name in TRIAL_FILES}
    for name, data in old.items():
        (out / name).write_bytes(data)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "teleop", "trial", "--train", str(SQUAT), "--test", str(SQUAT),
                             "--rtt", "1.5", "--json", "--out", str(out)], cwd=REPO_ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    seen = b""
    while b"trials:" not in seen and proc.poll() is None:
        seen += os.read(proc.stderr.fileno(), 4096)
    proc.send_signal(signal.SIGINT)
    proc.stderr.read()
    rc = proc.wait(timeout=60)
    files = _snapshot(out)
    assert set(files) == TRIAL_FILES, sorted(files)
    if rc == 130:
        assert files == old
    else:
        assert rc == 0 and not any(files[name] == data for name, data in old.items())


# ------------------------------------------------------------ 2. --out checked before the work
def test_eval_refuses_an_output_folder_it_cannot_write_before_reading(tmp_path, capsys, monkeypatch):
    """Before: every take was read and evaluated, then '/proc/x: No such file or directory'."""
    import teleop.train_cli as train_cli

    if not Path("/proc").is_dir():
        pytest.skip("needs /proc (Linux)")
    monkeypatch.setattr(train_cli, "read_take_files", lambda *a, **k: pytest.fail("read before the check"))
    rc, _, err = run_cli(capsys, "eval", "promp", "--train", SQUAT, "--test", SQUAT, "--out", "/proc/x")
    assert rc == 1
    assert error_line(err).startswith("--out /proc/x: cannot write there")


# ------------------------------------------------------------ 3. a file that is no motion
@pytest.fixture
def library(tmp_path, capsys) -> Path:
    data = synthetic_dataset(tmp_path / "data", {"squat": 2})
    path = tmp_path / "libs" / "lib.npz"
    rc, _, err = run_cli(capsys, "train", data, "-o", path)
    assert rc == 0, err
    return path


def test_eval_says_a_training_library_is_no_motion_not_a_task_mismatch(tmp_path, capsys, library):
    rc, _, err = run_cli(capsys, "eval", "promp", "--train", library, "--test", SQUAT, "--out", tmp_path / "eval")
    assert rc == 1
    assert error_line(err).startswith(f"{library}: a ProMP task library (made by teleop train), not a motion")
    assert "training takes do not have" not in err
    assert not (tmp_path / "eval").exists()


def test_eval_says_a_training_file_of_no_motion_format_is_one(tmp_path, capsys):
    notes = tmp_path / "notes" / "notes.txt"
    notes.parent.mkdir()
    notes.write_text("not a motion\n")
    rc, _, err = run_cli(capsys, "eval", "promp", "--train", notes, "--test", SQUAT, "--out", tmp_path / "eval")
    assert rc == 1
    assert error_line(err).startswith(f"{notes}: unsupported motion format")


def test_trial_says_a_training_library_is_no_motion_without_a_false_note(tmp_path, capsys, library):
    rc, _, err = run_cli(capsys, "trial", "--train", library, "--test", SQUAT / "squat_0.npz", "--rtt", "0",
                         "--out", tmp_path / "trial")
    assert rc == 1
    assert error_line(err).startswith(f"{library}: a ProMP task library")
    assert "does not know" not in err


def test_references_are_still_takes(tmp_path, capsys):
    """The check refuses what is no motion, not robot references (a take as it is)."""
    from teleop.data_args import robot_target_of
    from teleop.takes import load_take
    from teleop.takes import check_take_kinds

    take = load_take(SQUAT / "squat_0.npz", "squat", robot_target_of(type("A", (), {"robot": "icub"})()))
    path = tmp_path / "squat" / "ref.npz"
    path.parent.mkdir()
    take.trajectory.save_npz(path)
    check_take_kinds([(path, "squat"), (SQUAT / "squat_0.npz", "squat")])


# ------------------------------------------------------------ 4. an empty --out
@pytest.mark.parametrize("argv", [
    ["eval", "promp", "--train", str(SQUAT), "--test", str(SQUAT)],
    ["trial", "--train", str(SQUAT), "--test", str(SQUAT), "--rtt", "0"],
    ["bench", "jog", "--quick"],
])
@pytest.mark.parametrize("out", ["", "  "])
def test_an_empty_out_is_a_usage_error(tmp_path, capsys, monkeypatch, argv, out):
    """Before: `--out ''` wrote the results into the current folder."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        run_cli(capsys, *argv, "--out", out)
    assert exit_.value.code == 2
    assert "argument --out: the path must not be empty" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_nonempty_path_keeps_a_path_as_given():
    import argparse

    from teleop.cli_types import nonempty_path

    assert nonempty_path("out/run1") == Path("out/run1")
    with pytest.raises(argparse.ArgumentTypeError):
        nonempty_path("")
