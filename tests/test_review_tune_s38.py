"""Review of `teleop tune` (session 38): bad input that gave a traceback or was taken (a
relay test finding no oscillation with a small --limited-torque, a motion file of one sample,
--speed 1e-9 or 1_0, gains written as strings), an --out whose layout failed the save after
the whole run, and what a Ctrl-C leaves in --out (said on stderr; no empty or half-written
folder). The real CLI in-process; the experiment is stubbed (or computed once, --quick) where
the test is about the command around it."""

from __future__ import annotations

import json
import math
import os
import signal
from pathlib import Path

import numpy as np
import pytest

from conftest import SYNTHETIC, error_line, run_cli

HINT = "TELEOP_DEBUG"


@pytest.fixture
def stub_run(monkeypatch):
    """run_experiment replaced: it records its settings, then raises what ``raise_`` holds
    (a KeyboardInterrupt by default: a Ctrl-C in the middle of the run)."""
    import teleop.tuning.experiment as experiment

    calls: dict = {"raise_": KeyboardInterrupt}

    def run(numbers, settings, jobs=2):
        calls["settings"] = settings
        raise calls["raise_"]

    monkeypatch.setattr(experiment, "run_experiment", run)
    return calls


@pytest.fixture(scope="module")
def quick_results():
    """The real results of ``--quick --setups 2`` (computed once)."""
    from teleop.tuning.experiment import ExperimentSettings, run_experiment

    return run_experiment([2], ExperimentSettings.quick(), jobs=1)


@pytest.fixture
def canned_run(monkeypatch, quick_results):
    import teleop.tuning.experiment as experiment

    monkeypatch.setattr(experiment, "run_experiment", lambda numbers, settings, jobs=2: quick_results)


def _gains_file(tmp_path: Path, **override) -> Path:
    mapping = {j: {"kp": 100.0, "ki": 1.0, "kd": 2.0}
               for j in ("l_shoulder_pitch", "l_shoulder_roll", "l_shoulder_yaw", "l_elbow", "l_wrist_prosup")}
    mapping["l_elbow"].update(override)
    path = tmp_path / "mine.json"
    path.write_text(json.dumps({"createdTimestamp": "2026-01-01T00:00:00Z", "mapping": mapping}))
    return path


def _files(folder: Path) -> dict[str, bytes]:
    """Every file below ``folder`` (hidden ones too), relative name -> content."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# ------------------------------------------------------------------ option values: exit code 2
@pytest.mark.parametrize("value, words", [
    ("1_0", "'1_0': write the number without '_'"),                 # was read as 10
    ("1e-9", "must be at least 0.1"),                                  # a 35 TiB MemoryError traceback
    ("0.01", "must be at least 0.1"),
    ("nan", "'nan' is not a finite number"),
    ("10000", "must be in (0, 10], got 10000"),
])
def test_a_speed_out_of_range_or_miswritten_is_refused(capsys, stub_run, value, words):
    with pytest.raises(SystemExit) as exc:
        run_cli(capsys, "tune", "--quick", "--no-save", "--speed", value)
    assert exc.value.code == 2
    assert words in error_line(capsys.readouterr().err)
    assert "settings" not in stub_run


def test_the_slowest_and_fastest_speeds_are_taken(capsys, stub_run):
    for value in ("0.1", "10"):
        rc, _, _ = run_cli(capsys, "tune", "--quick", "--no-save", "--speed", value)
        assert rc == 130 and stub_run.pop("settings").speed == float(value)


# ------------------------------------------------------------------ files: exit code 1 before the run
@pytest.mark.parametrize("override, words", [
    ({"kp": "120"}, "kp must be a number, got str"),                   # was taken as 120
    ({"kp": "nan"}, "kp must be a number, got str"),
    ({"kd": True}, "kd must be a number, got bool"),
    ({"ki": -1.0}, "PID gain ki must be finite and >= 0, got -1.0"),
])
def test_gains_that_are_not_non_negative_json_numbers_are_refused(tmp_path, capsys, stub_run, override, words):
    rc, _, err = run_cli(capsys, "tune", "--quick", "--no-save", "--gains", _gains_file(tmp_path, **override))
    message = error_line(err)
    assert rc == 1 and HINT not in err and "settings" not in stub_run
    assert message.startswith("--gains: ") and "mine.json" in message and "'l_elbow'" in message and words in message


def test_gains_with_a_json_nan_are_refused(tmp_path, capsys, stub_run):
    path = _gains_file(tmp_path)
    path.write_text(path.read_text().replace('"kp": 100.0', '"kp": NaN', 1))
    rc, _, err = run_cli(capsys, "tune", "--quick", "--no-save", "--gains", path)
    assert rc == 1 and "kp must be finite, got nan" in error_line(err) and "settings" not in stub_run


def _motion(path: Path, samples: int) -> Path:
    from retarget.human import HumanMotion

    m = HumanMotion.load_npz(SYNTHETIC / "side_reach" / "side_reach_1.npz")
    HumanMotion(m.times[:samples], m.segment_names, m.positions[:samples], m.orientations[:samples],
                rate_hz=m.rate_hz).save_npz(path)
    return path


@pytest.mark.parametrize("option", ["--eval-motions", "--train-motions"])
def test_a_motion_of_one_sample_is_refused_before_the_run(tmp_path, capsys, stub_run, option):
    """It gave an IndexError traceback once the relay tests (and the rules' evaluations) ran."""
    path = _motion(tmp_path / "one.npz", 1)
    rc, _, err = run_cli(capsys, "tune", "--quick", "--no-save", "--setups", "2", option, path)
    assert rc == 1 and HINT not in err and "settings" not in stub_run
    assert error_line(err) == (f"{option} {path}: a single sample, no motion to play: give a motion of at least "
                               "two samples")


def test_a_motion_of_two_samples_is_taken(tmp_path, capsys, stub_run):
    path = _motion(tmp_path / "two.npz", 2)
    rc, _, _ = run_cli(capsys, "tune", "--quick", "--no-save", "--eval-motions", path)
    assert rc == 130 and stub_run["settings"].evaluation_motions == (path,)


def test_a_motion_without_the_left_arm_is_refused_before_the_run(capsys, stub_run, motion_file):
    """It failed with the TELEOP_DEBUG hint once the setup had started."""
    rc, _, err = run_cli(capsys, "tune", "--quick", "--no-save", "--train-motions", motion_file)
    assert rc == 1 and HINT not in err and "settings" not in stub_run
    assert error_line(err).startswith(f"{motion_file}: motion lacks segments ['t8'")


@pytest.mark.parametrize("make, words", [
    (lambda out: (out / "setup2").write_text("mine"), "setup2 is a file where setup 2's folder goes"),
    (lambda out: (out / "summary.json").mkdir(), "summary.json is a folder where the file goes"),
    (lambda out: (out / "setup2_errors.png").mkdir(), "setup2_errors.png is a folder where the file goes"),
])
def test_an_out_whose_layout_the_save_would_fail_on_is_refused_before_the_run(tmp_path, capsys, stub_run, make,
                                                                               words):
    """The save failed on it ("Not a directory") after the whole run: its results were lost."""
    out = tmp_path / "tune"
    out.mkdir()
    make(out)
    before = _files(out)
    rc, _, err = run_cli(capsys, "tune", "--quick", "--setups", "2", "--out", out)
    assert rc == 1 and HINT not in err and "settings" not in stub_run
    message = error_line(err)
    assert message.startswith(f"--out {out}: {out}/") and message.endswith(f"{words}: move it or give another --out")
    assert _files(out) == before


# ------------------------------------------------------------------ a relay test that finds no oscillation
@pytest.mark.parametrize("argv, setup", [
    (["--setups", "3", "--limited-torque", "0.05"], "setup 3 (gravity, severely limited torque (5 %)"),
    (["--setups", "4", "--payload-kg", "50"], "setup 4 (as setup 2 with a 50 kg"),
])
def test_a_relay_test_without_oscillation_is_one_error_line(capsys, argv, setup):
    """RelayTestError (a RuntimeError) escaped as a traceback. Measured: both fail on the
    shoulder within a few seconds."""
    rc, out, err = run_cli(capsys, "tune", "--quick", "--no-save", "--json", *argv)
    message = error_line(err)
    assert rc == 1 and out == "" and "Traceback" not in err
    assert message.startswith(setup) and "relay test found" in message and "did not oscillate" in message


# ------------------------------------------------------------------ Ctrl-C
def test_ctrl_c_during_the_run_leaves_no_new_out_folder_and_says_so(tmp_path, capsys, stub_run):
    out = tmp_path / "new" / "tune"
    rc, stdout, err = run_cli(capsys, "tune", "--quick", "--setups", "2", "--out", out)
    assert rc == 130 and stdout == ""
    assert err.splitlines() == [f"teleop tune: stopped before the results were saved: nothing was written in {out}/",
                                "interrupted"]
    assert not out.exists()


def test_ctrl_c_during_the_run_keeps_an_earlier_run_as_it_was(tmp_path, capsys, canned_run, monkeypatch):
    import teleop.tuning.experiment as experiment

    out = tmp_path / "tune"
    assert run_cli(capsys, "tune", "--quick", "--setups", "2", "--out", out)[0] == 0
    before = _files(out)

    def interrupted(numbers, settings, jobs=2):
        raise KeyboardInterrupt

    monkeypatch.setattr(experiment, "run_experiment", interrupted)
    rc, _, err = run_cli(capsys, "tune", "--quick", "--setups", "2", "--out", out)
    assert rc == 130 and err.splitlines() == [
        f"teleop tune: stopped before the results were saved: nothing was written in {out}/ (an earlier run's files "
        "there are as they were)", "interrupted"]
    assert _files(out) == before


@pytest.mark.parametrize("earlier", [False, True])
def test_ctrl_c_while_saving_writes_nothing_and_says_so(tmp_path, capsys, canned_run, monkeypatch, earlier):
    """The stop comes while the plots are drawn: no temporary left, a new --out removed (it
    was left empty), an earlier run's files unchanged."""
    import teleop.tuning.report as report

    out = tmp_path / "tune"
    if earlier:
        assert run_cli(capsys, "tune", "--quick", "--setups", "2", "--out", out)[0] == 0
    before = _files(out) if earlier else None

    def plot(result, path):
        raise KeyboardInterrupt

    monkeypatch.setattr(report, "plot_errors", plot)
    rc, _, err = run_cli(capsys, "tune", "--quick", "--setups", "2", "--out", out)
    assert rc == 130
    assert f"teleop tune: stopped while saving: nothing was written in {out}/" in err
    if earlier:
        assert _files(out) == before and "(an earlier run's files there are as they were)" in err
    else:
        assert not out.exists()


def test_a_stop_during_the_renames_is_said_after_them(tmp_path, capsys, canned_run, monkeypatch):
    """The renames wait for the stop (teleop/output_set.py): then all of this run's files are there."""
    import teleop.output_set as output_set

    replace = os.replace
    sent = []

    class Os:
        def __getattr__(self, name):
            return getattr(os, name)

        @staticmethod
        def replace(a, b):
            if not sent:
                sent.append(True)
                os.kill(os.getpid(), signal.SIGINT)
            replace(a, b)

    monkeypatch.setattr(output_set, "os", Os())
    out = tmp_path / "tune"
    rc, _, err = run_cli(capsys, "tune", "--quick", "--setups", "2", "--out", out)
    assert rc == 130 and f"teleop tune: stopped after saving: this run's outputs are in {out}/" in err
    files = _files(out)
    assert "summary.json" in files and "setup2_errors.png" in files and not any(
        Path(name).name.startswith(".") for name in files)


# ------------------------------------------------------------------ --json
def test_json_is_strict_with_a_gains_row(tmp_path, capsys):
    """The real quick run, with a gains file: stdout is one strict JSON document (no NaN or
    Infinity), the file's row named after it, every row's columns finite or null."""
    def refuse(constant):
        raise ValueError(f"not strict JSON: {constant}")

    rc, out, _ = run_cli(capsys, "tune", "--quick", "--setups", "2", "--no-save", "--json", "--jobs", "1",
                         "--gains", _gains_file(tmp_path))
    assert rc == 0
    data = json.loads(out, parse_constant=refuse)
    rows = data["setups"]["2"]["rows"]
    assert "mine" in rows and "Optimiser" in rows
    for row in rows.values():
        assert all(v is None or math.isfinite(v) for v in row.values())
    assert np.isfinite(data["setups"]["2"]["optimiser"]["cost"])
