"""The live synthetic operator: random tasks with rests, released frame by frame on a clock."""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Iterator

import numpy as np

from retarget.human import SEGMENTS, HumanMotion
from teleop.inputs.base import Frame
from teleop.inputs.skeleton import SEGMENT_INDEX
from teleop.inputs.synthetic.generate import generate_motion, resolve_performer
from teleop.inputs.synthetic.performer import Performer
from teleop.inputs.synthetic.tasks import STILL_S, TASK_BUILDERS, TASKS


class VirtualClock:
    """A clock that only moves when told to: for tests and faster-than-real-time runs.

    ``clock()`` returns the current time [s]; ``sleep(dt)`` and ``advance(dt)`` move it on.
    """

    def __init__(self, start: float = 0.0):
        self.now = float(start)

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += max(0.0, float(seconds))

    advance = sleep


_OPERATOR_HISTORY = 4        # motions (trials or rests) a SyntheticOperator keeps for look-ups
_OPERATOR_LOOKAHEAD = 2      # motions it keeps scheduled (generating) ahead of the current one

#: Length of each rest an operator winding down keeps scheduling [s] (:meth:`SyntheticOperator.wind_down`).
WIND_DOWN_REST_S = 5.0


class SyntheticOperator:
    """A live synthetic operator for the operator station: random tasks with rests, on a clock.

    A :class:`teleop.inputs.base.PoseSource` like every input backend.

    The operator stands in the N-pose, then performs randomly chosen tasks (each one a
    :func:`generate` trial, starting and ending with its own ~0.5 s still N-pose) separated
    by rests drawn from ``rest_s`` seconds (N-pose with sway), forever. Everything is
    seeded: the same seed gives the same stream.

    Timing: the stream starts at the first :meth:`poll` / :meth:`frames_until` /
    iteration, at clock time ``t0``; frame k has time ``t0 + k / rate_hz`` on the given
    clock. Interfaces:

    * ``poll(now=None) -> Frame | None`` -- the newest frame whose time is <= ``now``
      (default: ``clock()``) and that was not returned yet; older unreturned frames are
      skipped, like a live tracker stream. None when no new frame is due.
    * ``frames_until(now=None) -> list[Frame]`` -- every frame not returned yet up to
      ``now``, in order (for recording).
    * iteration (``for frame in operator``) or :meth:`stream` -- every frame in order,
      sleeping until each frame is due (``sleep`` defaults to the clock's own ``sleep``
      for a :class:`VirtualClock`, else :func:`time.sleep`).
    * :meth:`task_at` -- what the operator is doing at a time ("rest" or a task name):
      ground truth for task recognition.
    * :meth:`close` (or ``with SyntheticOperator(...) as op:``) -- stops the worker thread
      that generates upcoming trials ahead of time (``prefetch=False``: no thread, each
      motion is generated when first needed, which takes ~0.1-0.5 s).

    A frame is ``(t, {segment: (position (3,) [m], quaternion (4,) (w, x, y, z))})`` in the
    HumanMotion conventions, for the segments in ``segments`` (all 23 by default; pass
    :data:`retarget.human.TRACKER_SEGMENTS` to imitate a VR set-up).
    """

    def __init__(self, seed: int = 0, *, tasks: tuple[str, ...] = TASKS, rate_hz: float = 100.0,
                 performer: int | Performer | None = None, height_m: float | None = None,
                 rest_s: tuple[float, float] = (1.5, 3.0), clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] | None = None, segments: tuple[str, ...] = SEGMENTS,
                 prefetch: bool = True):
        unknown = [t for t in tasks if t not in TASK_BUILDERS]
        if unknown or not tasks:
            raise ValueError(f"unknown or no tasks {unknown}; known: {', '.join(TASKS)}")
        self.rate_hz = float(rate_hz)
        self.performer = resolve_performer(performer, height_m)
        self.tasks = tuple(tasks)
        self.rest_s = rest_s
        self.segments = tuple(segments)
        self._columns = [SEGMENT_INDEX[name] for name in self.segments]
        self._clock = clock
        self._sleep = sleep if sleep is not None else getattr(clock, "sleep", time.sleep)
        self._rng = np.random.default_rng([int(seed) & 0xFFFFFFFF, 0x0BE7])
        # Schedule: motions (rest, trial, rest, trial, ...) as futures, generated ahead of
        # need on one worker thread so that a poll never waits ~0.1-0.5 s for the next
        # trial to be computed. What is generated is decided here, in order, so the stream
        # is the same with or without prefetching.
        self._executor = (ThreadPoolExecutor(max_workers=1, thread_name_prefix="synthetic-operator")
                          if prefetch else None)
        # Scheduled motions, start not known yet: (generate() arguments, Future or None).
        self._pending: list[tuple[tuple, Future | None]] = []
        self._items: list[tuple[int, HumanMotion]] = []      # (first global frame index, motion)
        self._next_start = 0
        self._t0: float | None = None
        self._last = -1
        self._next_is_rest = True
        self._winding_down = False
        if self._executor is not None:
            for _ in range(_OPERATOR_LOOKAHEAD):     # start computing the first motions now
                self._schedule_next()

    def close(self) -> None:
        """Stop the prefetching thread (the stream keeps working, generating on demand)."""
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None
            # Cancelled jobs will be generated on demand: the stream stays the same.
            self._pending = [(job, future if future is not None and not future.cancelled() else None)
                             for job, future in self._pending]

    def __enter__(self) -> "SyntheticOperator":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def wind_down(self) -> None:
        """Begin no new task: the motion under way is finished, then the operator rests for
        good (the end of `teleop demo`, whose session ends with the operator and the robot at
        rest: a task begun after its --duration kept it going, and an operator whose rests
        are all shorter than a long round trip never rested long enough to end it). Tasks
        scheduled but not begun are replaced by rests; the stream up to here is unchanged."""
        if self._winding_down:
            return
        self._winding_down = True
        kept = []
        for job, future in self._pending:
            if job[0] == "rest":
                kept.append((job, future))
            else:
                if future is not None:
                    future.cancel()          # being generated ahead: no longer needed
                kept.append((self._rest_job(WIND_DOWN_REST_S), None))
        self._pending = kept

    # -------------------------------------------------------------- schedule
    def _rest_job(self, duration: float) -> tuple:
        """The :func:`generate` arguments of a rest of ``duration`` seconds (still N-pose ends excluded)."""
        return ("rest", int(self._rng.integers(2 ** 31)), self.rate_hz, self.performer, 1.0, duration)

    def _schedule_next(self) -> None:
        """Decide the next motion of the schedule and start generating it."""
        if self._winding_down:
            self._pending.append((self._rest_job(WIND_DOWN_REST_S), None))
            return
        if self._next_is_rest:
            still = 2 * STILL_S[0]
            duration = max(self._rng.uniform(*self.rest_s) - still, 0.1)
            job = self._rest_job(duration)
        else:
            task = self.tasks[int(self._rng.integers(len(self.tasks)))]
            job = (task, int(self._rng.integers(2 ** 31)), self.rate_hz, self.performer, None, 1.0)
        self._next_is_rest = not self._next_is_rest
        future = self._executor.submit(generate_motion, *job) if self._executor is not None else None
        self._pending.append((job, future))

    def _take_pending(self) -> None:
        """Move the oldest scheduled motion (waiting for it if needed) onto the timeline."""
        if not self._pending:
            self._schedule_next()
        job, future = self._pending.pop(0)
        motion = future.result() if future is not None else generate_motion(*job)
        self._items.append((self._next_start, motion))
        self._next_start += len(motion)

    def _locate(self, index: int) -> tuple[HumanMotion, int]:
        while self._next_start <= index:
            self._take_pending()
        while len(self._pending) < _OPERATOR_LOOKAHEAD:
            self._schedule_next()
        # Forget old motions, keeping a few behind the newest frame returned (for task_at).
        while len(self._items) > _OPERATOR_HISTORY and self._items[1][0] <= min(index, self._last + 1):
            self._items.pop(0)
        for start, motion in reversed(self._items):
            if start <= index:
                return motion, index - start
        raise IndexError(f"frame {index} is no longer available")

    def _frame(self, index: int) -> Frame:
        motion, row = self._locate(index)
        assert self._t0 is not None               # _start() runs before any frame is made
        t = self._t0 + index / self.rate_hz
        return t, {name: (motion.positions[row, col].copy(), motion.orientations[row, col].copy())
                   for name, col in zip(self.segments, self._columns)}

    def _start(self, now: float) -> float:
        """Start the clock at ``now`` if not started yet; the start time."""
        if self._t0 is None:
            self._t0 = float(now)
        return self._t0

    # ------------------------------------------------------------- interfaces
    def poll(self, now: float | None = None) -> Frame | None:
        """The newest due frame not yet returned (skipping older ones), or None."""
        now = self._clock() if now is None else float(now)
        t0 = self._start(now)
        index = int(np.floor((now - t0) * self.rate_hz + 1e-9))
        if index <= self._last:
            return None
        self._last = index
        return self._frame(index)

    def frames_until(self, now: float | None = None) -> list[Frame]:
        """All frames not yet returned whose time is <= ``now``, in time order."""
        now = self._clock() if now is None else float(now)
        t0 = self._start(now)
        index = int(np.floor((now - t0) * self.rate_hz + 1e-9))
        frames = [self._frame(k) for k in range(self._last + 1, index + 1)]
        self._last = max(self._last, index)
        return frames

    def stream(self, duration_s: float | None = None) -> Iterator[Frame]:
        """Every frame in order, each one released when the clock reaches its time."""
        t0 = self._start(self._clock())
        index = self._last + 1
        while duration_s is None or index / self.rate_hz <= duration_s:
            wait = t0 + index / self.rate_hz - self._clock()
            if wait > 0:
                self._sleep(wait)
            self._last = index
            yield self._frame(index)
            index += 1

    def __iter__(self) -> Iterator[Frame]:
        return self.stream()

    def task_at(self, t: float) -> str:
        """What the operator does at clock time ``t``: "rest" or a task name.

        The still N-pose periods at the start and end of a trial count as "rest". Works
        for times up to a few motions (trials or rests) back from the newest frame
        returned; older times raise IndexError.
        """
        if self._t0 is None:
            raise RuntimeError("the stream has not started yet")
        index = int(np.floor((t - self._t0) * self.rate_hz + 1e-9))
        motion, row = self._locate(index)
        start, stop = motion.meta["motion_window"]
        label = motion.meta["label"]
        return label if label != "rest" and start <= motion.times[row] < stop else "rest"
