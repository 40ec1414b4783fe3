"""Synthetic performers: a person's body size and movement style, derived from an id."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


#: Body heights of the synthetic performers [m].
HEIGHT_RANGE_M: tuple[float, float] = (1.55, 1.95)


@dataclass(frozen=True)
class Performer:
    """A synthetic person: body size and movement style.

    Attributes:
        performer_id: identifier; :meth:`from_id` derives everything else from it.
        height_m: body height [m].
        sex: "male" or "female" (de Leva mass table).
        tempo: preferred speed (>1 faster), 0.9-1.1.
        amplitude: scale of trunk/pelvis excursions, 0.85-1.15.
        trunk_use: how much the trunk helps the arm in reaches, 0.7-1.3.
        knee_strategy: 0 = bend from the waist (stoop), 1 = bend the knees (squat), when
            picking from the floor.
        squat_depth: fraction of the deepest squat used, 0.75-1.
        reach_extension: preferred arm extension at a reach target (hand distance from the
            shoulder / arm length), 0.90-0.95 (elbow flexed ~35-50 deg).
        elbow_out: lateral component of the elbow pole (elbows out vs. tucked), 0.1-0.5.
        relaxed_elbow: elbow flexion of a relaxed arm during activity [rad].
        curvature: scale of hand-path curvature.
        hand_lag: delay of hand onset after trunk onset, as a fraction of the phase.
        gaze: how much the head turns to look at targets (0-1).
        sway_mm, drift_mm, tremor_mm: RMS of CoM sway, slow hand drift and 8-12 Hz tremor [mm].
    """

    performer_id: int
    height_m: float
    sex: str
    tempo: float
    amplitude: float
    trunk_use: float
    knee_strategy: float
    squat_depth: float
    reach_extension: float
    elbow_out: float
    relaxed_elbow: float
    curvature: float
    hand_lag: float
    gaze: float
    sway_mm: float
    drift_mm: float
    tremor_mm: float

    @classmethod
    def from_id(cls, performer_id: int, height_m: float | None = None) -> "Performer":
        """The performer with this id (deterministic); ``height_m`` overrides the drawn height."""
        rng = np.random.default_rng([0x5EED, int(performer_id)])
        # Heights spread evenly over 1.55-1.95 m for any first few ids (golden-ratio
        # sequence, +-1.5 cm jitter), so even a 3-person data set spans short to tall.
        low, high = HEIGHT_RANGE_M
        spread = (0.5 + int(performer_id) * 0.6180339887498949) % 1.0
        drawn = float(np.clip(low + (high - low) * spread + rng.uniform(-0.015, 0.015), low, high))
        # Shorter people are more often women (de Leva's female mass table), taller men.
        sex = "female" if rng.uniform() < np.clip((1.85 - drawn) / 0.3, 0.05, 0.95) else "male"
        return cls(
            performer_id=int(performer_id),
            height_m=float(height_m if height_m is not None else drawn),
            sex=sex,
            tempo=float(rng.uniform(0.9, 1.1)),
            amplitude=float(rng.uniform(0.85, 1.15)),
            trunk_use=float(rng.uniform(0.7, 1.3)),
            knee_strategy=float(rng.uniform(0.25, 0.9)),
            squat_depth=float(rng.uniform(0.75, 1.0)),
            reach_extension=float(rng.uniform(0.90, 0.95)),
            elbow_out=float(rng.uniform(0.1, 0.5)),
            relaxed_elbow=float(rng.uniform(0.08, 0.25)),
            curvature=float(rng.uniform(0.5, 1.5)),
            hand_lag=float(rng.uniform(0.0, 0.15)),
            gaze=float(rng.uniform(0.6, 1.0)),
            sway_mm=float(rng.uniform(1.5, 3.0)),
            drift_mm=float(rng.uniform(1.0, 2.0)),
            tremor_mm=float(rng.uniform(0.5, 1.2)),
        )
