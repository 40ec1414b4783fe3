"""`teleop record` end to end with the test pattern, the source registry, and `dataset recover`."""

import argparse
import time

import numpy as np
import pytest

from retarget.references import FLAT_SIZE, RobotReferences
from teleop.record import EpisodeMarker, Recorder, open_recording
from teleop.record import dataset_cli, record_cli
from teleop.record.record_cli import record_from_source
from teleop.record.sources import SOURCES, pattern_image, pattern_references


def test_record_test_pattern_end_to_end(tmp_path, capsys):
    out = tmp_path / "live.mcap"
    assert record_cli.main(["--source", "test-pattern", "--duration", "1.0", "-o", str(out), "--task", "wave"]) == 0
    assert str(out) in capsys.readouterr().out
    recording = open_recording(out)
    assert recording.complete
    references = recording.channel("references")
    assert references.count >= 50 and references.rate_hz == pytest.approx(100, rel=0.2)
    assert recording.channel("camera/test").schema_name == "foxglove.CompressedImage"
    [(_, frame)] = list(recording.decoded("camera/test"))[:1]
    assert frame.data[:2] == b"\xff\xd8"  # a JPEG
    [episode] = recording.episodes()
    assert episode.task == "wave" and episode.stopped


def test_sources_registered_later_are_offered(tmp_path):
    """The lead fills SOURCES; --source accepts whatever is there when parsing."""
    def scripted(options):
        yield "episodes", 1.0, EpisodeMarker("start", 0, "squat")
        for i in range(5):
            yield "references", 1.0 + i * 0.01, RobotReferences.from_flat(i * 0.01, np.zeros(FLAT_SIZE))
        yield "episodes", 1.05, {"event": "stop"}

    parser = argparse.ArgumentParser(prog="teleop")
    record_cli.register(parser.add_subparsers(dest="command"))
    SOURCES["scripted"] = scripted
    try:
        out = tmp_path / "scripted.mcap"
        args = parser.parse_args(["record", "--source", "scripted", "-o", str(out)])
        assert args.func(args) == 0
    finally:
        del SOURCES["scripted"]
    recording = open_recording(out)
    assert recording.channel("references").count == 5
    assert recording.start_ns == 1_000_000_000
    [episode] = recording.episodes()
    assert episode.task == "squat" and episode.stop_ns == 1_050_000_000
    with pytest.raises(SystemExit):
        parser.parse_args(["record", "--source", "scripted"])  # gone from the registry


def test_record_from_source_stops_after_the_duration(tmp_path):
    clock = {"t": 0}

    def endless():
        i = 0
        while True:
            clock["t"] = i * 10_000_000
            yield "references", None, RobotReferences.from_flat(i * 0.01, np.zeros(FLAT_SIZE))
            i += 1

    with Recorder(tmp_path / "d.mcap", clock_ns=lambda: clock["t"], threaded=False) as rec:
        handled = record_from_source(endless(), rec, duration_s=0.5, clock_ns=lambda: clock["t"])
    assert handled == 51


def test_test_pattern_is_smooth_and_valid():
    times = np.arange(0, 2, 0.01)
    refs = [pattern_references(t) for t in times]
    flat = np.stack([r.validate().to_flat() for r in refs])
    assert np.abs(np.diff(flat, axis=0)).max() < 0.05  # no jumps at 100 Hz
    assert [r.t for r in refs] == times.tolist()
    # It moves (a still pattern is smooth too): each hand circles once in 2 s (0.5 Hz) on a
    # 5 cm radius, so over one period it spans the circle's 10 cm diameter in the x-y plane
    # and comes back to where it started.
    for hand in ("left_hand", "right_hand"):
        path = np.stack([getattr(r, hand) for r in refs])
        assert np.ptp(path[:, :2], axis=0) == pytest.approx([0.1, 0.1], abs=1e-3), hand
        np.testing.assert_allclose(getattr(pattern_references(2.0), hand), path[0], atol=1e-12)
    assert pattern_image(1.0).shape == (240, 320, 3)
    assert np.abs(pattern_image(1.0).astype(int) - pattern_image(2.0).astype(int)).mean() > 5  # moving picture


def test_dataset_recover_writes_a_complete_copy(tmp_path, capsys):
    path = tmp_path / "crashed.mcap"
    rec = Recorder(path, threaded=False, flush_interval_s=0.01)
    for i in range(21):
        if i == 20:
            time.sleep(0.02)  # the 21st message triggers a flush of all
        rec.log_references(RobotReferences.from_flat(i * 0.01, np.zeros(FLAT_SIZE)), log_time_ns=i)
    # No close(): the file has no summary or footer, as after a crash.
    out = tmp_path / "repaired.mcap"
    assert dataset_cli.main(["recover", str(path), "-o", str(out)]) == 0
    assert "recovered" in capsys.readouterr().out
    repaired = open_recording(out)
    assert repaired.complete and repaired.message_count == 21
    # Listed as what it may be (a live session's file has no footer either), not "recovered".
    assert dataset_cli.main(["inspect", str(path)]) == 0
    # The "crashed" recorder is still open here (its lock held): said so, not "or cut short".
    assert "state:     incomplete (still being written: a recorder has it open)" in capsys.readouterr().out
    rec2 = Recorder(tmp_path / "live.mcap", threaded=False, flush_interval_s=0.01)
    rec2.start_episode("wave", log_time_ns=0)
    for i in range(21):
        if i == 20:
            time.sleep(0.02)
        rec2.log_references(RobotReferences.from_flat(i * 0.01, np.zeros(FLAT_SIZE)), log_time_ns=i * 10_000_000)
    assert dataset_cli.main(["export", str(tmp_path / "live.mcap"), "-o", str(tmp_path / "demos")]) == 0
    # Its recorder has it open (the lock): said for certain, not "or cut short".
    assert "live.mcap is still being written (a recorder has it open)" in capsys.readouterr().err
    rec2.close()
    rec.close()


def test_dataset_recover_of_nothing_readable_writes_nothing_and_says_so(tmp_path, capsys):
    """A file cut within its first chunk: "recovered ... 0 messages; complete copy written", exit 0."""
    path = tmp_path / "cut.mcap"
    rec = Recorder(path, threaded=False, flush_interval_s=60.0)
    rec.log_references(RobotReferences.from_flat(0.0, np.zeros(FLAT_SIZE)), log_time_ns=1)
    rec.close()
    path.write_bytes(path.read_bytes()[:60])          # the header, no message
    out = tmp_path / "copy.mcap"
    assert dataset_cli.main(["recover", str(path), "-o", str(out)]) == 1
    assert "nothing readable to recover" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize("task, message", [
    ("", "the task name must not be empty"),
    ("../../escaped", "a task name is a folder name in an exported dataset"),
    ("a/b", "a task name is a folder name in an exported dataset"),
])
def test_record_refuses_a_task_name_that_cannot_label_an_episode(tmp_path, capsys, task, message):
    """`record --task ""` recorded no episode without a word (export then found none), and a
    name with '/' was exported to another folder than the one it names."""
    from teleop.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["record", "--duration", "0.2", "--task", task, "-o", str(tmp_path / "r.mcap")])
    assert exc.value.code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "r.mcap").exists()
