"""What the robot station says on stderr as things happen: the robot touching the scene or
falling, which operator it follows (and when another takes over, or the same one reaches it
by a new path), the operator's commands stopping (the robot holds a safe pose) and coming
back, and the commands it refuses. Each is said when it first happens (an operator change,
a stop of the commands, each time, up to a few per half minute), never once a tick."""

from __future__ import annotations

import sys
import time
from collections import deque

from teleop.net.protocol import format_address
from teleop.net.watchdog import WatchdogState
from teleop.stations.watches import SaidOnce

#: Stops of the operator's commands said one by one within :data:`STOPS_QUIET_S`; the
#: rest are counted and said in one line per that time (a link losing commands in bursts
#: would fill the console), as the operator's CommandLinkWatch does on its side.
STOPS_SAID_PER_QUIET = 3
STOPS_QUIET_S = 30.0


class RobotEvents:
    """Call :meth:`say_new` once per tick with the robot station (its ``first_*`` fields,
    ``fell_at``, ``operator``, ``operators_attached``, ``operator_moves``/``operator_moved``,
    ``watchdog.state`` and ``watchdog.stale_events``, ``config.stale_timeout``,
    ``first_controller_hold``), and
    :meth:`finish` at the end."""

    def __init__(self) -> None:
        self._said = SaidOnce()
        self._attached = 0                 # operators attached when last said
        self._following: str | None = None  # the operator's address as last said
        self._moves = 0
        self._stops_seen = 0               # the watchdog's stale_events when last looked at
        self._stopped = False              # a stop whose end is not said yet
        self._stops_said: deque[float] = deque(maxlen=STOPS_SAID_PER_QUIET)   # when the last stops were said
        self._stop_said = False            # the stop going on now was said (so is its end)
        self._stops_unsaid = 0

    def finish(self) -> None:
        """At the end of the session: the stops counted since the last one said."""
        if self._stops_unsaid:
            self._say_unsaid_stops(time.monotonic())

    def say_new(self, station) -> None:
        self._say_watchdog(station)
        if station.first_scene_contact is not None and self._said.first("scene contact"):
            # Said: the contact pushes the joints beyond the speeds the controller
            # commands, and the hand stops where the operator's goes on.
            _say(f"warning: the robot touches the scene ({station.first_scene_contact}): a contact pushes its "
                 "joints and stops the hand short of the operator's")
        if station.fell_at is not None and self._said.first("fall"):
            # Said at once: the simulated robot stays down, and everything after is moot.
            _say("warning: the robot fell (a body part other than the feet touches the ground); restart the robot "
                 "station to stand it up again")
        if station.first_foreign_sender is not None and self._said.first("other operator"):
            # Said at once: the second operator's station only sees a robot that never answers.
            _say(f"warning: refusing commands from {station.first_foreign_sender}: another operator "
                 f"({format_address(station.operator)}) is active; the robot follows the first until it has been "
                 f"silent for --stale-timeout ({station.config.stale_timeout:g} s)")
        if station.operators_attached != self._attached:
            # Said: a new operator taking over showed only as tau_f and tau_b starting again.
            following = format_address(station.operator)
            _say(f"following the operator at {following}" + (
                 f" (the previous one, {self._following}, silent for --stale-timeout): a fresh clock estimate and "
                 "compensation" if self._following else ""))
            self._attached, self._following = station.operators_attached, following
        if station.operator_moves != self._moves:
            self._moves = station.operator_moves
            was, now = station.operator_moved
            _say(f"the operator's commands now come from {now} (was {was}): the same operator station by a new "
                 "path (a restarted proxy?); its clock estimate and the motion carry on")
            self._following = now
        if station.first_controller_hold is not None and self._said.first("controller hold"):
            # Said once: the controller then keeps its last command, and the robot's stillness
            # looked like a link problem (the counts are in the final line and --json).
            _say(f"warning: the whole-body controller held its last command ({station.first_controller_hold}); "
                 "it does so while the references are out of the robot's workspace or cannot be solved")
        if station.first_implausible is not None and self._said.first("implausible"):
            # Said once: a client sending them usually sends nothing else, and the watchdog's
            # stale hold would be all the user sees.
            _say(f"warning: refusing commands no operator can mean, from {station.first_implausible}; the robot "
                 "keeps its last command (holds its pose if nothing else arrives)")


    def _say_watchdog(self, station) -> None:
        """The operator's commands stopping (the watchdog going stale: the robot holds a safe
        pose) and coming back. Before, only the 2 s status line's STALE showed it. Counted
        by the watchdog's ``stale_events``, not by its state from tick to tick: one update
        can go stale and resume at once (a robot loop stalled past --stale-timeout)."""
        watchdog, now = station.watchdog, time.monotonic()
        stops, self._stops_seen = watchdog.stale_events - self._stops_seen, watchdog.stale_events
        if stops:
            recent = [t for t in self._stops_said if now - t < STOPS_QUIET_S]
            self._stop_said = not self._stops_unsaid and len(recent) < STOPS_SAID_PER_QUIET
            if self._stop_said:
                self._stops_said.append(now)
                _say(f"warning: no command from the operator for --stale-timeout ({station.config.stale_timeout:g} s): "
                     "holding a safe pose (the operator stopped, or the link lost its commands)")
            self._stops_unsaid += stops - (1 if self._stop_said else 0)
            self._stopped = True
        if self._stopped and watchdog.state != WatchdogState.STALE:
            self._stopped = False
            if self._stop_said:
                _say("the operator's commands are back: blending into them")
        if self._stops_unsaid and now - self._stops_said[-1] >= STOPS_QUIET_S:
            self._say_unsaid_stops(now)

    def _say_unsaid_stops(self, now: float) -> None:
        n = self._stops_unsaid
        _say(f"warning: the operator's commands stopped {n} more time{'s' if n > 1 else ''} in the last "
             f"{now - self._stops_said[-1]:.0f} s; the robot held its pose each time (a link that loses commands "
             "in bursts?)")
        self._stops_unsaid = 0
        # One such line per quiet period from now on (the newest entry is this line).
        self._stops_said.extend([now] * STOPS_SAID_PER_QUIET)


def _say(message: str) -> None:
    print(f"[robot] {message}", file=sys.stderr)
