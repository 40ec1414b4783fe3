"""Live sources for ``teleop record``: the registry and the built-in test pattern.

A source is any iterable of ``(channel, time_s, message)``:

* ``channel``: a topic or short name the recorder knows ("references", "robot_state",
  "camera/head"...), or "episodes" with an :class:`EpisodeMarker` (or a dict
  ``{"event": "start"|"stop", "task": ...}``) to start/stop episodes;
* ``time_s``: the message's log time in seconds on the recording clock
  (:func:`time.time` for live sources), or None for "now";
* ``message``: the channel's message type (see :mod:`teleop.record.channels`).

The iterable paces itself (a live source yields when data arrives). ``SOURCES`` maps a name
to a factory taking the parsed command-line options; the integration code adds the real
sources (robot, operator station, simulator) to it, and ``teleop record --source`` offers
whatever it holds when the command line is parsed.
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from retarget.references import RobotReferences

from .messages import CameraFrame

#: One item of a source: (channel, log time [s] or None, message).
SourceItem = tuple[str, float | None, Any]
#: Builds a source from the parsed ``teleop record`` options.
SourceFactory = Callable[[argparse.Namespace], Iterable[SourceItem]]


def pattern_references(t: float) -> RobotReferences:
    """Smooth, plausible references at time ``t`` [s]: hands circling, a slow squat, head turning."""
    w = 2 * math.pi * 0.5  # 0.5 Hz hand circles
    return RobotReferences(
        t=t,
        com_xy=np.array([0.01 * math.sin(0.5 * w * t), 0.02 * math.sin(0.25 * w * t)]),
        waist_height=0.55 + 0.03 * math.sin(0.25 * w * t),
        left_hand=np.array([0.25 + 0.05 * math.cos(w * t), 0.18 + 0.05 * math.sin(w * t), 0.80]),
        right_hand=np.array([0.25 + 0.05 * math.cos(w * t + math.pi), -0.18 + 0.05 * math.sin(w * t), 0.80]),
        left_arm=np.array([0.2 * math.sin(w * t), 0.9 + 0.2 * math.cos(w * t), 0.0]),
        right_arm=np.array([-0.2 * math.sin(w * t), 0.9 + 0.2 * math.cos(w * t), 0.0]),
        neck=np.array([0.1 * math.sin(0.5 * w * t), 0.4 * math.sin(0.25 * w * t)]),
        torso=np.array([0.05 * math.sin(0.5 * w * t), 0.0, 0.1 * math.sin(0.25 * w * t)]),
    )


def pattern_image(t: float, width: int = 320, height: int = 240) -> np.ndarray:
    """A BGR test image for time ``t`` [s]: colour gradient, a moving disc, the time printed."""
    import cv2  # here, not at the top: the CLI imports this module to list the sources

    x = np.linspace(0, 255, width, dtype=np.float32)
    y = np.linspace(0, 255, height, dtype=np.float32)[:, None]
    image = np.empty((height, width, 3), np.uint8)
    image[..., 0] = (x + 40 * t) % 256
    image[..., 1] = np.broadcast_to(y, (height, width)).astype(np.uint8)
    image[..., 2] = 128
    cx = int(width / 2 + width / 3 * math.cos(t))
    cy = int(height / 2 + height / 3 * math.sin(t))
    cv2.circle(image, (cx, cy), height // 8, (255, 255, 255), -1)
    cv2.putText(image, f"t={t:9.2f}s", (8, height - 12), cv2.FONT_HERSHEY_SIMPLEX, 0.6, (0, 0, 0), 2)
    return image


def pattern_source(reference_rate_hz: float = 100.0, camera_fps: float = 15.0,
                   clock: Callable[[], float] = time.time,
                   sleep: Callable[[float], None] = time.sleep) -> Iterator[SourceItem]:
    """References from sinusoids and a synthetic JPEG camera, paced on ``clock`` [s].

    Yields ``("references", t, RobotReferences)`` at ``reference_rate_hz`` and
    ``("camera/test", t, CameraFrame)`` at ``camera_fps``, forever.
    """
    import cv2

    start = clock()
    next_reference, next_frame = start, start
    reference_period, frame_period = 1.0 / reference_rate_hz, 1.0 / camera_fps
    while True:
        due = min(next_reference, next_frame)
        delay = due - clock()
        if delay > 0:
            sleep(delay)
        now = clock()
        if now >= next_reference:
            yield "references", now, pattern_references(now - start)
            # Keep the schedule; after a stall, skip ahead rather than burst.
            next_reference = max(next_reference + reference_period, now - reference_period)
        if now >= next_frame:
            ok, jpeg = cv2.imencode(".jpg", pattern_image(now - start), [cv2.IMWRITE_JPEG_QUALITY, 80])
            if ok:
                yield "camera/test", now, CameraFrame(now, jpeg.tobytes(), "jpeg", "test_camera")
            next_frame = max(next_frame + frame_period, now - frame_period)


def _test_pattern_factory(options: argparse.Namespace) -> Iterable[SourceItem]:
    return pattern_source()


#: Source name -> factory. The integration code registers the real sources here.
SOURCES: dict[str, SourceFactory] = {"test-pattern": _test_pattern_factory}
