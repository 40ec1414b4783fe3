"""``teleop calibrate-sim``: a recording's initial posture and base height must be ones the
robot can be in, and an earlier fit in --out is neither replaced unasked nor left
half-written."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from teleop.cli import main
from teleop.sim.calibration import check_recording
from teleop.sim.recording_io import Recording, RecordingError

FILES = {"fitted_actuator.toml", "report.json"}


def _recording(robot, **meta) -> Recording:
    T = 5
    elbow = robot.joint_index("r_elbow")
    q = np.full((T, 1), robot.home_joints()[elbow])
    return Recording(np.arange(T) * 0.002, ["r_elbow"], q, q.copy(),
                     meta={"groups": ["r_elbow"], "q0": robot.home_joints().tolist(), **meta})


def _q0_with(robot, joint: str, value: float) -> list[float]:
    q0 = robot.home_joints()
    q0[robot.joint_index(joint)] = value
    return q0.tolist()


# ------------------------------------------------------------------ q0 and base_height
def test_q0_outside_the_joint_limits_is_refused_naming_the_joint(robot):
    rec = _recording(robot, q0=_q0_with(robot, "r_elbow", 40.0))
    lo, hi = robot.limits.lower[robot.joint_index("r_elbow")], robot.limits.upper[robot.joint_index("r_elbow")]
    with pytest.raises(RecordingError) as err:
        check_recording(robot, rec, "bench.json")
    assert str(err.value) == (f"bench.json: meta 'q0' puts r_elbow at 40 rad, outside its limits "
                              f"[{lo:.4g}, {hi:.4g}] rad")


def test_q0_names_the_first_joint_outside_its_limits(robot):
    q0 = robot.home_joints()
    first, second = robot.joint_names[3], robot.joint_names[10]
    q0[robot.joint_index(first)] = robot.limits.lower[robot.joint_index(first)] - 1.0
    q0[robot.joint_index(second)] = robot.limits.upper[robot.joint_index(second)] + 1.0
    with pytest.raises(RecordingError, match=f"puts {first} at "):
        check_recording(robot, _recording(robot, q0=q0.tolist()), "bench.json")


def test_q0_a_measurement_past_a_stop_is_accepted(robot):
    """Encoders read a little past the stops: 0.5 mrad over is a measurement, not an error."""
    i = robot.joint_index("r_elbow")
    check_recording(robot, _recording(robot, q0=_q0_with(robot, "r_elbow", robot.limits.upper[i] + 5e-4)))
    check_recording(robot, _recording(robot, q0=_q0_with(robot, "r_elbow", robot.limits.lower[i] - 5e-4)))
    with pytest.raises(RecordingError, match="r_elbow"):
        check_recording(robot, _recording(robot, q0=_q0_with(robot, "r_elbow", robot.limits.upper[i] + 0.01)))


@pytest.mark.parametrize("key", ["commanded", "measured"])
def test_angles_far_beyond_the_joint_limits_are_refused_as_degrees(robot, key):
    """A recording in degrees (commands up to 47 "rad") was fitted, exit code 0, and a
    parameter file written; a little past a stop is a measurement."""
    rec = _recording(robot)
    i = robot.joint_index("r_elbow")
    upper = robot.limits.upper[i]
    getattr(rec, key)[2, 0] = upper + 0.3                      # 17 deg past the stop: kept
    check_recording(robot, rec, "bench.json")
    getattr(rec, key)[3, 0] = np.degrees(upper)
    with pytest.raises(RecordingError) as err:
        check_recording(robot, rec, "bench.json")
    assert str(err.value) == (f"bench.json: '{key}' puts r_elbow at {np.degrees(upper):.4g} rad at t = 0.006 s, "
                              f"beyond its limits [{robot.limits.lower[i]:.4g}, {upper:.4g}] rad by more than 0.35: "
                              "angles in degrees? (they are in radians)")


def test_a_sample_period_of_seconds_is_refused_as_milliseconds(robot):
    """Times in milliseconds: a 2 s step, each replay a minute long, the fit hours."""
    rec = _recording(robot)
    rec.time = rec.time * 1000.0
    with pytest.raises(RecordingError) as err:
        check_recording(robot, rec, "bench.json")
    assert str(err.value) == ("bench.json: sample period 2 s, longer than 1 s: 'time' in milliseconds? "
                              "(it is in seconds)")


@pytest.mark.parametrize("height", [-3.0, -0.01, 3.5, 1e6])
def test_base_height_outside_the_plausible_range_is_refused(robot, height):
    with pytest.raises(RecordingError) as err:
        check_recording(robot, _recording(robot, base_height=height), "bench.json")
    assert str(err.value) == (f"bench.json: meta 'base_height' must be in [0, 3] m (the root's height above "
                              f"the standing pose), got {height:g}")


@pytest.mark.parametrize("height", [0, 0.0, 0.5, 3.0])
def test_base_height_in_range_is_accepted(robot, height):
    check_recording(robot, _recording(robot, base_height=height))


def _write_json(rec: Recording, path: Path) -> Path:
    path.write_text(json.dumps({"time": rec.time.tolist(), "joint_names": rec.joint_names,
                                "commanded": rec.commanded.tolist(), "measured": rec.measured.tolist(),
                                "meta": rec.meta}))
    return path


@pytest.mark.parametrize("meta, fragment", [
    ({"q0": "Q0_ELBOW_40"}, "meta 'q0' puts r_elbow at 40 rad, outside its limits ["),
    ({"base_height": -3}, "meta 'base_height' must be in [0, 3] m"),
    ({"base_height": 1e6}, "got 1e+06"),
])
def test_cli_refuses_an_impossible_start_before_fitting(robot, tmp_path, capsys, meta, fragment):
    if meta.get("q0") == "Q0_ELBOW_40":
        meta = {"q0": _q0_with(robot, "r_elbow", 40.0)}
    path = _write_json(_recording(robot, **meta), tmp_path / "odd_bench.json")
    out = tmp_path / "cal"
    assert main(["calibrate-sim", "--data", str(path), "--max-evaluations", "16", "--out", str(out), "--json"]) == 1
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()   # the error alone: found before any replay
    assert err[0].startswith(f"teleop calibrate-sim: error: {path}: ") and fragment in err[0]
    assert len(err) == 1 and captured.out == ""
    assert not out.exists()


# ------------------------------------------------------------------ --out and --force
# (the ``recording`` fixture, a short test recording of r_elbow, is in conftest.py)


def _fit(recording: Path, out: Path, *extra: str) -> int:
    # 16: the fewest replays of r_elbow's 6 parameters (teleop.sim.calibration.min_evaluations).
    return main(["calibrate-sim", "--data", str(recording), "--max-evaluations", "16", "--out", str(out),
                 "--json", *extra])


def test_an_earlier_fit_is_not_replaced_without_force(recording, tmp_path, capsys, monkeypatch):
    out = tmp_path / "cal"
    assert _fit(recording, out) == 0
    capsys.readouterr()
    (out / "report.json").write_text('{"earlier": true}')       # tell the files apart
    before = {name: (out / name).read_bytes() for name in FILES}

    import teleop.sim.calibration as calibration

    fits = []
    real_calibrate = calibration.calibrate
    monkeypatch.setattr(calibration, "calibrate", lambda *a, **kw: fits.append(1) or real_calibrate(*a, **kw))
    assert _fit(recording, out) == 1
    err = capsys.readouterr().err.strip().splitlines()[0]
    assert err == (f"teleop calibrate-sim: error: --out {out} holds fitted_actuator.toml and report.json of an "
                   "earlier fit: pass --force to overwrite them, or choose another --out")
    assert not fits, "refused only after fitting"
    assert {name: (out / name).read_bytes() for name in FILES} == before

    (out / "fitted_actuator.toml").unlink()                      # either file is an earlier fit's
    assert _fit(recording, out) == 1
    assert "holds report.json of an earlier fit: pass --force to overwrite it," in capsys.readouterr().err

    assert _fit(recording, out, "--force") == 0
    capsys.readouterr()
    assert "rmse_after_rad" in json.loads((out / "report.json").read_text())
    assert (out / "fitted_actuator.toml").is_file()
    assert {p.name for p in out.iterdir()} == FILES               # no temporary files left


def test_an_interrupted_write_leaves_the_earlier_fit_whole(recording, tmp_path, capsys, monkeypatch):
    out = tmp_path / "cal"
    assert _fit(recording, out) == 0
    capsys.readouterr()
    before = {name: (out / name).read_bytes() for name in FILES}

    import teleop.sim.actuator as actuator

    def half_then_fail(params, path):
        Path(path).write_text("latency = ")                      # the disk filled up mid-write
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(actuator, "write_actuator_params", half_then_fail)
    assert _fit(recording, out, "--force") != 0
    assert "No space left on device" in capsys.readouterr().err
    assert {name: (out / name).read_bytes() for name in FILES} == before
    assert {p.name for p in out.iterdir()} == FILES


def test_force_help_covers_both_uses(capsys):
    with pytest.raises(SystemExit):
        main(["calibrate-sim", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "with --make-test-recording: overwrite OUT" in text
    assert "with --data: replace the fitted_actuator.toml and report.json" in text
