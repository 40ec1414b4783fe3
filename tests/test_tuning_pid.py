"""The joint PID (parallel form, anti-windup, filtered derivative, torque limit) and gains JSON."""

import json

import pytest

from teleop.tuning.gains_io import GainsFormatError, load_gains, save_gains
from teleop.tuning.heuristics import HEURISTICS, all_heuristic_gains, heuristic_gains
from teleop.tuning.pid import PidController, PidGains


def test_parallel_form_first_steps_by_hand():
    pid = PidController([PidGains(10.0, 2.0, 0.5)], dt=0.1, torque_limit=[100.0], derivative_filter_s=0.0)
    # k=0: e=1, no derivative history; integral after the step 0.1 -> u = 10 + 2*0.1 = 10.2
    assert pid.update([1.0], [0.0]) == pytest.approx([10.2])
    # k=1: e=0.5, de/dt = -5 (unfiltered), integral 0.15 -> u = 5 + 0.3 - 2.5 = 2.8
    assert pid.update([1.0], [0.5]) == pytest.approx([2.8])


def test_derivative_filter_is_first_order_low_pass():
    pid = PidController([PidGains(0.0, 0.0, 1.0)], dt=0.01, torque_limit=[1e9], derivative_filter_s=0.03)
    pid.update([0.0], [0.0])
    u = pid.update([1.0], [0.0])           # raw derivative 100, alpha = 0.01/0.04 = 0.25
    assert u == pytest.approx([25.0])
    assert pid.update([1.0], [0.0]) == pytest.approx([25.0 * 0.75])  # decays, raw is 0 now


def test_torque_limit_and_anti_windup():
    limit = 5.0
    pid = PidController([PidGains(100.0, 50.0, 0.0)], dt=0.01, torque_limit=[limit], derivative_filter_s=0.0)
    for _ in range(500):                   # a blocked joint: large error for 5 s
        u = pid.update([1.0], [0.0])
    assert u == pytest.approx([limit])
    # Saturated from the first sample with the error pushing out: the integral never grew
    # (without anti-windup it would hold 5 rad s, i.e. 250 N m of stored torque) ...
    assert pid.integral[0] == pytest.approx(0.0)
    assert pid.update([0.0], [0.0])[0] == pytest.approx(0.0)
    # ... while unsaturated it integrates normally.
    pid.update([0.01], [0.0])
    assert pid.integral[0] == pytest.approx(0.01 * 0.01)


def test_integral_bounded_by_torque_limit():
    pid = PidController([PidGains(0.0, 1.0, 0.0)], dt=1.0, torque_limit=[2.0], derivative_filter_s=0.0)
    for _ in range(10):
        pid.update([0.5], [0.0])
    assert pid.integral[0] == pytest.approx(2.0)


def test_standard_form_conversion():
    g = PidGains.from_standard(10.0, 2.0, 0.1)
    assert (g.kp, g.ki, g.kd) == pytest.approx((10.0, 5.0, 1.0))
    assert g.to_standard() == pytest.approx((10.0, 2.0, 0.1))


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf")])
def test_bad_gain_values_rejected(bad):
    with pytest.raises(ValueError):
        PidGains(bad, 0.0, 0.0)


def test_gains_json_round_trip(tmp_path):
    gains = {"l_elbow": PidGains(1.0, 2.0, 3.0), "l_wrist_prosup": PidGains(4.0, 0.0, 0.5)}
    save_gains(tmp_path / "g.json", gains)
    data = json.loads((tmp_path / "g.json").read_text())
    assert "createdTimestamp" in data and data["mapping"]["l_elbow"] == {"kp": 1.0, "ki": 2.0, "kd": 3.0}
    assert load_gains(tmp_path / "g.json", ["l_elbow", "l_wrist_prosup"]) == gains


@pytest.mark.parametrize("text, message", [
    ("{not json", "not valid JSON"),
    ('{"gains": {}}', "mapping"),
    ('{"mapping": {"l_elbow": {"kp": "x", "ki": 0, "kd": 0}}}', "bad gains"),
    ('{"mapping": {"l_elbow": {"kp": 1, "ki": 0, "kd": 0, "kf": 1}}}', "needs"),
    ('{"mapping": {"l_elbow": {"kp": -1, "ki": 0, "kd": 0}}}', "bad gains"),
    ('{"mapping": {"l_elbow": {"kp": 1, "ki": 0, "kd": 0}, '
     '"l_knee_typo": {"kp": 1, "ki": 0, "kd": 0}}}', "unknown joint"),
    ('{"mapping": {}}', "missing joint"),
])
def test_malformed_gains_files_give_clear_errors(tmp_path, text, message):
    path = tmp_path / "g.json"
    path.write_text(text)
    with pytest.raises(GainsFormatError, match=message):
        load_gains(path, ["l_elbow"])


def test_heuristic_table():
    assert len(HEURISTICS) == 7
    g = heuristic_gains("Classic", ku=100.0, tu=0.5)
    assert (g.kp, g.ki, g.kd) == pytest.approx((60.0, 240.0, 3.75))
    pd = all_heuristic_gains(100.0, 0.5)["PDControl"]
    assert (pd.kp, pd.ki, pd.kd) == pytest.approx((80.0, 0.0, 5.0))
    with pytest.raises(KeyError, match="unknown heuristic"):
        heuristic_gains("Twiddle", 1.0, 1.0)
