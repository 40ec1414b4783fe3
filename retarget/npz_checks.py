"""Reading .npz members without trusting the sizes their headers declare.

numpy allocates an array from its .npy header *before* reading the data: a damaged or
hostile archive whose member declares shape (10**12, 20, 3) makes ``npz[key]`` ask for
hundreds of terabytes (MemoryError, or on a machine that overcommits, swapping), however
few bytes follow. :class:`CheckedNpz` reads each member's header first and refuses one
that declares more bytes than the archive can really hold.

The bound is a chain of sizes, each checked against something less forgeable:

* the array the .npy header declares <= the member's uncompressed size (``ZipInfo.file_size``):
  zipfile never yields more bytes than that, so a larger array cannot be filled anyway;
* ``file_size`` <= :data:`MAX_DEFLATE_RATIO` x the member's compressed size: deflate
  expands at most ~1032:1, so a larger claim was not written by numpy;
* the compressed size <= the archive's size in bytes: the data must be in the file.

So an archive of B bytes can make numpy allocate at most ~1100 B bytes, and only when it
really holds that much deflated data. An absolute cap was not chosen: a long capture at a
high rate is legitimately large, and no single number separates it from a damaged file.

(promp.library has the same guard for task libraries; retarget does not import promp.)
"""

from __future__ import annotations

import os
import zipfile
import zlib
from typing import IO, Any, Callable, cast

import numpy as np

__all__ = ["CheckedNpz", "OversizedMember", "MAX_DEFLATE_RATIO", "open_npz"]

#: Deflate expands at most ~1032:1; a member claiming more than this was not written by numpy.
MAX_DEFLATE_RATIO = 1100


#: What reading a damaged or foreign .npz member raises: numpy's ValueError (a bad header,
#: an object array), zlib.error and zipfile.BadZipFile (damaged data, a bad CRC), EOFError
#: (cut short), and NotImplementedError, which zipfile raises for a compression method it
#: does not support (not a stub).
NPZ_READ_ERRORS = (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error, NotImplementedError)


def open_npz(path: str | os.PathLike[str] | IO[bytes], error: Callable[[str], Exception]) -> np.lib.npyio.NpzFile:
    """``np.load(path, allow_pickle=False)`` of a .npz archive, or ``error(message)`` raised,
    the message naming ``path``: for a file that is not a zip archive (else numpy takes a
    text file for a pickle and says "This file contains pickled (object) data ...
    allow_pickle", naming no file), or an archive it cannot read (a bare zip or EOF error).
    An OSError (no such file) passes through; a file object is loaded as it is."""
    if isinstance(path, (str, os.PathLike)):
        with open(path, "rb") as f:
            magic = f.read(2)
        if magic != b"PK":
            raise error(f"{path}: not a .npz file (not a zip archive)")
    try:
        return np.load(path, allow_pickle=False)
    except (ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise error(f"{path}: not a readable .npz file ({exc})") from None


class OversizedMember(ValueError):
    """An .npz member that declares more data than the archive holds (the message says
    which member and the sizes; the caller adds the file)."""


class CheckedNpz:
    """Read access to an opened .npz (``np.load(path, allow_pickle=False)``) that checks a
    member's declared size before numpy allocates it.

    ``key in checked`` and ``checked[key]`` behave as on the NpzFile, except that
    ``checked[key]`` raises :class:`OversizedMember` for a member that declares more data
    than it can hold (see the module docstring).
    """

    def __init__(self, data: np.lib.npyio.NpzFile) -> None:
        self._data = data
        # The archive's real size bounds every compressed size the zip directory claims.
        # (zipfile seeks to its own position before each read, so moving fp is harmless.)
        fp = self._zip().fp
        if fp is None:
            raise ValueError("the .npz archive is closed")
        self._archive_bytes = fp.seek(0, os.SEEK_END)

    def _zip(self) -> zipfile.ZipFile:
        """The NpzFile's open zip archive; ValueError once the NpzFile is closed."""
        zf = self._data.zip
        if zf is None:
            raise ValueError("the .npz archive is closed")
        return zf

    def __contains__(self, key: str) -> bool:
        return key in self._data

    def __getitem__(self, key: str) -> Any:
        # An ndarray, typed Any as NpzFile's members are used: callers convert each to what
        # it must hold (a dict of members may also take a decoded JSON value, say).
        self.check(key)
        return self._data[key]

    def check(self, key: str) -> None:
        """Raise :class:`OversizedMember` if member ``key`` (with or without ``.npy``)
        declares more bytes than the archive can hold; a missing member or one that is not
        a readable .npy is left to numpy (KeyError, ValueError)."""
        zf = self._zip()
        names = set(zf.namelist())
        name = key + ".npy" if key + ".npy" in names else key
        if name not in names:
            return
        info = zf.getinfo(name)
        if info.compress_size > self._archive_bytes:
            raise OversizedMember(f"member {name!r} declares {info.compress_size} compressed bytes, "
                                  f"more than the whole archive ({self._archive_bytes} bytes)")
        if info.file_size > max(info.compress_size, 1) * MAX_DEFLATE_RATIO:
            raise OversizedMember(f"member {name!r} declares {info.file_size} bytes uncompressed from "
                                  f"{info.compress_size} compressed")
        with zf.open(name) as f:
            try:
                header = _read_npy_header(f)
            except ValueError:
                return                            # not a readable .npy header: left to numpy
        if header is None:
            return                                # other versions: left to numpy
        shape, dtype = header
        declared = dtype.itemsize
        for n in shape:
            declared *= int(n)                    # Python ints: no overflow
        if declared > info.file_size:
            raise OversizedMember(f"member {name!r} declares shape {shape} ({declared} bytes) but holds "
                                  f"{info.file_size} bytes")


def _read_npy_header(f: IO[bytes]) -> tuple[tuple[int, ...], np.dtype[Any]] | None:
    """(shape, dtype) declared by the .npy header at the start of ``f``; None for a format
    version other than 1.0 and 2.0, ValueError for a header that cannot be read.

    numpy's header readers are cast to their signatures: numpy < 2.3 ships them unannotated."""
    version = cast(Callable[[IO[bytes]], tuple[int, int]], np.lib.format.read_magic)(f)
    if version == (1, 0):
        read_header = np.lib.format.read_array_header_1_0
    elif version == (2, 0):
        read_header = np.lib.format.read_array_header_2_0
    else:
        return None
    shape, _, dtype = cast(Callable[[IO[bytes]], tuple[tuple[int, ...], bool, np.dtype[Any]]], read_header)(f)
    return shape, dtype
