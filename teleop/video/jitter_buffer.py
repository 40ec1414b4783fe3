"""Playout buffer of the operator station: show frames at a steady delay after capture.

The prescient compensation on the robot needs to know how old the image the operator
looks at is: ``tau_b = backward delay + buffer length``. This buffer makes that age
steady and measures it.

Clocks and terms (all seconds):

* ``capture_s`` is in the **sender** clock; ``arrival_s`` and ``playout_s`` are in the
  **receiver** clock (:func:`teleop.video.clock.monotonic_s` unless injected).
* ``clock_offset_s`` = receiver clock - sender clock, an injectable estimate (a float or
  a callable re-read at each frame; 0 when both ends run on one host).
* **backward delay** of a frame = ``arrival_s - (capture_s + clock_offset_s)``: its age
  when it enters this buffer, i.e. capture/render + encode + network + reassembly +
  decode, in the common clock. ``arrival_s`` defaults to the time of :meth:`push`; the
  playback loop (:class:`teleop.video.playback.VideoPlayback`) passes the frame's
  ``decode_end_s``.
* **delay anchor**: the backward delay the playout is aligned on. By default the median of
  the measured backward delays over the last ``stats_window`` frames (not the mean: frames
  that queued while the operator's process stood still for 3 s pulled the mean from 0.77 to
  0.92 s for half a minute, and with it the backward delay the robot predicts for, while the
  median stayed 0.77 s); can be fixed (a float, e.g. a known link delay) or supplied by a
  callable.

Playout rule:

* ``buffer_length_s > 0``: frame is released at
  ``playout_s = capture_s + clock_offset_s + delay_anchor_s + buffer_length_s``.
  A frame arriving after its playout time is **late**: dropped and counted. The buffer
  length therefore sets how much delay spread above the anchor is absorbed (e.g.
  ``p95 - mean`` of the backward delay keeps ~95 % of the frames).
* ``buffer_length_s == 0``: no scheduling (a zero-length buffer holds nothing): a frame
  is released at the next :meth:`pop_due` after it arrives, and the displayed age is
  its own backward delay.
* In both modes frames are released in capture order; a frame not newer than one already
  released (or of the same capture time as one held) cannot be shown in order and is dropped
  (``frames_out_of_order``) -- unless it is older by more than ``restart_gap_s`` (or, with
  the running-median anchor, arrived more than ``restart_gap_s`` sooner after its capture
  than the anchor: the sender's clock jumped ahead) and ``RESTART_CONFIRM_FRAMES`` such
  frames, each newer than the one before, come in a row: that means the sender restarted
  with a reset clock (e.g. robot host reboot, or another host), so the buffer
  starts over (ordering, delay statistics and held frames are discarded;
  ``sender_restarts`` counts it). One such frame alone is an old frame arriving again (a
  duplicate delayed past the receiver's memory of finished frames, or an authentic frame
  replayed): dropped as out of order, and its age kept out of the delay statistics.

:meth:`report` gives the numbers the operator station sends back to the robot.
"""

from __future__ import annotations

import collections
import heapq
import itertools
from typing import Callable

import numpy as np

from teleop.video.clock import Clock, monotonic_s
from teleop.video.receiver import ReceivedFrame

#: A value in seconds given either as a constant or as a callable re-evaluated per frame.
SecondsSource = float | Callable[[], float]


#: Frames from before the last one released by more than ``restart_gap_s``, each newer than
#: the previous, in a row, that are taken as a restarted sender (see the module docstring).
RESTART_CONFIRM_FRAMES = 3


def _read_seconds(value: SecondsSource) -> float:
    return float(value()) if callable(value) else float(value)


class JitterBuffer:
    """In-order, fixed-delay playout of the frames of **one** stream.

    Args:
        buffer_length_s: extra delay absorbed above the anchor, seconds (0 = pass-through).
        clock_offset_s: receiver clock - sender clock, seconds (float or callable).
        delay_anchor_s: backward delay the playout is aligned on, seconds (float or
            callable); ``None`` = running median of the measured backward delays.
        stats_window: number of most recent frames the delay statistics cover.
        max_frames: bound on frames held; on overflow the oldest held frame is dropped.
        restart_gap_s: capture times this far (seconds) before the last released one (or,
            with the running-median anchor, frames arriving this much sooner after their
            capture than the anchor: a sender clock that jumped ahead), in
            ``RESTART_CONFIRM_FRAMES`` frames in a row, are taken as a sender restart
            rather than late frames.
        clock: receiver time source in seconds (injectable for tests).
    """

    def __init__(
        self,
        buffer_length_s: float = 0.0,
        clock_offset_s: SecondsSource = 0.0,
        delay_anchor_s: SecondsSource | None = None,
        stats_window: int = 300,
        max_frames: int = 64,
        restart_gap_s: float = 2.0,
        clock: Clock = monotonic_s,
    ) -> None:
        if buffer_length_s < 0:
            raise ValueError(f"buffer_length_s must be >= 0, got {buffer_length_s}")
        if stats_window < 1 or max_frames < 1:
            raise ValueError("stats_window and max_frames must be >= 1")
        self.buffer_length_s = float(buffer_length_s)
        self.clock_offset_s = clock_offset_s
        self.delay_anchor_s = delay_anchor_s
        self.max_frames = int(max_frames)
        self.restart_gap_s = float(restart_gap_s)
        self._clock = clock
        self._delays_s: collections.deque[float] = collections.deque(maxlen=stats_window)
        # Heap of (capture_s, tie-breaker, playout_s, frame): earliest capture first.
        self._heap: list[tuple[float, int, float, ReceivedFrame]] = []
        self._tie = itertools.count()
        self._last_released_capture_s = -float("inf")
        # Capture times of the frames in a row that look like a restarted sender's (oldest first).
        self._restart_candidates: list[float] = []
        self.frames_pushed = 0
        self.frames_released = 0
        self.frames_late = 0  # arrived after their playout time
        # Not newer than a frame already released (or held), or held back as a possible
        # sender restart until RESTART_CONFIRM_FRAMES of them came (its first frames).
        self.frames_out_of_order = 0
        self.frames_overflow = 0
        self.frames_discarded_on_restart = 0
        self.sender_restarts = 0

    @property
    def passthrough(self) -> bool:
        """True when the buffer length is zero (release on arrival)."""
        return self.buffer_length_s == 0.0

    def __len__(self) -> int:
        return len(self._heap)

    def current_anchor_s(self) -> float | None:
        """Delay anchor the next frame would use, seconds (``None`` before any frame
        when the anchor is the running median)."""
        if self.delay_anchor_s is not None:
            return _read_seconds(self.delay_anchor_s)
        if not self._delays_s:
            return None
        return float(np.median(self._delays_s))

    def push(self, frame: ReceivedFrame, arrival_s: float | None = None) -> bool:
        """Offer a decoded frame that arrived at ``arrival_s`` (receiver seconds, default now).

        Measures its backward delay, schedules its playout and returns True, or drops it
        (late, out of order) and returns False.
        """
        if arrival_s is None:
            arrival_s = self._clock()
        self.frames_pushed += 1
        capture_s = frame.timing.capture_s
        capture_in_receiver_clock_s = capture_s + _read_seconds(self.clock_offset_s)
        delay_s = arrival_s - capture_in_receiver_clock_s
        # A sender whose clock jumped ahead (restarted on a host up for longer, or stepped):
        # its frames arrive "earlier than the link allows". Undetected, the median anchor
        # held them for the jump (at 10 frames/s, 1000 s ahead: nothing shown for 21 s, until
        # half the statistics window had turned over and the frames held behind the first
        # ones were overflowed out), and the delay reported stayed the old session's.
        anchor_now_s = self.current_anchor_s() if self.delay_anchor_s is None else None
        jumped_ahead = anchor_now_s is not None and delay_s < anchor_now_s - self.restart_gap_s
        if capture_s < self._last_released_capture_s - self.restart_gap_s or jumped_ahead:
            # Restarting on the first such frame let one old frame arriving again (a duplicate
            # delayed past the receiver's 64 remembered frames, or an authentic frame
            # replayed) discard the frames held, be shown after newer ones, and seed the
            # delay statistics alone with its age: the backward delay reported to the robot
            # jumped from 0.05 to 9 s, and a buffered playout held the next frames for
            # seconds. A restarted sender goes on sending; a stale frame comes alone.
            candidates = self._restart_candidates
            if candidates and capture_s <= candidates[-1]:
                candidates.clear()
            candidates.append(capture_s)
            if len(candidates) < RESTART_CONFIRM_FRAMES:
                self.frames_out_of_order += 1
                return False
            self._start_over()
        else:
            self._restart_candidates.clear()
        if self.passthrough:
            playout_s = arrival_s
        else:
            anchor_s = self.current_anchor_s()
            if anchor_s is None:  # first frame with a running-median anchor: its own delay
                anchor_s = delay_s
            playout_s = capture_in_receiver_clock_s + anchor_s + self.buffer_length_s
        # The measurement counts every frame, late ones included: it describes the link.
        self._delays_s.append(delay_s)

        if frame.timing.capture_s <= self._last_released_capture_s or any(
                held[0] == frame.timing.capture_s for held in self._heap):
            # A second frame of an instant already held would be shown twice: a duplicate the
            # network delayed past the receiver's memory of finished frames (64, ~2 s at 30 fps)
            # while a longer buffer (up to 10 s) still holds the first copy, or a replay.
            # Not newer than a frame already queued for display: dropped like an old one.
            self.frames_out_of_order += 1
            return False
        if arrival_s > playout_s:
            self.frames_late += 1
            return False
        if len(self._heap) >= self.max_frames:
            heapq.heappop(self._heap)
            self.frames_overflow += 1
        frame.timing.playout_s = playout_s
        heapq.heappush(self._heap, (frame.timing.capture_s, next(self._tie), playout_s, frame))
        return True

    def _start_over(self) -> None:
        """Forget the previous sender session (see the module docstring)."""
        self.sender_restarts += 1
        self.frames_discarded_on_restart += len(self._heap)
        self._heap.clear()
        self._delays_s.clear()
        self._restart_candidates.clear()
        self._last_released_capture_s = -float("inf")

    def next_playout_s(self) -> float | None:
        """Playout time of the next frame in order (receiver seconds), ``None`` if empty."""
        return self._heap[0][2] if self._heap else None

    def pop_due(self, now_s: float | None = None) -> list[ReceivedFrame]:
        """Release, in capture order, the frames whose playout time is ``<= now_s``."""
        if now_s is None:
            now_s = self._clock()
        released: list[ReceivedFrame] = []
        while self._heap and self._heap[0][2] <= now_s:
            capture_s, _, _, frame = heapq.heappop(self._heap)
            self._last_released_capture_s = capture_s
            released.append(frame)
        self.frames_released += len(released)
        return released

    def report(self) -> dict[str, float | int | None]:
        """Numbers for the robot's compensation, seconds (``None`` before any frame).

        Keys: ``buffer_length_s``; ``backward_delay_mean_s`` / ``_p50_s`` / ``_p95_s`` /
        ``_std_s`` and ``backward_delay_samples`` over the statistics window; ``delay_anchor_s``
        (``None`` in pass-through); ``tau_b_s`` = age of the image at display that the
        playout enforces = anchor + buffer length (= median backward delay + buffer length
        with the default anchor; the median backward delay in pass-through);
        ``clock_offset_s``; frame counters.
        """
        delays = np.asarray(self._delays_s, dtype=float)
        have = delays.size > 0
        mean_s = float(delays.mean()) if have else None
        anchor_s = None if self.passthrough else self.current_anchor_s()
        if self.passthrough:
            tau_b_s = float(np.median(delays)) if have else None
        else:
            tau_b_s = anchor_s + self.buffer_length_s if anchor_s is not None else None
        return {
            "buffer_length_s": self.buffer_length_s,
            "backward_delay_mean_s": mean_s,
            "backward_delay_p50_s": float(np.percentile(delays, 50)) if have else None,
            "backward_delay_p95_s": float(np.percentile(delays, 95)) if have else None,
            "backward_delay_std_s": float(delays.std()) if have else None,
            "backward_delay_samples": int(delays.size),
            "delay_anchor_s": anchor_s,
            "tau_b_s": tau_b_s,
            "clock_offset_s": _read_seconds(self.clock_offset_s),
            "frames_pushed": self.frames_pushed,
            "frames_released": self.frames_released,
            "frames_late": self.frames_late,
            "frames_out_of_order": self.frames_out_of_order,
            "frames_overflow": self.frames_overflow,
            "frames_discarded_on_restart": self.frames_discarded_on_restart,
            "sender_restarts": self.sender_restarts,
            "frames_held": len(self._heap),
        }
