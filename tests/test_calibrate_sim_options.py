"""``teleop calibrate-sim`` after a user walkthrough: exit code 1 for a file or data it cannot
use and 2 for a bad option value (as every teleop command), a replay budget, a test-recording
length and a seed refused when the fit cannot use them, a warning when a recording is too
short for a meaningful fit, and a sensible line for a perfect fit."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from conftest import run_cli
from teleop.cli import main

#: The smallest --max-evaluations for r_elbow's 6 fitted parameters (latency + 5 scales):
#: the nominal's and the result's replays, and one least-squares step, 2 x (1 + 6).
MIN_EVALUATIONS_R_ELBOW = 16


def _error(err: str, kind: str = "error") -> str:
    """The one ``teleop calibrate-sim: KIND: ...`` line of stderr, without its prefix."""
    lines = [ln for ln in err.splitlines() if ln.startswith(f"teleop calibrate-sim: {kind}: ")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0].split(f": {kind}: ", 1)[1]


def _write_json(path: Path, samples: int, **changes) -> Path:
    """A recording of r_elbow held still for ``samples`` samples at 500 Hz."""
    content = {"time": [0.002 * i for i in range(samples)], "joint_names": ["r_elbow"],
               "commanded": [[0.5]] * samples, "measured": [[0.5]] * samples,
               "meta": {"groups": ["r_elbow"], "fixed_base": True, "base_height": 0.5}}
    path.write_text(json.dumps({**content, **changes}))
    return path


# ------------------------------------------------------------------ 1. exit codes
@pytest.mark.parametrize("case", ["missing", "not a recording", "unusable", "missing --params", "exists"])
def test_file_and_data_errors_exit_1(recording, tmp_path, capsys, case):  # noqa: F811
    """As every other command: 1 for a file or data the command cannot use (it was 2)."""
    out = tmp_path / "cal"
    argv, fragment = {
        "missing": (["--data", tmp_path / "nope.npz"], "nope.npz: no such recording file"),
        "not a recording": (["--data", (tmp_path / "bad.json")], "bad.json: "),
        "unusable": (["--data", _write_json(tmp_path / "odd.json", 5, joint_names=["bogus"])],
                     "['bogus'] are not joints"),
        "missing --params": (["--data", recording, "--params", tmp_path / "nominal.toml"], "nominal.toml"),
        "exists": (["--make-test-recording", recording], "exists: pass --force"),
    }[case]
    (tmp_path / "bad.json").write_text("{}")
    fit_options = ["--out", out, "--max-evaluations", MIN_EVALUATIONS_R_ELBOW] if "--data" in argv else []
    rc, stdout, err = run_cli(capsys, "calibrate-sim", *argv, *fit_options)
    assert rc == 1, err
    assert fragment in _error(err) and stdout == ""
    assert not out.exists()


@pytest.mark.parametrize("argv, fragment", [
    ([], "give exactly one of --data RECORDING or --make-test-recording OUT"),
    (["--make-test-recording", "REC.npz", "--perturb", "2"], "--perturb must be in [0, 0.7), got 2"),
    (["--make-test-recording", "REC.txt"], "unknown recording format"),
    (["--data", "RECORDING", "--groups", "nosuch"], "--groups nosuch: nosuch is neither a joint group"),
])
def test_bad_option_values_still_exit_2(recording, tmp_path, capsys, argv, fragment):  # noqa: F811
    argv = [str(recording) if a == "RECORDING" else str(tmp_path / a) if a.startswith("REC.") else a for a in argv]
    rc, _, err = run_cli(capsys, "calibrate-sim", *argv, *(["--out", tmp_path / "cal"] if "--data" in argv else []))
    assert rc == 2 and fragment in _error(err)


# ------------------------------------------------------------------ 2. --max-evaluations
@pytest.mark.parametrize("extra, minimum, parameters", [([], MIN_EVALUATIONS_R_ELBOW, 6), (["--fit-kp"], 18, 7)])
def test_a_replay_budget_below_one_least_squares_step_is_refused(recording, tmp_path, capsys, monkeypatch,  # noqa: F811
                                                                 extra, minimum, parameters):
    """Below the minimum the fit ran its minimum anyway (9 replays for --max-evaluations 3)
    and ended on the nominal, written as the fitted parameters."""
    import teleop.sim.calibration as calibration

    fits = []
    monkeypatch.setattr(calibration, "calibrate", lambda *a, **kw: fits.append(1))
    out = tmp_path / "cal"
    rc, _, err = run_cli(capsys, "calibrate-sim", "--data", recording, "--max-evaluations", minimum - 1,
                         "--out", out, *extra)
    assert rc == 2
    assert _error(err) == (f"--max-evaluations {minimum - 1} is below the {minimum} replays a fit of "
                           f"{parameters} parameters needs (the nominal's and the result's, and one "
                           f"least-squares step: 2 x (1 + {parameters}) for a residual and its finite-difference "
                           f"Jacobian, before and after the step): give --max-evaluations {minimum} or more")
    assert not fits and not out.exists()


def test_the_minimum_budget_is_kept_and_moves_the_fit(recording, tmp_path, capsys):  # noqa: F811
    rc, stdout, err = run_cli(capsys, "calibrate-sim", "--data", recording, "--max-evaluations",
                              MIN_EVALUATIONS_R_ELBOW, "--out", tmp_path / "cal", "--json")
    assert rc == 0, err
    report = json.loads(stdout)
    assert report["evaluations"] <= MIN_EVALUATIONS_R_ELBOW
    assert report["fitted"]["scales"]["r_elbow"] != {k: 1.0 for k in report["fitted"]["scales"]["r_elbow"]}


def test_the_minimum_is_what_the_optimiser_takes(robot, recording):  # noqa: F811
    """min_evaluations is the optimiser's: one replay less and the fit ends on its start."""
    from teleop.sim.actuator import description_actuator_params
    from teleop.sim.calibration import calibrate, min_evaluations
    from teleop.sim.recording_io import load_recording

    rec, nominal = load_recording(recording), description_actuator_params(robot)
    assert min_evaluations(6) == MIN_EVALUATIONS_R_ELBOW
    below = calibrate(robot, rec, nominal, max_evaluations=MIN_EVALUATIONS_R_ELBOW - 1, progress=False)
    assert below.rmse_after == below.rmse_before


# ------------------------------------------------------------------ 3. --duration
@pytest.mark.parametrize("duration", ["0.002", "0.01", "0.12"])
def test_a_test_recording_too_short_to_fit_is_refused(tmp_path, capsys, duration):
    """0.002 s gave numpy's "Shape of array too small to calculate a numerical gradient";
    0.01 s wrote 5 samples of r_elbow, too few for its 6 parameters."""
    path = tmp_path / "short.npz"
    rc, _, err = run_cli(capsys, "calibrate-sim", "--make-test-recording", path, "--groups", "r_elbow",
                         "--duration", duration)
    assert rc == 2
    assert _error(err) == (f"--duration {duration} s is too short to fit: 6 parameters over 1 joint need at "
                           "least 61 samples at 500 Hz (10 residual values per parameter, after the first "
                           "sample: the starting posture): give --duration 0.122 or more")
    assert not path.exists()


def test_the_minimum_duration_makes_a_recording_the_fit_takes_without_warning(tmp_path, capsys):
    path = tmp_path / "shortest.npz"
    rc, stdout, err = run_cli(capsys, "calibrate-sim", "--make-test-recording", path, "--groups", "r_elbow",
                              "--duration", "0.122")
    assert rc == 0, err
    assert "(61 samples x 1 joints;" in stdout
    rc, stdout, err = run_cli(capsys, "calibrate-sim", "--data", path, "--max-evaluations",
                              MIN_EVALUATIONS_R_ELBOW, "--out", tmp_path / "cal", "--json")
    assert rc == 0 and "too few data" not in err and json.loads(stdout)["enough_data"] is True


# ------------------------------------------------------------------ 4. --seed
def test_a_negative_seed_is_refused_naming_the_option(tmp_path, capsys):
    """It said "expected non-negative integer" (numpy's words, no option named)."""
    with pytest.raises(SystemExit) as exc:
        main(["calibrate-sim", "--make-test-recording", str(tmp_path / "r.npz"), "--seed", "-5"])
    assert exc.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == \
        "teleop calibrate-sim: error: argument --seed: must be >= 0, got -5"
    assert not (tmp_path / "r.npz").exists()


# ------------------------------------------------------------------ 5. too few data
def test_a_fit_from_too_few_samples_warns_and_says_so_in_the_report(tmp_path, capsys):
    path = _write_json(tmp_path / "three.json", 3)
    out = tmp_path / "cal"
    rc, stdout, err = run_cli(capsys, "calibrate-sim", "--data", path, "--max-evaluations",
                              MIN_EVALUATIONS_R_ELBOW, "--out", out, "--json")
    assert rc == 0, err
    warning = (f"{path}: too few data for a meaningful fit: 3 samples x 1 joint give 2 residual values (the "
               "first sample, the starting posture, depends on no parameter) for 6 fitted parameters, under the "
               "10 per parameter a fit needs (61 samples here): the fitted values are not reliable")
    assert _error(err, "warning") == warning
    report = json.loads(stdout)
    assert report["enough_data"] is False and report["warnings"] == [warning]
    assert json.loads((out / "report.json").read_text())["enough_data"] is False


def test_a_fit_from_enough_samples_does_not_warn(recording, tmp_path, capsys):  # noqa: F811
    rc, stdout, err = run_cli(capsys, "calibrate-sim", "--data", recording, "--max-evaluations",
                              MIN_EVALUATIONS_R_ELBOW, "--out", tmp_path / "cal", "--json")
    assert rc == 0 and "too few data" not in err
    report = json.loads(stdout)
    # The smallest budget does one least-squares step: that warning, and no other.
    assert report["enough_data"] is True and [w for w in report["warnings"] if "budget" not in w] == []


# ------------------------------------------------------------------ 6. a perfect fit
def test_a_perfect_fit_prints_no_meaningless_ratio(tmp_path, capsys):
    """It printed "(0.0x lower)": 0 / max(0, 1e-12)."""
    path = tmp_path / "perfect.npz"
    assert main(["calibrate-sim", "--make-test-recording", str(path), "--groups", "r_elbow", "--duration", "0.2",
                 "--noise", "0", "--perturb", "0"]) == 0
    out = tmp_path / "cal"
    rc, stdout, err = run_cli(capsys, "calibrate-sim", "--data", path, "--max-evaluations",
                              MIN_EVALUATIONS_R_ELBOW, "--out", out)
    assert rc == 0, err
    line = next(ln for ln in stdout.splitlines() if ln.startswith("joint RMSE before"))
    assert "x lower" not in line and "(error 0 before and after fitting;" in line
    assert json.loads((out / "report.json").read_text())["rmse_reduction"] is None


@pytest.mark.parametrize("before, after, text", [
    (3.2e-3, 2e-4, "16.0x lower"),
    (3.2e-3, 0.0, "error 0 after fitting"),
    (0.0, 0.0, "error 0 before and after fitting"),
    (math.nan, 1e-4, "no ratio: an RMSE is not finite"),
    (3.2e-3, math.inf, "no ratio: an RMSE is not finite"),
])
def test_the_reduction_is_a_ratio_only_where_it_means_one(before, after, text):
    from teleop.sim.calibrate_cli import _reduction_text
    from teleop.sim.calibration import rmse_reduction

    assert _reduction_text(before, after) == text
    ratio = rmse_reduction(before, after)
    assert (ratio is None) == (text != "16.0x lower") and (ratio is None or math.isclose(ratio, 16.0))


@pytest.mark.parametrize("argv, fragment", [
    (["--groups", "right_arm,r_elbow"], "right_arm,r_elbow: r_elbow and right_arm share the joint r_elbow"),
    (["--duration", "1e308"], "--duration must be at most 600 s"),
    (["--duration", "1e6"], "--duration must be at most 600 s"),
    (["--noise", "1e308"], "--noise must be at most 0.1 rad"),
])
def test_test_recording_options_no_fit_can_use_are_refused_before_the_work(tmp_path, capsys, argv, fragment):
    """Overlapping groups fitted one joint twice (the product of both scales in the file);
    --duration 1e6 asked for 26 GiB and 1e308 overflowed (tracebacks); --noise 1e308 ran the
    whole simulation and then blamed the file."""
    out = tmp_path / "rec.npz"
    rc, _, err = run_cli(capsys, "calibrate-sim", "--make-test-recording", out, *argv)
    assert rc == 2 and fragment in err
    assert not out.exists()


def test_a_group_given_twice_is_fitted_once(tmp_path, capsys):
    """right_arm,right_arm recorded every right-arm joint twice (and the fit died after its
    replays with an IndexError)."""
    out = tmp_path / "rec.npz"
    rc, _, err = run_cli(capsys, "calibrate-sim", "--make-test-recording", out, "--groups", "right_arm,right_arm",
                         "--duration", "3")
    assert rc == 0, err
    import numpy as np

    with np.load(out, allow_pickle=False) as data:
        names = [str(n) for n in data["joint_names"]]
    assert len(names) == len(set(names)) == 7


def test_a_doubtful_fit_says_why_in_its_warnings():
    """A recording with its times 10x too long fitted three scales onto the bounds of their
    range, and a fit cut short by its budget, both reported "warnings": []."""
    import numpy as np

    from teleop.sim.calibration import fit_warnings

    lower, upper = np.array([0.0, 0.3, 0.3]), np.array([4.0, 3.0, 3.0])
    clean = fit_warnings(np.array([1.2, 0.9, 1.1]), lower, upper, ["right_arm"], ("kd", "viscous"), False, 200)
    assert clean == []
    warnings = fit_warnings(np.array([1.2, 0.3, 3.0]), lower, upper, ["right_arm"], ("kd", "viscous"), True, 40)
    assert warnings[0].startswith("fitted at a bound of the range allowed: right_arm.kd (lower bound), "
                                  "right_arm.viscous (upper bound)")
    assert "--max-evaluations 40" in warnings[1] and len(warnings) == 2


def test_a_fit_of_another_group_than_the_recordings_truth_says_what_it_did_not_compare(tmp_path, capsys):
    """--groups r_elbow on a recording hiding right_arm's parameters printed "worst error
    0.63% (latency)": the elbow's scales, far off, were simply left out."""
    path = tmp_path / "arm.npz"
    assert main(["calibrate-sim", "--make-test-recording", str(path), "--groups", "right_arm", "--duration",
                 "0.3"]) == 0
    capsys.readouterr()
    rc, stdout, _ = run_cli(capsys, "calibrate-sim", "--data", path, "--groups", "r_elbow", "--max-evaluations",
                            MIN_EVALUATIONS_R_ELBOW, "--out", tmp_path / "cal", "--json")
    assert rc == 0 and json.loads(stdout)["recovery_not_compared"] == ["r_elbow"]
