"""Regressions from a review of teleop.tuning: step-data files, `teleop tune` options, the report."""

import argparse
import json

import numpy as np
import pytest

from teleop.tuning.experiment_data import Recording, RecordingFormatError


def _recording_json() -> dict:
    rec = Recording.from_arrays("step", ["a"], np.arange(4) * 0.01, np.radians([[0], [10], [10], [10]]),
                                np.radians([[0], [0], [5], [9]]))
    return rec.to_json()


def _nan(d):
    d["joints"][0]["data"][2]["entry"]["measured"] = float("nan")


def _no_t(d):
    del d["joints"][0]["data"][1]["t"]


def _backwards(d):
    d["joints"][0]["data"][2]["t"] = 0.0


def _one_joint(d):
    d.clear()
    d.update(_recording_json()["joints"][0])    # a single joint's PidStepData, not a recording


@pytest.mark.parametrize("spoil, message", [(_nan, "non-finite measured"), (_no_t, "missing key 't'"),
                                            (_backwards, "not increasing"), (_one_joint, "missing key 'joints'")])
def test_malformed_step_data_files_give_clear_errors(tmp_path, spoil, message):
    """A NaN sample used to load and make every metric NaN, unordered times gave wrong response
    times, and a missing key was a bare KeyError without the file's name."""
    data = _recording_json()
    spoil(data)
    path = tmp_path / "step.json"
    path.write_text(json.dumps(data))
    with pytest.raises(RecordingFormatError, match=message) as info:
        Recording.load(path)
    assert str(path) in str(info.value)


def test_step_data_still_round_trips(tmp_path):
    path = tmp_path / "step.json"
    path.write_text(json.dumps(_recording_json()))
    assert Recording.load(path).traces["a"].measured == pytest.approx([0, 0, 5, 9])


def _parse(*argv):
    from teleop.tuning.cli import _settings, register

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    return _settings(parser.parse_args(["tune", "--quick", *argv]))


@pytest.mark.parametrize("argv, message", [
    (("--setups", "1,2", "--limited-torque", "0.3"), "--limited-torque changes setup 3 only"),
    (("--setups", "2", "--payload-kg", "3"), "--payload-kg changes setup 4 only"),
])
def test_setup_overrides_without_their_setup_are_refused(argv, message):
    """They used to be accepted and silently do nothing; options that cannot go together:
    a UsageError (exit code 2)."""
    from teleop.cli_types import UsageError

    with pytest.raises(UsageError, match=message):
        _parse(*argv)
    assert _parse("--setups", "3,4", "--limited-torque", "0.3", "--payload-kg", "3").payload_kg == 3.0


def test_a_setup_named_twice_runs_once():
    """'--setups 1,1' ran setup 1 twice ("2 setup(s)"), in the order given otherwise."""
    from teleop.tuning.cli import _setups

    assert _setups("1,1") == [1]
    assert _setups("3,1,3,2") == [3, 1, 2]


@pytest.mark.parametrize("option", ["--eval-motions", "--train-motions"])
def test_an_empty_motion_list_is_refused(option, capsys):
    """``--eval-motions ,`` used to run and fail in every setup with numpy's "need at least one
    array to concatenate"; then exit code 1 from the command's checks: now argparse's refusal."""
    with pytest.raises(SystemExit) as exc:
        _parse(option, ",")
    assert exc.value.code == 2
    assert f"argument {option}: expected comma-separated motion files" in capsys.readouterr().err


def test_an_out_that_is_a_file_fails_before_the_run(tmp_path, monkeypatch, capsys):
    """It used to fail only when saving, after the whole (minutes-long) experiment."""
    import teleop.tuning.experiment as experiment
    from teleop.cli import main

    def must_not_run(*args, **kwargs):
        raise AssertionError("the experiment ran before --out was checked")

    monkeypatch.setattr(experiment, "run_experiment", must_not_run)
    out = tmp_path / "results.txt"
    out.write_text("not a folder")
    assert main(["tune", "--quick", "--setups", "2", "--jobs", "1", "--out", str(out)]) == 1
    assert f"--out {out} is a file" in capsys.readouterr().err


def test_report_says_above_when_the_optimiser_is_worse():
    """A +39 % AE-A (setup 4) used to print as "-39% below the best heuristic"."""
    from teleop.tuning.report import format_setup_table

    row = {"AE-A": 6.54, "AE-S": 1.0, "OS": 35.0, "ST5": 2.91, "R50": 0.5}
    target = {"best_heuristic": "Classic", "ae_improvement": 1 - 6.54 / 4.72, "ae_ok": False, "os_ok": False,
              "st5_ok": True, "st5_vs_best_any_ok": True, "met": False}
    text = format_setup_table({"setup": 4, "name": "payload", "rows": {"Classic": row, "Optimiser": row},
                               "target": target})
    assert "Optimiser AE-A 39% above the best heuristic (Classic)" in text


@pytest.mark.parametrize("data", [
    b'{"mapping": {"l_elbow": {"kp": 1' + b"0" * 400 + b', "ki": 0, "kd": 0}}}',
    b'{"mapping": ' + b"[" * 100000 + b"]" * 100000 + b"}",
    b'{"mapping": {"l_elbow": {"kp": ' + b"5" * 5000 + b"}}}",
    b'{"mapping": {"caf\xe9": {"kp": 1}}}',
], ids=["400-digit-kp", "deep", "5000-digit-int", "latin1"])
def test_hostile_gains_file_is_a_gains_format_error(tmp_path, data):
    """Each used to escape as OverflowError, RecursionError, ValueError or UnicodeDecodeError."""
    from teleop.tuning.gains_io import GainsFormatError, load_gains

    path = tmp_path / "gains.json"
    path.write_bytes(data)
    with pytest.raises(GainsFormatError) as err:
        load_gains(path)
    assert "gains.json" in str(err.value) and "\n" not in str(err.value)


def _worker_handlers():
    import signal

    return signal.getsignal(signal.SIGTERM) == signal.SIG_DFL, signal.getsignal(signal.SIGINT) == signal.SIG_IGN


def test_tune_pool_workers_die_on_sigterm_and_leave_ctrl_c_to_the_parent():
    """Workers forked under teleop's SIGTERM handler (KeyboardInterrupt) inherited it; the
    pool's terminate at the end of `teleop tune` then hung one run in nine, a worker caught
    inside the task queue's lock."""
    import multiprocessing

    from teleop.cli import sigterm_as_interrupt
    from teleop.tuning.experiment import _worker_signals

    with sigterm_as_interrupt():
        pool = multiprocessing.Pool(1, initializer=_worker_signals)
        try:
            assert pool.apply(_worker_handlers) == (True, True)
        finally:
            pool.close()
            pool.join()


def test_out_keeps_what_no_earlier_run_wrote_and_refuses_another_tools_summary(tmp_path, capsys):
    """`tune --out DIR` replaced a user's summary.json and deleted a setup4_errors.png of
    theirs (no earlier tune run had written either). Now: a foreign summary.json is refused
    before the run; only what an earlier run's summary.json lists is removed."""
    from teleop.cli import main

    out = tmp_path / "results"
    out.mkdir()
    (out / "summary.json").write_text('{"mine": 1}')
    assert main(["tune", "--quick", "--setups", "1", "--jobs", "1", "--out", str(out)]) == 1
    assert capsys.readouterr().err == (f"teleop tune: error: --out {out}: {out / 'summary.json'} was not written by "
                                       "teleop tune; give another folder (nothing was changed)\n")
    assert (out / "summary.json").read_text() == '{"mine": 1}' and sorted(p.name for p in out.iterdir()) == \
        ["summary.json"]

    (out / "summary.json").unlink()
    (out / "setup4_errors.png").write_text("the user's own")
    assert main(["tune", "--quick", "--setups", "1", "--jobs", "1", "--out", str(out), "--json"]) == 0
    assert (out / "setup4_errors.png").read_text() == "the user's own"     # no earlier run wrote it
    assert (out / "setup1_errors.png").is_file() and (out / "setup1" / "Optimiser" / "gains.json").is_file()
    (out / "setup1" / "Optimiser" / "notes.txt").write_text("the user's own")

    # A run of another setup removes what the earlier run (setup 1) wrote, nothing else.
    assert main(["tune", "--quick", "--setups", "2", "--jobs", "1", "--out", str(out), "--json"]) == 0
    capsys.readouterr()
    assert not (out / "setup1_errors.png").exists() and not (out / "setup1" / "Classic").exists()
    assert sorted(p.name for p in (out / "setup1").iterdir()) == ["Optimiser"]
    assert sorted(p.name for p in (out / "setup1" / "Optimiser").iterdir()) == ["notes.txt"]
    assert (out / "setup4_errors.png").read_text() == "the user's own"
    assert (out / "setup2_errors.png").is_file()
