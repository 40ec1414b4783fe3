"""File replay: a recorded motion played back as a live pose source, at its true rate.

Any format the retarget readers support. ``speed`` scales time (2 = twice as fast);
``loop`` starts over at the end. The interface is every input's
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


class FileReplay:
    """Plays a :class:`HumanMotion` (or a motion file) as a live source.

    Args:
        motion: the motion, or a path to read.
        speed: playback speed factor (> 0).
        loop: start over after the last frame (else the source ends: poll returns None).
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
        self._t0: float | None = None
        self._last = -1
        self.finished = False

    def poll(self, now: float | None = None) -> Frame | None:
        now = self._clock() if now is None else float(now)
        if self._t0 is None:
            self._t0 = now
        times = self.motion.times - self.motion.times[0]
        # A frame is due at its own time, rounding aside: a clock that reaches it exactly
        # (t0 + 0.02 - t0 = 0.01999...) must not see the frame before (one period late).
        elapsed = (now - self._t0) * self.speed + _DUE_TOLERANCE_S
        laps = 0
        if self.loop:
            period = times[-1] + (times[1] - times[0])
            laps, elapsed = divmod(elapsed, period)
        elif elapsed > times[-1]:
            self.finished = True
        index = int(np.searchsorted(times, elapsed, side="right") - 1) + int(laps) * len(times)
        if index <= self._last:
            return None
        self._last = index
        i = index % len(times)
        t = self._t0 + (laps * (times[-1] + times[1] - times[0]) + times[i]) / self.speed
        pose = {name: (self.motion.positions[i, s], self.motion.orientations[i, s])
                for s, name in enumerate(self.motion.segment_names)}
        return t, pose

    def close(self) -> None:
        """Nothing to release (the interface's optional ``close``)."""
