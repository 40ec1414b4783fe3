"""Message types the recorder writes besides the ones the pipeline already has.

References (retargeted, delivered, compensated) are :class:`retarget.references.RobotReferences`
and operator input is :class:`retarget.human.HumanMotion`; the types below cover what has no
class elsewhere yet: robot state, camera frames and episode markers.

All times are in seconds on the producer's clock unless the name says otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class RobotStateSample:
    """One sample of the measured robot state.

    Any object with the same attribute names (or a mapping with the same keys) can be
    recorded in its place, so the robot side's own state class needs no conversion.

    Attributes:
        t: time the state was measured [s].
        joint_positions: (N,) joint angles [rad].
        joint_velocities: (N,) joint velocities [rad/s].
        com: (3,) centre of mass in the stance frame [m].
        cop: (2,) measured centre of pressure on the ground, stance frame (x, y) [m].
        joint_names: optional names of the N joints, in order.
        joint_commands: optional (N,) joint angles the whole-body controller commanded in the
            tick of this sample [rad], in the order of ``joint_positions``: what a policy
            learnt from the recording has to output (None: not recorded, as in recordings
            made before they were).
        watchdog: optional state of the stale-command watchdog in that tick (the robot
            station's: "WAITING", "ACTIVE", "STALE", "RESUMING"), so that the ticks where the
            robot held its pose instead of following the operator can be told apart.
        compensation: optional state of the delay compensation in that tick ("passthrough",
            "blend_in", "predicting", "blend_out").
    """

    t: float
    joint_positions: np.ndarray
    joint_velocities: np.ndarray
    com: np.ndarray
    cop: np.ndarray
    joint_names: tuple[str, ...] | None = None
    joint_commands: np.ndarray | None = None
    watchdog: str | None = None
    compensation: str | None = None


@dataclass
class CameraFrame:
    """One compressed camera image.

    Attributes:
        t: capture time [s].
        data: the compressed image bytes (JPEG unless ``format`` says otherwise).
        format: image format as Foxglove names it ("jpeg", "png", "webp").
        frame_id: optical frame of the camera (for 3-D viewers).
    """

    t: float
    data: bytes
    format: str = "jpeg"
    frame_id: str = "camera"


#: The two kinds of episode marker.
EPISODE_EVENTS: tuple[str, ...] = ("start", "stop")


@dataclass
class EpisodeMarker:
    """Start or stop of an episode (one demonstration of one task).

    Attributes:
        event: "start" or "stop".
        episode: episode number, 0, 1, 2... in the order episodes were started.
        task: task label ("squat", "wave"...), "" when not labelled yet.
    """

    event: str
    episode: int
    task: str = ""

    def __post_init__(self) -> None:
        if self.event not in EPISODE_EVENTS:
            raise ValueError(f"episode marker event must be one of {EPISODE_EVENTS}, got {self.event!r}")
        self.episode = int(self.episode)
        self.task = self.task or ""
