"""Online estimator: recognition, speed/phase, conditioning and prediction, one observation at a time.

Each arriving observation (time stamp on the operator clock relative to motion onset,
values (D,), optional mask) is stored and offered to the :class:`TaskPhaseFilter`, which
maintains the posterior over tasks and a continuous (speed, offset) estimate per task
(recognition, thesis Eq. 5.7, and time modulation, Eq. 5.8, done continuously instead of
once). Observations may be old, irregular and out of order: every statistic is a sum over
observations and the time stamps, not the arrival order, define the phases. An observation
outside the motion under every hypothesis (long after its end, or before its start) is
taken likewise, at phase 1 (or 0), and flagged and counted; a time beyond
+-:data:`MAX_TIME_S` (a clock error) and invalid values are refused before anything
changes (:meth:`OnlineEstimator.update`).

Predictions use the most probable task and its time warp z(t) = speed (t - offset) / T_bar
(Eq. 5.13 with the onset as t_0): the weight posterior is conditioned on *all* stored
observations at their current phases (Eqs. 5.9-5.12, exact, in the information form of
:class:`promp.posterior.StructuredPosterior`, refreshed only when the data or the warp
changed), then read at the requested times (Eqs. 5.22-5.24 are the caller's choice of
time). The predictive covariance includes the observation noise and, optionally, the
phase uncertainty of the filter (the mean's phase derivative times the phase variance),
which otherwise makes the far-future band much too narrow when the speed is uncertain.

Each update also runs the Delta-sigma out-of-distribution test of §5.3.12 on the
configured signals against the recognised task's learned distribution.

Every default was chosen by measurement, in rounds, on synthetic leave-one-out takes and
the HDM05 "inner" folds (never the held-out performers): ``offset_fraction`` 0.3,
``variance_scale`` 4 (2-sigma coverage within 0.85-0.99), ``conditioning_noise_scale`` 100,
``group_offset_scale`` 1, ``group_amplitude_fraction`` 0.3, ``future_speed_std`` 0.3; the
settings tried and dropped, and why, are in docs/promp_tuning.md ("the second round" and
the like in this module's comments are its sections).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import numpy.typing as npt

from promp.learning import augment_promp, real_array
from promp.library import TaskLibrary
from promp.ood import DeltaSigmaTest
from promp.phase_filter import PhaseGridConfig, TaskPhaseFilter, TimeWarp, as_mask
from promp.posterior import StructuredPosterior

__all__ = ["EstimatorConfig", "Estimate", "OnlineEstimator", "MAX_TIME_S"]

#: Largest |time| [s since the motion onset] that :meth:`OnlineEstimator.update` and
#: :meth:`OnlineEstimator.predict_many` take. A motion lasts seconds and a session hours;
#: a time stamp beyond 11.6 days is a clock error (an absolute Unix time, or milliseconds
#: / nanoseconds read as seconds), not an observation of the motion, and is refused.
MAX_TIME_S = 1e6

#: What a weight posterior was conditioned on: (speed, offset) of the warp and the number
#: of observations.
_PosteriorKey = tuple[float, float, int]


@dataclass(frozen=True)
class EstimatorConfig:
    """Settings of :class:`OnlineEstimator`.

    Attributes:
        grid: task/speed/offset grid of the filter.
        ood_indices: signals checked by the Delta-sigma test (the hands: 3..8 of the flat
            references); empty disables the test.
        ood_margin: margin of the test [signal unit] (thesis: 5 cm).
        ood_n_std: width of the learned band in standard deviations.
        include_noise: predictive covariances include the observation noise Sigma_y.
        include_phase_uncertainty: predictive covariances include the phase uncertainty.
        task_log_prior: optional (K,) log prior over the library's tasks.
        conditioning_noise_scale: the weight posterior treats each observation as noisier
            than the ridge-fit residual by this factor on the variance (docs/promp_tuning.md).
            This is the Sigma*_y of Eqs. 5.9-5.12, which the thesis does not give.
        variance_scale: factor on the returned predictive covariance (calibration).
        offset_fraction, ramp_fraction, amplitude_fraction: structured directions added
            to the prior of the weight posterior (:func:`promp.learning.augment_promp`);
            the task/phase filter and the Δσ test keep the learned model.
        group_amplitude_fraction: ``amplitude_fraction`` for tasks learned from two or more
            performers (``ProMP.group_var`` present), when ``amplitude_fraction`` is 0
            (seventh round in docs/promp_tuning.md).
        group_offset_scale: for tasks that measured their between-performer variance
            (``ProMP.group_var``), the offset direction's std is this factor times
            sqrt(group_var) instead of ``offset_fraction`` of the demo spread (fifth round
            in docs/promp_tuning.md); 0 always uses ``offset_fraction``.
        phase_averaging: "none": condition and predict at the point estimate of the time
            warp (the phase uncertainty enters the covariance linearised, if
            include_phase_uncertainty); "unscented": average over five sigma points of the
            filter's (log speed, offset) posterior, each with its own conditioning, so the
            mean is the expected trajectory over the speed hypotheses (no commitment to one
            speed while the evidence is thin) and the covariance holds their spread.
        future_speed_std: std of the log speed of the part of the motion not observed yet
            around the estimated speed (0: none): the prediction past the newest
            observation is the average over those speeds (eighth round in docs/promp_tuning.md),
            the least-squares prediction when the remaining timing is uncertain. With
            "unscented" phase averaging it is not applied.
    """

    grid: PhaseGridConfig = field(default_factory=PhaseGridConfig)
    ood_indices: tuple[int, ...] = ()
    ood_margin: float = 0.05
    ood_n_std: float = 1.0
    include_noise: bool = True
    include_phase_uncertainty: bool = True
    task_log_prior: tuple[float, ...] | None = None
    conditioning_noise_scale: float = 100.0
    variance_scale: float = 4.0
    offset_fraction: float = 0.3
    group_offset_scale: float = 1.0
    ramp_fraction: float = 0.0
    amplitude_fraction: float = 0.0
    group_amplitude_fraction: float = 0.3
    phase_averaging: str = "none"
    future_speed_std: float = 0.3

    def __post_init__(self) -> None:
        """ValueError naming the field for settings that cannot work (a negative or NaN
        ``variance_scale`` gave negative or NaN covariances, a NaN ``future_speed_std`` or
        fraction was used as is, an ``ood_margin`` of NaN never fired)."""
        if self.phase_averaging not in ("none", "unscented"):
            raise ValueError(f"phase_averaging must be 'none' or 'unscented', got {self.phase_averaging!r}")
        if not 0 < self.variance_scale < math.inf:
            raise ValueError(f"variance_scale must be a positive finite number, got {self.variance_scale!r}")
        if not 0 < self.conditioning_noise_scale < math.inf:
            raise ValueError("conditioning_noise_scale must be a positive finite number (the conditioning noise "
                             f"is the model's noise times it), got {self.conditioning_noise_scale!r}")
        for name in ("future_speed_std", "offset_fraction", "group_offset_scale", "ramp_fraction",
                     "amplitude_fraction", "group_amplitude_fraction", "ood_n_std"):
            value = getattr(self, name)
            if not 0 <= value < math.inf:
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        if not math.isfinite(self.ood_margin):
            raise ValueError(f"ood_margin must be finite, got {self.ood_margin!r}")
        if any(isinstance(i, bool) or not isinstance(i, (int, np.integer)) or i < 0 for i in self.ood_indices):
            raise ValueError(f"ood_indices must be signal indices >= 0, got {self.ood_indices!r}")


@dataclass(frozen=True)
class Estimate:
    """What the estimator believes after an update.

    Attributes:
        task: label of the most probable task.
        task_index: its index in the library.
        task_probabilities: (K,) posterior over the library's tasks.
        speed: estimated execution speed relative to the mean demonstration.
        offset: estimated time [s] of phase 0 relative to the onset.
        phase: phase of the newest time stamp so far (the largest, whatever the order of
            arrival) under that warp.
        out_of_distribution: the Delta-sigma test fired on this observation.
        n_observations: observations stored so far.
        outside_motion: this observation's time stamp lies outside the motion under every
            (task, speed, offset) hypothesis of the filter (:attr:`OnlineEstimator.motion_span`):
            long after the end (an operator holding the final pose, a rest not detected
            yet) or before the start. It was stored and used at phase 1 (or 0), like any
            other observation; :attr:`OnlineEstimator.n_outside_motion` counts them.
    """

    task: str
    task_index: int
    task_probabilities: npt.NDArray[np.floating[Any]]
    speed: float
    offset: float
    phase: float
    out_of_distribution: bool
    n_observations: int
    outside_motion: bool = False


class OnlineEstimator:
    """Prescient estimator over a :class:`TaskLibrary` (see module docstring)."""

    def __init__(self, library: TaskLibrary, config: EstimatorConfig = EstimatorConfig()) -> None:
        if len(library) == 0:
            raise ValueError("empty task library")
        if not all(p.structured for p in library.promps):
            raise ValueError("the online estimator needs structured (learned) ProMPs")
        self.library = library
        self.config = config
        self._promps = library.promps
        self._labels = library.labels
        self.n_signals = library.n_signals
        prior = None if config.task_log_prior is None else np.asarray(config.task_log_prior, dtype=float)
        self.filter = TaskPhaseFilter(self._promps, config.grid, prior)
        if any(i >= self.n_signals for i in config.ood_indices):
            # A negative index used to wrap silently to the last signals, a large one failed
            # in numpy (IndexError).
            raise ValueError(f"ood_indices must be signal indices in 0..{self.n_signals - 1}, "
                             f"got {config.ood_indices!r}")
        test = DeltaSigmaTest(config.ood_indices, config.ood_margin, config.ood_n_std)
        self._ood = [test.tabulate(p) for p in self._promps]
        # Every hypothesis h = (task, speed, offset) of the filter maps t to its phase
        # speed (t - offset) / T_task: before the smallest offset every phase is 0, after
        # the largest offset + the longest T / the smallest speed every phase is 1.
        speeds, offsets = self.filter.speed_grid, self.filter.offset_grid
        self._span = (float(offsets.min()), float(offsets.max() + self.filter.durations.max() / speeds.min()))
        self._prior_models = [augment_promp(p, config.offset_fraction, config.ramp_fraction,
                                            config.amplitude_fraction, config.group_offset_scale,
                                            config.group_amplitude_fraction)
                              for p in self._promps]
        cond_noise = [p.noise_var * config.conditioning_noise_scale for p in self._promps]
        self._posteriors = [StructuredPosterior(m, n) for m, n in zip(self._prior_models, cond_noise)]
        # One posterior per sigma point (unscented phase averaging), created on first use.
        self._sigma_posteriors: list[list[StructuredPosterior] | None] = [None] * len(self._promps)
        self._cond_noise = cond_noise
        self.reset()

    # ------------------------------------------------------------------ state
    def reset(self) -> None:
        """Forget the current motion (call at each new motion onset)."""
        D = self.n_signals
        self._times = np.empty(256)
        self._values = np.empty((256, D))
        self._masks = np.empty((256, D), dtype=bool)
        self._n = 0
        self._at_time: dict[float, list[int]] = {}   # stored rows per time stamp (duplicates)
        self._partial = False
        self._latest_t = -np.inf
        self._last_ood = False
        self._n_outside = 0
        self._last_outside = False
        self.filter.reset()
        self._post_key: list[_PosteriorKey | None] = [None] * len(self._promps)
        self._sigma_keys: dict[tuple[int, int], _PosteriorKey] = {}

    @property
    def n_observations(self) -> int:
        return self._n

    @property
    def motion_span(self) -> tuple[float, float]:
        """(earliest, latest) time [s since onset] inside the motion under some hypothesis
        of the filter: the smallest offset of the grid, and its largest offset plus the
        longest task duration divided by the smallest speed. An observation outside it is
        at phase 0 (or 1) under every hypothesis (see :meth:`update`)."""
        return self._span

    @property
    def n_outside_motion(self) -> int:
        """Stored observations whose time lies outside :attr:`motion_span` (since the last
        :meth:`reset`)."""
        return self._n_outside

    @property
    def observations(self) -> tuple[npt.NDArray[np.floating[Any]], npt.NDArray[np.floating[Any]],
                                    npt.NDArray[np.bool_]]:
        """(times (n,), values (n, D), masks (n, D)) stored so far, in arrival order: read-only
        views (writing into the buffers would change what the next update conditions on)."""
        n = self._n
        views = self._times[:n], self._values[:n], self._masks[:n]
        for view in views:
            view.flags.writeable = False
        return views

    def _is_stored(self, t: float, y: npt.NDArray[np.floating[Any]], mask: npt.NDArray[np.bool_] | None) -> bool:
        """True if the exact observation (time, observed values, mask) is already stored."""
        if t not in self._at_time:
            return False
        values = np.where(mask, y, 0.0) if mask is not None else y
        observed = np.ones(self.n_signals, dtype=bool) if mask is None else mask
        return any(np.array_equal(self._masks[i], observed) and np.array_equal(self._values[i], values)
                   for i in self._at_time[t])

    def _store(self, t: float, y: npt.NDArray[np.floating[Any]], mask: npt.NDArray[np.bool_] | None) -> None:
        if self._n == len(self._times):
            grow = 2 * len(self._times)
            self._times = np.resize(self._times, grow)
            self._values = np.resize(self._values, (grow, self.n_signals))
            self._masks = np.resize(self._masks, (grow, self.n_signals))
        i = self._n
        self._times[i] = t
        self._values[i] = np.where(mask, y, 0.0) if mask is not None else y
        self._masks[i] = True if mask is None else mask
        self._partial |= mask is not None and not np.all(mask)
        self._at_time.setdefault(t, []).append(i)
        self._n += 1

    # ----------------------------------------------------------------- update
    def update(self, t: float, y: npt.NDArray[np.floating[Any]], mask: npt.NDArray[np.bool_] | None = None) -> Estimate:
        """Take one observation and return the current :class:`Estimate`.

        Observations may arrive late and in any order: each is used at the phase its own
        time stamp has under the current time warp. An exact repeat of a stored observation
        (same t, values where observed and mask: a duplicated packet) changes nothing: the
        filter keeps one observation per time stamp anyway, and the weight posterior must
        not count it twice either. Distinct values at the same t are two observations for
        the weight posterior (the filter keeps one).

        Times outside the motion (:attr:`motion_span`: after the end, or before the
        start, under every hypothesis of the filter, e.g. an operator who holds the final
        pose while the end of the motion is not detected yet) are accepted like old ones:
        stored and used at phase 1 (or 0), flagged in :attr:`Estimate.outside_motion` and
        counted in :attr:`n_outside_motion`. The caller decides when the motion is over
        (:meth:`reset`).

        Invalid input raises before anything is stored or changed (an update that raises
        leaves the estimator as it was):

        * TypeError: t is not a real number (a string, a bool, an array, None), or y does
          not hold real numbers.
        * ValueError: t is not finite, or beyond +-:data:`MAX_TIME_S` (a clock error: times
          are seconds since the motion onset); y is not (D,) or holds NaN / inf where
          observed; mask is not (D,) booleans (or 0 / 1), or observes no signal.

        Args:
            t: time stamp on the operator clock, relative to motion onset [s].
            y: (D,) observed values (ignored where mask is False: NaN allowed there).
            mask: (D,) booleans, True where the signal is present (None = all).
        """
        t = _check_time(t, "observation time t")
        y = real_array(y, "observation y")
        if y.shape != (self.n_signals,):
            raise ValueError(f"observation y must have shape ({self.n_signals},), got {y.shape}")
        if mask is not None:
            mask = _boolean_mask(mask, self.n_signals)
            if mask.all():
                mask = None
        if not np.all(np.isfinite(y[mask] if mask is not None else y)):
            raise ValueError("observation y has non-finite values (NaN or inf) where observed")
        if self._is_stored(t, y, mask):
            return self.estimate()
        # The filter checks its own input and raises before changing anything: first, so
        # that nothing is stored when it refuses.
        self.filter.add(t, y, mask)
        self._store(t, y, mask)
        self._latest_t = max(self._latest_t, t)
        self._last_outside = not self._span[0] <= t <= self._span[1]
        self._n_outside += self._last_outside
        # The Δσ test of the new observation, at its phase under the recognised task (the
        # filter caches the posterior and the warp: estimate() reads them again for free).
        task = self.filter.best_task()
        self._last_ood = self._ood[task].is_outside(float(self.filter.time_warp(task).phase(t)), y, mask)
        return self.estimate()

    def estimate(self) -> Estimate:
        """The current :class:`Estimate` (without adding an observation)."""
        probs = self.filter.task_probabilities()
        task = int(np.argmax(probs))
        warp = self.filter.time_warp(task)
        t_ref = self._latest_t if np.isfinite(self._latest_t) else 0.0
        return Estimate(task=self._labels[task], task_index=task, task_probabilities=probs,
                        speed=warp.speed, offset=warp.offset, phase=float(warp.phase(t_ref)),
                        out_of_distribution=self._last_ood, n_observations=self._n,
                        outside_motion=self._last_outside)

    def task_probabilities(self) -> dict[str, float]:
        """Posterior probability of each task label."""
        return dict(zip(self._labels, map(float, self.filter.task_probabilities())))

    def time_warp(self, task: int | str | None = None) -> TimeWarp:
        """Continuous (speed, offset) estimate of a task (default: the most probable)."""
        return self.filter.time_warp(self._task_index(task))

    def _task_index(self, task: Any) -> int:
        """``task`` as a library index: an index, a task label, or None (the most probable
        task); TypeError for anything else, ValueError outside 0..K-1 (-1 silently meant the
        last task) or for a label the library does not hold."""
        if task is None:
            return self.filter.best_task()
        K = self.filter.n_tasks
        if isinstance(task, str):
            # By label too: a caller holds labels (Estimate.task), and had to look the index up.
            if task not in self._labels:
                raise ValueError(f"task {task!r} is not in the library (tasks: {', '.join(self._labels)})")
            return self._labels.index(task)
        if isinstance(task, (bool, np.bool_)) or not isinstance(task, (int, np.integer)):
            raise TypeError(f"task must be an integer index in 0..{K - 1} or a task label (or None: the most "
                            f"probable), got {task!r}")
        if not 0 <= task < K:
            raise ValueError(f"task must be an index in 0..{K - 1}, got {task!r}")
        return int(task)

    # -------------------------------------------------------------- posterior
    def weight_posterior(self, task: int | str | None = None) -> StructuredPosterior:
        """The task's weight posterior given every observation at its current phase estimate."""
        task = self._task_index(task)
        warp = self.filter.time_warp(task)
        self._post_key[task] = self._refresh(self._posteriors[task], self._post_key[task], task, warp)
        return self._posteriors[task]

    def _refresh(self, post: StructuredPosterior, key: _PosteriorKey | None, task: int,
                 warp: TimeWarp) -> _PosteriorKey:
        """Bring ``post`` up to date with the observations at ``warp``; returns the new key."""
        if key is None or key[:2] != (warp.speed, warp.offset):
            # The warp moved: every stored observation has a new phase, rebuild.
            times, values, masks = self.observations
            phi = self._promps[task].basis.lookup(warp.phase(times))
            post.condition(phi, values, masks if self._partial else None)
        elif key[2] != self._n:
            # Same warp, new observations only: add their contribution.
            sl = slice(key[2], self._n)
            phi = self._promps[task].basis.lookup(warp.phase(self._times[sl]))
            post.add(phi, self._values[sl], self._masks[sl] if self._partial else None)
        return (warp.speed, warp.offset, self._n)

    def _sigma_warps(self, task: int) -> tuple[list[TimeWarp], npt.NDArray[np.floating[Any]]]:
        """Five sigma points of the (log speed, offset) posterior and their weights."""
        mean, cov = self.filter.warp_distribution(task)
        T = float(self._promps[task].duration)
        # Symmetric sigma points with kappa = 1 (n = 2): weights 1/3, 1/6 x 4, at
        # mean +- sqrt(3) x the columns of a square root of the covariance.
        vals, vecs = np.linalg.eigh(0.5 * (cov + cov.T))
        root = vecs * np.sqrt(np.clip(vals, 0.0, None)) * np.sqrt(3.0)
        points = [mean, mean + root[:, 0], mean - root[:, 0], mean + root[:, 1], mean - root[:, 1]]
        warps = [TimeWarp(float(np.exp(p[0])), float(p[1]), T) for p in points]
        return warps, np.array([1 / 3, 1 / 6, 1 / 6, 1 / 6, 1 / 6])

    # ------------------------------------------------------------- prediction
    def predict(self, t: float, task: int | str | None = None
                ) -> tuple[npt.NDArray[np.floating[Any]], npt.NDArray[np.floating[Any]]]:
        """Predictive mean (D,) and covariance (D, D) of the signals at time t [s since onset]
        (one time; :meth:`predict_many` for several). Same checks as :meth:`predict_many`."""
        if np.ndim(t) != 0:
            raise ValueError(f"predict takes one time t (use predict_many for several), got shape {np.shape(t)}")
        mean, cov = self.predict_many(np.array([_check_time(t, "prediction time t")], dtype=float), task=task)
        return mean[0], cov[0]

    def predict_many(self, times: Sequence[float] | npt.NDArray[np.floating[Any]], task: int | str | None = None,
                     full_cov: bool = True) -> tuple[npt.NDArray[np.floating[Any]], npt.NDArray[np.floating[Any]]]:
        """Vectorised prediction at F times [s since onset].

        Any time may be asked, before the newest observation (a negative horizon: the
        posterior read at a past phase) or after it; a time outside :attr:`motion_span`
        reads phase 0 (or 1). Nothing is changed by a prediction, except cached
        conditionings.

        Raises:
            TypeError: ``times`` are not real numbers, or ``task`` is neither an integer
                nor a label.
            ValueError: ``times`` are not a scalar or 1-D, hold NaN / inf or a time beyond
                +-:data:`MAX_TIME_S`; ``task`` is not in 0..K-1, or not a label of the
                library.

        Returns:
            mean (F, D) [signal units] and cov (F, D, D) (or var (F, D) with
            ``full_cov=False``) [signal units^2]; the posterior's covariance is multiplied
            by ``variance_scale`` (the future-speed spread is added unscaled).
        """
        task = self._task_index(task)
        times_arr = np.atleast_1d(real_array(times, "prediction times"))
        if times_arr.ndim != 1:
            # A (F, 1) column failed deep in a broadcast.
            raise ValueError(f"prediction times must be a scalar or 1-D [s since onset], got shape {times_arr.shape}")
        if not np.all(np.isfinite(times_arr)):   # NaN failed in a table lookup, inf was accepted
            raise ValueError("prediction times must be finite [s since onset]")
        if times_arr.size and np.max(np.abs(times_arr)) > MAX_TIME_S:
            raise ValueError(f"prediction times must be seconds since the motion onset, within +-{MAX_TIME_S:g} s; "
                             f"got {times_arr[np.argmax(np.abs(times_arr))]:g}")
        if self.config.phase_averaging == "unscented" and self.filter.n_evidence:
            return self._predict_unscented(times_arr, task, full_cov)
        warp = self.filter.time_warp(task)
        z_raw = warp.phase(times_arr, clip=False)
        future = times_arr > self._latest_t
        if self.config.future_speed_std > 0 and self.filter.n_evidence and future.any():
            return self._predict_future_speeds(times_arr, task, warp, z_raw, future, full_cov)
        return self._predict_at_phases(times_arr, task, warp, z_raw, full_cov)

    def _predict_future_speeds(self, times: npt.NDArray[np.floating[Any]], task: int, warp: TimeWarp,
                               z_raw: npt.NDArray[np.floating[Any]], future: npt.NDArray[np.bool_], full_cov: bool
                               ) -> tuple[npt.NDArray[np.floating[Any]], npt.NDArray[np.floating[Any]]]:
        """The prediction averaged over the speed of the part not observed yet (see
        ``EstimatorConfig.future_speed_std``): after the newest observation t_n the phase
        runs on at rate r e^u instead of r, z_u(t) = z(t_n) + r e^u (t - t_n), with u ~
        N(0, future_speed_std^2) by 3-point Gauss-Hermite quadrature (u = 0, +-sqrt(3) std;
        weights 2/3, 1/6, 1/6). The weight posterior is the one conditioned at the point
        estimate; the result is the mixture's mean and covariance,
            m = sum_u w_u m_u,   C = sum_u w_u (C_u + (m_u - m)(m_u - m)^T),
        with every C_u taken as the central node's C_0 (the same posterior at nearby
        phases): the nodes' covariances would triple the cost of a prediction.
        Before t_n every node gives the same phase, so the observed part is unchanged.
        ``variance_scale`` calibrates C_0 (the over-confident weight posterior), not the
        spread between the nodes, which is modelled, not over-confident."""
        # The nodes run from the newest observation t_n, or from the start of the motion
        # (phase 0, t = offset) when t_n is before it: the phase does not run before the
        # start, whatever the speed. Anchored at an unclipped z_n < 0 (an observation before
        # the start, e.g. at t = 0 under an offset of 0.15 s, or stamped -3 s), every node
        # started at another time and the prediction at the very start already mixed in
        # later phases (a spread where all speeds agree on phase 0).
        t_anchor = max(self._latest_t, warp.offset)
        z_n = float(warp.phase(t_anchor, clip=False))
        ahead = times[future] - t_anchor
        mean, cov = self._predict_at_phases(times, task, warp, z_raw, full_cov)
        # The other two nodes' means only (cheap: phi @ W): their covariances are taken as
        # the central node's, so the mixture covariance is C_0 plus the nodes' spread.
        weights = self.weight_posterior(task).mean_weights
        basis = self._promps[task].basis
        std = self.config.future_speed_std
        node_means = [mean[future]]
        for u in (np.sqrt(3.0) * std, -np.sqrt(3.0) * std):
            z_u = np.minimum(np.maximum(z_n + warp.phase_rate * np.exp(u) * ahead, 0.0), 1.0)
            node_means.append(basis.lookup(z_u) @ weights.T)
        nodes = np.stack(node_means)                                              # (3, Ff, D)
        w = np.array([2 / 3, 1 / 6, 1 / 6])
        mix = np.einsum("u,ufd->fd", w, nodes)
        dev = nodes - mix[None]
        if full_cov:
            scaled = np.sqrt(w)[:, None, None] * dev                              # (3, Ff, D)
            cov[future] += np.matmul(scaled.transpose(1, 2, 0), scaled.transpose(1, 0, 2))
        else:
            cov[future] += np.einsum("u,ufd->fd", w, dev * dev)
        mean[future] = mix
        return mean, cov

    def _predict_at_phases(self, times: npt.NDArray[np.floating[Any]], task: int, warp: TimeWarp,
                           z_raw: npt.NDArray[np.floating[Any]], full_cov: bool
                           ) -> tuple[npt.NDArray[np.floating[Any]], npt.NDArray[np.floating[Any]]]:
        """Prediction of the task's weight posterior at the (unclipped) phases ``z_raw`` of
        ``times``; the phase uncertainty of ``warp`` enters the covariance linearised
        and the model covariance is calibrated by ``variance_scale``."""
        post = self.weight_posterior(task)
        z = np.minimum(np.maximum(z_raw, 0.0), 1.0)
        # Table rows (phase error <= 1.25e-4, i.e. 0.5 ms of a 4 s motion) instead of
        # evaluating 2 F k exponentials per call.
        phi, dphi = self._promps[task].basis.lookup_with_derivative(z)
        extra = None
        if self.config.include_phase_uncertainty and self.filter.n_evidence:
            # Phase uncertainty, linearised: cov += var_z * s s^T with s = d mean / d z,
            # passed as one more column of the predictive low-rank factor.
            std_z = np.sqrt(self.filter.phase_variance(task, times, warp))
            inside = (z_raw > 0.0) & (z_raw < 1.0)   # the clipped phase does not move outside
            extra = ((dphi @ post.mean_weights.T) * (std_z * inside)[:, None])[:, :, None]
        mean, cov = post.predict(phi, include_noise=self.config.include_noise, full_cov=full_cov,
                                 extra_factor=extra)
        if self.config.variance_scale != 1.0:
            cov = cov * self.config.variance_scale
        return mean, cov

    def _predict_unscented(self, times: npt.NDArray[np.floating[Any]], task: int, full_cov: bool
                           ) -> tuple[npt.NDArray[np.floating[Any]], npt.NDArray[np.floating[Any]]]:
        """Mixture of the predictions conditioned at each sigma point of the warp posterior."""
        warps, weights = self._sigma_warps(task)
        posteriors = self._sigma_posteriors[task]
        if posteriors is None:
            posteriors = self._sigma_posteriors[task] = [
                StructuredPosterior(self._prior_models[task], self._cond_noise[task]) for _ in warps]
        basis = self._promps[task].basis
        mean_list, covs = [], []
        for j, (warp, post) in enumerate(zip(warps, posteriors)):
            self._sigma_keys[(task, j)] = self._refresh(post, self._sigma_keys.get((task, j)), task, warp)
            m, c = post.predict(basis.lookup(warp.phase(times)), include_noise=self.config.include_noise,
                                full_cov=full_cov)
            mean_list.append(m)
            covs.append(c)
        means = np.array(mean_list)                               # (5, F, D)
        mean = np.einsum("j,jfd->fd", weights, means)
        dev = means - mean[None]
        if full_cov:
            cov = np.einsum("j,jfde->fde", weights, np.array(covs)) + \
                np.einsum("j,jfd,jfe->fde", weights, dev, dev)
        else:
            cov = np.einsum("j,jfd->fd", weights, np.array(covs)) + np.einsum("j,jfd->fd", weights, dev * dev)
        if self.config.variance_scale != 1.0:
            cov = cov * self.config.variance_scale
        return mean, cov


# ----------------------------------------------------------------------------- checks
def _check_time(t: Any, name: str) -> float:
    """``t`` [s since onset] as a float; TypeError if it is not a real number, ValueError if
    it is not finite or beyond +-:data:`MAX_TIME_S`."""
    if isinstance(t, (bool, np.bool_, str, bytes, complex, np.complexfloating)) or np.ndim(t) != 0:
        # float("0.5") and float(True) were taken as times.
        raise TypeError(f"{name} must be a real number [s since onset], got {t!r}")
    try:
        value = float(t)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be a real number [s since onset], got {t!r}") from exc
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    if abs(value) > MAX_TIME_S:
        raise ValueError(f"{name} must be seconds since the motion onset, within +-{MAX_TIME_S:g} s; got {value:g} "
                         "(a time stamp of an absolute clock, or in ms or ns?)")
    return value


def _boolean_mask(mask: Any, n_signals: int) -> npt.NDArray[np.bool_]:
    """An observation mask as (D,) booleans (:func:`promp.phase_filter.as_mask`), and
    ValueError if it observes no signal."""
    array = as_mask(mask, n_signals)
    if not array.any():
        # Stored, it counted as an observation and moved the newest time and phase.
        raise ValueError("mask observes no signal: an observation needs at least one")
    return array
