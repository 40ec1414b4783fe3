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
from teleop.wording import listed

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


#: The keys of a robot note (:func:`library_metadata`): in a task library's metadata, a
#: station recording's metadata record and the references files exported or retargeted.
ROBOT_NOTE_KEYS = ("robot", "robot_dimensions", "robot_geometry")


def robot_note_arrays(note: dict[str, str]) -> dict[str, np.ndarray]:
    """The note's keys as string members of a references .npz file."""
    return {key: np.array(note[key]) for key in ROBOT_NOTE_KEYS if key in note}


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


def _parsed_geometry(noted: str | None) -> dict[str, Any] | None:
    """A noted geometry's fields, or None when it is not one :func:`library_metadata` wrote."""
    if noted is None:
        return None
    try:
        geometry = json.loads(noted)
    except (ValueError, RecursionError):   # RecursionError: arrays nested thousands deep
        return None
    return geometry if isinstance(geometry, dict) else None


def _geometry_differences(theirs: dict[str, Any], ours: dict[str, Any]) -> list[str] | None:
    """The fields of two geometries that differ by more than :data:`GEOMETRY_TOLERANCE`
    (None: they share no field). A field one lacks (one added to the target since) is not
    compared."""
    compared = [name for name in ours if name in theirs]
    if not compared:
        return None
    differ = []
    for name in compared:
        a, b = ([_number(x) for x in values] if isinstance(values, list) else []
                for values in (theirs[name], ours[name]))
        # + 1e-9: both sides are rounded to 0.1 mm, and 1 mm apart is "within 1 mm".
        if len(a) != len(b) or not all(x is not None and y is not None and abs(x - y) <= GEOMETRY_TOLERANCE + 1e-9
                                       for x, y in zip(a, b)):
            differ.append(name)
    return differ


def _note_differences(theirs: dict[str, str], ours: dict[str, str]) -> list[str] | None:
    """How two robot notes (:func:`library_metadata`) differ: None for one robot as far as
    they tell (or when they tell nothing), else the geometry's differing fields, or [] when
    only the four sizes could be compared and differ."""
    geometries = _known_geometry(theirs), _known_geometry(ours)
    if geometries[0] is not None and geometries[1] is not None:
        differ = _geometry_differences(geometries[0], geometries[1])
        if differ is not None:
            return differ or None
    sizes = theirs.get("robot_dimensions"), ours.get("robot_dimensions")
    return None if None in sizes or sizes[0] == sizes[1] else []


#: The fields a noted geometry may hold (:func:`target_geometry`'s): a JSON object with none
#: of them (``{}``, another program's) tells nothing of the robot.
GEOMETRY_FIELDS = frozenset(item.name for item in dataclasses.fields(RobotTarget) if item.name != "name")


def _known_geometry(note: dict[str, str]) -> dict[str, Any] | None:
    """The fields of a note's geometry that :data:`GEOMETRY_FIELDS` names, or None for none."""
    geometry = _parsed_geometry(note.get("robot_geometry"))
    known = {name: value for name, value in (geometry or {}).items() if name in GEOMETRY_FIELDS}
    return known or None


def note_tells_robot(note: dict[str, str]) -> bool:
    """Whether a robot note says enough to be compared: a geometry with a field of
    :data:`GEOMETRY_FIELDS`, or the four sizes (a name alone does not: two robots may share
    one)."""
    return _known_geometry(note) is not None or bool(note.get("robot_dimensions"))


def robot_notes_comparable(first: dict[str, str], second: dict[str, str]) -> bool:
    """Whether two notes say something of the same kind: geometries sharing a field, or
    sizes on both sides (one noting its geometry only and the other its sizes only tell
    nothing of each other, which :func:`robot_notes_mismatch` reads as no mismatch)."""
    geometries = _known_geometry(first), _known_geometry(second)
    if geometries[0] is not None and geometries[1] is not None and geometries[0].keys() & geometries[1].keys():
        return True
    return bool(first.get("robot_dimensions")) and bool(second.get("robot_dimensions"))


def _differ_clause(differ: list[str], whose: str) -> str:
    """": its left sole differs" ("" for no field named)."""
    names = [FIELD_NAMES.get(name, name.replace("_", " ")) for name in differ]
    return f": {whose} {listed(names)} differ{'s' if len(differ) == 1 else ''}" if differ else ""


def described_robot(note: dict[str, str]) -> str:
    """"iCub home posture (arm 0.52 m, ...)": a robot note's name and sizes, or what is not noted."""
    return f"{note.get('robot') or 'a robot not named'} ({note.get('robot_dimensions') or 'sizes not noted'})"


def robot_notes_mismatch(first: dict[str, str], second: dict[str, str]) -> str | None:
    """Why two robot notes are not one robot's ("A (sizes) and B (sizes): their ... differ"),
    or None."""
    differ = _note_differences(first, second)
    if differ is None:
        return None
    return f"{described_robot(first)} and {described_robot(second)}{_differ_clause(differ, 'their')}"


def library_robot_mismatch(metadata: dict[str, str], target: RobotTarget) -> str | None:
    """Why a library with ``metadata`` was not learned for ``target`` (None if it was, or if
    the library does not say: libraries learned before it was noted, or from references
    files that do not note their robot's geometry or sizes). The whole geometry where it was
    noted; else the four sizes."""
    differ = _note_differences(metadata, library_metadata(target))
    if differ is None:
        return None
    return (f"learned for {described_robot(metadata)}, not for {target.name} ({target_dimensions(target)})"
            f"{_differ_clause(differ, 'its')}")
