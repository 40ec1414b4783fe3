"""Strict priorities: a lower level never disturbs a higher one; weights trade off inside a level."""

import dataclasses

import numpy as np
import pytest

from teleop.control import WholeBodyController
from teleop.control.stack import load_stack, parse_stack


def task_velocities(controller, q, v):
    """J_k v of every task at q."""
    controller.kin.update(q)
    return {name: task.jacobian(controller.kin) @ v for name, task in controller.tasks.items()}


def one_tick(robot, mode, forearm_offset, elimination="nullspace"):
    """Default stack, same state and targets except the level-3 forearm targets; no
    acceleration bound and no ZMP rows (from rest they cap how fast the motion may start in
    this one tick, which leaves the lowest level no room: priorities are what is tested)."""
    config = dataclasses.replace(load_stack("default"), acceleration_limit=None, zmp_margin=None)
    controller = WholeBodyController(robot, config, mode=mode, contact_elimination=elimination)
    q = controller.q.copy()
    # Teleoperation-sized errors (no velocity bound saturates, so every level has room).
    controller.task("left_hand").set_target(controller.task("left_hand").target + [0.01, 0.005, 0.01])
    controller.task("com").set_target(controller.task("com").target + [0.0, 0.005])
    controller.task("torso").set_target(controller.task("torso").target + [0.03, 0.0, 0.05])
    forearm = controller.task("left_forearm")
    forearm.set_target(forearm.target + forearm_offset)
    output = controller.step()
    return controller, q, output


@pytest.mark.parametrize("elimination", ["nullspace", "equality"])
def test_lower_level_cannot_disturb_higher_levels(robot, elimination):
    results = []
    for offset in ([0.0, 0.0, 0.0, 0.0], [0.3, -0.3, 0.2, -0.2]):
        controller, q, output = one_tick(robot, "strict", np.array(offset), elimination)
        assert output.status == "ok"
        results.append(task_velocities(controller, q, output.v))
    levels = controller.task_levels
    for name, level in levels.items():
        difference = np.abs(results[0][name] - results[1][name]).max()
        if level < 3:
            assert difference < 1e-8, f"level-{level} task {name!r} moved by {difference}"
    # ...while the conflicting level-3 task does change the motion (the test can fail).
    assert np.abs(results[0]["left_forearm"] - results[1]["left_forearm"]).max() > 1e-3


def test_weighted_mode_trades_off_inside_the_level(robot):
    results = []
    for offset in ([0.0, 0.0, 0.0, 0.0], [0.3, -0.3, 0.2, -0.2]):
        controller, q, output = one_tick(robot, "weighted", np.array(offset))
        results.append(task_velocities(controller, q, output.v))
    assert np.abs(results[0]["left_hand"] - results[1]["left_hand"]).max() > 1e-4


def test_whole_body_posture_below_com_cannot_move_com_or_feet(robot):
    stack = parse_stack({
        "name": "conflict", "mode": "strict",
        "task": [
            {"name": "com", "type": "com", "axes": "xy", "level": 1, "gain": 10.0},
            {"name": "body", "type": "posture", "level": 2, "gain": 10.0,
             "joints": ["left_leg", "right_leg", "torso", "left_arm", "right_arm", "neck"]},
        ]})
    controller = WholeBodyController(robot, stack)
    com_target = controller.task("com").target.copy()
    body = controller.task("body")
    # A posture that would throw the CoM around: legs, torso and arms far from home.
    body.set_target(body.target + np.random.default_rng(0).uniform(-0.6, 0.6, body.dim))
    q0 = controller.q.copy()
    for _ in range(100):
        output = controller.step()
        assert output.status in ("ok", "relaxed")
    kin = controller.kin
    kin.update(controller.q)
    assert np.abs(kin.com()[:2] - com_target).max() < 1e-4
    assert controller.contacts.errors(kin).max() < 1e-4
    assert np.abs(controller.q[7:] - q0[7:]).max() > 0.1  # the posture did act where it could
