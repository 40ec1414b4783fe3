"""`teleop train` and `teleop retarget` against what the audit found: an -o that replaced a
take or any file, a library save that a full disk truncated, takes labelled "" from `.`,
a --basis that exhausted the memory, the same take counted twice, physically impossible
or very short takes learned silently, an ignored --rate-hz, an unwritable output found
only after the work, and absurd or one-frame retargeting written with exit code 0."""

from __future__ import annotations

import errno
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from conftest import SYNTHETIC, error_line, run_cli, shared_data

# The product's own demonstrations, retargeted once: robot references of a 4-5 s reach
# each (as `teleop dataset export` writes a recording's episodes), the takes below.
_TASK, _SOURCE_TASK = "wave", "reach_forward"


@pytest.fixture(scope="module")
def references():
    """Three retargeted takes of one task (ReferenceTrajectory, 50 Hz, about 7 s)."""
    from teleop.robot.model import RobotModel
    from teleop.robot.target import robot_target
    from teleop.takes import load_take

    target = robot_target(RobotModel())
    return [load_take(SYNTHETIC / _SOURCE_TASK / f"{_SOURCE_TASK}_{k}.npz", _TASK, target).trajectory
            for k in range(3)]


def _save(traj, path: Path, **changes) -> Path:
    """``traj`` with ``changes`` (times, values, source) saved as a references take."""
    from retarget.references import ReferenceTrajectory

    path.parent.mkdir(parents=True, exist_ok=True)
    fields = {"times": traj.times, "values": traj.values, "label": _TASK, "source": str(path), **changes}
    ReferenceTrajectory(fields["times"], fields["values"], label=fields["label"],
                        source=fields["source"]).save_npz(path)
    return path


@pytest.fixture()
def demos(tmp_path, references) -> Path:
    """``demos/wave/r{k}_0.npz``: three takes of one task."""
    for k, traj in enumerate(references):
        _save(traj, tmp_path / "demos" / _TASK / f"r{k}_0.npz")
    return tmp_path / "demos"


# ------------------------------------------------------------------ 1. what -o replaces
def test_train_refuses_an_out_that_is_one_of_its_takes_even_with_force(demos, capsys):
    """``train demos -o demos/wave/r1_0.npz`` replaced the demonstration, exit code 0."""
    take = demos / _TASK / "r1_0.npz"
    before = take.read_bytes()
    for force in ([], ["--force"]):
        rc, _, err = run_cli(capsys, "train", demos, "-o", take, *force)
        assert rc == 1 and error_line(err) == (f"-o {take} is one of the takes given ({take}): writing the library "
                                               "there would replace it; give another file")
        assert take.read_bytes() == before


def test_train_refuses_to_replace_a_file_that_is_not_a_library_without_force(demos, tmp_path, capsys):
    """``-o notes.csv`` overwrote the CSV; with --force it is replaced, by a library."""
    from promp.library import TaskLibrary

    notes = tmp_path / "notes.csv"
    notes.write_text("a,b\n1,2\n")
    rc, _, err = run_cli(capsys, "train", demos, "-o", notes)
    assert rc == 1 and error_line(err) == (f"-o {notes} exists and is not a task library (not an .npz archive): "
                                           "pass --force to replace it, or give another file")
    assert notes.read_text() == "a,b\n1,2\n"
    rc, out, err = run_cli(capsys, "train", demos, "-o", notes, "--force")
    assert rc == 0, err
    assert TaskLibrary.load(notes).labels == [_TASK]


def test_train_replaces_an_existing_task_library_as_documented(demos, tmp_path, capsys):
    """README: ``teleop train ... -o out/library.npz`` again updates the library, no --force."""
    from promp.library import TaskLibrary

    library = tmp_path / "lib.npz"
    assert run_cli(capsys, "train", demos, "-o", library)[0] == 0
    first = library.read_bytes()
    rc, _, err = run_cli(capsys, "train", demos, "-o", library, "--basis", "10")
    assert rc == 0, err
    assert library.read_bytes() != first and TaskLibrary.load(library)[_TASK].basis.n_basis == 10


def test_train_help_documents_force(capsys):
    from teleop.cli import main

    with pytest.raises(SystemExit):
        main(["train", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--force replace an existing -o that is not a task library" in text


# ------------------------------------------------------------------ 2. atomic save
def _full_disk(monkeypatch, exc: BaseException = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))):
    """np.savez that writes the start of an archive, then fails as a full disk would."""
    def savez(file, **arrays):
        file.write(b"PK\x03\x04" + b"\0" * 1000)
        raise exc

    monkeypatch.setattr(np, "savez", savez)


def _library(references):
    """A one-task library of the takes."""
    from teleop.prescient.training import learn_library

    return learn_library(references)


def test_a_failed_save_keeps_the_previous_library_and_names_the_file(tmp_path, references, monkeypatch):
    """With the disk full, the library was truncated in place ("[Errno 28] No space left on
    device", no file name): the good library it replaced was lost."""
    from promp.library import TaskLibrary

    library = _library(references)
    path = tmp_path / "lib.npz"
    library.save(path)
    good = path.read_bytes()
    _full_disk(monkeypatch)
    with pytest.raises(OSError) as caught:
        library.save(path)
    assert caught.value.errno == errno.ENOSPC and caught.value.filename == str(path)
    assert "No space left on device" in caught.value.strerror
    assert path.read_bytes() == good and TaskLibrary.load(path).labels == [_TASK]
    assert sorted(os.listdir(tmp_path)) == ["lib.npz"]      # no temporary file left


def test_an_interrupted_save_leaves_the_previous_library_and_no_temporary_file(tmp_path, references, monkeypatch):
    library = _library(references)
    path = tmp_path / "lib.npz"
    library.save(path)
    good = path.read_bytes()
    _full_disk(monkeypatch, KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        library.save(path)
    assert path.read_bytes() == good and sorted(os.listdir(tmp_path)) == ["lib.npz"]


def test_save_keeps_a_symlink_and_the_file_mode(tmp_path, references):
    """Written through a temporary file and renamed: the link stays a link, the mode stays."""
    from promp.library import TaskLibrary

    library = _library(references)
    real, link = tmp_path / "real.npz", tmp_path / "link.npz"
    real.write_bytes(b"old")
    real.chmod(0o640)
    link.symlink_to(real)
    library.save(link)
    assert link.is_symlink() and TaskLibrary.load(real).labels == [_TASK]
    assert real.stat().st_mode & 0o777 == 0o640


def test_train_on_a_full_disk_keeps_the_library_and_says_which_file(demos, tmp_path, capsys, monkeypatch):
    from promp.library import TaskLibrary

    library = tmp_path / "lib.npz"
    assert run_cli(capsys, "train", demos, "-o", library)[0] == 0
    good = library.read_bytes()
    _full_disk(monkeypatch)
    rc, _, err = run_cli(capsys, "train", demos, "-o", library)
    assert rc == 1 and error_line(err) == f"{library}: cannot write the task library (No space left on device)"
    assert library.read_bytes() == good and TaskLibrary.load(library).labels == [_TASK]


# ------------------------------------------------------------------ 3. labels of . and bare names
@pytest.mark.parametrize("given", [".", "r1_0.npz", "../wave"])
def test_train_from_inside_the_task_folder_labels_the_takes_with_its_name(demos, tmp_path, capsys, monkeypatch,
                                                                          given):
    """``cd demos/wave && teleop train r1_0.npz`` (or ``.``): "trajectory r1_0.npz has no task
    label", as Path(".").name is ""."""
    monkeypatch.chdir(demos / _TASK)
    rc, out, err = run_cli(capsys, "train", given, "-o", tmp_path / "lib.npz")
    assert rc == 0, err
    assert f"  {_TASK} " in out


# ------------------------------------------------------------------ 4. --basis bounds
@pytest.mark.parametrize("value", ["201", "100000"])
def test_train_refuses_a_basis_count_that_would_exhaust_the_memory(demos, tmp_path, capsys, value):
    """--basis 100000 died with numpy's ArrayMemoryError (74.5 GiB) and a traceback."""
    with pytest.raises(SystemExit) as caught:
        run_cli(capsys, "train", demos, "--basis", value, "-o", tmp_path / "lib.npz")
    err = capsys.readouterr().err
    assert caught.value.code == 2 and f"argument --basis: must be <= 200, got {value}" in err
    assert not (tmp_path / "lib.npz").exists()


def test_basis_200_is_accepted():
    from teleop.train_cli import basis_count

    assert basis_count("200") == 200


def test_train_refuses_more_basis_functions_than_the_shortest_take_has_samples(demos, references, tmp_path, capsys):
    """--basis 300 on a 2-sample take was learned without a word."""
    traj = references[0]
    short = _save(traj, demos / _TASK / "short.npz", times=traj.times[100:125], values=traj.values[100:125])
    rc, _, err = run_cli(capsys, "train", demos, "--basis", "30", "-o", tmp_path / "lib.npz")
    assert rc == 1 and error_line(err) == (f"--basis 30: take {short} has 25 samples, too few for 30 basis "
                                           "functions per signal: give --basis 25 or fewer, or leave the take out")
    assert not (tmp_path / "lib.npz").exists()


# ------------------------------------------------------------------ 5. the same take twice
def test_train_learns_takes_of_identical_content_once_and_says_so(demos, references, tmp_path, capsys):
    """A crashed recording exported beside its recovered copy (same samples, another source)
    and byte-identical copies counted as several takes, and hid the one-take warning."""
    task = demos / _TASK
    for k in (1, 2):
        (task / f"r{k}_0.npz").unlink()
    shutil.copy(task / "r0_0.npz", task / "r0_copy.npz")
    _save(references[0], task / "r0_recovered.npz", source="session.recovered.mcap#episode0")
    rc, out, err = run_cli(capsys, "train", demos, "-o", tmp_path / "lib.npz")
    assert rc == 0, err
    assert f"  {_TASK:32s}   1 takes" in out
    for copy in ("r0_copy.npz", "r0_recovered.npz"):
        assert (f"teleop train: warning: {task / copy} holds the same motion as {task / 'r0_0.npz'} (same times "
                "and values: a copy, or a recording exported beside its recovered copy); learned once") in err
    assert f"teleop train: warning: {_TASK} learned from one take" in err


# ------------------------------------------------------------------ 6. physically impossible takes
@pytest.mark.parametrize("value, why", [(1e6, "l.hand x, y 1e+06 m from the stance origin (plausible: within 2.2 m)"),
                                        (1e300, "l.hand x, y 1e+300 m from the stance origin")])
def test_train_refuses_a_take_outside_the_robots_envelope_naming_file_frame_and_signal(
        demos, references, tmp_path, capsys, value, why):
    """A hand at 1e6 m trained a library, exit code 0; at 1e300 numpy warned of an overflow
    and the learning said "noise_var must be finite", naming no take."""
    values = references[1].values.copy()
    values[40, 3] = value
    bad = _save(references[1], demos / _TASK / "r1_0.npz", values=values)
    rc, _, err = run_cli(capsys, "train", demos, "-o", tmp_path / "lib.npz")
    message = error_line(err)
    assert rc == 1 and message.startswith(f"{bad}: frame 40 of {len(values)}: {why}")
    assert "which the robot station refuses as a command" in message
    assert "RuntimeWarning" not in err and not (tmp_path / "lib.npz").exists()


def test_every_take_of_the_products_datasets_is_inside_the_envelope():
    from retarget.envelope import ReferenceEnvelope
    from teleop.robot.model import RobotModel
    from teleop.robot.target import robot_target
    from teleop.takes import load_takes, reference_problem

    target = robot_target(RobotModel())
    takes = load_takes(SYNTHETIC, target, progress=False)
    assert len(takes) >= 30
    assert [reference_problem(t.trajectory, ReferenceEnvelope.for_target(target)) for t in takes] == [None] * len(takes)


@pytest.mark.parametrize("dataset", ["xsens_putaside_box", "cmu_bvh", "hdm05"])
def test_every_real_take_trains(dataset, tmp_path, capsys):
    """The real takes are inside the envelope, as the robot station accepts them: none refused."""
    data = shared_data(dataset)
    rc, out, err = run_cli(capsys, "train", data, "-o", tmp_path / "lib.npz")
    assert rc == 0, err
    assert "warning" not in err


# ------------------------------------------------------------------ 7. very short takes
def test_train_refuses_a_take_of_a_few_frames_naming_it(demos, references, tmp_path, capsys):
    """A 2-frame (0.01 s) and a 5-frame take beside three 3 s ones: "mean motion 1.81 s"
    instead of 2.99 s, speed ratios up to 180, exit code 0."""
    traj = references[0]
    short = _save(traj, demos / _TASK / "a_short.npz", times=traj.times[100:105], values=traj.values[100:105])
    rc, _, err = run_cli(capsys, "train", demos, "-o", tmp_path / "lib.npz")
    assert rc == 1 and error_line(err).startswith(f"{short}: 5 frames (0.08 s): a take needs at least 10 frames ")
    assert not (tmp_path / "lib.npz").exists()


def test_train_warns_of_a_take_much_shorter_than_its_tasks_others(demos, references, tmp_path, capsys):
    traj = references[0]
    short = _save(traj, demos / _TASK / "short.npz", times=traj.times[120:160], values=traj.values[120:160])
    rc, _, err = run_cli(capsys, "train", demos, "-o", tmp_path / "lib.npz")
    assert rc == 0, err
    warned = [line for line in err.splitlines() if line.startswith(f"teleop train: warning: {short} moves for 0.78 s")]
    assert len(warned) == 1
    assert "less than a third of the" in warned[0] and f"median of task {_TASK}'s takes" in warned[0]
    assert sum("less than a third" in line for line in err.splitlines()) == 1   # the long takes are not named


def test_train_warns_of_a_take_of_several_repetitions(demos, references, tmp_path, capsys):
    """`teleop operator --loop --task put_aside` recorded a 24 s take of three repetitions:
    trained without a word, it stretched the task's mean motion from 5.3 to 8 s."""
    traj = references[0]
    lap = traj.times[-1] - traj.times[0] + (traj.times[1] - traj.times[0])
    times = np.concatenate([traj.times + k * lap for k in range(4)])
    looped = _save(traj, demos / _TASK / "looped.npz", times=times, values=np.concatenate([traj.values] * 4))
    rc, _, err = run_cli(capsys, "train", demos, "-o", tmp_path / "lib.npz")
    assert rc == 0, err
    warned = [line for line in err.splitlines() if line.startswith(f"teleop train: warning: {looped} moves for ")]
    assert len(warned) == 1 and "more than three times the" in warned[0], err
    assert "several repetitions in one take (a --loop session)?" in warned[0]
    assert sum("warning" in line for line in err.splitlines()) == 1                  # the others are not named


# ------------------------------------------------------------------ 8. --rate-hz
def test_train_refuses_a_rate_that_no_take_uses(demos, tmp_path, capsys):
    """It was ignored without a word; `teleop retarget` refuses it (exit code 2)."""
    rc, _, err = run_cli(capsys, "train", demos, "--rate-hz", "50", "-o", tmp_path / "lib.npz")
    assert rc == 2 and error_line(err) == ("--rate-hz applies to Xsens CSV and AMC files only (they do not state "
                                           "their rate); none of the 3 takes is one: their files state their rate")
    assert not (tmp_path / "lib.npz").exists()


def test_train_takes_a_rate_for_xsens_takes(tmp_path, capsys):
    data = shared_data("xsens_putaside_box")
    rc, out, err = run_cli(capsys, "train", data, "--rate-hz", "60", "-o", tmp_path / "lib.npz")
    assert rc == 0, err


# ------------------------------------------------------------------ 9. unwritable outputs, before the work
@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc, where nothing can be made")
def test_train_finds_an_unwritable_out_before_reading(demos, capsys, monkeypatch):
    """-o /proc/none/lib.npz failed after 6.6 s of reading HDM05."""
    import teleop.train_cli

    def no_reading(*_, **__):
        raise AssertionError("takes read before the output location was checked")

    monkeypatch.setattr(teleop.train_cli, "read_take_files", no_reading)
    rc, _, err = run_cli(capsys, "train", demos, "-o", "/proc/none/lib.npz")
    assert rc == 1 and error_line(err).startswith("-o /proc/none: cannot write there")


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc, where nothing can be made")
def test_retarget_finds_an_unwritable_out_before_reading(capsys, monkeypatch):
    import teleop.takes

    def no_reading(*_, **__):
        raise AssertionError("motion read before the output location was checked")

    monkeypatch.setattr(teleop.takes, "read_motion_file", no_reading)
    rc, _, err = run_cli(capsys, "retarget", SYNTHETIC / "squat" / "squat_0.npz", "--out", "/proc/none/r")
    assert rc == 1 and error_line(err).startswith("--out /proc/none/r: cannot write there")


# ------------------------------------------------------------------ 10. retarget's checks
def _motion_with(tmp_path: Path, name: str, change) -> Path:
    """The synthetic squat_0 human motion with ``change(arrays)`` applied, saved as ``name``."""
    with np.load(SYNTHETIC / "squat" / "squat_0.npz") as data:
        arrays = {key: data[key] for key in data.files}
    change(arrays)
    path = tmp_path / name
    np.savez(path, **arrays)
    return path


def test_retarget_refuses_references_outside_the_envelope_naming_frame_and_signal(tmp_path, capsys):
    """One pelvis x of 1e300 (here 1e30: the file stores float32) gave hands at 1.27e299 m in
    the references, written with exit code 0. (A jump in one frame the reader now refuses as a
    glitch: here the pelvis drifts away at 25 m/s, within a person's speeds, and 50 m off.)"""
    def far_pelvis(arrays):
        arrays["positions"] = arrays["positions"].copy()
        arrays["positions"][100:, 0, 0] += 25.0 * (arrays["times"][100:] - arrays["times"][100])

    huge = _motion_with(tmp_path, "huge.npz", far_pelvis)
    rc, _, err = run_cli(capsys, "retarget", huge, "--out", tmp_path / "r")
    message = error_line(err)
    assert rc == 1 and re.match(re.escape(f"{huge}: retargeted references: frame ") + r"1\d\d of 347: l\.hand x, y ",
                                message), message
    assert "m from the stance origin (plausible: within 2.2 m)" in message
    assert "RuntimeWarning" not in err and not (tmp_path / "r").exists()


def test_retarget_refuses_a_single_frame(tmp_path, capsys):
    """It wrote "frames 1, duration 0.0", exit code 0."""
    def first_frame(arrays):
        for key, value in list(arrays.items()):
            if value.ndim and len(value) == 347:
                arrays[key] = value[:1]

    one = _motion_with(tmp_path, "one.npz", first_frame)
    rc, _, err = run_cli(capsys, "retarget", one, "--out", tmp_path / "r")
    assert rc == 1 and error_line(err) == f"{one}: 1 frame: a motion needs at least 2"
    assert not (tmp_path / "r").exists()


def test_retarget_still_writes_a_good_motion(tmp_path, capsys):
    rc, out, err = run_cli(capsys, "retarget", SYNTHETIC / "squat" / "squat_0.npz", "--out", tmp_path / "r")
    assert rc == 0 and (tmp_path / "r" / "references.npz").is_file(), err


def test_checks_made_before_the_work_say_what_to_change_and_no_more(demos, tmp_path, capsys, secret):
    """These are checks, made before anything is read or started, and ended with "(TELEOP_DEBUG=1
    shows where it happened)", which README keeps for errors from inside the work; the robot's
    --library of a folder said only "/tmp/x: is a directory"."""
    recording = tmp_path / "session.mcap"
    assert run_cli(capsys, "record", "-o", recording, "--duration", "0.2")[0] == 0
    single = tmp_path / "single"
    (single / "a").mkdir(parents=True)
    (single / "a" / "r0.npz").write_bytes((demos / _TASK / "r0_0.npz").read_bytes())
    (single / "b").mkdir()
    for k in (1, 2):
        (single / "b" / f"r{k}.npz").write_bytes((demos / _TASK / f"r{k}_0.npz").read_bytes())
    from promp.learning import Demonstration
    from promp.library import TaskLibrary

    rng = np.random.default_rng(0)
    five = [Demonstration(np.linspace(0, 2, 100), np.cumsum(rng.normal(size=(100, 5)), 0) * 0.01, label="a")
            for _ in range(4)]
    TaskLibrary.learn({"a": five}).save(tmp_path / "five.npz")    # a ProMP library, of other signals
    assert run_cli(capsys, "train", demos, "-o", tmp_path / "other.npz")[0] == 0
    other = TaskLibrary.load(tmp_path / "other.npz")               # as learned with --robot a_bigger_robot.toml
    other.metadata.update(robot="Bigger home posture", robot_dimensions="arm 0.600 m, leg 0.900 m, CoM height "
                                                                        "1.000 m, waist height 1.100 m")
    other.save(tmp_path / "other.npz")
    capsys.readouterr()
    cases = [
        (["train", recording, "-o", tmp_path / "lib.npz"], f"{recording}: a recording, not a motion file: export"),
        (["eval", "promp", "--train", single, "--test", single, "--leave-one-out"],
         f"--leave-one-out: {single / 'a' / 'r0.npz'} is the only training take of task 'a'"),
        (["robot", "--library", tmp_path, "--duration", "0.1", "--secret-file", secret],
         f"--library {tmp_path} is a folder: give the task library file `teleop train -o FILE` wrote"),
        (["robot", "--library", tmp_path / "none.npz", "--duration", "0.1", "--secret-file", secret],
         f"--library {tmp_path / 'none.npz'}: no such file"),
        # It said "ood_indices must be signal indices in 0..4, got (3, 4, 5, 6, 7, 8)".
        (["robot", "--library", tmp_path / "five.npz", "--duration", "0.1", "--secret-file", secret],
         f"--library {tmp_path / 'five.npz'}: its ProMPs have 5 signals, the robot's references 20: not a library"),
        # Used as the iCub's, its predictions put the hands where the other robot's would be.
        (["robot", "--library", tmp_path / "other.npz", "--duration", "0.1", "--secret-file", secret],
         f"--library {tmp_path / 'other.npz'} was learned for Bigger home posture (arm 0.600 m, leg 0.900 m, CoM "
         "height 1.000 m, waist height 1.100 m), not for iCub home posture (arm 0."),
    ]
    for argv, said in cases:
        rc, _, err = run_cli(capsys, *argv)
        assert rc == 1 and error_line(err).startswith(said), err
        assert "TELEOP_DEBUG" not in err, err


def test_a_references_take_given_as_a_file_keeps_its_own_label(references, tmp_path, capsys):
    """`teleop retarget squat_0.npz --out rt1` then `teleop train rt1/references.npz`: learned
    as task "rt1" (its folder), though the file says 'squat' (as `teleop info` shows)."""
    take = _save(references[0], tmp_path / "rt1" / "references.npz", label="squat")
    rc, out, err = run_cli(capsys, "train", take, "-o", tmp_path / "lib.npz")
    assert rc == 0, err
    assert "  squat " in out and "rt1" not in out
    # A take without a label of its own is its folder's, as before.
    bare = _save(references[1], tmp_path / "wave" / "r.npz", label="")
    rc, out, err = run_cli(capsys, "train", bare, "-o", tmp_path / "lib2.npz", "--force")
    assert rc == 0 and "  wave " in out, err


def test_the_library_notes_the_robot_only_of_takes_it_retargeted(demos, tmp_path, capsys):
    """References files were retargeted before, to a robot they do not name: a library
    stamped with --robot's sizes for them was refused by the robot it was made for (and one
    made for another robot accepted). Motion files are retargeted by train, to --robot."""
    from promp.library import TaskLibrary

    rc, out, err = run_cli(capsys, "train", demos, "-o", tmp_path / "refs.npz")
    assert rc == 0, err
    assert "robot" not in TaskLibrary.load(tmp_path / "refs.npz").metadata
    assert "robot: not noted (3 of the 3 takes are references files" in out
    rc, out, err = run_cli(capsys, "info", tmp_path / "refs.npz")
    assert rc == 0 and "the robot it was learned for is not noted (learned from references files" in out, err
    motions = tmp_path / "motions" / _SOURCE_TASK
    motions.mkdir(parents=True)
    for k in range(2):
        shutil.copy(SYNTHETIC / _SOURCE_TASK / f"{_SOURCE_TASK}_{k}.npz", motions)
    rc, out, err = run_cli(capsys, "train", motions.parent, "-o", tmp_path / "motions.npz")
    assert rc == 0, err
    metadata = TaskLibrary.load(tmp_path / "motions.npz").metadata
    assert metadata["robot"] == "iCub home posture" and metadata["robot_dimensions"].startswith("arm 0.")
    assert f"robot: iCub home posture ({metadata['robot_dimensions']})" in out


def test_the_robot_refuses_a_library_of_its_sizes_whose_shoulders_were_elsewhere(tmp_path, capsys, secret):
    """Arm, leg, CoM and waist sizes were all the robot station compared: a robot with the
    same sizes and shoulders 5 cm wider (hands elsewhere in its references) was accepted."""
    import json

    from promp.library import TaskLibrary

    motions = tmp_path / "motions" / _SOURCE_TASK
    motions.mkdir(parents=True)
    for k in range(2):
        shutil.copy(SYNTHETIC / _SOURCE_TASK / f"{_SOURCE_TASK}_{k}.npz", motions)
    assert run_cli(capsys, "train", motions.parent, "-o", tmp_path / "lib.npz")[0] == 0
    library = TaskLibrary.load(tmp_path / "lib.npz")
    geometry = json.loads(library.metadata["robot_geometry"])
    geometry["left_shoulder"][1] += 0.05
    geometry["right_shoulder"][1] -= 0.05
    library.metadata["robot_geometry"] = json.dumps(geometry)
    library.save(tmp_path / "wider.npz")
    rc, _, err = run_cli(capsys, "robot", "--library", tmp_path / "wider.npz", "--duration", "0.1",
                         "--secret-file", secret)
    assert rc == 1 and error_line(err).endswith(
        "its left shoulder and right shoulder differ: learn it again for this robot "
        "(teleop train without --robot)"), err
    from teleop.robot.model import RobotModel
    from teleop.robot.target import library_robot_mismatch, robot_target

    target = robot_target(RobotModel())
    geometry["left_shoulder"][1] -= 0.0495            # within a millimetre: the same robot
    geometry["right_shoulder"][1] += 0.0495
    assert library_robot_mismatch(dict(library.metadata, robot_geometry=json.dumps(geometry)), target) is None


@pytest.mark.parametrize("geometry, differs", [
    ('{"neck": [false, false], "torso": [false, false, false]}', "its neck's home posture and torso's home "
                                                                  "posture differ"),   # bools are not 0.0
    ('{"arm_length": [1' + "0" * 400 + "]}", "its arm length differs"),                # no float holds it
    ('{"com_xy": [NaN, 0.0]}', "its CoM position differs"),
    ('{"left_sole_corners": "here"}', "its left sole differs"),
])
def test_a_geometry_note_is_compared_as_numbers(geometry, differs):
    from teleop.robot.model import RobotModel
    from teleop.robot.target import library_metadata, library_robot_mismatch, robot_target

    target = robot_target(RobotModel())
    mismatch = library_robot_mismatch(dict(library_metadata(target), robot_geometry=geometry), target)
    assert mismatch is not None and mismatch.endswith(differs), mismatch


@pytest.mark.parametrize("geometry", ["[" * 100_000 + "]" * 100_000, "{}", '{"a_later_field": [1]}', "not json"])
def test_a_geometry_note_train_did_not_write_falls_back_to_the_sizes(geometry):
    """A note nested too deep for the JSON reader (a RecursionError), or one sharing no field
    with the robot, is not compared: the sizes are (here the robot's own: accepted)."""
    from teleop.robot.model import RobotModel
    from teleop.robot.target import library_metadata, library_robot_mismatch, robot_target

    target = robot_target(RobotModel())
    assert library_robot_mismatch(dict(library_metadata(target), robot_geometry=geometry), target) is None


def test_a_geometry_note_is_compared_within_a_millimetre_both_ways():
    import json

    from teleop.robot.model import RobotModel
    from teleop.robot.target import library_metadata, library_robot_mismatch, robot_target

    target = robot_target(RobotModel())
    metadata = library_metadata(target)
    geometry = json.loads(metadata["robot_geometry"])
    for shift, accepted in ((0.001, True), (-0.001, True), (0.0012, False)):
        moved = dict(geometry, arm_length=[round(geometry["arm_length"][0] + shift, 4)])
        mismatch = library_robot_mismatch(dict(metadata, robot_geometry=json.dumps(moved)), target)
        assert (mismatch is None) == accepted, (shift, mismatch)
    partial = {name: values for name, values in geometry.items() if name != "torso"}   # a field added since
    assert library_robot_mismatch(dict(metadata, robot_geometry=json.dumps(partial)), target) is None


def _recorded_takes(path: Path, references, metadata=None) -> Path:
    """A recording of ``references`` (ReferenceTrajectory list) at their own times, one
    episode of task _TASK each, with the recording metadata given."""
    from retarget.references import RobotReferences
    from teleop.record import Recorder

    clock = {"t": 0}
    with Recorder(path, clock_ns=lambda: clock["t"], threaded=False, metadata=metadata) as rec:
        start_ns = 0
        for traj in references:
            rec.start_episode(_TASK)
            for t, flat in zip(traj.times, traj.values):
                clock["t"] = start_ns + int(round(t * 1e9))
                rec.log_references(RobotReferences.from_flat(float(t), flat))
            rec.stop_episode()
            start_ns = clock["t"] + 10_000_000
    return path


def test_the_robot_note_travels_from_a_recording_through_export_into_the_library(references, tmp_path, capsys,
                                                                                  secret):
    """Stations note their robot in the recording; `dataset export` puts it in each file;
    `train` notes it in the library, which `teleop robot` then checks (a library learned
    from exported episodes noted no robot, and was accepted by any)."""
    import json

    from promp.library import TaskLibrary
    from teleop.robot.model import RobotModel
    from teleop.robot.target import library_metadata, robot_target

    note = library_metadata(robot_target(RobotModel()))
    recording = _recorded_takes(tmp_path / "session.mcap", references, metadata={"command": "test", **note})
    rc, _, err = run_cli(capsys, "dataset", "export", recording, "-o", tmp_path / "takes")
    assert rc == 0, err
    rc, out, err = run_cli(capsys, "train", tmp_path / "takes", "-o", tmp_path / "lib.npz")
    assert rc == 0 and f"robot: iCub home posture ({note['robot_dimensions']})" in out, out + err
    library = TaskLibrary.load(tmp_path / "lib.npz")
    assert {key: library.metadata[key] for key in note} == note
    # Made for a robot with shoulders 5 cm wider: refused by this one, by name.
    geometry = json.loads(note["robot_geometry"])
    geometry["left_shoulder"][1] += 0.05
    wider = dict(note, robot="Wider home posture", robot_geometry=json.dumps(geometry))
    from retarget.references import ReferenceTrajectory

    # Other motions (identical takes are learned once, whoever they were made for).
    others = [ReferenceTrajectory(traj.times, traj.values * 1.001, label=traj.label) for traj in references]
    recording = _recorded_takes(tmp_path / "wider.mcap", others, metadata=wider)
    assert run_cli(capsys, "dataset", "export", recording, "-o", tmp_path / "wider")[0] == 0
    assert run_cli(capsys, "train", tmp_path / "wider", "-o", tmp_path / "wider.npz")[0] == 0
    rc, _, err = run_cli(capsys, "robot", "--library", tmp_path / "wider.npz", "--duration", "0.1",
                         "--secret-file", secret)
    assert rc == 1 and "was learned for Wider home posture" in err and "its left shoulder differs" in err, err
    # Both robots' takes in one library: refused, naming two of them.
    rc, _, err = run_cli(capsys, "train", tmp_path / "takes", tmp_path / "wider", "-o", tmp_path / "mixed.npz")
    assert rc == 1 and "were made for different robots, iCub home posture (arm" in err, err
    assert "their left shoulder differs" in err and not (tmp_path / "mixed.npz").exists()


def test_retargeted_references_name_their_robot_and_a_library_of_them_notes_it(tmp_path, capsys):
    from promp.library import TaskLibrary

    for k in range(2):
        rc, _, err = run_cli(capsys, "retarget", SYNTHETIC / _SOURCE_TASK / f"{_SOURCE_TASK}_{k}.npz",
                             "--out", tmp_path / f"r{k}")
        assert rc == 0, err
        (tmp_path / "takes" / _TASK).mkdir(parents=True, exist_ok=True)
        (tmp_path / f"r{k}" / "references.npz").rename(tmp_path / "takes" / _TASK / f"r{k}.npz")
    rc, out, err = run_cli(capsys, "train", tmp_path / "takes", "-o", tmp_path / "lib.npz")
    assert rc == 0 and "robot: iCub home posture (arm 0." in out, out + err
    assert TaskLibrary.load(tmp_path / "lib.npz").metadata["robot_geometry"].startswith("{")
    rc, out, err = run_cli(capsys, "info", tmp_path / "takes" / _TASK / "r0.npz")
    assert rc == 0 and "\n  made for iCub home posture (arm 0." in out, out + err


def _noted_take(traj, path: Path, note: dict[str, str]) -> Path:
    """``traj`` saved as a references take whose robot note is ``note`` (as `teleop
    retarget` and `teleop dataset export` write it)."""
    from teleop.robot.target import robot_note_arrays

    _save(traj, path)
    with np.load(path, allow_pickle=False) as data:
        members = {key: data[key] for key in data.files}
    np.savez_compressed(path, **members, **robot_note_arrays(note))
    return path


def _shifted_note(note: dict[str, str], metres: float, name: str) -> dict[str, str]:
    """``note`` for a robot whose left shoulder is ``metres`` further left."""
    import json

    geometry = json.loads(note["robot_geometry"])
    geometry["left_shoulder"][1] += metres
    return dict(note, robot=name, robot_geometry=json.dumps(geometry))


@pytest.mark.parametrize("order", [(0, 1, 2), (1, 0, 2), (1, 2, 0), (2, 1, 0)])
def test_takes_of_robots_within_a_millimetre_of_a_third_are_refused_in_any_order(references, tmp_path, capsys,
                                                                                 order):
    """Robots A, B = A + 0.8 mm, C = A + 1.6 mm: B is within 1 mm of both, A and C are not.
    Before, each note was compared with the first take's only: with B first, all three were
    learned together and the library noted B."""
    from teleop.robot.model import RobotModel
    from teleop.robot.target import library_metadata, robot_target

    base = library_metadata(robot_target(RobotModel()))
    notes = [_shifted_note(base, 0.0008 * k, f"robot {'ABC'[k]}") for k in range(3)]
    for rank, k in enumerate(order):
        _noted_take(references[k], tmp_path / "takes" / _TASK / f"t{rank}.npz", notes[k])
    rc, _, err = run_cli(capsys, "train", tmp_path / "takes", "-o", tmp_path / "lib.npz")
    assert rc == 1 and "were made for different robots" in err, err
    assert "robot A" in err and "robot C" in err and "their left shoulder differs" in err, err
    assert not (tmp_path / "lib.npz").exists()


@pytest.mark.parametrize("uninformative", [{"robot": "iCub"}, {"robot": "iCub", "robot_geometry": '{"colour": [1]}'}],
                         ids=["name only", "geometry of no robot field"])
def test_a_note_that_tells_nothing_of_the_robot_neither_hides_a_mismatch_nor_is_stored(references, tmp_path, capsys,
                                                                                        uninformative):
    """Before, a first take noting only a name (or a geometry with no field a robot has, any
    JSON object passing as one) was compared with nothing, so two robots 5 cm apart were
    learned together, and the library noted it ("robot: iCub (None)") and passed every
    robot's check."""
    from promp.library import TaskLibrary
    from teleop.robot.model import RobotModel
    from teleop.robot.target import library_metadata, robot_target

    note = library_metadata(robot_target(RobotModel()))
    folder = tmp_path / "takes" / _TASK
    _noted_take(references[0], folder / "t0.npz", uninformative)
    _noted_take(references[1], folder / "t1.npz", note)
    _noted_take(references[2], folder / "t2.npz", _shifted_note(note, 0.05, "Wider"))
    rc, _, err = run_cli(capsys, "train", tmp_path / "takes", "-o", tmp_path / "lib.npz")
    assert rc == 1 and f"{folder / 't1.npz'} and {folder / 't2.npz'} were made for different robots" in err, err
    # Without the wider one: learned, and noted as no robot (one take does not say which).
    (folder / "t2.npz").unlink()
    rc, out, err = run_cli(capsys, "train", tmp_path / "takes", "-o", tmp_path / "lib.npz")
    assert rc == 0, out + err
    assert "robot: not noted (1 of the 2 takes is a references file that does not note the" in out, out
    assert not set(TaskLibrary.load(tmp_path / "lib.npz").metadata) & {"robot", "robot_geometry"}
    rc, out, err = run_cli(capsys, "info", folder / "t0.npz")
    assert rc == 0 and "made for iCub (sizes not noted)" in out, out + err


def test_takes_made_for_different_robots_are_refused_before_any_is_learned(references, tmp_path, capsys,
                                                                           monkeypatch):
    """Before, every ProMP was fitted first, and only then were the takes found unfit to learn
    together."""
    import teleop.train_cli as train_cli
    from teleop.robot.model import RobotModel
    from teleop.robot.target import library_metadata, robot_target

    def learn(*_):
        raise AssertionError("learned before the robots were compared")

    monkeypatch.setattr(train_cli, "_learn", learn)
    note = library_metadata(robot_target(RobotModel()))
    _noted_take(references[0], tmp_path / "takes" / _TASK / "t0.npz", note)
    _noted_take(references[1], tmp_path / "takes" / _TASK / "t1.npz", _shifted_note(note, 0.05, "Wider"))
    rc, _, err = run_cli(capsys, "train", tmp_path / "takes", "-o", tmp_path / "lib.npz")
    assert rc == 1 and "were made for different robots" in err, err


def _damage_member(path: Path, member: str) -> None:
    """Flip bytes in the middle of ``member``'s compressed data in the .npz at ``path``."""
    import struct
    import zipfile

    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo(member)
    raw = bytearray(path.read_bytes())
    name_length, extra_length = struct.unpack("<HH", raw[info.header_offset + 26:info.header_offset + 30])
    middle = info.header_offset + 30 + name_length + extra_length + info.compress_size // 2
    raw[middle:middle + 8] = bytes(255 - b for b in raw[middle:middle + 8])
    path.write_bytes(bytes(raw))


@pytest.mark.parametrize("command", ["train", "info"])
def test_a_damaged_robot_note_is_an_error_naming_the_file(references, tmp_path, capsys, command):
    """Before: a traceback of zlib.error (or zipfile's bad CRC), naming no file."""
    from teleop.robot.model import RobotModel
    from teleop.robot.target import library_metadata, robot_target

    take = _noted_take(references[0], tmp_path / "takes" / _TASK / "t0.npz",
                       library_metadata(robot_target(RobotModel())))
    _noted_take(references[1], tmp_path / "takes" / _TASK / "t1.npz", library_metadata(robot_target(RobotModel())))
    _damage_member(take, "robot_geometry.npy")
    target = [tmp_path / "takes", "-o", tmp_path / "lib.npz"] if command == "train" else [take]
    rc, _, err = run_cli(capsys, command, *target)
    assert rc == 1 and f"{take}: damaged .npz file" in err and "Traceback" not in err, err


def test_a_robot_note_member_holding_objects_is_an_error_naming_the_file(references, tmp_path, capsys):
    take = _save(references[0], tmp_path / "t0.npz")
    with np.load(take, allow_pickle=False) as data:
        members = {key: data[key] for key in data.files}
    np.savez_compressed(take, **members, robot=np.array(["iCub", None], dtype=object))
    rc, _, err = run_cli(capsys, "info", take)
    assert rc == 1 and f"{take}: damaged .npz file" in err and "Object arrays" in err, err


def test_notes_that_tell_different_things_are_refused_as_not_comparable(references, tmp_path, capsys):
    """One take noting its robot's geometry only, another its sizes only (of a robot with
    arms 9 times longer): nothing to compare, which read as one robot."""
    from teleop.robot.model import RobotModel
    from teleop.robot.target import library_metadata, robot_target

    note = library_metadata(robot_target(RobotModel()))
    folder = tmp_path / "takes" / _TASK
    _noted_take(references[0], folder / "t0.npz", {"robot": "iCub", "robot_geometry": note["robot_geometry"]})
    _noted_take(references[1], folder / "t1.npz",
                {"robot": "Long", "robot_dimensions": note["robot_dimensions"].replace("arm 0.", "arm 9.")})
    rc, _, err = run_cli(capsys, "train", tmp_path / "takes", "-o", tmp_path / "lib.npz")
    assert rc == 1 and "note their robots by different things" in err and "cannot be told" in err, err
    assert not (tmp_path / "lib.npz").exists()


@pytest.mark.parametrize("command", ["eval", "trial"])
def test_eval_and_trial_refuse_takes_made_for_different_robots(references, tmp_path, capsys, command):
    """They learn from the takes as train does (and score against them): a robot with
    shoulders 5 cm wider among them was learned and scored as one robot."""
    from teleop.robot.model import RobotModel
    from teleop.robot.target import library_metadata, robot_target

    note = library_metadata(robot_target(RobotModel()))
    for k in range(2):
        _noted_take(references[k], tmp_path / "train" / _TASK / f"t{k}.npz", note)
    _noted_take(references[2], tmp_path / "test" / _TASK / "t2.npz", _shifted_note(note, 0.05, "Wider"))
    extra = ["--rtt", "1"] if command == "trial" else []
    words = ["eval", "promp"] if command == "eval" else [command]
    rc, _, err = run_cli(capsys, *words, "--train", tmp_path / "train", "--test", tmp_path / "test", *extra,
                         "--out", tmp_path / "out")
    assert rc == 1 and "were made for different robots" in err and "their left shoulder differs" in err, err
