"""Print pip constraints that pin every dependency to its declared lower bound.

Usage (from the project root; `make test-lower-bounds` does all of it)::

    python3 tools/lower_bounds.py > lower.txt
    python3 -m venv .venv-lower && .venv-lower/bin/pip install -c lower.txt -e '.[test]'
    .venv-lower/bin/python -m pytest -q

A lower bound in pyproject.toml is a promise that the product works with that version; this
is how it is kept. Every requirement of ``[project] dependencies`` (and of the extras named
with ``--extra``) must state one (``name>=version``): one without is reported and the exit
code is 1, as it promises nothing. Markers and upper bounds are kept out of the constraint.
"""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from pathlib import Path

#: ``name[extras]>=version`` at the start of a requirement (PEP 508 name, PEP 440 version).
_LOWER_BOUND = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*[^;]*?>=\s*([0-9][^,;\s]*)")
_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def lower_bound_pins(requirements: list[str]) -> tuple[list[str], list[str]]:
    """(``name==lower`` constraints, requirements that state no lower bound), in order;
    a name listed twice (a core dependency repeated in an extra) is pinned once."""
    pins: dict[str, str] = {}
    unbounded = []
    for requirement in requirements:
        match = _LOWER_BOUND.match(requirement)
        if match is None:
            name = _NAME.match(requirement)
            unbounded.append(name.group(1) if name else requirement)
            continue
        name, version = match.group(1), match.group(2)
        pins.setdefault(name.lower(), f"{name}=={version}")
    return list(pins.values()), unbounded


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pyproject", type=Path, default=Path(__file__).resolve().parents[1] / "pyproject.toml")
    parser.add_argument("--extra", action="append", default=[],
                        help="also pin this optional-dependency group (repeatable)")
    args = parser.parse_args(argv)
    try:
        project = tomllib.loads(args.pyproject.read_text())["project"]
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, KeyError) as exc:
        # A wrong --pyproject: the file and why in one line, not a traceback.
        why = "no [project] table" if isinstance(exc, KeyError) else getattr(exc, "strerror", None) or exc
        parser.error(f"--pyproject {args.pyproject}: {why}")
    requirements = list(project.get("dependencies", []))
    extras = project.get("optional-dependencies", {})
    for extra in args.extra:
        if extra not in extras:
            parser.error(f"no optional dependencies {extra!r} in {args.pyproject} (there are: {', '.join(extras)})")
        requirements += extras[extra]
    pins, unbounded = lower_bound_pins(requirements)
    print("\n".join(pins))
    if unbounded:
        print(f"lower_bounds: no lower bound (name>=version) for {', '.join(unbounded)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
