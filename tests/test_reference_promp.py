"""The promp package checked equation by equation against the reference, section 5
(/work/shared/reference/penco_whole_body_teleoperation.md: §5.2 model, Eqs. 5.1-5.4; §5.3
learning, Eqs. 5.5-5.6; §5.4 recognition, Eq. 5.7; §5.5 time modulation, Eq. 5.8; §5.6
conditioning, Eqs. 5.9-5.12; §5.9 the Delta-sigma test; §5.10 the pseudocode).

Each test works a case by hand (numbers small enough for paper, written out in the test)
or recomputes the same formula independently with plain numpy (an explicit Kronecker design
matrix, the batch Gaussian conditioning formula, a dense multivariate normal), and compares
it with the implementation. Shapes: D signals, k basis functions, weights signal-major (D*k,).
"""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from promp.basis import RBFBasis
from promp.estimator import EstimatorConfig, OnlineEstimator
from promp.learning import Demonstration, demo_phases, fit_weights, learn_promp
from promp.library import TaskLibrary
from promp.model import ProMP
from promp.ood import DeltaSigmaTest
from promp.phase_filter import PhaseGridConfig, TaskPhaseFilter, TimeWarp, _quad_logdet_batched
from promp.posterior import StructuredPosterior
from promp.synthetic import make_tasks

ROOT = Path(__file__).resolve().parents[1]


# ----------------------------------------------------------------------------- helpers
def _design(basis: RBFBasis, z: float, D: int) -> np.ndarray:
    """(D, D*k) block-diagonal design H = I_D (x) phi(z)^T (the thesis's Phi_t^T), built explicitly."""
    return np.kron(np.eye(D), basis(z)[None, :])


def _design_rows(phi_row: np.ndarray, D: int) -> np.ndarray:
    return np.kron(np.eye(D), phi_row[None, :])


def _batch_information_form(mean: np.ndarray, cov: np.ndarray, rows: list[np.ndarray], values: list[np.ndarray],
                            noise: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Batch Gaussian conditioning of w ~ N(mean, cov) on y = H w + e, e ~ N(0, R), in information
    form: P = cov^-1 + H^T R^-1 H, mean' = P^-1 (cov^-1 mean + H^T R^-1 y). Independent of the
    Kalman-gain form (Eqs. 5.10-5.12) the implementation uses."""
    h = np.vstack(rows)
    y = np.concatenate(values)
    r_inv = np.diag(1.0 / np.concatenate(noise))
    prec = np.linalg.inv(cov) + h.T @ r_inv @ h
    post_cov = np.linalg.inv(prec)
    post_mean = post_cov @ (np.linalg.solve(cov, mean) + h.T @ r_inv @ y)
    return post_mean, 0.5 * (post_cov + post_cov.T)


def _two_basis_model(weight_mean, *, dense_cov=None, block_var=None, noise_var=0.5) -> ProMP:
    """k = 2 basis functions with the thesis's centres 0 and 1 (margin 0): by symmetry
    phi(0.5) = [1/2, 1/2] for any width, which makes the hand computations below short."""
    basis = RBFBasis(2, margin_factor=0.0)
    weight_mean = np.atleast_2d(np.asarray(weight_mean, dtype=float))
    D = weight_mean.shape[0]
    if dense_cov is not None:
        return ProMP(basis, weight_mean, noise_var=np.full(D, noise_var), durations=np.array([1.0]),
                     dense_cov=np.asarray(dense_cov, dtype=float))
    return ProMP(basis, weight_mean, noise_var=np.full(D, noise_var), durations=np.array([1.0]),
                 low_rank=np.zeros((D, 2, 1)), block_var=np.full(D, block_var))


@pytest.fixture(scope="module")
def small_task_demos():
    """7 demonstrations of one synthetic task, 3 signals, about 2 s each."""
    task = make_tasks(seed=11, n_tasks=1, n_signals=3, duration=2.0)[0]
    return task.demonstrations(np.random.default_rng(12), 7)


# --------------------------------------------------------------- Eq. 5.3: the basis
def test_eq_5_3_as_printed_by_hand():
    """Eq. 5.3 as printed: m = 3 centres (c - 1) / (m - 1) = 0, 1/2, 1 and unit width.
    At t = 0 the Gaussians are exp(0), exp(-1/8), exp(-1/2) = 1, 0.8825, 0.6065, divided
    by their sum 2.4890: 0.4018, 0.3546, 0.2437."""
    basis = RBFBasis(3, margin_factor=0.0, width=1.0)
    np.testing.assert_allclose(basis.centres, [0.0, 0.5, 1.0])
    g = np.array([1.0, np.exp(-1 / 8), np.exp(-1 / 2)])
    np.testing.assert_allclose(basis(0.0), g / g.sum(), rtol=1e-12)
    np.testing.assert_allclose(basis(0.0), [0.4018, 0.3546, 0.2437], atol=1e-4)
    # By symmetry the middle phase weighs the two outer functions equally.
    phi = basis(0.5)
    assert phi[0] == pytest.approx(phi[2])
    np.testing.assert_allclose(phi, np.array([np.exp(-1 / 8), 1.0, np.exp(-1 / 8)]) / (1 + 2 * np.exp(-1 / 8)))


def test_eq_5_3_default_basis_is_the_documented_gaussians():
    """Default: 20 Gaussians, std = centre spacing, centres from -std to 1 + std. The
    spacing solves s = (1 + 2 s) / 19, i.e. s = 1/17; every row is the normalised
    exp(-(z - c)^2 / (2 s^2)) (recomputed here), sums to 1, and its derivative matches
    finite differences."""
    basis = RBFBasis()
    s = 1.0 / 17.0
    assert basis.n_basis == 20 and basis.sigma == pytest.approx(s)
    centres = np.linspace(-s, 1.0 + s, 20)
    np.testing.assert_allclose(basis.centres, centres, atol=1e-15)
    assert np.diff(centres)[0] == pytest.approx(s)
    z = np.linspace(0.0, 1.0, 41)
    g = np.exp(-0.5 * ((z[:, None] - centres[None, :]) / s) ** 2)
    np.testing.assert_allclose(basis(z), g / g.sum(axis=1, keepdims=True), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(basis(z).sum(axis=1), 1.0, atol=1e-12)
    h = 1e-6
    np.testing.assert_allclose(basis.derivative(z[1:-1]), (basis(z[1:-1] + h) - basis(z[1:-1] - h)) / (2 * h),
                               atol=1e-5)


def test_phase_normalisation_of_a_demonstration_by_hand():
    """§5.3 / [51]: v = (t - t_0) / (t_end - t_0): times 2, 2.5, 3, 4 s give 0, 1/4, 1/2, 1."""
    np.testing.assert_allclose(demo_phases(np.array([2.0, 2.5, 3.0, 4.0])), [0.0, 0.25, 0.5, 1.0])
    demo = Demonstration(np.array([2.0, 2.5, 3.0, 4.0]), np.zeros(4))
    assert demo.duration == 2.0
    np.testing.assert_allclose(demo.phases, [0.0, 0.25, 0.5, 1.0])


# --------------------------------------------------------------- Eq. 5.5: ridge fit
def test_eq_5_5_ridge_weights_are_the_regularised_normal_equations():
    """w_i = (Phi^T Phi + lambda I)^-1 Phi^T xi_i, recomputed with numpy for a visible
    lambda (1e-2) and for the thesis's 1e-12 (the default)."""
    rng = np.random.default_rng(0)
    basis = RBFBasis(6)
    t = np.sort(rng.uniform(0.0, 1.5, 40))
    y = np.column_stack([np.sin(3 * t), t ** 2])                     # (T, D = 2)
    phi = basis(demo_phases(t))                                      # (T, k)
    for ridge in (1e-2, 1e-12):
        expected = np.linalg.solve(phi.T @ phi + ridge * np.eye(6), phi.T @ y).T     # (D, k)
        w, residual = fit_weights(basis, t, y, ridge)
        np.testing.assert_allclose(w, expected, rtol=1e-8, atol=1e-10)
        np.testing.assert_allclose(residual, y - phi @ expected.T, atol=1e-10)
    assert inspect.signature(fit_weights).parameters["ridge"].default == 1e-12        # the thesis's lambda
    assert inspect.signature(learn_promp).parameters["ridge"].default == 1e-12


def test_eq_5_5_constant_signal_by_hand():
    """The normalised RBFs sum to one, so a constant signal c is fitted exactly by w = c 1."""
    t = np.linspace(0.0, 2.0, 21)
    w, residual = fit_weights(RBFBasis(4), t, np.full(21, 0.7))
    np.testing.assert_allclose(w, np.full((1, 4), 0.7), atol=1e-8)
    assert np.abs(residual).max() < 1e-10


# ---------------------------------------------------- Eq. 5.6: weight mean and covariance
def test_eq_5_6_two_constant_demonstrations_by_hand():
    """Two demonstrations, constant 1 and constant 3, k = 4: weights 1 (1,1,1,1) and
    3 (1,1,1,1). Mean 2 (1,1,1,1). Sample covariance with 1/(N-1) = 1: (w1 - w2)(w1 - w2)^T
    / 2 = 2 * ones(4, 4) (the thesis's 1/D gives 1 * ones: the documented factor N/(N-1)).
    Regulariser eps = 0.3 * mean diag (2) + 1e-8 = 0.6 + 1e-8 on the diagonal."""
    t = np.linspace(0.0, 1.0, 11)
    demos = [Demonstration(t, np.full(11, 1.0)), Demonstration(t, np.full(11, 3.0))]
    promp = learn_promp(demos, RBFBasis(4))
    np.testing.assert_allclose(promp.weight_mean, np.full((1, 4), 2.0), atol=1e-7)
    expected = 2.0 * np.ones((4, 4)) + (0.6 + 1e-8) * np.eye(4)
    np.testing.assert_allclose(promp.weight_cov, expected, atol=1e-6)
    # What the thesis's 1/D would give, for the record of the documented difference.
    w = np.array([np.full(4, 1.0), np.full(4, 3.0)])
    np.testing.assert_allclose(np.cov(w.T, bias=True), np.ones((4, 4)))


def test_eq_5_6_full_and_per_signal_covariance_against_numpy(small_task_demos):
    """mu_w = mean_i w_i and Sigma_w = cov of the stacked (D*k,) weights over the demos
    (np.cov, ddof 1), plus eps_d I_k on each signal's block, eps_d = 0.3 * mean diag(S_dd)
    + 1e-8. "full" keeps every cross-signal block; "per_signal" (the thesis's one ProMP per
    scalar signal) keeps only the diagonal (k x k) blocks."""
    basis = RBFBasis(8)
    w = np.array([fit_weights(basis, d.times, d.values)[0] for d in small_task_demos])   # (N, D, k)
    N, D, k = w.shape
    stacked = w.reshape(N, D * k)
    sample = np.cov(stacked.T, ddof=1)                                                  # (D k, D k)
    eps = np.array([0.3 * np.mean(np.diag(sample)[d * k:(d + 1) * k]) + 1e-8 for d in range(D)])
    full = learn_promp(small_task_demos, basis)
    np.testing.assert_allclose(full.weight_mean, w.mean(axis=0), atol=1e-12)
    np.testing.assert_allclose(full.weight_cov, sample + np.diag(np.repeat(eps, k)),
                               atol=1e-10 * np.abs(sample).max())
    per = learn_promp(small_task_demos, basis, covariance="per_signal")
    blocks = np.zeros_like(sample)
    for d in range(D):
        s = slice(d * k, (d + 1) * k)
        blocks[s, s] = sample[s, s]
    np.testing.assert_allclose(per.weight_cov, blocks + np.diag(np.repeat(eps, k)),
                               atol=1e-10 * np.abs(sample).max())
    # The time-modulation set S_alpha (§5.3.6): alpha_i = T_bar / T_i.
    durations = np.array([d.duration for d in small_task_demos])
    np.testing.assert_allclose(full.speeds, durations.mean() / durations)


# ----------------------------------------------- Eqs. 5.1, 5.2, 5.4: the trajectory model
@pytest.mark.parametrize("covariance", ["full", "per_signal"])
def test_eqs_5_1_to_5_4_trajectory_mean_and_covariance_with_the_explicit_design(small_task_demos, covariance):
    """At phase z: E[xi] = Phi_z mu_w and Cov[xi] = Phi_z Sigma_w Phi_z^T + Sigma_xi (Eq. 5.4,
    the marginal of Eqs. 5.1-5.2), with Phi_z built as I_D (x) phi(z)^T; samples of w
    (Eq. 5.4's integral, by Monte Carlo) have the model's covariance."""
    promp = learn_promp(small_task_demos, RBFBasis(5), covariance=covariance)
    D = promp.n_signals
    for z in (0.0, 0.37, 1.0):
        h = _design(promp.basis, z, D)
        np.testing.assert_allclose(promp.mean(z), h @ promp.weight_mean.ravel(), atol=1e-12)
        cov = h @ promp.weight_cov @ h.T
        np.testing.assert_allclose(promp.cov(z), cov, atol=1e-12 * np.abs(cov).max())
        np.testing.assert_allclose(promp.cov(z, include_noise=True), cov + np.diag(promp.noise_var),
                                   atol=1e-12 * np.abs(cov).max())
        np.testing.assert_allclose(promp.var(z), np.diag(cov), rtol=1e-10)
        if covariance == "per_signal":
            assert np.abs(cov - np.diag(np.diag(cov))).max() < 1e-15      # one independent ProMP per signal
    samples = promp.sample_weights(40000, np.random.default_rng(3)).reshape(40000, -1)
    scale = np.abs(promp.weight_cov).max()
    np.testing.assert_allclose(np.cov(samples.T), promp.weight_cov, atol=0.05 * scale)
    np.testing.assert_allclose(samples.mean(axis=0), promp.weight_mean.ravel(), atol=0.02 * np.sqrt(scale))


# ------------------------------------------------------- Eqs. 5.9-5.12: conditioning
def test_eqs_5_10_to_5_12_one_observation_by_hand():
    """One signal, k = 2, mu_w = 0, Sigma_w = I, observation y = 1 at z = 1/2 (phi = [1/2,
    1/2]) with Sigma*_y = 1/2:
        Phi^T Sigma_w Phi = 1/2,  S = 1/2 + 1/2 = 1,  L = Sigma_w Phi S^-1 = [1/2, 1/2]
        mu^ = 0 + L (1 - 0) = [1/2, 1/2]
        Sigma^ = I - L Phi^T Sigma_w = [[3/4, -1/4], [-1/4, 3/4]]
    and at z = 1/2 the predicted mean is 1/2, the variance phi^T Sigma^ phi = 1/4 (3/4 with
    the observation noise). Dense (sequential Kalman) and structured (information form)."""
    dense = _two_basis_model([[0.0, 0.0]], dense_cov=np.eye(2))
    np.testing.assert_allclose(dense.basis(0.5), [0.5, 0.5])
    post = dense.condition(0.5, np.array([1.0]))
    np.testing.assert_allclose(post.weight_mean, [[0.5, 0.5]], atol=1e-15)
    np.testing.assert_allclose(post.weight_cov, [[0.75, -0.25], [-0.25, 0.75]], atol=1e-15)
    assert post.mean(0.5)[0] == pytest.approx(0.5)
    assert post.var(0.5)[0] == pytest.approx(0.25)
    assert post.var(0.5, include_noise=True)[0] == pytest.approx(0.75)
    structured = _two_basis_model([[0.0, 0.0]], block_var=1.0)
    fast = StructuredPosterior(structured).condition(structured.basis(np.array([0.5])), np.array([[1.0]]))
    np.testing.assert_allclose(fast.mean_weights, [[0.5, 0.5]], atol=1e-15)
    np.testing.assert_allclose(fast.dense_cov(), [[0.75, -0.25], [-0.25, 0.75]], atol=1e-15)
    mean, var = fast.predict(structured.basis(np.array([0.5])), full_cov=False)
    assert mean[0, 0] == pytest.approx(0.5) and var[0, 0] == pytest.approx(0.75)


def test_eqs_5_10_to_5_12_cross_covariance_by_hand():
    """Two signals, k = 2, Sigma_w = [[I, I/2], [I/2, I]] (the signals' weights correlate
    0.5), mu_w = 0; signal 0 observed = 1 at z = 1/2 with Sigma*_y = 1/2, signal 1 not:
        Sigma_w Phi = [1/2, 1/2, 1/4, 1/4]^T, S = 1/2 + 1/2 = 1, L = [1/2, 1/2, 1/4, 1/4]^T
        mu^ = L: signal 1's mean at z = 1/2 moves to 1/4 although it was not observed.
    With the per-signal (thesis) covariance, Sigma_w = I, signal 1 stays at 0."""
    cov = np.block([[np.eye(2), 0.5 * np.eye(2)], [0.5 * np.eye(2), np.eye(2)]])
    coupled = _two_basis_model(np.zeros((2, 2)), dense_cov=cov)
    y, observed = np.array([1.0, np.nan]), np.array([True, False])
    post = coupled.condition(0.5, y, mask=observed)
    np.testing.assert_allclose(post.weight_mean, [[0.5, 0.5], [0.25, 0.25]], atol=1e-15)
    np.testing.assert_allclose(post.mean(0.5), [0.5, 0.25], atol=1e-15)
    gain = np.array([0.5, 0.5, 0.25, 0.25])
    np.testing.assert_allclose(post.weight_cov, cov - np.outer(gain, gain), atol=1e-15)
    separate = _two_basis_model(np.zeros((2, 2)), dense_cov=np.eye(4))
    np.testing.assert_allclose(separate.condition(0.5, y, mask=observed).mean(0.5), np.array([0.5, 0.0]), atol=1e-15)


def test_eqs_5_10_to_5_12_sequential_update_is_the_thesis_formula(small_task_demos):
    """GaussianWeights.update against Eqs. 5.10-5.12 written as printed, with the explicit
    (D k x m) Phi of the observed signals:
        L = Sigma_w Phi (Sigma*_y + Phi^T Sigma_w Phi)^-1
        mu^ = mu_w + L (y* - Phi^T mu_w),  Sigma^ = Sigma_w - L Phi^T Sigma_w,
    applied three times in a row (all signals, then two, then one)."""
    promp = learn_promp(small_task_demos, RBFBasis(6))
    D = promp.n_signals
    rng = np.random.default_rng(5)
    belief = promp.belief()
    mu, sigma = promp.weight_mean.ravel().copy(), promp.weight_cov.copy()
    noise = np.array([1e-3, 4e-3, 2e-3])
    for z, pattern in ((0.2, [True, True, True]), (0.45, [True, False, True]), (0.7, [False, True, False])):
        mask = np.array(pattern)
        y = promp.mean(z) + rng.normal(0.0, 0.03, D)
        belief.update(promp.basis(z), y, mask, noise)
        phi = _design(promp.basis, z, D)[mask].T                         # (D k, m): the thesis's Phi
        gain = sigma @ phi @ np.linalg.inv(np.diag(noise[mask]) + phi.T @ sigma @ phi)
        mu = mu + gain @ (y[mask] - phi.T @ mu)
        sigma = sigma - gain @ phi.T @ sigma
        np.testing.assert_allclose(belief.mean.ravel(), mu, atol=1e-10 * np.abs(mu).max())
        np.testing.assert_allclose(belief.cov, sigma, atol=1e-9 * np.abs(sigma).max())


@pytest.mark.parametrize("covariance", ["full", "per_signal"])
def test_sequential_and_structured_conditioning_equal_the_batch_formula(small_task_demos, covariance):
    """The sequential updates (Eqs. 5.10-5.12, one observation after the other) and the
    structured information form both equal batch Gaussian conditioning on all observations
    at once (information form, computed here with numpy), with masks; and the prediction at
    future phases is Phi_f mu^ and Phi_f Sigma^ Phi_f^T + Sigma_y."""
    promp = learn_promp(small_task_demos, RBFBasis(6), covariance=covariance)
    D = promp.n_signals
    rng = np.random.default_rng(6)
    z = rng.uniform(0.0, 0.6, 12)
    y = promp.mean(z) + rng.normal(0.0, 0.02, (12, D))
    mask = rng.random((12, D)) > 0.3
    mask[:, 0] = True
    noise = promp.noise_var * 100.0                                        # the estimator's Sigma*_y
    rows = [_design(promp.basis, zi, D)[mi] for zi, mi in zip(z, mask)]
    mean, cov = _batch_information_form(promp.weight_mean.ravel(), promp.weight_cov, rows,
                                        [yi[mi] for yi, mi in zip(y, mask)], [noise[mi] for mi in mask])
    sequential = promp.condition(z, np.where(mask, y, np.nan), mask, noise_var=noise)
    fast = StructuredPosterior(promp, noise).condition(promp.basis(z), y, mask)
    scale = np.abs(cov).max()
    for weights, weight_cov in ((sequential.weight_mean, sequential.weight_cov), (fast.mean_weights, fast.dense_cov())):
        np.testing.assert_allclose(weights.ravel(), mean, atol=1e-8 * np.abs(mean).max())
        np.testing.assert_allclose(weight_cov, cov, atol=1e-8 * scale)
    zf = np.array([0.7, 0.85, 1.0])
    pred_mean, pred_cov = fast.predict(promp.basis(zf))
    for i, zi in enumerate(zf):
        h = _design(promp.basis, zi, D)
        np.testing.assert_allclose(pred_mean[i], h @ mean, atol=1e-8)
        np.testing.assert_allclose(pred_cov[i], h @ cov @ h.T + np.diag(promp.noise_var), atol=1e-8 * scale)


def test_estimator_prediction_at_a_future_time_is_the_batch_posterior_at_the_estimated_phases():
    """End to end (§5.10 "condition ProMP_k on all obs at t*", then read mu^ at a later
    index): with the calibration terms off (variance_scale 1, no phase uncertainty, no
    future-speed spread, no added prior directions), OnlineEstimator.predict(t_f) equals
    batch conditioning of the recognised task's learned prior on every stored observation at
    its phase z = speed (t - offset) / T_bar under the estimated warp, with Sigma*_y = 100 x
    the model's noise, read at z(t_f) with the model's own noise added."""
    tasks = make_tasks(seed=21, n_tasks=2, n_signals=3, duration=2.0)
    rng = np.random.default_rng(22)
    library = TaskLibrary.learn({t.label: t.demonstrations(rng, 6) for t in tasks}, basis=RBFBasis(8))
    config = EstimatorConfig(variance_scale=1.0, include_phase_uncertainty=False, future_speed_std=0.0,
                             offset_fraction=0.0, group_amplitude_fraction=0.0,
                             grid=PhaseGridConfig(n_speeds=9, n_offsets=3))
    est = OnlineEstimator(library, config)
    take, _ = tasks[1].execution(rng, speed=1.1, rate_hz=20.0)
    seen = take.times <= 0.8
    for t, y in zip(take.times[seen], take.values[seen]):
        estimate = est.update(t, y)
    assert estimate.task == "task1"
    promp = library["task1"]
    warp = est.time_warp()
    D = promp.n_signals
    # The estimator reads basis rows from its 4001-row table (documented in RBFBasis.lookup).
    phis = promp.basis.lookup(warp.phase(take.times[seen]))
    rows = [_design_rows(p, D) for p in phis]
    noise = promp.noise_var * 100.0
    mean, cov = _batch_information_form(promp.weight_mean.ravel(), promp.weight_cov, rows,
                                        list(take.values[seen]), [noise] * len(rows))
    t_future = 1.3
    h = _design_rows(promp.basis.lookup(warp.phase(np.array([t_future])))[0], D)
    got_mean, got_cov = est.predict(t_future)
    np.testing.assert_allclose(got_mean, h @ mean, atol=1e-8)
    expected_cov = h @ cov @ h.T + np.diag(promp.noise_var)
    np.testing.assert_allclose(got_cov, expected_cov, atol=1e-8 * np.abs(expected_cov).max())


# -------------------------------------------------------- Eq. 5.7: task recognition
def test_eq_5_7_latent_likelihood_equals_the_dense_gaussian_marginal():
    """The filter's score of a (task, speed, offset) hypothesis is the log-density of all its
    evidence under y = m(z) + M(z) a + e, a ~ N(0, I_r), e ~ N(0, diag v(z)), computed in the
    filter by Woodbury from sums. Here it is recomputed directly: the stacked residual of all
    observations (a masked one included) against N(0, M M^T + diag v), with m = Phi mu_w,
    M = Phi U_r (U_r: top r principal directions of the demos' centred weights) and
    v = max(var(z) + noise - |M|^2, noise), at the filter's grid phases; plus the log priors
    of speed and offset, normalised over the grid."""
    tasks = make_tasks(seed=31, n_tasks=2, n_signals=3, duration=2.0)
    rng = np.random.default_rng(32)
    promps = [learn_promp(t.demonstrations(rng, 5), RBFBasis(6)) for t in tasks]
    cfg = PhaseGridConfig(n_speeds=4, n_offsets=3, latent_rank=2, library_floor_fraction=0.0,
                          between_group_variance=False)
    filt = TaskPhaseFilter(promps, cfg)
    take, _ = tasks[0].execution(rng, speed=1.1, rate_hz=10.0)
    obs: list[tuple[float, np.ndarray, np.ndarray | None]] = [
        (t, y, None) for t, y in zip(take.times[:6], take.values[:6])]
    masked = np.array([True, False, True])
    obs.append((take.times[6], take.values[6], masked))
    for t, y, m in obs:
        assert filt.add(t, y, m)
    G = cfg.n_phase_points
    r = 2
    prior = (-0.5 * (np.log(filt.speed_grid)[:, None] / cfg.speed_prior_log_std) ** 2
             - 0.5 * (filt.offset_grid[None, :] / cfg.offset_prior_std) ** 2)
    expected = np.zeros((2, len(filt.speed_grid), len(filt.offset_grid)))
    for k, promp in enumerate(promps):
        u = promp.structure()[0].reshape(promp.n_weights, -1)
        left, sing, _ = np.linalg.svd(u, full_matrices=False)
        u_r = (left[:, :r] * sing[:r]).reshape(promp.n_signals, promp.n_basis, r)
        for i, speed in enumerate(filt.speed_grid):
            for j, offset in enumerate(filt.offset_grid):
                res, lat, var = [], [], []
                for t, y, m in obs:
                    z = np.rint(np.clip(speed * (t - offset) / promp.duration, 0, 1) * (G - 1)) / (G - 1)
                    phi = promp.basis(z)
                    big_m = np.einsum("k,dkr->dr", phi, u_r)                               # (D, r)
                    v = np.maximum(promp.var(z, include_noise=True) - (big_m ** 2).sum(1), promp.noise_var)
                    sel = np.ones(3, bool) if m is None else m
                    res.append((y - promp.mean(z))[sel])
                    lat.append(big_m[sel])
                    var.append(v[sel])
                e, big, v = np.concatenate(res), np.vstack(lat), np.concatenate(var)
                c = big @ big.T + np.diag(v)
                _, logdet = np.linalg.slogdet(2 * np.pi * c)
                expected[k, i, j] = -0.5 * (e @ np.linalg.solve(c, e) + logdet) + prior[i, j]
    expected -= np.log(np.exp(expected - expected.max()).sum()) + expected.max()
    np.testing.assert_allclose(filt.log_posterior(), expected, atol=1e-8)


def test_quad_logdet_batched_against_numpy():
    """eta^T (I + Lambda)^-1 eta and log|I + Lambda| of the likelihood's Woodbury step."""
    rng = np.random.default_rng(7)
    a = rng.normal(size=(5, 3, 3))
    lam = np.einsum("hij,hkj->hik", a, a)                          # (H, r, r) SPD
    eta = rng.normal(size=(5, 3))
    quad, logdet = _quad_logdet_batched(np.ascontiguousarray(lam.transpose(1, 2, 0)), eta.T.copy())
    for h in range(5):
        f = np.eye(3) + lam[h]
        assert quad[h] == pytest.approx(eta[h] @ np.linalg.solve(f, eta[h]), rel=1e-12)
        assert logdet[h] == pytest.approx(np.linalg.slogdet(f)[1], rel=1e-12)


def test_eq_5_7_recognised_task_agrees_with_the_thesis_l1_rule():
    """On clean executions the filter recognises the task the thesis's rule picks:
    argmin_k sum_n sum_t |y_n(t) - Phi_{t / T_bar_k} mu_{n,w_k}| over the first second
    (n_obs ~ 1 s, §5.4.2), ProMPs evaluated at the mean demonstration duration."""
    tasks = make_tasks(seed=41, n_tasks=3, n_signals=4, duration=3.0)
    rng = np.random.default_rng(42)
    library = TaskLibrary.learn({t.label: t.demonstrations(rng, 6) for t in tasks}, basis=RBFBasis(10))
    filt = TaskPhaseFilter(library.promps, PhaseGridConfig(n_speeds=9, n_offsets=3))
    for true in range(3):
        take, _ = tasks[true].execution(rng, speed=1.0, rate_hz=50.0)
        first = take.times <= 1.0
        filt.reset()
        for t, y in zip(take.times[first], take.values[first]):
            filt.add(t, y)
        l1 = [np.abs(take.values[first] - p.mean(p.phase(take.times[first]))).sum() for p in library.promps]
        assert int(np.argmin(l1)) == true
        assert filt.best_task() == true


# ---------------------------------------------------- Eq. 5.8: time modulation
def test_eq_5_8_speed_set_and_warped_phase_by_hand():
    """Durations 2 s and 4 s: T_bar = 3 s, S_alpha = {T_bar / T_i} = {1.5, 0.75}. At speed
    1.5 the phase of t = 1 s is 1.5 * 1 / 3 = 1/2; with the phase-0 offset 0.2 s, t = 1.2 s
    is at 1/2 too and the phase rate is 1.5 / 3 = 0.5 per second."""
    promp = ProMP(RBFBasis(4), np.zeros((1, 4)), noise_var=np.ones(1), durations=np.array([2.0, 4.0]),
                  low_rank=np.zeros((1, 4, 1)), block_var=np.ones(1))
    assert promp.duration == 3.0
    np.testing.assert_allclose(promp.speeds, [1.5, 0.75])
    assert promp.phase(1.0, speed=1.5) == pytest.approx(0.5)
    assert promp.phase(1.2, speed=1.5, offset=0.2) == pytest.approx(0.5)
    assert promp.phase(5.0, speed=1.5) == 1.0 and promp.phase(-1.0) == 0.0          # clipped to [0, 1]
    warp = TimeWarp(1.5, 0.2, 3.0)
    assert warp.phase(1.2) == pytest.approx(0.5) and warp.phase_rate == pytest.approx(0.5)


def test_eq_5_8_continuous_speed_beats_the_discrete_set_outside_it():
    """The thesis picks alpha from S_alpha, the demonstrations' own speeds (here about 0.9
    to 1.1); the filter estimates it continuously. An execution 1.3x faster than the mean
    demonstration: the thesis's argmin over S_alpha (Eq. 5.8, L1 over the first half) can do
    no better than the set's largest value, the filter's estimate is within 5 %."""
    task = make_tasks(seed=53, n_tasks=1, n_signals=4, duration=3.0)[0]
    rng = np.random.default_rng(54)
    demos = [task.execution(rng, speed=s, rate_hz=50.0)[0] for s in (0.9, 0.95, 1.0, 1.05, 1.1)]
    library = TaskLibrary.learn({"task": demos})
    promp = library["task"]
    take, _ = task.execution(rng, speed=1.3, rate_hz=50.0)
    truth = promp.duration / take.duration
    half = take.times <= 0.5 * take.duration
    l1 = [np.abs(take.values[half] - promp.mean(promp.phase(take.times[half], speed=a))).sum() for a in promp.speeds]
    discrete = promp.speeds[int(np.argmin(l1))]
    est = OnlineEstimator(library)
    for t, y in zip(take.times[half], take.values[half]):
        estimate = est.update(t, y)
    assert abs(estimate.speed - truth) < 0.05 * truth
    assert abs(estimate.speed - truth) < abs(discrete - truth)


def test_phase_variance_is_the_grid_posterior_moment_plus_the_grid_step():
    """Var[z(t)] = sum_h p_h (z_h(t) - z^(t))^2 + (z^(t) log_step)^2 / 12 with
    z_h(t) = alpha_h (t - delta_h) / T_bar (unclipped), recomputed over the grid here."""
    tasks = make_tasks(seed=61, n_tasks=2, n_signals=3, duration=2.0)
    rng = np.random.default_rng(62)
    promps = [learn_promp(t.demonstrations(rng, 5), RBFBasis(6)) for t in tasks]
    filt = TaskPhaseFilter(promps, PhaseGridConfig(n_speeds=7, n_offsets=5))
    take, _ = tasks[0].execution(rng, speed=0.9, rate_hz=20.0)
    for t, y in zip(take.times[:12], take.values[:12]):
        filt.add(t, y)
    warp = filt.time_warp(0)
    times = np.array([0.3, 0.8, 1.5, 2.5])
    p = np.exp(filt.log_posterior()[0])
    p /= p.sum()
    alpha, delta = np.meshgrid(filt.speed_grid, filt.offset_grid, indexing="ij")
    z_h = alpha[None] * (times[:, None, None] - delta[None]) / promps[0].duration
    z_hat = warp.phase(times, clip=False)
    step = np.log(filt.speed_grid[1] / filt.speed_grid[0])
    expected = np.einsum("ij,fij->f", p, (z_h - z_hat[:, None, None]) ** 2) + (z_hat * step) ** 2 / 12
    np.testing.assert_allclose(filt.phase_variance(0, times, warp), expected, rtol=1e-9, atol=1e-15)


# ----------------------------------------------------------- §5.3.12: the Delta-sigma test
def test_delta_sigma_threshold_by_hand():
    """One signal, k = 2, mu_w = [1, 1], Sigma_w = 0.02 I: at z = 1/2 the mean is 1 and the
    learned variance phi^T Sigma_w phi = 0.02 / 2 = 0.01, std 0.1 m. Delta_sigma = 1 std +
    5 cm = 0.15 m: |y - 1| = 0.149 is inside, 0.151 outside, on either side; with 2 std,
    0.25 m. The observation noise is not part of the band."""
    promp = _two_basis_model([[1.0, 1.0]], block_var=0.02, noise_var=0.04)
    assert promp.var(0.5)[0] == pytest.approx(0.01)
    test = DeltaSigmaTest(indices=(0,))
    table = test.tabulate(promp)
    for y, outside in ((1.149, False), (0.851, False), (1.151, True), (0.849, True)):
        assert test.is_outside(promp, 0.5, np.array([y])) is outside
        assert table.is_outside(0.5, np.array([y])) is outside
    assert test.excess(promp, 0.5, np.array([1.2]))[0] == pytest.approx(0.05)
    wide = DeltaSigmaTest(indices=(0,), n_std=2.0)
    assert not wide.is_outside(promp, 0.5, np.array([1.249]))
    assert wide.is_outside(promp, 0.5, np.array([1.251]))


def test_delta_sigma_checks_each_hand_axis_separately():
    """§5.9: the test is per trajectory (x, y, z of the hands), not on a norm: two signals
    each 0.1 m off with a 0.15 m band (distance 0.14 m as a vector) stay inside; one
    0.16 m off is outside. Unchecked signals never fire."""
    promp = _two_basis_model(np.ones((3, 2)), block_var=0.02)
    test = DeltaSigmaTest(indices=(0, 1))
    assert not test.is_outside(promp, 0.5, np.array([1.1, 0.9, 1.0]))
    assert test.is_outside(promp, 0.5, np.array([1.0, 1.16, 1.0]))
    assert not test.is_outside(promp, 0.5, np.array([1.0, 1.0, 5.0]))


# ------------------------------------------------------------------ independence
def test_promp_does_not_import_teleop():
    """promp stands alone: no module imports teleop (or retarget), and importing every
    module loads neither."""
    for path in sorted((ROOT / "promp").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            assert not any(n.split(".")[0] in ("teleop", "retarget") for n in names), (path.name, names)
    code = ("import sys, promp, promp.selection, promp.evaluation, promp.synthetic; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('teleop', 'retarget')]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=120)
