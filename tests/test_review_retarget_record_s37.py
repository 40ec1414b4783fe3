"""Review of `teleop retarget` and `teleop record` (session 37): empty paths, an output that
would replace the motion read, the plot of a run without the ZMP correction, a recording
duration beyond MCAP's time range."""

from __future__ import annotations

import shutil

import pytest

from conftest import SYNTHETIC, error_line, needs_proc, run_cli, shared_data

SQUAT = SYNTHETIC / "squat" / "squat_0.npz"


@pytest.mark.parametrize("argv, option", [
    (["retarget", ""], "argument file"),
    (["retarget", str(SQUAT), "--out", ""], "argument --out"),
    (["retarget", str(SQUAT), "--out", "  "], "argument --out"),
    (["record", "--duration", "1", "-o", ""], "argument -o/--output"),
])
def test_an_empty_path_is_refused_as_a_bad_value(argv, option, tmp_path, capsys, monkeypatch):
    """Path('') is '.': `--out ''` (an unset shell variable) wrote the references into the
    current folder, exit code 0; FILE '' and `record -o ''` were called ". is a folder"."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exc:
        run_cli(capsys, *argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"{option}: the path must not be empty" in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


def test_an_out_that_would_replace_the_motion_file_is_refused(tmp_path, capsys):
    """A human motion .npz named references.npz, retargeted into its own folder, was replaced
    by its references (the motion lost, exit code 0)."""
    motion = tmp_path / "references.npz"
    shutil.copy(SQUAT, motion)
    before = motion.read_bytes()
    for out in (tmp_path, tmp_path / ".." / tmp_path.name):
        rc, out_text, err = run_cli(capsys, "retarget", motion, "--out", out)
        assert rc == 1 and out_text == ""
        assert error_line(err) == (f"--out {out} would replace the motion file {motion} with the references.npz it "
                                   "writes: give another folder")
        assert "TELEOP_DEBUG" not in err           # a check before the work
    assert motion.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["references.npz"]
    # Into another folder it is retargeted as ever.
    rc, _, err = run_cli(capsys, "retarget", motion, "--out", tmp_path / "refs")
    assert rc == 0, err
    assert (tmp_path / "refs" / "references.npz").is_file()


@pytest.mark.parametrize("zmp", [True, False])
def test_the_plot_draws_the_corrected_com_only_when_the_robot_tracked_it(zmp, tmp_path, capsys, monkeypatch):
    """With --execute --no-zmp-correction the plot still drew the CoM 'after the ZMP correction
    (what the robot tracks)', though the robot had tracked the raw reference."""
    from teleop import retarget_cli
    from teleop.control import closed_loop

    seen = {}

    def fake_run(traj, **kwargs):
        seen["zmp_correction"] = kwargs["zmp_correction"]
        return {"fell": False, "min_cop_margin_mm": 40.0, "max_foot_slip_mm": 0.1, "hand_rms_cm": 2.0}

    def fake_plot(motion, traj, path, *, title="", support_polygon=None, com=None):
        seen.update(title=title, com=com)
        path.write_bytes(b"png")
        return path

    monkeypatch.setattr(closed_loop, "run_closed_loop", fake_run)     # the plot is what is checked
    monkeypatch.setattr(retarget_cli, "plot_retargeting", fake_plot)
    argv = ["retarget", SQUAT, "--out", tmp_path, "--execute"] + ([] if zmp else ["--no-zmp-correction"])
    rc, _, err = run_cli(capsys, *argv)
    assert rc == 0, err
    assert bool(seen["zmp_correction"]) is zmp
    assert (seen["com"] is not None) is zmp
    assert ("without the ZMP correction" in seen["title"]) is not zmp
    assert "executed on the simulated robot" in seen["title"]


@pytest.mark.parametrize("value", ["1e300", "1e11"])
def test_a_record_duration_beyond_mcaps_time_range_is_refused(value, tmp_path, capsys):
    """`--duration 1e300` ended in a traceback (OverflowError: the deadline in nanoseconds),
    leaving a recording of nothing behind."""
    out = tmp_path / "r.mcap"
    with pytest.raises(SystemExit) as exc:
        run_cli(capsys, "record", "--duration", value, "-o", out)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "argument --duration: must be at most 1.84e+10 s" in err and f"got {value}" in err
    assert "Traceback" not in err and not out.exists()


def test_the_help_names_recordings_among_the_motion_files(capsys):
    """`teleop retarget` reads an operator recording's input (README: Motion files); its
    --help did not say so."""
    with pytest.raises(SystemExit):
        run_cli(capsys, "retarget", "--help")
    assert ".mcap" in " ".join(capsys.readouterr().out.split())


def test_a_real_xsens_take_still_retargets_into_its_folder(tmp_path, capsys):
    take = shared_data("xsens_putaside_box", needs=("p1.csv",)) / "p1.csv"
    rc, out, err = run_cli(capsys, "retarget", take, "--out", tmp_path, "--json")
    assert rc == 0, err
    assert '"frames": 272' in out


def test_a_huge_jump_is_said_in_metres_not_as_inf():
    """A corrupt position of 1e300 m overflowed the squared distance: "moves inf m (inf m/s)"."""
    import numpy as np

    from retarget.human import SEGMENTS, HumanMotion, MotionFormatError, check_plausible_motion

    positions = np.zeros((3, 1, 3))
    positions[1, 0] = [1e300, 1e300, 0.0]
    motion = HumanMotion(np.arange(3) * 0.01, SEGMENTS[:1], positions, np.tile([1.0, 0, 0, 0], (3, 1, 1)),
                         rate_hz=100.0)
    with pytest.raises(MotionFormatError, match=r"moves 1\.41e\+300 m in 10 ms between samples 0 and 1 of 3 "
                                                r"\(1\.41e\+302 m/s"):
        check_plausible_motion(motion, "m.npz")


def test_a_rate_below_one_hertz_is_refused_as_a_bad_value(capsys):
    """`--rate-hz 0.5` was taken, then the AMC take refused as the file's fault ("samples are
    2 s apart: times in the wrong unit, or a corrupt file?"), exit code 1."""
    from retarget.human import MAX_SAMPLE_STEP_S
    from teleop.cli_types import MIN_SAMPLE_RATE_HZ

    assert MIN_SAMPLE_RATE_HZ == 1 / MAX_SAMPLE_STEP_S
    with pytest.raises(SystemExit) as exc:
        run_cli(capsys, "retarget", "take.amc", "--rate-hz", "0.5")
    assert exc.value.code == 2
    assert "argument --rate-hz: must be at least 1 Hz (a motion's samples are at most 1 s apart), got 0.5" \
        in capsys.readouterr().err


def test_a_motion_at_the_highest_rate_allowed_is_read():
    """arange(n) / 10000 is 9.99999e-05 s apart: `--rate-hz 10000`, the highest the option
    takes, was refused as "samples are 0.0001 s apart (median)"."""
    import numpy as np

    from retarget.human import SEGMENTS, HumanMotion

    motion = HumanMotion(np.arange(140) / 10000.0, SEGMENTS[:1], np.zeros((140, 1, 3)),
                         np.tile([1.0, 0, 0, 0], (140, 1, 1)), rate_hz=10000.0)
    assert motion.rate_hz == 10000.0


def test_a_take_implausible_at_the_rate_given_names_the_rate(tmp_path, capsys):
    take = shared_data("hdm05", "squat1Reps", needs=("HDM_bd_squat1Reps_001_120.amc",)) \
        / "HDM_bd_squat1Reps_001_120.amc"
    shared_data("hdm05", "skeletons", needs=("HDM_bd.asf",))
    rc, _, err = run_cli(capsys, "retarget", take, "--out", tmp_path / "o", "--rate-hz", "10000")
    assert rc == 1
    assert error_line(err).endswith("a person's segments move below 30 m/s): a tracking glitch or a corrupt value "
                                    "(read at --rate-hz 10000: is that the file's rate?)")
    assert not (tmp_path / "o").exists()


@needs_proc
@pytest.mark.parametrize("argv, option", [
    (["record", "--duration", "0.2", "-o", "/proc/x/session.mcap"], "-o"),
    (["robot", "--duration", "0.2", "--record", "/proc/x/session.mcap"], "--record"),
])
def test_a_recording_where_nothing_can_be_written_is_refused_before_the_session(argv, option, capsys, secret):
    """-o /proc/x.mcap failed once the session had started ("No such file or directory",
    with the debug hint). /proc refuses new folders even to root."""
    rc, _, err = run_cli(capsys, *argv, *(["--secret-file", secret] if argv[0] == "robot" else []))
    assert rc == 1
    assert error_line(err) == f"{option} /proc/x/session.mcap: cannot write in /proc/x (No such file or directory)"


def test_a_take_the_robot_fell_playing_is_written_and_ends_with_exit_code_1(tmp_path, capsys, monkeypatch):
    """`retarget --execute` said "the robot fell" in its figures and ended with exit code 0,
    where demo, jog and the robot station end with 1. The fall is the closed loop's report
    (a real fall takes a long HDM05 take without the ZMP correction: the README's 26 of 70)."""
    from teleop.control import closed_loop

    monkeypatch.setattr(closed_loop, "run_closed_loop", lambda traj, **kwargs: {
        "fell": True, "min_cop_margin_mm": -80.0, "max_foot_slip_mm": 40.0, "hand_rms_cm": 30.0})
    rc, out, err = run_cli(capsys, "retarget", SQUAT, "--out", tmp_path, "--execute", "--no-zmp-correction")
    assert rc == 1
    assert error_line(err) == ("the robot fell playing the references (--no-zmp-correction: the raw CoM reference); "
                               f"they are written all the same, to {tmp_path}")
    assert "fell                 True" in out
    assert (tmp_path / "references.npz").is_file() and (tmp_path / "retargeting.png").is_file()
