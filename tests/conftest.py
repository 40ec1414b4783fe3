"""Shared fixtures and helpers: the robot model and a simulation (built once per module:
loading the iCub meshes takes about a second), the location of the real recorded data, a
secret file for the stations, free loopback ports, and running the CLI in-process."""

from __future__ import annotations

import functools
import os
import shutil
import socket
from pathlib import Path

import pytest
from hypothesis import settings

# Property-based tests (the fuzzing of what arrives from the network or a file) run the same
# examples on every run, so that CI passes or fails for a change and not for a draw, keep no
# example database in the checkout, and set no per-example deadline (a loaded 2-core machine
# is slow at times, not wrong). TELEOP_FUZZ=explore draws new examples, for a fuzzing session.
settings.register_profile("teleop", derandomize=True, database=None, deadline=None)
settings.register_profile("explore", database=None, deadline=None, max_examples=2000)
EXPLORING = os.environ.get("TELEOP_FUZZ") == "explore"
settings.load_profile("explore" if EXPLORING else "teleop")


def fuzz_examples(n: int) -> int:
    """Examples a property draws: ``n`` in the tests' deterministic runs, at least 2000 in a
    fuzzing session (a property's own ``@settings(max_examples=n)`` overrides the profile's,
    so the explore profile alone would draw only ``n`` new ones)."""
    return max(n, 2000) if EXPLORING else n

REPO_ROOT = Path(__file__).resolve().parents[1]
#: The real recorded motion: ../shared/data beside the repository, or TELEOP_SHARED_DATA.
SHARED_DATA = Path(os.environ.get("TELEOP_SHARED_DATA") or REPO_ROOT.parent / "shared" / "data")
#: The product's own demonstrations (human motion, one folder per task).
SYNTHETIC = REPO_ROOT / "datasets" / "synthetic"


@functools.cache
def synthetic_takes(tasks: tuple[str, ...]) -> tuple:
    """The product's demonstrations of ``tasks`` (datasets/synthetic), retargeted to the iCub
    once per test session and tuple of tasks (a second or two a task), for every module that
    learns a library from them: tuple of :class:`teleop.takes.Take`, in :func:`teleop.takes.load_takes`'s
    order. Shared, so their arrays are read-only: a test that changed them in place would
    change them for the next module."""
    from teleop.robot.model import RobotModel
    from teleop.robot.target import robot_target
    from teleop.takes import load_takes

    takes = tuple(load_takes(SYNTHETIC, robot_target(RobotModel("icub")), tasks=list(tasks), progress=False))
    for take in takes:
        for array in (take.trajectory.times, take.trajectory.values, take.trajectory.valid):
            if array is not None:
                array.setflags(write=False)
    return takes


#: A folder in which nothing can be made, whoever runs the tests (root too; a read-only
#: folder does not stop root): Linux's /proc. The tests of "cannot write there" use it.
UNWRITABLE = Path("/proc")
needs_proc = pytest.mark.skipif(not (UNWRITABLE / "self").is_dir(),
                                reason="needs Linux's /proc, a folder in which even root can make nothing "
                                       "(the 'cannot write there' checks are tested there)")


def shared_data(*parts: str, needs: tuple[str, ...] = ()) -> Path:
    """Path inside ../shared/data, or skip the test when it is absent (a fresh clone), when
    it is a folder with no file in it (a data folder made but not filled), or when one of
    the files ``needs`` names (relative to it) is missing: the test then fails on what it
    checks, not on the data it lacks."""
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} not found: real-data test skipped (a fresh clone has no ../shared/data; "
                    "set TELEOP_SHARED_DATA to where it is)")
    if path.is_dir() and not any(p.is_file() for p in path.rglob("*")):
        pytest.skip(f"{path} holds no file: real-data test skipped (set TELEOP_SHARED_DATA to the data)")
    missing = [name for name in needs if not (path / name).exists()]
    if missing:
        pytest.skip(f"{path} lacks {', '.join(missing)}: real-data test skipped (set TELEOP_SHARED_DATA to the data)")
    return path


@pytest.fixture(scope="session")
def robot():
    from teleop.robot.model import RobotModel

    return RobotModel()


@pytest.fixture(scope="module")
def sim(robot):
    from teleop.sim.simulator import Simulation

    simulation = Simulation(robot)
    yield simulation
    simulation.close()


@pytest.fixture()
def station_sim(robot):
    """A fresh simulation without rendering, for one robot station (one test)."""
    from teleop.sim.simulator import Simulation

    simulation = Simulation(robot, visual=False)
    yield simulation
    simulation.close()


_PORTS_GIVEN: set[int] = set()


def free_port(kind: int = socket.SOCK_DGRAM) -> int:
    """A loopback port free at the time of asking (UDP unless ``kind`` says otherwise).

    Never the same port twice in one test run: the kernel may hand a just-closed port out again,
    and ``robot, video = free_port(), free_port()`` would then put two stations on one port.
    """
    while True:
        with socket.socket(socket.AF_INET, kind) as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        if port not in _PORTS_GIVEN:
            _PORTS_GIVEN.add(port)
            return port


def synthetic_dataset(root: Path, tasks: dict[str, int]) -> Path:
    """``root/<task>/<task>_<k>.npz``: the first takes of the embedded synthetic tasks."""
    for task, n in tasks.items():
        (root / task).mkdir(parents=True)
        for k in range(n):
            shutil.copy(SYNTHETIC / task / f"{task}_{k}.npz", root / task)
    return root


def error_line(err: str) -> str:
    """The ``teleop CMD: error: ...`` line (the progress bar may share stderr)."""
    lines = [ln for ln in err.splitlines() if ": error: " in ln]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0].split(": error: ", 1)[1]


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    """``teleop ARGV`` in-process: (exit code, stdout, stderr)."""
    from teleop.cli import main

    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture
def secret(tmp_path):
    """A station secret file (32 bytes, owner-only)."""
    path = tmp_path / "secret"
    path.write_bytes(b"0123456789abcdef0123456789abcdef")
    path.chmod(0o600)
    return path


@pytest.fixture
def motion_file(tmp_path) -> Path:
    """A 0.1 s, one-segment HumanMotion .npz at 100 Hz (the smallest motion a command reads)."""
    import numpy as np

    from retarget.human import SEGMENTS, HumanMotion

    times = np.arange(10) * 0.01
    quaternions = np.tile([1.0, 0.0, 0.0, 0.0], (10, 1, 1))
    motion = HumanMotion(times, SEGMENTS[:1], np.zeros((10, 1, 3)), quaternions, rate_hz=100.0)
    path = tmp_path / "m.npz"
    motion.save_npz(path)
    return path


@pytest.fixture()
def recording(tmp_path, capsys) -> Path:
    """A calibrate-sim test recording: 0.2 s of r_elbow (100 samples), as
    ``teleop calibrate-sim --make-test-recording`` writes it."""
    from teleop.cli import main

    path = tmp_path / "simrec.npz"
    assert main(["calibrate-sim", "--make-test-recording", str(path), "--groups", "r_elbow",
                 "--duration", "0.2"]) == 0
    capsys.readouterr()
    return path


def refused_camera_calibration(images: Path, out: Path) -> str:
    """The error of ``teleop calibrate-camera --images IMAGES --out OUT`` refusing to write a
    calibration that looks wrong; OUT is checked not written."""
    from teleop.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["calibrate-camera", "--images", str(images), "--out", str(out)])
    message = str(exc.value)
    assert message.startswith("teleop calibrate-camera: error: the calibration looks wrong, not written to")
    assert "--accept-problems" in message and not out.exists()
    return message


@pytest.fixture(autouse=True)
def _no_stop_request_left_behind():
    """A test that delivers a stop signal and catches its KeyboardInterrupt itself leaves the
    request pending (teleop.stop_request keeps it in module state), and the next test's first
    progress bar raised it: test_cli.py's signal tests then interrupted the whole run."""
    yield
    from teleop.stop_request import stop_handled

    stop_handled()


def python_blocks(text: str) -> list[str]:
    """The bodies of the ```python fenced blocks of a Markdown ``text``, in order."""
    import re

    return re.findall(r"^```python\n(.*?)^```$", text, flags=re.S | re.M)


def run_guide_examples(guide: Path, namespace: dict, least: int) -> list[str]:
    """Run every ```python block of the user guide ``guide`` in order, in ``namespace`` (as
    one reader's session, in the current folder); returns the blocks. A guide with fewer
    than ``least`` blocks, or a block that asserts nothing (it could rot silently), fails."""
    import linecache
    import re

    blocks = python_blocks(guide.read_text(encoding="utf-8"))
    assert len(blocks) >= least, f"{guide.name} lost its examples"
    label = f"{guide.parent.name}/{guide.name}"
    for number, block in enumerate(blocks, 1):
        assert re.search(r"^\s*assert ", block, flags=re.M), f"{label} python block {number} asserts nothing"
        name = f"{label}, python block {number}"
        # Registered so that a failing assert's traceback shows the guide's line.
        linecache.cache[name] = (len(block), None, block.splitlines(keepends=True), name)
        exec(compile(block, name, "exec"), namespace)
    return blocks
