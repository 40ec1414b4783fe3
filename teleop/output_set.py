"""A command's output files written as one set: all of them appear, or none does.

:func:`write_outputs_together` (and :class:`OutputSet`, for files decided one at a time)
writes each file to a hidden temporary beside it and renames them into place only once
all are written, with the stop signals held during the renames: an interrupted or failed
``teleop eval`` or ``teleop trial`` left a new summary beside an earlier run's plot, or a
set without its take plots. The one mechanism of every command that replaces files (eval,
trial, tune, calibrate-sim, dataset export and trim/label/recover).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from types import FrameType
from typing import Any


#: The signals ``teleop``'s entry point turns into KeyboardInterrupt (teleop.cli.sigterm_as_interrupt).
_STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))


@contextlib.contextmanager
def _stops_held():
    """While inside, Ctrl-C, SIGTERM and SIGHUP wait: noted, then handled as they would have
    been (the usual KeyboardInterrupt, or the default action) on leaving. Done with Python
    handlers, not a blocked signal mask: that blocks only the calling thread, and a signal
    sent to the process then reaches another one (tqdm's monitor) and interrupts at once.
    Only in the main thread (signal handlers are set there); elsewhere a no-op. A signal
    ignored (``nohup``) stays ignored."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[tuple[int, FrameType | None]] = []

    def hold(signum: int, frame: FrameType | None) -> None:
        held.append((signum, frame))

    previous: dict[int, Callable[[int, FrameType | None], Any] | int | signal.Handlers | None] = {}
    for sig in _STOP_SIGNALS:
        handler = signal.getsignal(sig)
        if callable(handler) or handler == signal.SIG_DFL:
            previous[sig] = signal.signal(sig, hold)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for signum, frame in held[:1]:      # the first stop; a second one within it adds nothing
            handler = previous[signum]
            if callable(handler):
                handler(signum, frame)
            else:
                signal.raise_signal(signum)


class OutputSet:
    """Files written one by one and renamed into place together, or not at all.

    ``with OutputSet() as outputs:`` then, per file, ``outputs.write(path, writer)``: the
    writer writes a hidden temporary beside ``path`` (its folder made if needed), which is
    kept, or discarded if the writer fails (the caller may go on with the other files).
    Leaving the block normally renames every kept file into place, with the stop signals
    held (a Ctrl-C interrupts just after), and removes the files of :meth:`remove_with`;
    leaving it by an exception (an error, a Ctrl-C) removes every temporary file and the
    folders this set made, so the previous run's files stay as they were. For work whose
    files are decided one at a time (``dataset export``: an episode that cannot be read is
    skipped, the others are exported); :func:`write_outputs_together` when all are known.
    """

    def __init__(self) -> None:
        self._temps: dict[Path, Path] = {}      # destination -> its temporary file
        self._kept: list[Path] = []
        self._remove: list[Path] = []
        self._made: set[Path] = set()

    def write(self, path: Path, writer: Callable[[Path], object]) -> None:
        """``writer(tmp)`` into a temporary for ``path``, kept; on failure, discarded, and an
        OSError that named no file (or the hidden temporary one: "[Errno 28] No space left
        on device") names ``path``, the output the user asked for."""
        tmp = self.temporary(path)
        try:
            writer(tmp)
        except OSError as exc:
            self.discard(path)
            if exc.errno is None or exc.filename not in (None, str(tmp), tmp):
                raise
            raise type(exc)(exc.errno, exc.strerror, str(path)) from exc
        except BaseException:
            self.discard(path)
            raise
        self.keep(path)

    def temporary(self, path: Path) -> Path:
        """A new hidden temporary file beside ``path`` (same suffix: it picks a plot's format)."""
        self.discard(path)                 # asked twice: the first one goes
        destination = _destination(Path(path))
        folder = destination.parent
        self._made.update(f for f in (folder, *folder.parents) if not f.exists())
        folder.mkdir(parents=True, exist_ok=True)
        try:
            self._temps[destination] = _temporary_beside(destination)
        except OSError as exc:
            # The hidden temporary's name is no one's ("/proc/.x.<hex>.tmp.mcap: No such file
            # or directory"): the error names the output asked for, as write() does.
            if exc.errno is None or exc.filename is None:
                raise
            raise type(exc)(exc.errno, exc.strerror, str(path)) from exc
        return self._temps[destination]

    def keep(self, path: Path) -> None:
        """``path``'s temporary file is written: settle it (permissions, bytes on disk), to be
        renamed into place with the others."""
        destination = _destination(Path(path))
        _settle(self._temps[destination], destination)
        self._kept.append(destination)

    def discard(self, path: Path) -> None:
        """``path`` is not written after all: its temporary file goes."""
        destination = _destination(Path(path))
        tmp = self._temps.pop(destination, None)
        if destination in self._kept:
            self._kept.remove(destination)
        if tmp is not None:
            tmp.unlink(missing_ok=True)

    def remove_with(self, paths: Iterable[Path]) -> None:
        """Files (an earlier run's, now stale) removed when the set is renamed into place."""
        self._remove.extend(paths)

    def __enter__(self) -> OutputSet:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if exc_type is None:
                with _stops_held():
                    for destination in self._kept:
                        os.replace(self._temps.pop(destination), destination)
                    for stale in self._remove:
                        stale.unlink(missing_ok=True)
        finally:
            for tmp in self._temps.values():
                tmp.unlink(missing_ok=True)
            # Those left empty (all of them when nothing was renamed; after a file discarded,
            # its folder): only if empty, so nothing of anyone else's is removed.
            for made_folder in sorted(self._made, key=lambda f: len(f.parts), reverse=True):   # deepest first
                with contextlib.suppress(OSError):
                    made_folder.rmdir()


def write_outputs_together(writers: dict[Path, Callable[[Path], object]], remove: Iterable[Path] = ()) -> None:
    """Write a run's output files so that they appear together or not at all: each file
    ``path`` is written by ``writers[path](tmp)`` to a hidden temporary file beside it (same
    suffix: it picks the format of a plot), and only once all are written are they renamed
    into place, and the files of ``remove`` (an earlier run's, now stale) removed. Before,
    the files were written one after another, and a Ctrl-C (or an error) in the middle left
    a new summary beside an earlier run's plot, or a set without its take plots.

    The renames run with the stop signals held (a Ctrl-C then interrupts just after them,
    exit code 130), so that no interruption leaves a new file beside an old one. On any
    failure or interruption while writing, the temporary files, and the folders this call
    made, are removed: the previous run's files stay as they were (see :class:`OutputSet`)."""
    with OutputSet() as outputs:
        for path, write in writers.items():
            outputs.write(path, write)
        outputs.remove_with(remove)


def is_hidden(path: Path) -> bool:
    """Whether ``path``'s name is hidden (begins with "."), as the temporary files of an
    :class:`OutputSet` are: a folder's readers skip them (``ls`` does too). A run killed
    outright (SIGKILL, a power cut) cannot remove its temporaries; read as takes or
    recordings, they made ``teleop train`` fail on "not a readable .npz file", or learn an
    interrupted copy as a demonstration."""
    return Path(path).name.startswith(".")


def _destination(path: Path) -> Path:
    """The file replaced for ``path``: itself, or the file it is a symlink to (renamed onto
    the link, the new file would replace the link and leave the file it names unchanged,
    e.g. a recording relabelled in place through a link)."""
    return path.resolve() if path.is_symlink() else path


def _temporary_beside(destination: Path) -> Path:
    """A new, empty, hidden file next to ``destination`` (the same file system: the rename is
    atomic) with a unique name and the same suffix (it picks a plot's format): a fixed name
    (FILE.tmp) would overwrite a user's file of that name, or another run's temporary."""
    while True:
        temporary = destination.with_name(f".{destination.stem}.{secrets.token_hex(6)}.tmp{destination.suffix}")
        try:
            os.close(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            return temporary
        except FileExistsError:
            continue   # the name is taken (by chance): draw another


def _settle(temporary: Path, destination: Path) -> None:
    """Before the rename: the permissions of the file replaced, and the bytes on disk (a power
    cut then leaves the old file or the new one, not an empty one)."""
    if destination.exists():
        shutil.copymode(destination, temporary)
    with open(temporary, "rb+") as f:
        os.fsync(f.fileno())
