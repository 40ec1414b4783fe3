"""Telling a recording still being written from one whose recorder has gone.

A file without its MCAP footer is either being written (a session under way) or was cut short
(a recorder killed). The footer cannot tell them apart, so the :class:`~teleop.record.Recorder`
holds an exclusive advisory lock (``flock``) on its file for as long as it writes it: the
kernel drops the lock when the process ends, however it ends, so a lock held means a live
recorder. Readers test for it without blocking.

``flock`` is advisory and POSIX: on a file system or platform without it (some network file
systems, Windows), nothing is locked and :func:`being_written` answers False, as before there
were locks.
"""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path

try:
    import fcntl
except ImportError:       # Windows: no advisory locks, nothing is known to be written
    fcntl = None  # type: ignore[assignment]


def lock_for_writing(fd: int, path: str | os.PathLike) -> None:
    """Take the exclusive lock of a recording about to be written through ``fd``.

    Raises OSError (EBUSY, naming ``path``) if another recorder holds it: replacing that file
    would lose the session being written into it.
    """
    if fcntl is None:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise OSError(errno.EBUSY, "another recorder is writing this file (a session under way): choose another "
                      "file", str(path)) from None
    except OSError:       # a file system without locks (ENOLCK, EOPNOTSUPP): record unlocked
        pass


def being_written(path: str | os.PathLike) -> bool:
    """True if a live recorder holds ``path`` (see the module docstring); False if none does,
    if the file cannot be opened, or if locks are not supported there."""
    if fcntl is None:
        return False
    try:
        fd = os.open(Path(path), os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    else:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)
