"""What the robot station says when the operator's commands stop and come back."""

from types import SimpleNamespace

import teleop.stations.robot_events as robot_events
from teleop.net.watchdog import WatchdogState
from teleop.stations.robot_events import RobotEvents


def _station(state):
    return SimpleNamespace(first_scene_contact=None, fell_at=None, first_foreign_sender=None, operator=None,
                           operators_attached=0, operator_moves=0, first_implausible=None, first_controller_hold=None,
                           config=SimpleNamespace(stale_timeout=0.5),
                           watchdog=SimpleNamespace(state=state, stale_events=0))


def _run(events, states, station=None):
    """Tick through ``states``; a STALE after ACTIVE or RESUMING counts a stop, as the
    watchdog's stale_events does."""
    station = station or _station(WatchdogState.WAITING)
    for state in states:
        if state == WatchdogState.STALE and station.watchdog.state in (WatchdogState.ACTIVE, WatchdogState.RESUMING):
            station.watchdog.stale_events += 1
        station.watchdog.state = state
        events.say_new(station)
    return station


def test_the_robot_says_when_the_operators_commands_stop_and_come_back(capsys):
    """A killed operator showed only as STALE in the 2 s status line (the operator side warns)."""
    events = RobotEvents()
    _run(events, [WatchdogState.WAITING, WatchdogState.ACTIVE, WatchdogState.STALE, WatchdogState.STALE,
                  WatchdogState.RESUMING, WatchdogState.ACTIVE])
    lines = capsys.readouterr().err.splitlines()
    assert lines == ["[robot] warning: no command from the operator for --stale-timeout (0.5 s): holding a safe pose "
                     "(the operator stopped, or the link lost its commands)",
                     "[robot] the operator's commands are back: blending into them"]


def test_stops_beyond_three_in_half_a_minute_are_counted_in_one_line(capsys, monkeypatch):
    now = [100.0]
    monkeypatch.setattr(robot_events.time, "monotonic", lambda: now[0])
    events = RobotEvents()
    cycle = [WatchdogState.ACTIVE, WatchdogState.STALE, WatchdogState.RESUMING]
    station = None
    for _ in range(10):                      # ten stops within 10 s: a link losing commands in bursts
        station = _run(events, cycle, station)
        now[0] += 1.0
    err = capsys.readouterr().err
    assert err.count("no command from the operator") == 3 and err.count("are back") == 3
    events.finish()
    assert "the operator's commands stopped 7 more times in the last" in capsys.readouterr().err


def test_a_stop_and_resume_within_one_watchdog_update_is_said(capsys):
    """A robot loop stalled past --stale-timeout: the watchdog goes stale and resumes in one
    update; compared from tick to tick (ACTIVE, then RESUMING) the stop went unsaid."""
    events = RobotEvents()
    station = _run(events, [WatchdogState.ACTIVE])
    station.watchdog.stale_events += 1
    _run(events, [WatchdogState.RESUMING, WatchdogState.ACTIVE], station)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2 and "no command from the operator" in lines[0] and "are back" in lines[1]
