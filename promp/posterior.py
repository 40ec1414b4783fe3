"""Fast exact conditioning of a structured ProMP, in information form (Eqs. 5.9-5.12).

The learned prior is Sigma_w = B + U U^T with B = blockdiag_d(eps_d I_k) and U (D, k, r)
(r = number of demos), coupled across signals, or B + blockdiag_d(U_d U_d^T) per signal
(see :mod:`promp.model`). The observation noise is diagonal, sigma_d^2 per signal.

Conditioning on n observations gives the posterior precision
    P = Sigma_w^-1 + A,   A = blockdiag_d(G_d / sigma_d^2),
    G_d = sum over the observations that include signal d of phi_n phi_n^T   (k x k),
and the posterior mean mu' = mu + P^-1 (b - A mu) with b_d = sum_n phi_n y_nd / sigma_d^2.
This equals the sequential Kalman result of Eqs. 5.10-5.12 applied observation by
observation, in any order (tests check it against :class:`promp.model.GaussianWeights`).

With J = B^-1 + A (block diagonal) and E = J^-1 B^-1 U, Woodbury gives
    P^-1 = J^-1 + E M^-1 E^T,   M = I_r + E^T A U            (r x r),
and signals observed at the same phases share G_d = Q diag(lambda) Q^T, so every
J_d^-1 = Q diag(eps_d / (1 + eps_d lambda / sigma_d^2)) Q^T is diagonal in one common
eigenbasis. Cost of a refresh: one (k x k) eigendecomposition per observation pattern
(usually one: all signals observed), O(n k^2 + n k D) to form G and b, O(D k r^2) for M;
never a (D k) x (D k) matrix. The predictive covariance of the D signals at a phase is
then diagonal + rank r: O(D k r + D^2 r) per phase instead of O(D^2 k^2).

Why information form here: the online estimator re-estimates the speed continuously, so
the phase of every past observation moves at every update and a sequential Kalman filter
would have to be re-run from the prior. The sufficient statistics (G, b) are rebuilt from
the stored observations in O(n k^2), and the order of arrival does not matter.
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np
import numpy.typing as npt

from promp.model import ProMP

__all__ = ["StructuredPosterior"]


class StructuredPosterior:
    """Posterior over the weights of a structured :class:`ProMP` given observations.

    Usage: ``post = StructuredPosterior(promp); post.condition(phi, y, mask)`` then
    ``post.mean_weights``, ``post.predict(phi_future)``. ``condition`` replaces all
    observations; ``add`` appends to them.
    """

    def __init__(self, promp: ProMP, conditioning_noise_var: npt.NDArray[np.floating[Any]] | None = None) -> None:
        """Args:
            promp: the structured prior.
            conditioning_noise_var: (D,) noise variance of the observations conditioned on
                (default: the model's ``noise_var``); the predictive ``include_noise`` term
                is always the model's own ``noise_var``.
        """
        if not promp.structured:
            raise ValueError("StructuredPosterior needs a ProMP with low_rank/block_var structure")
        self.promp = promp
        low_rank, block_var = promp.structure()
        D, k, r = low_rank.shape
        self._D, self._k, self._r = D, k, r
        self._coupled = promp.coupled
        self._mu = promp.weight_mean
        self._u_km = np.ascontiguousarray(low_rank.transpose(1, 0, 2))         # (k, D, r)
        self._mu_km = np.ascontiguousarray(promp.weight_mean.T)                # (k, D)
        cond_noise = promp.noise_var if conditioning_noise_var is None else \
            np.broadcast_to(np.asarray(conditioning_noise_var, dtype=float), (D,)).copy()
        if not np.all((cond_noise > 0) & np.isfinite(cond_noise)):
            # The information form divides by it: 0 gave NaN means and covariances.
            raise ValueError(f"conditioning noise variances must be finite and > 0, got {cond_noise}")
        self._ratio = (block_var / cond_noise)[None, :]                        # eps / sigma^2
        self._eps = block_var
        self._noise = cond_noise
        self._predictive_noise = promp.noise_var
        self.reset()

    # --------------------------------------------------------------- statistics
    def reset(self) -> None:
        """Forget every observation (back to the prior)."""
        self._grams: dict[bytes, npt.NDArray[np.floating[Any]]] = {}     # mask pattern -> (k, k) Gram
        self._b: npt.NDArray[np.floating[Any]] = np.zeros((self._D, self._k))   # sum phi y / sigma^2, per signal
        self._n_obs = 0
        self._solved = False

    @property
    def n_observations(self) -> int:
        return self._n_obs

    def condition(self, phi: npt.NDArray[np.floating[Any]], values: npt.NDArray[np.floating[Any]],
                  mask: npt.NDArray[np.bool_] | None = None) -> "StructuredPosterior":
        """Replace the observations by (phi, values, mask) and return self.

        Args:
            phi: (n, k) basis rows at the observations' phases.
            values: (n, D) observed values (ignored where mask is False).
            mask: (n, D) booleans, True where signal d of row n is observed, or (D,)
                booleans for the signals observed in every row (broadcast over the n rows,
                as :meth:`promp.model.ProMP.condition` takes it); None = everything observed.

        Raises:
            ValueError: phi, values or mask of another shape, or a non-finite value in phi
                or in an observed value (nothing is changed then).
        """
        self.reset()
        return self.add(phi, values, mask)

    def add(self, phi: npt.NDArray[np.floating[Any]], values: npt.NDArray[np.floating[Any]],
            mask: npt.NDArray[np.bool_] | None = None) -> "StructuredPosterior":
        """Add observations (same arguments as :meth:`condition`: phi (n, k), values (n, D),
        mask (n, D) or (D,) or None); order is irrelevant."""
        phi = np.atleast_2d(phi)
        values = np.atleast_2d(values)
        n = phi.shape[0]
        # Exact shapes: (n, 1) values used to broadcast over every signal.
        if phi.shape != (n, self._k) or values.shape != (n, self._D) or \
                (mask is not None and np.shape(mask) not in ((n, self._D), (self._D,))):
            raise ValueError(f"phi ({n}, {self._k}), values ({n}, {self._D}) and mask ({n}, {self._D}) or "
                             f"({self._D},) expected, got {phi.shape}, {values.shape}, "
                             f"{None if mask is None else np.shape(mask)}")
        if n == 0:
            return self
        if mask is not None:
            # A (D,) mask is the same pattern in every row: broadcast, it is the (n, D) mask
            # the rest reads (as a (1, D) array it indexed n rows of phi with one flag).
            mask = np.broadcast_to(np.asarray(mask, dtype=bool), (n, self._D))
        # The contributions first, checked, then added: NaN / inf in phi or in an observed
        # value made every later mean and covariance NaN (or failed in an eigensolver).
        if mask is None or np.all(mask):
            grams = [(self._full_key(), phi.T @ phi)]
            b_add = (values / self._noise).T @ phi
        else:
            weighted = np.where(mask, values, 0.0) / self._noise
            b_add = weighted.T @ phi
            grams = []
            for pattern, rows in _mask_patterns(mask):
                if not pattern.any():
                    continue
                sub = phi if rows is None else phi[rows]
                grams.append((pattern.tobytes(), sub.T @ sub))
        if not (np.all(np.isfinite(b_add)) and all(np.all(np.isfinite(gram)) for _, gram in grams)):
            raise ValueError("phi and the observed values must be finite (they hold NaN or inf)")
        for key, gram in grams:
            self._add_gram(key, gram)
        self._b += b_add
        self._n_obs += n
        self._solved = False
        return self

    def _full_key(self) -> bytes:
        return np.ones(self._D, dtype=bool).tobytes()

    def _add_gram(self, key: bytes, gram: npt.NDArray[np.floating[Any]]) -> None:
        if key in self._grams:
            self._grams[key] = self._grams[key] + gram
        else:
            self._grams[key] = gram

    # ------------------------------------------------------------------- solve
    def _groups(self) -> list[tuple[npt.NDArray[np.intp], npt.NDArray[np.floating[Any]]]]:
        """Signals sharing the same Gram matrix: list of (signal indices, Gram (k, k))."""
        k, D = self._k, self._D
        if not self._grams:
            return [(np.arange(D), np.zeros((k, k)))]
        full = self._full_key()
        if list(self._grams) == [full]:
            return [(np.arange(D), self._grams[full])]
        keys = list(self._grams)
        membership = np.array([np.frombuffer(key, dtype=bool) for key in keys])  # (P, D)
        signatures, inverse = np.unique(membership.T, axis=0, return_inverse=True)
        groups: list[tuple[npt.NDArray[np.intp], npt.NDArray[np.floating[Any]]]] = []
        for g, sig in enumerate(signatures):
            gram = np.zeros((k, k))
            for p in np.flatnonzero(sig):
                gram = gram + self._grams[keys[p]]
            groups.append((np.flatnonzero(inverse.ravel() == g), gram))
        return groups

    def _solve(self) -> None:
        if self._solved:
            return
        D, k, r = self._D, self._k, self._r
        noise, eps = self._noise, self._eps
        # Everything below is "k-major" (eigen index first) so that the products over all
        # signals of a group are plain matrix products on (k, |group| * r) arrays.
        parts = []
        m_sum = np.zeros((r, r))
        corr_sum = np.zeros(r)
        for signals, gram in self._groups():
            lam, q = np.linalg.eigh(gram)
            lam = np.clip(lam, 0.0, None)[:, None]                             # (k, 1)
            every = len(signals) == D
            if every:
                u, n_s, e_s, ratio, mu, b = (self._u_km, noise, eps, self._ratio,
                                             self._mu_km, self._b.T)
            else:
                u, n_s, e_s, ratio = (self._u_km[:, signals], noise[signals], eps[signals],
                                      self._ratio[:, signals])
                mu, b = self._mu_km[:, signals], self._b[signals].T
            qt = q.T
            u_rot = (qt @ u.reshape(k, -1)).reshape(u.shape)                  # Q^T U_d: (k, S, r)
            shrink = 1.0 / (1.0 + ratio * lam)                                # (k, S): eig of J^-1 B^-1
            jinv = e_s * shrink                                               # (k, S): eig of J^-1
            e_rot = shrink[:, :, None] * u_rot                                # Q^T E_d
            info = (lam / n_s) * shrink                                       # (k, S): lam / (sigma^2 + eps lam)
            x_rot = qt @ b - (lam / n_s) * (qt @ mu)                          # Q^T (b - A mu)
            weighted = u_rot * info[:, :, None]
            if self._coupled:
                m_sum += weighted.reshape(-1, r).T @ u_rot.reshape(-1, r)
                corr_sum += e_rot.reshape(-1, r).T @ x_rot.ravel()
                m_part = None
            else:
                m_part = np.eye(r)[None] + np.einsum("ksr,kst->srt", weighted, u_rot)
            parts.append((signals, q, jinv, e_rot, x_rot, m_part))
        if self._coupled:
            m = np.eye(r) + m_sum
            chol = np.linalg.cholesky(0.5 * (m + m.T))
            # (r x r) with r ~ 7: numpy's inv beats scipy's triangular wrappers' overhead.
            inv_chol_t = np.linalg.inv(chol).T                                # C^-T
            a = inv_chol_t @ (inv_chol_t.T @ corr_sum)                        # M^-1 corr
        self._mean = self._mu.copy()
        self._groups_solved = []
        for signals, q, jinv, e_rot, x_rot, m_part in parts:
            if self._coupled:
                low = e_rot @ a                                               # (k, S)
                factor = e_rot @ inv_chol_t                                   # Q^T E C^-T
            else:
                m_part = cast(npt.NDArray[np.floating[Any]], m_part)                # set when not coupled
                chol_s = np.linalg.cholesky(m_part)                           # (S, r, r)
                corr = np.einsum("ksr,ks->sr", e_rot, x_rot)
                a_s = np.linalg.solve(m_part, corr[:, :, None])[:, :, 0]
                low = np.einsum("ksr,sr->ks", e_rot, a_s)
                inv_t = np.linalg.inv(chol_s).transpose(0, 2, 1)              # C_d^-T
                factor = np.einsum("ksr,srt->kst", e_rot, inv_t)
            self._mean[signals] += (q @ (jinv * x_rot + low)).T
            self._groups_solved.append((signals, q, jinv, factor))
        self._solved = True

    # ------------------------------------------------------------------ results
    @property
    def mean_weights(self) -> npt.NDArray[np.floating[Any]]:
        """(D, k) posterior mean weights."""
        self._solve()
        return self._mean

    def predict(self, phi: npt.NDArray[np.floating[Any]], include_noise: bool = True, full_cov: bool = True,
                extra_factor: npt.NDArray[np.floating[Any]] | None = None
                ) -> tuple[npt.NDArray[np.floating[Any]], npt.NDArray[np.floating[Any]]]:
        """Predictive distribution of the D signals at F phases.

        Args:
            phi: (F, k) basis rows at the phases.
            include_noise: add the observation noise Sigma_y (predicting a measurement).
            full_cov: return (F, D, D) covariances; False returns (F, D) variances.
            extra_factor: optional (F, D, c) factor L of an extra covariance L L^T added
                at each phase (e.g. the phase uncertainty), folded into the same product.

        Returns:
            mean (F, D) and cov (F, D, D) or var (F, D).
        """
        phi = np.atleast_2d(phi)
        F, D, r = phi.shape[0], self._D, self._r
        if phi.ndim != 2 or phi.shape[1] != self._k or not np.all(np.isfinite(phi)):
            raise ValueError(f"phi must be finite (F, {self._k}) basis rows, got shape {phi.shape}"
                             + ("" if phi.shape[1:] != (self._k,) else " with NaN or inf"))
        if extra_factor is not None and (np.ndim(extra_factor) != 3 or extra_factor.shape[:2] != (F, D)):
            raise ValueError(f"extra_factor must be ({F}, {D}, c), got shape {np.shape(extra_factor)}")
        self._solve()
        mean = phi @ self._mean.T
        var = np.empty((F, D))
        c = 0 if extra_factor is None else extra_factor.shape[2]
        low = np.empty((F, D, r + c))   # phi^T E_d C^-T: the predictive low-rank factor
        if extra_factor is not None:
            low[:, :, r:] = extra_factor
        for signals, q, jinv, factor in self._groups_solved:
            psi = phi @ q                                                     # (F, k)
            if len(signals) == D:
                var[:] = (psi * psi) @ jinv
                low[:, :, :r] = (psi @ factor.reshape(self._k, -1)).reshape(F, D, r)
            else:
                var[:, signals] = (psi * psi) @ jinv
                low[:, signals, :r] = (psi @ factor.reshape(self._k, -1)).reshape(F, len(signals), r)
        if include_noise:
            var += self._predictive_noise
        if not full_cov:
            return mean, var + np.einsum("fdr,fdr->fd", low, low)
        if not self._coupled:
            # Per-signal model: the posterior low-rank part is block diagonal, only the
            # extra factor couples signals.
            var += np.einsum("fdr,fdr->fd", low[:, :, :r], low[:, :, :r])
            cov = low[:, :, r:] @ low[:, :, r:].transpose(0, 2, 1) if c else np.zeros((F, D, D))
            cov[:, np.arange(D), np.arange(D)] += var
            return mean, cov
        cov = low @ low.transpose(0, 2, 1)
        cov[:, np.arange(D), np.arange(D)] += var
        return mean, cov

    def dense_cov(self) -> npt.NDArray[np.floating[Any]]:
        """(D*k, D*k) posterior weight covariance (for tests and comparisons; O((D k)^2 r))."""
        self._solve()
        D, k, r = self._D, self._k, self._r
        cov = np.zeros((D * k, D * k))
        factors = np.zeros((D, k, r))
        for signals, q, jinv, factor in self._groups_solved:
            for j, d in enumerate(signals):
                s = slice(d * k, (d + 1) * k)
                cov[s, s] += (q * jinv[:, j]) @ q.T                            # J_d^-1
                factors[d] = q @ factor[:, j, :]                               # E_d C^-T
        if self._coupled:
            f = factors.reshape(D * k, r)
            cov += f @ f.T
        else:
            for d in range(D):
                s = slice(d * k, (d + 1) * k)
                cov[s, s] += factors[d] @ factors[d].T
        return cov


def _mask_patterns(mask: npt.NDArray[np.bool_]) -> list[tuple[npt.NDArray[np.bool_], npt.NDArray[np.intp] | None]]:
    """The distinct rows of an (n, D) mask, in lexicographic order (False < True), each with
    the indices of its rows in increasing order (None: every row), as
    ``np.unique(mask, axis=0, return_inverse=True)`` gives them, but cheaply.

    Why: np.unique over the rows sorts n D-byte records; the online estimator rebuilds its
    posterior from every stored observation whenever the speed estimate moves, so with a
    mask (a VR set-up measures the hands and the neck only) a refresh cost 7 ms after 2600
    observations against 0.2 ms without one, and grew with the session. One pattern in
    every row (the VR case) needs no sort at all; otherwise the rows are sorted as integer
    codes (first signal most significant: the same order) and grouped by one stable sort
    instead of one scan of the n rows per pattern. Same rows, same order: identical Grams.
    """
    n, D = mask.shape
    first = mask[0]
    if np.array_equal(mask, np.broadcast_to(first, mask.shape)):
        return [(first, None)]
    if D <= 62:
        codes = mask.astype(np.int64) @ (np.int64(1) << np.arange(D - 1, -1, -1, dtype=np.int64))
        _, index, inverse, counts = np.unique(codes, return_index=True, return_inverse=True, return_counts=True)
    else:
        _, index, inverse, counts = np.unique(mask, axis=0, return_index=True, return_inverse=True,
                                              return_counts=True)
    order = np.argsort(inverse.ravel(), kind="stable")
    return [(mask[i], rows) for i, rows in zip(index, np.split(order, np.cumsum(counts)[:-1]))]
