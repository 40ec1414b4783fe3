"""Recognition likelihood and time warp (reference §5.4-5.5; thesis Eqs. 5.7, 5.8, 5.13) on
tiny hand-computable cases."""

import numpy as np
import pytest

from promp.basis import RBFBasis
from promp.learning import Demonstration, learn_promp
from promp.model import ProMP
from promp.phase_filter import PhaseGridConfig, TaskPhaseFilter, TimeWarp

BASIS = RBFBasis(3, margin_factor=0.0)


def _promp(mu, duration, label):
    return ProMP(BASIS, np.array([mu], dtype=float), noise_var=np.array([0.01]), durations=np.array([duration]),
                 low_rank=np.zeros((1, 3, 1)), block_var=np.array([0.04]), label=label)


def test_rank_zero_recognition_is_the_gaussian_likelihood_at_each_warp_plus_the_speed_prior():
    """With no latent directions the filter's log-posterior of (task, speed) is
    sum_t log N(y_t; mean(z), var(z) + noise) + log prior(speed), normalised, at
    z = speed t / T_bar on the filter's phase grid (the variance-weighted version of the
    thesis's distance to the mean, Eq. 5.7, over speeds as in Eq. 5.8)."""
    tasks = [_promp([0.0, 1.0, 2.0], 2.0, "a"), _promp([0.0, -1.0, -2.0], 1.0, "b")]
    cfg = PhaseGridConfig(n_speeds=3, n_offsets=1, latent_rank=0, library_floor_fraction=0.0)
    filt = TaskPhaseFilter(tasks, cfg)
    obs = [(0.5, 0.7), (0.9, 1.1)]
    for t, y in obs:
        filt.add(t, np.array([y]))
    expected = np.zeros((2, 3))
    for k, promp in enumerate(tasks):
        for i, speed in enumerate(filt.speed_grid):
            for t, y in obs:
                z = np.rint(np.clip(speed * t / promp.duration, 0, 1) * (cfg.n_phase_points - 1)) \
                    / (cfg.n_phase_points - 1)
                m, v = promp.mean(z)[0], promp.var(z, include_noise=True)[0]
                expected[k, i] += -0.5 * ((y - m) ** 2 / v + np.log(2 * np.pi * v))
            expected[k, i] += -0.5 * (np.log(speed) / cfg.speed_prior_log_std) ** 2
    expected -= np.log(np.exp(expected).sum())
    np.testing.assert_allclose(filt.log_posterior()[:, :, 0], expected, atol=1e-9)


def test_the_warp_of_a_demonstrations_speed_maps_its_end_to_phase_one():
    """alpha_i = T_bar / T_i (S_alpha, §5.3.6) and z(t) = alpha (t - offset) / T_bar: a
    demonstration played at its own speed reaches phase 1 at its own end."""
    t1, t2 = np.linspace(0, 1.0, 11), np.linspace(0, 3.0, 31)
    demos = [Demonstration(t1, np.sin(t1)[:, None]), Demonstration(t2, np.sin(t2 / 3)[:, None])]
    promp = learn_promp(demos, BASIS)
    assert promp.duration == pytest.approx(2.0)
    np.testing.assert_allclose(promp.speeds, [2.0, 2 / 3])
    for speed, demo in zip(promp.speeds, demos):
        warp = TimeWarp(speed, 0.25, promp.duration)
        assert warp.phase(demo.duration + 0.25) == pytest.approx(1.0)
        np.testing.assert_allclose(warp.phase(demo.times + 0.25), demo.phases)
        np.testing.assert_allclose(promp.phase(demo.times + 0.25, speed, 0.25), demo.phases)
