"""Browser view of a jogging session: the camera with the detection drawn, and the robot.

Reuses the product's video viewer (:class:`teleop.video.web.VideoWebViewer`: MJPEG
stream, ``/stats`` JSON, 3D skeleton view) with one stream, ``camera``, and a
``/robot-pose`` document built by :class:`teleop.video.robot_view.RobotPoseView`:
"actual" = the simulated robot's measured configuration, "predicted" = the configuration
the jogging controller committed. Nothing here runs in the control loop except
:meth:`JogWebView.publish` (one JPEG encode, at most ``max_fps`` times a second).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np

from teleop.robot.model import RobotModel

#: Legend of the jog page's robot view: no ghost (no operator pose) and no delay.
JOG_POSE_LABELS = {"predicted": "jog command", "actual": "robot measured"}


class JogWebView:
    """The jog session's web page.

    Args:
        robot: robot model (the view keeps its own copy).
        port: TCP port (0 = any free one); host: interface to bind.
        max_fps: camera images published per second at most (JPEG encoding costs ~2 ms).
    """

    def __init__(self, robot: RobotModel, port: int = 8080, host: str = "127.0.0.1", max_fps: float = 20.0) -> None:
        from teleop.video.robot_view import RobotPoseView
        from teleop.video.web import VideoWebViewer

        self._lock = threading.Lock()
        self._stats: dict[str, Any] = {}
        self._measured_q: np.ndarray | None = None
        self._commanded_q: np.ndarray | None = None
        self._view = RobotPoseView(robot, labels=JOG_POSE_LABELS)
        # (publish count, document): the document changes only when publish() runs, so
        # the polls of every open page share one forward kinematics per control tick.
        self._published = 0
        self._pose_cache: tuple[int, dict[str, Any]] | None = None
        self.viewer = VideoWebViewer(host=host, port=port, streams=("camera",), stats_provider=self._stats_copy,
                                     title="AprilTag jogging", robot_pose_provider=self._pose_document,
                                     captions={"camera": "camera, tag detection drawn"})
        self.min_period_s = 1.0 / max_fps
        self._last_publish = -np.inf

    def start(self) -> "JogWebView":
        self.viewer.start()
        return self

    @property
    def url(self) -> str:
        return self.viewer.url

    def _stats_copy(self) -> dict[str, Any]:
        with self._lock:
            return dict(self._stats)

    def _pose_document(self) -> dict[str, Any]:
        with self._lock:
            published, cache = self._published, self._pose_cache
            measured, commanded, info = self._measured_q, self._commanded_q, dict(self._stats)
        if cache is not None and cache[0] == published:
            return cache[1]
        document = self._view.document(measured_q=measured, commanded_q=commanded, info=info)
        with self._lock:
            self._pose_cache = (published, document)
        return document

    def publish(self, image: np.ndarray | None, measured_q: np.ndarray | None, commanded_q: np.ndarray,
                stats: dict[str, Any]) -> None:
        """Update the page: ``image`` (H, W, 3) BGR uint8 with the detection drawn (None: keep
        the last one), configurations (nq,), and the stats panel's figures."""
        with self._lock:
            self._measured_q = None if measured_q is None else measured_q.copy()
            self._commanded_q = commanded_q.copy()
            self._stats = dict(stats)
            self._published += 1
        now = time.monotonic()
        if image is not None and now - self._last_publish >= self.min_period_s:
            self._last_publish = now
            self.viewer.publish_image("camera", image)

    def stop(self) -> None:
        self.viewer.stop()
