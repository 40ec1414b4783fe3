"""Conditioning (Eqs. 5.9-5.12): dense sequential Kalman form and the structured fast path."""

import numpy as np
import pytest

from promp.basis import RBFBasis
from promp.learning import learn_promp
from promp.posterior import StructuredPosterior
from promp.synthetic import make_tasks


@pytest.fixture(scope="module", params=["full", "per_signal"])
def promp(request):
    rng = np.random.default_rng(4)
    task = make_tasks(seed=6, n_tasks=1, n_signals=4, duration=2.0)[0]
    return learn_promp(task.demonstrations(rng, 7), RBFBasis(8), covariance=request.param)


def batch_posterior(promp, z, y, mask, noise):
    """Textbook batch conditioning with the explicit block-diagonal design (Eq. 5.9)."""
    D, k = promp.weight_mean.shape
    rows, obs, var = [], [], []
    for zi, yi, mi in zip(z, y, mask):
        big = np.kron(np.eye(D), promp.basis(zi)[None, :])
        rows.append(big[mi])
        obs.append(yi[mi])
        var.append(noise[mi])
    h, yy, r = np.vstack(rows), np.concatenate(obs), np.diag(np.concatenate(var))
    cov = promp.weight_cov
    gain = cov @ h.T @ np.linalg.inv(h @ cov @ h.T + r)
    return promp.weight_mean.ravel() + gain @ (yy - h @ promp.weight_mean.ravel()), cov - gain @ h @ cov


def test_noise_free_point_is_passed_through_exactly(promp):
    y = promp.mean(0.4) + 0.05
    post = promp.condition(0.4, y, noise_var=0.0)
    np.testing.assert_allclose(post.mean(0.4), y, atol=1e-9)
    assert np.abs(post.cov(0.4)).max() < 1e-9
    # Away from the point the uncertainty remains.
    assert np.all(np.diag(post.cov(0.95)) > 1e-3 * np.diag(promp.cov(0.95)))


def _assert_symmetric_psd(cov, scale):
    np.testing.assert_array_equal(cov, cov.T)
    assert np.linalg.eigvalsh(cov).min() > -1e-12 * scale


def test_repeated_noise_free_via_points_condition_like_one(promp):
    # Before: the second via-point at the same phase (or conditioning the conditioned model
    # again) left a singular innovation covariance and Cholesky raised LinAlgError.
    y = promp.mean(0.5) + 0.05
    scale = np.abs(promp.weight_cov).max()
    once = promp.condition(0.5, y, noise_var=0.0)
    twice = promp.condition([0.5, 0.5], [y, y], noise_var=0.0)
    again = once.condition(0.5, y, noise_var=0.0)
    for post in (twice, again):
        np.testing.assert_allclose(post.weight_mean, once.weight_mean, rtol=0, atol=1e-9 * np.abs(y).max())
        np.testing.assert_allclose(post.dense_cov, once.dense_cov, rtol=0, atol=1e-9 * scale)
        np.testing.assert_allclose(post.mean(0.5), y, atol=1e-9)
        _assert_symmetric_psd(post.dense_cov, scale)
    # Some signals again, with the others: only the new ones inform.
    mask = np.array([True, False, True, False])
    partial = once.condition(0.5, y, mask=mask, noise_var=0.0)
    np.testing.assert_allclose(partial.dense_cov, once.dense_cov, rtol=0, atol=1e-9 * scale)


def test_a_contradicting_noise_free_via_point_keeps_the_first(promp):
    y = promp.mean(0.5) + 0.05
    post = promp.condition([0.5, 0.5], [y, y + 0.1], noise_var=0.0)
    np.testing.assert_allclose(post.mean(0.5), y, atol=1e-9)
    _assert_symmetric_psd(post.dense_cov, np.abs(promp.weight_cov).max())


def test_sequential_updates_equal_the_batch_update(promp):
    rng = np.random.default_rng(8)
    z = rng.uniform(0, 1, 9)
    y = promp.mean(z) + rng.normal(0, 0.05, (9, 4))
    mask = rng.random((9, 4)) > 0.3
    seq = promp.condition(z, y, mask)
    mean, cov = batch_posterior(promp, z, y, mask, promp.noise_var)
    np.testing.assert_allclose(seq.weight_mean.ravel(), mean, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(seq.weight_cov, cov, rtol=1e-6, atol=1e-10 * np.abs(cov).max())


def test_out_of_order_updates_give_the_same_posterior(promp):
    rng = np.random.default_rng(9)
    z = np.sort(rng.uniform(0, 0.6, 12))
    y = promp.mean(z) + rng.normal(0, 0.05, (12, 4))
    a = promp.condition(z, y)
    perm = rng.permutation(12)
    b = promp.condition(z[perm], y[perm])
    np.testing.assert_allclose(a.weight_mean, b.weight_mean, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(a.weight_cov, b.weight_cov, atol=1e-9 * np.abs(a.weight_cov).max())
    s1 = StructuredPosterior(promp).condition(promp.basis(z), y)
    s2 = StructuredPosterior(promp).condition(promp.basis(z[perm][:5]), y[perm][:5])
    s2.add(promp.basis(z[perm][5:]), y[perm][5:])
    np.testing.assert_allclose(s1.mean_weights, s2.mean_weights, rtol=1e-9, atol=1e-12)


def test_structured_posterior_equals_dense_kalman(promp):
    rng = np.random.default_rng(10)
    z = rng.uniform(0, 1, 15)
    y = promp.mean(z) + rng.normal(0, 0.05, (15, 4))
    for mask in (None, rng.random((15, 4)) > 0.4):
        dense = promp.condition(z, y, mask)
        fast = StructuredPosterior(promp).condition(promp.basis(z), y, mask)
        scale = np.abs(dense.weight_cov).max()
        np.testing.assert_allclose(fast.mean_weights, dense.weight_mean, atol=1e-9 * np.abs(dense.weight_mean).max())
        np.testing.assert_allclose(fast.dense_cov(), dense.weight_cov, atol=1e-9 * scale)
        zf = np.linspace(0, 1, 6)
        mean, cov = fast.predict(promp.basis(zf))
        np.testing.assert_allclose(mean, dense.mean(zf), atol=1e-9)
        np.testing.assert_allclose(cov, dense.cov(zf, include_noise=True), atol=1e-9 * np.abs(cov).max())
        _, var = fast.predict(promp.basis(zf), full_cov=False)
        np.testing.assert_allclose(var, np.diagonal(cov, axis1=1, axis2=2), rtol=1e-10)


def test_structured_posterior_without_observations_is_the_prior(promp):
    fast = StructuredPosterior(promp)
    np.testing.assert_allclose(fast.mean_weights, promp.weight_mean)
    np.testing.assert_allclose(fast.dense_cov(), promp.weight_cov, atol=1e-14)


def test_observing_some_signals_informs_the_others_only_with_full_covariance():
    rng = np.random.default_rng(11)
    task = make_tasks(seed=12, n_tasks=1, n_signals=5, duration=2.0)[0]
    demos = task.demonstrations(rng, 10)
    test, _ = task.execution(rng, coeffs=np.array([2.0, -2.0, 1.5]))
    half = test.phases <= 0.5
    mask = np.zeros((half.sum(), 5), dtype=bool)
    mask[:, :2] = True                                 # only signals 0 and 1 are seen
    errors = {}
    for cov in ("full", "per_signal"):
        promp = learn_promp(demos, RBFBasis(15), covariance=cov)
        post = StructuredPosterior(promp).condition(promp.basis(test.phases[half]), test.values[half], mask)
        mean, _ = post.predict(promp.basis(test.phases[~half]))
        errors[cov] = np.sqrt(np.mean((mean[:, 2:] - test.values[~half, 2:]) ** 2))
    assert errors["full"] < 0.5 * errors["per_signal"]
