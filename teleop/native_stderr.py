"""Silencing what native libraries write straight to file descriptor 2.

Some C/C++ libraries print on the process's stderr descriptor, below Python's ``sys.stderr``:
pybullet its ``pybullet build time: <date>`` banner on import, openvr ``Unable to read VR
Path Registry from ...`` when SteamVR is absent. Every command that touched them printed
those lines among its own messages, or ahead of the product's own error that says the same
for the user. Python exceptions are untouched, and the descriptor is restored before they
propagate.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator


@contextlib.contextmanager
def native_stderr_silenced() -> Iterator[None]:
    """Point descriptor 2 at the null device for the duration (a no-op where there is none
    to redirect, e.g. a stderr replaced by an object without a descriptor)."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):
        yield
        return
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
            try:
                yield
            finally:
                os.dup2(saved, 2)
    finally:
        os.close(saved)
