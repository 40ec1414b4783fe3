"""``teleop info``: what robot, which joints and frames, which optional parts are present."""

from __future__ import annotations

import argparse
import importlib.util
import json


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("info", help="describe the robot model and the installed optional parts",
                            description="Print the robot model in use (URDF, joints, mass, joint groups, task "
                                        "frames at the home posture) and which optional packages are installed.")
    parser.add_argument("--robot", default="icub", help="robot description name or TOML path (default: icub)")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from teleop.robot.model import RobotModel

    robot = RobotModel(args.robot)
    robot.update(robot.home_configuration())
    info = {
        "robot": robot.description.name,
        "urdf": str(robot.description.urdf_path),
        "joints": robot.n_joints,
        "mass_kg": round(robot.total_mass, 3),
        "groups": robot.description.groups,
        "frames": {role: robot.position(role).round(4).tolist() for role in robot.frame_ids},
        "optional": {name: importlib.util.find_spec(name) is not None
                     for name in ("openvr", "pink", "movement_primitives")},
    }
    if args.json:
        print(json.dumps(info))
        return 0
    print(f"{info['robot']}: {info['joints']} joints, {info['mass_kg']} kg  ({info['urdf']})")
    for group, joints in info["groups"].items():
        print(f"  {group:14s} {', '.join(joints)}")
    print("frames at the home posture (stance frame, m):")
    for role, pos in info["frames"].items():
        print(f"  {role:14s} {pos}")
    print("optional parts: " + ", ".join(f"{k}={'yes' if v else 'no'}" for k, v in info["optional"].items()))
    return 0
