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
    # The same files as the virtual trial writes (before: the summary only).
    for name in ("summary_realtime.json", "table_realtime.txt", "takes_realtime.csv", "error_vs_delay_realtime.png",
                 "take0_rtt1_realtime.png"):
        assert (tmp_path / "out" / name).exists(), name
    # The takes carry their label (before: None, so every take was listed under "" and no
    # start could ever count as wrong).
    assert set(entry["per_task"]) == {"squat"}


def _open_fds_to(path: Path) -> int:
    fds = Path("/proc/self/fd")
    return sum(1 for fd in fds.iterdir() if fd.exists() and fd.resolve() == path.resolve())


def test_a_realtime_run_reports_the_task_compensation_began_with_and_the_take_label(tmp_path):
    from retarget.references import FLAT_SIZE, ReferenceTrajectory
    from teleop.stations.robot_station import TickRecord
    from teleop.trials.realtime import read_robot_record, take_result, write_robot_record

    start_wall = 1000.0
    take = ReferenceTrajectory(np.linspace(0.0, 2.0, 201), np.zeros((201, FLAT_SIZE)), label="squat")
    # What the robot process writes: 100 Hz ticks from 0.1 s before the replay started, the
    # compensator recognising "reach" while still passing through, beginning (blend-in) with
    # "squat" at 0.5 s, predicting from 0.6 s, by then recognising "reach" again.
    t = start_wall + np.arange(-10, 150) * 0.01
    states = np.where(t - start_wall < 0.5 - 1e-9, "passthrough",
                      np.where(t - start_wall < 0.6 - 1e-9, "blend_in", "predicting"))
    tasks = np.where(t - start_wall < 0.3, "", np.where(states == "blend_in", "squat", "reach"))
    records = [TickRecord(ti, np.zeros(FLAT_SIZE), None, np.zeros((2, 3)), np.zeros(3), np.zeros(2),
                          str(s), "RUNNING", "ok") for ti, s in zip(t, states)]
    path = tmp_path / "robot.npz"
    write_robot_record(path, records, list(tasks), 0.5, len(records), 1.6)
    rec = read_robot_record(path)
    if Path("/proc/self/fd").exists():
        assert _open_fds_to(path) == 0            # before: np.load's archive stayed open
    path.unlink()
    result = take_result(rec, take, 1.0, True, start_wall)
    assert result.label == "squat"
    assert result.engaged_task == "squat"         # before: None for every realtime take
    assert result.engaged_at == pytest.approx(0.6)
    assert result.robot_tick_hz == pytest.approx(160 / 1.6)
    # Without compensation nothing began: no task, but the label still.
    rec["states"] = ["passthrough"] * len(t)
    rec["tasks"] = [""] * len(t)
    plain = take_result(rec, take, 1.0, False, start_wall)
    assert plain.label == "squat" and plain.engaged_task is None and plain.engaged_at is None


@pytest.mark.slow
def test_an_interrupted_realtime_take_leaves_no_proxy_thread_or_socket(monkeypatch):
    """Ctrl-C in the middle of a take used to leave a proxy thread running with its ports
    bound, and the other proxy thread crashed on its closed selector."""
    import os
    import socket
    import threading

    import teleop.stations.operator_station as operator_station
    from teleop.robot.model import RobotModel
    from teleop.robot.target import robot_target
    from teleop.takes import load_take
    from teleop.trials.realtime import run_take_realtime

    def udp_sockets() -> int:
        count = 0
        for fd in os.listdir("/proc/self/fd"):
            try:
                sock = socket.socket(fileno=int(fd))
            except OSError:
                continue
            try:
                count += sock.type == socket.SOCK_DGRAM
            finally:
                sock.detach()
        return count

    ticks = [0]
    tick = operator_station.OperatorStation.tick

    def interrupted_tick(self):
        ticks[0] += 1
        if ticks[0] == 50:
            raise KeyboardInterrupt      # what Ctrl-C or SIGTERM raise in the main loop
        return tick(self)

    monkeypatch.setattr(operator_station.OperatorStation, "tick", interrupted_tick)
    crashed = []
    monkeypatch.setattr(threading, "excepthook", lambda args: crashed.append(args.exc_value))
    threads, sockets = set(threading.enumerate()), udp_sockets()
    dataset = Path(__file__).resolve().parents[1] / "datasets" / "synthetic"
    take = load_take(dataset / "squat" / "squat_0.npz", "squat", robot_target(RobotModel())).trajectory
    with pytest.raises(KeyboardInterrupt):
        run_take_realtime(take, 1.0, None)
    assert set(threading.enumerate()) <= threads and udp_sockets() == sockets
    assert not crashed


def _sigint_state(queue) -> None:
    import signal

    queue.put(signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, []))


def test_the_robot_child_leaves_ctrl_c_to_the_trial():
    """Ctrl-C reaches the whole process group: the spawned robot process, still importing,
    printed a traceback (spawn_main) beside the trial's "interrupted". It starts with SIGINT
    blocked (the trial stops it), and the trial's own mask is restored."""
    import multiprocessing as mp
    import signal

    from teleop.trials.realtime import _ctrl_c_left_to_this_process

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    before = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    child = ctx.Process(target=_sigint_state, args=(queue,))
    with _ctrl_c_left_to_this_process():
        child.start()
    assert signal.pthread_sigmask(signal.SIG_BLOCK, []) == before
    assert queue.get(timeout=60) is True
    child.join(30)
