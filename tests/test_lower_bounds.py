"""tools/lower_bounds.py: the constraints `make test-lower-bounds` installs, one pin per
declared lower bound, and a requirement that declares none is refused."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TOOL = REPO / "tools" / "lower_bounds.py"
sys.path.insert(0, str(TOOL.parent))

from lower_bounds import lower_bound_pins  # noqa: E402


def test_each_lower_bound_becomes_an_exact_pin():
    pins, unbounded = lower_bound_pins([
        "numpy>=2.2", "opencv-python-headless>=4.10.0.82", "pupil-apriltags >= 1.0.4.post4",
        "scipy>=1.13,<2", "openvr>=1.23; platform_system != 'Darwin'", "pin[extra]>=3.3.1",
        "NumPy>=9",                      # a repeat (an extra repeating a core dependency): first one wins
    ])
    assert pins == ["numpy==2.2", "opencv-python-headless==4.10.0.82", "pupil-apriltags==1.0.4.post4",
                    "scipy==1.13", "openvr==1.23", "pin==3.3.1"]
    assert unbounded == []


def test_a_requirement_without_a_lower_bound_is_reported():
    pins, unbounded = lower_bound_pins(["numpy", "scipy<2", "tqdm>=4.65", "mcap==1.2"])
    assert pins == ["tqdm==4.65"]
    assert unbounded == ["numpy", "scipy", "mcap"]


def test_the_project_declares_a_lower_bound_for_every_dependency(tmp_path):
    result = subprocess.run([sys.executable, str(TOOL), "--extra", "test"], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    pinned = result.stdout.split()
    # The dependencies and the test extra's (pytest, hypothesis), each pinned at its bound.
    assert len(pinned) == len(declared["dependencies"]) + len(declared["optional-dependencies"]["test"])
    assert {"pytest==7.4", "hypothesis==6.100"} <= set(pinned)
    assert all("==" in pin for pin in pinned)


def test_an_unbounded_dependency_fails_the_tool(tmp_path):
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\nname = "x"\ndependencies = ["numpy>=2.2", "scipy"]\n')
    result = subprocess.run([sys.executable, str(TOOL), "--pyproject", str(pyproject)], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 1
    assert result.stdout.split() == ["numpy==2.2"]
    assert "no lower bound (name>=version) for scipy" in result.stderr


def test_an_unknown_extra_is_a_usage_error(tmp_path):
    result = subprocess.run([sys.executable, str(TOOL), "--extra", "gpu"], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 2
    assert "no optional dependencies 'gpu'" in result.stderr
