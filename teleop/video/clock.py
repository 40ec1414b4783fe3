"""The one clock of the video path.

Every timestamp in :mod:`teleop.video` is a float number of **seconds** read from
:func:`teleop.clock.monotonic_s` (the stations' :class:`teleop.clock.WallClock` reads it too),
i.e. ``time.monotonic()``. On Linux it reads ``CLOCK_MONOTONIC``: it never jumps with
NTP steps, has nanosecond resolution, and is *system-wide*, so stamps taken in two processes
on the same host are directly comparable. Stamps taken on two different hosts are not:
they differ by an unknown clock offset, which the jitter buffer takes as an injectable
estimate (see :class:`teleop.video.jitter_buffer.JitterBuffer`).

A float64 holds seconds since boot with sub-microsecond precision for centuries of
uptime, which is why the wire format carries plain f64 seconds.
"""

from __future__ import annotations

from typing import Callable

from teleop.clock import monotonic_s

__all__ = ["Clock", "monotonic_s"]

#: A clock: a callable returning the current time in seconds. Injected in tests.
Clock = Callable[[], float]
