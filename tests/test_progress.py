"""Progress bars: live on a terminal, sparse in a log (teleop.progress)."""

from __future__ import annotations

import io
import sys

from teleop.progress import LOG_INTERVAL_S, _interactive, progress_bar


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_log_gets_a_bar_every_few_seconds_and_a_terminal_a_live_one(monkeypatch):
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    with progress_bar(range(3), desc="log") as bar:
        assert bar.mininterval == LOG_INTERVAL_S
        assert list(bar) == [0, 1, 2]
    assert "log" in sys.stderr.getvalue()
    monkeypatch.setattr(sys, "stderr", _Terminal())
    with progress_bar(total=3, desc="terminal") as bar:
        assert bar.mininterval == 0.1
    closed = io.StringIO()
    closed.close()
    monkeypatch.setattr(sys, "stderr", closed)          # a closed stderr is not a terminal
    assert not _interactive()
    assert list(progress_bar(range(2), desc="quiet", enabled=False)) == [0, 1]   # --json: silent
