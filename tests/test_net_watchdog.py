"""Stale-command watchdog state machine on an injected clock."""

import pytest

from teleop.clock import VirtualClock
from teleop.net.watchdog import StaleCommandWatchdog, WatchdogState, minimum_jerk


def stream(watchdog, clock, until, period=0.01):
    """Commands every ``period`` until ``until``, with an update per command; returns statuses."""
    statuses = []
    while clock.now() < until - 1e-12:
        clock.advance(period)
        watchdog.command_received()
        statuses.append(watchdog.update())
    return statuses


def test_minimum_jerk_profile():
    assert minimum_jerk(0.0) == 0.0 and minimum_jerk(1.0) == 1.0 and minimum_jerk(0.5) == pytest.approx(0.5)
    assert minimum_jerk(-1.0) == 0.0 and minimum_jerk(2.0) == 1.0
    values = [minimum_jerk(k / 100) for k in range(101)]
    assert all(b >= a for a, b in zip(values, values[1:]))
    h = 1e-4  # zero slope at both ends: no velocity jump when blending starts or ends
    assert minimum_jerk(h) / h < 1e-3 and (1 - minimum_jerk(1 - h)) / h < 1e-3
    # The profile itself is 10u^3 - 15u^4 + 6u^5 (a cubic smoothstep 3u^2 - 2u^3 has the
    # same end points, midpoint, monotonicity and zero end slopes: 0.15625 at u = 1/4).
    for u, exact in ((0.25, 53 / 512), (0.1, 0.00856), (0.75, 459 / 512), (0.9, 0.99144)):
        assert minimum_jerk(u) == pytest.approx(exact, rel=1e-12, abs=1e-15)
    # Zero acceleration at both ends as well: the second difference over h^2 is ~60 h
    # (the smoothstep's is 6: it starts with a jump in acceleration).
    h = 1e-3
    assert abs(minimum_jerk(2 * h) - 2 * minimum_jerk(h) + minimum_jerk(0.0)) / h**2 < 100 * h
    assert abs(minimum_jerk(1.0) - 2 * minimum_jerk(1 - h) + minimum_jerk(1 - 2 * h)) / h**2 < 100 * h


def test_full_cycle_waiting_resuming_active_stale_resuming_active():
    clock = VirtualClock()
    watchdog = StaleCommandWatchdog(clock, timeout=0.3, resume_duration=1.0)
    status = watchdog.update()
    assert status.state == WatchdogState.WAITING and status.blend == 0.0 and status.since_last_command == float("inf")

    statuses = stream(watchdog, clock, until=0.5)
    assert statuses[0].state == WatchdogState.RESUMING and statuses[0].previous == WatchdogState.WAITING
    blends = [s.blend for s in statuses]
    assert blends[0] == 0.0 and all(b > a for a, b in zip(blends, blends[1:]))  # smooth ramp up

    statuses = stream(watchdog, clock, until=1.2)
    assert statuses[-1].state == WatchdogState.ACTIVE and statuses[-1].blend == 1.0
    active_at = next(s for s in statuses if s.state == WatchdogState.ACTIVE)
    assert active_at.previous == WatchdogState.RESUMING

    clock.advance(0.29)  # just under the timeout: still fine
    assert watchdog.update().state == WatchdogState.ACTIVE
    clock.advance(0.02)
    status = watchdog.update()
    assert status.state == WatchdogState.STALE and status.blend == 0.0 and status.went_stale
    assert watchdog.stale_events == 1
    clock.advance(5.0)
    assert watchdog.update().state == WatchdogState.STALE

    statuses = stream(watchdog, clock, until=clock.now() + 1.5)
    assert statuses[0].state == WatchdogState.RESUMING and statuses[0].blend == 0.0
    assert statuses[50].blend == pytest.approx(minimum_jerk(0.5), abs=1e-9)
    assert statuses[-1].state == WatchdogState.ACTIVE


def test_outage_shorter_than_update_period_still_goes_through_stale():
    """A gap > timeout seen only through arrival times (no update during it) is an outage."""
    clock = VirtualClock()
    watchdog = StaleCommandWatchdog(clock, timeout=0.3, resume_duration=0.0)
    stream(watchdog, clock, until=0.1)
    assert watchdog.state == WatchdogState.ACTIVE
    clock.advance(1.0)
    watchdog.command_received()  # the next command after a long silence, before any update
    status = watchdog.update()
    assert status.went_stale and status.state == WatchdogState.ACTIVE and watchdog.stale_events == 1


def test_going_stale_during_resume_and_resume_confirmation():
    clock = VirtualClock()
    watchdog = StaleCommandWatchdog(clock, timeout=0.2, resume_duration=1.0, resume_after=3)
    for _ in range(2):  # two commands are not enough to engage
        clock.advance(0.01)
        watchdog.command_received()
        assert watchdog.update().state == WatchdogState.WAITING
    clock.advance(0.01)
    watchdog.command_received()
    assert watchdog.update().state == WatchdogState.RESUMING
    stream(watchdog, clock, until=clock.now() + 0.3)
    clock.advance(0.25)
    status = watchdog.update()
    assert status.state == WatchdogState.STALE and status.previous == WatchdogState.RESUMING and status.went_stale
    clock.advance(1.0)
    watchdog.command_received()  # one stray packet after the outage
    assert watchdog.update().state == WatchdogState.STALE


def test_too_old_commands_do_not_count():
    clock = VirtualClock()
    watchdog = StaleCommandWatchdog(clock, timeout=0.3, resume_duration=0.0, max_command_age=2.0)
    clock.set(1.0)
    assert watchdog.command_received(command_age=0.75)
    assert watchdog.update().state == WatchdogState.ACTIVE
    for _ in range(40):  # the delay blew up: commands still arrive but are 3 s old
        clock.advance(0.01)
        assert not watchdog.command_received(command_age=3.0)
    assert watchdog.update().state == WatchdogState.STALE and watchdog.rejected_too_old == 40


def test_reordered_arrival_reports_do_not_move_time_back():
    clock = VirtualClock()
    watchdog = StaleCommandWatchdog(clock, timeout=0.3, resume_duration=0.0)
    clock.set(1.0)
    watchdog.command_received(1.0)
    watchdog.command_received(0.5)
    assert watchdog.last_arrival == 1.0 and watchdog.update().state == WatchdogState.ACTIVE


def test_invalid_parameters():
    with pytest.raises(ValueError):
        StaleCommandWatchdog(VirtualClock(), timeout=0.0)
    with pytest.raises(ValueError):
        StaleCommandWatchdog(VirtualClock(), resume_after=0)
