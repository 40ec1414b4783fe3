"""Per-joint PID gains to and from JSON, in the reference's ``PidConfiguration`` layout (§3.2.3):

    {"createdTimestamp": "2026-11-22T08:00:00Z",
     "mapping": {"l_elbow": {"kp": 120.0, "ki": 10.0, "kd": 3.0}, ...}}

Units: K_p [N m/rad], K_i [N m/(rad s)], K_d [N m s/rad] (the reference's exports are in
Gazebo units; ours are SI on radians). The reference accepts an import only if it covers all
joints (§3.2.3); :func:`load_gains` does the same when ``joints`` is given.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable, Mapping

from teleop import json_input
from teleop.tuning.pid import PidGains


class GainsFormatError(ValueError):
    """A gains file that is not a valid PID configuration."""


def gains_to_json(gains: Mapping[str, PidGains]) -> dict:
    """The ``PidConfiguration`` of ``gains`` (joint -> gains, units in the module docstring),
    stamped with the current UTC time."""
    return {"createdTimestamp": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "mapping": {joint: g.as_dict() for joint, g in gains.items()}}


def save_gains(path: str | Path, gains: Mapping[str, PidGains]) -> None:
    """Write :func:`gains_to_json` of ``gains`` to ``path`` (indented JSON)."""
    Path(path).write_text(json.dumps(gains_to_json(gains), indent=1) + "\n")


def gains_from_json(data: object, joints: Iterable[str] | None = None, source: str = "gains") -> dict[str, PidGains]:
    """Parse a configuration (its gains: finite JSON numbers >= 0, units in the module
    docstring). ``joints``: the joints it must cover exactly (None: any)."""
    if not isinstance(data, dict) or not isinstance(data.get("mapping"), dict):
        raise GainsFormatError(f"{source}: expected an object with a 'mapping' object of joint -> gains")
    out: dict[str, PidGains] = {}
    for joint, entry in data["mapping"].items():
        if not isinstance(entry, dict) or set(entry) - {"kp", "ki", "kd"} or "kp" not in entry:
            raise GainsFormatError(f"{source}: joint {joint!r} needs {{'kp', 'ki', 'kd'}} numbers, got {entry!r}")
        try:
            # JSON numbers only: float() also read the strings "120" and "nan" (and true as 1).
            values = {k: json_input.finite_float(v, k) for k, v in entry.items()}
            out[joint] = PidGains(**values)
        except (TypeError, ValueError, OverflowError) as exc:
            raise GainsFormatError(f"{source}: bad gains for joint {joint!r}: {entry!r} ({exc})") from None
    if joints is not None:
        wanted = list(joints)
        unknown = sorted(set(out) - set(wanted))
        missing = [j for j in wanted if j not in out]
        if unknown:
            raise GainsFormatError(f"{source}: unknown joint(s) {unknown}; expected {wanted}")
        if missing:
            raise GainsFormatError(f"{source}: missing joint(s) {missing} (an import must cover all joints)")
    return out


def load_gains(path: str | Path, joints: Iterable[str] | None = None) -> dict[str, PidGains]:
    """Read a configuration file (see :func:`gains_from_json`)."""
    path = Path(path)
    raw = path.read_bytes()
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:   # an .npz, say: say what was expected, not where UTF-8 broke
        raise GainsFormatError(f"{path}: not a JSON gains file (binary content; expected a PidConfiguration "
                               "JSON file, see teleop/tuning/gains_io.py)") from None
    try:
        data = json_input.loads(raw)
    except ValueError as exc:
        raise GainsFormatError(f"{path}: not valid JSON ({exc})") from None
    return gains_from_json(data, joints, source=str(path))
