"""Normalised Gaussian radial basis functions over the phase z in [0, 1] (thesis Eq. 5.3).

A ProMP represents each scalar signal d as y_d(z) = phi(z)^T w_d, where phi(z) is the
(k,) vector of normalised RBF activations at phase z. With D signals the stacked weight
vector is signal-major: w = [w_0 (k,), w_1 (k,), ..., w_{D-1} (k,)], i.e. the (D*k,)
vector is the row-major flattening of a (D, k) weight matrix. The multi-signal design
matrix of the thesis is the block diagonal Phi_t = I_D (x) phi(z_t)^T; this module never
builds it: every multi-signal product is written on the (D, k) weight matrix instead
(see :func:`signal_means` and :func:`signal_covariances`), which costs O(D k) instead of
O(D^2 k) per phase for the mean and O(D^2 k^2) instead of O(D^3 k^2) for the covariance.

Defaults (measured with :func:`promp.selection.leave_one_out_scores`: learn from all demos
but one, predict the held-out one's second half after observing its first half):
20 basis functions, width = 1.0 x the centre spacing, centres over [0, 1] plus one width of
margin on each side.
- 8 Xsens "put the box aside" demos (hands, 6 signals, 100 Hz): width 1.0 with n_basis in
  {10, 15, 20, 25, 30} gave second-half RMS 5.4 / 4.3 / 4.7 / 4.5 / 4.2 cm (prior mean
  on the same second half: 5.5 cm for every count; the 6.8 cm quoted here before was the
  prior over the whole motion), differences within the fold-to-fold noise of 8 demos;
  fit error 2.6 / 1.7 / 1.4 / 1.2 / 1.1 mm. Width 0.5 gave no better RMS and over-confident
  bands (coverage 0.52); width 1.5 is numerically unstable with the thesis's ridge 1e-12
  (weights blow up, RMS 0.3-1.3 m).
- Synthetic 20-signal tasks (2 tasks x 8 demos, non-linear time warps): n_basis 10
  under-fits (RMS 19 cm), 15 / 20 / 25 all give 2.0 cm.
20 is therefore the smallest count that is safe on both, and the thesis library's value;
the online cost grows as k^2.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Mapping
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

__all__ = ["RBFBasis", "min_n_basis", "signal_means", "signal_covariances", "signal_variances", "LOOKUP_POINTS"]

#: Rows of the phase lookup table of :meth:`RBFBasis.lookup`.
LOOKUP_POINTS = 4001


def min_n_basis(width_factor: float = 1.0, margin_factor: float = 1.0) -> int:
    """The fewest basis functions :class:`RBFBasis` takes with these factors (and no absolute
    ``width``): the spacing solved in ``_compute_sigma`` needs
    ``k - 1 - 2 * margin_factor * width_factor > 0``, i.e. the smallest integer k above
    ``1 + 2 * margin_factor * width_factor`` (and at least 2). With the defaults: 4."""
    return max(2, math.floor(1.0 + 2.0 * margin_factor * width_factor) + 1)


@dataclass(frozen=True)
class RBFBasis:
    """Normalised Gaussian RBFs on the phase interval [0, 1] (Eq. 5.3).

    phi_c(z) = exp(-(z - c_c)^2 / (2 width^2)) / sum_c' exp(-(z - c_c')^2 / (2 width^2))

    The thesis prints Eq. 5.3 with unit width and centres (c - 1) / (m - 1) and gives no m;
    ``RBFBasis(m, margin_factor=0.0, width=1.0)`` is that formula as printed. The default
    width is relative to the centre spacing instead because a unit width on a [0, 1] phase
    makes the m functions nearly equal and the ridge fit of Eq. 5.5 ill-conditioned (the
    printed width is read as a transcription simplification, reference §5.2 [GAP]).

    Attributes:
        n_basis: number k of basis functions per signal.
        width_factor: standard deviation of each Gaussian, in units of the centre spacing.
            Used when ``width`` is None.
        margin_factor: the centres span [-margin, 1 + margin] with margin =
            margin_factor * width, so that the first and last basis functions are not
            cut in half at the ends of the phase interval. 0 gives the thesis centres
            (c - 1) / (m - 1).
        width: absolute standard deviation in phase units; overrides ``width_factor``
            (used to reproduce another library's basis exactly, e.g. movement_primitives).
    """

    n_basis: int = 20
    width_factor: float = 1.0
    margin_factor: float = 1.0
    width: float | None = None
    # Derived in __post_init__ (not parameters: no __init__ argument, not compared).
    _sigma: float = field(init=False, repr=False, compare=False)
    _centres: npt.NDArray[np.floating[Any]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Refused here, not at the first evaluation: an infinite width or a NaN margin gave
        # NaN features (and a library of NaN weights) with no word of why.
        if isinstance(self.n_basis, bool) or not isinstance(self.n_basis, numbers.Integral) or self.n_basis < 2:
            raise ValueError(f"n_basis must be an integer >= 2, got {self.n_basis!r}")
        if self.width is not None and not (math.isfinite(self.width) and self.width > 0):
            raise ValueError(f"width must be finite and > 0, got {self.width}")
        if self.width is None and not (math.isfinite(self.width_factor) and self.width_factor > 0):
            raise ValueError(f"width_factor must be finite and > 0, got {self.width_factor}")
        if not (math.isfinite(self.margin_factor) and self.margin_factor >= 0):
            raise ValueError(f"margin_factor must be finite and >= 0, got {self.margin_factor}")
        # Cached once: the basis is evaluated in the estimator's hot path.
        object.__setattr__(self, "_sigma", self._compute_sigma())
        margin = self.margin_factor * self._sigma
        object.__setattr__(self, "_centres", np.linspace(-margin, 1.0 + margin, self.n_basis))

    # ------------------------------------------------------------------ geometry
    @property
    def sigma(self) -> float:
        """Standard deviation of each Gaussian, in phase units."""
        return self._sigma

    @property
    def centres(self) -> npt.NDArray[np.floating[Any]]:
        """(k,) centres of the Gaussians in phase units."""
        return self._centres.copy()

    def _compute_sigma(self) -> float:
        if self.width is not None:
            return float(self.width)
        # Spacing and width depend on each other through the margin; solve
        # spacing = (1 + 2 * margin_factor * width_factor * spacing) / (k - 1).
        k = self.n_basis
        denom = k - 1 - 2.0 * self.margin_factor * self.width_factor
        if denom <= 0:
            # The values and the smallest count that works: the bare message did not say.
            raise ValueError(f"margin_factor * width_factor too large for n_basis={k} (width_factor "
                             f"{self.width_factor}, margin_factor {self.margin_factor}): needs n_basis >= "
                             f"{min_n_basis(self.width_factor, self.margin_factor)}")
        return self.width_factor / denom

    # ---------------------------------------------------------------- evaluation
    def __call__(self, z: npt.NDArray[np.floating[Any]] | float) -> npt.NDArray[np.floating[Any]]:
        """Activations phi(z): (k,) for a scalar phase, (n, k) for an (n,) array."""
        z_arr = np.asarray(z, dtype=float)
        rows = self._activations(np.atleast_1d(z_arr).ravel())
        return rows[0] if z_arr.ndim == 0 else rows

    def _activations(self, z: npt.NDArray[np.floating[Any]]) -> npt.NDArray[np.floating[Any]]:
        diff = z[:, None] - self._centres[None, :]
        # Subtracting the per-row maximum exponent before exp avoids underflow to 0/0
        # far outside [0, 1]; normalisation makes the shift cancel exactly.
        expo = -0.5 * (diff / self._sigma) ** 2
        expo -= expo.max(axis=1, keepdims=True)
        act = np.exp(expo)
        act /= act.sum(axis=1, keepdims=True)
        return act

    def lookup(self, z: npt.NDArray[np.floating[Any]]) -> npt.NDArray[np.floating[Any]]:
        """(n, k) activations at the (n,) phases, read from a precomputed table.

        The table has ``LOOKUP_POINTS`` rows over [0, 1] (phases are clipped to it) and the
        nearest row is returned: a phase error of at most 1.25e-4, i.e. 0.5 ms of a 4 s
        motion, for a gather instead of n * k exponentials. Used in the estimator's hot path.
        """
        return self._tables()[0][self._table_index(z)]

    def lookup_with_derivative(self, z: npt.NDArray[np.floating[Any]]
                               ) -> tuple[npt.NDArray[np.floating[Any]], npt.NDArray[np.floating[Any]]]:
        """(phi (n, k), d phi / dz (n, k)) read from the tables of :meth:`lookup`."""
        idx = self._table_index(z)
        phi, dphi = self._tables()
        return phi[idx], dphi[idx]

    def _tables(self) -> tuple[npt.NDArray[np.floating[Any]], npt.NDArray[np.floating[Any]]]:
        tables = self.__dict__.get("_lookup_tables")
        if tables is None:
            tables = self.with_derivative(np.linspace(0.0, 1.0, LOOKUP_POINTS))
            object.__setattr__(self, "_lookup_tables", tables)
        return tables

    @staticmethod
    def _table_index(z: npt.NDArray[np.floating[Any]]) -> npt.NDArray[np.intp]:
        z = np.minimum(np.maximum(np.asarray(z, dtype=float), 0.0), 1.0)
        return np.rint(z * (LOOKUP_POINTS - 1)).astype(np.intp)

    def with_derivative(self, z: npt.NDArray[np.floating[Any]]
                        ) -> tuple[npt.NDArray[np.floating[Any]], npt.NDArray[np.floating[Any]]]:
        """(phi (n, k), d phi / dz (n, k)) at the (n,) phases, sharing the exponentials."""
        zz = np.atleast_1d(np.asarray(z, dtype=float))
        phi = self._activations(zz)
        a = -(zz[:, None] - self._centres[None, :]) / self._sigma ** 2
        return phi, phi * (a - np.sum(phi * a, axis=1, keepdims=True))

    def derivative(self, z: npt.NDArray[np.floating[Any]] | float) -> npt.NDArray[np.floating[Any]]:
        """d phi / d z: (k,) for a scalar phase, (n, k) for an (n,) array [1/phase]."""
        z_arr = np.asarray(z, dtype=float)
        zz = np.atleast_1d(z_arr).ravel()
        phi = self._activations(zz)
        # For normalised RBFs phi_c = g_c / sum g: d phi_c = phi_c (a_c - sum_c' phi_c' a_c')
        # with a_c = d log g_c / dz = -(z - c_c) / sigma^2.
        a = -(zz[:, None] - self._centres[None, :]) / self._sigma ** 2
        d = phi * (a - np.sum(phi * a, axis=1, keepdims=True))
        return d[0] if z_arr.ndim == 0 else d

    def to_dict(self) -> dict[str, int | float]:
        """Plain parameters (for saving)."""
        return {"n_basis": int(self.n_basis), "width_factor": float(self.width_factor),
                "margin_factor": float(self.margin_factor),
                "width": float(self.width) if self.width is not None else float("nan")}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "RBFBasis":
        width = float(d["width"])
        try:
            n_basis = int(d["n_basis"])
        except (OverflowError, ValueError) as exc:   # inf / NaN / not a number
            raise ValueError(f"n_basis must be a whole number, got {d['n_basis']!r}") from exc
        return cls(n_basis=n_basis, width_factor=float(d["width_factor"]),
                   margin_factor=float(d["margin_factor"]),
                   width=None if np.isnan(width) else width)


# ----------------------------------------------------------------------------------
# Multi-signal products with the block-diagonal design matrix, without building it.
# ----------------------------------------------------------------------------------
def signal_means(phi: npt.NDArray[np.floating[Any]], weights: npt.NDArray[np.floating[Any]]
                 ) -> npt.NDArray[np.floating[Any]]:
    """Trajectory values Phi(z) w for every phase and signal.

    Args:
        phi: (n, k) basis rows at n phases.
        weights: (D, k) weight matrix (or (n_samples, D, k) for many weight vectors).

    Returns:
        (n, D) values, or (n_samples, n, D).
    """
    return phi @ np.swapaxes(weights, -1, -2)


def signal_covariances(phi: npt.NDArray[np.floating[Any]], weight_cov: npt.NDArray[np.floating[Any]]
                       ) -> npt.NDArray[np.floating[Any]]:
    """Trajectory covariances Phi(z) Sigma_w Phi(z)^T at each phase.

    Args:
        phi: (n, k) basis rows.
        weight_cov: (D*k, D*k) dense weight covariance, signal-major.

    Returns:
        (n, D, D) covariance between the D signals at each phase.
    """
    n, k = phi.shape
    D = weight_cov.shape[0] // k
    c4 = weight_cov.reshape(D, k, D, k)
    # Contract the right basis index first: (D, k, D, n) then the left one.
    right = np.tensordot(c4, phi, axes=([3], [1]))             # (D, k, D, n)
    return np.einsum("nk,akbn->nab", phi, right, optimize=True)


def signal_variances(phi: npt.NDArray[np.floating[Any]], weight_cov: npt.NDArray[np.floating[Any]]
                     ) -> npt.NDArray[np.floating[Any]]:
    """Diagonal of :func:`signal_covariances`: (n, D) marginal variances."""
    n, k = phi.shape
    D = weight_cov.shape[0] // k
    blocks = weight_cov.reshape(D, k, D, k)[np.arange(D), :, np.arange(D), :]  # (D, k, k)
    return np.einsum("nk,dkl,nl->nd", phi, blocks, phi, optimize=True)
