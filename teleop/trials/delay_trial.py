"""One delayed-network trial on the virtual clock (thesis §5.4, Table 5.3 and Fig. 5.18).

The operator's references of a test take are sent at their own rate through the real
packet codec (MAC, replay window) over a :class:`teleop.net.delay.VirtualLink` with the
thesis's delay model (Eqs. 5.16-5.18: τ_f ~ N(τ/2, σ = (2/15)·τ/2), τ_b = τ/2 constant,
τ the round trip). The robot station's compensator runs at the control rate on the
virtual clock, exactly as it does live; both stations share that clock (no offset), and
the compensator is given the exact τ̂_b = τ/2.

Error measured (what the thesis calls the compensation error): what the operator *sees*
the robot do at time t is what the robot executed at t − τ_b; it is compared with what the
operator does at t. Equivalently, at robot time s the executed reference E(s) is compared
with the operator's reference G(s + τ_b). Without compensation E(s) = G(s − τ_f), so the
error is the motion over a whole round trip.

Reported per take, as the thesis does, over the window after compensation has engaged and
blended in (the same window for the uncompensated run of that take), and also over the whole
take. Cartesian errors are per-axis RMS averaged over axes (and hands), reported in [cm]
(hands: 6 axes, CoM: x, y; the waist height is not scored); postures [rad]. Table 5.3
(reference §6.5) lists each axis of the right hand, CoM x, CoM y, the waist height and 7
joints apart; the issue asks for one figure per group over both hands ("hands", "CoM",
"postures"), and the waist height is neither the CoM's x, y nor a hand, so it is in no group.
Over the takes (:mod:`teleop.trials.sweep`): mean and population SD, like the table's mean ± SD.

Rest before and after the motion (:func:`pad_take`). A live operator stands still before a
motion and holds its final pose afterwards; cut clips (HDM05, the Xsens demos) start and end
in the middle of the motion and are often shorter than the round trip, so that without
padding the error window of a 1.2 s squat at 1.5 s round trip is empty (the operator is done
before the first packet arrives) and nothing could be measured on real data. Every take is
therefore played with at least ``lead_in`` seconds of rest at its first pose before the
motion onset and at least ``hold`` seconds (default: one round trip) at its last pose after
the motion end; takes that already contain that much rest (the synthetic operator's) are
played nearly unchanged. With hold = round trip the last scored tick is the one at which
the *uncompensated* robot is seen to finish, so the window never contains ticks where the
uncompensated error is trivially zero. ``lead_in=0, hold=0`` reproduces the first protocol
(see TrialSettings).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from promp.library import TaskLibrary
from retarget.references import (COM_INDICES, HAND_INDICES, POSTURE_INDICES, ReferenceTrajectory,
                                 RobotReferences)
from teleop.clock import VirtualClock
from teleop.net.delay import DirectionModel, LinkModel, THESIS_JITTER_RATIO
from teleop.net.protocol import PacketCodec
from teleop.net.secret import session_secret
from teleop.net.virtual import connect_virtual
from teleop.prescient.compensator import CompensationState, CompensatorConfig, PrescientCompensator


@dataclass(frozen=True)
class TrialSettings:
    """Settings of a delay trial.

    Attributes:
        control_hz: robot station control rate [Hz].
        send_hz: rate at which the operator sends references [Hz].
        jitter_ratio: σ of τ_f over its mean (thesis: 2/15).
        loss: forward packet loss probability.
        loss_burst: mean run of consecutive forward losses [packets] (Gilbert model, see
            :class:`teleop.net.delay.DirectionModel`); None = independent losses.
        duplicate: forward duplication probability.
        tail: seconds simulated after the take ends plus τ_f's mean + 4σ (so that the last
            commands still arrive).
        lead_in: minimum rest [s] at the first pose before the motion onset (see module doc).
        hold: minimum rest [s] at the last pose after the motion end; None = the round trip.
    """

    control_hz: float = 100.0
    send_hz: float = 100.0
    jitter_ratio: float = THESIS_JITTER_RATIO
    loss: float = 0.0
    loss_burst: float | None = None
    duplicate: float = 0.0
    tail: float = 0.5
    lead_in: float = 1.0
    hold: float | None = None


@dataclass
class TakeResult:
    """Errors of one take at one round-trip delay, with or without compensation.

    Attributes:
        rtt: round-trip delay [s].
        compensated: whether the compensator had a library.
        engaged_at: robot time [s since the start of the padded take, lead-in included]
            of the first tick in PREDICTING, i.e. blend-in finished (None: never).
        engaged_task: the task recognised when compensation began to blend in (None: never).
        label: the take's own task label, if known.
        worst_excess_cm: of a compensated run, :func:`worst_excess_cm` against its
            uncompensated twin (set by :func:`score_pair`).
        window: errors after engagement (dict of "hand_cm", "com_cm", "posture_rad").
        whole: the same over the whole take.
        times, executed, truth: (K,) tick times [s since the padded take's start], (K, 20)
            executed references [m, rad] (NaN where nothing was executed: the real-time
            station's home pose before the first reference; the virtual trial shows the
            take's first pose there, see :func:`run_take`), (K, 20) operator references at
            tick time + τ_b [m, rad] (the realignment of thesis §5.4: what the operator does
            when the video of the tick reaches them).
        states: (K,) compensation states.
        take_duration: duration of the padded take [s].
        packets_lost: references sent but never observed by the compensator.
        robot_tick_hz: of a real-time run, the robot station's achieved control rate [Hz]
            (NaN otherwise).
        tau_b_scored: of a real-time run, the backward delay [s] it was scored with (NaN
            otherwise).
    """

    rtt: float
    compensated: bool
    engaged_at: float | None
    window: dict = field(default_factory=dict)
    whole: dict = field(default_factory=dict)
    times: np.ndarray | None = None
    executed: np.ndarray | None = None
    truth: np.ndarray | None = None
    states: list | None = None
    take_duration: float = 0.0
    packets_lost: int = 0
    engaged_task: str | None = None
    label: str | None = None
    worst_excess_cm: float | None = None
    robot_tick_hz: float = float("nan")
    tau_b_scored: float = float("nan")

    def ticks(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(times, executed, truth); ValueError on a result that holds only summaries."""
        if self.times is None or self.executed is None or self.truth is None:
            raise ValueError("this TakeResult has no tick series (times, executed, truth)")
        return self.times, self.executed, self.truth

    def valid_mask(self, start: float | None = None) -> np.ndarray:
        """(K,) ticks that count: output present, truth inside the take, after ``start``."""
        times, executed, _ = self.ticks()
        mask = (times + self.rtt / 2.0 <= self.take_duration) & np.all(np.isfinite(executed), axis=1)
        if start is not None:
            mask &= times >= start
        return mask

    def errors_after(self, start: float | None) -> dict:
        """Error summary over the ticks after ``start`` (None: nothing counts)."""
        _, executed, truth = self.ticks()
        if start is None:
            return error_summary(np.zeros((0, executed.shape[1])))
        mask = self.valid_mask(start)
        return error_summary((executed - truth)[mask])

    def hands_distance_cm(self) -> np.ndarray:
        """(K, 2) each hand's distance (left, right) [cm] between what the operator sees and
        does at each tick (NaN where nothing was executed yet)."""
        times, executed, truth = self.ticks()
        err = (executed - truth)[:, list(HAND_INDICES)].reshape(len(times), 2, 3)
        return 100.0 * np.linalg.norm(err, axis=2)

    def hand_distance_cm(self) -> np.ndarray:
        """(K,) the larger of the two hands' distances [cm] (:meth:`hands_distance_cm`)."""
        return self.hands_distance_cm().max(axis=1)


def worst_excess_cm(comp: TakeResult, nocomp: TakeResult, sustained_s: float = 0.2) -> float:
    """Largest amount [cm] by which compensation kept the hand error above that of the delayed
    references alone for ``sustained_s`` in a row (0 if it never did), over the scored ticks.

    The window RMS can hide a brief wrong-way motion (the robot starting the wrong task
    until the recogniser changes its mind); this is the measure of that harm. It is held
    over ``sustained_s`` because the delayed stream itself jumps when jittered packets
    arrive in bursts, which the rate-limited compensated output follows a few ticks later:
    a lag of a few ticks behind a jump the real robot could not make either is not harm.
    """
    delayed = nocomp.hand_distance_cm()
    comp_times, nocomp_times = comp.ticks()[0], nocomp.ticks()[0]
    if len(nocomp_times) == len(comp_times) and np.allclose(nocomp_times, comp_times):
        mask = comp.valid_mask(0.0) & nocomp.valid_mask(0.0)
    else:
        # Two real-time runs tick at their own instants: read the delayed run at the
        # compensated run's ticks.
        ok = nocomp.valid_mask(0.0)
        if ok.sum() < 2:
            return float("nan")
        delayed = np.interp(comp_times, nocomp_times[ok], delayed[ok], left=np.nan, right=np.nan)
        mask = comp.valid_mask(0.0) & np.isfinite(delayed)
    excess = (comp.hand_distance_cm() - delayed)[mask]
    dt = float(comp_times[1] - comp_times[0]) if len(comp_times) > 1 else 0.01
    width = max(1, int(round(sustained_s / dt)))
    if len(excess) < width:
        return float("nan")
    held = np.lib.stride_tricks.sliding_window_view(excess, width).min(axis=1)
    return max(0.0, float(held.max()))


def error_summary(err: np.ndarray) -> dict[str, float]:
    """Per-axis RMS errors of a (K, 20) error series, averaged within groups.

    Returns hand_cm [cm] (6 hand axes), com_cm [cm] (CoM x, y), posture_rad [rad].
    """
    if len(err) == 0:
        return {"hand_cm": float("nan"), "com_cm": float("nan"), "posture_rad": float("nan")}
    rms = np.sqrt(np.mean(err ** 2, axis=0))
    return {"hand_cm": 100.0 * float(np.mean(rms[list(HAND_INDICES)])),
            "com_cm": 100.0 * float(np.mean(rms[list(COM_INDICES)])),
            "posture_rad": float(np.mean(rms[list(POSTURE_INDICES)]))}


def score_pair(comp: TakeResult, nocomp: TakeResult) -> tuple[TakeResult, TakeResult]:
    """Score a take's two runs against each other, once: the uncompensated run over the
    compensated one's window, and the compensated run's worst excess."""
    nocomp.window = nocomp.errors_after(comp.engaged_at)
    comp.worst_excess_cm = worst_excess_cm(comp, nocomp)
    return comp, nocomp


def pad_take(take: ReferenceTrajectory, lead_in: float, hold: float) -> ReferenceTrajectory:
    """The take with at least ``lead_in`` s of rest before its motion onset and ``hold`` s after
    its motion end (first / last pose held, at the take's median sample period)."""
    from teleop.prescient.training import motion_span

    start, end = motion_span(take)
    before = max(0.0, lead_in - (start - float(take.times[0])))
    after = max(0.0, hold - (float(take.times[-1]) - end))
    if before <= 0.0 and after <= 0.0:
        return take
    dt = float(np.median(np.diff(take.times)))
    n_before = int(np.ceil(before / dt))
    n_after = int(np.ceil(after / dt))
    t0, t1 = float(take.times[0]), float(take.times[-1])
    times = np.concatenate([t0 - dt * np.arange(n_before, 0, -1), take.times,
                            t1 + dt * np.arange(1, n_after + 1)])
    values = np.concatenate([np.repeat(take.values[:1], n_before, 0), take.values,
                             np.repeat(take.values[-1:], n_after, 0)])
    return ReferenceTrajectory(times, values, label=take.label, source=take.source,
                               meta=dict(take.meta), valid=take.valid)


def run_take(take: ReferenceTrajectory, rtt: float, library: TaskLibrary | None, *,
             compensate: bool = True, seed: int = 0, settings: TrialSettings = TrialSettings(),
             compensator_config: CompensatorConfig = CompensatorConfig()) -> TakeResult:
    """Play one take through the delayed link and the compensator (virtual clock).

    ``rtt`` is the round trip [s]: mean τ_f = τ_b = rtt / 2. ``seed`` draws the link's
    jitter, loss and duplication. The take is first padded with rest (:func:`pad_take`,
    settings ``lead_in`` and ``hold``).
    """
    hold = rtt if settings.hold is None else settings.hold
    take = pad_take(take, settings.lead_in, hold)
    one_way = rtt / 2.0
    tau_b = one_way
    link = LinkModel(
        forward=DirectionModel(delay=one_way, jitter=settings.jitter_ratio * one_way,
                               loss=settings.loss, loss_burst=settings.loss_burst,
                               duplicate=settings.duplicate),
        backward=DirectionModel.constant(tau_b))
    clock = VirtualClock(0.0)
    codec = PacketCodec(session_secret())
    operator, robot = connect_virtual(codec, link, clock, seed=seed)
    compensator = PrescientCompensator(library if compensate else None, compensator_config)

    t0 = float(take.times[0])
    send_times = np.arange(0.0, take.duration + 1e-9, 1.0 / settings.send_hz)
    sent = take.interpolate(send_times + t0)
    control_dt = 1.0 / settings.control_hz
    end = take.duration + one_way * (1 + 4 * settings.jitter_ratio) + settings.tail
    ticks = np.arange(0.0, end, control_dt)

    executed = np.full((len(ticks), sent.shape[1]), np.nan)
    states: list[CompensationState] = []
    k_send = 0
    engaged_at = engaged_task = None
    for i, t in enumerate(ticks):
        clock.set(float(t))
        while k_send < len(send_times) and send_times[k_send] <= t + 1e-12:
            # With the take's validity mask, as a live operator's station sends it (a VR take
            # measures the hands and the neck only); encoded at once, so shared, not copied.
            operator.send(RobotReferences.from_flat(send_times[k_send], sent[k_send], valid=take.valid),
                          robot.address)
            k_send += 1
        for received in robot.poll():
            refs = received.packet.message
            compensator.observe(refs.t, refs.to_flat(), received.arrival_time, valid=refs.valid)
        out = compensator.step(float(t), tau_b)
        if out.references is not None:
            executed[i] = out.references
        states.append(out.state)
        if engaged_task is None and out.state is CompensationState.BLEND_IN:
            engaged_task = out.task
        if engaged_at is None and out.state is CompensationState.PREDICTING:
            engaged_at = float(t)

    # Before the first command arrives (a forward delay into the take) the compensator has
    # output nothing. A live operator has streamed the rest pose for longer than that before
    # moving (the real-time trial rests link_settle_s first, and scores those ticks at that
    # pose), so the robot is seen at the take's first pose. Left NaN, these ticks were dropped
    # from the whole-take error, and with them the start of the operator's motion whenever a
    # round trip outlasts the lead-in rest (at 3 s round trip and 1 s lead-in: the robot's
    # first ~1.5 s, against the operator's motion from 0.5 s to 2 s after its onset, where
    # the seen robot has not moved yet): the "whole take" was not whole. (Ticks start
    # at 0, so the operator's first τ_b - lead_in of motion, 0.5 s there, is still no truth
    # sample; a smooth onset has barely moved by then.) Ticks after the first output are left
    # as the compensator gave them; a run whose every command was lost stays unmeasured (all
    # NaN), as before.
    has_output = np.all(np.isfinite(executed), axis=1)
    if has_output.any():
        executed[:int(np.argmax(has_output))] = take.values[0]
    # What the operator does when the video of tick t reaches them: G(t + τ_b).
    truth = take.interpolate(ticks + tau_b + t0)
    delivered = len({round(float(s), 9) for s in send_times[:k_send]})
    result = TakeResult(rtt, compensate, engaged_at, times=ticks, executed=executed, truth=truth,
                        states=states, take_duration=take.duration,
                        packets_lost=max(0, delivered - compensator.observed_count),
                        engaged_task=engaged_task, label=take.label)
    result.whole = result.errors_after(0.0)
    result.window = result.errors_after(engaged_at)
    return result
