"""Station recordings become training data: `teleop dataset label FILE --task NAME`, then export.

The recordings are made by the station recorder classes (teleop/stations/recording.py) driven
on a virtual clock: the operator station with the synthetic operator over a virtual link, and
the robot side's delivered commands through its recorded endpoint. The CLI runs in-process
through the real ``teleop`` entry point.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from retarget.references import FLAT_SIZE, ReferenceTrajectory, RobotReferences
from teleop.cli import main
from teleop.clock import VirtualClock
from teleop.inputs.synthetic import SyntheticOperator
from teleop.net.delay import LinkModel
from teleop.net.protocol import PacketCodec
from teleop.net.virtual import connect_virtual
from teleop.record import Recorder, open_recording
from teleop.record.dataset_cli import COMMAND_SUMMARIES
from teleop.stations.operator_station import OperatorStation
from teleop.stations.recording import OperatorRecording, RobotRecording
from teleop.takes import list_take_files, load_take

PERIOD_S = 0.01   # the operator station's tick [s]


@pytest.fixture(scope="module")
def target(robot):
    from teleop.robot.target import robot_target

    return robot_target(robot)


def operator_session(path, target, ticks: int = 100, task: str | None = None) -> list[RobotReferences]:
    """``teleop operator --record path [--task task]`` on a virtual clock: the synthetic
    operator retargeted by the real station, every stream recorded; returns the references sent."""
    clock = VirtualClock()
    operator, robot = connect_virtual(PacketCodec(os.urandom(32)), LinkModel.thesis(0.0), clock, seed=1)
    recording = OperatorRecording(path, clock, task=task)
    source = recording.wrap_source(SyntheticOperator(seed=0, clock=clock.now))
    station = OperatorStation(operator, robot.address, source, target)
    sent = []
    for _ in range(ticks):
        clock.advance(PERIOD_S)
        refs = station.tick()
        if refs is not None:
            recording.references(refs)
            sent.append(refs)
        recording.after_tick(operator)
    recording.close()
    return sent


def test_station_recording_is_labelled_and_exported_for_training(tmp_path, target, capsys):
    session = tmp_path / "operator.mcap"
    # 3 s: the synthetic operator stands still for its first 2.5 s, and a take whose hands
    # move less than 5 mm is refused as no motion (teleop.takes.MIN_HAND_MOTION_M).
    sent = operator_session(session, target, ticks=300)
    before = open_recording(session)
    assert before.episodes() == [] and before.channel("references").count == len(sent) == 300
    messages = [(m.topic, m.log_time_ns, m.data) for m in before.messages()]   # read before FILE is replaced

    assert main(["dataset", "export", str(session), "--out", str(tmp_path / "none")]) == 1
    assert "`teleop dataset label FILE --task NAME`" in capsys.readouterr().err

    assert main(["dataset", "label", str(session), "--task", "squat"]) == 0
    assert "episode 0" in capsys.readouterr().out
    labelled = open_recording(session)
    [episode] = labelled.episodes()
    assert (episode.number, episode.task, episode.stopped) == (0, "squat", True)
    assert (episode.start_ns, episode.stop_ns) == (before.start_ns, before.end_ns)   # the whole recording
    # Every message is kept, byte for byte; only the two markers are new.
    assert [(m.topic, m.log_time_ns, m.data) for m in labelled.messages() if m.topic != "/episodes"] == messages
    assert labelled.message_count == before.message_count + 2

    out = tmp_path / "train"
    assert main(["dataset", "export", str(session), "--out", str(out)]) == 0
    traj = ReferenceTrajectory.load_npz(out / "squat" / "operator_0.npz")
    assert traj.label == "squat" and len(traj) == len(sent)
    assert traj.times[0] == 0.0
    np.testing.assert_allclose(np.diff(traj.times), PERIOD_S, atol=1e-9)
    np.testing.assert_allclose(traj.values, np.stack([r.to_flat() for r in sent]))
    # The layout `teleop train DIR` reads: one take of task "squat".
    [(path, label)] = list_take_files(out)
    take = load_take(path, label, target)
    assert take.label == "squat" and len(take.trajectory) == len(sent)


def test_a_window_becomes_a_second_episode(tmp_path, target, capsys):
    session = tmp_path / "operator.mcap"
    sent = operator_session(session, target, ticks=100, task="squat")
    recording = open_recording(session)
    # The first message is the task's start marker at log time 0; the references of tick k
    # (k = 1..100) are logged at k * 10 ms.
    assert recording.start_ns == 0 and recording.channel("references").first_ns == 10_000_000
    assert main(["dataset", "label", str(session), "--task", "wave", "--start", "0.2", "--end", "0.5"]) == 0
    episodes = open_recording(session).episodes()
    assert [(e.number, e.task) for e in episodes] == [(0, "squat"), (1, "wave")]
    assert episodes[1].duration_s == pytest.approx(0.3)
    # Seconds from the first message (not from the first reference, 10 ms later).
    assert (episodes[1].start_ns, episodes[1].stop_ns) == (200_000_000, 500_000_000)

    out = tmp_path / "train"
    assert main(["dataset", "export", str(session), "-o", str(out)]) == 0
    wave = ReferenceTrajectory.load_npz(out / "wave" / "operator_1.npz")
    assert wave.label == "wave" and len(wave) == 31        # 0.2 .. 0.5 s at 100 Hz, the end included
    # ... and they are the references sent at ticks 20..50 (0.2 s .. 0.5 s), in order.
    np.testing.assert_array_equal(wave.values, np.stack([r.to_flat() for r in sent[19:50]]))
    np.testing.assert_allclose(wave.times, np.arange(31) * PERIOD_S, atol=1e-9)
    assert len(ReferenceTrajectory.load_npz(out / "squat" / "operator_0.npz")) == 100


def test_station_recording_with_a_task_is_one_labelled_episode(tmp_path, target):
    session = tmp_path / "operator.mcap"
    operator_session(session, target, ticks=50, task="squat")
    recording = open_recording(session)
    [episode] = recording.episodes()
    assert episode.task == "squat" and episode.start_ns <= recording.channel("references").first_ns
    assert episode.stop_ns == recording.end_ns and ("task", "squat") in recording.metadata[0][1].items()

    # The record button stops that episode; its next episode carries the same task.
    clock = VirtualClock()
    buttons = OperatorRecording(tmp_path / "buttons.mcap", clock, task="wave")
    for _ in range(3):
        clock.advance(1.0)
        buttons.toggle_episode()
    buttons.close()
    episodes = open_recording(tmp_path / "buttons.mcap").episodes()
    assert [(e.number, e.task) for e in episodes] == [(0, "wave"), (1, "wave")]


def test_robot_recording_exports_its_delivered_commands(tmp_path, capsys):
    clock = VirtualClock()
    operator, robot = connect_virtual(PacketCodec(os.urandom(32)), LinkModel.thesis(0.0), clock, seed=2)
    session = tmp_path / "robot.mcap"
    recording = RobotRecording(session, clock)
    for i in range(60):
        clock.advance(PERIOD_S)
        operator.send(RobotReferences.from_flat(clock.now(), np.full(FLAT_SIZE, i * 0.01)), robot.address)
        for received in robot.poll():       # what the robot station takes, as it records it
            recording.delivered(received.packet.message, received.arrival_time)
    recording.close()
    delivered = open_recording(session).channel("delivered").count
    assert delivered == 60

    assert main(["dataset", "label", str(session), "--task", "reach"]) == 0
    assert main(["dataset", "export", str(session), "-o", str(tmp_path / "refs")]) == 1
    assert "no channel /references (references are on /commands/delivered)" in capsys.readouterr().err
    assert main(["dataset", "export", str(session), "--channel", "delivered", "-o", str(tmp_path / "train")]) == 0
    traj = ReferenceTrajectory.load_npz(tmp_path / "train" / "reach" / "robot_0.npz")
    assert traj.label == "reach" and len(traj) == delivered


def test_robot_task_episode_holds_the_commands_received_while_the_station_started(tmp_path, capsys):
    """`teleop robot --record F --task T`: commands that reached the socket while the
    simulation loaded are logged at their arrival, before the recording existed; the episode
    starts when the station began to listen, so that they are in it (24 of 973 were lost)."""
    clock = VirtualClock()
    operator, robot = connect_virtual(PacketCodec(os.urandom(32)), LinkModel.thesis(0.0), clock, seed=3)
    listening_since = clock.now()
    for i in range(20):                     # the station is loading: nobody reads the socket
        clock.advance(PERIOD_S)
        operator.send(RobotReferences.from_flat(clock.now(), np.full(FLAT_SIZE, i * 0.01)), robot.address)
    session = tmp_path / "robot.mcap"
    recording = RobotRecording(session, clock, task="reach", task_since=listening_since)
    for received in robot.poll():
        recording.delivered(received.packet.message, received.arrival_time)
    recording.close()
    assert main(["dataset", "export", str(session), "--channel", "delivered", "-o", str(tmp_path / "train")]) == 0
    assert len(ReferenceTrajectory.load_npz(tmp_path / "train" / "reach" / "robot_0.npz")) == 20


def test_label_refuses_what_would_lose_or_confuse_data(tmp_path, target, capsys):
    session = tmp_path / "operator.mcap"
    operator_session(session, target, ticks=30)
    assert main(["dataset", "label", str(session), "--episode", "0", "--task", "squat"]) == 1
    assert "no episode 0 (episodes: none): leave out --episode" in capsys.readouterr().err
    assert main(["dataset", "label", str(session), "--task", "squat", "--start", "5"]) == 1
    assert "no messages from 5 s" in capsys.readouterr().err
    assert main(["dataset", "label", str(session), "--task", "squat", "--start", "0.2",
                 "--end", "0.1"]) == 2   # options that cannot go together
    assert "--end (0.1 s) must not come before --start (0.2 s)" in capsys.readouterr().err

    other = tmp_path / "other.mcap"
    other.write_bytes(b"someone else's data")
    assert main(["dataset", "label", str(session), "--task", "squat", "-o", str(other)]) == 1
    assert f"-o {other} exists: pass --force" in capsys.readouterr().err
    assert other.read_bytes() == b"someone else's data"
    assert main(["dataset", "label", str(session), "--task", "squat", "-o", str(other), "--force"]) == 0
    assert [e.task for e in open_recording(other).episodes()] == ["squat"]
    assert open_recording(session).episodes() == []                       # the source is untouched

    assert main(["dataset", "label", str(other), "--task", "wave"]) == 1  # episodes exist: which one?
    assert "has episodes [0]: relabel one with --episode N" in capsys.readouterr().err
    assert main(["dataset", "label", str(other), "--episode", "0", "--start", "0", "--task", "wave"]) == 2
    assert "give one or the other" in capsys.readouterr().err     # options that cannot go together
    assert [e.task for e in open_recording(other).episodes()] == ["squat"]
    assert not list(tmp_path.glob("*.tmp"))


def test_label_in_place_of_a_crashed_recording_needs_force(tmp_path, capsys):
    session = tmp_path / "session.mcap"
    with Recorder(session, threaded=False, chunk_size_bytes=4096) as recorder:   # small chunks: a cut keeps some
        for i in range(200):
            recorder.log_references(RobotReferences.from_flat(i * 0.01, np.full(FLAT_SIZE, i * 0.01)),
                                    log_time_ns=i * 10_000_000)
    data = session.read_bytes()
    crashed = tmp_path / "crashed.mcap"
    crashed.write_bytes(data[:len(data) * 2 // 3])                       # what a killed station leaves
    assert open_recording(crashed).discarded_bytes > 0 and open_recording(crashed).message_count > 2
    assert main(["dataset", "label", str(crashed), "--task", "squat"]) == 1
    assert "cut short" in capsys.readouterr().err and crashed.read_bytes() == data[:len(data) * 2 // 3]
    assert main(["dataset", "label", str(crashed), "--task", "squat", "-o", str(tmp_path / "copy.mcap")]) == 0
    assert main(["dataset", "label", str(crashed), "--task", "squat", "--force"]) == 0
    assert open_recording(crashed).complete and [e.task for e in open_recording(crashed).episodes()] == ["squat"]


@pytest.mark.parametrize("command", ["trim", "recover"])
def test_trim_and_recover_do_not_overwrite_without_force(tmp_path, target, capsys, command):
    session = tmp_path / "operator.mcap"
    operator_session(session, target, ticks=20)
    out = tmp_path / "out.mcap"
    out.write_bytes(b"keep me")
    assert main(["dataset", command, str(session), "-o", str(out)]) == 1
    assert f"-o {out} exists: pass --force" in capsys.readouterr().err and out.read_bytes() == b"keep me"
    assert main(["dataset", command, str(session), "-o", str(out), "--force"]) == 0
    assert open_recording(out).message_count == open_recording(session).message_count


@pytest.mark.parametrize("command", sorted(COMMAND_SUMMARIES))
def test_every_dataset_subcommand_describes_itself(capsys, command):
    with pytest.raises(SystemExit) as exc:
        main(["dataset", command, "-h"])
    assert exc.value.code == 0
    assert f"teleop dataset {command}: {COMMAND_SUMMARIES[command]}." in " ".join(capsys.readouterr().out.split())


def test_every_frame_of_a_file_is_sent_and_recorded_whatever_the_ticks_phase(tmp_path, target):
    """A 100 Hz input at the 100 Hz loop: with the first tick 3 ms late (the source's time
    origin) and the next ones 0-6 ms late, half of them fell before their frame's time and
    the next took the frame after: 15 % of the poses were neither sent nor recorded as
    raw input, at no late tick. Every frame due goes out and into the recording now."""
    from teleop.inputs.base import GatedSource
    from teleop.inputs.replay import FileReplay
    from teleop.inputs.synthetic import generate

    clock = VirtualClock()
    operator, robot = connect_virtual(PacketCodec(os.urandom(32)), LinkModel.thesis(0.0), clock, seed=1)
    path = tmp_path / "operator.mcap"
    recording = OperatorRecording(path, clock)
    motion = generate("squat", seed=1, rate_hz=100.0)
    replay = FileReplay(motion, clock=clock.now)
    source = GatedSource(recording.wrap_source(replay))
    station = OperatorStation(operator, robot.address, source, target)
    rng = np.random.default_rng(0)
    sent = []
    for k in range(300):
        clock.set(k * PERIOD_S + (0.003 if k == 0 else rng.uniform(0.0, 0.006)))
        station.tick()
        for refs in station.sent_in_tick:
            recording.references(refs)
        sent += station.sent_in_tick
    recording.close()
    due = int(np.searchsorted(motion.times - motion.times[0], clock.now() - 0.003 + 1e-9, side="right"))
    times = np.array([refs.t for refs in sent])
    assert len(sent) == due and np.all(np.diff(times) > 0)
    np.testing.assert_allclose(np.diff(times), np.diff(motion.times[:due]), atol=1e-9)
    saved = open_recording(path)
    assert saved.channel("/operator/segments").count == saved.channel("references").count == due


def test_label_refuses_an_episode_export_would_skip(tmp_path, target, capsys):
    """An instant, or a window holding one sample, was labelled without a word and then
    skipped by export ("1 samples on references")."""
    session = tmp_path / "operator.mcap"
    operator_session(session, target, ticks=30)       # references every 10 ms, 0 .. 0.29 s
    assert main(["dataset", "label", str(session), "--task", "squat", "--start", "0.1", "--end", "0.1"]) == 2
    assert "an episode is a time span" in capsys.readouterr().err
    assert main(["dataset", "label", str(session), "--task", "squat", "--start", "0.285"]) == 1
    assert "holds 1 on /references: `export` needs two samples" in capsys.readouterr().err
    assert open_recording(session).episodes() == []                       # nothing written
    assert main(["dataset", "label", str(session), "--task", "squat", "--start", "0.275"]) == 0


@pytest.mark.parametrize("argv", [["trim", "--end", "0.1", "-o", "{out}"], ["recover", "-o", "{out}"],
                                  ["label", "--task", "squat", "-o", "{out}"]])
def test_dataset_copies_get_a_recording_name(tmp_path, target, capsys, argv):
    """`trim/recover/label -o x.png` wrote recordings that `dataset list` and `export DIR`
    then never found (record and the stations refuse such names)."""
    session = tmp_path / "operator.mcap"
    operator_session(session, target, ticks=30)
    out = tmp_path / "copy.png"
    assert main(["dataset", argv[0], str(session), *[a.format(out=out) for a in argv[1:]]]) == 2
    assert f"-o {out}: give a .mcap file name" in capsys.readouterr().err
    assert not out.exists()


def test_trim_refuses_a_window_of_episode_markers_only(tmp_path, target, capsys):
    """A window after the last sample copied the synthesized episode markers alone ("2
    messages"), a recording of nothing."""
    session = tmp_path / "session.mcap"
    recorder = Recorder(session, clock_ns=lambda: 0)
    recorder.start_episode("squat", log_time_ns=0)
    for i in range(10):                                   # 0 .. 0.09 s
        recorder.log_references(RobotReferences.from_flat(i * 0.01, np.zeros(FLAT_SIZE)), log_time_ns=i * 10**7)
    recorder.stop_episode(log_time_ns=5 * 10**8)          # the episode ended 0.41 s after the last sample
    recorder.close()
    out = tmp_path / "tail.mcap"
    assert main(["dataset", "trim", str(session), "--start", "0.2", "-o", str(out)]) == 1
    assert "nothing from --start 0.2 s on" in capsys.readouterr().err and not out.exists()
    assert main(["dataset", "trim", str(session), "--start", "0.05", "-o", str(out)]) == 0


def test_export_skips_an_episode_with_a_hole(tmp_path, capsys):
    """A damaged chunk skipped in the middle of a recording left a 1.84 s hole in the exported
    take, without a word; train learned a straight line across it."""
    session = tmp_path / "holed.mcap"
    recorder = Recorder(session, clock_ns=lambda: 0)
    recorder.start_episode("squat", log_time_ns=0)
    for t in [*np.arange(0.0, 0.5, 0.01), *np.arange(2.0, 2.5, 0.01)]:    # nothing from 0.49 s to 2.0 s
        recorder.log_references(RobotReferences.from_flat(t, np.full(FLAT_SIZE, t)), log_time_ns=round(t * 1e9))
    recorder.stop_episode(log_time_ns=round(2.49e9))
    recorder.close()
    out = tmp_path / "train"
    assert main(["dataset", "export", str(session), "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert "holed.mcap#episode0: no sample on references for 1.51 s from 0.49 s into the episode" in err, err
    assert "--max-gap 1.6 exports it" in err and not (out / "squat").exists()
    assert main(["dataset", "export", str(session), "-o", str(out), "--max-gap", "inf"]) == 0
    assert len(ReferenceTrajectory.load_npz(out / "squat" / "holed_0.npz")) == 100
