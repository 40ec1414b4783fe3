"""Motion-onset detection: the time t_0 from which a task's phase is counted (§5.3.5, Eq. 5.13).

The thesis starts recognition "when the derivative of the observed end-effector
trajectories exceeds a threshold" without giving the threshold. Here the speed of the
chosen signals (Euclidean norm of their finite-difference velocity, e.g. both hands:
indices 3..8 of the flat references) must stay above ``speed_threshold`` for
``min_duration`` seconds; the onset is the first sample of that run, so a single noisy
spike does not trigger and the reported time does not lag by min_duration. A sample equal
to the one before it during such a run is a repeat (a stream held at a higher rate), not a
stop: it is skipped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import numpy.typing as npt

__all__ = ["OnsetDetector", "detect_onset", "signal_speed"]


def signal_speed(times: npt.NDArray[np.floating[Any]], values: npt.NDArray[np.floating[Any]],
                 indices: Sequence[int]) -> npt.NDArray[np.floating[Any]]:
    """(T,) speed ||d y_idx / dt|| by backward differences (first sample: 0) [unit/s]."""
    t = np.asarray(times, dtype=float)
    v = np.asarray(values, dtype=float)[:, list(indices)]
    out = np.zeros(len(t))
    if len(t) > 1:
        dt = np.diff(t)
        out[1:] = np.linalg.norm(np.diff(v, axis=0), axis=1) / np.where(dt > 0, dt, np.inf)
    return out


def detect_onset(times: npt.NDArray[np.floating[Any]], values: npt.NDArray[np.floating[Any]], indices: Sequence[int],
                 speed_threshold: float = 0.1, min_duration: float = 0.1) -> float | None:
    """Onset time of a recorded motion, or None if it never moves.

    Args:
        times: (T,) increasing sample times [s].
        values: (T, D) signal values.
        indices: the signals whose joint speed is tested (e.g. hand positions).
        speed_threshold: speed above which the signals are moving [unit/s]
            (0.1 m/s for hands is about 10x the jitter of retargeted Xsens hands).
        min_duration: how long the speed must stay above the threshold [s].
    """
    det = OnsetDetector(indices, speed_threshold, min_duration)
    for t, y in zip(np.asarray(times, dtype=float), np.asarray(values, dtype=float)):
        onset = det.push(t, y)
        if onset is not None:
            return onset
    return None


@dataclass
class OnsetDetector:
    """Online version of :func:`detect_onset`: feed samples in time order with :meth:`push`."""

    indices: Sequence[int]
    speed_threshold: float = 0.1
    min_duration: float = 0.1
    onset: float | None = field(default=None, init=False)
    _prev: tuple[float, npt.NDArray[np.floating[Any]]] | None = field(default=None, init=False, repr=False)
    _run_start: float | None = field(default=None, init=False, repr=False)

    def reset(self) -> None:
        self.onset, self._prev, self._run_start = None, None, None

    def push(self, t: float, y: npt.NDArray[np.floating[Any]]) -> float | None:
        """Add one sample; returns the onset time once detected (and ever after).

        ValueError (before anything changes) for a time that is not finite, or a sample
        whose tested signals are missing or not finite (a NaN sample was taken, as a
        speed that is never above the threshold).
        """
        if self.onset is not None:
            return self.onset
        if not np.isfinite(t):
            raise ValueError(f"sample time t must be finite, got {t}")
        y = np.asarray(y, dtype=float)
        if y.ndim != 1 or any(not -len(y) <= i < len(y) for i in self.indices):
            raise ValueError(f"sample y must be 1-D with the signals {list(self.indices)}, got shape {y.shape}")
        sel = y[list(self.indices)]
        if not np.all(np.isfinite(sel)):
            raise ValueError("sample y must be finite on the tested signals (it holds NaN or inf)")
        if self._prev is not None and t > self._prev[0]:
            t_prev, y_prev = self._prev
            step = float(np.linalg.norm(sel - y_prev))
            if step == 0.0 and self._run_start is not None:
                # The same sample again in the middle of a motion: a slower stream held at a
                # faster rate (a robot's 100 Hz commands from a 50 Hz input). Taken as a stop,
                # every other step reset the run and no onset was ever found; the next new
                # sample's speed is measured from this one's first time instead.
                return self.onset
            speed = step / (t - t_prev)
            if speed > self.speed_threshold:
                if self._run_start is None:
                    self._run_start = t_prev
                if t - self._run_start >= self.min_duration:
                    self.onset = self._run_start
            else:
                self._run_start = None
        if self._prev is None or t > self._prev[0]:
            self._prev = (float(t), sel)
        return self.onset
