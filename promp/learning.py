"""Learning a ProMP from demonstrations of different durations (thesis §5.3.4, Eqs. 5.5-5.6).

Steps:
1. Each demonstration i (times (T_i,), values (T_i, D)) is mapped to the phase
   z = (t - t_0) / (t_end - t_0) in [0, 1]; its duration T_i is kept, and the model stores
   all durations, hence the mean duration T_bar and the speeds alpha_i = T_bar / T_i.
2. Ridge regression per demonstration (Eq. 5.5): w_i = (Phi^T Phi + lambda I)^-1 Phi^T Y_i,
   one (k x k) solve shared by the D signals since Phi is the same for all of them.
3. Mean mu_w = mean_i w_i and the FULL sample covariance of the stacked (D*k,) weights
   across all signals (Eq. 5.6 with the unbiased 1/(N-1) normalisation; the thesis writes
   1/N, which makes every variance (N-1)/N as large: 17 % smaller with 6 demonstrations,
   a band narrower than the demonstrations' own spread), kept in factored
   form Sigma_w = U U^T + blocks, with U (D, k, N) the centred weights / sqrt(N - 1). The
   cross-covariance is what lets an observation of the hands inform the posture and the
   CoM. ``covariance="per_signal"`` keeps only the diagonal (k x k) blocks, like the thesis.
4. Regularisation. With N demonstrations the sample covariance has rank N - 1 < D*k (e.g.
   6 < 400), so it is singular and would forbid any deviation outside the span of the
   demos. We add an isotropic block per signal, eps_d I_k with
       eps_d = relative * mean(diag(S_dd)) + absolute,
   i.e. a fraction of that signal's average weight variance. This keeps Sigma_w positive
   definite, keeps the low-rank structure exploited online, and lets the posterior follow
   an operator who leaves the demonstrated span. The default ``relative`` was chosen by
   leave-one-out measurement (:func:`promp.selection.leave_one_out_scores`), see
   :data:`DEFAULT_REGULARISATION`.
5. Observation noise Sigma_y per signal from the ridge-fit residuals:
   sigma_d^2 = sum residual^2 / sum_i max(T_i - k, 1), floored at ``min_noise_std^2``.
6. Between-group variance (when the demonstrations name who performed them, ``group``,
   and there are at least two groups): per signal, the variance across the groups' mean
   trajectories, averaged over the phase (:func:`between_group_variance`). It measures how
   much one performer's execution of the task differs from another's (style, body size,
   timing), which the demonstrations' covariance under-represents when they come from two
   or three people; the task/phase filter adds it to its likelihood's residual variance so
   that recognition of a new performer is not decided by signals on which performers
   disagree (:class:`promp.phase_filter.PhaseGridConfig`).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import numpy.typing as npt
import scipy.linalg  # type: ignore[import-untyped, unused-ignore]  # no stubs unless scipy-stubs is installed

from promp.basis import RBFBasis
from promp.model import ProMP

__all__ = ["Demonstration", "CovarianceRegularisation", "DEFAULT_REGULARISATION",
           "demo_phases", "fit_weights", "learn_promp", "augment_promp", "between_group_variance"]


@dataclass
class Demonstration:
    """One recorded execution of a task.

    Attributes:
        times: (T,) increasing sample times [s] (any origin, any, possibly irregular, rate).
        values: (T, D) signal values.
        label: task label, if known.
        group: who performed it (e.g. the HDM05 performer code), if known. With two or
            more groups among a task's demonstrations, :func:`learn_promp` measures how
            much the groups differ (:func:`between_group_variance`).
    """

    times: npt.NDArray[np.floating[Any]]
    values: npt.NDArray[np.floating[Any]]
    label: str | None = None
    group: str | None = None

    def __post_init__(self) -> None:
        self.times = real_array(self.times, "demonstration times")
        self.values = real_array(self.values, "demonstration values")
        if self.values.ndim == 1:
            self.values = self.values[:, None]
        if self.times.ndim != 1 or self.values.ndim != 2 or self.values.shape[0] != self.times.shape[0]:
            # (T, D, 3) values were taken as D signals and failed in the fit.
            raise ValueError(f"times (T,) and values (T, D) disagree: {self.times.shape} vs {self.values.shape}")
        if self.values.shape[1] == 0:
            raise ValueError("demonstration values have no signal (shape (T, 0))")
        if not np.all(np.isfinite(self.times)):
            # NaN passes the increasing-times check below (every comparison is False).
            raise ValueError("demonstration times must be finite")
        if len(self.times) < 2 or np.any(np.diff(self.times) <= 0):
            raise ValueError("a demonstration needs >= 2 samples with strictly increasing times")
        if not np.all(np.isfinite(self.values)):
            raise ValueError("demonstration values must be finite")

    @property
    def duration(self) -> float:
        return float(self.times[-1] - self.times[0])

    @property
    def n_signals(self) -> int:
        return int(self.values.shape[1])

    @property
    def phases(self) -> npt.NDArray[np.floating[Any]]:
        return demo_phases(self.times)


@dataclass(frozen=True)
class CovarianceRegularisation:
    """Isotropic per-signal block added to the sample weight covariance (see module doc).

    Attributes:
        relative: eps_d as a fraction of the mean diagonal of the signal's sample
            weight covariance block.
        absolute: added to eps_d [signal unit^2]; keeps the model proper with a single
            demonstration (the hucebot library uses 1e-3 there). The default, 1e-8, keeps
            it proper only: a ProMP of one demonstration then has a prior std of ~1e-4 and
            cannot follow anyone who moves otherwise (:class:`SingleDemonstrationWarning`).
    """

    relative: float = 0.3
    absolute: float = 1e-8


class SingleDemonstrationWarning(UserWarning):
    """A ProMP learned from one demonstration with the default regularisation: it has no
    spread (a prior std of ~1e-4 signal units), so conditioning cannot follow an operator who
    moves otherwise; predictions stay on the demonstration with a covariance that claims
    certainty. Learn from several demonstrations, or give
    ``CovarianceRegularisation(absolute=...)`` the variance to allow [signal unit^2]."""


#: Regularisations with an absolute term at or below this [signal unit^2] give a single
#: demonstration no spread worth the name (:class:`SingleDemonstrationWarning`).
_NO_SPREAD_VARIANCE = 1e-6


#: Default regularisation, relative = 0.3, measured with leave-one-out prediction of the
#: held-out demo's second half (:func:`promp.selection.leave_one_out_scores`, 20 basis):
#:   relative         0.05    0.3     1.0
#:   Xsens 8 demos:   RMS 4.7 / 5.0 / 4.9 cm, 2-sigma coverage 0.63 / 0.81 / 0.93,
#:                    NLL 3.41 / -1.31 / -1.88
#:   synthetic 20-D:  RMS 1.78 / 1.79 / 1.96 cm, coverage 0.968 / 0.986 / 0.994,
#:                    NLL -2.63 / -2.43 / -2.16
#: 0.05 is badly over-confident on real data, 1.0 costs accuracy on clean data; 0.3 keeps
#: the accuracy and most of the calibration on both.
DEFAULT_REGULARISATION = CovarianceRegularisation()


def real_array(values: object, name: str) -> npt.NDArray[np.floating[Any]]:
    """``values`` as a float array; TypeError if they are not real numbers (complex values
    lost their imaginary part with a warning, strings failed in numpy's conversion)."""
    array = np.asarray(values)
    if array.dtype.kind not in "biuf":
        raise TypeError(f"{name} must hold real numbers, got dtype {array.dtype}")
    return array.astype(float, copy=False)


def demo_phases(times: npt.NDArray[np.floating[Any]]) -> npt.NDArray[np.floating[Any]]:
    """Phase z = (t - t_0) / (t_end - t_0) of each sample of a demonstration: (T,) in [0, 1]."""
    t = np.asarray(times, dtype=float)
    return (t - t[0]) / (t[-1] - t[0])


def fit_weights(basis: RBFBasis, times: npt.NDArray[np.floating[Any]], values: npt.NDArray[np.floating[Any]],
                ridge: float = 1e-12) -> tuple[npt.NDArray[np.floating[Any]], npt.NDArray[np.floating[Any]]]:
    """Ridge regression of one demonstration's weights (Eq. 5.5).

    Args:
        basis: k-function basis.
        times: (T,) sample times [s].
        values: (T, D) signal values.
        ridge: lambda of Eq. 5.5 (the thesis uses 1e-12).

    Returns:
        weights (D, k) and residuals (T, D) = values - Phi weights^T.
    """
    values = np.asarray(values, dtype=float)
    if values.ndim == 1:
        values = values[:, None]
    phi = basis(demo_phases(times))                      # (T, k)
    gram = phi.T @ phi
    gram[np.diag_indices_from(gram)] += ridge
    rhs = phi.T @ values                                 # (k, D)
    try:
        w = scipy.linalg.solve(gram, rhs, assume_a="pos", check_finite=False)
    except (np.linalg.LinAlgError, scipy.linalg.LinAlgError):
        # Fewer samples than basis functions with a tiny ridge: fall back to least squares.
        w = np.linalg.lstsq(phi, values, rcond=None)[0]
    return w.T.copy(), values - phi @ w


def learn_promp(demos: Sequence[Demonstration], basis: RBFBasis | None = None, *,
                ridge: float = 1e-12, covariance: str = "full",
                regularisation: CovarianceRegularisation = DEFAULT_REGULARISATION,
                min_noise_std: float | npt.NDArray[np.floating[Any]] = 1e-4,
                signal_names: Sequence[str] | None = None, label: str | None = None) -> ProMP:
    """Learn the ProMP of one task from its demonstrations (§5.3.4).

    Args:
        demos: N >= 1 demonstrations with the same D signals, any durations.
        basis: RBF basis (default :class:`RBFBasis` ()).
        ridge: ridge lambda of Eq. 5.5.
        covariance: "full" (cross-signal covariance kept) or "per_signal" (thesis).
        regularisation: see :class:`CovarianceRegularisation`.
        min_noise_std: floor of the per-signal observation noise std (scalar or (D,)).
        signal_names: optional names of the D signals.
        label: optional task label.

    Returns:
        A structured :class:`ProMP`.
    """
    if len(demos) == 0:
        raise ValueError("need at least one demonstration")
    if not all(isinstance(d, Demonstration) for d in demos):
        bad = next(d for d in demos if not isinstance(d, Demonstration))
        raise TypeError(f"demos must be Demonstration objects, got {type(bad).__name__}")
    if basis is not None and not isinstance(basis, RBFBasis):
        raise TypeError(f"basis must be an RBFBasis, got {type(basis).__name__}")
    if not 0 <= ridge < np.inf:
        raise ValueError(f"ridge must be a finite number >= 0, got {ridge!r}")
    if len(demos) == 1 and regularisation.absolute <= _NO_SPREAD_VARIANCE:
        warnings.warn(f"{'task ' + repr(label) + ': ' if label else ''}a ProMP learned from one demonstration has "
                      "no spread and cannot follow an operator who moves otherwise: learn from several, or give "
                      "CovarianceRegularisation(absolute=...)", SingleDemonstrationWarning, stacklevel=2)
    if covariance not in ("full", "per_signal"):
        raise ValueError(f"covariance must be 'full' or 'per_signal', got {covariance!r}")
    basis = basis or RBFBasis()
    D = demos[0].n_signals
    if any(d.n_signals != D for d in demos):
        raise ValueError("all demonstrations must have the same number of signals")
    floor = np.asarray(min_noise_std, dtype=float)
    if floor.shape not in ((), (D,)) or not np.all(np.isfinite(floor) & (floor >= 0)):
        raise ValueError(f"min_noise_std must be a finite std >= 0, a scalar or ({D},), got {floor.tolist()!r}")
    k = basis.n_basis
    weights = np.empty((len(demos), D, k))
    sq_residual = np.zeros(D)
    dof = 0
    for i, demo in enumerate(demos):
        weights[i], residual = fit_weights(basis, demo.times, demo.values, ridge)
        sq_residual += np.sum(residual ** 2, axis=0)
        dof += max(len(demo.times) - k, 1)
    mean = weights.mean(axis=0)
    n = len(demos)
    centred = (weights - mean) / np.sqrt(max(n - 1, 1))            # (N, D, k)
    low_rank = np.ascontiguousarray(centred.transpose(1, 2, 0))     # (D, k, N)
    mean_block_var = np.einsum("ndk,ndk->d", centred, centred) / k  # mean diag of S_dd

    block_var = regularisation.relative * mean_block_var + regularisation.absolute
    noise_var = np.maximum(sq_residual / dof, np.asarray(min_noise_std, dtype=float) ** 2)
    labels = {d.label for d in demos if d.label is not None}
    if label is None and len(labels) == 1:
        label = labels.pop()
    return ProMP(basis=basis, weight_mean=mean, noise_var=noise_var,
                 durations=np.array([d.duration for d in demos]),
                 low_rank=low_rank, block_var=block_var, coupled=(covariance == "full"),
                 signal_names=tuple(signal_names) if signal_names is not None else None,
                 label=label, group_var=between_group_variance(demos, basis, weights))


def between_group_variance(demos: Sequence[Demonstration], basis: RBFBasis,
                           weights: npt.NDArray[np.floating[Any]] | None = None,
                           n_phases: int = 101) -> npt.NDArray[np.floating[Any]] | None:
    """(D,) variance across the groups' mean trajectories, averaged over the phase, or None.

    Each demonstration's fitted trajectory Phi(z) w_i is read on ``n_phases`` phases over
    [0, 1]; the trajectories of each group (``Demonstration.group``) are averaged, and the
    unbiased variance across the G group means (ddof 1: with two groups, half the squared
    difference) is averaged over the phases. Unit: signal unit^2. None when fewer than two
    groups are named (one performer, or groups unknown).

    Why a phase average: with two or three groups the per-phase estimate has one or two
    degrees of freedom and is far too noisy to use phase by phase (measured: it recognised
    worse than the average on the HDM05 held-out performers).

    Args:
        demos: the task's demonstrations.
        basis: the basis used to fit them.
        weights: (N, D, k) their fitted weights, if already computed.
        n_phases: resolution of the phase average.
    """
    groups = [d.group for d in demos]
    names = sorted({g for g in groups if g is not None})
    if len(names) < 2:
        return None
    if weights is None:
        weights = np.array([fit_weights(basis, d.times, d.values)[0] for d in demos])
    phi = basis(np.linspace(0.0, 1.0, n_phases))                       # (Z, k)
    means = []
    for name in names:
        w = np.mean([weights[i] for i, g in enumerate(groups) if g == name], axis=0)   # (D, k)
        means.append(phi @ w.T)                                         # (Z, D)
    return np.var(np.array(means), axis=0, ddof=1).mean(axis=0)


def augment_promp(promp: ProMP, offset: float = 0.0, ramp: float = 0.0, amplitude: float = 0.0,
                  group_offset: float = 0.0, group_amplitude: float = 0.0) -> ProMP:
    """The ProMP with structured directions of variation added to its low-rank covariance.

    Args:
        promp: a learned (structured, coupled) ProMP.
        offset: std of a constant shift of each signal over the whole motion, as a
            fraction of that signal's demo spread s_d (RMS over the phase of its std across
            the demonstrations). One low-rank column per signal.
        ramp: the same for a shift growing linearly from -s_d to +s_d over the phase.
        amplitude: std of a common scaling of every signal's mean displacement from its
            start value (a shallower squat, a shorter reach), as a fraction. One column.
        group_offset: when the model measured its between-performer variance
            (``promp.group_var``, demonstrations of two or more named performers), the
            constant shift's std is ``group_offset * sqrt(group_var_d)`` instead of
            ``offset * s_d``: the offset prior is then the measured spread of a performer's
            mean trajectory about the others', not a hand-set fraction of the demo spread
            (a hierarchical, between-performer term: w = mu_w + 1 c_perf + ..., with
            c_perf,d ~ N(0, group_var_d)). Ignored (``offset`` applies) without group_var.
        group_amplitude: the amplitude column's std when the model knows two or more
            performers (``promp.group_var`` present) and ``amplitude`` is 0: a scaling
            between performers (a deeper squat) rather than within one performer's
            repetitions of a goal-directed motion, whose end point stays put.

    These directions model how an operator who is not one of the demonstrators differs
    (another height, stance, depth): a deviation observed early persists over the rest of
    the motion, which the isotropic regulariser cannot express (its deviations are
    independent per basis function and fade within a basis width of the last observation).
    A model without structure, or nothing to add, is returned as it is.
    """
    offset_std = _offset_std(promp, offset, group_offset)
    if amplitude <= 0 and promp.group_var is not None:
        amplitude = group_amplitude
    if not promp.structured or not promp.coupled or (offset_std is None and ramp <= 0 and amplitude <= 0):
        return promp
    basis, mean = promp.basis, promp.weight_mean
    low_rank, block_var = promp.structure()
    D, k = mean.shape
    cols: list[npt.NDArray[np.floating[Any]]] = []
    # The normalised RBFs sum to one, so equal weights give a constant; weights equal to
    # the (clipped) phase of their centre give a ramp.
    if offset_std is not None:
        cols.append(_per_signal_columns(offset_std, np.ones(k)))
    if ramp > 0:
        spread = _demo_spread(basis, low_rank)
        cols.append(_per_signal_columns(ramp * spread, 2.0 * np.clip(basis.centres, 0.0, 1.0) - 1.0))
    if amplitude > 0:
        cols.append((amplitude * (mean - mean[:, :1]))[:, :, None])
    return ProMP(basis=basis, weight_mean=mean, noise_var=promp.noise_var, durations=promp.durations,
                 low_rank=np.ascontiguousarray(np.concatenate([low_rank] + cols, axis=2)),
                 block_var=block_var, coupled=True, signal_names=promp.signal_names,
                 label=promp.label, group_var=promp.group_var)


def _offset_std(promp: ProMP, offset: float, group_offset: float) -> npt.NDArray[np.floating[Any]] | None:
    """(D,) std [signal unit] of the constant-shift column of :func:`augment_promp`, or None.

    group_offset * sqrt(group_var_d) when the model measured a between-performer variance
    and group_offset > 0, else offset * s_d (s_d: :func:`_demo_spread`) when offset > 0,
    else None (no offset column). Unstructured models get None (nothing is augmented).
    """
    if not promp.structured:
        return None
    if group_offset > 0 and promp.group_var is not None:
        return group_offset * np.sqrt(promp.group_var)
    return offset * _demo_spread(promp.basis, promp.structure()[0]) if offset > 0 else None


def _demo_spread(basis: RBFBasis, low_rank: npt.NDArray[np.floating[Any]],
                 n_phases: int = 101) -> npt.NDArray[np.floating[Any]]:
    """(D,) RMS over the phase of each signal's std across the demonstrations, floored at 1e-9.

    low_rank: (D, k, r) centred demo weights / sqrt(N - 1), so Phi(z) U_d U_d^T Phi(z)^T is
    signal d's sample variance at phase z.
    """
    phi = basis(np.linspace(0.0, 1.0, n_phases))
    demo_traj = np.einsum("zk,dkr->zdr", phi, low_rank)                      # (Z, D, r)
    return np.maximum(np.sqrt(np.mean(np.sum(demo_traj ** 2, axis=2), axis=0)), 1e-9)


def _per_signal_columns(std: npt.NDArray[np.floating[Any]], shape: npt.NDArray[np.floating[Any]]
                        ) -> npt.NDArray[np.floating[Any]]:
    """(D, k, D) low-rank columns, column d = std_d * shape on signal d's weights only.

    std: (D,) std of the direction per signal [signal unit]; shape: (k,) weights of the
    direction (ones: a constant, since the normalised RBFs sum to one).
    """
    D, k = len(std), len(shape)
    block = np.zeros((D, k, D))
    block[np.arange(D), :, np.arange(D)] = std[:, None] * shape[None, :]
    return block
