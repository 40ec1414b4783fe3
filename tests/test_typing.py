"""`mypy` (configured in pyproject.toml: teleop, retarget and promp) reports no error.

The annotations are how the modules state shapes, units and what may be None; a checker
run keeps them true (it found real bugs when it was introduced: see the closing notes).
The promp package is held to --strict as well (tests/test_promp_typing.py)."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(importlib.util.find_spec("mypy") is None, reason="mypy not installed (pip install -e '.[dev]')")
def test_mypy_passes_on_the_packages(tmp_path):
    result = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "mypy_cache")],
                            cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr
