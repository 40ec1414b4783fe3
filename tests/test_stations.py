"""The robot station: forged traffic, stale commands, and the full loop on the virtual clock."""

import os
import socket

import numpy as np
import pytest

from retarget.references import RobotReferences
from teleop.clock import VirtualClock
from teleop.control.tracker import references_from_configuration
from teleop.net.delay import LinkModel
from teleop.net.protocol import PacketCodec
from teleop.net.virtual import connect_virtual
from teleop.net.watchdog import WatchdogState
from teleop.stations.robot_station import RobotStation, RobotStationConfig


@pytest.fixture()
def station_sim(robot):
    from teleop.sim.simulator import Simulation

    sim = Simulation(robot, visual=False)
    yield sim
    sim.close()


def test_robot_station_rejects_garbage_and_forged_packets_over_udp(robot, station_sim):
    """A running station on a real UDP socket: garbage, packets signed with the wrong
    secret and replays are all dropped and counted; genuine commands keep working."""
    from teleop.clock import WallClock
    from teleop.net.udp import UdpEndpoint

    secret, wrong = os.urandom(32), os.urandom(32)
    robot_ep = UdpEndpoint(PacketCodec(secret), ("127.0.0.1", 0), clock=WallClock())
    good = UdpEndpoint(PacketCodec(secret), ("127.0.0.1", 0), clock=WallClock())
    forger = UdpEndpoint(PacketCodec(wrong), ("127.0.0.1", 0), clock=WallClock())
    raw = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    station = RobotStation(robot_ep, robot, station_sim, None, RobotStationConfig(video_hz=0))
    home = references_from_configuration(robot, station.tracker.q)
    rng = np.random.default_rng(0)
    try:
        far = home.to_flat()
        far[6] += 0.5  # a forged command would throw the right hand forward
        for k in range(30):
            raw.sendto(rng.bytes(int(rng.integers(1, 1500))), robot_ep.address)
            forger.send(RobotReferences.from_flat(k * 0.01, far), robot_ep.address)
            station.tick()
        assert station.compensator.observed_count == 0
        assert station.watchdog.update().state == WatchdogState.WAITING
        # Genuine commands are accepted...
        for k in range(20):
            good.send(home.with_time(k * 0.01), robot_ep.address)
            station.tick()
        accepted = station.compensator.observed_count
        assert accepted > 0
        # ...and a replay of captured genuine datagrams is not.
        captured = good.codec.encode(home.with_time(0.5), source_id=good.source_id, stream_id=1, seq=1, send_time=0.5)
        for _ in range(5):
            raw.sendto(captured, robot_ep.address)
        station.tick()
        assert station.compensator.observed_count == accepted
        stats = robot_ep.stats.summary()
        assert stats.get("dropped_bad_mac", 0) >= 30
        assert sum(v for k, v in stats.items() if k.startswith("dropped_")) >= 60
        assert np.all(np.isfinite(station.last_executed))
        np.testing.assert_allclose(station.last_executed[6], home.right_hand[0], atol=0.02)
    finally:
        raw.close()
        for ep in (robot_ep, good, forger):
            ep.close()


def test_robot_station_holds_a_safe_pose_when_commands_go_stale(robot, station_sim):
    clock = VirtualClock()
    operator, robot_ep = connect_virtual(PacketCodec(os.urandom(32)), LinkModel.thesis(0.0), clock, seed=1)
    station = RobotStation(robot_ep, robot, station_sim, None,
                           RobotStationConfig(video_hz=0, stale_timeout=0.2, resume_duration=0.5, smoothing_hz=0))
    home = references_from_configuration(robot, station.tracker.q).to_flat()
    moved = home.copy()
    moved[6:9] += [0.05, 0.0, 0.05]  # right hand forward and up
    states = []
    for k in range(250):
        clock.set(k * 0.01)
        if k < 100 or k >= 160:  # commands stop for 0.6 s
            operator.send(RobotReferences.from_flat(k * 0.01, moved), robot_ep.address)
        record = station.tick()
        states.append(record.watchdog)
        if record.watchdog == "STALE":
            held = record.executed
    assert "STALE" in states and states[-1] == "ACTIVE"
    # While stale, the last executed references are held, not dropped to anything else.
    np.testing.assert_allclose(held[6:9], moved[6:9], atol=1e-6)
    # Resuming blends: no jump between consecutive executed references.
    assert "RESUMING" in states


@pytest.mark.slow
def test_full_loop_demo_session_keeps_balance(robot):
    from teleop.demo import DemoSettings, run_session

    log = run_session(DemoSettings(duration=8, seed=11), None, with_video=False, progress=False)
    assert not log.fell
    assert log.max_foot_slip_mm < 5.0


@pytest.mark.slow
def test_demo_session_finishes_the_motion_under_way(robot):
    """The session outlasts ``duration`` while the operator is in a motion and ends once
    the operator has rested a round trip plus ``settle``: the demo's plot and figures
    never stop with the robot in the middle of a motion."""
    from teleop.clock import VirtualClock
    from teleop.demo import DemoSettings, run_session
    from teleop.inputs.synthetic import SyntheticOperator

    settings = DemoSettings(duration=4.0, seed=5, rtt=1.5)
    log = run_session(settings, None, with_video=False, progress=True)   # the bar's text changes past 4 s
    t = np.asarray(log.times)
    clock = VirtualClock(0.0)
    with SyntheticOperator(seed=settings.seed, performer=settings.performer, clock=clock.now) as operator:
        operator.poll(0.0)
        operator.frames_until(t[-1])
        assert operator.task_at(settings.duration) != "rest"   # the case under test
        tail = t[t >= t[-1] - settings.rtt - settings.settle + 0.02]
        assert all(operator.task_at(x) == "rest" for x in tail)
        # ... and not longer than needed: the operator was still moving just before.
        assert operator.task_at(t[-1] - settings.rtt - settings.settle - 0.05) != "rest"
    assert t[-1] < settings.duration + settings.max_overrun
