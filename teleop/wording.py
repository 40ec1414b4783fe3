"""Plain-English pieces of the messages the commands print."""

from __future__ import annotations

from collections.abc import Sequence


def listed(names: Sequence[str]) -> str:
    """``"a"``, ``"a and b"``, ``"a, b and c"`` (no serial comma, as every message writes it)."""
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
