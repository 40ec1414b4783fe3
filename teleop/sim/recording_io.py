"""Joint-trajectory recordings for simulation calibration: commanded vs measured angles.

A recording is what a position-controlled robot's log gives: at each sample time the
measured joint angles (read first) and the command sent (then held until the next
sample), for k recorded joints. Two file formats with the same content:

* ``.npz`` (numpy): arrays ``time`` (T,) [s], ``commanded`` (T, k) [rad], ``measured``
  (T, k) [rad], ``joint_names`` (k,) str, optional ``commanded_velocity`` (T, k) [rad/s],
  optional ``meta`` (a JSON string);
* ``.json``: an object with the same keys (lists of numbers, ``meta`` an object).

``meta`` may hold ``fixed_base`` (bool: the robot hung from its root, as on a test bench),
``base_height`` [m] above the standing pose, ``q0`` (n,) every joint's initial angle
(joints not recorded hold theirs), and for recordings made from the simulator with
hidden parameters, ``truth`` (the hidden values, used only to report how well a fit
recovered them).
"""

from __future__ import annotations

import json
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from retarget.file_checks import refuse_special_file
from retarget.npz_checks import CheckedNpz
from teleop import json_input
from teleop.output_set import write_outputs_together


class RecordingError(ValueError):
    """A recording file that is missing something or inconsistent (names the file). Found
    when the file is read and checked, before any replay: ``before_work`` tells the command
    line to say the error alone, without the TELEOP_DEBUG hint."""

    before_work = True


@dataclass
class Recording:
    """Commanded and measured joint trajectories.

    Attributes:
        time: (T,) sample times [s], evenly spaced.
        joint_names: (k,) recorded joints.
        commanded: (T, k) commanded angles [rad] sent at each sample time.
        measured: (T, k) measured angles [rad] read at each sample time.
        commanded_velocity: (T, k) commanded velocities [rad/s] or None (zero).
        meta: free-form metadata (see the module docstring).
    """

    time: np.ndarray
    joint_names: list[str]
    commanded: np.ndarray
    measured: np.ndarray
    commanded_velocity: np.ndarray | None = None
    meta: dict = field(default_factory=dict)

    @property
    def sample_dt(self) -> float:
        """Sample period [s]."""
        return float(self.time[1] - self.time[0])


def validate_recording(rec: Recording, source: str = "recording") -> Recording:
    """``rec`` if its arrays are consistent, else :class:`RecordingError` naming ``source``
    and the field: ``time`` (T,) finite, increasing, evenly spaced, T >= 3; ``joint_names``
    not empty; ``commanded``, ``measured`` (and ``commanded_velocity``) (T, k) and finite;
    ``meta`` a dict. Run on every file read or written, and by the calibration on a
    recording made in Python (teleop.sim.calibration.check_recording)."""
    t = np.asarray(rec.time)
    if t.dtype.kind not in "iuf":
        raise RecordingError(f"{source}: 'time' must be numbers [s]")
    if t.ndim != 1 or len(t) < 3:
        raise RecordingError(f"{source}: 'time' must be a 1-D array of at least 3 samples")
    steps = np.diff(t)
    if not np.all(np.isfinite(t)) or np.any(steps <= 0) or np.ptp(steps) > 1e-6 * max(1.0, steps.mean()) + 1e-9:
        raise RecordingError(f"{source}: 'time' must be increasing and evenly spaced")
    k = len(rec.joint_names)
    if k == 0:
        raise RecordingError(f"{source}: 'joint_names' is empty")
    for key in ("commanded", "measured", "commanded_velocity"):
        value = getattr(rec, key)
        if value is None:
            continue
        value = np.asarray(value)
        if value.dtype.kind not in "iuf":
            raise RecordingError(f"{source}: '{key}' must be numbers (angles [rad], velocities [rad/s])")
        if value.shape != (len(t), k):
            raise RecordingError(f"{source}: '{key}' has shape {value.shape}, expected ({len(t)}, {k}) "
                                 f"= (len(time), len(joint_names))")
        if not np.all(np.isfinite(value)):
            raise RecordingError(f"{source}: '{key}' holds non-finite values")
    if not isinstance(rec.meta, dict):
        raise RecordingError(f"{source}: 'meta' must be an object")
    return rec


def load_recording(path: str | Path) -> Recording:
    """Read a ``.npz`` or ``.json`` recording (see the module docstring); raises
    :class:`RecordingError` naming the file if it is malformed."""
    path = Path(path)
    if path.is_dir():   # exists: "no such recording file" sent the user looking for a typo
        raise RecordingError(f"{path}: a folder, not a recording: give a recording file: a .npz or .json "
                             "holding time, joint_names, commanded and measured")
    refuse_special_file(path, RecordingError)   # is_file() is False for one too: "no such recording file"
    if not path.is_file():
        raise RecordingError(f"{path}: no such recording file")
    try:
        if path.suffix.lower() == ".npz":
            if not zipfile.is_zipfile(path):   # else numpy reads it as a pickle and says so
                raise RecordingError(f"{path}: not a .npz file (numpy's zip archive of arrays)")
            with np.load(path, allow_pickle=False) as npz:
                # CheckedNpz: a member declaring more than the archive holds is refused
                # (ValueError) before numpy allocates it, not a MemoryError.
                members = CheckedNpz(npz)
                raw = {key: members[key] for key in npz.files}
            if "meta" in raw:
                raw["meta"] = json_input.loads(str(raw["meta"]))
        elif path.suffix.lower() == ".json":
            raw = json_input.loads(path.read_bytes())
            if not isinstance(raw, dict):
                raise RecordingError(f"{path}: expected a JSON object with time, joint_names, commanded, measured")
        else:
            raise RecordingError(f"{path}: unknown recording format (expected .npz or .json)")
    except (OSError, ValueError, EOFError, RuntimeError, zipfile.BadZipFile, zlib.error) as exc:
        # A damaged archive: zlib.error / BadZipFile / EOFError, NotImplementedError (an
        # unsupported compression method) or RuntimeError (an encrypted member).
        if isinstance(exc, RecordingError):
            raise
        reason = str(exc).splitlines()[0] if str(exc) else ""
        raise RecordingError(f"{path}: cannot read recording ({type(exc).__name__}: {reason})") from None
    missing = [k for k in ("time", "joint_names", "commanded", "measured") if k not in raw]
    if missing:
        raise RecordingError(f"{path}: missing {', '.join(missing)} (a recording needs time, joint_names, "
                             "commanded, measured)")
    try:
        rec = Recording(
            time=np.asarray(raw["time"], dtype=float),
            joint_names=[str(n) for n in np.atleast_1d(raw["joint_names"])],
            commanded=np.asarray(raw["commanded"], dtype=float),
            measured=np.asarray(raw["measured"], dtype=float),
            commanded_velocity=None if raw.get("commanded_velocity") is None
            else np.asarray(raw["commanded_velocity"], dtype=float),
            meta=raw.get("meta", {}),
        )
    except (TypeError, ValueError, OverflowError) as exc:
        raise RecordingError(f"{path}: arrays are not numeric or ragged ({exc})") from None
    return validate_recording(rec, str(path))


def _savez(path: Path, arrays: dict[str, Any]) -> None:
    with path.open("wb") as f:
        np.savez_compressed(f, **arrays)


def save_recording(rec: Recording, path: str | Path) -> None:
    """Write a recording as ``.npz`` or ``.json`` (by suffix)."""
    path = Path(path)
    validate_recording(rec, str(path))
    # (Its folder is made by write_outputs_together, and removed again if the write fails or
    # is interrupted: made here, it stayed behind, empty.)
    if path.suffix.lower() == ".npz":
        # (Any: savez_compressed's stub would match the arrays against its allow_pickle too.)
        arrays: dict[str, Any] = {"time": rec.time, "joint_names": np.array(rec.joint_names),
                                  "commanded": rec.commanded, "measured": rec.measured,
                                  "meta": np.array(json.dumps(rec.meta))}
        if rec.commanded_velocity is not None:
            arrays["commanded_velocity"] = rec.commanded_velocity
        # Beside the file, then renamed over it: a failed write (a full disk) truncated the
        # recording it replaced.
        write_outputs_together({path: lambda tmp: _savez(tmp, arrays)})
    elif path.suffix.lower() == ".json":
        data = {"time": rec.time.tolist(), "joint_names": rec.joint_names, "commanded": rec.commanded.tolist(),
                "measured": rec.measured.tolist(), "meta": rec.meta}
        if rec.commanded_velocity is not None:
            data["commanded_velocity"] = rec.commanded_velocity.tolist()
        write_outputs_together({path: lambda tmp: tmp.write_text(json.dumps(data))})
    else:
        raise RecordingError(f"{path}: unknown recording format (expected .npz or .json)")
