"""Defects a fresh user met in `teleop dataset`: each test fails on the code before its fix.

The commands run in-process through the real ``teleop`` entry point (:func:`teleop.cli.main`),
which is what handles a closed standard output.
"""

from __future__ import annotations

import io
import os
import shutil
import sys

import numpy as np
import pytest

from retarget.references import FLAT_SIZE, RobotReferences
from teleop.cli import main
from teleop.record import Recorder, dataset_cli, open_recording

STEP_NS = 10_000_000  # 100 Hz


def references(i: int) -> RobotReferences:
    return RobotReferences.from_flat(i * 0.01, np.zeros(FLAT_SIZE))


def write_recording(path, ticks: int = 300):
    """A closed recording of ``ticks`` references at 100 Hz: (ticks - 1) * 10 ms long."""
    with Recorder(path, threaded=False) as rec:
        for i in range(ticks):
            rec.log_references(references(i), log_time_ns=i * STEP_NS)
    return path


def test_label_refuses_to_replace_a_recording_still_being_written(tmp_path, capsys):
    """The replaced file lost everything the recorder wrote after it (into the unlinked inode)."""
    path = tmp_path / "live.mcap"
    # Flushed at every message, as a live recorder's file is between its flushes: no footer yet.
    rec = Recorder(path, threaded=False, flush_interval_s=1e-9)
    for i in range(100):
        rec.log_references(references(i), log_time_ns=i * STEP_NS)
    assert not open_recording(path).complete
    inode = os.stat(path).st_ino

    assert main(["dataset", "label", str(path), "--task", "x"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{path} is incomplete" in err and "teleop dataset recover" in err
    assert os.stat(path).st_ino == inode   # not replaced: the recorder still writes the file we read

    copy = tmp_path / "labelled.mcap"      # a labelled copy of what is there so far is harmless
    assert main(["dataset", "label", str(path), "--task", "x", "-o", str(copy)]) == 0
    for i in range(100, 200):
        rec.log_references(references(i), log_time_ns=i * STEP_NS)
    rec.close()
    assert open_recording(path).message_count == 200
    assert [ep.task for ep in open_recording(copy).episodes()] == ["x"]

    assert main(["dataset", "label", str(path), "--task", "x"]) == 0   # closed: replaced in place
    assert [ep.task for ep in open_recording(path).episodes()] == ["x"]


def test_label_with_force_replaces_an_incomplete_recording(tmp_path, capsys):
    live = tmp_path / "live.mcap"
    with Recorder(live, threaded=False, flush_interval_s=1e-9) as rec:
        for i in range(50):
            rec.log_references(references(i), log_time_ns=i * STEP_NS)
        path = shutil.copy(live, tmp_path / "crashed.mcap")   # what a crash at this point leaves
    assert not open_recording(path).complete
    assert main(["dataset", "label", str(path), "--task", "x"]) == 1
    assert "--force" in capsys.readouterr().err
    assert main(["dataset", "label", str(path), "--task", "x", "--force"]) == 0, capsys.readouterr().err
    labelled = open_recording(path)
    assert labelled.complete and labelled.channel("references").count == 50
    assert [ep.task for ep in labelled.episodes()] == ["x"]


def test_rewrites_in_place_through_a_symlink_write_the_recording_it_points_to(tmp_path, capsys):
    """The rename replaced the link with the labelled file; the recording itself stayed unlabelled."""
    target = write_recording(tmp_path / "target.mcap")
    link = tmp_path / "link.mcap"
    link.symlink_to(target)

    assert main(["dataset", "label", str(link), "--task", "s"]) == 0, capsys.readouterr().err
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert [ep.task for ep in open_recording(target).episodes()] == ["s"]
    assert not list(tmp_path.glob("*.tmp"))

    assert main(["dataset", "trim", str(target), "--end", "1", "-o", str(link), "--force"]) == 0
    assert link.is_symlink() and open_recording(target).duration_s <= 1.0


@pytest.mark.parametrize("entry", [lambda argv: main(["dataset", *argv]), dataset_cli.main],
                         ids=["teleop", "python -m teleop.record.dataset_cli"])
def test_output_cut_off_by_its_reader_ends_quietly(tmp_path, monkeypatch, capsys, entry):
    """`teleop dataset inspect FILE | head -1` said `error: [Errno 32] Broken pipe` and exited 1."""
    path = write_recording(tmp_path / "rec.mcap")
    read_end, write_end = os.pipe()
    os.close(read_end)   # the reader (head) has gone: the first line written breaks the pipe
    closed_stdout = io.TextIOWrapper(io.FileIO(write_end, "w"), line_buffering=True)
    monkeypatch.setattr(sys, "stdout", closed_stdout)
    try:
        assert entry(["inspect", str(path)]) == 0
    finally:
        monkeypatch.undo()
        closed_stdout.close()
    assert capsys.readouterr().err == ""


def test_a_missing_recording_is_named_with_the_problem(tmp_path, capsys):
    missing = tmp_path / "nonexist.mcap"
    assert main(["dataset", "inspect", str(missing)]) == 1
    err = capsys.readouterr().err
    assert f"{missing}: No such file" in err and "[Errno" not in err


def test_export_to_a_file_is_refused_naming_the_option(tmp_path, capsys):
    """-o naming a file failed only when writing, after the work: `[Errno 20] Not a directory`."""
    path = write_recording(tmp_path / "rec.mcap")
    assert main(["dataset", "label", str(path), "--task", "q"]) == 0
    library = tmp_path / "library.npz"
    library.write_bytes(b"not a folder")
    capsys.readouterr()
    assert main(["dataset", "export", str(path), "-o", str(library)]) == 1
    captured = capsys.readouterr()
    assert f"-o {library} is a file" in captured.err and "[Errno" not in captured.err
    assert captured.out == "" and library.read_bytes() == b"not a folder"


def test_label_window_past_the_end_names_the_window_asked_for(tmp_path, capsys):
    """The message showed the end clipped to the recording (`5 s .. 2.99 s`), not --end 9."""
    path = write_recording(tmp_path / "rec.mcap")   # 2.99 s
    assert main(["dataset", "label", str(path), "--task", "q", "--start", "5", "--end", "9"]) == 1
    err = capsys.readouterr().err
    assert "from 5 s to 9 s" in err and "spans 0 s .. 2.990 s" in err
