"""Set-point vs measured angle per joint over time: the reference's ``PidStepData`` (§3.2.3).

Angles are stored in **degrees**, unclamped (−180° ≠ 180°), as in the reference's exports;
times are simulated seconds from the start of the run (the reference stores absolute
FILETIME stamps and says to subtract the first one to compare runs: we store the difference).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np


class RecordingFormatError(ValueError):
    """A step-data file that is not a valid recording (names the file and what is wrong)."""


@dataclass
class JointTrace:
    """One joint in one run.

    Attributes:
        joint: joint name.
        motion: the motion ("animation") played, e.g. "step" or "dance".
        t: (N,) sample times [s], increasing.
        desired: (N,) set-point SP [deg].
        measured: (N,) measured angle PV [deg].
        time_stretch: playback speed factor of the motion (compare only equal factors).
    """

    joint: str
    motion: str
    t: np.ndarray
    desired: np.ndarray
    measured: np.ndarray
    time_stretch: float = 1.0
    extras: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.t = np.asarray(self.t, dtype=float)
        self.desired = np.asarray(self.desired, dtype=float)
        self.measured = np.asarray(self.measured, dtype=float)
        if not (self.t.shape == self.desired.shape == self.measured.shape) or self.t.ndim != 1:
            raise ValueError(f"{self.joint}: t, desired, measured must be equal-length 1-D arrays")

    @property
    def error(self) -> np.ndarray:
        """(N,) signed error SP − PV [deg]."""
        return self.desired - self.measured

    def to_json(self) -> dict:
        return {"createdTimestamp": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "animation": self.motion, "joint": self.joint,
                "simulationTimeStretchFactor": self.time_stretch, **({"extras": self.extras} if self.extras else {}),
                "data": [{"t": round(float(t), 6), "entry": {"desired": float(d), "measured": float(m)}}
                         for t, d, m in zip(self.t, self.desired, self.measured)]}

    @classmethod
    def from_json(cls, data: dict) -> "JointTrace":
        """From :meth:`to_json`'s layout. Raises KeyError / TypeError / ValueError on a
        malformed entry (:meth:`Recording.load` turns them into a :class:`RecordingFormatError`
        naming the file)."""
        rows = data["data"]
        trace = cls(joint=data["joint"], motion=data["animation"],
                    t=np.asarray([r["t"] for r in rows], dtype=float),
                    desired=np.asarray([r["entry"]["desired"] for r in rows], dtype=float),
                    measured=np.asarray([r["entry"]["measured"] for r in rows], dtype=float),
                    time_stretch=float(data.get("simulationTimeStretchFactor", 1.0)), extras=data.get("extras", {}))
        # json.loads accepts NaN / Infinity, which would silently turn every metric into NaN,
        # and the metrics' times (t[k] − t[k0]) assume increasing sample times.
        for name in ("t", "desired", "measured"):
            if not np.all(np.isfinite(getattr(trace, name))):
                raise ValueError(f"joint {trace.joint!r}: non-finite {name} value(s)")
        if np.any(np.diff(trace.t) <= 0):
            raise ValueError(f"joint {trace.joint!r}: sample times t are not increasing")
        return trace


@dataclass
class Recording:
    """All recorded joints of one motion: joint name -> :class:`JointTrace`."""

    motion: str
    traces: dict[str, JointTrace]

    @classmethod
    def from_arrays(cls, motion: str, joints: list[str], t: np.ndarray, desired_rad: np.ndarray,
                    measured_rad: np.ndarray, time_stretch: float = 1.0) -> "Recording":
        """From (N,) times [s] and (N, n) set-points / measurements in **radians**."""
        d, m = np.degrees(desired_rad), np.degrees(measured_rad)
        return cls(motion, {j: JointTrace(j, motion, t, d[:, i], m[:, i], time_stretch) for i, j in enumerate(joints)})

    def to_json(self) -> dict:
        return {"animation": self.motion, "joints": [tr.to_json() for tr in self.traces.values()]}

    @classmethod
    def from_json(cls, data: dict) -> "Recording":
        traces = [JointTrace.from_json(d) for d in data["joints"]]
        return cls(data["animation"], {tr.joint: tr for tr in traces})

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_json()))

    @classmethod
    def load(cls, path: str | Path) -> "Recording":
        """Read a :meth:`save`d recording; a malformed file raises :class:`RecordingFormatError`
        naming it (OSError if it cannot be read)."""
        path = Path(path)
        try:
            return cls.from_json(json.loads(path.read_text()))
        except json.JSONDecodeError as exc:
            raise RecordingFormatError(f"{path}: not valid JSON ({exc})") from None
        except KeyError as exc:
            raise RecordingFormatError(f"{path}: missing key {exc} (expected {{'animation', 'joints': "
                                       f"[{{'joint', 'animation', 'data': [{{'t', 'entry': {{'desired', "
                                       f"'measured'}}}}]}}]}})") from None
        except (TypeError, ValueError) as exc:
            raise RecordingFormatError(f"{path}: not a recording ({exc})") from None
