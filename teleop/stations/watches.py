"""What the operator station says when its peers go quiet: nothing from the robot (or the
suit's stream) for a while, or our commands no longer reaching the robot while its video
still arrives; and the one-time messages of a session.
"""

from __future__ import annotations

import math
import sys
import time
from collections import deque
from typing import Callable

#: Time [s] between two status lines of a station.
STATUS_INTERVAL_S = 2.0


class SilenceWatch:
    """Warns on stderr when nothing arrives from a peer for ``after`` seconds.

    UDP has no connection: the operator station sends happily to a robot station that is not
    there (or has died), and a live input stream that never comes looks like a still operator.
    Without this the session would end with nothing but zeros in its counts.

    Args:
        heard: returns a counter of what arrived so far (packets, datagrams).
        what: what is missing, e.g. "feedback or video from the robot at 127.0.0.1:9001".
        hint: the likely cause, as a question (or a function saying it from what arrived).
        after: seconds of silence before warning during the session.
    """

    def __init__(self, heard: Callable[[], int], what: str, hint: str | Callable[[], str],
                 after: float = 3.0) -> None:
        self.heard, self.what, self.hint, self.after = heard, what, hint, after
        self.began = self.last_change = time.monotonic()
        self.count = heard()
        self.ever = False
        self.warned = False

    def check(self) -> None:
        """Once per tick: warn once per silence longer than ``after``, and say when what was
        missing arrives again (else the warning stood unanswered, the user left wondering
        whether the robot or the suit was back)."""
        now, count = time.monotonic(), self.heard()
        if count != self.count:
            if self.warned:
                when = (f"again after {now - self.last_change:.1f} s of silence" if self.ever
                        else f"{now - self.began:.1f} s after the start")
                print(f"[operator] {self.what}: arriving {when}", file=sys.stderr)
            self.count, self.last_change, self.ever, self.warned = count, now, True, False
        elif not self.warned and now - self.last_change >= self.after:
            self.warned = True
            self._warn(now)

    def finish(self) -> None:
        """At the end: warn if nothing ever came, or nothing for the last ``after`` seconds,
        unless this silence was warned about already (the same warning twice in a row, "for
        the last 3.0 s" then "3.2 s", the second with a hint that contradicted the first)."""
        self.check()
        now = time.monotonic()
        if not self.warned and (not self.ever or now - self.last_change >= self.after):
            self._warn(now)

    def _warn(self, now: float) -> None:
        when = f"in {now - self.began:.1f} s" if not self.ever else f"for the last {now - self.last_change:.1f} s"
        hint = self.hint() if callable(self.hint) else self.hint     # said from what arrived by now
        print(f"[operator] warning: no {self.what} {when}: {hint}", file=sys.stderr)


class SaidOnce:
    """The one-time messages of a station's session: ``first(key)`` is True the first time
    it is asked for ``key``, then never again."""

    def __init__(self) -> None:
        self._said: set[str] = set()

    def first(self, key: str) -> bool:
        if key in self._said:
            return False
        self._said.add(key)
        return True


def robot_silence_hint(sent: int, withheld: int = 0) -> str:
    """Why the robot may be silent. It sends FEEDBACK only once our commands arrive, and no
    video with ``--video-hz 0``: before the input gave its first pose, "is `teleop robot`
    running there?" alone blamed a robot that was running."""
    if sent:
        # A robot following another operator refuses our commands and stays silent to us.
        return "is `teleop robot` running there, and not following another operator?"
    why = ("every command was withheld as one the robot would refuse (see the warning)" if withheld
           else "the input gave no pose")
    return (f"is `teleop robot` running there? (nothing was sent to it yet, {why}: it answers our commands, "
            "and sends video only with --video-hz above 0)")


class CommandLinkWatch:
    """Says when our commands stop reaching the robot while the operator keeps sending, and
    when they reach it again. The video may still flow (it has its own link), so the silence
    warning does not fire, and the robot just holds its pose: its FEEDBACK reports STALE, or,
    when the command link is down both ways (a proxy gone), stops while the video arrives.

    Args:
        station: the operator station (``feedback``, ``feedback_received``, ``sent``).
        video: its video path (``receiver.stats.datagrams``).
        after: seconds without FEEDBACK while video arrives before saying so; also how long
            (plus a round trip) we must have been sending without a gap before a STALE
            report is blamed on the link.

    When our input stops (a suit's stream ends, the operator pauses), the robot's watchdog
    rightly goes stale and its FEEDBACK says so for a round trip after the input resumes:
    those reports are about our silence, not the link's. Before, the operator said "our
    commands no longer reach the robot (check --robot and the link or proxy)" when an MVN
    stream was stopped, before its own "no MVN poses" warning.

    On a link that loses commands in bursts the robot goes stale and back every few
    seconds, and a warning with its "receives our commands again" each time buried the
    console. Once ``said_per_quiet`` dropouts have been said within ``quiet`` seconds, the
    next ones are counted and said in one line when ``quiet`` has passed since the last
    line (or at :meth:`finish`); while they go on, that line comes once per ``quiet``.
    """

    #: A pause between two commands longer than this [s] restarts the "sending without a gap" clock.
    GAP_S = 0.25

    def __init__(self, station, video, after: float = 3.0, quiet: float = 30.0, said_per_quiet: int = 3) -> None:
        self.station, self.video, self.after, self.quiet = station, video, after, quiet
        self.said_recently: deque[float] = deque(maxlen=said_per_quiet)   # when the last dropouts were said
        self.said_this = False                 # the dropout going on now was said (its end is said too)
        self.unsaid = 0                        # dropouts since the last line not said one by one
        self.longest_unsaid_s = 0.0
        self.cut_since = 0.0
        self.feedback_count = station.feedback_received
        self.feedback_at = time.monotonic()
        self.video_count = video.receiver.stats.datagrams
        self.warned = False
        self.warned_at_count = 0
        self.sent_count, self.sent_at = station.sent, time.monotonic()
        self.sending_since = self.sent_at

    def check(self) -> None:
        from teleop.net.watchdog import WatchdogState

        now, station = time.monotonic(), self.station
        if station.feedback_received != self.feedback_count:
            self.feedback_count, self.feedback_at = station.feedback_received, now
        video_count = self.video.receiver.stats.datagrams
        video_flows, self.video_count = video_count != self.video_count, video_count
        feedback = station.feedback
        stale = feedback is not None and feedback.watchdog_state == WatchdogState.STALE
        silent = video_flows and now - self.feedback_at > self.after and self.feedback_count > 0
        if station.sent != self.sent_count:
            if now - self.sent_at > self.GAP_S:
                self.sending_since = now
            self.sent_count, self.sent_at = station.sent, now
        round_trip = (2.0 * feedback.forward_delay if feedback is not None and math.isfinite(feedback.forward_delay)
                      else 0.0)
        sending = (station.sent > 0 and now - self.sent_at <= self.GAP_S      # (a replay that ended sends nothing)
                   and now - self.sending_since > self.after + round_trip)
        cut = sending and (stale or silent)
        if cut and not self.warned:
            self.warned, self.warned_at_count, self.cut_since = True, self.feedback_count, now
            recent = [t for t in self.said_recently if now - t < self.quiet]
            self.said_this = not self.unsaid and len(recent) < (self.said_recently.maxlen or 0)
            if self.said_this:
                self.said_recently.append(now)
                why = "the robot reports our commands stale" if stale else \
                    f"no feedback for {now - self.feedback_at:.1f} s while its video arrives"
                print(f"[operator] warning: {why}: our commands no longer reach the robot, which holds its pose "
                      "(check --robot and the link or proxy)", file=sys.stderr)
            else:
                self.unsaid += 1
        elif self.warned and not stale and self.feedback_count != self.warned_at_count:
            self.warned = False      # a FEEDBACK since the warning, and not a stale one
            if self.said_this:
                print("[operator] the robot receives our commands again", file=sys.stderr)
            else:
                self.longest_unsaid_s = max(self.longest_unsaid_s, now - self.cut_since)
        if self.unsaid and now - self.said_recently[-1] >= self.quiet:
            self._say_unsaid(now)

    def finish(self) -> None:
        """At the end of the session: the dropouts counted since the last one said."""
        if self.unsaid:
            self._say_unsaid(time.monotonic())

    def _say_unsaid(self, now: float) -> None:
        still = self.warned and not self.said_this
        if still:
            self.said_this = True      # its end is said as usual
        longest = (f", the longest {self.longest_unsaid_s:.1f} s" if self.longest_unsaid_s else "")
        print(f"[operator] warning: our commands stopped reaching the robot {self.unsaid} more "
              f"time{'s' if self.unsaid > 1 else ''} in the last {now - self.said_recently[-1]:.0f} s{longest}"
              + (", and still do not" if still else "")
              + "; the robot held its pose each time (a link that loses commands in bursts?)", file=sys.stderr)
        self.unsaid, self.longest_unsaid_s = 0, 0.0
        # The dropouts go on: one such line per `quiet` from now (the last line said is the
        # newest entry), not a burst of single warnings.
        self.said_recently.extend([now] * (self.said_recently.maxlen or 0))
