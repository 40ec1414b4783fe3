"""Actuator model parameters: what stands between a commanded joint angle and the joint.

Reference: ../shared/reference/pid_tuning_and_sim_to_real.md, Part B.
The servo model is the physically consistent form of B4,

    tau = clip(K_p (q_bar - q) + K_d (qdot_bar - qdot) + tau_ff, -tau_max, tau_max)
          - k_v qdot - k_c sgn(qdot)                                         (B4)

with a command latency (B5: 16 ms measured on the real robot's loop), Gaussian noise on
the measured angles (B5: "noise ... measured and modelled", no model given, so white
Gaussian per joint is our choice) and per-link mass / centre-of-mass scale factors (B1:
"CAD mass, COM ... are off"; B2 calibrates them).

Where this deliberately differs from Part B [not in the reference], and why:

* B3's dynamics M(q) q'' + C(q, q') = tau + J f are integrated by pybullet (Bullet's
  constraint solver for the contacts), not DART: the rest of the product runs on pybullet.
* B4's tau is the *physically consistent* form (restoring stiffness, friction opposing
  motion), not the one "as written in the source", whose signs push away from q_bar. B4's
  lumped damping (k_v + k_tau^2/R) is split in two: the servo's K_d (back-EMF and the
  servo's D term, motor side, so inside the torque limit) and the joint's friction k_v
  (outside it: friction is not produced by the motor, so the motor's limit does not cap
  it). Below the limit the two forms agree with K_d + k_v = k_v + k_tau^2/R. A velocity
  command qdot_bar and the gravity feed-forward tau_ff are added: our controller sends
  velocities and the robot is position-controlled under gravity (teleop.sim.servo).
  B4's compliance margins B, D and punch E are left out, as in B4's own simplification.
* B5 models latency as a zero-order hold that updates q_bar every 16 physics steps. Here
  latency is a pure delay of every command (a FIFO), and the command rate is the caller's
  (100 Hz ticks interpolated to every physics step, teleop.sim.target_spline): our
  controller's rate and the link's delay are separate figures. B5's model is the special
  case latency = 0 with a command every 16 steps (held until the next one).

File format (TOML or JSON, same structure; every key optional)::

    latency = 0.016            # command latency [s] (between physics steps: the two neighbouring commands blended)
    seed = 0                   # seed of the sensor noise
    feedforward = "gravity"    # "gravity" (model-based bias compensation) or "none"
    [default]                  # per-joint values for every joint ...
    kp = 300.0                 # servo stiffness K_p [N m/rad]
    kd = 3.0                   # servo damping K_d [N m s/rad]
    viscous = 0.0              # viscous friction k_v [N m s/rad]
    coulomb = 0.0              # Coulomb friction k_c [N m]
    torque_limit = 30.0        # [N m]; default: the robot description's effort limit
    noise_std = 0.0            # sensor noise on measured angles [rad]
    [joints."*_wrist_*"]       # ... overridden by fnmatch patterns, in file order,
    kp = 20.0                  #     then by exact joint names
    [links."r_*"]              # per-link (URDF link name or pattern) scale factors
    mass_scale = 1.0           # mass and rotational inertia x this
    com_scale = 1.0            # centre-of-mass offset (in the link frame) x this

Loading validates everything and names the file in every error.
"""

from __future__ import annotations

import fnmatch
import json
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from teleop import json_input

#: Per-joint keys of a parameter file and their defaults (torque_limit None = description).
JOINT_KEYS = {"kp": 300.0, "kd": 3.0, "viscous": 0.0, "coulomb": 0.0, "torque_limit": None, "noise_std": 0.0}
LINK_KEYS = {"mass_scale": 1.0, "com_scale": 1.0}
TOP_KEYS = {"latency", "seed", "feedforward", "default", "joints", "links", "enabled", "file"}
FEEDFORWARD_KINDS = ("gravity", "none")


class ActuatorFileError(ValueError):
    """A malformed actuator parameter file (the message names the file)."""


def per_joint_array(value: Any, n: int, name: str) -> np.ndarray:
    """``value`` as an (n,) float array (one entry per joint), or ValueError naming ``name``
    (not numbers, or another shape: a wrong-shaped array broadcast into every joint)."""
    try:
        array = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be {n} numbers (one per joint), got {value!r:.60}") from None
    if array.shape != (n,):
        raise ValueError(f"{name} must have shape ({n},) (one per joint), got shape {array.shape}")
    return array


@dataclass
class ActuatorParams:
    """Per-joint actuator parameters, (n,) arrays in model joint order.

    Attributes:
        joint_names: the n joint names (model order).
        kp: servo stiffness K_p [N m/rad].
        kd: servo damping K_d [N m s/rad].
        viscous: viscous friction k_v [N m s/rad].
        coulomb: Coulomb friction k_c [N m].
        torque_limit: motor torque limit [N m].
        noise_std: standard deviation of the noise on measured angles [rad].
        latency: command latency [s].
        seed: seed of the noise generator.
        feedforward: "gravity" or "none".
        link_scales: URDF link name -> (mass scale, com scale); links not listed are 1, 1.
    """

    joint_names: list[str]
    kp: np.ndarray
    kd: np.ndarray
    viscous: np.ndarray
    coulomb: np.ndarray
    torque_limit: np.ndarray
    noise_std: np.ndarray
    latency: float = 0.0
    seed: int = 0
    feedforward: str = "gravity"
    link_scales: dict[str, tuple[float, float]] = field(default_factory=dict)

    @classmethod
    def uniform(cls, joint_names: list[str], torque_limit: np.ndarray, **values) -> "ActuatorParams":
        """Every joint the same.

        Args:
            joint_names: the n joint names.
            torque_limit: scalar or (n,) torque limit [N m] (``values["torque_limit"]`` wins).
            values: per-joint keys of :data:`JOINT_KEYS` as scalars (kp [N m/rad], kd
                [N m s/rad], viscous [N m s/rad], coulomb [N m], noise_std [rad]) and
                top-level fields (latency [s], seed, feedforward, link_scales).

        Raises ValueError naming the field for a NaN, a negative value or a wrong shape
        (:meth:`check`)."""
        n = len(joint_names)
        # (Keyword arguments of the dataclass: mypy would match the arrays against every field.)
        arrays: dict[str, Any] = {k: np.full(n, float(values.pop(k, d if d is not None else 0.0)))
                                  for k, d in JOINT_KEYS.items() if k != "torque_limit"}
        limit = np.asarray(values.pop("torque_limit", torque_limit), dtype=float)
        if limit.shape not in ((), (n,)):
            raise ValueError(f"ActuatorParams.uniform: torque_limit must be a number or {n} numbers (one per "
                             f"joint), got shape {limit.shape}")
        limit = limit * np.ones(n)
        params = cls(list(joint_names), torque_limit=limit, **arrays, **values)
        params.check("ActuatorParams.uniform")   # a negative gain or NaN named here, not in a run-away servo
        return params

    def check(self, name: str = "actuator parameters") -> None:
        """Raise ValueError, naming ``name`` and the field, unless every per-joint array is
        (n,) with n = len(joint_names), gains, friction and noise are finite and >= 0, the
        torque limit >= 0 (+inf: none), the latency finite and >= 0, the feed-forward known
        and the link scales finite (mass > 0, CoM >= 0). A negative gain, friction or
        latency has no physical meaning in B4/B5 (a negative K_p pushes away from q_bar, a
        negative latency asks for a command before it is sent) and made the servo run away
        or apply commands early without a word."""
        n = len(self.joint_names)
        for key in JOINT_KEYS:
            array = per_joint_array(getattr(self, key), n, f"{name}: {key}")
            # The torque limit may be +inf (no limit); everything else finite.
            bad = np.isnan(array) | (array < 0) if key == "torque_limit" else ~np.isfinite(array) | (array < 0)
            if bad.any():
                i = int(np.argmax(bad))
                raise ValueError(f"{name}: {key} of {self.joint_names[i]} must be a finite number >= 0, "
                                 f"got {array[i]!r}")
        if not isinstance(self.latency, (int, float)) or not np.isfinite(self.latency) or self.latency < 0:
            raise ValueError(f"{name}: latency must be a finite number of seconds >= 0, got {self.latency!r}")
        if self.feedforward not in FEEDFORWARD_KINDS:
            raise ValueError(f"{name}: feedforward must be one of {FEEDFORWARD_KINDS}, got {self.feedforward!r}")
        for link, (mass, com) in self.link_scales.items():
            if not (np.isfinite(mass) and mass > 0 and np.isfinite(com) and com >= 0):
                raise ValueError(f"{name}: link_scales of {link!r} must be (mass scale > 0, CoM scale >= 0), "
                                 f"finite, got {(mass, com)!r}")

    def copy(self) -> "ActuatorParams":
        return replace(self, joint_names=list(self.joint_names), kp=self.kp.copy(), kd=self.kd.copy(),
                       viscous=self.viscous.copy(), coulomb=self.coulomb.copy(),
                       torque_limit=self.torque_limit.copy(), noise_std=self.noise_std.copy(),
                       link_scales=dict(self.link_scales))

    def to_dict(self) -> dict:
        """The file structure (every joint listed by exact name), for TOML/JSON writing."""
        joints = {name: {"kp": float(self.kp[i]), "kd": float(self.kd[i]), "viscous": float(self.viscous[i]),
                         "coulomb": float(self.coulomb[i]), "torque_limit": float(self.torque_limit[i]),
                         "noise_std": float(self.noise_std[i])}
                  for i, name in enumerate(self.joint_names)}
        out = {"latency": float(self.latency), "seed": int(self.seed), "feedforward": self.feedforward,
               "joints": joints}
        if self.link_scales:
            out["links"] = {name: {"mass_scale": float(m), "com_scale": float(c)}
                            for name, (m, c) in self.link_scales.items()}
        return out


def _number(value, where: str, source: str, minimum: float = 0.0) -> float:
    try:
        number = json_input.finite_float(value, where)
    except ValueError:
        shown = "an integer too large for a float" if isinstance(value, int) else repr(value)
        raise ActuatorFileError(f"{source}: {where} must be a finite number, got {shown}") from None
    if number < minimum:
        raise ActuatorFileError(f"{source}: {where} must be >= {minimum}, got {value!r}")
    return number


def read_parameter_file(path: str | Path) -> dict:
    """Read a TOML (``.toml``) or JSON (anything else) parameter file into a dict."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ActuatorFileError(f"{path}: cannot read actuator parameter file ({exc.strerror})") from None
    kind = "TOML" if path.suffix.lower() == ".toml" else "JSON"
    try:
        if kind == "JSON":
            raw = json_input.loads(data)
        else:
            raw = tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ActuatorFileError(f"{path}: not valid {kind} (not UTF-8: {exc.reason} at byte {exc.start})") from None
    except RecursionError:
        raise ActuatorFileError(f"{path}: not valid {kind} (nested too deeply)") from None
    except ValueError as exc:   # TOMLDecodeError, json_input's errors, int() digit limit
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ActuatorFileError(f"{path}: not valid {kind} ({reason})") from None
    if not isinstance(raw, dict):
        raise ActuatorFileError(f"{path}: expected a table/object at the top level")
    return raw


def params_from_dict(raw: dict, joint_names: list[str], effort_limits: np.ndarray,
                     source: str = "<actuator parameters>") -> ActuatorParams:
    """Build :class:`ActuatorParams` from a parsed file (see the module docstring).

    Args:
        raw: the parsed file.
        joint_names: (n,) model joint names.
        effort_limits: (n,) default torque limits [N m] (the robot description's).
        source: file name used in error messages.
    """
    unknown = set(raw) - TOP_KEYS
    if unknown:
        raise ActuatorFileError(f"{source}: unknown keys {sorted(unknown)} (allowed: {sorted(TOP_KEYS)})")
    n = len(joint_names)
    values: dict[str, np.ndarray] = {k: np.full(n, np.nan if d is None else d) for k, d in JOINT_KEYS.items()}
    values["torque_limit"] = np.asarray(effort_limits, dtype=float).copy()

    def apply(entry, mask: np.ndarray, where: str) -> None:
        if not isinstance(entry, dict):
            raise ActuatorFileError(f"{source}: {where} must be a table of {sorted(JOINT_KEYS)}")
        for key, value in entry.items():
            if key not in JOINT_KEYS:
                raise ActuatorFileError(f"{source}: {where}: unknown key {key!r} (allowed: {sorted(JOINT_KEYS)})")
            values[key][mask] = _number(value, f"{where}.{key}", source)

    apply(raw.get("default", {}), np.ones(n, dtype=bool), "default")
    joints = raw.get("joints", {})
    if not isinstance(joints, dict):
        raise ActuatorFileError(f"{source}: 'joints' must be a table of joint names/patterns")
    exact = {k: v for k, v in joints.items() if k in joint_names}
    for pattern, entry in joints.items():
        if pattern in exact:
            continue
        mask = np.array([fnmatch.fnmatchcase(j, pattern) for j in joint_names])
        if not mask.any():
            raise ActuatorFileError(f"{source}: joints.{pattern!r} matches no joint of the robot")
        apply(entry, mask, f"joints.{pattern!r}")
    for name, entry in exact.items():
        apply(entry, np.array([j == name for j in joint_names]), f"joints.{name!r}")

    links = raw.get("links", {})
    if not isinstance(links, dict):
        raise ActuatorFileError(f"{source}: 'links' must be a table of link names/patterns")
    link_scales = {}
    for name, entry in links.items():
        if not isinstance(entry, dict) or set(entry) - set(LINK_KEYS):
            raise ActuatorFileError(f"{source}: links.{name!r} must be a table of {sorted(LINK_KEYS)}")
        link_scales[name] = (_number(entry.get("mass_scale", 1.0), f"links.{name!r}.mass_scale", source, 1e-6),
                             _number(entry.get("com_scale", 1.0), f"links.{name!r}.com_scale", source))
    feedforward = raw.get("feedforward", "gravity")
    if feedforward not in FEEDFORWARD_KINDS:
        raise ActuatorFileError(f"{source}: feedforward must be one of {FEEDFORWARD_KINDS}, got {feedforward!r}")
    seed = raw.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 1 << 64:
        raise ActuatorFileError(f"{source}: seed must be an integer in [0, 2^64), got {seed!r:.40}")
    return ActuatorParams(list(joint_names), latency=_number(raw.get("latency", 0.0), "latency", source),
                          seed=seed, feedforward=feedforward, link_scales=link_scales, **values)


def load_actuator_params(path: str | Path, joint_names: list[str], effort_limits: np.ndarray) -> ActuatorParams:
    """Load an actuator parameter file (TOML or JSON, see the module docstring)."""
    return params_from_dict(read_parameter_file(path), joint_names, effort_limits, source=str(path))


def write_actuator_params(params: ActuatorParams, path: str | Path) -> None:
    """Write parameters as TOML (``.toml``) or JSON (otherwise), readable by
    :func:`load_actuator_params`."""
    path = Path(path)
    data = params.to_dict()
    if path.suffix.lower() != ".toml":
        path.write_text(json.dumps(data, indent=1) + "\n")
        return
    lines = [f"latency = {data['latency']!r}", f"seed = {data['seed']}", f'feedforward = "{data["feedforward"]}"', ""]
    for name, entry in data["joints"].items():
        lines.append(f'[joints."{name}"]')
        lines += [f"{k} = {v!r}" for k, v in entry.items()]
    for name, entry in data.get("links", {}).items():
        lines.append(f'[links."{name}"]')
        lines += [f"{k} = {v!r}" for k, v in entry.items()]
    path.write_text("\n".join(lines) + "\n")


def link_scale_for(link_scales: dict[str, tuple[float, float]], link: str) -> tuple[float, float]:
    """(mass scale, com scale) of a URDF link: exact name first, then patterns, else (1, 1)."""
    if link in link_scales:
        return link_scales[link]
    for pattern, scales in link_scales.items():
        if fnmatch.fnmatchcase(link, pattern):
            return scales
    return (1.0, 1.0)


def description_actuator_params(robot) -> ActuatorParams:
    """The actuator parameters of a robot description's ``[sim.actuator]`` (inline values or
    its ``file``), whether or not ``enabled``: the nominal values a calibration starts from.

    Args:
        robot: a :class:`teleop.robot.model.RobotModel`.
    """
    description = robot.description
    section = description.sim.get("actuator", {})
    source = f"{description.source} [sim.actuator]"
    if not isinstance(section, dict):
        raise ActuatorFileError(f"{source}: must be a table")
    if "file" in section:
        path = Path(section["file"])
        if not path.is_absolute() and description.source is not None:
            path = description.source.parent / path
        return load_actuator_params(path, robot.joint_names, robot.limits.effort)
    inline = {k: v for k, v in section.items() if k != "enabled"}
    return params_from_dict(inline, robot.joint_names, robot.limits.effort, source=source)
