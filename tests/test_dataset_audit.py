"""Defects an audit of `teleop dataset` found: each test fails on the code before its fix.

Recordings are written by the product's recorder (:class:`teleop.record.Recorder`) and its
rewriter (:func:`teleop.record.write_copy`); a file "of another tool" that the recorder
cannot write (an undecodable episode marker) is written with the ``mcap`` library the
recorder uses. The commands run in-process through the real ``teleop`` entry point.
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np
import pytest

from retarget.references import FLAT_SIZE, ReferenceTrajectory, RobotReferences
from teleop.cli import main
from teleop.cli_types import task_label
from teleop.record import Recorder, open_recording, write_copy
from teleop.record import export as export_module
from teleop.record.labels import window_ns
from teleop.record.reader import Episode

STEP_NS = 10_000_000   # 100 Hz
MAX_TASK_BYTES = 100   # teleop.record.labels.MAX_TASK_BYTES


def flat_at(i: int) -> np.ndarray:
    return np.full(FLAT_SIZE, float(i)) + np.arange(FLAT_SIZE) / 100


def write_session(path, episodes=(("squat", 0, 100),), n=150, bad=None, step_ns=STEP_NS):
    """References every ``step_ns`` (100 Hz) for ``n`` ticks with episodes (task, first
    tick, stop tick); ``bad``: (tick, column) whose reference is NaN."""
    clock = {"t": 0}
    starts = {first: task for task, first, _ in episodes}
    stops = {stop for _, _, stop in episodes}
    with Recorder(path, clock_ns=lambda: clock["t"], threaded=False) as rec:
        for i in range(n):
            clock["t"] = i * step_ns
            if i in stops:
                rec.stop_episode()
            if i in starts:
                rec.start_episode(starts[i])
            flat = flat_at(i)
            if bad is not None and i == bad[0]:
                flat[bad[1]] = np.nan
            rec.log_references(RobotReferences.from_flat(i * 0.01, flat))
    return path


def write_undecodable_markers(path):
    """A file of another tool: our schema on /episodes, a message that is not JSON."""
    from mcap.writer import Writer

    with open(path, "wb") as f:
        writer = Writer(f)
        writer.start(profile="", library="another tool")
        schema = writer.register_schema(name="teleop.EpisodeMarker", encoding="jsonschema", data=b"{}")
        channel = writer.register_channel(topic="/episodes", message_encoding="json", schema_id=schema)
        writer.add_message(channel, log_time=0, data=b"{not json", publish_time=0)
        writer.finish()
    return path


def usage_error(capsys, argv) -> str:
    """The stderr of a command line argparse refuses (exit code 2)."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


# ------------------------------------------------------------------ A. one damaged recording among good ones


def test_list_goes_on_past_an_unreadable_recording(tmp_path, capsys):
    """b.mcap's episodes could not be read: `list` printed a, then an error; c was never listed."""
    write_session(tmp_path / "a.mcap")
    write_undecodable_markers(tmp_path / "b.mcap")
    write_session(tmp_path / "c.mcap")
    assert main(["dataset", "list", str(tmp_path)]) == 1     # the others listed; an exit code a script sees
    out, err = capsys.readouterr()
    assert err == "teleop dataset list: error: 1 of 3 recording(s) unreadable (above)\n"
    lines = out.splitlines()
    assert [line.split()[0] for line in lines if not line.startswith(" ")] == ["a.mcap", "b.mcap", "c.mcap"]
    [b] = [line for line in lines if line.startswith("b.mcap")]
    assert "unreadable: " in b and "undecodable message on /episodes" in b


def test_export_goes_on_past_what_it_cannot_read_or_write_and_says_what_it_wrote(tmp_path, capsys):
    """A damaged recording (b) and an episode whose folder name is too long for the file
    system (a 300-character label another tool wrote) stopped the export with exit code 1,
    the files already written (a's) not printed, c's never written."""
    data = tmp_path / "data"
    data.mkdir()
    write_session(data / "a.mcap")
    write_undecodable_markers(data / "b.mcap")
    write_session(data / "c.mcap", episodes=(("squat", 0, 50), ("x" * 300, 60, 120)))
    out = tmp_path / "out"
    assert main(["dataset", "export", str(data), "-o", str(out)]) == 1
    stdout, err = capsys.readouterr()
    assert stdout.splitlines()[:2] == [str(out / "squat" / "a_0.npz"), str(out / "squat" / "c_0.npz")]
    assert sorted(p.name for p in out.rglob("*.npz")) == ["a_0.npz", "c_0.npz"]
    assert "skipped b.mcap: " in err and "undecodable message on /episodes" in err
    assert "skipped c.mcap#episode1: " in err and "File name too long" in err
    assert "error: 2 recording(s) or episode(s) could not be exported" in err
    assert "the 2 trajectories listed were written" in err

    result = export_module.export_episodes(data / "c.mcap", tmp_path / "again")
    assert [p.name for p in result.written] == ["c_0.npz"] and len(result.errors) == 1


def test_export_exits_0_when_only_rules_skip(tmp_path, capsys):
    """Unlabelled episodes are left out by rule: not an error."""
    write_session(tmp_path / "s.mcap", episodes=(("squat", 0, 50), ("", 60, 120)))
    assert main(["dataset", "export", str(tmp_path / "s.mcap"), "-o", str(tmp_path / "out")]) == 0
    assert "no task label" in capsys.readouterr().err


# ------------------------------------------------------------------ B. labels that share an export folder


@pytest.mark.parametrize("label", ["🙂", "...", "pick up", " wave", "wave ", "_wave", "a/b", "a\nb", "x" * 101,
                                   "é" * 51])
def test_a_label_the_export_would_change_or_too_long_is_refused(tmp_path, capsys, label):
    """`🙂`, `😀` and `...` were all exported to unnamed/, `pick up` and `pick_up` both to
    pick_up/ (teleop train learned one task), ` wave` stored as typed was exported as wave,
    and a 300-character label was accepted but broke the export."""
    path = write_session(tmp_path / "s.mcap")
    before = path.read_bytes()
    err = usage_error(capsys, ["dataset", "label", str(path), "--episode", "0", "--task", label])
    assert "argument --task: " in err
    if len(label.encode()) > MAX_TASK_BYTES:
        assert f"a task name is at most {MAX_TASK_BYTES} bytes" in err
    else:
        assert "a task name is a folder name in an exported dataset" in err and "letters, digits and _ - + ." in err
    assert "\n" not in err.split("argument --task: ")[1].rstrip("\n")   # the label escaped, one line
    assert path.read_bytes() == before
    usage_error(capsys, ["record", "--duration", "0.1", "--task", label, "-o", str(tmp_path / "r.mcap")])


@pytest.mark.parametrize("label", ["squat", "wave", "reach", "pick_up", "squat1Reps", "grabHighR", "depositFloorR",
                                   "elbowToKnee1RepsLelbowStart", "rotateArmsBothBackward1Reps", "throwBasketball",
                                   "café", "v1.2", "a-b+c", "x" * MAX_TASK_BYTES])
def test_the_labels_the_product_uses_are_accepted(label):
    """The README's and tests' labels, HDM05's task folders among them, stay valid."""
    assert task_label(label) == label
    assert export_module.task_folder_name(label) == label


def test_export_refuses_labels_that_share_a_folder_before_writing(tmp_path, capsys):
    """Labels written before the check (or by another tool) are still refused at export."""
    first = write_session(tmp_path / "data" / "first.mcap", episodes=(("pick up", 0, 50), ("🙂", 60, 100)))
    write_session(tmp_path / "data" / "second.mcap", episodes=(("pick_up", 0, 50), ("wave", 60, 100)))
    write_session(tmp_path / "data" / "third.mcap", episodes=(("😀", 0, 50),))
    out = tmp_path / "out"
    for force in ([], ["--force"]):           # --force replaces files; it does not merge tasks
        assert main(["dataset", "export", str(tmp_path / "data"), "-o", str(out), *force]) == 1
        err = capsys.readouterr().err
        assert f"{out / 'pick_up'}/ would get 'pick up' (first.mcap#episode0) and 'pick_up' (second.mcap#episode0)" \
            in err
        assert f"{out / 'unnamed'}/ would get '🙂' (first.mcap#episode1) and '😀' (third.mcap#episode0)" in err
        assert "nothing written" in err and not out.exists()
    # One label per folder: exported.
    assert main(["dataset", "label", str(first), "--episode", "0", "--task", "pick_up"]) == 0
    assert main(["dataset", "label", str(first), "--episode", "1", "--task", "smile"]) == 0
    assert main(["dataset", "label", str(tmp_path / "data" / "third.mcap"), "--episode", "0", "--task", "grin"]) == 0
    assert main(["dataset", "export", str(tmp_path / "data"), "-o", str(out)]) == 0
    assert sorted(p.parent.name for p in out.rglob("*.npz")) == ["grin", "pick_up", "pick_up", "smile", "wave"]


# ------------------------------------------------------------------ C. a stale copy under the old label


def test_reexport_after_a_relabel_does_not_leave_the_old_labels_copy(tmp_path, capsys):
    """export, relabel episode 0 wave -> reach, export again: rlx/wave/rl_0.npz and
    rlx/reach/rl_0.npz, one demonstration trained as two tasks."""
    path = write_session(tmp_path / "rl.mcap", episodes=(("wave", 0, 100), ("squat", 110, 140)))
    out = tmp_path / "rlx"
    assert main(["dataset", "export", str(path), "-o", str(out)]) == 0
    assert main(["dataset", "label", str(path), "--episode", "0", "--task", "reach"]) == 0
    stale = out / "wave" / "rl_0.npz"
    before = stale.read_bytes()
    capsys.readouterr()

    assert main(["dataset", "export", str(path), "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert f"{stale} (rl.mcap#episode0, now 'reach')" in err and "--force" in err
    assert stale.read_bytes() == before and not (out / "reach").exists()     # nothing written

    assert main(["dataset", "export", str(path), "-o", str(out), "--force"]) == 0
    stdout, err = capsys.readouterr()
    assert f"removed {stale}: its episode was exported under an earlier label" in err
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*.npz")) == ["reach/rl_0.npz", "squat/rl_1.npz"]
    assert ReferenceTrajectory.load_npz(out / "reach" / "rl_0.npz").label == "reach"
    # Another recording's file of the same name in another folder is not this episode's copy.
    other = write_session(tmp_path / "other" / "rl.mcap", episodes=(("wave", 0, 100),))
    assert main(["dataset", "export", str(other), "-o", str(out)]) == 0
    assert (out / "reach" / "rl_0.npz").exists() and (out / "wave" / "rl_0.npz").exists()


# ------------------------------------------------------------------ D. --start / --end beyond any time


@pytest.mark.parametrize("value", ["1e308", "inf", "nan", "2e10", "-1"])
@pytest.mark.parametrize("command", ["label", "trim", "plot"])
@pytest.mark.parametrize("option", ["--start", "--end"])
def test_start_and_end_beyond_a_recordings_time_range_are_usage_errors(tmp_path, capsys, command, option, value):
    """--start 1e308 gave a traceback: OverflowError: cannot convert float infinity to integer."""
    path = write_session(tmp_path / "s.mcap", episodes=())
    extra = {"label": ["--task", "wave"], "trim": ["-o", str(tmp_path / "t.mcap")], "plot": []}[command]
    err = usage_error(capsys, ["dataset", command, str(path), f"{option}={value}", *extra])
    assert f"argument {option}: " in err


def test_recording_seconds_bounds_and_the_library_window():
    from teleop.cli_types import MAX_RECORDING_S, recording_seconds

    assert recording_seconds("0") == 0.0 and recording_seconds("1.5e10") == 1.5e10
    assert recording_seconds(repr(MAX_RECORDING_S)) == MAX_RECORDING_S
    with pytest.raises(argparse.ArgumentTypeError, match="at most 1.84e"):
        recording_seconds("1e308")


def test_the_library_window_refuses_an_infinite_time(tmp_path):
    recording = open_recording(write_session(tmp_path / "s.mcap", episodes=()))
    with pytest.raises(ValueError, match="not a finite number"):
        window_ns(recording, float("inf"))
    from teleop.record.plot import gather_plot_data

    with pytest.raises(ValueError, match="must be finite"):
        gather_plot_data(recording, 0.0, float("inf"))


# ------------------------------------------------------------------ E. NaN references


def test_an_episode_with_nan_references_is_skipped_with_its_first_bad_frame(tmp_path, capsys):
    """It was exported, and only `teleop train` complained later (without the episode)."""
    column = 7                                         # r.hand y
    path = write_session(tmp_path / "nan.mcap", episodes=(("squat", 0, 100), ("wave", 110, 140)), bad=(20, column))
    out = tmp_path / "out"
    assert main(["dataset", "export", str(path), "-o", str(out)]) == 0
    stdout, err = capsys.readouterr()
    assert ("skipped nan.mcap#episode0: non-finite values (NaN or inf) at frame 20 of 101 (r.hand y): not exported"
            in err)
    assert [p.relative_to(out).as_posix() for p in out.rglob("*.npz")] == ["wave/nan_1.npz"]
    assert "1 trajectories written" in stdout


# ------------------------------------------------------------------ F. an incomplete file is not "recovered"


def test_list_calls_a_file_without_footer_incomplete(tmp_path, capsys):
    path = tmp_path / "live.mcap"
    rec = Recorder(path, threaded=False, flush_interval_s=1e-9)   # a live file: flushed, no footer yet
    for i in range(50):
        rec.log_references(RobotReferences.from_flat(i * 0.01, flat_at(i)), log_time_ns=i * STEP_NS)
    try:
        assert main(["dataset", "list", str(tmp_path)]) == 0
        out = capsys.readouterr().out
        assert "incomplete (no footer)" in out and "recovered" not in out
    finally:
        rec.close()


# ------------------------------------------------------------------ G. TELEOP_DEBUG


def test_teleop_debug_lets_the_traceback_through(tmp_path, monkeypatch, capsys):
    missing = tmp_path / "missing.mcap"
    assert main(["dataset", "inspect", str(missing)]) == 1
    monkeypatch.setenv("TELEOP_DEBUG", "1")
    with pytest.raises(FileNotFoundError):
        main(["dataset", "inspect", str(missing)])
    path = write_session(tmp_path / "s.mcap", episodes=())
    from teleop.cli_types import UsageError

    with pytest.raises(UsageError):   # --end before --start
        main(["dataset", "trim", str(path), "--start", "1", "--end", "0.5", "-o", str(tmp_path / "t.mcap")])


# ------------------------------------------------------------------ H. control characters in labels


def test_control_characters_in_labels_are_escaped_when_printed(tmp_path, capsys):
    """A file labelled "a\\nb\\x1b[31mRED" broke the listing's table and coloured the terminal;
    plot leaked matplotlib's "Glyph 27 missing" warning."""
    from teleop.record.labels import printable_label

    label = "a\nb\x1b[31mRED"
    path = write_session(tmp_path / "ctrl.mcap", episodes=((label, 0, 100),))
    assert printable_label(label) == "a\\nb\\x1b[31mRED" and printable_label("café") == "café"
    assert main(["dataset", "list", str(path)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "a\\nb\\x1b[31mRED" in out and len(out.splitlines()) == 2
    assert main(["dataset", "inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "#0   a\\nb\\x1b[31mRED" in out

    write_session(tmp_path / "other.mcap", episodes=(("a\tb[31mRED", 0, 100),))   # both a_b_31mRED/: refused
    assert main(["dataset", "export", str(tmp_path), "-o", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert "\x1b" not in err and "'a\\nb\\x1b[31mRED' (ctrl.mcap#episode0)" in err and "'a\\tb[31mRED'" in err

    with warnings.catch_warnings():
        # matplotlib's missing-glyph UserWarning fails the test; not the deprecations of
        # pyparsing 3.3 that matplotlib < 3.11 calls (also UserWarnings)
        warnings.simplefilter("error")
        warnings.simplefilter("ignore", DeprecationWarning)
        assert main(["dataset", "plot", str(path), "-o", str(tmp_path / "ctrl.png")]) == 0
    assert (tmp_path / "ctrl.png").stat().st_size > 0


# ------------------------------------------------------------------ I. duplicate episode numbers


def test_an_episode_number_used_twice_keeps_both_episodes(tmp_path, capsys):
    """Episode 0 "a", then episode 0 "b" (another tool's file): "a" was lost without a word."""
    source = open_recording(write_session(tmp_path / "s.mcap", episodes=()))
    twice = write_copy(source, tmp_path / "twice.mcap", episodes=[
        Episode(0, "a", 0, 40 * STEP_NS), Episode(0, "b", 60 * STEP_NS, 100 * STEP_NS),
        Episode(1, "c", 110 * STEP_NS, 140 * STEP_NS)])
    capsys.readouterr()
    recording = open_recording(twice)
    episodes = recording.episodes()
    assert [(ep.number, ep.task, ep.start_ns, ep.stop_ns, ep.stopped) for ep in episodes] == [
        (0, "a", 0, 40 * STEP_NS, True), (1, "c", 110 * STEP_NS, 140 * STEP_NS, True),
        (2, "b", 60 * STEP_NS, 100 * STEP_NS, True)]
    recording.episodes()
    err = capsys.readouterr().err
    assert err.count("warning: ") == 1 and "episode 0 started again is read as episode 2" in err   # once per file
    assert main(["dataset", "export", str(twice), "-o", str(tmp_path / "out")]) == 0
    assert sorted(p.relative_to(tmp_path / "out").as_posix() for p in (tmp_path / "out").rglob("*.npz")) == [
        "a/twice_0.npz", "b/twice_2.npz", "c/twice_1.npz"]


# ------------------------------------------------------------------ J. progress of long exports and plots


def test_export_and_plot_show_their_progress(tmp_path, monkeypatch, capsys):
    """A 166 MB recording's export ran 11.6 s and its plot 20 s with nothing on stderr."""
    from teleop.record import plot as plot_module

    # 10 Hz for 100 s: episodes of 80 s and 19 s, four windows of 30 s to plot.
    path = write_session(tmp_path / "s.mcap", episodes=(("squat", 0, 800), ("wave", 800, 990)), n=1000,
                         step_ns=100_000_000)
    bars = []

    def recorded(real):
        def progress_bar(*args, **kwargs):
            bars.append(real(*args, **kwargs))
            updates = []
            update = bars[-1].update
            bars[-1].update = lambda n=1: (updates.append(n), update(n))[1]
            bars[-1].updates = updates
            return bars[-1]
        return progress_bar

    monkeypatch.setattr(export_module, "progress_bar", recorded(export_module.progress_bar))
    monkeypatch.setattr(plot_module, "progress_bar", recorded(plot_module.progress_bar))
    assert main(["dataset", "export", str(path), "-o", str(tmp_path / "out")]) == 0
    assert "exporting" in capsys.readouterr().err
    [bar] = bars
    assert bar.total == 99 and sum(bar.updates) == 99     # seconds of episodes read
    assert len(bar.updates) >= 50                         # moved while the 80 s episode was read
    assert main(["dataset", "plot", str(path), "-o", str(tmp_path / "s.png")]) == 0
    assert "reading the recording" in capsys.readouterr().err
    assert bars[1].total == 4 and sum(bars[1].updates) == 4

    export_module.export_episodes(path, tmp_path / "quiet", force=True)   # the library: no bar unless asked
    short = write_session(tmp_path / "short.mcap")                        # nor for a short read
    assert main(["dataset", "export", str(short), "-o", str(tmp_path / "short")]) == 0
    assert main(["dataset", "plot", str(short), "-o", str(tmp_path / "short.png")]) == 0
    err = capsys.readouterr().err
    assert "exporting" not in err and "reading the recording" not in err
