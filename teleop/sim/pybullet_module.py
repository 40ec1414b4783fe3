"""pybullet, imported without its start-up banner.

pybullet's C extension writes ``pybullet build time: <date>`` straight to file descriptor 2
when it is first imported, below Python's ``sys.stderr``: every command that touched the
simulator printed it as if it were a message for the user, between the progress bars and
the warnings that matter. Import pybullet from here (``from teleop.sim.pybullet_module
import pb``): the first import runs with descriptor 2 pointed at the null device. Errors
are untouched: a failing import raises in Python, and the descriptor is restored first.
"""

from __future__ import annotations

import os
import sys


def _import_quietly():
    """Import pybullet with descriptor 2 silenced for the duration of the import."""
    if "pybullet" in sys.modules:           # already imported: the banner is long gone
        import pybullet
        return pybullet
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):   # no descriptor 2 to redirect
        import pybullet
        return pybullet
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
            try:
                import pybullet
            finally:
                os.dup2(saved, 2)
    finally:
        os.close(saved)
    return pybullet


pb = _import_quietly()
