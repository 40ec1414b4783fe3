"""The `teleop` command, run as a user would, on the embedded default data."""

import csv
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from teleop.cli import build_parser, main

REPO = Path(__file__).resolve().parents[1]
DATASET = REPO / "datasets" / "synthetic"
SUBCOMMANDS = ("demo", "robot", "operator", "trial", "retarget", "train", "eval", "netem", "record", "dataset",
               "bench", "info")


def test_help_lists_every_subcommand_and_each_explains_itself(capsys):
    help_text = build_parser().format_help()
    for name in SUBCOMMANDS:
        assert name in help_text
        with pytest.raises(SystemExit) as exc:
            main([name, "--help"])
        assert exc.value.code == 0
        assert len(capsys.readouterr().out) > 200


@pytest.mark.parametrize("command, words", [("eval", "Table 5.2"), ("info", "optional packages")])
def test_eval_and_info_describe_themselves(command, words, capsys):
    with pytest.raises(SystemExit):
        main([command, "--help"])
    description = capsys.readouterr().out.split("\n\n")[1]    # after the usage
    assert words in " ".join(description.split()) and not description.startswith(("positional", "options"))


@pytest.mark.parametrize("display, words", [(None, "DISPLAY is not set"),
                                            (":87", "the X server at DISPLAY=:87 cannot be reached")])
def test_gui_without_a_display_is_a_clear_error(display, words):
    """pybullet's GUI would exit the process on its own ("cannot connect to X server", status
    1, no message of ours): the display is tried first. In a subprocess: were the check to
    miss, pybullet would end the test run."""
    import os

    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    if display is not None:
        env["DISPLAY"] = display
    proc = subprocess.run([sys.executable, "-m", "teleop", "robot", "--gui", "--listen", "127.0.0.1:0",
                           "--duration", "1"], cwd=REPO, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 1
    assert f"teleop robot: error: pybullet's GUI window needs a display, and {words}" in proc.stderr
    assert "cannot connect to X server" not in proc.stderr + proc.stdout


def run_teleop(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "teleop", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, check=True)


def test_demo_headless_prints_the_summary_and_writes_its_outputs(tmp_path):
    """Over a link that loses 5 % of the commands and video datagrams in runs of 3."""
    out = tmp_path / "demo"
    summary = json.loads(run_teleop("demo", "--headless", "--duration", "5", "--seed", "11", "--out", str(out),
                                    "--loss", "0.05", "--loss-burst", "3").stdout)
    for key in ("round_trip_s", "robot", "seen_hand_error_cm", "controller_timing_ms", "video", "library"):
        assert key in summary
    assert summary["robot"]["fell"] is False
    sessions = summary["robot"]["sessions"]     # each run's own figures, the worst of them above
    assert set(sessions) == {"compensated", "delayed"}
    assert summary["robot"]["min_cop_margin_mm"] == min(s["min_cop_margin_mm"] for s in sessions.values())
    seen = summary["seen_hand_error_cm"]
    assert set(seen["compensated"]) == {"moving_cm", "all_cm", "predicting_cm"}
    # What the demo shows: compensation engaged, and the hands seen while the robot ran
    # predictions are nearer the operator's than a round trip late (1.2 vs 4.8 cm measured).
    assert summary["compensation_ticks"].get("predicting", 0) > 0
    assert seen["compensated"]["predicting_cm"] < 0.5 * seen["delayed"]["predicting_cm"]
    assert summary["video"]["frames_due"] >= summary["video"]["frames_displayed"] > 5
    assert summary["link"]["loss"] == 0.05 and summary["link"]["loss_burst"] == 3.0
    assert summary["link"]["commands_lost"] > 0 and summary["video"]["datagrams_lost"] > 0
    assert (out / "summary.json").is_file() and (out / "demo.png").stat().st_size > 10_000
    assert len(list((out / "frames").glob("*.jpg"))) > 0


def test_train_then_trial_on_the_embedded_dataset(tmp_path):
    library = tmp_path / "lib.npz"
    run_teleop("train", str(DATASET), "-o", str(library), "--tasks", "reach_forward,squat")
    assert library.is_file()
    out = run_teleop("trial", "--train", str(DATASET), "--test", str(DATASET), "--leave-one-out",
                     "--train-tasks", "reach_forward,squat", "--test-tasks", "reach_forward,squat",
                     "--rtt", "0,1.5", "--json", "--out", str(tmp_path / "trial")).stdout
    summary = json.loads(out)
    assert set(summary["rtt"]) == {"0", "1.5"}
    at_15 = summary["rtt"]["1.5"]
    assert at_15["comp"]["hand_cm"] < at_15["nocomp"]["hand_cm"]
    assert summary["rtt"]["0"]["comp"]["whole"]["hand_cm"] == pytest.approx(0.0, abs=1e-6)
    assert (tmp_path / "trial" / "error_vs_delay.png").is_file()
    assert (tmp_path / "trial" / "take0_rtt1.5.png").stat().st_size > 10_000
    # Two tasks the library knows well: compensation begins with the take's own task.
    assert at_15["wrong_task_engagements"] == 0
    rows = list(csv.DictReader(open(tmp_path / "trial" / "takes.csv")))
    assert len(rows) == 2 * at_15["takes"]
    assert {r["engaged_task"] for r in rows if r["rtt"] == "1.5"} <= {"reach_forward", "squat"}
    assert all(r["task"] in ("reach_forward", "squat") for r in rows)
    # Per task: the same takes, split; each task's means are those of its rows.
    per_task = at_15["per_task"]
    assert set(per_task) == {"reach_forward", "squat"}
    assert sum(t["takes"] for t in per_task.values()) == at_15["takes"]
    squats = [float(r["hand_cm_comp"]) for r in rows if r["rtt"] == "1.5" and r["task"] == "squat"]
    assert per_task["squat"]["hand_cm_comp"] == pytest.approx(np.mean(squats), rel=1e-3)
    table = (tmp_path / "trial" / "table.txt").read_text()
    assert "hands per task" in table and "reach_forward" in table


def test_eval_promp_json_layout(tmp_path):
    out = run_teleop("eval", "promp", "--train", str(DATASET), "--test", str(DATASET), "--leave-one-out",
                     "--train-tasks", "reach_forward,squat,place_high",
                     "--test-tasks", "reach_forward,squat,place_high",
                     "--json", "--out", str(tmp_path / "eval")).stdout
    result = json.loads(out)
    assert set(result["recognition"]) == {"none", "quarter", "half"}
    assert json.loads((tmp_path / "eval" / "summary.json").read_text()) == result
    assert (tmp_path / "eval" / "predictions.png").stat().st_size > 10_000
    assert set(result["hand_rms_cm"]) == {"none", "recog", "quarter", "half"}
    assert result["recognition"]["half"] >= 0.9
    assert result["hand_rms_cm"]["half"] < result["hand_rms_cm"]["none"]
    assert result["hand_rms_prior_cm"]["none"] == result["hand_rms_cm"]["none"]
    assert result["hand_rms_cm"]["half"] < result["hand_rms_prior_cm"]["half"]
    # Per task: the figures of each task's takes, which pool back to the overall ones.
    per_task = result["per_task"]
    assert set(per_task) == {"reach_forward", "squat", "place_high"}
    assert sum(t["n_test"] for t in per_task.values()) == result["n_test"]
    assert sum(t["hand_rms_cm"]["half"] * t["n_test"] for t in per_task.values()) / result["n_test"] == \
        pytest.approx(result["hand_rms_cm"]["half"])
    for task, row in result["confusion"]["half"].items():
        assert per_task[task]["recognition"]["half"] == pytest.approx(row.get(task, 0) / sum(row.values()))
    assert 0.0 < result["coverage_2sigma"] <= 1.0
    # The confusion tables count every test take once, and their diagonal is the accuracy.
    for level in ("quarter", "half"):
        table = result["confusion"][level]
        assert sum(sum(row.values()) for row in table.values()) == result["n_test"]
        right = sum(row.get(task, 0) for task, row in table.items())
        assert right / result["n_test"] == pytest.approx(result["recognition"][level])


def test_retarget_execute_json(tmp_path):
    take = DATASET / "reach_forward" / "reach_forward_0.npz"
    result = json.loads(run_teleop("retarget", str(take), "--execute", "--json", "--out", str(tmp_path)).stdout)
    assert set(result) >= {"fell", "min_cop_margin_mm", "max_foot_slip_mm", "hand_rms_cm", "zmp_correction"}
    assert result["fell"] is False
    # The ZMP correction keeps the robot station's margin: --execute shows what a session does.
    from teleop.stations.robot_station import RobotStationConfig
    assert result["zmp_correction"] is True and result["zmp_margin_m"] == RobotStationConfig.zmp_margin
    assert (tmp_path / "retargeting.png").is_file()
    # The take's duration as a person would write it (it printed 9.980000000003201).
    assert result["duration_s"] == round(result["duration_s"], 6) and result["frames"] > 1


def test_bench_sim_quick_json():
    result = json.loads(run_teleop("bench", "sim", "--quick", "--json").stdout)
    assert result["fk_max_error_mm"] < 1.0
    assert abs(result["mass_sim_kg"] - result["mass_model_kg"]) / result["mass_model_kg"] < 0.01
    assert set(result["camera_frame_ms"]) == {"320x240", "640x480"}


def test_a_wrong_motion_file_gives_a_clear_error(tmp_path):
    bad = tmp_path / "notes.bvh"
    bad.write_text("this is not a motion capture file\n")
    proc = subprocess.run([sys.executable, "-m", "teleop", "retarget", str(bad)], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode != 0
    assert "notes.bvh" in proc.stderr


def test_sigterm_is_an_interrupt_inside_a_command_only():
    import os
    import signal

    from teleop.cli import sigterm_as_interrupt

    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt):
        with sigterm_as_interrupt():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5.0)      # the handler runs at once; the sleep is never finished
    assert signal.getsignal(signal.SIGTERM) == before


def test_a_stop_signal_delivered_twice_does_not_abort_the_cleanup():
    """coreutils ``timeout`` signals the command and then its process group: the second
    signal, right after the first, must not interrupt the cleanup the first one started."""
    import os
    import signal

    from teleop.cli import DUPLICATE_STOP_SIGNAL_S, sigterm_as_interrupt

    cleaned = False
    # What it was before (a background job, e.g. a CI run started with `&`, has SIGINT ignored).
    sigint_before = signal.getsignal(signal.SIGINT)
    with sigterm_as_interrupt():
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5.0)
        except KeyboardInterrupt:
            os.kill(os.getpid(), signal.SIGINT)      # the duplicate, during the cleanup
            time.sleep(0.05)
            cleaned = True
        with pytest.raises(KeyboardInterrupt):       # a user insisting later still interrupts
            time.sleep(DUPLICATE_STOP_SIGNAL_S)
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5.0)
    assert cleaned
    assert signal.getsignal(signal.SIGINT) is sigint_before


def test_a_sigterm_while_the_commands_load_is_an_interruption(monkeypatch, capsys):
    """SIGTERM in the first second (the parser imports every command's module) ended the
    process with code 143 and not a word; as a Ctrl-C then: "interrupted", exit code 130."""
    import os
    import signal

    import teleop.cli as cli

    build = cli.build_parser

    def build_while_stopped():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5.0)                      # the handler raises at once; never finished
        return build()

    before = signal.getsignal(signal.SIGTERM)
    monkeypatch.setattr(cli, "build_parser", build_while_stopped)
    assert cli.main(["info"]) == 130
    assert capsys.readouterr().err == "interrupted\n"
    assert signal.getsignal(signal.SIGTERM) == before
