"""Adversarial timelines for the delay compensator and the robot station's command handling.

A real task library (synthetic takes, as tests/test_prescient_compensator.py) and real
compensators, driven through long seeded timelines: known, unknown, stopped and partially
held motions, irregular ticks, jitter, losses, stalls flushed in bursts, duplicated and
out-of-order packets, τ̂_b jumps (0 / 0.5 / 1.5 / 3 s), forward delays that change or vanish,
clock-offset steps and abandon_motion(). At every tick: the output is finite; outside
pass-through it changes by no more than the configured speeds allow for the tick (the
rate limit caps a tick at MAX_RATE_LIMIT_DT and a step back of the clock at none); in
pass-through it is exactly the newest delayed reference. Plus the recoveries the
compensator promises and the station's hold and resume.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from retarget.references import CARTESIAN_INDICES, FLAT_SIZE, HAND_INDICES
from teleop.prescient.compensator import (MAX_RATE_LIMIT_DT, CompensationState, CompensatorConfig,
                                          PrescientCompensator)
from tests.conftest import fuzz_examples, synthetic_takes

S = CompensationState
ROOT = Path(__file__).resolve().parents[1]
HANDS = list(HAND_INDICES)
CFG = CompensatorConfig()
MAX_SPEED = np.full(FLAT_SIZE, CFG.max_speed_angular)
MAX_SPEED[list(CARTESIAN_INDICES)] = CFG.max_speed_cartesian


@pytest.fixture(scope="module")
def takes():
    return [t.trajectory for t in synthetic_takes(("reach_forward", "squat"))]


@pytest.fixture(scope="module")
def library(takes):
    from teleop.prescient.training import learn_library

    return learn_library([t for k, t in enumerate(takes) if k % 4])   # 0, 4, 8: the operator


@pytest.fixture(scope="module")
def operator_takes(takes):
    return [takes[0], takes[4], takes[8]]


class Checker:
    """Checks every output of one compensator against the invariants (see the module docstring)."""

    def __init__(self, comp: PrescientCompensator) -> None:
        self.comp = comp
        self.prev: tuple[float, np.ndarray] | None = None
        self.prev_state = comp.state
        self.states: list[CompensationState] = []

    def abandon(self) -> None:
        self.comp.abandon_motion()
        self.prev_state = self.comp.state
        self.prev = None          # pass-through next: exact, whatever the jump (the watchdog holds)

    def step(self, t_op: float, tau_b: float):
        out = self.comp.step(t_op, tau_b)
        self.states.append(out.state)
        if out.references is None:
            return out
        ref = out.references
        assert ref.shape == (FLAT_SIZE,) and np.all(np.isfinite(ref)), (t_op, out)
        if out.state is S.PASSTHROUGH and self.prev_state is S.PASSTHROUGH:
            np.testing.assert_array_equal(ref, self.comp.latest_delayed)
        elif self.prev is not None:
            allowed = MAX_SPEED * min(max(t_op - self.prev[0], 0.0), MAX_RATE_LIMIT_DT) + 1e-9
            jump = np.abs(ref - self.prev[1])
            worst = int(np.argmax(jump - allowed))
            assert np.all(jump <= allowed), (f"{self.prev_state.value} -> {out.state.value} at {t_op:.3f}: "
                                             f"signal {worst} moved {jump[worst]:.4f} > {allowed[worst]:.4f}")
        self.prev, self.prev_state = (t_op, ref.copy()), out.state
        return out


def operator_stream(rng: np.random.Generator, operator_takes, duration: float):
    """(times, values) of an operator: rests, known takes, motions off the demonstrations,
    motions stopped midway and held, and takes with some signals frozen (a partial source
    holds unmeasured scalars at a fixed value), sampled every 8-20 ms."""
    pose = operator_takes[0].values[0].copy()
    times, values, t = [], [], 0.0
    while t < duration:
        kind = rng.choice(["rest", "take", "take", "unknown", "stop", "partial"])
        if kind == "rest":
            seg = np.repeat(pose[None], int(rng.uniform(0.1, 1.5) * 100), axis=0)
        else:
            take = operator_takes[rng.integers(len(operator_takes))]
            seg = take.values - take.values[0] + pose
            if kind == "unknown":
                ramp = np.clip(np.linspace(-1.0, 2.0, len(seg)), 0.0, 1.0)
                seg[:, HANDS] += rng.normal(0.0, 0.3, len(HANDS)) * ramp[:, None]
            elif kind == "stop":
                cut = int(rng.integers(20, len(seg)))
                seg = np.concatenate([seg[:cut], np.repeat(seg[cut - 1][None], rng.integers(1, 100), axis=0)])
            elif kind == "partial":
                frozen = rng.choice(FLAT_SIZE, int(rng.integers(1, 10)), replace=False)
                seg[:, frozen] = pose[frozen]
        for v in seg:
            times.append(t)
            values.append(v)
            t += float(rng.choice([0.01, 0.01, 0.01, 0.008, 0.012, 0.02]))
        pose = seg[-1]
    return np.array(times), np.array(values)


def run_timeline(seed: int, library, operator_takes, duration: float = 20.0) -> list[CompensationState]:
    """One seeded adversarial session (see the module docstring); the states visited."""
    rng = np.random.default_rng(seed)
    times, values = operator_stream(rng, operator_takes, duration)
    arrival = times + 0.75 + np.abs(rng.normal(0.0, 0.05, len(times)))           # jitter
    for _ in range(rng.integers(0, 4)):                # stalls: flushed in one burst at their end
        a = rng.uniform(0.0, duration)
        b = a + rng.uniform(0.2, 3.0)
        arrival[(arrival > a) & (arrival < b)] = b
    for _ in range(rng.integers(0, 3)):                # route changes (down to no delay at all)
        arrival[times > rng.uniform(0.0, duration)] += rng.uniform(-1.0, 1.0)
    arrival = np.maximum(arrival, times)
    kept = rng.random(len(times)) > rng.choice([0.0, 0.05, 0.3])                 # losses
    packets = [(arrival[i], i) for i in np.flatnonzero(kept)]
    packets += [(arrival[i] + rng.uniform(0.0, 2.0), i) for i in rng.choice(len(times), 50)]   # duplicates
    packets.sort()
    comp = PrescientCompensator(library)
    check = Checker(comp)
    tau_b, offset, now, k = 0.75, 0.0, 0.0, 0
    while now < duration + 3.0:
        now += float(rng.choice([0.01, 0.01, 0.01, 0.005, 0.02, 0.05]))           # irregular ticks
        if rng.random() < 0.02:
            tau_b = float(rng.choice([0.0, 3.0, 0.5, 0.0, 1.5, 0.01]))
        if rng.random() < 0.01:                        # the clock-offset estimate steps
            offset = float(rng.choice([0.0, 0.3, -0.3, 0.05, -2.0, 2.0]))
        while k < len(packets) and packets[k][0] <= now:
            i = packets[k][1]
            comp.observe(float(times[i]), values[i], arrival_op=now + offset)
            k += 1
        if rng.random() < (0.05 if comp.state is not S.PASSTHROUGH else 0.002):
            check.abandon()
        check.step(now + offset, tau_b)
    return check.states


@settings(max_examples=fuzz_examples(6), suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1))
def test_random_timelines_keep_the_output_finite_rate_limited_and_exact_in_pass_through(
        library, operator_takes, seed):
    run_timeline(seed, library, operator_takes)


@pytest.mark.parametrize("seed", [22, 51, 53])
def test_timelines_that_engaged_unlimited_after_the_delay_returned(library, operator_takes, seed):
    """The seeds on which the fuzzing above found the unlimited engagement (see
    test_engaging_as_the_delay_returns_with_a_burst_is_rate_limited), kept as they are: each
    engages (BLEND_IN) after the delay returned."""
    states = run_timeline(seed, library, operator_takes, duration=30.0)
    assert S.BLEND_IN in states


def _play_until(comp: PrescientCompensator, check: Checker, take, t: float, k: int, until, tau_f: float,
                tau_b: float, t_end: float):
    """Deliver ``take`` delayed by ``tau_f``, stepping every 10 ms from ``t`` until ``until(out)``
    or ``t_end``; returns (t, k, out)."""
    out = None
    while t < t_end:
        t += 0.01
        while k < len(take.times) and take.times[k] + tau_f <= t + 1e-9:
            comp.observe(float(take.times[k]), take.values[k], arrival_op=t)
            k += 1
        out = check.step(t, tau_b)
        if until(out):
            break
    return t, k, out


def test_engaging_as_the_delay_returns_with_a_burst_is_rate_limited(library, operator_takes):
    """Found by the timelines above: with no delay the references pass through while the
    motion is recognised; when the delay came back with a burst of packets (0.6 s of a stall
    flushed at once) the compensator engaged at the very next tick, and that tick, with no
    previous output remembered, was not rate limited: the hands jumped by the whole burst
    (0.54 rad of an arm in one tick here; 0.77 rad of an arm in a fuzzed session)."""
    take = operator_takes[0]
    comp = PrescientCompensator(library)
    check = Checker(comp)
    # No delay (arrival = time stamp, τ̂_b = 0) until the motion is well recognised.
    t, k, _ = _play_until(comp, check, take, take.times[0] - 0.01, 0, lambda o: False, 0.0, 0.0,
                          take.times[0] + 1.6)
    assert all(s is S.PASSTHROUGH for s in check.states), "precondition: no delay, pass-through"
    assert comp._t0 is not None and comp._estimate is not None, "precondition: the motion was recognised"
    # A 0.6 s stall, flushed at once with up to 0.6 s of delay; τ̂_b 0.75 s from now on.
    t += 0.6
    burst = 0
    while k < len(take.times) and take.times[k] <= t:
        comp.observe(float(take.times[k]), take.values[k], arrival_op=t)
        k, burst = k + 1, burst + 1
    assert burst >= 10
    out = check.step(t + 0.01, 0.75)       # asserts the rate limit
    assert out.state is S.BLEND_IN, "precondition: engaged on the first tick with the delay back"


def test_a_rejection_while_the_rate_limit_lags_goes_back_from_where_the_robot_is(library, operator_takes):
    """While predicting, τ̂_b jumps 0.75 -> 3 s: the prediction jumps, and the rate-limited
    output follows it at the limit. Then the Δσ test fires. The blend-out started from the
    prediction, not from where the robot was, so the robot went on towards the prediction it
    had just rejected (7 cm -> 22 cm from the delayed reference) before coming back."""
    take = operator_takes[0]
    comp = PrescientCompensator(library)
    check = Checker(comp)
    t, k, out = _play_until(comp, check, take, take.times[0] - 0.01, 0, lambda o: o.state is S.PREDICTING,
                            0.75, 0.75, take.times[-1])
    assert out.state is S.PREDICTING
    t, k, _ = _play_until(comp, check, take, t, k, lambda o: False, 0.75, 0.75, t + 0.3)
    for _ in range(3):
        t += 0.01
        out = check.step(t, 3.0)
    assert out.state is S.PREDICTING
    y_d = comp.latest_delayed.copy()
    at_rejection = np.linalg.norm(out.references[HANDS] - y_d[HANDS])
    assert at_rejection > 0.03, "precondition: the rate limit lags behind the prediction"
    # Late packets far off the demonstrations (older than the newest: y_d stays put).
    for j in range(CFG.ood_consecutive + 2):
        y = take.values[k - 5].copy()
        y[HANDS] += 0.5
        comp.observe(float(take.times[k - 1]) - 0.001 * (j + 1), y, arrival_op=t)
    outs = []
    for _ in range(150):
        t += 0.01
        outs.append(check.step(t, 3.0))
    states = [o.state for o in outs]
    assert states[0] is S.BLEND_OUT and states[-1] is S.PASSTHROUGH
    distance = [np.linalg.norm(o.references[HANDS] - y_d[HANDS]) for o in outs]
    # Back from where the robot was when the prediction was rejected, from that very tick: it
    # went one more limited step towards the prediction, and back the next tick, before.
    assert max(distance) <= at_rejection + 1e-9


def _rest(pose: np.ndarray, seconds: float) -> np.ndarray:
    return np.repeat(pose[None], int(round(seconds * 100)), axis=0)


def _moved(take, start: np.ndarray) -> np.ndarray:
    return take.values - take.values[0] + start


def _glide(a: np.ndarray, b: np.ndarray, seconds: float) -> np.ndarray:
    u = np.linspace(0.0, 1.0, int(round(seconds * 100)))[:, None]
    s = u * u * (3.0 - 2.0 * u)
    return a + s * (b - a)


def test_recovers_and_engages_again_after_each_kind_of_trouble(library, operator_takes):
    """One session: a known motion (engages), a motion off the demonstrations (rejected),
    one stopped midway (held, then back to the start), a stall of the stream for longer
    than any motion while predicting (abandoned, as the station does), a τ̂_b that jumps
    0 -> 3 -> 0.5 s mid-motion: after each the compensator is back in pass-through, and the
    next known motion is predicted again."""
    reach, squat = operator_takes[0], operator_takes[1]
    home = reach.values[0]
    off = _moved(reach, home)
    ramp = np.clip(np.linspace(-1.0, 2.0, len(off)), 0.0, 1.0)
    off[:, HANDS[3:]] += 0.4 * ramp[:, None]
    stopped = _moved(squat, home)[: int(0.35 * len(squat.times))]
    parts = [("known", _moved(reach, home)), ("rest", _rest(home, 1.0)),
             ("unknown", off), ("back", _glide(off[-1], home, 1.0)), ("rest", _rest(home, 1.0)),
             ("known", _moved(squat, home)), ("rest", _rest(home, 1.0)),
             ("stopped", np.concatenate([stopped, _rest(stopped[-1], 2.0)])),
             ("back", _glide(stopped[-1], home, 1.0)), ("rest", _rest(home, 1.0)),
             ("known", _moved(reach, home)), ("rest", _rest(home, 1.0)),
             ("stall", _moved(squat, home)), ("rest", _rest(home, 1.0)),
             ("known", _moved(reach, home)), ("rest", _rest(home, 1.0)),
             ("tau_b", _moved(squat, home)), ("rest", _rest(home, 1.0)),
             ("known", _moved(reach, home)), ("rest", _rest(home, 1.5))]
    values = np.concatenate([v for _, v in parts])
    times = np.arange(len(values)) * 0.01
    starts = np.cumsum([0] + [len(v) for _, v in parts]) * 0.01
    comp = PrescientCompensator(library)
    check = Checker(comp)
    tau = 0.75
    by_part: list[list[CompensationState]] = [[] for _ in parts]
    k, t = 0, -0.01
    while t < times[-1] + tau:
        t += 0.01
        seen = t - tau                                   # operator time of what arrives now
        part = min(int(np.searchsorted(starts, seen, side="right")) - 1, len(parts) - 1)
        name = parts[part][0] if part >= 0 else "rest"
        stalled = name == "stall" and seen > starts[part] + 1.2
        while k < len(times) and times[k] + tau <= t + 1e-9:
            if not stalled:
                comp.observe(float(times[k]), values[k], arrival_op=t)
            k += 1
        if stalled and comp.state is not S.PASSTHROUGH and seen > starts[part] + 1.7:
            check.abandon()                              # the station's watchdog went stale
        tau_b = tau
        if name == "tau_b":
            into = seen - starts[part]
            tau_b = 0.0 if into < 1.3 else 3.0 if into < 1.6 else 0.5
        out = check.step(t, tau_b)
        if part >= 0:
            by_part[part].append(out.state)
    for i, (name, _) in enumerate(parts):
        if name == "known":
            assert S.PREDICTING in by_part[i], f"part {i}: a known motion after trouble is predicted again"
        if name == "rest":
            assert by_part[i][-1] is S.PASSTHROUGH, f"part {i} ({parts[i - 1][0]} before): back in pass-through"
        if name == "unknown":
            assert S.BLEND_OUT in by_part[i] or S.PREDICTING not in by_part[i]


# ====================================================================== the robot station
def test_the_station_holds_when_commands_stall_and_resumes_smoothly_into_compensation(library, operator_takes,
                                                                                     station_sim, robot):
    """A station over a 0.75 s virtual link, predicting a motion, whose commands stop for
    1.5 s (> stale_timeout) mid-motion, then resume with the operator elsewhere: it holds
    (executed settles on the held pose, the compensator passes through), resumes without a
    jump (the hands' executed references never move faster than max_speed_cartesian), and
    compensates the next motion again."""
    import os

    from retarget.references import RobotReferences
    from teleop.clock import VirtualClock
    from teleop.net.clock_sync import answer_ping
    from teleop.net.delay import DirectionModel, LinkModel
    from teleop.net.protocol import PacketCodec
    from teleop.net.virtual import connect_virtual
    from teleop.stations.robot_station import RobotStation, RobotStationConfig

    reach, squat = operator_takes[0], operator_takes[1]
    home = reach.values[0]
    values = np.concatenate([_rest(home, 0.5), _moved(reach, home), _rest(home, 0.3), _moved(squat, home)])
    stall = (200, 350)                      # 1.5 s of the reach never sent (from 1.5 s into it)
    clock = VirtualClock()
    link = LinkModel(DirectionModel.constant(0.75), DirectionModel.constant(0.75))
    operator, robot_ep = connect_virtual(PacketCodec(os.urandom(32)), link, clock, seed=3)
    station = RobotStation(robot_ep, robot, station_sim, library,
                           RobotStationConfig(video_hz=0, default_tau_b=0.75, clock_ping_interval=0.1,
                                              clock_window=8))
    records, comp_states = [], []
    for i in range(len(values) + 90):
        clock.set(i * 0.01)
        for received in operator.poll():
            answer_ping(operator, received)
        if i < len(values) and not stall[0] <= i < stall[1]:
            operator.send(RobotReferences.from_flat(i * 0.01, values[i]), robot_ep.address)
        records.append(station.tick())
        comp_states.append(station.compensator.state)
    watchdog = [r.watchdog for r in records]
    executed = np.array([r.executed for r in records])
    assert CompensationState.PREDICTING in comp_states[: stall[0] + 110], "precondition: predicting before the stall"
    stale = [i for i, w in enumerate(watchdog) if w == "STALE"]
    assert stale and stale[-1] < len(values), "the stall was seen (and nothing else)"
    assert all(comp_states[i] is CompensationState.PASSTHROUGH for i in stale)
    np.testing.assert_allclose(executed[stale[-1]], station.hold, atol=2e-3)   # settled on the hold
    assert "RESUMING" in watchdog[stale[-1]:] and watchdog[-1] == "ACTIVE"
    hands_step = np.abs(np.diff(executed[:, HANDS], axis=0))
    assert hands_step.max() <= CFG.max_speed_cartesian * 0.01 + 1e-9
    assert CompensationState.PREDICTING in comp_states[stale[-1]:], "the next motion is compensated again"
    assert station.nonfinite_commands == 0


@pytest.mark.parametrize("take, fraction", [(0, 0.5), (1, 0.3), (1, 0.5), (2, 0.5), (2, 0.7)])
def test_an_operator_who_stops_partway_is_soon_passed_through(library, operator_takes, take, fraction):
    """An operator who stops a known motion partway and stays there: the filter fits the rest
    by slowing its speed estimate, and under that warp the model expected too little motion
    for the rest to count as the motion's end, so the robot went on executing the rest of the
    motion, the hands ~20 cm off the resting operator, for up to 8 s (until the speed reached
    the grid's floor). Judged at the pace the operator had, the model expects the hands to move
    on: back to the delayed stream within 4 s of the stop (the forward delay, the rest's
    duration and the blend-out included)."""
    motion = operator_takes[take]
    cut = int(fraction * len(motion.times))
    home = motion.values[0]
    values = np.concatenate([_rest(home, 1.0), motion.values[:cut], _rest(motion.values[cut - 1], 10.0)])
    stop = (100 + cut) * 0.01
    comp = PrescientCompensator(library)
    check = Checker(comp)
    tau, k, t = 0.75, 0, 0.0
    engaged, back_at = False, None
    while t < len(values) * 0.01:
        t += 0.01
        while k < len(values) and k * 0.01 + tau <= t + 1e-9:
            comp.observe(k * 0.01, values[k], arrival_op=t)
            k += 1
        out = check.step(t, tau)
        engaged = engaged or out.state is S.PREDICTING
        if engaged and back_at is None and out.state is S.PASSTHROUGH:
            back_at = t
    assert engaged, "the motion was predicted before the stop"
    assert back_at is not None and back_at - stop < 4.0, f"passed through {back_at} s, the stop at {stop:.2f} s"
