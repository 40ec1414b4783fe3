"""A station's periodic loop (:func:`run_loop`) and the timing of its overruns shorter than a second.

The stations' loop (:func:`run_loop`) keeps a monotonic schedule: tick ``k``
is due at ``start + k * period``. It says nothing until it falls a whole second behind,
yet a 10 ms body that sometimes takes 30 ms (a slow QP, a camera render) delays commands
and video and makes the robot look jerky. :class:`LoopTiming` counts these.

Definitions (all times from the loop's monotonic clock):

* **lateness** of a tick: when its body started minus when it was due [s], 0 at best.
* a tick is **late** when its lateness exceeds one period (the schedule slipped by a
  whole tick: the command or frame of that tick went out at least one tick late), or
  when its body alone ran longer than one period (so it made the next tick late). One
  body that takes 3 periods is thus one late tick and usually one or two late ticks after
  it, until the schedule has caught up.
* a **resync**: the loop fell more than a second behind and restarted its schedule from
  the current time (it then skips the ticks it missed instead of bursting them).

Memory is O(1) however long the station runs: the body durations go into a histogram
with logarithmic bins 2 % wide (0.01 ms to ~76 s; shorter and longer values land in the
end bins), so a median or p99 read from it is within 1 % of the true one (the geometric
middle of its bin, clamped to the largest duration seen, which is kept exactly). A
fixed-size reservoir would keep exact samples but a random, so noisy, p99; the histogram
is deterministic.

The overload warning looks at a sliding window of the last ``window_s`` seconds, kept as
one-second buckets (tick and late counts, and a histogram each for the window's p99).
"""

from __future__ import annotations

import math
import sys
import time
from typing import Callable

from teleop.stop_request import raise_if_stop_lost

#: Histogram of durations: bin ``i`` holds [MIN_MS * RATIO**i, MIN_MS * RATIO**(i + 1)) ms.
HIST_MIN_MS = 0.01
HIST_RATIO = 1.02
HIST_BINS = 800            # up to 0.01 ms * 1.02**800 = 76 s


def _bin(duration_ms: float) -> int:
    """The histogram bin of a duration [ms] (the end bins take what lies outside)."""
    if duration_ms <= HIST_MIN_MS:
        return 0
    return min(HIST_BINS - 1, int(math.log(duration_ms / HIST_MIN_MS) / math.log(HIST_RATIO)))


def _quantile(histogram: list[int], count: int, q: float, largest_ms: float) -> float:
    """The ``q`` quantile [ms] of the ``count`` durations in ``histogram``, never above
    ``largest_ms`` (the largest duration in it, known exactly); NaN without durations."""
    if count == 0:
        return float("nan")
    rank = max(1, math.ceil(q * count))     # the rank-th smallest duration
    seen = 0
    for i, n in enumerate(histogram):
        seen += n
        if seen >= rank:
            return min(HIST_MIN_MS * HIST_RATIO ** (i + 0.5), largest_ms)
    return largest_ms


def _short_ms(value: float) -> str:
    """A duration [ms] for a status line: "8.4", "31", "-" when not known."""
    if value != value:
        return "-"
    return f"{value:.1f}" if value < 10 else f"{value:.0f}"


class _Bucket:
    """One second of the overload window: its ticks, late ticks and body durations."""

    __slots__ = ("second", "ticks", "late", "histogram", "largest_ms")

    def __init__(self) -> None:
        self.second = -1            # which second of the run it holds (-1: none yet)
        self.ticks = self.late = 0
        self.histogram = [0] * HIST_BINS
        self.largest_ms = 0.0

    def reset(self, second: int) -> None:
        self.second = second
        self.ticks = self.late = 0
        self.histogram[:] = [0] * HIST_BINS
        self.largest_ms = 0.0


class LoopTiming:
    """Ticks, late ticks, body duration quantiles, largest lateness and resyncs of a loop
    with period ``period`` [s]; warns (see :meth:`tick`) when more than ``warn_fraction``
    of the ticks of the last ``window_s`` seconds were late, at most every ``warn_every_s``
    seconds. The first ``warmup_s`` seconds are left out of that window (first render,
    first QP, caches filling: slow ticks at every start, not an overload), and a window of
    fewer than ``min_ticks`` ticks, or of fewer than ``min_window_s`` seconds (or all of a
    shorter window), is not judged; all still count in the run's figures. Judged on the one
    second after the warm-up alone, every robot session warned "8.0 % ... in the last 1 s
    were late" 2 s in, its first camera renders still slow, at 2.5 % late over the run."""

    def __init__(self, period: float, *, window_s: float = 10.0, warn_fraction: float = 0.05,
                 warn_every_s: float = 30.0, warmup_s: float = 1.0, min_ticks: int = 10,
                 min_window_s: float = 3.0) -> None:
        if period <= 0:
            raise ValueError(f"period must be > 0 s, not {period}")
        self.period = period
        self.warn_fraction = warn_fraction
        self.warn_every_s = warn_every_s
        self.min_ticks = min_ticks
        self._warmup = math.ceil(warmup_s)      # whole seconds, as the window's buckets
        self.ticks = 0
        self.late = 0
        self.resyncs = 0
        self.max_lateness_ms = 0.0
        self.max_body_ms = 0.0
        self.warnings = 0
        self._histogram = [0] * HIST_BINS
        self._buckets = [_Bucket() for _ in range(max(1, round(window_s)))]
        self._min_window = min(len(self._buckets), max(1, math.ceil(min_window_s)))   # whole seconds
        self._first: float | None = None        # start time of the first tick [s]
        self._judged = -1                       # the last second the window was judged at
        self._last_warning: float | None = None

    # -- recording ---------------------------------------------------------------------

    def tick(self, started: float, scheduled: float, body_s: float) -> str | None:
        """Record one tick: its body started at ``started`` [s] (due at ``scheduled`` [s])
        and ran ``body_s`` [s]. Returns the overload warning to print (without the
        ``[station] warning:`` prefix) when one is due, else None."""
        lateness_ms = max(0.0, started - scheduled) * 1e3
        body_ms = max(0.0, body_s) * 1e3
        period_ms = self.period * 1e3
        late = lateness_ms > period_ms or body_ms > period_ms
        self.ticks += 1
        self.late += late
        self.max_lateness_ms = max(self.max_lateness_ms, lateness_ms)
        self.max_body_ms = max(self.max_body_ms, body_ms)
        b = _bin(body_ms)
        self._histogram[b] += 1

        if self._first is None:
            self._first = started
        second = int((started - self._first) // 1.0)
        # Judged once a second, on the first tick of a new second: over the whole seconds
        # before it (the current one has barely begun).
        message = self._judge(started, second) if second != self._judged else None
        bucket = self._buckets[second % len(self._buckets)]
        if bucket.second != second:
            bucket.reset(second)
        bucket.ticks += 1
        bucket.late += late
        bucket.histogram[b] += 1
        bucket.largest_ms = max(bucket.largest_ms, body_ms)
        return message

    def resynced(self) -> None:
        """The loop fell too far behind and restarted its schedule from now."""
        self.resyncs += 1

    def _judge(self, now: float, second: int) -> str | None:
        self._judged = second
        window = [b for b in self._buckets if max(self._warmup, second - len(self._buckets)) <= b.second < second]
        ticks = sum(b.ticks for b in window)
        late = sum(b.late for b in window)
        if len(window) < self._min_window or ticks < self.min_ticks or late <= self.warn_fraction * ticks:
            return None
        if self._last_warning is not None and now - self._last_warning < self.warn_every_s:
            return None
        self._last_warning = now
        self.warnings += 1
        histogram = [sum(column) for column in zip(*(b.histogram for b in window))]
        p99 = _quantile(histogram, ticks, 0.99, max(b.largest_ms for b in window))
        return (f"{100 * late / ticks:.1f} % of the {1 / self.period:g} Hz loop's ticks in the last "
                f"{len(window)} s were late (body p99 {_short_ms(p99)} ms, period {self.period * 1e3:g} ms): "
                "commands and video lag behind (the machine is overloaded?)")

    # -- reading -----------------------------------------------------------------------

    def body_quantile_ms(self, q: float) -> float:
        """The ``q`` quantile of the body durations of the whole run [ms] (NaN before any tick)."""
        return _quantile(self._histogram, self.ticks, q, self.max_body_ms)

    @property
    def late_fraction(self) -> float:
        """Late ticks / ticks (0 before any tick)."""
        return self.late / self.ticks if self.ticks else 0.0

    def summary(self) -> dict:
        """The figures for ``--json`` (durations [ms]; the quantiles are null before any tick)."""
        def known(value: float) -> float | None:
            return None if value != value else round(value, 3)

        return {"period_ms": self.period * 1e3, "ticks": self.ticks, "late": self.late,
                "late_percent": round(100 * self.late_fraction, 3),
                "body_median_ms": known(self.body_quantile_ms(0.5)),
                "body_p99_ms": known(self.body_quantile_ms(0.99)),
                "body_max_ms": round(self.max_body_ms, 3), "max_lateness_ms": round(self.max_lateness_ms, 3),
                "resyncs": self.resyncs, "overload_warnings": self.warnings}

    def short(self) -> str:
        """The status line form: "loop: 1.2 % late, body p99 8.4 ms, max 31 ms"."""
        text = (f"loop: {100 * self.late_fraction:.1f} % late, body p99 {_short_ms(self.body_quantile_ms(0.99))} ms, "
                f"max {_short_ms(self.max_body_ms)} ms")
        return text + (f", {self.resyncs} resync{'s' if self.resyncs > 1 else ''}" if self.resyncs else "")


#: Shortest time [s] between two "the loop fell behind" warnings of a station.
RESYNC_WARNING_INTERVAL_S = 30.0


def run_loop(period: float, duration: float | None, body, station: str = "station", timing: LoopTiming | None = None,
             *, clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> LoopTiming:
    """Call ``body()`` every ``period`` seconds (monotonic schedule) until ``duration`` [s], or
    until Ctrl-C, SIGTERM or SIGHUP raise KeyboardInterrupt (``teleop.cli.sigterm_as_interrupt``),
    which the stations catch to close their recordings and print their final statistics.

    A loop that falls a second behind resynchronises instead of bursting, and says so on
    stderr (``[station] warning: ...``): an overloaded machine otherwise shows only as a
    robot that went stale for no visible reason. The shorter overruns go into ``timing``
    (a new :class:`LoopTiming` if None; pass one to read it after a KeyboardInterrupt),
    which is returned, and which warns the same way when many ticks of the last seconds
    were late. ``clock`` [s] and ``sleep`` are the time source, replaceable in tests."""
    timing = LoopTiming(period) if timing is None else timing
    start = began = now = clock()
    last_resync_warning = -float("inf")
    k = 0
    # The duration counts from `began`: `start` moves when the schedule resynchronises.
    while duration is None or now - began < duration:
        raise_if_stop_lost()
        body()
        ended = clock()
        warning = timing.tick(now, start + k * period, ended - now)
        if warning:
            print(f"[{station}] warning: {warning}", file=sys.stderr)
        k += 1
        delay = start + k * period - ended
        if delay > 0:
            sleep(delay)
        elif delay < -1.0:
            if ended - last_resync_warning >= RESYNC_WARNING_INTERVAL_S:
                # At most every 30 s, as the overload warning: a busy machine repeats it every 2 s.
                last_resync_warning = ended
                print(f"[{station}] warning: the {1 / period:g} Hz loop fell {-delay:.1f} s behind (the machine is "
                      "overloaded?): carrying on from now (the status lines count the resyncs)", file=sys.stderr)
            timing.resynced()
            start, k = clock(), 0
        now = clock()
    return timing
