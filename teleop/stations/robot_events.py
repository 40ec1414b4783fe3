"""What the robot station says on stderr as things happen: the robot touching the scene or
falling, which operator it follows (and when another takes over, or the same one reaches it
by a new path), and the commands it refuses. Each is said when it first happens (an
operator change each time), never once a tick."""

from __future__ import annotations

import sys

from teleop.net.protocol import format_address
from teleop.stations.watches import SaidOnce


class RobotEvents:
    """Call :meth:`say_new` once per tick with the robot station (its ``first_*`` fields,
    ``fell_at``, ``operator``, ``operators_attached``, ``operator_moves``/``operator_moved``
    and ``config.stale_timeout``)."""

    def __init__(self) -> None:
        self._said = SaidOnce()
        self._attached = 0                 # operators attached when last said
        self._following: str | None = None  # the operator's address as last said
        self._moves = 0

    def say_new(self, station) -> None:
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
        if station.first_implausible is not None and self._said.first("implausible"):
            # Said once: a client sending them usually sends nothing else, and the watchdog's
            # stale hold would be all the user sees.
            _say(f"warning: refusing commands no operator can mean, from {station.first_implausible}; the robot "
                 "keeps its last command (holds its pose if nothing else arrives)")


def _say(message: str) -> None:
    print(f"[robot] {message}", file=sys.stderr)
