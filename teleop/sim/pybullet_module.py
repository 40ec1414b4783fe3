"""pybullet, imported without its start-up banner.

pybullet's C extension writes ``pybullet build time: <date>`` straight to file descriptor 2
when it is first imported: every command that touched the simulator printed it as if it
were a message for the user. Import pybullet from here (``from teleop.sim.pybullet_module
import pb``): the first import runs with descriptor 2 silenced (teleop.native_stderr).
"""

from __future__ import annotations

from teleop.native_stderr import native_stderr_silenced

with native_stderr_silenced():      # (an import already done prints nothing again)
    import pybullet as pb

__all__ = ["pb"]
