"""The robot references: the one vocabulary shared by the whole pipeline.

Retargeting produces them, the network carries them, ProMPs learn and predict them, the
whole-body controller tracks them and the recorder writes them (see DESIGN.md, "One
vocabulary across the pipeline").

Frames and units
----------------
All Cartesian references are expressed in the robot's *stance frame*: origin on the ground
at the midpoint between the two soles in the robot's initial stance, x forward, y to the
robot's left, z up. Positions are in metres, angles in radians.

Signals (20 scalars in the flat vector, in this order)
------------------------------------------------------
====================  =====  ========================================================
name                  size   meaning
====================  =====  ========================================================
com_xy                2      ground projection of the centre of mass (x, y) [m]
waist_height          1      height of the waist/root frame above the ground [m]
left_hand             3      left hand position (x, y, z) [m]
right_hand            3      right hand position (x, y, z) [m]
left_arm              3      left shoulder rotation, elbow flexion, forearm pronosupination [rad]
right_arm             3      right shoulder rotation, elbow flexion, forearm pronosupination [rad]
neck                  2      neck pitch (flexion), neck yaw (rotation) [rad]
torso                 3      torso pitch, roll, yaw [rad]
====================  =====  ========================================================

Optional extras (not part of the flat vector): head orientation as a unit quaternion
(w, x, y, z) and the leg postures (6 joint angles per leg).

Validity mask (optional): a (20,) bool vector, True where the scalar was measured. Sparse
sources (VR trackers: head + hands) cannot produce every signal; the retargeting then fills
the missing scalars with the robot's initial-posture values (so the vector is always
trackable) and clears their mask bits, so that consumers (controller weights, ProMP
learning, plots) can ignore them. None means "all measured".

Conversions between the flat vector (for ProMPs and the wire format) and named signals
live here and nowhere else.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import IO, Any

import numpy as np
import numpy.typing as npt

from .npz_checks import NPZ_READ_ERRORS, CheckedNpz, open_npz

#: (name, size) of every signal in the flat vector, in order.
SIGNALS: tuple[tuple[str, int], ...] = (
    ("com_xy", 2),
    ("waist_height", 1),
    ("left_hand", 3),
    ("right_hand", 3),
    ("left_arm", 3),
    ("right_arm", 3),
    ("neck", 2),
    ("torso", 3),
)

#: Number of scalars in the flat vector.
FLAT_SIZE: int = sum(size for _, size in SIGNALS)

#: Slice of each signal inside the flat vector.
SIGNAL_SLICES: dict[str, slice] = {}
_offset = 0
for _name, _size in SIGNALS:
    SIGNAL_SLICES[_name] = slice(_offset, _offset + _size)
    _offset += _size
del _offset, _name, _size

#: Human-readable label of every scalar of the flat vector (for plots and tables).
FLAT_LABELS: tuple[str, ...] = (
    "com x", "com y",
    "waist z",
    "l.hand x", "l.hand y", "l.hand z",
    "r.hand x", "r.hand y", "r.hand z",
    "l.shoulder yaw", "l.elbow", "l.wrist prosup",
    "r.shoulder yaw", "r.elbow", "r.wrist prosup",
    "neck pitch", "neck yaw",
    "torso pitch", "torso roll", "torso yaw",
)

#: Indices of the scalars that are Cartesian positions [m] (the rest are angles [rad]).
CARTESIAN_INDICES: tuple[int, ...] = tuple(range(0, 9))
#: Indices of the hand-position scalars (left x y z, right x y z).
HAND_INDICES: tuple[int, ...] = tuple(range(3, 9))
#: Indices of the posture scalars (joint angles) [rad].
POSTURE_INDICES: tuple[int, ...] = tuple(range(9, FLAT_SIZE))
#: Indices of the CoM ground projection scalars.
COM_INDICES: tuple[int, ...] = (0, 1)

assert len(FLAT_LABELS) == FLAT_SIZE == 20


class InvalidReferences(ValueError):
    """References that cannot be tracked (NaN, infinite, wrong shape)."""


@dataclass
class RobotReferences:
    """One sample of the retargeted robot references.

    Attributes:
        t: time the sample was produced, on its producer's clock [s].
        com_xy: (2,) CoM ground projection in the stance frame [m].
        waist_height: waist/root height above the ground [m].
        left_hand, right_hand: (3,) hand positions in the stance frame [m].
        left_arm, right_arm: (3,) shoulder yaw, elbow, wrist pronosupination [rad].
        neck: (2,) neck pitch, neck yaw [rad].
        torso: (3,) torso pitch, roll, yaw [rad].
        head_orientation: optional (4,) unit quaternion (w, x, y, z), stance frame.
        left_leg, right_leg: optional (6,) leg joint angles (hip pitch, roll, yaw, knee,
            ankle pitch, ankle roll) [rad].
        valid: optional (20,) bool mask over the flat vector, True where the scalar was
            measured (None: all measured). See the module docstring.
    """

    t: float
    com_xy: npt.NDArray[np.floating[Any]]
    waist_height: float
    left_hand: npt.NDArray[np.floating[Any]]
    right_hand: npt.NDArray[np.floating[Any]]
    left_arm: npt.NDArray[np.floating[Any]]
    right_arm: npt.NDArray[np.floating[Any]]
    neck: npt.NDArray[np.floating[Any]]
    torso: npt.NDArray[np.floating[Any]]
    head_orientation: npt.NDArray[np.floating[Any]] | None = None
    left_leg: npt.NDArray[np.floating[Any]] | None = None
    right_leg: npt.NDArray[np.floating[Any]] | None = None
    valid: npt.NDArray[np.bool_] | None = None

    # ----------------------------------------------------------------- conversions
    def to_flat(self) -> npt.NDArray[np.floating[Any]]:
        """Return the (20,) flat vector in the order of :data:`SIGNALS`."""
        out = np.empty(FLAT_SIZE)
        for name, _ in SIGNALS:
            out[SIGNAL_SLICES[name]] = getattr(self, name)
        return out

    @classmethod
    def from_flat(cls, t: float, flat: npt.NDArray[np.floating[Any]], **extras: Any) -> "RobotReferences":
        """Build references from a (20,) flat vector (see :data:`SIGNALS`)."""
        flat = np.asarray(flat, dtype=float)
        if flat.shape != (FLAT_SIZE,):
            raise InvalidReferences(f"flat references must have shape ({FLAT_SIZE},), got {flat.shape}")
        values: dict[str, Any] = {name: flat[SIGNAL_SLICES[name]].copy() for name, _ in SIGNALS}
        values["waist_height"] = float(values["waist_height"][0])
        return cls(t=float(t), **values, **extras)

    def with_time(self, t: float) -> "RobotReferences":
        """A copy stamped with another time."""
        return replace(self, t=float(t))

    def validate(self) -> "RobotReferences":
        """Raise :class:`InvalidReferences` if any value is NaN or infinite."""
        flat = self.to_flat()
        if not np.all(np.isfinite(flat)) or not np.isfinite(self.t):
            bad = [FLAT_LABELS[i] for i in np.flatnonzero(~np.isfinite(flat))]
            raise InvalidReferences(f"non-finite robot references: {bad or ['t']}")
        for name in ("head_orientation", "left_leg", "right_leg"):
            value = getattr(self, name)
            if value is not None and not np.all(np.isfinite(value)):
                raise InvalidReferences(f"non-finite robot reference {name}")
        return self


@dataclass
class ReferenceTrajectory:
    """A time series of references, as learned by ProMPs and written by the recorder.

    Attributes:
        times: (T,) sample times [s], finite and strictly increasing.
        values: (T, 20) flat references (see :data:`SIGNALS`) [m, rad], finite.
        label: task label, if known (e.g. "squat").
        source: where it came from (file path, generator name).
        valid: optional (20,) bool mask, True for the scalars the source measured (None:
            all). See the module docstring.

    Raises:
        InvalidReferences: arrays of the wrong shapes, a time that is NaN or inf or not
            after the one before, or a value that is NaN or inf, naming the sample and the
            signal (:data:`FLAT_LABELS`). Every value is checked, ``valid`` or not: a scalar
            the source did not measure holds the robot's initial-posture value (module
            docstring), and the ProMP training, the interpolation, the wire format and the
            controller read all 20. Only :meth:`raw` builds a trajectory that is not checked.
    """

    times: npt.NDArray[np.floating[Any]]
    values: npt.NDArray[np.floating[Any]]
    label: str | None = None
    source: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    valid: npt.NDArray[np.bool_] | None = None

    def __post_init__(self) -> None:
        self._check(finite=True)

    @classmethod
    def raw(cls, times: npt.NDArray[np.floating[Any]], values: npt.NDArray[np.floating[Any]],
            label: str | None = None, source: str | None = None, meta: dict[str, Any] | None = None,
            valid: npt.NDArray[np.bool_] | None = None) -> "ReferenceTrajectory":
        """A trajectory as it was recorded: shapes checked like the constructor's (same
        arguments), times and values not (NaN or inf, times out of order).

        For reading what a recording holds, which may be damaged (a NaN written as null):
        the teleop recording reader returns one, so that an export can skip such an episode
        and a plot show it, saying where. Nothing should learn from, interpolate or track
        one before checking it (``ReferenceTrajectory(raw.times, raw.values, ...)``).
        """
        trajectory = cls.__new__(cls)
        trajectory.times, trajectory.values, trajectory.label, trajectory.source = times, values, label, source
        trajectory.meta = {} if meta is None else meta
        trajectory.valid = valid
        trajectory._check(finite=False)
        return trajectory

    def _check(self, finite: bool) -> None:
        """Convert the arrays and check them (see the class docstring); times and values are
        checked finite and increasing only with ``finite``."""
        self.times = np.asarray(self.times, dtype=float)
        self.values = np.asarray(self.values, dtype=float)
        if self.valid is not None:
            self.valid = np.asarray(self.valid, dtype=bool)
            if self.valid.shape != (FLAT_SIZE,):
                raise InvalidReferences(f"valid mask must be ({FLAT_SIZE},), got {self.valid.shape}")
        if self.values.ndim != 2 or self.values.shape[1] != FLAT_SIZE:
            raise InvalidReferences(f"values must be (T, {FLAT_SIZE}), got {self.values.shape}")
        if self.times.shape != (self.values.shape[0],):
            raise InvalidReferences("times and values disagree in length")
        if not finite:
            return
        n = len(self.times)
        if not np.isfinite(self.times).all():
            k = int(np.argmax(~np.isfinite(self.times)))
            raise InvalidReferences(f"non-finite time (NaN or inf) at sample {k} of {n}")
        steps = np.diff(self.times)
        if (steps <= 0).any():
            # Interpolation (np.interp), the ProMP phases and the replay all read time as
            # increasing: a time that goes back or stands still is a fault where it was made.
            k = int(np.argmax(steps <= 0))
            raise InvalidReferences(f"sample times must increase, but sample {k + 1} of {n} is at "
                                    f"{self.times[k + 1]:.6g} s after sample {k} at {self.times[k]:.6g} s")
        if not np.isfinite(self.values).all():
            # One pass over the values (10 us with the time checks for 20 s at 100 Hz); the
            # frame and signals are looked for only when there is one to name, in the words
            # `teleop train` and `dataset export` use for a take or an episode.
            bad = ~np.isfinite(self.values)
            k = int(np.argmax(bad.any(axis=1)))
            signals = ", ".join(FLAT_LABELS[j] for j in np.flatnonzero(bad[k]))
            raise InvalidReferences(f"non-finite values (NaN or inf) at frame {k} of {n} ({signals})")

    def __len__(self) -> int:
        return len(self.times)

    @property
    def duration(self) -> float:
        return float(self.times[-1] - self.times[0]) if len(self.times) else 0.0

    def sample(self, i: int) -> RobotReferences:
        valid = None if self.valid is None else self.valid.copy()
        return RobotReferences.from_flat(self.times[i], self.values[i], valid=valid)

    def interpolate(self, t: npt.NDArray[np.floating[Any]] | float) -> npt.NDArray[np.floating[Any]]:
        """Linear interpolation of the flat values at times ``t`` (clamped at the ends).

        Returns (20,) for a scalar t, else (len(t), 20).
        """
        t_arr = np.atleast_1d(np.asarray(t, dtype=float))
        out = np.empty((len(t_arr), FLAT_SIZE))
        for j in range(FLAT_SIZE):
            out[:, j] = np.interp(t_arr, self.times, self.values[:, j])
        return out[0] if np.isscalar(t) or np.ndim(t) == 0 else out

    @classmethod
    def from_samples(cls, samples: list[RobotReferences], **kw: Any) -> "ReferenceTrajectory":
        return cls(np.array([s.t for s in samples]), np.stack([s.to_flat() for s in samples]), **kw)

    def save_npz(self, path: str | os.PathLike[str] | IO[bytes]) -> None:
        extra: dict[str, Any] = {} if self.valid is None else {"valid": self.valid}
        np.savez_compressed(path, times=self.times, values=self.values,
                            label=self.label or "", source=self.source or "",
                            signals=np.array([n for n, _ in SIGNALS]), **extra)

    @classmethod
    def load_npz(cls, path: str | os.PathLike[str] | IO[bytes]) -> "ReferenceTrajectory":
        """Read a trajectory written by :meth:`save_npz`.

        Raises:
            InvalidReferences: naming ``path``, for a file that is not a .npz archive, a
                file without 'times' and 'values', a damaged member, a member whose .npy
                header declares more data than the archive holds (refused before numpy
                allocates it, see :mod:`retarget.npz_checks`), arrays of the wrong
                shape, times that are not finite or do not increase, or values that are
                not finite (the constructor's checks, with the sample and signal).
            OSError: a file that cannot be opened (FileNotFoundError...).
        """
        with open_npz(path, InvalidReferences) as data:
            members = CheckedNpz(data)
            if "values" not in members or "times" not in members:
                raise InvalidReferences(f"{path}: not a reference trajectory file (needs 'times' and 'values')")
            try:
                label = str(members["label"]) if "label" in members else ""
                source = str(members["source"]) if "source" in members else ""
                valid = members["valid"] if "valid" in members else None
                times, values = members["times"], members["values"]
            except NPZ_READ_ERRORS as exc:
                # Members are decompressed here: a damaged one raises an error that names no file.
                raise InvalidReferences(f"{path}: damaged .npz file ({exc})") from None
            try:
                return cls(times, values, label=label or None, source=source or None, valid=valid)
            except InvalidReferences as exc:
                # "values must be (T, 20), got (50, 7)" named no file.
                raise InvalidReferences(f"{path}: {exc}") from None
