"""The ProMP of one task: a Gaussian over basis weights, and its conditioning.

Model (thesis Eqs. 5.1-5.4): the D signals at phase z are
    y(z) = Phi(z) w + eps,   w ~ N(mu_w, Sigma_w),   eps ~ N(0, diag(noise_var)),
with Phi(z) = I_D (x) phi(z)^T block diagonal and w the signal-major (D*k,) weight vector
(see :mod:`promp.basis`).

Conditioning (Eqs. 5.9-5.12) is done as a sequential Kalman update in
:class:`GaussianWeights`: observing m of the D signals at one phase costs
O(m D k^2) to form Sigma_w H^T (H is never built: it selects m weight blocks and
contracts them with phi) plus O(m (D k)^2) for the rank-m covariance downdate, and never
inverts a (D k) x (D k) matrix.

Learned models also keep the *structure* of their prior covariance,
    Sigma_w = blockdiag_d(block_var[d] * I_k) + U U^T          (coupled, full covariance)
    Sigma_w = blockdiag_d(block_var[d] * I_k + U_d U_d^T)      (per-signal, as the thesis)
where U (D, k, r) holds the centred demonstration weights / sqrt(N - 1). The online
estimator exploits it (:mod:`promp.posterior`); every result is identical to the dense one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import scipy.linalg  # type: ignore[import-untyped, unused-ignore]  # no stubs unless scipy-stubs is installed

from promp.basis import RBFBasis, signal_covariances, signal_means, signal_variances

__all__ = ["ProMP", "GaussianWeights"]

#: Innovation variances below this fraction of the observed signal's scale (its largest
#: weight variance x |phi|^2) count as zero in :meth:`GaussianWeights.update`: about 1e4 x
#: double rounding, so only a noise-free observation of what the belief already holds.
_SINGULAR_RTOL = 1e-12


@dataclass(eq=False)
class ProMP:
    """Probabilistic movement primitive of one task over D signals.

    Attributes:
        basis: the RBF basis (k functions).
        weight_mean: (D, k) mean weights mu_w.
        noise_var: (D,) observation noise variance Sigma_y per signal [signal unit^2].
        durations: (N,) durations of the demonstrations [s]; their mean is the nominal
            duration T_bar that maps phase 1 to time.
        low_rank: (D, k, r) factor U of the prior covariance, or None (dense model).
        block_var: (D,) isotropic per-signal variance of the prior blocks, or None.
        coupled: True for the full covariance U U^T + blocks (signals inform each
            other), False for the per-signal block-diagonal model of the thesis.
        dense_cov: (D*k, D*k) covariance for models without structure (e.g. after
            dense conditioning), else None.
        signal_names: optional names of the D signals.
        label: optional task label.
        group_var: (D,) variance between the demonstrators' mean trajectories
            [signal unit^2] (:func:`promp.learning.between_group_variance`), or None when
            the demonstrations came from one performer or did not say who.
    """

    basis: RBFBasis
    weight_mean: npt.NDArray[np.floating[Any]]
    noise_var: npt.NDArray[np.floating[Any]]
    durations: npt.NDArray[np.floating[Any]]
    low_rank: npt.NDArray[np.floating[Any]] | None = None
    block_var: npt.NDArray[np.floating[Any]] | None = None
    coupled: bool = True
    dense_cov: npt.NDArray[np.floating[Any]] | None = None
    signal_names: tuple[str, ...] | None = None
    label: str | None = None
    group_var: npt.NDArray[np.floating[Any]] | None = None
    _cov_cache: npt.NDArray[np.floating[Any]] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.weight_mean = np.asarray(self.weight_mean, dtype=float)
        if self.weight_mean.ndim != 2 or self.weight_mean.shape[1] != self.basis.n_basis:
            raise ValueError(f"weight_mean must be (D, {self.basis.n_basis}), got {self.weight_mean.shape}")
        D, k = self.weight_mean.shape
        if D == 0:
            raise ValueError("weight_mean must have at least one signal, got shape (0, k)")
        self.noise_var = np.broadcast_to(np.asarray(self.noise_var, dtype=float), (D,)).copy()
        self.durations = np.atleast_1d(np.asarray(self.durations, dtype=float))
        # NaN fails every comparison, so the range checks below are written to fail on it
        # (np.all(x > 0), not not np.any(x <= 0)) and every array is checked finite once.
        _check_finite(weight_mean=self.weight_mean, noise_var=self.noise_var, durations=self.durations)
        if not np.all(self.durations > 0):
            raise ValueError("durations must be > 0")
        if not np.all(self.noise_var > 0):
            # A zero or negative observation noise variance makes the structured posterior
            # divide by zero (NaN predictions) or lose positive definiteness.
            raise ValueError("noise_var must be > 0")
        if self.dense_cov is None:
            if self.low_rank is None or self.block_var is None:
                raise ValueError("give either dense_cov or (low_rank, block_var)")
            self.low_rank = np.asarray(self.low_rank, dtype=float)
            self.block_var = np.broadcast_to(np.asarray(self.block_var, dtype=float), (D,)).copy()
            if self.low_rank.ndim != 3 or self.low_rank.shape[:2] != (D, k):
                raise ValueError(f"low_rank must be (D, k, r) = ({D}, {k}, r), got {self.low_rank.shape}")
            _check_finite(low_rank=self.low_rank, block_var=self.block_var)
            if not np.all(self.block_var > 0):
                raise ValueError("block_var must be > 0 (regularise the covariance)")
        else:
            self.dense_cov = np.asarray(self.dense_cov, dtype=float)
            if self.dense_cov.shape != (D * k, D * k):
                raise ValueError(f"dense_cov must be ({D * k}, {D * k}), got {self.dense_cov.shape}")
            _check_finite(dense_cov=self.dense_cov)
        if self.group_var is not None:
            self.group_var = np.broadcast_to(np.asarray(self.group_var, dtype=float), (D,)).copy()
            if np.any(self.group_var < 0) or not np.all(np.isfinite(self.group_var)):
                raise ValueError("group_var must be finite and >= 0")
        if self.signal_names is not None and len(self.signal_names) != D:
            raise ValueError(f"signal_names must have one name per signal: got {len(self.signal_names)} "
                             f"for {D} signals")

    # ------------------------------------------------------------------ sizes
    @property
    def n_signals(self) -> int:
        return int(self.weight_mean.shape[0])

    @property
    def n_basis(self) -> int:
        return int(self.weight_mean.shape[1])

    @property
    def n_weights(self) -> int:
        return self.weight_mean.size

    @property
    def structured(self) -> bool:
        """True if the covariance is stored as block_var + low_rank (fast path)."""
        return self.dense_cov is None

    def structure(self) -> tuple[npt.NDArray[np.floating[Any]], npt.NDArray[np.floating[Any]]]:
        """(low_rank (D, k, r), block_var (D,)) of a structured model; ValueError for a
        dense one (``dense_cov``), which has neither."""
        if self.low_rank is None or self.block_var is None:
            raise ValueError("a dense ProMP (dense_cov) has no low_rank / block_var structure")
        return self.low_rank, self.block_var

    # ------------------------------------------------------------------ time
    @property
    def duration(self) -> float:
        """Mean demonstration duration T_bar [s]."""
        return float(np.mean(self.durations))

    @property
    def speeds(self) -> npt.NDArray[np.floating[Any]]:
        """(N,) time-modulation factors alpha_i = T_bar / T_i of the demos (S_alpha, §5.3.6)."""
        return self.duration / self.durations

    def phase(self, t: npt.NDArray[np.floating[Any]] | float, speed: float = 1.0,
              offset: float = 0.0) -> npt.NDArray[np.floating[Any]]:
        """Phase z = speed * (t - offset) / T_bar, clipped to [0, 1].

        Args:
            t: times since motion onset [s].
            speed: execution speed relative to the mean demonstration (1.4 = 40 % faster).
            offset: time [s] at which the motion's phase 0 occurs.
        """
        return np.clip(speed * (np.asarray(t, dtype=float) - offset) / self.duration, 0.0, 1.0)

    # ------------------------------------------------------------------ weights
    @property
    def weight_cov(self) -> npt.NDArray[np.floating[Any]]:
        """(D*k, D*k) dense prior covariance Sigma_w (built once, then cached)."""
        if self.dense_cov is not None:
            return self.dense_cov
        if self._cov_cache is None:
            self._cov_cache = structured_to_dense(*self.structure(), self.coupled)
        return self._cov_cache

    def sample_weights(self, n_samples: int, rng: np.random.Generator) -> npt.NDArray[np.floating[Any]]:
        """(n_samples, D, k) weight vectors drawn from N(mu_w, Sigma_w)."""
        D, k = self.weight_mean.shape
        if self.structured:
            low_rank, block_var = self.structure()
            r = low_rank.shape[2]
            iso = rng.standard_normal((n_samples, D, k)) * np.sqrt(block_var)[None, :, None]
            if self.coupled:
                a = rng.standard_normal((n_samples, r))
                low = np.einsum("dkr,nr->ndk", low_rank, a)
            else:
                a = rng.standard_normal((n_samples, D, r))
                low = np.einsum("dkr,ndr->ndk", low_rank, a)
            return self.weight_mean[None] + iso + low
        chol = _psd_cholesky(self.weight_cov)
        e = rng.standard_normal((n_samples, D * k))
        return self.weight_mean[None] + (e @ chol.T).reshape(n_samples, D, k)

    # ------------------------------------------------------------ trajectories
    def mean(self, z: npt.NDArray[np.floating[Any]] | float) -> npt.NDArray[np.floating[Any]]:
        """Mean trajectory Phi(z) mu_w: (D,) for a scalar phase, (n, D) for (n,) phases."""
        phi = self.basis(np.atleast_1d(z))
        out = signal_means(phi, self.weight_mean)
        return out[0] if np.ndim(z) == 0 else out

    def cov(self, z: npt.NDArray[np.floating[Any]] | float,
            include_noise: bool = False) -> npt.NDArray[np.floating[Any]]:
        """Covariance between signals Phi(z) Sigma_w Phi(z)^T (+ Sigma_y): (D, D) or (n, D, D)."""
        phi = self.basis(np.atleast_1d(z))
        if self.structured:
            low_rank, block_var = self.structure()
            out = np.einsum("nk,d->nd", phi ** 2, block_var)[:, :, None] * np.eye(self.n_signals)
            low = np.einsum("nk,dkr->ndr", phi, low_rank)
            if self.coupled:
                out = out + np.einsum("ndr,ner->nde", low, low)
            else:
                out = out + np.einsum("ndr,ndr->nd", low, low)[:, :, None] * np.eye(self.n_signals)
        else:
            out = signal_covariances(phi, self.weight_cov)
        if include_noise:
            out = out + np.diag(self.noise_var)
        return out[0] if np.ndim(z) == 0 else out

    def var(self, z: npt.NDArray[np.floating[Any]] | float,
            include_noise: bool = False) -> npt.NDArray[np.floating[Any]]:
        """Marginal variances per signal: (D,) or (n, D)."""
        phi = self.basis(np.atleast_1d(z))
        if self.structured:
            low_rank, block_var = self.structure()
            low = np.einsum("nk,dkr->ndr", phi, low_rank)
            out = (phi ** 2).sum(1)[:, None] * block_var[None] + np.einsum("ndr,ndr->nd", low, low)
        else:
            out = signal_variances(phi, self.weight_cov)
        if include_noise:
            out = out + self.noise_var
        return out[0] if np.ndim(z) == 0 else out

    def sample(self, z: npt.NDArray[np.floating[Any]], n_samples: int, rng: np.random.Generator,
               include_noise: bool = False) -> npt.NDArray[np.floating[Any]]:
        """(n_samples, n, D) trajectories sampled at the (n,) phases z (Eq. 5.4)."""
        w = self.sample_weights(n_samples, rng)
        y = signal_means(self.basis(np.atleast_1d(z)), w)
        if include_noise:
            y = y + rng.standard_normal(y.shape) * np.sqrt(self.noise_var)
        return y

    # ------------------------------------------------------------ conditioning
    def belief(self) -> "GaussianWeights":
        """A fresh dense Gaussian belief over the weights, initialised at the prior."""
        return GaussianWeights(self.weight_mean.copy(), self.weight_cov.copy())

    def condition(self, z: npt.NDArray[np.floating[Any]] | float, y: npt.NDArray[np.floating[Any]],
                  mask: npt.NDArray[np.bool_] | None = None,
                  noise_var: npt.NDArray[np.floating[Any]] | float | None = None) -> "ProMP":
        """The ProMP conditioned on observations (Eqs. 5.9-5.12), as a new dense ProMP.

        Args:
            z: phase (scalar) or (n,) phases of the observations.
            y: (D,) or (n, D) observed values (entries where mask is False are ignored).
            mask: (D,) or (n, D) booleans, True where the signal is observed.
            noise_var: observation noise variance Sigma*_y per signal; default the
                model's ``noise_var``. 0 conditions on noise-free via-points.
        """
        noise = self.noise_var if noise_var is None else noise_var
        zz = np.atleast_1d(np.asarray(z, dtype=float))
        yy = np.atleast_2d(np.asarray(y, dtype=float))
        mm = None if mask is None else np.atleast_2d(np.asarray(mask, dtype=bool))
        n, D = len(zz), self.n_signals
        # One row of y per phase, one column per signal: anything else used to be read
        # partially (extra rows or entries ignored, a short mask cycled) without a word.
        if zz.ndim != 1 or yy.shape != (n, D):
            raise ValueError(f"z (n,) and y (n, {D}) disagree: z {np.shape(z)}, y {np.shape(y)}")
        if mm is not None and mm.shape not in ((1, D), (n, D)):
            raise ValueError(f"mask must be ({D},) or ({n}, {D}), got {np.asarray(mask).shape}")
        # NaN / inf were refused only when the result was built, as "weight_mean must be finite".
        if not np.all(np.isfinite(zz)):
            raise ValueError("phases z must be finite")
        if not np.all(np.isfinite(yy if mm is None else np.where(mm, yy, 0.0))):
            raise ValueError("observed values y must be finite where observed (they hold NaN or inf)")
        _check_noise_var(noise, D)
        belief = self.belief()
        phis = self.basis(zz)
        for i in range(len(zz)):
            belief.update(phis[i], yy[i], None if mm is None else mm[i % len(mm)], noise)
        return ProMP(basis=self.basis, weight_mean=belief.mean, noise_var=self.noise_var,
                     durations=self.durations, dense_cov=belief.cov, coupled=self.coupled,
                     signal_names=self.signal_names, label=self.label, group_var=self.group_var)


class GaussianWeights:
    """Dense Gaussian belief N(mean, cov) over signal-major weights, updated like a Kalman filter.

    Attributes:
        mean: (D, k) posterior mean weights.
        cov: (D*k, D*k) posterior covariance.
    """

    def __init__(self, mean: npt.NDArray[np.floating[Any]], cov: npt.NDArray[np.floating[Any]]) -> None:
        self.mean = np.array(mean, dtype=float)
        self.cov = np.array(cov, dtype=float)
        D, k = self.mean.shape
        if self.cov.shape != (D * k, D * k):
            raise ValueError("cov does not match mean")

    def update(self, phi: npt.NDArray[np.floating[Any]], y: npt.NDArray[np.floating[Any]],
               mask: npt.NDArray[np.bool_] | None = None,
               noise_var: npt.NDArray[np.floating[Any]] | float = 0.0) -> None:
        """Condition in place on y_sel = phi^T w_sel + noise at one phase (Eqs. 5.10-5.12).

        Noise-free observations (``noise_var`` 0, via-points) may repeat what the belief
        already holds (two via-points at one phase, conditioning a conditioned model): the
        innovation covariance S = H Sigma H^T is then singular. When its Cholesky factor
        fails or has a pivot below ``_SINGULAR_RTOL`` x the signal's scale (its largest
        weight variance x |phi|^2: the rounding level; a noise variance above it never
        gets here), the update uses a generalised inverse of S instead: the directions of
        S below that level carry no new information and are dropped, the rest is the
        exact update. A repeated via-point then changes nothing; a contradicting one
        (another value at the same phase, no noise) cannot be met and the belief keeps
        the first. The covariance stays exactly symmetric and positive semi-definite up
        to rounding.

        Args:
            phi: (k,) basis row at the observation's phase.
            y: (D,) observation (entries outside ``mask`` are ignored).
            mask: (D,) booleans, True where observed; None = all signals.
            noise_var: scalar or (D,) observation noise variance.
        """
        D, k = self.mean.shape
        if np.shape(phi) != (k,) or np.shape(y) != (D,) or (mask is not None and np.shape(mask) != (D,)):
            raise ValueError(f"phi must be ({k},), y and mask ({D},): got {np.shape(phi)}, {np.shape(y)}, "
                             f"{None if mask is None else np.shape(mask)}")
        if not np.all(np.isfinite(phi)):
            raise ValueError("phi must be finite (it holds NaN or inf)")
        _check_noise_var(noise_var, D)
        sel = np.arange(D) if mask is None else np.flatnonzero(mask)
        if sel.size == 0:
            return
        if not np.all(np.isfinite(y[sel])):
            raise ValueError("y must be finite where observed (it holds NaN or inf)")
        noise = np.broadcast_to(np.asarray(noise_var, dtype=float), (D,))[sel]
        n = D * k
        # Sigma H^T: columns of Sigma belonging to the observed blocks, contracted with phi.
        full = sel.size == D            # no fancy indexing (a full copy) when all are seen
        if full:
            cross = (self.cov.reshape(n * D, k) @ phi).reshape(n, D)       # one gemv
        else:
            cross = self.cov.reshape(n, D, k)[:, sel, :] @ phi             # (n, m)
        # H Sigma H^T: the observed rows of cross, contracted with phi again.
        rows = cross.reshape(D, k, -1)
        innov_cov = (rows if full else rows[sel]).transpose(0, 2, 1) @ phi  # (m, m)
        innov_cov = 0.5 * (innov_cov + innov_cov.T)
        innov_cov[np.diag_indices_from(innov_cov)] += noise
        residual = y[sel] - self.mean[sel] @ phi
        # Each observed signal's scale: its largest weight variance times |phi|^2 (m,).
        scale = np.diag(self.cov).reshape(D, k)[sel].max(axis=1) * float(phi @ phi)
        scale = np.where(scale > 0.0, scale, 1.0)
        try:
            chol = np.linalg.cholesky(innov_cov)
            singular = bool(np.any(np.diag(chol) ** 2 <= _SINGULAR_RTOL * scale))
        except np.linalg.LinAlgError:
            singular = True
        if singular:
            # A generalised inverse of S in the signals' own scales (d = scale^-1/2):
            # S^- = B^T B with B = diag(lambda)^-1/2 V^T diag(d), V diag(lambda) V^T =
            # diag(d) S diag(d), over the eigenvalues above the threshold. Sigma H^T lies
            # in the range of S, so any generalised inverse gives the same update there.
            d = 1.0 / np.sqrt(scale)
            vals, vecs = np.linalg.eigh(innov_cov * d[:, None] * d[None, :])
            keep = vals > _SINGULAR_RTOL
            if not keep.any():
                return                  # nothing the belief does not already hold
            b = (vecs[:, keep] / np.sqrt(vals[keep])).T * d[None, :]
            a, e = b @ cross.T, b @ residual
        else:
            # With S = L L^T and A = L^-1 (Sigma H^T)^T: K e = A^T L^-1 e and
            # K (Sigma H^T)^T = A^T A, a symmetric rank-m downdate (syrk), so the covariance
            # stays exactly symmetric without a (D k)^2 symmetrisation pass.
            a = scipy.linalg.solve_triangular(chol, cross.T, lower=True, check_finite=False)
            e = scipy.linalg.solve_triangular(chol, residual, lower=True, check_finite=False)
        self.mean += (a.T @ e).reshape(D, k)
        self.cov -= a.T @ a


def structured_to_dense(low_rank: npt.NDArray[np.floating[Any]], block_var: npt.NDArray[np.floating[Any]],
                        coupled: bool) -> npt.NDArray[np.floating[Any]]:
    """Dense (D*k, D*k) covariance blockdiag(block_var_d I_k) + U U^T (coupled) or per block."""
    D, k, r = low_rank.shape
    if coupled:
        u = low_rank.reshape(D * k, r)
        cov = u @ u.T
    else:
        cov = np.zeros((D * k, D * k))
        for d in range(D):
            s = slice(d * k, (d + 1) * k)
            cov[s, s] = low_rank[d] @ low_rank[d].T
    cov[np.diag_indices(D * k)] += np.repeat(block_var, k)
    return cov


def _check_noise_var(noise_var: object, n_signals: int) -> None:
    """ValueError unless ``noise_var`` is a scalar or (D,) of finite variances >= 0 (a
    negative one was used as is)."""
    noise = np.asarray(noise_var, dtype=float)
    if noise.shape not in ((), (n_signals,)):
        raise ValueError(f"noise_var must be a scalar or ({n_signals},), got shape {noise.shape}")
    if not np.all(np.isfinite(noise) & (noise >= 0)):
        raise ValueError(f"noise_var must be finite and >= 0, got {noise.tolist()}")


def _check_finite(**arrays: npt.NDArray[np.floating[Any]]) -> None:
    """Raise ValueError naming the first array that holds NaN or inf."""
    for name, value in arrays.items():
        if not np.all(np.isfinite(value)):
            raise ValueError(f"{name} must be finite (it holds NaN or inf)")


def _psd_cholesky(cov: npt.NDArray[np.floating[Any]]) -> npt.NDArray[np.floating[Any]]:
    """Lower factor L with L L^T ~= cov for a positive semi-definite matrix."""
    try:
        return np.linalg.cholesky(cov)
    except np.linalg.LinAlgError:
        vals, vecs = np.linalg.eigh(0.5 * (cov + cov.T))
        return vecs * np.sqrt(np.clip(vals, 0.0, None))
