"""Regressions found in review: zero rows in the strict hierarchy, base quaternions that are
no rotation, stack entries refused with the file and entry named, relaxation messages."""

import numpy as np
import pytest

from teleop.control import StackError, WholeBodyController
from teleop.control.solve import HierarchyResult
from teleop.control.stack import load_stack, parse_stack


def arm_error_after(robot, tasks, ticks=300, change=None):
    """Error left on a left-arm posture task (the lowest level) 0.3 rad from its target on
    every joint, after ``ticks`` ticks (no polygon: nothing else limits the arm)."""
    stack = parse_stack({"name": "t", "mode": "strict", "support_polygon": {"enabled": False},
                         "task": tasks + [{"name": "arm", "type": "posture", "joints": "left_arm",
                                           "level": max(t["level"] for t in tasks) + 1, "gain": 10.0}]})
    controller = WholeBodyController(robot, stack)
    if change is not None:
        change(controller)
    arm = controller.task("arm")
    arm.set_target(arm.target + 0.3)
    for _ in range(ticks):
        assert controller.step().status == "ok", controller.status_message
    return controller.task_errors()["arm"]


def test_a_lower_level_repeating_a_higher_joint_does_not_block_the_levels_below(robot):
    """A level-2 posture on a level-1 joint has rows that vanish in level 1's null space;
    they must not take directions from level 3 (the arm posture then froze 3 joints: 0.52 rad)."""
    neck = {"name": "neck", "type": "posture", "joints": "neck", "level": 1, "gain": 10.0}
    assert arm_error_after(robot, [neck, {"name": "upper", "type": "posture", "joints": ["torso"],
                                          "level": 2, "gain": 10.0}]) < 1e-6
    assert arm_error_after(robot, [neck, {"name": "upper", "type": "posture", "joints": ["neck", "torso"],
                                          "level": 2, "gain": 10.0}]) < 1e-6


@pytest.mark.parametrize("at", ["stack", "run time"])
def test_pose_task_without_orientation_weight_leaves_its_directions_to_lower_levels(robot, at):
    """orientation_weight = 0 zeroes a frame pose's orientation rows: the lower levels keep
    those 3 directions, as with a position task (the arm posture stopped 0.40 rad short)."""
    pose = {"name": "hand", "type": "frame_pose", "frame": "left_hand", "level": 1, "gain": 10.0,
            "orientation_weight": 0.0 if at == "stack" else 1.0}

    def switch_off(controller):
        controller.task("hand").orientation_weight = 0.0
        controller.step()  # one tick with the old weight first: the change must be noticed

    assert arm_error_after(robot, [pose], change=None if at == "stack" else switch_off) < 1e-6
    with pytest.raises(ValueError):
        WholeBodyController(robot, parse_stack({"name": "t", "task": [pose]})).task("hand").orientation_weight = -1.0


def test_a_zero_base_quaternion_is_refused_not_turned_into_nan(robot):
    controller = WholeBodyController(robot, "default")
    q = controller.q.copy()
    q[3:7] = 0.0
    with pytest.raises(ValueError, match="quaternion"):
        controller.reset(q)
    assert np.all(np.isfinite(controller.step().q))
    # Measured: held (the last command, finite), not tracked from a degenerate base.
    before = controller.last_command.copy()
    output = controller.step(q)
    assert output.status == "held" and "quaternion" in controller.status_message
    np.testing.assert_array_equal(output.q, before)


def test_an_unnormalised_measured_quaternion_gives_the_normalised_command(robot):
    commands = []
    for scale in (1.0, 2.0):
        controller = WholeBodyController(robot, "default")
        controller.task("left_hand").set_target(controller.task("left_hand").target + [0.05, 0.0, 0.05])
        q = controller.q.copy()
        q[3:7] *= scale
        given = q.copy()
        commands.append(controller.step(q).q)
        np.testing.assert_array_equal(q, given)  # the caller's array is left alone
    np.testing.assert_allclose(commands[1], commands[0], atol=1e-12)


STACK = '''name = "t"
{top}
[[task]]
name = "com"
type = "com"
{task}
'''


@pytest.mark.parametrize("top, task, entry", [
    ("", 'weight = "heavy"', "weight"),
    ("", "gain = nan", "gain"),
    ("", "level = 1.5", "level"),
    ("", "axes = 3", "axes"),
    ("damping = -1.0", "", "damping"),
    ("damping = nan", "", "damping"),
    ("dt = inf", "", "dt"),
    ('dt = "fast"', "", "dt"),
    ("contacts = 5", "", "contacts"),
    ('[contacts]\nframes = "left_sole"', "", "contacts.frames"),
    ("[contacts]\ngain = nan", "", "contacts.gain"),
    ("[contacts]\ngain = -10.0", "", "contacts.gain"),
    ('[contacts]\nframes = ["left_foot"]', "", "contacts"),
    ('[support_polygon]\nenabled = "false"', "", "support_polygon.enabled"),
    ("[support_polygon]\nmargin = nan", "", "support_polygon.margin"),
    ("[support_polygon]\nzmp_margin = -0.1", "", "support_polygon.zmp_margin"),
    ("[limits]\nposition_gain = 0.0", "", "limits.position_gain"),
    ("[limits]\nvelocity_scale = 2.0", "", "limits.velocity_scale"),
    ("[limits]\nacceleration = { default = 20.0, lefty_leg = 5.0 }", "", "limits.acceleration"),
    ("", 'axes = "xq"', "axes"),
])
def test_bad_stack_entries_are_refused_naming_the_file_and_the_entry(robot, tmp_path, top, task, entry):
    """Refused when the file is loaded or the controller built (never a bare ValueError /
    TypeError, nor a controller that holds every tick or ignores the entry)."""
    path = tmp_path / "bad_stack.toml"
    path.write_text(STACK.format(top=top, task=task))
    with pytest.raises(StackError) as error:
        WholeBodyController(robot, load_stack(path))
    assert str(path) in str(error.value) and entry in str(error.value)


def test_unusual_valid_stack_entries_still_load(robot, tmp_path):
    path = tmp_path / "ok_stack.toml"
    path.write_text(STACK.format(top="damping = 0.0\n[contacts]\nframes = []\n[support_polygon]\n"
                                     "active_distance = inf\nzmp_margin = 0.0",
                                 task='level = 3\naxes = "xy"\nweight = 0'))
    controller = WholeBodyController(robot, load_stack(path))
    assert controller.step().status == "ok"


def test_the_relaxation_message_names_everything_dropped(robot):
    """When the polygon is dropped after the acceleration bound and the ZMP rows, the
    message says all three (it used to name the polygon only)."""
    controller = WholeBodyController(robot, "default")
    solve, calls = controller._solve, []

    def infeasible_twice(*args):
        calls.append(1)
        return HierarchyResult(None, 0, [-1]) if len(calls) <= 2 else solve(*args)

    controller._solve = infeasible_twice
    assert controller.step().status == "relaxed"
    message = controller.status_message
    assert all(part in message for part in ("joint acceleration bound", "ZMP rows", "support polygon"))
