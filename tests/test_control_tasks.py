"""Each task of the whole-body controller converges alone, at the rate its gain says."""

import numpy as np
import pinocchio as pin
import pytest

from teleop.control import InvalidTarget, WholeBodyController
from teleop.control.stack import parse_stack

DT = 0.01


def single_task(robot, **task):
    """A controller with one weighted task on the standing robot (feet held)."""
    stack = parse_stack({"name": "single", "mode": "weighted",
                         "support_polygon": {"enabled": False},
                         "task": [dict({"name": "t", "level": 1, "gain": 10.0}, **task)]})
    controller = WholeBodyController(robot, stack)
    return controller, controller.task("t")


def run(controller, task, ticks):
    """Error norms before the first tick (index 0) and after each tick."""
    errors = [controller.task_errors()["t"]]
    for _ in range(ticks):
        controller.step()
        errors.append(controller.task_errors()["t"])
    return np.array(errors)


@pytest.mark.parametrize("task, target", [
    (dict(type="frame_position", frame="left_hand"), lambda c, t: t.target + [0.03, -0.02, 0.04]),
    (dict(type="frame_position", frame="right_hand", axes="xz"), lambda c, t: t.target + [0.02, 0.03]),
    (dict(type="com", axes="xy"), lambda c, t: t.target + [0.015, 0.02]),
    (dict(type="com", axes="z"), lambda c, t: t.target - 0.03),
    (dict(type="waist_height", frame="waist"), lambda c, t: t.target - 0.04),
    (dict(type="posture", joints="neck"), lambda c, t: t.target + [0.2, -0.1, 0.3]),
    (dict(type="posture", joints=["torso_pitch", "l_elbow"]), lambda c, t: t.target + [0.2, 0.3]),
])
def test_translational_and_posture_tasks_converge(robot, task, target):
    controller, t = single_task(robot, **task)
    t.set_target(target(controller, t))
    errors = run(controller, t, 80)
    assert errors[-1] < 2e-3 * errors[0] + 1e-6
    # b = gain * e: after one time constant (10 ticks at 10/s) the error is (1 - 0.1)^10 =
    # 0.35 of the initial one for a linear task, a bit more or less for nonlinear ones.
    assert 0.25 < errors[10] / errors[0] < 0.45


@pytest.mark.parametrize("frame", ["head", "chest", "left_hand", "waist"])
def test_orientation_task_converges(robot, frame):
    controller, t = single_task(robot, type="frame_orientation", frame=frame)
    t.set_target(pin.rpy.rpyToMatrix(0.05, -0.1, 0.15) @ t.target)
    errors = run(controller, t, 80)
    assert errors[-1] < 5e-3 * errors[0]
    # At the rate its gain says: the rotation error (|log3|, 0.19 rad here) shrinks by
    # 1 - gain dt = 0.9 per tick, 0.9^10 = 0.349 after one time constant (measured 0.3486
    # to 0.3488 on the four frames; twice the gain would leave 0.107).
    assert errors[10] / errors[0] == pytest.approx(0.9 ** 10, rel=0.01)
    np.testing.assert_allclose(errors[1:11] / errors[:10], 0.9, atol=2e-3)


def test_pose_task_converges_with_separate_gains(robot):
    controller, t = single_task(robot, type="frame_pose", frame="right_hand", orientation_gain=5.0)
    target = pin.SE3(pin.rpy.rpyToMatrix(0.1, 0.0, -0.1) @ t.target.rotation, t.target.translation + [0.03, 0.0, 0.03])
    t.set_target(target)
    first = t.error(controller.kin)
    for _ in range(10):
        controller.step()
    controller.kin.update(controller.q)
    after = t.error(controller.kin)
    # Position at 10/s, orientation at 5/s: after 0.1 s, ~0.35 and ~0.6 of the error remain.
    assert np.linalg.norm(after[:3]) / np.linalg.norm(first[:3]) < 0.45
    assert 0.45 < np.linalg.norm(after[3:]) / np.linalg.norm(first[3:]) < 0.75
    for _ in range(150):
        controller.step()
    controller.kin.update(controller.q)
    assert np.linalg.norm(t.error(controller.kin)) < 1e-3


def test_feedforward_removes_the_tracking_lag(robot):
    lags = {}
    for use_feedforward in (False, True):
        controller, t = single_task(robot, type="posture", joints=["neck_yaw"])
        start = t.target.copy()
        speed = 0.3  # rad/s
        for k in range(1, 62):
            t.set_target(start + speed * k * DT, velocity=[speed] if use_feedforward else None)
            if k == 61:  # the error between the new target and the state it applies to
                lags[use_feedforward] = abs(controller.task_errors()["t"])
            controller.step()
    assert lags[False] == pytest.approx(speed / 10.0, rel=0.15)  # steady lag v / gain
    assert lags[True] < 1e-3 * lags[False] + 1e-9


def test_targets_are_validated_and_the_old_target_kept(robot):
    controller, t = single_task(robot, type="frame_position", frame="left_hand")
    good = t.target.copy()
    for bad in ([np.nan, 0.0, 0.0], [0.0, np.inf, 0.0], [0.1, 0.2], "left", None):
        with pytest.raises(InvalidTarget):
            t.set_target(bad)
        assert np.array_equal(t.target, good)
    with pytest.raises(InvalidTarget):
        t.set_target(good, velocity=[0.0, np.nan, 0.0])
    with pytest.raises(ValueError):
        t.weight = -1.0
    with pytest.raises(ValueError):
        t.gain = float("nan")


def test_waist_task_holds_the_pelvis_upright_while_the_height_changes(robot):
    controller, t = single_task(robot, type="waist_height", frame="waist", orientation_weight=0.5)
    upright = t.orientation_target.copy()
    t.set_orientation_target(pin.rpy.rpyToMatrix(0.0, 0.08, 0.0) @ upright)  # lean 0.08 rad
    t.set_target(t.target - 0.05)
    errors = run(controller, t, 120)
    assert errors[-1] < 1e-3 * errors[0]
    controller.kin.update(controller.q)
    rotation = controller.kin.placement(t.frame_id).rotation
    assert np.linalg.norm(pin.log3(t.orientation_target @ rotation.T)) < 1e-4
    with pytest.raises(ValueError):
        t.orientation_weight = 0.0  # would change the task's size
