"""The demo's "what the operator sees" error (teleop.demo.seen_error_cm) on a made-up log."""

from __future__ import annotations

import numpy as np
import pytest

from teleop.demo import SessionLog, seen_error_cm


def _log(offset_when_predicting: float) -> tuple[SessionLog, np.ndarray]:
    """A 4 s log at 100 Hz: the operator's hands move along x; the robot's measured hands
    are exactly the operator's, shown τ_b = 0.5 s later, except on the "predicting" ticks
    (1-2 s) where they are off by ``offset_when_predicting`` [m] on every axis."""
    log = SessionLog()
    t = np.arange(0.0, 4.0, 0.01)
    predicting = (t >= 1.0) & (t < 2.0)
    for k, tk in enumerate(t):
        operator = np.zeros(20)
        operator[3:9] = 0.1 * np.sin(tk)          # both hands, every axis [m]
        seen_truth = 0.1 * np.sin(tk + 0.5)         # where the operator is when this is seen
        hands = np.full((2, 3), seen_truth) + (offset_when_predicting if predicting[k] else 0.0)
        log.times.append(tk)
        log.operator.append(operator)
        log.hands.append(hands)
    return log, predicting


def test_predicting_error_counts_only_the_predicting_ticks():
    log, predicting = _log(0.02)
    seen = seen_error_cm(log, tau_b=0.5, predicting=predicting)
    assert seen["predicting_cm"] == pytest.approx(2.0, abs=0.05)        # 2 cm on every axis
    assert seen["all_cm"] < seen["predicting_cm"]
    assert "predicting_cm" not in seen_error_cm(log, tau_b=0.5)


def test_no_predicting_ticks_give_none():
    log, predicting = _log(0.0)
    assert seen_error_cm(log, tau_b=0.5, predicting=np.zeros_like(predicting))["predicting_cm"] is None
    assert seen_error_cm(log, tau_b=0.5, predicting=predicting)["predicting_cm"] == pytest.approx(0.0, abs=0.05)
