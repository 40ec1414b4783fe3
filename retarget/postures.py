"""Human joint angles for the posture references (the q_H of Eq. 2.1).

Segment frames are world-aligned in the N-pose (see :mod:`retarget.human`), so the
relative rotation of a child segment in its parent's frame is the identity in the N-pose
and every angle below is 0 there. All functions are vectorised: quaternions (T, 4) in,
angles (T, k) [rad] out.

Sign conventions (anatomical, mirror-symmetric between the two arms; the application maps
them onto its robot's joint signs):

==================  =========================================================================
signal              a positive angle means
==================  =========================================================================
torso pitch         forward flexion (the chest moves forward/down) - rotation about +y
torso roll          lateral bend to the person's RIGHT - rotation about +x (forward)
torso yaw           rotation of the chest to the person's LEFT - rotation about +z (up)
neck pitch          flexion: looking down - about +y
neck yaw            turning the head to the person's left - about +z
shoulder rotation   INTERNAL rotation of the upper arm about its long axis (with the elbow
                    bent 90 deg, the hand moves towards the belly)
elbow               flexion (0 = straight arm, +pi/2 = forearm perpendicular to the upper arm)
pronosupination     PRONATION (from the N-pose, palm facing the thigh, the palm turns to face
                    backwards)
==================  =========================================================================

Decompositions, chosen for robustness:

* Torso (pelvis -> t8) and neck (t8 -> head): intrinsic Y-X'-Z'' Euler angles (pitch, roll,
  yaw), the order of a pitch-roll-yaw joint chain as on the iCub torso and neck. Gimbal
  lock needs a 90 degree roll, which a spine or neck never reaches. The thesis sums the
  jL4L3 + jL1T12 + jT9T8 angles (§2.2.1); the pelvis -> T8 relative rotation is the same
  chain in one rotation (it also includes jL5S1, which the thesis found negligible).
* Shoulder rotation: the *twist* of the upper arm about its own long axis relative to the
  shoulder (clavicle) segment, by swing-twist decomposition. Unlike the third Euler angle
  of a pitch-roll-yaw shoulder it is well defined with the arm held sideways (where that
  Euler chain is in gimbal lock); it is undefined only with the arm pointing straight up
  (a 180 degree swing from hanging), where the returned value may jump.
* Elbow flexion: the signed angle of the forearm axis in the upper arm's sagittal (x-z)
  plane, atan2(forward, down); independent of the humeral twist and of the small carrying
  angle.
* Pronosupination: twist of the forearm about its axis relative to the upper arm plus twist
  of the hand relative to the forearm. Suits split the forearm rotation between the two
  joints differently (MVN puts part of it at the elbow, ASF in a separate wrist bone); the
  sum is the same.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from . import quat

_Z = np.array([0.0, 0.0, 1.0])
_DOWN = np.array([0.0, 0.0, -1.0])

#: Mirror sign applied to the twists so that both arms share one anatomical convention.
SIDE_SIGN = {"right": 1.0, "left": -1.0}


def relative(q_parent: npt.NDArray[np.floating[Any]], q_child: npt.NDArray[np.floating[Any]]
             ) -> npt.NDArray[np.floating[Any]]:
    """parent_from_child rotations (..., 4) from two world_from_segment rotations."""
    return quat.mul(quat.conj(q_parent), q_child)


def torso_angles(q_pelvis: npt.NDArray[np.floating[Any]], q_t8: npt.NDArray[np.floating[Any]]
                 ) -> npt.NDArray[np.floating[Any]]:
    """(T, 3) torso pitch, roll, yaw [rad] from pelvis and T8 orientations (T, 4)."""
    return quat.euler_yxz(relative(q_pelvis, q_t8))


def neck_angles(q_parent: npt.NDArray[np.floating[Any]], q_head: npt.NDArray[np.floating[Any]]
                ) -> npt.NDArray[np.floating[Any]]:
    """(T, 2) neck pitch, yaw [rad] from the T8 (or reference) and head orientations."""
    e = quat.euler_yxz(relative(q_parent, q_head))
    return e[..., [0, 2]]


def shoulder_rotation(q_parent: npt.NDArray[np.floating[Any]], q_upper_arm: npt.NDArray[np.floating[Any]],
                      side: str) -> npt.NDArray[np.floating[Any]]:
    """(T,) internal rotation of the upper arm about its long axis [rad]."""
    return SIDE_SIGN[side] * quat.twist_angle(relative(q_parent, q_upper_arm), _Z)


def elbow_flexion(q_upper_arm: npt.NDArray[np.floating[Any]], q_forearm: npt.NDArray[np.floating[Any]]
                  ) -> npt.NDArray[np.floating[Any]]:
    """(T,) elbow flexion [rad]: 0 straight, positive bending the forearm forward."""
    d = quat.rotate(relative(q_upper_arm, q_forearm), _DOWN)
    return np.arctan2(d[..., 0], -d[..., 2])


def pronosupination(q_upper_arm: npt.NDArray[np.floating[Any]], q_forearm: npt.NDArray[np.floating[Any]],
                    q_hand: npt.NDArray[np.floating[Any]], side: str) -> npt.NDArray[np.floating[Any]]:
    """(T,) forearm pronation [rad] (twist at the elbow plus twist at the wrist)."""
    twist = (quat.twist_angle(relative(q_upper_arm, q_forearm), _Z)
             + quat.twist_angle(relative(q_forearm, q_hand), _Z))
    return SIDE_SIGN[side] * quat.wrap(twist)


def arm_angles(q_parent: npt.NDArray[np.floating[Any]], q_upper_arm: npt.NDArray[np.floating[Any]],
               q_forearm: npt.NDArray[np.floating[Any]], q_hand: npt.NDArray[np.floating[Any]], side: str
               ) -> npt.NDArray[np.floating[Any]]:
    """(T, 3) shoulder rotation, elbow flexion, pronosupination [rad] of one arm.

    Args:
        q_parent: (T, 4) the segment the upper arm hangs from (clavicle, else T8).
        q_upper_arm, q_forearm, q_hand: (T, 4) world_from_segment orientations.
        side: "left" or "right".
    """
    return np.stack([shoulder_rotation(q_parent, q_upper_arm, side),
                     elbow_flexion(q_upper_arm, q_forearm),
                     pronosupination(q_upper_arm, q_forearm, q_hand, side)], axis=-1)


def arm_local_rotations(shoulder_rot: float, elbow: float, prosup: float, side: str,
                        shoulder_swing: npt.NDArray[np.floating[Any]] | None = None
                        ) -> dict[str, npt.NDArray[np.floating[Any]]]:
    """Local (parent_from_child) rotations that produce the given arm angles.

    The inverse of :func:`arm_angles` for building synthetic motions and tests: the upper
    arm gets ``shoulder_swing`` (a quaternion, default identity) then the internal
    rotation about its axis; the forearm the flexion; the hand the pronation.
    """
    s = SIDE_SIGN[side]
    swing = quat.IDENTITY if shoulder_swing is None else np.asarray(shoulder_swing, dtype=float)
    upper = quat.mul(swing, quat.about_z(s * shoulder_rot))
    # Flexion brings the forearm forward: a rotation about -y for a forearm hanging down.
    forearm = quat.about_y(-elbow)
    hand = quat.about_z(s * prosup)
    return {f"{side}_upper_arm": upper, f"{side}_forearm": forearm, f"{side}_hand": hand}
