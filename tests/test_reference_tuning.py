"""Audit of the PID tuning toolkit against Part A of
/work/shared/reference/pid_tuning_and_sim_to_real.md and its "Key caveats": the PID law
(§2.3.2), the relay test (§3.5.2), the seven ZN-family rules (A6 table), the four setups and
the experiment protocol (§4.1), and bad input to the public functions. Every expected number is
computed by hand in the comments; no simulation is run (the rig is replaced by fakes)."""

from types import SimpleNamespace

import numpy as np
import pytest

from teleop.tuning import experiment as ex
from teleop.tuning.heuristics import HEURISTICS, REFERENCE_LABELS, all_heuristic_gains, heuristic_gains
from teleop.tuning.motions import step_test
from teleop.tuning.peaks import detect_peaks
from teleop.tuning.pid import PidController, PidGains
from teleop.tuning.relay import MIN_PEAKS, RelayResult, RelayTestError, relay_test, ultimate_from_peaks
from teleop.tuning.rig import Relay
from teleop.tuning.setups import GRAVITY, LEFT_ARM, SETUPS

NAN, INF = float("nan"), float("inf")


# ============================================================================ PID law (§2.3.2)
def test_pid_parallel_form_with_filtered_derivative_by_hand():
    # u = K_p e + K_i ∫e + K_d D, D the first-order low-pass of de/dt (alpha = dt/(T_f + dt)).
    # K_p = 2, K_i = 4, K_d = 0.5, dt = 0.01 s, T_f = 0.01 s -> alpha = 0.5.
    pid = PidController([PidGains(2.0, 4.0, 0.5)], dt=0.01, torque_limit=[100.0], derivative_filter_s=0.01)
    # k0: e = 0.1, no derivative on the first sample, ∫e = 0.001 -> u = 0.2 + 0.004 = 0.204
    assert pid.update([0.1], [0.0]) == pytest.approx([0.204])
    # k1: e = 0.2, raw de/dt = 10, D = 0.5·10 = 5, ∫e = 0.003 -> u = 0.4 + 0.012 + 2.5 = 2.912
    assert pid.update([0.2], [0.0]) == pytest.approx([2.912])
    # k2: e = 0.2, raw 0, D = 5 + 0.5(0 − 5) = 2.5, ∫e = 0.005 -> u = 0.4 + 0.02 + 1.25 = 1.67
    assert pid.update([0.2], [0.0]) == pytest.approx([1.67])
    assert pid.integral[0] == pytest.approx(0.005) and pid.derivative[0] == pytest.approx(2.5)


def test_pid_error_is_setpoint_minus_measured():
    # e = r − y: a measured angle above the set-point gives a negative torque.
    pid = PidController([PidGains(3.0)], dt=0.001, torque_limit=[10.0], derivative_filter_s=0.0)
    assert pid.update([0.5], [1.5]) == pytest.approx([-3.0])


def test_filtered_derivative_has_unit_gain_on_a_ramp():
    # D(s) = K_d s/(1 + T_f s): on e = 2 t the filtered derivative settles at 2 rad/s.
    # dt = 1 ms, T_f = 5 ms (alpha = 1/6): after 200 steps the lag's residue (5/6)^199 ~ 1e-16.
    pid = PidController([PidGains(0.0, 0.0, 1.0)], dt=0.001, torque_limit=[1e9], derivative_filter_s=0.005)
    for k in range(200):
        u = pid.update([2.0 * k * 0.001], [0.0])
    assert u == pytest.approx([2.0])


def test_anti_windup_integrates_while_the_error_pulls_back_from_saturation():
    # K_p = 0, K_i = 1, K_d = 2, dt = 0.1, no filter, limit 1 N m.
    pid = PidController([PidGains(0.0, 1.0, 2.0)], dt=0.1, torque_limit=[1.0], derivative_filter_s=0.0)
    # k0: e = 0.5, ∫e = 0.05 -> u = 0.05.
    assert pid.update([0.5], [0.0]) == pytest.approx([0.05])
    # k1: e = 0.4: D = 2·(−1) = −2, output −1.95 saturated negative, but the error (> 0)
    # pulls the other way: the integral keeps integrating (0.05 + 0.04 = 0.09), u clips to −1.
    assert pid.update([0.4], [0.0]) == pytest.approx([-1.0])
    assert pid.integral[0] == pytest.approx(0.09)
    # k2: e = −0.6: D = 2·(−10) = −20, saturated negative and the error pushes further
    # out: no integration (∫e stays 0.09).
    assert pid.update([-0.6], [0.0]) == pytest.approx([-1.0])
    assert pid.integral[0] == pytest.approx(0.09)


def test_torque_limit_is_per_joint_and_symmetric():
    pid = PidController([PidGains(100.0), PidGains(100.0)], dt=0.01, torque_limit=[2.0, 30.0],
                        derivative_filter_s=0.0)
    # 100 N m/rad x (1, −1) rad -> 100, −100 clipped to +2 and −30.
    assert pid.update([1.0, -1.0], [0.0, 0.0]) == pytest.approx([2.0, -30.0])


@pytest.mark.parametrize("kwargs, name", [
    ({"dt": 0.0}, "dt"), ({"dt": -0.001}, "dt"), ({"dt": NAN}, "dt"), ({"dt": INF}, "dt"),
    ({"derivative_filter_s": -0.001}, "derivative_filter_s"), ({"derivative_filter_s": NAN}, "derivative_filter_s"),
    ({"torque_limit": [NAN]}, "torque_limit"), ({"torque_limit": [0.0]}, "torque_limit"),
    ({"torque_limit": [-1.0]}, "torque_limit"),
])
def test_pid_controller_bad_input_names_the_argument(kwargs, name):
    # Before: dt = 0 divided by zero on the second update, a NaN dt / T_f gave NaN torques,
    # T_f = −dt divided by zero, and a NaN torque limit left the output unclipped.
    args = {"dt": 0.001, "torque_limit": [1.0], "derivative_filter_s": 0.002} | kwargs
    with pytest.raises(ValueError, match=name):
        PidController([PidGains(1.0)], **args)


def test_an_infinite_torque_limit_means_no_limit():
    pid = PidController([PidGains(1000.0)], dt=0.001, torque_limit=[INF], derivative_filter_s=0.0)
    assert pid.update([1.0], [0.0]) == pytest.approx([1000.0])


@pytest.mark.parametrize("name, value", [("kp", -1.0), ("ki", NAN), ("kd", INF)])
def test_pid_gains_bad_input_names_the_gain(name, value):
    gains = {"kp": 1.0, "ki": 0.0, "kd": 0.0, name: value}
    with pytest.raises(ValueError, match=f"gain {name}"):
        PidGains(**gains)


def test_standard_parallel_conversion_round_trip_by_hand():
    # K_p = 6, T_i = 0.25 s, T_d = 0.0625 s -> K_i = 6/0.25 = 24, K_d = 6·0.0625 = 0.375.
    g = PidGains.from_standard(6.0, 0.25, 0.0625)
    assert (g.kp, g.ki, g.kd) == pytest.approx((6.0, 24.0, 0.375))
    assert g.to_standard() == pytest.approx((6.0, 0.25, 0.0625))
    with pytest.raises(ValueError, match="T_i"):
        PidGains.from_standard(6.0, NAN, 0.1)
    with pytest.raises(ValueError, match="T_d"):
        PidGains.from_standard(6.0, 0.25, NAN)
    with pytest.raises(ValueError, match="K_p > 0"):
        PidGains(0.0, 1.0, 0.0).to_standard()


# ============================================================================ heuristics (A6)
# K_u = 10 N m/rad, T_u = 0.5 s, on paper: K_p = c_p K_u, K_i = c_i K_u/T_u = 20 c_i,
# K_d = c_d K_u T_u = 5 c_d; then T_i = K_p/K_i, T_d = K_d/K_p.
HAND = {   # name: (K_p, K_i, K_d, T_i or None, T_d)
    "Classic": (6.0, 24.0, 0.375, 0.25, 0.0625),              # T_i = T_u/2, T_d = T_u/8
    "PessenIntegralRule": (7.0, 35.0, 0.525, 0.2, 0.075),     # T_i = 0.4 T_u, T_d = 0.15 T_u
    "SomeOvershoot": (3.3, 13.2, 0.55, 0.25, 0.55 / 3.3),     # T_d = T_u/3 = 0.1667
    "NoOvershoot": (2.0, 8.0, 0.33, 0.25, 0.165),             # T_d = 0.33 T_u
    "PControl": (5.0, 0.0, 0.0, None, 0.0),
    "PIControl": (4.5, 10.8, 0.0, 4.5 / 10.8, 0.0),           # T_i = T_u/1.2 = 0.4167
    "PDControl": (8.0, 0.0, 0.5, None, 0.0625),               # T_d = T_u/8
}


@pytest.mark.parametrize("name", sorted(HAND))
def test_each_rule_gives_the_hand_computed_gains(name):
    kp, ki, kd, ti, td = HAND[name]
    g = heuristic_gains(name, 10.0, 0.5)
    assert (g.kp, g.ki, g.kd) == pytest.approx((kp, ki, kd))
    kp_s, ti_s, td_s = g.to_standard()
    assert kp_s == pytest.approx(kp) and td_s == pytest.approx(td)
    assert ti_s is None if ti is None else ti_s == pytest.approx(ti)


def test_the_seven_rules_are_exactly_the_references():
    assert set(HEURISTICS) == set(HAND) == set(REFERENCE_LABELS)
    assert all_heuristic_gains(10.0, 0.5) == {n: heuristic_gains(n, 10.0, 0.5) for n in HAND}


@pytest.mark.parametrize("ku, tu, name", [
    (NAN, 0.5, "ku"), (0.0, 0.5, "ku"), (-10.0, 0.5, "ku"), (INF, 0.5, "ku"),
    (10.0, NAN, "tu"), (10.0, 0.0, "tu"), (10.0, -0.5, "tu"), (10.0, INF, "tu"),
])
def test_rule_bad_input_names_the_argument(ku, tu, name):
    with pytest.raises(ValueError, match=f"^{name} "):
        heuristic_gains("Classic", ku, tu)


# ============================================================================ relay (§3.5.2)
def test_relay_tu_averages_both_signs_and_a_ignores_the_centre():
    # An oscillation centred on 0.7 rad, maxima 0.9 and minima 0.5 (a = 0.2 rad), period
    # 4 samples of 0.125 s = 0.5 s; relay d = 3 N m: K_u = 4·3/(π·0.2) = 60/π ≈ 19.099.
    y = np.append(np.tile([0.7, 0.9, 0.7, 0.5], 4), 0.7)
    t = np.arange(len(y)) * 0.125
    r = ultimate_from_peaks(t, y, relay_torque=3.0, decimation=1, min_separation=0)
    assert r.n_peaks == 8
    assert r.tu == pytest.approx(0.5)
    assert r.amplitude_angle == pytest.approx(0.2)
    assert r.ku == pytest.approx(60.0 / np.pi)


def test_relay_amplitude_is_half_the_mean_peak_to_peak():
    # Growing maxima 1, 2, 3 and minima −1, −1, −1: a = (2 − (−1))/2 = 1.5, d = 1: K_u = 4/(1.5π).
    y = np.array([0, 1, 0, -1, 0, 2, 0, -1, 0, 3, 0, -1, 0.0])
    r = ultimate_from_peaks(np.arange(13.0), y, relay_torque=1.0, decimation=1, min_separation=0)
    assert r.amplitude_angle == pytest.approx(1.5) and r.ku == pytest.approx(4 / (1.5 * np.pi))
    assert r.tu == pytest.approx(4.0)


def test_too_few_peaks_is_a_value_error_naming_the_count():
    # 5 peaks (reference: >= 6): RelayTestError, which is also a ValueError.
    y = np.array([0, 1, 0, -1, 0, 1, 0, -1, 0, 1, 0.0])      # peaks at samples 1, 3, 5, 7, 9
    t = np.arange(len(y), dtype=float)
    assert len(detect_peaks(y, 1, 0).index) == 5 < MIN_PEAKS
    with pytest.raises(ValueError, match="needs >= 6") as info:
        ultimate_from_peaks(t, y, relay_torque=1.0, decimation=1, min_separation=0)
    assert isinstance(info.value, RelayTestError) and isinstance(info.value, RuntimeError)


@pytest.mark.parametrize("min_peaks", [2, 0, -1, 2.5])
def test_min_peaks_below_three_is_refused(min_peaks):
    t = np.arange(13.0)
    y = np.append(np.tile([0, 1, 0, -1.0], 3), 0.0)
    with pytest.raises(ValueError, match="min_peaks"):
        ultimate_from_peaks(t, y, relay_torque=1.0, decimation=1, min_separation=0, min_peaks=min_peaks)


@pytest.mark.parametrize("kwargs, name", [
    ({"decimation": 0}, "decimation"), ({"decimation": 1.5}, "decimation"), ({"decimation": NAN}, "decimation"),
    ({"min_separation": -1}, "min_separation"), ({"min_separation": NAN}, "min_separation"),
])
def test_peak_detection_bad_thresholds_name_the_argument(kwargs, name):
    with pytest.raises(ValueError, match=f"^{name} "):
        detect_peaks(np.sin(np.arange(50.0)), **kwargs)


class FakeRig:
    """Just what :func:`relay_test` reads of an :class:`ArmRig`; ``run`` returns a canned
    oscillation: a 10° transient during the warm-up, then ±2° (a = 2°) with a 0.2 s period."""

    joints = ("a", "b")
    idx = np.array([0, 1])
    home = np.array([0.1, 0.2])
    torque_limit = np.array([4.0, 5.0])
    dt = 0.001

    def __init__(self):
        self.calls = []

    def run(self, setpoints, gains, motion="", record_every=1, relay=None, **_):
        self.calls.append((setpoints, relay))
        t = np.arange(len(setpoints)) * self.dt
        target = np.degrees(setpoints[0, relay.joint])
        measured = target + np.where(t < 0.3, 10.0, 2.0) * np.sin(2 * np.pi * t / 0.2)
        return SimpleNamespace(traces={self.joints[relay.joint]: SimpleNamespace(t=t, measured=measured)})


def test_relay_test_measures_after_the_warm_up_with_the_joints_torque_limit():
    rig = FakeRig()
    r = relay_test(rig, "b", [PidGains(1.0)] * 2, warmup_s=0.3, duration_s=0.9, start_angle_deg=10.0)
    (setpoints, relay), = rig.calls
    # ±d with d = the joint's torque limit (5 N m), started 10° from the target (home).
    assert relay == Relay(1, 5.0, np.radians(10.0))
    assert setpoints.shape == (1200, 2) and np.all(setpoints == rig.home)
    # Only the ±2° after the warm-up: a = 2° = 0.0349 rad, K_u = 4·5/(π a) = 182.4, T_u = 0.2 s.
    assert r.amplitude_angle == pytest.approx(np.radians(2.0), rel=1e-3)
    assert r.ku == pytest.approx(20.0 / (np.pi * np.radians(2.0)), rel=1e-3)
    assert r.tu == pytest.approx(0.2, abs=0.002)
    assert r.n_peaks >= MIN_PEAKS and isinstance(r, RelayResult)


def test_relay_test_target_and_relay_torque():
    rig = FakeRig()
    relay_test(rig, "a", [PidGains(1.0)] * 2, relay_torque=2.5, target=-0.4)
    (setpoints, relay), = rig.calls
    assert relay.amplitude == 2.5 and np.all(setpoints[:, 0] == -0.4) and np.all(setpoints[:, 1] == 0.2)


@pytest.mark.parametrize("kwargs, name", [
    ({"duration_s": 0.0}, "duration_s"), ({"duration_s": -1.0}, "duration_s"), ({"duration_s": NAN}, "duration_s"),
    ({"warmup_s": -0.1}, "warmup_s"), ({"warmup_s": NAN}, "warmup_s"),
    ({"max_duration_s": INF}, "max_duration_s"), ({"max_duration_s": 0.0}, "max_duration_s"),
    ({"relay_torque": 0.0}, "relay_torque"), ({"relay_torque": -5.0}, "relay_torque"),
    ({"relay_torque": NAN}, "relay_torque"), ({"start_angle_deg": NAN}, "start_angle_deg"),
    ({"target": INF}, "target"),
])
def test_relay_test_bad_input_is_refused_before_any_simulation(kwargs, name):
    # Before: duration_s = 0 (or < 0) doubled to 0 for ever (a hang), NaN failed in int(),
    # a relay torque <= 0 only after the relay run.
    rig = FakeRig()
    with pytest.raises(ValueError, match=f"b: {name} must be finite"):
        relay_test(rig, "b", [PidGains(1.0)] * 2, **kwargs)
    assert rig.calls == []


# ============================================================================ setups (§4.1, A7)
def test_the_four_setups_keep_the_references_intent():
    s1, s2, s3, s4 = (SETUPS[n] for n in (1, 2, 3, 4))
    assert sorted(SETUPS) == [1, 2, 3, 4]
    # 1: no gravity, "very high" force limits, no friction, no payload.
    assert s1.gravity == 0 and s1.torque_scale > s2.torque_scale and s1.viscous == s1.coulomb == 0
    assert s1.payload_kg == 0
    # 2: gravity, lower limits, some friction.
    assert s2.gravity == GRAVITY and s2.torque_scale == 1.0 and s2.viscous > 0 and s2.coulomb > 0
    # 3: "severely lowered" limits, "slightly reduced" friction (less, not none).
    assert s3.gravity == GRAVITY and s3.torque_scale < s2.torque_scale
    assert 0 < s3.viscous < s2.viscous and 0 < s3.coulomb < s2.coulomb
    # 4: as setup 2 with a ~10 kg hand payload (§4.1.4).
    assert (s4.gravity, s4.torque_scale, s4.viscous, s4.coulomb) == (s2.gravity, s2.torque_scale,
                                                                    s2.viscous, s2.coulomb)
    assert s4.payload_kg == 10.0 and s2.payload_kg == s3.payload_kg == 0


# ============================================================================ protocol (§4.1)
def test_the_tested_limb_is_three_shoulder_joints_elbow_and_hand():
    assert len(LEFT_ARM) == 5 and all(j.startswith("l_shoulder") for j in LEFT_ARM[:3])
    assert LEFT_ARM[3] == "l_elbow" and LEFT_ARM[4].startswith("l_wrist")


def test_the_step_animation_is_one_45_degree_step_per_joint_with_pauses():
    home, lower, upper = np.zeros(5), -np.ones(5) * 2, np.ones(5) * 2
    sp = step_test(home, lower, upper, dt=0.01, pause_s=1.0, lead_s=0.5)
    changes = [np.flatnonzero(np.diff(sp[:, j])) + 1 for j in range(5)]
    # One change per joint, joint j at 0.5 s + j·1 s (samples 50, 150, ...), each of 45°.
    assert [list(c) for c in changes] == [[50 + 100 * j] for j in range(5)]
    assert np.degrees(np.abs(sp[-1] - home)) == pytest.approx([45.0] * 5)


def test_the_table_columns_are_the_references():
    assert ex.COLUMNS == ("AE-A", "AE-S", "OS", "ST5", "R50")
    assert ex.COLUMN_METRICS == {"AE-A": ("dance", "AvgAbsoluteError"), "AE-S": ("step", "AvgAbsoluteError"),
                                 "OS": ("step", "MaxOvershoot"), "ST5": ("step", "AvgSettlingTime5Degrees"),
                                 "R50": ("step", "Avg50PercentResponseTime")}
    evaluation = {"motions": {"dance": {"motion": {"AvgAbsoluteError": 1.5}},
                              "step": {"motion": {"AvgAbsoluteError": 2.0, "MaxOvershoot": None,
                                                  "AvgSettlingTime5Degrees": 0.4,
                                                  "Avg50PercentResponseTime": 0.1}}}}
    assert ex.table_row(evaluation) == {"AE-A": 1.5, "AE-S": 2.0, "OS": None, "ST5": 0.4, "R50": 0.1}


class _Stop(Exception):
    pass


class _ProtocolRig:
    """What run_setup reads of the rig before its first evaluation."""

    joints = LEFT_ARM
    idx = np.arange(5)
    home = np.zeros(5)
    lower, upper = -np.ones(5) * 2, np.ones(5) * 2
    dt = 0.01
    torque_limit = np.array([30.0, 30.0, 20.0, 20.0, 5.0])
    robot = SimpleNamespace(limits=SimpleNamespace(effort=torque_limit))

    def __init__(self, setup):
        self.setup = setup

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def run(self, *args, **kwargs):
        raise _Stop   # the first evaluation: the relay sequence is done


def test_relay_sequence_is_hand_first_from_the_baseline(monkeypatch):
    # §4.1: all joints at the baseline (K_p : K_i = 10 : 1), then relay-tune hand first,
    # moving inward; each relay sees the joints already tuned with the rule's gains.
    seen = []

    def fake_relay(rig, joint, gains, **kwargs):
        seen.append((joint, list(gains)))
        return RelayResult(joint, tu=0.5, ku=10.0, amplitude_torque=1.0, amplitude_angle=0.1, n_peaks=6)

    monkeypatch.setattr(ex, "ArmRig", _ProtocolRig)
    monkeypatch.setattr(ex, "relay_test", fake_relay)
    monkeypatch.setattr(ex.motions, "load_motion_setpoints", lambda *a, **k: np.zeros((10, 5)))
    with pytest.raises(_Stop):
        ex.run_setup(2, ex.ExperimentSettings.quick())
    assert [j for j, _ in seen] == list(reversed(LEFT_ARM))
    baseline = [PidGains(10 * t, t, 0.1 * t) for t in _ProtocolRig.torque_limit]
    assert seen[0][1] == baseline
    pd = heuristic_gains("PDControl", 10.0, 0.5)          # K_p 8, K_d 0.5 (table above)
    # At the elbow's relay (the second) the wrist already has PDControl's gains, the rest baseline.
    assert seen[1][1] == baseline[:4] + [pd]
    assert seen[4][1] == baseline[:1] + [pd] * 4


def test_baseline_keeps_the_references_kp_to_ki_ratio():
    rig = SimpleNamespace(robot=_ProtocolRig.robot, idx=np.arange(5))
    for g, tau in zip(ex.baseline_gains(rig), _ProtocolRig.torque_limit):
        # Reference 10000 / 1000 / 1000: K_p/K_i = 10 kept; K_d = 0.1τ is a documented deviation.
        assert g.kp / g.ki == pytest.approx(10.0) and g.kp == pytest.approx(10 * tau)
        assert g.kd == pytest.approx(0.1 * tau)
