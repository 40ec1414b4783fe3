"""An operator station restarted at the same address (a fixed --bind, a proxy that keeps its
socket): the robot sees the operator's address with a new source id and sequence numbers
starting again at 1. It is taken as a new operator; before, its commands stayed below the
old session's sequence numbers, none counted as a command, and the robot held its pose for
as long as the first session had lasted. An earlier session's packets replayed from that
address afterwards are refused. A real station on a virtual clock
(the session of tests/test_robot_station_floods.py)."""

from __future__ import annotations

from retarget.references import RobotReferences
from teleop.net.virtual import VirtualEndpoint
from teleop.robot.target import robot_target
from tests.test_robot_station_floods import DELAY, StallLink, Session


def test_an_operator_restarted_at_the_same_address_is_followed_at_once(robot, station_sim):
    home = robot_target(robot).initial_references().to_flat()
    session = Session(robot, station_sim, None)
    station = session.station
    first = session.operator

    def send_from(endpoint, t):
        endpoint.send(RobotReferences.from_flat(t, home), session.robot_ep.address)

    for k in range(300):                                  # 3 s of the first session
        session.tick(k, lambda now: send_from(first, now))
    restarted = VirtualEndpoint(session.codec, first.address[0], session.clock)   # same address
    assert restarted.address == first.address and restarted.source_id != first.source_id
    restarted.link_to(session.robot_ep, StallLink(DELAY))
    for k in range(300, 400):                             # 1 s of the restarted one
        session.tick(k, lambda now: send_from(restarted, now))
    assert station.operators_attached == 2
    assert station.watchdog.stale_events == 0, "the restarted operator's commands kept the robot going"
    assert station.foreign_references == 0
    old_t = 2.0                                           # a first-session sample, replayed
    replay = RobotReferences.from_flat(old_t, home)
    for k in range(400, 450):                             # (they arrive DELAY = 0.3 s later)
        session.tick(k, lambda now: (first.send(replay, session.robot_ep.address) if k < 410 else None,
                                     send_from(restarted, now)))
    assert station.foreign_references > 0 and station.operators_attached == 2
    assert station.watchdog.stale_events == 0
