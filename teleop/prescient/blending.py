"""Sigmoid blending between delayed and predicted references (thesis Eqs. 5.25-5.27).

Each dimension n blends over Δy_n steps, Δy_n being the initial difference between the two
signals counted in millimetres (Cartesian signals) or tenths of a degree (postures), so a
large jump is spread over many steps and a small one is nearly instantaneous:

    β_n(i) = 1 / (1 + exp(-12 (i / Δy_n - 1/2))),   i = 0, 1, ..., Δy_n     (Eq. 5.26)
    y' = (1 - β) y_from + β y_to                                             (Eq. 5.25 / 5.27)

One step is one call of :meth:`SigmoidBlend.step` (one control tick of the compensator).
"""

from __future__ import annotations

import numpy as np

from retarget.references import CARTESIAN_INDICES, FLAT_SIZE

#: Units per blend step: 1 mm for Cartesian signals [m], 0.1 degree for angles [rad].
STEP_UNITS = np.full(FLAT_SIZE, np.radians(0.1))
STEP_UNITS[list(CARTESIAN_INDICES)] = 1e-3


def blend_steps(difference: np.ndarray, step_units: np.ndarray = STEP_UNITS,
                min_steps: int = 1, max_steps: int = 100) -> np.ndarray:
    """(D,) number of steps Δy_n of each dimension's blend (Eq. 5.26), clipped.

    The thesis leaves the step rate open; at the compensator's 100 Hz the clip of 100
    steps bounds every blend to 1 s: with seconds of delay the gap between delayed and
    predicted references is large, and a blend longer than the delay itself would keep
    the robot late for most of a 4-6 s motion.
    """
    # Whole units count as such: 0.7 degrees is 7.000000000000001 tenths of a degree in
    # radians and took 8 steps; a difference within 1e-9 of a step of a whole number of
    # steps is that number (an effect of 1e-12 m or 2e-12 rad, never seen otherwise).
    steps = np.ceil(np.abs(difference) / step_units - 1e-9)
    return np.clip(steps, min_steps, max_steps)


def sigmoid_weight(i: int | np.ndarray, steps: np.ndarray) -> np.ndarray:
    """(D,) blend weights β_n at step i (Eq. 5.26); exactly 1 once i ≥ Δy_n."""
    i = np.asarray(i, dtype=float)
    beta = 1.0 / (1.0 + np.exp(-12.0 * (i / steps - 0.5)))
    return np.where(i >= steps, 1.0, beta)


class SigmoidBlend:
    """A running blend from one reference stream to another.

    Args:
        start_from: (D,) value of the stream blended out, at the start.
        start_to: (D,) value of the stream blended in, at the start.
        step_scale: size of one step in multiples of :data:`STEP_UNITS`.
        max_steps: longest blend [steps] (see :func:`blend_steps`).
    """

    def __init__(self, start_from: np.ndarray, start_to: np.ndarray, step_scale: float = 1.0,
                 max_steps: int = 100) -> None:
        self.steps = blend_steps(np.asarray(start_to) - np.asarray(start_from), STEP_UNITS * step_scale,
                                 max_steps=max_steps)
        self.i = 0

    @property
    def done(self) -> bool:
        return bool(np.all(self.i >= self.steps))

    def step(self, y_from: np.ndarray, y_to: np.ndarray) -> np.ndarray:
        """(D,) blended value of the current samples, then advance one step."""
        beta = sigmoid_weight(self.i, self.steps)
        self.i += 1
        return (1.0 - beta) * y_from + beta * y_to
