"""Clocks: the same code runs on wall time (live stations) and on a virtual clock (trials).

A clock is anything with ``now() -> float`` seconds. Virtual clocks advance only when told,
so a trial over hours of data runs as fast as the machine allows and is reproducible.
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float: ...


def monotonic_s() -> float:
    """The host's monotonic time [s], ``time.monotonic()``: never stepped by NTP, and
    system-wide (``CLOCK_MONOTONIC`` on Linux), so stamps of two processes on one host
    compare. The one time base of the stations' :class:`WallClock`, the video path
    (:mod:`teleop.video.clock`) and the real-time trials, whose stamps a recording or a
    score puts side by side (the video path read ``perf_counter``, the same clock on Linux
    but not on every OS)."""
    return time.monotonic()


class WallClock:
    """Monotonic wall time [s] (:func:`monotonic_s`), optionally offset."""

    def __init__(self, offset: float = 0.0) -> None:
        self.offset = offset

    def now(self) -> float:
        return monotonic_s() + self.offset


class VirtualClock:
    """A clock that advances only through :meth:`advance` / :meth:`set`."""

    def __init__(self, start: float = 0.0) -> None:
        self._t = float(start)

    def now(self) -> float:
        return self._t

    def advance(self, dt: float) -> float:
        if dt < 0:
            raise ValueError("a virtual clock cannot go backwards")
        self._t += dt
        return self._t

    def set(self, t: float) -> None:
        if t < self._t:
            raise ValueError("a virtual clock cannot go backwards")
        self._t = float(t)


class RealTimePacer:
    """Keeps a simulated time in step with the wall clock by sleeping when ahead.

    ``wait(sim_time)`` returns how late the loop was [s] (0 when on time); a loop that
    cannot keep up is not slowed further, so the real-time factor is then measurable.
    """

    def __init__(self) -> None:
        self._wall0: float | None = None
        self._sim0 = 0.0

    def wait(self, sim_time: float) -> float:
        now = time.perf_counter()
        if self._wall0 is None:
            self._wall0, self._sim0 = now, sim_time
            return 0.0
        target = self._wall0 + (sim_time - self._sim0)
        if target > now:
            time.sleep(target - now)
            return 0.0
        return now - target
