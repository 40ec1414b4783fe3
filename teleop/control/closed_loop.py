"""Closed-loop runs of the whole-body controller in the pybullet simulation.

The robot-station pattern: the controller ticks at 100 Hz (open loop on its own state),
its joint command goes to the position-controlled simulated joints, and the simulation
advances 10 physics steps of 1 ms per tick. :func:`run_closed_loop` measures what matters
for balance and tracking; retargeting (real human motion) and the tests drive it.

Command interpolation matters: pybullet's position motors are stiff, so a joint target
that jumps every 10 ms with zero target velocity makes them stop and go at 100 Hz; the
feet then lose contact within each tick and the robot ratchets backwards. Measured on an
8 cm squat and back (6 s): targets stepped at 100 Hz gave 33 mm of foot slip and 1240 of
6000 physics steps without left-foot contact with the servo gain at 0.3, and 56 mm and
1944 with the gain at 1.0 (feeding the commanded velocity as the motors' target velocity
did not help); the same commands linearly interpolated over the 10 physics steps of each
tick (a first-order hold, what a joint servo does between set-points) gave 0.06-0.07 mm
and 8-10. A linear ramp still jumps in velocity at every tick, which the servos put
through in one physics step; the default, ``interpolate="spline"``, plays the commands as
a quadratic B-spline instead (continuous velocity, see teleop.sim.target_spline), as the
robot station does; ``"linear"`` keeps the ramp, ``False`` the step.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Sequence

import numpy as np
import pinocchio as pin

from retarget.zmp import ZmpPrefilter
from retarget.references import ReferenceTrajectory, RobotReferences
from teleop.control.controller import SolveStatus
from teleop.control.limits import SupportPolygonConstraint
from teleop.control.stack import StackConfig
from teleop.control.tracker import ReferenceTracker, references_from_configuration
from teleop.robot.model import RobotModel


def synthetic_references(robot: RobotModel, duration: float = 6.0, rate: float = 100.0,
                         q0: np.ndarray | None = None) -> ReferenceTrajectory:
    """A whole-body test motion from the home posture, smooth from rest to rest.

    Over ``duration``: both hands reach forward (+12 cm) and up (+10 cm) and come back, the
    CoM sways 3 cm to the left, 3 cm to the right and back to the middle, the waist goes
    down 8 cm and back up, and the torso pitches forward by 0.25 rad and back.
    """
    _check_positive(duration=duration, rate=rate)
    start = references_from_configuration(robot, robot.home_configuration() if q0 is None else q0)
    times = np.arange(0.0, duration + 0.5 / rate, 1.0 / rate)
    bump = 0.5 * (1.0 - np.cos(2.0 * np.pi * times / duration))   # 0 -> 1 -> 0, zero slope at the ends
    sway = np.sin(2.0 * np.pi * times / duration) * np.sin(np.pi * times / duration) ** 2
    samples = []
    for t, b, s in zip(times, bump, sway):
        reach = np.array([0.12, 0.0, 0.10]) * b
        samples.append(replace(start, t=float(t),
                               com_xy=start.com_xy + np.array([0.0, 0.03 * s / 0.65]),
                               waist_height=start.waist_height - 0.08 * b,
                               left_hand=start.left_hand + reach,
                               right_hand=start.right_hand + reach,
                               torso=start.torso + np.array([0.25 * b, 0.0, 0.0])))
    return ReferenceTrajectory.from_samples(samples, label="synthetic whole-body", source="synthetic_references")


def _check_positive(**values: float | None) -> None:
    """ValueError naming the first argument that is not a positive finite number (None
    skipped): a zero period divided by zero deep inside, and a NaN one made NaN tick counts."""
    for name, value in values.items():
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
                or not (math.isfinite(value) and value > 0):
            raise ValueError(f"{name} must be a positive finite number, got {value!r}")


def _per_tick(references, n_ticks: int, dt: float, t0: float) -> list[RobotReferences]:
    """One reference sample per control tick (interpolated, or the latest sample)."""
    if isinstance(references, ReferenceTrajectory):
        times = t0 + dt * np.arange(n_ticks)
        return [RobotReferences.from_flat(t, references.interpolate(t)) for t in times]
    samples = list(references)
    out, i = [], 0
    for k in range(n_ticks):
        t = t0 + k * dt
        while i + 1 < len(samples) and samples[i + 1].t <= t + 1e-9:
            i += 1
        out.append(samples[i])
    return out


def run_closed_loop(references: ReferenceTrajectory | Sequence[RobotReferences], *,
                    robot: RobotModel | None = None, stack: StackConfig | str | Path = "default",
                    mode: str | None = None, control_dt: float = 0.01, physics_steps: int = 10,
                    settle_time: float = 0.3, duration: float | None = None, feedforward: bool = True,
                    interpolate: bool | str = "spline", zmp_correction: bool | dict = False, gui: bool = False,
                    trace: list | None = None) -> dict:
    """Track ``references`` with the controller in the pybullet simulation.

    Args:
        references: a trajectory (interpolated at the control rate) or timestamped samples
            (zero-order hold); times are shifted so that the first sample plays first.
        robot, stack, mode, feedforward: the controller (see :class:`ReferenceTracker`).
        control_dt: controller period [s]; the simulation does ``physics_steps`` steps of
            ``control_dt / physics_steps`` per tick.
        settle_time: time [s] spent holding the first references before playing them (the
            simulated robot settles on its feet: right after ``Simulation.reset`` pybullet
            rocks it onto one foot's outer edge for ~20 ms, with or without a controller).
        duration: how much of the references to play [s] (default: all).
        interpolate: how joint targets move over the physics steps of each tick:
            "spline" (True, default), "linear", or False (stepped once per tick); see
            the module docstring.
        zmp_correction: pre-filter the CoM reference with :class:`retarget.zmp.ZmpPrefilter`
            (Eq. 2.15); a dict gives its keyword arguments (margins, smoothing filter bounds).
        trace: if a list, one dict per tick (settling ones flagged) is appended to it (time, status, the
            reference and commanded CoM (2,) [m], measured CoM (3,) [m], measured CoP (2,) [m]
            and its margins [m], foot slip [m], commanded and measured q) - for diagnosing a fall.

    Returns:
        ``{"fell", "max_foot_slip_mm", "min_cop_margin_mm", "min_cop_margin_initial_mm",
        "hand_rms_cm", "hand_max_cm",
        "com_rms_cm", "waist_rms_cm", "max_joint_tracking_error_rad", "statuses",
        "timing", "ticks", "duration_s", "wall_time_s", "all_ok"}``. ``fell`` is true if
        any link other than the feet touched the ground or the base dropped below half its
        initial height (the run stops there); ``all_ok`` if every tick's status was OK;
        the CoP margin is the signed distance of the measured centre of pressure to
        the support polygon of the simulated feet at that tick (> 0 inside; the ``_initial``
        one to the polygon of the feet where they started); it and the RMS errors are over the played
        ticks (after settling), measured in the simulation against the references; the
        foot slip is over every tick.
    """
    # Checked before anything starts (the simulation, the tracker).
    _check_positive(control_dt=control_dt, physics_steps=physics_steps, duration=duration)
    if int(physics_steps) != physics_steps:  # (2.5 steps per tick would truncate silently)
        raise ValueError(f"physics_steps must be a whole number, got {physics_steps!r}")
    if not (isinstance(settle_time, (int, float, np.integer, np.floating)) and math.isfinite(settle_time)
            and settle_time >= 0):
        raise ValueError(f"settle_time must be a finite number >= 0 [s], got {settle_time!r}")
    from teleop.sim.simulator import Simulation  # pybullet only when running in the loop
    from teleop.sim.target_spline import TickInterpolator

    robot = robot if robot is not None else RobotModel()
    if isinstance(references, ReferenceTrajectory):
        t_first = float(references.times[0])
        total = references.duration if duration is None else duration
    else:
        references = list(references)
        t_first = float(references[0].t)
        total = (references[-1].t - t_first) if duration is None else duration
    n_play = int(round(total / control_dt)) + 1
    n_settle = int(round(settle_time / control_dt))
    played = _per_tick(references, n_play, control_dt, t_first)
    # Settling holds the first sample (stamped before it, so feed-forward stays zero).
    schedule = [replace(played[0], t=t_first - (n_settle - k) * control_dt) for k in range(n_settle)] + played

    tracker = ReferenceTracker(robot, stack, dt=control_dt, mode=mode, feedforward=feedforward)
    q0 = tracker.q.copy()
    physics_dt = control_dt / physics_steps
    started = time.perf_counter()
    with Simulation(robot, dt=physics_dt, gui=gui, visual=False) as sim:
        sim.reset(q0)
        frames = robot.description.frames
        sole_links = {side: frames[f"{side}_sole"] for side in ("left", "right")}
        hand_links = {side: frames[f"{side}_hand"] for side in ("left", "right")}
        soles0 = {side: sim.link_position(link) for side, link in sole_links.items()}
        base_height0 = float(q0[2])
        # The metric uses the soles' polygon whether or not the stack constrains the CoM.
        support, com_height = robot.double_support(q0)
        polygon = SupportPolygonConstraint(margin=0.0)
        polygon.set_polygon(support)
        feet_polygon = SupportPolygonConstraint(margin=0.0)
        statuses: Counter = Counter()
        data = robot.model.createData()
        fell = False
        max_slip = 0.0
        min_cop_margin = min_cop_margin_initial = np.inf
        hand_errors, com_errors, waist_errors, joint_errors = [], [], [], []
        if interpolate:
            interpolator = TickInterpolator(q0[7:], "spline" if interpolate is True else interpolate)
        else:
            interpolator = None
        prefilter = None
        if zmp_correction:
            prefilter = ZmpPrefilter(dt=control_dt, **(zmp_correction if isinstance(zmp_correction, dict) else {}))
        for k, refs in enumerate(schedule):
            if prefilter is not None:
                # Eq. 2.15 as a pre-filter of the CoM reference, and the waist height's
                # vertical acceleration bounded (retarget.zmp.ZmpPrefilter).
                refs = replace(refs, com_xy=prefilter.step(refs.com_xy, com_height, polygon.vertices),
                               waist_height=prefilter.waist_height(refs.waist_height, tracker.waist_range))
            q_command, _, status, _ = tracker.step(refs)
            statuses[status.value] += 1
            joints = q_command[7:]
            if interpolator is not None:
                sim.step_through(*interpolator.targets(joints, physics_steps, control_dt))
            else:
                sim.set_joint_targets(joints)
                sim.step(physics_steps)
            state = sim.state()
            if sim.other_contacts() > 0 or state.q[2] < 0.5 * base_height0:
                fell = True
                break
            for side, link in sole_links.items():
                max_slip = max(max_slip, float(np.linalg.norm(sim.link_position(link) - soles0[side])))
            if k < n_settle and trace is None:
                continue
            cop = sim.measured_cop()
            # The CoP is judged against the feet where they stand now: a foot that slipped
            # a few mm carries its support polygon with it.
            feet_polygon.set_polygon(sim.support_polygon())
            cop_margin = feet_polygon.margin_to_polygon(cop) if np.all(np.isfinite(cop)) else np.nan
            if trace is not None:
                trace.append({"t": refs.t, "settling": k < n_settle, "status": status.value,
                              "message": tracker.status_message,
                              "com_ref": np.array(refs.com_xy, dtype=float),
                              "com_cmd": pin.centerOfMass(robot.model, data, q_command)[:2].copy(),
                              "com": pin.centerOfMass(robot.model, data, state.q).copy(),
                              "cop": cop, "cop_margin": cop_margin,
                              "cop_margin_initial": (polygon.margin_to_polygon(cop) if np.all(np.isfinite(cop))
                                                     else np.nan),
                              "slip": max_slip, "q_cmd": q_command.copy(), "q": state.q.copy(), "refs": refs})
            if k < n_settle:
                continue
            if np.all(np.isfinite(cop)):
                min_cop_margin = min(min_cop_margin, cop_margin)
                min_cop_margin_initial = min(min_cop_margin_initial, polygon.margin_to_polygon(cop))
            for side, link in hand_links.items():
                hand_errors.append(np.linalg.norm(sim.link_position(link) - getattr(refs, f"{side}_hand")))
            com = pin.centerOfMass(robot.model, data, state.q)
            com_errors.append(np.linalg.norm(com[:2] - refs.com_xy))
            waist_errors.append(abs(state.q[2] - refs.waist_height))
            joint_errors.append(float(np.max(np.abs(state.q[7:] - q_command[7:]))))

    def rms(values) -> float:
        return float(np.sqrt(np.mean(np.square(values)))) if values else float("nan")

    return {
        "fell": fell,
        "max_foot_slip_mm": max_slip * 1e3,
        "min_cop_margin_mm": float(min_cop_margin * 1e3) if np.isfinite(min_cop_margin) else float("nan"),
        "min_cop_margin_initial_mm": (float(min_cop_margin_initial * 1e3) if np.isfinite(min_cop_margin_initial)
                                      else float("nan")),
        "hand_rms_cm": rms(hand_errors) * 100,
        "hand_max_cm": float(np.max(hand_errors) * 100) if hand_errors else float("nan"),
        "com_rms_cm": rms(com_errors) * 100,
        "waist_rms_cm": rms(waist_errors) * 100,
        "max_joint_tracking_error_rad": float(np.max(joint_errors)) if joint_errors else float("nan"),
        "statuses": dict(statuses),
        "timing": tracker.timing_stats(),
        "ticks": len(schedule),
        "duration_s": len(played) * control_dt,
        "wall_time_s": time.perf_counter() - started,
        "all_ok": statuses.get(SolveStatus.OK.value, 0) == sum(statuses.values()),
    }
