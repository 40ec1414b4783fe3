"""The operator station on poses it cannot calibrate on (no head, every tracker at the
origin): it keeps running, sends nothing and says why, and calibrates on the first pose
that can; a recalibration that fails keeps the previous calibration. Before, the first such
pose ended `teleop operator` with a traceback (KeyError 'head', ZeroDivisionError)."""

import numpy as np
import pytest

from retarget.calibration import CalibrationError, calibrate
from retarget.envelope import ReferenceEnvelope
from retarget.human import HumanMotion
from teleop.clock import VirtualClock
from teleop.inputs.synthetic import generate
from teleop.net.delay import LinkModel
from teleop.net.protocol import PacketCodec
from teleop.net.virtual import connect_virtual
from teleop.robot.model import RobotModel
from teleop.robot.target import robot_target
from teleop.stations.operator_station import OperatorStation
from teleop.stations.operator_status import TrackingReport

MOTION = generate("reach_forward", seed=3, rate_hz=50.0)


def _pose(k: int) -> dict:
    return {name: (MOTION.positions[k, i].copy(), MOTION.orientations[k, i].copy())
            for i, name in enumerate(MOTION.segment_names)}


def _pelvis_only(k: int) -> dict:
    return {"pelvis": _pose(k)["pelvis"]}


def _all_at_origin(k: int) -> dict:
    return {name: (np.zeros(3), q) for name, (_, q) in _pose(k).items()}


def _one_frame(pose: dict) -> HumanMotion:
    names = tuple(pose)
    return HumanMotion(np.array([0.0]), names, np.array([[pose[n][0] for n in names]]),
                       np.array([[pose[n][1] for n in names]]), source="test")


@pytest.mark.parametrize("pose, message", [(_pelvis_only(0), "without the head, left_hand, right_hand"),
                                           (_all_at_origin(0), "measures 0 m tall")])
def test_calibration_refuses_a_pose_of_no_person(pose, message):
    with pytest.raises(CalibrationError, match=message):
        calibrate(_one_frame(pose))


class _Scripted:
    """The synthetic operator's poses, some replaced: ``script[k]`` makes pose k."""

    def __init__(self, script: dict):
        self.script, self.k = script, 0

    def poll(self, now):
        k, self.k = self.k, self.k + 1
        return float(MOTION.times[k]), self.script.get(k, _pose)(k)


def _run(source, ticks: int, recalibrate_at: int | None = None) -> tuple[OperatorStation, list]:
    clock = VirtualClock(0.0)
    operator_ep, robot_ep = connect_virtual(PacketCodec(b"k" * 32), LinkModel.thesis(0.0), clock, seed=1)
    station = OperatorStation(operator_ep, robot_ep.address, source, robot_target(RobotModel()))
    sent = []
    for k in range(ticks):
        clock.set(k / 50.0)
        if k == recalibrate_at:
            station.recalibrate()
        sent.append(station.tick())
    return station, sent


def test_the_station_waits_for_a_pose_it_can_calibrate_on():
    station, sent = _run(_Scripted({0: _pelvis_only, 1: _all_at_origin}), 10)
    assert sent[0] is None and sent[1] is None
    assert all(r is not None for r in sent[2:])
    assert station.calibration_failures == 2 and station.calibrated
    assert station.calibration_problem is None          # cleared by the calibration that worked


def test_a_recalibration_that_fails_keeps_the_previous_calibration():
    bad = {k: _all_at_origin for k in range(20, 25)}
    station, sent = _run(_Scripted(bad), 30, recalibrate_at=20)
    assert station.calibration_failures == 5
    # Retargeted with the old calibration meanwhile (what the origin-only poses give is the
    # envelope's to judge), recalibrated on the first pose after them.
    assert all(r is not None for r in sent[:20]) and all(r is not None for r in sent[25:])
    assert station.calibration_problem is None and station.calibrated


def test_nan_references_are_outside_the_envelope():
    envelope = ReferenceEnvelope.for_target(robot_target(RobotModel()))
    flat = np.zeros(20)
    flat[2] = 1.0
    assert envelope.violation(flat) is None
    flat[5] = np.nan
    assert "not a number the robot can follow" in envelope.violation(flat)


def test_tracking_lines_are_said_at_once_then_at_most_every_interval():
    report = TrackingReport(interval_s=5.0)
    assert report.update((), 0.0) is None
    assert report.update(("l5",), 1.0) == "l5 not tracked: nothing sent, the robot holds its pose"
    lines = [report.update(("l5",) if k % 2 else (), 1.0 + 0.01 * k) for k in range(1, 200)]
    assert lines == [None] * 199                         # flickering: silent within the interval
    line = report.update((), 6.5)
    assert line.startswith("all tracked again: sending (tracking changed 199 times in the last 6 s")
    assert report.update((), 20.0) is None               # nothing new to say
