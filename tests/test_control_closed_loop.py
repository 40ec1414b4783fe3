"""Closed loop in the pybullet simulation (robot-station pattern), and the benchmark's shape."""

import numpy as np
import pytest

from teleop.control import run_closed_loop, synthetic_references


def test_whole_body_motion_in_simulation_keeps_balance_and_tracks(robot):
    # 100 Hz controller, 1 kHz physics, 6 s: hands reach forward and up, CoM sways 3 cm,
    # waist goes down 8 cm and back, torso pitches.
    metrics = run_closed_loop(synthetic_references(robot, duration=6.0), robot=robot)
    print({k: v for k, v in metrics.items() if k != "timing"})
    assert not metrics["fell"]
    assert metrics["max_foot_slip_mm"] < 5.0
    assert metrics["min_cop_margin_mm"] > 0.0          # measured CoP inside the support polygon
    assert metrics["hand_rms_cm"] < 1.0
    assert metrics["com_rms_cm"] < 1.0
    assert metrics["all_ok"]
    assert metrics["timing"]["ticks"] > 0


def test_accepts_timestamped_samples(robot):
    trajectory = synthetic_references(robot, duration=1.0, rate=50.0)  # references at 50 Hz
    samples = [trajectory.sample(i) for i in range(len(trajectory))]
    metrics = run_closed_loop(samples, robot=robot, settle_time=0.1)
    assert not metrics["fell"] and metrics["ticks"] == 10 + 101


@pytest.mark.slow
@pytest.mark.parametrize("stack", ["ch2_icub", "ch4_icub", "ch5_icub", "c1", "c2"])
def test_thesis_stacks_keep_balance_in_simulation(robot, stack):
    metrics = run_closed_loop(synthetic_references(robot, duration=6.0), robot=robot, stack=stack)
    assert not metrics["fell"]
    assert metrics["max_foot_slip_mm"] < 5.0


@pytest.mark.slow
def test_weighted_mode_in_simulation(robot):
    metrics = run_closed_loop(synthetic_references(robot, duration=6.0), robot=robot, mode="weighted")
    assert not metrics["fell"] and metrics["max_foot_slip_mm"] < 5.0 and metrics["hand_rms_cm"] < 1.0


def test_benchmark_result_shape():
    pytest.importorskip("pink")
    from teleop.benchmarks.wbc_bench import format_table, run

    result = run(quick=True)
    assert set(result) == {"ours", "pink", "speedup_vs_pink", "targets"}   # the keys + the verdicts
    assert set(result["ours"]) == {"weighted", "strict"}
    figures = {"median_ms", "p99_ms", "max_limit_violation_rad", "com_rms_mm", "hands_rms_mm", "feet_drift_max_mm"}
    assert set(result["ours"]["weighted"]) == figures
    assert set(result["ours"]["strict"]) == figures | {"levels"}
    assert set(result["pink"]) == figures
    # The speed-up compares controllers that reach the same: CoM within a tenth of a mm of
    # pink's, hands within 10 % (their targets are partly out of reach), feet held to 0.1 mm.
    for ours in result["ours"].values():
        assert ours["com_rms_mm"] == pytest.approx(result["pink"]["com_rms_mm"], abs=0.1)
        assert ours["hands_rms_mm"] == pytest.approx(result["pink"]["hands_rms_mm"], rel=0.1)
        assert ours["feet_drift_max_mm"] < 0.1
    assert result["ours"]["strict"]["levels"] == 3
    assert result["ours"]["weighted"]["max_limit_violation_rad"] == 0.0
    assert result["ours"]["strict"]["max_limit_violation_rad"] == 0.0
    assert np.isfinite(result["speedup_vs_pink"])
    assert "pink" in format_table(result)
