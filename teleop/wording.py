"""Plain-English pieces of the messages the commands print."""

from __future__ import annotations

from collections.abc import Sequence


def listed(names: Sequence[str]) -> str:
    """``"a"``, ``"a and b"``, ``"a, b and c"`` (no serial comma, as every message writes it)."""
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def dropped_by_the_kernel(counts: Sequence[tuple[int | None, str]]) -> str:
    """``"12 video datagrams and 3 packets dropped by the kernel"`` from (count, what it
    counts) pairs, for a status line: the counts above 0 only, "" when none is (none
    dropped, or the OS does not tell: a status line says nothing rather than a 0)."""
    said = [f"{count} {what}" for count, what in counts if count]
    return f"{listed(said)} dropped by the kernel" if said else ""
