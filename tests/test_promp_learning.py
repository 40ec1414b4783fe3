"""Learning (Eqs. 5.5-5.6): mean, full covariance, noise, durations, regularisation."""

import numpy as np
import pytest

from promp.basis import RBFBasis
from promp.learning import CovarianceRegularisation, Demonstration, fit_weights, learn_promp
from promp.synthetic import make_tasks


@pytest.fixture(scope="module")
def demos():
    rng = np.random.default_rng(3)
    task = make_tasks(seed=2, n_tasks=1, n_signals=4, duration=2.0)[0]
    return task.demonstrations(rng, 12, speed_spread=0.25, noise_std=2e-3)


def test_ridge_fit_reconstructs_a_smooth_demo():
    basis = RBFBasis(20)
    t = np.linspace(0, 2, 201)
    y = np.stack([np.sin(2 * t), np.cos(3 * t)], axis=1)
    w, residual = fit_weights(basis, t, y, ridge=1e-12)
    assert w.shape == (2, 20)
    assert np.abs(residual).max() < 1e-3


def test_learned_mean_matches_the_sample_mean_of_the_demos(demos):
    promp = learn_promp(demos, RBFBasis(20))
    z = np.linspace(0, 1, 50)
    sample_mean = np.mean([np.stack([np.interp(z, d.phases, d.values[:, j]) for j in range(4)], 1)
                           for d in demos], axis=0)
    # The model mean is the mean of the fitted trajectories: equal up to the fit error.
    assert np.abs(promp.mean(z) - sample_mean).max() < 5 * np.sqrt(promp.noise_var.max())


def test_durations_speeds_and_noise_are_kept(demos):
    promp = learn_promp(demos, RBFBasis(20))
    np.testing.assert_allclose(promp.durations, [d.duration for d in demos])
    assert promp.duration == pytest.approx(np.mean(promp.durations))
    np.testing.assert_allclose(promp.speeds, promp.duration / promp.durations)
    # White noise of std 2e-3 was added: the residual estimate recovers it.
    np.testing.assert_allclose(np.sqrt(promp.noise_var), 2e-3, rtol=0.15)


def test_full_covariance_is_the_regularised_sample_covariance(demos):
    basis = RBFBasis(10)
    reg = CovarianceRegularisation(relative=0.1, absolute=1e-9)
    promp = learn_promp(demos, basis, regularisation=reg)
    w = np.array([fit_weights(basis, d.times, d.values)[0].ravel() for d in demos])
    sample = np.cov(w, rowvar=False)                                   # 1/(N-1), all signals
    D, k = promp.weight_mean.shape
    blocks = np.array([np.trace(sample[d * k:(d + 1) * k, d * k:(d + 1) * k]) / k for d in range(D)])
    expected = sample + np.diag(np.repeat(0.1 * blocks + 1e-9, k))
    np.testing.assert_allclose(promp.weight_cov, expected, rtol=1e-9, atol=1e-15)
    np.testing.assert_allclose(promp.weight_mean.ravel(), w.mean(axis=0))
    # The cross-signal blocks are non-zero: hands inform posture through them.
    assert np.abs(promp.weight_cov[:k, k:2 * k]).max() > 0


def test_per_signal_model_drops_the_cross_covariance(demos):
    promp = learn_promp(demos, RBFBasis(10), covariance="per_signal")
    full = learn_promp(demos, RBFBasis(10), covariance="full")
    k = 10
    assert np.all(promp.weight_cov[:k, k:] == 0)
    np.testing.assert_allclose(promp.weight_cov[:k, :k], full.weight_cov[:k, :k])


def test_sampling_reproduces_the_model_covariance(demos):
    promp = learn_promp(demos, RBFBasis(12))
    z = np.array([0.2, 0.5, 0.8])
    samples = promp.sample(z, 40000, np.random.default_rng(5), include_noise=True)
    for i, zi in enumerate(z):
        emp = np.cov(samples[:, i, :], rowvar=False)
        model = promp.cov(zi, include_noise=True)
        assert np.linalg.norm(emp - model) / np.linalg.norm(model) < 0.05
        np.testing.assert_allclose(samples[:, i, :].mean(0), promp.mean(zi),
                                   atol=4 * np.sqrt(np.diag(model).max() / 40000))


def test_weight_covariance_is_positive_definite_with_few_demos(demos):
    promp = learn_promp(demos[:3], RBFBasis(20))   # 3 demos, 80 weights
    assert np.linalg.eigvalsh(promp.weight_cov).min() > 0


def test_single_demonstration_gives_a_proper_model(demos):
    promp = learn_promp(demos[:1], RBFBasis(10), regularisation=CovarianceRegularisation(0.0, 1e-4))
    np.testing.assert_allclose(np.diag(promp.weight_cov), 1e-4)


def test_bad_inputs_are_rejected(demos):
    with pytest.raises(ValueError):
        learn_promp([])
    with pytest.raises(ValueError):
        learn_promp(demos, covariance="diagonal")
    with pytest.raises(ValueError):
        Demonstration(np.array([0.0, 0.0, 1.0]), np.zeros((3, 2)))
    with pytest.raises(ValueError):
        learn_promp([demos[0], Demonstration(demos[0].times, demos[0].values[:, :2])])


def test_one_demonstration_with_the_default_regularisation_is_warned_of(demos):
    """It learns a ProMP with a prior std of ~1e-4 that cannot follow anyone (a library
    user got no word of it); with an absolute regularisation given, no warning."""
    import warnings

    from promp.learning import CovarianceRegularisation, SingleDemonstrationWarning

    with pytest.warns(SingleDemonstrationWarning, match="task 'reach': a ProMP learned from one demonstration"):
        learn_promp(demos[:1], label="reach")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        learn_promp(demos[:1], regularisation=CovarianceRegularisation(absolute=1e-3))
        learn_promp(demos[:2])


def test_teleop_train_says_which_tasks_have_one_take(tmp_path, capsys):
    import shutil

    from conftest import SYNTHETIC
    from teleop.cli import main

    (tmp_path / "squat").mkdir()
    shutil.copy(SYNTHETIC / "squat" / "squat_0.npz", tmp_path / "squat")
    shutil.copytree(SYNTHETIC / "reach_forward", tmp_path / "reach_forward")
    assert main(["train", str(tmp_path), "-o", str(tmp_path / "lib.npz")]) == 0
    err = capsys.readouterr().err
    assert "teleop train: warning: squat learned from one take: a task learned from one take has no spread" in err
    assert "SingleDemonstrationWarning" not in err
