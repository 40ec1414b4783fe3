"""Stations on a virtual clock: same packet path as UDP, faster than real time."""

import statistics

import numpy as np
import pytest

from retarget.references import FLAT_SIZE, RobotReferences
from teleop.clock import VirtualClock
from teleop.net.clock_sync import ClockOffsetEstimator, ClockSyncClient, answer_ping
from teleop.net.delay import DirectionModel, LinkModel
from teleop.net.protocol import Feedback, PacketCodec, PacketType
from teleop.net.virtual import VirtualEndpoint, connect_virtual
from teleop.net.watchdog import StaleCommandWatchdog, WatchdogState

CODEC = PacketCodec(b"virtual-test-secret-0123456")
REFS = RobotReferences.from_flat(0.0, np.zeros(FLAT_SIZE))


def test_thesis_trial_forward_delay_and_reordering():
    """60 s of 100 Hz commands over the thesis link in well under a second of wall time."""
    clock = VirtualClock()
    operator, robot = connect_virtual(CODEC, LinkModel.thesis(0.75), clock, seed=11)
    received = []
    for k in range(6000 + 200):
        clock.set(k * 0.01)
        if k < 6000:
            operator.send(REFS.with_time(clock.now()), robot.address)
        received += robot.poll()
    delays = [r.arrival_time - r.packet.send_time for r in received]  # Eq. 5.19 (same clock)
    seqs = [r.packet.seq for r in received]
    assert len(received) == 6000 and robot.stats.rx.dropped_total == 0
    assert seqs != sorted(seqs)
    assert statistics.fmean(delays) == pytest.approx(0.75, rel=0.05)
    assert statistics.stdev(delays) == pytest.approx(0.1, rel=0.05)
    assert all(r.packet.message.t == r.packet.send_time for r in received)


def _exchange_clocks(clock, client, pinger, responder, ticks):
    """Run ``client`` (pinging from ``pinger``) against ``responder`` for ``ticks`` 10 ms ticks."""
    for k in range(ticks):
        clock.set(k * 0.01)
        client.tick()
        for received in responder.poll():
            answer_ping(responder, received)
        for received in pinger.poll():
            client.handle(received)


def test_clock_sync_over_the_thesis_link_shows_the_documented_bias():
    """Robot clock 3 s ahead. The operator pings (pings ride the jittery forward direction):
    min-RTT reads low by ≈ 0.88σ, median is unbiased, both within the rtt/2 bound."""
    clock = VirtualClock()
    operator, robot = connect_virtual(CODEC, LinkModel.thesis(0.75), clock, seed=12, robot_clock_offset=3.0)
    client = ClockSyncClient(operator, robot.address, interval=0.25, estimator=ClockOffsetEstimator(16))
    _exchange_clocks(clock, client, operator, robot, ticks=2000)
    estimator = client.estimator
    assert len(estimator.samples) == 16
    assert estimator.min_rtt_offset - 3.0 == pytest.approx(-0.088, abs=0.06)
    assert estimator.median_offset - 3.0 == pytest.approx(0.0, abs=0.04)
    assert abs(estimator.offset - 3.0) <= estimator.max_error


def test_watchdog_over_a_link_outage_and_feedback_back():
    clock = VirtualClock()
    operator, robot = connect_virtual(CODEC, LinkModel(DirectionModel.constant(0.1), DirectionModel.constant(0.1)),
                                      clock, seed=13)
    watchdog = StaleCommandWatchdog(clock, timeout=0.3, resume_duration=0.5)
    states, feedback = [], []
    for k in range(400):
        clock.set(k * 0.01)
        if not 150 <= k < 250:  # the operator goes silent for 1 s
            operator.send(REFS, robot.address)
        for received in robot.poll():
            watchdog.command_received(received.arrival_time)
        status = watchdog.update()
        states.append(status.state)
        if k % 10 == 0:
            robot.send(Feedback(watchdog_state=status.state, last_ref_seq=robot.stats.rx.accepted), operator.address)
        feedback += [r.packet.message for r in operator.poll() if r.packet.packet_type == PacketType.FEEDBACK]
    first_active = states.index(WatchdogState.ACTIVE)
    assert states[9] == WatchdogState.WAITING and states[10] == WatchdogState.RESUMING  # first command at 0.1 s
    assert states[first_active:first_active + 50].count(WatchdogState.ACTIVE) == 50
    assert WatchdogState.STALE in states[150 + 10 + 30:260]   # silence + delay + timeout
    assert states[-1] == WatchdogState.ACTIVE and watchdog.stale_events == 1
    assert WatchdogState.STALE in {f.watchdog_state for f in feedback}


def test_unrouted_destination_is_a_counted_send_error():
    clock = VirtualClock()
    lonely = VirtualEndpoint(CODEC, "lonely", clock)
    assert lonely.send(REFS, ("nobody", 0)) is None
    assert lonely.stats.send_errors == {"EHOSTUNREACH": 1}


def test_the_robot_stations_clock_exchange_reads_the_offset_within_a_few_ms_over_the_thesis_link():
    """The robot pings the operator (its pongs ride the forward link, σ = 100 ms of jitter) with
    the station's own settings: after 40 s the offset is right to a few milliseconds. With 16
    exchanges 0.5 s apart it was 14 ms off (RMS), an error τ_f and τ̂_b both carry."""
    from teleop.stations.robot_station import RobotStationConfig, clock_offset_estimator

    config = RobotStationConfig()
    errors = []
    for seed in range(12):
        clock = VirtualClock()
        operator, robot = connect_virtual(CODEC, LinkModel.thesis(0.75), clock, seed=seed, robot_clock_offset=3.0)
        client = ClockSyncClient(robot, operator.address, interval=config.clock_ping_interval,
                                 estimator=clock_offset_estimator(config))
        _exchange_clocks(clock, client, robot, operator, ticks=4000)
        errors.append(client.estimator.offset + 3.0)    # operator − robot clock is −3 s
    assert float(np.sqrt(np.mean(np.square(errors)))) < 0.008
