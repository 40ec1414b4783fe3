"""Refusing a special file (a named pipe, a device, a socket) given where a file is read.

Opening a named pipe for reading blocks until some other process opens it for writing: a
command given one where a recording, a motion or a library goes hung in silence. A device
reads as endless or empty data (``/dev/zero``, ``/dev/null``), which the readers then
misnamed ("Is a folder", "no such file"). ``os.stat`` does not block: asked first, it lets
the openers refuse such a file by name. Shared by ``retarget`` and ``teleop``;
``promp.library`` has its own few lines (promp imports neither package).
"""

from __future__ import annotations

import os
import stat
from typing import Callable

__all__ = ["NotRegularFileError", "refuse_special_file", "special_file_kind"]


class NotRegularFileError(OSError):
    """A named pipe, a device or a socket given where a file is read (the message names it).
    Found before the file is read: ``before_work`` tells ``teleop``'s command line to say
    the error line alone (no TELEOP_DEBUG hint)."""

    before_work = True


def special_file_kind(mode: int) -> str | None:
    """What a file of ``st_mode`` ``mode`` is, said for a message ("a named pipe", "a
    character device", ...), or None for a regular file or a folder."""
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    if stat.S_ISFIFO(mode):
        return "a named pipe"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a special file"


def refuse_special_file(path: str | os.PathLike[str],
                        error: Callable[[str], Exception] = NotRegularFileError) -> None:
    """Raise ``error("PATH: not a regular file (a named pipe)")`` (a :class:`NotRegularFileError`
    unless the caller gives its own error type) if ``path`` is a named pipe, a device or a
    socket. A regular file, a folder and a path that cannot be looked at (missing, no
    permission) pass: the caller's own checks and open say those in their words."""
    try:
        mode = os.stat(path).st_mode      # follows a symbolic link: what open() would read
    except (OSError, ValueError):         # ValueError: a NUL in the name
        return
    kind = special_file_kind(mode)
    if kind is not None:
        refused = error(f"{os.fspath(path)}: not a regular file ({kind})")
        refused.before_work = True    # type: ignore[attr-defined]  # the caller's error type too (see NotRegularFileError)
        raise refused
