"""``teleop info``: what robot, which joints and frames, which optional parts are present."""

from __future__ import annotations

import argparse
import importlib.util
import zipfile
from pathlib import Path
from typing import Any

from teleop.cli_types import PreconditionError, UsageError, nonempty_path
from teleop.json_safe import dumps


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("info", help="describe the robot model and the installed optional parts, or a file",
                            description="Print the robot model in use (URDF, joints, mass, joint groups, task "
                                        "frames at the home posture) and which optional packages are installed; "
                                        "with FILE, what a task library (`teleop train`), a take of robot "
                                        "references (`teleop retarget`, `teleop dataset export`), a human "
                                        "motion file or a joint recording (`teleop calibrate-sim`) holds.")
    # Not an empty path: Path("") is ".", which was described as "a folder, not a file".
    parser.add_argument("file", nargs="?", type=nonempty_path, metavar="FILE",
                        help="a task library, robot references, human motion file or joint recording (calibrate-sim) "
                             "to describe (MCAP recordings: `teleop dataset inspect`)")
    parser.add_argument("--robot", default=None,
                        help="robot description name or TOML path (default: icub); not with FILE")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    if args.file is not None:
        if args.robot is not None:
            # A FILE's description does not use it: `info lib.npz --robot other` was silently
            # the same as without, as if the library had been checked against that robot.
            raise UsageError("--robot picks the robot model `teleop info` describes without FILE; with FILE it is not "
                             "used (the robot a library or references file was made for is in what it prints): leave "
                             "--robot out")
        return _describe_file(args.file, args.json)
    from teleop.robot.model import RobotModel

    robot = RobotModel(args.robot or "icub")
    robot.update(robot.home_configuration())
    info: dict[str, Any] = {
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
        print(dumps(info))
        return 0
    print(f"{info['robot']}: {info['joints']} joints, {info['mass_kg']} kg  ({info['urdf']})")
    for group, joints in info["groups"].items():
        print(f"  {group:14s} {', '.join(joints)}")
    print("frames at the home posture (stance frame, m):")
    for role, pos in info["frames"].items():
        print(f"  {role:14s} {pos}")
    print("optional parts: " + ", ".join(f"{k}={'yes' if v else 'no'}" for k, v in info["optional"].items()))
    return 0


def _describe_file(path: Path, as_json: bool) -> int:
    """``teleop info FILE``: a task library's tasks (takes, mean duration, signals, basis,
    covariance), a references take's label, samples and duration, or a human motion file's
    frames, rate and segments (every format `teleop retarget` reads). Before, nothing showed
    what a trained library held short of loading it in Python."""
    from retarget.file_checks import refuse_special_file
    from teleop.takes import _npz_kind

    refuse_special_file(path)     # is_file() is False for one too: it was called "a folder"
    if not path.is_file():     # what to change, said before any reading: no TELEOP_DEBUG hint
        raise PreconditionError(f"{path}: {'no such file' if not path.exists() else 'a folder, not a file'}")
    if path.suffix.lower() == ".mcap":
        from teleop.record.mcap_index import MAGIC

        # By its first bytes, not its name alone: a renamed image was called "a recording".
        with path.open("rb") as file:
            if file.read(len(MAGIC)) != MAGIC:
                raise PreconditionError(f"{path}: not an MCAP recording (it does not begin with MCAP's magic bytes)")
        # An operator's recording holds a motion file's worth (its raw input, which retarget
        # and stream-mvn read): described as such, the rest by `dataset inspect`.
        try:
            info = {**_motion_info(path), "recording": True}
        except ValueError as exc:
            # The reader's own words: no operator input recorded, or a file cut short
            # (it said "a recording without an operator's input" of a truncated one).
            raise PreconditionError(str(exc)) from None
        return _print_info(path, info, as_json)
    # By content, not by name alone: `teleop train -o lib` writes a library without the
    # suffix, and it was then handed to the motion readers ("unsupported format").
    kind = _npz_kind(path) if path.suffix.lower() == ".npz" or zipfile.is_zipfile(path) else None
    if kind == "promp-task-library":
        info = _library_info(path)
    elif kind == "references":
        info = _references_info(path)
    elif kind is None and _is_joint_recording(path):
        info = _joint_recording_info(path)
    else:
        info = _motion_info(path)     # or the motion reader's error, naming the file
    return _print_info(path, info, as_json)


def _print_info(path: Path, info: dict, as_json: bool) -> int:
    if as_json:
        print(dumps(info))
    elif info["kind"] == "task library":
        print(f"{path}: task library of {len(info['tasks'])} tasks, {info['signals']} signals")
        robot, sizes = info["metadata"].get("robot"), info["metadata"].get("robot_dimensions")
        print(f"  learned for {robot or 'a robot not named'}{f' ({sizes})' if sizes else ''}" if robot or sizes
              else "  the robot it was learned for is not noted (learned from references files that do not "
                   "note it, or before libraries noted it)")
        for label, task in info["tasks"].items():
            print(f"  {label:20s} {task['takes']:3d} takes, mean {task['mean_duration_s']:.2f} s "
                  f"({task['min_duration_s']:.2f}-{task['max_duration_s']:.2f} s), {task['basis']} basis functions, "
                  f"{task['covariance']} covariance")
    elif info["kind"] == "human motion":
        print(f"{path}: human motion{' (the operator input of a recording)' if info.get('recording') else ''}, "
              f"{info['frames']} frame{'s' if info['frames'] != 1 else ''} over {info['duration_s']:.2f} s "
              f"({info['rate_hz']:.4g} Hz), "
              f"{len(info['segments'])} segments: {', '.join(info['segments'])}")
        if info.get("recording"):
            print(f"the rest of the recording (channels, episodes): teleop dataset inspect {path}")
        if info["source"] and Path(info["source"]).resolve() != path.resolve() and not info.get("recording"):
            # An Xsens joint-angle file (N.csv): its frames are its partner's segment poses.
            print(f"  the segment poses read from {info['source']}")
        if not info["rate_stated"]:
            print(f"  the file does not state its rate: read at {info['rate_hz']:g} Hz (the commands that play or "
                  "learn it take --rate-hz)")
    elif info["kind"] == "joint recording":
        print(f"{path}: joint recording (commanded vs measured angles, for teleop calibrate-sim --data), "
              f"{info['samples']} samples x {len(info['joints'])} joints over {info['duration_s']:.2f} s "
              f"({info['rate_hz']:.4g} Hz): {', '.join(info['joints'])}")
        print("  " + "; ".join([
            "commanded velocities recorded" if info["commanded_velocity"] else
            "no commanded velocities (a fit takes a position-only servo)",
            "base fixed to the world" if info["fixed_base"] else "robot on its feet",
            "hidden parameters in its meta (a test recording: a fit reports how well it recovers them)"
            if info["hidden_parameters"] else "no hidden parameters"]))
    else:
        print(f"{path}: robot references{' of ' + repr(info['label']) if info['label'] else ''}, "
              f"{info['samples']} samples over {info['duration_s']:.2f} s ({info['rate_hz']:.4g} Hz)"
              + (f", from {info['source']}" if info["source"] else ""))
        from teleop.robot.target import described_robot

        robot = info["robot"]
        print(f"  made for {described_robot(robot)}" if robot else "  the robot they were made for is not noted")
    return 0


def _library_info(path: Path) -> dict:
    from promp.library import TaskLibrary

    library = TaskLibrary.load(path)
    tasks = {}
    for label, promp in library.items():
        durations = promp.durations
        if promp.dense_cov is not None:
            covariance = "dense"
        else:
            assert promp.low_rank is not None   # a ProMP without dense_cov has low_rank (ProMP checks)
            covariance = f"rank-{promp.low_rank.shape[2]}{' coupled' if promp.coupled else ''}"
        tasks[label] = {"takes": int(len(durations)), "mean_duration_s": float(durations.mean()),
                        "min_duration_s": float(durations.min()), "max_duration_s": float(durations.max()),
                        "basis": promp.basis.n_basis,
                        "covariance": covariance}
    return {"kind": "task library", "file": str(path), "signals": library.n_signals, "tasks": tasks,
            "metadata": library.metadata}


def _references_info(path: Path) -> dict:
    from retarget.references import ReferenceTrajectory
    from teleop.takes import robot_note

    take = ReferenceTrajectory.load_npz(path)
    duration = float(take.times[-1] - take.times[0]) if len(take.times) else 0.0
    rate = (len(take.times) - 1) / duration if duration > 0 else 0.0
    return {"kind": "references", "file": str(path), "label": take.label, "samples": int(len(take.times)),
            "duration_s": duration, "rate_hz": rate, "source": take.source, "robot": robot_note(path) or {}}


#: The members (``.npz``) or keys (``.json``) of a joint recording (teleop.sim.recording_io).
_JOINT_RECORDING_KEYS = frozenset({"time", "joint_names", "commanded", "measured"})


def _is_joint_recording(path: Path) -> bool:
    """Whether ``path`` is a recording of commanded vs measured joint angles, the file
    ``teleop calibrate-sim`` fits (and ``--make-test-recording`` writes), by its member names
    or keys: it was handed to the motion readers ("not a human motion file (expected format
    humanmotion-v1)", "not a VR tracker file"), with the TELEOP_DEBUG hint."""
    suffix = path.suffix.lower()
    try:
        if suffix == ".npz" or (suffix != ".json" and zipfile.is_zipfile(path)):
            with zipfile.ZipFile(path) as archive:
                return _JOINT_RECORDING_KEYS <= {name.removesuffix(".npy") for name in archive.namelist()}
        if suffix == ".json":
            from teleop import json_input

            data = json_input.loads(path.read_bytes())
            return isinstance(data, dict) and _JOINT_RECORDING_KEYS <= data.keys()
    except (OSError, ValueError, zipfile.BadZipFile):
        return False          # the motion reader then says what is wrong, naming the file
    return False


def _joint_recording_info(path: Path) -> dict:
    from teleop.sim.recording_io import load_recording

    rec = load_recording(path)     # or its error, naming the file (said alone: found before any work)
    duration = float(rec.time[-1] - rec.time[0])
    return {"kind": "joint recording", "file": str(path), "samples": int(len(rec.time)), "joints": rec.joint_names,
            "duration_s": duration, "rate_hz": (len(rec.time) - 1) / duration,
            "commanded_velocity": rec.commanded_velocity is not None, "fixed_base": bool(rec.meta.get("fixed_base")),
            "hidden_parameters": "truth" in rec.meta}


def _motion_info(path: Path) -> dict:
    from teleop.takes import check_human_motion_file, read_motion_file

    check_human_motion_file(path)      # what the file is instead, when it is the product's own
    motion = read_motion_file(path)
    from teleop.takes import takes_a_rate

    return {"kind": "human motion", "file": str(path), "frames": len(motion), "rate_hz": float(motion.rate_hz),
            "rate_stated": not takes_a_rate(path), "duration_s": float(motion.duration),
            "segments": list(motion.segment_names), "source": motion.source}
