"""Audit of teleop.tuning against the reference (Part A of
/work/shared/reference/pid_tuning_and_sim_to_real.md): metric windows and thresholds (§3.3.2),
relay T_u / K_u (§3.5.2), the seven heuristics' table, and bad input. Every signal is small
enough to check by hand; the expected numbers are in the comments."""

import numpy as np
import pytest

from teleop.tuning.experiment_data import JointTrace
from teleop.tuning.heuristics import HEURISTICS, heuristic_gains
from teleop.tuning.metrics import joint_metrics, significant_changes
from teleop.tuning.motions import step_test
from teleop.tuning.peaks import detect_peaks
from teleop.tuning.pid import PidGains
from teleop.tuning.relay import ultimate_from_peaks

OPTIONAL = ("MaxOvershoot", "AvgSettlingTime10Degrees", "AvgSettlingTime5Degrees", "AvgSettlingTime2Degrees",
            "Avg10PercentResponseTime", "Avg50PercentResponseTime", "AvgCompleteResponseTime")


def trace(sp, pv, t=None, joint="j", motion="m"):
    t = np.arange(len(sp), dtype=float) if t is None else t
    return JointTrace(joint, motion, t, np.array(sp, float), np.array(pv, float))


# ----------------------------------------------------------------------------- windows
def test_window_ends_at_the_next_setpoint_change_even_if_not_significant():
    # "samples run from k0 (the first after the change) to k1 (before the next change)": a
    # 10° step held at k=2..4, then the set-point ramps down (9, 8, 7, 6, 5: never held).
    # The window is [2, 4], e = 10, 4, 0.5: PV never crosses SP -> no overshoot, no R100
    # ("null if overdamped or the set-point changes too fast"). Before, the window ran to the
    # next *significant* change (here the end), e = 10, 4, 0.5, -0.5, ..., -4.5 on the ramp,
    # and reported the ramp's tracking error as a 4.5° overshoot, R100 = 3 and settle2 = 7.
    sp = [0, 0, 10, 10, 10, 9, 8, 7, 6, 5]
    pv = [0, 0, 0, 6, 9.5, 9.5, 9.5, 9.5, 9.5, 9.5]
    assert [(c.k0, c.k1, c.delta) for c in significant_changes(np.array(sp, float))] == [(2, 4, 10)]
    m = joint_metrics(trace(sp, pv))
    assert m["MaxOvershoot"] is None and m["AvgCompleteResponseTime"] is None
    assert m["AvgSettlingTime2Degrees"] == pytest.approx(1)     # |e| > 2 last at k=3 (e=4)
    assert m["AvgSettlingTime5Degrees"] == pytest.approx(0)     # |e| > 5 only at k0 (e=10)
    assert m["Avg10PercentResponseTime"] == pytest.approx(1)    # |e| < 9 first at k=3
    assert m["Avg50PercentResponseTime"] == pytest.approx(1)    # |e| < 5 first at k=3


def test_a_held_change_followed_by_a_one_sample_change():
    # 5 held at k=2,3; 6 at k=4 is not held (not significant) but ends the first window;
    # 7 held at k=5..7 is significant with Δ = |7 − 6| = 1.
    changes = significant_changes(np.array([0, 0, 5, 5, 6, 7, 7, 7.0]))
    assert [(c.k0, c.k1, c.delta) for c in changes] == [(2, 3, 5), (5, 7, 1)]


def test_a_change_on_the_last_sample_is_not_held():
    assert significant_changes(np.array([0, 0, 0, 5.0])) == []
    assert significant_changes(np.array([3.0])) == [] and significant_changes(np.array([])) == []


# ----------------------------------------------------------------------------- definitions
def test_negative_step_overshoot_is_an_absolute_error():
    # A −20° step: e = SP − PV = −20, −8, 3, 0 from k0 = 2. PV crosses SP at k=4 (e = 3 > 0):
    # MaxOvershoot = max|e[4:]| = 3 (positive), R100 = 2; R10 (|e| < 18) and R50 (|e| < 10) at k=3.
    m = joint_metrics(trace([0, 0, -20, -20, -20, -20], [0, 0, 0, -12, -23, -20]))
    assert m["MaxOvershoot"] == pytest.approx(3)
    assert m["AvgCompleteResponseTime"] == pytest.approx(2)
    assert m["Avg10PercentResponseTime"] == pytest.approx(1)
    assert m["Avg50PercentResponseTime"] == pytest.approx(1)
    assert m["AvgSettlingTime10Degrees"] == pytest.approx(0)
    assert m["AvgSettlingTime5Degrees"] == pytest.approx(1)
    assert m["AvgSettlingTime2Degrees"] == pytest.approx(2)


def test_settling_is_the_last_sample_outside_the_band_not_the_first_entry():
    # e = 20, 4, 1, 6, 1, 0 from k0 = 1 (t = 0.5 s per sample): inside ±5° at k=2 first, but
    # out again at k=4 (e = 6): Settle5 = t[4] − t[1] = 1.5 s (backward scan).
    sp = [0, 20, 20, 20, 20, 20, 20]
    pv = [0, 0, 16, 19, 14, 19, 20]
    m = joint_metrics(trace(sp, pv, t=np.arange(7) * 0.5))
    assert m["AvgSettlingTime5Degrees"] == pytest.approx(1.5)
    assert m["AvgSettlingTime10Degrees"] == pytest.approx(0)   # only e[k0] = 20 is outside ±10°


def test_response_times_are_fractions_of_the_step_with_strict_thresholds():
    # Δ = 40: R10 needs |e| < 36 (36 itself does not count), R50 needs |e| < 20.
    # e = 40, 36, 35, 20, 19, 0 from k0 = 1.
    sp = [0] + [40] * 6
    pv = [0, 0, 4, 5, 20, 21, 40]
    m = joint_metrics(trace(sp, pv))
    assert m["Avg10PercentResponseTime"] == pytest.approx(2)
    assert m["Avg50PercentResponseTime"] == pytest.approx(4)
    assert m["AvgCompleteResponseTime"] == pytest.approx(5)    # e = 0 at k=6: sign changes


def test_step_size_limits_are_inclusive_at_the_threshold():
    # "Settle_x = null if Δ < x", R10/R50 "require Δ >= 10°": a 10° step gets them all ...
    m = joint_metrics(trace([0, 0, 10, 10, 10], [0, 0, 0, 4, 8]))
    assert m["AvgSettlingTime10Degrees"] == pytest.approx(0)
    # e = 10, 6, 2: |e| < 9 first at k=3, |e| < 5 first at k=4.
    assert m["Avg10PercentResponseTime"] == pytest.approx(1) and m["Avg50PercentResponseTime"] == pytest.approx(2)
    # ... a 9.5° step has no 10° settling and no R10 / R50, but 5° and 2° settling.
    m = joint_metrics(trace([0, 0, 9.5, 9.5, 9.5], [0, 0, 0, 4, 8]))
    assert m["AvgSettlingTime10Degrees"] is None
    assert m["Avg10PercentResponseTime"] is None and m["Avg50PercentResponseTime"] is None
    assert m["AvgSettlingTime5Degrees"] == pytest.approx(1) and m["AvgSettlingTime2Degrees"] == pytest.approx(1)


def test_a_constant_setpoint_has_no_changes_and_null_optional_metrics():
    m = joint_metrics(trace([5.0] * 6, [4, 4, 6, 6, 5, 5]))
    assert m["AvgAbsoluteError"] == pytest.approx(4 / 6) and m["AvgSignedError"] == pytest.approx(0)
    assert m["MaxAbsoluteError"] == pytest.approx(1)
    assert all(m[name] is None for name in OPTIONAL)


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("field", ["t", "desired", "measured"])
def test_non_finite_samples_are_a_clear_error(field):
    data = {"t": np.arange(5.0), "desired": np.array([0, 0, 10, 10, 10.0]), "measured": np.array([0, 0, 0, 5, 9.0])}
    data[field][3] = np.nan
    with pytest.raises(ValueError, match=f"'j'.*non-finite {field} at sample"):
        joint_metrics(JointTrace("j", "m", **data))


def test_times_not_increasing_are_a_clear_error():
    # Before: t = 0, 1, 1, 0.5 gave negative settling and response times.
    with pytest.raises(ValueError, match="not increasing"):
        joint_metrics(trace([0, 0, 10, 10], [0, 0, 0, 5], t=np.array([0, 1, 1, 0.5])))


def test_mismatched_lengths_and_empty_traces_are_clear_errors():
    with pytest.raises(ValueError, match="equal-length"):
        JointTrace("j", "m", np.arange(3.0), np.zeros(3), np.zeros(2))
    with pytest.raises(ValueError, match="empty trace"):
        joint_metrics(trace([], []))


def test_a_zero_step_test_is_refused():
    home, lower, upper = np.zeros(2), -np.ones(2) * 3, np.ones(2) * 3
    with pytest.raises(ValueError, match="must be > 0"):
        step_test(home, lower, upper, step_deg=0.0)
    assert step_test(home, lower, upper, step_deg=10.0, pause_s=0.01, lead_s=0.01).shape == (30, 2)


# ----------------------------------------------------------------------------- relay
def _square_relay_wave(high=1.0, low=-1.0, periods=3, dt=0.1):
    # 0, high, 0, low, 0, ... one period = 4 samples: maxima at 1, 5, 9; minima at 3, 7, 11.
    y = np.tile([0.5 * (high + low), high, 0.5 * (high + low), low], periods)
    y = np.append(y, 0.5 * (high + low))
    return np.arange(len(y)) * dt, y


def test_relay_tu_is_between_same_sign_peaks_and_ku_uses_half_peak_to_peak():
    # Peaks 3 to -2: a = (3 − (−2)) / 2 = 2.5 rad; d = 2 N m: K_u = 4d/(πa) = 3.2/π;
    # T_u = distance between same-sign peaks = 4 samples = 0.4 s (not 0.2, the half period).
    t, y = _square_relay_wave(high=3.0, low=-2.0)
    r = ultimate_from_peaks(t, y, relay_torque=2.0, decimation=1, min_separation=0)
    assert r.n_peaks == 6
    assert r.tu == pytest.approx(0.4)
    assert r.amplitude_angle == pytest.approx(2.5)
    assert r.ku == pytest.approx(4 * 2.0 / (np.pi * 2.5))


@pytest.mark.parametrize("t_len, y_change, d, message", [
    (10, None, 1.0, "equal-length"),
    (13, "nan", 1.0, "finite"),
    (13, None, 0.0, "must be > 0"),
    (13, None, -1.0, "must be > 0"),
    (13, None, float("nan"), "must be > 0"),
])
def test_relay_bad_input_is_a_clear_error(t_len, y_change, d, message):
    t, y = _square_relay_wave()
    if y_change == "nan":
        y[4] = np.nan
    with pytest.raises(ValueError, match=message):
        ultimate_from_peaks(t[:t_len], y, relay_torque=d, decimation=1, min_separation=0)


def test_peak_detection_refuses_nan():
    with pytest.raises(ValueError, match="finite"):
        detect_peaks(np.array([0, 1, np.nan, 1, 0.0]))


# ----------------------------------------------------------------------------- heuristics
REFERENCE_TABLE = {   # reference A6: K_p, K_i (× K_u/T_u), K_d (× K_u T_u), coefficients of K_u
    "Classic": (0.6, 1.2, 0.075), "PessenIntegralRule": (0.7, 1.75, 0.105),
    "SomeOvershoot": (0.33, 0.66, 0.11), "NoOvershoot": (0.2, 0.4, 0.066),
    "PControl": (0.5, 0.0, 0.0), "PIControl": (0.45, 0.54, 0.0), "PDControl": (0.8, 0.0, 0.10),
}


@pytest.mark.parametrize("name", sorted(REFERENCE_TABLE))
def test_every_heuristic_matches_the_reference_table(name):
    ku, tu = 100.0, 0.5
    cp, ci, cd = REFERENCE_TABLE[name]
    g = heuristic_gains(name, ku, tu)
    assert (g.kp, g.ki, g.kd) == pytest.approx((cp * ku, ci * ku / tu, cd * ku * tu))
    assert set(HEURISTICS) == set(REFERENCE_TABLE)


def test_classic_in_standard_form_is_ti_half_tu_td_eighth_tu():
    # K_i = K_p/T_i, K_d = K_p T_d: Classic's 0.6 K_u, 1.2 K_u/T_u, 0.075 K_u T_u is
    # T_i = T_u/2, T_d = T_u/8 (the textbook Ziegler–Nichols PID).
    kp, ti, td = heuristic_gains("Classic", 100.0, 0.8).to_standard()
    assert (kp, ti, td) == pytest.approx((60.0, 0.4, 0.1))
    assert heuristic_gains("PDControl", 100.0, 0.8).to_standard()[1] is None   # no I: T_i is None


def test_standard_form_needs_a_positive_integral_time():
    # T_i = 0 is an infinite K_i; before it silently gave K_i = 0 (no integral action).
    with pytest.raises(ValueError, match="T_i"):
        PidGains.from_standard(10.0, 0.0, 0.1)
    with pytest.raises(ValueError, match="T_d"):
        PidGains.from_standard(10.0, 1.0, -0.1)
    assert PidGains.from_standard(10.0, None, 0.1) == PidGains(10.0, 0.0, 1.0)
    assert PidGains.from_standard(10.0, float("inf"), 0.0) == PidGains(10.0, 0.0, 0.0)
