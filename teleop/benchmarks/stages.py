"""Progress of a long benchmark on stderr: one line as each stage starts.

``teleop bench`` turns it on, ``--json`` or not (like the other commands' progress bars):
it is on stderr, so stdout carries only the result. Lines are not drawn inside the timed loops: printing there
would be part of what is measured.
"""

from __future__ import annotations

import os
import sys
import time


class Stages:
    """``stage("figure-eight")`` prints ``bench jog [2/5] figure-eight`` to stderr; ``done()``
    prints the total wall time. Silent when ``enabled`` is False.

    Args:
        name: prefix of every line, e.g. "bench jog".
        total: number of stages announced (shown as [k/total]).
    """

    def __init__(self, name: str, total: int, enabled: bool = True) -> None:
        self.name = name
        self.total = total
        self.enabled = enabled
        self.count = 0
        self.started = time.monotonic()

    def __call__(self, what: str) -> None:
        self.count += 1
        self._print(f"{self.name} [{self.count}/{self.total}] {what}")

    def done(self) -> None:
        self._print(f"{self.name}: done in {time.monotonic() - self.started:.0f} s")

    def _print(self, line: str) -> None:
        if self.enabled:
            print(line, file=sys.stderr, flush=True)


def load_average() -> float | None:
    """The machine's 1-minute load average (None where the system does not give one): the
    timings of a run depend on it, and a loaded run is told from a regression by it."""
    try:
        return float(os.getloadavg()[0])
    except (OSError, AttributeError):
        return None


def load_line(load: float | None) -> str:
    """The line under a benchmark's table that says how loaded the machine was."""
    cores = os.cpu_count() or 1
    if load is None:
        return "machine load: not known here (timings depend on what else runs)"
    busy = " (busy: timings above are slower than on an idle machine)" if load > 0.75 * cores else ""
    return f"machine load: 1-min average {load:.1f} on {cores} cores{busy}"


def verdict(met: bool | None) -> str:
    """How a benchmark's table words a target's verdict: "met", "NOT met" (in capitals: the
    line a reader scans for), or "not measured" (None: the figure could not be measured,
    e.g. a peer that is not installed, so there is nothing to judge)."""
    if met is None:
        return "not measured"
    return "met" if met else "NOT met"
