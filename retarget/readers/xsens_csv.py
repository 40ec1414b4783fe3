"""Xsens MVN CSV pair: ``N.csv`` (joint angles) + ``pN.csv`` (segment poses).

Layout (the public ProMP demos of the Inria HuCeBot team; see /work/shared/data/README.md):

* ``pN.csv``: one row per sample, 161 comma-separated numbers, no header = 23 MVN segments
  (MVN order, :data:`retarget.readers.mvn.MVN_SEGMENTS`) x (position x, y, z [m], orientation
  quaternion w, x, y, z). The export multiplied the quaternions by 180/pi: the reader
  detects the scale from the quaternion norms (57.2958 or 1) and divides it out.
* ``N.csv``: 66 numbers per row = 22 MVN joints x 3 angles [deg]. Its rows are not aligned
  with ``pN.csv`` (different counts), so it is not used for the motion; it is attached as
  ``meta["joint_angles_deg"]`` when found and readable. A damaged ``N.csv`` does not stop
  the motion of its valid ``pN.csv``: a :class:`DamagedJointAnglesWarning` says it is
  ignored.
* No rate is stored: ``rate_hz`` is a parameter (100 Hz by default, the rate of the same
  team's later teleoperation dataset).

Axes and frames: MVN's (x forward, y left, z up, ground z = 0); arm frames converted from
MVN's T-pose convention to N-pose frames (:mod:`retarget.readers.mvn`).
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ..human import HumanMotion, MotionFormatError
from ._text import error, floats, read_lines
from .mvn import MVN_SEGMENTS, MVN_TO_CANONICAL, mvn_to_npose_frames

POSE_COLUMNS = 7 * len(MVN_SEGMENTS)   # 161
JOINT_ANGLE_COLUMNS = 66
#: The export's quaternion scale (180 / pi).
QUAT_SCALE = 180.0 / np.pi


class DamagedJointAnglesWarning(UserWarning):
    """The joint-angle file ``N.csv`` beside a valid ``pN.csv`` cannot be read: ignored."""


def _table(path: str | os.PathLike[str], columns: int, what: str) -> npt.NDArray[np.floating[Any]]:
    lines = read_lines(path)
    rows = []
    for no, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        rows.append(floats(path, no, line.replace(",", " ").split(), columns, what))
    if not rows:
        raise error(path, None, "empty file")
    return np.stack(rows)


def count_columns(path: str | os.PathLike[str]) -> int:
    """Number of comma-separated values on the first non-empty line."""
    for line in read_lines(path):
        if line.strip():
            return len(line.split(","))
    raise error(path, None, "empty file")


def pose_path_for(path: str | os.PathLike[str]) -> tuple[Path, Path | None]:
    """(pose file, joint-angle file or None) for either member of a pair.

    The member is recognised by its column count (161 poses, 66 joint angles); the partner
    of ``N.csv`` is ``pN.csv`` in the same folder.
    """
    path = Path(path)
    columns = count_columns(path)
    if columns == POSE_COLUMNS:
        partner = path.with_name(path.name[1:]) if path.name.startswith("p") else None
        return path, partner if partner is not None and partner.is_file() else None
    if columns == JOINT_ANGLE_COLUMNS:
        pose = path.with_name("p" + path.name)
        if pose.is_file():
            return pose, path
        raise error(path, None, f"an Xsens joint-angle file needs its segment-pose file {pose.name} beside it")
    raise error(path, 1, f"{columns} columns: an Xsens CSV has {POSE_COLUMNS} (segment poses) "
                f"or {JOINT_ANGLE_COLUMNS} (joint angles)")


def read_xsens_csv(path: str | os.PathLike[str], rate_hz: float = 100.0, label: str = "") -> HumanMotion:
    """Read an Xsens CSV pair (give either file) -> canonical :class:`HumanMotion`."""
    pose_file, angle_file = pose_path_for(path)
    data = _table(pose_file, POSE_COLUMNS, "values (23 segments x 7)").reshape(-1, len(MVN_SEGMENTS), 7)
    positions = data[..., :3]
    q = data[..., 3:]
    norms = np.linalg.norm(q, axis=-1)
    median = float(np.median(norms))
    if abs(median - QUAT_SCALE) < 0.05 * QUAT_SCALE:
        scale = QUAT_SCALE
    elif abs(median - 1.0) < 0.05:
        scale = 1.0
    else:
        raise error(pose_file, None, f"quaternion norms are {median:.3g}: neither unit nor x180/pi")
    bad = np.flatnonzero(np.abs(norms / scale - 1.0).max(axis=1) > 0.01)
    if len(bad):
        raise error(pose_file, int(bad[0]) + 1, "a segment quaternion is not of unit norm")
    q = q / norms[..., None]
    names = tuple(MVN_TO_CANONICAL[s] for s in MVN_SEGMENTS)
    orientations, conventions = mvn_to_npose_frames(names, positions, q)
    meta = {"format": "xsens-csv", "label": label, "quaternion_scale": scale,
            "mvn_arm_frames": conventions, "units": "m, quaternion (w,x,y,z)",
            "axes": "MVN: x forward, y left, z up",
            "rate_note": "rate not stored in the file; given by the caller"}
    if angle_file is not None:
        try:
            meta["joint_angles_deg"] = _table(angle_file, JOINT_ANGLE_COLUMNS, "joint angles (22 joints x 3)")
            meta["joint_angles_file"] = str(angle_file)
        except MotionFormatError as exc:
            # N.csv is not the motion (see the module docstring): its damage must not make
            # the valid pose file unreadable (a cut N.csv failed "teleop retarget pN.csv").
            warnings.warn(f"{exc}; the joint-angle file is damaged and ignored: the motion is read from "
                          f"{pose_file.name} alone", DamagedJointAnglesWarning, stacklevel=2)
    times = np.arange(len(data)) / float(rate_hz)
    return HumanMotion(times, names, positions, orientations, source=str(pose_file), rate_hz=float(rate_hz),
                       meta=meta)
