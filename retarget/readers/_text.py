"""Helpers shared by the text-format readers: errors that name file and line."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ..file_checks import refuse_special_file
from ..human import MotionFormatError
from ..human import quote as quote   # re-exported: the readers quote file content with it

#: Most characters of an error's message after ``path:line:`` (:func:`error`): the longest
#: message a reader writes is about 200; beyond this only lists built from file content
#: (unknown names, channels) grow, and a line on a terminal says enough with their start.
MESSAGE_LIMIT = 400


def error(path: str | os.PathLike[str], line: int | None, message: str) -> MotionFormatError:
    """A :class:`MotionFormatError` reading ``path:line: message`` (line 1-based).

    Readers quote file content with :func:`~retarget.human.quote` (imported here for
    them); a message still longer than :data:`MESSAGE_LIMIT` (a list of many names from
    the file) is cut there, saying so.
    """
    where = f"{path}:{line}" if line is not None else f"{path}"
    if len(message) > MESSAGE_LIMIT:
        message = f"{message[:MESSAGE_LIMIT]}... (message cut: {len(message)} characters)"
    return MotionFormatError(f"{where}: {message}")


def read_lines(path: str | os.PathLike[str]) -> list[str]:
    """All lines of a text file, without line terminators (CRLF or LF).

    Decoded as UTF-8 when possible, else Latin-1 (HDM05 files carry a Latin-1 comment);
    a UTF-8 byte-order mark (Windows editors and Excel write one) is dropped; binary files
    (NUL bytes) are rejected.
    """
    path = Path(path)
    # Not only for the file given (sniff_format checked it): a file read beside it, as the
    # ASF skeleton found next to an AMC take, is not sniffed.
    refuse_special_file(path, MotionFormatError)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise MotionFormatError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if b"\x00" in raw[:4096]:
        raise error(path, None, "binary data where a text file was expected")
    try:
        text = raw.decode("utf-8-sig")   # else the BOM sticks to the first token or keyword
    except UnicodeDecodeError:
        text = raw.decode("latin-1")
    return text.splitlines()


def floats(path: str | os.PathLike[str], line_no: int, tokens: list[str], expected: int | None = None,
           what: str = "values") -> npt.NDArray[np.floating[Any]]:
    """Parse tokens as floats, with a located error for junk or a wrong count."""
    if expected is not None and len(tokens) != expected:
        raise error(path, line_no, f"expected {expected} {what}, found {len(tokens)}")
    try:
        values = np.array([float(t) for t in tokens])
    except ValueError:
        bad = next(t for t in tokens if not _is_float(t))
        raise error(path, line_no, f"not a number: {quote(bad)}") from None
    if not np.all(np.isfinite(values)):
        raise error(path, line_no, f"non-finite {what}")
    return values


def _is_float(token: str) -> bool:
    try:
        float(token)
        return True
    except ValueError:
        return False


def head_bytes(path: str | os.PathLike[str], n: int = 4096) -> bytes:
    """The first ``n`` bytes of a file (for format sniffing)."""
    try:
        with open(path, "rb") as f:
            return f.read(n)
    except OSError as exc:
        raise MotionFormatError(f"{path}: cannot read ({exc.strerror or exc})") from None
