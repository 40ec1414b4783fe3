"""The optimiser's parameterisation and search, on a stand-in for the simulated limb."""

import numpy as np
import pytest

from teleop.tuning.experiment import check_target
from teleop.tuning.experiment_data import Recording
from teleop.tuning.heuristics import HEURISTICS, heuristic_gains
from teleop.tuning.optimiser import (OptimiserSettings, gains_from_parameters, limb_cost, optimise_limb,
                                     parameters_from_gains)
from teleop.tuning.pid import PidGains

START = [PidGains(100.0, 0.0, 2.0), PidGains(50.0, 0.0, 1.0)]
TU = np.array([0.1, 0.2])


def test_parameters_scale_stiffness_quadratically_and_damping_linearly():
    x = np.array([np.log(2.0), 0.0, np.log(3.0), np.log(0.5)])
    g = gains_from_parameters(x, START, TU)
    assert (g[0].kp, g[0].kd) == pytest.approx((400.0, 2.0 * 2 * 3))
    assert g[0].ki == pytest.approx(400.0 * 0.5 / 0.1)
    assert (g[1].kp, g[1].kd, g[1].ki) == pytest.approx((50.0, 3.0, 50.0 * 0.5 / 0.2))


def _recording(error_deg: float, overshoot_deg: float = 0.0) -> tuple[Recording, Recording]:
    t = np.arange(50) * 0.01
    motion = Recording.from_arrays("training", ["a", "b"], t, np.zeros((50, 2)), np.full((50, 2), -np.radians(error_deg)))
    sp = np.zeros((50, 2))
    sp[10:] = np.radians(45)
    # PV: rises to 45° + overshoot over samples 10..20, back to 45° by sample 30.
    peak = 45.0 + overshoot_deg
    pv_deg = np.concatenate([np.zeros(10), np.linspace(0, peak, 11)[1:], np.linspace(peak, 45, 11)[1:], np.full(20, 45.0)])
    pv = np.radians(np.column_stack([pv_deg, pv_deg]))
    return motion, Recording.from_arrays("step", ["a", "b"], t, sp, pv)


def test_cost_adds_error_overshoot_and_settling():
    settings = OptimiserSettings(os_target_deg=4.0, weight_overshoot=1.0, weight_settling=1.0)
    calm = limb_cost(*_recording(2.0, 0.0), settings)
    wild = limb_cost(*_recording(2.0, 10.0), settings)
    assert calm > 2.0                                   # AE 2° plus a settling time
    assert wild - calm > 2 * (10.0 - 4.0) - 0.5         # both joints overshoot ~10° > 4°


def test_search_improves_on_the_start_towards_a_known_optimum():
    # A stand-in limb whose tracking error is smallest at 8x the starting stiffness.
    def simulate(gains):
        ratio = gains[0].kp / START[0].kp
        return _recording(1.0 + abs(np.log(ratio / 8.0)))

    result = optimise_limb(simulate, START, TU, OptimiserSettings(max_evaluations=30, progress=False))
    assert result.evaluations <= 30
    assert result.cost < result.history[0] - 1.0
    assert result.gains[0].kp / START[0].kp == pytest.approx(8.0, rel=0.35)


def test_every_rule_of_one_relay_test_is_a_point_of_the_parameter_space():
    ku, tu = np.array([400.0, 90.0]), np.array([0.05, 0.08])
    rules = {m: [heuristic_gains(m, k, t) for k, t in zip(ku, tu)] for m in HEURISTICS}
    for name in ("Classic", "PessenIntegralRule", "SomeOvershoot", "NoOvershoot"):   # rules with I and D
        x = parameters_from_gains(rules[name], rules["PDControl"], tu)
        back = gains_from_parameters(x, rules["PDControl"], tu)
        for g, b in zip(rules[name], back):
            assert (b.kp, b.ki, b.kd) == pytest.approx((g.kp, g.ki, g.kd), rel=1e-9), name
    # Without D or I: the nearest point is on the lower bound (a tiny K_d, K_i).
    back = gains_from_parameters(parameters_from_gains(rules["PControl"], rules["PDControl"], tu), rules["PDControl"], tu)
    assert back[0].kp == pytest.approx(rules["PControl"][0].kp)
    assert back[0].kd < 0.03 * rules["PDControl"][0].kd and back[0].ki < 0.01 * back[0].kp / tu[0]


def _stand_in(best_kp_ratio: float, best_kd_ratio: float):
    """A stand-in limb whose tracking error is smallest at the given K_p, K_d multiples of START."""
    def simulate(gains):
        return _recording(1.0 + abs(np.log(gains[0].kp / START[0].kp / best_kp_ratio))
                          + abs(np.log(max(gains[0].kd, 1e-9) / START[0].kd / best_kd_ratio)))
    return simulate


def test_warm_start_is_never_lost():
    # The optimum is a candidate's gains exactly, off the search's usual path (K_d x 5, K_p x 0.3):
    # the result must be at least as good as that candidate, and every candidate is simulated.
    good = [PidGains(30.0, 0.0, 10.0), PidGains(15.0, 0.0, 5.0)]
    candidates = {"start": START, "good": good, "bad": [PidGains(1000.0, 0.0, 0.1)] * 2}
    for budget in (3, 12, 30):
        result = optimise_limb(_stand_in(0.3, 5.0), START, TU, OptimiserSettings(max_evaluations=budget, progress=False),
                               candidates=candidates)
        assert set(result.warm_start) == set(candidates)
        assert result.cost <= result.warm_start["good"] + 1e-12
        assert result.cost == min(result.history)
        assert result.evaluations <= budget
    assert result.start == "good"


def test_target_check():
    rows = {"PDControl": {"AE-A": 1.0, "AE-S": 1, "OS": 3, "ST5": 1.0, "R50": 0.1},
            "Classic": {"AE-A": 2.0, "AE-S": 1, "OS": 9, "ST5": 0.5, "R50": 0.1},
            "Optimiser": {"AE-A": 0.6, "AE-S": 1, "OS": 4.0, "ST5": 0.9, "R50": 0.1}}
    t = check_target(rows)
    assert t["best_heuristic"] == "PDControl" and t["met"] and not t["st5_vs_best_any_ok"]
    rows["Optimiser"]["AE-A"] = 0.75
    assert not check_target(rows)["met"]
