"""``teleop trial --realtime``: the real stations through the real UDP proxy on loopback."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from teleop.cli import main


@pytest.mark.slow
def test_realtime_trial_runs_the_real_stations_through_the_proxy(tmp_path, capsys):
    # One synthetic take, predicted by a library learnt from the other takes, at 1 s round
    # trip, with and without compensation: two real-time runs of about 8 s each.
    dataset = Path(__file__).resolve().parents[1] / "datasets" / "synthetic"
    train, test = tmp_path / "train", tmp_path / "test"
    shutil.copytree(dataset, train, ignore=shutil.ignore_patterns("*.csv", "*.md"))
    (test / "squat").mkdir(parents=True)
    shutil.move(train / "squat" / "squat_0.npz", test / "squat" / "squat_0.npz")
    code = main(["trial", "--realtime", "--train", str(train), "--test", str(test),
                 "--rtt", "1", "--json", "--out", str(tmp_path / "out")])
    assert code == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["mode"] == "realtime"
    entry = summary["rtt"]["1"]
    assert entry["takes"] >= 1
    assert np.isfinite(entry["comp"]["whole"]["hand_cm"]) and np.isfinite(entry["nocomp"]["whole"]["hand_cm"])
    # The achieved control rate is reported (not asserted: it depends on the machine's load).
    assert summary["robot_tick_hz_min"] > 0
    assert (tmp_path / "out" / "summary_realtime.json").exists()
