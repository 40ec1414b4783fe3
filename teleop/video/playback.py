"""Operator-station loop: receiver -> per-stream jitter buffer -> display callback.

:class:`VideoPlayback` runs one bounded loop iteration at a time (:meth:`run_once`) or a
background thread. Each iteration waits for a datagram at most until the next playout
deadline (and never more than ``max_wait_s``), drains the socket, pushes decoded frames
into the jitter buffer of their stream, and hands every due frame to ``on_display``
after stamping ``timing.display_s`` (receiver clock, seconds). That stamp is the
"displayed" instant of the latency budget: the image is decoded and in the display
code's hands.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

from teleop.video import wire
from teleop.video.clock import Clock, monotonic_s
from teleop.video.jitter_buffer import JitterBuffer, SecondsSource
from teleop.video.receiver import ReceivedFrame, VideoReceiver

#: Display callback: receives each frame at its playout time, in order per stream.
DisplayCallback = Callable[[ReceivedFrame], None]


class VideoPlayback:
    """Drive a :class:`VideoReceiver` and one :class:`JitterBuffer` per stream.

    Args:
        receiver: the bound receiver (owned by the caller; not closed here).
        on_display: called with each released frame, from the loop's thread. An exception
            in it is counted (``display_errors``, last one in ``last_display_error``) and
            does not stop reception.
        buffer_length_s, clock_offset_s, delay_anchor_s: jitter-buffer settings applied to
            every stream (see :class:`JitterBuffer`), seconds.
        max_wait_s: longest single wait for the socket, seconds; bounds how late a stop
            request or an incomplete-frame timeout is noticed.
        clock: receiver time source in seconds; must be the receiver's clock.
    """

    def __init__(
        self,
        receiver: VideoReceiver,
        on_display: DisplayCallback,
        buffer_length_s: float = 0.0,
        clock_offset_s: SecondsSource = 0.0,
        delay_anchor_s: SecondsSource | None = None,
        max_wait_s: float = 0.02,
        clock: Clock = monotonic_s,
    ) -> None:
        self.receiver = receiver
        self.on_display = on_display
        self.max_wait_s = float(max_wait_s)
        self._buffer_settings: dict[str, Any] = dict(
            buffer_length_s=buffer_length_s, clock_offset_s=clock_offset_s, delay_anchor_s=delay_anchor_s, clock=clock
        )
        self._clock = clock
        self.buffers: dict[int, JitterBuffer] = {}
        self.frames_displayed = 0
        self.display_errors = 0
        self.last_display_error: BaseException | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()  # guards receiver/buffers against stats() from other threads

    def jitter_buffer(self, stream_id: int) -> JitterBuffer:
        """The jitter buffer of ``stream_id`` (created on first use)."""
        buffer = self.buffers.get(stream_id)
        if buffer is None:
            buffer = self.buffers[stream_id] = JitterBuffer(**self._buffer_settings)
        return buffer

    def run_once(self) -> int:
        """One bounded iteration: wait, receive, schedule, display. Returns frames displayed."""
        with self._lock:
            due = [t for b in self.buffers.values() if (t := b.next_playout_s()) is not None]
        wait_s = self.max_wait_s
        if due:
            wait_s = min(wait_s, min(due) - self._clock())
        if wait_s > 0:
            self.receiver.wait_readable(wait_s)
        to_display: list[ReceivedFrame] = []
        with self._lock:
            for frame in self.receiver.poll():
                self.jitter_buffer(frame.timing.stream_id).push(frame, arrival_s=frame.timing.decode_end_s)
            now_s = self._clock()
            for buffer in self.buffers.values():
                to_display.extend(buffer.pop_due(now_s))
        for frame in to_display:
            frame.timing.display_s = self._clock()
            try:
                self.on_display(frame)
            except Exception as error:  # a display bug must not stop the video link
                self.display_errors += 1
                self.last_display_error = error
        self.frames_displayed += len(to_display)
        return len(to_display)

    def run(self, duration_s: float) -> int:
        """Run iterations in the calling thread for ``duration_s`` seconds (or until
        :meth:`stop`); returns frames displayed."""
        end_s = self._clock() + duration_s
        displayed = 0
        while not self._stop.is_set() and self._clock() < end_s:
            displayed += self.run_once()
        return displayed

    def start(self) -> None:
        """Run iterations in a daemon thread until :meth:`stop`."""
        if self._thread is not None:
            raise RuntimeError("playback already started")
        self._stop.clear()

        def target() -> None:
            while not self._stop.is_set():
                self.run_once()

        self._thread = threading.Thread(target=target, name="video-playback", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 2.0) -> None:
        """Stop the background thread (returns within ``max_wait_s`` + one iteration)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None

    def reports(self) -> dict[str, dict]:
        """:meth:`JitterBuffer.report` per stream, keyed by stream name (``"left"``...)."""
        with self._lock:
            return {
                wire.STREAM_NAMES.get(stream_id, str(stream_id)): buffer.report()
                for stream_id, buffer in sorted(self.buffers.items())
            }

    def stats(self) -> dict:
        """Receiver counters, per-stream reports and display counters (JSON-friendly)."""
        with self._lock:
            receiver_stats = self.receiver.stats.as_dict()
        return {
            "receiver": receiver_stats,
            "streams": self.reports(),
            "frames_displayed": self.frames_displayed,
            "display_errors": self.display_errors,
        }
