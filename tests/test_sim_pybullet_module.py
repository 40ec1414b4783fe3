"""pybullet's start-up banner stays off the user's terminal."""

import subprocess
import sys


def test_importing_the_simulator_prints_nothing():
    # pybullet writes "pybullet build time: ..." to descriptor 2 on import; every command
    # that loaded the simulator printed it among its own messages.
    code = "import teleop.sim.simulator, teleop.sim.camera; print('imported')"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "imported\n"
    assert done.stderr == ""


def test_messages_written_after_the_import_still_reach_the_terminal():
    # The descriptor is restored after the import: later messages are not swallowed.
    code = ("import sys; from teleop.sim.pybullet_module import pb; "
            "print('after', file=sys.stderr); assert pb.getNumBodies is not None")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stderr == "after\n"
