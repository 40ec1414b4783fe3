"""`mypy` reports no error: configured in pyproject.toml (teleop, retarget and promp), and
with --strict on the two libraries that stand alone and ship py.typed, whose annotations
are public (numpy's stubs make "returning Any" the one strict check left out: most numpy
operations are typed as returning Any).

The annotations are how the modules state shapes, units and what may be None; a checker
run keeps them true (introducing it found six real bugs, each with its own test).

Both checks pass against the stubs of every supported numpy and OpenCV (the lower-bound
environment of `make test-lower-bounds` runs them too). The libraries annotate arrays as
``numpy.typing.NDArray`` of their dtype (float arrays ``np.floating[Any]``, what numpy < 2.3's
stubs make of float64 arithmetic), never as a bare ``np.ndarray``: before numpy 2.3 the stubs
give ``np.ndarray`` no default type parameters, so --strict reports a bare one as missing them."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(importlib.util.find_spec("mypy") is None,
                                reason="mypy not installed (pip install -e '.[dev]')")


def _mypy(*arguments: str, cache: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(cache), *arguments],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_mypy_passes_on_the_packages(tmp_path):
    result = _mypy(cache=tmp_path / "mypy_cache")
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr


@pytest.mark.parametrize("library", ["promp", "retarget"])
def test_mypy_strict_passes_on_the_libraries(tmp_path, library):
    result = _mypy("--strict", "--disable-error-code", "no-any-return", library, cache=tmp_path / "mypy_cache")
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr
