"""Prediction and recognition metrics of a task library on labelled test motions (thesis §5.4, Table 5.2).

For every test motion the :class:`promp.estimator.OnlineEstimator` is fed the motion's
samples in time order (no delay: the observation time stamps are the sample times) and
predictions of the *whole* motion are read at four levels of observation:

    "none"   no observation: the prior mean of the TRUE task (the thesis's hand-picked
             ProMP), at its mean demonstration duration (speed 1);
    "recog"  after ``recog_time`` seconds (the thesis recognises after about 1 s), with
             the estimator's own recognised task, right or wrong;
    "1/4"    after a quarter of the motion's duration;
    "1/2"    after half of it.

Metrics (all from the same predictions):
- recognition accuracy at each level ("none" is the prior's argmax, i.e. chance);
- RMS error over the not-yet-observed part ("remaining") and over the whole motion
  ("whole"), per signal and per caller-chosen group of signals (a group's RMS pools the
  squared errors of its signals), reported as mean and std over the test motions like
  Table 5.2;
- the same not-yet-observed part predicted by the unconditioned mean ("remaining_prior": the
  "none" prediction scored on each level's remainder), the baseline a level's "remaining"
  error is to be compared with: the end of a motion is often harder to predict than its
  whole, so the "none" level's whole-motion error is not the same yardstick;
- 2-sigma coverage: fraction of the remaining samples (per signal and pooled) inside
  mean +- 2 std of the predictive distribution (observation noise included). A calibrated
  Gaussian gives 0.954.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import numpy.typing as npt

from promp.estimator import EstimatorConfig, OnlineEstimator
from promp.learning import Demonstration
from promp.library import TaskLibrary

__all__ = ["LEVELS", "evaluate_library"]

LEVELS = ("none", "recog", "1/4", "1/2")


def evaluate_library(library: TaskLibrary, test_demos: Sequence[Demonstration], labels: Sequence[str], *,
                     groups: Mapping[str, Sequence[int]] | None = None,
                     config: EstimatorConfig = EstimatorConfig(), recog_time: float = 1.0) -> dict[str, Any]:
    """Evaluate recognition and prediction on labelled test motions (see module doc).

    Args:
        library: the trained task library.
        test_demos: motions to predict; each one's time origin is its first sample.
        labels: true task label of each test motion.
        groups: named index groups, e.g. {"hands": HAND_INDICES, "postures": POSTURE_INDICES}.
        config: estimator settings.
        recog_time: observed duration of the "recog" level [s].

    Returns:
        dict with keys "n_test", "levels", "recognition_accuracy" {level: float},
        "rms_remaining", "rms_whole" and "rms_remaining_prior" {level: {"per_signal_mean": (D,) list,
        "per_signal_std": (D,) list, "groups": {name: {"mean", "std"}}}},
        "coverage_2sigma" {level: {"per_signal": (D,) list, "overall": float, "samples": int,
        the number of (sample, signal) pairs counted}},
        "speed_estimates" {level: list of estimated speeds}, "true_speeds" (list, the
        demo's mean duration over the test duration), "recognised" {level: list of the
        recognised task labels, one per test motion}, "signal_names".
    """
    if len(test_demos) != len(labels):
        raise ValueError("one label per test motion")
    groups = dict(groups or {})
    est = OnlineEstimator(library, config)
    D = library.n_signals
    rms_rem: dict[str, list[_RMS]] = {lv: [] for lv in LEVELS}
    rms_whole: dict[str, list[_RMS]] = {lv: [] for lv in LEVELS}
    rms_rem_prior: dict[str, list[_RMS]] = {lv: [] for lv in LEVELS}
    inside = {lv: np.zeros(D) for lv in LEVELS}
    counted = {lv: np.zeros(D) for lv in LEVELS}
    correct = {lv: 0 for lv in LEVELS}
    speeds: dict[str, list[float]] = {lv: [] for lv in LEVELS}
    recognised: dict[str, list[str]] = {lv: [] for lv in LEVELS}
    true_speeds = []
    prior_task = int(np.argmax(est.filter.task_probabilities()))
    for demo, label in zip(test_demos, labels):
        k = library.index(label)
        promp = library.promps[k]
        t = demo.times - demo.times[0]
        y = demo.values
        duration = t[-1]
        true_speeds.append(promp.duration / duration)
        cut = {"none": -np.inf, "recog": recog_time, "1/4": 0.25 * duration, "1/2": 0.5 * duration}
        est.reset()
        preds = {}
        z0 = promp.phase(t)
        preds["none"] = (promp.mean(z0), promp.var(z0, include_noise=True), prior_task, 1.0)
        order = sorted(LEVELS[1:], key=lambda lv: cut[lv])
        i = 0
        for lv in order:
            while i < len(t) and t[i] <= cut[lv]:
                est.update(t[i], y[i])
                i += 1
            mean, var = est.predict_many(t, full_cov=False)
            e = est.estimate()
            preds[lv] = (mean, var, e.task_index, e.speed)
        for lv in LEVELS:
            mean, var, task, speed = preds[lv]
            correct[lv] += int(task == k)
            recognised[lv].append(library.labels[task])
            speeds[lv].append(float(speed))
            err = mean - y
            rem = t > cut[lv]
            if not rem.any():
                rem = np.ones_like(rem)
            rms_rem[lv].append(_rms(err[rem], groups))
            rms_rem_prior[lv].append(_rms(preds["none"][0][rem] - y[rem], groups))
            rms_whole[lv].append(_rms(err, groups))
            inside[lv] += np.sum(np.abs(err[rem]) <= 2.0 * np.sqrt(var[rem]), axis=0)
            counted[lv] += rem.sum()
    n = len(test_demos)
    return {
        "n_test": n,
        "levels": list(LEVELS),
        "recognition_accuracy": {lv: correct[lv] / n for lv in LEVELS},
        "rms_remaining": {lv: _summary(rms_rem[lv], groups) for lv in LEVELS},
        "rms_whole": {lv: _summary(rms_whole[lv], groups) for lv in LEVELS},
        "rms_remaining_prior": {lv: _summary(rms_rem_prior[lv], groups) for lv in LEVELS},
        "coverage_2sigma": {lv: {"per_signal": (inside[lv] / counted[lv]).tolist(),
                                 "overall": float(inside[lv].sum() / counted[lv].sum()),
                                 "samples": int(counted[lv].sum())}
                            for lv in LEVELS},
        "speed_estimates": speeds,
        "true_speeds": true_speeds,
        "recognised": recognised,
        "signal_names": list(library.promps[0].signal_names or [f"s{d}" for d in range(D)]),
    }


#: Per-signal RMS (D,) and the RMS of each named group of signals.
_RMS = tuple[npt.NDArray[np.floating[Any]], dict[str, float]]


def _rms(err: npt.NDArray[np.floating[Any]], groups: Mapping[str, Sequence[int]]) -> _RMS:
    per_signal = np.sqrt(np.mean(err ** 2, axis=0))
    return per_signal, {name: float(np.sqrt(np.mean(err[:, list(idx)] ** 2))) for name, idx in groups.items()}


def _summary(values: list[_RMS], groups: Mapping[str, Sequence[int]]) -> dict[str, Any]:
    per = np.array([v[0] for v in values])
    return {"per_signal_mean": per.mean(axis=0).tolist(), "per_signal_std": per.std(axis=0).tolist(),
            "groups": {name: {"mean": float(np.mean([v[1][name] for v in values])),
                              "std": float(np.std([v[1][name] for v in values]))} for name in groups}}
