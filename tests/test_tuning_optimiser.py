"""The optimiser's parameterisation and search, on a stand-in for the simulated limb."""

import numpy as np
import pytest

from teleop.tuning.experiment import check_target
from teleop.tuning.experiment_data import Recording
from teleop.tuning.optimiser import OptimiserSettings, gains_from_parameters, limb_cost, optimise_limb
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


def test_target_check():
    rows = {"PDControl": {"AE-A": 1.0, "AE-S": 1, "OS": 3, "ST5": 1.0, "R50": 0.1},
            "Classic": {"AE-A": 2.0, "AE-S": 1, "OS": 9, "ST5": 0.5, "R50": 0.1},
            "Optimiser": {"AE-A": 0.6, "AE-S": 1, "OS": 4.0, "ST5": 0.9, "R50": 0.1}}
    t = check_target(rows)
    assert t["best_heuristic"] == "PDControl" and t["met"] and not t["st5_vs_best_any_ok"]
    rows["Optimiser"]["AE-A"] = 0.75
    assert not check_target(rows)["met"]
