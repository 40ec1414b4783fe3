"""A VR operator's references measure only some signals (head + hand trackers: the hands and
the neck); the others hold the robot's initial references. Their validity mask must reach
the compensator's estimator, through the REFERENCES packet, in the trial harness and in the
robot station, and the compensator must not move what was not measured.

A real library (full-body synthetic takes, reach_forward / pick_floor / squat, the operator's
own performance left out) and a real compensator; the VR take is that performance's head and
hand trackers written as a VR tracker file and retargeted, as `teleop operator --input FILE`
would. Counts, states and values only, never wall-clock time.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from retarget.human import HumanMotion
from retarget.readers import write_vr_csv
from retarget.references import FLAT_SIZE, SIGNAL_SLICES, RobotReferences
from teleop.clock import VirtualClock
from teleop.net.clock_sync import answer_ping
from teleop.net.delay import DirectionModel, VirtualLink
from teleop.net.protocol import PacketCodec
from teleop.net.virtual import VirtualEndpoint
from teleop.prescient.compensator import CompensationState
from teleop.stations.robot_station import RobotStation, RobotStationConfig
from teleop.trials.delay_trial import run_take
from tests.conftest import synthetic_takes

ROOT = Path(__file__).resolve().parents[1]
SYNTHETIC = ROOT / "datasets" / "synthetic"
TASKS = ["reach_forward", "pick_floor", "squat"]
OPERATOR = "reach_forward_5"          # the performance the VR operator gives (left out of the library)
S = CompensationState


@pytest.fixture(scope="module")
def target():
    from teleop.robot.model import RobotModel
    from teleop.robot.target import robot_target

    return robot_target(RobotModel("icub"))


@pytest.fixture(scope="module")
def library(target):
    from teleop.prescient.training import learn_library

    takes = synthetic_takes(tuple(TASKS))
    return learn_library([t.trajectory for t in takes if t.path.stem != OPERATOR])


@pytest.fixture(scope="module")
def vr_take(target, tmp_path_factory):
    """The operator's performance as a VR set-up tracks it: head and hands only."""
    from teleop.takes import load_take_files

    motion = HumanMotion.load_npz(SYNTHETIC / "reach_forward" / f"{OPERATOR}.npz")
    segments = ("head", "left_hand", "right_hand")
    idx = [motion.index(s) for s in segments]
    path = tmp_path_factory.mktemp("vr") / f"{OPERATOR}.csv"
    write_vr_csv(HumanMotion(motion.times, segments, motion.positions[:, idx], motion.orientations[:, idx]), path)
    take = load_take_files([(path, "reach_forward")], target, progress=False)[0].trajectory
    # What the retargeting could measure from three trackers: the hands and the neck.
    assert take.valid is not None and take.valid[SIGNAL_SLICES["right_hand"]].all()
    assert not take.valid[SIGNAL_SLICES["torso"]].any() and not take.valid[SIGNAL_SLICES["com_xy"]].any()
    unmeasured = ~take.valid
    assert np.ptp(take.values[:, unmeasured], axis=0).max() == 0.0      # held at the initial references
    return take


@pytest.mark.parametrize("rtt", [1.5, 3.0])
def test_a_vr_stream_is_recognised_and_compensated_once_its_mask_reaches_the_estimator(library, vr_take, rtt):
    """Through the trial harness (the real codec and delayed link): with the mask, the VR
    reach is recognised as a reach, compensated to its end and brings the seen hands closer;
    the same stream with its placeholders taken as measured (valid=None, what the robot did
    before the mask was passed on) starts a pick_floor, which the Δσ test then rejects."""
    masked = run_take(vr_take, rtt, library, seed=5)
    assert masked.engaged_task == "reach_forward" and masked.engaged_at is not None
    states = masked.states
    engaged = states.index(S.PREDICTING)
    # Predicted until the motion was over (no rejection: no blend-out straight from blend-in).
    assert all(b is not S.BLEND_OUT for a, b in zip(states, states[1:]) if a is S.BLEND_IN)
    assert sum(s is S.PREDICTING for s in states[engaged:]) >= 100     # 1 s of predictions at least
    nocomp = run_take(vr_take, rtt, library, compensate=False, seed=5)
    assert masked.window["hand_cm"] < 0.8 * nocomp.errors_after(masked.engaged_at)["hand_cm"]

    placeholders = run_take(replace(vr_take, valid=None), rtt, library, seed=5)
    assert placeholders.engaged_task == "pick_floor"


def test_unmeasured_signals_are_never_moved_by_the_compensator(library, vr_take):
    """At every tick, whatever the state, the signals the VR set-up did not measure are
    executed as the operator's input sent them (the robot's initial references): the
    library's correlations predict no torso, arm or CoM motion the operator did not make.
    Without the mask they moved as soon as compensation began (the wrong task's torso,
    arms and CoM)."""
    unmeasured = ~vr_take.valid
    held = vr_take.values[0, unmeasured]
    for valid in (vr_take.valid, None):
        result = run_take(replace(vr_take, valid=valid), 1.5, library, seed=5)
        assert S.BLEND_IN in result.states          # compensation engaged (with the mask: to the end)
        moved = np.abs(result.executed[:, unmeasured] - held).max()
        if valid is not None:
            assert moved == 0.0
        else:
            assert moved > 0.01
    # The measured signals are predicted: the compensated hands leave the delayed stream.
    masked = run_take(vr_take, 1.5, library, seed=5)
    nocomp = run_take(vr_take, 1.5, library, compensate=False, seed=5)
    hands = list(range(FLAT_SIZE))[SIGNAL_SLICES["right_hand"]]
    assert np.abs(masked.executed[:, hands] - nocomp.executed[:, hands]).max() > 0.05


def test_the_mask_reaches_the_estimator_through_the_robot_stations_packet_path(robot, station_sim, library,
                                                                              vr_take):
    """A VR operator's REFERENCES packets (mask in the packet) into a real RobotStation on a
    virtual clock: every estimator update is given the packet's mask, the station's
    compensator engages on the reach, and its output keeps the unmeasured signals as sent."""
    delay, dt = 0.5, 0.01
    clock = VirtualClock()
    codec = PacketCodec(os.urandom(32))
    operator = VirtualEndpoint(codec, "operator", clock)
    robot_ep = VirtualEndpoint(codec, "robot", clock)
    operator.link_to(robot_ep, VirtualLink(DirectionModel.constant(delay), seed=1))
    robot_ep.link_to(operator, VirtualLink(DirectionModel.constant(delay), seed=2))
    station = RobotStation(robot_ep, robot, station_sim, library, RobotStationConfig(video_hz=0))

    masks: list[np.ndarray | None] = []
    wrapped: list[object] = []

    def follow() -> None:
        estimator = station.compensator.estimator
        if estimator is None or any(e is estimator for e in wrapped):
            return
        update = estimator.update

        def recording(t, y, mask=None):
            masks.append(None if mask is None else np.array(mask))
            return update(t, y, mask)

        estimator.update = recording
        wrapped.append(estimator)

    t0 = float(vr_take.times[0])
    unmeasured = ~vr_take.valid
    held = vr_take.values[0, unmeasured]
    states = []
    for k in range(round((vr_take.duration + 2 * delay + 0.5) / dt)):
        now = k * dt
        clock.set(now)
        for received in operator.poll():
            answer_ping(operator, received)
        s = min(now, vr_take.duration)
        refs = RobotReferences.from_flat(now, vr_take.interpolate(np.array([s + t0]))[0], valid=vr_take.valid.copy())
        operator.send(refs, robot_ep.address)
        follow()
        station.tick()
        follow()            # the operator attached: the station's compensator for it
        out = station.last_compensator_output
        states.append(out.state)
        if out.references is not None:
            assert np.array_equal(out.references[unmeasured], held)
        if out.state is S.BLEND_IN:
            assert out.task == "reach_forward"
    assert len(masks) > 100
    assert all(m is not None and np.array_equal(m, vr_take.valid) for m in masks)
    assert S.PREDICTING in states
