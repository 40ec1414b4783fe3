"""Stale-command watchdog: fail safe the moment commands stop, resume smoothly.

Pure logic with an injected clock (real or virtual), no I/O. The robot station reports the
arrival time of every *valid* command (authenticated, fresh, finite), calls :meth:`update`
once per control tick, and mixes its output as::

    reference = (1 − blend) · hold_pose + blend · commanded

where ``hold_pose`` is the robot's initial pose until the first command, and afterwards
the pose it was executing when the watchdog last went STALE (the station captures it when
:attr:`WatchdogStatus.went_stale` is set). With that choice every
transition is continuous: going STALE freezes the robot where it is (blend 0 on the pose it
already has), and resuming ramps from there to the live commands along a minimum-jerk
profile, so a command stream that comes back far from the frozen pose does not jerk the
robot.

States::

    WAITING ──(resume_after commands)──▶ RESUMING ──(resume_duration)──▶ ACTIVE
                                          ▲     │                          │
                  (resume_after commands) │     └───(no command for timeout)┤
                                          │                                ▼
                                        STALE ◀───────────────────────────┘

The first command also goes through RESUMING: the robot's initial pose can be far from the
operator's, and engaging must be as gentle as resuming.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from teleop.clock import Clock


class WatchdogState(enum.IntEnum):
    """Watchdog states (values go on the wire in :class:`teleop.net.protocol.Feedback`)."""

    WAITING = 0   #: no command received yet
    ACTIVE = 1    #: commands arrive in time
    STALE = 2     #: commands stopped for longer than the timeout: hold the safe pose
    RESUMING = 3  #: commands are back, blending from the hold pose to them


#: The states in which the robot holds its pose instead of following commands (whatever
#: the compensator would make of them): the stations' status lines say "holding" there.
HOLDING_STATES = frozenset({WatchdogState.WAITING, WatchdogState.STALE})


def minimum_jerk(u: float) -> float:
    """Minimum-jerk profile 10u³ − 15u⁴ + 6u⁵ on [0, 1] (clamped outside).

    Zero velocity and acceleration at both ends, so a blend weight following it starts and
    ends without a jerk.
    """
    u = min(max(u, 0.0), 1.0)
    return u * u * u * (10.0 + u * (-15.0 + 6.0 * u))


@dataclass(frozen=True)
class WatchdogStatus:
    """Result of one :meth:`StaleCommandWatchdog.update`.

    Attributes:
        state: current state.
        blend: weight of the live commands in [0, 1] (see the module docstring).
        since_last_command: time since the newest valid command arrived [s] (inf if none).
        previous: the state before this update, when it changed (else None).
        went_stale: this update went through STALE (possibly straight on to RESUMING when
            the outage ended before anyone looked): capture the hold pose now.
    """

    state: WatchdogState
    blend: float
    since_last_command: float
    previous: WatchdogState | None = None
    went_stale: bool = False

    @property
    def changed(self) -> bool:
        return self.previous is not None


class StaleCommandWatchdog:
    """Declares commands STALE after a timeout, and blends them back in when they resume.

    Args:
        clock: a :mod:`teleop.clock` clock (wall or virtual), the same clock as the arrival
            times passed to :meth:`command_received`.
        timeout: longest gap between valid commands before STALE [s]. The default 0.3 s
            is 30 missed commands at 100 Hz: far beyond the arrival gaps that Gaussian
            jitter produces (many packets are in flight, so arrivals stay dense), short
            enough that the robot freezes within a third of a second.
        resume_duration: length of the minimum-jerk resume blend [s].
        resume_after: consecutive commands (gaps ≤ timeout) needed to leave WAITING or
            STALE, so one stray packet after an outage does not start a resume.
        max_command_age: if set, commands older than this when they arrive (age = measured
            forward delay) are not valid: a link whose delay grows beyond what the
            compensation can handle counts as an outage [s].
    """

    def __init__(self, clock: Clock, *, timeout: float = 0.3, resume_duration: float = 1.0,
                 resume_after: int = 1, max_command_age: float | None = None) -> None:
        if timeout <= 0 or resume_duration < 0 or resume_after < 1:
            raise ValueError("timeout must be > 0, resume_duration ≥ 0 and resume_after ≥ 1")
        self.clock = clock
        self.timeout = timeout
        self.resume_duration = resume_duration
        self.resume_after = resume_after
        self.max_command_age = max_command_age
        self.state = WatchdogState.WAITING
        self.blend = 0.0
        self.last_arrival = -math.inf
        self.stale_events = 0      # ACTIVE/RESUMING → STALE transitions
        self.rejected_too_old = 0  # commands refused by max_command_age
        self._streak = 0           # consecutive commands with gaps ≤ timeout
        self._gap_seen = False     # a gap > timeout happened since the last update
        self._resume_start = 0.0

    def command_received(self, arrival_time: float | None = None, command_age: float | None = None) -> bool:
        """Report a valid command that arrived at ``arrival_time`` (default: now).

        Returns False if it was refused as too old (see ``max_command_age``).
        """
        if self.max_command_age is not None and command_age is not None and command_age > self.max_command_age:
            self.rejected_too_old += 1
            return False
        arrival = self.clock.now() if arrival_time is None else arrival_time
        if arrival - self.last_arrival > self.timeout:
            # Even if no update() ran during the gap, the gap was an outage: remember it so
            # the next update() goes through STALE instead of carrying on as if nothing happened.
            self._streak = 1
            self._gap_seen = self.state in (WatchdogState.ACTIVE, WatchdogState.RESUMING)
        else:
            self._streak += 1
        self.last_arrival = max(self.last_arrival, arrival)  # reordered reports never go back
        return True

    def update(self) -> WatchdogStatus:
        """Advance the state machine to the clock's current time."""
        now = self.clock.now()
        since = now - self.last_arrival
        previous = self.state
        went_stale = self.state in (WatchdogState.ACTIVE, WatchdogState.RESUMING) and (
            since > self.timeout or self._gap_seen)
        if went_stale:
            self.state = WatchdogState.STALE
            self.stale_events += 1
        self._gap_seen = False
        if self.state in HOLDING_STATES and since <= self.timeout \
                and self._streak >= self.resume_after:
            self.state = WatchdogState.RESUMING
            self._resume_start = now
        if self.state == WatchdogState.RESUMING:
            progress = (now - self._resume_start) / self.resume_duration if self.resume_duration > 0 else 1.0
            if progress >= 1.0:
                self.state = WatchdogState.ACTIVE
            self.blend = minimum_jerk(progress)
        else:
            self.blend = 1.0 if self.state == WatchdogState.ACTIVE else 0.0
        return WatchdogStatus(self.state, self.blend, since, previous if self.state != previous else None,
                              went_stale)
