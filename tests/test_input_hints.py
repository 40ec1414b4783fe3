"""What the commands say about input of the wrong kind or at the wrong level (a user
walkthrough): folders of dataset roots, recordings and robot references where human motion
is needed, a folder for a calibration recording, a CSV that is not an Xsens export."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from conftest import SYNTHETIC, error_line, run_cli, shared_data, synthetic_dataset
from retarget.human import HumanMotion, MotionFormatError
from retarget.references import RobotReferences
from teleop.cli import main


# ---------------------------------------------------------------- 1. dataset roots one level too deep
def test_train_on_a_folder_of_dataset_roots_names_the_one_to_give(tmp_path, capsys):
    """`teleop train data` with data/hdm05/<task>/... said "learned ..." of nothing else, or
    failed without naming hdm05: its takes were skipped without a word."""
    inner = synthetic_dataset(tmp_path / "data" / "hdm05", {"squat": 2, "reach_forward": 2})
    rc, _, err = run_cli(capsys, "train", tmp_path / "data", "-o", tmp_path / "lib.npz")
    assert rc == 1
    assert error_line(err) == (f"{tmp_path / 'data'}: no takes of its own: {inner} (4 takes) holds task folders, "
                               f"not takes: give it directly instead (e.g. teleop train {inner})")
    assert not (tmp_path / "lib.npz").exists()
    rc, out, err = run_cli(capsys, "train", inner, "-o", tmp_path / "lib.npz")   # as the message says
    assert rc == 0 and "learned 2 tasks from 4 takes" in out, err


def test_a_copied_dataset_root_with_an_index_csv_is_not_read_as_one_take(tmp_path, capsys):
    """`teleop train datasets` read datasets/synthetic as a task whose one take was its
    index.csv (a sub-folder's loose files were takes even beside its task folders)."""
    shutil.copytree(SYNTHETIC, tmp_path / "datasets" / "synthetic")
    rc, _, err = run_cli(capsys, "train", tmp_path / "datasets", "-o", tmp_path / "lib.npz")
    assert rc == 1
    message = error_line(err)
    assert f"{tmp_path / 'datasets' / 'synthetic'} (36 takes) holds task folders, not takes" in message, message


def test_train_on_a_mixed_folder_reads_its_tasks_and_warns_about_the_skipped_one(tmp_path, capsys):
    """The tasks beside a nested dataset root are read; the root's takes are named as skipped."""
    data = synthetic_dataset(tmp_path / "data", {"squat": 2})
    inner = synthetic_dataset(data / "more", {"reach_forward": 2, "side_reach": 1})
    rc, out, err = run_cli(capsys, "train", data, "-o", tmp_path / "lib.npz")
    assert rc == 0, err
    assert "learned 1 task from 2 takes" in out
    warnings = [ln for ln in err.splitlines() if "warning:" in ln]
    assert warnings == [f"teleop train: warning: {inner} skipped (3 takes): it holds task folders, not takes; "
                        f"give it directly to read them (e.g. teleop train {inner})"]


def test_eval_reads_folders_with_the_same_rule(tmp_path, capsys):
    inner = synthetic_dataset(tmp_path / "data" / "inner", {"squat": 2})
    rc, _, err = run_cli(capsys, "eval", "promp", "--train", tmp_path / "data", "--test", inner,
                         "--out", tmp_path / "out")
    assert rc == 1 and "inner (2 takes) holds task folders, not takes" in error_line(err)


def test_list_take_files_warns_by_default(tmp_path):
    from teleop.takes import SkippedTakesWarning, list_take_files

    data = synthetic_dataset(tmp_path / "data", {"squat": 1})
    synthetic_dataset(data / "nested", {"squat": 2})
    with pytest.warns(SkippedTakesWarning, match="nested skipped \\(2 takes\\)"):
        assert list_take_files(data) == [(data / "squat" / "squat_0.npz", "squat")]
    told = []
    list_take_files(data, warn=told.append)
    assert len(told) == 1 and told[0].startswith(f"{data / 'nested'} skipped (2 takes)")


def test_the_shared_data_root_names_hdm05_as_skipped():
    from teleop.takes import SkippedTakesWarning, list_take_files

    root = shared_data(needs=("hdm05", "xsens_putaside_box", "cmu_bvh"))
    with pytest.warns(SkippedTakesWarning, match=f"{re.escape(str(root / 'hdm05'))} skipped \\(107 takes\\)"):
        files = list_take_files(root)
    assert {label for _, label in files} == {"xsens_putaside_box", "cmu_bvh"}


# ---------------------------------------------------------------- 2./5. recordings and references as motion
def operator_recording(path: Path, frames: int = 60) -> Path:
    """An operator station's recording: a synthetic squat's first frames as raw input, their
    retargeted references, all of it one episode labelled squat."""
    from retarget.mapping import retarget_motion
    from teleop.record import Recorder
    from teleop.robot.model import RobotModel
    from teleop.robot.target import robot_target

    motion = HumanMotion.load_npz(SYNTHETIC / "squat" / "squat_0.npz").slice(0, frames)
    traj = retarget_motion(motion, robot_target(RobotModel()))
    now = [1_000_000_000]
    with Recorder(path, clock_ns=lambda: now[0], threaded=False) as rec:
        rec.start_episode("squat")
        for i in range(frames):
            now[0] = 1_000_000_000 + int(round(motion.times[i] * 1e9))
            rec.log_operator_input(motion, i)
            rec.log_references(RobotReferences.from_flat(float(traj.times[i]), traj.values[i]))
        rec.stop_episode()
    return path


def test_retarget_and_stream_mvn_read_a_recordings_operator_input(tmp_path, capsys):
    """A recording given where human motion is needed is read as its raw operator input, the
    session replayed (before: advice to export the episodes and give the folder, which
    retarget refuses, and whose files it refuses too: robot references, not human motion)."""
    from teleop.inputs.base import open_source
    from teleop.takes import read_motion_file

    recording = operator_recording(tmp_path / "op.mcap", frames=60)
    motion = read_motion_file(recording)
    original = HumanMotion.load_npz(SYNTHETIC / "squat" / "squat_0.npz").slice(0, 60)
    assert len(motion) == 60 and motion.segment_names == original.segment_names
    np.testing.assert_allclose(motion.positions, original.positions)
    rc, out, err = run_cli(capsys, "retarget", recording, "--out", tmp_path / "r")
    assert rc == 0, err
    assert (tmp_path / "r" / "references.npz").is_file()
    source = open_source(str(recording))            # operator --input op.mcap
    assert source is not None
    rc, out, err = run_cli(capsys, "stream-mvn", recording, "--port", "9", "--speed", "100")
    assert rc == 0 and "sent 60 samples" in out, err


def test_a_recording_without_operator_input_says_it_has_none(tmp_path, capsys):
    recording = tmp_path / "pattern.mcap"
    assert main(["record", "-o", str(recording), "--duration", "0.2"]) == 0   # a test pattern
    capsys.readouterr()
    hints = []
    for command in (["retarget", recording], ["stream-mvn", recording, "--port", "9"]):
        rc, _, err = run_cli(capsys, *command)
        hints.append(error_line(err))
        assert rc == 1 and hints[-1].startswith(f"{recording}: a recording without operator input "
                                                "(/operator/segments")
        assert f"teleop dataset export {recording} -o DIR, then teleop train DIR" in hints[-1]
    assert hints[0] == hints[1]


def test_exported_episodes_are_takes_for_train_and_refused_by_retarget_with_the_reason(tmp_path, capsys):
    """The advice for train (export, give DIR) works; an exported file given to retarget said
    only "not a human motion file (expected format humanmotion-v1)"."""
    recording = operator_recording(tmp_path / "op.mcap")
    rc, _, err = run_cli(capsys, "train", recording, "-o", tmp_path / "lib.npz")
    assert rc == 1 and error_line(err) == (f"{recording}: a recording, not a motion file: export its labelled "
                                           f"episodes first (teleop dataset export {recording} -o DIR) and give DIR")
    assert run_cli(capsys, "dataset", "export", recording, "-o", tmp_path / "demos")[0] == 0
    rc, out, err = run_cli(capsys, "train", tmp_path / "demos", "-o", tmp_path / "lib.npz")
    assert rc == 0 and "learned 1 task from 1 take" in out, err
    exported = tmp_path / "demos" / "squat" / "op_0.npz"
    for command in (["retarget", exported], ["stream-mvn", exported, "--port", "9"]):
        rc, _, err = run_cli(capsys, *command)
        assert rc in (1, 2) and error_line(err) == (
            f"{exported}: robot references (already retargeted), not a human motion: teleop train, eval and "
            f"trial take it as a take (e.g. teleop train {exported}, labelled 'squat'); here give the human "
            "motion file it was made from")
    rc, out, err = run_cli(capsys, "train", exported, "-o", tmp_path / "lib2.npz")   # as the message says
    assert rc == 0 and "squat" in out, err


def test_a_task_library_given_as_a_motion_says_what_it_is_and_where_it_goes(tmp_path, capsys):
    """A library from `teleop train` given to retarget, or left in a trial's take folder, said
    only "not a human motion file (expected format humanmotion-v1)"."""
    data = synthetic_dataset(tmp_path / "data", {"squat": 2})
    library = tmp_path / "lib.npz"
    assert run_cli(capsys, "train", data, "-o", library)[0] == 0
    expected = (f"{library}: a ProMP task library (made by teleop train), not a motion: give it to teleop robot "
                f"--library {library}; teleop train, eval and trial learn their own from folders of takes")
    rc, _, err = run_cli(capsys, "retarget", library, "--out", tmp_path / "r")
    assert rc == 1 and error_line(err) == expected
    library.rename(data / "squat" / "lib.npz")
    library = data / "squat" / "lib.npz"
    rc, _, err = run_cli(capsys, "trial", "--train", data, "--test", data, "--rtt", "1", "--out", tmp_path / "t")
    assert rc == 1 and error_line(err) == expected.replace(str(tmp_path / "lib.npz"), str(library))


# ---------------------------------------------------------------- 3. calibrate-sim --data FOLDER
def test_calibrate_sim_on_a_folder_says_it_is_a_folder(tmp_path, capsys):
    from teleop.sim.recording_io import RecordingError, load_recording

    with pytest.raises(RecordingError, match=f"^{re.escape(str(tmp_path))}: a folder, not a recording: give a "
                                             "recording file: a .npz or .json"):
        load_recording(tmp_path)
    rc, _, err = run_cli(capsys, "calibrate-sim", "--data", tmp_path)
    assert rc != 0 and "a folder, not a recording" in err and "no such" not in err


# ---------------------------------------------------------------- 4. a CSV that is not an Xsens export
def test_a_csv_that_is_not_xsens_says_what_an_xsens_csv_holds(tmp_path, capsys):
    from retarget.readers import read_motion

    people = tmp_path / "people.csv"
    people.write_text("name,age\nbob,3\n")
    with pytest.raises(MotionFormatError) as exc:
        read_motion(people)
    message = str(exc.value)
    assert message.startswith(f"{people}:1: not recognised as an Xsens MVN CSV export (first line: 'name,age')")
    assert "unsupported" not in message
    assert "no header" in message and "161" in message and "pN.csv" in message and "66" in message
    rc, _, err = run_cli(capsys, "retarget", people)
    assert rc == 1 and error_line(err) == message
    notes = tmp_path / "notes.txt"   # another extension: still "unsupported", with the formats
    notes.write_text("hello\n")
    with pytest.raises(MotionFormatError, match="unsupported motion format \\(extension '.txt'"):
        read_motion(notes)


def test_a_task_folder_with_an_archive_sub_folder_keeps_its_own_takes(tmp_path):
    """ds/squat/{a,b}.npz plus ds/squat/old/c.npz: squat is a task (its two takes read, the
    archived one said not to be), not a nested dataset dropped whole (a regression of the
    first fix: both of squat's own takes were lost)."""
    from teleop.takes import list_take_files

    motion = SYNTHETIC / "squat" / "squat_0.npz"
    (tmp_path / "ds" / "squat" / "old").mkdir(parents=True)
    (tmp_path / "ds" / "wave").mkdir()
    for name in ("squat/a.npz", "squat/b.npz", "squat/old/c.npz", "wave/w.npz"):
        shutil.copy(motion, tmp_path / "ds" / name)
    said = []
    files = list_take_files(tmp_path / "ds", warn=said.append)
    assert sorted((p.name, label) for p, label in files) == [("a.npz", "squat"), ("b.npz", "squat"),
                                                             ("w.npz", "wave")]
    assert said == [f"{tmp_path / 'ds' / 'squat'}: 1 take(s) in its sub-folders not read (a task's takes are "
                    "the files in its own folder)"]


def test_a_robot_recording_names_the_channel_and_the_labelling_it_needs(tmp_path, capsys):
    """A robot station's recording holds the commands as delivered, not /references: the
    advice to `teleop dataset export FILE -o DIR` exported nothing from it ("no channel
    /references"), and from an unlabelled one nothing either. The commands given now work."""
    from teleop.record import Recorder

    path = tmp_path / "robot.mcap"
    clock = {"t": 0}
    with Recorder(path, clock_ns=lambda: clock["t"], threaded=False) as recorder:
        for k in range(50):
            clock["t"] = k * 10_000_000
            recorder.log_delivered_command(RobotReferences.from_flat(k * 0.01, np.full(20, 0.01 * k)))
    for command in (["retarget", path], ["stream-mvn", path, "--port", "9"]):
        rc, _, err = run_cli(capsys, *command)
        assert rc == 1 and error_line(err).endswith(
            f"its labelled episodes are training data: label it first (teleop dataset label {path} --task NAME), "
            f"then teleop dataset export {path} --channel delivered -o DIR, then teleop train DIR"), err
    assert run_cli(capsys, "dataset", "label", path, "--task", "reach")[0] == 0
    rc, _, err = run_cli(capsys, "retarget", path)
    assert rc == 1 and error_line(err).endswith(f"training data: teleop dataset export {path} --channel delivered "
                                                "-o DIR, then teleop train DIR")
    rc, out, err = run_cli(capsys, "dataset", "export", path, "--channel", "delivered", "-o", tmp_path / "DIR")
    assert rc == 0 and (tmp_path / "DIR" / "reach" / "robot_0.npz").is_file(), (out, err)
