"""The prescient compensator on synthetic-operator takes: pass-through, engagement, continuity,
fallback, and the error it removes (a few seconds on a shared 2-core machine)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from retarget.references import HAND_INDICES, ReferenceTrajectory
from teleop.prescient.compensator import CompensationState, CompensatorConfig, PrescientCompensator
from teleop.prescient.training import learn_library, motion_span
from teleop.trials.delay_trial import TakeResult, TrialSettings, pad_take, run_take
from tests.conftest import synthetic_takes

ROOT = Path(__file__).resolve().parents[1]
TASKS = ["reach_forward", "squat"]


@pytest.fixture(scope="module")
def takes():
    return list(synthetic_takes(tuple(TASKS)))


@pytest.fixture(scope="module")
def held_out(takes):
    """(test take, library learned from all the other takes)."""
    test = takes[0]
    return test.trajectory, learn_library([t.trajectory for t in takes[1:]])


@pytest.fixture(scope="module")
def trial(held_out):
    take, library = held_out
    comp = run_take(take, 1.5, library, compensate=True, seed=1)
    nocomp = run_take(take, 1.5, library, compensate=False, seed=1)
    return comp, nocomp


def play(compensator: PrescientCompensator, take: ReferenceTrajectory, tau: float, tau_b: float,
         dt: float = 0.01) -> list:
    """Feed the take delayed by a constant ``tau`` and step at ``dt``; returns the outputs."""
    outs = []
    k = 0
    t_end = take.times[-1] + tau + 1.0
    for t in np.arange(take.times[0], t_end, dt):
        while k < len(take.times) and take.times[k] + tau <= t + 1e-9:
            compensator.observe(take.times[k], take.values[k], arrival_op=t)
            k += 1
        outs.append(compensator.step(t, tau_b))
    return outs


def test_zero_delay_passes_the_references_through(held_out):
    take, library = held_out
    comp = PrescientCompensator(library)
    outs = play(comp, take, tau=0.0, tau_b=0.0)
    assert all(o.state is CompensationState.PASSTHROUGH for o in outs)
    k = np.searchsorted(take.times, [take.times[0] + 0.01 * i for i in range(len(outs))], side="right") - 1
    executed = np.array([o.references for o in outs])
    np.testing.assert_array_equal(executed, take.values[np.clip(k, 0, len(take.times) - 1)])


def test_engages_after_recognition_and_stays_finite(trial, held_out):
    comp, _ = trial
    take, _ = held_out
    padded = pad_take(take, TrialSettings().lead_in, 1.5)
    onset, _ = motion_span(padded)
    states = [s.value for s in comp.states]
    assert "predicting" in states
    # Engaged after the onset has been seen (tau_f = 0.75 s) and recognised.
    recognition = CompensatorConfig().recognition_time
    assert comp.engaged_at >= (onset - padded.times[0]) + 0.75 + recognition - 0.1
    ok = ~np.isnan(comp.executed).any(axis=1)
    first = np.argmax(ok)
    assert ok[first:].all(), "no NaN once the first reference arrived"


def _engagement(config: CompensatorConfig, take: ReferenceTrajectory, library):
    """(operator time, output) of the first tick that leaves pass-through."""
    padded = pad_take(take, TrialSettings().lead_in, 1.5)
    outs = play(PrescientCompensator(library, config), padded, tau=0.75, tau_b=0.75)
    k = next(i for i, o in enumerate(outs) if o.state is not CompensationState.PASSTHROUGH)
    return padded.times[0] + 0.01 * k, outs[k]


def test_engages_only_once_enough_of_the_recognised_motion_was_seen(held_out):
    take, library = held_out
    t_early, early = _engagement(CompensatorConfig(min_engage_phase=0.0), take, library)
    t_gated, gated = _engagement(CompensatorConfig(min_engage_phase=0.2), take, library)
    assert gated.phase >= 0.2 > early.phase
    assert t_gated > t_early


def test_compensated_output_has_no_jumps(trial):
    comp, _ = trial
    cfg = CompensatorConfig()
    active = np.array([s is not CompensationState.PASSTHROUGH for s in comp.states])
    step = np.abs(np.diff(comp.executed, axis=0))[active[1:]]
    dt = comp.times[1] - comp.times[0]
    hands = list(HAND_INDICES)
    # Hard bound: never faster than the configured limits.
    assert step[:, hands].max() <= cfg.max_speed_cartesian * dt + 1e-9
    assert step[:, 9:].max() <= cfg.max_speed_angular * dt + 1e-9
    # While predicting, the output moves like the operator does: no per-tick change larger
    # than the operator's own fastest one (+1 mm). Before smoothing (point estimate of the
    # warp, 17 x 5 grid) the same take showed 3-5 cm steps whenever the warp estimate moved.
    predicting = np.array([s is CompensationState.PREDICTING for s in comp.states])
    pred_step = np.abs(np.diff(comp.executed, axis=0))[predicting[1:] & predicting[:-1]][:, hands]
    truth_step = np.abs(np.diff(comp.truth, axis=0))[:, hands]
    assert len(pred_step) > 50
    assert pred_step.max() <= truth_step.max() + 1e-3


def test_compensation_beats_the_delay(trial):
    comp, nocomp = trial
    assert comp.engaged_at is not None
    nocomp_window = nocomp.errors_after(comp.engaged_at)
    assert comp.window["hand_cm"] < 0.6 * nocomp_window["hand_cm"]
    assert comp.whole["hand_cm"] < nocomp.whole["hand_cm"]


def test_blends_out_when_the_operator_leaves_the_demonstrations(held_out):
    take, library = held_out
    start, end = motion_span(take)
    values = take.values.copy()
    late = take.times > start + 0.6 * (end - start)
    ramp = np.clip((take.times - (start + 0.6 * (end - start))) / 0.3, 0.0, 1.0)
    values[:, HAND_INDICES[3:]] += 0.4 * ramp[:, None]          # the right hand goes 40 cm away
    deviating = ReferenceTrajectory(take.times, values, label=take.label)
    comp = run_take(deviating, 1.5, library, seed=2)
    states = [s.value for s in comp.states]
    assert "predicting" in states and "blend_out" in states
    first_out = states.index("blend_out")
    assert "predicting" not in states[first_out:], "a rejected motion is not predicted again"
    assert states[-1] == "passthrough"
    # Rejected while the operator was still moving away, not at the end of the motion:
    # the robot sees operator time t - tau_f, tau_f ~ 0.75 s.
    padded = pad_take(deviating, TrialSettings().lead_in, 1.5)
    seen_at_out = padded.times[0] + comp.times[first_out] - 0.75
    assert take.times[late][0] < seen_at_out < end


COM_AND_NECK = ("com x", "com y", "neck pitch", "neck yaw")


def _down_weighting(names) -> CompensatorConfig:
    from promp.estimator import EstimatorConfig
    from promp.phase_filter import PhaseGridConfig

    return CompensatorConfig(estimator=EstimatorConfig(grid=PhaseGridConfig(down_weighted_signals=names)))


def test_the_filter_can_down_weight_named_signals(held_out):
    _, library = held_out
    assert library.promps[0].signal_names[:2] == ("com x", "com y")   # learn_library names them
    compensator = PrescientCompensator(library, _down_weighting(COM_AND_NECK))
    weights = compensator.estimator.filter._w_tab           # (tasks, phases, signals) 1 / variance
    plain = PrescientCompensator(library).estimator.filter._w_tab
    np.testing.assert_allclose(weights[..., :2], plain[..., :2] / 10.0)
    np.testing.assert_allclose(weights[..., 3:15], plain[..., 3:15])


def test_a_library_without_signal_names_warns_and_weighs_every_signal_alike(held_out):
    import dataclasses

    from promp.library import TaskLibrary

    _, library = held_out
    unnamed = TaskLibrary({label: dataclasses.replace(p, signal_names=None)
                           for label, p in zip(library.labels, library.promps)})
    with pytest.warns(UserWarning, match="names no signals"):
        compensator = PrescientCompensator(unnamed, _down_weighting(COM_AND_NECK))
    assert compensator.estimator.config.grid.down_weighted_signals == ()


def _result(hand_offset_cm: np.ndarray) -> TakeResult:
    """A 1 s take at 100 Hz whose right hand is off by ``hand_offset_cm`` (K,) along x."""
    k = len(hand_offset_cm)
    truth = np.zeros((k, 20))
    executed = truth.copy()
    executed[:, 6] = hand_offset_cm / 100.0
    return TakeResult(0.0, True, None, times=np.arange(k) * 0.01, executed=executed, truth=truth,
                      take_duration=k * 0.01)


def test_worst_excess_counts_sustained_wrong_way_motion_not_a_lag_behind_a_jump():
    from teleop.trials.delay_trial import worst_excess_cm

    delayed = _result(np.full(100, 2.0))
    wrong_way = np.full(100, 2.0)
    wrong_way[40:70] = 7.0                      # 5 cm worse for 0.3 s
    assert worst_excess_cm(_result(wrong_way), delayed) == pytest.approx(5.0)
    lag = np.full(100, 2.0)
    lag[50:53] = 30.0                           # 3 ticks behind a jump of the delayed stream
    assert worst_excess_cm(_result(lag), delayed) == 0.0
    assert worst_excess_cm(delayed, _result(np.full(100, 9.0))) == 0.0


def test_worst_excess_of_runs_with_their_own_ticks():
    """Real-time runs tick at their own instants and may differ by a tick in length."""
    from teleop.trials.delay_trial import worst_excess_cm

    wrong_way = np.full(100, 2.0)
    wrong_way[40:70] = 7.0
    delayed = _result(np.full(99, 2.0))
    delayed.times = delayed.times + 0.003
    assert worst_excess_cm(_result(wrong_way), delayed) == pytest.approx(5.0)


def _rest(take: ReferenceTrajectory, start: float, seconds: float, pose: np.ndarray) -> ReferenceTrajectory:
    times = start + np.arange(0.0, seconds, 0.01)
    return ReferenceTrajectory(times, np.repeat(pose[None], len(times), axis=0), label="rest")


def _then(*parts: ReferenceTrajectory) -> ReferenceTrajectory:
    return ReferenceTrajectory(np.concatenate([p.times for p in parts]), np.concatenate([p.values for p in parts]))


def test_a_motion_never_engaged_does_not_time_the_next_one(held_out):
    """An unknown motion (both hands 30 cm sideways) starts a motion that never engages;
    once the operator rests, the next motion must be timed from its own onset."""
    take, library = held_out
    pose = take.values[0]
    times = np.arange(0.0, 6.0, 0.01)
    sideways = np.repeat(pose[None], len(times), axis=0)
    shift = np.clip((times - 0.5) * 0.5, 0.0, 0.3)
    sideways[:, [HAND_INDICES[1], HAND_INDICES[4]]] += shift[:, None]
    unknown = ReferenceTrajectory(times, sideways)
    known = ReferenceTrajectory(take.times - take.times[0] + 6.0, take.values)
    still = _rest(take, 0.0, 6.0, pose)

    def states(first: ReferenceTrajectory) -> list:
        return [o.state for o in play(PrescientCompensator(library), _then(first, known), tau=0.75, tau_b=0.75)]

    after_unknown, after_rest = states(unknown), states(still)
    first_part = int(6.0 / 0.01)
    assert all(s is CompensationState.PASSTHROUGH for s in after_unknown[:first_part]), "precondition"
    assert after_unknown.count(CompensationState.PREDICTING) > 100
    assert after_unknown == after_rest


def _predicting(held_out, tau: float = 0.75):
    """A compensator playing the held-out take until it predicts; (compensator, time, take)."""
    take, library = held_out
    comp = PrescientCompensator(library)
    k = 0
    for t in np.arange(take.times[0], take.times[-1], 0.01):
        while k < len(take.times) and take.times[k] + tau <= t + 1e-9:
            comp.observe(take.times[k], take.values[k], arrival_op=t)
            k += 1
        out = comp.step(t, tau)
        if out.state is CompensationState.PREDICTING:
            return comp, t, out, k
    raise AssertionError("never predicted")


def test_the_rate_limit_holds_when_the_operator_clock_steps(held_out):
    """The operator clock steps with the clock-offset estimate: a step back allows no
    change, a step forward no more than one capped tick's worth."""
    comp, t, out, _ = _predicting(held_out)
    back = comp.step(t - 0.009, 0.75)
    np.testing.assert_array_equal(back.references, out.references)
    far = comp.step(t + 1.0, 0.75)
    cfg = CompensatorConfig()
    from teleop.prescient.compensator import MAX_RATE_LIMIT_DT

    change = np.abs(far.references - back.references)
    assert change[list(HAND_INDICES)].max() <= cfg.max_speed_cartesian * MAX_RATE_LIMIT_DT + 1e-12
    assert change[9:].max() <= cfg.max_speed_angular * MAX_RATE_LIMIT_DT + 1e-12


def test_when_the_delay_vanishes_mid_motion_the_output_blends_out(held_out):
    take, _ = held_out
    comp, t, _, k = _predicting(held_out)
    outs = []
    for now in t + 0.01 * np.arange(1, 200):     # a faster route: the rest arrives at once
        while k < len(take.times) and take.times[k] <= now + 1e-9:
            comp.observe(take.times[k], take.values[k], arrival_op=now)
            k += 1
        outs.append(comp.step(now, 0.0))
    states = [o.state for o in outs]
    assert CompensationState.BLEND_OUT in states and states[-1] is CompensationState.PASSTHROUGH
    executed = np.array([o.references for o in outs])
    hands = list(HAND_INDICES)
    first_pass = states.index(CompensationState.PASSTHROUGH)
    step = np.abs(np.diff(executed[: first_pass + 1], axis=0))
    cfg = CompensatorConfig()
    assert step[:, hands].max() <= cfg.max_speed_cartesian * 0.01 + 1e-9


def test_a_rejection_during_the_blend_in_blends_out_from_where_the_robot_is(held_out):
    """The Δσ test fires while the prediction is still being blended in: the robot must go
    back from where the blend-in brought it, not first rush to the prediction just rejected
    (before: 19.6 cm towards it, from 0.1 cm off the delayed reference)."""
    take, library = held_out
    comp = PrescientCompensator(library)
    k = 0
    for t in np.arange(take.times[0], take.times[-1], 0.01):
        while k < len(take.times) and take.times[k] + 0.75 <= t + 1e-9:
            comp.observe(take.times[k], take.values[k], arrival_op=t)
            k += 1
        out = comp.step(t, 0.75)
        if out.state is CompensationState.BLEND_IN:
            break
    hands = list(HAND_INDICES)
    y_d = comp.latest_delayed.copy()
    assert np.linalg.norm(out.references[hands] - y_d[hands]) < 0.01, "precondition: blend-in just began"
    # Late packets (older than the newest one) far off the demonstrations: the Δσ test fails
    # on them while the delayed reference stays where it is.
    for j in range(CompensatorConfig().ood_consecutive + 2):
        y = take.values[k - 5].copy()
        y[hands] += 0.5
        comp.observe(take.times[k - 1] - 0.001 * (j + 1), y, arrival_op=t)
    outs = [comp.step(t + 0.01 * i, 0.75) for i in range(1, 150)]
    states = [o.state for o in outs]
    assert CompensationState.BLEND_OUT in states and states[-1] is CompensationState.PASSTHROUGH
    assert CompensationState.PREDICTING not in states
    distance = [np.linalg.norm(o.references[hands] - y_d[hands]) for o in outs]
    assert max(distance) < 0.02


def test_the_end_of_a_blend_out_does_not_jump_into_pass_through(takes):
    """Pass-through is exact: entering it while the rate limit still lagged behind the
    delayed stream closed the rest of the gap in one tick (4-8 cm on the squats with a
    0.02 m/s limit; seen with the default limit after a cut-short blend-in on HDM05). The
    blend-out now lasts until the limited output has arrived."""
    from dataclasses import replace

    from retarget.references import HAND_INDICES

    i = next(j for j, t in enumerate(takes) if t.trajectory.label == "squat")
    library = learn_library([t.trajectory for j, t in enumerate(takes) if j != i])
    comp = PrescientCompensator(library, replace(CompensatorConfig(), max_speed_cartesian=0.02))
    outs = play(comp, takes[i].trajectory, tau=0.75, tau_b=0.75)
    t_end = takes[i].trajectory.times[-1] + 0.75 + 1.0
    outs += [comp.step(t_end + 0.01 * n, 0.75) for n in range(1, 400)]   # the operator rests
    hands = list(HAND_INDICES)
    ends = [k for k in range(1, len(outs) - 1) if outs[k - 1].state is CompensationState.BLEND_OUT
            and outs[k].state is CompensationState.PASSTHROUGH]
    assert ends, "precondition: a blend-out happened"
    for k in ends:
        assert np.abs(outs[k + 1].references[hands] - outs[k].references[hands]).max() < 0.002


def test_an_abandoned_motion_passes_the_delayed_references_through(held_out):
    """The robot station abandons the motion when its commands go stale: the compensator
    then passes the latest delayed reference through at once (before: it kept predicting
    the old motion for as long as nothing arrived), and times the next motion afresh."""
    comp, t, out, k = _predicting(held_out)
    assert out.state is CompensationState.PREDICTING
    comp.abandon_motion()
    after = comp.step(t + 0.01, 0.75)
    assert after.state is CompensationState.PASSTHROUGH
    take, _ = held_out
    np.testing.assert_array_equal(after.references, take.values[k - 1])


def test_the_robot_station_abandons_the_predicted_motion_when_commands_go_stale(held_out):
    """Integration: a station whose compensator predicts, then no command for longer than
    the stale timeout: the watchdog holds and compensation is back in pass-through, so the
    commands that resume are blended to as they are, not to the stale prediction."""
    import os

    from retarget.references import RobotReferences
    from teleop.clock import VirtualClock
    from teleop.net.delay import LinkModel
    from teleop.net.protocol import PacketCodec
    from teleop.net.virtual import connect_virtual
    from teleop.robot.model import RobotModel
    from teleop.sim.simulator import Simulation
    from teleop.stations.robot_station import RobotStation, RobotStationConfig

    take, library = held_out
    comp, t, _, k = _predicting(held_out)
    robot = RobotModel()
    clock = VirtualClock()
    operator, robot_ep = connect_virtual(PacketCodec(os.urandom(32)), LinkModel.thesis(0.0), clock, seed=1)
    with Simulation(robot, visual=False) as sim:
        station = RobotStation(robot_ep, robot, sim, library, RobotStationConfig(video_hz=0, stale_timeout=0.2))
        station.compensator = comp                    # mid-motion, predicting
        states = []
        # The commands that start the robot following (resume_after in a row, 10 ms apart),
        # then silence: 0.6 s > stale_timeout.
        for i in range(60):
            clock.set(i * 0.01)
            if i < station.config.resume_after:
                operator.send(RobotReferences.from_flat(i * 0.01, take.values[k - 1]), robot_ep.address)
            record = station.tick()
            states.append((record.watchdog, station.compensator.state))
    assert ("STALE", CompensationState.PASSTHROUGH) in states
    assert states[-1] == ("STALE", CompensationState.PASSTHROUGH)


def test_compensation_rides_through_bursts_of_lost_commands(held_out, trial):
    """10 % of the references lost in runs of 20 on average (0.2 s of commands at a time,
    Gilbert model): the compensator still engages, keeps its output finite, and keeps most of
    the error it removes on a clean link (the predicted samples bridge the holes)."""
    take, library = held_out
    bursty = TrialSettings(loss=0.1, loss_burst=20.0)
    comp = run_take(take, 1.5, library, compensate=True, seed=1, settings=bursty)
    nocomp = run_take(take, 1.5, library, compensate=False, seed=1, settings=bursty)
    assert comp.packets_lost >= 0.05 * len(comp.times)          # the link did lose its share
    assert comp.engaged_at is not None
    # (Rows are NaN until the first reference arrives, as on a clean link.)
    started = np.isfinite(comp.executed).all(axis=1)
    assert started.any() and started[np.argmax(started):].all()
    clean_comp, clean_nocomp = trial
    removed_clean = clean_nocomp.errors_after(clean_comp.engaged_at)["hand_cm"] - clean_comp.window["hand_cm"]
    removed = nocomp.errors_after(comp.engaged_at)["hand_cm"] - comp.window["hand_cm"]
    assert removed > 0.5 * removed_clean, (removed, removed_clean)
