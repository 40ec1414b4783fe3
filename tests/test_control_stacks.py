"""Stack files: the presets load and run; malformed files are refused with a clear error."""

import dataclasses

import numpy as np
import pytest

from teleop.control import StackError, WholeBodyController, list_presets, load_stack
from teleop.control.stack import parse_stack
from teleop.control.tracker import ReferenceTracker

PRESETS = ["default", "ch2_icub", "ch4_icub", "ch5_icub", "c1", "c2"]


def test_the_thesis_presets_are_shipped():
    assert set(PRESETS) <= set(list_presets())


@pytest.mark.parametrize("name", PRESETS)
def test_preset_loads_and_tracks_references(robot, name):
    stack = load_stack(name)
    tracker = ReferenceTracker(robot, name)
    home = tracker.reset()
    kin = tracker.controller.kin
    hand = robot.model.getFrameId("l_hand")
    kin.update(tracker.controller.q)
    hand_start, com_start = kin.placement(hand).translation.copy(), kin.com()[:2].copy()
    for k in range(1, 11):
        refs = dataclasses.replace(home, t=0.01 * k, com_xy=home.com_xy + [0.0, 0.001 * k],
                                   left_hand=home.left_hand + [0.002 * k, 0.0, 0.0])
        q, v, status, _ = tracker.step(refs)
        assert status == "ok", tracker.status_message
    assert tracker.controller.n_levels == (1 if stack.mode == "weighted" else len(stack.levels))
    # Tracked, not only accepted: the references became the targets of the tasks bound to
    # them and the robot followed them. In 0.1 s the CoM reference moved 10 mm sideways
    # (measured 5.3 to 9.8 mm of CoM motion over the presets) and the left-hand one 20 mm
    # forward (4.8 to 10.5 mm on the presets with a hand task; the others have none).
    bound = {signal: task.name for signal, task, *_ in tracker._bindings}
    np.testing.assert_array_equal(tracker.controller.task(bound["com_xy"]).target, refs.com_xy)
    kin.update(tracker.controller.q)
    com_moved = kin.com()[:2] - com_start
    assert 0.004 < com_moved[1] <= 0.0105 and abs(com_moved[0]) < 0.001
    if "left_hand" in bound:
        np.testing.assert_array_equal(tracker.controller.task(bound["left_hand"]).target, refs.left_hand)
        assert 0.004 < kin.placement(hand).translation[0] - hand_start[0] <= 0.021
    assert ("/" in stack.expression()) == (stack.mode == "strict" and len(stack.levels) > 1)


def test_thesis_weights_and_gains_are_the_published_ones():
    ch5 = {t.name: t for t in load_stack("ch5_icub").tasks}
    assert (ch5["com"].weight, ch5["left_hand"].weight, ch5["waist_height"].weight, ch5["neck"].weight,
            ch5["torso"].weight, ch5["left_forearm"].weight) == (1.0, 0.73, 0.85, 1.0, 0.62, 0.11)
    c1 = {t.name: t for t in load_stack("c1").tasks}
    assert c1["left_hand"].gain == pytest.approx(0.0191 / 0.01)        # OpenSoT lambda per tick
    assert [c1[n].level for n in ("head", "com", "com_height", "torso", "left_hand",
                                  "left_forearm")] == [1, 2, 2, 2, 2, 3]
    c2 = {t.name: t for t in load_stack("c2").tasks}
    assert c2["chest"].level == 3 and c2["chest"].gain == pytest.approx(60.52)
    assert c2["left_arm"].weight == 0.8406


@pytest.mark.parametrize("mode", ["weighted", "strict"])
def test_equality_and_nullspace_contact_handling_agree(robot, mode):
    """The two ways of imposing the contacts give the same commands, tick after tick,
    with limits, the polygon and the ZMP rows active (the reaching target is far)."""
    controllers = [WholeBodyController(robot, "default", mode=mode, contact_elimination=elimination)
                   for elimination in ("nullspace", "equality")]
    for controller in controllers:
        controller.task("right_hand").set_target(controller.task("right_hand").target + [0.15, -0.10, 0.10])
        controller.task("com").set_target(controller.task("com").target + [0.03, 0.0])
    for _ in range(30):
        (q_a, v_a, status_a, _), (q_b, v_b, status_b, _) = (c.step() for c in controllers)
        assert status_a == status_b
        np.testing.assert_allclose(v_a, v_b, atol=1e-7)
        np.testing.assert_allclose(q_a, q_b, atol=1e-9)


def test_auto_contact_elimination_picks_per_mode(robot):
    assert load_stack("default").contact_elimination == "auto"
    assert WholeBodyController(robot, "default", mode="strict").contact_elimination == "nullspace"
    assert WholeBodyController(robot, "default", mode="weighted").contact_elimination == "equality"
    forced = WholeBodyController(robot, "default", mode="weighted", contact_elimination="nullspace")
    assert forced.contact_elimination == "nullspace"


BASE = {"name": "t", "task": [{"name": "com", "type": "com", "level": 1}]}


@pytest.mark.parametrize("change, message", [
    ({"modes": "strict"}, "unknown keys"),
    ({"mode": "lexicographic"}, "mode must be"),
    ({"task": []}, "at least one"),
    ({"task": [{"name": "a", "type": "com"}, {"name": "a", "type": "com"}]}, "duplicate"),
    ({"task": [{"name": "a", "type": "teleport"}]}, "type"),
    ({"task": [{"name": "a", "type": "com", "frame": "left_hand"}]}, "unknown keys"),
    ({"task": [{"name": "a", "type": "frame_position"}]}, "needs a frame"),
    ({"task": [{"name": "a", "type": "posture"}]}, "needs joints"),
    ({"task": [{"name": "a", "type": "com", "reference": "left_hand"}]}, "cannot track"),
    ({"task": [{"name": "a", "type": "com", "gain": 1.0, "lambda": 0.1}]}, "not both"),
    ({"task": [{"name": "a", "type": "com", "level": 0}]}, "level"),
    ({"contacts": {"elimination": "magic"}}, "elimination"),
    ({"support_polygon": {"margin": 0.1, "colour": "red"}}, "unknown keys"),
    ({"support_polygon": {"zmp_margin": 0.02, "zmp_model": "cart-table"}}, "zmp_model"),
    ({"limits": {"acceleration": -1.0}}, "acceleration must be > 0"),
    ({"limits": {"acceleration": {"default": "fast"}}}, "must be numbers"),
])
def test_malformed_stacks_are_refused(change, message):
    with pytest.raises(StackError, match=message):
        parse_stack(dict(BASE, **change))


def test_acceleration_limits_per_joint_group(robot):
    config = parse_stack(dict(BASE, limits={"acceleration": {"default": 20.0, "left_leg": 5.0}}))
    controller = WholeBodyController(robot, config)
    maximum = controller.acceleration_limit.maximum
    assert np.all(maximum[robot.group_indices("left_leg")] == 5.0)
    assert np.all(maximum[robot.group_indices("right_leg")] == 20.0)
    assert WholeBodyController(robot, parse_stack(BASE)).acceleration_limit is None


def test_unknown_frames_and_joints_are_refused(robot):
    for task in ({"name": "a", "type": "frame_position", "frame": "tail"},
                 {"name": "a", "type": "posture", "joints": ["l_elbow", "tail_joint"]}):
        with pytest.raises(StackError):
            WholeBodyController(robot, parse_stack({"name": "t", "task": [task]}))
    with pytest.raises(StackError, match="no stack"):
        load_stack("no_such_stack")
