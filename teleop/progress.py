"""Progress bars for long work: tqdm redrawn live on a terminal, sparse in a log.

On a terminal tqdm redraws its bar up to ten times a second. Written to a file or a CI log
those redraws are carriage returns within one ever-growing line (a 30 s demo left ~300 of
them), so when stderr is not a terminal the bar updates every ``LOG_INTERVAL_S`` seconds.
"""

from __future__ import annotations

import sys
from typing import Iterable

from tqdm import tqdm

from teleop.stop_request import raise_if_stop_lost

#: Seconds between a bar's updates when stderr is not a terminal.
LOG_INTERVAL_S = 10.0


def _interactive() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):        # replaced or closed stderr
        return False


class _StoppableBar(tqdm):
    """A tqdm bar whose every step raises the KeyboardInterrupt of a stop signal that was
    swallowed on its way (teleop/stop_request.py): long work is what a user stops."""

    def __iter__(self):
        for item in super().__iter__():
            raise_if_stop_lost()
            yield item

    def update(self, n=1):
        raise_if_stop_lost()
        return super().update(n)


def progress_bar(iterable: Iterable | None = None, *, desc: str, total: int | None = None,
                 enabled: bool = True, leave: bool = False) -> tqdm:
    """A tqdm bar over ``iterable`` (or of ``total`` steps, updated by the caller) on stderr;
    ``enabled`` False gives a silent one (e.g. with --json)."""
    return _StoppableBar(iterable, total=total, desc=desc, disable=not enabled, leave=leave,
                         mininterval=0.1 if _interactive() else LOG_INTERVAL_S)


def end_progress_bars() -> None:
    """Close the bars still open (work interrupted or failed inside their loop), so that the
    message said next starts a line of its own: "...rmse=2.14e-04]interrupted" before. A bar
    left (``leave=True``) ends its line; another is wiped."""
    for bar in list(getattr(tqdm, "_instances", ())):
        try:
            bar.close()
        except Exception:        # a bar whose stream is gone: nothing left to tidy
            pass
