"""The simulated arm, the relay on it, motions, and `teleop tune --quick` end to end."""

import json

import numpy as np
import pytest

from conftest import SHARED_DATA

pytest.importorskip("pybullet")

from teleop.tuning import motions  # noqa: E402
from teleop.tuning.pid import PidGains  # noqa: E402
from teleop.tuning.setups import SETUPS  # noqa: E402


@pytest.fixture(scope="module")
def rig():
    from teleop.tuning.rig import ArmRig

    with ArmRig(SETUPS[2]) as r:
        yield r


def test_unknown_joint_is_a_clear_error():
    from teleop.tuning.rig import ArmRig

    with pytest.raises(ValueError, match="unknown joint"):
        ArmRig(SETUPS[1], joints=("l_elbow", "l_elbw"))


def test_pid_holds_and_tracks_a_step(rig):
    home = rig.home[rig.idx]
    sp = np.tile(home, (1500, 1))
    sp[200:, 3] += np.radians(20)                 # elbow +20°
    gains = [PidGains(300, 30, 8)] * 4 + [PidGains(60, 6, 1)]
    rec = rig.run(sp, gains, "step")
    elbow = rec.traces["l_elbow"]
    assert elbow.t[1] - elbow.t[0] == pytest.approx(0.01)
    assert abs(elbow.error[-1]) < 1.0              # settled within 1°
    assert np.max(np.abs(rec.traces["l_shoulder_pitch"].error)) < 5.0


def test_relay_finds_an_oscillation(rig):
    from teleop.tuning.experiment import baseline_gains
    from teleop.tuning.relay import relay_test

    r = relay_test(rig, "l_elbow", baseline_gains(rig), duration_s=0.6)
    assert r.n_peaks >= 6
    assert 0.005 < r.tu < 1.0 and r.ku > 0
    # The relay torque defaults to the joint's torque limit in this setup.
    j = rig.joints.index("l_elbow")
    d = rig.torque_limit[j]
    assert r.amplitude_torque == d
    # An independent reading of the same oscillation (the rig is deterministic): the relay
    # run again by hand, measured after the 0.3 s warm-up; T_u from the interpolated upward
    # crossings of the target (home), a from each half-cycle's extreme, K_u = 4d / (pi a).
    from teleop.tuning.rig import Relay

    setpoint = np.tile(rig.home[rig.idx], (int(round(0.9 / rig.dt)), 1))
    trace = rig.run(setpoint, list(baseline_gains(rig)), motion="check", record_every=1,
                    relay=Relay(j, d, np.radians(10.0))).traces["l_elbow"]
    keep = trace.t >= 0.3
    t, e = trace.t[keep], np.radians(trace.measured[keep]) - rig.home[rig.idx][j]
    up = np.flatnonzero((e[:-1] < 0) & (e[1:] >= 0))
    crossings = t[up] + e[up] / (e[up] - e[up + 1]) * (t[up + 1] - t[up])
    sign_changes = np.flatnonzero(np.sign(e[:-1]) != np.sign(e[1:])) + 1
    halves = [e[a:b] for a, b in zip(sign_changes[:-1], sign_changes[1:])]
    amplitude = 0.5 * (np.mean([h.max() for h in halves if h.mean() > 0]) -
                       np.mean([h.min() for h in halves if h.mean() < 0]))
    # Measured within 0.3 %; 5 %: the peaks are 1 ms samples of a ~60 ms cycle.
    assert r.tu == pytest.approx(np.mean(np.diff(crossings)), rel=0.05)
    assert r.amplitude_angle == pytest.approx(amplitude, rel=0.05)
    assert r.ku == pytest.approx(4 * d / (np.pi * amplitude), rel=0.05)
    # The peaks are those of the 0.6 s measured after the warm-up: two per period (+-2 at the ends).
    assert abs(r.n_peaks - 2 * 0.6 / r.tu) <= 2, (r.n_peaks, r.tu)
    with pytest.raises(ValueError, match="unknown joint"):
        relay_test(rig, "r_elbow", baseline_gains(rig))


def test_step_animation_is_one_45_degree_step_per_joint(rig):
    home = rig.home[rig.idx]
    sp = motions.step_test(home, rig.lower, rig.upper, pause_s=1.0, lead_s=0.5)
    assert sp.shape == (int(0.5 / rig.dt) + 5 * int(1.0 / rig.dt), 5)
    assert np.degrees(np.abs(sp[-1] - home)) == pytest.approx([45] * 5)
    assert np.all(sp <= rig.upper) and np.all(sp >= rig.lower)


def test_synthetic_motion_setpoints_start_at_home_inside_limits(rig):
    home = rig.home[rig.idx]
    sp = motions.load_motion_setpoints([motions.SYNTHETIC_DIR / motions.EVALUATION_MOTIONS[0]], home,
                                       rig.lower, rig.upper, rig.dt, speed=2.0)
    assert sp[0] == pytest.approx(home)
    assert np.all(sp <= rig.upper) and np.all(sp >= rig.lower)
    assert np.ptp(sp, axis=0).max() > np.radians(20)   # the arm really moves


def test_real_motion_capture_maps_to_the_arm(rig):
    files = [SHARED_DATA / "xsens_putaside_box" / "p1.csv",
             SHARED_DATA / "hdm05" / "rotateArmsBothBackward1Reps" / "HDM_bd_rotateArmsBothBackward1Reps_001_120.amc"]
    if not all(f.exists() for f in files):
        pytest.skip(f"real motion capture (Xsens, HDM05) not found under {SHARED_DATA} "
                    "(set TELEOP_SHARED_DATA); the default experiment uses the synthetic demonstrations")
    home = rig.home[rig.idx]
    for f in files:
        sp = motions.load_motion_setpoints([f], home, rig.lower, rig.upper, rig.dt)
        assert sp.shape[1] == 5 and np.all(np.isfinite(sp))
        assert sp[0] == pytest.approx(home)
        assert np.all(sp <= rig.upper) and np.all(sp >= rig.lower)
        assert np.ptp(sp, axis=0).max() > np.radians(10), f.name   # the recorded arm moves


def test_tune_quick_json(capsys):
    from teleop.cli import main

    assert main(["tune", "--quick", "--setups", "2", "--json", "--no-save", "--jobs", "1"]) == 0
    out = json.loads(capsys.readouterr().out)
    rows = out["setups"]["2"]["rows"]
    assert set(rows) == {"Classic", "PessenIntegralRule", "SomeOvershoot", "NoOvershoot", "PControl",
                         "PIControl", "PDControl", "Optimiser"}
    for row in rows.values():
        assert set(row) == {"AE-A", "AE-S", "OS", "ST5", "R50"}
        assert row["AE-A"] > 0 and row["R50"] is not None
    # The optimiser warm-starts from every rule and never ends worse than the best of them on
    # its (training) cost.
    opt = out["setups"]["2"]["optimiser"]
    assert set(opt["warm_start"]) == set(rows) - {"Optimiser"}
    assert opt["cost"] <= min(opt["warm_start"].values()) + 1e-9
    # The cost's allowances are recorded: per-joint overshoot >= the 4.5° target, the ST5 of a rule.
    limits = opt["limits"]
    assert set(limits["overshoot_deg"]) == {"l_shoulder_pitch", "l_shoulder_roll", "l_shoulder_yaw", "l_elbow",
                                            "l_wrist_prosup"}
    assert min(limits["overshoot_deg"].values()) >= 4.5
    assert any(limits["settling_s"] == pytest.approx(r["ST5"]) for m, r in rows.items() if m != "Optimiser")


def test_tune_rejects_unknown_setup():
    from teleop.tuning.experiment import run_experiment

    with pytest.raises(ValueError, match="unknown setup"):
        run_experiment([7])


@pytest.mark.slow
def test_setups_in_parallel_processes_give_the_serial_results():
    from teleop.tuning.experiment import ExperimentSettings, run_experiment, run_setup

    settings = ExperimentSettings.quick()
    settings.progress = settings.optimiser.progress = False
    parallel = run_experiment([1, 2], settings, jobs=2)
    serial = run_setup(2, settings)
    assert set(parallel) == {1, 2}
    assert {m: r["AE-A"] for m, r in parallel[2]["rows"].items()} == \
        {m: r["AE-A"] for m, r in serial["rows"].items()}


def test_setup_overrides_change_the_simulated_setup():
    from dataclasses import replace

    from teleop.tuning.experiment import ExperimentSettings, setup_for
    from teleop.tuning.rig import ArmRig
    from teleop.tuning.setups import SETUPS

    settings = replace(ExperimentSettings.quick(), limited_torque_scale=0.5, payload_kg=3.0)
    limited, loaded = setup_for(3, settings), setup_for(4, settings)
    assert limited.torque_scale == 0.5 and "(50 %)" in limited.name
    assert loaded.payload_kg == 3.0 and "3 kg" in loaded.name
    assert setup_for(2, settings) == SETUPS[2]          # the others are untouched
    with ArmRig(limited) as rig, ArmRig(SETUPS[3]) as default:
        np.testing.assert_allclose(rig.torque_limit, 2.5 * default.torque_limit)


def test_a_gains_file_named_like_a_method_gets_a_row_of_its_own(tmp_path):
    """``--gains PDControl.json`` used to replace the PDControl rule's row (and the
    optimiser's start) with the file's gains."""
    import argparse

    from teleop.tuning.cli import _settings, register
    from teleop.tuning.gains_io import save_gains
    from teleop.tuning.setups import LEFT_ARM

    gains = {joint: PidGains(1.0, 0.0, 0.0) for joint in LEFT_ARM}
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    for path in (tmp_path / "a" / "PDControl.json", tmp_path / "b" / "mine.json", tmp_path / "a" / "mine.json"):
        save_gains(path, gains)
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    settings = _settings(parser.parse_args(["tune", "--quick", "--gains", str(tmp_path / "a" / "PDControl.json"),
                                            "--gains", str(tmp_path / "b" / "mine.json")]))
    assert sorted(settings.extra_gains) == ["PDControl (file)", "mine"]
    from teleop.cli_types import UsageError

    with pytest.raises(UsageError, match="both be the row 'mine'"):
        _settings(parser.parse_args(["tune", "--quick", "--gains", str(tmp_path / "a" / "mine.json"),
                                     "--gains", str(tmp_path / "b" / "mine.json")]))
