"""Task/phase filter edge cases: missing signals without a latent, and its cached moments."""

import numpy as np
import pytest

from promp.basis import RBFBasis
from promp.model import ProMP
from promp.phase_filter import PhaseGridConfig, TaskPhaseFilter
from promp.synthetic import learn_library, make_tasks

N_SIGNALS = 4


@pytest.fixture(scope="module")
def tasks():
    return make_tasks(seed=5, n_tasks=2, n_signals=N_SIGNALS, duration=2.0)


@pytest.fixture(scope="module")
def library(tasks):
    rng = np.random.default_rng(4)
    return learn_library(tasks, rng, 6, basis=RBFBasis(12))


def _signals(promp: ProMP, keep: np.ndarray) -> ProMP:
    """The same task over the signals ``keep`` only."""
    return ProMP(basis=promp.basis, weight_mean=promp.weight_mean[keep], noise_var=promp.noise_var[keep],
                 durations=promp.durations, low_rank=promp.low_rank[keep], block_var=promp.block_var[keep],
                 coupled=promp.coupled, label=promp.label)


def test_rank_zero_masked_update_equals_the_unmasked_update_on_the_observed_signals(tasks, library):
    # Without a latent (rank 0) the likelihood is a product over signals of independent
    # Gaussians whose residual variance is each signal's own (the library floor is per
    # signal too), so leaving signals out of an observation must give exactly the
    # posterior of a filter that never had them. Before: reshape of an empty array failed.
    config = PhaseGridConfig(latent_rank=0)
    mask = np.array([True, False, True, False])
    full = TaskPhaseFilter(library.promps, config)
    observed = TaskPhaseFilter([_signals(p, mask) for p in library.promps], config)
    assert full.rank == 0 and observed.rank == 0
    demo = tasks[1].demonstrations(np.random.default_rng(9), 1)[0]
    for t, y in zip(demo.times[::5], demo.values[::5]):
        if t > 0.6 * demo.duration:
            break
        assert full.add(t, y, mask) == observed.add(t, y[mask])
    assert full.n_evidence > 5
    np.testing.assert_allclose(full.log_posterior(), observed.log_posterior(), rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(full.task_probabilities(), observed.task_probabilities(), atol=1e-12)
    a, b = full.time_warp(1), observed.time_warp(1)
    assert (a.speed, a.offset) == pytest.approx((b.speed, b.offset), rel=1e-9, abs=1e-12)


def test_phase_variance_after_new_evidence_does_not_read_the_moments_of_the_old_posterior(tasks, library):
    demo = tasks[0].demonstrations(np.random.default_rng(11), 1)[0]
    samples = list(zip(demo.times[::4], demo.values[::4]))[:25]
    times = np.array([0.5, 1.0, 1.5])
    stale = TaskPhaseFilter(library.promps)
    stale.add(*samples[0])
    stale.phase_variance(0, times, stale.time_warp(0))     # caches the moments of 1 observation
    fresh = TaskPhaseFilter(library.promps)
    for s in samples:
        fresh.add(*s)
    for s in samples[1:]:
        stale.add(*s)
    # The same warp in both calls, so only the moments can differ. Before: the stale filter
    # answered from the moments of its first observation.
    warp = fresh.time_warp(0)
    expected = fresh.phase_variance(0, times, warp)
    np.testing.assert_allclose(stale.phase_variance(0, times, warp), expected, rtol=1e-12)


@pytest.mark.parametrize("order", [(0, 1), (1, 0)])
def test_two_parts_of_one_sample_are_one_observation_of_both(tasks, library, order):
    """The hands in one packet and the head in another, same time stamp: only the first part
    counted as evidence before (the second lost the tie)."""
    demo = tasks[0].demonstrations(np.random.default_rng(13), 1)[0]
    halves = (np.array([True, True, False, False]), np.array([False, False, True, True]))
    whole, split = TaskPhaseFilter(library.promps), TaskPhaseFilter(library.promps)
    for t, y in list(zip(demo.times[::5], demo.values[::5]))[:20]:
        whole.add(t, y)
        for k in order:
            split.add(t, np.where(halves[k], y, np.nan), halves[k])
    assert split.n_evidence == whole.n_evidence == 20
    np.testing.assert_allclose(split.log_posterior(), whole.log_posterior(), rtol=1e-9, atol=1e-9)
