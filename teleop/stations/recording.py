"""The session recorder inside the stations (``teleop operator|robot --record FILE``).

Both stations write every stream they see into one MCAP file with
:class:`teleop.record.Recorder`, on the station's own clock (the clock their samples are
stamped with, so log times and sample times agree):

operator station
    ``/operator/segments`` raw operator input (every frame the input gave), ``/references``
    (retargeted, as sent), ``/camera/<left|right>`` (received camera frames, JPEG, at
    display time; the message time is the robot's capture time), ``/network/stats``
    (command link counters, video buffer report; 2 Hz).
robot station
    ``/commands/delivered`` (references as they arrived, delayed: publish time = the
    operator's send time mapped onto the robot clock, so log - publish = forward delay),
    ``/commands/compensated`` (what the compensator made of them), ``/robot/state``
    (every tick: joint positions/velocities, CoM, CoP, the joint angles the whole-body
    controller commanded, and the watchdog and compensation states), ``/camera/<left|right>``
    (frames sent), ``/network/stats`` (link counters, delays, τ_b; 2 Hz).

Episodes: with a ``task`` the recording starts with an episode of that task, so the whole
session is one labelled episode until the record button stops it; the button's later
episodes get the same label. Without a task only the button makes episodes (unlabelled), and
``teleop dataset label FILE --task NAME`` labels the recording afterwards.

Crash tolerance is the recorder's: data reaches the operating system at least every
``flush_interval_s`` (0.5 s), so a SIGKILL loses at most about that and the file opens
(:func:`teleop.record.open_recording`).
"""

from __future__ import annotations

import sys
from typing import Any, Callable

import numpy as np

from retarget.references import RobotReferences
from teleop.inputs.base import Frame, InputEvent, StationEvent, frame_to_motion
from teleop.record import CameraFrame, Recorder, RobotStateSample
from teleop.robot.model import NQ_BASE, NV_BASE
from teleop.video.clock import monotonic_s
from teleop.video.wire import STREAM_NAMES


#: Latest publish time of a delivered command [s]: the last whole second MCAP can represent
#: (its times are unsigned 64-bit nanoseconds, 584 years).
MAX_PUBLISH_TIME_S = float((1 << 64) // 10**9 - 1)


def camera_name(stream_id: int) -> str:
    """Topic suffix of a video stream ("left", "right", or "stream<N>")."""
    return STREAM_NAMES.get(stream_id, f"stream{stream_id}")


class _StationRecording:
    def __init__(self, path, clock, station: str, stats_hz: float, metadata: dict | None,
                 task: str | None = None, task_since: float | None = None) -> None:
        self.clock = clock
        self.task = task or None
        self.recorder = Recorder(path, clock=clock, metadata={"station": station, "clock_kind": "monotonic",
                                                              **({"task": task} if task else {}),
                                                              **(metadata or {})})
        self._stats_period = 1.0 / stats_hz
        self._next_stats = -np.inf
        self._station = station
        self._failure_reported = False
        if self.task:
            # Now on the station clock, or since ``task_since``: packets that reached the
            # socket while the station was starting are logged at their arrival, before now.
            self.recorder.start_episode(self.task, log_time_ns=None if task_since is None else self._ns(task_since))

    @staticmethod
    def _ns(t: float) -> int:
        return int(round(t * 1e9))

    def _stats_due(self) -> bool:
        now = self.clock.now()
        if now < self._next_stats:
            return False
        self._next_stats = now + self._stats_period
        return True

    def toggle_episode(self, task: str | None = None) -> None:
        """Start an episode (labelled ``task``, default the recording's task), or stop the
        open one (the record button)."""
        if self.recorder.episode_open:
            self.recorder.stop_episode()
        else:
            self.recorder.start_episode(task or self.task)

    def close(self):
        return self.recorder.close()

    def report_failure(self) -> bool:
        """Say once, on stderr, that the recording stopped (a full disk, the file removed):
        the session goes on, and without this nobody would know until it ends. True once
        the recording has failed."""
        error = self.recorder.error
        if error is not None and not self._failure_reported:
            self._failure_reported = True
            print(f"[{self._station}] error: recording to {self.recorder.path} stopped "
                  f"({type(error).__name__}: {error}): the session goes on unrecorded", file=sys.stderr)
        return error is not None


class OperatorRecording(_StationRecording):
    """Recorder hooks of the operator station.

    Args:
        path: output .mcap file.
        clock: the station's clock (``now()`` in seconds).
        stats_hz: rate of /network/stats messages [Hz].
        metadata: extra key/value strings for the file's metadata record.
        task: label of an episode started at once (see the module docstring); None: none.
    """

    def __init__(self, path, clock, stats_hz: float = 2.0, metadata: dict | None = None,
                 task: str | None = None) -> None:
        super().__init__(path, clock, "operator", stats_hz, metadata, task)

    def wrap_source(self, source):
        """The source, with every frame it gives recorded as raw operator input."""
        return _RecordedSource(source, self)

    def input_frame(self, frame: Frame) -> None:
        t, pose = frame
        if isinstance(pose, RobotReferences):     # a references replay: nothing raw to record
            return
        self.recorder.log_operator_input(frame_to_motion(frame), log_time_ns=self._ns(t))

    def references(self, refs: RobotReferences) -> None:
        self.recorder.log_references(refs, log_time_ns=self._ns(refs.t))

    def camera_frame(self, frame, now: float) -> None:
        """A displayed :class:`teleop.video.receiver.ReceivedFrame` (JPEG payload)."""
        timing = frame.timing
        self.recorder.log_camera_frame(CameraFrame(float(timing.capture_s), bytes(frame.payload), "jpeg",
                                                   f"{camera_name(timing.stream_id)}_eye"),
                                       camera=camera_name(timing.stream_id), log_time_ns=self._ns(now))

    def after_tick(self, endpoint, video=None) -> None:
        """Network statistics at ``stats_hz``."""
        if self.report_failure() or not self._stats_due():
            return
        stats: dict[str, Any] = {"link": "operator", **endpoint.stats.summary()}
        if video is not None:
            report = video.buffer.report()
            stats.update({f"video_{k}": v for k, v in report.items() if isinstance(v, (int, float)) or v is None})
            stats["video_frames_displayed"] = video.displayed
        self.recorder.log_network_stats(stats)


class _RecordedSource:
    """A pose source whose frames are also recorded (everything else is passed through)."""

    def __init__(self, source, recording: OperatorRecording) -> None:
        self.source = source
        self.recording = recording

    def poll(self, now: float | None = None):
        frame = self.source.poll(now)
        if frame is not None:
            self.recording.input_frame(frame)
        return frame

    def frames_until(self, now: float | None = None) -> list:
        """Every frame due since the last call (the source's own ``frames_until``), else
        its newest (``poll``), each recorded: the raw input then holds every frame a file or
        the synthetic operator gave, not only those a tick happened to take."""
        take_all = getattr(self.source, "frames_until", None)
        if take_all is None:
            frame = self.poll(now)
            return [] if frame is None else [frame]
        frames = take_all(now)
        for frame in frames:
            self.recording.input_frame(frame)
        return frames

    def __getattr__(self, name):                    # events(), close(), task_at()...
        return getattr(self.source, name)


class RobotRecording(_StationRecording):
    """Recorder hooks of the robot station.

    Args:
        path: output .mcap file.
        clock: the station's clock (``now()`` in seconds).
        joint_names: names of the robot's joints, in state order.
        stats_hz: rate of /network/stats messages [Hz].
        metadata: extra key/value strings for the file's metadata record.
        task: label of an episode started at once (see the module docstring); None: none.
        task_since: when that episode starts [s, station clock], if before now: when the
            station began to listen, so that the commands received while it started are in it.
    """

    def __init__(self, path, clock, joint_names: list[str] | None = None, stats_hz: float = 2.0,
                 metadata: dict | None = None, task: str | None = None, task_since: float | None = None) -> None:
        super().__init__(path, clock, "robot", stats_hz, metadata, task, task_since)
        self.joint_names = tuple(joint_names) if joint_names is not None else None
        self.station = None

    def delivered(self, refs: RobotReferences, arrival: float) -> None:
        # The operator stamped refs.t on its clock; on the robot clock the send time is
        # refs.t - offset (offset = operator - robot, 0 until the clock sync has measured it).
        offset = 0.0
        if self.station is not None:
            offset = self.station.operator_time(0.0)
        # MCAP times are unsigned 64-bit nanoseconds: a send time outside (before the robot
        # clock's origin on another host before the offset is measured; centuries ahead on
        # a broken operator clock) is recorded at the nearest end, not refused: refused, it
        # stopped the robot station.
        publish_s = min(max(0.0, refs.t - offset), MAX_PUBLISH_TIME_S)
        self.recorder.log_delivered_command(refs, log_time_ns=self._ns(arrival),
                                            publish_time_ns=self._ns(publish_s))

    def video_out(self, sender) -> Callable[[np.ndarray, float], None]:
        """A station ``video_out`` that encodes once, sends and records the frame."""
        def send(image: np.ndarray, t: float) -> None:
            available = monotonic_s()                # the sender's default clock
            payload = sender.codec.encode(np.ascontiguousarray(image[:, :, ::-1]))   # RGB -> BGR
            sender.send_encoded(payload, t, available, monotonic_s())
            name = camera_name(sender.stream_id)
            self.recorder.log_camera_frame(CameraFrame(float(t), payload, "jpeg", f"{name}_eye"), camera=name,
                                           log_time_ns=self._ns(t))
        return send

    def after_tick(self, station, record) -> None:
        """The commands the station took (delivered), the compensated command, the robot
        state with the joint commands and the watchdog and compensation states (every tick),
        and statistics (at ``stats_hz``)."""
        self.station = station
        if self.report_failure():
            return
        # Only the commands the station took (not a second operator's, not implausible or
        # replayed ones): the channel is one operator's commands, training data for
        # `dataset export --channel delivered`.
        for refs, arrival in station.taken_references:
            self.delivered(refs, arrival)
        t = float(record.t)
        out = getattr(station, "last_compensator_output", None)
        if out is not None and out.references is not None:
            self.recorder.log_compensated_command(RobotReferences.from_flat(t, np.asarray(out.references, float)),
                                                  log_time_ns=self._ns(t))
        state = station.sim.state()
        # The commands and states of every tick, not only the 2 Hz statistics: what the robot
        # was told to do (and whether it followed the operator at all) labels each sample.
        sample = RobotStateSample(t, state.q[NQ_BASE:], state.v[NV_BASE:], record.measured_com, record.cop,
                                  self.joint_names, station.last_joint_command, record.watchdog, record.compensation)
        self.recorder.log_robot_state(sample, log_time_ns=self._ns(t))
        if self._stats_due():
            telemetry = station.telemetry()
            # τ_b is None, not the assumed default, until the operator reported one: the
            # recording holds what was measured.
            stats = {"link": "robot", **telemetry["network"], "tau_f_mean_s": telemetry["tau_f_mean_s"],
                     "tau_b_s": telemetry["tau_b_s"] if telemetry["tau_b_measured"] else None,
                     "compensation": telemetry["compensation"], "watchdog": record.watchdog}
            self.recorder.log_network_stats(stats, log_time_ns=self._ns(t))


def input_event_handler(station, recording: OperatorRecording | None = None,
                        log: Callable[[str], None] | None = None) -> Callable[[StationEvent], None]:
    """What the operator station does with the input's button events.

    Calibrate (N-/T-pose): the retargeting calibrates again on the next pose (the input
    has already re-zeroed its trackers). Record: start/stop an episode when recording.
    Pause and emergency stop are applied by :class:`teleop.inputs.base.GatedSource`
    (nothing is sent; the robot's watchdog holds a safe pose); they are only reported here.
    """
    log = log or (lambda message: None)

    def handle(event: StationEvent) -> None:
        if event.kind in (InputEvent.CALIBRATE_NPOSE, InputEvent.CALIBRATE_TPOSE):
            station.recalibrate()
            log(f"{event.kind.value}: retargeting recalibrated on the next pose")
        elif event.kind is InputEvent.RECORD_TOGGLE:
            if recording is None:
                log("record button: not recording (start the station with --record FILE)")
            else:
                recording.toggle_episode()
                log(f"episode {'started' if recording.recorder.episode_open else 'stopped'}")
        elif event.kind is InputEvent.PAUSE_TOGGLE:
            log("pause (clutch) toggled")
        elif event.kind is InputEvent.EMERGENCY_STOP:
            log("EMERGENCY STOP: references are no longer sent; the robot holds its pose")
        elif event.kind is InputEvent.CALIBRATION_PROBLEM:
            log(f"calibration: {event.detail}")
    return handle
