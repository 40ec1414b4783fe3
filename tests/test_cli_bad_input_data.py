"""Bad input to the data commands (train, eval, trial, retarget): one line naming the file or
option, exit 1 (or argparse's 2), found before any learning and with nothing written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from conftest import SYNTHETIC, error_line, run_cli, shared_data, synthetic_dataset
from teleop.cli import main


def usage_error(capsys, *argv: str) -> str:
    """Run a command argparse must refuse (exit 2); its message."""
    with pytest.raises(SystemExit) as exc:
        main([str(a) for a in argv])
    assert exc.value.code == 2
    return capsys.readouterr().err


# ---------------------------------------------------------------- 1. a task folder as input
def test_train_reads_a_folder_of_motion_files_as_one_task_named_after_it(tmp_path, capsys):
    task = tmp_path / "lift"
    task.mkdir()
    for k in range(2):
        shutil.copy(SYNTHETIC / "squat" / f"squat_{k}.npz", task)
    rc, out, err = run_cli(capsys, "train", task, "-o", tmp_path / "lib.npz")
    assert rc == 0, err
    assert "learned 1 task from 2 takes" in out and "lift" in out
    assert (tmp_path / "lib.npz").is_file()


def test_train_reads_an_hdm05_task_folder(tmp_path, capsys):
    hdm05 = shared_data("hdm05")
    (tmp_path / "squat1Reps").mkdir()
    shutil.copytree(hdm05 / "skeletons", tmp_path / "skeletons")   # found beside the task folder
    for amc in sorted((hdm05 / "squat1Reps").glob("HDM_bd_*.amc"))[:2]:
        shutil.copy(amc, tmp_path / "squat1Reps")
    rc, out, err = run_cli(capsys, "train", tmp_path / "squat1Reps", "-o", tmp_path / "lib.npz")
    assert rc == 0, err
    assert "learned 1 task from 2 takes" in out and "squat1Reps" in out


@pytest.mark.parametrize("kind", ["missing", "empty"])
def test_train_on_a_missing_or_empty_folder_says_so(tmp_path, capsys, kind):
    folder = tmp_path / "data"
    if kind == "empty":
        folder.mkdir()
    rc, _, err = run_cli(capsys, "train", folder, "-o", tmp_path / "lib.npz")
    message = error_line(err)
    assert rc == 1 and message.startswith(str(folder))
    assert ("no such file or folder" if kind == "missing" else "no motion files") in message
    assert not (tmp_path / "lib.npz").exists()


# ---------------------------------------------------------------- 2. filters that select nothing
def test_train_with_a_task_filter_that_selects_nothing_names_filter_and_tasks(tmp_path, capsys):
    data = synthetic_dataset(tmp_path / "data", {"squat": 1, "reach_forward": 1})
    rc, _, err = run_cli(capsys, "train", data, "--tasks", "nosuchtask", "-o", tmp_path / "lib.npz")
    message = error_line(err)
    assert rc == 1
    assert f"no takes under {data} match --tasks nosuchtask" in message
    assert "tasks: reach_forward, squat" in message
    assert not (tmp_path / "lib.npz").exists()


def test_eval_with_a_test_filter_that_selects_nothing_names_it(tmp_path, capsys):
    data = synthetic_dataset(tmp_path / "data", {"squat": 2})
    rc, _, err = run_cli(capsys, "eval", "promp", "--train", data, "--test", data, "--test-performers", "zz")
    assert rc == 1
    assert "match --test-performers zz" in error_line(err)


def test_trial_with_a_filter_that_selects_nothing_writes_nothing(tmp_path, capsys):
    data = synthetic_dataset(tmp_path / "data", {"squat": 2})
    out = tmp_path / "trial"
    out.mkdir()
    (out / "summary.json").write_text("earlier result")
    rc, _, err = run_cli(capsys, "trial", "--train", data, "--test", data, "--test-tasks", "nosuchtask",
                         "--rtt", "1.5", "--out", out)
    assert rc == 1
    assert "match --test-tasks nosuchtask" in error_line(err)
    assert (out / "summary.json").read_text() == "earlier result"
    assert sorted(p.name for p in out.iterdir()) == ["summary.json"]


def test_hdm05_performer_filter_that_selects_nothing_lists_the_performers(capsys):
    hdm05 = shared_data("hdm05")
    rc, _, err = run_cli(capsys, "eval", "promp", "--train", hdm05, "--test", hdm05,
                         "--train-exclude-performers", "bd", "--test-performers", "zz")
    message = error_line(err)
    assert rc == 1
    assert f"no takes under {hdm05} match --test-performers zz (performers there: bd, bk, dg; tasks: " in message


# ---------------------------------------------------------------- 3./4. retarget's input file
@pytest.mark.parametrize("option", ["--view", "--no-zmp-correction"])
def test_retarget_execute_options_without_execute_are_refused(tmp_path, capsys, option):
    rc, _, err = run_cli(capsys, "retarget", SYNTHETIC / "squat" / "squat_0.npz", option, "--out", tmp_path / "out")
    assert rc == 2                   # the command line cannot work: argparse's code, with a hint to --help
    assert error_line(err) == f"{option} is about playing the references on the robot: give --execute too"
    assert "(teleop retarget --help lists the options)" in err
    assert not (tmp_path / "out").exists()


def test_retarget_a_folder_says_it_takes_one_file(tmp_path, capsys):
    rc, _, err = run_cli(capsys, "retarget", tmp_path, "--out", tmp_path / "out")
    assert rc == 1
    assert error_line(err).startswith(f"{tmp_path} is a folder: teleop retarget takes one motion file")
    assert not (tmp_path / "out").exists()


def test_retarget_a_csv_with_the_wrong_column_count_says_expected_and_found(tmp_path, capsys):
    csv = tmp_path / "p1.csv"
    np.savetxt(csv, np.zeros((5, 10)), delimiter=",")
    rc, _, err = run_cli(capsys, "retarget", csv, "--out", tmp_path / "out")
    message = error_line(err)
    assert rc == 1 and message.startswith(f"{csv}:1: 10 columns") and "161" in message
    assert not (tmp_path / "out").exists()


def nan_motion(path: Path) -> Path:
    """A synthetic take saved with NaN in frame 10 (pelvis position)."""
    with np.load(SYNTHETIC / "squat" / "squat_0.npz") as data:
        arrays = {key: data[key] for key in data.files}
    arrays["positions"] = arrays["positions"].astype(float)
    arrays["positions"][10, 0, 2] = np.nan
    np.savez(path, **arrays)
    return path


def test_retarget_a_motion_npz_with_nan_names_file_and_frame(tmp_path, capsys):
    motion = nan_motion(tmp_path / "motion_nan.npz")
    rc, out, err = run_cli(capsys, "retarget", motion, "--execute", "--json", "--out", tmp_path / "out")
    assert rc == 1 and out == ""
    assert error_line(err) == f"{motion}: non-finite positions (NaN or inf) at frame 10 of 347, segment pelvis"
    assert not (tmp_path / "out").exists()


def test_retarget_execute_that_fails_leaves_the_previous_outputs(tmp_path, capsys, monkeypatch):
    # The references and the plot were written before the robot played them: a run stopped
    # there (Ctrl-C, a bad $TELEOP_SIM_ACTUATOR) had replaced the previous run's files.
    from conftest import SYNTHETIC

    motion = SYNTHETIC / "squat" / "squat_0.npz"
    out = tmp_path / "out"
    out.mkdir()
    (out / "references.npz").write_bytes(b"the previous run's")
    junk = tmp_path / "actuator.png"
    junk.write_bytes(b"\x89PNG\r\n\x1a\n")
    monkeypatch.setenv("TELEOP_SIM_ACTUATOR", str(junk))
    rc, _, err = run_cli(capsys, "retarget", motion, "--execute", "--out", out)
    assert rc == 1 and error_line(err).startswith(f"$TELEOP_SIM_ACTUATOR: {junk}: ")
    assert (out / "references.npz").read_bytes() == b"the previous run's"
    assert sorted(p.name for p in out.iterdir()) == ["references.npz"]


def test_train_on_recordings_says_to_export_them_first(tmp_path, capsys):
    """`teleop --help` says train learns from recordings: from what `dataset export` makes of
    them. A .mcap given directly, or a folder of them, said "unsupported motion format" /
    "no motion files" without the way forward."""
    recording = tmp_path / "rec" / "session.mcap"
    assert main(["record", "-o", str(recording), "--duration", "0.2"]) == 0
    capsys.readouterr()
    rc, _, err = run_cli(capsys, "train", recording, "-o", tmp_path / "lib.npz")
    assert rc == 1 and error_line(err) == (f"{recording}: a recording, not a motion file: export its labelled "
                                           f"episodes first (teleop dataset export {recording} -o DIR) and give DIR")
    rc, _, err = run_cli(capsys, "train", tmp_path / "rec", "-o", tmp_path / "lib.npz")
    assert rc == 1 and error_line(err).endswith(f"; its 1 .mcap recording(s) need `teleop dataset export "
                                                f"{tmp_path / 'rec'} -o DIR` first")


def test_train_on_a_one_frame_take_names_the_file(tmp_path, capsys):
    """It said "a demonstration needs >= 2 samples with strictly increasing times", from the
    learning, without saying which take."""
    with np.load(SYNTHETIC / "squat" / "squat_0.npz") as data:
        arrays = {key: data[key][:1] if data[key].ndim and len(data[key]) == 347 else data[key] for key in data.files}
    (tmp_path / "data" / "squat").mkdir(parents=True)
    take = tmp_path / "data" / "squat" / "one.npz"
    np.savez(take, **arrays)
    rc, _, err = run_cli(capsys, "train", tmp_path / "data", "-o", tmp_path / "lib.npz")
    assert rc == 1
    assert error_line(err) == (f"{take}: 1 frame: a take needs at least 10 frames (a shorter one is a fragment, not "
                               "a motion: it would skew its task's mean motion and speed range)")


# ---------------------------------------------------------------- 5./6. option values
@pytest.mark.parametrize("value", ["-1", "0", "nan", "1e9"])
@pytest.mark.parametrize("command", [["train", "data"], ["eval", "promp", "--train", "d", "--test", "d"],
                                     ["trial", "--train", "d", "--test", "d"], ["retarget", "f.csv"]])
def test_rate_hz_must_be_positive_and_finite(capsys, command, value):
    """1e9 Hz made a 2.7 s Xsens take last 3 ns, without a word."""
    assert "argument --rate-hz" in usage_error(capsys, *command, "--rate-hz", value)


def test_retarget_refuses_a_rate_for_a_file_other_than_an_xsens_csv(capsys, tmp_path):
    """--rate-hz on a .npz was silently ignored: the user expected the take at that rate."""
    take = SYNTHETIC / "squat" / "squat_0.npz"
    rc, _, err = run_cli(capsys, "retarget", take, "--rate-hz", "60", "--out", tmp_path / "r")
    assert rc == 2 and error_line(err) == (
        f"--rate-hz applies to Xsens CSV and AMC files only (they do not state their rate); {take} is a human motion "
        ".npz file, which states its own")


def test_retarget_says_it_reads_a_joint_angle_files_poses_from_its_partner(capsys, tmp_path):
    """`teleop retarget .../1.csv` printed p1.csv's frames with no word that p1.csv was read."""
    angles = shared_data("xsens_putaside_box", "1.csv")
    rc, out, err = run_cli(capsys, "retarget", angles, "--out", tmp_path / "r")
    assert rc == 0 and out.splitlines()[0].split() == ["frames", "272"]
    assert err.strip() == f"teleop retarget: reading the segment poses of {angles} from {angles.parent / 'p1.csv'}"


@pytest.mark.parametrize("option, value", [("--rtt", "abc"), ("--rtt", ""), ("--rtt", "-1"), ("--rtt", "nan"),
                                           ("--rtt", "0,,x"), ("--loss", "1.5"), ("--loss", "-0.1")])
def test_trial_refuses_bad_round_trips_and_loss(capsys, option, value):
    assert f"argument {option}" in usage_error(capsys, "trial", "--train", "d", "--test", "d", option, value)


def test_trial_out_that_is_a_file_fails_before_the_sweep(tmp_path, capsys):
    data = synthetic_dataset(tmp_path / "data", {"squat": 2})
    out = tmp_path / "results"
    out.write_text("not a folder")
    rc, _, err = run_cli(capsys, "trial", "--train", data, "--test", data, "--rtt", "1.5", "--out", out)
    assert rc == 1 and error_line(err).startswith(f"--out {out} is a file")
    assert out.read_text() == "not a folder"


def test_trial_keys_results_by_the_round_trips_as_written(tmp_path, capsys):
    data = synthetic_dataset(tmp_path / "data", {"squat": 2})
    rc, out, err = run_cli(capsys, "trial", "--train", data, "--test", data, "--test-tasks", "squat",
                           "--rtt", "1.5, 3", "--json", "--out", tmp_path / "out")
    assert rc == 0, err
    assert list(json.loads(out)["rtt"]) == ["1.5", "3"]


def test_train_and_retarget_refuse_an_output_of_the_wrong_kind_before_working(tmp_path, capsys):
    data = synthetic_dataset(tmp_path / "data", {"squat": 1})
    rc, _, err = run_cli(capsys, "train", data, "-o", tmp_path)
    assert rc == 1 and error_line(err).startswith(f"-o {tmp_path} is a folder")
    out = tmp_path / "out"
    out.write_text("a file")
    rc, _, err = run_cli(capsys, "retarget", data / "squat" / "squat_0.npz", "--out", out)
    assert rc == 1 and error_line(err).startswith(f"--out {out} is a file")


# ---------------------------------------------------------------- 7. test tasks the library lacks
@pytest.mark.parametrize("loo", [False, True])
def test_eval_a_test_task_the_training_set_lacks_names_task_and_tasks(tmp_path, capsys, loo):
    train = synthetic_dataset(tmp_path / "train", {"squat": 2, "reach_forward": 2})
    test = tmp_path / "xs_good"   # a task folder: one task, labelled xs_good
    test.mkdir()
    shutil.copy(SYNTHETIC / "side_reach" / "side_reach_0.npz", test)
    rc, _, err = run_cli(capsys, "eval", "promp", "--train", train, "--test", test,
                         *(["--leave-one-out"] if loo else []))
    message = error_line(err)
    assert rc == 1
    assert "task 'xs_good', which the training takes do not have (tasks: reach_forward, squat)" in message


def test_eval_leave_one_out_on_a_task_with_a_single_take_says_so(tmp_path, capsys):
    data = synthetic_dataset(tmp_path / "data", {"squat": 1})
    rc, _, err = run_cli(capsys, "eval", "promp", "--train", data, "--test", data, "--leave-one-out")
    assert rc == 1
    assert "is the only training take of task 'squat'" in error_line(err)


def test_trial_leave_one_out_on_a_single_take_says_so(tmp_path, capsys):
    data = synthetic_dataset(tmp_path / "data", {"squat": 1})
    rc, _, err = run_cli(capsys, "trial", "--train", data, "--test", data, "--leave-one-out", "--rtt", "1.5",
                         "--out", tmp_path / "out")
    assert rc == 1 and "is the only training take" in error_line(err)
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------- 8. bad files in a take folder
def _text(path: Path) -> None:
    path.write_text("hello, not a zip archive\n")


def _truncated(path: Path) -> None:
    path.write_bytes((SYNTHETIC / "squat" / "squat_0.npz").read_bytes()[:5000])


def _nan_motion(path: Path) -> None:
    nan_motion(path)


def _reference_columns(path: Path) -> None:
    np.savez(path, times=np.arange(50) / 50, values=np.zeros((50, 7)))


def _reference_nan(path: Path) -> None:
    values = np.zeros((50, 20))
    values[7, 3] = np.nan
    np.savez(path, times=np.arange(50) / 50, values=values)


@pytest.mark.parametrize("make, reason", [(_text, "not a .npz file"), (_truncated, "not a readable .npz file"),
                                          (_nan_motion, "non-finite positions"),
                                          (_reference_columns, "values must be (T, 20), got (50, 7)"),
                                          (_reference_nan, "non-finite values (NaN or inf) at frame 7")])
def test_train_names_the_bad_file_in_a_take_folder(tmp_path, capsys, make, reason):
    data = synthetic_dataset(tmp_path / "data", {"squat": 1})
    bad = data / "squat" / "a_bad.npz"   # sorted first: read before the good take
    make(bad)
    rc, _, err = run_cli(capsys, "train", data, "-o", tmp_path / "lib.npz")
    message = error_line(err)
    assert rc == 1 and message.startswith(f"{bad}: ") and reason in message
    assert not (tmp_path / "lib.npz").exists()


@pytest.mark.parametrize("command", ["eval", "trial"])
def test_eval_and_trial_name_the_bad_file_in_a_take_folder(tmp_path, capsys, command):
    data = synthetic_dataset(tmp_path / "data", {"squat": 1})
    bad = data / "squat" / "a_bad.npz"
    _truncated(bad)
    argv = ["eval", "promp"] if command == "eval" else ["trial", "--rtt", "1.5", "--out", tmp_path / "out"]
    rc, _, err = run_cli(capsys, *argv, "--train", data, "--test", data)
    assert rc == 1 and error_line(err).startswith(f"{bad}: not a readable .npz file")
    assert not (tmp_path / "out").exists()
