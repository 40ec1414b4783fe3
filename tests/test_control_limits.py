"""Constraints: joint limits never violated, feet held, CoM kept inside the support polygon."""

import dataclasses

import numpy as np
import pytest

from teleop.control import WholeBodyController
from teleop.control.stack import load_stack
from teleop.control.tasks import PostureTask

DT = 0.01


def random_targets(controller, rng, home_targets):
    """Targets around home, postures up to 0.4 rad beyond the joint limits."""
    limits = controller.robot.limits
    for name, task in controller.tasks.items():
        home = home_targets[name]
        if isinstance(task, PostureTask):
            lower, upper = limits.lower[task.joint_indices], limits.upper[task.joint_indices]
            task.set_target(rng.uniform(lower - 0.4, upper + 0.4))
        elif name in ("left_hand", "right_hand"):
            task.set_target(home + rng.uniform(-0.15, 0.15, 3))
        elif name == "com":
            task.set_target(home + rng.uniform(-0.06, 0.06, 2))
        elif name == "waist_height":
            task.set_target(home + rng.uniform(-0.08, 0.03, 1))


@pytest.mark.parametrize("mode", ["weighted", "strict"])
def test_random_targets_never_violate_limits_and_keep_the_feet(robot, mode):
    controller = WholeBodyController(robot, "default", mode=mode)
    home_targets = {name: np.copy(getattr(t, "target", None)) for name, t in controller.tasks.items()}
    rng = np.random.default_rng(7 if mode == "strict" else 8)
    lower, upper, vmax = robot.limits.lower, robot.limits.upper, robot.limits.velocity
    touched = np.zeros(robot.n_joints, dtype=bool)
    for k in range(300):
        if k % 20 == 0:
            random_targets(controller, rng, home_targets)
        q, v, status, _ = controller.step()
        assert status in ("ok", "relaxed"), controller.status_message
        joints = q[7:]
        assert np.all(joints >= lower) and np.all(joints <= upper)
        assert np.all(np.abs(v[6:]) <= vmax + 1e-12)
        assert np.all(np.isfinite(q)) and np.all(np.isfinite(v))
        touched |= (joints <= lower + 1e-9) | (joints >= upper - 1e-9)
    controller.kin.update(controller.q)
    assert controller.contacts.errors(controller.kin).max() < 1e-4  # dead-beat drift correction
    assert touched.sum() >= 5  # the targets really drove joints onto their limits


@pytest.mark.parametrize("mode", ["weighted", "strict"])
def test_com_stays_inside_the_polygon_when_a_hand_pulls_it_out(robot, mode):
    def run(polygon_enabled):
        stack = dataclasses.replace(load_stack("default"), polygon_enabled=polygon_enabled)
        controller = WholeBodyController(robot, stack, mode=mode)
        # A far reach forward-down with the CoM task weakened: the hands drag the CoM.
        controller.task("com").weight = 1e-3
        for side in ("left", "right"):
            hand = controller.task(f"{side}_hand")
            hand.weight = 10.0
            hand.set_target(hand.target + [0.30, 0.0, -0.15])
        worst = np.inf
        reference = _polygon_of(controller)  # the soles' polygon shrunk by the 2 cm margin
        for _ in range(200):
            controller.step()
            controller.kin.update(controller.q)
            worst = min(worst, float(np.min(reference.slack(controller.kin.com()[:2]))))
        return worst

    margin_with = run(True)
    margin_without = run(False)
    # CoM at least `margin` (2 cm) inside the polygon at every tick, up to the constraint's
    # linearisation over one tick (micrometres).
    assert margin_with >= -2e-5
    assert margin_without < -0.01      # ...which the hands would otherwise have violated


def _polygon_of(controller):
    from teleop.control.limits import SupportPolygonConstraint

    polygon = SupportPolygonConstraint(margin=0.02)
    controller.robot.update(controller.q)
    polygon.set_polygon(controller.robot.support_polygon())
    return polygon
