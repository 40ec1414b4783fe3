"""The Delta-sigma out-of-distribution test of thesis §5.3.12 (reference §5.9).

The operator is "out of distribution" when, on any checked signal (the x, y, z of the
hands in the thesis), the distance between the observation and the task's learned mean at
the current phase exceeds Delta_sigma = n_std * learned std + margin, margin = 5 cm. The
thesis says "learned variance"; a variance in m^2 cannot be added to 5 cm, so we read it as
the standard-deviation band of the learned (prior, not conditioned) ProMP. That band is the
model's marginal std without observation noise, i.e. it includes the isotropic regulariser
of :mod:`promp.learning` (by default 0.3 of the signal's mean weight variance) on top of the
demonstrations' sample covariance (1/(N-1), Eq. 5.6 has 1/N): slightly wider than the
thesis's Sigma_w alone.
When it triggers, the caller blends back from the prediction to the delayed command (5.27).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import numpy.typing as npt

from promp.model import ProMP

__all__ = ["DeltaSigmaTest", "DeltaSigmaTable"]


@dataclass(frozen=True)
class DeltaSigmaTest:
    """Configurable Delta-sigma test.

    Attributes:
        indices: signals checked (e.g. retarget.references.HAND_INDICES = 3..8).
        margin: added to the std band, in the signals' unit (0.05 m in the thesis).
        n_std: width of the learned band in standard deviations (1 in the thesis).
    """

    indices: Sequence[int]
    margin: float = 0.05
    n_std: float = 1.0

    def excess(self, promp: ProMP, z: npt.NDArray[np.floating[Any]] | float,
               y: npt.NDArray[np.floating[Any]]) -> npt.NDArray[np.floating[Any]]:
        """How far beyond Delta_sigma each checked signal is (positive = outside).

        Args:
            promp: the (prior) task model.
            z: phase, scalar or (n,).
            y: observation (D,) or (n, D).

        Returns:
            (len(indices),) or (n, len(indices)) excess distances.
        """
        idx = list(self.indices)
        mean = promp.mean(z)[..., idx]
        std = np.sqrt(promp.var(z)[..., idx])
        dist = np.abs(np.asarray(y, dtype=float)[..., idx] - mean)
        return dist - (self.n_std * std + self.margin)

    def is_outside(self, promp: ProMP, z: npt.NDArray[np.floating[Any]] | float,
                   y: npt.NDArray[np.floating[Any]]) -> npt.NDArray[np.bool_] | bool:
        """True where any checked signal is outside its band: bool or (n,) bools."""
        if len(self.indices) == 0:
            return False if np.ndim(z) == 0 else np.zeros(len(np.atleast_1d(z)), dtype=bool)
        out = np.any(self.excess(promp, z, y) > 0, axis=-1)
        return out if isinstance(out, np.ndarray) else bool(out)

    def tabulate(self, promp: ProMP, n_points: int = 1001) -> "DeltaSigmaTable":
        """The test precomputed on ``n_points`` phases over [0, 1] (for per-sample use)."""
        z = np.linspace(0.0, 1.0, n_points)
        idx = np.asarray(self.indices, dtype=np.intp)
        mean = promp.mean(z)[:, idx]
        bound = self.n_std * np.sqrt(promp.var(z)[:, idx]) + self.margin
        return DeltaSigmaTable(idx, mean, bound)


@dataclass(frozen=True)
class DeltaSigmaTable:
    """:class:`DeltaSigmaTest` of one ProMP on a phase grid (nearest grid phase is used).

    Attributes:
        indices: (m,) checked signals.
        mean: (G, m) learned mean at the grid phases.
        bound: (G, m) Delta_sigma = n_std * std + margin at the grid phases.
    """

    indices: npt.NDArray[np.intp]
    mean: npt.NDArray[np.floating[Any]]
    bound: npt.NDArray[np.floating[Any]]

    def is_outside(self, z: float, y: npt.NDArray[np.floating[Any]], mask: npt.NDArray[np.bool_] | None = None) -> bool:
        """True if any checked (and present, per ``mask``) signal of y (D,) is outside its band."""
        if self.indices.size == 0:
            return False
        g = int(round(min(max(float(z), 0.0), 1.0) * (len(self.mean) - 1)))
        outside = np.abs(y[self.indices] - self.mean[g]) > self.bound[g]
        if mask is not None:
            outside &= mask[self.indices]
        return bool(outside.any())
