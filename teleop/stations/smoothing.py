"""Smoothing of the references the robot executes.

Motion capture carries tremor and sensor noise at the sample rate (the synthetic operator
models ~2 mm of physiological tremor; Xsens hands jitter by a few mm), and the delayed
stream advances in bursts when jitter reorders packets. Tracked as they are by a stiff
position-controlled robot, these steps shake the body enough to make the feet chatter.
A critically damped second-order filter per signal removes them with a known lag:

    ÿ = ω² (u − y) − 2 ω ẏ,   ω = 2π f_c                    (critically damped, ζ = 1)

integrated exactly per step for a piecewise-constant input (the discrete system below is
the zero-order-hold discretisation, unconditionally stable at any step). The lag of a ramp
is 2/ω (at the default 4 Hz: 80 ms), far below the delays compensated.
"""

from __future__ import annotations

import numpy as np


class CriticallyDampedFilter:
    """Per-signal critically damped low-pass filter.

    Args:
        cutoff_hz: natural frequency f_c [Hz].
        dt: step [s].
    """

    def __init__(self, cutoff_hz: float = 4.0, dt: float = 0.01) -> None:
        if cutoff_hz <= 0 or dt <= 0:
            raise ValueError("cutoff and step must be positive")
        w = 2.0 * np.pi * cutoff_hz
        e = np.exp(-w * dt)
        # Exact ZOH transition of x = [y - u, ẏ] for ÿ = -w² (y-u) - 2w ẏ (double pole at -w).
        self._a = np.array([[e * (1 + w * dt), e * dt], [-w * w * dt * e, e * (1 - w * dt)]])
        self.y: np.ndarray | None = None
        self.v: np.ndarray | None = None

    def reset(self, value: np.ndarray) -> None:
        self.y = np.array(value, dtype=float)
        self.v = np.zeros_like(self.y)

    def step(self, u: np.ndarray) -> np.ndarray:
        """Filter one input sample (D,); returns the filtered (D,)."""
        u = np.asarray(u, dtype=float)
        if self.y is None:
            self.reset(u)
            return u.copy()   # the state just reset to
        err, v = self.y - u, self.v
        err, v = self._a[0, 0] * err + self._a[0, 1] * v, self._a[1, 0] * err + self._a[1, 1] * v
        self.y, self.v = u + err, v
        return self.y.copy()
