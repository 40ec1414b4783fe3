"""The one interface every operator input implements: timestamped human poses, polled.

Backends: the synthetic operator (:mod:`teleop.inputs.synthetic`), file replay
(:mod:`teleop.inputs.replay`), Xsens MVN live over UDP (:mod:`teleop.inputs.xsens_live`)
and OpenVR/SteamVR (:mod:`teleop.inputs.openvr_input`). The operator station only knows
:class:`PoseSource`; :func:`open_source` builds one from a command-line spec.

A frame is ``(t, pose)``:

* ``t``: the time the pose was produced, in seconds **on the caller's clock** (the clock
  whose ``now`` is passed to :meth:`PoseSource.poll`); a source that knows the producer's
  own time (MVN's time code) maps it onto the caller's clock, so jitter in delivery does
  not become jitter in the timestamps;
* ``pose``: ``{segment: (position (3,) [m], orientation (4,) unit quaternion (w, x, y, z))}``
  in the :mod:`retarget.human` conventions (world x forward, y left, z up; segment frames
  world-aligned in the N-pose; segment names from :data:`retarget.human.SEGMENTS`, a
  subset for sparse sources such as VR trackers).

Sources with buttons (VR controllers) also report :class:`StationEvent` through an
optional ``events()`` method; :func:`drain_events` reads it from any source.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol, runtime_checkable

import numpy as np

from retarget.human import SEGMENTS, HumanMotion

#: Segment poses of one instant: {segment: (position (3,) [m], quaternion (4,) (w, x, y, z))}.
Pose = dict[str, tuple[np.ndarray, np.ndarray]]
#: One timestamped pose: (time on the caller's clock [s], pose).
Frame = tuple[float, Pose]


@runtime_checkable
class PoseSource(Protocol):
    """Anything that yields timestamped human poses.

    ``poll(now)`` returns the newest frame produced up to ``now`` [s] and not returned
    yet (older unreturned frames are skipped, as a live tracker stream would), or None
    when nothing new is due. ``now=None`` means the source's own clock. Sources may also
    have ``close()`` (release sockets, threads, the VR runtime) and ``events()``.
    """

    def poll(self, now: float | None = None) -> Frame | None: ...


class InputEvent(enum.Enum):
    """What the operator asked for with a button (VR controllers)."""

    CALIBRATE_NPOSE = "calibrate_npose"   # standing in the N-pose: set tracker offsets, recalibrate
    CALIBRATE_TPOSE = "calibrate_tpose"   # same, arms held horizontally sideways
    RECORD_TOGGLE = "record_toggle"       # start / stop an episode in the session recording
    PAUSE_TOGGLE = "pause_toggle"         # clutch: stop / resume sending references
    EMERGENCY_STOP = "emergency_stop"     # stop sending for good; the robot's watchdog holds a safe pose
    #: Not a button: the input could not do what a calibrate button asked, or left devices
    #: out (not tracked at that moment); ``StationEvent.detail`` says what.
    CALIBRATION_PROBLEM = "calibration_problem"


@dataclass(frozen=True)
class StationEvent:
    """One button event: what, when (caller's clock [s]), which device sent it, and for a
    problem what it is (one line for the operator)."""

    kind: InputEvent
    t: float
    device: str = ""
    detail: str = ""


def drain_events(source) -> list[StationEvent]:
    """The events a source reported since the last call ([] for sources without buttons)."""
    events = getattr(source, "events", None)
    return list(events()) if callable(events) else []


def close_source(source) -> None:
    """Release what a source holds, if it holds anything."""
    close = getattr(source, "close", None)
    if callable(close):
        close()


def check_frame(frame: Frame) -> Frame:
    """Validate a frame's structure; returns it. Raises ValueError naming the bad part."""
    t, pose = frame
    if not np.isfinite(t):
        raise ValueError(f"frame time must be finite, got {t!r}")
    for name, (position, orientation) in pose.items():
        if name not in SEGMENTS:
            raise ValueError(f"unknown segment {name!r} (known: {', '.join(SEGMENTS)})")
        if np.shape(position) != (3,) or np.shape(orientation) != (4,):
            raise ValueError(f"segment {name}: position must be (3,) and orientation (4,), "
                             f"got {np.shape(position)} and {np.shape(orientation)}")
    return frame


def frame_to_motion(frame: Frame, source: str = "operator", rate_hz: float = 0.0) -> HumanMotion:
    """A one-frame :class:`HumanMotion` (what the recorder's operator channel takes), built
    :meth:`~retarget.human.HumanMotion.raw`: a segment a device glitched (NaN or inf) is
    recorded as it came, while the operator station holds it like a lost one; refused here,
    one glitch would stop a recorded session."""
    t, pose = frame
    names = tuple(pose)
    return HumanMotion.raw(np.array([t]), names, np.array([pose[n][0] for n in names])[None],
                           np.array([pose[n][1] for n in names])[None], source=source, rate_hz=rate_hz)


class GatedSource:
    """Applies the operator's pause (clutch) and emergency stop to any source.

    While paused or after an emergency stop, :meth:`poll` returns None, so the station
    sends nothing and the robot's stale-command watchdog holds a safe pose. Poses keep
    being read (and dropped) while paused so that resuming does not replay old frames.
    An emergency stop is final for this source.

    Args:
        source: the wrapped source.
        on_event: called with every event the source reports (the station's handler).
    """

    def __init__(self, source: PoseSource, on_event: Callable[[StationEvent], None] | None = None) -> None:
        self.source = source
        self.on_event = on_event
        self.paused = False
        self.stopped = False
        self.last_frame: Frame | None = None

    def poll(self, now: float | None = None) -> Frame | None:
        frame = self.source.poll(now)
        frames = self._gate([] if frame is None else [frame])
        return frames[-1] if frames else None

    def frames_until(self, now: float | None = None) -> list[Frame]:
        """Every frame due since the last call, oldest first, when the source can say (its
        own ``frames_until``: a file replay, the synthetic operator), else its newest (a
        live tracker's ``poll``); [] while paused or stopped."""
        take_all = getattr(self.source, "frames_until", None)
        if take_all is not None:
            return self._gate(take_all(now))
        frame = self.source.poll(now)
        return self._gate([] if frame is None else [frame])

    def _gate(self, frames: list[Frame]) -> list[Frame]:
        """Apply the events the source reported with ``frames`` (read already), then the
        pause and the stop to them."""
        for event in drain_events(self.source):
            if event.kind is InputEvent.PAUSE_TOGGLE:
                self.paused = not self.paused
            elif event.kind is InputEvent.EMERGENCY_STOP:
                self.stopped = True
            if self.on_event is not None:
                self.on_event(event)
        if not frames or self.paused or self.stopped:
            return []
        self.last_frame = frames[-1]
        return frames

    def close(self) -> None:
        close_source(self.source)


def open_source(spec: str, *, speed: float = 1.0, loop: bool = False, seed: int = 0,
                clock: Callable[[], float] | None = None, vr_config=None, allow_remote: bool = False,
                rate_hz: float | None = None) -> PoseSource:
    """Build a source from a command-line spec.

    ``synthetic`` (the synthetic operator, ``seed``), ``xsens-live[:PORT]`` or
    ``xsens-live:HOST:PORT`` (MVN network stream, default port 9763 on 127.0.0.1; another
    HOST than loopback needs ``allow_remote``: MVN usually runs on another PC),
    ``openvr`` (SteamVR; ``vr_config`` a :class:`~teleop.inputs.openvr_input.OpenVRConfig`
    or a JSON file), anything else: a motion file replayed at its true rate (``speed``,
    ``loop``; ``rate_hz`` [Hz] is the rate of an Xsens CSV export, which does not state it).
    """
    import time

    clock = clock or time.monotonic
    if spec == "synthetic":
        from teleop.inputs.synthetic import SyntheticOperator

        return SyntheticOperator(seed=seed, clock=clock)
    if spec == "xsens-live" or spec.startswith("xsens-live:"):
        from teleop.inputs.xsens_live import XsensLiveSource, parse_bind

        return XsensLiveSource(parse_bind(spec[len("xsens-live:"):] if ":" in spec else ""), clock=clock,
                               allow_remote=allow_remote)
    if spec == "openvr":
        from teleop.inputs.openvr_input import OpenVRConfig, OpenVRSource

        config = vr_config if isinstance(vr_config, OpenVRConfig) or vr_config is None else OpenVRConfig.load(vr_config)
        return OpenVRSource(config, clock=clock)
    from teleop.inputs.replay import FileReplay
    from teleop.takes import read_motion_file

    return FileReplay(read_motion_file(Path(spec), rate_hz), speed=speed, loop=loop, clock=clock)
