"""Xsens MVNX (the MVN XML export): streaming reader and a small writer.

The parts of the format used here (MVNX version 4, as exported by MVN Analyze/Animate)::

    <mvnx version="4" xmlns="http://www.xsens.com/mvn/mvnx">
      <mvn version="..." build="..."/>
      <subject label="..." frameRate="240" segmentCount="23" ...>
        <segments>
          <segment label="Pelvis" id="1">
            <points><point label="jL5S1"><pos_b>0 0 0.105</pos_b></point> ...</points>
          </segment> ...
        </segments>
        <frames segmentCount="23" ...>
          <frame time="0" index="" tc="" ms="" type="identity"> ... </frame>   (calibration
          <frame time="0" index="" tc="" ms="" type="tpose"> ... </frame>       poses, skipped)
          <frame time="0" index="0" tc="00:00:00:00" ms="1234567" type="normal">
            <orientation>q0 q1 q2 q3 (w x y z) for every segment, in segment order</orientation>
            <position>x y z for every segment [m]</position>
            <velocity>...</velocity> ... <jointAngle>...</jointAngle>
            <centerOfMass>x y z [m] (MVN 2019+, optional)</centerOfMass>
          </frame> ...
        </frames>
      </subject>
    </mvnx>

``time`` is in milliseconds from the start of the take. Axes and frames are MVN's
(x forward, y left, z up; arm frames in the T-pose convention, converted to N-pose frames
as in :mod:`retarget.readers.mvn`).

The reader streams with :class:`xml.etree.ElementTree.XMLPullParser` (the incremental
parser behind ``iterparse``), fed one line at a time so that every error can name its
line, and frees every frame once read: memory stays proportional to the output arrays,
not to the file.
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast
from xml.sax.saxutils import quoteattr

import numpy as np
import numpy.typing as npt

from .. import quat, skeleton
from ..human import MAX_SAMPLE_STEP_S, MIN_SAMPLE_STEP_S, UNIT_NORM_TOLERANCE, HumanMotion, MotionFormatError
from ._text import error, quote
from .mvn import CANONICAL_TO_MVN, MVN_SEGMENTS, MVN_TO_CANONICAL, mvn_to_npose_frames, npose_to_mvn_frames

NAMESPACE = "http://www.xsens.com/mvn/mvnx"


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _numbers(path: str | os.PathLike[str], line: int, elem: ET.Element, count: int,
             what: str) -> npt.NDArray[np.floating[Any]]:
    text = (elem.text or "").split()
    if len(text) != count:
        raise error(path, line, f"<{what}> has {len(text)} numbers, expected {count}")
    try:
        values = np.array(text, dtype=float)
    except ValueError:
        raise error(path, line, f"<{what}> contains something that is not a number") from None
    if not np.all(np.isfinite(values)):
        raise error(path, line, f"<{what}> contains non-finite numbers")
    return values


def _frame_rate(path: str | os.PathLike[str], line: int, value: str | None) -> float:
    """The ``frameRate`` attribute [Hz]: 0 when absent (the rate then comes from the frame
    times), else a finite rate within what :class:`HumanMotion` allows, refused with its
    line otherwise (NaN, -100 and 1e300 were taken as the take's rate)."""
    if value is None or not value.strip():
        return 0.0
    try:
        rate = float(value)
    except ValueError:
        raise error(path, line, f"frameRate {quote(value)} is not a number") from None
    if not 1.0 / MAX_SAMPLE_STEP_S <= rate <= 1.0 / MIN_SAMPLE_STEP_S:
        raise error(path, line, f"frameRate {quote(value)}: a frame rate must be {1.0 / MAX_SAMPLE_STEP_S:g} to "
                    f"{1.0 / MIN_SAMPLE_STEP_S:g} Hz")
    return rate


def read_mvnx(path: str | os.PathLike[str], label: str = "") -> HumanMotion:
    """Read an MVNX file -> canonical :class:`HumanMotion` (streaming, see module docstring)."""
    path = Path(path)
    parser: ET.XMLPullParser[ET.Element] = ET.XMLPullParser(events=("start", "end"))
    labels: list[str] = []
    rate = 0.0
    frame_times: list[float] = []
    oris: list[npt.NDArray[np.floating[Any]]] = []
    poss: list[npt.NDArray[np.floating[Any]]] = []
    coms: list[npt.NDArray[np.floating[Any]]] = []
    frames_elem = None
    saw_root = False
    line_no = 0
    try:
        f = open(path, "rb")
    except OSError as exc:
        raise MotionFormatError(f"{path}: cannot read ({exc.strerror or exc})") from None
    current: dict[str, Any] | None = None          # the motion frame being read
    in_frame = False                     # a <frame> element is open (of any type)
    with f:
        try:
            for line_no, raw in enumerate(f, start=1):
                parser.feed(raw)
                # Only start and end events are asked for: each is (event, element).
                for event, elem in cast(Iterator[tuple[str, ET.Element]], parser.read_events()):
                    tag = _local(elem.tag)
                    if event == "start":
                        if not saw_root:
                            if tag != "mvnx":
                                raise error(path, line_no, f"root element is <{tag}>, not <mvnx>")
                            saw_root = True
                        elif tag == "subject":
                            rate = _frame_rate(path, line_no, elem.get("frameRate"))
                        elif tag == "segment" and frames_elem is None:
                            # Taken at its start tag, so an error names the segment's line.
                            name = elem.get("label", "")
                            if name not in MVN_TO_CANONICAL:
                                raise error(path, line_no, f"unknown MVN segment label {quote(name)}")
                            if name in labels:
                                # Frames give one value per <segment>, in their order: a second
                                # "Pelvis" (L5 relabelled) took the L5 data for the pelvis.
                                raise error(path, line_no, f"segment label {name} given twice (segment "
                                            f"{len(labels) + 1}; segment {labels.index(name) + 1} has it too)")
                            labels.append(name)
                        elif tag == "frames":
                            frames_elem = elem
                        elif tag == "frame":
                            if not labels:
                                raise error(path, line_no, "frame before any <segment> definition")
                            if in_frame:
                                raise error(path, line_no, "<frame> inside another <frame>")
                            in_frame = True
                            current = {"line": line_no} if elem.get("type", "normal") == "normal" else None
                            if current is not None:
                                try:
                                    current["time"] = float(elem.get("time", "")) / 1000.0
                                except (TypeError, ValueError):
                                    raise error(path, line_no, "frame without a numeric time attribute") from None
                                if not np.isfinite(current["time"]):
                                    raise error(path, line_no, f"frame time {quote(elem.get('time'))} is not a "
                                                "finite number")
                        continue
                    n = len(labels)
                    if current is not None and tag in ("orientation", "position"):
                        # Parsed at its own end tag, so errors point at its line.
                        width = 4 if tag == "orientation" else 3
                        current[tag] = _numbers(path, line_no, elem, width * n, tag).reshape(n, width)
                        if tag == "orientation":
                            # Normalised below: a zero quaternion would become NaN, and one
                            # of 1e308 overflowed to a norm of inf and became zero.
                            norms = np.linalg.norm(current[tag], axis=-1)
                            zero = np.flatnonzero(norms < 1e-6)
                            if len(zero):
                                raise error(path, line_no, f"zero <orientation> quaternion of segment "
                                            f"{labels[zero[0]]} in motion frame {len(oris)}")
                            off = np.flatnonzero(~(np.abs(norms - 1.0) <= UNIT_NORM_TOLERANCE))
                            if len(off):
                                raise error(path, line_no, f"<orientation> quaternion of segment {labels[off[0]]} "
                                            f"in motion frame {len(oris)} is not of unit norm "
                                            f"(norm {norms[off[0]]:.3g})")
                    elif current is not None and tag == "centerOfMass":
                        values = (elem.text or "").split()
                        current["com"] = _numbers(path, line_no, elem, max(len(values), 3), tag)[:3]
                    elif tag == "frame":
                        if current is not None:
                            if "orientation" not in current or "position" not in current:
                                raise error(path, current["line"], "frame without <orientation> or <position>")
                            oris.append(current["orientation"])
                            poss.append(current["position"])
                            frame_times.append(current["time"])
                            if "com" in current:
                                coms.append(current["com"])
                        current, in_frame = None, False
                        elem.clear()
                        if frames_elem is not None and any(child is elem for child in frames_elem):
                            frames_elem.remove(elem)   # (not there if the frame sits deeper)
            parser.close()
        except ET.ParseError as exc:
            where = exc.position[0] if getattr(exc, "position", None) else line_no
            raise error(path, where, f"malformed XML ({exc})") from None
        except LookupError as exc:
            # An XML declaration naming an encoding Python does not know (encoding="ANSI"):
            # expat asks Python for the codec, whose LookupError escaped as a traceback.
            raise error(path, line_no, f"malformed XML ({exc})") from None
    if not saw_root:
        raise error(path, None, "empty file: not MVNX")
    if not oris:
        raise error(path, line_no, "no motion frames (type=\"normal\")")
    if coms and len(coms) != len(oris):
        raise error(path, None, "centerOfMass is given in some frames only")
    times = np.asarray(frame_times)
    if np.any(np.diff(times) <= 0):
        k = int(np.flatnonzero(np.diff(times) <= 0)[0]) + 1
        raise error(path, None, f"frame times do not increase at motion frame {k}")
    names = tuple(MVN_TO_CANONICAL[s] for s in labels)
    positions = np.stack(poss)
    q = np.stack(oris)
    q = q / np.linalg.norm(q, axis=-1, keepdims=True)
    orientations, conventions = mvn_to_npose_frames(names, positions, q)
    meta: dict[str, Any] = {"format": "mvnx", "label": label, "mvn_arm_frames": conventions,
                            "axes": "MVN: x forward, y left, z up", "units": "m, quaternion (w,x,y,z)"}
    if len(times) > 1:
        # The frames are played at their times: a frameRate they contradict (240 stated,
        # frames 10 ms apart) was shown as the take's rate. Kept in meta.
        measured = 1.0 / float(np.median(np.diff(times)))
        if rate > 0 and abs(rate - measured) > 0.05 * measured:
            meta["stated_rate_hz"] = rate
        if rate <= 0 or "stated_rate_hz" in meta:
            rate = measured
    return HumanMotion(times - times[0], names, positions, orientations, np.stack(coms) if coms else None,
                       source=str(path), rate_hz=rate, meta=meta)


def write_mvnx(motion: HumanMotion, path: str | os.PathLike[str], subject: str = "retarget") -> None:
    """Write a motion as a small but valid MVNX file (MVN segment labels and conventions).

    Segments the motion has are written in MVN order; each gets the points of its child
    joints (offsets at frame 0, MVN frames). One "identity" calibration frame precedes the
    motion frames, as in real exports. Times are written in milliseconds (rounded), so a
    round trip preserves times to 0.5 ms.
    """
    names = tuple(MVN_TO_CANONICAL[s] for s in MVN_SEGMENTS if MVN_TO_CANONICAL[s] in motion.segment_names)
    idx = [motion.index(s) for s in names]
    pos = motion.positions[:, idx]
    ori = npose_to_mvn_frames(names, motion.orientations[:, idx])
    offsets = skeleton.offsets_from_motion(motion, 0)
    rate = motion.rate_hz or (1.0 / float(np.median(np.diff(motion.times))) if len(motion) > 1 else 0.0)

    def fmt(a: npt.NDArray[np.floating[Any]]) -> str:
        return " ".join(f"{v:.9g}" for v in np.ravel(a))

    with open(path, "w", encoding="utf-8") as f:
        f.write('<?xml version="1.0" encoding="UTF-8" standalone="no" ?>\n')
        f.write(f'<mvnx version="4" xmlns="{NAMESPACE}">\n')
        f.write('<mvn version="2019.0.0" build="retarget"/>\n')
        f.write(f'<comment>written by retarget.readers.mvnx from {quoteattr(motion.source)[1:-1]}</comment>\n')
        # No frameRate when it is not known (one frame): the reader refuses a rate of 0.
        frame_rate = f' frameRate="{rate:g}"' if rate > 0 else ""
        f.write(f'<subject label={quoteattr(subject)}{frame_rate} segmentCount="{len(names)}" '
                f'configuration="FullBody">\n<segments>\n')
        for k, s in enumerate(names, start=1):
            f.write(f'<segment label="{CANONICAL_TO_MVN[s]}" id="{k}">\n<points>\n')
            for child, off in offsets.items():
                if skeleton.present_parent(child, set(names)) == s:
                    # Offsets are in N-pose frames; MVN's arm frames are T-pose frames.
                    local = npose_to_mvn_local(s, off)
                    f.write(f'<point label="j{CANONICAL_TO_MVN[child]}"><pos_b>{fmt(local)}</pos_b></point>\n')
            f.write('</points>\n</segment>\n')
        f.write(f'</segments>\n<frames segmentCount="{len(names)}">\n')
        ident = np.tile([1.0, 0.0, 0.0, 0.0], len(names))
        f.write(f'<frame time="0" index="" tc="" ms="" type="identity">\n<orientation>{fmt(ident)}</orientation>\n'
                f'<position>{fmt(pos[0])}</position>\n</frame>\n')
        t0 = motion.times[0]
        for k in range(len(motion)):
            ms = int(round((motion.times[k] - t0) * 1000.0))
            f.write(f'<frame time="{ms}" index="{k}" tc="" ms="{ms}" type="normal">\n'
                    f'<orientation>{fmt(ori[k])}</orientation>\n<position>{fmt(pos[k])}</position>\n')
            if motion.com is not None:
                f.write(f'<centerOfMass>{fmt(motion.com[k])}</centerOfMass>\n')
            f.write('</frame>\n')
        f.write('</frames>\n</subject>\n</mvnx>\n')


def npose_to_mvn_local(segment: str, offset: npt.NDArray[np.floating[Any]]) -> npt.NDArray[np.floating[Any]]:
    """A vector in a segment's N-pose frame expressed in its MVN (T-pose arm) frame."""
    q = npose_to_mvn_frames((segment,), np.array([[[1.0, 0.0, 0.0, 0.0]]]))[0, 0]
    return quat.rotate(quat.conj(q), offset)
