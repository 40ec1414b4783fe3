"""A human kinematic model over the 23 Xsens MVN segments, for the synthetic operator.

The model is a tree of rigid segments whose frames are **world-aligned in the N-pose**
(upright, arms hanging, palms facing the thighs, feet parallel and hip-width apart, facing
+x), exactly the convention of :mod:`retarget.human`. Zero joint angles *are* the N-pose,
so a motion produced here needs no calibration offsets to satisfy the HumanMotion contract.

World frame: z up, x forward, y to the person's left, origin on the ground midway between
the ankles (N-pose). Lengths in metres, angles in radians. Segment origins are joint
centres, as in MVN: the pelvis origin is the midpoint of the hip joint centres, a hand's
origin is the wrist, a foot's the ankle, a toe's the ball of the foot; end points (vertex,
fingertip, toe tip) are available through :meth:`Skeleton.end_point`.

Joint angles
------------
Every segment has one 3-DoF joint to its parent (the pelvis has the free root). The local
rotation (parent frame -> segment frame, both world-aligned in the N-pose) is::

    R_local = R_y(flexion) @ R_x(abduction) @ R_z(axial)        # intrinsic y-x-z

with ``angles[..., 0] = flexion`` (about y), ``angles[..., 1] = abduction`` (about x),
``angles[..., 2] = axial rotation`` (about z), all **right-hand rotations about the
N-pose axes** (the same axes for the left and the right side). The pelvis angles use the
same composition but are its world orientation. Anatomical meaning of the signs (sigma =
-1 for the right side, +1 for the left side, i.e. the sign of y of that side)::

    trunk (pelvis, l5, l3, t12, t8), neck, head
        +y  forward flexion (head: look down)     -y  extension
        +x  lateral bend to the RIGHT             -x  lateral bend to the left
        +z  axial rotation to the LEFT            -z  rotation to the right
    clavicle (right_shoulder / left_shoulder)
        x = +sigma * elevation   (shrug up)        z = -sigma * protraction (shoulder forward)
    shoulder (upper_arm) and hip (upper_leg)
        y = -flexion (arm/thigh forward)           x = +sigma * abduction (away from midline)
        z = -sigma * internal rotation
    elbow (forearm)
        y = -flexion (hand forward/up)             z = -sigma * pronation (palm turns backward)
    wrist (hand) -- palms face the body in the N-pose, so the palm normal is +-y:
        x = -sigma * flexion (fingers toward the palm)   y = -radial deviation (thumb side = +x)
    knee (lower_leg)        y = +flexion (foot goes backward)
    ankle (foot)            y = -dorsiflexion (toes up)            x = +sigma * eversion
    ball of foot (toe)      y = -extension (toes up)

Anthropometry
-------------
Segment lengths are fractions of body height H from Drillis & Contini (1966) as tabulated
by D. A. Winter, *Biomechanics and Motor Control of Human Movement*, 4th ed., Wiley 2009,
Fig. 4.1: shoulder (acromion) 0.818 H, elbow 0.632 H (upper arm 0.186 H), wrist 0.486 H
(forearm 0.146 H), hand 0.108 H, hip 0.530 H, knee 0.285 H (thigh 0.245 H), ankle 0.039 H
(shank 0.246 H), foot length 0.152 H, foot breadth 0.055 H, chin 0.870 H, biacromial width
0.259 H. The spine between the hip-centre level and C7 (0.825 H, between the shoulder and
chin levels) is split over the MVN lumbar/thoracic joints in steps of 0.05 H (hip centres
to L5/S1), 0.06 H (to L4/L3, L1/T12, T9/T8) and 0.065 H (to T1/C7); the
inter-hip-centre distance is 0.10 H (feet hip-width apart under the hips).

Segment masses and centre-of-mass locations are from P. de Leva, "Adjustments to
Zatsiorsky-Seluyanov's segment inertia parameters", *J. Biomech.* 29(9):1223-1230, 1996
(Table 4, male and female). de Leva's trunk (upper/middle/lower) and head+neck are split
over the finer MVN segments as documented in :data:`_MASS_SPLIT`; segment CoMs lie on the
segment axes (joint centre to joint centre), as in de Leva, so the N-pose CoM is above
the ankles. This agrees with :mod:`retarget.anthropometry` to < 1 mm horizontally in the
N-pose and within ~2 cm in a deep forward bend (different trunk splits).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from retarget import quat
from retarget.human import SEGMENTS, HumanMotion

#: Index of every canonical segment in :data:`retarget.human.SEGMENTS` (also this model's order).
SEGMENT_INDEX: dict[str, int] = {name: i for i, name in enumerate(SEGMENTS)}

#: Parent of every segment (None for the root). SEGMENTS lists parents before children.
PARENT: dict[str, str | None] = {
    "pelvis": None, "l5": "pelvis", "l3": "l5", "t12": "l3", "t8": "t12", "neck": "t8", "head": "neck",
    "right_shoulder": "t8", "right_upper_arm": "right_shoulder", "right_forearm": "right_upper_arm",
    "right_hand": "right_forearm",
    "left_shoulder": "t8", "left_upper_arm": "left_shoulder", "left_forearm": "left_upper_arm",
    "left_hand": "left_forearm",
    "right_upper_leg": "pelvis", "right_lower_leg": "right_upper_leg", "right_foot": "right_lower_leg",
    "right_toe": "right_foot",
    "left_upper_leg": "pelvis", "left_lower_leg": "left_upper_leg", "left_foot": "left_lower_leg",
    "left_toe": "left_foot",
}

# N-pose offset from the parent's origin (joint) to the segment's origin (joint), in units
# of body height, right side (y < 0); the left side mirrors y. For the pelvis it is the
# absolute position of the midpoint between the hip joint centres.
_OFFSET_PER_HEIGHT: dict[str, tuple[float, float, float]] = {
    "pelvis": (0.0, 0.0, 0.530),              # hip-centre height (greater trochanter level)
    "l5": (-0.015, 0.0, 0.050),               # L5/S1: above and behind the hip centres
    "l3": (0.0, 0.0, 0.060),                  # L4/L3
    "t12": (0.0, 0.0, 0.060),                 # L1/T12
    "t8": (0.0, 0.0, 0.060),                  # T9/T8
    "neck": (0.0, 0.0, 0.065),                # T1/C7 at 0.825 H
    "head": (0.015, 0.0, 0.085),              # C1/head at 0.910 H, forward over the spine
    "right_shoulder": (0.0, -0.015, 0.045),   # T4/shoulder (sterno-clavicular region)
    "right_upper_arm": (0.015, -0.090, 0.013),  # gleno-humeral joint at 0.818 H, 0.105 H lateral
    "right_forearm": (0.0, 0.0, -0.186),      # elbow (upper arm 0.186 H)
    "right_hand": (0.0, 0.0, -0.146),         # wrist (forearm 0.146 H)
    "right_upper_leg": (0.0, -0.050, 0.0),    # hip joint centre (inter-hip distance 0.10 H)
    "right_lower_leg": (0.0, 0.0, -0.245),    # knee (thigh 0.245 H)
    "right_foot": (0.0, 0.0, -0.246),         # ankle at 0.039 H (shank 0.246 H)
    "right_toe": (0.073, 0.0, -0.027),        # ball of foot (metatarso-phalangeal joint)
}
# Distal end points of the end segments, from the segment origin, per unit height.
_END_PER_HEIGHT: dict[str, tuple[float, float, float]] = {
    "head": (0.0, 0.0, 0.090),                # vertex at 1.000 H
    "right_hand": (0.0, 0.0, -0.108),         # fingertip (hand 0.108 H)
    "right_toe": (0.041, 0.0, -0.012),        # toe tip on the ground
}
# Foot sole in the foot frame (origin = ankle), per unit height: heel x, toe-tip x, half breadth.
_HEEL_X, _TOE_TIP_X, _SOLE_HALF_WIDTH = -0.038, 0.114, 0.0275   # 0.152 H long, 0.055 H wide

# de Leva (1996) Table 4: mass [% body mass], CoM [% of length from the proximal end point].
_DE_LEVA = {
    "male": {"head_neck": (6.94, None), "upper_trunk": (15.96, None), "middle_trunk": (16.33, None),
             "lower_trunk": (11.17, None), "upper_arm": (2.71, 57.72), "forearm": (1.62, 45.74),
             "hand": (0.61, 79.00), "thigh": (14.16, 40.95), "shank": (4.33, 44.59), "foot": (1.37, 44.15)},
    "female": {"head_neck": (6.68, None), "upper_trunk": (15.45, None), "middle_trunk": (14.65, None),
               "lower_trunk": (12.47, None), "upper_arm": (2.55, 57.54), "forearm": (1.38, 45.59),
               "hand": (0.56, 74.74), "thigh": (14.78, 36.12), "shank": (4.81, 44.16), "foot": (1.29, 40.14)},
}
#: How each de Leva segment's mass is shared among the MVN segments (assumption of this
#: model: the clavicles take 1 % body mass each from the upper trunk, the neck a quarter of
#: the head+neck, the toes a tenth of the foot).
_MASS_SPLIT: dict[str, dict[str, float]] = {
    "head_neck": {"head": 0.75, "neck": 0.25},
    "upper_trunk": {"t8": 0.56, "t12": 0.31, "right_shoulder": 0.065, "left_shoulder": 0.065},
    "middle_trunk": {"l3": 0.5, "l5": 0.5},
    "lower_trunk": {"pelvis": 1.0},
    "upper_arm": {"{side}_upper_arm": 1.0}, "forearm": {"{side}_forearm": 1.0},
    "hand": {"{side}_hand": 1.0}, "thigh": {"{side}_upper_leg": 1.0},
    "shank": {"{side}_lower_leg": 1.0}, "foot": {"{side}_foot": 0.9, "{side}_toe": 0.1},
}
# de Leva's hand CoM is 79 % (male) of wrist -> 3rd metacarpal head, which is ~45 % of the
# wrist -> fingertip length used here.
_HAND_MET3_FRACTION = 0.45


# ---------------------------------------------------------------------------- rotations
def rot_y(angle) -> np.ndarray:
    """(..., 3, 3) right-hand rotation about y by ``angle`` [rad]."""
    a = np.asarray(angle, dtype=float)
    c, s = np.cos(a), np.sin(a)
    out = np.zeros(a.shape + (3, 3))
    out[..., 1, 1] = 1.0
    out[..., 0, 0], out[..., 0, 2], out[..., 2, 0], out[..., 2, 2] = c, s, -s, c
    return out


def rot_z(angle) -> np.ndarray:
    """(..., 3, 3) right-hand rotation about z by ``angle`` [rad]."""
    a = np.asarray(angle, dtype=float)
    c, s = np.cos(a), np.sin(a)
    out = np.zeros(a.shape + (3, 3))
    out[..., 2, 2] = 1.0
    out[..., 0, 0], out[..., 0, 1], out[..., 1, 0], out[..., 1, 1] = c, -s, s, c
    return out


def angles_to_matrix(angles) -> np.ndarray:
    """Joint angles (..., 3) = (flexion_y, abduction_x, axial_z) [rad] -> (..., 3, 3).

    R = R_y(flexion) @ R_x(abduction) @ R_z(axial) (see the module docstring for signs): the
    matrix of ``retarget.quat.from_euler_yxz(angles)`` (whose inverse is
    ``retarget.quat.euler_yxz``), in closed form, with no quaternion products for the 23
    joints of every sample.
    """
    angles = np.asarray(angles, dtype=float)
    ca, sa = np.cos(angles[..., 0]), np.sin(angles[..., 0])
    cb, sb = np.cos(angles[..., 1]), np.sin(angles[..., 1])
    cc, sc = np.cos(angles[..., 2]), np.sin(angles[..., 2])
    out = np.empty(angles.shape[:-1] + (3, 3))
    out[..., 0, 0] = ca * cc + sa * sb * sc
    out[..., 0, 1] = -ca * sc + sa * sb * cc
    out[..., 0, 2] = sa * cb
    out[..., 1, 0] = cb * sc
    out[..., 1, 1] = cb * cc
    out[..., 1, 2] = -sb
    out[..., 2, 0] = -sa * cc + ca * sb * sc
    out[..., 2, 1] = sa * sc + ca * sb * cc
    out[..., 2, 2] = ca * cb
    return out


# ------------------------------------------------------------------------- the model
@dataclass(frozen=True)
class Skeleton:
    """A sized human model: N-pose geometry, masses, forward kinematics.

    Build one with :meth:`from_height`. All arrays are indexed in :data:`SEGMENTS` order.

    Attributes:
        height_m: body height H [m].
        sex: "male" or "female" (selects the de Leva mass table).
        offsets: (23, 3) N-pose offset parent origin -> segment origin [m] (root: absolute).
        distal: (23, 3) N-pose vector segment origin -> distal end point [m] (the main
            child's joint, or the vertex / fingertip / toe tip).
        mass_fraction: (23,) segment mass / body mass (sums to 1).
        com_local: (23, 3) segment centre of mass in the segment frame [m].
        parent_index: (23,) index of the parent (-1 for the pelvis).
    """

    height_m: float
    sex: str
    offsets: np.ndarray
    distal: np.ndarray
    mass_fraction: np.ndarray
    com_local: np.ndarray
    parent_index: np.ndarray

    @classmethod
    def from_height(cls, height_m: float = 1.75, sex: str = "male") -> "Skeleton":
        """Scale the Winter/Drillis-Contini proportions to ``height_m`` [m] (see module doc)."""
        if not 1.0 < height_m < 2.5:
            raise ValueError(f"implausible body height {height_m} m")
        if sex not in _DE_LEVA:
            raise ValueError(f"sex must be 'male' or 'female', got {sex!r}")
        h = float(height_m)
        offsets = np.zeros((len(SEGMENTS), 3))
        end = {}
        for name, i in SEGMENT_INDEX.items():
            key, mirror = name, 1.0
            if name.startswith("left_"):
                key, mirror = "right_" + name[len("left_"):], -1.0
            offsets[i] = np.array(_OFFSET_PER_HEIGHT[key]) * (1.0, mirror, 1.0) * h
            if key in _END_PER_HEIGHT:
                end[name] = np.array(_END_PER_HEIGHT[key]) * (1.0, mirror, 1.0) * h
        parent_index = np.array([-1 if (p := PARENT[s]) is None else SEGMENT_INDEX[p] for s in SEGMENTS])
        # Distal end: the joint of the child that continues the chain.
        main_child = {"pelvis": "l5", "t8": "neck", "right_shoulder": "right_upper_arm",
                      "left_shoulder": "left_upper_arm"}
        for child, parent in PARENT.items():
            if parent is not None:
                main_child.setdefault(parent, child)
        distal = np.zeros_like(offsets)
        for name, i in SEGMENT_INDEX.items():
            distal[i] = end[name] if name in end else offsets[SEGMENT_INDEX[main_child[name]]]

        table = _DE_LEVA[sex]

        def com_percent(group: str) -> float:
            percent = table[group][1]
            assert percent is not None            # de Leva gives it for every limb segment used here
            return percent

        mass = np.zeros(len(SEGMENTS))
        for group, split in _MASS_SPLIT.items():
            percent = table[group][0]
            for pattern, share in split.items():
                sides = ("right", "left") if "{side}" in pattern else (None,)
                for side in sides:
                    mass[SEGMENT_INDEX[pattern.format(side=side)]] += percent / 100.0 * share
        mass /= mass.sum()   # de Leva's table sums to 100 % up to rounding

        com = 0.5 * distal                       # default: mid-segment
        for side in ("right", "left"):
            for seg, group in (("upper_arm", "upper_arm"), ("forearm", "forearm"),
                               ("upper_leg", "thigh"), ("lower_leg", "shank")):
                i = SEGMENT_INDEX[f"{side}_{seg}"]
                com[i] = com_percent(group) / 100.0 * distal[i]
            i = SEGMENT_INDEX[f"{side}_hand"]
            com[i] = com_percent("hand") / 100.0 * _HAND_MET3_FRACTION * distal[i]
            # Foot CoM along the sole from the heel (de Leva: heel -> toe tip), half way up.
            foot_frac = com_percent("foot") / 100.0
            com[SEGMENT_INDEX[f"{side}_foot"]] = (
                (_HEEL_X + foot_frac * (_TOE_TIP_X - _HEEL_X)) * h, 0.0, -0.5 * 0.039 * h)
        # de Leva's lower trunk CoM (61 % from the navel towards the hip centres) sits about
        # 0.03 H above the hip centres: 60 % of the pelvis -> L5/S1 vector.
        com[SEGMENT_INDEX["pelvis"]] += 0.1 * distal[SEGMENT_INDEX["pelvis"]]
        # Head CoM near the ear canal: above C1 and slightly forward.
        com[SEGMENT_INDEX["head"]] = (0.01 * h, 0.0, 0.02 * h)
        return cls(h, sex, offsets, distal, mass, com, parent_index)

    # ---------------------------------------------------------------- geometry
    def length(self, segment: str) -> float:
        """Length of a segment [m]: distance from its joint to its distal end point."""
        return float(np.linalg.norm(self.distal[SEGMENT_INDEX[segment]]))

    @property
    def arm_lengths(self) -> tuple[float, float]:
        """(upper arm, forearm) [m]: shoulder -> elbow, elbow -> wrist."""
        return self.length("right_upper_arm"), self.length("right_forearm")

    @property
    def leg_lengths(self) -> tuple[float, float]:
        """(thigh, shank) [m]: hip -> knee, knee -> ankle."""
        return self.length("right_upper_leg"), self.length("right_lower_leg")

    def n_pose_positions(self) -> np.ndarray:
        """(23, 3) segment origins in the N-pose [m]."""
        positions, _ = self.forward(np.zeros((1, 3)) + self.offsets[0], np.broadcast_to(np.eye(3), (1, 23, 3, 3)))
        return positions[0]

    def sole_corners(self) -> np.ndarray:
        """(2, 4, 2) ground (x, y) of the four sole corners of each foot [m] in the N-pose.

        Order: [right, left] x [heel-lateral, heel-medial, toe-medial, toe-lateral] (a
        convex quadrilateral per foot). With the feet planted, the support polygon is the
        convex hull of the eight points.
        """
        p = self.n_pose_positions()
        h = self.height_m
        out = np.zeros((2, 4, 2))
        for k, side in enumerate(("right", "left")):
            ankle = p[SEGMENT_INDEX[f"{side}_foot"], :2]
            lateral = -1.0 if side == "right" else 1.0
            for j, (fx, fy) in enumerate(((_HEEL_X, lateral), (_HEEL_X, -lateral),
                                          (_TOE_TIP_X, -lateral), (_TOE_TIP_X, lateral))):
                out[k, j] = ankle + (fx * h, fy * _SOLE_HALF_WIDTH * h)
        return out

    # ------------------------------------------------------------- kinematics
    def forward(self, root_position, local_rotations) -> tuple[np.ndarray, np.ndarray]:
        """Forward kinematics over T frames.

        Args:
            root_position: (T, 3) pelvis origin in the world [m].
            local_rotations: (T, 23, 3, 3) parent_from_segment rotations; entry 0 is the
                pelvis's world orientation.
        Returns:
            positions (T, 23, 3) [m] and rotations (T, 23, 3, 3) world_from_segment.
        """
        root_position = np.asarray(root_position, dtype=float)
        local_rotations = np.asarray(local_rotations, dtype=float)
        n_frames = root_position.shape[0]
        positions = np.empty((n_frames, len(SEGMENTS), 3))
        rotations = np.empty((n_frames, len(SEGMENTS), 3, 3))
        positions[:, 0] = root_position
        rotations[:, 0] = local_rotations[:, 0]
        for i in range(1, len(SEGMENTS)):
            p = self.parent_index[i]
            rotations[:, i] = rotations[:, p] @ local_rotations[:, i]
            positions[:, i] = positions[:, p] + rotations[:, p] @ self.offsets[i]
        return positions, rotations

    def forward_angles(self, root_position, joint_angles) -> tuple[np.ndarray, np.ndarray]:
        """Forward kinematics from joint angles.

        Args:
            root_position: (T, 3) pelvis origin [m].
            joint_angles: (T, 23, 3) (flexion_y, abduction_x, axial_z) per segment [rad];
                row 0 is the pelvis's world orientation. All zeros = N-pose.
        Returns:
            positions (T, 23, 3) [m], rotations (T, 23, 3, 3).
        """
        return self.forward(root_position, angles_to_matrix(joint_angles))

    def centre_of_mass(self, positions, rotations) -> np.ndarray:
        """(T, 3) whole-body centre of mass [m] from FK output (de Leva masses)."""
        segment_com = positions + np.einsum("tsij,sj->tsi", rotations, self.com_local)
        return np.einsum("tsi,s->ti", segment_com, self.mass_fraction)

    def end_point(self, segment: str, positions, rotations) -> np.ndarray:
        """(T, 3) world position of a segment's distal end (e.g. fingertip of a hand) [m]."""
        i = SEGMENT_INDEX[segment]
        return positions[:, i] + rotations[:, i] @ self.distal[i]

    def to_motion(self, times, positions, rotations, *, com=None, source="synthetic",
                  rate_hz=0.0, meta=None) -> HumanMotion:
        """Pack FK output as a :class:`HumanMotion` (all 23 segments, continuous quaternions)."""
        quaternions = quat.make_continuous(quat.from_matrix(rotations))
        if com is None:
            com = self.centre_of_mass(positions, rotations)
        return HumanMotion(times, SEGMENTS, positions, quaternions, com, source, rate_hz, dict(meta or {}))


def two_link_ik(root, target, upper_length: float, lower_length: float, pole, frame_x_sign: float):
    """Analytic inverse kinematics of a two-segment limb (arm or leg) with a hinge in the middle.

    The middle joint (elbow or knee) is placed in the plane through root, target and
    ``pole``, on the pole side of the root-target line. The upper segment's frame is built
    so that the limb hangs along its -z axis (as in the N-pose) and the hinge is its y
    axis: its x axis is ``frame_x_sign`` times the unit direction from the root-target line
    to the middle joint (arm: -1, the forearm folds forward while the elbow points back;
    leg: +1, the knee points forward). A target out of reach is clamped onto the sphere of
    full extension (the limb points at it, fully straight).

    Args:
        root: (T, 3) shoulder / hip joint centre [m].
        target: (T, 3) wrist / ankle joint centre [m].
        upper_length, lower_length: segment lengths [m].
        pole: (T, 3) world direction in which the middle joint should point (need not be
            unit or perpendicular; must not be parallel to target - root).
        frame_x_sign: +1 or -1, see above.
    Returns:
        upper_rotation (T, 3, 3) world_from_upper_segment, hinge (T,) rotation about the
        upper segment's y axis that carries the lower segment [rad], reached (T, 3) the
        end point actually reached [m].
    """
    root = np.asarray(root, dtype=float)
    to_target = np.asarray(target, dtype=float) - root
    distance = np.linalg.norm(to_target, axis=-1)
    a, b = float(upper_length), float(lower_length)
    u = to_target / np.maximum(distance, 1e-12)[..., None]
    d = np.clip(distance, abs(a - b) + 1e-9, a + b)
    along = (a * a - b * b + d * d) / (2.0 * d)
    across = np.sqrt(np.maximum(a * a - along * along, 0.0))
    pole = np.asarray(pole, dtype=float)
    n = pole - np.sum(pole * u, axis=-1, keepdims=True) * u
    n /= np.maximum(np.linalg.norm(n, axis=-1, keepdims=True), 1e-12)
    middle = root + along[..., None] * u + across[..., None] * n
    z_axis = -(middle - root) / a
    x_axis = frame_x_sign * (n - np.sum(n * z_axis, axis=-1, keepdims=True) * z_axis)
    x_axis /= np.maximum(np.linalg.norm(x_axis, axis=-1, keepdims=True), 1e-12)
    y_axis = np.cross(z_axis, x_axis)
    upper_rotation = np.stack([x_axis, y_axis, z_axis], axis=-1)
    reached = root + d[..., None] * u
    lower_in_upper = np.einsum("tji,tj->ti", upper_rotation, reached - middle)
    hinge = np.arctan2(-lower_in_upper[..., 0], -lower_in_upper[..., 2])
    return upper_rotation, hinge, reached
