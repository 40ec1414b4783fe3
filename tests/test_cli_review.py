"""Review of the robot description, `teleop train` / `eval promp` options and the synthetic
dataset generator: bad input ends in one line naming the file or option, before any work."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import numpy as np
import pytest

from conftest import SYNTHETIC, error_line, run_cli, synthetic_dataset
from teleop.cli import main
from teleop.robot.description import DescriptionError, load_description
from teleop.robot.model import RobotModel


REPO = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------ robot description typos
@pytest.mark.parametrize("old, new, message", [
    ('["l_elbow", 1.0], ["l_wrist_prosup"', '["l_elbw", 1.0], ["l_wrist_prosup"',
     r"\[reference_joints\] left_arm names joints that are not in the URDF: \['l_elbw'\]"),
    ('neck = [["neck_pitch", -1.0], ["neck_yaw", 1.0]]\n', "", r"\[reference_joints\] lacks neck"),
    ('neck = [["neck_pitch", -1.0], ["neck_yaw", 1.0]]', 'neck = [["neck_pitch", -1.0]]',
     r"\[reference_joints\] neck needs 2 joints"),
    ('["neck_yaw", 1.0]]', '["neck_yaw", "plus"]]', r"\[reference_joints\] neck must be a list of"),
    ("left = [[0.1065, 0.041,", "lft = [[0.1065, 0.041,", r"soles\.left must be 4 corners"),
    ('head = "head"', "head = 3", r"\[frames\] head must be a frame name"),
    ('neck = ["neck_pitch", "neck_roll", "neck_yaw"]', 'neck = "neck_pitch"',
     r"\[groups\] neck must be a list of joint names"),
    ("root_yaw_in_stance = 3.141592653589793", 'root_yaw_in_stance = "pi"', "root_yaw_in_stance must be a number"),
    ("[extra_frames.left_eye]", "[extra_frames.left_hand]", "extra frame 'left_hand' has the name of a frame role"),
])
def test_description_typos_name_the_file_and_entry(tmp_path, old, new, message):
    """Each used to end in a KeyError / Boost.Python traceback when the references were first
    mapped, in a message without the file, or (an extra frame named like a role) in the hand
    role silently placed at the eye."""
    text = load_description().source.read_text()
    assert old in text
    bad = tmp_path / "typo.toml"
    bad.write_text(text.replace(old, new, 1))
    with pytest.raises(DescriptionError, match=message) as exc:
        from teleop.robot.target import robot_target
        robot_target(RobotModel(bad))
    assert str(bad) in str(exc.value)


# ------------------------------------------------------------ teleop train / eval options
def test_train_basis_below_the_basis_minimum_is_refused_by_argparse(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["train", str(SYNTHETIC / "squat"), "--basis", "1"])
    assert exc.value.code == 2
    assert "argument --basis: must be >= 4" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["train", "{data}", "--tasks", "squat,sqaut"], "--tasks squat,sqaut: sqaut not under {data} (tasks there: "),
    (["train", "{data}", "--exclude-performers", "bd"], "--exclude-performers bd: bd not under {data}"),
    (["eval", "promp", "--train", "{data}", "--test", "{data}", "--train-tasks", "squat,reach_forward,typo"],
     "--train-tasks squat,reach_forward,typo: typo not under {data}"),
])
def test_filter_names_the_data_lacks_are_refused(tmp_path, capsys, monkeypatch, argv, message):
    """A misspelt task or performer used to be dropped without a word (a performer meant to
    be held out was learned from)."""
    import teleop.train_cli as train_cli

    monkeypatch.setattr(train_cli, "read_take_files", lambda *a, **k: pytest.fail("read before the check"))
    data = synthetic_dataset(tmp_path / "data", {"squat": 2, "reach_forward": 2})
    out = tmp_path / "lib.npz"
    rc, _, err = run_cli(capsys, *[a.format(data=data) for a in argv], "-o" if argv[0] == "train" else "--out",
                         out if argv[0] == "train" else tmp_path / "eval")
    assert rc == 1
    assert message.format(data=data) in error_line(err)
    assert not out.exists()


def test_train_checks_filter_names_across_all_its_folders(tmp_path, capsys):
    """A task in one of the folders only is not a typo."""
    a = synthetic_dataset(tmp_path / "a", {"squat": 2})
    b = synthetic_dataset(tmp_path / "b", {"squat": 1, "reach_forward": 2})
    rc, out, err = run_cli(capsys, "train", a, b, "--tasks", "squat,reach_forward", "-o", tmp_path / "lib.npz")
    assert rc == 0, err
    # Both folders hold a copy of squat_0 (the same synthetic take): learned once, and said.
    assert "learned 2 tasks from 4 takes" in out


def test_train_learns_a_take_given_twice_once(tmp_path, capsys):
    """`train S S` (or a dataset and one of its task folders) learned every take twice: a
    duplicated take counts double in its task's mean and covariance."""
    data = synthetic_dataset(tmp_path / "data", {"squat": 2, "reach_forward": 2})
    rc, out, err = run_cli(capsys, "train", data, data / "squat", "-o", tmp_path / "lib.npz")
    assert rc == 0, err
    assert "learned 2 tasks from 4 takes" in out
    assert "note: 2 take(s) given more than once" in err


@pytest.mark.parametrize("command", ["train", "eval"])
def test_an_output_below_a_file_is_refused_before_reading(tmp_path, capsys, monkeypatch, command):
    """Used to fail with 'File exists' / 'Not a directory' after every take was read and learned."""
    import teleop.train_cli as train_cli

    monkeypatch.setattr(train_cli, "read_take_files", lambda *a, **k: pytest.fail("read before the check"))
    data = synthetic_dataset(tmp_path / "data", {"squat": 2})
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    if command == "train":
        rc, _, err = run_cli(capsys, "train", data, "-o", notes / "lib.npz")
        option = "-o"
    else:
        rc, _, err = run_cli(capsys, "eval", "promp", "--train", data, "--test", data, "--out", notes / "eval")
        option = "--out"
    assert rc == 1
    assert error_line(err).startswith(f"{option} {notes}/") and f"{notes} is a file" in err
    assert notes.read_text() == "mine"


# ------------------------------------------------------------ tools/generate_synthetic_dataset.py
def _generator():
    spec = importlib.util.spec_from_file_location("generate_synthetic_dataset",
                                                  REPO / "tools" / "generate_synthetic_dataset.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("argv, message", [
    (["--performers", "0"], "argument --performers: must be >= 1"),
    (["--rate", "nan"], "argument --rate"),
    (["--tasks"], "argument --tasks: expected at least one argument"),
])
def test_generator_refuses_bad_options(tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit) as exc:
        _generator().main(["--out", str(tmp_path / "synth"), *argv])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "synth").exists()


def test_generator_refuses_to_leave_stale_demonstrations_beside_a_new_index(tmp_path, capsys):
    """Regenerating fewer demonstrations (or fewer tasks) into a folder used to leave the
    old files there, unlisted in the new index.csv, for `teleop train` to learn from."""
    out = synthetic_dataset(tmp_path / "synth", {"squat": 3})
    (out / "index.csv").write_text("old index\n")
    with pytest.raises(SystemExit) as exc:
        _generator().main(["--out", str(out), "--tasks", "squat", "--n-per-task", "2"])
    assert exc.value.code == 2
    assert re.search(r"holds 1 demonstrations this run would not rewrite \(squat/squat_2\.npz\)",
                     capsys.readouterr().err)
    assert (out / "index.csv").read_text() == "old index\n"
    # Rewriting every file it holds is fine.
    assert _generator().main(["--out", str(out), "--tasks", "squat", "--n-per-task", "3"]) == 0
    assert len((out / "index.csv").read_text().splitlines()) == 4


# ------------------------------------------------------------ eval promp --leave-one-out
def test_eval_leave_one_out_leaves_the_take_out_however_the_folder_is_spelt(tmp_path, capsys, monkeypatch):
    """--train data --test /abs/data used to keep each test take in its own library (paths
    compared as written): a far smaller error, reported as leave-one-out."""
    import json

    synthetic_dataset(tmp_path / "data", {"squat": 3, "reach_forward": 3})
    monkeypatch.chdir(tmp_path)
    results = []
    for test in ("data", tmp_path / "data"):
        rc, out, err = run_cli(capsys, "eval", "promp", "--train", "data", "--test", test, "--leave-one-out",
                               "--json", "--out", tmp_path / "eval")
        assert rc == 0, err
        results.append(json.loads(out)["hand_rms_cm"])
    assert results[1] == pytest.approx(results[0])
    # Both are the leave-one-out figures (not two equal in-sample ones): each take scored by
    # a library learnt from the five others, evaluated without --leave-one-out, then
    # averaged over the takes (one take each: the pooled figure is their mean).
    from teleop.robot.target import robot_target
    from teleop.takes import list_take_files, load_take_files
    from teleop.train_cli import evaluate

    takes = load_take_files(list_take_files(tmp_path / "data"), robot_target(RobotModel()), progress=False)
    assert len(takes) == 6
    held_out = [evaluate([o for o in takes if o is not t], [t])["hand_rms_cm"] for t in takes]
    for level in ("none", "recog", "quarter", "half"):
        assert results[0][level] == pytest.approx(np.mean([h[level] for h in held_out]), rel=1e-9), level
    in_sample = evaluate(takes, takes)["hand_rms_cm"]
    assert in_sample["half"] < results[0]["half"]      # a take in its own library is predicted better


def test_leave_one_out_leaves_out_a_copy_of_the_take_too(tmp_path, capsys):
    """A test folder holding a copy of a training take: --leave-one-out used to compare paths
    only, kept the take in its own library and reported in-sample figures as leave-one-out.
    Now the copy is scored exactly as by a library learnt without it."""
    import json
    import shutil

    data = synthetic_dataset(tmp_path / "data", {"squat": 3, "reach_forward": 3})
    rest = synthetic_dataset(tmp_path / "rest", {"reach_forward": 3})
    (rest / "squat").mkdir()
    for k in (1, 2):
        shutil.copy(data / "squat" / f"squat_{k}.npz", rest / "squat")
    copies = tmp_path / "copies" / "squat"
    copies.mkdir(parents=True)
    shutil.copy(data / "squat" / "squat_0.npz", copies)

    def figures(*argv) -> dict:
        rc, out, err = run_cli(capsys, *argv, "--test", tmp_path / "copies", "--json", "--out", tmp_path / "out")
        assert rc == 0, err
        return json.loads(out)

    loo = figures("eval", "promp", "--train", data, "--leave-one-out")
    assert loo["hand_rms_cm"] == pytest.approx(figures("eval", "promp", "--train", rest)["hand_rms_cm"], rel=1e-9)
    assert loo["hand_rms_cm"]["half"] != pytest.approx(figures("eval", "promp", "--train", data)["hand_rms_cm"]["half"])
    trial = figures("trial", "--rtt", "1.5", "--train", data, "--leave-one-out")["rtt"]["1.5"]["comp"]
    rest_trial = figures("trial", "--rtt", "1.5", "--train", rest)["rtt"]["1.5"]["comp"]
    assert trial["hand_cm"] == pytest.approx(rest_trial["hand_cm"], rel=1e-9)
    assert trial["whole"] == pytest.approx(rest_trial["whole"], rel=1e-9)


@pytest.mark.parametrize("command", [["eval", "promp"], ["trial", "--rtt", "1.5"]])
def test_leave_one_out_refuses_a_test_take_that_is_not_a_training_take(tmp_path, capsys, command):
    data = synthetic_dataset(tmp_path / "data", {"squat": 3, "reach_forward": 3})
    other = tmp_path / "other" / "squat"
    other.mkdir(parents=True)
    import shutil

    shutil.copy(SYNTHETIC / "squat" / "squat_5.npz", other)
    rc, _, err = run_cli(capsys, *command, "--train", data, "--test", tmp_path / "other", "--leave-one-out",
                         "--out", tmp_path / "out")
    assert rc == 1
    assert error_line(err).endswith(f"--leave-one-out: test take {other / 'squat_5.npz'} is not one of the "
                                    "--train takes (by path or content), so there is nothing to leave out for "
                                    "it: test on takes of the training set, or drop --leave-one-out")


def test_eval_leave_one_out_single_take_check_sees_through_the_spelling(tmp_path, capsys, monkeypatch):
    synthetic_dataset(tmp_path / "data", {"squat": 1})
    monkeypatch.chdir(tmp_path)
    rc, _, err = run_cli(capsys, "eval", "promp", "--train", "data", "--test", tmp_path / "data", "--leave-one-out")
    assert rc == 1
    assert "is the only training take of task 'squat'" in error_line(err)


def test_trial_leave_one_out_leaves_the_take_out_however_the_folder_is_spelt(tmp_path, capsys, monkeypatch):
    """The same for `teleop trial --leave-one-out` (its library and its single-take check)."""
    import json

    import teleop.train_cli
    import teleop.trials.sweep

    synthetic_dataset(tmp_path / "data", {"squat": 3, "reach_forward": 3})
    monkeypatch.chdir(tmp_path)
    # Which takes each library is learnt from, and which library predicts which take.
    learnt_from, swept = {}, []
    learn, sweep = teleop.train_cli._learn, teleop.trials.sweep.run_sweep

    def learn_spy(takes, *args, **kwargs):
        library = learn(takes, *args, **kwargs)
        learnt_from[id(library)] = [t.trajectory.values for t in takes]
        return library

    def sweep_spy(cases, *args, **kwargs):
        swept.append(list(cases))
        return sweep(cases, *args, **kwargs)

    monkeypatch.setattr(teleop.train_cli, "_learn", learn_spy)
    monkeypatch.setattr(teleop.trials.sweep, "run_sweep", sweep_spy)
    results = []
    for test in ("data", tmp_path / "data"):
        rc, out, err = run_cli(capsys, "trial", "--train", "data", "--test", test, "--leave-one-out", "--rtt", "1.5",
                               "--json", "--out", tmp_path / "trial")
        assert rc == 0, err
        results.append(json.loads(out)["rtt"]["1.5"]["comp"]["hand_cm"])
    assert results[1] == pytest.approx(results[0])
    # However the folder is spelt, each of the 6 takes is predicted by a library of its own,
    # learnt from the 5 other training takes (the same file read as a training take is
    # another object with equal values: compared by value).
    assert len(swept) == 2
    for cases in swept:
        assert len(cases) == 6 and len({id(c.library) for c in cases}) == 6
        for case in cases:
            used = learnt_from[id(case.library)]
            assert len(used) == 5 and not any(np.array_equal(case.take.values, values) for values in used)
    synthetic_dataset(tmp_path / "one", {"squat": 1})
    rc, _, err = run_cli(capsys, "trial", "--train", "one", "--test", tmp_path / "one", "--leave-one-out",
                         "--rtt", "1.5")
    assert rc == 1 and "is the only training take" in error_line(err)


def test_output_into_a_pipe_closed_early_is_not_an_error():
    """`teleop info | head -1` printed "error: [Errno 32] Broken pipe"."""
    import subprocess
    import sys

    result = subprocess.run(f"{sys.executable} -m teleop info | head -1", shell=True, capture_output=True,
                            text=True, timeout=120, cwd=Path(__file__).resolve().parents[1])
    assert result.stdout.startswith("iCub")
    assert "Broken pipe" not in result.stderr and "error" not in result.stderr, result.stderr


def test_a_broken_socket_is_still_an_error(monkeypatch, capsys):
    """Only a closed standard output is quiet: a peer that went away is reported."""
    from teleop import cli

    def broken(args):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(cli, "build_parser", lambda: _parser_running(broken))
    assert cli.main(["x"]) == 1
    assert "Broken pipe" in capsys.readouterr().err


def _parser_running(func):
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("command")
    parser.set_defaults(func=func)
    return parser


@pytest.mark.parametrize("argv", [["demo", "--duration", "1"], ["tune", "--quick", "--setups", "2"],
                                  ["calibrate-sim", "--data", "RECORDING"]])
def test_an_out_that_is_a_file_is_refused_naming_the_option(argv, tmp_path, capsys):
    """demo said "README.md/frames: Not a directory" and tune "File exists" (no option named);
    calibrate-sim did its whole fit first."""
    from teleop.cli import main

    if "RECORDING" in argv:
        recording = tmp_path / "rec.npz"
        assert main(["calibrate-sim", "--make-test-recording", str(recording), "--duration", "1"]) == 0
        argv = [a if a != "RECORDING" else str(recording) for a in argv]
    out = tmp_path / "notes.txt"
    out.write_text("not a folder")
    assert main([*argv, "--out", str(out)]) != 0
    assert f"--out {out} is a file" in capsys.readouterr().err


def test_a_trial_leaves_only_its_own_take_plots_in_the_output_folder(tmp_path, capsys):
    """The worst take's plot was written only when it was not take 0, and plots of an earlier
    run at another round trip stayed next to the new results."""
    data = synthetic_dataset(tmp_path / "data", {"squat": 3})
    out = tmp_path / "trial"
    for rtt in ("1.5", "3"):
        rc, _, err = run_cli(capsys, "trial", "--train", data, "--test", data, "--leave-one-out", "--rtt", rtt,
                             "--out", out)
        assert rc == 0, err
        assert {p.name for p in out.glob("*_rtt*.png")} == {f"take0_rtt{rtt}.png", f"worst_rtt{rtt}.png"}
    # A real-time run's files keep their own names beside the virtual run's (before, each
    # mode removed the other's summary and overwrote its table, takes and plots).
    realtime = ["summary_realtime.json", "table_realtime.txt", "takes_realtime.csv", "take0_rtt1.5_realtime.png"]
    for name in realtime:
        (out / name).write_text("{}")
    assert run_cli(capsys, "trial", "--train", data, "--test", data, "--leave-one-out", "--rtt", "1",
                   "--out", out)[0] == 0
    assert (out / "summary.json").is_file() and (out / "table.txt").is_file()
    assert all((out / name).read_text() == "{}" for name in realtime)
    assert {p.name for p in out.glob("*_rtt*.png")} == {"take0_rtt1.png", "worst_rtt1.png", "take0_rtt1.5_realtime.png"}


@pytest.mark.parametrize("leave", [False, True])
def test_interrupted_work_is_said_on_a_line_of_its_own_not_after_its_progress_bar(capsys, leave):
    """Ctrl-C inside a progress bar's loop: "...rmse=2.14e-04]interrupted" (trial, demo,
    calibrate-sim); a failure inside one likewise ended the bar's line with the error."""
    import argparse

    from teleop.cli import run_command
    from teleop.progress import progress_bar

    def work(args, error):
        bar = progress_bar(total=100, desc="calibrating", leave=leave)   # updated by hand, as demo's
        bar.update(50)
        raise error

    for error, code, last in ((KeyboardInterrupt(), 130, "interrupted"),
                              (ValueError("take 3: bad"), 1, "(TELEOP_DEBUG=1 shows where it happened)")):
        args = argparse.Namespace(command="trial", func=lambda a, e=error: work(a, e))
        assert run_command(args) == code
        lines = capsys.readouterr().err.splitlines()
        assert lines[-1] == last
        if code == 1:
            assert lines[-2] == "teleop trial: error: take 3: bad"


def test_teleop_commands_run_blas_on_one_thread_unless_the_environment_says(monkeypatch):
    """Small matrix products on OpenBLAS's default threads waited for scheduler slices when
    another job used a core (the estimator step: 0.5 ms idle, 16 ms p90 under load)."""
    import argparse

    from threadpoolctl import threadpool_info, threadpool_limits

    from teleop.blas_threads import limit_blas_threads
    from teleop.cli import run_command

    with threadpool_limits(limits=2, user_api="blas"):       # restored after the test
        seen = []
        args = argparse.Namespace(command="x", func=lambda a: seen.append(
            [info["num_threads"] for info in threadpool_info() if info["user_api"] == "blas"]))
        assert run_command(args) == 0
        assert seen[0] and set(seen[0]) == {1}
        monkeypatch.setenv("OPENBLAS_NUM_THREADS", "2")
        assert limit_blas_threads() is False


@pytest.mark.skipif(not hasattr(__import__("os"), "mkfifo"), reason="named pipes are POSIX")
def test_checks_made_before_the_work_say_the_error_alone(tmp_path, capsys):
    """README: the checks a command makes before it starts say what to change, and no more.
    A missing data folder, a filter that selects nothing and a named pipe given as a motion
    file added the TELEOP_DEBUG hint all the same."""
    import os

    fifo = tmp_path / "take.csv"
    os.mkfifo(fifo)
    for argv in (["trial", "--train", str(SYNTHETIC), "--test", str(tmp_path / "missing"), "--rtt", "1.5"],
                 ["trial", "--train", str(SYNTHETIC), "--test", str(SYNTHETIC), "--test-performers", "zz",
                  "--rtt", "1.5"],
                 ["retarget", str(fifo)], ["info", str(fifo)]):
        rc, _, err = run_cli(capsys, *argv)
        assert rc == 1 and err.startswith(f"teleop {argv[0]}: error: ") and "TELEOP_DEBUG" not in err, (argv, err)
