"""Collision checks along the commanded path (interpolated states), not only at waypoints:
the reference's jog_control checked the target state only and hit an obstacle lying
between two free waypoints (§B.8); here the same course, in the real pybullet simulation."""

from __future__ import annotations

import numpy as np
import pinocchio as pin
import pytest

from teleop.jog.collision import CollisionWorld, interpolate
from teleop.jog.mapping import HandPose
from teleop.jog.session import JogController, JogSettings, SimulatedRobot
from teleop.sim.scene import Box, SceneObject, ShapePart

A = np.array([0.20, -0.26, 0.66])
B = np.array([0.20, -0.12, 0.66])


def _solve(robot, q0, goal):
    """Joint configuration with the hand at ``goal``: the jogging controller, no checks, run to convergence."""
    jog = JogController(robot, JogSettings(orientation=False, collision_checks=False), q0=q0)
    for k in range(150):
        jog.goal = HandPose(goal, jog.hand_pose(jog.q).rotation)
        jog.tick(k * 0.01)
    return jog.q.copy()


@pytest.fixture(scope="module")
def course(robot):
    q_a = _solve(robot, robot.home_configuration(), A)
    q_b = _solve(robot, q_a, B)
    data = robot.model.createData()
    pin.framesForwardKinematics(robot.model, data, interpolate(q_a, q_b, 0.5))
    middle = data.oMf[robot.frame_id("right_hand")].translation.copy()
    # A 1 cm x 1 cm x 5 cm bar where the hand passes half-way between the waypoints.
    bar = SceneObject("bar", (ShapePart(Box((0.01, 0.01, 0.05)), (0.8, 0.1, 0.1)),), tuple(middle))
    return q_a, q_b, bar


def test_waypoints_free_but_path_collides(robot, course):
    q_a, q_b, bar = course
    world = CollisionWorld(robot, [bar], "right")
    try:
        # What a waypoint-only check sees: both states free.
        assert world.contact(q_a) == "" and world.contact(q_b) == ""
        path = world.check_path(q_a, q_b)
        assert not path.free and "bar" in path.hit
        assert 0.0 < path.fraction < 1.0
        assert world.contact(path.q_safe) == ""
        # The states are spaced so that no robot point moves more than resolution_m between
        # two of them (the bound D / N); many states, where a waypoint check has one.
        n = int(np.ceil(world.displacement_bound(q_a, q_b) / world.resolution_m))
        assert n >= 5 and path.states_checked <= n
    finally:
        world.close()


def test_jogging_never_touches_the_bar(robot, course):
    q_a, _, bar = course
    goals = [B, A, B]
    # Waypoint-only execution (the peer): free targets are sent as joint ramps -> contact.
    q_b = course[1]
    sim = SimulatedRobot(robot, q_a, [bar], control_dt=0.01)
    for k in range(1, 51):
        sim.send(interpolate(q_a, q_b, k / 50))
    peer_contacts = sim.contact_steps
    sim.close()
    assert peer_contacts > 0

    jog = JogController(robot, JogSettings(orientation=False), obstacles=[bar], q0=q_a)
    sim = SimulatedRobot(robot, jog.q, [bar], control_dt=0.01)
    world = CollisionWorld(robot, [bar], "right")
    stopped = 0
    t = 0.0
    try:
        for goal in goals:
            for _ in range(60):
                jog.goal = HandPose(goal, jog.hand_pose(jog.q).rotation)
                report = jog.tick(t)
                stopped += report.status.startswith("stopped")
                assert world.contact(report.q) == ""
                sim.send(report.q)
                t += 0.01
        assert stopped > 0
        assert sim.contact_steps == 0
        # The hand stays on A's side of the bar.
        assert jog.hand_pose(jog.q).position[1] < bar.position[1]
    finally:
        world.close()
        sim.close()
        jog.close()


def test_self_collision_stops_the_arm(robot):
    """Hand driven into the body: the arm halts in its last free state, or moves along the
    contact without entering it (§B.8 self-collision); no committed state is in contact."""
    jog = JogController(robot, JogSettings(orientation=False))
    home = jog.hand_pose(jog.q)
    statuses = []
    for k in range(150):
        jog.goal = HandPose(home.position + [0.0, 0.12, 0.0], home.rotation)
        statuses.append(jog.tick(k * 0.01).status)
        assert jog.collisions.contact(jog.q) == ""
    assert any(s.startswith(("stopped before collision: self-collision", "slid along a collision: self-collision"))
               for s in statuses)
    jog.close()


def test_the_displacement_bound_holds_at_any_posture(robot):
    """D must bound how far any frame origin moves for a step from *any* posture: computed
    at the home posture only, a torso-pitch step with the arms raised moved a frame 28 mm
    against a bound of 23 mm, and the certificate "every point moves at most rho between
    checked states" did not hold."""
    from teleop.robot.model import NQ_BASE

    world = CollisionWorld(robot, [], "right")
    model, data = robot.model, robot.model.createData()
    rng = np.random.default_rng(1)
    lo, hi = robot.limits.lower, robot.limits.upper
    worst = 0.0
    try:
        for _ in range(150):
            q0 = robot.home_configuration().copy()
            q0[NQ_BASE:] = rng.uniform(lo, hi)
            joint = int(rng.integers(robot.n_joints))
            q1 = q0.copy()
            q1[NQ_BASE + joint] = np.clip(q0[NQ_BASE + joint] + rng.choice([-0.05, 0.05]), lo[joint], hi[joint])
            bound = world.displacement_bound(q0, q1)
            pin.framesForwardKinematics(model, data, q0)
            p0 = np.array([f.translation for f in data.oMf])
            pin.framesForwardKinematics(model, data, q1)
            p1 = np.array([f.translation for f in data.oMf])
            if bound > 0:
                worst = max(worst, float(np.linalg.norm(p1 - p0, axis=1).max()) / bound)
    finally:
        world.close()
    assert 0.0 < worst <= 1.0
