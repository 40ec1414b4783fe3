"""`teleop train`, `eval promp`, `trial` and `info` against what the review found: an empty
--exclude-performers that filtered nothing, a --basis below what the basis can take refused
only after every take was read, a take without motion learned silently, a library without
the .npz suffix that `info` could not describe, a filter naming a task not there reported
with the TELEOP_DEBUG hint, `train -o ''` called a folder, `eval` told to run `train`, and a
trial note that named columns showing '-'."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from conftest import SYNTHETIC, error_line, run_cli, synthetic_dataset


def _usage_error(capsys, *argv) -> str:
    with pytest.raises(SystemExit) as caught:
        run_cli(capsys, *argv)
    err = capsys.readouterr().err
    assert caught.value.code == 2, err
    return err


# ------------------------------------------------------------------ 1. empty --exclude-performers
@pytest.mark.parametrize("argv", [
    ["train", SYNTHETIC, "--exclude-performers", ""],
    ["eval", "promp", "--train", SYNTHETIC, "--test", SYNTHETIC, "--train-exclude-performers", ""],
    ["eval", "promp", "--train", SYNTHETIC, "--test", SYNTHETIC, "--test-exclude-performers", ","],
    ["trial", "--train", SYNTHETIC, "--test", SYNTHETIC, "--test-exclude-performers", " "],
])
def test_an_empty_exclude_performers_is_refused_as_performers_is(capsys, tmp_path, argv):
    err = _usage_error(capsys, *argv, "--out" if argv[0] != "train" else "-o", tmp_path / "o")
    assert "exclude-performers: give one or more comma-separated names" in err


def test_exclude_performers_left_out_still_filters_nothing():
    import argparse

    from teleop.data_args import add_take_filters, take_files

    parser = argparse.ArgumentParser()
    add_take_filters(parser)
    args = parser.parse_args(["--tasks", "squat"])
    assert args.exclude_performers is None
    assert len(take_files(args, SYNTHETIC)) == len(list((SYNTHETIC / "squat").glob("*.npz")))


# ------------------------------------------------------------------ 2. --basis minimum
@pytest.mark.parametrize("value", ["2", "3"])
def test_train_refuses_fewer_basis_functions_than_the_basis_can_take(capsys, tmp_path, value):
    """--basis 2 and 3 failed after every take was read: "margin_factor * width_factor too
    large for n_basis", exit code 1 and the TELEOP_DEBUG hint."""
    err = _usage_error(capsys, "train", SYNTHETIC, "--basis", value, "-o", tmp_path / "lib.npz")
    assert f"argument --basis: must be >= 4, got {value}" in err


def test_the_basis_minimum_follows_from_the_basis_defaults():
    from promp.basis import RBFBasis, min_n_basis
    from teleop.train_cli import basis_count, min_basis

    low = min_basis()
    assert basis_count(str(low)) == low == 4
    RBFBasis(low)
    with pytest.raises(ValueError):
        RBFBasis(low - 1)
    for width, margin in [(1.0, 0.0), (1.0, 0.5), (0.75, 1.0), (1.0, 1.5), (0.3, 2.0)]:
        k = min_n_basis(width, margin)
        RBFBasis(k, width_factor=width, margin_factor=margin)
        with pytest.raises(ValueError):
            RBFBasis(k - 1, width_factor=width, margin_factor=margin)


# ------------------------------------------------------------------ 3. takes without motion
def _frozen_copy(source: Path, dest: Path) -> Path:
    """``source`` (a synthetic .npz take) with every frame equal to its first."""
    with np.load(source, allow_pickle=False) as data:
        fields = {k: data[k] for k in data.files}
    for key in ("positions", "orientations", "com"):
        fields[key] = np.repeat(fields[key][:1], len(fields[key]), axis=0)
    dest.parent.mkdir(parents=True, exist_ok=True)
    np.savez(dest, **fields)
    return dest


def test_train_eval_and_trial_refuse_a_take_without_motion(tmp_path, capsys):
    data = synthetic_dataset(tmp_path / "data", {"squat": 3})
    frozen = _frozen_copy(SYNTHETIC / "squat" / "squat_3.npz", data / "squat" / "squat_9.npz")
    for argv in (["train", data, "-o", tmp_path / "lib.npz"],
                 ["eval", "promp", "--train", data, "--test", data, "--out", tmp_path / "ev"],
                 ["trial", "--train", data, "--test", data, "--rtt", "1", "--out", tmp_path / "tr"]):
        rc, _, err = run_cli(capsys, *argv)
        message = error_line(err)
        assert rc == 1 and str(frozen) in message and "no motion" in message and "0 cm" in message, err
    assert not (tmp_path / "lib.npz").exists()


def test_every_take_of_the_products_datasets_moves_well_above_the_minimum():
    from teleop.robot.model import RobotModel
    from teleop.robot.target import robot_target
    from teleop.takes import MIN_HAND_MOTION_M, hand_motion_m, list_take_files, load_take

    target = robot_target(RobotModel())
    least = min(hand_motion_m(load_take(path, label, target).trajectory)
                for path, label in list_take_files(SYNTHETIC / "squat"))
    assert least > 5 * MIN_HAND_MOTION_M


# ------------------------------------------------------------------ 4. info of a library without .npz
def test_info_describes_a_library_written_without_the_npz_suffix(tmp_path, capsys):
    data = synthetic_dataset(tmp_path / "data", {"squat": 2, "put_aside": 2})
    rc, _, err = run_cli(capsys, "train", data, "--basis", "4", "-o", tmp_path / "lib")
    assert rc == 0, err
    rc, out, err = run_cli(capsys, "info", tmp_path / "lib")
    assert rc == 0 and "task library of 2 tasks" in out, err


# ------------------------------------------------------------------ 5. filter names not there
@pytest.mark.parametrize("argv", [
    ["train", SYNTHETIC, "--tasks", "squat,sqaut"],
    ["eval", "promp", "--train", SYNTHETIC, "--test", SYNTHETIC, "--test-tasks", "squat,sqaut"],
])
def test_a_filter_naming_a_task_not_there_is_a_precondition_without_the_debug_hint(capsys, tmp_path, argv):
    rc, _, err = run_cli(capsys, *argv, "--out", tmp_path / "o")
    assert rc == 1 and "sqaut not under" in error_line(err) and "TELEOP_DEBUG" not in err, err


# ------------------------------------------------------------------ 6. train -o ''
def test_train_refuses_an_empty_out_as_eval_and_trial_do(capsys, tmp_path):
    err = _usage_error(capsys, "train", SYNTHETIC, "-o", "")
    assert "the path must not be empty" in err and "is a folder" not in err


# ------------------------------------------------------------------ 7. nested folders name the command run
def test_eval_on_a_folder_of_datasets_names_eval_not_train(capsys, tmp_path):
    nest = tmp_path / "nest"
    synthetic_dataset(nest / "hdm", {"squat": 1, "put_aside": 1})
    rc, _, err = run_cli(capsys, "eval", "promp", "--train", nest, "--test", nest, "--out", tmp_path / "ev")
    message = error_line(err)
    assert rc == 1 and f"teleop eval promp --train {nest / 'hdm'}" in message and "teleop train" not in message


# ------------------------------------------------------------------ 8. the trial note on never-engaged takes
def test_the_never_engaged_note_names_only_columns_that_show_figures():
    from teleop.trials.report import format_table

    empty = {"hand_cm": None, "com_cm": None, "posture_rad": None, "hand_cm_std": None, "com_cm_std": None,
             "posture_rad_std": None, "whole": {"hand_cm": None, "com_cm": None, "posture_rad": None}}
    entry = {"comp": empty, "nocomp": empty, "engaged_takes": 0, "scored_takes": 0, "engaged_late_takes": 0,
             "takes": 12, "wrong_task_engagements": 0, "never_engaged_takes": 12, "abandoned_takes": 0,
             "worst_excess_cm": {"mean": None, "max": None}}
    text = format_table({"rtt": {"1": entry}, "link": None})
    row = text.splitlines()[2].split()
    assert row[-1] == "-" and row[-2] == "0" and row[-3] == "-"      # worst excess, wrong task, whole comp
    note = next(line for line in text.splitlines() if "never engaged" in line)
    assert "counted in 'wrong task';" in note and "'whole' and 'worst excess' show '-'" in note
    measured = {**entry, "comp": {**empty, "whole": {**empty["whole"], "hand_cm": 3.0}},
                "worst_excess_cm": {"mean": 1.0, "max": 2.0}}
    note = next(line for line in format_table({"rtt": {"1": measured}}).splitlines() if "never engaged" in line)
    assert "counted in 'whole', 'wrong task' and 'worst excess'." in note
