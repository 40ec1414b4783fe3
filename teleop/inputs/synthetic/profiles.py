"""Smooth time profiles and band-limited noise from which synthetic motions are built.

All take times [s] as a (T,) array and return (T, ...) arrays.
"""

from __future__ import annotations

import numpy as np


def minimum_jerk(tau) -> np.ndarray:
    """Minimum-jerk position profile s(tau) = 10 tau^3 - 15 tau^4 + 6 tau^5, tau clipped to [0, 1].

    T. Flash & N. Hogan, "The coordination of arm movements: an experimentally confirmed
    mathematical model", J. Neurosci. 5(7):1688-1703, 1985.
    """
    tau = np.clip(np.asarray(tau, dtype=float), 0.0, 1.0)
    return tau ** 3 * (10.0 + tau * (-15.0 + 6.0 * tau))


def keyed(times: np.ndarray, keys) -> np.ndarray:
    """Piecewise minimum-jerk interpolation through keyframes.

    Args:
        times: (T,) sample times [s].
        keys: sequence of (time [s], value) with non-decreasing times; values are scalars
            or arrays of one common shape. Constant before the first and after the last key.
    Returns:
        (T,) + value shape.
    """
    key_times = np.array([k[0] for k in keys], dtype=float)
    values = np.array([np.asarray(k[1], dtype=float) for k in keys])
    index = np.clip(np.searchsorted(key_times, times, side="right") - 1, 0, len(keys) - 2)
    start, stop = key_times[index], key_times[index + 1]
    s = minimum_jerk((times - start) / np.maximum(stop - start, 1e-9))
    s = s.reshape(s.shape + (1,) * (values.ndim - 1))
    return values[index] + (values[index + 1] - values[index]) * s


def bump(times: np.ndarray, start: float, stop: float) -> np.ndarray:
    """(T,) smooth bump 16 tau^2 (1 - tau)^2 on [start, stop]: 0 with zero slope at the ends, 1 mid-way."""
    tau = np.clip((times - start) / max(stop - start, 1e-9), 0.0, 1.0)
    return 16.0 * tau ** 2 * (1.0 - tau) ** 2


def smoothstep(x) -> np.ndarray:
    x = np.clip(x, 0.0, 1.0)
    return x * x * (3.0 - 2.0 * x)


class SmoothNoise:
    """Band-limited random signal: a sum of sinusoids with random frequencies and phases.

    Deterministic given its random draws, evaluable at any times (the same value for the
    same time whatever else is evaluated), smooth, and with a prescribed RMS per channel.
    """

    def __init__(self, rng: np.random.Generator, shape: tuple[int, ...], band_hz: tuple[float, float],
                 rms: float, n_components: int = 6):
        self.frequencies = rng.uniform(band_hz[0], band_hz[1], (n_components,) + shape)
        self.phases = rng.uniform(0.0, 2.0 * np.pi, (n_components,) + shape)
        self.amplitude = rms / np.sqrt(n_components / 2.0)

    def __call__(self, times: np.ndarray) -> np.ndarray:
        t = np.asarray(times, dtype=float).reshape((-1,) + (1,) * (self.frequencies.ndim))
        return self.amplitude * np.sin(2.0 * np.pi * self.frequencies * t + self.phases).sum(axis=1)
