"""Authenticated but absurd commands: the envelope of plausible references, and the robot
station that refuses what falls outside it (instead of swinging the robot at its limits)."""

import os

import numpy as np
import pytest

from conftest import SYNTHETIC, shared_data
from retarget.envelope import ReferenceEnvelope
from retarget.references import RobotReferences
from teleop.clock import VirtualClock
from teleop.control.tracker import references_from_configuration
from teleop.net.delay import LinkModel
from teleop.net.protocol import PacketCodec
from teleop.net.virtual import connect_virtual
from teleop.stations.robot_station import RobotStation, RobotStationConfig


@pytest.fixture(scope="module")
def icub_target(robot):
    from teleop.robot.target import robot_target

    return robot_target(robot)


@pytest.fixture(scope="module")
def envelope(icub_target):
    return ReferenceEnvelope.for_target(icub_target)


def test_the_icub_envelope_spans_twice_its_standing_reach(envelope, icub_target):
    reach = icub_target.left_shoulder[2] + icub_target.arm_length      # 0.80 m + 0.30 m
    assert 1.0 < reach < 1.2
    assert envelope.reach_m == pytest.approx(2 * reach) and envelope.walk_m == 20.0
    assert (envelope.low_m, envelope.high_m) == pytest.approx((-0.5 * reach, 2 * reach))


@pytest.mark.parametrize("index, value, named", [
    (3, 1e6, "l.hand x, y 1e+06 m from the stance origin (plausible: within 2.2 m)"),
    (1, -50.0, "com x, y 50 m from the stance origin (plausible: within 20 m)"),
    (2, 100.0, "waist z 100 m (plausible: -0.55 to 2.2 m)"),
    (8, -3.0, "r.hand z -3 m"),
    (17, 50.0, "torso pitch 50 rad (plausible: within ±6.28 rad)"),
    (10, -7.0, "l.elbow -7 rad"),
])
def test_a_value_outside_the_envelope_is_named(envelope, robot, index, value, named):
    flat = references_from_configuration(robot, robot.home_configuration()).to_flat()
    assert envelope.violation(flat) is None
    flat[index] = value
    assert named in envelope.violation(flat)


def test_an_operator_who_walked_away_from_the_calibration_is_inside(envelope, robot):
    """The CoM reference follows an operator who walks (unclamped: the robot keeps its own CoM
    over its feet); the hands stay on the robot's stance. A room-scale walk of 5 m is no fault."""
    flat = references_from_configuration(robot, robot.home_configuration()).to_flat()
    flat[0:2] = (4.0, -3.0)
    assert envelope.violation(flat) is None


def _extreme_values(folder) -> np.ndarray:
    from teleop.robot.model import RobotModel
    from teleop.robot.target import robot_target
    from teleop.takes import load_takes

    takes = load_takes(folder, robot_target(RobotModel()), progress=False)
    return [take.trajectory.values for take in takes]


def _outside(envelope, trajectories) -> list[str]:
    return [problem for values in trajectories for row in values
            if (problem := envelope.violation(row)) is not None]


def test_every_synthetic_demonstration_is_inside_the_envelope(envelope):
    assert _outside(envelope, _extreme_values(SYNTHETIC)) == []


@pytest.mark.parametrize("folder", ["hdm05", "xsens_putaside_box"])
def test_every_real_take_is_inside_the_envelope(envelope, folder):
    """HDM05 includes performers who walk sideways (CoM reference 1.38 m away) and twist
    their forearms past pi: still well inside."""
    assert _outside(envelope, _extreme_values(shared_data(folder))) == []


# ------------------------------------------------------------------ the robot station


def test_the_robot_station_refuses_implausible_commands_and_holds_its_pose(robot, station_sim):
    """An operator (holding the secret) sends home, then a second of absurd commands (a
    50 rad torso, a hand a kilometre away, a sample stamped a day after its packet), then home
    again. None is executed or observed: the watchdog goes stale and the robot holds its
    pose, every one is counted, the first is described, and home is taken again after."""
    clock = VirtualClock()
    operator, robot_ep = connect_virtual(PacketCodec(os.urandom(32)), LinkModel.thesis(0.0), clock, seed=2)
    station = RobotStation(robot_ep, robot, station_sim, None,
                           RobotStationConfig(video_hz=0, stale_timeout=0.2, resume_duration=0.3))
    home = references_from_configuration(robot, station.tracker.q).to_flat()
    torso, hand = home.copy(), home.copy()
    torso[17:20] = 50.0
    hand[3:6] = 1e3
    sent_absurd, states, executed = 0, [], []
    for k in range(300):
        t = k * 0.01
        clock.set(t)
        if 100 <= k < 200:
            absurd = [RobotReferences.from_flat(t, torso), RobotReferences.from_flat(t, hand),
                      RobotReferences.from_flat(t + 86400.0, home)][(k - 100) % 3]
            operator.send(absurd, robot_ep.address)
            sent_absurd += 1
        else:
            operator.send(RobotReferences.from_flat(t, home), robot_ep.address)
        record = station.tick()
        states.append(record.watchdog)
        executed.append(station.last_executed.copy())
    assert station.implausible_references == sent_absurd == 100
    assert station.telemetry()["refused_implausible"] == 100
    assert station.first_implausible.endswith("torso pitch 50 rad (plausible: within ±6.28 rad)")
    assert station.compensator.observed_count == 200
    assert "STALE" in states[100:200] and states[-1] == "ACTIVE"
    np.testing.assert_allclose(np.array(executed), np.tile(home, (300, 1)), atol=1e-9)
    assert station.max_joint_speed_ratio < 0.05


def test_a_sample_time_far_from_its_send_time_is_implausible(robot, station_sim):
    from types import SimpleNamespace

    from teleop.net.protocol import Packet, PacketType

    station = RobotStation(connect_virtual(PacketCodec(os.urandom(32)), LinkModel.thesis(0.0), VirtualClock())[1],
                           robot, station_sim, None, RobotStationConfig(video_hz=0))
    home = references_from_configuration(robot, station.tracker.q).to_flat()

    def received(t: float, send_time: float):
        packet = Packet(PacketType.REFERENCES, 7, 1, 1, send_time, RobotReferences.from_flat(t, home), 200)
        return SimpleNamespace(packet=packet, peer=("127.0.0.1", 9), arrival_time=send_time)

    assert station.implausibility(received(5.0, 5.02)) is None          # a loop period old
    assert station.implausibility(received(0.0, 9.5)) is None           # a replay falling behind
    assert station.implausibility(received(5.5, 5.0)) is None           # half a second ahead
    assert "+1e+11 s from its packet's send time" in station.implausibility(received(1e11, 0.0))
    assert "-12 s from its packet's send time" in station.implausibility(received(0.0, 12.0))


def test_a_delivered_command_stamped_centuries_ahead_is_recorded_not_fatal(tmp_path, robot):
    """MCAP times end in 2554: a command whose send time (on a broken operator clock) lies
    beyond is recorded at that end. Before, the recorder's error stopped the robot station."""
    from teleop.record.reader import open_recording
    from teleop.stations.recording import MAX_PUBLISH_TIME_S, RobotRecording

    clock = VirtualClock(3.0)
    recording = RobotRecording(tmp_path / "robot.mcap", clock, robot.joint_names)
    home = references_from_configuration(robot, robot.home_configuration()).to_flat()
    for t in (1e11, 1.0):
        recording.delivered(RobotReferences.from_flat(t, home), arrival=3.0)
    assert recording.recorder.error is None
    recording.close()
    delivered = list(open_recording(tmp_path / "robot.mcap").messages("/commands/delivered"))
    assert [m.publish_time_ns for m in delivered] == [int(MAX_PUBLISH_TIME_S * 1e9), 1_000_000_000]


def test_the_operator_withholds_what_the_robot_would_refuse(robot, icub_target):
    """References outside the envelope (an input that drifted, a wrong calibration) are not
    sent but counted and described, where the operator can act on them."""
    from teleop.stations.operator_station import OperatorStation

    clock = VirtualClock()
    operator_ep, robot_ep = connect_virtual(PacketCodec(os.urandom(32)), LinkModel.thesis(0.0), clock, seed=4)
    home = references_from_configuration(robot, robot.home_configuration()).to_flat()
    far = home.copy()
    far[6:8] = (3.0, 0.0)                    # the right hand 3 m ahead

    class References:
        """A source of robot references (as a replay of recorded ones): home, far, home
        stamped 15 s ago (a stalled time code), home."""

        def __init__(self):
            self.k = 0

        def poll(self, now=None):
            self.k += 1
            return now, RobotReferences.from_flat(now - 15.0 * (self.k == 3), far if self.k == 2 else home)

    station = OperatorStation(operator_ep, robot_ep.address, References(), icub_target)
    for k in range(4):
        clock.set(20.0 + 0.01 * k)
        station.tick()
    clock.set(20.1)
    delivered = [r.packet.message.to_flat() for r in robot_ep.poll()]
    assert (station.sent, station.implausible) == (2, 2) and len(delivered) == 2
    assert all(np.array_equal(flat, home) for flat in delivered)
    assert station.first_implausible == "r.hand x, y 3 m from the stance origin (plausible: within 2.2 m)"


def test_first_violation_of_a_trajectory_agrees_with_violation_frame_by_frame():
    from retarget.envelope import ReferenceEnvelope
    from teleop.robot.model import RobotModel
    from teleop.robot.target import robot_target

    envelope = ReferenceEnvelope.for_target(robot_target(RobotModel()))
    rng = np.random.default_rng(0)
    values = np.zeros((200, 20))
    values[:, [2, 5, 8]] = 0.5
    assert envelope.first_violation(values) is None
    for column, value in ((3, 5.0), (0, 30.0), (5, -1.0), (12, 7.0), (7, np.nan)):
        bad = values.copy()
        frame = int(rng.integers(0, 200))
        bad[frame:, column] = value
        expected = next((k, why) for k, flat in enumerate(bad) if (why := envelope.violation(flat)) is not None)
        assert envelope.first_violation(bad) == expected == (frame, envelope.violation(bad[frame]))


def test_a_non_finite_command_from_upstream_is_held_not_raised(robot, station_sim, monkeypatch):
    """Should a NaN ever come out of the compensator (a bug: arrivals and predictions are
    checked), the station holds its last pose and counts it; the balance filter, which
    refuses NaN, never sees it, and the loop goes on."""
    from teleop.prescient.compensator import CompensationState, CompensatorOutput

    clock = VirtualClock()
    operator, robot_ep = connect_virtual(PacketCodec(os.urandom(32)), LinkModel.thesis(0.0), clock, seed=3)
    station = RobotStation(robot_ep, robot, station_sim, None, RobotStationConfig(video_hz=0))
    home = references_from_configuration(robot, station.tracker.q).to_flat()
    broken = home.copy()
    broken[4] = np.nan
    for k in range(60):
        clock.set(k * 0.01)
        operator.send(RobotReferences.from_flat(k * 0.01, home), robot_ep.address)
        if k == 1:
            # The operator is attached (its own compensator and clock estimate): the
            # compensator runs once the operator's clock is known (one exchange, one clock),
            # and returns NaN for ten ticks.
            station.clock_estimator.add(0.0, 0.0, 0.0, 0.0)
            real_step = station.compensator.step
            monkeypatch.setattr(station.compensator, "step", lambda t, tau_b: CompensatorOutput(
                broken.copy(), CompensationState.PASSTHROUGH) if 20 <= k < 30 else real_step(t, tau_b))
        station.tick()
        assert np.all(np.isfinite(station.last_executed))
    assert station.nonfinite_commands == 10
    assert station.telemetry()["nonfinite_commands_held"] == 10


@pytest.mark.parametrize("tau_b", [-0.1, float("nan"), float("inf")])
def test_a_default_backward_delay_that_is_no_delay_is_refused_at_once(tau_b):
    """Before, the station started and its compensator refused every tick."""
    with pytest.raises(ValueError, match="default_tau_b must be a finite delay >= 0"):
        RobotStationConfig(default_tau_b=tau_b)


@pytest.mark.parametrize("field, value, words", [
    ("control_hz", 0.0, "control_hz must be finite and > 0"),
    ("feedback_hz", 0.0, "feedback_hz must be finite and > 0"),
    ("stale_timeout", float("nan"), "stale_timeout must be finite and > 0"),
    ("video_hz", -1.0, "video_hz must be finite and >= 0"),
    ("physics_steps", 0, "physics_steps and clock_window must be >= 1"),
])
def test_a_station_rate_that_cannot_run_is_refused_where_it_is_given(field, value, words):
    """A zero control or FEEDBACK rate divided by zero inside the station (its constructor,
    its first tick), far from the value that caused it."""
    with pytest.raises(ValueError, match=words):
        RobotStationConfig(**{field: value})
