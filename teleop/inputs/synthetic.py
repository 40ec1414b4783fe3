"""The synthetic operator: human-like whole-body task motions without recorded data.

So that the demo, the ProMP learning and the tests run on a fresh machine, this module
generates plausible whole-body demonstrations of a few manipulation tasks, as
:class:`retarget.human.HumanMotion` in the Xsens MVN convention (z up, x forward, y left,
metres, world_from_segment quaternions (w, x, y, z), segment frames world-aligned in the
N-pose, all 23 canonical segments, plus the centre of mass).

How a motion is made
--------------------
1. A *performer* (:class:`Performer`) fixes the body (height 1.55-1.95 m, sex for the mass
   table) and a movement style (tempo, amplitude, knee-vs-trunk strategy when bending,
   elbow posture, path curvature, gaze, sway and tremor levels).
2. A *task* lays out phases on a timeline (0.5-0.6 s still N-pose, the motion, 0.5-0.6 s still)
   and describes the motion as minimum-jerk (Flash & Hogan 1985) profiles of a few
   whole-body variables: pelvis lowering, pelvis/trunk flexion, lateral bend and
   rotation, clavicle elevation/protraction, hand targets in the world with a blend
   weight, relaxed arm postures, gaze target and a desired centre-of-mass shift.
   Task targets (where the hand goes) are solved on the final posture, so they are
   reachable at the arm extension the performer prefers.
3. :func:`_realise` turns that description into joint rotations: analytic two-link IK
   places each hand on its target (elbow swivel from a posture-dependent pole) and each
   foot on its fixed ground position (so feet never slide), the pelvis height is capped
   so the legs can reach the ground, and a few fixed-point iterations move the pelvis
   horizontally until the centre of mass (de Leva 1996 masses) follows its desired
   ground path -- which keeps it inside the support polygon.
4. Forward kinematics of :class:`teleop.inputs.skeleton.Skeleton` gives segment poses.

Natural variability per trial (seeded): duration x0.75..1.35, phase proportions,
amplitudes, target positions, hand path curvature, left/right asymmetry and timing,
postural sway (0.1-0.6 Hz, ~2 mm of CoM), slow hand drift (~1.5 mm) and physiological
tremor (8-12 Hz, ~1 mm). The noise fades to zero over the first and last 0.25 s, so
every trial starts and ends exactly in the N-pose (and live trials chain seamlessly).

Public API
----------
``TASKS``, ``generate(task, seed, ...)``, ``generate_dataset(out_dir, n_per_task, seed, ...)``,
``Performer``, ``SyntheticOperator`` (a live, clocked source), ``VirtualClock``.
"""

from __future__ import annotations

import csv
import time
import zlib
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from retarget.human import SEGMENTS, HumanMotion
from teleop.inputs.base import Frame
from teleop.inputs.skeleton import (
    SEGMENT_INDEX,
    Skeleton,
    angles_to_matrix,
    rot_y,
    rot_z,
    two_link_ik,
)

#: Task names understood by :func:`generate`.
TASKS: tuple[str, ...] = ("reach_forward", "pick_floor", "place_high", "squat", "side_reach", "put_aside")

#: One line per task: what the synthetic person does.
TASK_DESCRIPTIONS: dict[str, str] = {
    "reach_forward": "right hand reaches a point in front at chest height and returns",
    "pick_floor": "bend knees and trunk, both hands to an object on the floor in front, stand up holding it at "
                  "waist height, then let the arms down",
    "place_high": "right hand places something forward-right above head height and returns",
    "squat": "squat down and up, arms raised forward for balance",
    "side_reach": "left hand reaches far to the left, with lateral trunk bend and weight shift to the left foot",
    "put_aside": "both hands take a box at the front-left, carry it with torso yaw and put it down at the "
                 "front-right (like the Xsens put-aside-box demonstrations)",
}

#: Body heights of the synthetic performers [m].
HEIGHT_RANGE_M: tuple[float, float] = (1.55, 1.95)
#: Range of the per-trial duration factor (motion duration / nominal duration).
DURATION_FACTOR_RANGE: tuple[float, float] = (0.75, 1.35)
#: Range [s] of the still N-pose at the start and at the end of every trial, each drawn
#: uniformly per trial (calibration window).
STILL_S: tuple[float, float] = (0.5, 0.6)

_RIGHT, _LEFT = 0, 1
_SIDE_SIGN = (-1.0, 1.0)     # sign of y of each side (sigma in the skeleton docstring)
_SIDES = ("right", "left")
# Share of the total lumbar+thoracic (flexion, lateral bend, axial rotation) taken by each
# spine joint (sums to 1 per column): flexion mostly lumbar, rotation mostly thoracic.
_SPINE_SHARE = {"l5": (0.35, 0.25, 0.10), "l3": (0.30, 0.25, 0.15), "t12": (0.20, 0.25, 0.30),
                "t8": (0.15, 0.25, 0.45)}
_NECK_SHARE = 0.35           # share of the gaze rotation taken by the neck (the rest: head)
_BALANCE_ITERATIONS = 6      # at most; converges to < 0.1 mm in 3-5
_BALANCE_TOLERANCE = 5e-5    # [m] CoM ground-path error at which balancing stops
# A straight knee or elbow is a singularity of limb IK (joint angle ~ sqrt(distance
# deficit)): a joint that leaves or reaches full extension along a smooth path gets an
# infinite angular acceleration. Moving people never lock them, so while active the knees
# keep >= _KNEE_FLOOR and arms on a target keep >= _ELBOW_FLOOR of flexion (relaxed arms:
# half their relaxed flexion), imposed with a smooth floor; only the still N-pose is fully
# straight.
_KNEE_FLOOR = 0.08           # [rad] ~4.6 deg, relaxed standing
_ELBOW_FLOOR = 0.2           # [rad] ~11 deg
_DROP_ONSET = 0.004          # [x height] pelvis drops below this grow quadratically (knee onset ~ t^3)
_HEIGHT_SOFTNESS = 0.002     # [m] soft minimum between planned and reachable pelvis heights
_BALANCE_GAIN = 1.25         # ~ 1 / (share of the body mass that moves with the pelvis)


def minimum_jerk(tau) -> np.ndarray:
    """Minimum-jerk position profile s(tau) = 10 tau^3 - 15 tau^4 + 6 tau^5, tau clipped to [0, 1].

    T. Flash & N. Hogan, "The coordination of arm movements: an experimentally confirmed
    mathematical model", J. Neurosci. 5(7):1688-1703, 1985.
    """
    tau = np.clip(np.asarray(tau, dtype=float), 0.0, 1.0)
    return tau ** 3 * (10.0 + tau * (-15.0 + 6.0 * tau))


def _keyed(times: np.ndarray, keys) -> np.ndarray:
    """Piecewise minimum-jerk interpolation through keyframes.

    Args:
        times: (T,) sample times [s].
        keys: sequence of (time [s], value) with non-decreasing times; values are scalars
            or arrays of one common shape. Constant before the first and after the last key.
    Returns:
        (T,) + value shape.
    """
    key_times = np.array([k[0] for k in keys], dtype=float)
    values = np.array([np.asarray(k[1], dtype=float) for k in keys])
    index = np.clip(np.searchsorted(key_times, times, side="right") - 1, 0, len(keys) - 2)
    start, stop = key_times[index], key_times[index + 1]
    s = minimum_jerk((times - start) / np.maximum(stop - start, 1e-9))
    s = s.reshape(s.shape + (1,) * (values.ndim - 1))
    return values[index] + (values[index + 1] - values[index]) * s


def _bump(times: np.ndarray, start: float, stop: float) -> np.ndarray:
    """(T,) smooth bump 16 tau^2 (1 - tau)^2 on [start, stop]: 0 with zero slope at the ends, 1 mid-way."""
    tau = np.clip((times - start) / max(stop - start, 1e-9), 0.0, 1.0)
    return 16.0 * tau ** 2 * (1.0 - tau) ** 2


def _smoothstep(x) -> np.ndarray:
    x = np.clip(x, 0.0, 1.0)
    return x * x * (3.0 - 2.0 * x)


class _SmoothNoise:
    """Band-limited random signal: a sum of sinusoids with random frequencies and phases.

    Deterministic given its random draws, evaluable at any times (the same value for the
    same time whatever else is evaluated), smooth, and with a prescribed RMS per channel.
    """

    def __init__(self, rng: np.random.Generator, shape: tuple[int, ...], band_hz: tuple[float, float],
                 rms: float, n_components: int = 6):
        self.frequencies = rng.uniform(band_hz[0], band_hz[1], (n_components,) + shape)
        self.phases = rng.uniform(0.0, 2.0 * np.pi, (n_components,) + shape)
        self.amplitude = rms / np.sqrt(n_components / 2.0)

    def __call__(self, times: np.ndarray) -> np.ndarray:
        t = np.asarray(times, dtype=float).reshape((-1,) + (1,) * (self.frequencies.ndim))
        return self.amplitude * np.sin(2.0 * np.pi * self.frequencies * t + self.phases).sum(axis=1)


# -------------------------------------------------------------------------- performers
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


# ------------------------------------------------------------------------------ plans
@dataclass
class _Plan:
    """Whole-body intent over T frames, in anatomical terms (see skeleton docstring).

    Trunk-like triples are (flexion forward, lateral bend to the left, rotation to the
    left) [rad]; side index 0 = right, 1 = left.
    """

    times: np.ndarray                  # (T,) [s]
    pelvis_drop: np.ndarray            # (T,) desired lowering of the pelvis [m]
    pelvis_shift: np.ndarray           # (T, 2) first guess of the pelvis xy offset [m]
    pelvis_angles: np.ndarray          # (T, 3) pelvis (tilt forward, tilt left, yaw left) [rad]
    trunk: np.ndarray                  # (T, 3) total lumbar+thoracic (flexion, bend left, rotation left)
    clavicle: np.ndarray               # (T, 2, 2) (elevation, protraction) [rad]
    arm: np.ndarray                    # (T, 2, 5) relaxed posture: shoulder flexion, abduction,
    #                                    internal rotation, elbow flexion, forearm pronation [rad]
    wrist: np.ndarray                  # (T, 2, 2) wrist flexion, radial deviation [rad]
    hand_target: np.ndarray            # (T, 2, 3) wrist target in the world [m]
    hand_weight: np.ndarray            # (T, 2) 0 = relaxed posture, 1 = on the target
    gaze_target: np.ndarray            # (T, 3) point looked at [m]
    gaze_weight: np.ndarray            # (T,) 0 = head follows the trunk, 1 = looks at the target
    com_shift: np.ndarray              # (T, 2) desired CoM ground offset from the N-pose CoM [m]
    activity: np.ndarray               # (T,) 0 in the still N-pose, 1 while moving (unlocks the knees)
    elbow_out: float = 0.5
    knee_out: float = 0.1
    # Optional (T, 2, 3) shoulder positions the hand targets were designed for: the target
    # then moves with the shoulder's deviation from it (hand_target + shoulder - anchor), so
    # a hand whose target is reachable from the designed shoulder stays reachable while the
    # body is still on its way there (e.g. hands going down together with a bending trunk).
    hand_anchor: np.ndarray | None = None


@dataclass
class _Body:
    """A sized skeleton with its N-pose quantities precomputed."""

    skeleton: Skeleton
    rest_positions: np.ndarray         # (23, 3) N-pose segment origins [m]
    rest_com: np.ndarray               # (3,) N-pose CoM [m]

    @classmethod
    def of(cls, height_m: float, sex: str) -> "_Body":
        skeleton = Skeleton.from_height(height_m, sex)
        positions, rotations = skeleton.forward(skeleton.offsets[:1], np.broadcast_to(np.eye(3), (1, 23, 3, 3)))
        return cls(skeleton, positions[0], skeleton.centre_of_mass(positions, rotations)[0])

    @property
    def height(self) -> float:
        return self.skeleton.height_m

    def reach(self) -> float:
        """Shoulder-to-wrist length of the straight arm [m]."""
        return sum(self.skeleton.arm_lengths)

    def rest(self, segment: str) -> np.ndarray:
        return self.rest_positions[SEGMENT_INDEX[segment]]


def _soft_floor(value: np.ndarray, floor: np.ndarray) -> np.ndarray:
    """Smooth max(value, floor) (softplus with width floor / 4); exactly value where floor = 0."""
    floor = np.asarray(floor, dtype=float)
    width = np.maximum(floor, 1e-12) / 4.0
    smooth = floor + width * np.logaddexp(0.0, (value - floor) / width)
    return np.where(floor > 1e-9, smooth, value)


def _soft_min(values: np.ndarray, softness: np.ndarray) -> np.ndarray:
    """Smooth minimum over the last axis (-s log sum exp(-v / s), always <= min); the min where s = 0."""
    lowest = values.min(axis=-1)
    s = np.maximum(softness, 1e-12)[..., None]
    smooth = lowest - s[..., 0] * np.log(np.sum(np.exp(-(values - lowest[..., None]) / s), axis=-1))
    return np.where(softness > 1e-9, smooth, lowest)


def _trunk_to_joint_angles(anatomical: np.ndarray) -> np.ndarray:
    """(..., 3) (flexion, bend left, rotation left) -> joint angles (flexion_y, abduction_x, axial_z)."""
    return np.stack([anatomical[..., 0], -anatomical[..., 1], anatomical[..., 2]], axis=-1)


def _realise(body: _Body, plan: _Plan) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Turn a plan into segment poses: IK for hands and feet, CoM balance, FK.

    Returns positions (T, 23, 3) [m], rotations (T, 23, 3, 3), centre of mass (T, 3) [m].
    """
    sk = body.skeleton
    idx = SEGMENT_INDEX
    n = len(plan.times)
    local = np.empty((n, len(SEGMENTS), 3, 3))
    local[:] = np.eye(3)
    pelvis_rotation = angles_to_matrix(_trunk_to_joint_angles(plan.pelvis_angles))
    local[:, 0] = pelvis_rotation
    trunk = _trunk_to_joint_angles(plan.trunk)
    for segment, share in _SPINE_SHARE.items():
        local[:, idx[segment]] = angles_to_matrix(trunk * np.array(share))

    posture = {}
    for k, side in enumerate(_SIDES):
        sigma = _SIDE_SIGN[k]
        elevation, protraction = plan.clavicle[:, k, 0], plan.clavicle[:, k, 1]
        local[:, idx[f"{side}_shoulder"]] = angles_to_matrix(
            np.stack([np.zeros(n), sigma * elevation, -sigma * protraction], axis=-1))
        flexion, abduction, internal, elbow, pronation = (plan.arm[:, k, j] for j in range(5))
        posture[side] = (
            angles_to_matrix(np.stack([-flexion, sigma * abduction, -sigma * internal], axis=-1)),
            rot_y(-elbow),
            rot_z(-sigma * pronation),
        )
        wrist_flexion, radial = plan.wrist[:, k, 0], plan.wrist[:, k, 1]
        local[:, idx[f"{side}_hand"]] = angles_to_matrix(
            np.stack([-radial, -sigma * wrist_flexion, np.zeros(n)], axis=-1))

    upper_arm, forearm = sk.arm_lengths
    thigh, shank = sk.leg_lengths
    hip_offsets = np.stack([sk.offsets[idx["right_upper_leg"]], sk.offsets[idx["left_upper_leg"]]])
    ankles = np.stack([body.rest("right_foot"), body.rest("left_foot")])
    hips_in_world = np.einsum("tij,kj->tki", pelvis_rotation, hip_offsets)        # (T, 2, 3)
    pelvis_forward = pelvis_rotation[:, :, 0] * (1.0, 1.0, 0.0)
    pelvis_forward /= np.maximum(np.linalg.norm(pelvis_forward, axis=-1, keepdims=True), 1e-9)
    onset = _DROP_ONSET * body.height
    drop = np.maximum(plan.pelvis_drop, 0.0)
    desired_z = body.rest("pelvis")[2] - drop * drop / (drop + onset)
    knee_floor = _KNEE_FLOOR * np.clip(plan.activity, 0.0, 1.0)
    longest_leg = np.sqrt(thigh ** 2 + shank ** 2 + 2.0 * thigh * shank * np.cos(knee_floor))     # (T,)
    height_softness = _HEIGHT_SOFTNESS * np.clip(plan.activity, 0.0, 1.0)
    com_goal = body.rest_com[:2] + plan.com_shift
    shift = plan.pelvis_shift.copy()
    gaze_weight = np.clip(plan.gaze_weight, 0.0, 1.0)

    for iteration in range(_BALANCE_ITERATIONS):
        # Pelvis height: as planned, but never so high that a leg (with its knee floor)
        # cannot reach its fixed ankle: |hip - ankle| <= longest_leg.
        root = np.empty((n, 3))
        root[:, :2] = shift
        horizontal = shift[:, None, :] + hips_in_world[:, :, :2] - ankles[None, :, :2]
        slack = np.maximum(longest_leg[:, None] ** 2 - np.sum(horizontal ** 2, axis=-1), 0.0)
        highest = ankles[None, :, 2] + np.sqrt(slack) - hips_in_world[:, :, 2]
        root[:, 2] = _soft_min(np.column_stack([desired_z, highest]), height_softness)

        # Pass 1: trunk, clavicles and relaxed arms, to know where shoulders and head are.
        for side in _SIDES:
            local[:, idx[f"{side}_upper_arm"]] = posture[side][0]
            local[:, idx[f"{side}_forearm"]] = posture[side][1] @ posture[side][2]
        local[:, idx["neck"]] = np.eye(3)
        local[:, idx["head"]] = np.eye(3)
        positions, rotations = sk.forward(root, local)

        # Gaze: yaw and pitch of the target seen from the head, in the upper-trunk frame.
        to_target = np.einsum("tji,tj->ti", rotations[:, idx["t8"]], plan.gaze_target - positions[:, idx["head"]])
        yaw = np.clip(np.arctan2(to_target[:, 1], to_target[:, 0]), -1.2, 1.2)
        pitch = np.clip(np.arctan2(-to_target[:, 2], np.hypot(to_target[:, 0], to_target[:, 1])), -0.6, 1.0)
        look = np.stack([pitch, np.zeros(n), yaw], axis=-1) * gaze_weight[:, None]
        local[:, idx["neck"]] = angles_to_matrix(_NECK_SHARE * look)
        local[:, idx["head"]] = angles_to_matrix((1.0 - _NECK_SHARE) * look)

        # Arms: the wrist goes to a blend of the relaxed-posture wrist and the task target.
        for k, side in enumerate(_SIDES):
            sigma = _SIDE_SIGN[k]
            shoulder = positions[:, idx[f"{side}_upper_arm"]]
            clavicle = rotations[:, idx[f"{side}_shoulder"]]
            relaxed = positions[:, idx[f"{side}_hand"]]
            weight = plan.hand_weight[:, k:k + 1]
            task_target = plan.hand_target[:, k]
            if plan.hand_anchor is not None:
                task_target = task_target + shoulder - plan.hand_anchor[:, k]
            target = relaxed + weight * (task_target - relaxed)
            direction = np.einsum("tji,tj->ti", clavicle, target - shoulder)
            direction /= np.maximum(np.linalg.norm(direction, axis=-1, keepdims=True), 1e-9)
            # Elbow pole: straight back for a hanging arm (keeps the N-pose exact), turning
            # to down-and-out as the arm rises (elbow below the hand, slightly outward).
            elevation = np.arccos(np.clip(-direction[:, 2], -1.0, 1.0))
            raised = _smoothstep((elevation - 0.26) / (1.22 - 0.26))[:, None]
            pole_local = (1.0 - raised) * np.array([-1.0, 0.0, 0.0]) + raised * np.array(
                [-0.25, sigma * plan.elbow_out, -1.0])
            pole = np.einsum("tij,tj->ti", clavicle, pole_local)
            # Keep the elbow off full extension while the hand is on a task (see _ELBOW_FLOOR).
            distance = np.minimum(np.linalg.norm(target - shoulder, axis=-1), upper_arm + forearm)
            cos_elbow = (distance ** 2 - upper_arm ** 2 - forearm ** 2) / (2.0 * upper_arm * forearm)
            on_task = _smoothstep(weight[:, 0] / 0.4)
            floor = 0.5 * plan.arm[:, k, 3] * (1.0 - on_task) + _ELBOW_FLOOR * on_task
            elbow = _soft_floor(np.arccos(np.clip(cos_elbow, -1.0, 1.0)), floor)
            reachable = np.sqrt(upper_arm ** 2 + forearm ** 2 + 2.0 * upper_arm * forearm * np.cos(elbow))
            target = shoulder + (target - shoulder) / np.maximum(
                np.linalg.norm(target - shoulder, axis=-1, keepdims=True), 1e-12) * reachable[:, None]
            upper_rotation, hinge, _ = two_link_ik(shoulder, target, upper_arm, forearm, pole, -1.0)
            local[:, idx[f"{side}_upper_arm"]] = np.einsum("tji,tjk->tik", clavicle, upper_rotation)
            local[:, idx[f"{side}_forearm"]] = rot_y(hinge) @ posture[side][2]

        # Legs: hip -> fixed ankle, knee pointing forward (slightly out when bent), feet flat.
        hips = root[:, None, :] + hips_in_world
        for k, side in enumerate(_SIDES):
            sigma = _SIDE_SIGN[k]
            bent = _smoothstep((1.0 - np.linalg.norm(hips[:, k] - ankles[k], axis=-1) / (thigh + shank)) / 0.05)
            pole = pelvis_forward + np.array([1.0, 0.0, 0.0])
            pole[:, 1] += sigma * plan.knee_out * bent
            thigh_rotation, knee, _ = two_link_ik(hips[:, k], np.broadcast_to(ankles[k], (n, 3)), thigh, shank,
                                                  pole, 1.0)
            shank_rotation = thigh_rotation @ rot_y(knee)
            local[:, idx[f"{side}_upper_leg"]] = np.einsum("tji,tjk->tik", pelvis_rotation, thigh_rotation)
            local[:, idx[f"{side}_lower_leg"]] = rot_y(knee)
            local[:, idx[f"{side}_foot"]] = np.swapaxes(shank_rotation, -1, -2)   # foot stays world-aligned
            local[:, idx[f"{side}_toe"]] = np.eye(3)

        positions, rotations = sk.forward(root, local)
        com = sk.centre_of_mass(positions, rotations)
        error = com_goal - com[:, :2]
        if np.abs(error).max() < _BALANCE_TOLERANCE:
            break
        shift = shift + _BALANCE_GAIN * error
    return positions, rotations, com


def _solve_along(base: np.ndarray, direction: np.ndarray, centre: np.ndarray, radius: float) -> float:
    """Largest r with |base + r * direction - centre| = radius (direction unit).

    Used to place a task target at a chosen arm extension from the shoulder. Without a
    solution (the line misses the sphere) returns the point of closest approach.
    """
    q = base - centre
    along = float(direction @ q)
    discriminant = along * along - float(q @ q) + radius * radius
    return -along + np.sqrt(discriminant) if discriminant > 0.0 else -along


def _secant(residual: Callable[[np.ndarray], np.ndarray], x0: np.ndarray, x1: np.ndarray, lower: float,
            upper: float, iterations: int = 6, tolerance: float = 1e-4) -> np.ndarray:
    """Element-wise secant search for residual(x) = 0, x kept in [lower, upper].

    ``residual`` maps an array of candidates to an array of residuals of the same shape
    (each element independent, e.g. one body posture per frame).
    """
    x0, x1 = np.asarray(x0, dtype=float), np.asarray(x1, dtype=float)
    r0 = residual(x0)
    for _ in range(iterations):
        r1 = residual(x1)
        if np.all(np.abs(r1) < tolerance):
            break
        slope_ok = np.abs(r1 - r0) > 1e-12
        step = np.where(slope_ok, r1 * (x1 - x0) / np.where(slope_ok, r1 - r0, 1.0), 0.0)
        x0, r0, x1 = x1, r1, np.clip(x1 - step, lower, upper)
    return x1


# ---------------------------------------------------------------------------- trials
@dataclass
class _Trial:
    """Everything a task builder needs: body, style, randomness, timeline, noise."""

    task: str
    seed: int
    rate_hz: float
    speed: float
    performer: Performer
    body: _Body
    rng: np.random.Generator
    times: np.ndarray = field(default_factory=lambda: np.zeros(0))
    phases: dict[str, tuple[float, float]] = field(default_factory=dict)

    @property
    def height(self) -> float:
        return self.body.height

    def layout(self, nominal: list[tuple[str, float]]) -> list[float]:
        """Lay the phases out after the initial still period; sets ``times`` and ``phases``.

        Args:
            nominal: (phase name, duration at speed 1 [s]) in order.
        Returns:
            phase boundary times [s]: start of the first phase, then the end of each.
        """
        durations = np.array([d for _, d in nominal])
        jitter = self.rng.uniform(0.9, 1.1, len(durations))
        durations = durations * jitter * durations.sum() / (durations * jitter).sum() / self.speed
        still_before, still_after = self.rng.uniform(*STILL_S, 2)
        bounds = [still_before]
        for (name, _), duration in zip(nominal, durations):
            self.phases[name] = (bounds[-1], bounds[-1] + duration)
            bounds.append(bounds[-1] + duration)
        self.phases["still_start"] = (0.0, still_before)
        self.phases["still_end"] = (bounds[-1], bounds[-1] + still_after)
        n_frames = int(np.floor((bounds[-1] + still_after) * self.rate_hz)) + 1
        self.times = np.arange(n_frames) / self.rate_hz
        return bounds

    @property
    def motion_window(self) -> tuple[float, float]:
        return self.phases["still_start"][1], self.phases["still_end"][0]

    def make_noise(self) -> dict[str, _SmoothNoise]:
        p = self.performer
        return {
            "sway": _SmoothNoise(self.rng, (2,), (0.1, 0.6), p.sway_mm * 1e-3),
            "drift": _SmoothNoise(self.rng, (2, 3), (0.3, 2.0), p.drift_mm * 1e-3),
            "tremor": _SmoothNoise(self.rng, (2, 3), (8.0, 12.0), p.tremor_mm * 1e-3),
            "trunk": _SmoothNoise(self.rng, (3,), (0.2, 1.5), 0.004),
            "arm": _SmoothNoise(self.rng, (2, 2), (0.3, 2.0), 0.003),
            "gaze": _SmoothNoise(self.rng, (3,), (0.2, 1.0), 0.02 * self.height),
        }

    def envelope(self, times: np.ndarray) -> np.ndarray:
        """(T,) 0 at the first and last sample, 1 after 0.25 s: noise fades in and out."""
        end = self.times[-1] if len(self.times) else times[-1]
        return _smoothstep(times / 0.25) * _smoothstep((end - times) / 0.25)

    def still_plan(self, times: np.ndarray, noise: dict[str, _SmoothNoise], relaxed: bool = True) -> _Plan:
        """The plan of a person standing in the N-pose with sway.

        With ``relaxed``, during the motion window the knees unlock and the arms relax (a
        little elbow and shoulder flexion); without, the N-pose is kept throughout.
        """
        n = len(times)
        p = self.performer
        start, stop = self.motion_window
        envelope = self.envelope(times)
        active = _keyed(times, [(start, 0.0), (min(start + 0.6, stop), 1.0), (max(stop - 0.6, start), 1.0),
                                (stop, 0.0)]) * float(relaxed)
        arm = np.zeros((n, 2, 5))
        arm[:, :, 3] = p.relaxed_elbow * active[:, None]           # relaxed elbows bend a little
        arm[:, :, :2] = (0.05, 0.03) * active[:, None, None] + noise["arm"](times) * envelope[:, None, None]
        return _Plan(
            times=times,
            pelvis_drop=np.zeros(n),
            pelvis_shift=np.zeros((n, 2)),
            pelvis_angles=np.zeros((n, 3)),
            trunk=noise["trunk"](times) * envelope[:, None],
            clavicle=np.zeros((n, 2, 2)),
            arm=arm,
            wrist=np.zeros((n, 2, 2)),
            hand_target=np.zeros((n, 2, 3)),
            hand_weight=np.zeros((n, 2)),
            gaze_target=np.tile(self.body.rest("head") + (3.0, 0.0, 0.0), (n, 1)),
            gaze_weight=np.zeros(n),
            com_shift=noise["sway"](times) * envelope[:, None],
            activity=active,
            elbow_out=p.elbow_out,
            knee_out=0.1,
        )

    def hand_noise(self, times: np.ndarray, noise: dict[str, _SmoothNoise]) -> np.ndarray:
        """(T, 2, 3) slow drift + physiological tremor added to the hand targets [m]."""
        return (noise["drift"](times) + noise["tremor"](times)) * self.envelope(times)[:, None, None]

    def curve(self, line: np.ndarray, scale: float) -> np.ndarray:
        """A random curvature vector perpendicular to ``line``, |v| = scale * curvature [m]."""
        v = self.rng.normal(size=3)
        unit = line / max(np.linalg.norm(line), 1e-9)
        v -= (v @ unit) * unit
        return v / max(float(np.linalg.norm(v)), 1e-9) * scale * self.performer.curvature

    def side_delays(self) -> np.ndarray:
        """(2,) onset delays of the right and left hand [s]: one hand leads, the other lags
        by |N(0, 40 ms)| (clipped at 120 ms); both stay inside the motion window."""
        delays = np.zeros(2)
        delays[int(self.rng.integers(2))] = min(abs(self.rng.normal(0.0, 0.04)), 0.12)
        return delays

    def lag(self, start: float, stop: float, extra: float = 0.0) -> float:
        """Hand onset after the trunk onset: the performer's lag (+ extra) times the phase."""
        return start + (self.performer.hand_lag + extra) * (stop - start)


def _one_hand_reach(trial: _Trial, *, side: int, phases: list[tuple[str, float]], target: np.ndarray,
                    free_axis: int, extension: float, trunk: np.ndarray, pelvis_share: tuple[float, float, float],
                    clavicle: tuple[float, float], drop: float, com_shift: np.ndarray, pronation: float,
                    radial: float, other_arm_abduction: float = 0.0):
    """A one-handed reach: out (phase 1), hold (phase 2), back (phase 3), whole body helping.

    Args:
        side: _RIGHT or _LEFT hand.
        phases: the three (name, nominal duration [s]).
        target: (3,) wrist target [m]; its ``free_axis`` coordinate is solved so the arm
            is at ``extension`` x full length from the shoulder at the hold posture.
        trunk: (3,) total trunk (flexion, bend left, rotation left) at the target [rad];
            the pelvis takes ``pelvis_share`` of each, the spine the rest.
        clavicle: (elevation, protraction) of the reaching side [rad].
        drop: pelvis lowering [m]; com_shift: (2,) CoM ground shift at the target [m].
        pronation, radial: forearm pronation and wrist radial deviation at the target [rad].
        other_arm_abduction: abduction of the free arm (counterbalance) [rad].
    Returns:
        (plan, targets) for :func:`generate`.
    """
    h, p, body = trial.height, trial.performer, trial.body
    t0, t1, t2, t3 = trial.layout(phases)
    name = _SIDES[side]
    line = target - body.rest(f"{name}_hand")
    curve_out, curve_back = trial.curve(line, 0.06 * h), trial.curve(line, 0.06 * h)
    hand_start = trial.lag(t0, t1)
    share = np.array(pelvis_share)
    noise = trial.make_noise()

    def build(times, target):
        plan = trial.still_plan(times, noise)
        s = _keyed(times, [(t0, 0.0), (t1, 1.0), (t2, 1.0), (t3, 0.0)])
        plan.trunk += s[:, None] * trunk * (1.0 - share)
        plan.pelvis_angles += s[:, None] * trunk * share
        plan.clavicle[:, side] += s[:, None] * clavicle
        plan.pelvis_drop += s * drop
        plan.com_shift += s[:, None] * com_shift
        plan.arm[:, 1 - side, 1] += s * other_arm_abduction
        w = _keyed(times, [(hand_start, 0.0), (t1, 1.0), (t2, 1.0), (t3, 0.0)])
        plan.hand_weight[:, side] = w
        plan.hand_target[:, side] = (target + _bump(times, hand_start, t1)[:, None] * curve_out
                                     + _bump(times, t2, t3)[:, None] * curve_back)
        plan.hand_target += trial.hand_noise(times, noise)
        plan.arm[:, side, 4] += pronation * w
        plan.wrist[:, side, 1] += radial * w
        plan.gaze_target[:] = target + noise["gaze"](times)
        plan.gaze_weight = p.gaze * _keyed(times, [(t0, 0.0), (t0 + 0.7 * (t1 - t0), 1.0), (t2, 1.0), (t3, 0.0)])
        return plan

    target = np.array(target, dtype=float)
    direction = np.eye(3)[free_axis]
    peak = np.array([0.5 * (t1 + t2)])
    for _ in range(3):     # the shoulder moves a little with the CoM balance of the arm
        positions, _, _ = _realise(body, build(peak, target))
        shoulder = positions[0, SEGMENT_INDEX[f"{name}_upper_arm"]]
        target[free_axis] = _solve_along(target * (1.0 - direction), direction, shoulder,
                                         extension * body.reach())
    return build(trial.times, target), {f"{name}_hand": target}


def _task_reach_forward(trial: _Trial):
    """Right wrist to a point in front at chest height (0.70-0.75 H), 0.03-0.12 H right of
    the midline, at the performer's arm extension; trunk leans and turns a little."""
    rng, h, p = trial.rng, trial.height, trial.performer
    return _one_hand_reach(
        trial, side=_RIGHT, phases=[("reach", 1.7), ("hold", 0.5), ("return", 2.0)],
        target=np.array([0.0, -rng.uniform(0.03, 0.12) * h, rng.uniform(0.70, 0.75) * h]), free_axis=0,
        extension=np.clip(p.reach_extension + rng.uniform(-0.02, 0.02), 0.85, 0.97),
        trunk=p.amplitude * p.trunk_use * np.array([rng.uniform(0.05, 0.18), rng.uniform(-0.03, 0.03),
                                                    rng.uniform(0.05, 0.2)]),
        pelvis_share=(0.3, 0.0, 0.3), clavicle=(0.03, rng.uniform(0.05, 0.15)),
        drop=rng.uniform(0.0, 0.004) * h, com_shift=np.array([rng.uniform(0.004, 0.012) * h, 0.0]),
        pronation=rng.uniform(0.0, 0.5), radial=rng.uniform(0.0, 0.2))


def _task_place_high(trial: _Trial):
    """Right wrist to a point above the head (1.02-1.06 H), forward and 0-0.07 H right of
    the shoulder; the clavicle elevates and the trunk extends and bends away a little."""
    rng, h, p = trial.rng, trial.height, trial.performer
    return _one_hand_reach(
        trial, side=_RIGHT, phases=[("reach", 1.8), ("place", 0.6), ("return", 2.1)],
        target=np.array([0.0, -rng.uniform(0.105, 0.17) * h, rng.uniform(1.02, 1.06) * h]), free_axis=0,
        extension=np.clip(p.reach_extension + rng.uniform(-0.02, 0.02), 0.85, 0.97),
        trunk=p.amplitude * np.array([-rng.uniform(0.0, 0.08), rng.uniform(0.02, 0.08), rng.uniform(0.0, 0.1)]),
        pelvis_share=(0.2, 0.0, 0.3), clavicle=(rng.uniform(0.15, 0.3), rng.uniform(0.0, 0.1)),
        drop=rng.uniform(0.0, 0.004) * h, com_shift=np.array([rng.uniform(-0.004, 0.008) * h, 0.0]),
        pronation=rng.uniform(0.2, 0.8), radial=rng.uniform(0.0, 0.2))


def _task_side_reach(trial: _Trial):
    """Left wrist far to the left (0.55-0.78 H high), with a lateral trunk bend to the left
    and 45-80 % of the way of the CoM towards the left ankle; the right arm counterbalances."""
    rng, h, p, body = trial.rng, trial.height, trial.performer, trial.body
    to_left_foot = abs(body.rest("left_foot")[1] - body.rest_com[1])
    return _one_hand_reach(
        trial, side=_LEFT, phases=[("reach", 1.8), ("hold", 0.6), ("return", 2.1)],
        target=np.array([rng.uniform(-0.02, 0.10) * h, 0.0, rng.uniform(0.55, 0.78) * h]), free_axis=1,
        extension=np.clip(p.reach_extension + rng.uniform(-0.02, 0.02), 0.85, 0.97),
        trunk=p.amplitude * np.array([rng.uniform(0.0, 0.1), rng.uniform(0.10, 0.25) * p.trunk_use,
                                      rng.uniform(-0.05, 0.1)]),
        pelvis_share=(0.3, 0.15, 0.3), clavicle=(rng.uniform(0.05, 0.15), rng.uniform(0.0, 0.08)),
        drop=rng.uniform(0.002, 0.008) * h, com_shift=np.array([0.0, rng.uniform(0.45, 0.8) * to_left_foot]),
        pronation=rng.uniform(0.6, 1.2), radial=rng.uniform(0.0, 0.2),
        other_arm_abduction=rng.uniform(0.0, 0.15))


def _task_squat(trial: _Trial):
    """Pelvis down 0.17-0.26 H (x the performer's depth) with 20-37 deg of trunk lean, arms
    raised forward to about horizontal for balance, then back up."""
    rng, h, p = trial.rng, trial.height, trial.performer
    t0, t1, t2, t3 = trial.layout([("down", 2.0), ("hold", 0.5), ("up", 2.0)])
    drop = p.squat_depth * rng.uniform(0.17, 0.26) * h
    trunk_flexion = rng.uniform(0.35, 0.65) * p.amplitude
    com_forward = rng.uniform(0.0, 0.012) * h
    # Arms about horizontal in the world: shoulder flexion relative to the trunk adds the
    # trunk's own forward tilt.
    arms = np.array([rng.uniform(1.3, 1.6) + 0.8 * trunk_flexion, rng.uniform(0.0, 0.15), 0.0,
                     rng.uniform(0.05, 0.3), rng.uniform(0.5, 1.3)])
    asymmetry = np.array([rng.normal(0.0, 0.06), rng.normal(0.0, 0.04), 0.0, rng.normal(0.0, 0.05), 0.0])
    arm_lead = rng.uniform(0.15, 0.35) * (t1 - t0)
    delays = trial.side_delays()
    noise = trial.make_noise()

    def build(times, _unused=None):
        plan = trial.still_plan(times, noise)
        s = _keyed(times, [(t0, 0.0), (t1, 1.0), (t2, 1.0), (t3, 0.0)])
        plan.pelvis_drop += s * drop
        plan.pelvis_angles[:, 0] += s * 0.6 * trunk_flexion
        plan.trunk[:, 0] += s * 0.4 * trunk_flexion
        plan.com_shift[:, 0] += s * com_forward
        for k, sign in ((_RIGHT, -0.5), (_LEFT, 0.5)):
            delay = delays[k]
            raise_ = _keyed(times, [(t0 + delay, 0.0), (t1 - arm_lead + delay, 1.0), (t2 + delay, 1.0),
                                    (t3 - (0.12 - delay) - 0.05 * (t3 - t2), 0.0)])
            plan.arm[:, k] += raise_[:, None] * (arms + sign * asymmetry)
        plan.clavicle[:, :, 1] += 0.08 * s[:, None]
        plan.gaze_weight = 0.6 * p.gaze * s
        return plan

    return build(trial.times), {}


def _task_pick_floor(trial: _Trial):
    """Both wrists down to the sides of an object on the floor in front (wrists 0.09-0.11 H
    high), by trunk flexion (by strategy) and as much knee bend as needed; then stand up
    holding it at waist height (0.57-0.62 H), and let the arms down."""
    rng, h, p, body = trial.rng, trial.height, trial.performer, trial.body
    t0, t1, t2, t3, t4, t5 = trial.layout([("down", 2.0), ("grasp", 0.4), ("lift", 2.0), ("hold", 0.35),
                                           ("release", 1.05)])
    knees = np.clip(p.knee_strategy + rng.uniform(-0.1, 0.1), 0.0, 1.0)
    box_y = rng.uniform(-0.03, 0.03) * h
    box_half_width = 0.5 * rng.uniform(0.14, 0.2) * h
    wrist_height = rng.uniform(0.09, 0.11) * h
    extension = np.clip(p.reach_extension + rng.uniform(0.0, 0.02), 0.85, 0.97)
    # Shoulder height above the wrist / arm length: arms close to vertical, hands a little
    # in front of the shoulders (horizontal reach >= 0.22 arm lengths).
    shoulder_over_hand = min(rng.uniform(0.76, 0.86), np.sqrt(extension ** 2 - 0.04))
    side_twist = np.array([0.0, rng.normal(0.0, 0.03), rng.normal(0.0, 0.04)])
    com_forward = rng.uniform(0.0, 0.01) * h
    carry = np.array([rng.uniform(0.14, 0.18) * h, box_y, rng.uniform(0.57, 0.62) * h])
    radial = rng.uniform(0.15, 0.35)
    left_extra = np.array([0.0, 0.0, rng.normal(0.0, 0.006) * h])   # hands not exactly level
    hand_start = trial.lag(t0, t1, 0.1)
    delays = trial.side_delays()
    curve_down = trial.curve(np.array([0.3, 0.0, -1.0]), 0.04 * h)
    toward_body = np.array([-rng.uniform(0.02, 0.05) * h, 0.0, 0.0])
    noise = trial.make_noise()

    def grip(centre):
        return np.stack([centre + (0, -box_half_width, 0), centre + (0, box_half_width, 0) + left_extra])

    # Trunk flexion (pelvis + spine) by strategy: ~120 deg stooping, ~50 deg squat-lifting;
    # the knees then bend as much as needed (the pelvis drop is solved below).
    flexion = (2.1 - 1.2 * knees) * rng.uniform(0.92, 1.08)

    max_drop = 0.33 * h                                       # thighs about horizontal

    def build(times, design):
        # bend in [0, 2]: the pelvis goes down (0..1), then the trunk flexes further (1..2).
        bend, floor_x, shoulders_down, shoulders_up = design
        drop = max_drop * min(bend, 1.0)
        trunk_flexion = flexion + 0.6 * max(bend - 1.0, 0.0)
        plan = trial.still_plan(times, noise)
        s = _keyed(times, [(t0, 0.0), (t1, 1.0), (t2, 1.0), (t3, 0.0)])
        plan.pelvis_drop += s * drop
        plan.pelvis_angles[:, 0] += s * 0.45 * trunk_flexion
        plan.trunk += s[:, None] * (np.array([0.55 * trunk_flexion, 0.0, 0.0]) + side_twist)
        plan.com_shift[:, 0] += s * com_forward
        floor = grip(np.array([floor_x, box_y, wrist_height]))
        held = grip(carry)
        lift = _keyed(times, [(t2, 0.0), (t3, 1.0)])[:, None, None]
        plan.hand_target[:] = floor + lift * (held - floor)
        if shoulders_down is not None:
            # Hands travel with the body: reachable all the way down and up.
            plan.hand_anchor = shoulders_down + lift * (shoulders_up - shoulders_down)
        plan.hand_target += (_bump(times, hand_start, t1)[:, None, None] * curve_down
                             + _bump(times, t2, t3)[:, None, None] * toward_body)
        plan.hand_target += trial.hand_noise(times, noise)
        for k in (_RIGHT, _LEFT):
            w = _keyed(times, [(hand_start + delays[k], 0.0), (t1, 1.0), (t4, 1.0), (t5, 0.0)])
            plan.hand_weight[:, k] = w
            plan.wrist[:, k, 1] += radial * w
        centre = plan.hand_target.mean(axis=1)
        plan.gaze_target[:] = centre + noise["gaze"](times)
        plan.gaze_weight = p.gaze * _keyed(times, [(t0, 0.0), (t1, 1.0), (t3, 0.6), (t4, 0.6), (t5, 0.0)])
        return plan

    # Find how far to bend (how low the pelvis goes, then how much more the trunk flexes)
    # so the shoulders end up at the chosen height above the grip, then where the object
    # is so the arms reach it at the chosen extension.
    peak = np.array([0.5 * (t1 + t2)])
    reach = body.reach()
    bend, floor_x = 0.5, 0.25 * h

    def shoulder_gap(bend_value):
        positions, _, _ = _realise(body, build(peak, (bend_value, floor_x, None, None)))
        shoulders = positions[0, [SEGMENT_INDEX["right_upper_arm"], SEGMENT_INDEX["left_upper_arm"]]]
        return shoulders[:, 2].mean() - wrist_height - shoulder_over_hand * reach, shoulders

    for _ in range(2):
        bend = float(_secant(lambda b: shoulder_gap(float(b))[0], np.array(0.0), np.array(bend), 0.0, 2.0,
                             iterations=8))
        _, shoulders = shoulder_gap(bend)
        base = grip(np.array([0.0, box_y, wrist_height]))
        floor_x = min(_solve_along(base[k], np.array([1.0, 0, 0]), shoulders[k], extension * reach)
                      for k in range(2))
    floor = grip(np.array([floor_x, box_y, wrist_height]))
    arms = [SEGMENT_INDEX["right_upper_arm"], SEGMENT_INDEX["left_upper_arm"]]
    positions, _, _ = _realise(body, build(np.array([peak[0], 0.5 * (t3 + t4)]), (bend, floor_x, None, None)))
    design = (bend, floor_x, positions[0, arms], positions[1, arms])
    return build(trial.times, design), {"right_hand": floor[0], "left_hand": floor[1],
                                                 "right_hand_held": grip(carry)[0], "left_hand_held": grip(carry)[1]}


def _task_put_aside(trial: _Trial):
    """Both hands take a box (0.13-0.18 H wide, wrists 0.42-0.58 H high) at the front-left
    (heading 20-43 deg), carry it in an arc with 55-85 % of the heading as torso yaw, and
    put it down at the front-right; knees bend as needed for the height."""
    rng, h, p, body = trial.rng, trial.height, trial.performer, trial.body
    t0, t1, t2, t3, t4, t5 = trial.layout([("reach", 1.4), ("grasp", 0.3), ("carry", 2.0), ("release", 0.3),
                                           ("return", 1.5)])
    half_width = 0.5 * rng.uniform(0.13, 0.18) * h
    headings = np.array([rng.uniform(0.35, 0.75), -rng.uniform(0.35, 0.75)])    # pick left, place right
    heights = np.array([rng.uniform(0.42, 0.56), rng.uniform(0.42, 0.58)]) * h  # wrists at the box sides
    extension = np.clip(p.reach_extension + rng.uniform(-0.02, 0.01), 0.85, 0.97)
    shoulder_over_hand = rng.uniform(0.65, 0.82, 2)   # shoulder height above the wrists / arm length
    turn = rng.uniform(0.55, 0.85, 2) * headings
    # Lower boxes: more trunk flexion (the knees make up the rest, solved below).
    flexion = np.clip(0.3 + (0.56 * h - heights) / h * 2.5, 0.2, 0.8) * p.amplitude
    com_side = 0.2 * abs(body.rest("left_foot")[1] - body.rest_com[1]) * np.sign(headings)
    lift = rng.uniform(0.03, 0.07) * h
    inward = rng.uniform(0.0, 0.04) * h
    hand_start = trial.lag(t0, t1)
    delays = trial.side_delays()
    noise = trial.make_noise()

    def lateral(heading):
        return np.stack([-np.sin(heading), np.cos(heading), np.zeros_like(heading)], axis=-1)

    def build(times, design):
        drops, radii = design
        plan = trial.still_plan(times, noise)
        # Body posture keyframes: neutral -> facing the pick place -> facing the place place.
        pick_pose = np.array([flexion[0], 0.0, turn[0]])
        place_pose = np.array([flexion[1], 0.0, turn[1]])
        posture = _keyed(times, [(t0, np.zeros(3)), (t1, pick_pose), (t2, pick_pose), (t3, place_pose),
                                 (t4, place_pose), (t5, np.zeros(3))])
        plan.trunk += posture * (0.6, 1.0, 0.65)
        plan.pelvis_angles += posture * (0.4, 0.0, 0.35)
        plan.pelvis_drop += _keyed(times, [(t0, 0.0), (t1, drops[0]), (t2, drops[0]),
                                           (0.5 * (t2 + t3), 0.5 * drops.mean()), (t3, drops[1]), (t4, drops[1]),
                                           (t5, 0.0)])
        plan.com_shift[:, 1] += _keyed(times, [(t0, 0.0), (t1, com_side[0]), (t2, com_side[0]), (t3, com_side[1]),
                                               (t4, com_side[1]), (t5, 0.0)])
        # The box: centre along its heading at radius r, hands on its two sides.
        carry = _keyed(times, [(t2, 0.0), (t3, 1.0)])
        heading = headings[0] + carry * (headings[1] - headings[0])
        radius = radii[0] + carry * (radii[1] - radii[0]) - inward * _bump(times, t2, t3)
        centre = np.stack([radius * np.cos(heading), radius * np.sin(heading),
                           heights[0] + carry * (heights[1] - heights[0]) + lift * _bump(times, t2, t3)], axis=-1)
        side = lateral(heading) * half_width
        plan.hand_target[:, _RIGHT] = centre - side
        plan.hand_target[:, _LEFT] = centre + side
        plan.hand_target += trial.hand_noise(times, noise)
        for k in (_RIGHT, _LEFT):
            plan.hand_weight[:, k] = _keyed(times, [(hand_start + delays[k], 0.0), (t1, 1.0), (t4, 1.0),
                                                    (t5 - (0.12 - delays[k]), 0.0)])
        plan.wrist[:, :, 1] += 0.15 * plan.hand_weight
        plan.gaze_target[:] = centre + noise["gaze"](times)
        plan.gaze_weight = p.gaze * _keyed(times, [(t0, 0.0), (t0 + 0.7 * (t1 - t0), 1.0), (t4, 1.0), (t5, 0.0)])
        return plan

    # At the pick and at the place (two frames realised together): lower the pelvis until
    # the shoulders are at the chosen height above the box, then put the box at the chosen
    # arm extension along its heading.
    peaks = np.array([0.5 * (t1 + t2), 0.5 * (t3 + t4)])
    shoulder_columns = [SEGMENT_INDEX["right_upper_arm"], SEGMENT_INDEX["left_upper_arm"]]
    drops, radii = np.full(2, 0.03 * h), np.full(2, 0.3 * h)

    def shoulder_gap(drop_values):
        positions, _, _ = _realise(body, build(peaks, (drop_values, radii)))
        return positions[:, shoulder_columns, 2].mean(axis=1) - heights - shoulder_over_hand * body.reach()

    for _ in range(2):
        drops = _secant(shoulder_gap, np.zeros(2), drops, 0.0, 0.2 * h)
        positions, _, _ = _realise(body, build(peaks, (drops, radii)))
        for j in range(2):
            direction = np.array([np.cos(headings[j]), np.sin(headings[j]), 0.0])
            side = lateral(headings[j]) * half_width
            radii[j] = min(_solve_along(np.array([0, 0, heights[j]]) + sign * side, direction,
                                        positions[j, SEGMENT_INDEX[f"{name}_upper_arm"]], extension * body.reach())
                           for sign, name in ((-1.0, "right"), (1.0, "left")))
    centres = [np.array([radii[j] * np.cos(headings[j]), radii[j] * np.sin(headings[j]), heights[j]]) for j in range(2)]
    sides = [lateral(headings[j]) * half_width for j in range(2)]
    return build(trial.times, (drops, radii)), {"right_hand": centres[0] - sides[0], "left_hand": centres[0] + sides[0],
                                                "right_hand_place": centres[1] - sides[1],
                                                "left_hand_place": centres[1] + sides[1]}


def _task_rest(trial: _Trial, duration_s: float):
    """Standing in the N-pose with sway for ``duration_s`` between the still periods.

    Used between live trials by :class:`SyntheticOperator`; not in :data:`TASKS`.
    """
    trial.layout([("rest", duration_s * trial.speed)])
    plan = trial.still_plan(trial.times, trial.make_noise(), relaxed=False)
    return plan, {}


_BUILDERS: dict[str, Callable] = {
    "reach_forward": _task_reach_forward,
    "pick_floor": _task_pick_floor,
    "place_high": _task_place_high,
    "squat": _task_squat,
    "side_reach": _task_side_reach,
    "put_aside": _task_put_aside,
}


def _resolve_performer(performer: int | Performer | None, height_m: float | None) -> Performer:
    if isinstance(performer, Performer):
        return performer if height_m is None else replace(performer, height_m=float(height_m))
    return Performer.from_id(0 if performer is None else int(performer), height_m)


def generate(task: str, seed: int, rate_hz: float = 100.0, height_m: float | None = None,
             speed: float | None = None, performer: int | Performer | None = None) -> HumanMotion:
    """One synthetic demonstration of ``task``.

    Args:
        task: one of :data:`TASKS`.
        seed: trial seed; the same (task, seed, rate, height, speed, performer) gives the
            same motion bit for bit, and different seeds give different trials.
        rate_hz: sampling rate [Hz].
        height_m: body height [m]; default: the performer's height.
        speed: tempo multiplier (1 = nominal; durations scale as 1 / speed). Default: drawn
            per trial so that the motion lasts 0.75-1.35 x nominal, biased by the
            performer's tempo.
        performer: a :class:`Performer` or a performer id (default 0). Different ids are
            different people (height 1.55-1.95 m and movement style).
    Returns:
        A HumanMotion with all 23 segments and ``com``; ``times`` start at 0. ``meta``
        holds "label" (the task), "seed", "speed", "performer", "height_m", "sex",
        "targets" (task targets of the wrists, world frame [m]; e.g. "right_hand"),
        "phases" (name -> (start, end) [s]) and "motion_window" (start, end) [s], the
        part between the still N-poses.
    """
    if task not in _BUILDERS:
        raise ValueError(f"unknown task {task!r}; known: {', '.join(TASKS)}")
    return _generate(task, seed, rate_hz, _resolve_performer(performer, height_m), speed)


def _generate(task: str, seed: int, rate_hz: float, who: Performer, speed: float | None,
              rest_s: float = 1.0) -> HumanMotion:
    if rate_hz <= 0:
        raise ValueError(f"rate_hz must be positive, got {rate_hz}")
    rng = np.random.default_rng([int(seed) & 0xFFFFFFFF, zlib.crc32(task.encode()), who.performer_id])
    if speed is None:
        factor = np.clip(rng.uniform(*DURATION_FACTOR_RANGE) / who.tempo, *DURATION_FACTOR_RANGE)
        speed = 1.0 / factor
    elif speed <= 0:
        raise ValueError(f"speed must be positive, got {speed}")
    trial = _Trial(task, int(seed), float(rate_hz), float(speed), who, _body_of(who), rng)
    plan, targets = _task_rest(trial, rest_s) if task == "rest" else _BUILDERS[task](trial)
    positions, rotations, com = _realise(trial.body, plan)
    meta = {"label": task, "seed": int(seed), "speed": float(speed), "performer": who.performer_id,
            "height_m": who.height_m, "sex": who.sex,
            "targets": {k: np.asarray(v, dtype=float).copy() for k, v in targets.items()},
            "phases": {k: (float(a), float(b)) for k, (a, b) in trial.phases.items()},
            "motion_window": tuple(float(t) for t in trial.motion_window)}
    return trial.body.skeleton.to_motion(trial.times, positions, rotations, com=com,
                                         source=f"synthetic:{task}:performer{who.performer_id}:seed{seed}",
                                         rate_hz=rate_hz, meta=meta)


_BODY_CACHE: dict[tuple[float, str], _Body] = {}


def _body_of(who: Performer) -> _Body:
    key = (round(who.height_m, 6), who.sex)
    if key not in _BODY_CACHE:
        _BODY_CACHE[key] = _Body.of(who.height_m, who.sex)
    return _BODY_CACHE[key]


# --------------------------------------------------------------------------- datasets
#: Storage grids of the "compact" dataset precision: positions/CoM [m] and quaternion components.
COMPACT_POSITION_STEP = 2.0 ** -13      # 0.12 mm
COMPACT_QUATERNION_STEP = 2.0 ** -15    # 3.1e-5 (~0.004 deg)


def generate_dataset(out_dir, n_per_task: int, seed: int, *, tasks: tuple[str, ...] = TASKS,
                     rate_hz: float = 100.0, n_performers: int = 3, precision: str = "float64") -> list[Path]:
    """Write ``n_per_task`` demonstrations of each task as ``<out_dir>/<task>/<task>_<k>.npz``.

    Demonstration k of a task has trial seed ``seed * 1000 + k`` and performer
    ``k % n_performers`` (so every performer appears in every task and a held-out
    performer is any id >= n_performers). Files are written with
    :meth:`HumanMotion.save_npz` (compressed) and read back with ``HumanMotion.load_npz``;
    ``<out_dir>/index.csv`` lists file, task, k, seed, performer, height, sex, speed,
    duration and frame count, because the npz format keeps only the label.

    Args:
        out_dir: target folder (created).
        n_per_task: demonstrations per task (< 1000).
        seed: dataset seed.
        tasks: which tasks.
        rate_hz: sampling rate [Hz].
        n_performers: number of distinct performers cycled through.
        precision: "float64" (as generated), "float32" (positions, orientations and CoM as
            float32: rounding < 0.1 um / 1e-7), or "compact" (float32 rounded to a grid of
            :data:`COMPACT_POSITION_STEP` m and :data:`COMPACT_QUATERNION_STEP`, which the
            npz deflate compresses ~1.8x better; still 10x finer than the ~1 mm tremor).
            ``HumanMotion.load_npz`` returns float64 in every case.
    Returns:
        The written .npz paths, in order.
    """
    if not 0 < n_per_task < 1000:
        raise ValueError(f"n_per_task must be in 1..999, got {n_per_task}")
    if precision not in ("float64", "float32", "compact"):
        raise ValueError(f"precision must be float64, float32 or compact, got {precision!r}")
    out = Path(out_dir)
    written, rows = [], []
    for task in tasks:
        (out / task).mkdir(parents=True, exist_ok=True)
        for k in range(n_per_task):
            trial_seed = seed * 1000 + k
            motion = generate(task, trial_seed, rate_hz, performer=k % n_performers)
            assert motion.com is not None             # generate() always computes the CoM
            if precision == "compact":
                motion.positions = np.round(motion.positions / COMPACT_POSITION_STEP) * COMPACT_POSITION_STEP
                motion.com = np.round(motion.com / COMPACT_POSITION_STEP) * COMPACT_POSITION_STEP
                motion.orientations = (np.round(motion.orientations / COMPACT_QUATERNION_STEP)
                                       * COMPACT_QUATERNION_STEP)
            if precision != "float64":
                # HumanMotion holds float64; save_npz writes whatever dtype the arrays hold.
                motion.positions = motion.positions.astype(np.float32)
                motion.orientations = motion.orientations.astype(np.float32)
                motion.com = motion.com.astype(np.float32)
            path = out / task / f"{task}_{k}.npz"
            motion.save_npz(path)
            written.append(path)
            rows.append({"file": f"{task}/{path.name}", "task": task, "k": k, "seed": trial_seed,
                         "performer": motion.meta["performer"], "height_m": f"{motion.meta['height_m']:.4f}",
                         "sex": motion.meta["sex"], "speed": f"{motion.meta['speed']:.4f}",
                         "duration_s": f"{motion.duration:.3f}", "frames": len(motion), "rate_hz": rate_hz})
    with open(out / "index.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return written


# ------------------------------------------------------------------------ live source
class VirtualClock:
    """A clock that only moves when told to: for tests and faster-than-real-time runs.

    ``clock()`` returns the current time [s]; ``sleep(dt)`` and ``advance(dt)`` move it on.
    """

    def __init__(self, start: float = 0.0):
        self.now = float(start)

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += max(0.0, float(seconds))

    advance = sleep


_OPERATOR_HISTORY = 4        # motions (trials or rests) a SyntheticOperator keeps for look-ups
_OPERATOR_LOOKAHEAD = 2      # motions it keeps scheduled (generating) ahead of the current one

# One live frame, Frame = (time on the operator clock [s], {segment: (position (3,) [m], quaternion (4,)
# (w, x, y, z))}): every input backend's type, teleop.inputs.base.Frame (imported above, still importable here).


#: Length of each rest an operator winding down keeps scheduling [s] (:meth:`SyntheticOperator.wind_down`).
WIND_DOWN_REST_S = 5.0


class SyntheticOperator:
    """A live synthetic operator for the operator station: random tasks with rests, on a clock.

    A :class:`teleop.inputs.base.PoseSource` like every input backend.

    The operator stands in the N-pose, then performs randomly chosen tasks (each one a
    :func:`generate` trial, starting and ending with its own ~0.5 s still N-pose) separated
    by rests drawn from ``rest_s`` seconds (N-pose with sway), forever. Everything is
    seeded: the same seed gives the same stream.

    Timing: the stream starts at the first :meth:`poll` / :meth:`frames_until` /
    iteration, at clock time ``t0``; frame k has time ``t0 + k / rate_hz`` on the given
    clock. Interfaces:

    * ``poll(now=None) -> Frame | None`` -- the newest frame whose time is <= ``now``
      (default: ``clock()``) and that was not returned yet; older unreturned frames are
      skipped, like a live tracker stream. None when no new frame is due.
    * ``frames_until(now=None) -> list[Frame]`` -- every frame not returned yet up to
      ``now``, in order (for recording).
    * iteration (``for frame in operator``) or :meth:`stream` -- every frame in order,
      sleeping until each frame is due (``sleep`` defaults to the clock's own ``sleep``
      for a :class:`VirtualClock`, else :func:`time.sleep`).
    * :meth:`task_at` -- what the operator is doing at a time ("rest" or a task name):
      ground truth for task recognition.
    * :meth:`close` (or ``with SyntheticOperator(...) as op:``) -- stops the worker thread
      that generates upcoming trials ahead of time (``prefetch=False``: no thread, each
      motion is generated when first needed, which takes ~0.1-0.5 s).

    A frame is ``(t, {segment: (position (3,) [m], quaternion (4,) (w, x, y, z))})`` in the
    HumanMotion conventions, for the segments in ``segments`` (all 23 by default; pass
    :data:`retarget.human.TRACKER_SEGMENTS` to imitate a VR set-up).
    """

    def __init__(self, seed: int = 0, *, tasks: tuple[str, ...] = TASKS, rate_hz: float = 100.0,
                 performer: int | Performer | None = None, height_m: float | None = None,
                 rest_s: tuple[float, float] = (1.5, 3.0), clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] | None = None, segments: tuple[str, ...] = SEGMENTS,
                 prefetch: bool = True):
        unknown = [t for t in tasks if t not in _BUILDERS]
        if unknown or not tasks:
            raise ValueError(f"unknown or no tasks {unknown}; known: {', '.join(TASKS)}")
        self.rate_hz = float(rate_hz)
        self.performer = _resolve_performer(performer, height_m)
        self.tasks = tuple(tasks)
        self.rest_s = rest_s
        self.segments = tuple(segments)
        self._columns = [SEGMENT_INDEX[name] for name in self.segments]
        self._clock = clock
        self._sleep = sleep if sleep is not None else getattr(clock, "sleep", time.sleep)
        self._rng = np.random.default_rng([int(seed) & 0xFFFFFFFF, 0x0BE7])
        # Schedule: motions (rest, trial, rest, trial, ...) as futures, generated ahead of
        # need on one worker thread so that a poll never waits ~0.1-0.5 s for the next
        # trial to be computed. What is generated is decided here, in order, so the stream
        # is the same with or without prefetching.
        self._executor = (ThreadPoolExecutor(max_workers=1, thread_name_prefix="synthetic-operator")
                          if prefetch else None)
        # Scheduled motions, start not known yet: (generate() arguments, Future or None).
        self._pending: list[tuple[tuple, Future | None]] = []
        self._items: list[tuple[int, HumanMotion]] = []      # (first global frame index, motion)
        self._next_start = 0
        self._t0: float | None = None
        self._last = -1
        self._next_is_rest = True
        self._winding_down = False
        if self._executor is not None:
            for _ in range(_OPERATOR_LOOKAHEAD):     # start computing the first motions now
                self._schedule_next()

    def close(self) -> None:
        """Stop the prefetching thread (the stream keeps working, generating on demand)."""
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None
            # Cancelled jobs will be generated on demand: the stream stays the same.
            self._pending = [(job, future if future is not None and not future.cancelled() else None)
                             for job, future in self._pending]

    def __enter__(self) -> "SyntheticOperator":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def wind_down(self) -> None:
        """Begin no new task: the motion under way is finished, then the operator rests for
        good (the end of `teleop demo`, whose session ends with the operator and the robot at
        rest: a task begun after its --duration kept it going, and an operator whose rests
        are all shorter than a long round trip never rested long enough to end it). Tasks
        scheduled but not begun are replaced by rests; the stream up to here is unchanged."""
        if self._winding_down:
            return
        self._winding_down = True
        kept = []
        for job, future in self._pending:
            if job[0] == "rest":
                kept.append((job, future))
            else:
                if future is not None:
                    future.cancel()          # being generated ahead: no longer needed
                kept.append((self._rest_job(WIND_DOWN_REST_S), None))
        self._pending = kept

    # -------------------------------------------------------------- schedule
    def _rest_job(self, duration: float) -> tuple:
        """The :func:`generate` arguments of a rest of ``duration`` seconds (still N-pose ends excluded)."""
        return ("rest", int(self._rng.integers(2 ** 31)), self.rate_hz, self.performer, 1.0, duration)

    def _schedule_next(self) -> None:
        """Decide the next motion of the schedule and start generating it."""
        if self._winding_down:
            self._pending.append((self._rest_job(WIND_DOWN_REST_S), None))
            return
        if self._next_is_rest:
            still = 2 * STILL_S[0]
            duration = max(self._rng.uniform(*self.rest_s) - still, 0.1)
            job = self._rest_job(duration)
        else:
            task = self.tasks[int(self._rng.integers(len(self.tasks)))]
            job = (task, int(self._rng.integers(2 ** 31)), self.rate_hz, self.performer, None, 1.0)
        self._next_is_rest = not self._next_is_rest
        future = self._executor.submit(_generate, *job) if self._executor is not None else None
        self._pending.append((job, future))

    def _take_pending(self) -> None:
        """Move the oldest scheduled motion (waiting for it if needed) onto the timeline."""
        if not self._pending:
            self._schedule_next()
        job, future = self._pending.pop(0)
        motion = future.result() if future is not None else _generate(*job)
        self._items.append((self._next_start, motion))
        self._next_start += len(motion)

    def _locate(self, index: int) -> tuple[HumanMotion, int]:
        while self._next_start <= index:
            self._take_pending()
        while len(self._pending) < _OPERATOR_LOOKAHEAD:
            self._schedule_next()
        # Forget old motions, keeping a few behind the newest frame returned (for task_at).
        while len(self._items) > _OPERATOR_HISTORY and self._items[1][0] <= min(index, self._last + 1):
            self._items.pop(0)
        for start, motion in reversed(self._items):
            if start <= index:
                return motion, index - start
        raise IndexError(f"frame {index} is no longer available")

    def _frame(self, index: int) -> Frame:
        motion, row = self._locate(index)
        assert self._t0 is not None               # _start() runs before any frame is made
        t = self._t0 + index / self.rate_hz
        return t, {name: (motion.positions[row, col].copy(), motion.orientations[row, col].copy())
                   for name, col in zip(self.segments, self._columns)}

    def _start(self, now: float) -> float:
        """Start the clock at ``now`` if not started yet; the start time."""
        if self._t0 is None:
            self._t0 = float(now)
        return self._t0

    # ------------------------------------------------------------- interfaces
    def poll(self, now: float | None = None) -> Frame | None:
        """The newest due frame not yet returned (skipping older ones), or None."""
        now = self._clock() if now is None else float(now)
        t0 = self._start(now)
        index = int(np.floor((now - t0) * self.rate_hz + 1e-9))
        if index <= self._last:
            return None
        self._last = index
        return self._frame(index)

    def frames_until(self, now: float | None = None) -> list[Frame]:
        """All frames not yet returned whose time is <= ``now``, in time order."""
        now = self._clock() if now is None else float(now)
        t0 = self._start(now)
        index = int(np.floor((now - t0) * self.rate_hz + 1e-9))
        frames = [self._frame(k) for k in range(self._last + 1, index + 1)]
        self._last = max(self._last, index)
        return frames

    def stream(self, duration_s: float | None = None) -> Iterator[Frame]:
        """Every frame in order, each one released when the clock reaches its time."""
        t0 = self._start(self._clock())
        index = self._last + 1
        while duration_s is None or index / self.rate_hz <= duration_s:
            wait = t0 + index / self.rate_hz - self._clock()
            if wait > 0:
                self._sleep(wait)
            self._last = index
            yield self._frame(index)
            index += 1

    def __iter__(self) -> Iterator[Frame]:
        return self.stream()

    def task_at(self, t: float) -> str:
        """What the operator does at clock time ``t``: "rest" or a task name.

        The still N-pose periods at the start and end of a trial count as "rest". Works
        for times up to a few motions (trials or rests) back from the newest frame
        returned; older times raise IndexError.
        """
        if self._t0 is None:
            raise RuntimeError("the stream has not started yet")
        index = int(np.floor((t - self._t0) * self.rate_hz + 1e-9))
        motion, row = self._locate(index)
        start, stop = motion.meta["motion_window"]
        label = motion.meta["label"]
        return label if label != "rest" and start <= motion.times[row] < stop else "rest"
