"""`ruff check` reports nothing: pycodestyle, pyflakes and flake8-bugbear over the whole
tree, as configured in pyproject.toml (lines of at most 120 characters; the rules left out
are listed there with the reason)."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(importlib.util.find_spec("ruff") is None,
                                reason="ruff not installed (pip install -e '.[dev]')")


def test_ruff_finds_nothing():
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise", "."],
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr
