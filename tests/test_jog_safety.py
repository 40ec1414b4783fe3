"""Joint-space step safety: continuous-joint unwrapping, 90 deg jump guard, limits, velocity."""

from __future__ import annotations

import math

import numpy as np
import pytest

from teleop.jog.safety import JointSafety, continuous_joint_mask, unwrap_continuous


def test_unwrap_continuous_joint():
    mask = np.array([True, False])
    q = unwrap_continuous(np.radians([-179.0, -179.0]), np.radians([175.0, 175.0]), mask)
    assert np.allclose(np.degrees(q), [181.0, -179.0])  # only the continuous joint is shifted
    # Several turns away still lands within pi.
    q = unwrap_continuous(np.array([0.1 + 6 * math.pi]), np.array([0.0]), np.array([True]))
    assert np.isclose(q[0], 0.1)


@pytest.fixture(scope="module")
def wrist(robot):
    mask = np.zeros(robot.n_joints, dtype=bool)
    i = robot.joint_index("r_wrist_prosup")
    mask[i] = True  # the iCub has no continuous joint: declare one
    return mask, i


def test_icub_declares_no_continuous_joint(robot):
    assert not continuous_joint_mask(robot).any()


def test_continuous_joint_not_frozen_by_jump_guard(robot, wrist):
    """The PR2 freeze (§B.8): 175 deg -> -179 deg is a 6 deg step on a continuous joint."""
    mask, i = wrist
    q_from = robot.home_joints()
    q_from[i] = math.radians(175)
    q_to = q_from.copy()
    q_to[i] = math.radians(-179)
    ours = JointSafety(robot, continuous=mask, velocity_scale=1e3).check(q_from, q_to, 0.01)
    assert ours.ok and math.isclose(math.degrees(ours.q[i] - q_from[i]), 6.0, abs_tol=1e-9)
    # Without unwrapping the same step is a 354 deg jump and is refused.
    peer = JointSafety(robot, continuous=np.zeros_like(mask), velocity_scale=1e3).check(q_from, q_to, 0.01)
    assert not peer.ok and "jump" in peer.reason
    assert np.array_equal(peer.q, q_from)


def test_ninety_degree_guard(robot):
    safety = JointSafety(robot, velocity_scale=1e3)
    span = robot.limits.upper - robot.limits.lower
    i = int(np.argmax(span))  # a joint whose range allows a step over 90 deg
    assert span[i] > math.radians(100)
    q_from = robot.home_joints()
    q_from[i] = robot.limits.lower[i] + math.radians(1)
    for step_deg, ok in ((80.0, True), (89.0, True), (95.0, False)):
        q_to = q_from.copy()
        q_to[i] += math.radians(step_deg)
        check = safety.check(q_from, q_to, 0.01)
        assert check.ok == ok, (step_deg, check.reason)
        if not ok:
            assert "90" in check.reason and np.array_equal(check.q, q_from)


def test_joint_limits_refused(robot):
    safety = JointSafety(robot, velocity_scale=1e3)
    q_from = robot.home_joints()
    i = robot.joint_index("r_elbow")
    q_to = q_from.copy()
    q_to[i] = robot.limits.upper[i] + 0.05
    check = safety.check(q_from, q_to, 0.01)
    assert not check.ok and "limits" in check.reason


def test_velocity_limit_shortens_step_along_its_direction(robot):
    safety = JointSafety(robot)
    q_from = robot.home_joints()
    dt = 0.01
    step = np.zeros(robot.n_joints)
    a, b = robot.joint_index("r_shoulder_pitch"), robot.joint_index("r_elbow")
    step[a] = 3.0 * safety.velocity_limit[a] * dt   # 3x too fast
    step[b] = 1.0 * safety.velocity_limit[b] * dt
    check = safety.check(q_from, q_from + step, dt)
    assert check.ok and check.reason == "velocity limited"
    assert math.isclose(check.velocity_scale, 1 / 3, rel_tol=1e-9)
    taken = check.q - q_from
    assert np.all(np.abs(taken) <= safety.velocity_limit * dt + 1e-12)
    assert np.allclose(taken, step / 3)  # same direction: the hand keeps its path
    # A slow step passes untouched.
    slow = safety.check(q_from, q_from + 0.1 * step, dt)
    assert slow.ok and slow.reason == "" and np.allclose(slow.q, q_from + 0.1 * step)


def test_non_finite_refused(robot):
    q_from = robot.home_joints()
    q_to = q_from.copy()
    q_to[0] = np.nan
    assert not JointSafety(robot).check(q_from, q_to, 0.01).ok
