"""Evaluation metrics, exactly as the reference defines them (§3.3.1 table, §3.3.2 algorithms).

Units: degrees and seconds. Optional metrics are ``None`` (JSON null) when not computable.

Per joint and motion (:func:`joint_metrics`), over N samples of e = SP − PV:

* ``AvgAbsoluteError``  = Σ|e|/N,  ``AvgSignedError`` = Σe/N,  ``MaxAbsoluteError`` = max|e|.
* For each *significant set-point change* (|ΔSP| > ε, ε = Unity's ``Mathf.Epsilon``, and the
  new SP held for ≥ 2 samples), with k0 the first sample after the change, k1 the last before
  the next change of the set-point (any |ΔSP| > ε, significant or not: the window is where the
  new SP holds, so a ramp after a hold is not the hold's overshoot or settling — the reference's
  "null if ... the set-point changes too fast"), e_s = SP − PV on [k0, k1] and
  Δ = |SP_new − SP_old|:

  - kc = first k ≥ k0 with sign(e_s[k]) ≠ sign(e_s[k0])               (PV crosses SP)
  - overshoot = None if no kc else max|e_s[kc..k1]|
  - settle_x  = None if Δ < x else t[last k in [k0, k1] with |e_s[k]| > x] − t[k0]
    (backward scan; 0 when no sample is outside the band. As in the reference, a response
    still outside the band at k1 reports t[k1] − t[k0].)
  - R10 = t[first k: |e_s| < 0.9Δ] − t[k0],  R50 = t[first k: |e_s| < 0.5Δ] − t[k0],
    both None if Δ < 10° (or if never reached)
  - R100 = t[kc] − t[k0], None if no kc.

  ``MaxOvershoot`` is the max over changes; the ``Avg…`` metrics average the non-None values
  over all changes (None when there are none).

Aggregation (§3.3.1): per motion across joints, averages are averaged over joints and
``MaxOvershoot`` is the max over joints; overall combines all motions the same way.
``MaxAbsoluteError`` is a maximum too and is maxed likewise [our reading: the reference names
only MaxOvershoot].
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

import numpy as np

from teleop.tuning.experiment_data import JointTrace, Recording

#: Unity's Mathf.Epsilon (smallest positive float32 denormal): any real change counts.
EPSILON = 1.401298e-45
SETTLING_BANDS_DEG = (10.0, 5.0, 2.0)
#: R10 and R50 need a change of at least this much [deg] (§3.3.2).
MIN_RESPONSE_STEP_DEG = 10.0

METRIC_NAMES = ("AvgAbsoluteError", "AvgSignedError", "MaxAbsoluteError", "MaxOvershoot",
                "AvgSettlingTime10Degrees", "AvgSettlingTime5Degrees", "AvgSettlingTime2Degrees",
                "Avg10PercentResponseTime", "Avg50PercentResponseTime", "AvgCompleteResponseTime")
#: Metrics that are maxima (maxed when aggregating); all others are averaged.
MAX_METRICS = ("MaxAbsoluteError", "MaxOvershoot")


@dataclass
class SetpointChange:
    """One significant set-point change: samples [k0, k1] and the step size Δ [deg]."""

    k0: int
    k1: int
    delta: float


def significant_changes(setpoint: np.ndarray, epsilon: float = EPSILON) -> list[SetpointChange]:
    """Significant set-point changes of a (N,) set-point series [deg] (§3.3.2).

    Each window [k0, k1] ends before the next change of the set-point of any size (the
    reference's "k1 (before the next change)"), not before the next *significant* one: the
    samples after it track another set-point.
    """
    sp = np.asarray(setpoint, dtype=float)
    # Samples k at which the set-point changed (|sp[k] − sp[k−1]| > ε).
    changed_at = (np.nonzero(np.abs(np.diff(sp)) > epsilon)[0] + 1).tolist()
    changes = []
    for i, k0 in enumerate(changed_at):
        k1 = changed_at[i + 1] - 1 if i + 1 < len(changed_at) else len(sp) - 1
        if k1 >= k0 + 1:      # the new value is held for >= 2 samples (k0 and k0 + 1)
            changes.append(SetpointChange(k0, k1, float(abs(sp[k0] - sp[k0 - 1]))))
    return changes


def change_metrics(t: np.ndarray, error: np.ndarray, change: SetpointChange) -> dict[str, float | None]:
    """Overshoot, settling and response times of one change (§3.3.2).

    Args:
        t: (N,) times [s]; error: (N,) e_s = SP − PV [deg]; change: the change's window.
    """
    k0, k1, delta = change.k0, change.k1, change.delta
    e = error[k0:k1 + 1]
    tt = t[k0:k1 + 1] - t[k0]
    crossed = np.nonzero(np.sign(e) != np.sign(e[0]))[0]
    kc = int(crossed[0]) if len(crossed) else None
    out: dict[str, float | None] = {"overshoot": None if kc is None else float(np.max(np.abs(e[kc:])))}
    for band in SETTLING_BANDS_DEG:
        if delta < band:
            out[f"settle{band:g}"] = None
        else:
            outside = np.nonzero(np.abs(e) > band)[0]
            out[f"settle{band:g}"] = float(tt[outside[-1]]) if len(outside) else 0.0
    for name, fraction in (("r10", 0.9), ("r50", 0.5)):
        reached = np.nonzero(np.abs(e) < fraction * delta)[0]
        out[name] = float(tt[reached[0]]) if delta >= MIN_RESPONSE_STEP_DEG and len(reached) else None
    out["r100"] = None if kc is None else float(tt[kc])
    return out


def _mean(values: Iterable[float | None]) -> float | None:
    v = [x for x in values if x is not None]
    return float(np.mean(v)) if v else None


def _max(values: Iterable[float | None]) -> float | None:
    v = [x for x in values if x is not None]
    return float(np.max(v)) if v else None


def joint_metrics(trace: JointTrace) -> dict[str, float | None]:
    """All metrics of one joint in one motion (§3.3.1); see the module docstring."""
    e = trace.error
    if len(e) == 0:
        raise ValueError(f"{trace.joint}: empty trace")
    # NaN / inf samples would make every metric NaN (or a sample "cross" the set-point), and
    # the times t[k] − t[k0] assume increasing sample times: refuse both, naming the trace.
    for name in ("t", "desired", "measured"):
        bad = np.nonzero(~np.isfinite(getattr(trace, name)))[0]
        if len(bad):
            raise ValueError(f"joint {trace.joint!r} ({trace.motion}): non-finite {name} at sample(s) "
                             f"{bad[:5].tolist()}{' ...' if len(bad) > 5 else ''}")
    if np.any(np.diff(trace.t) <= 0):
        raise ValueError(f"joint {trace.joint!r} ({trace.motion}): sample times t are not increasing")
    per_change = [change_metrics(trace.t, e, c) for c in significant_changes(trace.desired)]
    return {
        "AvgAbsoluteError": float(np.mean(np.abs(e))),
        "AvgSignedError": float(np.mean(e)),
        "MaxAbsoluteError": float(np.max(np.abs(e))),
        "MaxOvershoot": _max(c["overshoot"] for c in per_change),
        "AvgSettlingTime10Degrees": _mean(c["settle10"] for c in per_change),
        "AvgSettlingTime5Degrees": _mean(c["settle5"] for c in per_change),
        "AvgSettlingTime2Degrees": _mean(c["settle2"] for c in per_change),
        "Avg10PercentResponseTime": _mean(c["r10"] for c in per_change),
        "Avg50PercentResponseTime": _mean(c["r50"] for c in per_change),
        "AvgCompleteResponseTime": _mean(c["r100"] for c in per_change),
    }


def aggregate(evaluations: Iterable[Mapping[str, float | None]]) -> dict[str, float | None]:
    """Combine evaluations (joints of a motion, or motions): maxima maxed, the rest averaged,
    ignoring None; None when no evaluation has a value (§3.3.1)."""
    evaluations = list(evaluations)
    return {name: (_max if name in MAX_METRICS else _mean)(ev.get(name) for ev in evaluations)
            for name in METRIC_NAMES}


def evaluate_recording(recording: Recording) -> dict:
    """{"joints": {joint: metrics}, "motion": metrics across joints} of one motion."""
    joints = {name: joint_metrics(tr) for name, tr in recording.traces.items()}
    return {"joints": joints, "motion": aggregate(joints.values())}


def evaluate_all(recordings: Iterable[Recording]) -> dict:
    """The reference's export tree (Fig. 3.8): per motion (with per joint), and overall."""
    motions = {rec.motion: evaluate_recording(rec) for rec in recordings}
    return {"motions": motions, "overall": aggregate(m["motion"] for m in motions.values())}
