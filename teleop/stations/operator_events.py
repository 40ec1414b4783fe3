"""What the operator station says on stderr as things happen, and its status line.

Said once (or once per stretch): the robot's video failing authentication, a robot that
answers but sends no video, the input file's end, commands the robot would refuse, a
tracker lost or back, a calibration that fails (and the one that succeeds after it), most
video frames arriving incomplete. Every :data:`STATUS_INTERVAL_S`: the status line (sent
and shown rates, delays, the loop's timing). The counterpart of
:mod:`teleop.stations.robot_events`; the silences and the command link's dropouts have
their own watches (:mod:`teleop.stations.watches`).
"""

from __future__ import annotations

import sys
import time

from teleop.stations.operator_status import TrackingReport, incomplete_video_warning, status_line
from teleop.stations.watches import STATUS_INTERVAL_S, SaidOnce

#: Seconds of the robot's FEEDBACK without a single video datagram before the operator says so.
NO_VIDEO_AFTER_S = 3.0
#: Frame intervals the first status line's video rate is counted over from the first frame
#: (fewer: the interval's rate, as on later lines).
FIRST_RATE_MIN_INTERVALS = 5
#: Video datagrams refused as unauthenticated before saying the secrets differ.
AUTH_FAILURES_SAID = 20


class OperatorEvents:
    """Call :meth:`say_new` once per tick, after the station's tick.

    Args:
        station: the operator station (``feedback``, ``feedback_received``, ``sent``,
            ``first_implausible``, ``missing_segments``, ``calibration_problem``, ...).
        video: its video path (``receiver``, ``buffer``, ``displayed``).
        source_name: the ``--input`` given, for the "has ended" line.
        raw_source: the input before gating, whose ``finished`` says a file has ended.
        video_listen: the ``--video-listen`` address, for the "no video" hint.
    """

    def __init__(self, station, video, source_name: str, raw_source, video_listen: str) -> None:
        self.station, self.video, self.raw_source = station, video, raw_source
        self.source_name, self.video_listen = source_name, video_listen
        self._said = SaidOnce()
        self._tracking = TrackingReport()
        self._calibration_said = False          # a calibration problem said (until one succeeds)
        self._first_feedback: float | None = None   # when the robot's first FEEDBACK arrived
        # (time, references sent, frames shown) and (frames completed, dropped) at the last status line
        self._last_status = (time.monotonic(), 0, 0)
        self._frames_then = (0, 0)

    def say_new(self) -> None:
        station, video, now = self.station, self.video, time.monotonic()
        rejected = video.receiver.stats.malformed
        if rejected["auth"] + rejected["unauthenticated"] >= AUTH_FAILURES_SAID and self._said.first("video auth"):
            # The robot's video arrives but is not signed with our secret: the usual cause of
            # a robot that seems to be there and never answers (it drops our packets too).
            _say("warning: the video arriving fails authentication: do both stations use the same secret "
                 "(TELEOP_SECRET or --secret-file)?")
        if station.feedback_received and self._first_feedback is None:
            self._first_feedback = now
        if (self._first_feedback is not None and video.receiver.stats.datagrams == 0
                and now - self._first_feedback >= NO_VIDEO_AFTER_S and self._said.first("no video")):
            # The robot answers, so the silence warning never fires, and "video 0.0 fps"
            # alone went unexplained for the whole session.
            _say(f"warning: the robot answers but no video has come to --video-listen {self.video_listen} in "
                 f"{NO_VIDEO_AFTER_S:g} s: does `teleop robot --video-to` name this address (and its --video-hz "
                 "exceed 0)?")
        if getattr(self.raw_source, "finished", False) and self._said.first("input ended"):   # a file, no --loop
            _say(f"{self.source_name} has ended: nothing more is sent, the robot holds its pose (Ctrl-C to stop; "
                 "--loop replays it)")
        if station.first_implausible is not None and self._said.first("implausible"):   # the watchdog shows if it lasts
            _say(f"warning: not sending commands the robot would refuse ({station.first_implausible}): the robot "
                 "holds its pose; recalibrate (stand in the calibration pose) if the input drifted")
        tracking_line = self._tracking.update(station.missing_segments, now)   # a VR device lost or back
        if tracking_line is not None:
            _say(tracking_line)
        self._say_calibration()

    def _say_calibration(self) -> None:
        station = self.station
        if station.calibration_problem is not None and not self._calibration_said:
            self._calibration_said = True       # once per failing stretch: it fails on every pose meanwhile
            _say(f"warning: cannot calibrate the retargeting on the input's pose ({station.calibration_problem}): "
                 + ("the previous calibration stays; stand in the calibration pose and press calibrate again"
                    if station.calibrated else "nothing is sent until a pose can (stand upright, head and both "
                    "hands tracked)"))
        elif station.calibration_problem is None and self._calibration_said:
            self._calibration_said = False
            _say("calibrated: sending")

    def status_due(self) -> bool:
        return time.monotonic() - self._last_status[0] >= STATUS_INTERVAL_S

    def print_status(self, loop_timing) -> None:
        """The status line (rates since the last one), and the incomplete-video warning once."""
        station, video, now = self.station, self.video, time.monotonic()
        then, sent_then, shown_then = self._last_status
        self._last_status = (now, station.sent, video.displayed)
        clock_now = station.endpoint.clock.now()    # the station's clock, which stamps arrivals
        video_fps = None
        if shown_then == 0 and video.displayed > FIRST_RATE_MIN_INTERVALS and video.first_displayed_at is not None:
            # Counted from the first frame: the video starts a round trip after the operator,
            # and the first line said 11-12 fps of a 20 fps stream. Over a few intervals at
            # least: two frames shown back to back just before the line would read 100s of fps.
            since_first = clock_now - video.first_displayed_at
            if 0 < since_first < now - then:
                video_fps = (video.displayed - 1) / since_first
        print(status_line(now - then, station.sent - sent_then, video.displayed - shown_then, station.feedback,
                          video.buffer.report(), loop_timing.short(),
                          None if station.feedback_at is None else clock_now - station.feedback_at,
                          None if video.displayed_at is None else clock_now - video.displayed_at,
                          video_fps=video_fps, video_kernel_dropped=video.receiver.stats.kernel_dropped,
                          kernel_dropped=station.endpoint.stats.kernel_dropped),
              file=sys.stderr)
        stats = video.receiver.stats
        frames = (stats.frames_completed, stats.frames_dropped_timeout + stats.frames_dropped_evicted)
        warning = incomplete_video_warning(frames[0] - self._frames_then[0], frames[1] - self._frames_then[1],
                                           video.receiver.frame_timeout_s)
        self._frames_then = frames
        if warning is not None and self._said.first("incomplete video"):   # the status line's fps says whether it lasts
            _say(f"warning: {warning}")


def _say(message: str) -> None:
    print(f"[operator] {message}", file=sys.stderr)
