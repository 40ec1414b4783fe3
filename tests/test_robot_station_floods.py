"""The robot station when packets come too fast: an authenticated operator sending at 1 kHz,
a queue of 1000 commands flushed at once after a network stall, an unauthenticated flood
(wrong key, garbage) and a second operator, on a virtual clock through the real station,
endpoint, filter and compensator. Counts only (estimator updates, packets taken, counters,
commanded joint speeds), never wall-clock time."""

from __future__ import annotations

import heapq
import os
from pathlib import Path

import numpy as np
import pytest

from retarget.references import RobotReferences
from teleop.clock import VirtualClock
from teleop.net.clock_sync import answer_ping
from teleop.net.delay import DirectionModel, VirtualLink
from teleop.net.protocol import PacketCodec
from teleop.net.virtual import VirtualEndpoint
from teleop.prescient.compensator import CompensatorConfig, PrescientCompensator
from teleop.stations.robot_station import RobotStation, RobotStationConfig
from tests.conftest import synthetic_takes

ROOT = Path(__file__).resolve().parents[1]
DT = 0.01            # the station's control period [s]
DELAY = 0.3          # one way [s]
BOUND = CompensatorConfig().max_estimator_updates


@pytest.fixture(scope="module")
def library_and_take(robot):
    """(library learned from the other takes, the held-out reach_forward take: moving 0.8-4.7 s)."""
    from teleop.prescient.training import learn_library

    takes = synthetic_takes(("reach_forward", "squat"))
    return learn_library([t.trajectory for t in takes[1:]]), takes[0].trajectory


def operator_sample(take, t: float) -> np.ndarray:
    """The take's references at time t [s] (interpolated; its last pose after its end)."""
    return np.array([np.interp(t, take.times, take.values[:, j]) for j in range(take.values.shape[1])])


class StallLink(VirtualLink):
    """A constant delay, except that what is sent during [start, end) is queued and comes out
    all at once at end + delay: a router's queue flushed after a stall. (Delivered 1 ns early,
    so that a packet sent at a tick arrives at the tick ``delay`` later whatever the rounding
    of the tick times.)"""

    def __init__(self, delay: float, start: float = np.inf, end: float = np.inf) -> None:
        super().__init__(DirectionModel.constant(delay), seed=1)
        self.delay, self.start, self.end = delay, start, end

    def push(self, t_send: float, data: bytes) -> int:
        t_deliver = (self.end if self.start <= t_send < self.end else t_send) + self.delay - 1e-9
        heapq.heappush(self._heap, (t_deliver, next(self._order), t_send, data))
        return 1


class CountingEstimator:
    """Counts the calls of the real estimator's ``update`` (wrapped, still called)."""

    def __init__(self) -> None:
        self.calls = 0
        self._wrapped: object | None = None

    def follow(self, station: RobotStation) -> None:
        estimator = station.compensator.estimator
        if estimator is None or estimator is self._wrapped:
            return
        update = estimator.update

        def counted(*args, **kwargs):
            self.calls += 1
            return update(*args, **kwargs)

        estimator.update = counted
        self._wrapped = estimator


class Session:
    """An operator (and whoever else sends) towards a real RobotStation on a virtual clock.

    Per tick: what the station took, how many estimator updates it made, its record and
    the joints the whole-body controller commanded."""

    def __init__(self, robot, sim, library, *, stall: tuple[float, float] = (np.inf, np.inf),
                 compensator: CompensatorConfig | None = None) -> None:
        self.clock = VirtualClock()
        self.codec = PacketCodec(os.urandom(32))
        self.operator = VirtualEndpoint(self.codec, "operator", self.clock)
        self.robot_ep = VirtualEndpoint(self.codec, "robot", self.clock)
        self.operator.link_to(self.robot_ep, StallLink(DELAY, *stall))
        self.robot_ep.link_to(self.operator, StallLink(DELAY))
        config = RobotStationConfig(video_hz=0, compensator=compensator or CompensatorConfig())
        self.robot = robot
        self.station = RobotStation(self.robot_ep, robot, sim, library, config)
        self.counting = CountingEstimator()
        self.taken, self.updates, self.records, self.commands = [], [], [], []
        self.newest_taken = -np.inf      # the newest time stamp of the commands taken [s]

    def sender(self, name: str, codec: PacketCodec | None = None, delay: float = DELAY) -> VirtualEndpoint:
        """Another sender towards the station (``codec``: its own key, else the operator's)."""
        endpoint = VirtualEndpoint(codec or self.codec, name, self.clock)
        endpoint.link_to(self.robot_ep, StallLink(delay))
        return endpoint

    def tick(self, k: int, send) -> None:
        """Tick ``k``: the operator answers clock pings, ``send(now)`` sends, the station ticks."""
        now = k * DT
        self.clock.set(now)
        for received in self.operator.poll():
            answer_ping(self.operator, received)
        send(now)
        self.counting.follow(self.station)
        before = self.counting.calls
        record = self.station.tick()
        self.counting.follow(self.station)     # a new operator gets a new compensator
        self.taken.append(len(self.station.taken_references))
        self.newest_taken = max([self.newest_taken] + [refs.t for refs, _ in self.station.taken_references])
        self.updates.append(self.counting.calls - before)
        self.records.append(record)
        self.commands.append(self.station.last_joint_command)

    def commanded_speed_ratio(self) -> float:
        """Largest commanded joint speed over all ticks, as a fraction of its limit."""
        speeds = np.abs(np.diff(np.array(self.commands), axis=0)) / DT
        return float(np.max(speeds / self.robot.limits.velocity))


def _fast_operator_tick(session: Session, take, k: int, per_tick: int) -> None:
    """Tick ``k`` of an operator sending ``per_tick`` references per control tick (10: 1 kHz)."""
    def send(now):
        for j in range(per_tick):
            t = now + j * DT / per_tick
            session.operator.send(RobotReferences.from_flat(t, operator_sample(take, t)), session.robot_ep.address)
    session.tick(k, send)


def test_a_1000_command_queue_flush_conditions_the_estimator_a_bounded_number_of_times(robot, station_sim,
                                                                                        library_and_take):
    """A 1 kHz operator (10x its input rate) whose link stalls for 1 s mid-motion, then delivers
    the 1000 queued commands at once: the station takes them all in one tick (each one is
    a command: the newest is executed, they are recorded and time τ_f), but the estimator
    is conditioned on at most ``max_estimator_updates`` of them in any tick, the rest
    counted as coalesced; the tick still commands the robot, within its joint speed limits,
    and the commands that follow are taken as before."""
    library, take = library_and_take
    ticks, burst_at = 330, round((2.5 + DELAY) / DT)
    session = Session(robot, station_sim, library, stall=(1.5, 2.5))
    coalesced = []
    for k in range(ticks):
        _fast_operator_tick(session, take, k, 10)
        coalesced.append(session.station.telemetry()["coalesced_references"])

    # The queue came out in one tick (with that tick's own ten).
    assert session.taken[burst_at] == 1010
    assert max(session.taken[:burst_at]) == max(session.taken[burst_at + 1:]) == 10
    # Never more estimator updates than the bound, in that tick or any other; the estimator
    # was fed in that tick (the motion's onset is in the queue), and what it was not fed is counted.
    assert max(session.updates) <= BOUND
    assert 1 <= session.updates[burst_at]
    assert coalesced[burst_at] - coalesced[burst_at - 1] >= 900
    # A steady 1 kHz operator: two of its ten samples a tick (estimator_updates_per_step),
    # outside the onset replay (before tick 150) and the flush.
    per_step = CompensatorConfig().estimator_updates_per_step
    steady = [n for k, n in enumerate(session.updates) if 150 <= k < burst_at - 60 or k > burst_at]
    assert steady and max(steady) == per_step
    assert sum(session.updates) < 0.3 * sum(session.taken)
    # The tick of the flush commanded the robot, and no tick moved a joint beyond its limit.
    assert np.all(np.isfinite(session.records[burst_at].executed))
    assert np.all(np.isfinite(session.commands[burst_at]))
    assert session.commanded_speed_ratio() <= 1.0
    assert session.station.fell_at is None
    # Afterwards: the newest command is the delayed reference, the watchdog (which held the
    # robot during the stall) follows the operator again, and every command was taken.
    assert session.newest_taken == pytest.approx((ticks - 1) * DT - DELAY + 9 * DT / 10)
    np.testing.assert_array_equal(session.station.compensator.latest_delayed,
                                  operator_sample(take, session.newest_taken))
    assert session.records[burst_at - 1].watchdog == "STALE"        # held its pose during the stall
    assert session.records[-1].watchdog in ("RESUMING", "ACTIVE")
    telemetry = session.station.telemetry()
    assert telemetry["network"]["accepted_references"] == sum(session.taken)
    assert not any(key.startswith("dropped_") for key in telemetry["network"])
    assert telemetry["refused_other_operator"] == telemetry["refused_implausible"] == 0


def test_without_the_bound_the_same_flush_would_update_the_estimator_per_command(robot, station_sim,
                                                                                 library_and_take):
    """What the bound removes: with it lifted, the tick of the flush updated the estimator
    once per queued command after the onset (hundreds of ~0.6 ms updates in one 10 ms tick)."""
    library, take = library_and_take
    burst_at = round((2.5 + DELAY) / DT)
    unbounded = CompensatorConfig(estimator_updates_per_step=10**9, max_estimator_updates=10**9)
    session = Session(robot, station_sim, library, stall=(1.5, 2.5), compensator=unbounded)
    for k in range(burst_at + 1):
        _fast_operator_tick(session, take, k, 10)
    assert session.updates[burst_at] >= 500
    assert session.station.telemetry()["coalesced_references"] == 0


def test_the_compensator_keeps_the_newest_of_a_burst_and_spreads_the_rest(library_and_take):
    """Of 1000 samples observed before one step, the estimator is conditioned on at most
    ``max_estimator_updates``: the newest among them, the others spread over the burst."""
    library, take = library_and_take
    comp = PrescientCompensator(library)
    times = np.arange(0.0, 0.5, 0.01)                   # at rest (the hands move from 0.78 s)
    for t in times:
        comp.observe(t, operator_sample(take, t), arrival_op=t + DELAY)
        comp.step(t + DELAY, DELAY)
    assert comp._t0 is None and comp.estimator.n_observations == 0
    burst = 0.5 + np.arange(1000) * 0.002               # 2 s with the motion's onset, 500 Hz, at once
    for t in burst:
        comp.observe(t, operator_sample(take, t), arrival_op=burst[-1] + DELAY)
    assert comp._t0 is not None and comp.estimator.n_observations == 0    # conditioned at the step
    comp.step(burst[-1] + DELAY, DELAY)
    t0 = comp._t0
    observed = np.sort(comp.estimator.observations[0]) + t0
    assert 2 <= len(observed) == comp.estimator.n_observations <= BOUND
    assert observed[-1] == pytest.approx(burst[-1])                     # the newest,
    assert observed[0] == pytest.approx(burst[burst >= t0][0])         # the oldest since the onset,
    gaps = np.diff(observed)
    assert gaps.max() < 2 * gaps.mean()                                 # and evenly between
    # Every sample from the onset on was either conditioned on or counted as coalesced.
    assert comp.observations_coalesced + len(observed) == np.sum(burst >= t0)
    assert comp.observed_count == len(times) + len(burst)              # every sample observed
    assert comp.latest_delayed is not None
    np.testing.assert_array_equal(comp.latest_delayed, operator_sample(take, burst[-1]))


def test_an_unauthenticated_flood_is_dropped_and_counted_while_the_operator_gets_through(robot, station_sim,
                                                                                         library_and_take):
    """300 datagrams under another key and 300 of garbage per 10 ms tick (60 000/s) beside a
    100 Hz operator: every one of the flood is dropped and counted by reason, none reaches
    the compensator, and in the same ticks every command of the operator is taken as on a
    quiet link (none coalesced: a 100 Hz operator is never thinned)."""
    library, take = library_and_take
    session = Session(robot, station_sim, library)
    intruder = session.sender("intruder", PacketCodec(os.urandom(32)), delay=0.0)
    rng = np.random.default_rng(3)
    ticks, flood = 160, 300
    sent = 0

    def send(now):
        nonlocal sent
        session.operator.send(RobotReferences.from_flat(now, operator_sample(take, now)), session.robot_ep.address)
        sent += 1
        for _ in range(flood):
            intruder.send(RobotReferences.from_flat(now, operator_sample(take, now)), session.robot_ep.address)
            intruder._transmit(rng.bytes(150), session.robot_ep.address)

    for k in range(ticks):
        session.tick(k, send)
    first = round(DELAY / DT)                       # the tick the operator's first command arrives
    network = session.station.telemetry()["network"]
    assert network["dropped_bad_mac"] == ticks * flood
    assert sum(v for key, v in network.items() if key.startswith("dropped_")) == 2 * ticks * flood
    # The operator's commands arrive in the flood's ticks, one a tick, as without it.
    assert session.taken == [0] * first + [1] * (ticks - first)
    assert network["accepted_references"] == sum(session.taken) == sent - first
    assert session.station.compensator.observed_count == sum(session.taken)
    assert session.station.foreign_references == 0 and session.station.operators_attached == 1
    assert max(session.updates) <= BOUND
    assert session.station.coalesced_references == 0
    assert session.records[-1].watchdog == "ACTIVE"
    assert session.commanded_speed_ratio() <= 1.0


def test_a_second_authenticated_sender_is_refused_and_does_not_feed_the_estimator(robot, station_sim,
                                                                                  library_and_take):
    """Another operator station started by mistake (same secret) sends its own motion at
    100 Hz, interleaved with the operator's: each of its commands is refused and counted,
    the robot keeps following the first operator, whose commands alone reach the compensator."""
    library, take = library_and_take
    session = Session(robot, station_sim, library)
    second = session.sender("second operator")
    ticks, second_from = 160, 50
    second_sent = 0

    def send(now):
        nonlocal second_sent
        session.operator.send(RobotReferences.from_flat(now, operator_sample(take, now)), session.robot_ep.address)
        if now >= second_from * DT - 1e-9:
            # Its own motion, 2 s ahead of the operator's.
            second.send(RobotReferences.from_flat(now, operator_sample(take, now + 2.0)), session.robot_ep.address)
            second_sent += 1

    for k in range(ticks):
        session.tick(k, send)
    station = session.station
    # All of its commands that arrived were refused, none was taken.
    assert station.foreign_references == second_sent - round(DELAY / DT)     # the rest still in flight
    assert station.telemetry()["refused_other_operator"] == station.foreign_references
    assert station.first_foreign_sender == "second operator:0"
    assert station.operators_attached == 1 and station.operator == ("operator", 0)
    assert station.compensator.observed_count == sum(session.taken)
    assert session.newest_taken == pytest.approx((ticks - 1) * DT - DELAY)
    np.testing.assert_array_equal(station.compensator.latest_delayed, operator_sample(take, session.newest_taken))
    assert max(session.updates) <= BOUND and station.coalesced_references == 0
    assert session.commanded_speed_ratio() <= 1.0


def test_before_the_first_clock_exchange_the_estimator_keeps_up_and_nothing_is_coalesced(robot, station_sim,
                                                                                         library_and_take):
    """An operator at 100 Hz whose clock pings go unanswered for the first 2 s of its motion:
    the robot passes its delayed commands through (it cannot put them on its clock yet), and
    the estimator is still conditioned on them tick by tick. It used to be fed only when the
    compensator stepped, so the samples of those ticks piled up (without bound, for an
    operator that never answers) and were thinned at the first step."""
    library, take = library_and_take
    session = Session(robot, station_sim, library)
    answering_from = 200           # tick: 2 s in, the motion well under way (it starts at 0.8 s)
    for k in range(400):
        now = k * DT
        session.clock.set(now)
        for received in session.operator.poll():
            if k >= answering_from:
                answer_ping(session.operator, received)
        session.operator.send(RobotReferences.from_flat(now, operator_sample(take, now)), session.robot_ep.address)
        session.counting.follow(session.station)
        before = session.counting.calls
        session.station.tick()
        session.updates.append(session.counting.calls - before)
    unsynced = session.updates[:answering_from]
    assert sum(unsynced) > 50, "the estimator was not conditioned before the first clock exchange"
    assert max(session.updates) <= BOUND
    assert session.station.clock_estimator.offset is not None     # it did synchronise later
    assert session.station.coalesced_references == 0
