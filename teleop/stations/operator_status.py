"""The operator station's status line, every 2 s on stderr, as the robot station has its own.

Without it an operator station said nothing from start to end unless something went wrong:
the user could not tell whether the robot was following, predicting or holding, nor how old
the images were. The line says what the robot reports doing with our commands (its FEEDBACK),
the forward delay it measures, and the video shown: frames per second and their age.
"""

from __future__ import annotations

import math
from enum import Enum

from teleop.net.protocol import Feedback
from teleop.net.watchdog import HOLDING_STATES, WatchdogState
from teleop.prescient.compensator import CompensationState
from teleop.wording import dropped_by_the_kernel


def state_name(states: type[Enum], code: int) -> str:
    """Name of a state code carried by FEEDBACK (the robot station numbers the enum in order)."""
    members = list(states)
    return members[code].name.lower() if 0 <= code < len(members) else f"code {code}"


def image_age_s(video_report: dict, feedback: Feedback | None) -> float | None:
    """Age of the images shown [s]: the jitter buffer's ``tau_b_s`` (arrival on our clock
    minus capture on the robot's, plus the buffer) with the clock offset the robot reports
    (robot − operator) put back; None before a frame, or with no offset known yet."""
    raw = video_report.get("tau_b_s")
    offset = feedback.clock_offset if feedback is not None else math.nan
    if raw is None or not math.isfinite(offset):
        return None
    return float(raw) + offset


#: Seconds without FEEDBACK (the robot sends one per control tick, 100 Hz) or without a new
#: image after which the status line says so instead of repeating the last report.
SILENT_AFTER_S = 1.0


def status_line(interval_s: float, sent: int, shown: int, feedback: Feedback | None, video_report: dict,
                loop_text: str, feedback_silent_s: float | None = None,
                image_shown_s_ago: float | None = None, video_fps: float | None = None,
                video_kernel_dropped: int | None = None, kernel_dropped: int | None = None) -> str:
    """One status line.

    Args:
        interval_s: time since the previous line [s].
        sent: reference packets sent in that interval.
        shown: video frames released for display in that interval.
        feedback: the robot's latest FEEDBACK (None: none yet).
        video_report: :meth:`teleop.video.jitter_buffer.JitterBuffer.report`.
        loop_text: the loop timing, :meth:`teleop.stations.loop_timing.LoopTiming.short`.
        feedback_silent_s: time since that FEEDBACK arrived [s] (None: not known).
        image_shown_s_ago: time since the last image was shown [s] (None: none yet).
        video_fps: the video rate [frames/s] where not shown / interval_s (the interval of
            the first frames, counted from the first).
        video_kernel_dropped: video datagrams the kernel dropped since the start (receive
            buffer full; None: not known), said when above 0.
        kernel_dropped: likewise, packets of the command link (the robot's FEEDBACK, clock pings).
    """
    if feedback is None:
        robot = "robot: no feedback yet"
    else:
        watchdog = state_name(WatchdogState, feedback.watchdog_state).upper()
        # While the robot holds, what the compensator would do ("passthrough") is not what
        # the robot does.
        compensation = "holding" if feedback.watchdog_state in HOLDING_STATES \
            else state_name(CompensationState, feedback.compensation_state)
        if feedback_silent_s is not None and feedback_silent_s > SILENT_AFTER_S:
            # Not the last report as if it were current: the robot (or the link) went quiet.
            robot = f"robot: silent {feedback_silent_s:.1f} s (last: {watchdog} {compensation})"
        else:
            tau_f = (f"tau_f {feedback.forward_delay:.3f} s" if math.isfinite(feedback.forward_delay)
                     else "tau_f n/a")
            robot = f"robot {watchdog:8s} {compensation:11s} {tau_f}"
    age = image_age_s(video_report, feedback)
    fps = shown / interval_s if video_fps is None else video_fps
    video = f"video {fps:4.1f} fps" + (f", {age:.3f} s old" if age is not None else "")
    if image_shown_s_ago is not None and image_shown_s_ago > SILENT_AFTER_S:
        # The image on screen has aged since: its transit delay alone understated that.
        video += f", last image shown {image_shown_s_ago:.1f} s ago"
    # Last, and only when some were dropped: the columns before stay where they were.
    kernel = dropped_by_the_kernel([(video_kernel_dropped, "video datagrams"), (kernel_dropped, "packets")])
    line = f"[operator] {robot}  sent {sent / interval_s:5.1f}/s  {video}  {loop_text}"
    return line + (f"  {kernel}" if kernel else "")


#: Incomplete frames (dropped by the reassembly's timeout) in one status interval, at least,
#: and as a share of the frames begun, before the operator is warned.
MIN_INCOMPLETE_FRAMES = 5
MIN_INCOMPLETE_SHARE = 0.5


def incomplete_video_warning(completed: int, incomplete: int, timeout_s: float) -> str | None:
    """The warning for an interval in which most video frames arrived incomplete, or None.

    Args:
        completed: frames whose datagrams all arrived in the interval.
        incomplete: frames dropped in the interval with a datagram still missing: after
            ``timeout_s`` since their first one, or evicted by newer frames meanwhile.
        timeout_s: the reassembly's wait for a frame's datagrams [s] (0.2 s plus the jitter
            buffer, :class:`teleop.stations.operator_station.VideoPath`).

    Without it the status line's "video 0.0 fps" was the only sign that a lossy or jittery
    link was losing the video, and why.
    """
    begun = completed + incomplete
    if incomplete < MIN_INCOMPLETE_FRAMES or incomplete < MIN_INCOMPLETE_SHARE * begun:
        return None
    return (f"{incomplete} of {begun} video frames in the last interval arrived incomplete (a datagram lost, or "
            f"still missing {timeout_s:.1f} s after the frame's first): over a jittery "
            "link a longer --jitter-buffer keeps them; over a lossy one a frame is lost with two datagrams of one "
            "parity group (with one when the robot sends no parity: a smaller `teleop robot --video-fec` helps)")


#: Seconds between two lines about segments not tracked: a flickering device (or two MVN
#: streams interleaved) changes every tick, and said each time it flooded stderr (about 200
#: lines in 4 s).
TRACKING_LINE_INTERVAL_S = 5.0


class TrackingReport:
    """The operator's lines about the input's segments not tracked (nothing is sent then):
    a change said at once, then at most one line per ``interval_s``, which counts the
    changes since the last one when the tracking flickers."""

    def __init__(self, interval_s: float = TRACKING_LINE_INTERVAL_S) -> None:
        self.interval_s = interval_s
        self._said: tuple[str, ...] = ()      # what the last line said was missing
        self._current: tuple[str, ...] = ()
        self._changes = 0                     # since the last line
        self._last_line_s = -float("inf")

    def update(self, missing: tuple[str, ...], now_s: float) -> str | None:
        """The line to print for the segments ``missing`` at ``now_s`` [s], or None."""
        if missing != self._current:
            self._current = missing
            self._changes += 1
        if now_s - self._last_line_s < self.interval_s:
            return None
        flickered = self._changes >= 2
        if self._current == self._said and not flickered:
            return None
        if self._current:
            line = f"{', '.join(self._current)} not tracked: nothing sent, the robot holds its pose"
        else:
            line = "all tracked again: sending"
        if flickered:
            line += f" (tracking changed {self._changes} times in the last {now_s - self._last_line_s:.0f} s)"
        self._said, self._changes, self._last_line_s = self._current, 0, now_s
        return line
