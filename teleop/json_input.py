"""Robust parsing of untrusted JSON text (files, network payloads).

``json.loads`` can fail on hostile input in ways that are not ``json.JSONDecodeError``:
deep nesting raises RecursionError, an integer of more than 4300 digits raises a plain
ValueError (Python >= 3.11), and a huge but legal integer later overflows ``float()``.
:func:`loads` turns every parse failure into a ``ValueError`` with a one-line reason, and
:func:`finite_float` converts a JSON number to a finite float or raises ``ValueError``.
Callers wrap that ValueError into their own documented error class.
"""

from __future__ import annotations

import json
import math
from typing import Any

__all__ = ["loads", "finite_float"]


def loads(text: str | bytes) -> Any:
    """Parse JSON ``text``; raise ``ValueError`` (one line) on any malformed input: bad
    syntax, non-UTF-8 bytes, nesting too deep, or an integer with too many digits."""
    if isinstance(text, (bytes, bytearray)):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"invalid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise ValueError("invalid JSON: nested too deeply") from None
    except (ValueError, OverflowError) as exc:  # e.g. "Exceeds the limit (4300 digits) ..."
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ValueError(f"invalid JSON: {reason}") from None


def finite_float(value: Any, what: str = "value") -> float:
    """``value`` (a JSON number) as a finite float; ``ValueError`` for booleans, non-numbers,
    integers too large for a float, infinities and NaN."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{what} must be a number, got {type(value).__name__}")
    try:
        out = float(value)
    except OverflowError:
        raise ValueError(f"{what} is too large") from None
    if not math.isfinite(out):
        raise ValueError(f"{what} must be finite, got {out}")
    return out
