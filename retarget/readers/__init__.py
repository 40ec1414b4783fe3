"""Motion file readers, all returning a canonical :class:`~retarget.human.HumanMotion`.

=================  ==========================  ===========================================
format             reader                      units / axes / rate
=================  ==========================  ===========================================
Xsens CSV pair     :func:`read_xsens_csv`      m, MVN axes (x fwd, y left, z up); rate given
Xsens MVNX         :func:`read_mvnx`           m, MVN axes; frameRate and times from file
ASF + AMC          :func:`read_asf_amc`        1/s inch -> m, Y up -> z up; 120 Hz default
BVH                :func:`read_bvh`            unit detected or given, Y up -> z up; file rate
VR trackers        :func:`read_vr_trackers`    m, z-up or OpenVR axes; times from file
native .npz        HumanMotion.load_npz        as saved
=================  ==========================  ===========================================

:func:`read_motion` picks the reader from the extension, or from the content when the
extension says nothing (``.txt``, no extension). When the reader chosen by the extension
refuses the file, and its first few KB look like another format (:func:`looks_like`: an AMC
take named .bvh, an MVNX or a C3D named .bvh, a BVH named .amc...), the error says what the
content looks like and what to rename the file to; a file that reads is read exactly as
before (the content is looked at only after the reader refused it).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import numpy as np

from ..file_checks import refuse_special_file
from ..human import (HumanMotion, MotionFormatError, check_finite_motion, check_plausible_motion,
                     check_unit_quaternions)
from ._text import head_bytes
from .asf_amc import read_asf_amc
from .bvh import read_bvh
from .mvnx import read_mvnx, write_mvnx
from .vr_trackers import read_vr_trackers, write_vr_csv
from .xsens_csv import JOINT_ANGLE_COLUMNS, POSE_COLUMNS, read_xsens_csv

#: What an Xsens CSV export holds, for the message about a .csv that is not one.
XSENS_CSV_LAYOUT = (f"an Xsens CSV has no header and one line per sample of comma-separated numbers: "
                    f"{POSE_COLUMNS} in the segment-pose file pN.csv (23 MVN segments x position x, y, z [m] "
                    f"and orientation quaternion w, x, y, z) or {JOINT_ANGLE_COLUMNS} in its joint-angle file "
                    "N.csv (22 joints x 3 angles [deg], read with pN.csv beside it)")

__all__ = ["read_motion", "read_xsens_csv", "read_mvnx", "write_mvnx", "read_asf_amc", "read_bvh",
           "read_vr_trackers", "write_vr_csv", "sniff_format", "looks_like"]

#: Format picked from the extension (:func:`sniff_format`), where the extension decides.
FORMAT_BY_SUFFIX = {".npz": "npz", ".mvnx": "mvnx", ".amc": "amc", ".asf": "asf", ".bvh": "bvh",
                    ".json": "vr-json"}
#: Bytes of a file looked at to say what it looks like (:func:`looks_like`).
LOOK_BYTES = 4096
#: What a renamed file should be called, by the format its content looks like (formats read).
_SUFFIX_OF = {"bvh": ".bvh", "amc": ".amc", "asf": ".asf", "mvnx": ".mvnx", "npz": ".npz", "vr-json": ".json",
              "vr-csv": ".csv", "xsens-csv": ".csv"}
#: The formats :func:`sniff_format` tells apart (and the product reads): for comparing with
#: what a file looks like.
_READ_FORMATS = frozenset(_SUFFIX_OF)
#: What the formats are called in a message (the extension's format: "not a ... file").
_FORMAT_NAMES = {"bvh": "a BVH file", "amc": "an AMC take", "asf": "an ASF skeleton", "mvnx": "an MVNX file",
                 "npz": "a .npz motion", "vr-json": "a VR tracker JSON file"}


def sniff_format(path: str | os.PathLike[str]) -> str:
    """The format of a motion file: "npz", "mvnx", "amc", "asf", "bvh", "vr-json",
    "vr-csv" or "xsens-csv"; raises :class:`MotionFormatError` if none fits."""
    path = Path(path)
    if path.is_dir():
        raise MotionFormatError(f"{path}: a folder, not a motion file")
    refuse_special_file(path, MotionFormatError)   # else "no such file", or a read that waits for a writer
    if not path.is_file():
        raise MotionFormatError(f"{path}: no such file")
    ext = path.suffix.lower()
    if ext in FORMAT_BY_SUFFIX:
        return FORMAT_BY_SUFFIX[ext]
    head = head_bytes(path)
    if head.startswith(b"\xef\xbb\xbf"):   # a UTF-8 byte-order mark: the readers drop it too
        head = head[3:]
    text = head.decode("latin-1")
    stripped = text.lstrip()
    if not stripped and len(head) < 4096:   # not "unsupported motion format": the file is empty
        raise MotionFormatError(f"{path}: empty file")
    if head.startswith(b"PK"):
        return "npz"
    if stripped.startswith("<?xml") or stripped.startswith("<mvnx"):
        return "mvnx"
    if stripped.upper().startswith("HIERARCHY"):
        return "bvh"
    if stripped.startswith("{"):
        return "vr-json"
    if ":FULLY-SPECIFIED" in text or ":DEGREES" in text:
        return "amc"
    if ":bonedata" in text or ":hierarchy" in text:
        return "asf"
    if "vr-trackers" in text or re.search(r"^\s*t(ime)?\s*,[^\n]*_px", text, re.MULTILINE):
        return "vr-csv"
    first = next((ln for ln in text.splitlines() if ln.strip()), "")
    if first.count(",") in (160, 65) or _is_number_row(first):
        # A row of numbers with another count is a malformed Xsens CSV rather than an
        # unknown format: its reader says how many columns it expected and found.
        return "xsens-csv"
    if ext == ".csv":   # a supported extension: "unsupported format (extension '.csv')" contradicted it
        raise MotionFormatError(f"{path}:1: not recognised as an Xsens MVN CSV export (first line: {first[:60]!r}): "
                                f"{XSENS_CSV_LAYOUT}; a VR tracker CSV has a header line "
                                "t,head_px,...,head_qz,left_hand_px,... (see 'Motion files' in the README)")
    # No line number: nothing in the file was recognised, not one line of it.
    raise MotionFormatError(f"{path}: unsupported motion format (extension {ext or 'none'!r}; "
                            "supported: Xsens CSV/MVNX, ASF/AMC, BVH, VR tracker CSV/JSON, .npz; see 'Motion "
                            "files' in the README)")


def _is_c3d(head: bytes) -> bool:
    """A C3D file's header: byte 1 is 0x50, byte 0 the 512-byte block of the parameter
    section, whose header's byte 3 is the processor type (84 Intel, 85 DEC, 86 MIPS).
    That header must be within ``head``: two bytes alone are any text whose second
    character is "P" ("OPEN", "SPINE": byte 0 >= 0x20 puts the parameter block past 15 KB)."""
    if len(head) < 4 or head[1] != 0x50 or not 2 <= head[0] <= 127:
        return False
    start = (head[0] - 1) * 512
    return len(head) >= start + 4 and head[start + 3] in (84, 85, 86)


def looks_like(head: bytes) -> tuple[str, str] | None:
    """What the first bytes of a file (a few KB: :data:`LOOK_BYTES`) look like, as
    (format, description for a message), or None when nothing is recognised. The formats the
    product reads ("bvh", "amc", "asf", "mvnx", "npz", "vr-json", "vr-csv", "xsens-csv", the
    names of :func:`sniff_format`) and some it does not ("c3d", "mcap", "zip", "gzip", "xml",
    "json", "binary"). Cheap and only a guess: for error messages, never to pick a reader."""
    if head.startswith(b"\xef\xbb\xbf"):
        head = head[3:]
    if head.startswith(b"\x89MCAP"):
        return "mcap", "an MCAP recording (a ROS 2 / Foxglove log)"
    if head.startswith(b"PK\x03\x04") or head.startswith(b"PK\x05\x06"):
        if b".npy" in head:
            return "npz", "a NumPy .npz archive"
        return "zip", "a zip archive"
    if head.startswith(b"\x1f\x8b"):
        return "gzip", "gzip-compressed data"
    if _is_c3d(head):
        return "c3d", "a C3D motion capture file (binary)"
    if b"\x00" in head:
        return "binary", "binary data (not text)"
    text = head.decode("utf-8", "replace")
    stripped = text.lstrip()
    if stripped.startswith("<"):
        if "<mvnx" in text:
            return "mvnx", "an Xsens MVNX file (XML)"
        return "xml", "an XML file but not MVNX (no <mvnx> element)"
    if stripped.upper().startswith("HIERARCHY"):
        return "bvh", "a BVH file (it starts with HIERARCHY)"
    if ":FULLY-SPECIFIED" in text or ":DEGREES" in text or re.search(r"(?m)^\s*\d+\s*\n\s*root(\s+\S+){6}", text):
        return "amc", "an ASF/AMC motion file (AMC frames: a frame number, then one line per bone)"
    if ":bonedata" in text or ":hierarchy" in text or (":version" in text and ":units" in text):
        return "asf", "an ASF skeleton (:bonedata, :hierarchy)"
    if stripped.startswith("{") or stripped.startswith("["):
        if "vr-trackers" in text:
            return "vr-json", "a VR tracker JSON file"
        return "json", "a JSON file but not a VR tracker one (no \"format\": \"vr-trackers-v1\")"
    if "vr-trackers" in text or re.search(r"^\s*t(ime)?\s*,[^\n]*_px", text, re.MULTILINE):
        return "vr-csv", "a VR tracker CSV (a header line t,head_px,...)"
    first = next((ln for ln in text.splitlines() if ln.strip()), "")
    if first.count(",") in (160, 65) and _is_number_row(first):
        return "xsens-csv", "an Xsens CSV export (rows of numbers)"
    return None


def mislabel_hint(path: str | os.PathLike[str], fmt: str) -> str | None:
    """What to tell about ``path``, read as ``fmt`` from its extension and refused, when its
    content looks like something else (:func:`looks_like`); None when it looks like ``fmt``
    (a damaged file of the right format: the reader's message says it all) or like nothing
    recognised."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            head = f.read(LOOK_BYTES)
    except (OSError, ValueError):
        return None
    seen = looks_like(head)
    if seen is None or seen[0] == fmt or (seen[0], fmt) == ("json", "vr-json"):
        # JSON named .json: the VR reader says itself whether it is a VR tracker file (whose
        # "format" key may lie past the head looked at).
        return None
    kind, what = seen
    said = f"{path.name} looks like {what}, not {_FORMAT_NAMES.get(fmt, fmt)} as its name says"
    if kind in _READ_FORMATS:
        rename = path.with_suffix(_SUFFIX_OF[kind]).name
        if kind == "amc":
            return (f"{said}; rename it {rename} and put its ASF skeleton beside it "
                    f"({path.with_suffix('.asf').name})")
        if kind == "asf":
            return (f"{said}; an ASF file is a skeleton without motion: rename it {rename} and give one of its "
                    ".amc takes")
        return f"{said}; rename it {rename}"
    if kind in ("zip", "gzip"):
        return f"{said}; unpack it and give the motion file inside"
    return (f"{said}, and is no motion file teleop reads: export the take as one (supported: Xsens CSV/MVNX, "
            "ASF/AMC, BVH, VR tracker CSV/JSON, .npz; see 'Motion files' in the README)")


def _is_number_row(line: str) -> bool:
    """True for two or more comma-separated numbers."""
    tokens = line.strip().split(",")
    try:
        [float(t) for t in tokens]
    except ValueError:
        return False
    return len(tokens) > 1


def read_motion(path: str | os.PathLike[str], **opts: Any) -> HumanMotion:
    """Read any supported motion file.

    Keyword options are passed to the reader: ``rate_hz`` (Xsens CSV, AMC; ignored by the
    formats that store their own times), ``skeleton``/``asf_path`` (AMC), ``unit_m``,
    ``drop_rest_frame``, ``segment_map`` (BVH), ``npose_frame`` (VR), ``label`` (all but
    .npz).

    A file whose numbers overflow on the way (1e308 through forward kinematics or unit
    scaling) raises :class:`MotionFormatError` naming the frame and segment, without NumPy's
    RuntimeWarnings first.
    """
    fmt = sniff_format(path)
    try:
        return _read_checked(path, fmt, opts)
    except MotionFormatError as exc:
        if Path(path).suffix.lower() not in FORMAT_BY_SUFFIX:   # the content chose the reader
            raise
        hint = mislabel_hint(path, fmt)
        if hint is None:
            raise
        said = MotionFormatError(f"{exc}; {hint}")
        said.__dict__.update(exc.__dict__)     # e.g. before_work, for teleop's command line
        raise said from exc


def _read_checked(path: str | os.PathLike[str], fmt: str, opts: dict[str, Any]) -> HumanMotion:
    """The motion of ``path`` read as ``fmt``, checked (see :func:`read_motion`)."""
    # The readers check the numbers they parse, but a finite 1e308 can still overflow in
    # what follows; the user then saw NumPy's "overflow encountered" warnings (source lines
    # of this package) before the error. Silenced here: the checks below, and those in the
    # readers and HumanMotion, refuse the result (non-finite, or a quaternion that
    # overflowed to zero when normalised) with its frame and segment.
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        motion = _read(path, fmt, opts)
        check_finite_motion(motion, path, "a value in the file too large")
        check_unit_quaternions(motion, path)
        check_plausible_motion(motion, path)
    return motion


def _read(path: str | os.PathLike[str], fmt: str, opts: dict[str, Any]) -> HumanMotion:
    """The motion of ``path`` read by the reader of ``fmt`` (see :func:`read_motion`)."""
    if fmt not in ("xsens-csv", "amc"):
        # MVNX, BVH, VR and .npz files carry their times: a rate given for files that do
        # not (teleop's --rate-hz, passed for every .csv) must not reach their readers,
        # which do not take one (a VR tracker .csv failed with a TypeError).
        opts.pop("rate_hz", None)
    if fmt == "npz":
        return HumanMotion.load_npz(path)
    if fmt == "mvnx":
        return read_mvnx(path, **opts)
    if fmt == "amc":
        if "skeleton" in opts:
            opts["asf_path"] = opts.pop("skeleton")
        return read_asf_amc(path, **opts)
    if fmt == "asf":
        raise MotionFormatError(f"{path}: an ASF file is a skeleton without motion: give one of its .amc "
                                f"takes instead, which finds it {_where_takes_find(Path(path).name)}")
    if fmt == "bvh":
        return read_bvh(path, **opts)
    if fmt in ("vr-json", "vr-csv"):
        # The layout recognised in the content, not the suffix: JSON saved as .txt or .csv
        # was parsed as CSV ("first column must be 't'").
        return read_vr_trackers(path, layout="json" if fmt == "vr-json" else "csv", **opts)
    return read_xsens_csv(path, **opts)


def _where_takes_find(asf_name: str) -> str:
    """Where an AMC take finds the skeleton ``asf_name`` (the rules of
    :func:`~retarget.readers.asf_amc.find_asf`), for a user of the command line, which has no
    option naming the skeleton."""
    performer = re.fullmatch(r"(HDM_[a-z]+)\.asf", asf_name)
    if performer:
        return (f"when the take is named {performer.group(1)}_*.amc and lies in the same folder, or in a folder "
                f"beside a 'skeletons' folder holding it (the take's ../skeletons/{asf_name})")
    return (f"when the take lies in the same folder and is named {Path(asf_name).stem}.amc, or when this is the "
            "only .asf in the take's folder")
