"""The robot state records what the controller commanded and the watchdog/compensation states.

Each ``/robot/state`` message carries, besides the measured joints, the (N,) joint angles the
whole-body controller commanded that tick [rad] and the watchdog and compensation states, as
optional fields: recordings made before them still decode (the fields are None), malformed
ones are a :class:`RecordingFormatError` naming the field. The end-to-end test drives the
real robot station and its recorder hooks on a virtual clock, then labels and exports the
recording through the real ``teleop`` entry point.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from retarget.references import ReferenceTrajectory, RobotReferences
from teleop.cli import main
from teleop.clock import VirtualClock
from teleop.control.tracker import references_from_configuration
from teleop.net.delay import LinkModel
from teleop.net.protocol import PacketCodec
from teleop.net.virtual import connect_virtual
from teleop.record import Recorder, RecordingFormatError, RobotStateSample, open_recording
from teleop.record.codecs import ROBOT_STATE_SCHEMA, ROBOT_STATE_SCHEMA_NAME, decode_robot_state, encode_robot_state
from teleop.stations.recording import RobotRecording
from teleop.stations.robot_station import RobotStation, RobotStationConfig

PERIOD_S = 0.01   # the robot station's control period [s]


def _state(t: float = 0.4, **optional) -> RobotStateSample:
    return RobotStateSample(t, np.arange(3.0), -np.arange(3.0), np.array([0.0, 0.1, 0.5]), np.array([0.01, 0.02]),
                            ("a", "b", "c"), **optional)


# ------------------------------------------------------------------ round trip


def test_robot_state_round_trips_with_and_without_commands_and_states(tmp_path):
    path = tmp_path / "states.mcap"
    commanded = _state(0.1, joint_commands=np.array([0.1, np.nan, -0.3]), watchdog="STALE",
                       compensation="predicting")
    plain = _state(0.2)
    with Recorder(path, threaded=False) as rec:
        rec.log_robot_state(commanded, log_time_ns=100_000_000)
        rec.log_robot_state(plain, log_time_ns=200_000_000)
        # A mapping works as well as the class, and a str Enum member is recorded as its value.
        from teleop.prescient.compensator import CompensationState
        rec.log_robot_state({"t": 0.3, "joint_positions": [0.0] * 3, "joint_velocities": [0.0] * 3,
                             "com": [0.0] * 3, "cop": [0.0] * 2, "joint_commands": [1.0, 2.0, 3.0],
                             "watchdog": "ACTIVE", "compensation": CompensationState.BLEND_IN},
                            log_time_ns=300_000_000)
    [(_, got), (_, got_plain), (_, got_mapping)] = open_recording(path).decoded("robot_state")

    np.testing.assert_array_equal(got.joint_commands, commanded.joint_commands)   # NaN as null and back
    assert (got.watchdog, got.compensation) == ("STALE", "predicting")
    np.testing.assert_array_equal(got.joint_positions, commanded.joint_positions)
    assert got.joint_names == ("a", "b", "c")
    assert got_plain.joint_commands is None and got_plain.watchdog is None and got_plain.compensation is None
    np.testing.assert_array_equal(got_mapping.joint_commands, [1.0, 2.0, 3.0])
    assert (got_mapping.watchdog, got_mapping.compensation) == ("ACTIVE", "blend_in")

    # A message of a recording made before the fields existed decodes with them None.
    old = {"t": 0.5, "joint_positions": [0.0, 1.0], "joint_velocities": [0.0, 0.0], "com": [0.0, 0.0, 0.9],
           "cop": [0.0, 0.0], "joint_names": ["a", "b"]}
    decoded = decode_robot_state(json.dumps(old).encode())
    assert (decoded.joint_commands, decoded.watchdog, decoded.compensation) == (None, None, None)
    # Absent fields are not written (older readers and tools see the message they know).
    assert set(json.loads(encode_robot_state(plain))) == {"t", "joint_positions", "joint_velocities", "com", "cop",
                                                          "joint_names"}
    # The schema declares the new fields, optional.
    properties = ROBOT_STATE_SCHEMA["properties"]
    assert properties["joint_commands"]["items"] == {"type": "number"}
    assert properties["watchdog"]["type"] == properties["compensation"]["type"] == "string"
    assert not {"joint_commands", "watchdog", "compensation"} & set(ROBOT_STATE_SCHEMA["required"])


def test_robot_states_are_read_as_arrays_of_a_window(tmp_path):
    path = tmp_path / "series.mcap"
    with Recorder(path, threaded=False) as rec:
        for k in range(5):
            optional = {} if k == 2 else {"joint_commands": np.full(3, float(k)), "watchdog": "ACTIVE",
                                          "compensation": "passthrough"}
            rec.log_robot_state(_state(k * 0.01, **optional), log_time_ns=1_000_000_000 + k * 10_000_000)
    recording = open_recording(path)
    series = recording.robot_states(start_ns=1_010_000_000, end_ns=1_040_000_000, time_origin_ns=1_000_000_000)
    assert len(series) == 3
    np.testing.assert_allclose(series.times, [0.01, 0.02, 0.03])
    assert series.joint_positions.shape == series.joint_velocities.shape == (3, 3)
    assert series.com.shape == (3, 3) and series.cop.shape == (3, 2)
    np.testing.assert_array_equal(series.joint_commands[[0, 2]], [[1.0] * 3, [3.0] * 3])
    assert np.isnan(series.joint_commands[1]).all()          # the sample without commands
    assert list(series.watchdog) == ["ACTIVE", "", "ACTIVE"]
    assert series.joint_names == ("a", "b", "c")


# ------------------------------------------------------------------ malformed fields


def _raw_robot_state_mcap(path, **fields):
    """An MCAP with one robot state message holding ``fields``, written with the mcap library."""
    from mcap.writer import Writer

    message = json.loads(encode_robot_state(_state()))
    message.update(fields)
    with open(path, "wb") as f:
        writer = Writer(f)
        writer.start()
        schema = writer.register_schema(ROBOT_STATE_SCHEMA_NAME, "jsonschema", json.dumps(ROBOT_STATE_SCHEMA).encode())
        channel = writer.register_channel("/robot/state", "json", schema)
        writer.add_message(channel, 200_000_000, json.dumps(message).encode(), 200_000_000)
        writer.finish()
    return path


@pytest.mark.parametrize("fields, error", [
    ({"joint_commands": [0.0, 0.0]}, r"joint_commands must have 3 numbers, got shape \(2,\)"),
    ({"joint_commands": [[0.0, 0.0, 0.0]]}, r"joint_commands must have 3 numbers, got shape \(1, 3\)"),
    ({"watchdog": 3}, "watchdog must be a string, got int"),
    ({"compensation": ["predicting"]}, "compensation must be a string, got list"),
])
def test_malformed_commands_or_states_are_a_recording_format_error(tmp_path, fields, error, capsys):
    path = _raw_robot_state_mcap(tmp_path / "bad.mcap", **fields)
    with pytest.raises(ValueError, match=error):
        decode_robot_state(json.dumps({**json.loads(encode_robot_state(_state())), **fields}).encode())
    with pytest.raises(RecordingFormatError, match=f"/robot/state .*{error}") as e:
        list(open_recording(path).decoded("robot_state"))
    assert str(e.value).startswith(f"{path}: ") and "\n" not in str(e.value)
    with pytest.raises(RecordingFormatError, match=error):
        open_recording(path).robot_states()
    # inspect reports it and goes on; export is refused with the same message, nothing crashes.
    assert main(["dataset", "inspect", str(path)]) == 0
    assert "robot state: " in capsys.readouterr().out
    good = _raw_robot_state_mcap(tmp_path / "good.mcap")
    assert open_recording(good).robot_states().joint_commands is None


def test_bad_commands_or_states_fail_at_the_call_site(tmp_path):
    with Recorder(tmp_path / "x.mcap") as rec:
        with pytest.raises(ValueError, match=r"joint_commands must have shape \(3,\)"):
            rec.log_robot_state(_state(joint_commands=np.zeros(4)))
        with pytest.raises(TypeError, match="watchdog must be a string, got int"):
            rec.log_robot_state(_state(watchdog=1))
        with pytest.raises(TypeError, match="compensation must be a string"):
            rec.log_robot_state({"t": 0.0, "joint_positions": [0.0], "joint_velocities": [0.0], "com": [0.0] * 3,
                                 "cop": [0.0] * 2, "compensation": 0.5})
        commands = np.zeros(3)
        rec.log_robot_state(_state(joint_commands=commands))
        commands[:] = 9.0                      # the caller may reuse its array right away
    [(_, got)] = open_recording(tmp_path / "x.mcap").decoded("robot_state")
    np.testing.assert_array_equal(got.joint_commands, np.zeros(3))


# ------------------------------------------------------------------ the robot station


def robot_session(path, robot, sim):
    """``teleop robot --record path`` on a virtual clock: the real station and its recorder
    hooks, an operator moving the right hand, falling silent (stale), then back (resuming).

    Returns the per-tick (record, station.last_joint_command, controller's q[7:]) triples."""
    clock = VirtualClock()
    operator, robot_ep = connect_virtual(PacketCodec(os.urandom(32)), LinkModel.thesis(0.0), clock, seed=3)
    recording = RobotRecording(path, clock, robot.joint_names)
    station = RobotStation(robot_ep, robot, sim, None,
                           RobotStationConfig(video_hz=0, stale_timeout=0.2, resume_duration=0.3))
    home = references_from_configuration(robot, station.tracker.q).to_flat()
    ticks = []
    try:
        for k in range(200):
            clock.set(k * PERIOD_S)
            if k < 80 or k >= 120:                       # silent for 0.4 s: stale, then resuming
                refs = home.copy()
                refs[6:9] += 0.08 * np.sin(np.pi * k * PERIOD_S) * np.array([1.0, 0.0, 1.0])
                operator.send(RobotReferences.from_flat(k * PERIOD_S, refs), robot_ep.address)
            record = station.tick()
            recording.after_tick(station, record)
            ticks.append((record, station.last_joint_command, station.tracker.q[7:].copy()))
    finally:
        recording.close()
    return ticks


def test_the_robot_station_records_its_joint_commands_and_states_every_tick(tmp_path, robot, station_sim, capsys):
    path = tmp_path / "robot.mcap"
    ticks = robot_session(path, robot, station_sim)
    recording = open_recording(path)
    states = [state for _, state in recording.decoded("robot_state")]
    assert len(states) == len(ticks)                  # one robot state per control tick

    for (record, commanded, controller_q), state in zip(ticks, states):
        assert state.t == record.t
        # Exactly what the whole-body controller commanded that tick (JSON keeps float64).
        np.testing.assert_array_equal(state.joint_commands, commanded)
        np.testing.assert_array_equal(state.joint_commands, controller_q)
        assert (state.watchdog, state.compensation) == (record.watchdog, record.compensation)
    assert {"ACTIVE", "STALE", "RESUMING"} <= {s.watchdog for s in states}
    assert {s.compensation for s in states} == {"passthrough"}      # no task library: pass-through

    # Commands, not measurements: the servos follow them closely but not exactly.
    commands = np.array([s.joint_commands for s in states])
    measured = np.array([s.joint_positions for s in states])
    assert commands.shape == measured.shape == (len(ticks), len(robot.joint_names))
    gap = np.abs(commands - measured)
    assert gap.max() < 0.05 and gap.max() > 1e-4
    assert np.ptp(commands, axis=0).max() > 0.01      # the hand moved: the commands are not the home pose

    assert main(["dataset", "inspect", str(path)]) == 0
    assert (f"robot state: {len(robot.joint_names)} joints; per tick also: joint commands, watchdog state, "
            "compensation state") in capsys.readouterr().out


def test_exported_robot_episodes_carry_the_joint_commands_and_states(tmp_path, robot, station_sim):
    session = tmp_path / "robot.mcap"
    robot_session(session, robot, station_sim)
    states = [state for _, state in open_recording(session).decoded("robot_state")]
    assert main(["dataset", "label", str(session), "--task", "reach"]) == 0
    out = tmp_path / "train"
    assert main(["dataset", "export", str(session), "--channel", "delivered", "-o", str(out)]) == 0

    exported = out / "reach" / "robot_0.npz"
    with np.load(exported, allow_pickle=False) as data:
        np.testing.assert_array_equal(data["joint_commands"], [s.joint_commands for s in states])
        assert list(data["watchdog"]) == [s.watchdog for s in states]
        assert list(data["compensation"]) == [s.compensation for s in states]
        assert tuple(data["joint_names"]) == tuple(robot.joint_names)
        # One row per tick, from the episode start (which is the first message: the whole recording).
        np.testing.assert_allclose(data["robot_times"], np.arange(len(states)) * PERIOD_S, atol=1e-9)
    # Still a reference trajectory for `teleop train`.
    trajectory = ReferenceTrajectory.load_npz(exported)
    assert trajectory.label == "reach" and len(trajectory) > 100


def test_robot_times_of_an_episode_starting_later_count_from_its_start(tmp_path, robot, station_sim, capsys):
    """An episode labelled over 0.5 s .. 1.5 s of the recording: its robot rows count from the
    episode start, as the trajectory's ``times`` do (both log time minus the episode start),
    not from the recording's first message."""
    session = tmp_path / "robot.mcap"
    robot_session(session, robot, station_sim)
    origin = open_recording(session).start_ns
    assert main(["dataset", "label", str(session), "--task", "reach", "--start", "0.5", "--end", "1.5"]) == 0
    capsys.readouterr()
    recording = open_recording(session)                   # the labelled file, written in place
    [episode] = recording.episodes()
    assert (episode.start_ns, episode.stop_ns) == (origin + 500_000_000, origin + 1_500_000_000)   # stop inclusive
    out = tmp_path / "train"
    assert main(["dataset", "export", str(session), "--channel", "delivered", "-o", str(out)]) == 0

    # The robot states of the episode, by log time: ticks 50..150 (--end inclusive).
    in_episode = [(t, s) for t, s in recording.decoded("robot_state") if episode.start_ns <= t <= episode.stop_ns]
    assert len(in_episode) == 101
    delivered = [t for t, _ in recording.decoded("delivered") if episode.start_ns <= t <= episode.stop_ns]
    exported = out / "reach" / "robot_0.npz"
    with np.load(exported, allow_pickle=False) as data:
        robot_times = data["robot_times"]
        np.testing.assert_array_equal(data["joint_commands"], [s.joint_commands for _, s in in_episode])
        assert list(data["watchdog"]) == [s.watchdog for _, s in in_episode]
    assert robot_times[0] == pytest.approx(0.0, abs=1e-9)
    np.testing.assert_allclose(robot_times, np.arange(101) * PERIOD_S, atol=1e-9)
    np.testing.assert_allclose(robot_times, [(t - episode.start_ns) * 1e-9 for t, _ in in_episode], atol=1e-12)

    # On the trajectory's clock: a robot row and a reference logged at the same tick have the same time.
    trajectory = ReferenceTrajectory.load_npz(exported)
    assert len(trajectory) == len(delivered) > 50
    np.testing.assert_allclose(trajectory.times, [(t - episode.start_ns) * 1e-9 for t in delivered], atol=1e-12)
    # The references are delivered in the tick they are sent (no delay): the first at the
    # episode start, every one at the time of that tick's robot row.
    assert trajectory.times[0] == pytest.approx(0.0, abs=1e-9) and trajectory.times[-1] <= robot_times[-1] + 1e-9
    same_tick = np.searchsorted(robot_times, trajectory.times - 1e-9)
    np.testing.assert_allclose(robot_times[same_tick], trajectory.times, atol=1e-12)


def test_a_crashed_robot_recording_replayed_as_input_is_named_a_robot_recording(tmp_path, robot, station_sim):
    """`teleop operator --input robot.mcap` on the recording of a robot station killed with
    SIGKILL said "no operator input could be read: the file is incomplete", blaming the
    crash for what a robot's recording never holds. It says what the file is and how to make
    training data of it: recover, label, export the delivered commands."""
    from teleop.takes import recording_motion

    path = tmp_path / "robot.mcap"
    robot_session(path, robot, station_sim)
    crashed = tmp_path / "crashed.mcap"
    crashed.write_bytes(path.read_bytes()[: path.stat().st_size * 3 // 4])      # no footer: cut short
    with pytest.raises(ValueError) as refused:
        recording_motion(crashed)
    message = str(refused.value)
    assert message.startswith(f"{crashed}: a robot station's recording, which holds no operator input"), message
    assert "and it is cut short" in message
    assert (f"recover it first (teleop dataset recover {crashed} -o RECOVERED.mcap), then its labelled episodes "
            "are training data: label it first (teleop dataset label RECOVERED.mcap --task NAME), then teleop "
            "dataset export RECOVERED.mcap --channel delivered -o DIR") in message
