"""teleop.benchmarks.cli imports the importlib.util it uses (found by the mypy pass)."""

import os
import subprocess
import sys
import sysconfig
from pathlib import Path


def test_available_benchmarks_without_the_site_module():
    # `import importlib` alone does not load importlib.util: only `site` (or another module)
    # happening to import it made `teleop bench` work. Without `site`, nothing else does.
    repo = Path(__file__).resolve().parents[1]
    paths = sysconfig.get_paths()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(repo), paths["purelib"], paths["platlib"]]))
    run = subprocess.run([sys.executable, "-S", "-c",
                          "from teleop.benchmarks.cli import available; print(sorted(available()))"],
                         env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "'wbc'" in run.stdout
