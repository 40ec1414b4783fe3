"""One representation of human motion, whatever device or file it came from.

Every reader (Xsens CSV/MVNX, ASF/AMC, BVH, VR trackers, the synthetic operator) produces a
:class:`HumanMotion`. The retargeting consumes only this.

Conventions (the Xsens MVN conventions, made explicit)
------------------------------------------------------
* World frame: right-handed, **z up**, **x forward** (the direction the person faces at the
  start), **y to the person's left**, origin on the ground. Positions in **metres**.
* Orientations: unit quaternions **(w, x, y, z)**, rotating segment-frame vectors into the
  world frame (world_from_segment).
* Segment frames are aligned with the world frame when the person stands in the
  **N-pose** (upright, arms hanging along the body, palms facing inward, feet parallel and
  hip-width apart, looking forward). This makes relative rotations between adjacent
  segments read as anatomical angles about the same axes for every source: flexion about
  y, abduction about x, axial rotation about z.
  (MVN itself defines the *arm* segment frames in the T-pose, arms horizontal; the Xsens
  readers re-express them in N-pose frames, see :mod:`retarget.readers.mvn`.)
* Time: ``times`` in seconds on the producer's clock, strictly increasing.

Segment names (a subset may be present; sparse sources such as VR trackers only have some)::

    pelvis, l5, l3, t12, t8, neck, head,
    right_shoulder, right_upper_arm, right_forearm, right_hand,
    left_shoulder, left_upper_arm, left_forearm, left_hand,
    right_upper_leg, right_lower_leg, right_foot, right_toe,
    left_upper_leg, left_lower_leg, left_foot, left_toe
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from .npz_checks import NPZ_READ_ERRORS, CheckedNpz, open_npz

#: Canonical segment names, in MVN order.
SEGMENTS: tuple[str, ...] = (
    "pelvis", "l5", "l3", "t12", "t8", "neck", "head",
    "right_shoulder", "right_upper_arm", "right_forearm", "right_hand",
    "left_shoulder", "left_upper_arm", "left_forearm", "left_hand",
    "right_upper_leg", "right_lower_leg", "right_foot", "right_toe",
    "left_upper_leg", "left_lower_leg", "left_foot", "left_toe",
)

#: Segments a VR set-up can provide (head + hands required, the rest optional).
TRACKER_SEGMENTS: tuple[str, ...] = ("head", "left_hand", "right_hand", "pelvis", "left_foot", "right_foot")


#: Shortest and longest sample step [s] of a motion (median over the take), and so the
#: rates [Hz] it may state (1 / step). Motion capture and VR tracking run at 30-1000 Hz
#: (Xsens 60-240, HDM05 and CMU 120, SteamVR 90); 10 kHz and 1 Hz leave a wide margin
#: around them. Outside, a time unit was mistaken or the file is corrupt (BVH ``Frame
#: Time: 1e300``, VR times 1e-12 s apart), and a replay at the file's times stalls for
#: ever or plays a take in nanoseconds: refused with the file named.
MIN_SAMPLE_STEP_S = 1e-4
MAX_SAMPLE_STEP_S = 1.0

#: Longest pause between two samples of a motion file [s]. A recording tool may pause (the
#: median step above is what says the time unit is right), but a take that stands still for
#: longer is a corrupt time stamp: one sample at 1e5 s made a 2 s take last 27 hours, which
#: `retarget --execute` then simulated and a replay waited out.
MAX_PAUSE_S = 60.0

#: Fastest a person's body segment may move between two samples of a motion file [m/s].
#: Hands reach ~10 m/s in a throw; the real data's fastest is 17.6 m/s (a toe marker of an
#: HDM05 squat, which the data keep). A tracker glitch is orders faster (a hand at 1e6 m for
#: one frame, a joint angle of 1e30 degrees), and was retargeted as a jump of the robot's
#: hand within its reach: refused with the frame and segment named.
MAX_SEGMENT_SPEED_M_S = 30.0

#: Largest deviation from 1 of an orientation quaternion's norm that a file may hold. The
#: readers normalise, so a small error (rounding in a text export, float32) is harmless;
#: a larger one is a scaled, zeroed or corrupt quaternion (all zeros turned a posture
#: reference 0.76 rad, x3 1.41 rad), refused like the text readers refuse theirs.
UNIT_NORM_TOLERANCE = 0.01

#: Most characters of a name or token from a file that an error message quotes: a token
#: of a damaged or foreign file can be megabytes long (see :func:`quote`).
QUOTE_LIMIT = 40


class MotionFormatError(ValueError):
    """A motion file or stream that is wrong, truncated or unsupported.

    The message names the file (and line, where there is one).
    """


def quote(token: object) -> str:
    """``repr(token)`` for an error message, cut to :data:`QUOTE_LIMIT` characters with
    ``...`` and the token's length after the quote when longer (e.g. ``'xxxx'... (2000000
    characters)``), so that the message stays one readable line whatever the file holds
    (a CSV body under a BVH header was echoed as one 4 KB token, a crafted file's 2 MB)."""
    text = str(token)
    if len(text) <= QUOTE_LIMIT:
        return repr(text)
    return f"{text[:QUOTE_LIMIT]!r}... ({len(text)} characters)"


@dataclass
class HumanMotion:
    """Segment poses of one person over time.

    Attributes:
        times: (T,) sample times [s], strictly increasing, with a median step between
            :data:`MIN_SAMPLE_STEP_S` and :data:`MAX_SAMPLE_STEP_S`.
        segment_names: names of the S segments present (a subset of :data:`SEGMENTS`, each
            once).
        positions: (T, S, 3) segment origins in the world frame [m].
        orientations: (T, S, 4) world_from_segment unit quaternions (w, x, y, z).
        com: optional (T, 3) centre of mass [m], when the source measures it.
        source: file path or device name.
        rate_hz: nominal sampling rate [Hz], within the rates the sample steps allow, or 0
            when not stated.
        meta: anything else the reader knows (performer, task label, units...).

    Raises:
        MotionFormatError: naming ``source``, for arrays of the wrong shapes, times that are
            not finite or do not increase, unknown or repeated segment names, a rate out of
            range, or a position, orientation or CoM value that is NaN or inf (with its
            frame and segment: a NaN ran through the retargeting into the references, the
            ProMP training and the controller). Only :meth:`raw` builds a motion with
            non-finite values: a device's input as it came.
    """

    times: npt.NDArray[np.floating[Any]]
    segment_names: tuple[str, ...]
    positions: npt.NDArray[np.floating[Any]]
    orientations: npt.NDArray[np.floating[Any]]
    com: npt.NDArray[np.floating[Any]] | None = None
    source: str = ""
    rate_hz: float = 0.0
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._check(finite_values=True)

    @classmethod
    def raw(cls, times: npt.NDArray[np.floating[Any]], segment_names: tuple[str, ...],
            positions: npt.NDArray[np.floating[Any]], orientations: npt.NDArray[np.floating[Any]],
            com: npt.NDArray[np.floating[Any]] | None = None, source: str = "", rate_hz: float = 0.0,
            meta: dict[str, Any] | None = None) -> "HumanMotion":
        """A motion as a device gave it: checked like the constructor (same arguments),
        except that positions, orientations and CoM may be NaN or inf.

        For the operator's raw input, which the operator station takes (a segment a device
        glitched to NaN is held like a lost one) and a recording keeps as it came (a NaN
        written as null): refused there, one glitch would stop a recorded session and make
        the recording's operator channel unreadable. A reader that checks the values itself,
        to say more than the constructor can (:func:`check_finite_motion` with its cause),
        builds with it too. Anything that retargets or learns from a motion takes a checked
        one.
        """
        motion = cls.__new__(cls)
        motion.times, motion.segment_names, motion.positions, motion.orientations = (
            times, segment_names, positions, orientations)
        motion.com, motion.source, motion.rate_hz = com, source, rate_hz
        motion.meta = {} if meta is None else meta
        motion._check(finite_values=False)
        return motion

    def _check(self, finite_values: bool) -> None:
        """Convert the arrays to float and check them (see the class docstring); the values
        are checked finite only with ``finite_values``."""
        self.times = np.asarray(self.times, dtype=float)
        self.positions = np.asarray(self.positions, dtype=float)
        self.orientations = np.asarray(self.orientations, dtype=float)
        self.segment_names = tuple(self.segment_names)
        n_t, n_s = len(self.times), len(self.segment_names)
        if self.times.ndim != 1:
            raise MotionFormatError(f"{self.source}: times must be (T,), got {self.times.shape}")
        if not np.all(np.isfinite(self.times)):
            raise MotionFormatError(f"{self.source}: sample times must be finite numbers")
        steps = np.diff(self.times)
        if np.any(steps <= 0):
            # Everything downstream (resampling, phase, the ProMP) reads time as increasing;
            # a clip whose time goes back or stands still is a corrupt file, said here once.
            k = int(np.argmax(steps <= 0))
            raise MotionFormatError(f"{self.source}: sample times must increase, but sample {k + 1} is at "
                                    f"{self.times[k + 1]:.6g} s after sample {k} at {self.times[k]:.6g} s")
        if len(steps):
            # A bound on the median, not on every step: a live recording may pause, and
            # its typical step is what says the time unit is right (see MIN_SAMPLE_STEP_S).
            step = float(np.median(steps))
            # With a relative tolerance: the times of a take at the highest rate allowed,
            # arange(n) / 10000, are 9.99999e-05 s apart, and --rate-hz 10000 was refused.
            if not MIN_SAMPLE_STEP_S * (1 - 1e-9) <= step <= MAX_SAMPLE_STEP_S * (1 + 1e-9):
                raise MotionFormatError(f"{self.source}: samples are {step:.3g} s apart (median): a motion's "
                                        f"sample step must be {MIN_SAMPLE_STEP_S * 1e3:g} ms to "
                                        f"{MAX_SAMPLE_STEP_S:g} s (times in the wrong unit, or a corrupt file?)")
        self.rate_hz = _checked_rate(self.rate_hz, self.source)
        unknown = set(self.segment_names) - set(SEGMENTS)
        if unknown:
            names = ", ".join(quote(s) for s in sorted(unknown)[:5]) + (", ..." if len(unknown) > 5 else "")
            raise MotionFormatError(f"{self.source}: unknown segment names {names}")
        repeated = sorted({s for s in self.segment_names if self.segment_names.count(s) > 1}, key=SEGMENTS.index)
        if repeated:
            # Every lookup by name (index, position, orientation) finds the first, so the
            # second's data was silently dropped or, relabelled, taken for another segment.
            raise MotionFormatError(f"{self.source}: segment {', '.join(repeated)} given more than once")
        if self.positions.shape != (n_t, n_s, 3):
            raise MotionFormatError(f"{self.source}: positions must be ({n_t}, {n_s}, 3), got {self.positions.shape}")
        if self.orientations.shape != (n_t, n_s, 4):
            raise MotionFormatError(f"{self.source}: orientations must be ({n_t}, {n_s}, 4), "
                                    f"got {self.orientations.shape}")
        if self.com is not None:
            self.com = np.asarray(self.com, dtype=float)
            if self.com.shape != (n_t, 3):
                raise MotionFormatError(f"{self.source}: com must be ({n_t}, 3), got {self.com.shape}")
        if finite_values and not (np.isfinite(self.positions).all() and np.isfinite(self.orientations).all()
                                  and (self.com is None or np.isfinite(self.com).all())):
            # One pass over the arrays (40 us for 20 s of 23 segments at 100 Hz); the
            # frame and segment are looked for only when there is one to name.
            check_finite_motion(self, self.source)

    def __len__(self) -> int:
        return len(self.times)

    @property
    def duration(self) -> float:
        return float(self.times[-1] - self.times[0]) if len(self.times) else 0.0

    def has(self, *segments: str) -> bool:
        return all(s in self.segment_names for s in segments)

    def index(self, segment: str) -> int:
        try:
            return self.segment_names.index(segment)
        except ValueError:
            raise KeyError(f"segment {segment!r} not in this motion ({self.source})") from None

    def position(self, segment: str) -> npt.NDArray[np.floating[Any]]:
        """(T, 3) world position of a segment [m]."""
        return self.positions[:, self.index(segment)]

    def orientation(self, segment: str) -> npt.NDArray[np.floating[Any]]:
        """(T, 4) world_from_segment quaternion (w, x, y, z) of a segment."""
        return self.orientations[:, self.index(segment)]

    def slice(self, start: int, stop: int) -> "HumanMotion":
        """Frames [start, stop) as a new motion."""
        return HumanMotion(self.times[start:stop], self.segment_names, self.positions[start:stop],
                           self.orientations[start:stop],
                           None if self.com is None else self.com[start:stop],
                           self.source, self.rate_hz, dict(self.meta))

    # ------------------------------------------------------------------ storage
    def save_npz(self, path: str | os.PathLike[str]) -> None:
        """Write the motion as a compressed .npz (the product's native motion format)."""
        np.savez_compressed(
            path, format=np.array("humanmotion-v1"), times=self.times,
            segment_names=np.array(self.segment_names), positions=self.positions,
            orientations=self.orientations, com=self.com if self.com is not None else np.zeros((0, 3)),
            rate_hz=np.array(self.rate_hz), source=np.array(self.source),
            label=np.array(str(self.meta.get("label", ""))))

    @classmethod
    def load_npz(cls, path: str | os.PathLike[str]) -> "HumanMotion":
        """Read a motion written by :meth:`save_npz`; a foreign file gets a clear error."""
        try:
            data = open_npz(path, MotionFormatError)
        except OSError as exc:
            raise MotionFormatError(f"{path}: not a readable .npz file ({exc})") from None
        with data:
            try:
                # np.load reads only the zip directory; the members are decompressed
                # here (the format field first), where damaged data raises zlib.error or a
                # CRC error that names no file (zlib.error is not even a ValueError: the CLI
                # showed a traceback). CheckedNpz refuses (OversizedMember, a ValueError) a
                # member whose .npy header declares more than the archive holds, before
                # numpy allocates it: else a shape of (10**12, 20, 3) is a MemoryError.
                members = CheckedNpz(data)
                if "format" not in members or str(members["format"]) != "humanmotion-v1":
                    raise MotionFormatError(f"{path}: not a human motion file (expected format humanmotion-v1)")
                missing = [k for k in ("times", "segment_names", "positions", "orientations", "com", "rate_hz",
                                       "label") if k not in members]
                if missing:
                    raise MotionFormatError(f"{path}: a humanmotion-v1 file lacks {', '.join(missing)}")
                arrays = {k: members[k] for k in ("times", "segment_names", "positions", "orientations", "com",
                                                  "rate_hz", "label")}
            except MotionFormatError:
                raise
            except NPZ_READ_ERRORS as exc:
                raise MotionFormatError(f"{path}: damaged .npz file ({exc})") from None
            com = arrays["com"]
            meta = {"label": str(arrays["label"])} if str(arrays["label"]) else {}
            try:
                motion = cls(arrays["times"], tuple(str(s) for s in arrays["segment_names"]), arrays["positions"],
                             arrays["orientations"], com if len(com) else None, str(path), arrays["rate_hz"],
                             meta)
            except MotionFormatError:
                raise
            except (TypeError, ValueError):
                # Members of the right names but not numbers (strings, a 0-d array for
                # segment_names): numpy's own message names neither file nor member.
                raise MotionFormatError(f"{path}: a humanmotion-v1 member holds something other than numbers "
                                        "where numbers are expected (times, positions, orientations, com, "
                                        "rate_hz) or segment names") from None
        if not len(motion):
            # Every reader refuses a take without frames; calibration would divide by zero.
            raise MotionFormatError(f"{path}: no frames")
        # The text readers refuse non-finite numbers with their line; do the same (with the
        # frame), or a NaN runs through retargeting and control into the results.
        check_finite_motion(motion, path)
        # The text readers refuse a quaternion that is not of unit norm; so does this one
        # (a zeroed or scaled quaternion passed and bent the posture references).
        check_unit_quaternions(motion, path)
        return motion


def _checked_rate(rate_hz: Any, source: str) -> float:
    """``rate_hz`` as a float, refused (MotionFormatError naming ``source``) unless it is 0
    (not stated: a single live frame, a motion built in code) or a rate between
    1 / MAX_SAMPLE_STEP_S and 1 / MIN_SAMPLE_STEP_S: the replay and the recorders pace by
    it, and a NaN, negative or 1e300 Hz rate from a file went through to them."""
    try:
        rate = float(rate_hz)
    except (TypeError, ValueError):
        raise MotionFormatError(f"{source}: rate {quote(rate_hz)} is not a number") from None
    if rate != 0.0 and not 1.0 / MAX_SAMPLE_STEP_S <= rate <= 1.0 / MIN_SAMPLE_STEP_S:
        raise MotionFormatError(f"{source}: rate {rate:g} Hz: a motion's rate must be "
                                f"{1.0 / MAX_SAMPLE_STEP_S:g} to {1.0 / MIN_SAMPLE_STEP_S:g} Hz")
    return rate


def check_unit_quaternions(motion: HumanMotion, path: str | os.PathLike[str]) -> None:
    """MotionFormatError naming ``path``, the frame and segment of the first orientation
    whose norm is not 1 within :data:`UNIT_NORM_TOLERANCE` (see there)."""
    norms = np.linalg.norm(motion.orientations, axis=-1)       # (T, S)
    bad = np.abs(norms - 1.0) > UNIT_NORM_TOLERANCE
    if bad.any():
        k, j = (int(i) for i in np.argwhere(bad)[0])
        raise MotionFormatError(f"{path}: the quaternion of segment {motion.segment_names[j]} at frame {k} of "
                                f"{len(motion)} is not of unit norm (norm {norms[k, j]:.3g})")


def check_plausible_motion(motion: HumanMotion, path: str | os.PathLike[str]) -> None:
    """MotionFormatError naming ``path`` and the sample if two samples are more than
    :data:`MAX_PAUSE_S` apart, or a segment moves faster than :data:`MAX_SEGMENT_SPEED_M_S`
    between two samples (a corrupt time stamp, a tracking glitch: see there)."""
    steps = np.diff(motion.times)                                   # (T-1,) [s]
    if len(steps) and steps.max() > MAX_PAUSE_S:
        k = int(np.argmax(steps))
        raise MotionFormatError(f"{path}: sample {k + 1} of {len(motion)} is {steps[k]:.6g} s after sample {k}: a "
                                f"motion may pause {MAX_PAUSE_S:g} s at most (a corrupt time stamp?)")
    if not len(steps) or not len(motion.segment_names):
        return
    # hypot, not norm: the squares of a corrupt 1e300 overflowed, and the message said the
    # segment moved "inf m".
    d = np.diff(motion.positions, axis=0)
    jumps = np.hypot(np.hypot(d[..., 0], d[..., 1]), d[..., 2])           # (T-1, S) [m]
    speeds = jumps / steps[:, None]
    if speeds.max() > MAX_SEGMENT_SPEED_M_S:
        k, j = (int(i) for i in np.unravel_index(int(np.argmax(speeds)), speeds.shape))
        raise MotionFormatError(f"{path}: segment {motion.segment_names[j]} moves {jumps[k, j]:.3g} m in "
                                f"{steps[k] * 1e3:.3g} ms between samples {k} and {k + 1} of {len(motion)} "
                                f"({speeds[k, j]:.3g} m/s; a person's segments move below {MAX_SEGMENT_SPEED_M_S:g} "
                                "m/s): a tracking glitch or a corrupt value")


def check_finite_motion(motion: HumanMotion, path: str | os.PathLike[str], cause: str = "NaN or inf") -> None:
    """MotionFormatError naming ``path``, the array, frame and segment if any of the motion's
    times, positions, orientations or CoM is NaN or inf (``cause`` goes in the message)."""
    for name in ("times", "positions", "orientations", "com"):
        values = getattr(motion, name)
        if values is None:
            continue
        bad = ~np.isfinite(values).all(axis=tuple(range(1, values.ndim)))   # per frame
        if bad.any():
            k = int(np.argmax(bad))
            where = f"frame {k} of {len(values)}"
            if values.ndim == 3:   # (T, S, n): name the segment too
                where += f", segment {motion.segment_names[int(np.argmax(~np.isfinite(values[k]).all(axis=1)))]}"
            raise MotionFormatError(f"{path}: non-finite {name} ({cause}) at {where}")
