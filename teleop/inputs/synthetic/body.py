"""From whole-body intent to joint rotations: the plan a task lays out, the sized body it is
realised on, and :func:`realise` (limb IK, feet fixed on the ground, CoM balancing).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from retarget.human import SEGMENTS
from teleop.inputs.skeleton import SEGMENT_INDEX, Skeleton, angles_to_matrix, rot_y, rot_z, two_link_ik
from teleop.inputs.synthetic.profiles import smoothstep


_SIDE_SIGN = (-1.0, 1.0)     # sign of y of each side (sigma in the skeleton docstring)
SIDES = ("right", "left")
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

# ------------------------------------------------------------------------------ plans


@dataclass
class Plan:
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
class Body:
    """A sized skeleton with its N-pose quantities precomputed."""

    skeleton: Skeleton
    rest_positions: np.ndarray         # (23, 3) N-pose segment origins [m]
    rest_com: np.ndarray               # (3,) N-pose CoM [m]

    @classmethod
    def of(cls, height_m: float, sex: str) -> "Body":
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


def realise(body: Body, plan: Plan) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
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
    for k, side in enumerate(SIDES):
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

    for _ in range(_BALANCE_ITERATIONS):
        # Pelvis height: as planned, but never so high that a leg (with its knee floor)
        # cannot reach its fixed ankle: |hip - ankle| <= longest_leg.
        root = np.empty((n, 3))
        root[:, :2] = shift
        horizontal = shift[:, None, :] + hips_in_world[:, :, :2] - ankles[None, :, :2]
        slack = np.maximum(longest_leg[:, None] ** 2 - np.sum(horizontal ** 2, axis=-1), 0.0)
        highest = ankles[None, :, 2] + np.sqrt(slack) - hips_in_world[:, :, 2]
        root[:, 2] = _soft_min(np.column_stack([desired_z, highest]), height_softness)

        # Pass 1: trunk, clavicles and relaxed arms, to know where shoulders and head are.
        for side in SIDES:
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
        for k, side in enumerate(SIDES):
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
            raised = smoothstep((elevation - 0.26) / (1.22 - 0.26))[:, None]
            pole_local = (1.0 - raised) * np.array([-1.0, 0.0, 0.0]) + raised * np.array(
                [-0.25, sigma * plan.elbow_out, -1.0])
            pole = np.einsum("tij,tj->ti", clavicle, pole_local)
            # Keep the elbow off full extension while the hand is on a task (see _ELBOW_FLOOR).
            distance = np.minimum(np.linalg.norm(target - shoulder, axis=-1), upper_arm + forearm)
            cos_elbow = (distance ** 2 - upper_arm ** 2 - forearm ** 2) / (2.0 * upper_arm * forearm)
            on_task = smoothstep(weight[:, 0] / 0.4)
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
        for k, side in enumerate(SIDES):
            sigma = _SIDE_SIGN[k]
            bent = smoothstep((1.0 - np.linalg.norm(hips[:, k] - ankles[k], axis=-1) / (thigh + shank)) / 0.05)
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
