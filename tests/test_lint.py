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


#: Files whose json.dumps writes a data format, not a figure for a user: protocol messages,
#: recordings, hashes and round-tripped data files (each refuses or cannot hold NaN where it
#: matters, or reads its own JSON back).
JSON_DATA_WRITERS = {"teleop/json_safe.py", "teleop/robot/target.py", "teleop/tuning/gains_io.py",
                     "teleop/tuning/experiment_data.py", "teleop/sim/actuator.py", "teleop/sim/calibration.py",
                     "teleop/sim/lockstep.py", "teleop/sim/recording_io.py", "teleop/record/codecs.py",
                     "teleop/record/channels.py", "teleop/benchmarks/record_bench.py", "teleop/video/web.py",
                     "teleop/jog/cli.py", "teleop/jog/camera_intrinsics.py"}


def test_every_json_figure_for_users_is_standard_json():
    """A --json output or a summary.json with a figure not measured printed a bare NaN (jq and
    browsers refuse it): `bench --json`, tune, info, demo, train, trial, jog wrote them with
    json.dumps. They go through teleop.json_safe.dumps (NaN -> null)."""
    offenders = [str(path.relative_to(ROOT)) for path in sorted((ROOT / "teleop").rglob("*.py"))
                 if "json.dumps(" in path.read_text(encoding="utf-8")
                 and str(path.relative_to(ROOT)) not in JSON_DATA_WRITERS]
    assert offenders == []
