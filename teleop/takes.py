"""Labelled takes from folders of motion files, retargeted to robot references.

Accepted layouts (what ``teleop train``, ``teleop trial`` and ``teleop eval`` read):

* a folder of task folders, one per task label, holding motion files of any supported
  format (HDM05: ``<task>/HDM_<performer>_<task>_<nnn>_120.amc`` with the skeletons in a
  sibling ``skeletons/``; the synthetic operator's ``<task>/<task>_<k>.npz``; exported
  recordings' reference trajectories ``<task>/*.npz``);
* a folder of Xsens CSV pairs ``N.csv`` + ``pN.csv`` (one task, labelled with the folder
  name);
* one task folder (motion files and no task folders: one task, labelled with the folder
  name, e.g. ``hdm05/squat1Reps``);
* a single motion file.

Human motion is retargeted (calibrated on its first frame, Eq. 2.1) with the robot's
:class:`retarget.robot_target.RobotTarget`; reference trajectories are taken as they are.
"""

from __future__ import annotations

import filecmp
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from retarget.human import HumanMotion
from retarget.mapping import retarget_motion
from retarget.readers import read_motion, sniff_format
from retarget.references import ReferenceTrajectory
from retarget.robot_target import RobotTarget
from teleop.progress import progress_bar

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
    try:
        with np.load(path, allow_pickle=False) as data:
            return "values" in data and "format" not in data
    except (OSError, ValueError, EOFError, zipfile.BadZipFile):
        return False   # not a readable .npz: the motion reader says so, naming the file


def _motion_files(folder: Path) -> list[Path]:
    return sorted(f for f in folder.iterdir() if f.is_file() and f.suffix.lower() in MOTION_SUFFIXES)


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
        files = _motion_files(task_dir)
        xsens = sorted(task_dir.glob("p[0-9]*.csv"))
        if xsens:
            files = xsens
        out += [(f, task_dir.name) for f in files]
    if not out:
        # No task folders: a folder of motion files is one task (task folders win, so that a
        # dataset's index.csv beside its task folders is not read as a take).
        out = [(f, root.name) for f in _motion_files(root)]
    if not out:
        suffixes = ", ".join(sorted(MOTION_SUFFIXES))
        recordings = [*root.glob("*.mcap"), *root.glob("*/*.mcap")]
        hint = (f"; its {len(recordings)} .mcap recording(s) need `teleop dataset export {root} -o DIR` first"
                if recordings else "")
        raise FileNotFoundError(f"{root}: no motion files ({suffixes}) in it or in its task folders, "
                                f"and no Xsens pN.csv files{hint}")
    return out


def performer_of(path: Path) -> str:
    match = _HDM05_PERFORMER.search(path.name)
    return match.group(1) if match else ""


def same_take(a: Path, b: Path) -> bool:
    """Whether two take files hold the same take: one file (--train and --test may spell a
    folder differently: relative / absolute, through a symlink) or a byte-identical copy
    (a test folder of copies of training takes). --leave-one-out must leave the test take
    out of its library either way."""
    a, b = Path(a), Path(b)
    if a == b or a.resolve() == b.resolve():
        return True
    try:
        # Sizes first: the content is compared only for files of equal size.
        return a.stat().st_size == b.stat().st_size and filecmp.cmp(a, b, shallow=False)
    except OSError:
        return False


def check_left_out(train: Sequence[tuple[Path, str]], test: Sequence[tuple[Path, str]]) -> None:
    """With --leave-one-out every test take must be one of the training takes (by
    :func:`same_take`), else nothing is left out for it and its figures are in-sample or
    plainly held out without saying so. Takes are (file, label) pairs: runs before reading."""
    for path, _ in test:
        if not any(same_take(f, path) for f, _ in train):
            raise ValueError(f"--leave-one-out: test take {path} is not one of the --train takes (by path or "
                             "content), so there is nothing to leave out for it: test on takes of the training "
                             "set, or drop --leave-one-out")


def read_motion_file(path: Path, rate_hz: float | None = None) -> HumanMotion:
    """:func:`retarget.readers.read_motion`, with ``rate_hz`` for Xsens CSV files (which do
    not state their rate)."""
    path = Path(path)
    if path.suffix.lower() == ".mcap":
        raise ValueError(f"{path}: a recording, not a motion file: export its labelled episodes first "
                         f"(teleop dataset export {path} -o DIR) and give DIR")
    # By content, not by suffix: an Xsens export saved as .txt needs the rate too, and an
    # AMC file (which the readers also give a rate) keeps its own 120 Hz default.
    opts = {"rate_hz": rate_hz} if rate_hz and sniff_format(path) == "xsens-csv" else {}
    return read_motion(path, **opts)


def load_take(path: Path, label: str, target: RobotTarget, rate_hz: float | None = None) -> Take:
    """Read and retarget one take (reference trajectories are read as they are)."""
    path = Path(path)
    if path.suffix == ".npz" and _is_reference_npz(path):
        traj = ReferenceTrajectory.load_npz(path)
    else:
        traj = retarget_motion(read_motion_file(path, rate_hz), target)
    # Checked here, where the file is known: a NaN would otherwise surface while learning,
    # as "demonstration values must be finite" without saying which take.
    bad = ~np.isfinite(traj.values).all(axis=1) | ~np.isfinite(traj.times)
    if bad.any():
        raise ValueError(f"non-finite values (NaN or inf) at frame {int(np.argmax(bad))} of {len(bad)}")
    # Else these surface while learning, as "a demonstration needs >= 2 samples ...".
    if len(traj.times) < 2:
        raise ValueError(f"{len(traj.times)} frame: a take needs at least 2")
    if not np.all(np.diff(traj.times) > 0):
        raise ValueError(f"time does not increase at frame {int(np.argmax(np.diff(traj.times) <= 0)) + 1}")
    traj.label = label
    traj.source = str(path)
    return Take(path, label, performer_of(path), traj)


def select_take_files(files: Iterable[tuple[Path, str]], *, performers: Sequence[str] | None = None,
                      exclude_performers: Sequence[str] = (),
                      tasks: Sequence[str] | None = None) -> list[tuple[Path, str]]:
    """The (file, label) pairs that pass the performer and task filters."""
    return [(f, label) for f, label in files
            if (tasks is None or label in tasks)
            and (performers is None or performer_of(f) in performers)
            and performer_of(f) not in exclude_performers]


def load_take_files(files: Sequence[tuple[Path, str]], target: RobotTarget, rate_hz: float | None = None,
                    progress: bool = True, desc: str = "reading") -> list[Take]:
    """Read and retarget (file, label) pairs; an unreadable file's error starts with its path."""
    takes = []
    for path, label in progress_bar(files, desc=desc, enabled=progress):
        try:
            takes.append(load_take(path, label, target, rate_hz))
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
            reason = (exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)) or type(exc).__name__
            if str(path) in reason:   # the reader named the file already
                raise
            raise ValueError(f"{path}: {reason}") from exc
    return takes


def load_takes(root: Path, target: RobotTarget, *, performers: Sequence[str] | None = None,
               exclude_performers: Sequence[str] = (), tasks: Sequence[str] | None = None,
               rate_hz: float | None = None, progress: bool = True) -> list[Take]:
    """All takes under ``root``, optionally filtered by performer and task."""
    files = select_take_files(list_take_files(root), performers=performers,
                              exclude_performers=exclude_performers, tasks=tasks)
    return load_take_files(files, target, rate_hz, progress, desc=f"reading {Path(root).name}")


def split_csv(text: str | None) -> list[str] | None:
    """"a,b" -> ["a", "b"]; None or "" -> None."""
    if not text:
        return None
    return [part.strip() for part in text.split(",") if part.strip()]


def trajectories(takes: Iterable[Take]) -> list[ReferenceTrajectory]:
    return [t.trajectory for t in takes]
