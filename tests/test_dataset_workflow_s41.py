"""The record -> label -> export -> train workflow walked as a user would (session 41).

Recordings are written by the real :class:`teleop.record.Recorder` (the stations' recorder)
with the test pattern's references (``teleop record``), on log times given by the test; the
CLI runs in-process through the real ``teleop`` entry point.
"""

from __future__ import annotations

import shlex
import pytest

from teleop.cli import main
from teleop.record import Recorder, open_recording
from teleop.record.sources import pattern_references

PERIOD_NS = 10_000_000    # references at 100 Hz, as the stations send them


def _log(recorder: Recorder, first: int, count: int) -> None:
    for k in range(first, first + count):
        recorder.log_references(pattern_references(k * PERIOD_NS * 1e-9), log_time_ns=k * PERIOD_NS)


def _recording(path, samples: int, task: str) -> None:
    """A recording of ``samples`` references, all of it one episode labelled ``task``."""
    with Recorder(path, clock_ns=lambda: 0, threaded=False) as recorder:
        recorder.start_episode(task, log_time_ns=0)
        _log(recorder, 0, samples)
        recorder.stop_episode(log_time_ns=(samples - 1) * PERIOD_NS)


@pytest.mark.parametrize("argv", [["label", "{rec}", "--task", "wave", "--force"],
                                  ["label", "{other}", "--task", "jump", "--start", "0.1", "-o", "{rec}", "--force"],
                                  ["trim", "{other}", "--end", "0.5", "-o", "{rec}", "--force"],
                                  ["recover", "{other}", "-o", "{rec}", "--force"]])
def test_force_does_not_replace_a_recording_a_recorder_is_writing(tmp_path, capsys, argv):
    """`dataset label FILE --force` (or trim/recover/label -o FILE --force) over a station's
    live --record replaced the file: the station went on writing into the unlinked one, kept
    the seconds it had so far and ended with "this session's recording is lost"."""
    live, other = tmp_path / "live session.mcap", tmp_path / "other.mcap"
    _recording(other, 100, "wave")
    recorder = Recorder(live, clock_ns=lambda: 0, threaded=False, chunk_size_bytes=2000)
    try:
        _log(recorder, 0, 200)                    # chunks on the disk: a reader sees the session so far
        assert open_recording(live).message_count > 0
        args = [a.format(rec=live, other=other) for a in argv]
        assert main(["dataset", *args]) == 1
        err = capsys.readouterr().err
        assert f"{live} is being written by a recorder (a session under way)" in err, err
        assert "--force or not" in err
        _log(recorder, 200, 100)                  # the session goes on, into the same file
    finally:
        recorder.close()
    assert recorder.error is None
    kept = open_recording(live)
    assert kept.complete and kept.channel("references").count == 300


def test_label_of_a_live_recording_can_still_go_to_a_copy(tmp_path, capsys):
    """What the refusal offers works: a labelled copy of the session so far."""
    live, copy = tmp_path / "live.mcap", tmp_path / "copy.mcap"
    recorder = Recorder(live, clock_ns=lambda: 0, threaded=False, chunk_size_bytes=2000)
    _log(recorder, 0, 200)
    try:
        assert main(["dataset", "label", str(live), "--task", "wave", "-o", str(copy)]) == 0
    finally:
        recorder.close()
    assert [ep.task for ep in open_recording(copy).episodes()] == ["wave"]
    assert open_recording(live).channel("references").count == 200


def test_export_skips_an_episode_too_short_for_train(tmp_path, capsys):
    """A 0.05 s episode (`teleop record --duration 0.05 --task wave`, a short --start..--end)
    was exported, and `teleop train` of the folder then failed on it ("6 frames: a take needs
    at least 10 frames"), to be found and deleted by hand."""
    short, long = tmp_path / "short.mcap", tmp_path / "long.mcap"
    _recording(short, 6, "wave")
    _recording(long, 150, "wave")
    out = tmp_path / "demos"
    assert main(["dataset", "export", str(short), str(long), "-o", str(out)]) == 0
    captured = capsys.readouterr()
    assert "skipped short.mcap#episode0: 6 samples on references" in captured.err
    assert "teleop train refuses a take of fewer than 10 frames" in captured.err
    assert sorted(p.name for p in out.rglob("*.npz")) == ["long_0.npz"]
    # Nothing but the short one: nothing exported, said, exit code 1, no folder made.
    assert main(["dataset", "export", str(short), "-o", str(tmp_path / "none")]) == 1
    assert "nothing exported: every episode was skipped" in capsys.readouterr().err
    assert not (tmp_path / "none").exists()


def test_label_warns_of_a_window_export_would_skip(tmp_path, capsys):
    """`label --start 0 --end 0.05` was written without a word, and its episode then skipped
    by export (or, before, refused by train)."""
    rec = tmp_path / "session.mcap"
    with Recorder(rec, clock_ns=lambda: 0, threaded=False) as recorder:
        _log(recorder, 0, 100)
    assert main(["dataset", "label", str(rec), "--task", "wave", "--start", "0", "--end", "0.05"]) == 0
    err = capsys.readouterr().err
    assert "holds 6 on /references: `export` skips an episode of fewer than 10 samples" in err, err
    assert [ep.task for ep in open_recording(rec).episodes()] == ["wave"]


def test_train_given_a_robot_recording_names_the_export_that_works(tmp_path, capsys):
    """`teleop train robot.mcap` said to run `teleop dataset export robot.mcap -o DIR`, which
    fails on a robot station's recording ("no channel /references"): its commands are
    exported with --channel delivered, as the hint now says, and that export trains."""
    robot = tmp_path / "robot.mcap"
    with Recorder(robot, clock_ns=lambda: 0, threaded=False) as recorder:
        recorder.start_episode("wave", log_time_ns=0)
        for k in range(150):
            recorder.log_delivered_command(pattern_references(k * PERIOD_NS * 1e-9), log_time_ns=k * PERIOD_NS)
        recorder.stop_episode(log_time_ns=149 * PERIOD_NS)
    assert main(["train", str(robot), "-o", str(tmp_path / "lib.npz")]) == 1
    hint = f"teleop dataset export {shlex.quote(str(robot))} --channel delivered -o DIR"
    assert hint in capsys.readouterr().err
    demos = tmp_path / "demos"
    assert main([str(demos) if word == "DIR" else word for word in shlex.split(hint)[1:]]) == 0
    capsys.readouterr()
    assert main(["train", str(demos), "-o", str(tmp_path / "lib.npz")]) == 0
    assert (tmp_path / "lib.npz").is_file()


def test_label_of_a_live_recording_does_not_offer_force(tmp_path, capsys):
    """The refusal to replace a live recording ended "(--force: replace it anyway)", which
    would have lost the rest of the session (and is now refused too)."""
    live = tmp_path / "live.mcap"
    recorder = Recorder(live, clock_ns=lambda: 0, threaded=False, chunk_size_bytes=2000)
    _log(recorder, 0, 200)
    try:
        assert main(["dataset", "label", str(live), "--task", "wave"]) == 1
    finally:
        recorder.close()
    err = capsys.readouterr().err
    assert "a recorder has it open" in err and "--force" not in err, err
