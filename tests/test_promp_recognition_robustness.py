"""Recognition robustness to executions unlike the demonstrations (held-out performers).

The settings come from cross-performer HDM05 measurements (see the third round in
promp.phase_filter.PhaseGridConfig and promp.estimator); these tests pin the mechanisms on
synthetic tasks.
"""

import numpy as np
import pytest

from promp.basis import RBFBasis
from promp.estimator import EstimatorConfig, OnlineEstimator
from promp.library import TaskLibrary
from promp.phase_filter import PhaseGridConfig, TaskPhaseFilter
from promp.synthetic import learn_library, make_tasks

N_SIGNALS = 8


@pytest.fixture(scope="module")
def tasks():
    return make_tasks(seed=3, n_tasks=4, n_signals=N_SIGNALS, duration=2.0)


@pytest.fixture(scope="module")
def library(tasks):
    rng = np.random.default_rng(4)
    return learn_library(tasks, rng, 6, basis=RBFBasis(20))


def test_residual_variance_is_floored_by_the_library_spread(library):
    cfg = PhaseGridConfig()
    filt = TaskPhaseFilter(library.promps, cfg)
    z = np.linspace(0.0, 1.0, cfg.n_phase_points)
    lib_std = np.std(np.concatenate([p.mean(z) for p in library.promps]), axis=0)
    resid = 1.0 / filt._w_tab                                    # (K, G, D)
    assert np.all(resid >= (cfg.library_floor_fraction * lib_std) ** 2 * (1 - 1e-9))
    # The floor is what sets the precision of at least some signal somewhere.
    off = TaskPhaseFilter(library.promps, PhaseGridConfig(library_floor_fraction=0.0))
    assert np.any(1.0 / off._w_tab < resid * (1 - 1e-6))


def test_no_task_is_frozen_by_default(tasks, library):
    """A task far behind early must stay alive: a new performer's true task often is."""
    rng = np.random.default_rng(7)
    demo, _ = tasks[1].execution(rng, speed=1.0)
    est = OnlineEstimator(library)
    for t, y in zip(demo.times, demo.values):
        est.update(t, y)
    assert est.filter.alive.all()
    assert est.estimate().task == tasks[1].label
    # Pruning is still available for large libraries.
    est = OnlineEstimator(library, EstimatorConfig(grid=PhaseGridConfig(prune_log_ratio=25.0)))
    for t, y in zip(demo.times, demo.values):
        est.update(t, y)
    assert not est.filter.alive.all()


def test_down_weighted_signals_are_named():
    names = ("a", "b", "c")
    assert np.array_equal(PhaseGridConfig().signal_factors(names, 3), np.ones(3))        # none by default
    f = PhaseGridConfig(down_weighted_signals=("c", "a"), down_weight_factor=10.0).signal_factors(names, 3)
    assert np.array_equal(f, [10.0, 1.0, 10.0])
    with pytest.raises(ValueError, match="not among"):
        PhaseGridConfig(down_weighted_signals=("z",)).signal_factors(names, 3)
    with pytest.raises(ValueError, match="no signal names"):
        PhaseGridConfig(down_weighted_signals=("a",)).signal_factors(None, 3)


def _two_task_library(rng):
    """Task "up" (signal 0 rises 0 -> 0.3, style signal 2 at 0) and task "down" (signal 0
    falls 0 -> -0.3, style signal 2 at 0.05); signal 2 varies by 1 mm within each task."""
    from promp.learning import Demonstration

    demos = {"up": [], "down": []}
    for label, sign, level in (("up", 1.0, 0.0), ("down", -1.0, 0.05)):
        for _ in range(6):
            t = np.linspace(0.0, 1.0, 101)
            y = np.stack([sign * 0.3 * t + 0.02 * rng.standard_normal() * t,
                          0.01 * rng.standard_normal() + 0.0 * t,
                          level + 0.001 * rng.standard_normal() + 0.0 * t], axis=1)
            demos[label].append(Demonstration(t, y + 1e-4 * rng.standard_normal(y.shape), label=label))
    return TaskLibrary.learn(demos, basis=RBFBasis(10), signal_names=("task", "free", "style"))


def test_style_signal_inflation_stops_a_style_signal_deciding_the_task():
    # A performer executes "up" but holds the style signal where the "down" demonstrators
    # held it: with full precision that signal alone decides for "down"; inflated, the
    # task-bearing signal 0 decides.
    library = _two_task_library(np.random.default_rng(0))
    t = np.linspace(0.0, 0.5, 51)
    y = np.stack([0.3 * t, np.zeros_like(t), np.full_like(t, 0.05)], axis=1)

    def winner(cfg):
        filt = TaskPhaseFilter(library.promps, cfg)
        for ti, yi in zip(t, y):
            filt.add(ti, yi)
        return library.labels[filt.best_task()]

    assert winner(PhaseGridConfig()) == "down"
    assert winner(PhaseGridConfig(down_weighted_signals=("style",), down_weight_factor=1e4)) == "up"


def test_estimator_with_the_style_signal_down_weighted_recognises_the_task():
    library = _two_task_library(np.random.default_rng(0))
    t = np.linspace(0.0, 0.5, 51)
    y = np.stack([0.3 * t, np.zeros_like(t), np.full_like(t, 0.05)], axis=1)
    plain = OnlineEstimator(library)
    weighted = OnlineEstimator(library, EstimatorConfig(grid=PhaseGridConfig(down_weighted_signals=("style",),
                                                                             down_weight_factor=1e4)))
    for ti, yi in zip(t, y):
        est_plain, est_weighted = plain.update(ti, yi), weighted.update(ti, yi)
    assert est_plain.task == "down" and est_weighted.task == "up"
