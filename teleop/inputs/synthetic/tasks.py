"""The tasks of the synthetic operator: each lays out phases on a timeline and describes its
motion as a :class:`~teleop.inputs.synthetic.body.Plan` for one trial.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from teleop.inputs.skeleton import SEGMENT_INDEX
from teleop.inputs.synthetic.body import SIDES, Body, Plan, realise
from teleop.inputs.synthetic.performer import Performer
from teleop.inputs.synthetic.profiles import SmoothNoise, bump, keyed, smoothstep


#: Task names understood by :func:`~teleop.inputs.synthetic.generate.generate`.
TASKS: tuple[str, ...] = ("reach_forward", "pick_floor", "place_high", "squat", "side_reach", "put_aside")

#: One line per task: what the synthetic person does.
TASK_DESCRIPTIONS: dict[str, str] = {
    "reach_forward": "right hand reaches a point in front at chest height and returns",
    "pick_floor": "bend knees and trunk, both hands to an object on the floor in front, stand up holding it at "
                  "waist height, then let the arms down",
    "place_high": "right hand places something forward-right above head height and returns",
    "squat": "squat down and up, arms raised forward for balance",
    "side_reach": "left hand reaches far to the left, with lateral trunk bend and weight shift to the left foot",
    "put_aside": "both hands take a box at the front-left, carry it with torso yaw and put it down at the "
                 "front-right (like the Xsens put-aside-box demonstrations)",
}
#: Range of the per-trial duration factor (motion duration / nominal duration).
DURATION_FACTOR_RANGE: tuple[float, float] = (0.75, 1.35)
#: Range [s] of the still N-pose at the start and at the end of every trial, each drawn
#: uniformly per trial (calibration window).
STILL_S: tuple[float, float] = (0.5, 0.6)

_RIGHT, _LEFT = 0, 1


def solve_along(base: np.ndarray, direction: np.ndarray, centre: np.ndarray, radius: float) -> float:
    """Largest r with |base + r * direction - centre| = radius (direction unit).

    Used to place a task target at a chosen arm extension from the shoulder. Without a
    solution (the line misses the sphere) returns the point of closest approach.
    """
    q = base - centre
    along = float(direction @ q)
    discriminant = along * along - float(q @ q) + radius * radius
    return -along + np.sqrt(discriminant) if discriminant > 0.0 else -along


def secant(residual: Callable[[np.ndarray], np.ndarray], x0: np.ndarray, x1: np.ndarray, lower: float,
           upper: float, iterations: int = 6, tolerance: float = 1e-4) -> np.ndarray:
    """Element-wise secant search for residual(x) = 0, x kept in [lower, upper].

    ``residual`` maps an array of candidates to an array of residuals of the same shape
    (each element independent, e.g. one body posture per frame).
    """
    x0, x1 = np.asarray(x0, dtype=float), np.asarray(x1, dtype=float)
    r0 = residual(x0)
    for _ in range(iterations):
        r1 = residual(x1)
        if np.all(np.abs(r1) < tolerance):
            break
        slope_ok = np.abs(r1 - r0) > 1e-12
        step = np.where(slope_ok, r1 * (x1 - x0) / np.where(slope_ok, r1 - r0, 1.0), 0.0)
        x0, r0, x1 = x1, r1, np.clip(x1 - step, lower, upper)
    return x1


# ---------------------------------------------------------------------------- trials
@dataclass
class Trial:
    """Everything a task builder needs: body, style, randomness, timeline, noise."""

    task: str
    seed: int
    rate_hz: float
    speed: float
    performer: Performer
    body: Body
    rng: np.random.Generator
    times: np.ndarray = field(default_factory=lambda: np.zeros(0))
    phases: dict[str, tuple[float, float]] = field(default_factory=dict)

    @property
    def height(self) -> float:
        return self.body.height

    def layout(self, nominal: list[tuple[str, float]]) -> list[float]:
        """Lay the phases out after the initial still period; sets ``times`` and ``phases``.

        Args:
            nominal: (phase name, duration at speed 1 [s]) in order.
        Returns:
            phase boundary times [s]: start of the first phase, then the end of each.
        """
        durations = np.array([d for _, d in nominal])
        jitter = self.rng.uniform(0.9, 1.1, len(durations))
        durations = durations * jitter * durations.sum() / (durations * jitter).sum() / self.speed
        still_before, still_after = self.rng.uniform(*STILL_S, 2)
        bounds = [still_before]
        for (name, _), duration in zip(nominal, durations):
            self.phases[name] = (bounds[-1], bounds[-1] + duration)
            bounds.append(bounds[-1] + duration)
        self.phases["still_start"] = (0.0, still_before)
        self.phases["still_end"] = (bounds[-1], bounds[-1] + still_after)
        n_frames = int(np.floor((bounds[-1] + still_after) * self.rate_hz)) + 1
        self.times = np.arange(n_frames) / self.rate_hz
        return bounds

    @property
    def motion_window(self) -> tuple[float, float]:
        return self.phases["still_start"][1], self.phases["still_end"][0]

    def make_noise(self) -> dict[str, SmoothNoise]:
        p = self.performer
        return {
            "sway": SmoothNoise(self.rng, (2,), (0.1, 0.6), p.sway_mm * 1e-3),
            "drift": SmoothNoise(self.rng, (2, 3), (0.3, 2.0), p.drift_mm * 1e-3),
            "tremor": SmoothNoise(self.rng, (2, 3), (8.0, 12.0), p.tremor_mm * 1e-3),
            "trunk": SmoothNoise(self.rng, (3,), (0.2, 1.5), 0.004),
            "arm": SmoothNoise(self.rng, (2, 2), (0.3, 2.0), 0.003),
            "gaze": SmoothNoise(self.rng, (3,), (0.2, 1.0), 0.02 * self.height),
        }

    def envelope(self, times: np.ndarray) -> np.ndarray:
        """(T,) 0 at the first and last sample, 1 after 0.25 s: noise fades in and out."""
        end = self.times[-1] if len(self.times) else times[-1]
        return smoothstep(times / 0.25) * smoothstep((end - times) / 0.25)

    def still_plan(self, times: np.ndarray, noise: dict[str, SmoothNoise], relaxed: bool = True) -> Plan:
        """The plan of a person standing in the N-pose with sway.

        With ``relaxed``, during the motion window the knees unlock and the arms relax (a
        little elbow and shoulder flexion); without, the N-pose is kept throughout.
        """
        n = len(times)
        p = self.performer
        start, stop = self.motion_window
        envelope = self.envelope(times)
        active = keyed(times, [(start, 0.0), (min(start + 0.6, stop), 1.0), (max(stop - 0.6, start), 1.0),
                               (stop, 0.0)]) * float(relaxed)
        arm = np.zeros((n, 2, 5))
        arm[:, :, 3] = p.relaxed_elbow * active[:, None]           # relaxed elbows bend a little
        arm[:, :, :2] = (0.05, 0.03) * active[:, None, None] + noise["arm"](times) * envelope[:, None, None]
        return Plan(
            times=times,
            pelvis_drop=np.zeros(n),
            pelvis_shift=np.zeros((n, 2)),
            pelvis_angles=np.zeros((n, 3)),
            trunk=noise["trunk"](times) * envelope[:, None],
            clavicle=np.zeros((n, 2, 2)),
            arm=arm,
            wrist=np.zeros((n, 2, 2)),
            hand_target=np.zeros((n, 2, 3)),
            hand_weight=np.zeros((n, 2)),
            gaze_target=np.tile(self.body.rest("head") + (3.0, 0.0, 0.0), (n, 1)),
            gaze_weight=np.zeros(n),
            com_shift=noise["sway"](times) * envelope[:, None],
            activity=active,
            elbow_out=p.elbow_out,
            knee_out=0.1,
        )

    def hand_noise(self, times: np.ndarray, noise: dict[str, SmoothNoise]) -> np.ndarray:
        """(T, 2, 3) slow drift + physiological tremor added to the hand targets [m]."""
        return (noise["drift"](times) + noise["tremor"](times)) * self.envelope(times)[:, None, None]

    def curve(self, line: np.ndarray, scale: float) -> np.ndarray:
        """A random curvature vector perpendicular to ``line``, |v| = scale * curvature [m]."""
        v = self.rng.normal(size=3)
        unit = line / max(np.linalg.norm(line), 1e-9)
        v -= (v @ unit) * unit
        return v / max(float(np.linalg.norm(v)), 1e-9) * scale * self.performer.curvature

    def side_delays(self) -> np.ndarray:
        """(2,) onset delays of the right and left hand [s]: one hand leads, the other lags
        by |N(0, 40 ms)| (clipped at 120 ms); both stay inside the motion window."""
        delays = np.zeros(2)
        delays[int(self.rng.integers(2))] = min(abs(self.rng.normal(0.0, 0.04)), 0.12)
        return delays

    def lag(self, start: float, stop: float, extra: float = 0.0) -> float:
        """Hand onset after the trunk onset: the performer's lag (+ extra) times the phase."""
        return start + (self.performer.hand_lag + extra) * (stop - start)


def _one_hand_reach(trial: Trial, *, side: int, phases: list[tuple[str, float]], target: np.ndarray,
                    free_axis: int, extension: float, trunk: np.ndarray, pelvis_share: tuple[float, float, float],
                    clavicle: tuple[float, float], drop: float, com_shift: np.ndarray, pronation: float,
                    radial: float, other_arm_abduction: float = 0.0):
    """A one-handed reach: out (phase 1), hold (phase 2), back (phase 3), whole body helping.

    Args:
        side: _RIGHT or _LEFT hand.
        phases: the three (name, nominal duration [s]).
        target: (3,) wrist target [m]; its ``free_axis`` coordinate is solved so the arm
            is at ``extension`` x full length from the shoulder at the hold posture.
        trunk: (3,) total trunk (flexion, bend left, rotation left) at the target [rad];
            the pelvis takes ``pelvis_share`` of each, the spine the rest.
        clavicle: (elevation, protraction) of the reaching side [rad].
        drop: pelvis lowering [m]; com_shift: (2,) CoM ground shift at the target [m].
        pronation, radial: forearm pronation and wrist radial deviation at the target [rad].
        other_arm_abduction: abduction of the free arm (counterbalance) [rad].
    Returns:
        (plan, targets) for :func:`generate`.
    """
    h, p, body = trial.height, trial.performer, trial.body
    t0, t1, t2, t3 = trial.layout(phases)
    name = SIDES[side]
    line = target - body.rest(f"{name}_hand")
    curve_out, curve_back = trial.curve(line, 0.06 * h), trial.curve(line, 0.06 * h)
    hand_start = trial.lag(t0, t1)
    share = np.array(pelvis_share)
    noise = trial.make_noise()

    def build(times, target):
        plan = trial.still_plan(times, noise)
        s = keyed(times, [(t0, 0.0), (t1, 1.0), (t2, 1.0), (t3, 0.0)])
        plan.trunk += s[:, None] * trunk * (1.0 - share)
        plan.pelvis_angles += s[:, None] * trunk * share
        plan.clavicle[:, side] += s[:, None] * clavicle
        plan.pelvis_drop += s * drop
        plan.com_shift += s[:, None] * com_shift
        plan.arm[:, 1 - side, 1] += s * other_arm_abduction
        w = keyed(times, [(hand_start, 0.0), (t1, 1.0), (t2, 1.0), (t3, 0.0)])
        plan.hand_weight[:, side] = w
        plan.hand_target[:, side] = (target + bump(times, hand_start, t1)[:, None] * curve_out
                                     + bump(times, t2, t3)[:, None] * curve_back)
        plan.hand_target += trial.hand_noise(times, noise)
        plan.arm[:, side, 4] += pronation * w
        plan.wrist[:, side, 1] += radial * w
        plan.gaze_target[:] = target + noise["gaze"](times)
        plan.gaze_weight = p.gaze * keyed(times, [(t0, 0.0), (t0 + 0.7 * (t1 - t0), 1.0), (t2, 1.0), (t3, 0.0)])
        return plan

    target = np.array(target, dtype=float)
    direction = np.eye(3)[free_axis]
    peak = np.array([0.5 * (t1 + t2)])
    for _ in range(3):     # the shoulder moves a little with the CoM balance of the arm
        positions, _, _ = realise(body, build(peak, target))
        shoulder = positions[0, SEGMENT_INDEX[f"{name}_upper_arm"]]
        target[free_axis] = solve_along(target * (1.0 - direction), direction, shoulder,
                                        extension * body.reach())
    return build(trial.times, target), {f"{name}_hand": target}


def _task_reach_forward(trial: Trial):
    """Right wrist to a point in front at chest height (0.70-0.75 H), 0.03-0.12 H right of
    the midline, at the performer's arm extension; trunk leans and turns a little."""
    rng, h, p = trial.rng, trial.height, trial.performer
    return _one_hand_reach(
        trial, side=_RIGHT, phases=[("reach", 1.7), ("hold", 0.5), ("return", 2.0)],
        target=np.array([0.0, -rng.uniform(0.03, 0.12) * h, rng.uniform(0.70, 0.75) * h]), free_axis=0,
        extension=np.clip(p.reach_extension + rng.uniform(-0.02, 0.02), 0.85, 0.97),
        trunk=p.amplitude * p.trunk_use * np.array([rng.uniform(0.05, 0.18), rng.uniform(-0.03, 0.03),
                                                    rng.uniform(0.05, 0.2)]),
        pelvis_share=(0.3, 0.0, 0.3), clavicle=(0.03, rng.uniform(0.05, 0.15)),
        drop=rng.uniform(0.0, 0.004) * h, com_shift=np.array([rng.uniform(0.004, 0.012) * h, 0.0]),
        pronation=rng.uniform(0.0, 0.5), radial=rng.uniform(0.0, 0.2))


def _task_place_high(trial: Trial):
    """Right wrist to a point above the head (1.02-1.06 H), forward and 0-0.07 H right of
    the shoulder; the clavicle elevates and the trunk extends and bends away a little."""
    rng, h, p = trial.rng, trial.height, trial.performer
    return _one_hand_reach(
        trial, side=_RIGHT, phases=[("reach", 1.8), ("place", 0.6), ("return", 2.1)],
        target=np.array([0.0, -rng.uniform(0.105, 0.17) * h, rng.uniform(1.02, 1.06) * h]), free_axis=0,
        extension=np.clip(p.reach_extension + rng.uniform(-0.02, 0.02), 0.85, 0.97),
        trunk=p.amplitude * np.array([-rng.uniform(0.0, 0.08), rng.uniform(0.02, 0.08), rng.uniform(0.0, 0.1)]),
        pelvis_share=(0.2, 0.0, 0.3), clavicle=(rng.uniform(0.15, 0.3), rng.uniform(0.0, 0.1)),
        drop=rng.uniform(0.0, 0.004) * h, com_shift=np.array([rng.uniform(-0.004, 0.008) * h, 0.0]),
        pronation=rng.uniform(0.2, 0.8), radial=rng.uniform(0.0, 0.2))


def _task_side_reach(trial: Trial):
    """Left wrist far to the left (0.55-0.78 H high), with a lateral trunk bend to the left
    and 45-80 % of the way of the CoM towards the left ankle; the right arm counterbalances."""
    rng, h, p, body = trial.rng, trial.height, trial.performer, trial.body
    to_left_foot = abs(body.rest("left_foot")[1] - body.rest_com[1])
    return _one_hand_reach(
        trial, side=_LEFT, phases=[("reach", 1.8), ("hold", 0.6), ("return", 2.1)],
        target=np.array([rng.uniform(-0.02, 0.10) * h, 0.0, rng.uniform(0.55, 0.78) * h]), free_axis=1,
        extension=np.clip(p.reach_extension + rng.uniform(-0.02, 0.02), 0.85, 0.97),
        trunk=p.amplitude * np.array([rng.uniform(0.0, 0.1), rng.uniform(0.10, 0.25) * p.trunk_use,
                                      rng.uniform(-0.05, 0.1)]),
        pelvis_share=(0.3, 0.15, 0.3), clavicle=(rng.uniform(0.05, 0.15), rng.uniform(0.0, 0.08)),
        drop=rng.uniform(0.002, 0.008) * h, com_shift=np.array([0.0, rng.uniform(0.45, 0.8) * to_left_foot]),
        pronation=rng.uniform(0.6, 1.2), radial=rng.uniform(0.0, 0.2),
        other_arm_abduction=rng.uniform(0.0, 0.15))


def _task_squat(trial: Trial):
    """Pelvis down 0.17-0.26 H (x the performer's depth) with 20-37 deg of trunk lean, arms
    raised forward to about horizontal for balance, then back up."""
    rng, h, p = trial.rng, trial.height, trial.performer
    t0, t1, t2, t3 = trial.layout([("down", 2.0), ("hold", 0.5), ("up", 2.0)])
    drop = p.squat_depth * rng.uniform(0.17, 0.26) * h
    trunk_flexion = rng.uniform(0.35, 0.65) * p.amplitude
    com_forward = rng.uniform(0.0, 0.012) * h
    # Arms about horizontal in the world: shoulder flexion relative to the trunk adds the
    # trunk's own forward tilt.
    arms = np.array([rng.uniform(1.3, 1.6) + 0.8 * trunk_flexion, rng.uniform(0.0, 0.15), 0.0,
                     rng.uniform(0.05, 0.3), rng.uniform(0.5, 1.3)])
    asymmetry = np.array([rng.normal(0.0, 0.06), rng.normal(0.0, 0.04), 0.0, rng.normal(0.0, 0.05), 0.0])
    arm_lead = rng.uniform(0.15, 0.35) * (t1 - t0)
    delays = trial.side_delays()
    noise = trial.make_noise()

    def build(times, _unused=None):
        plan = trial.still_plan(times, noise)
        s = keyed(times, [(t0, 0.0), (t1, 1.0), (t2, 1.0), (t3, 0.0)])
        plan.pelvis_drop += s * drop
        plan.pelvis_angles[:, 0] += s * 0.6 * trunk_flexion
        plan.trunk[:, 0] += s * 0.4 * trunk_flexion
        plan.com_shift[:, 0] += s * com_forward
        for k, sign in ((_RIGHT, -0.5), (_LEFT, 0.5)):
            delay = delays[k]
            raise_ = keyed(times, [(t0 + delay, 0.0), (t1 - arm_lead + delay, 1.0), (t2 + delay, 1.0),
                                   (t3 - (0.12 - delay) - 0.05 * (t3 - t2), 0.0)])
            plan.arm[:, k] += raise_[:, None] * (arms + sign * asymmetry)
        plan.clavicle[:, :, 1] += 0.08 * s[:, None]
        plan.gaze_weight = 0.6 * p.gaze * s
        return plan

    return build(trial.times), {}


def _task_pick_floor(trial: Trial):
    """Both wrists down to the sides of an object on the floor in front (wrists 0.09-0.11 H
    high), by trunk flexion (by strategy) and as much knee bend as needed; then stand up
    holding it at waist height (0.57-0.62 H), and let the arms down."""
    rng, h, p, body = trial.rng, trial.height, trial.performer, trial.body
    t0, t1, t2, t3, t4, t5 = trial.layout([("down", 2.0), ("grasp", 0.4), ("lift", 2.0), ("hold", 0.35),
                                           ("release", 1.05)])
    knees = np.clip(p.knee_strategy + rng.uniform(-0.1, 0.1), 0.0, 1.0)
    box_y = rng.uniform(-0.03, 0.03) * h
    box_half_width = 0.5 * rng.uniform(0.14, 0.2) * h
    wrist_height = rng.uniform(0.09, 0.11) * h
    extension = np.clip(p.reach_extension + rng.uniform(0.0, 0.02), 0.85, 0.97)
    # Shoulder height above the wrist / arm length: arms close to vertical, hands a little
    # in front of the shoulders (horizontal reach >= 0.22 arm lengths).
    shoulder_over_hand = min(rng.uniform(0.76, 0.86), np.sqrt(extension ** 2 - 0.04))
    side_twist = np.array([0.0, rng.normal(0.0, 0.03), rng.normal(0.0, 0.04)])
    com_forward = rng.uniform(0.0, 0.01) * h
    carry = np.array([rng.uniform(0.14, 0.18) * h, box_y, rng.uniform(0.57, 0.62) * h])
    radial = rng.uniform(0.15, 0.35)
    left_extra = np.array([0.0, 0.0, rng.normal(0.0, 0.006) * h])   # hands not exactly level
    hand_start = trial.lag(t0, t1, 0.1)
    delays = trial.side_delays()
    curve_down = trial.curve(np.array([0.3, 0.0, -1.0]), 0.04 * h)
    toward_body = np.array([-rng.uniform(0.02, 0.05) * h, 0.0, 0.0])
    noise = trial.make_noise()

    def grip(centre):
        return np.stack([centre + (0, -box_half_width, 0), centre + (0, box_half_width, 0) + left_extra])

    # Trunk flexion (pelvis + spine) by strategy: ~120 deg stooping, ~50 deg squat-lifting;
    # the knees then bend as much as needed (the pelvis drop is solved below).
    flexion = (2.1 - 1.2 * knees) * rng.uniform(0.92, 1.08)

    max_drop = 0.33 * h                                       # thighs about horizontal

    def build(times, design):
        # bend in [0, 2]: the pelvis goes down (0..1), then the trunk flexes further (1..2).
        bend, floor_x, shoulders_down, shoulders_up = design
        drop = max_drop * min(bend, 1.0)
        trunk_flexion = flexion + 0.6 * max(bend - 1.0, 0.0)
        plan = trial.still_plan(times, noise)
        s = keyed(times, [(t0, 0.0), (t1, 1.0), (t2, 1.0), (t3, 0.0)])
        plan.pelvis_drop += s * drop
        plan.pelvis_angles[:, 0] += s * 0.45 * trunk_flexion
        plan.trunk += s[:, None] * (np.array([0.55 * trunk_flexion, 0.0, 0.0]) + side_twist)
        plan.com_shift[:, 0] += s * com_forward
        floor = grip(np.array([floor_x, box_y, wrist_height]))
        held = grip(carry)
        lift = keyed(times, [(t2, 0.0), (t3, 1.0)])[:, None, None]
        plan.hand_target[:] = floor + lift * (held - floor)
        if shoulders_down is not None:
            # Hands travel with the body: reachable all the way down and up.
            plan.hand_anchor = shoulders_down + lift * (shoulders_up - shoulders_down)
        plan.hand_target += (bump(times, hand_start, t1)[:, None, None] * curve_down
                             + bump(times, t2, t3)[:, None, None] * toward_body)
        plan.hand_target += trial.hand_noise(times, noise)
        for k in (_RIGHT, _LEFT):
            w = keyed(times, [(hand_start + delays[k], 0.0), (t1, 1.0), (t4, 1.0), (t5, 0.0)])
            plan.hand_weight[:, k] = w
            plan.wrist[:, k, 1] += radial * w
        centre = plan.hand_target.mean(axis=1)
        plan.gaze_target[:] = centre + noise["gaze"](times)
        plan.gaze_weight = p.gaze * keyed(times, [(t0, 0.0), (t1, 1.0), (t3, 0.6), (t4, 0.6), (t5, 0.0)])
        return plan

    # Find how far to bend (how low the pelvis goes, then how much more the trunk flexes)
    # so the shoulders end up at the chosen height above the grip, then where the object
    # is so the arms reach it at the chosen extension.
    peak = np.array([0.5 * (t1 + t2)])
    reach = body.reach()
    bend, floor_x = 0.5, 0.25 * h

    def shoulder_gap(bend_value):
        positions, _, _ = realise(body, build(peak, (bend_value, floor_x, None, None)))
        shoulders = positions[0, [SEGMENT_INDEX["right_upper_arm"], SEGMENT_INDEX["left_upper_arm"]]]
        return shoulders[:, 2].mean() - wrist_height - shoulder_over_hand * reach, shoulders

    for _ in range(2):
        bend = float(secant(lambda b: shoulder_gap(float(b))[0], np.array(0.0), np.array(bend), 0.0, 2.0,
                            iterations=8))
        _, shoulders = shoulder_gap(bend)
        base = grip(np.array([0.0, box_y, wrist_height]))
        floor_x = min(solve_along(base[k], np.array([1.0, 0, 0]), shoulders[k], extension * reach)
                      for k in range(2))
    floor = grip(np.array([floor_x, box_y, wrist_height]))
    arms = [SEGMENT_INDEX["right_upper_arm"], SEGMENT_INDEX["left_upper_arm"]]
    positions, _, _ = realise(body, build(np.array([peak[0], 0.5 * (t3 + t4)]), (bend, floor_x, None, None)))
    design = (bend, floor_x, positions[0, arms], positions[1, arms])
    return build(trial.times, design), {"right_hand": floor[0], "left_hand": floor[1],
                                        "right_hand_held": grip(carry)[0], "left_hand_held": grip(carry)[1]}


def _task_put_aside(trial: Trial):
    """Both hands take a box (0.13-0.18 H wide, wrists 0.42-0.58 H high) at the front-left
    (heading 20-43 deg), carry it in an arc with 55-85 % of the heading as torso yaw, and
    put it down at the front-right; knees bend as needed for the height."""
    rng, h, p, body = trial.rng, trial.height, trial.performer, trial.body
    t0, t1, t2, t3, t4, t5 = trial.layout([("reach", 1.4), ("grasp", 0.3), ("carry", 2.0), ("release", 0.3),
                                           ("return", 1.5)])
    half_width = 0.5 * rng.uniform(0.13, 0.18) * h
    headings = np.array([rng.uniform(0.35, 0.75), -rng.uniform(0.35, 0.75)])    # pick left, place right
    heights = np.array([rng.uniform(0.42, 0.56), rng.uniform(0.42, 0.58)]) * h  # wrists at the box sides
    extension = np.clip(p.reach_extension + rng.uniform(-0.02, 0.01), 0.85, 0.97)
    shoulder_over_hand = rng.uniform(0.65, 0.82, 2)   # shoulder height above the wrists / arm length
    turn = rng.uniform(0.55, 0.85, 2) * headings
    # Lower boxes: more trunk flexion (the knees make up the rest, solved below).
    flexion = np.clip(0.3 + (0.56 * h - heights) / h * 2.5, 0.2, 0.8) * p.amplitude
    com_side = 0.2 * abs(body.rest("left_foot")[1] - body.rest_com[1]) * np.sign(headings)
    lift = rng.uniform(0.03, 0.07) * h
    inward = rng.uniform(0.0, 0.04) * h
    hand_start = trial.lag(t0, t1)
    delays = trial.side_delays()
    noise = trial.make_noise()

    def lateral(heading):
        return np.stack([-np.sin(heading), np.cos(heading), np.zeros_like(heading)], axis=-1)

    def build(times, design):
        drops, radii = design
        plan = trial.still_plan(times, noise)
        # Body posture keyframes: neutral -> facing the pick place -> facing the place place.
        pick_pose = np.array([flexion[0], 0.0, turn[0]])
        place_pose = np.array([flexion[1], 0.0, turn[1]])
        posture = keyed(times, [(t0, np.zeros(3)), (t1, pick_pose), (t2, pick_pose), (t3, place_pose),
                                (t4, place_pose), (t5, np.zeros(3))])
        plan.trunk += posture * (0.6, 1.0, 0.65)
        plan.pelvis_angles += posture * (0.4, 0.0, 0.35)
        plan.pelvis_drop += keyed(times, [(t0, 0.0), (t1, drops[0]), (t2, drops[0]),
                                          (0.5 * (t2 + t3), 0.5 * drops.mean()), (t3, drops[1]), (t4, drops[1]),
                                          (t5, 0.0)])
        plan.com_shift[:, 1] += keyed(times, [(t0, 0.0), (t1, com_side[0]), (t2, com_side[0]), (t3, com_side[1]),
                                              (t4, com_side[1]), (t5, 0.0)])
        # The box: centre along its heading at radius r, hands on its two sides.
        carry = keyed(times, [(t2, 0.0), (t3, 1.0)])
        heading = headings[0] + carry * (headings[1] - headings[0])
        radius = radii[0] + carry * (radii[1] - radii[0]) - inward * bump(times, t2, t3)
        centre = np.stack([radius * np.cos(heading), radius * np.sin(heading),
                           heights[0] + carry * (heights[1] - heights[0]) + lift * bump(times, t2, t3)], axis=-1)
        side = lateral(heading) * half_width
        plan.hand_target[:, _RIGHT] = centre - side
        plan.hand_target[:, _LEFT] = centre + side
        plan.hand_target += trial.hand_noise(times, noise)
        for k in (_RIGHT, _LEFT):
            plan.hand_weight[:, k] = keyed(times, [(hand_start + delays[k], 0.0), (t1, 1.0), (t4, 1.0),
                                                   (t5 - (0.12 - delays[k]), 0.0)])
        plan.wrist[:, :, 1] += 0.15 * plan.hand_weight
        plan.gaze_target[:] = centre + noise["gaze"](times)
        plan.gaze_weight = p.gaze * keyed(times, [(t0, 0.0), (t0 + 0.7 * (t1 - t0), 1.0), (t4, 1.0), (t5, 0.0)])
        return plan

    # At the pick and at the place (two frames realised together): lower the pelvis until
    # the shoulders are at the chosen height above the box, then put the box at the chosen
    # arm extension along its heading.
    peaks = np.array([0.5 * (t1 + t2), 0.5 * (t3 + t4)])
    shoulder_columns = [SEGMENT_INDEX["right_upper_arm"], SEGMENT_INDEX["left_upper_arm"]]
    drops, radii = np.full(2, 0.03 * h), np.full(2, 0.3 * h)

    def shoulder_gap(drop_values):
        positions, _, _ = realise(body, build(peaks, (drop_values, radii)))
        return positions[:, shoulder_columns, 2].mean(axis=1) - heights - shoulder_over_hand * body.reach()

    for _ in range(2):
        drops = secant(shoulder_gap, np.zeros(2), drops, 0.0, 0.2 * h)
        positions, _, _ = realise(body, build(peaks, (drops, radii)))
        for j in range(2):
            direction = np.array([np.cos(headings[j]), np.sin(headings[j]), 0.0])
            side = lateral(headings[j]) * half_width
            radii[j] = min(solve_along(np.array([0, 0, heights[j]]) + sign * side, direction,
                                       positions[j, SEGMENT_INDEX[f"{name}_upper_arm"]], extension * body.reach())
                           for sign, name in ((-1.0, "right"), (1.0, "left")))
    centres = [np.array([radii[j] * np.cos(headings[j]), radii[j] * np.sin(headings[j]), heights[j]]) for j in range(2)]
    sides = [lateral(headings[j]) * half_width for j in range(2)]
    return build(trial.times, (drops, radii)), {"right_hand": centres[0] - sides[0], "left_hand": centres[0] + sides[0],
                                                "right_hand_place": centres[1] - sides[1],
                                                "left_hand_place": centres[1] + sides[1]}


def task_rest(trial: Trial, duration_s: float):
    """Standing in the N-pose with sway for ``duration_s`` between the still periods.

    Used between live trials by :class:`SyntheticOperator`; not in :data:`TASKS`.
    """
    trial.layout([("rest", duration_s * trial.speed)])
    plan = trial.still_plan(trial.times, trial.make_noise(), relaxed=False)
    return plan, {}


TASK_BUILDERS: dict[str, Callable] = {
    "reach_forward": _task_reach_forward,
    "pick_floor": _task_pick_floor,
    "place_high": _task_place_high,
    "squat": _task_squat,
    "side_reach": _task_side_reach,
    "put_aside": _task_put_aside,
}
