"""Audit of AprilTag jogging and the lock-step coupling against the reference
(../shared/reference/controller_coupling_and_jogging.md): Part B (Wieczorek 2020: relative
and absolute jogging, jog_control's pipeline, the absolute-jogging extension, AprilTags, the
issues of §B.9) and Part A §A.3-§A.6 (Lohmann 2022: lock-step timing, data, handshake,
controller modes).

Each test works one case by hand. Real components throughout: tags rendered by
:mod:`teleop.jog.render` and found by the OpenCV AprilTag 36h11 detector, the whole-body
jogging controller, pybullet collision worlds, and the lock-step server and client over
loopback TCP. No test asserts a wall-clock time.

Frames (reference §B.6 [NOT IN SOURCE], :mod:`teleop.jog.mapping`): camera x right, y down,
z forward [m]; base x forward, y left, z up [m]; default axis map "-z,x,-y", i.e.
base = A cam with A = [[0, 0, -1], [1, 0, 0], [0, -1, 0]].
"""

from __future__ import annotations

import math
import threading
import time

import numpy as np
import pinocchio as pin
import pytest

from teleop.jog.camera_intrinsics import CameraCalibration
from teleop.jog.collision import CollisionWorld, interpolate
from teleop.jog.detection import ArucoTagDetector, TagDetection
from teleop.jog.filtering import PoseFilter
from teleop.jog.mapping import HandPose, RelativeJog, TagMapping, damp
from teleop.jog.render import FACING_CAMERA, rotation_from_rpy, tag_scene
from teleop.jog.safety import JointSafety
from teleop.jog.session import JogController, JogSettings
from teleop.robot.model import NQ_BASE
from teleop.sim import lockstep as ls
from teleop.sim.lockstep_client import LockstepClient
from teleop.sim.scene import Box, SceneObject, ShapePart

#: The default axis map written out by hand (base x = -z_cam, y = x_cam, z = -y_cam).
A = np.array([[0.0, 0.0, -1.0], [1.0, 0.0, 0.0], [0.0, -1.0, 0.0]])
FPS = 60.0
#: Where the tag starts: facing the camera squarely, 0.4 m ahead (camera frame) [m].
P0 = np.array([0.0, 0.0, 0.4])
TAG_M = 0.08
CAL = CameraCalibration.pinhole(640, 480, 60.0)


def _angle_deg(R1: np.ndarray, R2: np.ndarray) -> float:
    """Angle of the rotation between two (3, 3) rotations [deg]."""
    return math.degrees(float(np.linalg.norm(pin.log3(R1.T @ R2))))


def _rot(axis: np.ndarray, deg: float) -> np.ndarray:
    """(3, 3) rotation by ``deg`` about the (3,) unit ``axis``."""
    return pin.exp3(np.asarray(axis, dtype=float) * math.radians(deg))


@pytest.fixture(scope="module")
def detect():
    """Render the tag (noise-free, sharp) at (R (3, 3), t (3,) [m]) and detect it for real."""
    scene = tag_scene(TAG_M, CAL.K, seed=3)
    detector = ArucoTagDetector(CAL, TAG_M)

    def run(R: np.ndarray, t: np.ndarray) -> TagDetection:
        found = detector.detect(scene.render([(R, np.asarray(t, dtype=float))]))
        assert len(found) == 1, "the rendered tag was not detected"
        return found[0]

    return run


def _feed(jog: JogController, d: TagDetection | None, k0: int, n: int, clutch: bool = False):
    """``n`` camera frames (one per control tick, at 60 frames/s) of detection ``d`` (None:
    no tag seen), from frame ``k0``; returns (next frame number, last TickReport)."""
    report = None
    for k in range(k0, k0 + n):
        t = k / FPS
        jog.measure(t, None if d is None else d.t, None if d is None else d.R)
        report = jog.tick(t, clutch=clutch)     # tick at the frame's time: age 0, no extrapolation
    return k0 + n, report


def _inward_camera_step(jog: JogController, robot, length_m: float) -> np.ndarray:
    """(3,) camera-frame tag displacement that the default mapping turns into ``length_m``
    of hand motion towards the shoulder (keeps goals inside the reach sphere)."""
    data = robot.model.createData()
    pin.framesForwardKinematics(robot.model, data, jog.q)
    shoulder = data.oMf[robot.frame_id(f"{jog.settings.hand[0]}_shoulder_pitch")].translation
    hand = jog.hand_pose(jog.q).position
    inward = (shoulder - hand) / np.linalg.norm(shoulder - hand)
    return A.T @ (length_m * inward)      # A is orthogonal: cam = A^T base


# ----------------------------------------------------------------------------- Part B
def test_default_axis_map_and_defaults_are_the_documented_ones():
    """§B.5/§B.6: collision checking on by default, s = 1.0 by default; the default axis map
    is the A of the module docstring (a proper rotation: no mirroring)."""
    s = JogSettings()
    assert s.collision_checks and s.damping == 1.0 and s.mode == "absolute"
    np.testing.assert_array_equal(TagMapping().axis_map, A)
    assert np.linalg.det(A) == pytest.approx(1.0)


def test_absolute_goal_is_the_mapped_pose_of_a_rendered_tag_moved_by_a_known_transform(robot, detect):
    """§B.2/§B.5/§B.6 absolute jogging: the tag pose *replaces* the hand goal.

    By hand: the tag moves by d_cam = (0.03, -0.02, -0.04) m and turns 8 deg about the
    camera's x axis. With scale 0.5 and A: the goal moves by 0.5 A d_cam =
    0.5 (0.04, 0.03, 0.02) = (0.020, 0.015, 0.010) m, and turns 8 deg about A e_x = base +y,
    left-multiplied: R_goal = Ry(8 deg) R_hand0. Moved back, the goal is back at the start.
    """
    settings = JogSettings(mapping=TagMapping(scale=0.5), collision_checks=False)
    jog = JogController(robot, settings)
    try:
        hand0 = jog.hand_pose(jog.q)
        d0 = detect(FACING_CAMERA, P0)
        # What `teleop jog` does at the first sighting (run.py): this tag pose = this hand pose.
        jog.align_absolute(d0.t)
        settings.mapping.tag_reference = d0.R.copy()
        d_cam = np.array([0.03, -0.02, -0.04])
        d1 = detect(rotation_from_rpy(math.radians(8.0), 0.0, 0.0) @ FACING_CAMERA, P0 + d_cam)
        k, r = _feed(jog, d0, 0, 10)
        np.testing.assert_allclose(r.goal.position, hand0.position, atol=1e-9)
        k, r = _feed(jog, d1, k, 150)
        # Exactly the mapping of the detected pose (the filter has converged on it)...
        np.testing.assert_allclose(r.goal.position, hand0.position + 0.5 * A @ (d1.t - d0.t), atol=2e-4)
        # ...and, within the detector's error, the hand-worked motion.
        np.testing.assert_allclose(r.goal.position - hand0.position, [0.020, 0.015, 0.010], atol=1.5e-3)
        assert r.orientation_followed
        # (The detector's rotation error on this rendered tag: under 0.5 deg with OpenCV 5, 0.52 deg
        # with 4.10, the lower bound; a wrong axis mapping would be off by 8 deg or more.)
        assert _angle_deg(r.goal.rotation, _rot([0, 1, 0], 8.0) @ hand0.rotation) < 1.0
        # Absolute: back where it was seen first = back where the hand started.
        k, r = _feed(jog, d0, k, 150)
        np.testing.assert_allclose(r.goal.position, hand0.position, atol=2e-4)
        assert _angle_deg(r.goal.rotation, hand0.rotation) < 0.2
    finally:
        jog.close()


def test_relative_goal_adds_the_tag_motion_and_the_clutch_ratchets(robot, detect):
    """§B.2/§B.3 relative jogging *adds* the tag's motion since the clutch was pressed.

    By hand: the tag goes p0 -> p1 clutched (goal = hand0 + delta), back p1 -> p0 released
    (goal stays), p0 -> p1 clutched again: relative ends at hand0 + 2 delta (like lifting a
    mouse); absolute, the same tag motion ends at hand0 + delta.
    """
    ends = {}
    for mode in ("relative", "absolute"):
        settings = JogSettings(mode=mode, collision_checks=False, orientation=False)
        jog = JogController(robot, settings)
        try:
            hand0 = jog.hand_pose(jog.q).position
            d_cam = _inward_camera_step(jog, robot, 0.02)
            delta = A @ d_cam
            d0, d1 = detect(FACING_CAMERA, P0), detect(FACING_CAMERA, P0 + d_cam)
            if mode == "absolute":
                jog.align_absolute(d0.t)
            k, r = _feed(jog, d0, 0, 5, clutch=True)
            np.testing.assert_allclose(r.goal.position, hand0, atol=1e-9)
            k, r = _feed(jog, d1, k, 150, clutch=True)
            np.testing.assert_allclose(r.goal.position, hand0 + (d1.t @ A.T - d0.t @ A.T), atol=2e-4)
            k, r = _feed(jog, d0, k, 150, clutch=False)      # released: the tag moves back alone
            if mode == "relative":
                np.testing.assert_allclose(r.goal.position, hand0 + A @ (d1.t - d0.t), atol=2e-4)
            k, r = _feed(jog, d0, k, 5, clutch=True)
            k, r = _feed(jog, d1, k, 150, clutch=True)
            ends[mode] = r.goal.position - hand0
        finally:
            jog.close()
    np.testing.assert_allclose(ends["relative"], 2 * delta, atol=2.5e-3)
    np.testing.assert_allclose(ends["absolute"], delta, atol=2.5e-3)


def test_relative_orientation_change_is_left_multiplied_in_the_base_frame():
    """§B.3 B: orientation = quat(angular delta) x current orientation, i.e. the change acts
    in the base frame. By hand: the tag turns 30 deg about camera z, A e_z = base -x, so the
    hand turns 30 deg about base -x on the left of its anchor orientation; the tag's 0.1 m
    along camera x is 0.2 m along base y at scale 2."""
    jog = RelativeJog(TagMapping(scale=2.0))
    R_hand = _rot(np.array([1.0, 2.0, 3.0]) / math.sqrt(14.0), 50.0)     # not the identity
    jog.engage(np.array([0.0, 0.0, 0.5]), FACING_CAMERA, HandPose(np.array([0.2, -0.1, 0.6]), R_hand))
    out = jog.target(np.array([0.1, 0.0, 0.5]), _rot([0, 0, 1], 30.0) @ FACING_CAMERA)
    np.testing.assert_allclose(out.position, [0.2, 0.1, 0.6], atol=1e-12)
    np.testing.assert_allclose(out.rotation, _rot([-1, 0, 0], 30.0) @ R_hand, atol=1e-12)
    assert _angle_deg(out.rotation, R_hand @ _rot([-1, 0, 0], 30.0)) > 1.0    # not the body frame


def test_damping_factor_is_eq_5_2_with_slerp_and_its_range(robot):
    """§B.5 C: j = c + s (t - c), orientation by slerp with the same s, s in [0.1, 1].

    By hand: with s = 0.5 the remaining distance after n cycles is 0.5^n d0 (and the angle
    0.5^n theta0); s = 1 lands on the target. In the controller the damped target is taken
    from the committed hand pose c: a goal 6 mm away gives a target 3 mm away."""
    c = HandPose(np.zeros(3), np.eye(3))
    t = HandPose(np.array([0.08, 0.0, -0.06]), _rot([0, 0, 1], 40.0))
    j = c
    for n in range(1, 6):
        j = damp(j, t, 0.5)
        assert np.linalg.norm(t.position - j.position) == pytest.approx(0.1 * 0.5 ** n, rel=1e-9)
        assert _angle_deg(j.rotation, t.rotation) == pytest.approx(40.0 * 0.5 ** n, rel=1e-6)
    one = damp(c, t, 1.0)
    np.testing.assert_allclose(one.position, t.position)
    np.testing.assert_allclose(one.rotation, t.rotation, atol=1e-12)
    for s in (0.0, 0.05, 1.01):          # 0 excluded: the robot would never move
        with pytest.raises(ValueError):
            damp(c, t, s)
        with pytest.raises(ValueError):
            JogSettings(damping=s)
    damp(c, t, 0.1)
    jog = JogController(robot, JogSettings(damping=0.5, collision_checks=False))
    try:
        hand = jog.hand_pose(jog.q)
        jog.goal = HandPose(hand.position + np.array([0.0, 0.006, 0.0]), hand.rotation)
        report = jog.tick(0.0)
        np.testing.assert_allclose(report.target.position, hand.position + [0.0, 0.003, 0.0], atol=1e-12)
    finally:
        jog.close()


def test_jump_guard_and_continuous_joint_unwrapping_on_the_references_example(robot):
    """§B.3 D / §B.5 E: a step moving any joint by more than 90 deg is refused; §B.9.1: a
    continuous joint's target is first shifted by whole turns towards the current angle.

    By hand (the thesis' example): from 175 deg, IK answers -179 deg for a +6 deg step:
    354 deg apart, refused on a limited joint; on a continuous joint it becomes 181 deg."""
    j = robot.joint_names.index("r_wrist_prosup")
    q_from = robot.home_joints()
    q_from[j] = math.radians(175.0)
    q_to = q_from.copy()
    q_to[j] = math.radians(-179.0)
    mask = np.zeros(robot.n_joints, dtype=bool)
    mask[j] = True
    ok = JointSafety(robot, continuous=mask).check(q_from, q_to, dt=1.0)
    assert ok.ok and math.degrees(ok.q[j]) == pytest.approx(181.0)
    assert math.degrees(ok.q[j] - q_from[j]) == pytest.approx(6.0)
    refused = JointSafety(robot, continuous=np.zeros(robot.n_joints, dtype=bool)).check(q_from, q_to, dt=1.0)
    assert not refused.ok and "354 deg" in refused.reason
    np.testing.assert_array_equal(refused.q, q_from)          # refused: the robot stays
    # Exactly at the guard: 90 deg passes the guard, 90.5 deg does not (limits aside: dt long).
    guard = JointSafety(robot, continuous=mask)
    assert guard.check(q_from, q_from + np.where(mask, math.radians(90.0), 0.0), dt=1.0).ok
    assert not guard.check(q_from, q_from + np.where(mask, math.radians(90.5), 0.0), dt=1.0).ok


def test_an_obstacle_thinner_than_the_step_between_two_free_states_is_caught(robot):
    """§B.8 / §B.9.2: jog_control checks only the target, so it is safe only while each
    step is shorter than the obstacle. Here a 2 mm plate lies across the middle of a hand
    path of more than 10 cm whose two end states are both free: the interpolated-state check
    stops the step before it."""
    q_a = robot.home_configuration()
    q_b = q_a.copy()
    elbow = NQ_BASE + robot.joint_names.index("r_elbow")
    q_b[elbow] = robot.limits.upper[elbow - NQ_BASE] - 0.05     # bend the elbow ~60 deg more
    data = robot.model.createData()
    hand = robot.frame_id("right_hand")

    def hand_at(q):
        pin.framesForwardKinematics(robot.model, data, q)
        return data.oMf[hand].translation.copy()

    h_a, h_b, h_mid = hand_at(q_a), hand_at(q_b), hand_at(interpolate(q_a, q_b, 0.5))
    assert np.linalg.norm(h_b - h_a) > 0.10
    # Plate normal along the hand's motion there: z of the box onto (h_b - h_a).
    n = (h_b - h_a) / np.linalg.norm(h_b - h_a)
    axis = np.cross([0.0, 0.0, 1.0], n)
    quat = pin.Quaternion(pin.exp3(axis / np.linalg.norm(axis) * math.acos(n[2])))
    plate = SceneObject("plate", (ShapePart(Box((0.015, 0.015, 0.001)), (0.2, 0.2, 0.8)),), tuple(h_mid),
                        (quat.x, quat.y, quat.z, quat.w))
    world = CollisionWorld(robot, [plate], "right")
    try:
        assert world.contact(q_a) == "" and world.contact(q_b) == ""    # a target-only check passes it
        path = world.check_path(q_a, q_b)
        assert not path.free and "plate" in path.hit and 0.0 < path.fraction < 1.0
        assert world.contact(path.q_safe) == ""
    finally:
        world.close()


def test_a_measurement_older_than_the_last_is_dropped(robot):
    """§B.3 A: messages older than the last one are dropped. By hand: a tag moving at
    0.1 m/s along camera x, one extra sample 2 frames (33 ms) stale arriving last: the goal
    is the one without it (it was extrapolated 8.5 mm further before the fix)."""
    goals = []
    for stale in (False, True):
        jog = JogController(robot, JogSettings(collision_checks=False))
        try:
            jog.align_absolute(P0)
            for k in range(30):
                t = k / FPS
                jog.measure(t, P0 + [0.1 * t, 0.0, 0.0], FACING_CAMERA)
                if stale and k == 29:
                    t_old = t - 2 / FPS
                    jog.measure(t_old, P0 + [0.1 * t_old, 0.0, 0.0], FACING_CAMERA)
                report = jog.tick(t)
            goals.append(report.goal.position)
            assert report.filtered.t == pytest.approx(29 / FPS)
        finally:
            jog.close()
    np.testing.assert_array_equal(goals[0], goals[1])
    f = PoseFilter()
    f.update(1.0, P0, FACING_CAMERA)
    out = f.update(0.9, P0 + 0.1, FACING_CAMERA)
    assert not out.fresh and out.t == 1.0
    np.testing.assert_array_equal(out.position, P0)


def test_tag_lost_in_a_rendered_frame_holds_the_goal(robot, detect):
    """§B.6 [Note]: hold the last target while the tag is not seen (frames rendered without
    the tag in view, detected for real: nothing found), also after the filter's restart."""
    scene = tag_scene(TAG_M, CAL.K, seed=3)
    empty = scene.render([(FACING_CAMERA, np.array([5.0, 0.0, 0.4]))])     # far outside the image
    assert ArucoTagDetector(CAL, TAG_M).detect(empty) == []
    jog = JogController(robot, JogSettings(collision_checks=False))
    try:
        d0 = detect(FACING_CAMERA, P0)
        jog.align_absolute(d0.t)
        k, r = _feed(jog, d0, 0, 20)
        goal = r.goal.position.copy()
        k, r = _feed(jog, None, k, 150)          # 2.5 s unseen: longer than reset_after_s
        np.testing.assert_array_equal(r.goal.position, goal)
        assert not r.filtered.fresh
    finally:
        jog.close()


def test_a_goal_beyond_reach_does_not_trap_the_arm(robot):
    """§B.3 singularities / §B.9.5: jog_control could jog the arm into a stretched (singular)
    pose and not out again. Here a goal 0.5 m ahead is pulled onto the reach sphere (the arm
    never fully stretches) and reported out of reach; when the tag comes back, so does the hand."""
    jog = JogController(robot, JogSettings(collision_checks=False, orientation=False))
    try:
        hand0 = jog.hand_pose(jog.q).position
        jog.align_absolute(P0)
        far = P0 + A.T @ np.array([0.5, 0.0, 0.0])
        data = robot.model.createData()
        statuses = []
        for k in range(200):
            jog.measure(k / FPS, far, FACING_CAMERA)
            r = jog.tick(k / FPS)
            statuses.append(r.status.split(":")[0])
            pin.framesForwardKinematics(robot.model, data, r.q)
            shoulder = data.oMf[robot.frame_id("r_shoulder_pitch")].translation
            assert np.linalg.norm(jog.hand_pose(r.q).position - shoulder) <= jog.reach_limit + 0.005
        assert not r.reachable and statuses[-1] == "out of reach"
        for k in range(200, 450):
            jog.measure(k / FPS, P0, FACING_CAMERA)
            r = jog.tick(k / FPS)
        assert np.linalg.norm(jog.hand_pose(r.q).position - hand0) < jog.settings.reach_tolerance_m
        assert r.status == "ok"
    finally:
        jog.close()


def test_a_noisy_rendered_tag_orientation_is_gated_and_a_quiet_one_followed(robot):
    """§B.6 / §B.9.3: the tag orientation was too noisy and had to be disabled. Here it is
    gated by its measured noise: a far, small, noisy tag (its orientation jitters ~2 deg
    RMS) is not followed with a 1 deg gate, a near, large one (~0.4 deg) is; the position is
    followed either way."""
    followed = {}
    for name, size, distance, noise in (("near", 0.08, 0.4, 2.0), ("far", 0.05, 1.5, 4.0)):
        scene = tag_scene(size, CAL.K, seed=1)
        detector = ArucoTagDetector(CAL, size)
        rng = np.random.default_rng(0)
        jog = JogController(robot, JogSettings(collision_checks=False), pose_filter=PoseFilter(max_noise_deg=1.0))
        try:
            for k in range(60):
                found = detector.detect(scene.render([(FACING_CAMERA, np.array([0.0, 0.0, distance]))], noise, rng))
                assert found
                if k == 0:
                    jog.align_absolute(found[0].t)
                jog.measure(k / FPS, found[0].t, found[0].R)
                r = jog.tick(k / FPS)
            followed[name] = (r.orientation_followed, r.filtered.orientation_noise_deg)
            assert r.goal is not None
        finally:
            jog.close()
    assert followed["near"][0] and followed["near"][1] < 0.7
    assert not followed["far"][0] and followed["far"][1] > 1.0


# ----------------------------------------------------------------------------- Part A
@pytest.fixture(scope="module")
def fixed_sim(robot):
    from teleop.sim.simulator import Simulation

    sim = Simulation(robot, visual=False, fixed_base=True)
    yield sim
    sim.close()


def _serve(sim, joints, **kw):
    """A lock-step server for one session in a thread; returns (server, thread)."""
    server = ls.LockstepServer(sim, joints, command_timeout=10.0, **kw)
    thread = threading.Thread(target=server.serve_one, daemon=True)
    thread.start()
    return server, thread


def _session(sim, joints, controller, n: int) -> list[ls.State]:
    """States 0..n of one session answering ``n`` states with ``controller(state)``."""
    server, thread = _serve(sim, joints)
    states = []
    try:
        with LockstepClient(*server.address, timeout=10.0) as client:
            for _ in range(n):
                st = client.receive_state()
                states.append(st)
                client.send_command(st.seq, *controller(st))
            states.append(client.receive_state())
            client.bye()
        thread.join(10)
    finally:
        server.close()
    return states


def test_lockstep_each_command_steps_physics_exactly_once_in_order(robot, fixed_sim):
    """§A.3/§A.5: the simulator speaks first (STATE 0 at t = 0, at rest: zero torques),
    never steps before the command of that step arrives (no free running), and STATE k
    follows exactly k physics steps of dt, t = k dt exactly however long the step took."""
    joints = robot.group_indices("right_arm")
    fixed_sim.step(123)            # steps taken before the session: must not show in t
    server, thread = _serve(fixed_sim, joints)
    dt = fixed_sim.dt
    n = 40
    try:
        with LockstepClient(*server.address, timeout=10.0) as client:
            home = robot.home_joints()[joints]
            for k in range(n):
                st = client.receive_state()
                assert st.seq == k and st.t == k * dt
                if k == 0:
                    steps0 = round(fixed_sim.t / dt)
                    assert not np.any(st.tau) and not st.saturated
                    time.sleep(0.05)        # the simulator waits, however long the controller takes
                # The server is blocked on command k now: physics has taken exactly k steps.
                assert round(fixed_sim.t / dt) - steps0 == k
                client.send_command(k, ls.MODE_POSITION, home)
            stats = client.bye()
        thread.join(10)
    finally:
        server.close()
    report = server.reports[-1]
    assert (report.steps, report.states_sent, report.last_command_seq, report.ended_by) == (n, n + 1, n - 1, "client")
    assert stats["steps"] == n and report.mode_counts == {"position": n, "torque": 0}
    assert round(fixed_sim.t / dt) - steps0 == n


def test_lockstep_command_k_acts_in_step_k_only_and_sessions_are_reproducible(robot, fixed_sim):
    """§A.5: the nth controller packet answers the nth simulator packet; [Note] the delay
    from measurement to actuation is one step. By hand: two sessions that differ only in
    command 20 (+2 N m on the elbow) have bit-identical states 0..20 and differ from state
    21 on, whose reported torque is command 20's; a third session identical to the first
    (run after other physics steps: t is k dt, not the simulator's clock) repeats it bit for
    bit (the controller reads t)."""
    joints = robot.group_indices("right_arm")
    elbow = list(joints).index(robot.joint_names.index("r_elbow"))

    def controller(kick_at):
        def answer(st):
            tau = 0.3 * np.sin(2 * np.pi * st.t / 0.05) * np.ones(len(joints))
            if st.seq == kick_at:
                tau[elbow] += 2.0
            return ls.MODE_TORQUE, tau
        return answer

    a = _session(fixed_sim, joints, controller(None), 30)
    fixed_sim.step(777)
    a_again = _session(fixed_sim, joints, controller(None), 30)
    b = _session(fixed_sim, joints, controller(20), 30)
    for x, y in zip(a, a_again):
        assert x.t == y.t and np.array_equal(x.q, y.q) and np.array_equal(x.v, y.v) and np.array_equal(x.tau, y.tau)
    for x, y in zip(a[:21], b[:21]):
        assert np.array_equal(x.q, y.q) and np.array_equal(x.v, y.v)
    assert not np.array_equal(a[21].v, b[21].v)
    # STATE 21 reports the torque applied during step 20: command 20's (the +2 N m kick).
    joint = robot.joint_names.index("r_elbow")
    assert b[21].tau[joint] - a[21].tau[joint] == pytest.approx(2.0)
    assert b[22].tau[joint] == pytest.approx(a[22].tau[joint])     # applied once, not reused


def test_lockstep_a_stale_command_is_a_sequence_error_not_a_reused_step(robot, fixed_sim):
    """§A.5: free-running loops reuse or skip data; here a command answering an old state
    (seq 2 after state 3) ends the session with SEQUENCE and is not applied."""
    joints = robot.group_indices("right_arm")
    server, thread = _serve(fixed_sim, joints)
    home = robot.home_joints()[joints]
    try:
        with LockstepClient(*server.address, timeout=10.0) as client:
            for _ in range(3):
                client.send_command(client.receive_state().seq, ls.MODE_POSITION, home)
            assert client.receive_state().seq == 3
            client.send_command(2, ls.MODE_POSITION, home)
            with pytest.raises(ls.PeerError, match="SEQUENCE"):
                client.receive_state()
        thread.join(10)
    finally:
        server.close()
    report = server.reports[-1]
    assert report.steps == 3 and report.error_code == ls.E_SEQUENCE


def test_lockstep_controller_modes_position_torque_and_the_refused_mode_4(robot, fixed_sim):
    """§A.6 / Table 3.2 ``control``: 0 = position (the state-space mode: the simulator's joint
    servos drive towards desired_pos), 1 = torque (applied, clipped to the effort limit, and
    reported back as the measured torque, Table 3.1 ``torque``). Table 3.2's "4 = position"
    is a real-drive code, deliberately refused here (BAD_PAYLOAD; lockstep module docstring)."""
    joints = robot.group_indices("right_arm")
    elbow_model = robot.joint_names.index("r_elbow")
    elbow = list(joints).index(elbow_model)
    targets = robot.home_joints()[joints]
    targets[elbow] += 0.3
    server, thread = _serve(fixed_sim, joints)
    try:
        with LockstepClient(*server.address, timeout=10.0) as client:
            for _ in range(400):
                st = client.receive_state()
                client.send_command(st.seq, ls.MODE_POSITION, targets)
            st = client.receive_state()
            assert abs(st.q[NQ_BASE + elbow_model] - targets[elbow]) < 0.03      # the servo got there
            huge = np.zeros(len(joints))
            huge[elbow] = 1e4
            client.send_command(st.seq, ls.MODE_TORQUE, huge)
            st = client.receive_state()
            assert st.saturated and st.tau[elbow_model] == robot.limits.effort[elbow_model]
            values = np.asarray(targets, dtype="<f8")
            client.sock.sendall(ls.encode(ls.COMMAND, ls.COMMAND_HEAD.pack(st.seq, 4, 0, 0, len(values))
                                          + values.tobytes()))
            with pytest.raises(ls.PeerError, match="BAD_PAYLOAD"):
                client.receive_state()
        thread.join(10)
    finally:
        server.close()
    report = server.reports[-1]
    assert report.steps == 401 and report.mode_counts == {"position": 400, "torque": 1}
