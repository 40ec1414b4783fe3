"""Camera-to-base mapping (offset, scale, axis map), damping with slerp, relative clutch."""

from __future__ import annotations

import math

import numpy as np
import pinocchio as pin
import pytest

from teleop.jog.mapping import HandPose, RelativeJog, TagMapping, damp, parse_axis_map, slerp

FACING = np.diag([1.0, -1.0, -1.0])


def test_axis_map_parsing():
    A = parse_axis_map("-z,x,-y")
    assert np.array_equal(A @ [1.0, 2.0, 3.0], [-3.0, 1.0, -2.0])
    for bad in ("x,y", "x,x,z", "x,y,w"):
        with pytest.raises(ValueError):
            parse_axis_map(bad)


def test_position_offset_scale_axis_map():
    m = TagMapping(axis_map="-z,x,-y", scale=0.5, offset=np.array([0.4, -0.2, 0.9]))
    # Tag 0.1 m right of, 0.2 m above, 0.6 m in front of the camera.
    p = m.position([0.1, -0.2, 0.6])
    assert np.allclose(p, [0.4 - 0.3, -0.2 + 0.05, 0.9 + 0.1])
    # offset_for: "the tag here means the hand there".
    m.offset = m.offset_for([0.0, 0.0, 0.5], [0.2, -0.15, 0.6])
    assert np.allclose(m.position([0.0, 0.0, 0.5]), [0.2, -0.15, 0.6])
    # Tag moves up 4 cm (-y_cam): hand moves up 2 cm (scale 0.5).
    assert np.allclose(m.position([0.0, -0.04, 0.5]) - m.position([0.0, 0.0, 0.5]), [0, 0, 0.02])
    with pytest.raises(ValueError):
        TagMapping(scale=0.0)


def test_absolute_orientation_mapping():
    m = TagMapping()
    hand_ref = pin.exp3(np.array([0.1, 0.2, 0.3]))
    # Tag facing the camera = the hand at its reference orientation.
    assert np.allclose(m.absolute(np.zeros(3), FACING, hand_ref).rotation, hand_ref)
    # The tag turns about the camera's optical axis (z_cam); the hand turns about the mapped
    # axis (-x_base) by the same angle.
    turned = pin.exp3(np.array([0.0, 0.0, 0.3])) @ FACING
    R = m.absolute(np.zeros(3), turned, hand_ref).rotation
    assert np.allclose(pin.log3(R @ hand_ref.T), [-0.3, 0.0, 0.0], atol=1e-9)


def test_damping_steps_and_slerp():
    c = HandPose(np.zeros(3), np.eye(3))
    t = HandPose(np.array([0.1, -0.2, 0.05]), pin.exp3(np.array([0.0, 0.0, 1.0])))
    full = damp(c, t, 1.0)
    assert np.allclose(full.position, t.position) and np.allclose(full.rotation, t.rotation)
    half = damp(c, t, 0.5)
    assert np.allclose(half.position, 0.5 * t.position)
    assert np.allclose(pin.log3(half.rotation), [0.0, 0.0, 0.5])
    # Geometric approach: after n cycles (1 - s)^n of the distance remains (§B.5 [Note]).
    p = c
    for _ in range(5):
        p = damp(p, t, 0.3)
    assert np.isclose(np.linalg.norm(t.position - p.position), 0.7 ** 5 * np.linalg.norm(t.position))
    assert np.isclose(np.linalg.norm(pin.log3(p.rotation.T @ t.rotation)), 0.7 ** 5, atol=1e-9)
    for s in (0.0, 0.05, 1.2):
        with pytest.raises(ValueError):
            damp(c, t, s)
    assert np.allclose(slerp(np.eye(3), t.rotation, 0.25), pin.exp3(np.array([0.0, 0.0, 0.25])))


def test_relative_clutch_moves_hand_by_tag_delta():
    m = TagMapping(scale=1.0)
    rel = RelativeJog(m)
    hand = HandPose(np.array([0.2, -0.15, 0.55]), np.eye(3))
    with pytest.raises(RuntimeError):
        rel.target(np.zeros(3), FACING)
    tag0 = np.array([0.05, 0.02, 0.6])
    rel.engage(tag0, FACING, hand)
    # Tag moves 3 cm to the image's right and 2 cm towards the camera.
    goal = rel.target(tag0 + [0.03, 0.0, -0.02], FACING)
    assert np.allclose(goal.position - hand.position, [0.02, 0.03, 0.0])
    assert np.allclose(goal.rotation, hand.rotation)
    # Same delta in length (scale 1) wherever the tag started.
    assert np.isclose(np.linalg.norm(goal.position - hand.position), np.linalg.norm([0.03, 0.0, -0.02]))
    # Rotation delta: the tag turning by 0.2 rad turns the hand by 0.2 rad.
    turned = pin.exp3(np.array([0.2, 0.0, 0.0])) @ FACING
    assert math.isclose(np.linalg.norm(pin.log3(rel.target(tag0, turned).rotation)), 0.2, abs_tol=1e-9)
    # Release, move the tag back (like lifting a mouse), re-engage: the hand stays.
    rel.release()
    assert not rel.engaged
    rel.engage(tag0, FACING, goal)
    assert np.allclose(rel.target(tag0, FACING).position, goal.position)


def test_jog_controller_relative_clutch():
    """Whole chain (no simulation): relative mode moves the hand only while the clutch is held."""
    from teleop.jog.session import JogController, JogSettings
    from teleop.robot.model import RobotModel

    jog = JogController(RobotModel(), JogSettings(mode="relative", orientation=False, collision_checks=False))
    start = jog.hand_pose(jog.q).position.copy()
    tag = np.array([0.0, 0.0, 0.5])
    t = 0.0
    for _ in range(30):  # clutch released: the tag moves, the hand does not
        tag = tag + [0.0, -0.001, 0.0]
        jog.measure(t, tag, FACING)
        jog.tick(t, clutch=False)
        t += 0.01
    assert np.linalg.norm(jog.hand_pose(jog.q).position - start) < 1e-3
    anchor_tag = tag.copy()
    for _ in range(150):  # clutch held: tag moves up 3 cm then stays
        if tag[1] > anchor_tag[1] - 0.03:
            tag = tag + [0.0, -0.001, 0.0]
        jog.measure(t, tag, FACING)
        jog.tick(t, clutch=True)
        t += 0.01
    moved = jog.hand_pose(jog.q).position - start
    assert np.allclose(moved, [0.0, 0.0, 0.03], atol=0.003), moved
    jog.close()


def test_jogged_hand_answers_a_step_within_three_ticks():
    """A 1 cm step of the tag (absolute mode, no simulation): the commanded hand covers 60 %
    of it within 3 control ticks (75 % measured). With the default stack's 20 rad/s^2 arm
    acceleration bound it covered 45 % (the bound, not the task gain, set the loop's
    command-to-motion latency)."""
    from teleop.jog.filtering import OneEuroFilter, PoseFilter
    from teleop.jog.session import JogController, JogSettings
    from teleop.robot.model import RobotModel

    settings = JogSettings(orientation=False, collision_checks=False)
    # An unfiltered tag: this measures the controller, not the filter.
    pose_filter = PoseFilter(position=OneEuroFilter(min_cutoff_hz=1e6))
    jog = JogController(RobotModel(), settings, pose_filter=pose_filter)
    tag = np.array([0.0, 0.0, 0.5])
    jog.align_absolute(tag)
    start = jog.hand_pose(jog.q).position.copy()
    t = 0.0
    for _ in range(20):  # settle on the start
        jog.measure(t, tag, FACING)
        jog.tick(t)
        t += 0.01
    step = np.array([0.02, 0.0, 0.0])  # camera x: 1 cm of hand motion at scale 0.5
    goal = None
    covered = []
    for _ in range(6):
        jog.measure(t, tag + step, FACING)
        report = jog.tick(t)
        goal = report.goal.position if goal is None else goal
        covered.append(float(np.linalg.norm(jog.hand_pose(jog.q).position - start) / np.linalg.norm(goal - start)))
        t += 0.01
    assert np.linalg.norm(goal - start) > 0.009
    assert covered[2] >= 0.6, covered
    jog.close()


def test_only_the_jogged_arm_gets_the_faster_acceleration_bound():
    from teleop.control.stack import load_stack
    from teleop.jog.session import JogSettings, jog_stack

    default = load_stack("default").acceleration_limit
    stack = jog_stack(JogSettings(hand="left", arm_acceleration=70.0))
    assert stack.acceleration_limit["left_arm"] == 70.0
    assert "right_arm" not in stack.acceleration_limit
    assert {k: v for k, v in stack.acceleration_limit.items() if k != "left_arm"} == default
    with pytest.raises(ValueError, match="arm_acceleration"):
        JogSettings(arm_acceleration=0.0)
