"""The robot station says when its whole-body controller holds its command: references inside
the plausibility envelope but out of the robot's workspace (a hand 1.5 m ahead) are refused by
the controller, which keeps its last command. Before, the tracker rewrote its message every
tick and nothing reported it: the robot just stood still. A real station, controller and
simulation on a virtual clock (the session of tests/test_robot_station_floods.py)."""

from __future__ import annotations

import numpy as np

from retarget.references import SIGNAL_SLICES, RobotReferences
from teleop.robot.target import robot_target
from teleop.stations.cli import _controller_holds
from teleop.stations.robot_events import RobotEvents
from tests.test_robot_station_floods import DT, Session


def test_a_hold_of_the_controller_is_counted_and_said_once(robot, station_sim, capsys):
    home = robot_target(robot).initial_references().to_flat()
    far = home.copy()
    far[SIGNAL_SLICES["left_hand"]] += np.array([1.5, 0.0, 0.0])    # 1.5 m further ahead: out of reach
    session = Session(robot, station_sim, None)
    assert session.station.envelope.violation(far) is None, "plausible: it reaches the controller"
    events = RobotEvents()
    for k in range(200):
        flat = home if k < 100 or k >= 150 else far

        def send(now, flat=flat):
            session.operator.send(RobotReferences.from_flat(now, flat), session.robot_ep.address)
        session.tick(k, send)
        events.say_new(session.station)
    statuses = session.station.telemetry()["controller_status_ticks"]
    # Commands sent from tick 100 to 149 arrive 0.3 s later (the station's smoothing of the
    # executed references moves the edges by a few ticks): about half a second refused.
    refused = statuses.get("rejected_target", 0)
    assert 40 <= refused <= 60 and sum(statuses.values()) == 200
    first = session.station.first_controller_hold
    assert first.startswith("t = ") and 1.3 <= float(first[4:].split(" s:")[0]) <= 1.5
    assert "left hand target" in first
    said = [line for line in capsys.readouterr().err.splitlines() if "controller held" in line]
    assert len(said) == 1 and "out of the robot's workspace" in said[0]
    held = f"{refused * DT:.2f} s"
    assert _controller_holds(statuses, DT) == (f", the whole-body controller held its command for {held} "
                                               f"(references out of the workspace: {held})")


def test_a_session_without_holds_says_nothing_of_them():
    assert _controller_holds({"ok": 2599}, DT) == "" and _controller_holds({}, DT) == ""
    assert _controller_holds({"ok": 10, "held": 3}, DT) == ", the whole-body controller held its command for 0.03 s"
