"""Bugs found while typing teleop/sim, teleop/robot and teleop/control (mypy pass)."""

from __future__ import annotations

import pytest

from teleop.control.stack import StackError, TaskSpec, build_task
from teleop.sim.simulator import Simulation


def test_explicit_servo_steps_zero_times(robot):
    """``step(0)`` under the explicit servo is a no-op, as under pybullet's motors (it
    raised UnboundLocalError: the torques of the last step were read with no step made)."""
    with Simulation(robot, visual=False, fixed_base=True, servo="explicit", collisions=False) as sim:
        assert sim.step(0) == 0.0
        assert not sim.applied_joint_torques().any()
        assert sim.step(1) == pytest.approx(sim.dt)


@pytest.mark.parametrize("kind", ["frame_position", "frame_orientation", "frame_pose"])
def test_frame_task_spec_without_frame_is_a_stack_error(robot, kind):
    """A frame task made in code without a frame: a StackError naming the task (pinocchio
    was given None and raised a Boost.Python signature dump)."""
    spec = TaskSpec(name="hand", type=kind, level=1, weight=1.0, gain=1.0)
    with pytest.raises(StackError, match="task 'hand': .*needs a frame"):
        build_task(spec, robot)
