"""The envelope of plausible robot references: what an operator can ask of a robot at all.

A references sample far outside it is not a motion but a fault upstream: a client bug, a
corrupted recording, a unit mistake (millimetres sent as metres), an angle in degrees. The
whole-body controller would still "track" it, swinging every joint it can towards the
unreachable target at its velocity limit; a receiver refuses such a sample instead (the
robot station counts it and keeps its last command).

The envelope is deliberately loose, so that every motion a person can make passes, walking
included. The CoM reference follows an operator who walks away from where they calibrated
(the retargeting does not clamp it; the robot keeps its own CoM over its feet regardless):
it is bounded only by the size of a tracked space (``walk_m``, 20 m; a unit mistake of x100
or x1000 is far beyond). The hands are retargeted relative to the operator's body onto the
robot's stance, so they stay near it however far the operator walks: within twice the
robot's standing reach of the stance origin. The retargeted HDM05, Xsens and synthetic
demonstrations of ``../shared/data`` and ``datasets/`` keep their hands within 0.9 m of the
stance origin (an HDM05 performer who walks sideways carries the CoM reference 1.48 m
away, the hands 0.75 m) and every posture angle below 3.7 rad, against 2.2 m and 2π rad
for the iCub.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from .references import FLAT_LABELS, FLAT_SIZE, POSTURE_INDICES
from .robot_target import RobotTarget

#: Index pair (x, y) of the CoM ground projection in the flat vector.
_COM = (0, 1)
#: (x, y) index pairs of the hands, whose ground-plane distance from the stance origin is checked.
_HANDS: tuple[tuple[int, int], ...] = ((3, 4), (6, 7))
#: Indices of the heights checked: the waist, the left hand, the right hand.
_HEIGHTS: tuple[int, ...] = (2, 5, 8)


def _hypot(x: float, y: float) -> float:
    """np.hypot as :meth:`ReferenceEnvelope.first_violation` computes it (math.hypot can differ
    in the last bit, so a frame on the bound was outside for one and inside for the other);
    inf, quietly, beyond the float range."""
    with np.errstate(over="ignore"):
        return float(np.hypot(x, y))


@dataclass(frozen=True)
class ReferenceEnvelope:
    """Bounds of plausible references (stance frame, see :mod:`retarget.references`).

    Attributes:
        reach_m: largest ground-plane distance of each hand from the stance origin [m].
        low_m, high_m: range of the waist and hand heights above the ground [m].
        walk_m: largest ground-plane distance of the CoM reference from the stance origin
            [m]: the size of a tracked space an operator can walk about in.
        max_angle_rad: largest magnitude of a posture angle [rad]; a full turn by default,
            beyond which no joint angle means anything.
    """

    reach_m: float
    low_m: float
    high_m: float
    walk_m: float = 20.0
    max_angle_rad: float = 2.0 * math.pi

    @classmethod
    def for_target(cls, target: RobotTarget, scale: float = 2.0) -> "ReferenceEnvelope":
        """The envelope of a robot: ``scale`` times its standing reach.

        The reach is the shoulder height plus the arm length (the highest point the robot's
        hand gets to standing upright; 1.10 m for the iCub). The hands may be ``scale``
        reaches from the stance origin in the ground plane, and from half a reach below the
        ground to ``scale`` reaches above it.
        """
        reach = float(max(target.left_shoulder[2], target.right_shoulder[2]) + target.arm_length)
        return cls(reach_m=scale * reach, low_m=-0.5 * reach, high_m=scale * reach)

    def violation(self, flat: npt.NDArray[np.floating[Any]]) -> str | None:
        """What puts the (20,) flat references outside the envelope (the first such scalar,
        e.g. ``"l.hand x, y 1e+06 m from the stance origin (plausible: within 2.2 m)"``),
        or None if they are inside it; a NaN or infinite value is outside (a retargeting that
        overflowed on a glitch's values sent NaN references, counted as sent)."""
        flat = np.asarray(flat, dtype=float).reshape(FLAT_SIZE)
        bad = np.flatnonzero(~np.isfinite(flat))
        if bad.size:
            return f"{FLAT_LABELS[bad[0]]} is {flat[bad[0]]} (not a number the robot can follow)"
        walked = _hypot(flat[_COM[0]], flat[_COM[1]])
        if walked > self.walk_m:
            return f"com x, y {walked:.3g} m from the stance origin (plausible: within {self.walk_m:.3g} m)"
        for ix, iy in _HANDS:
            distance = _hypot(flat[ix], flat[iy])
            if distance > self.reach_m:
                name = FLAT_LABELS[ix].rsplit(" ", 1)[0]
                return (f"{name} x, y {distance:.3g} m from the stance origin "
                        f"(plausible: within {self.reach_m:.2g} m)")
        for i in _HEIGHTS:
            if not self.low_m <= flat[i] <= self.high_m:
                return (f"{FLAT_LABELS[i]} {flat[i]:.3g} m (plausible: "
                        f"{self.low_m:.2g} to {self.high_m:.2g} m)")
        for i in POSTURE_INDICES:
            if abs(flat[i]) > self.max_angle_rad:
                return f"{FLAT_LABELS[i]} {flat[i]:.3g} rad (plausible: within ±{self.max_angle_rad:.3g} rad)"
        return None

    def first_violation(self, values: npt.NDArray[np.floating[Any]]) -> tuple[int, str] | None:
        """(frame, :meth:`violation` of it) of the first of the (T, 20) flat references
        ``values`` outside the envelope, or None: the same test for a whole trajectory at
        once (a take checked frame by frame cost a Python call per frame)."""
        values = np.asarray(values, dtype=float).reshape(-1, FLAT_SIZE)
        with np.errstate(invalid="ignore", over="ignore"):
            outside = ~np.isfinite(values).all(axis=1)
            outside |= np.hypot(values[:, _COM[0]], values[:, _COM[1]]) > self.walk_m
            for ix, iy in _HANDS:
                outside |= np.hypot(values[:, ix], values[:, iy]) > self.reach_m
            heights = values[:, list(_HEIGHTS)]
            outside |= ((heights < self.low_m) | (heights > self.high_m)).any(axis=1)
            outside |= (np.abs(values[:, list(POSTURE_INDICES)]) > self.max_angle_rad).any(axis=1)
        for frame in np.flatnonzero(outside):
            why = self.violation(values[frame])
            if why is not None:                   # always, as both apply the same test
                return int(frame), why
        return None
