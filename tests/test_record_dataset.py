"""Episodes, labels, trim, export: library functions and the `teleop dataset` subcommands."""

import argparse

import numpy as np
import pytest

from retarget.references import ReferenceTrajectory, RobotReferences
from teleop.record import Recorder, export_episodes, open_recording, write_copy
from teleop.record import dataset_cli
from test_dataset_audit import STEP_NS, flat_at, write_session as _write_session


def write_session(path, episodes=(("squat", 0, 100), ("", 150, 250), ("wave", 260, 290)), n=300):
    """100 Hz references for n ticks (log time i * 10 ms) with episodes (task, first tick, stop tick)."""
    return _write_session(path, episodes, n)


def test_episodes_are_read_back(tmp_path):
    recording = open_recording(write_session(tmp_path / "s.mcap"))
    episodes = recording.episodes()
    assert [(e.number, e.task, e.stopped) for e in episodes] == [(0, "squat", True), (1, "", True), (2, "wave", True)]
    assert episodes[0].start_ns == 0 and episodes[0].stop_ns == 100 * STEP_NS
    assert episodes[2].duration_s == pytest.approx(0.3)


def test_reference_trajectory_between_times(tmp_path):
    recording = open_recording(write_session(tmp_path / "s.mcap"))
    traj = recording.reference_trajectory("references", 50 * STEP_NS, 60 * STEP_NS)
    assert isinstance(traj, ReferenceTrajectory) and len(traj) == 10
    np.testing.assert_allclose(traj.times, np.arange(50, 60) * 0.01)
    np.testing.assert_array_equal(traj.values, np.stack([flat_at(i) for i in range(50, 60)]))
    relative = recording.reference_trajectory("references", 50 * STEP_NS, 60 * STEP_NS,
                                              time_origin_ns=50 * STEP_NS)
    assert relative.times[0] == 0.0
    by_message_time = recording.reference_trajectory("references", 50 * STEP_NS, 60 * STEP_NS, use_message_time=True)
    np.testing.assert_allclose(by_message_time.times, np.arange(50, 60) * 0.01)
    assert len(recording.reference_trajectory("references", 10**15, None)) == 0


def test_label_writes_a_labelled_copy_and_in_place(tmp_path):
    source = write_session(tmp_path / "s.mcap")
    copy = tmp_path / "labelled.mcap"
    assert dataset_cli.main(["label", str(source), "--episode", "1", "--task", "reach", "-o", str(copy)]) == 0
    assert [e.task for e in open_recording(copy).episodes()] == ["squat", "reach", "wave"]
    assert [e.task for e in open_recording(source).episodes()] == ["squat", "", "wave"]  # untouched
    assert open_recording(copy).message_count == open_recording(source).message_count

    assert dataset_cli.main(["label", str(source), "--episode", "0", "--task", "lunge"]) == 0
    relabelled = open_recording(source)
    assert relabelled.complete and [e.task for e in relabelled.episodes()] == ["lunge", "", "wave"]
    assert ("teleop.rewrite" in [name for name, _ in relabelled.metadata])
    assert not list(tmp_path.glob("*.tmp"))


def test_label_unknown_episode_is_an_error(tmp_path, capsys):
    source = write_session(tmp_path / "s.mcap")
    assert dataset_cli.main(["label", str(source), "--episode", "7", "--task", "x"]) == 1
    assert "no episode 7" in capsys.readouterr().err


def test_trim_keeps_the_window_and_clips_episodes(tmp_path, capsys):
    source = write_session(tmp_path / "s.mcap")
    out = tmp_path / "trimmed.mcap"
    # Seconds from the first message: ticks 50..200 inclusive.
    assert dataset_cli.main(["trim", str(source), "--start", "0.5", "--end", "2.0", "-o", str(out)]) == 0
    # Said: a labelled episode cut to a fragment was listed and exported like any other.
    assert [line for line in capsys.readouterr().err.splitlines() if line.startswith("teleop")] == [
        "teleop dataset trim: warning: episode #0 'squat' (0.00 s .. 1.00 s) is cut by the window: the copy keeps "
        "0.50 s of its 1.00 s, a fragment of the task if exported",
        "teleop dataset trim: warning: episode #1 (1.50 s .. 2.50 s) is cut by the window: the copy keeps 0.50 s of "
        "its 1.00 s"]
    trimmed = open_recording(out)
    assert trimmed.channel("references").count == 151
    assert trimmed.start_ns == 50 * STEP_NS and trimmed.end_ns == 200 * STEP_NS
    episodes = trimmed.episodes()
    assert [(e.number, e.task) for e in episodes] == [(0, "squat"), (1, "")]
    assert episodes[0].start_ns == 50 * STEP_NS and episodes[0].stop_ns == 100 * STEP_NS
    assert episodes[1].start_ns == 150 * STEP_NS and episodes[1].stopped  # clipped at the window's end
    assert episodes[1].stop_ns == 200 * STEP_NS


def _export_two_sessions(tmp_path):
    """(data folder, export folder): alice's three episodes and bob's squat, exported."""
    data = tmp_path / "data"
    data.mkdir()
    write_session(data / "alice.mcap")
    write_session(data / "bob.mcap", episodes=(("squat", 10, 60),))
    out = tmp_path / "train"
    assert dataset_cli.main(["export", str(data), "--channel", "references", "-o", str(out)]) == 0
    return data, out


def test_export_writes_one_folder_per_task(tmp_path):
    data, out = _export_two_sessions(tmp_path)
    files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*.npz"))
    assert files == ["squat/alice_0.npz", "squat/bob_0.npz", "wave/alice_2.npz"]  # unlabelled episode 1 skipped

    traj = ReferenceTrajectory.load_npz(out / "squat" / "alice_0.npz")
    assert traj.label == "squat" and len(traj) == 101  # ticks 0..100: the stop marker's tick is included
    assert traj.times[0] == 0.0 and traj.times[-1] == pytest.approx(1.0)
    np.testing.assert_array_equal(traj.values[5], flat_at(5))
    wave = ReferenceTrajectory.load_npz(out / "wave" / "alice_2.npz")
    np.testing.assert_array_equal(wave.values[0], flat_at(260))

    result = export_episodes(data / "bob.mcap", tmp_path / "again")
    assert [p.name for p in result.written] == ["bob_0.npz"] and result.skipped == []


def test_list_and_inspect_print_episodes_and_channels(tmp_path, capsys):
    write_session(tmp_path / "s.mcap")
    assert dataset_cli.main(["list", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "s.mcap" in out and "squat" in out and "(unlabelled)" in out and "3 episode(s)" in out
    assert dataset_cli.main(["inspect", str(tmp_path / "s.mcap")]) == 0
    out = capsys.readouterr().out
    assert "/references" in out and "teleop.RobotReferences" in out and "100.00" in out and "complete" in out


def test_write_copy_round_trips_everything(tmp_path):
    source = open_recording(write_session(tmp_path / "s.mcap"))
    copy = open_recording(write_copy(source, tmp_path / "copy.mcap"))
    assert [(m.topic, m.log_time_ns, m.data) for m in copy.messages("references")] == \
        [(m.topic, m.log_time_ns, m.data) for m in source.messages("references")]
    assert [(e.task, e.start_ns, e.stop_ns) for e in copy.episodes()] == \
        [(e.task, e.start_ns, e.stop_ns) for e in source.episodes()]


def test_register_adds_the_dataset_subcommands():
    parser = argparse.ArgumentParser(prog="teleop")
    dataset_cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["dataset", "trim", "f.mcap", "--start", "1", "--end", "2", "-o", "out.mcap"])
    assert args.func is not None and args.start == 1.0 and args.end == 2.0


def test_export_skips_what_it_cannot_use(tmp_path, capsys):
    data = tmp_path / "data"
    data.mkdir()
    write_session(data / "good.mcap", episodes=(("squat", 0, 50),))
    write_session(data / "unlabelled.mcap", episodes=(("", 0, 50),))
    (data / "broken.mcap").write_text("not a recording")
    # What it could use is written; a file it cannot read is an error (exit 1), said at the end.
    assert dataset_cli.main(["export", str(data), "-o", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert "broken.mcap" in err and "unlabelled.mcap#episode0: no task label" in err
    assert [p.name for p in (tmp_path / "out").rglob("*.npz")] == ["good_0.npz"]
    assert dataset_cli.main(["export", str(data / "good.mcap"), "--channel", "compensated",
                             "-o", str(tmp_path / "none")]) == 1
    out, err = capsys.readouterr()
    assert "no channel /commands/compensated" in err
    assert "written" not in out          # was "0 trajectories written to ..." above the error


def test_export_of_same_named_recordings_in_subfolders_keeps_both(tmp_path):
    """day1/session.mcap and day2/session.mcap: two files, named by their path under the folder."""
    data = tmp_path / "data"
    for day in ("day1", "day2"):
        (data / day).mkdir(parents=True)
        write_session(data / day / "session.mcap", episodes=(("squat", 0, 50),), n=60)
    write_session(data / "top.mcap", episodes=(("squat", 0, 50),), n=60)
    result = export_episodes(data, tmp_path / "out")
    names = [p.relative_to(tmp_path / "out").as_posix() for p in result.written]
    assert names == ["squat/day1__session_0.npz", "squat/day2__session_0.npz", "squat/top_0.npz"]
    assert sorted(p.relative_to(tmp_path / "out").as_posix() for p in (tmp_path / "out").rglob("*.npz")) == names
    sources = {ReferenceTrajectory.load_npz(p).source for p in result.written}
    assert len(sources) == 3


def test_export_refuses_colliding_names_before_writing(tmp_path):
    """Two files with one stem given separately cannot be told apart: an error, nothing written."""
    for day in ("day1", "day2"):
        (tmp_path / day).mkdir()
        write_session(tmp_path / day / "session.mcap", episodes=(("squat", 0, 50),), n=60)
    out = tmp_path / "out"
    with pytest.raises(ValueError, match=r"day1.session\.mcap and .*day2.session\.mcap would both be exported"):
        export_episodes([tmp_path / "day1" / "session.mcap", tmp_path / "day2" / "session.mcap"], out)
    assert not out.exists()
    # The same recording reached twice (its folder and itself) is exported once.
    result = export_episodes([tmp_path / "day1", tmp_path / "day1" / "session.mcap"], out)
    assert [p.name for p in result.written] == ["session_0.npz"]


def test_export_in_turn_does_not_replace_another_recordings_episodes(tmp_path, capsys):
    """"export them separately", as the collision error says, then wrote day2's episode over
    day1's (same name, same folder) without a word. Now refused unless --force; exporting
    the same recording again (after labelling more of it) needs no --force."""
    from teleop.cli import main

    for day in ("day1", "day2"):
        (tmp_path / day).mkdir()
        write_session(tmp_path / day / "session.mcap", episodes=(("squat", 0, 50),), n=60)
    out = tmp_path / "out"
    first = out / "squat" / "session_0.npz"
    assert main(["dataset", "export", str(tmp_path / "day1" / "session.mcap"), "-o", str(out)]) == 0
    # The same recording, its path spelt otherwise: allowed.
    again = tmp_path / "day1" / ".." / "day1" / "session.mcap"
    assert main(["dataset", "export", str(again), "-o", str(out)]) == 0
    before = first.read_bytes()
    capsys.readouterr()
    assert main(["dataset", "export", str(tmp_path / "day2" / "session.mcap"), "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert "1 file(s) in" in err and f"{first} (from {(tmp_path / 'day1' / 'session.mcap').resolve()})" in err
    assert "pass --force" in err
    assert first.read_bytes() == before
    assert main(["dataset", "export", str(tmp_path / "day2" / "session.mcap"), "-o", str(out), "--force"]) == 0
    assert ReferenceTrajectory.load_npz(first).source == f"{tmp_path / 'day2' / 'session.mcap'}#episode0"


def test_export_overwrite_check_does_not_depend_on_the_working_folder(tmp_path, monkeypatch, capsys):
    """The stored source is the path as typed: relative, it was compared against the next
    run's working folder, so `cd day2; export session.mcap` replaced day1's episode (the
    case the check was made for) and `cd elsewhere; export ../day1/session.mcap` was refused
    as another recording's. Exports are written atomically; a damaged file is replaced."""
    from teleop.cli import main

    for day in ("day1", "day2", "elsewhere"):
        (tmp_path / day).mkdir()
    for day in ("day1", "day2"):
        write_session(tmp_path / day / "session.mcap", episodes=(("squat", 0, 50),), n=60)
    out = tmp_path / "out"
    first = out / "squat" / "session_0.npz"
    monkeypatch.chdir(tmp_path / "day1")
    assert main(["dataset", "export", "session.mcap", "-o", str(out)]) == 0
    before = first.read_bytes()
    monkeypatch.chdir(tmp_path / "day2")
    assert main(["dataset", "export", "session.mcap", "-o", str(out)]) == 1
    assert f"(from {(tmp_path / 'day1' / 'session.mcap').resolve()})" in capsys.readouterr().err
    assert first.read_bytes() == before
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert main(["dataset", "export", "../day1/session.mcap", "-o", str(out)]) == 0
    assert sorted(p.name for p in first.parent.iterdir()) == ["session_0.npz"]   # no temporary left
    first.write_bytes(first.read_bytes()[:100])                                   # an interrupted old export
    assert main(["dataset", "export", "../day2/session.mcap", "-o", str(out)]) == 0
    assert ReferenceTrajectory.load_npz(first).source == "../day2/session.mcap#episode0"


def write_reordered_delivery(path, n=200, late_every=7, late_by=3):
    """A robot recording of delivered commands over a reordering link: command i is sent at
    i * 10 ms; every ``late_every``-th arrives ``late_by`` and a half ticks late, after newer ones."""
    arrivals = sorted((i * STEP_NS + ((late_by * STEP_NS + STEP_NS // 2) if i % late_every == 3 else 0), i)
                      for i in range(n))
    clock = {"t": 0}
    with Recorder(path, clock_ns=lambda: clock["t"], threaded=False) as rec:
        rec.start_episode("reach", log_time_ns=0)
        for arrival_ns, i in arrivals:
            clock["t"] = arrival_ns
            rec.log_delivered_command(RobotReferences.from_flat(i * 0.01, flat_at(i)))
    return path


def test_delivered_commands_are_exported_and_plotted_as_the_robot_executed_them(tmp_path):
    """Over a reordering link the delivered channel, in arrival order, went back to each late
    packet's older pose and forward again: exported as training data (and plotted) it was a
    saw-tooth the operator never made. The robot executes the newest command by time stamp,
    so in log time a late packet is dropped; by message time every sample is kept, at its
    own time."""
    from teleop.record.plot import gather_plot_data

    path = write_reordered_delivery(tmp_path / "robot.mcap")
    recording = open_recording(path)
    arrival_order = recording.reference_trajectory("delivered")
    assert (np.diff(arrival_order.values[:, 0]) < 0).any()                 # the saw-tooth, as logged
    executed = recording.reference_trajectory("delivered", newest_only=True)
    assert (np.diff(executed.values[:, 0]) > 0).all()
    late = {i for i in range(199) if i % 7 == 3}       # (199 is late too, but no newer one came first)
    np.testing.assert_array_equal(executed.values, np.stack([flat_at(i) for i in range(200) if i not in late]))

    written = export_episodes(path, tmp_path / "out", "delivered").written
    exported = ReferenceTrajectory.load_npz(written[0])
    np.testing.assert_array_equal(exported.values, executed.values)
    by_message_time = export_episodes(path, tmp_path / "out_t", "delivered", use_message_time=True).written
    every = ReferenceTrajectory.load_npz(by_message_time[0])
    np.testing.assert_array_equal(every.values, np.stack([flat_at(i) for i in range(200)]))
    np.testing.assert_allclose(every.times, np.arange(200) * 0.01)

    # The plot reads a few ticks at a time: a late packet is dropped across windows too.
    hands = gather_plot_data(recording, read_window_s=0.02).hands["delivered"]
    assert (np.diff(hands.values[:, 0]) >= 0).all() and len(hands.times) == len(executed)


def test_label_refuses_an_episode_it_has_and_warns_of_an_overlap(tmp_path, capsys):
    """The same `label --start 2 --end 10` run twice gave two identical episodes (and two
    takes of one motion); one over another episode was added without a word."""
    source = write_session(tmp_path / "s.mcap")
    before = source.read_bytes()
    assert dataset_cli.main(["label", str(source), "--task", "squat", "--start", "0", "--end", "1"]) == 1
    assert ("episode 0 (squat) spans 0.000 s .. 1.000 s already: relabel it with --episode 0 --task NAME"
            in capsys.readouterr().err)
    assert source.read_bytes() == before
    assert dataset_cli.main(["label", str(source), "--task", "wave", "--start", "2.0", "--end", "2.7"]) == 0
    warned = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert warned == ["teleop dataset label: warning: the new episode (2.000 s .. 2.700 s) overlaps episode 1 "
                      "(1.500 s .. 2.500 s): exported, the samples they share are in both takes",
                      "teleop dataset label: warning: the new episode (2.000 s .. 2.700 s) overlaps episode 2 'wave' "
                      "(2.600 s .. 2.900 s): exported, the samples they share are in both takes"]
    assert len(open_recording(source).episodes()) == 4


def test_a_trimmed_copy_does_not_carry_the_sources_recorder_counts(tmp_path):
    """A trimmed copy holding 4515 of its source's 4929 messages said "teleop.recorder_stats:
    logged=4929, written=4929"; a relabelled copy (every message) keeps them."""
    source = write_session(tmp_path / "s.mcap")
    assert "teleop.recorder_stats" in dict(open_recording(source).metadata)
    trimmed, labelled = tmp_path / "t.mcap", tmp_path / "l.mcap"
    assert dataset_cli.main(["trim", str(source), "--start", "0.5", "--end", "2.0", "-o", str(trimmed)]) == 0
    assert "teleop.recorder_stats" not in dict(open_recording(trimmed).metadata)
    assert dataset_cli.main(["label", str(source), "--episode", "1", "--task", "reach", "-o", str(labelled)]) == 0
    assert "teleop.recorder_stats" in dict(open_recording(labelled).metadata)


def test_list_takes_several_folders(tmp_path, capsys):
    """`dataset list A B` was refused with the usage of `teleop dataset`, not of `list`."""
    for folder in ("alice", "bob"):
        (tmp_path / folder).mkdir()
        write_session(tmp_path / folder / "s.mcap")
    assert dataset_cli.main(["list", str(tmp_path / "alice"), str(tmp_path / "bob")]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines() if not line.startswith(" ")]
    assert listed == [str(tmp_path / "alice" / "s.mcap"), str(tmp_path / "bob" / "s.mcap")]


def test_an_interrupted_export_of_several_recordings_leaves_the_earlier_export_whole(tmp_path, monkeypatch):
    """Each file was written (atomically) as its episode was done: a Ctrl-C after the first
    recording left its new files beside the second's old ones (README: one set)."""
    import teleop.record.export as export

    data, out = _export_two_sessions(tmp_path)
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert len(before) == 3

    real = export._export_recording
    done = []

    def interrupted_after_the_first(plan, *args, **kwargs):
        if done:
            raise KeyboardInterrupt
        done.append(real(plan, *args, **kwargs))

    monkeypatch.setattr(export, "_export_recording", interrupted_after_the_first)
    with pytest.raises(KeyboardInterrupt):
        export_episodes(data, out, "references", use_message_time=True, force=True)
    assert done and {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before   # no temporaries left


def test_a_killed_runs_hidden_temporaries_are_not_read_as_recordings_or_takes(tmp_path, capsys):
    """SIGKILL leaves an OutputSet's hidden temporary file: `dataset list/export` read
    `.b.<hex>.tmp.mcap` as a recording, and `train` failed on `.x.<hex>.tmp.npz` ("not a
    readable .npz file") or learned an interrupted copy as a demonstration."""
    from teleop.record.export import recordings_in
    from teleop.takes import list_take_files

    data = tmp_path / "data"
    data.mkdir()
    write_session(data / "alice.mcap")
    (data / ".alice.0123456789ab.tmp.mcap").write_bytes((data / "alice.mcap").read_bytes()[:3000])
    assert recordings_in(data) == [data / "alice.mcap"]
    out = tmp_path / "train"
    assert dataset_cli.main(["export", str(data), "--channel", "references", "-o", str(out)]) == 0
    (out / "squat" / ".alice_0.0123456789ab.tmp.npz").write_bytes(b"PK\x03\x04 cut short")
    assert sorted(path.name for path, *_ in list_take_files(out)) == ["alice_0.npz", "alice_2.npz"]
