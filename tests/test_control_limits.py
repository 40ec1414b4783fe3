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
    # Dead-beat position limits (gain 1): the default stack's 0.05 approaches a limit
    # asymptotically (5 % of the distance per tick), so joints would never touch it here.
    config = dataclasses.replace(load_stack("default"), position_limit_gain=1.0)
    controller = WholeBodyController(robot, config, mode=mode)
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


def test_zmp_rows_predict_the_multibody_zmp(robot):
    """The optional ZMP rows (``support_polygon.zmp_margin``): n_i . p(v) with p the
    multi-body ZMP of the next tick (centroidal momentum rate by finite difference, CoM
    advanced by J_c v dt) is exactly rows @ v plus the constant part."""
    import pinocchio as pin

    config = dataclasses.replace(load_stack("default"), zmp_margin=0.03)
    controller = WholeBodyController(robot, config, mode="weighted")
    polygon, model, dt = controller.polygon, robot.model, controller.dt
    assert polygon.n_rows == 2 * polygon.n_edges
    rng = np.random.default_rng(3)
    q = controller.q.copy()
    controller.kin.update(q)
    rows, bounds = np.zeros((polygon.n_rows, robot.nv)), np.zeros(polygon.n_rows)
    v_prev = 0.1 * rng.normal(size=robot.nv)
    polygon.fill(controller.kin, dt, rows, bounds)   # computes the centroidal map at q
    polygon.commanded(v_prev)
    polygon.fill(controller.kin, dt, rows, bounds)
    v = v_prev + 0.05 * rng.normal(size=robot.nv)
    data = model.createData()
    momentum = []
    for velocity in (v_prev, v):
        pin.computeCentroidalMomentum(model, data, q, velocity)
        momentum.append(data.hg.vector.copy())
    rate = (momentum[1] - momentum[0]) / dt
    com = pin.centerOfMass(model, data, q)
    com_next = com + pin.jacobianCenterOfMass(model, data, q) @ v * dt
    weight = robot.total_mass * 9.81
    zmp = np.array([com_next[0] - (rate[4] + com[2] * rate[0]) / weight,
                    com_next[1] + (rate[3] - com[2] * rate[1]) / weight])
    k = polygon.n_edges
    constant = polygon.normals @ (com[:2] - polygon._selector @ polygon._momentum)
    np.testing.assert_allclose(polygon.normals @ zmp, rows[k:] @ v + constant, atol=1e-12)
    # and the bound is the shrunk edge (the state is well inside: no recovery floor)
    np.testing.assert_allclose(bounds[k:], polygon.offsets - 0.03 - constant, atol=1e-12)
