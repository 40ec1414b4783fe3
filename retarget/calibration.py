"""Human calibration: body dimensions, foot geometry and the reference posture.

Two things are measured once per operator (or per recording):

1. **Body dimensions in the N-pose** (Eq. 2.11 needs human lengths "in N-pose"). Segment
   frames are world-aligned in the N-pose, so chaining the constant segment offsets with
   identity orientations rebuilds the person's N-pose from *any* frame
   (:func:`retarget.skeleton.npose`); the operator does not have to stand in the N-pose at
   that frame. Measured: waist height (pelvis origin), trunk height (shoulder centres above
   the pelvis), arm lengths (shoulder -> wrist), leg length (hip -> ankle), stature
   (C1 height / 0.93). Sparse sources (VR) have no chain: their dimensions are the
   standard proportions (:func:`retarget.skeleton.standard_offsets`) scaled to a stature
   estimated from the head height at the calibration frame (standing upright).
2. **The reference pose** (superscript 0 of Eqs. 2.1 and 2.12), one of:

   * ``reference="frame"`` (default, the thesis): the posture at the calibration frame,
     i.e. the start of teleoperation. The robot's initial posture is mapped onto it.
   * ``reference="npose"``: the virtual N-pose of (1), so joint angles are absolute
     anatomical angles (q_H^0 = 0) and the hand/waist displacements are measured from the
     N-pose. Use it when the recording does not start in a known posture (the robot's
     initial posture then corresponds to the human N-pose). Full-body sources only.

The foot sole outline (for the CoM offsets of Eqs. 2.2-2.10) is modelled in the foot
segment frame (x forward, z up in the N-pose), at the ankle height below the ankle: heel
0.22 L behind the ankle, toe tip 0.20 L beyond the ball of the foot (the toe segment's
origin; without a toe segment, 0.78 L ahead of the ankle), half width 0.19 L, with foot
length L = 0.148 x stature (de Leva 1996: 258 mm for 1741 mm; heel, toe and breadth ratios
from usual foot anthropometry).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable

import numpy as np
import numpy.typing as npt

from . import quat, skeleton
from .body import BodyMeasures, Stance, measure
from .com_mapping import feet_frame
from .human import HumanMotion

POSTURE_SIGNALS = ("left_arm", "right_arm", "neck", "torso")
_POSTURE_SIZES = {"left_arm": 3, "right_arm": 3, "neck": 2, "torso": 3}

#: Foot sole outline in units of foot length: back of the heel behind the ankle, front of
#: the toes ahead of the ankle (no toe segment) or beyond the ball, half width.
FOOT_HEEL, FOOT_TOE, FOOT_TOE_BEYOND_BALL, FOOT_HALF_WIDTH = 0.22, 0.78, 0.20, 0.19
#: Foot length as a fraction of stature (de Leva 1996).
FOOT_LENGTH_FRACTION = 0.148
#: Plausible ankle heights [m] when standing; outside, the standard proportion is used.
_ANKLE_HEIGHT_RANGE = (0.03, 0.18)


@dataclass
class HumanCalibration:
    """One person's dimensions and reference pose.

    Attributes:
        source: motion the calibration came from.
        frame: calibration frame index.
        reference: "frame" or "npose" (see module docstring).
        stature: estimated standing height [m].
        waist_height: pelvis origin height in the N-pose [m].
        trunk_height: shoulder-centre height above the pelvis origin in the N-pose [m].
        arm_length: (2,) left, right shoulder -> wrist length [m].
        leg_length: mean hip -> ankle length [m].
        ankle_height: ankle above the sole [m].
        foot_corners_local: (4, 3) sole corners in the foot segment frame [m].
        stance: the human stance frame (origin, heading).
        reference_measures: the :class:`BodyMeasures` of the reference pose (one frame).
        estimated_dimensions: True when the dimensions are proportions of the stature
            (sparse sources) rather than measured along a segment chain.
    """

    source: str
    frame: int
    reference: str
    stature: float
    waist_height: float
    trunk_height: float
    arm_length: npt.NDArray[np.floating[Any]]
    leg_length: float
    ankle_height: float
    foot_corners_local: npt.NDArray[np.floating[Any]]
    stance: Stance
    reference_measures: BodyMeasures
    estimated_dimensions: bool = False

    def reference_posture(self, name: str) -> npt.NDArray[np.floating[Any]] | None:
        """q_H^0 of one posture signal (k,) [rad], None if the source cannot give it."""
        value = self.reference_measures.posture(name)
        return None if value is None else value[0]


def foot_corners_local(stature: float, ankle_height: float,
                       ball_forward: float | None = None) -> npt.NDArray[np.floating[Any]]:
    """(4, 3) sole corners in the foot frame [m] (toe-left, toe-right, heel-right, heel-left).

    Args:
        stature: [m]; ankle_height: ankle above the sole [m].
        ball_forward: how far ahead of the ankle the ball of the foot (toe segment origin)
            is [m], if known.
    """
    length = FOOT_LENGTH_FRACTION * stature
    front = FOOT_TOE * length if ball_forward is None else ball_forward + FOOT_TOE_BEYOND_BALL * length
    back, half = -FOOT_HEEL * length, FOOT_HALF_WIDTH * length
    return np.array([[front, half, -ankle_height], [front, -half, -ankle_height],
                     [back, -half, -ankle_height], [back, half, -ankle_height]])


def _dimensions(offsets: dict[str, npt.NDArray[np.floating[Any]]], ankle_height: float) -> dict[str, Any]:
    """Body dimensions [m] from N-pose offsets (see module docstring)."""
    pose = skeleton.npose(offsets, ankle_height)
    norm = np.linalg.norm
    arm = np.array([norm(offsets[f"{s}_forearm"]) + norm(offsets[f"{s}_hand"]) for s in ("left", "right")])
    leg = np.mean([norm(offsets[f"{s}_lower_leg"]) + norm(offsets[f"{s}_foot"]) for s in ("left", "right")])
    shoulders = 0.5 * (pose["left_upper_arm"][2] + pose["right_upper_arm"][2])
    return {"stature": pose["head"][2] / skeleton.C1_HEIGHT_FRACTION,
            "waist_height": pose["pelvis"][2], "trunk_height": shoulders - pose["pelvis"][2],
            "arm_length": arm, "leg_length": float(leg), "npose": pose}


_CHAIN = ("pelvis", "t8", "head", "left_upper_arm", "left_forearm", "left_hand", "right_upper_arm",
          "right_forearm", "right_hand", "left_upper_leg", "left_lower_leg", "left_foot",
          "right_upper_leg", "right_lower_leg", "right_foot")
#: The segments of a full body (public name of :data:`_CHAIN`: the live MVN source's test of
#: a complete pose, :mod:`teleop.inputs.xsens_live`).
FULL_BODY_SEGMENTS = _CHAIN


class CalibrationError(ValueError):
    """A pose the mapping cannot be calibrated on: segments missing, or a body of no human
    size (a unit error, a device's glitch, every tracker at the origin)."""


#: Stature [m] a calibration pose may measure: a child to a very tall adult, with margin.
#: Beyond it the pose is not a person standing (millimetres read as metres, all zeros), and
#: the mapping's scale factors (robot / human lengths) would be 0, infinite or absurd.
STATURE_RANGE_M = (0.5, 3.0)
#: What a sparse (VR) calibration needs; a full body needs :data:`_CHAIN`.
_SPARSE = ("head", "left_hand", "right_hand")


def _check_segments(motion: HumanMotion) -> None:
    if not has_full_body(motion) and not motion.has(*_SPARSE):
        missing = [s for s in _SPARSE if not motion.has(s)]
        raise CalibrationError(f"{motion.source}: cannot calibrate on a pose without the {', '.join(missing)} "
                               "(a full body, or at least the head and both hands, is needed)")


def _check_dimensions(dims: dict[str, Any], motion: HumanMotion, frame: int) -> None:
    low, high = STATURE_RANGE_M
    stature = float(dims["stature"])
    if not (np.isfinite(stature) and low <= stature <= high):
        raise CalibrationError(f"{motion.source}: frame {frame}: the body measures {stature:.3g} m tall (plausible: "
                               f"{low:g}-{high:g} m): not a person standing (positions in another unit, or a glitch)")
    lengths = {"waist height": dims["waist_height"], "trunk height": dims["trunk_height"],
               "leg length": dims["leg_length"], "arm length": np.min(dims["arm_length"])}
    for name, value in lengths.items():
        if not (np.isfinite(value) and value > 0):
            raise CalibrationError(f"{motion.source}: frame {frame}: the body's {name} is {float(value):.3g} m: "
                                   "not a person standing")


def has_full_body(motion: HumanMotion) -> bool:
    """Whether ``motion`` has the segment chain the N-pose dimensions need."""
    return motion.has(*_CHAIN)


def _stance(motion: HumanMotion, frame: int) -> Stance:
    at: Callable[[str], npt.NDArray[np.floating[Any]]] = (  # noqa: E731 - a local shorthand
        lambda s: motion.position(s)[frame])
    if motion.has("left_upper_leg", "right_upper_leg", "left_upper_arm", "right_upper_arm"):
        yaw = skeleton.heading_from_lines([at("left_upper_leg"), at("left_upper_arm")],
                                          [at("right_upper_leg"), at("right_upper_arm")])
    elif motion.has("pelvis"):
        yaw = quat.yaw_of(motion.orientation("pelvis")[frame])
    else:
        yaw = quat.yaw_of(motion.orientation("head")[frame])
    if motion.has("left_foot", "right_foot"):
        origin: npt.NDArray[np.floating[Any]] = 0.5 * (at("left_foot") + at("right_foot"))
    elif motion.has("pelvis"):
        origin = at("pelvis")
    else:
        origin = at("head")
    return Stance(origin=np.array([origin[0], origin[1], 0.0]), yaw=float(yaw))


def calibrate(motion: HumanMotion, frame: int = 0, reference: str = "frame") -> HumanCalibration:
    """Calibrate the mapping on one person.

    Args:
        motion: the person's motion (full body or sparse).
        frame: calibration frame: the start of teleoperation, the person standing on both
            feet (for ``reference="frame"`` also the reference posture).
        reference: "frame" or "npose" (see module docstring).

    Raises:
        CalibrationError: the frame lacks the segments, or measures no human body
            (:data:`STATURE_RANGE_M`).
    """
    if reference not in ("frame", "npose"):
        raise ValueError(f"reference must be 'frame' or 'npose', got {reference!r}")
    frame = int(frame) % len(motion)
    _check_segments(motion)
    stance = _stance(motion, frame)
    full = has_full_body(motion)

    if full:
        offsets = skeleton.offsets_from_motion(motion, frame)
        ankle = float(min(motion.position("left_foot")[frame, 2], motion.position("right_foot")[frame, 2]))
        if not _ANKLE_HEIGHT_RANGE[0] <= ankle <= _ANKLE_HEIGHT_RANGE[1]:
            # The feet are off the ground at this frame: use proportions of the chain.
            stature = _dimensions(offsets, 0.0)["stature"]
            ankle = skeleton.standard_ankle_height(stature)
        dims = _dimensions(offsets, ankle)
        toes = [offsets[f"{side}_toe"][0] for side in ("left", "right") if f"{side}_toe" in offsets]
        ball = float(np.mean(toes)) if toes else None
    else:
        if reference == "npose":
            raise ValueError(f"{motion.source}: reference='npose' needs a full-body motion")
        top = motion.position("head")[frame, 2]
        stature = top / skeleton.C1_HEIGHT_FRACTION
        ankle = skeleton.standard_ankle_height(stature)
        dims = _dimensions(skeleton.standard_offsets(stature), ankle)
        if motion.has("pelvis"):
            dims["waist_height"] = float(motion.position("pelvis")[frame, 2])
        ball = None
    _check_dimensions(dims, motion, frame)
    corners = foot_corners_local(dims["stature"], ankle, ball)

    at_frame = measure(motion.slice(frame, frame + 1), stance, corners)
    if at_frame.foot_centers is not None:
        # The CoM offsets (Eqs. 2.2, 2.8) are measured against these feet: refuse feet on
        # top of each other here, with the frame, not at the first retargeted frame.
        assert at_frame.foot_corners is not None  # measure() sets the centres and corners together
        try:
            feet_frame(at_frame.foot_centers[0, 0], at_frame.foot_centers[0, 1], at_frame.foot_corners[0])
        except ValueError as exc:
            raise CalibrationError(f"{motion.source}: frame {frame}: {exc}") from None
    if reference == "frame":
        ref = at_frame
    else:
        # The CoM offsets (Eqs. 2.2-2.10) locate the CoM against the feet the person stands
        # on, which stay where they were at the calibration frame, not under the virtual
        # N-pose (hip-width apart, parallel): against those, a CoM above the left foot of a
        # wide stance mapped 11 cm beyond the robot's left sole.
        ref = replace(_npose_measures(motion, dims["npose"], corners),
                      foot_centers=at_frame.foot_centers, foot_corners=at_frame.foot_corners)

    return HumanCalibration(
        source=motion.source, frame=frame, reference=reference, stature=float(dims["stature"]),
        waist_height=float(dims["waist_height"]), trunk_height=float(dims["trunk_height"]),
        arm_length=np.asarray(dims["arm_length"], dtype=float), leg_length=float(dims["leg_length"]),
        ankle_height=float(ankle), foot_corners_local=corners, stance=stance,
        reference_measures=ref, estimated_dimensions=not full)


def _npose_measures(motion: HumanMotion, pose: dict[str, npt.NDArray[np.floating[Any]]],
                    corners: npt.NDArray[np.floating[Any]]) -> BodyMeasures:
    """The measures of the virtual N-pose, built as a one-frame motion in the stance frame.

    The N-pose is centred between the feet (the stance origin) and faces +x, so
    measuring it with the identity stance gives stance-frame values directly.
    """
    names = tuple(s for s in motion.segment_names if s in pose)
    feet = 0.5 * (pose["left_foot"] + pose["right_foot"])
    shift = np.array([feet[0], feet[1], 0.0])
    positions = np.stack([pose[s] - shift for s in names])[None]
    orientations = np.broadcast_to(quat.IDENTITY, (1, len(names), 4)).copy()
    npose_motion = HumanMotion(np.zeros(1), names, positions, orientations, source=f"N-pose of {motion.source}")
    return measure(npose_motion, Stance(np.zeros(3), 0.0), corners)
