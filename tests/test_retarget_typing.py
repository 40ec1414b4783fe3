"""The retarget package ships py.typed, so its annotations are public: mypy --strict must
pass on it (numpy's stubs make "returning Any" the one check left out: most numpy
operations are typed as returning Any)."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(importlib.util.find_spec("mypy") is None, reason="mypy not installed (pip install -e '.[dev]')")
def test_mypy_strict_passes_on_retarget(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--disable-error-code", "no-any-return",
         "--cache-dir", str(tmp_path / "mypy_cache"), "retarget"],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
