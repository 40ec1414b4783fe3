"""The reference's metrics (§3.3.1–3.3.2) on hand-computed cases."""

import numpy as np
import pytest

from teleop.tuning.experiment_data import JointTrace, Recording
from teleop.tuning.metrics import (aggregate, evaluate_all, evaluate_recording, joint_metrics,
                                   significant_changes)


def trace(sp, pv, t=None, joint="j", motion="m"):
    t = np.arange(len(sp), dtype=float) if t is None else t
    return JointTrace(joint, motion, t, np.array(sp, float), np.array(pv, float))


# One 10° step at k=2 (held), PV rises and overshoots by 1°: e = [0, 0, 10, 6, 2, -1, 0].
STEP_SP = [0, 0, 10, 10, 10, 10, 10]
STEP_PV = [0, 0, 0, 4, 8, 11, 10]


def test_step_case_by_hand():
    m = joint_metrics(trace(STEP_SP, STEP_PV))
    assert m["AvgAbsoluteError"] == pytest.approx(19 / 7)
    assert m["AvgSignedError"] == pytest.approx(17 / 7)
    assert m["MaxAbsoluteError"] == pytest.approx(10)
    # PV crosses SP at k=5 (e=-1): overshoot = max |e[5:]| = 1, R100 = t5 - t2 = 3.
    assert m["MaxOvershoot"] == pytest.approx(1)
    assert m["AvgCompleteResponseTime"] == pytest.approx(3)
    # |e| > 10 never (10 is not > 10): settled at once; |e| > 5 last at k=3; |e| > 2 last at k=3.
    assert m["AvgSettlingTime10Degrees"] == pytest.approx(0)
    assert m["AvgSettlingTime5Degrees"] == pytest.approx(1)
    assert m["AvgSettlingTime2Degrees"] == pytest.approx(1)
    # |e| < 9 first at k=3; |e| < 5 first at k=4.
    assert m["Avg10PercentResponseTime"] == pytest.approx(1)
    assert m["Avg50PercentResponseTime"] == pytest.approx(2)


def test_time_axis_is_used_not_sample_count():
    t = np.arange(7) * 0.01
    m = joint_metrics(trace(STEP_SP, STEP_PV, t=t))
    assert m["Avg50PercentResponseTime"] == pytest.approx(0.02)
    assert m["AvgCompleteResponseTime"] == pytest.approx(0.03)


def test_small_step_nulls_response_and_wide_bands():
    # A 6° step: R10/R50 need >= 10°, settling within 10° needs delta >= 10: null; 5° and 2° computed.
    sp = [0, 0, 6, 6, 6, 6]
    pv = [0, 0, 0, 3, 5.5, 5.9]    # e = 6, 3, 0.5, 0.1 -> never crosses
    m = joint_metrics(trace(sp, pv))
    assert m["Avg10PercentResponseTime"] is None and m["Avg50PercentResponseTime"] is None
    assert m["AvgSettlingTime10Degrees"] is None
    assert m["AvgSettlingTime5Degrees"] == pytest.approx(0)   # |e| > 5 last at k0 itself
    assert m["AvgSettlingTime2Degrees"] == pytest.approx(1)   # |e|=3 at k=3
    assert m["MaxOvershoot"] is None and m["AvgCompleteResponseTime"] is None  # overdamped


def test_reaching_the_setpoint_exactly_counts_as_crossing():
    # sign(0) != sign(e[k0]): the reference's kc rule fires when PV lands exactly on SP.
    m = joint_metrics(trace([0, 0, 6, 6, 6], [0, 0, 0, 3, 6]))
    assert m["MaxOvershoot"] == pytest.approx(0) and m["AvgCompleteResponseTime"] == pytest.approx(2)


def test_changes_need_the_new_setpoint_held_two_samples():
    # The jump at k=2 is held one sample only (ramp-like motion capture): not significant.
    assert significant_changes(np.array([0, 0, 5, 6, 7, 8.0])) == []
    changes = significant_changes(np.array([0, 0, 5, 5, 9, 9, 9.0]))
    assert [(c.k0, c.k1, c.delta) for c in changes] == [(2, 3, 5), (4, 6, 4)]


def test_motion_without_changes_has_only_the_error_metrics():
    sp = np.linspace(0, 50, 20)
    m = joint_metrics(trace(sp, sp - 1.0))
    assert m["AvgAbsoluteError"] == pytest.approx(1) and m["AvgSignedError"] == pytest.approx(1)
    for name in ("MaxOvershoot", "AvgSettlingTime5Degrees", "Avg50PercentResponseTime", "AvgCompleteResponseTime"):
        assert m[name] is None


def test_two_changes_average_and_max():
    # Step +20 at k=1, then -20 at k=6. First: e = 20, 8, -4, 0, 0 (overshoot 4, R50 t=1, R100 t=2).
    # Second: e = -20, -5, 2, 0 (overshoot 2, R50 t=1, R100 t=2).
    sp = [0, 20, 20, 20, 20, 20, 0, 0, 0, 0]
    pv = [0, 0, 12, 24, 20, 20, 20, 5, -2, 0]
    m = joint_metrics(trace(sp, pv))
    assert m["MaxOvershoot"] == pytest.approx(4)
    assert m["Avg50PercentResponseTime"] == pytest.approx(1)
    assert m["AvgCompleteResponseTime"] == pytest.approx(2)
    # settle 5: first change last |e|>5 at k=2 (t 1); second at k=6 (t 0) -> mean 0.5
    assert m["AvgSettlingTime5Degrees"] == pytest.approx(0.5)


def test_aggregation_averages_averages_and_maxes_overshoot():
    a = {"AvgAbsoluteError": 1.0, "MaxOvershoot": None, "MaxAbsoluteError": 3.0, "AvgSettlingTime5Degrees": None}
    b = {"AvgAbsoluteError": 3.0, "MaxOvershoot": 2.0, "MaxAbsoluteError": 5.0, "AvgSettlingTime5Degrees": None}
    agg = aggregate([a, b])
    assert agg["AvgAbsoluteError"] == pytest.approx(2.0)
    assert agg["MaxOvershoot"] == pytest.approx(2.0)
    assert agg["MaxAbsoluteError"] == pytest.approx(5.0)
    assert agg["AvgSettlingTime5Degrees"] is None


def test_per_motion_and_overall_tree():
    r1 = Recording("step", {"a": trace(STEP_SP, STEP_PV, joint="a"), "b": trace([0] * 7, [1] * 7, joint="b")})
    r2 = Recording("dance", {"a": trace([0] * 7, [-3] * 7, joint="a"), "b": trace([0] * 7, [0] * 7, joint="b")})
    ev = evaluate_all([r1, r2])
    step_ae = (19 / 7 + 1) / 2
    assert ev["motions"]["step"]["motion"]["AvgAbsoluteError"] == pytest.approx(step_ae)
    assert ev["motions"]["dance"]["motion"]["AvgSignedError"] == pytest.approx(1.5)
    assert ev["overall"]["AvgAbsoluteError"] == pytest.approx((step_ae + 1.5) / 2)
    assert ev["overall"]["MaxOvershoot"] == pytest.approx(1)
    assert evaluate_recording(r1)["joints"]["a"]["MaxOvershoot"] == pytest.approx(1)


def test_trace_json_round_trip(tmp_path):
    rec = Recording.from_arrays("step", ["a", "b"], np.arange(3) * 0.01, np.radians([[0, 1], [2, 3], [4, 5]]),
                                np.radians([[0, 0], [1, 1], [2, 2]]))
    rec.save(tmp_path / "r.json")
    back = Recording.load(tmp_path / "r.json")
    assert back.traces["b"].desired == pytest.approx([1, 3, 5])
    assert back.traces["a"].measured == pytest.approx([0, 1, 2])
    assert back.traces["a"].t == pytest.approx([0, 0.01, 0.02])
