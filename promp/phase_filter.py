"""Task recognition and continuous speed/phase estimation on a likelihood grid.

The thesis recognises the task with an L1 distance to each ProMP's mean (Eq. 5.7) and then
picks the speed alpha once from the demonstrations' discrete set S_alpha (Eq. 5.8). Here
every task k carries a grid of time-modulation hypotheses h = (speed alpha, offset delta),
    z(t) = alpha (t - delta) / T_bar_k,
and each hypothesis accumulates the exact marginal log-likelihood of the evidence under a
*latent* model of the task:
    y(z) = m_k(z) + M_k(z) a + e,   a ~ N(0, I_r),   e ~ N(0, diag v_k(z)),
where m_k = Phi mu_w is the ProMP mean, M_k = Phi U_r the top r principal directions of the
demonstrations' weight covariance, and v_k the rest (observation noise, the isotropic
regulariser and the dropped principal directions). The latent a absorbs how *this*
execution differs from the mean (a higher lift, a wider reach) so that the timing is
judged on the shape, not on a fixed offset; with r = 0 this reduces to a variance-weighted
version of the thesis's distance to the mean.

Why not the thesis's rules as printed: Eq. 5.8 fixes alpha once, from the few speeds of the
demonstrations (S_alpha), which the thesis itself lists as a limitation (§5.5): an operator
faster or slower than every demonstration, or one who changes speed, keeps a wrong phase
for the rest of the motion (tests/test_reference_promp.py: at 1.3x, S_alpha's best is 1.11,
this filter 1.31). The L1 distance of Eq. 5.7 weighs a signal that varies a lot between
demonstrations as much as one that never does and gives no probability; the likelihood
weighs each by its learned variance and gives the task probabilities the estimator reports.
M_k comes from the demonstrations' joint weights (U of :mod:`promp.model`) for a per-signal
ProMP too: the filter scores the shape the demonstrations share across signals, while the
per-signal choice applies to the weight posterior (conditioning) only.

Sufficient statistics per hypothesis (Woodbury):
    Lambda = sum M^T W M (r x r), eta = sum M^T W (y - m), q = sum (y - m)^T W (y - m),
    log p(Y | h) = -1/2 [q - eta^T (I + Lambda)^-1 eta + log|I + Lambda| + sum log|2 pi W^-1|].
All terms are sums over observations, so arrival order does not matter. Per observation
they cost one (K G r, D) table product (precomputed M^T W on a phase grid of G points) and
O(H r^2) gathers for the H live hypotheses; evaluating the posterior costs one vectorised
(r x r) elimination over all hypotheses.

Evidence rate: consecutive samples at 100 Hz are strongly correlated (the residual that the
latent model cannot explain is smooth), so counting each as independent evidence would make
the posterior absurdly over-confident. The filter therefore takes at most one observation
per 1 / ``evidence_rate_hz`` time bucket of the operator clock (the one with the earliest
time stamp, whatever the arrival order); the weight posterior still uses every observation.

Continuous estimate: inside the most probable task, the grid log-posterior is interpolated
by local parabolas along log(alpha) and delta and (default ``speed_estimate="smooth"``) its
posterior mean is taken, or (``"map"``) the parabola-refined maximum, so the speed
estimate is continuous, not one of the grid values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence, cast

import numpy as np
import numpy.typing as npt

from promp.model import ProMP

__all__ = ["PhaseGridConfig", "TaskPhaseFilter", "TimeWarp"]

_LOG_2PI = float(np.log(2.0 * np.pi))


#: One observation (t, y (D,), mask (D,) or None) as the filter keeps it.
_Observation = tuple[float, npt.NDArray[np.floating[Any]], npt.NDArray[np.bool_] | None]

#: The speed estimates :class:`PhaseGridConfig` offers (see its ``speed_estimate``).
SPEED_ESTIMATES = ("smooth", "mean", "map")


@dataclass(frozen=True)
class PhaseGridConfig:
    """Grid and likelihood settings of :class:`TaskPhaseFilter`.

    Every default was measured, in rounds, on the Xsens leave-one-out, synthetic executions
    with non-linear time warps and the HDM05 cross-performer folds: latent rank 4, a 33 x 9
    (speed, offset) grid with the "smooth" estimate, no pruning, the between-performer
    variance where the library measured it (else a floor of 0.15 of the tasks' spread), no
    regulariser in the likelihood. The figures, and the settings tried and dropped, are in
    docs/promp_tuning.md ("Phase filter"; "the fourth round" and the like in the comments
    below are its sections).

    Attributes:
        speed_range: (min, max) execution speed relative to the mean demonstration.
        n_speeds: grid points, log-spaced over speed_range.
        offset_range: (min, max) time [s] of phase 0 relative to the detected onset.
        n_offsets: grid points over offset_range.
        n_phase_points: resolution G of the precomputed phase tables over [0, 1].
        latent_rank: r, number of principal directions of the demos kept as latent.
        evidence_rate_hz: at most one observation per 1/rate seconds enters the filter.
        speed_prior_log_std: std of the log-normal prior on the speed (centred on 1).
        offset_prior_std: std [s] of the Gaussian prior on the offset (centred on 0).
        residual_fraction: the independent residual variance of the latent model is at
            least this fraction of the task's marginal variance (robustness to motions
            outside the demonstrations' span).
        library_floor_fraction: ... and at least (this fraction x the signal's std over all
            the library's task means) squared: a signal never counts as more precise than a
            fraction of how much it differs between tasks (third round in docs/promp_tuning.md, "Phase filter").
        speed_estimate: "smooth" (default): posterior mean of (log speed, offset) under
            the grid log-posterior interpolated by local parabolas, a continuous function of
            the evidence (see :meth:`TaskPhaseFilter.warp_distribution` for its covariance);
            "mean": posterior mean of (log speed, offset) while the posterior is wider than
            one grid step, then the parabola-refined MAP (this switch is itself a jump);
            "map": always the refined MAP. "mean" measured slightly better than "map" at a
            quarter of the motion (Xsens leave-one-out RMS 9.4 vs 9.7 cm, synthetic worst
            speed error 18 vs 20 %) and identical later; "smooth" is about as accurate as
            "mean" (hands, remaining part after 1/4 / 1/2 observed, 17 x 5 grid: synthetic
            LOO 2.38 / 1.89 vs 2.41 / 1.85 cm, Xsens LOO 2.75 / 1.92 vs 2.62 / 1.86 cm)
            and does not jump.
        prune_log_ratio: a task whose log-probability falls this far below the best
            one stops being updated (posterior frozen at ~0) ... (default inf: never, see
            above; a finite value saves filter time with large libraries)
        min_evidence_for_pruning: ... once at least this many evidence samples arrived.
        between_group_variance: when the library's tasks carry a measured between-performer
            variance (:attr:`promp.model.ProMP.group_var`, learned from demonstrations
            that name their performer), the residual variance of every task is the
            demonstrations' own variance (without the isotropic regulariser) plus that
            variance averaged over the tasks, instead of the regularised variance floored
            by ``library_floor_fraction`` (fourth round in docs/promp_tuning.md, "Phase filter"). Libraries without it
            (one performer, e.g. the Xsens demos) keep the floor. False: always the floor.
        down_weighted_signals: names (``ProMP.signal_names``) of signals whose residual
            variance in the likelihood is multiplied by ``down_weight_factor``: signals
            that say more about who performs the motion than about which task it is (the
            CoM, the neck: sixth round in docs/promp_tuning.md, "Estimator"). Default () (none), also
            on the robot station: it raised recognition but not the compensated error
            (``teleop.prescient.compensator.CompensatorConfig.estimator``).
        down_weight_factor: the factor (> 0) on those signals' residual variance.
    """

    speed_range: tuple[float, float] = (0.5, 2.0)
    n_speeds: int = 33
    offset_range: tuple[float, float] = (-0.2, 0.2)
    n_offsets: int = 9
    n_phase_points: int = 201
    latent_rank: int = 4
    evidence_rate_hz: float = 20.0
    speed_prior_log_std: float = 0.5
    offset_prior_std: float = 0.15
    residual_fraction: float = 0.0
    speed_estimate: str = "smooth"
    prune_log_ratio: float = float("inf")
    min_evidence_for_pruning: int = 10
    library_floor_fraction: float = 0.15
    between_group_variance: bool = True
    down_weighted_signals: tuple[str, ...] = ()
    down_weight_factor: float = 10.0

    def __post_init__(self) -> None:
        """ValueError naming the field for settings that cannot work: they failed deep in
        numpy (``n_speeds=0``, a negative speed) or, worse, silently gave wrong numbers (a
        misspelt ``speed_estimate`` fell back to the MAP; ``evidence_rate_hz=0`` counted one
        observation as evidence, ever)."""
        lo, hi = self.speed_range
        if not 0 < lo <= hi < math.inf:
            raise ValueError(f"speed_range must be 0 < low <= high (finite), got {self.speed_range}")
        lo, hi = self.offset_range
        if not -math.inf < lo <= hi < math.inf:
            raise ValueError(f"offset_range must be low <= high (finite), got {self.offset_range}")
        for name, least in (("n_speeds", 1), ("n_offsets", 1), ("n_phase_points", 2), ("latent_rank", 0),
                            ("min_evidence_for_pruning", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least:
                raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")
        for name in ("evidence_rate_hz", "speed_prior_log_std", "offset_prior_std"):
            value = getattr(self, name)
            if not 0 < value < math.inf:
                raise ValueError(f"{name} must be a positive finite number, got {value!r}")
        if not 0 <= self.residual_fraction <= 1:
            raise ValueError(f"residual_fraction must be in [0, 1], got {self.residual_fraction!r}")
        if not 0 <= self.library_floor_fraction < math.inf:
            raise ValueError(f"library_floor_fraction must be >= 0, got {self.library_floor_fraction!r}")
        if self.speed_estimate not in SPEED_ESTIMATES:
            raise ValueError(f"speed_estimate must be one of {', '.join(SPEED_ESTIMATES)}, "
                             f"got {self.speed_estimate!r}")
        if not self.prune_log_ratio > 0:
            raise ValueError(f"prune_log_ratio must be > 0 (inf: no pruning), got {self.prune_log_ratio!r}")

    def signal_factors(self, signal_names: Sequence[str] | None, n_signals: int) -> npt.NDArray[np.floating[Any]]:
        """(D,) factor on each signal's residual variance in the likelihood (1 = unchanged):
        ``down_weight_factor`` on the ``down_weighted_signals``.

        Raises ValueError if signals are named but the library has no signal names or
        lacks one of them (a misconfiguration, not something to skip silently).
        """
        factors = np.ones(n_signals)
        if not self.down_weighted_signals:
            return factors
        if self.down_weight_factor <= 0:
            raise ValueError(f"down_weight_factor must be > 0, got {self.down_weight_factor}")
        if signal_names is None:
            raise ValueError("down-weighted signals are named, but the library's ProMPs have no signal names")
        names = list(signal_names)
        unknown = [n for n in self.down_weighted_signals if n not in names]
        if unknown:
            raise ValueError(f"down-weighted signals {unknown} are not among the library's signals {names}")
        factors[[names.index(n) for n in self.down_weighted_signals]] = self.down_weight_factor
        return factors

    def speeds(self) -> npt.NDArray[np.floating[Any]]:
        """(n_speeds,) speeds spaced evenly in log; one speed is the range's geometric middle
        (as one offset is the middle of its range; it was the range's low end, 0.5)."""
        lo, hi = self.speed_range
        if self.n_speeds == 1:
            return np.array([math.sqrt(lo * hi)])
        return np.exp(np.linspace(np.log(lo), np.log(hi), self.n_speeds))

    def offsets(self) -> npt.NDArray[np.floating[Any]]:
        lo, hi = self.offset_range
        return np.linspace(lo, hi, self.n_offsets) if self.n_offsets > 1 else np.array([0.5 * (lo + hi)])


@dataclass(frozen=True)
class TimeWarp:
    """Estimated mapping z(t) = speed (t - offset) / duration of one task.

    Attributes:
        speed: execution speed relative to the mean demonstration.
        offset: time [s] of phase 0 on the observation clock.
        duration: the task's mean demonstration duration T_bar [s].
    """

    speed: float = 1.0
    offset: float = 0.0
    duration: float = 1.0

    def phase(self, t: npt.NDArray[np.floating[Any]] | float, clip: bool = True) -> npt.NDArray[np.floating[Any]]:
        z = self.speed * (np.asarray(t, dtype=float) - self.offset) / self.duration
        # minimum/maximum: np.clip's wrapper costs more than the arithmetic here.
        return np.minimum(np.maximum(z, 0.0), 1.0) if clip else z

    @property
    def phase_rate(self) -> float:
        """dz/dt [1/s]."""
        return self.speed / self.duration


class TaskPhaseFilter:
    """Posterior over (task, speed, offset) from a stream of observations.

    Args:
        promps: the K task models (same number of signals D).
        config: grid and likelihood settings.
        task_log_prior: (K,) log prior over tasks (default uniform).
    """

    def __init__(self, promps: Sequence[ProMP], config: PhaseGridConfig = PhaseGridConfig(),
                 task_log_prior: npt.NDArray[np.floating[Any]] | None = None) -> None:
        if not promps:
            raise ValueError("need at least one task")
        D = promps[0].n_signals
        if any(p.n_signals != D for p in promps):
            raise ValueError("all tasks must have the same signals")
        self.config = config
        self.n_tasks = K = len(promps)
        self.n_signals = D
        self.durations = np.array([p.duration for p in promps])
        self.speed_grid = config.speeds()
        self.offset_grid = config.offsets()
        self._build_tables(promps)
        ns, no = len(self.speed_grid), len(self.offset_grid)
        # Hypothesis h = (speed i, offset j), flattened as i * n_offsets + j.
        self._alpha_h = np.repeat(self.speed_grid, no)                     # (H0,)
        self._delta_h = np.tile(self.offset_grid, ns)                      # (H0,)
        log_speed = np.log(self.speed_grid)
        prior = (-0.5 * (log_speed[:, None] / config.speed_prior_log_std) ** 2
                 - 0.5 * (self.offset_grid[None, :] / config.offset_prior_std) ** 2)
        self._grid_log_prior = (prior - _logsumexp(prior.ravel())).ravel()  # (H0,)
        self._log_step = float(np.log(self.speed_grid[1] / self.speed_grid[0])) if ns > 1 else 0.0
        if task_log_prior is None:
            task_log_prior = np.full(K, -np.log(K))
        self._task_log_prior = np.asarray(task_log_prior, dtype=float)
        if self._task_log_prior.shape != (K,) or np.any(np.isnan(self._task_log_prior)):
            # A longer prior used to be cut to its first K entries without a word.
            raise ValueError(f"task_log_prior must be ({K},) log-probabilities, got shape {self._task_log_prior.shape}")
        if np.any(self._task_log_prior == np.inf) or not np.any(np.isfinite(self._task_log_prior)):
            # +inf or no finite entry made every posterior NaN.
            raise ValueError("task_log_prior must be log-probabilities (< +inf), at least one finite, got "
                             f"{self._task_log_prior.tolist()}")
        self.reset()

    # ----------------------------------------------------------------- tables
    def _build_tables(self, promps: Sequence[ProMP]) -> None:
        """Precompute, on a grid of G phases z in [0, 1], per task k, the terms of the
        Woodbury likelihood of the module docstring (W = diag 1/v, M = Phi U_r):

        * ``_m_tab`` (K, G, D): the mean m_k(z); ``_w_tab`` (K, G, D): the precision W;
          ``_lat_tab`` (K, G, D, r): the latent directions M;
        * q (K, G, r*r): M^T W M, the observation's share of Lambda;
        * ``_p_tab`` (K, G, r, D): M^T W, which turns y into its share of eta;
        * bv (K, G, r): M^T W m, eta's constant part;
        * c (K, G): m^T W m, and ld (K, G): sum log(2 pi v), q's constant and log|2 pi W^-1|.

        Stored flat over (k, g) (``_q_flat``, ``_bv_flat``, ``_c_flat``, ``_ld_flat``) for the
        per-observation gathers."""
        cfg = self.config
        G = cfg.n_phase_points
        z = np.linspace(0.0, 1.0, G)
        ranks = [p.structure()[0].shape[2] if p.structured else 0 for p in promps]   # low_rank is (D, k, r)
        r = max(0, min(cfg.latent_rank, max(ranks)))
        self.rank = r
        K, D = len(promps), promps[0].n_signals
        q_tab = np.zeros((K, G, r * r))
        p_tab = np.zeros((K, G, r, D))
        bv_tab = np.zeros((K, G, r))
        c_tab = np.zeros((K, G))
        ld_tab = np.zeros((K, G))
        m_tab = np.zeros((K, G, D))
        w_tab = np.zeros((K, G, D))
        lat_tab = np.zeros((K, G, D, r))
        # Library-wide scale of each signal: std over tasks and phases of the task means.
        lib_std = np.std(np.concatenate([p.basis(z) @ p.weight_mean.T for p in promps]), axis=0)
        floor = (cfg.library_floor_fraction * lib_std) ** 2
        # Measured between-performer variance (D,), averaged over the tasks that have it.
        measured = [p.group_var for p in promps if p.group_var is not None]
        between = np.mean(measured, axis=0) if (cfg.between_group_variance and measured) else None
        self.between_group_var = between
        # Signals that say more about the performer than about the task (see the sixth
        # round): their residual variance is inflated so they cannot decide alone.
        style = cfg.signal_factors(promps[0].signal_names, D)
        for t, promp in enumerate(promps):
            phi = promp.basis(z)                                        # (G, k)
            mean = phi @ promp.weight_mean.T                            # (G, D)
            var_total = promp.var(z, include_noise=True)                # (G, D)
            if between is not None and promp.structured:
                # The demos' own variance: the isotropic regulariser is phase-independent,
                # so it would make a broad task broad even at phase 0 where every take is
                # at rest (the Occam-factor failure of the fourth round); the unmodelled
                # variation it stood in for is now the measured between-performer part.
                _, block_var = promp.structure()                        # (D,)
                var_total = var_total - (phi ** 2).sum(1)[:, None] * block_var[None]
            lat = np.zeros((G, D, r))
            if r and promp.structured:
                low_rank, _ = promp.structure()                         # (D, k, r)
                u = low_rank.reshape(promp.n_weights, -1)
                left, sing, _ = np.linalg.svd(u, full_matrices=False)
                keep = min(r, len(sing))
                u_r = (left[:, :keep] * sing[:keep]).reshape(D, promp.n_basis, keep)
                lat[:, :, :keep] = np.einsum("gk,dkr->gdr", phi, u_r)
            # What the latent does not explain stays as independent residual variance.
            resid = np.maximum(var_total - np.einsum("gdr,gdr->gd", lat, lat),
                               np.maximum(cfg.residual_fraction * var_total, promp.noise_var))
            if between is None:
                resid = np.maximum(resid, floor[None, :])
            else:
                resid = resid + between[None, :]
            resid = resid * style[None, :]
            w = 1.0 / resid
            lat_tab[t], m_tab[t], w_tab[t] = lat, mean, w
            q_tab[t] = np.einsum("gdr,gd,gds->grs", lat, w, lat).reshape(G, r * r)
            p_tab[t] = np.einsum("gdr,gd->grd", lat, w)
            bv_tab[t] = np.einsum("grd,gd->gr", p_tab[t], mean)
            c_tab[t] = np.einsum("gd,gd->g", w, mean * mean)
            ld_tab[t] = np.sum(np.log(resid), axis=1) + D * _LOG_2PI
        self._G = G
        self._q_flat = np.ascontiguousarray(q_tab.reshape(K * G, r * r).T)   # (r*r, K*G)
        self._p_tab = p_tab                                                 # (K, G, r, D)
        self._bv_flat = np.ascontiguousarray(bv_tab.reshape(K * G, r).T)    # (r, K*G)
        self._c_flat = c_tab.ravel()
        self._ld_flat = ld_tab.ravel()
        self._m_tab, self._w_tab, self._lat_tab = m_tab, w_tab, lat_tab
        self._wm_tab = w_tab * m_tab                                        # (K, G, D)

    # ----------------------------------------------------------------- state
    def reset(self) -> None:
        """Forget all evidence."""
        K, H0, r = self.n_tasks, len(self._alpha_h), self.rank
        self._lam = np.zeros((r * r, K * H0))
        self._eta = np.zeros((r, K * H0))
        self._quad = np.zeros(K * H0)
        self._logdet_noise = np.zeros(K * H0)
        self.alive = np.ones(K, dtype=bool)
        self._buckets: dict[int, _Observation] = {}
        # Every distinct observation at each bucket's earliest time stamp: the bucket's
        # representative is computed from them all (:func:`_representative`).
        self._ties: dict[int, list[_Observation]] = {}
        self.n_evidence = 0
        self._log_post: npt.NDArray[np.floating[Any]] | None = None
        self._warps: dict[int, TimeWarp] = {}
        self._moments: dict[int, npt.NDArray[np.floating[Any]]] = {}
        self._warp_moments: dict[int, tuple[npt.NDArray[np.floating[Any]], npt.NDArray[np.floating[Any]]]] = {}
        self._task_probs: npt.NDArray[np.floating[Any]] | None = None

    def add(self, t: float, y: npt.NDArray[np.floating[Any]], mask: npt.NDArray[np.bool_] | None = None) -> bool:
        """Offer one observation; returns True if it became evidence.

        Each 1/evidence_rate_hz bucket of the time axis holds one representative: the
        observation with the earliest time stamp. A late packet that is earlier than the
        current representative replaces it (its statistics are subtracted, the new ones
        added), so the evidence depends on the set of observations, not on their order.
        Distinct observations with the same time stamp are ranked by :func:`_tie_key`
        (the one with more observed signals, then a fixed order of the values), not by
        arrival; those whose masks share no signal are parts of one sample, merged into one
        observation (only the first part counted before).

        Invalid input (t not finite, y not (D,) or not finite where observed, mask not (D,))
        raises ValueError before anything changes: a late packet's replacement used to
        subtract the bucket's representative and then fail on the new one.

        Args:
            t: time since motion onset [s] (operator clock).
            y: (D,) observed values.
            mask: (D,) booleans, True where observed (None = all).
        """
        t = float(t)
        scaled = t * self.config.evidence_rate_hz
        if not math.isfinite(scaled):
            raise ValueError(f"observation time t must be finite (and t x evidence_rate_hz too), got {t}")
        if np.shape(y) != (self.n_signals,):
            raise ValueError(f"observation y must have shape ({self.n_signals},), got {np.shape(y)}")
        if mask is not None:
            mask = as_mask(mask, self.n_signals)
            if not mask.any():
                return False
        y = np.asarray(y, dtype=float)
        if not np.all(np.isfinite(y if mask is None else y[mask])):
            raise ValueError("observation y has non-finite values (NaN or inf) where observed")
        bucket = int(math.floor(scaled))
        current = self._buckets.get(bucket)
        new: _Observation = (t, np.array(y, dtype=float), None if mask is None else np.array(mask, dtype=bool))
        if current is not None and t > current[0]:
            return False
        if current is not None and t == current[0]:
            # Another observation of the representative's time stamp. The representative is
            # recomputed from all of them, not merged into or compared with the current
            # one: that was order-dependent when parts of one sample (disjoint masks) came
            # with an overlapping version (A = hands, B = neck, C = hands + neck with other
            # values: A, B, C kept A+B or C by value, C, A, B kept C; A, A', B kept A'+B or
            # A+B by arrival).
            ties = self._ties[bucket]
            key = _tie_key(new[1], new[2])
            if any(_tie_key(o[1], o[2]) == key for o in ties):
                return False
            if new[2] is None:
                # A full observation merges with none and is the only candidate it seeds, so
                # of the full ones only the first by _tie_key can win: one is kept. Each tie
                # kept re-runs _representative (quadratic): a client whose time stamp stalls
                # sent ~1000 of them before the robot refuses its samples (800: 33 ms an update).
                full = next((i for i, o in enumerate(ties) if o[2] is None), None)
                if full is not None:
                    if not key < _tie_key(ties[full][1], None):
                        return False
                    del ties[full]
            ties.append(new)
            rep = _representative(ties)
            if _tie_key(rep[1], rep[2]) == _tie_key(current[1], current[2]):
                return False
            new = rep
        else:
            self._ties[bucket] = [new]
        if current is not None:
            self._accumulate(*current, sign=-1.0)
            self.n_evidence -= 1
        self._buckets[bucket] = new
        self._accumulate(*new)
        self.n_evidence += 1
        self._log_post = None
        return True

    def _hypothesis_columns(self) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
        """(alive task id per live hypothesis, flat state column of each)."""
        H0 = len(self._alpha_h)
        tasks = np.flatnonzero(self.alive)
        cols = (tasks[:, None] * H0 + np.arange(H0)[None, :]).ravel()
        return tasks, cols

    def _accumulate(self, t: float, y: npt.NDArray[np.floating[Any]], mask: npt.NDArray[np.bool_] | None,
                    sign: float = 1.0) -> None:
        G, H0 = self._G, len(self._alpha_h)
        tasks, cols = self._hypothesis_columns()
        rate = self._alpha_h[None, :] / self.durations[tasks][:, None]      # (Ka, H0)
        z = np.clip(rate * (t - self._delta_h[None, :]), 0.0, 1.0)
        g = np.rint(z * (G - 1)).astype(np.intp)
        flat = (tasks[:, None] * G + g).ravel()                            # table rows
        full = mask is None or np.all(mask)
        if full:
            # y-dependent table terms for the live tasks, for the whole phase grid at once.
            every = len(tasks) == self.n_tasks          # avoid copying the tables
            a = (self._p_tab if every else self._p_tab[tasks]) @ y          # (Ka, G, r)
            ywy = (self._w_tab if every else self._w_tab[tasks]) @ (y * y)  # (Ka, G)
            ywm = (self._wm_tab if every else self._wm_tab[tasks]) @ y
            local = (np.arange(len(tasks))[:, None] * G + g).ravel()
            quad = ywy.ravel()[local] - 2.0 * ywm.ravel()[local] + self._c_flat[flat]
            if self.rank:
                a_h = a.reshape(-1, self.rank)[local].T                     # (r, H)
                self._lam[:, cols] += sign * self._q_flat[:, flat]
                self._eta[:, cols] += sign * (a_h - self._bv_flat[:, flat])
            self._logdet_noise[cols] += sign * self._ld_flat[flat]
        else:
            # Missing signals: rebuild the per-hypothesis terms with the masked weights.
            msk = np.asarray(mask, dtype=bool)
            kk, gg = np.repeat(tasks, H0), g.ravel()
            lat = self._lat_tab[kk, gg][:, msk, :]                          # (H, m, r)
            w = self._w_tab[kk, gg][:, msk]
            res = y[msk][None, :] - self._m_tab[kk, gg][:, msk]
            if self.rank:   # rank 0: no latent terms (and reshape(0, -1) of nothing fails)
                self._lam[:, cols] += sign * np.einsum("hdr,hd,hds->rsh", lat, w, lat).reshape(self.rank ** 2, -1)
                self._eta[:, cols] += sign * np.einsum("hdr,hd->rh", lat, w * res)
            quad = np.einsum("hd,hd->h", w, res * res)
            self._logdet_noise[cols] += sign * (np.sum(-np.log(w), axis=1) + msk.sum() * _LOG_2PI)
        self._quad[cols] += sign * quad

    # ------------------------------------------------------------- posterior
    def log_posterior(self) -> npt.NDArray[np.floating[Any]]:
        """(K, n_speeds, n_offsets) normalised log-posterior over the grid (-inf for pruned tasks)."""
        if self._log_post is None:
            self._log_post = self._compute_log_posterior()
            self._warps = {}
            self._moments = {}
            self._warp_moments = {}
            self._task_probs = None
        return self._log_post

    def _compute_log_posterior(self) -> npt.NDArray[np.floating[Any]]:
        K, H0, r = self.n_tasks, len(self._alpha_h), self.rank
        tasks, cols = self._hypothesis_columns()
        ll = -0.5 * (self._quad[cols] + self._logdet_noise[cols])
        if r:
            lam = self._lam[:, cols].reshape(r, r, -1)
            quad_red, logdet = _quad_logdet_batched(lam, self._eta[:, cols])
            ll += 0.5 * (quad_red - logdet)
        out = np.full((K, H0), -np.inf)
        out[tasks] = ll.reshape(len(tasks), H0) + self._grid_log_prior[None, :] \
            + self._task_log_prior[tasks][:, None]
        out -= _logsumexp(out[tasks].ravel())
        if self.n_evidence >= self.config.min_evidence_for_pruning and len(tasks) > 1:
            task_lp = _logsumexp_rows(out[tasks])
            dead = tasks[task_lp < task_lp.max() - self.config.prune_log_ratio]
            if dead.size:
                self.alive[dead] = False
                out[dead] = -np.inf
                out -= _logsumexp(out[self.alive].ravel())
        return out.reshape(K, len(self.speed_grid), len(self.offset_grid))

    def task_probabilities(self) -> npt.NDArray[np.floating[Any]]:
        """(K,) posterior probability of each task."""
        lp = self.log_posterior().reshape(self.n_tasks, -1)
        if self._task_probs is None:
            with np.errstate(invalid="ignore"):
                self._task_probs = np.nan_to_num(np.exp(_logsumexp_rows(lp)))
        return self._task_probs.copy()

    def best_task(self) -> int:
        return int(np.argmax(self.task_probabilities()))

    def time_warp(self, task: int | None = None) -> TimeWarp:
        """Continuous (speed, offset) estimate of a task (default: the most probable one), as
        :attr:`PhaseGridConfig.speed_estimate` says (default "smooth": interpolated posterior
        mean, not the MAP)."""
        task = self.best_task() if task is None else task
        lp = self.log_posterior()[task]
        cached = self._warps.get(task)
        if cached is None:
            cached = self._warps[task] = self._refine(task, lp)
        return cached

    def _refine(self, task: int, lp: npt.NDArray[np.floating[Any]]) -> TimeWarp:
        if not np.isfinite(lp).any():
            return TimeWarp(1.0, 0.0, float(self.durations[task]))
        log_speed = np.log(self.speed_grid)
        if self.config.speed_estimate == "smooth":
            # Posterior mean of (log speed, offset) under the log-posterior interpolated
            # between the grid points by local parabolas (4 sub-steps per grid step and
            # axis). It is a continuous function of the evidence: a wide posterior gives its
            # mean, a posterior sharper than one grid step gives (nearly) the parabola peak,
            # and nothing switches between the two, so the warp, hence the prediction, moves
            # smoothly when the evidence moves the peak from one grid cell to the next.
            fine = _upsample_quadratic(_upsample_quadratic(lp, 0, _SUBSTEPS), 1, _SUBSTEPS)
            p = np.exp(fine - fine.max())
            p /= p.sum()
            ls = np.interp(np.linspace(0, len(log_speed) - 1, fine.shape[0]),
                           np.arange(len(log_speed)), log_speed)
            offs = np.interp(np.linspace(0, len(self.offset_grid) - 1, fine.shape[1]),
                             np.arange(len(self.offset_grid)), self.offset_grid)
            pa, po = p.sum(axis=1), p.sum(axis=0)
            m_ls, m_off = float(pa @ ls), float(po @ offs)
            d_ls, d_off = ls - m_ls, offs - m_off
            cov = np.array([[pa @ d_ls ** 2, d_ls @ p @ d_off], [0.0, po @ d_off ** 2]])
            cov[1, 0] = cov[0, 1]
            self._warp_moments[task] = (np.array([m_ls, m_off]), cov)
            return TimeWarp(float(np.exp(m_ls)), m_off, float(self.durations[task]))
        if self.config.speed_estimate == "mean":
            # Posterior mean of (log speed, offset) while the posterior is wider than a
            # grid step: early in a motion the MAP jumps between far-apart speeds, the
            # mean stays near the prior until the evidence agrees.
            p = np.exp(lp - lp.max())
            p /= p.sum()
            pa = p.sum(axis=1)
            mean_log = float(pa @ log_speed)
            spread = float(np.sqrt(max(pa @ (log_speed - mean_log) ** 2, 0.0)))
            if spread > self._log_step:
                return TimeWarp(float(np.exp(mean_log)), float(p.sum(axis=0) @ self.offset_grid),
                                float(self.durations[task]))
        i, j = (int(v) for v in np.unravel_index(np.argmax(lp), lp.shape))
        li = _parabola_peak(lp[:, j], i)
        lj = _parabola_peak(lp[i, :], j)
        speed = float(np.exp(np.interp(li, np.arange(len(log_speed)), log_speed)))
        offset = float(np.interp(lj, np.arange(len(self.offset_grid)), self.offset_grid)) \
            if len(self.offset_grid) > 1 else float(self.offset_grid[0])
        return TimeWarp(speed, offset, float(self.durations[task]))

    def warp_distribution(self, task: int | None = None
                          ) -> tuple[npt.NDArray[np.floating[Any]], npt.NDArray[np.floating[Any]]]:
        """Posterior mean (2,) and covariance (2, 2) of (log speed, offset) of a task.

        Computed by the "smooth" estimate (interpolated grid posterior, see
        :attr:`PhaseGridConfig.speed_estimate`); for the other estimates, the plain grid
        moments around the point estimate.
        """
        task = self.best_task() if task is None else task
        warp = self.time_warp(task)
        mom = self._warp_moments.get(task)
        if mom is None:
            lp = self.log_posterior()[task]
            if not np.isfinite(lp).any():
                mom = (np.array([np.log(warp.speed), warp.offset]), np.zeros((2, 2)))
            else:
                p = np.exp(lp - lp.max())
                p /= p.sum()
                d_ls = np.log(self.speed_grid) - np.log(warp.speed)
                d_off = self.offset_grid - warp.offset
                cov = np.array([[p.sum(1) @ d_ls ** 2, d_ls @ p @ d_off], [0.0, p.sum(0) @ d_off ** 2]])
                cov[1, 0] = cov[0, 1]
                mom = (np.array([np.log(warp.speed), warp.offset]), cov)
            self._warp_moments[task] = mom
        return mom

    def phase_variance(self, task: int, times: npt.NDArray[np.floating[Any]],
                       warp: TimeWarp) -> npt.NDArray[np.floating[Any]]:
        """(F,) posterior variance of the phase z(t) around ``warp``, inside one task.

        E[(z_h(t) - z_hat(t))^2] over the grid posterior (z_h is linear in t, so five
        cached moments of (alpha, delta) give it for any times), plus the grid's own
        quantisation: a posterior sitting on one cell still leaves +-half a step.
        """
        # The posterior first: it clears the moments cached before the latest evidence.
        lp = self.log_posterior()
        mom = self._moments.get(task)
        if mom is None:
            p = np.exp(lp[task].ravel())
            total = p.sum()
            if not total > 0:
                return np.zeros(len(times))
            p = p / total
            a, d = self._alpha_h, self._delta_h
            mom = self._moments[task] = np.array([p @ a, p @ (a * d), p @ (a * a),
                                                  p @ (a * a * d), p @ (a * a * d * d)])
        e_a, e_ad, e_aa, e_aad, e_aadd = mom
        t = np.asarray(times, dtype=float)
        T = self.durations[task]
        z_hat = warp.phase(t, clip=False)
        mean_z = (e_a * t - e_ad) / T
        second = (e_aa * t * t - 2.0 * e_aad * t + e_aadd) / (T * T)
        spread = np.maximum(second - 2.0 * z_hat * mean_z + z_hat * z_hat, 0.0)
        return spread + (z_hat * self._log_step) ** 2 / 12.0


# ----------------------------------------------------------------------------- helpers
def as_mask(mask: object, n_signals: int) -> npt.NDArray[np.bool_]:
    """An observation mask as (D,) booleans; ValueError for another shape or for values
    other than booleans or 0 / 1 (NaN, 0.5 and strings converted to True)."""
    array = np.asarray(mask)
    if array.shape != (n_signals,):
        raise ValueError(f"mask must have shape ({n_signals},), got {array.shape}")
    if array.dtype != bool:
        if array.dtype.kind not in "iuf" or not np.all((array == 0) | (array == 1)):
            raise ValueError(f"mask must hold booleans (True where the signal is observed), got {array.tolist()!r}")
        array = array.astype(bool)
    return array


def _disjoint(a: npt.NDArray[np.bool_] | None, b: npt.NDArray[np.bool_] | None) -> bool:
    """Whether two observation masks share no signal (None: every signal)."""
    return a is not None and b is not None and not np.any(np.logical_and(a, b))


def _merged(current: _Observation, y: npt.NDArray[np.floating[Any]], mask: npt.NDArray[np.bool_]
            ) -> tuple[npt.NDArray[np.floating[Any]], npt.NDArray[np.bool_] | None]:
    """(values, mask) of the observation ``current`` (t, y, mask) and ``(y, mask)`` of the
    same time stamp and disjoint masks, as one; the mask None when it covers every signal."""
    _, y_current, mask_current = current
    mask = np.asarray(mask, dtype=bool)
    union = mask | cast(npt.NDArray[np.bool_], mask_current)      # not None: the masks are disjoint
    return np.where(mask, y, y_current), (None if union.all() else union)


def _representative(ties: list[_Observation]) -> _Observation:
    """The one observation that stands for the distinct observations ``ties`` of one time
    stamp, a function of the set (not of the order of arrival).

    Observations whose masks share no signal are parts of one sample and are merged (the
    hands and the head sent apart are one observation of both). For each observation as a
    seed, in :func:`_tie_key` order, the others are merged into it in that order whenever
    they share no signal with what is merged so far; of these candidates the one ranked
    first by :func:`_tie_key` (the most observed signals first) stands for them.
    """
    ranked = sorted(ties, key=lambda o: _tie_key(o[1], o[2]))
    best: _Observation | None = None
    for seed in ranked:
        cand = seed
        for other in ranked:
            if other is not seed and _disjoint(other[2], cand[2]):
                y, mask = _merged(cand, other[1], cast(npt.NDArray[np.bool_], other[2]))
                cand = (cand[0], y, mask)
        if best is None or _tie_key(cand[1], cand[2]) < _tie_key(best[1], best[2]):
            best = cand
    return cast(_Observation, best)


def _tie_key(y: npt.NDArray[np.floating[Any]], mask: npt.NDArray[np.bool_] | None
             ) -> tuple[int, tuple[bool, ...], tuple[float, ...]]:
    """Rank of an observation among those with the same time stamp (smaller wins).

    More observed signals first, then the mask and the observed values in a fixed
    (lexicographic) order: any total order makes the bucket's representative a function
    of the set of observations, not of which one arrived first.
    """
    observed = np.ones(len(y), dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
    values = np.where(observed, np.asarray(y, dtype=float), 0.0)
    return (-int(observed.sum()), tuple((~observed).tolist()), tuple(values.tolist()))


def _quad_logdet_batched(lam: npt.NDArray[np.floating[Any]], eta: npt.NDArray[np.floating[Any]]
                         ) -> tuple[npt.NDArray[np.floating[Any]], npt.NDArray[np.floating[Any]]]:
    """eta^T (I + Lambda)^-1 eta and log|I + Lambda| for H small SPD systems at once.

    Args:
        lam: (r, r, H) Lambda matrices (hypothesis index last, so every slice used in
            the elimination is contiguous).
        eta: (r, H) vectors.

    Returns:
        (H,) quadratic forms and (H,) log-determinants.
    """
    r = lam.shape[0]
    f = lam.copy()
    f[np.arange(r), np.arange(r)] += 1.0
    e = eta.copy()
    quad = np.zeros(f.shape[2])
    logdet = np.zeros(f.shape[2])
    # Gaussian elimination without pivoting (the matrices are SPD): after step j the
    # pivot f[j, j] is the j-th diagonal entry of the LDL^T factorisation.
    for j in range(r):
        piv = f[j, j]
        scaled = e[j] / piv
        quad += scaled * e[j]
        logdet += np.log(piv)
        if j + 1 < r:
            col = f[j + 1:, j]
            f[j + 1:, j + 1:] -= col[:, None, :] * (col / piv)[None, :, :]
            e[j + 1:] -= col * scaled
    return quad, logdet


_SUBSTEPS = 4


def _upsample_quadratic(values: npt.NDArray[np.floating[Any]], axis: int, factor: int) -> npt.NDArray[np.floating[Any]]:
    """Values on a grid ``factor`` times finer along ``axis`` (end points kept).

    Each fine point takes the parabola through its nearest grid node and that node's two
    neighbours (a straight line at the two end nodes); -inf entries stay -inf nearby.
    """
    v = np.moveaxis(np.asarray(values, dtype=float), axis, 0)
    n = v.shape[0]
    if n < 2 or factor <= 1:
        return np.moveaxis(v, 0, axis)
    x = np.linspace(0.0, n - 1.0, (n - 1) * factor + 1)
    node = np.clip(np.rint(x).astype(int), 0, n - 1)
    dx = (x - node).reshape((-1,) + (1,) * (v.ndim - 1))
    lo = v[np.maximum(node - 1, 0)]
    hi = v[np.minimum(node + 1, n - 1)]
    mid = v[node]
    with np.errstate(invalid="ignore"):
        interior = ((node > 0) & (node < n - 1)).reshape(dx.shape)
        slope = np.where(interior, 0.5 * (hi - lo), np.where((node == 0).reshape(dx.shape), hi - mid, mid - lo))
        curv = np.where(interior, 0.5 * (hi - 2.0 * mid + lo), 0.0)
        out = mid + slope * dx + curv * dx * dx
    out = np.where(np.isfinite(out), out, -np.inf)
    return np.moveaxis(out, 0, axis)


def _parabola_peak(values: npt.NDArray[np.floating[Any]], i: int) -> float:
    """Fractional index of the maximum of a parabola through values[i-1:i+2]."""
    if i <= 0 or i >= len(values) - 1 or not np.all(np.isfinite(values[i - 1:i + 2])):
        return float(i)
    a, b, c = values[i - 1], values[i], values[i + 1]
    denom = a - 2.0 * b + c
    if denom >= 0:
        return float(i)
    return float(i + np.clip(0.5 * (a - c) / denom, -0.5, 0.5))


def _logsumexp(x: npt.NDArray[np.floating[Any]]) -> float:
    """log Σ exp(x) of an (n,) array, as ``scipy.special.logsumexp`` (-inf entries are
    hypotheses ruled out; a NaN stays NaN, +inf stays +inf: dropped, a NaN likelihood went
    unseen). Our own because scipy's costs 114 µs against 36 µs on the 16 038 hypotheses of
    6 tasks, called up to three times per update."""
    x = np.asarray(x)
    m = np.max(x)
    if not np.isfinite(m):          # all ruled out (-inf), or a NaN / +inf to pass on
        return float(m)
    return float(m + np.log(np.sum(np.exp(x - m))))


def _logsumexp_rows(x: npt.NDArray[np.floating[Any]]) -> npt.NDArray[np.floating[Any]]:
    m = np.max(x, axis=1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    with np.errstate(divide="ignore"):
        return (m + np.log(np.sum(np.exp(x - m), axis=1, keepdims=True)))[:, 0]
