"""Trial bookkeeping found wrong in review: what the table counts against what takes.csv says."""

from __future__ import annotations

import pytest

from teleop.trials.delay_trial import TakeResult
from teleop.trials.sweep import summarise, take_rows


def _run(compensated: bool, label: str, engaged_at: float | None, engaged_task: str | None) -> TakeResult:
    nan = float("nan")
    errors = {"hand_cm": 2.0 if engaged_at is not None else nan, "com_cm": 1.0, "posture_rad": 0.1}
    result = TakeResult(1.5, compensated, engaged_at, window=dict(errors), whole=dict(errors),
                        engaged_task=engaged_task if compensated else None, label=label)
    result.worst_excess_cm = 0.0
    return result


def test_a_wrong_start_whose_blend_in_was_cut_short_still_counts():
    """Compensation began blending in the wrong task, then fell back before the blend-in
    finished (the Δσ test, or a round trip near min_round_trip): the robot began the wrong
    motion. takes.csv names the task it began with; the table counted it nowhere (before:
    `teleop trial --train <squat_0 only> --test <2 reach_forward takes> --rtt 0.04` showed
    engaged_task squat for both takes in takes.csv and "wrong task 0" in the table)."""
    cut_short = (_run(True, "reach", None, "squat"), _run(False, "reach", None, None))
    engaged_wrong = (_run(True, "reach", 2.0, "squat"), _run(False, "reach", 2.0, None))
    right = (_run(True, "squat", 2.0, "squat"), _run(False, "squat", 2.0, None))
    never = (_run(True, "squat", None, None), _run(False, "squat", None, None))
    results = {1.5: [cut_short, engaged_wrong, right, never]}
    entry = summarise(results, ["1.5"])["rtt"]["1.5"]
    rows = take_rows(results, ["1.5"], ["a", "b", "c", "d"])
    in_csv = sum(1 for r in rows if r["engaged_task"] and r["engaged_task"] != r["task"])
    assert in_csv == 2
    assert entry["wrong_task_engagements"] == in_csv
    assert entry["per_task"]["reach"]["wrong_task_engagements"] == 2
    assert entry["per_task"]["squat"]["wrong_task_engagements"] == 0
    # The error figures stay those of the takes whose blend-in finished.
    assert entry["engaged_takes"] == 2 and entry["per_task"]["reach"]["engaged_takes"] == 1


def test_a_realtime_run_does_not_score_the_home_pose_held_before_the_first_reference(tmp_path):
    """The robot station holds its home pose until the first reference arrives (watchdog
    WAITING, about one forward delay into the replay): nothing of the operator's is executed
    yet, which the virtual trial scores as no output. Before, the real-time trial scored
    the home pose against the operator (43 ticks of a synthetic squat at 1 s round trip:
    whole-take hands 4.14 instead of 4.28 cm, and far off where the home pose is)."""
    import numpy as np

    from retarget.references import FLAT_SIZE, ReferenceTrajectory
    from teleop.stations.robot_station import TickRecord
    from teleop.trials.realtime import read_robot_record, take_result, write_robot_record

    start_wall = 50.0
    take = ReferenceTrajectory(np.linspace(0.0, 3.0, 301), np.zeros((301, FLAT_SIZE)), label="squat")
    t = start_wall + np.arange(-10, 300) * 0.01
    waiting = t - start_wall < 0.5 - 1e-9
    home = np.zeros(FLAT_SIZE)
    home[3:9] = 0.2                                 # hands 20 cm off the operator's pose
    records = [TickRecord(ti, home if w else np.zeros(FLAT_SIZE), None, np.zeros((2, 3)), np.zeros(3),
                          np.zeros(2), "passthrough", "WAITING" if w else "ACTIVE", "ok")
               for ti, w in zip(t, waiting)]
    path = tmp_path / "robot.npz"
    write_robot_record(path, records, [""] * len(records), 0.5, len(records), 3.1)
    result = take_result(read_robot_record(path), take, 1.0, False, start_wall)
    assert result.whole["hand_cm"] == 0.0
    assert np.isnan(result.executed[waiting]).all()
    assert result.valid_mask(0.0).sum() == np.sum((t - start_wall >= 0.5 - 1e-9) & (t - start_wall + 0.5 <= 3.0))


def test_a_realtime_runs_whole_take_error_counts_from_where_the_virtual_take_starts(tmp_path):
    """A real-time take rests longer before its motion (the stations settle); its extra rest
    (error near zero) diluted the whole-take error: 1.0 s more of it at 1.5 s round trip."""
    import numpy as np

    from retarget.references import FLAT_SIZE, ReferenceTrajectory
    from teleop.stations.robot_station import TickRecord
    from teleop.trials.realtime import read_robot_record, take_result, write_robot_record

    start_wall = 50.0
    take = ReferenceTrajectory(np.linspace(0.0, 3.0, 301), np.zeros((301, FLAT_SIZE)), label="squat")
    t = start_wall + np.arange(0, 300) * 0.01
    off = np.zeros(FLAT_SIZE)
    off[3:9] = 0.02                                 # 2 cm off on every hand axis after the first second
    records = [TickRecord(ti, off if ti - start_wall >= 1.0 else np.zeros(FLAT_SIZE), None, np.zeros((2, 3)),
                          np.zeros(3), np.zeros(2), "passthrough", "ACTIVE", "ok") for ti in t]
    path = tmp_path / "robot.npz"
    write_robot_record(path, records, [""] * len(records), 0.5, len(records), 3.0)
    diluted = take_result(read_robot_record(path), take, 1.0, False, start_wall)
    scored = take_result(read_robot_record(path), take, 1.0, False, start_wall, whole_from=1.0)
    assert scored.whole["hand_cm"] == pytest.approx(2.0) and diluted.whole["hand_cm"] < 1.9


def test_a_realtime_run_is_scored_at_the_video_delay_the_operator_reported(tmp_path):
    """The operator sees a tick τ̂_b after it: the proxy's RTT/2 plus the video path's own
    time, which the operator reports and the compensator predicts for. Before, the score
    took RTT/2, so a robot exactly where the operator is when the frame is shown (here
    RTT/2 + 40 ms) was scored 40 ms of motion off (2 cm at 0.5 m/s)."""
    import numpy as np

    from retarget.references import FLAT_SIZE, ReferenceTrajectory
    from teleop.stations.robot_station import TickRecord
    from teleop.trials.realtime import read_robot_record, take_result, write_robot_record

    times = np.linspace(0.0, 4.0, 401)
    flat = np.zeros((401, FLAT_SIZE))
    flat[:, 3] = 0.5 * times                        # a hand moving at 0.5 m/s along x
    take = ReferenceTrajectory(times, flat, label="reach")
    start_wall, tau_b = 20.0, 0.54                  # RTT 1 s: 0.5 s link + 40 ms video
    t = start_wall + np.arange(0, 300) * 0.01
    records = []
    for ti in t:
        executed = np.zeros(FLAT_SIZE)
        executed[3] = 0.5 * min(ti - start_wall + tau_b, 4.0)   # the operator's pose at display
        records.append(TickRecord(ti, executed, None, np.zeros((2, 3)), np.zeros(3), np.zeros(2),
                                  "passthrough", "ACTIVE", "ok"))
    for reported, hand_cm in ((tau_b, 0.0), (0.0, 100 * 0.5 * 0.04 / 6)):
        path = tmp_path / f"robot_{reported}.npz"
        write_robot_record(path, records, [""] * len(records), reported, len(records), 3.0)
        result = take_result(read_robot_record(path), take, 1.0, False, start_wall)
        # No report (0): RTT/2, and the 40 ms show as error (on one axis of the six averaged).
        assert result.tau_b_scored == (reported or 0.5)
        assert abs(result.whole["hand_cm"] - hand_cm) < 1e-6, (reported, result.whole["hand_cm"])


def test_a_take_engaged_after_the_motion_ended_is_counted_apart_not_silently_dropped():
    """A take recognised only after the operator had finished has no ticks left to score (its
    window errors are NaN). Before, the means silently skipped it while the table still
    counted it as averaged (`teleop trial` on HDM05 bd at 1.5 s printed "22/22" over 21)."""
    from teleop.trials.report import format_table

    late = (_run(True, "reach", 3.0, "reach"), _run(False, "reach", 3.0, None))
    for run in late:
        run.window = {"hand_cm": float("nan"), "com_cm": float("nan"), "posture_rad": float("nan")}
    on_time = (_run(True, "reach", 1.0, "reach"), _run(False, "reach", 1.0, None))
    summary = summarise({1.5: [late, on_time]}, ["1.5"])
    entry = summary["rtt"]["1.5"]
    assert entry["engaged_takes"] == 2
    assert entry["scored_takes"] == 1 and entry["engaged_late_takes"] == 1
    assert entry["per_task"]["reach"]["scored_takes"] == 1
    table = format_table(summary)
    row = next(line for line in table.splitlines() if line.strip().startswith("1.5"))
    assert row.split()[1] == "1/2"
    assert "1 take(s) engaged only after the operator's motion had ended" in table


def test_takes_that_never_engaged_are_explained_under_the_table():
    """`teleop trial` of squats against a library that has no squat printed "2/6" and
    "wrong task 6" with nothing saying what became of the other four: they began to blend in
    a known task and fell back (wrong starts, with a worst excess, but no window)."""
    from teleop.trials.report import format_table

    fell_back = (_run(True, "squat", None, "putaside"), _run(False, "squat", None, None))
    never_probable = (_run(True, "squat", None, None), _run(False, "squat", None, None))
    engaged = (_run(True, "squat", 1.0, "putaside"), _run(False, "squat", 1.0, None))
    summary = summarise({1.5: [fell_back, fell_back, never_probable, engaged]}, ["1.5"])
    entry = summary["rtt"]["1.5"]
    assert (entry["never_engaged_takes"], entry["abandoned_takes"], entry["wrong_task_engagements"]) == (3, 2, 3)
    assert ("RTT 1.5 s: 3 take(s) never engaged (2 began to blend in and fell back when the motion left the "
            "learned distribution; 1 never had a task probable enough); left out of the window means, counted "
            "in 'whole', 'wrong task' and 'worst excess'.") in format_table(summary)


def test_takes_csv_writes_every_unmeasured_figure_as_an_empty_cell(tmp_path):
    """engaged_at_s was empty for a take that never engaged while its window errors read
    "nan": two spellings of "not measured" in one file."""
    import csv

    from teleop.trials.report import write_take_rows

    never = (_run(True, "squat", None, None), _run(False, "squat", None, None))
    results = {1.5: [never]}
    path = write_take_rows(take_rows(results, ["1.5"], ["a"]), tmp_path / "takes.csv")
    row = next(csv.DictReader(path.open()))
    assert row["engaged_at_s"] == "" and row["hand_cm_comp"] == "" and row["hand_cm_nocomp"] == ""
    assert row["whole_hand_cm_comp"] == "" and row["worst_excess_cm"] == "0"


def test_takes_below_the_compensators_round_trip_are_said_to_pass_through():
    """RTT 0 (in the default sweep): compensation is off there, which the table blamed on
    recognition ("never had a task probable enough")."""
    from teleop.trials.report import format_table

    never = (_run(True, "squat", None, None), _run(False, "squat", None, None))
    table = format_table(summarise({0.0: [never, never]}, ["0"]))
    assert "RTT 0 s: compensation is off below a 0.04 s round trip" in table
    assert "never had a task probable enough" not in table


def test_a_single_round_trip_is_drawn_as_two_points_set_apart(tmp_path, monkeypatch):
    """One round trip: the two series sat on one x, the compensated marker hid the other."""
    import matplotlib.pyplot as plt

    from teleop.trials.report import plot_error_vs_delay

    engaged = (_run(True, "squat", 1.0, "squat"), _run(False, "squat", 1.0, None))
    summary = summarise({1.5: [engaged]}, ["1.5"])
    drawn = []
    monkeypatch.setattr(plt, "close", lambda fig: drawn.append(fig))
    plot_error_vs_delay(summary, tmp_path / "e.png")
    points = [line for line in drawn[0].axes[0].get_lines() if line.get_marker() in ("o", "s")]
    assert len(points) == 2
    xs = [float(line.get_xdata()[0]) for line in points]
    assert xs[0] < 1.5 < xs[1]


def test_the_error_vs_delay_plot_keeps_round_trip_0_and_its_order():
    """At RTT 0 nothing engages (no window error), and the whole take's 0.0 was read as
    missing (``or np.nan``): the plot dropped the point the table printed."""
    from teleop.trials.report import error_vs_delay_series

    def entry(window, whole, std=None):
        return {"hand_cm": window, "hand_cm_std": std, "whole": {"hand_cm": whole}}

    summary = {"rtt": {"1.5": {"comp": entry(1.5, 11.0, 1.1), "nocomp": entry(3.1, 12.1, 1.5)},
                       "0": {"comp": entry(None, 0.0), "nocomp": entry(None, 0.0)}}}
    rtts, series = error_vs_delay_series(summary)
    assert list(rtts) == [0.0, 1.5]
    assert list(series["comp"][0]) == [0.0, 1.5] and list(series["comp"][1]) == [0.0, 1.1]
    assert list(series["nocomp"][0]) == [0.0, 3.1]
