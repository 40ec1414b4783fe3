"""The controller never crashes and never outputs garbage: rejections, fallbacks, statuses."""

import dataclasses

import numpy as np
import pytest

import teleop.control.solve as solve_module
from teleop.control import ReferenceTracker, SolveStatus, WholeBodyController
from teleop.control.stack import load_stack


def within_limits(robot, q, v):
    joints = q[7:]
    return (np.all(np.isfinite(q)) and np.all(np.isfinite(v)) and np.all(joints >= robot.limits.lower)
            and np.all(joints <= robot.limits.upper) and np.all(np.abs(v[6:]) <= robot.limits.velocity + 1e-12))


@pytest.fixture
def tracker(robot):
    return ReferenceTracker(robot)


def moving(home, k):
    return dataclasses.replace(home, t=0.01 * k, left_hand=home.left_hand + [0.001 * k, 0.0, 0.001 * k])


def test_nan_references_are_rejected_and_the_last_command_held(robot, tracker):
    home = tracker.reset()
    for k in range(1, 20):
        output = tracker.step(moving(home, k))
        assert output.status == SolveStatus.OK
    last = output.q.copy()
    hand_target = tracker.controller.task("left_hand").target.copy()
    bad = dataclasses.replace(moving(home, 20), right_hand=np.array([0.1, np.nan, 0.5]))
    held = tracker.step(bad)
    assert held.status == SolveStatus.REJECTED_TARGET
    assert "r.hand y" in tracker.status_message
    assert np.array_equal(held.q, last) and not held.v.any()
    # Nothing of the rejected sample was applied, not even its valid left hand.
    assert np.array_equal(tracker.controller.task("left_hand").target, hand_target)
    resumed = tracker.step(moving(home, 21))
    assert resumed.status == SolveStatus.OK and not np.array_equal(resumed.q, last)


@pytest.mark.parametrize("change, words", [
    (dict(left_hand=np.array([0.2, 1.6, 0.6])), "from the shoulder"),   # 1.5 m from the shoulder
    (dict(right_hand=np.array([0.9, -0.2, 0.5])), "from the shoulder"),
    (dict(left_hand=np.array([40.0, 0.0, 0.0])), "away"),
    (dict(com_xy=np.array([0.6, 0.0])), "support polygon"),
    (dict(waist_height=0.05), "waist height"),
    (dict(waist_height=1.5), "waist height"),
    (dict(neck=np.array([0.1])), "malformed"),
    (dict(torso=None), "malformed"),
    (dict(head_orientation=np.array([1.0, 0.0, 0.0])), "malformed"),
])
def test_out_of_workspace_references_are_rejected(robot, tracker, change, words):
    home = tracker.reset()
    tracker.step(dataclasses.replace(home, t=0.01))
    last = tracker.controller.last_command.copy()
    output = tracker.step(dataclasses.replace(home, t=0.02, **change))
    assert output.status == SolveStatus.REJECTED_TARGET
    assert words in tracker.status_message
    assert np.array_equal(output.q, last) and within_limits(robot, output.q, output.v)


def test_infeasible_constraints_fall_back_with_a_status(robot):
    # A 20 cm margin leaves no CoM position inside the shrunk polygon: the hard constraints
    # conflict, the polygon is dropped for that tick and the status says so.
    stack = dataclasses.replace(load_stack("default"), polygon_margin=0.2)
    for mode in ("weighted", "strict"):
        controller = WholeBodyController(robot, stack, mode=mode)
        controller.task("left_hand").set_target(controller.task("left_hand").target + [0.03, 0.0, 0.03])
        for _ in range(5):
            q, v, status, _ = controller.step()
            assert status == SolveStatus.RELAXED
            assert "support polygon" in controller.status_message
            assert within_limits(robot, q, v)
        controller.kin.update(q)
        assert controller.contacts.errors(controller.kin).max() < 1e-6


def test_solver_failure_holds_the_last_command(robot, monkeypatch):
    controller = WholeBodyController(robot, "default")
    for _ in range(3):
        controller.step()
    last = controller.last_command.copy()
    monkeypatch.setattr(solve_module, "solve_qp", lambda *args: (None, -1))
    q, v, status, timings = controller.step()
    assert status == SolveStatus.HELD and "QP failed" in controller.status_message
    assert np.array_equal(q, last) and not v.any()
    assert np.isfinite(timings.total_ms)


def test_a_failing_lower_level_keeps_the_higher_levels(robot, monkeypatch):
    controller = WholeBodyController(robot, "default", mode="strict")
    controller.task("left_hand").set_target(controller.task("left_hand").target + [0.02, 0.0, 0.0])
    real = solve_module.solve_qp
    calls = []

    def fail_third(*args):  # levels 1 and 2 solve, level 3 fails
        calls.append(1)
        return (None, -2) if len(calls) % 3 == 0 else real(*args)

    monkeypatch.setattr(solve_module, "solve_qp", fail_third)
    q, v, status, _ = controller.step()
    assert status == SolveStatus.RELAXED and "level 2" in controller.status_message
    assert controller.last_result.levels_solved == 2
    assert within_limits(robot, q, v)


def test_nan_measured_state_holds(robot):
    controller = WholeBodyController(robot, "default")
    last = controller.last_command.copy()
    q_bad = controller.q.copy()
    q_bad[10] = np.nan
    q, v, status, _ = controller.step(q_bad)
    assert status == SolveStatus.HELD and np.array_equal(q, last)


def test_closed_loop_on_a_measured_state_starts_from_it(robot):
    controller = WholeBodyController(robot, "default")
    measured = controller.q.copy()
    measured[7 + robot.joint_index("l_elbow")] += 0.05
    q, _, status, _ = controller.step(measured)
    assert status == SolveStatus.OK
    # The elbow posture target is the reset posture: the command starts from the measured
    # elbow and heads back towards it.
    elbow = 7 + robot.joint_index("l_elbow")
    assert controller.robot.home_joints()[elbow - 7] < q[elbow] < measured[elbow]


def test_timing_statistics_are_exposed(robot):
    controller = WholeBodyController(robot, "default", timing_window=50)
    stats = controller.timing_stats()
    assert stats["ticks"] == 0 and np.isnan(stats["total_p50_ms"])
    for _ in range(60):
        controller.step()
    stats = controller.timing_stats()
    assert stats["ticks"] == 50
    for key in ("build", "solve", "total"):
        assert 0 < stats[f"{key}_p50_ms"] <= stats[f"{key}_p99_ms"]
    assert stats["total_p99_ms"] <= stats["total_max_ms"]


def test_outputs_do_not_alias_the_internal_state(robot):
    controller = WholeBodyController(robot, "default")
    q, v, _, _ = controller.step()
    internal = controller.q.copy()
    q[:] = np.nan
    v[:] = np.nan
    assert np.array_equal(controller.q, internal)
    held = controller.hold()
    assert np.array_equal(held.q, internal) and np.all(np.isfinite(held.q))
