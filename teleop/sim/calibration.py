"""Simulation calibration: fit link mass/CoM scales and actuator parameters to a recording.

Reference: ../shared/reference/pid_tuning_and_sim_to_real.md, B1-B2 ("simulation
calibration: optimise mass, inertia, COM and actuator gains to minimise the mismatch with
recorded real data") and B6, which leaves the loss and the optimiser to us. Our choices
[not in the reference]:

* **loss**: output error. The recorded commands are replayed in the simulation with
  candidate parameters p and the residual is r(p) = q_sim(p) - q_measured over every
  sample and recorded joint, (T k,) [rad]; we minimise ||r||^2 (the joint RMSE squared).
  Replaying the commands (rather than fitting M q'' + h = tau to differentiated noisy
  angles) keeps the noise out of the regressors and measures exactly what a user sees.
* **parameters**, per calibrated group g (a joint group of the description, or a single
  joint): scale factors of the nominal values,
  ``mass_scale`` (mass and rotational inertia of every link the group moves),
  ``com_scale`` (their CoM offsets), ``kp``, ``kd``, ``viscous``, ``coulomb``; plus one
  command ``latency`` [s] for the robot. Torque limits and noise are not fitted; the noise
  is estimated afterwards as the RMS of the fitted residual.
* **what angles alone cannot tell**: per joint, the closed loop of B4,
  I q'' = K_p (q_bar - q) + K_d (qdot_bar - qdot) - k_v qdot - k_c sgn(qdot) + (s_m s_c - 1) g(q),
  divided by K_p, only shows I/K_p, K_d/K_p, k_v/K_p, k_c/K_p and (s_m s_c - 1)/K_p: five
  ratios for six unknowns. Multiplying K_p, K_d, k_v, k_c and the mass by one factor (and
  re-balancing s_c) leaves the angles unchanged up to the weak parallel-axis term of the
  CoM. So one absolute quantity must be known: by default K_p, the servo's gain setting
  (a firmware parameter on a real robot), is taken as known and the other five are fitted;
  ``fit=("kp", ...)`` fits it too (expect a ridge: a good RMSE, poor recovery).
* **optimiser**: trust-region reflective least squares (scipy ``least_squares``) with
  finite-difference Jacobians, bounds [0.3, 3] x nominal. Fractional latencies blend the
  neighbouring steps' commands (teleop.sim.servo), so r(p) is continuous in the latency.

The replay runs the robot hung from its root (``fixed_base``) in a collision-free scene
when the recording says so, as a bench test of the limbs would be recorded.

Where this differs from B1-B2 [not in the reference], and why:

* only the **calibration step** of B2's loop is here; the loop itself (optimise a
  controller in simulation, run it on the robot, calibrate, repeat) is the user's: our
  controller is a feedback whole-body controller, not B1's optimised feedforward one. A
  second iteration is ``teleop calibrate-sim --params`` the previous fit, on a new recording.
* B2's "mass, inertia" are **one** scale per group: mass and rotational inertia together
  (a link uniformly heavier). From joint angles a joint sees only its apparent inertia,
  I_c + m |c|^2 about its axis, so a separate inertia scale would form a ridge with the
  mass and CoM scales (as K_p does, above).
* B2's simulator is DART; ours is pybullet (teleop.sim.actuator's docstring).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import numpy as np
import pinocchio as pin

from teleop import json_input
from teleop.progress import progress_bar
from teleop.robot.model import NQ_BASE, RobotModel
from teleop.sim.actuator import ActuatorParams, link_scale_for
from teleop.sim.recording_io import Recording, RecordingError, validate_recording

#: Scale factors per group, in parameter-vector order.
GROUP_PARAMETERS = ("mass_scale", "com_scale", "kp", "kd", "viscous", "coulomb")
#: What is fitted by default: everything but K_p (see the module docstring: with angles
#: alone, K_p and the mass cannot both be found).
DEFAULT_FIT = ("mass_scale", "com_scale", "kd", "viscous", "coulomb")
#: Bounds of every scale factor (x nominal).
SCALE_BOUNDS = (0.3, 3.0)
#: How far a recording's ``meta["q0"]`` may lie outside a joint's limits [rad]: it is
#: measured, and encoders read a little past the stops.
Q0_LIMIT_TOLERANCE = 1e-3
#: How far a recording's commanded and measured angles may lie outside a joint's limits
#: [rad] (20 deg): a controller's target may overshoot a stop, an encoder read past it; far
#: beyond, the angles are in degrees (47 "rad") or garbage, and were fitted without a word.
ANGLE_LIMIT_TOLERANCE = 0.35
#: Longest sample period of a recording [s]: joint data come at 10 Hz or more; a step of
#: seconds is times in milliseconds (each replay of such a "1000 s" recording took a minute).
MAX_SAMPLE_PERIOD_S = 1.0
#: Accepted ``meta["base_height"]`` [m], the root's height above the standing pose. 0 is
#: standing on the ground (the default without a fixed base); a bench hangs the robot
#: (about 1 m tall) some tens of centimetres up (0.5 m in the test recordings). Below 0
#: the feet start inside the ground (with collisions: a blow-up); beyond 3 m no rig holds
#: it, and a floating base would only fall for the whole recording: a unit or sign error.
BASE_HEIGHT_RANGE = (0.0, 3.0)
#: Fewest residual values per fitted parameter for a fit to mean something: regression's
#: rule of thumb of ten observations per unknown. Neighbouring samples of a smooth motion
#: are far from independent, so this is a floor (below it the fitted values are noise or
#: the start point), not a promise that more data give a good fit.
MIN_VALUES_PER_PARAMETER = 10
#: Sample period of :func:`make_test_recording` [s] (500 Hz, a servo log's usual rate).
TEST_SAMPLE_DT = 0.002


def group_joints(robot: RobotModel, group: str) -> list[str]:
    """Joint names of a description group, or ``[group]`` if it names a joint."""
    if group in robot.description.groups:
        return list(robot.description.groups[group])
    if group in robot.joint_names:
        return [group]
    raise KeyError(f"{group} is neither a joint group ({', '.join(sorted(robot.description.groups))}) "
                   f"nor a joint of {robot.description.name}")


def groups_to_fit(robot: RobotModel, rec: Recording, groups: list[str] | None = None,
                  source: str = "recording") -> list[str]:
    """The groups (or joints) a fit of ``rec`` calibrates: ``groups``, else the recording's
    ``meta["groups"]``. Raises :class:`RecordingError` (naming ``source``) if there are none,
    if a group of the meta names nothing of ``robot``, or if a group's joints are not all
    recorded; :func:`group_joints`'s KeyError for an unknown group of ``groups``."""
    from_meta = not groups
    groups = list(groups or rec.meta.get("groups") or [])
    if not groups:
        raise RecordingError(f"{source}: no groups to calibrate: give --groups (the recording's meta names none)")
    for group in groups:
        try:
            joints = group_joints(robot, group)
        except KeyError as exc:
            if not from_meta:
                raise
            raise RecordingError(f"{source}: meta 'groups': {exc.args[0]}") from None
        missing = [j for j in joints if j not in rec.joint_names]
        if missing:
            raise RecordingError(f"{source}: group {group!r}: joints {missing} are not in the recording, so their "
                                 f"parameters cannot be fitted")
    return groups


def n_parameters(n_groups: int, fit: tuple[str, ...] = DEFAULT_FIT) -> int:
    """Length of the fitted parameter vector: the latency, and ``fit``'s scales per group."""
    return 1 + len(fit) * n_groups


def min_evaluations(n_params: int) -> int:
    """Fewest replays in which :func:`calibrate` fits ``n_params`` parameters at all: the
    nominal's replay and the result's, and one step of the least-squares solver, which
    costs a residual and its finite-difference Jacobian (1 + n replays) at the start and
    again at the point it steps to. With less, scipy stops at the start point (before the
    budget was enforced, a budget of 2 + (1 + n) ran, and wrote the nominal as fitted)."""
    return 2 + 2 * (1 + n_params)


def min_samples(n_params: int, n_joints: int) -> int:
    """Fewest samples of a recording of ``n_joints`` joints from which ``n_params``
    parameters can be fitted meaningfully: :data:`MIN_VALUES_PER_PARAMETER` residual values
    per parameter, not counting the first sample (the starting posture, read before the
    first command: the same whatever the parameters)."""
    return 1 + math.ceil(MIN_VALUES_PER_PARAMETER * n_params / n_joints)


def too_few_data(n_samples: int, n_joints: int, n_params: int, source: str = "recording") -> str | None:
    """Why ``n_samples`` samples of ``n_joints`` joints are too few to fit ``n_params``
    parameters (:func:`min_samples`), or None if they are enough."""
    needed = min_samples(n_params, n_joints)
    if n_samples >= needed:
        return None
    joints = f"{n_joints} joint{'s' if n_joints != 1 else ''}"
    return (f"{source}: too few data for a meaningful fit: {n_samples} samples x {joints} give "
            f"{(n_samples - 1) * n_joints} residual values (the first sample, the starting posture, depends on no "
            f"parameter) for {n_params} fitted parameters, under the {MIN_VALUES_PER_PARAMETER} per parameter a fit "
            f"needs ({needed} samples here): the fitted values are not reliable")


def rmse_reduction(before: float, after: float) -> float | None:
    """``before / after`` (how many times lower the fitted RMSE is), or None where that is
    no number: a fitted RMSE of 0 (a perfect fit), or an RMSE that is not finite."""
    if after == 0 or not (math.isfinite(before) and math.isfinite(after)):
        return None
    return before / after


def group_links(robot: RobotModel, group: str) -> list[str]:
    """URDF links moved rigidly by the group's joints (each joint's child link and the
    links fixed to it), whose inertials the group's mass/CoM scales act on."""
    joint_ids = {robot.model.getJointId(name) for name in group_joints(robot, group)}
    return [f.name for f in robot.model.frames if f.type == pin.FrameType.BODY and f.parentJoint in joint_ids]


@dataclass
class CalibrationParameters:
    """A point of the search: latency [s] and per-group scale factors.

    Attributes:
        latency: command latency [s].
        scales: group -> {parameter of :data:`GROUP_PARAMETERS` -> scale factor}.
    """

    latency: float
    scales: dict[str, dict[str, float]]

    @classmethod
    def nominal(cls, latency: float, groups: list[str]) -> "CalibrationParameters":
        return cls(latency, {g: {k: 1.0 for k in GROUP_PARAMETERS} for g in groups})

    def vector(self, nominal_latency: float, fit: tuple[str, ...] = GROUP_PARAMETERS) -> np.ndarray:
        """(1 + len(fit) G,) parameter vector: latency / nominal latency, then the fitted scales."""
        values = [self.latency / nominal_latency]
        for group in self.scales.values():
            values += [group[k] for k in fit]
        return np.array(values)

    @classmethod
    def from_vector(cls, x: np.ndarray, nominal_latency: float, groups: list[str],
                    fit: tuple[str, ...] = GROUP_PARAMETERS) -> "CalibrationParameters":
        """Inverse of :meth:`vector`; scales not in ``fit`` are 1 (nominal). ValueError for
        an ``x`` whose length is not 1 + len(fit) x len(groups)."""
        expected = 1 + len(fit) * len(groups)
        if np.shape(x) != (expected,):
            raise ValueError(f"x must have shape ({expected},) (the latency, then {len(fit)} scales for each of "
                             f"{len(groups)} groups), got shape {np.shape(x)}")
        scales = {}
        for i, g in enumerate(groups):
            scales[g] = {k: 1.0 for k in GROUP_PARAMETERS}
            scales[g].update({k: float(x[1 + len(fit) * i + j]) for j, k in enumerate(fit)})
        return cls(float(x[0]) * nominal_latency, scales)

    def to_dict(self) -> dict:
        return {"latency": self.latency, "scales": self.scales}


def apply_parameters(robot: RobotModel, nominal: ActuatorParams, point: CalibrationParameters) -> ActuatorParams:
    """The nominal actuator parameters with ``point``'s latency and group scales applied.
    ValueError (nothing changed) for a latency that is not a finite number >= 0 or a scale
    that is not a finite number > 0 (a factor of the nominal)."""
    if not math.isfinite(point.latency) or point.latency < 0:
        raise ValueError(f"point.latency must be a finite number of seconds >= 0, got {point.latency!r}")
    for group, scales in point.scales.items():
        missing = [k for k in GROUP_PARAMETERS if k not in scales]
        if missing:
            raise ValueError(f"point.scales[{group!r}] lacks {missing}")
        bad = [k for k in GROUP_PARAMETERS if not (math.isfinite(scales[k]) and scales[k] > 0)]
        if bad:
            raise ValueError(f"point.scales[{group!r}][{bad[0]!r}] must be a finite number > 0, got "
                             f"{scales[bad[0]]!r}")
    params = nominal.copy()
    params.latency = point.latency
    for group, scales in point.scales.items():
        idx = [robot.joint_index(j) for j in group_joints(robot, group)]
        for key in ("kp", "kd", "viscous", "coulomb"):
            getattr(params, key)[idx] *= scales[key]
        for link in group_links(robot, group):
            # The nominal scale of the link, whether the file names it or a pattern matches
            # it: the exact entry written here overrides the patterns.
            mass, com = link_scale_for(params.link_scales, link)
            params.link_scales[link] = (mass * scales["mass_scale"], com * scales["com_scale"])
    return params


def check_recording(robot: RobotModel, rec: Recording, source: str = "recording", dt: float = 0.001) -> None:
    """Raise :class:`RecordingError` (naming ``source``, the file) if ``rec`` cannot be
    replayed on ``robot`` at physics step ``dt`` [s]: unknown or repeated joints, a sample
    period that is no multiple of ``dt`` or longer than :data:`MAX_SAMPLE_PERIOD_S`, commanded
    or measured angles beyond the joint limits by more than :data:`ANGLE_LIMIT_TOLERANCE`, or
    a malformed ``meta`` (``q0``, ``base_height``, ``fixed_base``, ``groups``, ``truth``), including
    a ``q0`` outside the joint limits (beyond :data:`Q0_LIMIT_TOLERANCE`) and a ``base_height``
    outside :data:`BASE_HEIGHT_RANGE`.
    :func:`replay` would otherwise fail with a bare numpy or key error, run with the last
    of the duplicates' commands (repeated joints), or fit nonsense parameters from an
    impossible start; a malformed ``truth`` failed only after the whole fit, comparing the
    result with it (:func:`recovery_errors`: a TypeError, a division by zero). The arrays
    themselves (shapes, NaN) are checked first (:func:`validate_recording`): a recording
    made in Python skips the file reader's check, and a NaN failed only in the optimiser."""
    validate_recording(rec, source)
    if isinstance(dt, bool) or not isinstance(dt, (int, float)) or not math.isfinite(dt) or dt <= 0:
        raise ValueError(f"dt must be a finite physics step > 0 [s], got {dt!r}")
    unknown = [j for j in rec.joint_names if j not in robot.joint_names]
    if unknown:
        raise RecordingError(f"{source}: joints {unknown} are not joints of {robot.description.name}")
    repeated = sorted({j for j in rec.joint_names if rec.joint_names.count(j) > 1})
    if repeated:
        raise RecordingError(f"{source}: joints {repeated} are recorded more than once")
    if rec.sample_dt > MAX_SAMPLE_PERIOD_S:
        raise RecordingError(f"{source}: sample period {rec.sample_dt:g} s, longer than {MAX_SAMPLE_PERIOD_S:g} s: "
                             "'time' in milliseconds? (it is in seconds)")
    lower, upper = robot.limits.lower, robot.limits.upper
    columns = [robot.joint_names.index(j) for j in rec.joint_names]
    for key in ("commanded", "measured"):
        angles = getattr(rec, key)
        low, high = lower[columns] - ANGLE_LIMIT_TOLERANCE, upper[columns] + ANGLE_LIMIT_TOLERANCE
        outside = (angles < low) | (angles > high)
        if outside.any():
            row, col = np.argwhere(outside)[0]
            raise RecordingError(
                f"{source}: '{key}' puts {rec.joint_names[col]} at {angles[row, col]:.4g} rad at t = "
                f"{rec.time[row]:.3f} s, beyond its limits [{lower[columns[col]]:.4g}, {upper[columns[col]]:.4g}] "
                f"rad by more than {ANGLE_LIMIT_TOLERANCE:g}: angles in degrees? (they are in radians)")
    steps = int(round(rec.sample_dt / dt))
    if steps < 1 or abs(steps * dt - rec.sample_dt) > 1e-6:
        raise RecordingError(f"{source}: sample period {rec.sample_dt:g} s is not a multiple of the physics "
                             f"step {dt:g} s")
    meta = rec.meta
    if "q0" in meta:
        try:
            q0 = np.asarray(meta["q0"], dtype=float)
        except (TypeError, ValueError):
            q0 = None
        if q0 is None or q0.shape != (robot.n_joints,) or not np.all(np.isfinite(q0)):
            raise RecordingError(f"{source}: meta 'q0' must be {robot.n_joints} finite joint angles [rad] "
                                 f"(every joint of {robot.description.name}, model order)")
        # A posture outside the limits is not one the robot was in (40 for 0.4 rad, or
        # degrees): the replay would start from it and the fit would explain the recording
        # with nonsense parameters, or the simulation blow up. A measured q0 may read a
        # little past a stop, hence the tolerance.
        outside = (q0 < lower - Q0_LIMIT_TOLERANCE) | (q0 > upper + Q0_LIMIT_TOLERANCE)
        if outside.any():
            i = int(np.argmax(outside))
            raise RecordingError(f"{source}: meta 'q0' puts {robot.joint_names[i]} at {q0[i]:.4g} rad, outside "
                                 f"its limits [{lower[i]:.4g}, {upper[i]:.4g}] rad")
    height = meta.get("base_height", 0.0)
    if isinstance(height, bool) or not isinstance(height, (int, float)) or not np.isfinite(height):
        raise RecordingError(f"{source}: meta 'base_height' must be a number [m], got {height!r}")
    if not BASE_HEIGHT_RANGE[0] <= height <= BASE_HEIGHT_RANGE[1]:
        raise RecordingError(f"{source}: meta 'base_height' must be in [{BASE_HEIGHT_RANGE[0]:g}, "
                             f"{BASE_HEIGHT_RANGE[1]:g}] m (the root's height above the standing pose), "
                             f"got {height:g}")
    if not isinstance(meta.get("fixed_base", True), bool):
        raise RecordingError(f"{source}: meta 'fixed_base' must be true or false, got {meta['fixed_base']!r}")
    groups = meta.get("groups", [])
    if not isinstance(groups, list) or not all(isinstance(g, str) for g in groups):
        raise RecordingError(f"{source}: meta 'groups' must be a list of joint group or joint names, got {groups!r}")
    if "truth" in meta:
        check_truth(meta["truth"], source)


#: What a recording's ``meta["truth"]`` holds: the hidden parameters of a test recording
#: (:func:`make_test_recording`), said in the errors about it.
TRUTH_LAYOUT = ('{"latency": seconds >= 0, "scales": {group: {parameter: scale > 0}}} with the parameters '
                + ", ".join(GROUP_PARAMETERS))


def _shown(value) -> str:
    """``value`` (from the recording's JSON meta) as an error message quotes it: as JSON
    (null, not None), cut short (a truth may be large)."""
    text = json.dumps(value, default=repr)
    return text if len(text) <= 60 else f"{text[:57]}..."


def _finite_number(value) -> bool:
    """Whether ``value`` (from JSON) is a finite number: not a bool, a string, null, nor an
    integer too large for a float (dividing by it overflows)."""
    try:
        json_input.finite_float(value)
    except ValueError:
        return False
    return True


def check_truth(truth, source: str = "recording") -> None:
    """Raise :class:`RecordingError` (naming ``source``) unless ``truth``, a recording's
    ``meta["truth"]``, is what :func:`make_test_recording` writes (:data:`TRUTH_LAYOUT`):
    a hidden ``latency`` [s], a finite number >= 0 (0: none, left out of the recovery
    errors), and per group a finite scale > 0 for each of :data:`GROUP_PARAMETERS`. A fit
    divides by them when it reports how well it recovered them (:func:`recovery_errors`)."""
    where = f"{source}: meta 'truth'"
    if not isinstance(truth, dict):
        raise RecordingError(f"{where} must be an object {TRUTH_LAYOUT}; got {_shown(truth)}")
    missing = [key for key in ("latency", "scales") if key not in truth]
    if missing:
        raise RecordingError(f"{where} lacks {' and '.join(repr(k) for k in missing)}: it must be {TRUTH_LAYOUT}")
    latency = truth["latency"]
    if not _finite_number(latency) or latency < 0:
        raise RecordingError(f"{where} 'latency' must be a finite number of seconds >= 0, got {_shown(latency)}")
    scales = truth["scales"]
    if not isinstance(scales, dict):
        raise RecordingError(f"{where} 'scales' must be an object of group -> {{parameter: scale}}, "
                             f"got {_shown(scales)}")
    for group, values in scales.items():
        if not isinstance(values, dict):
            raise RecordingError(f"{where} 'scales' of {group!r} must be an object of parameter -> scale, "
                                 f"got {_shown(values)}")
        unknown = sorted(set(values) - set(GROUP_PARAMETERS))
        if unknown:
            raise RecordingError(f"{where} 'scales' of {group!r}: unknown parameters {unknown} (the parameters are "
                                 f"{', '.join(GROUP_PARAMETERS)})")
        lacking = [key for key in GROUP_PARAMETERS if key not in values]
        if lacking:
            raise RecordingError(f"{where} 'scales' of {group!r} lacks {', '.join(lacking)} (a scale for each of "
                                 f"{', '.join(GROUP_PARAMETERS)})")
        for key in GROUP_PARAMETERS:
            if not _finite_number(values[key]) or values[key] <= 0:
                raise RecordingError(f"{where} 'scales' of {group!r}: {key} must be a finite number > 0 (a factor "
                                     f"of the nominal), got {_shown(values[key])}")


def _check_nominal(robot: RobotModel, nominal: ActuatorParams) -> None:
    """ValueError unless ``nominal`` is valid (:meth:`ActuatorParams.check`) and for
    ``robot``'s joints in model order: another robot's parameters were applied by index."""
    if list(nominal.joint_names) != list(robot.joint_names):
        raise ValueError(f"nominal: actuator parameters of other joints than {robot.description.name}'s "
                         f"({len(nominal.joint_names)} joints, {len(robot.joint_names)} expected, in model order)")
    nominal.check("nominal")


def replay(robot: RobotModel, rec: Recording, params: ActuatorParams, dt: float = 0.001) -> np.ndarray:
    """Play a recording's commands in the simulation; returns (T, k) simulated angles
    [rad] sampled as the recording's measured angles (read before each command), without
    sensor noise.

    Joints not in the recording hold ``meta["q0"]`` (default: the home posture).
    """
    from teleop.sim.simulator import PRECISE_SOLVER_ITERATIONS, Simulation

    if isinstance(dt, bool) or not isinstance(dt, (int, float)) or not math.isfinite(dt) or dt <= 0:
        raise ValueError(f"dt must be a finite physics step > 0 [s], got {dt!r}")
    params = params.copy()
    params.noise_std = np.zeros_like(params.noise_std)
    idx = np.array([robot.joint_index(j) for j in rec.joint_names])
    steps = int(round(rec.sample_dt / dt))
    if steps < 1 or abs(steps * dt - rec.sample_dt) > 1e-6:
        raise RecordingError(f"recording sample period {rec.sample_dt} s is not a multiple of the physics step {dt} s")
    fixed = bool(rec.meta.get("fixed_base", True))
    q = robot.home_configuration()
    if "q0" in rec.meta:
        q[NQ_BASE:] = np.asarray(rec.meta["q0"], dtype=float)
    q[NQ_BASE + idx] = rec.commanded[0]
    q[2] += float(rec.meta.get("base_height", 0.5 if fixed else 0.0))
    command = q[NQ_BASE:].copy()
    velocity = np.zeros(robot.n_joints)
    out = np.empty_like(rec.measured)
    with Simulation(robot, dt=dt, visual=False, fixed_base=fixed, actuator=params, collisions=not fixed,
                    solver_iterations=PRECISE_SOLVER_ITERATIONS) as sim:
        sim.reset(q)
        for i in range(len(rec.time)):
            out[i] = sim._true_joint_states()[0][idx]
            command[idx] = rec.commanded[i]
            if rec.commanded_velocity is not None:
                velocity[idx] = rec.commanded_velocity[i]
            sim.set_joint_targets(command, velocity)
            sim.step(steps)
    return out


def rmse(a: np.ndarray, b: np.ndarray) -> float:
    """Root-mean-square difference of two (T, k) arrays over all samples and joints [rad].
    ValueError for different shapes: broadcast, a (T, 1) against a (T, k) gave a number."""
    if np.shape(a) != np.shape(b):
        raise ValueError(f"a and b must have the same shape, got {np.shape(a)} and {np.shape(b)}")
    return float(np.sqrt(np.mean((a - b) ** 2)))


def excitation(robot: RobotModel, joints: list[str], duration: float, sample_dt: float,
               rng: np.random.Generator, amplitude: float = 0.35) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A persistently exciting command: per joint, three sines of random phase (0.3-2 Hz)
    around the home posture, faded in and out over 0.3 s, kept 0.05 rad inside the limits.

    Returns (time (T,) [s], angles (T, k) [rad], velocities (T, k) [rad/s]). ValueError for
    a ``duration``, ``sample_dt`` or ``amplitude`` [rad] that is not a finite number > 0.
    """
    for name, value in (("duration", duration), ("sample_dt", sample_dt), ("amplitude", amplitude)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    t = np.arange(int(round(duration / sample_dt))) * sample_dt
    fade = np.clip(np.minimum(t, duration - t) / 0.3, 0.0, 1.0)
    fade = fade * fade * (3 - 2 * fade)  # smoothstep: the command starts and ends at rest
    dfade = np.gradient(fade, sample_dt)
    home = robot.home_joints()
    q = np.empty((len(t), len(joints)))
    v = np.empty_like(q)
    for j, name in enumerate(joints):
        i = robot.joint_index(name)
        freqs = rng.uniform(0.3, 2.0, 3)
        phases = rng.uniform(0, 2 * np.pi, 3)
        lo, hi = robot.limits.lower[i] + 0.05, robot.limits.upper[i] - 0.05
        center = float(np.clip(home[i], lo, hi))
        amp = min(amplitude, 0.9 * (hi - lo) / 2) / 3
        wave = sum(amp * np.sin(2 * np.pi * f * t + p) for f, p in zip(freqs, phases))
        dwave = sum(amp * 2 * np.pi * f * np.cos(2 * np.pi * f * t + p) for f, p in zip(freqs, phases))
        # Shift the centre so the whole swing stays inside the limits.
        center = float(np.clip(center, lo + 3 * amp, hi - 3 * amp)) if hi - lo > 6 * amp else 0.5 * (lo + hi)
        q[:, j] = center + fade * wave
        v[:, j] = dfade * wave + fade * dwave
    return t, q, v


def make_test_recording(robot: RobotModel, nominal: ActuatorParams, groups: list[str], perturb: float, seed: int,
                        duration: float = 3.0, sample_dt: float = TEST_SAMPLE_DT, noise_std: float = 2e-4,
                        perturbed: tuple[str, ...] = DEFAULT_FIT) -> Recording:
    """A recording made in the simulation with hidden parameters: the latency and every
    scale factor in ``perturbed`` drawn uniformly in [1 - perturb, 1 + perturb] (the others
    stay 1), Gaussian noise of ``noise_std`` [rad] on the measured angles. The hidden
    values are in ``meta["truth"]``. ``duration`` [s] must give at least 3 samples (a
    recording's minimum; :func:`min_samples` says how many a meaningful fit needs)."""
    if not 0.0 <= perturb < 0.7:
        raise ValueError("perturb must be in [0, 0.7)")
    # Checked before the replay: a negative noise_std failed in numpy after it ("scale < 0").
    if not (math.isfinite(noise_std) and noise_std >= 0):
        raise ValueError(f"noise_std must be a finite number of radians >= 0, got {noise_std!r}")
    for name, value in (("duration", duration), ("sample_dt", sample_dt)):
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"{name} must be a finite number of seconds > 0, got {value!r}")
    if not groups:
        raise ValueError("groups must name at least one joint group or joint")
    _check_nominal(robot, nominal)
    samples = int(round(duration / sample_dt))   # as excitation() makes them
    if samples < 3:   # np.gradient in excitation() fails on fewer than 2; a recording holds 3
        raise ValueError(f"duration {duration:g} s gives {samples} samples at {1 / sample_dt:g} Hz: "
                         f"a recording needs at least 3")
    rng = np.random.default_rng(seed)
    truth = CalibrationParameters(
        latency=nominal.latency * (1.0 + rng.uniform(-perturb, perturb)),
        scales={g: {k: float(1.0 + rng.uniform(-perturb, perturb)) if k in perturbed else 1.0
                    for k in GROUP_PARAMETERS} for g in groups})
    joints = [j for g in groups for j in group_joints(robot, g)]
    t, q_cmd, v_cmd = excitation(robot, joints, duration, sample_dt, rng)
    rec = Recording(t, joints, q_cmd, np.zeros_like(q_cmd), v_cmd,
                    meta={"fixed_base": True, "base_height": 0.5, "q0": robot.home_joints().tolist(),
                          "groups": groups, "noise_std": noise_std, "perturb": perturb, "seed": seed,
                          "truth": truth.to_dict(), "source": "teleop calibrate-sim --make-test-recording"})
    clean = replay(robot, rec, apply_parameters(robot, nominal, truth))
    rec.measured = clean + rng.normal(0.0, noise_std, clean.shape)
    return rec


@dataclass
class CalibrationResult:
    """Outcome of :func:`calibrate`.

    Attributes:
        fitted: the fitted point (latency, scales).
        params: the fitted actuator parameters (nominal with the fit applied).
        rmse_before, rmse_after: joint RMSE [rad] of the nominal / fitted simulation.
        rmse_per_joint_before, rmse_per_joint_after: (k,) the same per recorded joint.
        noise_estimate: RMS of the fitted residual [rad] (the sensor noise if the fit is good).
        evaluations: number of simulated replays.
        recovery_error: parameter -> |fitted / hidden - 1| when the recording has a truth.
        data_warning: why the recording is too short for the fit to mean something
            (:func:`too_few_data`), or None.
        fit_warnings: why the fit may not mean what it says (:func:`fit_warnings`): a
            parameter on a bound of its range, a budget spent before converging.
    """

    fitted: CalibrationParameters
    params: ActuatorParams
    rmse_before: float
    rmse_after: float
    rmse_per_joint_before: np.ndarray
    rmse_per_joint_after: np.ndarray
    noise_estimate: float
    evaluations: int
    recovery_error: dict[str, float] = field(default_factory=dict)
    data_warning: str | None = None
    fit_warnings: list[str] = field(default_factory=list)
    #: Fitted groups the recording's truth has no parameters for (it hides them per other
    #: groups, e.g. right_arm for a fit of r_elbow): left out of ``recovery_error``, said.
    recovery_not_compared: list[str] = field(default_factory=list)

    def summary(self, joint_names: list[str]) -> dict:
        """The report as JSON-ready values; ``rmse_reduction`` is null where it is no number
        (:func:`rmse_reduction`), ``enough_data`` false (and ``warnings`` says why) for a fit
        of too few data."""
        return {
            "fitted": self.fitted.to_dict(),
            "enough_data": self.data_warning is None,
            "warnings": ([self.data_warning] if self.data_warning else []) + self.fit_warnings,
            "rmse_before_rad": self.rmse_before, "rmse_after_rad": self.rmse_after,
            "rmse_reduction": rmse_reduction(self.rmse_before, self.rmse_after),
            "rmse_per_joint_before_rad": dict(zip(joint_names, self.rmse_per_joint_before.tolist())),
            "rmse_per_joint_after_rad": dict(zip(joint_names, self.rmse_per_joint_after.tolist())),
            "noise_estimate_rad": self.noise_estimate, "evaluations": self.evaluations,
            "recovery_error": self.recovery_error,
            "max_recovery_error": max(self.recovery_error.values()) if self.recovery_error else None,
            "recovery_not_compared": self.recovery_not_compared,
        }


def fit_warnings(x: np.ndarray, lower: np.ndarray, upper: np.ndarray, groups: list[str], fit: tuple[str, ...],
                 budget_spent: bool, max_evaluations: int) -> list[str]:
    """What makes a fit's result doubtful, said in ``report.json`` and on stderr (they were
    written without a word: a recording whose times were 10x too long fitted three scales
    onto the bounds of their range, with "warnings": []).

    * a parameter at a bound of its range (within 0.1 %): the model could not explain the
      recording with any value in it (another servo or robot, times or units off);
    * the least-squares budget spent before convergence (``--max-evaluations``).
    """
    names = ["latency"] + [f"{group}.{key}" for group in groups for key in fit]
    out = []
    at_bound = [f"{name} ({'lower' if abs(v - lo) <= 1e-3 * max(abs(lo), 1.0) else 'upper'} bound)"
                for name, v, lo, hi in zip(names, x, lower, upper)
                if abs(v - lo) <= 1e-3 * max(abs(lo), 1.0) or abs(v - hi) <= 1e-3 * max(abs(hi), 1.0)]
    if at_bound:
        out.append(f"fitted at a bound of the range allowed: {', '.join(at_bound)}: no value in the range explains "
                   "the recording (another servo or robot? times or units off?)")
    if budget_spent:
        out.append(f"the fit stopped at its budget (--max-evaluations {max_evaluations}) before converging: a "
                   "larger budget may fit better")
    return out


def recovery_errors(fitted: CalibrationParameters, truth: dict, fit: tuple[str, ...] = GROUP_PARAMETERS
                    ) -> dict[str, float]:
    """|fitted / hidden - 1| per fitted parameter (``latency`` and ``group.parameter``)."""
    # A hidden latency of 0 (a nominal without latency) has no relative error: left out.
    out = {"latency": abs(fitted.latency / truth["latency"] - 1.0)} if truth["latency"] > 0 else {}
    for group, scales in fitted.scales.items():
        for key, value in scales.items():
            if group in truth["scales"] and key in fit:
                out[f"{group}.{key}"] = abs(value / truth["scales"][group][key] - 1.0)
    return out


def calibrate(robot: RobotModel, rec: Recording, nominal: ActuatorParams, groups: list[str] | None = None,
              max_evaluations: int = 200, progress: bool = True, fit: tuple[str, ...] = DEFAULT_FIT,
              source: str = "recording") -> CalibrationResult:
    """Fit latency and per-group scales so the replayed recording matches the measured one.

    Args:
        robot: the nominal model.
        rec: the recording (its ``meta["groups"]`` is the default ``groups``).
        nominal: nominal actuator parameters (the starting point; scales are relative to it).
        groups: groups (or joints) to calibrate; every joint of each must be recorded.
        max_evaluations: budget of simulated replays. Below :func:`min_evaluations` the fit
            takes its start point (after 2 + (1 + n) replays, whatever the budget): the CLI
            refuses such a budget.
        progress: show a progress bar of the replays.
        fit: which of :data:`GROUP_PARAMETERS` to fit (the others stay nominal).
        source: the recording's name in error messages and the data warning (its file).
    """
    from scipy.optimize import least_squares

    unknown = set(fit) - set(GROUP_PARAMETERS)
    if unknown:
        raise ValueError(f"cannot fit {sorted(unknown)}: parameters are {GROUP_PARAMETERS}")
    if isinstance(max_evaluations, bool) or not isinstance(max_evaluations, int) or max_evaluations < 1:
        raise ValueError(f"max_evaluations must be an integer >= 1, got {max_evaluations!r}")
    _check_nominal(robot, nominal)
    fit = tuple(k for k in GROUP_PARAMETERS if k in fit)
    check_recording(robot, rec, source)   # before any replay: a bad recording fails at once
    groups = groups_to_fit(robot, rec, groups, source)
    nominal_latency = nominal.latency if nominal.latency > 0 else 0.01
    # Start from the nominal itself (rmse_before is the nominal's): without a nominal
    # latency, 10 ms is only the unit of the latency's parameter and the fit starts at 0.
    start = CalibrationParameters.nominal(nominal.latency, groups)
    bar = progress_bar(total=max_evaluations, desc="calibrating (replays)", enabled=progress)
    evaluations = [0]

    def simulate(x: np.ndarray) -> np.ndarray:
        point = CalibrationParameters.from_vector(x, nominal_latency, groups, fit)
        evaluations[0] += 1
        bar.update(1)
        return replay(robot, rec, apply_parameters(robot, nominal, point))

    def residual(x: np.ndarray) -> np.ndarray:
        r = simulate(x) - rec.measured
        bar.set_postfix(rmse=f"{np.sqrt(np.mean(r ** 2)):.2e}")
        return r.ravel()

    x0 = start.vector(nominal_latency, fit)
    before = simulate(x0)
    lower = np.full_like(x0, SCALE_BOUNDS[0])
    upper = np.full_like(x0, SCALE_BOUNDS[1])
    lower[0], upper[0] = 0.0, 4.0  # latency: 0 .. 4 x nominal
    # diff_step 1e-3: large enough that the finite differences see the whole-step latency
    # blend and the friction clamp change, small against the 5% we must resolve.
    solution = least_squares(residual, x0, bounds=(lower, upper), method="trf", x_scale=1.0, diff_step=1e-3,
                             max_nfev=max(1, (max_evaluations - 2) // (len(x0) + 1)), xtol=1e-6, ftol=1e-10)
    fitted = CalibrationParameters.from_vector(solution.x, nominal_latency, groups, fit)
    after = simulate(solution.x)
    bar.close()
    per_joint = lambda sim: np.sqrt(np.mean((sim - rec.measured) ** 2, axis=0))  # noqa: E731
    result = CalibrationResult(
        fitted=fitted, params=apply_parameters(robot, nominal, fitted),
        rmse_before=rmse(before, rec.measured), rmse_after=rmse(after, rec.measured),
        rmse_per_joint_before=per_joint(before), rmse_per_joint_after=per_joint(after),
        noise_estimate=rmse(after, rec.measured), evaluations=evaluations[0],
        data_warning=too_few_data(len(rec.time), len(rec.joint_names), len(x0), source),
        # status 0: scipy's evaluation budget (max_nfev) ran out before a tolerance was met.
        fit_warnings=fit_warnings(solution.x, lower, upper, groups, fit, solution.status == 0, max_evaluations))
    if "truth" in rec.meta:
        result.recovery_error = recovery_errors(fitted, rec.meta["truth"], fit)
        result.recovery_not_compared = [g for g in fitted.scales if g not in rec.meta["truth"]["scales"]]
    return result
