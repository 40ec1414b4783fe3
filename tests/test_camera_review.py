"""Review of the eye camera and simulation-fidelity pieces: camera intrinsics that are
checked where they are given, a Cartesian impedance that refuses a desired "rotation" that
is not one, and a tool's contact force whose friction acts on the tool whatever the order
in which the panel and the tool were created."""

from __future__ import annotations

import numpy as np
import pybullet as pb
import pytest

from teleop.benchmarks import fidelity_bench as fb
from teleop.control.impedance import CartesianImpedance, min_jerk
from teleop.robot.model import NQ_BASE
from teleop.sim.camera import CameraIntrinsics
from teleop.sim.contact_panel import ContactPanel, WeldedTool


# ------------------------------------------------------------------ intrinsics
@pytest.mark.parametrize("kwargs, fragment", [
    ({"width": 0, "height": 0}, "size"), ({"width": 320, "height": 0}, "size"), ({"width": 0, "height": 240}, "size"),
    ({"fov_deg": 0.0}, "field of view"), ({"fov_deg": 180.0}, "field of view"),
    ({"fov_deg": float("nan")}, "field of view"),
    ({"near": 0.0}, "near"), ({"near": 7.0, "far": 6.0}, "near"),
])
def test_camera_intrinsics_that_cannot_image_are_refused_by_name(kwargs, fragment):
    """A zero-size image used to surface as 'Singular matrix' (LinAlgError) or a division by
    zero deep inside a renderer."""
    with pytest.raises(ValueError, match=fragment):
        CameraIntrinsics(**kwargs)


def test_a_one_pixel_camera_is_still_fine():
    intrinsics = CameraIntrinsics(1, 1)
    assert intrinsics.matrix()[0, 2] == 0.5 and len(intrinsics.projection_matrix()) == 16


@pytest.mark.parametrize("camera_kind", ["pybullet", "lowpoly"])
def test_a_configuration_with_nan_is_refused_instead_of_rendering_a_blank_image(camera_kind, robot, sim):
    from teleop.sim.camera import EyeCamera
    from teleop.sim.lowpoly import LowPolyEyeCamera

    camera = (EyeCamera(sim, robot, intrinsics=CameraIntrinsics(32, 24)) if camera_kind == "pybullet"
              else LowPolyEyeCamera(None, robot, intrinsics=CameraIntrinsics(32, 24)))
    q = sim.state().q                                  # the standing robot
    assert camera.render(q).std() > 0                  # the robot's view at a finite pose is not blank
    q_bad = np.array(q, dtype=float)
    q_bad[NQ_BASE + 1] = np.nan
    with pytest.raises(ValueError, match=f"non-finite values \\(indices \\[{NQ_BASE + 1}\\]\\)"):
        camera.render(q_bad)


# ------------------------------------------------------------------- impedance
@pytest.mark.parametrize("make", [lambda R: np.zeros((3, 3)), lambda R: 2.0 * R,
                                  lambda R: R @ np.diag([1.0, 1.0, -1.0]),
                                  lambda R: R + 0.3 * np.outer([1.0, 0.0, 0.0], [0.0, 1.0, 0.0])],
                         ids=["zeros", "scaled", "reflection", "sheared"])
def test_cartesian_impedance_refuses_a_desired_orientation_that_is_not_a_rotation(robot, make):
    """log3 of a non-rotation is meaningless: a zero matrix gave NaN torques, a scaled one
    no orientation error at all, without a word."""
    ci = CartesianImpedance(robot, "left_hand", "left_arm", orientation_stiffness=5.0)
    q, v = robot.home_configuration(), np.zeros(robot.nv)
    x, R = ci.pose(q)
    with pytest.raises(ValueError, match="rotation"):
        ci.torques(q, v, x, robot.home_joints(), make(R))
    # A proper rotation, even one rounded to float32 (off orthonormal by ~1e-7), is accepted.
    rounded = R.astype(np.float32).astype(float)
    assert np.all(np.isfinite(ci.torques(q, v, x, robot.home_joints(), rounded).tau))


# --------------------------------------------------------------- contact force
@pytest.mark.parametrize("panel_first", [False, True], ids=["tool-created-first", "panel-created-first"])
def test_friction_in_the_tool_contact_force_opposes_the_tool_sliding(robot, panel_first):
    """pybullet reports the friction as the force on whichever body was created first;
    with the panel created before the tool, contact_force returned the friction acting on
    the panel as if it acted on the tool (pointing along the slide)."""
    from teleop.sim.simulator import Simulation

    with Simulation(robot, visual=False, fixed_base=True) as sim:
        q = sim.state().q
        q[NQ_BASE:] = fb.pose_vector(robot, "idle")
        sim.reset(q)
        robot.update(q)
        offset = robot.placement("left_hand").rotation.T @ np.array([0.0, 0.0, -0.05])
        ci = CartesianImpedance(robot, "left_hand", "left_arm", stiffness=500.0, orientation_stiffness=10.0,
                                posture_stiffness=fb.POSTURE_STIFFNESS, point_offset=offset, payload_mass=0.02)
        x0, R0 = ci.pose(q)
        surface = x0[2] - 0.015 - 0.01

        def make_panel():
            return ContactPanel(sim, center_xy=(x0[0], x0[1]), surface_z=surface)

        def make_tool():
            return WeldedTool(sim, robot.description.frames["left_hand"], offset, radius=0.015, mass=0.02)

        if panel_first:
            panel, tool = make_panel(), make_tool()
        else:
            tool, panel = make_tool(), make_panel()
        sim.set_torque_mode(True, ci.joints)
        posture = q[NQ_BASE:].copy()

        def step(x_desired):
            st = sim.state()
            sim.apply_joint_torques(ci.torques(st.q, st.v, x_desired, posture, R0).tau, ci.joints)
            sim.step()

        # Press 1 cm into the panel, then slide 8 cm along +y.
        pressed = np.array([x0[0], x0[1] - 0.04, surface + 0.015 - 0.01])
        for i in range(300):
            step(min_jerk(x0, pressed, (i + 1) / 300))
        end = pressed + np.array([0.0, 0.08, 0.0])
        friction, velocity, normal = [], [], []
        for i in range(400):
            step(min_jerk(pressed, end, (i + 1) / 400))
            fn, force, points = tool.contact_force(panel)
            v = pb.getBaseVelocity(tool.body, physicsClientId=sim.client)[0]
            if points and abs(v[1]) > 0.02:  # sliding
                friction.append(force[1])
                velocity.append(v[1])
                normal.append(force[2])
        friction, velocity = np.array(friction), np.array(velocity)
        assert len(friction) > 100
        assert np.all(friction * velocity < 0)  # kinetic friction on the tool opposes its slide
        assert np.all(np.array(normal) > 0)  # the panel pushes the tool up
