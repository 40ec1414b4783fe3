"""The operator station: human motion in, robot references out, robot video in.

One :meth:`OperatorStation.tick` per period (100 Hz by default):

1. the input source gives the human poses due since the last tick (VR trackers and Xsens:
   the newest; a file replay or the synthetic operator: every frame due, so that a tick a
   hair past a frame's time does not skip the one before, :meth:`OperatorStation.due_frames`).
   A pose that lacks a segment the retargeting was calibrated with (a
   VR device lost: battery, occlusion) is not retargeted: the missing signals would fall
   back to the robot's start posture, and the shoulders to another estimate, so the hand
   targets would jump by 10-20 cm. Nothing is sent until the segment is back; the robot's
   stale-command watchdog holds its pose meanwhile and blends back when commands resume;
2. the retargeting turns it into robot references (calibrated on the first pose, Eq. 2.1),
   sent to the robot stamped with the operator's clock;
3. clock pings from the robot are answered, FEEDBACK kept for the display;
4. the video path reassembles and decodes the robot's frames, plays them out through the
   jitter buffer, and reports the measured backward delay + buffer length (τ̂_b) to the
   robot, which needs it for compensation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from retarget.calibration import CalibrationError
from retarget.envelope import ReferenceEnvelope
from retarget.human import HumanMotion
from retarget.mapping import Retargeter
from retarget.references import RobotReferences
from retarget.robot_target import RobotTarget
from teleop.inputs.base import PoseSource  # the one input interface (re-exported here for older imports)
from teleop.net.clock_sync import answer_ping
from teleop.net.protocol import Feedback, PacketType, VideoReport, sample_time_problem
from teleop.video.codec import JpegCodec
from teleop.video.jitter_buffer import JitterBuffer
from teleop.video.receiver import DEFAULT_FRAME_TIMEOUT_S, ReceivedFrame, VideoReceiver


@dataclass
class OperatorStationConfig:
    """Settings of the operator station.

    Attributes:
        report_hz: rate of VIDEO_REPORT packets to the robot [Hz].
        jitter_buffer_s: length of the video jitter buffer [s].
    """

    report_hz: float = 2.0
    jitter_buffer_s: float = 0.0
    #: Closest two frames sent may be in sample time [s]: a source faster than twice the
    #: 100 Hz loop (a 240 Hz mocap file) is thinned to ~100-200 poses per second.
    min_frame_spacing_s: float = 0.005
    #: Most frames sent in one tick: after a stalled tick only the newest go out (the
    #: backlog is old news to the robot; the recording still holds every frame).
    max_frames_per_tick: int = 4


#: Frames per second, all streams together, the video reassembly is sized for (two eye
#: cameras at 30 Hz): the frames it keeps open while their datagrams arrive.
MAX_FRAME_RATE_HZ = 60.0


class VideoPath:
    """Receiving side of the video: datagrams -> frames -> jitter buffer -> display.

    Datagrams come either from a UDP socket (:meth:`poll_socket`) or from a virtual link
    (:meth:`handle`), so the demo and the live station share this code.
    """

    def __init__(self, clock, buffer_s: float = 0.0, bind: tuple[str, int] = ("127.0.0.1", 0),
                 on_display: Callable[[ReceivedFrame, float], None] | None = None,
                 verify: Callable[[bytes, bytes], bool] | None = None) -> None:
        """``verify``: the video datagrams' MAC check (:func:`teleop.net.auth.video_mac`),
        None to take them unchecked (a virtual link)."""
        self.clock = clock
        # A frame's datagrams are spread by the link's jitter like its packets' delays: the
        # jitter buffer absorbs that spread for whole frames, so the reassembly waits as long
        # for a frame's last datagram, and keeps as many frames open as arrive meanwhile. With
        # the receiver's fixed 0.2 s, a link jittering by 300 ms (each datagram on its own)
        # completed 2 frames in 20 s of 200 sent, whatever --jitter-buffer said; with a 1 s
        # buffer it now keeps them (tests/test_stations.py, 10 and 30 frames/s).
        timeout_s = DEFAULT_FRAME_TIMEOUT_S + buffer_s
        self.receiver = VideoReceiver(bind=bind, verify=verify, frame_timeout_s=timeout_s,
                                      max_frames_in_flight=max(16, math.ceil(MAX_FRAME_RATE_HZ * timeout_s)))
        self.codec = JpegCodec()
        self.buffer = JitterBuffer(buffer_length_s=buffer_s, clock_offset_s=0.0)
        self.on_display = on_display
        self.displayed = 0
        self.displayed_at: float | None = None     # station clock [s] of the last frame shown
        self.first_displayed_at: float | None = None   # ... and of the first

    def handle(self, datagram: bytes, arrival_s: float) -> None:
        frame = self.receiver.handle_datagram(datagram, arrival_s)
        if frame is not None:
            self.buffer.push(frame, arrival_s)

    def poll_socket(self) -> None:
        now = self.clock.now()
        for frame in self.receiver.poll():
            self.buffer.push(frame, now)

    def play(self) -> None:
        now = self.clock.now()
        self.receiver.expire(now)
        for frame in self.buffer.pop_due(now):
            self.displayed += 1
            self.displayed_at = now
            if self.first_displayed_at is None:
                self.first_displayed_at = now
            if self.on_display is not None:
                self.on_display(frame, now)

    def report(self) -> VideoReport | None:
        """The VIDEO_REPORT for the robot, None before any frame. The delays are arrival on
        this station's clock minus capture on the robot's: the robot, which estimates the
        offset between the two clocks, removes it (RobotStation.tau_b). The delay is the
        median over the buffer's window, as its playout anchor is: frames that queued while
        this process stood still pulled the mean up for half a minute (the robot's tau_b from
        0.78 to 1.05 s after a 2.5 s stall, so it predicted 0.27 s too far ahead)."""
        r = self.buffer.report()
        delay_s, delay_std_s = r.get("backward_delay_p50_s"), r.get("backward_delay_std_s")
        if delay_s is None or delay_std_s is None:   # both None before any frame
            return None
        stats = self.receiver.stats
        # Lost: never completed (chunks missing, evicted) or dropped by the jitter buffer.
        lost = (stats.frames_dropped_timeout + stats.frames_dropped_evicted + stats.decode_errors
                + self.buffer.frames_late + self.buffer.frames_out_of_order + self.buffer.frames_overflow)
        return VideoReport(jitter_buffer=self.buffer.buffer_length_s, backward_delay=float(delay_s),
                           backward_delay_std=float(delay_std_s),
                           frames_received=int(stats.frames_completed) & 0xFFFFFFFF,
                           frames_lost=int(lost) & 0xFFFFFFFF)

    def close(self) -> None:
        self.receiver.close()


class OperatorStation:
    """See the module docstring.

    Args:
        endpoint: network endpoint towards the robot.
        robot_address: where the robot station listens.
        source: the human-pose source.
        target: the robot as the retargeting sees it.
        video: the video path (None: no video).
        config: station settings.
    """

    def __init__(self, endpoint, robot_address, source: PoseSource, target: RobotTarget,
                 video: VideoPath | None = None, config: OperatorStationConfig | None = None) -> None:
        self.endpoint = endpoint
        self.robot_address = robot_address
        self.source = source
        self.retargeter = Retargeter(target)
        # The robot station refuses references outside this envelope, or stamped far from
        # their send time: not sent, and said here, where the operator can act (recalibrate).
        self.envelope = ReferenceEnvelope.for_target(target)
        self.implausible = 0                          # references not sent (see tick)
        self.first_implausible: str | None = None     # why, the first time
        self.video = video
        self.config = config or OperatorStationConfig()
        self.feedback: Feedback | None = None
        self.current: RobotReferences | None = None
        self._calibrated = False
        self._calibrated_segments: frozenset[str] = frozenset()
        self.missing_segments: tuple[str, ...] = ()   # of the newest pose (see the module docstring)
        self.incomplete_poses = 0
        self.nonfinite_poses = 0        # poses with a NaN or inf segment (held like a lost one)
        self._recalibrate = False       # the calibrate button: calibrate again on the next pose that can
        self.calibration_failures = 0   # poses the retargeting could not calibrate on
        self.calibration_problem: str | None = None   # why the last attempt failed (None once one succeeds)
        self._next_report = -np.inf     # any clock origin
        self.sent = 0
        #: The references sent by the last tick, in order (usually one; none or several).
        self.sent_in_tick: list[RobotReferences] = []
        self._last_frame_t = -np.inf    # sample time of the newest frame taken [s]
        self.feedback_received = 0  # FEEDBACK packets from the robot: 0 means nobody is there
        self.feedback_at: float | None = None   # station clock [s] when the last one arrived

    @property
    def calibrated(self) -> bool:
        """Whether the retargeting has been calibrated (references can be sent)."""
        return self._calibrated

    def recalibrate(self) -> None:
        """Calibrate the retargeting again on the next pose that can calibrate it (the
        operator's calibrate button); until then the previous calibration stays."""
        self._recalibrate = True

    def _retarget(self, t: float, pose: dict) -> RobotReferences | None:
        """The references of one pose, or None if it lacks a calibrated segment or nothing
        could be calibrated yet."""
        finite = {n: v for n, v in pose.items() if np.all(np.isfinite(v[0])) and np.all(np.isfinite(v[1]))}
        whole = len(finite) == len(pose)
        if not whole:
            # A segment with NaN or inf (a device's glitch) is a segment not tracked: it would
            # otherwise run through the retargeting into the hands, CoM and postures sent.
            self.nonfinite_poses += 1
            if not self._calibrated:
                return None                       # calibrate on a whole pose, not on this one
            pose = finite
        names = tuple(pose)
        positions = np.array([pose[n][0] for n in names])
        orientations = np.array([pose[n][1] for n in names])
        # A pending recalibration takes this pose whatever its segments (the devices may have
        # changed); if it cannot, the previous calibration stays.
        if (self._recalibrate and whole) or not self._calibrated:
            if not self._calibrate(t, names, positions, orientations) and not self._calibrated:
                return None                       # nothing to send until a pose calibrates
        self.missing_segments = tuple(sorted(self._calibrated_segments.difference(names)))
        if self.missing_segments:
            self.incomplete_poses += 1
            return None
        # Overflow in a glitch's values is caught by the envelope check on the result.
        with np.errstate(over="ignore", invalid="ignore"):
            return self.retargeter.step(t, positions, orientations, names)

    def _calibrate(self, t: float, names: tuple[str, ...], positions: np.ndarray, orientations: np.ndarray) -> bool:
        """Calibrate the retargeting on this pose; False (counted, and why kept in
        ``calibration_problem``) when it cannot: the head or a hand missing, a body of no
        human size. The station then waits for a pose that can (crashed with a traceback)."""
        first = HumanMotion(np.array([t]), names, positions[None], orientations[None], source="operator")
        try:
            with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
                self.retargeter.calibrate(first)
        except CalibrationError as exc:
            self.calibration_failures += 1
            self.calibration_problem = str(exc).removeprefix("operator: ")
            return False
        self._calibrated, self._recalibrate = True, False
        self._calibrated_segments = frozenset(names)
        self.calibration_problem = None
        return True

    def due_frames(self, now: float) -> list:
        """The frames to send this tick, oldest first: every frame the source made due since
        the last tick when it can say (``frames_until``: a file replay, the synthetic
        operator, and the gate and recorder around them), thinned to ``min_frame_spacing_s``
        and the newest ``max_frames_per_tick``; else its newest (``poll``: a live tracker).
        Taking only the newest of a 100 Hz file lost a frame whenever a tick fell a hair
        past one frame's time and the next a hair before the following one's: 15 % of the
        poses were neither sent nor recorded at < 1 % late ticks."""
        take_all = getattr(self.source, "frames_until", None)
        if take_all is None:
            frame = self.source.poll(now)
            return [] if frame is None else [frame]
        chosen: list = []
        spacing = self.config.min_frame_spacing_s
        for frame in reversed(take_all(now)):           # newest first: the newest is always kept
            if len(chosen) == self.config.max_frames_per_tick or frame[0] <= self._last_frame_t:
                break
            if not chosen or chosen[-1][0] - frame[0] >= spacing:
                chosen.append(frame)
        chosen.reverse()
        if len(chosen) > 1 and chosen[0][0] - self._last_frame_t < spacing:
            chosen.pop(0)          # too close to the one taken last (the newest stays, whatever its spacing)
        if chosen:
            self._last_frame_t = chosen[-1][0]
        return chosen

    def tick(self) -> RobotReferences | None:
        """Run one period; returns the (newest) references sent, None if none (all of them:
        :attr:`sent_in_tick`)."""
        now = self.endpoint.clock.now()
        sent = None
        self.sent_in_tick = []
        for sample in self.due_frames(now):
            t, pose = sample
            # A source may yield robot references directly (a replay of recorded
            # references, as the real-time trial does): those need no retargeting.
            refs = pose if isinstance(pose, RobotReferences) else self._retarget(t, pose)
            # What the robot would refuse (robot_station.py), said here where it can be acted on.
            problem = None if refs is None else (sample_time_problem(refs.t, now)
                                                 or self.envelope.violation(refs.to_flat()))
            if problem is not None:
                self.implausible += 1
                self.first_implausible = self.first_implausible or problem
                refs = None
            if refs is not None:
                # The wire carries the 20 signals (absent ones hold the robot's posture) and
                # no mask; the references returned (and recorded) keep it, so a recording of
                # a sparse source (VR: head and hands) says what was measured.
                self.endpoint.send(refs, self.robot_address)
                self.current = refs
                self.sent += 1
                self.sent_in_tick.append(refs)
                sent = refs
        for received in self.endpoint.poll():
            if answer_ping(self.endpoint, received):
                continue
            if received.packet.packet_type == PacketType.FEEDBACK:
                self.feedback = received.packet.message
                self.feedback_received += 1
                self.feedback_at = now
        if self.video is not None:
            self.video.play()
            if now >= self._next_report:
                self._next_report = now + 1.0 / self.config.report_hz
                report = self.video.report()
                if report is not None:
                    self.endpoint.send(report, self.robot_address)
        return sent
