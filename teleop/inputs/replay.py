"""File replay: a recorded motion played back as a live pose source, at its true rate.

Any format the retarget readers support. ``speed`` scales time (2 = twice as fast);
``loop`` starts over at the end, after returning to the first pose (:func:`with_return_to_start`).
The interface is every input's
(:class:`teleop.inputs.base.PoseSource`): ``poll(now)`` returns the newest frame due and
not returned yet, as (t, {segment: (pos (3,), quat (4,))}), with t on the caller's clock.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

import numpy as np

from retarget.human import HumanMotion
from retarget.readers import read_motion
from teleop.inputs.base import Frame

#: Motion time [s] by which a frame may be early and still count as due (rounding only).
_DUE_TOLERANCE_S = 1e-9
#: Average speed [m/s] of the segments' return to the first pose when a replay loops, and the
#: shortest and longest return [s]: an Xsens put-aside take ends with a hand 1.1 m (in the
#: world) from where it starts, a return of 3 s.
RETURN_SPEED_M_S = 0.25
RETURN_MIN_S = 0.5
RETURN_MAX_S = 3.0


def with_return_to_start(motion: HumanMotion) -> HumanMotion:
    """``motion`` followed by frames that bring every segment back to its first pose, so that
    playing it in a loop has no seam: looped as recorded, the pose jumped from the last frame
    to the first in one sample (the hands by 36 cm on an Xsens put-aside take), and the robot
    was commanded to follow that jump at each lap.

    The return takes the largest segment displacement / ``RETURN_SPEED_M_S``, within
    [``RETURN_MIN_S``, ``RETURN_MAX_S``], on a minimum-jerk profile s(u) = 10u³ − 15u⁴ + 6u⁵
    (zero velocity and acceleration at both ends), sampled at the motion's own period;
    positions (and the CoM) are interpolated linearly in s, orientations by normalised linear
    interpolation on the nearer hemisphere (close to the slerp's path for the few tens of
    degrees a take's end and start differ by).
    """
    if len(motion) < 2:
        return motion
    period = float(motion.times[1] - motion.times[0])
    first, last = motion.positions[0], motion.positions[-1]
    gaps = np.linalg.norm(first - last, axis=-1)          # (S,) [m]; NaN: a segment not tracked
    distance = float(np.nanmax(gaps)) if np.isfinite(gaps).any() else 0.0
    duration = min(max(RETURN_MIN_S, distance / RETURN_SPEED_M_S), RETURN_MAX_S)
    n = max(1, int(np.ceil(duration / period)) - 1)     # frames strictly between last and first
    u = np.arange(1, n + 1) / (n + 1)
    s = (10 * u ** 3 - 15 * u ** 4 + 6 * u ** 5)[:, None, None]      # (n, 1, 1)
    positions = last + s * (first - last)
    q_last, q_first = motion.orientations[-1], motion.orientations[0]
    q_first = np.where(np.sum(q_last * q_first, axis=-1, keepdims=True) < 0, -q_first, q_first)
    orientations = q_last + s * (q_first - q_last)
    orientations /= np.linalg.norm(orientations, axis=-1, keepdims=True)
    com = None
    if motion.com is not None:
        com = np.concatenate([motion.com, motion.com[-1] + s[:, 0] * (motion.com[0] - motion.com[-1])])
    times = np.concatenate([motion.times, motion.times[-1] + period * np.arange(1, n + 1)])
    return HumanMotion(times, motion.segment_names, np.concatenate([motion.positions, positions]),
                       np.concatenate([motion.orientations, orientations]), com, motion.source, motion.rate_hz,
                       dict(motion.meta))


class FileReplay:
    """Plays a :class:`HumanMotion` (or a motion file) as a live source.

    Args:
        motion: the motion, or a path to read.
        speed: playback speed factor (> 0).
        loop: start over after the last frame, returning to the first pose in between
            (:func:`with_return_to_start`); else the source ends: poll returns None.
        clock: time source [s] (default time.monotonic).
    """

    def __init__(self, motion: HumanMotion | str | Path, speed: float = 1.0, loop: bool = False,
                 clock: Callable[[], float] = time.monotonic, **read_opts) -> None:
        if speed <= 0:
            raise ValueError("speed must be positive")
        self.motion = motion if isinstance(motion, HumanMotion) else read_motion(motion, **read_opts)
        if len(self.motion) < 2:
            raise ValueError(f"{self.motion.source}: a replay needs at least two frames")
        self.speed, self.loop, self._clock = float(speed), bool(loop), clock
        if self.loop:
            self.motion = with_return_to_start(self.motion)
        self._t0: float | None = None
        self._last = -1
        self.finished = False

    def poll(self, now: float | None = None) -> Frame | None:
        """The newest frame due by ``now`` and not returned yet (older ones are skipped, as
        a live stream's would be), or None."""
        index = self._due_index(now)
        if index <= self._last:
            return None
        self._last = index
        return self._frame(index)

    def frames_until(self, now: float | None = None) -> list[Frame]:
        """Every frame due by ``now`` and not returned yet, oldest first (a recording of the
        session then holds them all; :meth:`poll` skips all but the newest)."""
        index = self._due_index(now)
        frames = [self._frame(k) for k in range(self._last + 1, index + 1)]
        self._last = max(self._last, index)
        return frames

    def _due_index(self, now: float | None) -> int:
        """The index of the newest frame due by ``now``, counted over the laps of a loop
        (-1 before the first); sets ``finished`` past the end of a replay without loop."""
        now = self._clock() if now is None else float(now)
        if self._t0 is None:
            self._t0 = now
        times = self.motion.times - self.motion.times[0]
        # A frame is due at its own time, rounding aside: a clock that reaches it exactly
        # (t0 + 0.02 - t0 = 0.01999...) must not see the frame before (one period late).
        elapsed = (now - self._t0) * self.speed + _DUE_TOLERANCE_S
        laps = 0.0
        if self.loop:
            laps, elapsed = divmod(elapsed, self._lap_s)
        elif elapsed > times[-1]:
            self.finished = True
        return int(np.searchsorted(times, elapsed, side="right") - 1) + int(laps) * len(times)

    @property
    def _lap_s(self) -> float:
        """Length of one lap of a loop, the return to the first frame included [s of motion]."""
        times = self.motion.times
        return float(times[-1] - times[0] + (times[1] - times[0]))

    def _frame(self, index: int) -> Frame:
        """Frame ``index`` (counted over the laps), stamped on the caller's clock."""
        laps, i = divmod(index, len(self.motion))
        assert self._t0 is not None
        t = self._t0 + (laps * self._lap_s + self.motion.times[i] - self.motion.times[0]) / self.speed
        pose = {name: (self.motion.positions[i, s], self.motion.orientations[i, s])
                for s, name in enumerate(self.motion.segment_names)}
        return t, pose

    def close(self) -> None:
        """Nothing to release (the interface's optional ``close``)."""
