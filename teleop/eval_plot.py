"""What ``teleop eval promp`` predicts, as a picture (in the manner of the thesis's Fig. 5.15).

One row per test task (its first test take), one column per amount observed (¼, ½): the
hand coordinate that moves most in that take (the right hand's height drew a flat line for
a left-handed task), the part the estimator has seen, and the prediction of the rest (mean
± 2σ of the predictive distribution, observation noise included), titled with the task the
estimator recognised and the RMS error of the rest. A row's two panels share their y
range, which the curves set (a band far wider than the motion squashed them).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from promp.estimator import EstimatorConfig, OnlineEstimator  # noqa: E402
from promp.learning import Demonstration  # noqa: E402
from promp.library import TaskLibrary  # noqa: E402
from retarget.references import FLAT_LABELS, HAND_INDICES  # noqa: E402

#: Fractions of each motion observed before predicting, as in the evaluation's columns.
OBSERVED = (0.25, 0.5)


def predict_after(library: TaskLibrary, demo: Demonstration, fraction: float,
                  config: EstimatorConfig) -> tuple[np.ndarray, np.ndarray, str]:
    """Prediction of a whole motion after ``fraction`` of it was observed (no delay).

    Returns:
        mean (T, D) and variance (T, D) at the motion's sample times (time from its first
        sample [s]), and the recognised task's label.
    """
    t = demo.times - demo.times[0]
    estimator = OnlineEstimator(library, config)
    for ti, yi in zip(t, demo.values):
        if ti > fraction * t[-1]:
            break
        estimator.update(ti, yi)
    mean, var = estimator.predict_many(t, full_cov=False)
    return mean, var, estimator.estimate().task


def _most_moving_hand_signal(values: np.ndarray) -> int:
    """The flat index of the hand coordinate with the widest range in ``values`` (T, D)."""
    hands = list(HAND_INDICES)
    return hands[int(np.argmax(np.ptp(values[:, hands], axis=0)))]


def plot_predictions(cases: Sequence[tuple[Demonstration, str]], library_for: Callable[[int], TaskLibrary],
                     path: Path, config: EstimatorConfig, names: Sequence[str] | None = None,
                     title: str = "") -> Path:
    """PNG of the predictions of one take per task (see the module doc).

    Args:
        cases: (motion, true task label) per row.
        library_for: the library that predicts row i (leave-one-out gives each its own).
        path: PNG to write.
        config: estimator settings (the robot station's).
        names: the take of each row (its file name), for the row titles.
        title: what was learned and tested, for the figure's title.
    """
    fig, axes = plt.subplots(len(cases), len(OBSERVED), figsize=(4.4 * len(OBSERVED), 2.5 * len(cases) + 0.6),
                             dpi=110, squeeze=False, sharex="row", sharey="row")
    for row, (demo, label) in enumerate(cases):
        library = library_for(row)
        signal = _most_moving_hand_signal(demo.values)
        t = demo.times - demo.times[0]
        truth = 100.0 * demo.values[:, signal]
        low, high = float(truth.min()), float(truth.max())
        for col, fraction in enumerate(OBSERVED):
            mean, var, recognised = predict_after(library, demo, fraction, config)
            m, s = 100.0 * mean[:, signal], 200.0 * np.sqrt(var[:, signal])
            seen = t <= fraction * t[-1]
            low, high = min(low, float(m.min())), max(high, float(m.max()))
            rest = np.sqrt(np.mean((m[~seen] - truth[~seen]) ** 2)) if (~seen).any() else float("nan")
            ax = axes[row, col]
            ax.plot(t, truth, color="black", lw=1.0, label="operator")
            ax.plot(t[seen], truth[seen], color="black", lw=2.6, label="observed")
            ax.plot(t, m, color="tab:blue", lw=1.4, label="predicted")
            ax.fill_between(t, m - s, m + s, color="tab:blue", alpha=0.18, label="±2σ")
            ax.axvline(fraction * t[-1], color="grey", lw=0.8)
            verdict = "" if recognised == label else f", taken for {recognised}"
            ax.set_title(f"{label} after {fraction:.0%}{verdict}; rest off by {rest:.1f} cm RMS", fontsize=8,
                         color="black" if recognised == label else "tab:red")
            ax.tick_params(labelsize=7)
            ax.grid(alpha=0.3)
        margin = 0.15 * max(high - low, 2.0)          # the band may run off: the curves set the range
        axes[row, 0].set_ylim(low - margin, high + margin)
        axes[row, 0].set_ylabel(f"{FLAT_LABELS[signal]} [cm]", fontsize=8)
        if names is not None:
            axes[row, 0].text(0.01, 0.02, names[row], transform=axes[row, 0].transAxes, fontsize=6, color="0.35")
    for ax in axes[-1]:
        ax.set_xlabel("time from onset [s]", fontsize=8)
    axes[0, 0].legend(fontsize=7, loc="best")
    fig.suptitle("ProMP prediction of each task's first test take after ¼ and ½ of it was seen"
                 + (f"\n{title}" if title else ""), fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
