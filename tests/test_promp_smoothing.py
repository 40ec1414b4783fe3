"""Smooth warp estimate, sigma-point phase averaging, structured prior directions, noise and
variance settings of the online estimator."""

from dataclasses import replace

import numpy as np
import pytest

from promp.basis import RBFBasis
from promp.estimator import EstimatorConfig, OnlineEstimator
from promp.learning import augment_promp
from promp.phase_filter import PhaseGridConfig, _upsample_quadratic
from promp.posterior import StructuredPosterior
from promp.synthetic import learn_library, make_tasks

N_SIGNALS = 6


@pytest.fixture(scope="module")
def tasks():
    return make_tasks(seed=3, n_tasks=2, n_signals=N_SIGNALS, duration=3.0)


@pytest.fixture(scope="module")
def library(tasks):
    rng = np.random.default_rng(2)
    return learn_library(tasks, rng, 7, basis=RBFBasis(20))


def speed_track(library, demo, mode):
    est = OnlineEstimator(library, EstimatorConfig(grid=PhaseGridConfig(speed_estimate=mode)))
    speeds = []
    for t, y in zip(demo.times, demo.values):
        if t > 0.8 * demo.duration:
            break
        speeds.append(est.update(t, y).speed)
    return np.array(speeds)


def test_smooth_speed_estimate_moves_in_small_steps(tasks, library):
    rng = np.random.default_rng(4)
    demo, _ = tasks[0].execution(rng, speed=1.3, warp=0.2)
    smooth = speed_track(library, demo, "smooth")
    jumpy = speed_track(library, demo, "map")
    late = slice(len(smooth) // 3, None)
    step_smooth = np.abs(np.diff(np.log(smooth[late]))).max()
    step_map = np.abs(np.diff(np.log(jumpy[late]))).max()
    assert step_smooth < 0.5 * step_map
    assert step_smooth < 0.03                     # < 3 % per observation once informed
    truth = library.promps[0].duration / demo.duration
    assert abs(smooth[-1] / truth - 1.0) < 0.15


def test_warp_distribution_narrows_with_evidence(tasks, library):
    rng = np.random.default_rng(5)
    demo, _ = tasks[1].execution(rng, speed=0.9)
    est = OnlineEstimator(library)
    spreads = []
    for t, y in zip(demo.times, demo.values):
        est.update(t, y)
        if t in demo.times[[10, len(demo.times) // 2]]:
            mean, cov = est.filter.warp_distribution(1)
            assert np.all(np.linalg.eigvalsh(cov) >= -1e-12)
            assert mean[0] == pytest.approx(np.log(est.time_warp(1).speed))
            spreads.append(cov[0, 0])
    assert spreads[1] < spreads[0]


def test_quadratic_upsampling_keeps_grid_values_and_peaks():
    x = np.linspace(-1.0, 1.0, 5)
    values = -((x - 0.2) ** 2)[:, None] * np.ones((1, 3))
    fine = _upsample_quadratic(values, 0, 4)
    assert fine.shape == (17, 3)
    np.testing.assert_allclose(fine[::4], values)
    xf = np.linspace(-1.0, 1.0, 17)
    assert xf[np.argmax(fine[:, 0])] == pytest.approx(0.25)    # nearest fine point to 0.2
    assert np.all(np.isneginf(_upsample_quadratic(np.full((4, 2), -np.inf), 0, 4)))


def test_unscented_phase_averaging_brackets_the_point_prediction(tasks, library):
    rng = np.random.default_rng(6)
    demo, _ = tasks[0].execution(rng, speed=1.1)
    point = OnlineEstimator(library, EstimatorConfig(phase_averaging="none"))
    avg = OnlineEstimator(library, EstimatorConfig(phase_averaging="unscented"))
    future = demo.times[demo.times > 0.5 * demo.duration]
    for t, y in zip(demo.times, demo.values):
        if t > 0.5 * demo.duration:
            break
        point.update(t, y)
        avg.update(t, y)
    m_p, v_p = point.predict_many(future, full_cov=False)
    m_a, c_a = avg.predict_many(future)
    assert np.all(np.isfinite(m_a)) and np.all(np.linalg.eigvalsh(c_a) > 0)
    # Informed speed: the average stays close to the point prediction.
    assert np.sqrt(np.mean((m_a - m_p) ** 2)) < 0.3 * np.sqrt(np.mean(v_p))
    with pytest.raises(ValueError):
        OnlineEstimator(library, EstimatorConfig(phase_averaging="spline"))
    # The five sigma points match the first two moments of the warp posterior.
    cfg = avg.config
    task = avg.filter.best_task()
    w_mean, w_cov = avg.filter.warp_distribution(task)
    warps, weights = avg._sigma_warps(task)
    points = np.array([[np.log(w.speed), w.offset] for w in warps])
    assert len(warps) == 5 and weights.sum() == pytest.approx(1.0, rel=1e-12)
    np.testing.assert_allclose(weights @ points, w_mean, rtol=1e-9, atol=1e-12)
    centred = points - w_mean
    np.testing.assert_allclose((weights[:, None] * centred).T @ centred, w_cov, rtol=1e-8,
                               atol=1e-12 * np.abs(w_cov).max())
    assert np.abs(w_cov).max() > 0                      # (the spread is not degenerate)
    # Independent reference for the mixture: one posterior per sigma point, conditioned
    # from scratch on every observation at that warp's phases, mixed with the weights:
    # m = sum_j w_j m_j, C = s (sum_j w_j (C_j + (m_j - m)(m_j - m)^T)), s the variance scale.
    promp = library.promps[task]
    prior = augment_promp(promp, cfg.offset_fraction, cfg.ramp_fraction, cfg.amplitude_fraction,
                          cfg.group_offset_scale, cfg.group_amplitude_fraction)
    t_obs, y_obs, _ = avg.observations
    means, covs = [], []
    for warp in warps:
        post = StructuredPosterior(prior, promp.noise_var * cfg.conditioning_noise_scale)
        post.condition(promp.basis.lookup(warp.phase(t_obs)), y_obs)
        m, c = post.predict(promp.basis.lookup(warp.phase(future)), include_noise=cfg.include_noise)
        means.append(m)
        covs.append(c)
    means, covs = np.array(means), np.array(covs)
    mix = np.einsum("j,jfd->fd", weights, means)
    dev = means - mix[None]
    spread = np.einsum("j,jfd,jfe->fde", weights, dev, dev)
    expected = cfg.variance_scale * (np.einsum("j,jfde->fde", weights, covs) + spread)
    np.testing.assert_allclose(m_a, mix, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(c_a, expected, rtol=1e-6, atol=1e-9 * np.abs(expected).max())
    # ...and the spread of the sigma-point means is a visible part of that covariance.
    assert np.abs(spread).max() > 1e-3 * np.abs(expected).max()


def test_offset_direction_makes_an_early_deviation_persist(tasks, library):
    rng = np.random.default_rng(7)
    demo, _ = tasks[1].execution(rng, speed=1.0, coeffs=np.zeros(3))
    shifted = demo.values + 0.06                       # a taller operator: +6 cm everywhere
    # The mechanism alone: the conditioning noise (x100 by default) and the filter's
    # library floor (which moves the warp estimate of this shifted take) are held at the
    # settings the offset direction was measured with.
    base = EstimatorConfig(offset_fraction=0.0, conditioning_noise_scale=1.0,
                           grid=PhaseGridConfig(library_floor_fraction=0.0))
    errors = {}
    for frac in (0.0, 1.0):
        est = OnlineEstimator(library, replace(base, offset_fraction=frac))
        half = demo.times <= 0.5 * demo.duration
        for t, y in zip(demo.times[half], shifted[half]):
            est.update(t, y)
        mean, _ = est.predict_many(demo.times[~half], task=1)
        errors[frac] = np.sqrt(np.mean((mean - shifted[~half]) ** 2))
    assert errors[1.0] < 0.8 * errors[0.0]


def test_augment_promp_adds_structured_columns(library):
    promp = library.promps[0]
    r = promp.low_rank.shape[2]
    aug = augment_promp(promp, offset=0.5, ramp=0.5, amplitude=0.2)
    assert aug.low_rank.shape == (N_SIGNALS, promp.n_basis, r + 2 * N_SIGNALS + 1)
    np.testing.assert_array_equal(aug.weight_mean, promp.weight_mean)
    assert np.all(aug.var(np.linspace(0, 1, 11)) >= promp.var(np.linspace(0, 1, 11)) - 1e-15)
    assert augment_promp(promp) is promp


def test_augment_promp_directions_have_the_documented_size_and_shape(tasks):
    """Each added direction, checked against the demonstrations themselves: s_d is the RMS
    over the phase of signal d's std across the fitted demos; the offset adds a constant
    variance (offset s_d)^2 at every phase, the ramp one column per signal whose weights are
    ramp s_d (2 clip(c, 0, 1) - 1) at the centres c, the amplitude the variance of a scaling
    of the mean's displacement from its first weight."""
    from promp.learning import fit_weights, learn_promp

    demos = tasks[0].demonstrations(np.random.default_rng(21), 7)
    basis = RBFBasis(20)
    promp = learn_promp(demos, basis)
    z = np.linspace(0.0, 1.0, 101)
    weights = np.array([fit_weights(basis, d.times, d.values)[0] for d in demos])      # (N, D, k)
    trajectories = np.einsum("zk,ndk->nzd", basis(z), weights)
    spread = np.sqrt(np.mean(np.var(trajectories, axis=0, ddof=1), axis=0))             # (D,)
    assert np.all(spread > 1e-3)
    base = promp.var(z)
    offset = augment_promp(promp, offset=0.5)
    np.testing.assert_allclose(offset.var(z) - base, np.broadcast_to((0.5 * spread) ** 2, base.shape),
                               rtol=1e-9, atol=1e-12 * base.max())
    r, D = promp.low_rank.shape[2], N_SIGNALS
    ramp = augment_promp(promp, ramp=0.5)
    assert ramp.low_rank.shape[2] == r + D
    expected = np.zeros((D, basis.n_basis, D))
    expected[np.arange(D), :, np.arange(D)] = (0.5 * spread)[:, None] * (2.0 * np.clip(basis.centres, 0.0, 1.0) - 1.0)
    np.testing.assert_allclose(ramp.low_rank[:, :, r:], expected, rtol=1e-9, atol=1e-12)
    # (its shift runs from about -s_d at the start to +s_d at the end of the motion)
    shift = basis(np.array([0.0, 1.0])) @ expected[0, :, 0] / (0.5 * spread[0])
    np.testing.assert_allclose(shift, [-1.0, 1.0], atol=0.1)
    amplitude = augment_promp(promp, amplitude=0.2)
    displacement = promp.mean(z) - promp.weight_mean[:, 0]
    np.testing.assert_allclose(amplitude.var(z) - base, (0.2 * displacement) ** 2, rtol=1e-9, atol=1e-12 * base.max())
    # Together: independent directions, their variances add up.
    both = augment_promp(promp, offset=0.5, ramp=0.5, amplitude=0.2)
    np.testing.assert_allclose(both.var(z) - base,
                               (offset.var(z) - base) + (ramp.var(z) - base) + (amplitude.var(z) - base),
                               rtol=1e-9, atol=1e-12 * base.max())


def test_conditioning_noise_matches_dense_conditioning(library):
    promp = library.promps[0]
    rng = np.random.default_rng(8)
    z = rng.uniform(0, 0.6, 30)
    y = promp.mean(z) + rng.normal(0, 0.01, (30, N_SIGNALS))
    noise = promp.noise_var * 50.0
    post = StructuredPosterior(promp, noise).condition(promp.basis(z), y)
    dense = promp.condition(z, y, noise_var=noise)
    np.testing.assert_allclose(post.mean_weights, dense.weight_mean, rtol=1e-6, atol=1e-9)
    # The predictive noise term stays the model's own.
    zf = np.linspace(0.7, 1.0, 4)
    _, var = post.predict(promp.basis(zf), include_noise=True, full_cov=False)
    _, var0 = post.predict(promp.basis(zf), include_noise=False, full_cov=False)
    np.testing.assert_allclose(var - var0, np.broadcast_to(promp.noise_var, var.shape), rtol=1e-9)


def test_variance_scale_scales_the_covariance(tasks, library):
    rng = np.random.default_rng(9)
    demo, _ = tasks[0].execution(rng)
    # Without averaging over the remaining speed, whose spread between its nodes is
    # modelled and not scaled (test below).
    a = OnlineEstimator(library, EstimatorConfig(variance_scale=1.0, future_speed_std=0.0))
    b = OnlineEstimator(library, EstimatorConfig(variance_scale=4.0, future_speed_std=0.0))
    for t, y in zip(demo.times[:100], demo.values[:100]):
        a.update(t, y)
        b.update(t, y)
    ma, ca = a.predict_many(demo.times[150:160])
    mb, cb = b.predict_many(demo.times[150:160])
    np.testing.assert_allclose(mb, ma)
    np.testing.assert_allclose(cb, 4.0 * ca)


def test_the_remaining_motion_is_averaged_over_its_speed(tasks, library):
    """future_speed_std: past the newest observation the prediction is the 3-point average
    over the remaining speed; before it nothing changes; both covariance forms agree."""
    rng = np.random.default_rng(4)
    demo, _ = tasks[0].execution(rng)
    plain = OnlineEstimator(library, EstimatorConfig(future_speed_std=0.0))
    spread = OnlineEstimator(library, EstimatorConfig(future_speed_std=0.3))
    for t, y in zip(demo.times[:100], demo.values[:100]):
        plain.update(t, y)
        spread.update(t, y)
    t_n = demo.times[99]
    times = np.concatenate([demo.times[80:100], t_n + np.linspace(0.1, 1.5, 15)])
    m0, v0 = plain.predict_many(times, full_cov=False)
    m1, v1 = spread.predict_many(times, full_cov=False)
    past = times <= t_n
    np.testing.assert_allclose(m1[past], m0[past])
    np.testing.assert_allclose(v1[past], v0[past])
    assert np.abs(m1[~past] - m0[~past]).max() > 1e-4
    # The mixture's mean is the quadrature average of the plain predictions at the
    # three remaining speeds (same warp up to t_n, rate r e^u after it).
    task = spread.filter.best_task()
    warp = spread.filter.time_warp(task)
    z_n = warp.phase(t_n, clip=False)
    nodes = [(0.0, 2 / 3), (np.sqrt(3) * 0.3, 1 / 6), (-np.sqrt(3) * 0.3, 1 / 6)]
    expected = 0.0
    for u, w in nodes:
        z = np.clip(z_n + warp.phase_rate * np.exp(u) * (times[~past] - t_n), 0.0, 1.0)
        expected = expected + w * spread.weight_posterior(task).predict(
            library.promps[task].basis.lookup(z), full_cov=False)[0]
    np.testing.assert_allclose(m1[~past], expected, atol=1e-9)
    # Its variance: the central node's plus the spread of the three means.
    m_nodes = []
    for u, _weight in nodes:
        z = np.clip(z_n + warp.phase_rate * np.exp(u) * (times[~past] - t_n), 0.0, 1.0)
        m_nodes.append(spread.weight_posterior(task).predict(library.promps[task].basis.lookup(z),
                                                             full_cov=False)[0])
    spread_var = sum(w * (m - expected) ** 2 for (_, w), m in zip(nodes, m_nodes))
    central = OnlineEstimator(library, EstimatorConfig(future_speed_std=1e-12))
    for t, y in zip(demo.times[:100], demo.values[:100]):
        central.update(t, y)
    np.testing.assert_allclose(v1[~past], central.predict_many(times, full_cov=False)[1][~past] + spread_var,
                               rtol=1e-6)
    mf, cf = spread.predict_many(times, full_cov=True)
    np.testing.assert_allclose(mf, m1)
    np.testing.assert_allclose(np.diagonal(cf, axis1=1, axis2=2), v1, rtol=1e-9, atol=1e-15)
