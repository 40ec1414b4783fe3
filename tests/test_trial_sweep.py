"""Delay-sweep bookkeeping: distinct round trips, wrong-start counts, the error-vs-delay plot."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest

from teleop.cli import build_parser
from teleop.cli_types import delay_list
from teleop.trials.delay_trial import TakeResult
from teleop.trials.report import error_vs_delay_series, plot_error_vs_delay
from teleop.trials.sweep import run_sweep, summarise, take_rows


def _result(rtt: float, compensated: bool, hand_cm: float, label: str | None = None,
            engaged_task: str | None = None) -> TakeResult:
    errors = {"hand_cm": hand_cm, "com_cm": 1.0, "posture_rad": 0.1}
    result = TakeResult(rtt, compensated, 1.0, window=dict(errors), whole=dict(errors),
                        engaged_task=engaged_task if compensated else None, label=label)
    result.worst_excess_cm = 0.0
    return result


def _pair(rtt: float, label: str | None, engaged_task: str | None, comp_cm: float = 2.0, nocomp_cm: float = 5.0):
    return _result(rtt, True, comp_cm, label, engaged_task), _result(rtt, False, nocomp_cm, label)


@pytest.mark.parametrize("text", ["3,3.0", "1.5,1.5", "0,1.5,0.0", "2, 2e0"])
def test_a_round_trip_given_twice_is_refused_by_the_argument_type(text):
    with pytest.raises(argparse.ArgumentTypeError, match="given twice"):
        delay_list(text)


def test_round_trips_keep_the_order_and_spelling_given():
    assert delay_list("3,0,1.5") == ["3", "0", "1.5"]


def test_the_trial_command_refuses_a_repeated_round_trip_with_a_usage_message(capsys):
    with pytest.raises(SystemExit) as info:
        build_parser().parse_args(["trial", "--rtt", "3,3.0"])
    assert info.value.code == 2
    assert "argument --rtt: delay 3.0 is given twice (3 and 3.0)" in capsys.readouterr().err


def test_run_sweep_refuses_a_repeated_round_trip_before_running_anything():
    # Before: {3.0: []} merged both, and every take was run (and listed) twice under 3.0.
    with pytest.raises(ValueError, match="round trip 3 s is given twice"):
        run_sweep([], [3.0, 3.0], progress=False)


def test_summarise_needs_one_distinct_label_per_round_trip():
    results = {3.0: [_pair(3.0, "squat", "squat")]}
    # Before: zip dropped the second label, or the second entry overwrote the first.
    with pytest.raises(ValueError, match="2 round-trip labels"):
        summarise(results, ["3", "3.0"])
    with pytest.raises(ValueError, match="2 round-trip labels"):
        take_rows(results, ["3", "3.0"], ["a.npz"])
    with pytest.raises(ValueError, match="distinct"):
        summarise({0.0: [], 3.0: []}, ["3", "3"])


def test_an_unlabelled_take_is_a_wrong_start_nowhere_a_labelled_one_everywhere():
    pairs = [_pair(3.0, None, "squat"), _pair(3.0, "reach", "squat"), _pair(3.0, "squat", "squat")]
    entry = summarise({3.0: pairs}, ["3"])["rtt"]["3"]
    assert entry["wrong_task_engagements"] == 1
    # Before: the per-task table counted the unlabelled take as a wrong start (None != "squat").
    assert entry["per_task"][""]["wrong_task_engagements"] == 0
    assert entry["per_task"]["reach"]["wrong_task_engagements"] == 1
    assert entry["per_task"]["squat"]["wrong_task_engagements"] == 0
    assert sum(t["wrong_task_engagements"] for t in entry["per_task"].values()) == entry["wrong_task_engagements"]


def test_the_error_vs_delay_plot_draws_the_points_in_increasing_round_trip(tmp_path):
    given = {3.0: 4.0, 0.0: 0.5, 1.5: 2.0}                # --rtt 3,0,1.5
    results = {rtt: [_pair(rtt, "squat", "squat", comp_cm=cm, nocomp_cm=2 * cm)] for rtt, cm in given.items()}
    for (comp, nocomp), in results.values():              # whole-take errors unlike the windowed ones
        comp.whole["hand_cm"] += 0.25
        nocomp.whole["hand_cm"] += 0.75
    summary = summarise(results, ["3", "0", "1.5"])
    assert list(summary["rtt"]) == ["3", "0", "1.5"]      # the JSON keeps the order given
    plot_error_vs_delay(summary, tmp_path / "error_vs_delay.png")
    assert (tmp_path / "error_vs_delay.png").stat().st_size > 0
    rtts, series = error_vs_delay_series(summary)
    np.testing.assert_array_equal(rtts, [0.0, 1.5, 3.0])       # before: x = 3, 0, 1.5, a zig-zag
    # Each series with its own figures (the window errors; the whole take's are the table's).
    np.testing.assert_allclose(series["comp"][0], [0.5, 2.0, 4.0], rtol=1e-12)
    np.testing.assert_allclose(series["nocomp"][0], [1.0, 4.0, 8.0], rtol=1e-12)


@pytest.mark.parametrize("text, message", [
    ("1e9", "above the 10 s this product models"),
    ("0,60", "above the 10 s this product models"),
    ("1,,2", "has an empty item"),
])
def test_the_trial_refuses_round_trips_it_cannot_mean_with_a_usage_message(capsys, text, message):
    """Before: --rtt 1e9 ran into a MemoryError traceback padding the takes, 60 s on a 5 s
    take printed a meaningless 17x "win", and 1,,2 silently ran 1 and 2."""
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["trial", "--train", "a", "--test", "b", "--rtt", text])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "argument --rtt:" in err and message in err


def test_the_demo_refuses_a_round_trip_past_the_modelled_range(capsys):
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["demo", "--rtt", "1e9"])
    assert exc.value.code == 2
    assert "argument --rtt: round trip 1e9 s is above the 10 s" in capsys.readouterr().err


def test_the_trial_says_which_test_takes_its_library_does_not_know(tmp_path, capsys):
    """A trial on a task the library lacks is valid (it measures wrong starts) but is said so;
    before, it ran silently, while `eval promp` refused the same takes."""
    from conftest import run_cli, synthetic_dataset

    train = synthetic_dataset(tmp_path / "train", {"squat": 2})
    test = synthetic_dataset(tmp_path / "test", {"reach_forward": 1})
    rc, out, err = run_cli(capsys, "trial", "--train", train, "--test", test, "--rtt", "0", "--json",
                           "--out", tmp_path / "out")
    assert rc == 0
    assert "1 of 1 test takes are of a task their library does not know" in err
    assert "'reach_forward', which the training takes do not have (tasks: squat)" in err
    assert "trials: 100%" in err           # progress on stderr with --json too (stdout: the JSON alone)
    assert json.loads(out)["rtt"]["0"]["takes"] == 1


def test_the_trial_warns_when_the_forward_delay_outlasts_every_take(capsys):
    from retarget.references import FLAT_SIZE, ReferenceTrajectory
    from teleop.trial_cli import warn_round_trips_past_the_takes

    take = ReferenceTrajectory(np.linspace(0.0, 3.0, 31), np.zeros((31, FLAT_SIZE)), label="squat")
    warn_round_trips_past_the_takes([1.5, 6.0, 8.0], [take])
    err = capsys.readouterr().err
    assert "round trip(s) 8 s the forward delay exceeds the longest test take (3.00 s)" in err
    warn_round_trips_past_the_takes([1.5, 6.0], [take])
    assert capsys.readouterr().err == ""


def test_the_table_says_when_the_link_lost_commands():
    """A lossy run's table must not read as a clean one's."""
    from teleop.trials.report import format_table

    summary = summarise({1.5: [_pair(1.5, "squat", "squat")]}, ["1.5"])
    assert "link:" not in format_table(summary)
    summary["link"] = {"loss": 0.1, "loss_burst": 20.0, "seed": 3}
    assert "link: 10 % of the commands lost in runs of 20 on average, seed 3." in format_table(summary)
    summary["link"] = {"loss": 0.05, "loss_burst": None, "seed": 0}
    assert "link: 5 % of the commands lost (independently), seed 0." in format_table(summary)
