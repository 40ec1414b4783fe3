"""Review of the live paths (session 37): ``teleop trial --realtime``'s times and its
``--robot``, and ``teleop stream-mvn --port``'s range message."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from teleop.cli import main
from tests.conftest import free_port, synthetic_dataset


# ------------------------------------------------------------------ trial --realtime
def test_a_realtime_runs_engagement_time_counts_from_where_the_virtual_take_starts(tmp_path):
    """A real-time take rests longer before its motion (the stations settle: 2.05 s more at
    1.5 s round trip). Its engagement time, takes.csv's ``engaged_at_s`` and the summary's
    ``engage_after_s``, counted that extra rest: a synthetic squat engaged "at 4.81 s"
    against the virtual run's 2.58 s on the same take, which read as a compensation 2.2 s
    slower. They now count from where the virtual trial's padded take starts."""
    from retarget.references import FLAT_SIZE, ReferenceTrajectory
    from teleop.stations.robot_station import TickRecord
    from teleop.trials.realtime import read_robot_record, take_result, write_robot_record

    start_wall, extra_rest = 100.0, 2.0
    take = ReferenceTrajectory(np.linspace(0.0, 5.0, 501), np.zeros((501, FLAT_SIZE)), label="squat")
    # Ticks from 0.1 s before the replay; blend-in at 3.0 s, predicting from 3.2 s (wall).
    t = start_wall + np.arange(-10, 480) * 0.01
    wall = t - start_wall
    states = np.where(wall < 3.0 - 1e-9, "passthrough", np.where(wall < 3.2 - 1e-9, "blend_in", "predicting"))
    off = np.zeros(FLAT_SIZE)
    off[3:9] = 0.02                                 # 2 cm off on every hand axis from 2.5 s (wall)
    records = [TickRecord(ti, off if w >= 2.5 else np.zeros(FLAT_SIZE), None, np.zeros((2, 3)), np.zeros(3),
                          np.zeros(2), str(s), "ACTIVE", "ok") for ti, w, s in zip(t, wall, states)]
    path = tmp_path / "robot.npz"
    write_robot_record(path, records, ["squat" if s != "passthrough" else "" for s in states], 0.5,
                       len(records), 4.9)
    rec = read_robot_record(path)
    result = take_result(rec, take, 1.0, True, start_wall, whole_from=extra_rest)
    assert result.engaged_at == pytest.approx(3.2 - extra_rest)      # before: 3.2
    assert result.engaged_task == "squat"
    assert result.times[0] == pytest.approx(-0.1 - extra_rest)
    # The scores are those of before: the same ticks, only their clock moved.
    plain = take_result(rec, take, 1.0, True, start_wall)
    assert result.valid_mask().sum() == plain.valid_mask().sum()
    assert result.window == plain.window
    assert result.whole["hand_cm"] == pytest.approx(plain.errors_after(extra_rest)["hand_cm"])
    assert result.whole["hand_cm"] > plain.whole["hand_cm"]          # the extra rest is left out


def test_trial_realtime_hands_robot_to_the_stations(tmp_path, monkeypatch):
    """``teleop trial --realtime --robot R`` retargeted the takes to R but ran the stations
    (the simulated robot, the operator's target) on the iCub: the option was half ignored."""
    from teleop.robot.description import DESCRIPTIONS_DIR
    from teleop.trials import realtime

    description = tmp_path / "my_robot.toml"
    shutil.copy(DESCRIPTIONS_DIR / "icub.toml", description)
    train = synthetic_dataset(tmp_path / "train", {"squat": 2})
    test = synthetic_dataset(tmp_path / "test", {"squat": 1})
    seen = []

    def run_take_realtime(take, rtt, library_path, *, seed=0, settings=realtime.RealtimeSettings()):
        seen.append(settings.robot)
        raise RuntimeError("stop here: the settings are what this test checks")

    monkeypatch.setattr(realtime, "run_take_realtime", run_take_realtime)
    with pytest.raises(RuntimeError, match="stop here"):
        main(["trial", "--train", str(train), "--test", str(test), "--rtt", "0.5", "--realtime",
              "--robot", str(description), "--out", str(tmp_path / "out")])
    assert seen == [str(description)]


def test_the_realtime_robot_station_simulates_the_robot_it_is_given():
    """The robot process builds the description of ``RealtimeSettings.robot`` (here one that
    does not exist, so its start-up fails); before, it always built the iCub."""
    from retarget.references import FLAT_SIZE, ReferenceTrajectory
    from teleop.trials.realtime import RealtimeSettings, run_take_realtime

    take = ReferenceTrajectory(np.linspace(0.0, 1.0, 101), np.zeros((101, FLAT_SIZE)), label="squat")
    with pytest.raises(RuntimeError, match="died on start-up"):
        run_take_realtime(take, 0.0, None, settings=RealtimeSettings(robot="no_such_robot_s37"))


# ------------------------------------------------------------------------ stream-mvn
@pytest.mark.parametrize("value", ["70000", "-1"])
def test_stream_mvn_port_range_message_does_not_offer_port_0(capsys, motion_file, value):
    """``--port 70000`` said "port must be 0-65535", and 0 is refused (not a destination)."""
    with pytest.raises(SystemExit) as exc:
        main(["stream-mvn", str(motion_file), "--port", value, "--duration", "0.05"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"argument --port: port must be 1-65535, got {value}" in err and "0-65535" not in err
    assert "Traceback" not in err


def test_stream_mvn_still_refuses_port_0_with_its_reason(capsys, motion_file):
    with pytest.raises(SystemExit) as exc:
        main(["stream-mvn", str(motion_file), "--port", "0", "--duration", "0.05"])
    assert exc.value.code == 2
    assert "port 0 is not a destination" in capsys.readouterr().err


@pytest.mark.parametrize("source, robot", [("xsens-live:{p}", "127.0.0.1:{p}"),
                                           ("xsens-live:0.0.0.0:{p}", "localhost:{p}")])
def test_the_robot_at_the_stations_own_mvn_port_is_a_clash(capsys, source, robot):
    """--input xsens-live:P with --robot on P (loopback) was not refused, unlike the station's
    other ports: the commands went to the suit's receiver and the session ended as "the robot
    never answered"."""
    port = free_port()
    source, robot = source.format(p=port), robot.format(p=port)
    assert main(["operator", "--input", source, "--robot", robot, "--allow-remote", "--duration", "0.1"]) == 2
    assert f"--robot {robot} is this station's own MVN port (--input {source})" in capsys.readouterr().err
