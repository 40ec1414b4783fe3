"""The robot as the retargeting sees it: a :class:`retarget.robot_target.RobotTarget` and
the conversion between reference postures and joint angles.

The retargeting package never loads a robot model (it stands alone); the application
measures what it needs on the pinocchio model at the home posture.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import numpy as np
import pinocchio as pin

from retarget.robot_target import RobotTarget
from teleop.robot.description import REFERENCE_POSTURE_SIGNALS
from teleop.robot.model import NQ_BASE, RobotModel

#: Posture signals of the references realised by joints (every description maps them).
POSTURE_SIGNALS = REFERENCE_POSTURE_SIGNALS


def reference_joint_map(robot: RobotModel) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """signal -> ((k,) joint indices, (k,) signs) with joint = sign * reference angle."""
    out = {}
    for signal in POSTURE_SIGNALS:
        pairs = robot.description.reference_joints[signal]
        out[signal] = (np.array([robot.joint_index(j) for j, _ in pairs], dtype=int),
                       np.array([s for _, s in pairs], dtype=float))
    return out


def joints_to_postures(robot: RobotModel, joints: np.ndarray) -> dict[str, np.ndarray]:
    """Reference posture signals (anatomical convention) of (n,) joint angles."""
    return {signal: sign * joints[idx] for signal, (idx, sign) in reference_joint_map(robot).items()}


def _joint_origin(robot: RobotModel, data: pin.Data, joint: str) -> np.ndarray:
    return data.oMi[robot.model.getJointId(joint)].translation.copy()


def robot_target(robot: RobotModel) -> RobotTarget:
    """Measure the :class:`RobotTarget` of a robot at its home posture (stance frame)."""
    q = robot.home_configuration()
    robot.update(q)
    data = robot.data
    prefix = {"left": "l", "right": "r"}
    shoulders = {side: _joint_origin(robot, data, f"{p}_shoulder_roll") for side, p in prefix.items()}
    hands = {side: robot.position(f"{side}_hand") for side in prefix}
    com = robot.com()
    target_kw: dict[str, Any] = dict(
        left_sole_corners=robot.sole_corners("left"), right_sole_corners=robot.sole_corners("right"),
        waist_height=float(robot.position("waist")[2]),
        left_hand=hands["left"], right_hand=hands["right"],
        left_shoulder=shoulders["left"], right_shoulder=shoulders["right"],
        com_height=float(com[2]), com_xy=com[:2].copy(),
        name=f"{robot.description.name} home posture",
        **joints_to_postures(robot, q[NQ_BASE:]),
    )
    # Limb lengths with the limb straight (elbow / knee at 0, allowed in kinematics even
    # where the joint limit forbids it).
    straight = q.copy()
    for p in ("l", "r"):
        straight[NQ_BASE + robot.joint_index(f"{p}_elbow")] = 0.0
        straight[NQ_BASE + robot.joint_index(f"{p}_knee")] = 0.0
    pin.framesForwardKinematics(robot.model, data, straight)
    arm = np.linalg.norm(
        data.oMf[robot.frame_id("left_hand")].translation - _joint_origin(robot, data, "l_shoulder_roll"))
    leg = np.linalg.norm(_joint_origin(robot, data, "l_hip_pitch") - _joint_origin(robot, data, "l_ankle_pitch"))
    robot.update(q)
    return RobotTarget(arm_length=float(arm), leg_length=float(leg), **target_kw)


def target_dimensions(target: RobotTarget) -> str:
    """The sizes that set where retargeted references put the robot's hands and CoM, to the
    millimetre: "arm 0.xxx m, leg 0.xxx m, CoM height 0.xxx m, waist height 0.xxx m"."""
    return (f"arm {target.arm_length:.3f} m, leg {target.leg_length:.3f} m, "
            f"CoM height {target.com_height:.3f} m, waist height {target.waist_height:.3f} m")


#: Two robot targets whose every value agrees to this [m, rad] retarget alike (1 mm, 1 mrad:
#: what a description's rounding, or another machine's last bits, can move).
GEOMETRY_TOLERANCE = 1e-3


def target_geometry(target: RobotTarget) -> dict[str, list[float]]:
    """Every number of ``target`` that retargeting reads (m, rad; to 0.1 mm / 0.1 mrad), by
    field: the hands, shoulders, soles and CoM where the references put them, the limb
    lengths and the home posture."""
    out = {}
    for item in dataclasses.fields(target):
        value = getattr(target, item.name)
        if item.name != "name":
            out[item.name] = [round(float(x), 4) for x in np.ravel(value)]
    return out


def library_metadata(target: RobotTarget) -> dict[str, str]:
    """What a task library notes of the robot its demonstrations were retargeted to
    (:attr:`promp.library.TaskLibrary.metadata`): a library learned for one robot predicts
    that robot's references, which put another robot's hands elsewhere."""
    return {"robot": target.name, "robot_dimensions": target_dimensions(target),
            "robot_geometry": json.dumps(target_geometry(target), sort_keys=True, separators=(",", ":"))}


#: How :func:`target_geometry`'s fields are named in messages (else by their names).
FIELD_NAMES = {"left_sole_corners": "left sole", "right_sole_corners": "right sole", "com_xy": "CoM position",
               "com_height": "CoM height", "left_arm": "left arm's home posture",
               "right_arm": "right arm's home posture", "neck": "neck's home posture",
               "torso": "torso's home posture"}


def _number(value: Any) -> float | None:
    """A JSON number as a float; None for anything else (a bool, a string, an integer too
    large for a float)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return float(value)
    except OverflowError:
        return None


def _geometry_differences(noted: str, target: RobotTarget) -> list[str] | None:
    """The fields of ``target`` that differ from a noted geometry by more than
    :data:`GEOMETRY_TOLERANCE` (None: the note is not one :func:`library_metadata` wrote,
    or shares no field with ``target``). A field the note lacks (one added to the target
    since) is not compared."""
    try:
        learned = json.loads(noted)
    except (ValueError, RecursionError):   # RecursionError: arrays nested thousands deep
        return None
    if not isinstance(learned, dict):
        return None
    ours = target_geometry(target)
    compared = [name for name in ours if name in learned]
    if not compared:
        return None
    differ = []
    for name in compared:
        theirs = [_number(x) for x in learned[name]] if isinstance(learned[name], list) else []
        # + 1e-9: both sides are rounded to 0.1 mm, and 1 mm apart is "within 1 mm".
        if len(theirs) != len(ours[name]) or not all(
                x is not None and abs(x - y) <= GEOMETRY_TOLERANCE + 1e-9 for x, y in zip(theirs, ours[name])):
            differ.append(name)
    return differ


def _listed(names: list[str]) -> str:
    """"a", "a and b", "a, b and c"."""
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def library_robot_mismatch(metadata: dict[str, str], target: RobotTarget) -> str | None:
    """Why a library with ``metadata`` was not learned for ``target`` (None if it was, or if
    the library does not say: libraries learned before it was noted, or from references
    files). The whole geometry where it was noted; else the four sizes."""
    learned_for = metadata.get("robot_dimensions")
    geometry = metadata.get("robot_geometry")
    differ = None if geometry is None else _geometry_differences(geometry, target)
    if differ is None:
        if learned_for is None or learned_for == target_dimensions(target):
            return None
        differ = []
    elif not differ:
        return None
    names = [FIELD_NAMES.get(name, name.replace("_", " ")) for name in differ]
    where = f": its {_listed(names)} differ{'s' if len(differ) == 1 else ''}" if differ else ""
    return (f"learned for {metadata.get('robot') or 'another robot'} ({learned_for or 'sizes not noted'}), not for "
            f"{target.name} ({target_dimensions(target)}){where}")
