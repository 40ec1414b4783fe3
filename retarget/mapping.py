"""Human motion -> robot references (thesis Ch. 2, §2.2).

The :class:`Retargeter` combines

* joint-posture offsets about the reference posture, Eq. 2.1:
  q_R = q_R^0 + (q_H - q_H^0) for the arms, neck and torso (angles and signs in
  :mod:`retarget.postures`);
* the CoM ground projection by normalised offsets, Eqs. 2.2-2.10
  (:mod:`retarget.com_mapping`), human feet -> robot sole corners;
* Cartesian offsets scaled by length ratios, Eqs. 2.11-2.12:

  - waist height: h_R = h_R^0 + alpha_waist (h_H - h_H^0), alpha_waist = robot waist
    height / human N-pose waist height (as in Ch. 2);
  - hands: scaled *along the body chain*, each displacement by the ratio of the limb
    that produced it, so a squat, a trunk bend and an arm reach each move the robot hand
    by the robot's own amount::

        p_R = p_R^0 + A_leg dPelvis + alpha_trunk d(Shoulder - Pelvis)
                    + alpha_arm d(Hand - Shoulder)

    where d(.) is the change from the reference pose in the human stance frame,
    A_leg = diag(alpha_leg, alpha_leg, alpha_waist) (horizontal pelvis sway scales like the
    legs that produce it, vertical like the waist height reference), alpha_trunk = robot /
    human shoulder-above-waist height, alpha_arm = robot / human shoulder->hand length
    (per side). The base of the arm term is the arm's own shoulder, so the result is then
    kept in the robot's reach: if it lies farther than ``arm_length`` from the robot
    shoulder moved by the first two terms, it is pulled back onto that sphere.

Sparse sources (VR: head + hands, optional pelvis/feet trackers) produce what they can
and hold the other signals at the robot's initial posture, with their bits cleared in
the ``valid`` mask of :class:`ReferenceTrajectory` / :class:`RobotReferences` (nothing is
NaN: the references are always trackable):

==================  ===============  ===============================================
signal              head + hands     + pelvis tracker
==================  ===============  ===============================================
hands               yes (shoulder ~ head, see :mod:`retarget.body`)  yes
neck                head vs stance   head vs estimated chest
waist height        absent           yes
torso               absent           pitch, roll (yaw absent)
arms, CoM           absent           absent (feet trackers do not give a CoM)
head orientation    yes              yes
==================  ===============  ===============================================

Everything is vectorised over frames; :meth:`Retargeter.step` runs the same code on one
frame for streaming.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from . import quat
from .body import BodyMeasures, measure
from .calibration import POSTURE_SIGNALS, HumanCalibration, calibrate
from .com_mapping import feet_frame, retarget_com
from .human import HumanMotion
from .references import FLAT_SIZE, SIGNAL_SLICES, ReferenceTrajectory, RobotReferences
from .robot_target import RobotTarget


class Retargeter:
    """Maps one calibrated person onto one robot.

    Args:
        target: the robot.
        calibration: an existing calibration (else call :meth:`calibrate`).
        clamp_reach: pull hand references back within ``target.arm_length`` of the
            robot shoulder (module docstring).
        human_feet: "calibration" (default: the human feet frame of the CoM offsets is
            the calibration frame's, the robot's feet being fixed) or "per_frame".

    Usage::

        r = Retargeter(RobotTarget(...))          # filled from the robot model
        r.calibrate(motion, frame=0)              # operator standing, start posture
        traj = r.retarget_motion(motion)          # offline, vectorised
        refs = r.step(t, positions, orientations) # streaming, one frame
    """

    def __init__(self, target: RobotTarget, calibration: HumanCalibration | None = None,
                 clamp_reach: bool = True, human_feet: str = "calibration") -> None:
        if human_feet not in ("calibration", "per_frame"):
            raise ValueError(f"human_feet must be 'calibration' or 'per_frame', got {human_feet!r}")
        self.target = target
        self.calibration = calibration
        self.clamp_reach = clamp_reach
        self.human_feet = human_feet
        try:
            self._robot_feet = feet_frame(target.left_foot_center, target.right_foot_center,
                                          target.support_polygon)
        except ValueError as exc:
            raise ValueError(f"RobotTarget {target.name!r}: {exc}") from None
        # Streaming: each posture signal's last finite value, so that step() unwraps the
        # twist angles across frames as retarget_motion() does across a take; kept per
        # calibration object (a new calibration starts afresh).
        self._posture_previous: dict[str, npt.NDArray[np.floating[Any]]] = {}
        self._previous_calibration: HumanCalibration | None = None

    # ---------------------------------------------------------------- calibration
    def calibrate(self, motion: HumanMotion, frame: int = 0, reference: str = "frame") -> HumanCalibration:
        """Calibrate on ``motion`` (see :func:`retarget.calibration.calibrate`)."""
        self.calibration = calibrate(motion, frame=frame, reference=reference)
        return self.calibration

    @property
    def ratios(self) -> dict[str, npt.NDArray[np.floating[Any]] | float]:
        """Length ratios robot / human (Eq. 2.11): waist, leg, trunk, arm (2,) left/right."""
        c, t = self._need_calibration(), self.target
        return {"waist": t.waist_height / c.waist_height, "leg": t.leg_length / c.leg_length,
                "trunk": t.trunk_height / c.trunk_height, "arm": t.arm_length / c.arm_length}

    def _need_calibration(self) -> HumanCalibration:
        if self.calibration is None:
            raise RuntimeError("Retargeter is not calibrated: call calibrate(motion) first")
        return self.calibration

    # ------------------------------------------------------------------ mapping
    def retarget_motion(self, motion: HumanMotion) -> ReferenceTrajectory:
        """Retarget a whole motion -> (T, 20) references in the robot stance frame.

        Calibrates on the motion's first frame if not calibrated yet. The trajectory's
        ``valid`` mask marks the signals the source could give; ``meta["head_orientation"]``
        holds the (T, 4) head orientation reference (Eq. 2.13, robot head upright at start)
        when the source has a head.
        """
        c = self.calibrate(motion) if self.calibration is None else self.calibration
        # The calibration frame anchors the unwrapped posture offsets (see _map).
        anchor = c.frame if c.reference == "frame" and c.frame < len(motion) else None
        values, valid, head = self._map(measure(motion, c.stance, c.foot_corners_local), anchor=anchor)
        meta = {"calibration_frame": c.frame, "reference": c.reference,
                "ratios": {k: np.asarray(v).tolist() for k, v in self.ratios.items()}}
        if head is not None:
            meta["head_orientation"] = head
        return ReferenceTrajectory(motion.times.copy(), values, label=motion.meta.get("label") or None,
                                   source=motion.source, meta=meta, valid=valid)

    def step(self, t: float, positions: npt.NDArray[np.floating[Any]], orientations: npt.NDArray[np.floating[Any]],
             segment_names: tuple[str, ...], com: npt.NDArray[np.floating[Any]] | None = None
             ) -> RobotReferences:
        """Retarget one streamed frame.

        Args:
            t: sample time [s].
            positions: (S, 3) segment origins [m], world frame of the calibration motion.
            orientations: (S, 4) world_from_segment quaternions (w, x, y, z).
            segment_names: the S segment names.
            com: optional (3,) measured CoM [m].
        """
        frame = HumanMotion(np.array([t]), segment_names, np.asarray(positions)[None],
                            np.asarray(orientations)[None], None if com is None else np.asarray(com)[None],
                            source="stream")
        c = self._need_calibration()
        if c is not self._previous_calibration:
            self._posture_previous, self._previous_calibration = {}, c
        values, valid, head = self._map(measure(frame, c.stance, c.foot_corners_local), self._posture_previous)
        refs = RobotReferences.from_flat(t, values[0], valid=valid)
        if head is not None:
            refs.head_orientation = head[0]
        return refs

    def _map(self, m: BodyMeasures, posture_previous: dict[str, npt.NDArray[np.floating[Any]]] | None = None,
             anchor: int | None = None
             ) -> tuple[npt.NDArray[np.floating[Any]], npt.NDArray[np.bool_], npt.NDArray[np.floating[Any]] | None]:
        """(T, 20) values, (20,) valid mask, (T, 4) head orientation or None.

        ``posture_previous`` (streaming): each posture signal's last finite offset before
        these frames, updated in place, so the offsets stay continuous from call to call.
        ``anchor`` (whole motions): the calibration frame's index, whose offsets are made 0
        where that frame is the reference posture.
        """
        c, tgt = self._need_calibration(), self.target
        ref = c.reference_measures
        r = self.ratios
        n_t = len(m.pelvis)
        values = np.tile(tgt.initial_references().to_flat(), (n_t, 1))
        valid = np.zeros(FLAT_SIZE, dtype=bool)

        def put(name: str, value: npt.NDArray[np.floating[Any]], columns: npt.NDArray[np.bool_] | None = None) -> None:
            value = value.reshape(n_t, -1)
            cols = np.ones(value.shape[1], bool) if columns is None else columns
            block = values[:, SIGNAL_SLICES[name]]
            block[:, cols] = value[:, cols]
            values[:, SIGNAL_SLICES[name]] = block
            valid[SIGNAL_SLICES[name]] = cols

        # CoM ground projection, Eqs. 2.2-2.10.
        if m.com_xy is not None:
            # The robot stays in double support with its feet fixed, so the human feet
            # frame is the calibrated one by default: measured per frame, foot markers
            # that roll and slide with the ankle (HDM05 squats: 30 degrees, 7 cm) swing a
            # short feet line and with it the mapped CoM by more than 10 cm.
            # measure() sets the foot centres and corners together, and the CoM only with feet.
            if self.human_feet == "calibration" and ref.foot_centers is not None:
                assert ref.foot_corners is not None
                centres, corners = ref.foot_centers[:1], ref.foot_corners[:1]
            else:
                assert m.foot_centers is not None and m.foot_corners is not None
                centres, corners = m.foot_centers, m.foot_corners
            human_feet = feet_frame(centres[:, 0], centres[:, 1], corners)
            com_xy = retarget_com(m.com_xy, human_feet, self._robot_feet)
            if c.reference == "frame" and ref.com_xy is not None:
                # Eq. 2.1 applied to the CoM as to every other signal: the calibration
                # posture maps onto the robot's initial CoM, motion is added to it. The
                # absolute mapping puts the start a few cm away from the robot's actual
                # CoM (2 cm on the synthetic reach), and a position-controlled robot
                # asked for that step tips over before any motion starts.
                start_feet = feet_frame(ref.foot_centers[:1, 0], ref.foot_centers[:1, 1], ref.foot_corners[:1]) \
                    if ref.foot_centers is not None and ref.foot_corners is not None else human_feet
                com_xy = com_xy - retarget_com(ref.com_xy[:1], start_feet, self._robot_feet) + tgt.com_xy
            put("com_xy", com_xy)

        # Waist height, Eqs. 2.11-2.12 - only from a pelvis: the head's height cannot tell
        # a squat from a forward bend (on the Xsens box take, bending lowers the head by
        # 0.7 m while the pelvis drops 0.07 m).
        d_pelvis = m.pelvis - ref.pelvis[0]
        if m.pelvis_measured:
            put("waist_height", tgt.waist_height + r["waist"] * d_pelvis[:, 2])

        # Hands, Eq. 2.12 along the body chain (module docstring).
        if m.hands is not None and ref.hands is not None:
            leg = np.array([r["leg"], r["leg"], r["waist"]])
            base = leg * d_pelvis
            d_trunk = (m.shoulders - m.pelvis[:, None]) - (ref.shoulders[0] - ref.pelvis[0])
            d_arm = (m.hands - m.shoulders) - (ref.hands[0] - ref.shoulders[0])
            robot_hands = np.stack([tgt.left_hand, tgt.right_hand])
            robot_shoulders = np.stack([tgt.left_shoulder, tgt.right_shoulder])
            shoulders = robot_shoulders + base[:, None] + r["trunk"] * d_trunk
            hands = robot_hands + base[:, None] + r["trunk"] * d_trunk + np.asarray(r["arm"])[None, :, None] * d_arm
            if self.clamp_reach:
                hands = _clamp_to_sphere(hands, shoulders, tgt.arm_length)
            put("left_hand", hands[:, 0])
            put("right_hand", hands[:, 1])

        # Joint postures, Eq. 2.1.
        for name in POSTURE_SIGNALS:
            q_h, q_h0 = m.posture(name), c.reference_posture(name)
            if q_h is not None and q_h0 is not None:
                # A twist carried past +-pi (HDM05 throwBasketball: the upper arm overhead,
                # where the swing-twist split of the shoulder is near singular) must not
                # jump by 2 pi: wrapped against the calibration, then continuous in time.
                previous = None if posture_previous is None else posture_previous.get(name)
                delta = quat.unwrap_angles(quat.wrap(q_h - q_h0), previous)
                if anchor is not None and previous is None:
                    # Unwrapped from frame 0, the calibration frame's offset came out as
                    # 2 pi when a twist went once round between them (HDM05 dg
                    # throwBasketball 008 calibrated on frame 270: r.shoulder yaw
                    # q_R^0 + 2 pi), against Eq. 2.1's q_R = q_R^0 there. Shifted by that
                    # whole number of turns where the frame is the reference posture.
                    at = delta[anchor]
                    turns = np.where(np.isfinite(at) & (np.abs(quat.wrap(at)) < 1e-9), at - quat.wrap(at), 0.0)
                    delta = delta - turns
                if posture_previous is not None:
                    last = delta[-1] if previous is None else np.where(np.isfinite(delta[-1]), delta[-1], previous)
                    posture_previous[name] = last
                put(name, getattr(tgt, name) + delta, np.isfinite(q_h0) & np.all(np.isfinite(q_h), axis=0))

        head = None
        if m.head is not None:
            assert ref.head is not None           # calibrate() refuses a pose without a head
            # Eq. 2.13 with the robot head upright at start: R_R = R_H (R_H^0)^-1.
            head = quat.make_continuous(quat.mul(m.head, quat.conj(ref.head[0])))
        return values, valid, head


def _clamp_to_sphere(points: npt.NDArray[np.floating[Any]], centres: npt.NDArray[np.floating[Any]],
                     radius: float) -> npt.NDArray[np.floating[Any]]:
    """Points (..., 3) pulled back within ``radius`` of ``centres`` (..., 3)."""
    d = points - centres
    n = np.linalg.norm(d, axis=-1, keepdims=True)
    scale = np.minimum(1.0, radius / np.maximum(n, 1e-12))
    return centres + d * scale


def retarget_motion(motion: HumanMotion, target: RobotTarget, frame: int = 0,
                    reference: str = "frame") -> ReferenceTrajectory:
    """Calibrate on ``frame`` of ``motion`` and retarget all of it (see :class:`Retargeter`)."""
    r = Retargeter(target)
    r.calibrate(motion, frame=frame, reference=reference)
    return r.retarget_motion(motion)
