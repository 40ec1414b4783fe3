"""Seeded synthetic tasks: smooth multi-signal motions with correlated variations.

Used by the tests and the benchmark where real demonstrations are not needed (or not
available). A task is a sum of Gaussian bumps and smooth steps over the phase per signal;
each execution draws latent coefficients that move *all* signals together (so the weights'
cross-covariance matters, like a person who lifts higher also leans more), a duration
(speed), an optional mild non-linear time warp, and white measurement noise.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from promp.learning import Demonstration
from promp.library import TaskLibrary

__all__ = ["SyntheticTask", "make_tasks", "learn_library"]


@dataclass
class SyntheticTask:
    """A random smooth task over D signals.

    Attributes:
        centres: (B,) bump centres in phase.
        widths: (B,) bump widths in phase.
        base: (D, B + 1) amplitudes of the mean motion (last column: smooth step).
        latent: (L, D, B + 1) amplitude changes per unit latent coefficient.
        start: (D,) value at phase 0.
        duration: nominal duration [s].
        label: task label.
    """

    centres: npt.NDArray[np.floating[Any]]
    widths: npt.NDArray[np.floating[Any]]
    base: npt.NDArray[np.floating[Any]]
    latent: npt.NDArray[np.floating[Any]]
    start: npt.NDArray[np.floating[Any]]
    duration: float
    label: str

    @classmethod
    def random(cls, rng: np.random.Generator, n_signals: int, label: str, duration: float = 3.0,
               n_bumps: int = 4, n_latent: int = 3, scale: float = 0.2) -> "SyntheticTask":
        b = n_bumps
        return cls(centres=rng.uniform(0.15, 0.85, b), widths=rng.uniform(0.08, 0.2, b),
                   base=rng.normal(0.0, scale, (n_signals, b + 1)),
                   latent=rng.normal(0.0, 0.25 * scale, (n_latent, n_signals, b + 1)),
                   start=rng.normal(0.0, scale, n_signals), duration=duration, label=label)

    @property
    def n_signals(self) -> int:
        return int(self.base.shape[0])

    def values(self, z: npt.NDArray[np.floating[Any]],
               coeffs: npt.NDArray[np.floating[Any]] | None = None) -> npt.NDArray[np.floating[Any]]:
        """(n, D) signal values at phases z for latent coefficients (L,) (default 0: the mean)."""
        z = np.asarray(z, dtype=float)
        feats = np.concatenate([np.exp(-0.5 * ((z[:, None] - self.centres) / self.widths) ** 2),
                                (0.5 * (1.0 + np.tanh((z - 0.5) / 0.15)))[:, None]], axis=1)
        amp = self.base if coeffs is None else self.base + np.tensordot(coeffs, self.latent, axes=1)
        return self.start + feats @ amp.T

    def execution(self, rng: np.random.Generator, speed: float = 1.0, rate_hz: float = 100.0,
                  noise_std: float = 1e-3, warp: float = 0.0, coeffs: npt.NDArray[np.floating[Any]] | None = None,
                  ) -> tuple[Demonstration, npt.NDArray[np.floating[Any]]]:
        """One execution at ``speed`` x the nominal speed, sampled at ``rate_hz``.

        Args:
            warp: amplitude of a non-linear time warp z' = z + warp * u * sin(pi z) / pi,
                u ~ U(-1, 1) (z' stays monotone for warp < 1).
            coeffs: latent coefficients (default drawn from N(0, I)).

        Returns:
            the demonstration (times from 0) and its latent coefficients.
        """
        duration = self.duration / speed
        t = np.arange(0.0, duration + 0.5 / rate_hz, 1.0 / rate_hz)
        z = t / t[-1]
        if warp:
            z = z + warp * rng.uniform(-1.0, 1.0) * np.sin(np.pi * z) / np.pi
        c = np.asarray(rng.standard_normal(self.latent.shape[0]) if coeffs is None else coeffs)
        y = self.values(z, c) + rng.normal(0.0, noise_std, (len(t), self.n_signals))
        return Demonstration(t, y, label=self.label), c

    def demonstrations(self, rng: np.random.Generator, n_demos: int, speed_spread: float = 0.1,
                       **kw: Any) -> list[Demonstration]:
        """n_demos executions with speeds log-uniform in [1/(1+spread), 1+spread]."""
        s = np.exp(rng.uniform(-np.log1p(speed_spread), np.log1p(speed_spread), n_demos))
        return [self.execution(rng, speed=float(si), **kw)[0] for si in s]


def make_tasks(seed: int, n_tasks: int, n_signals: int, **kw: Any) -> list[SyntheticTask]:
    """``n_tasks`` random tasks labelled task0, task1, ... (keyword args: :meth:`SyntheticTask.random`)."""
    rng = np.random.default_rng(seed)
    return [SyntheticTask.random(rng, n_signals, f"task{i}", **kw) for i in range(n_tasks)]


def learn_library(tasks: list[SyntheticTask], rng: np.random.Generator, n_demos: int,
                  **learn_kw: Any) -> TaskLibrary:
    """A library of ``tasks``, each learned from ``n_demos`` demonstrations drawn in task order
    from ``rng`` (keyword args: :meth:`promp.library.TaskLibrary.learn`, e.g. ``basis``)."""
    return TaskLibrary.learn({t.label: t.demonstrations(rng, n_demos) for t in tasks}, **learn_kw)
