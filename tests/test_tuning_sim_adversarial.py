"""Adversarial checks of the PID-tuning toolkit's metrics and relay test against
../shared/reference/pid_tuning_and_sim_to_real.md (§3.3.1-§3.3.3, §3.5.2), on hand-built
signals whose answers are known."""

from __future__ import annotations

import numpy as np
import pytest

from teleop.tuning.experiment_data import JointTrace, Recording
from teleop.tuning.metrics import evaluate_all, joint_metrics
from teleop.tuning.peaks import detect_peaks
from teleop.tuning.relay import ultimate_from_peaks


# ------------------------------------------------------------------ relay on a noisy signal
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_relay_peaks_do_not_count_measurement_noise(seed):
    """A relay limit cycle a = 0.05 rad, T_u = 0.1 s, d = 1 N m, with 2 % noise (1e-3 rad) on
    the measured angle: noise near each flat peak turned the slope several times over more
    than min_separation samples, and each turn was counted as a peak (T_u ~0.05 s, consecutive
    same-sign "peaks"). Now the peaks alternate, T_u is the period and K_u = 4d/(πa)."""
    t = np.arange(0.0, 1.0, 0.001)
    rng = np.random.default_rng(seed)
    y = 0.05 * np.sin(2 * np.pi * t / 0.1) + 1e-3 * rng.standard_normal(len(t))
    r = ultimate_from_peaks(t, y, relay_torque=1.0)
    assert r.n_peaks == 20                                   # 10 periods, two peaks each
    assert r.tu == pytest.approx(0.1, rel=0.01)
    assert r.ku == pytest.approx(4.0 / (np.pi * 0.05), rel=0.05)


def test_min_swing_keeps_the_extreme_of_a_noisy_peak_and_alternates():
    # A max at 3 with a 0.1 dip after it, then a min at -2: with min_swing 1 the dip is noise.
    y = np.array([0, 1, 2, 3, 2.9, 3.05, 2, 1, 0, -1, -2, -1, 0, 1.0])
    p = detect_peaks(y, decimation=1, min_separation=0, min_swing=1.0)
    assert list(p.index) == [5, 10] and list(p.sign) == [1, -1]
    assert list(detect_peaks(y, decimation=1, min_separation=0).index) == [3, 4, 5, 10]   # default: every turn
    with pytest.raises(ValueError, match="^min_swing "):
        detect_peaks(y, min_swing=float("nan"))


# ------------------------------------------------------- metrics, against §3.3.2 by hand
def _step(pv_points, t_end=3.0, dt=0.01, step_at=0.5, size=45.0):
    t = np.arange(0.0, t_end, dt)
    sp = np.where(t >= step_at - 1e-9, size, 0.0)
    pv = np.interp(t, *zip(*pv_points))
    return JointTrace("j", "step", t, sp, pv)


def test_known_overshoot_settling_and_response_times():
    # PV still until 0.6 s, straight to 55° at 1.0 s (10° overshoot), back to 45° at 1.5 s.
    m = joint_metrics(_step([(0, 0), (0.6, 0), (1.0, 55), (1.5, 45), (3, 45)]))
    assert m["MaxOvershoot"] == pytest.approx(10.0)
    # last sample outside ±10°: PV < 35° until 0.854 s -> 0.85 s; ±5°: PV > 50° until 1.25 s
    # (1.24 s); ±2°: PV > 47° until 1.4 s (1.39 s); all from the step at 0.5 s.
    assert m["AvgSettlingTime10Degrees"] == pytest.approx(0.35)
    assert m["AvgSettlingTime5Degrees"] == pytest.approx(0.74)
    assert m["AvgSettlingTime2Degrees"] == pytest.approx(0.89)
    assert m["Avg10PercentResponseTime"] == pytest.approx(0.14)      # PV > 4.5° at 0.64 s
    assert m["Avg50PercentResponseTime"] == pytest.approx(0.27)      # PV > 22.5° at 0.77 s
    assert m["AvgCompleteResponseTime"] == pytest.approx(0.43)       # PV > 45° at 0.93 s


def test_an_error_exactly_on_a_band_edge_is_inside_the_band():
    # PV jumps to 35° (error exactly 10°) at 0.6 s, to 40° (5°) at 0.8 s, to 43° (2°) at 1.0 s.
    t = np.arange(0.0, 2.0, 0.01)
    sp = np.where(t >= 0.5 - 1e-9, 45.0, 0.0)
    pv = np.select([t < 0.6 - 1e-9, t < 0.8 - 1e-9, t < 1.0 - 1e-9], [0.0, 35.0, 40.0], 43.0)
    m = joint_metrics(JointTrace("j", "step", t, sp, pv))
    assert m["AvgSettlingTime10Degrees"] == pytest.approx(0.09)      # last |e| > 10 at 0.59 s
    assert m["AvgSettlingTime5Degrees"] == pytest.approx(0.29)
    assert m["AvgSettlingTime2Degrees"] == pytest.approx(0.49)
    assert m["MaxOvershoot"] is None and m["AvgCompleteResponseTime"] is None   # never crosses


def test_overdamped_and_small_steps_give_null_optional_metrics():
    m = joint_metrics(_step([(0, 0), (0.5, 0), (1.0, 4.0), (3, 4.0)], size=4.5))    # Δ = 4.5° < 5°
    assert m["MaxOvershoot"] is None and m["AvgCompleteResponseTime"] is None
    assert m["AvgSettlingTime10Degrees"] is None and m["AvgSettlingTime5Degrees"] is None
    assert m["AvgSettlingTime2Degrees"] is not None
    assert m["Avg10PercentResponseTime"] is None and m["Avg50PercentResponseTime"] is None   # Δ < 10°


def test_nan_samples_are_refused_naming_the_joint():
    tr = _step([(0, 0), (1, 45), (3, 45)])
    tr.measured[10] = np.nan
    with pytest.raises(ValueError, match="non-finite measured at sample"):
        joint_metrics(tr)


def test_aggregation_averages_over_joints_and_maxes_the_maxima():
    a = _step([(0, 0), (0.6, 0), (1.0, 55), (1.5, 45), (3, 45)])                 # OS 10°
    b = JointTrace("k", "step", a.t, a.desired, np.interp(a.t, [0, 0.5, 1.0, 3], [0, 0, 44.9, 44.99]))   # no OS
    rec = Recording("step", {"j": a, "k": b})
    ev = evaluate_all([rec])
    mj, mk = ev["motions"]["step"]["joints"]["j"], ev["motions"]["step"]["joints"]["k"]
    motion = ev["motions"]["step"]["motion"]
    assert motion["MaxOvershoot"] == 10.0                                     # max over joints
    assert motion["AvgAbsoluteError"] == pytest.approx((mj["AvgAbsoluteError"] + mk["AvgAbsoluteError"]) / 2)
    assert motion["MaxAbsoluteError"] == pytest.approx(45.0)
    assert motion["AvgCompleteResponseTime"] == pytest.approx(mj["AvgCompleteResponseTime"])   # k's is null
    assert ev["overall"] == motion
