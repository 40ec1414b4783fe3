"""VR trackers (headset + hand controllers, optional pelvis/feet trackers) -> sparse motion.

Two equivalent file layouts, one timestamped pose per tracker and sample:

CSV (``.csv``, or any name whose content is this)::

    # vr-trackers v1
    # axes: z-up
    t,head_px,head_py,head_pz,head_qw,head_qx,head_qy,head_qz,left_hand_px,...,right_hand_qz
    0.000,0.02,0.01,1.62,1,0,0,0,...

  - lines starting with ``#`` are comments; a ``# axes: <name>`` comment sets the axes;
  - the header names ``t`` (seconds) then, for each tracker, its seven columns
    ``<segment>_px, _py, _pz`` (position [m]) and ``_qw, _qx, _qy, _qz`` (orientation, unit
    quaternion, world_from_tracker), in any order;
  - trackers: ``head``, ``left_hand``, ``right_hand`` (required), ``pelvis``,
    ``left_foot``, ``right_foot`` (optional).

JSON (``.json``, or any name whose content starts with ``{``)::

    {"format": "vr-trackers-v1", "axes": "z-up",
     "samples": [{"t": 0.0, "head": {"p": [x, y, z], "q": [w, x, y, z]},
                  "left_hand": {...}, "right_hand": {...}}, ...]}

Axes: ``z-up`` (this package's: x forward, y left, z up) or ``openvr`` (OpenVR/SteamVR
standing universe: x right, y up, -z forward; converted by (x, y, z) -> (-z, -x, y)).
Positions are the tracked points (headset, controller grips); the hand positions are
therefore the controllers', a few centimetres from the wrist.

Tracker frames are arbitrary (each device has its own); HumanMotion needs segment frames
world-aligned in the N-pose. With ``npose_frame=k`` (default 0: the operator starts in the
N-pose, looking forward) the reader (1) turns the world about z so the person faces +x at
frame k (forward = perpendicular to the right->left hand line, which the N-pose makes
lateral) and (2) right-multiplies each tracker's orientation by the constant rotation
that makes it the identity at frame k. ``npose_frame=None`` takes the orientations as
segment orientations already (e.g. files written by :func:`write_vr_csv`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from .. import quat, skeleton
from ..human import TRACKER_SEGMENTS, HumanMotion, MotionFormatError
from ._text import error, floats, quote, read_lines

REQUIRED = ("head", "left_hand", "right_hand")
_SUFFIXES = ("px", "py", "pz", "qw", "qx", "qy", "qz")
#: OpenVR (x right, y up, -z forward) -> (x forward, y left, z up).
OPENVR_TO_Z_UP = np.array([[0.0, 0.0, -1.0], [-1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
AXES = {"z-up": np.eye(3), "openvr": OPENVR_TO_Z_UP}


def _read_csv(path: str | os.PathLike[str]
              ) -> tuple[npt.NDArray[np.floating[Any]], dict[str, npt.NDArray[np.floating[Any]]], str, list[int]]:
    """(times (T,) [s], {tracker: (T, 7) p, q}, axes, the line of each sample)."""
    lines = read_lines(path)
    axes = "z-up"
    header, header_line = None, 0
    rows, row_lines = [], []
    for no, line in enumerate(lines, start=1):
        s = line.strip()
        if not s:
            continue
        if s.startswith("#"):
            body = s[1:].strip()
            if body.lower().startswith("axes:"):
                axes = body.split(":", 1)[1].strip().lower()
                if axes not in AXES:
                    raise error(path, no, f"unknown axes {quote(axes)} (known: {sorted(AXES)})")
            continue
        if header is None:
            header, header_line = [c.strip() for c in s.split(",")], no
            continue
        rows.append(floats(path, no, s.split(","), len(header), "columns"))
        row_lines.append(no)
    if header is None:
        raise error(path, None, "no header line: not a VR tracker CSV")
    if header[0] not in ("t", "time"):
        raise error(path, header_line, f"first column must be 't' (seconds), found {quote(header[0])}")
    segments = []
    for k, col in enumerate(header[1:], start=2):
        seg, _, suffix = col.rpartition("_")
        if seg not in TRACKER_SEGMENTS or suffix not in _SUFFIXES:
            raise error(path, header_line, f"unknown column {quote(col)} (expected <tracker>_px..._qz, "
                        f"trackers {TRACKER_SEGMENTS})")
        if col in header[:k - 1]:
            # The table is read by column name: the last of two same-named columns won, and
            # which of the two holds the tracker is anyone's guess.
            raise error(path, header_line, f"column {col} given twice (columns {header.index(col) + 1} and {k})")
        if seg not in segments:
            segments.append(seg)
    for seg in segments:
        missing = [f"{seg}_{x}" for x in _SUFFIXES if f"{seg}_{x}" not in header]
        if missing:
            raise error(path, header_line, f"tracker {seg} lacks columns {', '.join(missing)}")
    if not rows:
        raise error(path, None, "no samples")
    table = np.stack(rows)
    column = {c: i for i, c in enumerate(header)}
    poses = {seg: table[:, [column[f"{seg}_{x}"] for x in _SUFFIXES]] for seg in segments}
    return table[:, 0], poses, axes, row_lines


def _read_json(path: str | os.PathLike[str]
               ) -> tuple[npt.NDArray[np.floating[Any]], dict[str, npt.NDArray[np.floating[Any]]], str, None]:
    """(times (T,) [s], {tracker: (T, 7) p, q}, axes, None: samples have no line of their own)."""
    text = "\n".join(read_lines(path))
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise error(path, exc.lineno, f"malformed JSON ({exc.msg})") from None
    except RecursionError:
        raise error(path, None, "malformed JSON (nested too deeply)") from None
    except ValueError as exc:   # e.g. an integer literal beyond Python's digit limit
        raise error(path, None, f"malformed JSON ({' '.join(str(exc).split())})") from None
    if not isinstance(doc, dict) or doc.get("format") != "vr-trackers-v1":
        raise error(path, None, "not a VR tracker file (expected \"format\": \"vr-trackers-v1\")")
    axes = str(doc.get("axes", "z-up")).lower()
    if axes not in AXES:
        raise error(path, None, f"unknown axes {quote(axes)} (known: {sorted(AXES)})")
    samples = doc.get("samples")
    if not isinstance(samples, list) or not samples:
        raise error(path, None, "no samples")
    # Every sample must be an object: ``in`` on a number or null raises a TypeError (a
    # traceback), and on a string it matches substrings.
    k = next((k for k, sample in enumerate(samples) if not isinstance(sample, dict)), None)
    if k is not None:
        raise MotionFormatError(f"{path}: sample {k}: expected an object {{\"t\": ..., \"head\": ...}}, "
                                f"found {json.dumps(samples[k])[:40]}")
    # The trackers of any sample: those of the first only dropped a pelvis that sample 0
    # lacked without a word (and refused one that only sample 0 had).
    segments = [s for s in TRACKER_SEGMENTS if any(s in sample for sample in samples)]
    times = np.empty(len(samples))
    poses: dict[str, npt.NDArray[np.floating[Any]]] = {s: np.empty((len(samples), 7)) for s in segments}
    for k, sample in enumerate(samples):
        try:
            times[k] = float(sample["t"])
            for s in segments:
                entry = sample.get(s)
                if not isinstance(entry, dict) or "p" not in entry or "q" not in entry:
                    # Said as what is there: a null tracker was "'NoneType' object is not subscriptable".
                    found = (json.dumps(entry)[:40] if s in sample
                             else "nothing (a tracker is in every sample, or in none)")
                    raise ValueError(f"{s}: expected {{\"p\": [x, y, z], \"q\": [w, x, y, z]}}, found {found}")
                p, q = entry["p"], entry["q"]
                if len(p) != 3 or len(q) != 4:
                    raise ValueError(f"{s}: p needs 3 numbers and q 4")
                poses[s][k] = [float(v) for v in (*p, *q)]
        except (KeyError, TypeError, ValueError, OverflowError) as exc:   # OverflowError: float(10**400)
            # The exception can quote the file's text ("could not convert string to float:
            # '<the string>'"), of any length: cut as the readers cut tokens.
            raise error(path, None, f"sample {k}: missing or malformed {exc}") from None
        # json.loads takes NaN and Infinity; the CSV path refuses them, so does this one.
        bad = ["t"] if not np.isfinite(times[k]) else []
        bad += [f"{s}.{field}" for s in segments for field, values in (("p", poses[s][k, :3]), ("q", poses[s][k, 3:]))
                if not np.all(np.isfinite(values))]
        if bad:
            raise MotionFormatError(f"{path}: sample {k}: non-finite {', '.join(bad)}")
    return times, poses, axes, None


def read_vr_trackers(path: str | os.PathLike[str], npose_frame: int | None = 0, label: str = "",
                     layout: str | None = None) -> HumanMotion:
    """Read a VR tracker file (CSV or JSON) -> sparse :class:`HumanMotion`.

    ``layout`` is "json" or "csv"; by default the suffix decides (``.json`` or not).
    :func:`~retarget.readers.read_motion` passes the layout it recognised in the content,
    so a JSON file saved as ``.txt`` is not parsed as CSV.
    """
    path = Path(path)
    if layout is None:
        layout = "json" if path.suffix.lower() == ".json" else "csv"
    if layout not in ("json", "csv"):
        raise ValueError(f"layout must be 'json' or 'csv', not {layout!r}")
    times, poses, axes, sample_lines = _read_json(path) if layout == "json" else _read_csv(path)

    def at(k: int, message: str) -> MotionFormatError:
        """The error of sample ``k``: at its line (CSV), or naming it (JSON)."""
        return error(path, sample_lines[k], message) if sample_lines else error(path, None, f"sample {k}: {message}")

    missing = [s for s in REQUIRED if s not in poses]
    if missing:
        raise error(path, None, f"trackers {', '.join(missing)} are missing: head, left_hand and right_hand are "
                                "required")
    if np.any(np.diff(times) <= 0):
        k = int(np.flatnonzero(np.diff(times) <= 0)[0]) + 1
        raise at(k, f"times must increase: {times[k]:.6g} s after {times[k - 1]:.6g} s")
    c = AXES[axes]
    qc = quat.from_matrix(c)
    names = tuple(s for s in TRACKER_SEGMENTS if s in poses)
    positions = np.stack([poses[s][:, :3] @ c.T for s in names], axis=1)
    q = np.stack([poses[s][:, 3:] for s in names], axis=1)
    norms = np.linalg.norm(q, axis=-1)
    if np.any(np.abs(norms - 1.0) > 0.01):
        k, j = (int(i) for i in np.argwhere(np.abs(norms - 1.0) > 0.01)[0])
        raise at(k, f"tracker {names[j]}: quaternion of norm {norms[k, j]:.3g}: must be unit (w, x, y, z)")
    orientations = quat.mul(qc, q / norms[..., None])
    meta: dict[str, Any] = {"format": "vr-trackers", "axes": axes, "label": label, "npose_frame": npose_frame}
    if npose_frame is not None:
        k = int(npose_frame) % len(times)
        yaw = skeleton.heading_from_lines([positions[k, names.index("left_hand")]],
                                          [positions[k, names.index("right_hand")]])
        turn = quat.about_z(-yaw)
        positions = quat.rotate(turn, positions)
        orientations = quat.mul(turn, orientations)
        orientations = quat.mul(orientations, quat.conj(orientations[k]))
        meta["initial_heading_deg"] = float(np.degrees(yaw))
    orientations = quat.make_continuous(quat.normalize(orientations))
    rate = 1.0 / float(np.median(np.diff(times))) if len(times) > 1 else 0.0
    return HumanMotion(times, names, positions, orientations, source=str(path), rate_hz=rate, meta=meta)


def write_vr_csv(motion: HumanMotion, path: str | os.PathLike[str]) -> None:
    """Write the tracker segments of a motion in the CSV layout (z-up axes)."""
    names = [s for s in TRACKER_SEGMENTS if s in motion.segment_names]
    missing = [s for s in REQUIRED if s not in names]
    if missing:
        raise ValueError(f"motion lacks trackers {', '.join(missing)}")
    cols = ["t"] + [f"{s}_{x}" for s in names for x in _SUFFIXES]
    with open(path, "w", encoding="utf-8") as f:
        f.write("# vr-trackers v1\n# axes: z-up\n" + ",".join(cols) + "\n")
        for k in range(len(motion)):
            vals = [motion.times[k]]
            for s in names:
                vals += list(motion.position(s)[k]) + list(motion.orientation(s)[k])
            f.write(",".join(f"{v:.9g}" for v in vals) + "\n")
