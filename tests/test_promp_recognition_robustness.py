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
from promp.synthetic import make_tasks

N_SIGNALS = 8


@pytest.fixture(scope="module")
def tasks():
    return make_tasks(seed=3, n_tasks=4, n_signals=N_SIGNALS, duration=2.0)


@pytest.fixture(scope="module")
def library(tasks):
    rng = np.random.default_rng(4)
    return TaskLibrary.learn({t.label: t.demonstrations(rng, 6) for t in tasks}, basis=RBFBasis(20))


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
