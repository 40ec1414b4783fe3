"""A killed ``teleop trial --realtime`` takes its robot process with it.

The robot station of a real-time take runs in a ``multiprocessing`` spawn child. SIGINT and
SIGTERM reach the trial's cleanup, which stops the child; SIGKILL (or a hang-up before the
trial handled it) does not: the child, re-parented to init, used to keep ticking at ~70 %
CPU with its UDP sockets open, and with it multiprocessing's resource tracker. Here a small
driver process plays a take, is SIGKILLed, and every process it left must end by itself.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
TAKE = REPO_ROOT / "datasets" / "synthetic" / "squat" / "squat_0.npz"

#: Liveness bounds [s], generous for a loaded machine (the fixed child ends within a tick of
#: its parent's death, or as soon as its start-up is done); the old child never ended.
START_BOUND_S = 120.0
EXIT_BOUND_S = 60.0

DRIVER = textwrap.dedent("""
    import sys
    from teleop.robot.model import RobotModel
    from teleop.robot.target import robot_target
    from teleop.takes import load_take
    from teleop.trials import realtime

    class AnnouncedReplay(realtime._ReferenceReplay):
        # Built once the robot process is up and ticking: says so to the test.
        def __init__(self, *args):
            super().__init__(*args)
            print("replaying", flush=True)

    realtime._ReferenceReplay = AnnouncedReplay
    take = load_take(sys.argv[1], "squat", robot_target(RobotModel())).trajectory
    # A long rest before the motion: the take is still playing when the test kills us.
    realtime.run_take_realtime(take, 1.5, None, settings=realtime.RealtimeSettings(lead_in=600.0))
""")

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds the processes through /proc")


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, parent pid, start time) of a process; None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()   # after "pid (comm) ", which may hold spaces
    return fields[0], int(fields[1]), int(fields[19])


def _multiprocessing_children(parent: int) -> dict[int, tuple[int, str]]:
    """The parent's children started by multiprocessing (the robot process and the resource
    tracker): pid -> (start time, command line)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        stat = _stat(int(entry.name))
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if stat is not None and stat[1] == parent and "multiprocessing" in cmdline:
            found[int(entry.name)] = (stat[2], cmdline)
    return found


def _running(pid: int, started: int) -> bool:
    """Whether that process (not a later one with its pid) still runs: a zombie has ended."""
    stat = _stat(pid)
    return stat is not None and stat[2] == started and stat[0] not in "ZX"


def _wait_until(condition, bound: float, every: float = 0.05):
    """Poll ``condition`` until it is truthy or ``bound`` seconds passed; its last value."""
    deadline = time.monotonic() + bound
    while True:
        value = condition()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(every)


def _kill_driver_and_check_its_children_end(driver: subprocess.Popen, children: dict[int, tuple[int, str]]) -> None:
    assert any("spawn_main" in cmdline for _, cmdline in children.values()), children   # the robot process
    try:
        driver.send_signal(signal.SIGKILL)      # no cleanup of the driver's can run
        driver.wait(30)

        def left() -> dict[int, str]:
            return {pid: cmdline for pid, (started, cmdline) in children.items() if _running(pid, started)}

        _wait_until(lambda: not left(), EXIT_BOUND_S, every=0.2)
        assert not left(), f"still running {EXIT_BOUND_S:g} s after their parent was killed: {left()}"
    finally:
        for pid, (started, _) in children.items():   # the old code's orphans
            if _running(pid, started):
                os.kill(pid, signal.SIGKILL)


def _start_driver(log: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
    with open(log, "wb") as stderr:
        return subprocess.Popen([sys.executable, "-c", DRIVER, str(TAKE)], env=env, cwd=REPO_ROOT,
                                stdout=subprocess.PIPE, stderr=stderr)


def test_the_robot_process_ends_when_the_trial_is_killed_mid_take(tmp_path):
    driver = _start_driver(tmp_path / "driver.log")
    try:
        ready, _, _ = select.select([driver.stdout], [], [], START_BOUND_S)
        assert ready and driver.stdout.readline() == b"replaying\n", (tmp_path / "driver.log").read_text()[-2000:]
        children = _multiprocessing_children(driver.pid)
        _kill_driver_and_check_its_children_end(driver, children)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
        driver.stdout.close()


def test_the_robot_process_ends_when_the_trial_is_killed_while_it_starts(tmp_path):
    """Killed while the robot process still loads (imports, simulation): it must not go on to
    serve a take nobody plays."""
    driver = _start_driver(tmp_path / "driver.log")
    try:
        def robot_process_started() -> bool:
            return driver.poll() is not None or any("spawn_main" in cmdline for _, cmdline
                                                    in _multiprocessing_children(driver.pid).values())

        _wait_until(robot_process_started, START_BOUND_S)
        assert driver.poll() is None, (tmp_path / "driver.log").read_text()[-2000:]
        _kill_driver_and_check_its_children_end(driver, _multiprocessing_children(driver.pid))
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
        driver.stdout.close()
