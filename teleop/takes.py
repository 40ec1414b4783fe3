"""Labelled takes from folders of motion files, retargeted to robot references.

Accepted layouts (what ``teleop train``, ``teleop trial`` and ``teleop eval`` read):

* a folder of task folders, one per task label, holding motion files of any supported
  format (HDM05: ``<task>/HDM_<performer>_<task>_<nnn>_120.amc`` with the skeletons in a
  sibling ``skeletons/``; the synthetic operator's ``<task>/<task>_<k>.npz``; exported
  recordings' reference trajectories ``<task>/*.npz``);
* a folder of Xsens CSV pairs ``N.csv`` + ``pN.csv`` (one task, labelled with the folder
  name);
* a single motion file.

Human motion is retargeted (calibrated on its first frame, Eq. 2.1) with the robot's
:class:`retarget.robot_target.RobotTarget`; reference trajectories are taken as they are.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
from tqdm import tqdm

from retarget.human import HumanMotion, MotionFormatError
from retarget.mapping import retarget_motion
from retarget.readers import read_motion
from retarget.references import ReferenceTrajectory
from retarget.robot_target import RobotTarget

MOTION_SUFFIXES = {".amc", ".bvh", ".mvnx", ".npz", ".csv", ".json"}
_HDM05_PERFORMER = re.compile(r"HDM_([a-z]{2})_")


@dataclass
class Take:
    """One labelled take.

    Attributes:
        path: the file it came from.
        label: task label.
        performer: performer code where the file name tells it (HDM05: bd, bk, dg), else "".
        trajectory: retargeted references (stance frame).
    """

    path: Path
    label: str
    performer: str
    trajectory: ReferenceTrajectory


def _is_reference_npz(path: Path) -> bool:
    with np.load(path, allow_pickle=False) as data:
        return "values" in data and "format" not in data


def list_take_files(root: Path) -> list[tuple[Path, str]]:
    """(file, label) of every take under ``root`` (see the module docstring)."""
    root = Path(root)
    if not root.exists():
        raise FileNotFoundError(f"{root}: no such file or folder")
    if root.is_file():
        return [(root, root.parent.name)]
    pairs = sorted(root.glob("p[0-9]*.csv"))
    if pairs:  # Xsens demos: the pose file of each pair
        return [(p, root.name) for p in pairs]
    out = []
    for task_dir in sorted(d for d in root.iterdir() if d.is_dir() and d.name != "skeletons"):
        files = sorted(f for f in task_dir.iterdir() if f.suffix.lower() in MOTION_SUFFIXES)
        xsens = sorted(task_dir.glob("p[0-9]*.csv"))
        if xsens:
            files = xsens
        out += [(f, task_dir.name) for f in files]
    if not out:
        raise FileNotFoundError(f"{root}: no motion files (expected task folders or Xsens pN.csv files)")
    return out


def performer_of(path: Path) -> str:
    match = _HDM05_PERFORMER.search(path.name)
    return match.group(1) if match else ""


def load_take(path: Path, label: str, target: RobotTarget, rate_hz: float | None = None) -> Take:
    """Read and retarget one take (reference trajectories are read as they are)."""
    path = Path(path)
    if path.suffix == ".npz" and _is_reference_npz(path):
        traj = ReferenceTrajectory.load_npz(path)
    else:
        opts = {"rate_hz": rate_hz} if rate_hz and path.suffix == ".csv" else {}
        motion: HumanMotion = read_motion(path, **opts)
        traj = retarget_motion(motion, target)
    traj.label = label
    traj.source = str(path)
    return Take(path, label, performer_of(path), traj)


def load_takes(root: Path, target: RobotTarget, *, performers: Sequence[str] | None = None,
               exclude_performers: Sequence[str] = (), tasks: Sequence[str] | None = None,
               rate_hz: float | None = None, progress: bool = True) -> list[Take]:
    """All takes under ``root``, optionally filtered by performer and task."""
    files = [(f, label) for f, label in list_take_files(root)
             if (tasks is None or label in tasks)
             and (performers is None or performer_of(f) in performers)
             and performer_of(f) not in exclude_performers]
    takes = []
    for path, label in tqdm(files, desc=f"reading {Path(root).name}", disable=not progress, leave=False):
        try:
            takes.append(load_take(path, label, target, rate_hz))
        except MotionFormatError:
            raise
    return takes


def split_csv(text: str | None) -> list[str] | None:
    """"a,b" -> ["a", "b"]; None or "" -> None."""
    if not text:
        return None
    return [part.strip() for part in text.split(",") if part.strip()]


def trajectories(takes: Iterable[Take]) -> list[ReferenceTrajectory]:
    return [t.trajectory for t in takes]
