"""Review of `teleop dataset`, `teleop calibrate-sim` and `teleop info` on their files (session
38): an output whose folder cannot be written in (found after the work, naming a hidden
temporary file), a folder given as the recording, the empty folder an interrupted copy left,
`teleop info` on a calibrate-sim recording, and `dataset list` of one file given twice.

Recordings are written by the product's recorder; the commands run in-process through the
real ``teleop`` entry point (conftest.run_cli).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from conftest import UNWRITABLE, error_line, needs_proc, run_cli
from retarget.references import FLAT_SIZE, RobotReferences
from teleop.record import Recorder

STEP_NS = 10_000_000   # 100 Hz


@pytest.fixture
def session(tmp_path) -> Path:
    """A 1.5 s recording of references at 100 Hz, one episode labelled squat."""
    path = tmp_path / "session.mcap"
    clock = {"t": 0}
    with Recorder(path, clock_ns=lambda: clock["t"], threaded=False) as rec:
        rec.start_episode("squat")
        for i in range(150):
            clock["t"] = i * STEP_NS
            flat = np.full(FLAT_SIZE, 0.01 * i) + np.arange(FLAT_SIZE) / 100
            rec.log_references(RobotReferences.from_flat(i * 0.01, flat))
        rec.stop_episode()
    return path


@needs_proc
@pytest.mark.parametrize("command, output", [
    (["trim", "--start", "0.5"], "x.mcap"),
    (["recover"], "x.mcap"),
    (["label", "--episode", "0", "--task", "wave"], "x.mcap"),
    (["plot"], "x.png"),
])
def test_an_output_folder_that_cannot_be_written_in_is_refused_before_the_work(command, output, session, capsys):
    """`-o /proc/x.mcap` copied the whole recording, then failed naming the hidden temporary:
    "/proc/.x.a5a9a3fab3f0.tmp.mcap: No such file or directory"."""
    out = UNWRITABLE / output
    rc, stdout, err = run_cli(capsys, "dataset", command[0], session, *command[1:], "-o", out)
    assert rc == 1 and stdout == ""
    assert error_line(err) == f"-o {out}: cannot write in {UNWRITABLE} (No such file or directory)"
    assert ".tmp." not in err and "TELEOP_DEBUG" not in err


@needs_proc
def test_a_test_recording_whose_folder_cannot_be_written_in_is_refused_before_the_simulation(capsys):
    out = UNWRITABLE / "x.npz"
    rc, stdout, err = run_cli(capsys, "calibrate-sim", "--make-test-recording", out, "--groups", "r_elbow",
                              "--duration", "0.2")
    assert rc == 1 and stdout == ""
    assert error_line(err) == (f"--make-test-recording {out}: cannot write in {UNWRITABLE} "
                               "(No such file or directory)")
    assert "TELEOP_DEBUG" not in err


@needs_proc
def test_an_output_set_names_the_output_when_its_temporary_cannot_be_made():
    """The error of a temporary that could not be made named the temporary, a name nobody gave."""
    from teleop.output_set import write_outputs_together

    out = UNWRITABLE / "x.mcap"
    with pytest.raises(OSError) as exc:
        write_outputs_together({out: lambda tmp: tmp.write_bytes(b"")})
    assert exc.value.filename == str(out)


@pytest.mark.parametrize("command", [["inspect"], ["trim", "--start", "0.5", "-o", "t.mcap"],
                                     ["label", "--task", "wave", "-o", "l.mcap"], ["recover", "-o", "r.mcap"],
                                     ["plot", "-o", "p.png"]])
def test_a_folder_given_as_the_recording_is_said_so(command, tmp_path, capsys, monkeypatch):
    """Every subcommand but plot said "rec.mcap: Is a directory"."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "rec.mcap").mkdir()
    rc, _, err = run_cli(capsys, "dataset", command[0], "rec.mcap", *command[1:])
    assert rc == 1
    assert error_line(err) == ("rec.mcap is a folder: give one recording (`teleop dataset list rec.mcap` lists "
                               "those in it)")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rec.mcap"]


def test_an_interrupted_copy_leaves_no_folder_behind(session, tmp_path, capsys, monkeypatch):
    """`trim -o new/x.mcap` interrupted (or failing) during the copy left the folder `new`,
    empty: write_copy made it before the output set, which removes only what it made."""
    from teleop.record import rewrite

    def interrupted(*_args, **_kwargs):
        raise KeyboardInterrupt
        yield   # (a generator, as the function it replaces)

    monkeypatch.setattr(rewrite, "_copy_messages", interrupted)
    rc, _, err = run_cli(capsys, "dataset", "trim", session, "--start", "0.5", "-o", tmp_path / "new" / "x.mcap")
    assert rc == 130 and "interrupted" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["session.mcap"]


def test_an_interrupted_test_recording_leaves_no_folder_behind(tmp_path, capsys, monkeypatch):
    from teleop.sim import recording_io

    def interrupted(*_args, **_kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(recording_io, "_savez", interrupted)
    rc, _, err = run_cli(capsys, "calibrate-sim", "--make-test-recording", tmp_path / "new" / "rec.npz",
                         "--groups", "r_elbow", "--duration", "0.2")
    assert rc == 130 and "interrupted" in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("suffix", [".npz", ".json"])
def test_info_describes_a_calibrate_sim_recording(suffix, tmp_path, capsys):
    """`teleop info rec.npz` of `calibrate-sim --make-test-recording rec.npz` said "not a human
    motion file (expected format humanmotion-v1)" (a .json one: "not a VR tracker file"), with
    the TELEOP_DEBUG hint, exit code 1."""
    rec = tmp_path / f"rec{suffix}"
    assert run_cli(capsys, "calibrate-sim", "--make-test-recording", rec, "--groups", "r_elbow",
                   "--duration", "0.2")[0] == 0
    rc, out, err = run_cli(capsys, "info", rec)
    assert rc == 0, err
    assert out.splitlines() == [
        f"{rec}: joint recording (commanded vs measured angles, for teleop calibrate-sim --data), 100 samples x 1 "
        "joints over 0.20 s (500 Hz): r_elbow",
        "  commanded velocities recorded; base fixed to the world; hidden parameters in its meta (a test "
        "recording: a fit reports how well it recovers them)"]
    rc, out, _ = run_cli(capsys, "info", rec, "--json")
    info = json.loads(out, parse_constant=lambda c: pytest.fail(f"not strict JSON: {c}"))
    assert rc == 0 and info["kind"] == "joint recording" and info["samples"] == 100
    assert info["joints"] == ["r_elbow"] and info["hidden_parameters"] is True


def test_info_says_what_is_wrong_in_a_calibrate_sim_recording(tmp_path, capsys):
    """A malformed joint recording: the calibrate-sim reader's own words, the error line alone."""
    rec = tmp_path / "rec.json"
    assert run_cli(capsys, "calibrate-sim", "--make-test-recording", rec, "--groups", "r_elbow",
                   "--duration", "0.2")[0] == 0
    data = json.loads(rec.read_text())
    data["measured"][3][0] = None
    rec.write_text(json.dumps(data))
    rc, out, err = run_cli(capsys, "info", rec)
    assert rc == 1 and out == ""
    assert error_line(err) == f"{rec}: 'measured' holds non-finite values"
    assert "TELEOP_DEBUG" not in err


def test_list_names_a_recording_given_twice_once(session, capsys):
    """`dataset list DIR DIR` (or DIR and DIR/FILE) listed the file twice, as two recordings."""
    folder = session.parent
    rc, out, _ = run_cli(capsys, "dataset", "list", folder, folder, session)
    assert rc == 0
    assert [line.split()[0] for line in out.splitlines() if not line.startswith(" ")] == [str(session)]
