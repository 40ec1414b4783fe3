"""Progress of a long benchmark on stderr: one line as each stage starts.

``teleop bench`` turns it on, ``--json`` or not (like the other commands' progress bars):
it is on stderr, so stdout carries only the result. Lines are not drawn inside the timed loops: printing there
would be part of what is measured.
"""

from __future__ import annotations

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
