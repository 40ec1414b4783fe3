"""The pybullet simulation agrees with the pinocchio model and behaves physically."""

import time

import numpy as np

from teleop.sim.camera import CameraIntrinsics, EyeCamera
from teleop.sim.simulator import GRAVITY, Simulation


def test_joint_order_mapping(robot, sim):
    import pybullet as pb

    for name, jid in zip(robot.joint_names, sim.joint_ids):
        assert pb.getJointInfo(sim.body, int(jid), physicsClientId=sim.client)[1].decode() == name


def test_total_mass_agrees_within_one_percent(robot, sim):
    assert abs(sim.total_mass() - robot.total_mass) / robot.total_mass < 0.01


def test_hand_and_sole_positions_agree_within_1mm(robot, sim):
    from teleop.benchmarks.sim_bench import fk_max_error_mm

    assert fk_max_error_mm(sim, robot, n_configs=50, seed=3) < 1.0


def test_state_round_trip(robot, sim):
    q = robot.random_configuration(np.random.default_rng(1))
    sim.reset(q)
    measured = sim.state().q
    assert np.allclose(measured[:3], q[:3], atol=1e-9)
    # Quaternions q and -q are the same rotation.
    assert min(np.abs(measured[3:7] - q[3:7]).max(),
               np.abs(measured[3:7] + q[3:7]).max()) < 1e-6  # pybullet stores float32-ish
    assert np.allclose(measured[7:], q[7:], atol=1e-9)
    sim.reset()


def test_standing_still_contact_forces_carry_the_weight(robot, sim):
    sim.reset()
    sim.step(500)  # settle
    forces, cops = [], []
    for _ in range(50):
        sim.step(10)
        forces.append(sim.foot_contact("left").force + sim.foot_contact("right").force)
        cops.append(sim.measured_cop())
    weight = robot.total_mass * GRAVITY
    assert abs(np.mean(forces) - weight) / weight < 0.02
    # The robot did not fall and the centre of pressure lies under the CoM.
    state = sim.state()
    robot.update(state.q)
    assert sim.other_contacts() == 0
    assert np.linalg.norm(np.mean(cops, axis=0) - robot.com()[:2]) < 0.01
    home = robot.home_configuration()
    assert np.abs(state.q[7:] - home[7:]).max() < 0.01


def test_eye_camera_frames_are_not_empty_and_change_when_the_head_turns(robot, sim):
    sim.reset()
    for w, h in ((320, 240), (640, 480)):
        camera = EyeCamera(sim, robot, "left_eye", CameraIntrinsics(w, h))
        image = camera.render()
        assert image.shape == (h, w, 3) and image.dtype == np.uint8
        assert image.std() > 5.0  # not a blank frame
    q = sim.state().q
    turned = q.copy()
    turned[7 + robot.joint_index("neck_yaw")] += 0.6
    turned[7 + robot.joint_index("neck_pitch")] -= 0.3
    camera = EyeCamera(sim, robot, "left_eye", CameraIntrinsics(320, 240))
    difference = np.abs(camera.render(turned).astype(int) - camera.render(q).astype(int)).mean()
    assert difference > 5.0


def test_real_time_mode_paces_to_the_wall_clock(robot):
    with Simulation(robot, realtime=True, visual=False) as sim:
        start = time.perf_counter()
        for _ in range(30):
            sim.step(10)
        elapsed = time.perf_counter() - start
    # 0.3 s of simulated time cannot finish earlier than 0.3 s of wall time (minus the
    # first tick, which starts the pacer).
    assert elapsed >= 0.3 - 0.011


def test_support_polygon_follows_the_simulated_feet(robot, sim):
    """At home the measured feet give the model's polygon (within 1 mm); the measured CoP
    of the standing robot lies inside it."""
    from teleop.control.limits import SupportPolygonConstraint

    sim.reset()
    sim.step(300)
    robot.update(robot.home_configuration())
    measured, model = sim.support_polygon(), robot.support_polygon()
    assert measured.shape == model.shape
    # the same vertices (the hull may start at another one)
    assert np.linalg.norm(measured[:, None, :] - model[None, :, :], axis=2).min(axis=0).max() < 1e-3
    polygon = SupportPolygonConstraint(margin=0.0)
    polygon.set_polygon(measured)
    assert polygon.margin_to_polygon(sim.measured_cop()) > 0.03


def test_the_motors_never_turn_a_joint_faster_than_its_velocity_limit(robot):
    """A 1.2 rad step on the right elbow, and the same after a spell in torque mode: the
    position servo runs at the joint's velocity limit, as a real motor would (before, the
    step ran at several times the limit: a servo catching up on a lagging command did too)."""
    elbow = robot.joint_names.index("r_elbow")
    limit = robot.limits.velocity[elbow]
    with Simulation(robot, visual=False) as sim:
        q0 = sim.joint_positions()

        def fastest_after_a_step(step: float) -> float:
            target = sim.joint_positions()
            target[elbow] += step
            sim.set_joint_targets(target)
            speeds = []
            for _ in range(60):        # 0.6 s: the step takes 1.2 / limit s at the limit
                sim.step(10)
                speeds.append(abs(sim.joint_velocities()[elbow]))
            return max(speeds)

        first = fastest_after_a_step(1.2)
        # Torque mode and back: the motor keeps its cap.
        sim.set_torque_mode(True, np.array([elbow]))
        sim.step(5)
        sim.set_torque_mode(False, np.array([elbow]))
        second = fastest_after_a_step(-1.2)
        # The constraint solver meets the cap to ~1e-4 (relative): no joint is 0.1 % faster.
        assert 0.95 * limit < first <= 1.001 * limit, (first, limit)
        assert 0.95 * limit < second <= 1.001 * limit, (second, limit)
        assert abs(sim.joint_positions()[elbow] - q0[elbow]) < 0.05
