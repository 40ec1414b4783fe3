"""Per-tick timings of the controller and their percentiles over a sliding window."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class TickTimings(NamedTuple):
    """Wall-clock cost of one controller tick [ms].

    Attributes:
        build_ms: kinematics, Jacobians, task rows and constraints.
        solve_ms: the QP(s) and the null-space bases of the hierarchy.
        total_ms: the whole tick, integration and checks included.
    """

    build_ms: float
    solve_ms: float
    total_ms: float


class TimingWindow:
    """Ring buffer of the last ``size`` ticks' timings.

    :meth:`stats` returns a flat dict (easy to publish in telemetry):
    ``{"build_p50_ms", "build_p99_ms", "solve_p50_ms", "solve_p99_ms", "total_p50_ms",
    "total_p99_ms", "total_max_ms", "ticks"}`` where ``ticks`` is the number of ticks in
    the window (the percentiles are NaN before the first tick).
    """

    FIELDS = ("build", "solve", "total")

    def __init__(self, size: int = 1000) -> None:
        if size < 1:
            raise ValueError("timing window size must be >= 1")
        self.size = size
        self._samples: list[TickTimings] = [TickTimings(0.0, 0.0, 0.0)] * size  # a Python list:
        self._count = 0                          # storing a tuple costs less than a numpy row

    def add(self, timings: TickTimings) -> None:
        self._samples[self._count % self.size] = timings
        self._count += 1

    def clear(self) -> None:
        self._count = 0

    def __len__(self) -> int:
        return min(self._count, self.size)

    def stats(self) -> dict[str, float]:
        n = len(self)
        out: dict[str, float] = {}
        if n == 0:
            for name in self.FIELDS:
                out[f"{name}_p50_ms"] = out[f"{name}_p99_ms"] = float("nan")
            out["total_max_ms"] = float("nan")
        else:
            window = np.array(self._samples[:n])
            p50, p99 = np.percentile(window, (50, 99), axis=0)
            for i, name in enumerate(self.FIELDS):
                out[f"{name}_p50_ms"] = float(p50[i])
                out[f"{name}_p99_ms"] = float(p99[i])
            out["total_max_ms"] = float(window[:, 2].max())
        out["ticks"] = n
        return out
