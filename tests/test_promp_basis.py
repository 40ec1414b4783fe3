"""Basis functions (Eq. 5.3) and the block-diagonal products that avoid building Phi."""

import numpy as np
import pytest

from promp.basis import RBFBasis, signal_covariances, signal_means, signal_variances


def test_activations_are_normalised_and_positive():
    basis = RBFBasis(20)
    phi = basis(np.linspace(-0.2, 1.2, 57))
    assert phi.shape == (57, 20)
    np.testing.assert_allclose(phi.sum(axis=1), 1.0, atol=1e-12)
    assert np.all(phi > 0)


def test_scalar_phase_gives_a_vector():
    assert RBFBasis(7)(0.3).shape == (7,)
    assert RBFBasis(7).derivative(0.3).shape == (7,)


def test_thesis_centres_without_margin():
    np.testing.assert_allclose(RBFBasis(5, margin_factor=0.0).centres, np.linspace(0, 1, 5))


def test_width_is_relative_to_centre_spacing():
    basis = RBFBasis(11, width_factor=1.0, margin_factor=1.0)
    spacing = np.diff(basis.centres)[0]
    assert basis.sigma == pytest.approx(spacing)
    assert basis.centres[0] == pytest.approx(-basis.sigma)


def test_derivative_matches_finite_differences():
    basis = RBFBasis(15, width_factor=0.8)
    z = np.linspace(0.01, 0.99, 31)
    h = 1e-6
    numeric = (basis(z + h) - basis(z - h)) / (2 * h)
    np.testing.assert_allclose(basis.derivative(z), numeric, atol=1e-6)
    phi, dphi = basis.with_derivative(z)
    np.testing.assert_allclose(phi, basis(z))
    np.testing.assert_allclose(dphi, basis.derivative(z))


def test_lookup_table_is_within_its_resolution():
    basis = RBFBasis(20)
    z = np.random.default_rng(0).uniform(0, 1, 200)
    err = np.abs(basis.lookup(z) - basis(z)).max()
    max_slope = np.abs(basis.derivative(np.linspace(0, 1, 2001))).max()
    assert err <= max_slope * 0.5 / 4000 + 1e-12


def test_block_products_equal_the_explicit_kronecker_design():
    rng = np.random.default_rng(1)
    D, k, n = 3, 6, 4
    basis = RBFBasis(k)
    phi = basis(rng.uniform(0, 1, n))
    w = rng.normal(size=(D, k))
    a = rng.normal(size=(D * k, D * k))
    cov = a @ a.T
    for i in range(n):
        big = np.kron(np.eye(D), phi[i][None, :])       # thesis's Phi_t, (D, D k)
        np.testing.assert_allclose(signal_means(phi, w)[i], big @ w.ravel())
        np.testing.assert_allclose(signal_covariances(phi, cov)[i], big @ cov @ big.T, rtol=1e-10)
        np.testing.assert_allclose(signal_variances(phi, cov)[i], np.diag(big @ cov @ big.T), rtol=1e-10)


def test_basis_round_trips_through_its_dict():
    for basis in (RBFBasis(12, 0.7, 0.5), RBFBasis(10, margin_factor=0.0, width=0.03)):
        assert RBFBasis.from_dict(basis.to_dict()) == basis


def test_invalid_parameters_are_rejected():
    with pytest.raises(ValueError):
        RBFBasis(1)
    with pytest.raises(ValueError):
        RBFBasis(5, width=-1.0)


@pytest.mark.parametrize("params, message", [
    (dict(width=float("inf")), "width must be finite"),
    (dict(width=float("nan")), "width must be finite"),
    (dict(width_factor=float("inf")), "width_factor must be finite"),
    (dict(margin_factor=float("nan")), "margin_factor must be finite"),
    (dict(margin_factor=float("inf")), "margin_factor must be finite"),
    (dict(margin_factor=-0.5), "margin_factor must be finite and >= 0"),
    (dict(n_basis=20.5), "n_basis must be an integer"),
    (dict(n_basis=True), "n_basis must be an integer"),
])
def test_basis_parameters_that_give_nan_features_are_refused_when_made(params, message):
    """Before, these were accepted and the features (and every weight learned on them) were NaN."""
    with pytest.raises(ValueError, match=message):
        RBFBasis(**params)


def test_an_integer_numpy_basis_size_is_accepted():
    assert RBFBasis(n_basis=np.int64(12)).n_basis == 12
