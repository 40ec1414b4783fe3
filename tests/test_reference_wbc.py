"""The whole-body IK-QP checked equation by equation against the reference, section 4
(../shared/reference/penco_whole_body_teleoperation.md: Eqs. 1.1-1.3, 1.16-1.17 and the
constraints of §4.2), each on a case small enough to work by hand or against an identity
computed independently with numpy / pinocchio; then the public API's refusal of bad input
(NaN / inf, wrong shapes, non-positive timesteps), which must leave the state untouched.
"""

import dataclasses
import math

import numpy as np
import pinocchio as pin
import pytest

from teleop.control import WholeBodyController
from teleop.control.closed_loop import run_closed_loop, synthetic_references
from teleop.control.impedance import CartesianImpedance, JointImpedance
from teleop.control.kinematics import Kinematics
from teleop.control.limits import (ContactConstraint, JointAccelerationLimit, JointPositionLimit,
                                   JointVelocityLimit, SupportPolygonConstraint, joint_velocity_bounds)
from teleop.control.qp import Constraints, nullspace_basis
from teleop.control.solve import level_qp, solve_hierarchy, solve_weighted
from teleop.control.stack import StackConfig, TaskSpec, load_stack
from teleop.control.tasks import ComTask, FrameOrientationTask, FramePositionTask, PostureTask
from teleop.control.tasks.posture import PostureRows

DT = 0.01
G = 9.81  # the value the controller's ZMP rows use


# ----------------------------------------------------------------------------- helpers
def free(n: int) -> Constraints:
    """No constraint on an (n,) variable: n simple bounds at +-inf, no rows."""
    return Constraints(n, np.zeros((0, n)), np.full(n, -np.inf), np.full(n, np.inf), np.zeros(n, dtype=np.int32))


def boxed(lower, upper) -> Constraints:
    """Simple bounds only: lower <= x <= upper, (n,) each."""
    n = len(lower)
    return Constraints(n, np.zeros((0, n)), np.array(lower, float), np.array(upper, float),
                       np.zeros(n, dtype=np.int32))


def lexicographic(levels, eps):
    """The reference's strict cascade (§4.1 "Strict hierarchy"), written independently of
    the implementation: level i minimises ||A_i u - b_i||^2 + eps ||u||^2 subject to
    A_j u = A_j u_{i-1}* for every j < i, by its KKT system (no inequalities)."""
    n = levels[0][0].shape[1]
    u, above = None, np.zeros((0, n))
    for A, b in levels:
        H, g = A.T @ A + eps * np.eye(n), A.T @ b
        if u is None:
            u = np.linalg.solve(H, g)
        else:
            m = above.shape[0]
            kkt = np.block([[H, above.T], [above, np.zeros((m, m))]])
            u = np.linalg.solve(kkt, np.concatenate((g, above @ u)))[:n]
        above = np.vstack((above, A))
    return u


def posture_stack(robot, mode, specs, damping=1e-6) -> StackConfig:
    """A stack without contacts or support polygon (the floating base free), so that a
    tick's QP is exactly the cost of the tasks plus eps ||v||^2 and the joint bounds."""
    return StackConfig(name="hand-worked", tasks=specs, mode=mode, dt=DT, damping=damping, contact_frames=(),
                       polygon_enabled=False)


class FakeKinematics:
    """The two things a support-polygon row reads: the CoM (3,) [m] and its (3, nv) Jacobian."""

    def __init__(self, com, jacobian):
        self._com, self._jacobian = np.asarray(com, float), np.asarray(jacobian, float)

    def com(self):
        return self._com

    def com_jacobian(self):
        return self._jacobian


SQUARE = np.array([[-0.1, -0.1], [0.1, -0.1], [0.1, 0.1], [-0.1, 0.1]])  # counter-clockwise [m]


@pytest.fixture(scope="module")
def home_kin(robot):
    """Kinematics at a home posture with every joint moved a little (no special symmetry)."""
    q = robot.home_configuration()
    q[7:] += 0.05 * np.sin(np.arange(robot.n_joints))
    JointPositionLimit(robot).clip(q)
    kin = Kinematics(robot)
    kin.update(q)
    return kin


# ------------------------------------------------------------- Eq. (1.2): one level
def test_eq_1_2_level_hessian_and_linear_term_by_hand():
    # ||A u - b||^2 + eps ||u||^2, halved: H = A'A + eps I, f = -A'b.
    A, b, eps = np.array([[1.0, 0.0], [0.0, 2.0]]), np.array([1.0, 1.0]), 0.5
    H, f = level_qp(A.copy(), b, eps)
    assert np.allclose(H, [[1.5, 0.0], [0.0, 4.5]]) and np.allclose(f, [-1.0, -2.0])
    # Separable: u_i = a_i b_i / (a_i^2 + eps) = 1/1.5, 2/4.5.
    result = solve_weighted(A.copy(), b, eps, free(2))
    assert np.allclose(result.z, [2 / 3, 4 / 9], atol=1e-9)


def test_eq_1_2_simple_bounds_u_min_u_max_clip_a_separable_problem():
    A, b, eps = np.array([[1.0, 0.0], [0.0, 2.0]]), np.array([1.0, 1.0]), 0.5
    result = solve_weighted(A, b, eps, boxed([-np.inf, 0.5], [0.5, np.inf]))
    # u_1 wanted 2/3 > 0.5: at its bound; u_2 wanted 4/9 < 0.5: at its bound too.
    assert np.allclose(result.z, [0.5, 0.5], atol=1e-9)


def test_eq_1_2_general_rows_c_lower_le_C_u_le_c_upper():
    # min (u1 - 1)^2 + (u2 - 1)^2 s.t. u1 + u2 <= 1: the projection of (1, 1) on the line.
    constraints = Constraints(0, np.array([[1.0, 1.0]]), np.array([-np.inf]), np.array([1.0]),
                              np.zeros(1, dtype=np.int32))
    result = solve_weighted(np.eye(2), np.array([1.0, 1.0]), 0.0, constraints)
    assert np.allclose(result.z, [0.5, 0.5], atol=1e-9)


# ------------------------------------------------------ Eq. (1.3): a weighted level
def test_eq_1_3_weighted_level_gives_the_weighted_mean():
    # w1 (u - 1)^2 + w2 (u + 1)^2 with w = 1, 3: u = (1 - 3) / 4 = -0.5. The rows arrive
    # scaled by sqrt(w), as the tasks write them.
    rows = np.array([[1.0], [math.sqrt(3.0)]])
    targets = np.array([1.0, -math.sqrt(3.0)])
    assert np.allclose(solve_weighted(rows, targets, 0.0, free(1)).z, [-0.5], atol=1e-12)


# ------------------------------------------------ Eqs. (1.1)-(1.2): strict hierarchy
def test_eq_1_1_strict_cascade_by_hand_with_and_without_a_bound():
    # Level 1: u1 + u2 = 1; level 2: u1 = 1; level 3: u2 + u3 = 2.
    levels = [(np.array([[1.0, 1.0, 0.0]]), np.array([1.0])),
              (np.array([[1.0, 0.0, 0.0]]), np.array([1.0])),
              (np.array([[0.0, 1.0, 1.0]]), np.array([2.0]))]
    eps = 1e-9  # (the hand solution is the eps -> 0 limit)
    result = solve_hierarchy([(A.copy(), b) for A, b in levels], eps, free(3))
    assert result.levels_solved == 3 and np.allclose(result.z, [1.0, 0.0, 2.0], atol=1e-6)
    # u2 >= 0.25: level 1 still holds with u1 + u2 = 1, so level 2 stops at u1 = 0.75
    # and level 3 gives u3 = 2 - 0.25.
    result = solve_hierarchy([(A.copy(), b) for A, b in levels], eps,
                             boxed([-np.inf, 0.25, -np.inf], [np.inf, np.inf, np.inf]))
    assert np.allclose(result.z, [0.75, 0.25, 1.75], atol=1e-6)


def test_eq_1_1_strict_cascade_matches_the_explicit_equality_constrained_qps():
    # With a visible damping eps = 0.1: the nullspace cascade (and the faster path for a
    # first level of selection rows) must equal the KKT solution of each equality-
    # constrained level, eps ||u||^2 on the whole u at every level.
    eps = 0.1
    general = [(np.array([[1.0, 1.0, 0.0]]), np.array([1.0])),
               (np.array([[1.0, 0.0, 0.0]]), np.array([1.0])),
               (np.array([[0.0, 1.0, 1.0]]), np.array([2.0]))]
    expected = lexicographic(general, eps)
    got = solve_hierarchy([(A.copy(), b) for A, b in general], eps, free(3)).z
    assert np.allclose(got, expected, atol=1e-9)

    selection = [(np.array([[1.0, 0.0, 0.0]]), np.array([0.5])),
                 (np.array([[1.0, 1.0, 1.0]]), np.array([3.0])),
                 (np.array([[0.0, 1.0, -1.0]]), np.array([1.0]))]
    expected = lexicographic(selection, eps)
    for first_level_free in (None, np.array([1, 2])):
        got = solve_hierarchy([(A.copy(), b) for A, b in selection], eps, free(3), first_level_free).z
        assert np.allclose(got, expected, atol=1e-9)


def test_nullspace_basis_is_an_orthonormal_kernel_and_skips_zero_rows():
    A = np.array([[1.0, 2.0, 3.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    Z = nullspace_basis(A)
    assert Z.shape == (4, 3)  # the zero row takes no direction
    assert np.allclose(A @ Z, 0.0, atol=1e-14) and np.allclose(Z.T @ Z, np.eye(3), atol=1e-14)
    # Dependent rows: conservative (one direction each), still exactly in the kernel.
    Z = nullspace_basis(np.array([[1.0, 2.0, 3.0, 0.0], [2.0, 4.0, 6.0, 0.0]]))
    assert Z.shape == (4, 2) and np.allclose(np.array([[1.0, 2.0, 3.0, 0.0]]) @ Z, 0.0, atol=1e-14)


# ------------------------------------------- Eq. (1.16): task rows sqrt(w) J, sqrt(w) b
def test_eq_1_16_posture_rows_are_sqrt_w_selection_and_sqrt_w_feedforward_plus_gain_error(robot, home_kin):
    task = PostureTask("elbow", robot, ["l_elbow"], weight=4.0, gain=10.0)
    j = 6 + robot.joint_index("l_elbow")
    q_elbow = home_kin.q[7 + robot.joint_index("l_elbow")]
    task.set_target([q_elbow + 0.02], velocity=[0.1])
    rows, b = np.zeros((1, robot.nv)), np.zeros(1)
    task.fill(home_kin, rows, b)
    # sqrt(4) = 2; b = 2 (0.1 + 10 * 0.02) = 0.6.
    assert rows[0, j] == 2.0 and np.count_nonzero(rows) == 1
    assert b[0] == pytest.approx(0.6, abs=1e-12)
    # The vectorised fill of the controller writes the same.
    rows2, b2 = np.zeros((1, robot.nv)), np.zeros(1)
    PostureRows([(task, 0)]).fill(home_kin, rows2, b2)
    assert np.array_equal(rows, rows2) and b2[0] == pytest.approx(0.6, abs=1e-12)


def test_eq_1_16_com_rows_are_sqrt_w_Jc_and_sqrt_w_gain_error(robot, home_kin):
    task = ComTask("com", "xy", weight=9.0, gain=5.0)
    task.set_target(home_kin.com()[:2] + [0.01, -0.02])
    rows, b = np.zeros((2, robot.nv)), np.zeros(2)
    task.fill(home_kin, rows, b)
    assert np.allclose(rows, 3.0 * home_kin.com_jacobian()[:2])
    assert np.allclose(b, 3.0 * 5.0 * np.array([0.01, -0.02]), atol=1e-15)  # sqrt(9) lambda e


def test_task_jacobians_match_finite_differences_and_e_dot_is_minus_J_v(robot, home_kin):
    # Independent of the implementation: move q along v for h seconds with pinocchio and
    # difference the quantities; e = target - value, so e must change by -J v h.
    v = 0.3 * np.cos(np.arange(robot.nv))
    h = 1e-6
    moved = Kinematics(robot)
    moved.update(pin.integrate(robot.model, home_kin.q, v * h))
    hand = robot.frame_id("left_hand")
    # The values themselves, against pinocchio's plain forward kinematics on fresh data.
    data = robot.model.createData()
    assert np.allclose(home_kin.com(), pin.centerOfMass(robot.model, data, home_kin.q), atol=1e-14)
    pin.framesForwardKinematics(robot.model, data, home_kin.q)
    assert np.allclose(home_kin.placement(hand).homogeneous, data.oMf[hand].homogeneous, atol=1e-14)
    com_task, hand_task = ComTask("com", "xyz"), FramePositionTask("hand", hand)
    head_task = FrameOrientationTask("head", robot.frame_id("head"))
    for task in (com_task, hand_task, head_task):
        task.set_target_from(home_kin)
        change = (task.error(moved) - task.error(home_kin)) / h
        assert np.allclose(change, -task.jacobian(home_kin) @ v, atol=2e-5), task.name


def test_orientation_error_is_the_world_rotation_vector_to_the_target(robot, home_kin):
    task = FrameOrientationTask("head", robot.frame_id("head"))
    current = home_kin.placement(robot.frame_id("head")).rotation
    task.set_target(pin.exp3(np.array([0.0, 0.0, 0.3])) @ current)  # 0.3 rad about world z
    assert np.allclose(task.error(home_kin), [0.0, 0.0, 0.3], atol=1e-12)


# --------------------------------------------- Eqs. (1.3), (1.1), (1.16) in one tick
def elbow_specs(levels):
    """Two posture tasks on the left elbow: weights 1 and 3, gains 10/s."""
    return [TaskSpec("up", "posture", levels[0], 1.0, 10.0, joints=["l_elbow"]),
            TaskSpec("down", "posture", levels[1], 3.0, 10.0, joints=["l_elbow"])]


@pytest.mark.parametrize("mode, expected", [
    ("weighted", (1.0 * 0.1 + 3.0 * -0.1) / (1.0 + 3.0 + 1e-6)),   # Eq. 1.3: weighted mean
    ("strict", 0.1 / (1.0 + 1e-6)),                                 # Eq. 1.1: level 1 wins
])
def test_a_controller_tick_by_hand_two_elbow_postures(robot, mode, expected):
    controller = WholeBodyController(robot, posture_stack(robot, mode, elbow_specs((1, 2) if mode == "strict"
                                                                                   else (1, 1))))
    j = robot.joint_index("l_elbow")
    q0 = controller.q.copy()
    # b = lambda e = 10 * (+-0.01) = +-0.1 rad/s, well inside the elbow's limits.
    controller.task("up").set_target([q0[7 + j] + 0.01])
    controller.task("down").set_target([q0[7 + j] - 0.01])
    q, v, status, _ = controller.step()
    assert status.value == "ok"
    assert v[6 + j] == pytest.approx(expected, abs=1e-7)
    others = np.delete(v, 6 + j)
    assert np.abs(others).max() < 1e-7  # no task on them: eps ||v||^2 keeps them still
    assert q[7 + j] == pytest.approx(q0[7 + j] + expected * DT, abs=1e-9)  # q + v dt


def test_com_reference_enters_as_lambda_e_and_the_integrated_com_follows(robot):
    spec = TaskSpec("com", "com", 1, 1.0, 10.0, axes="xy")
    controller = WholeBodyController(robot, posture_stack(robot, "weighted", [spec]))
    kin = controller.kin
    kin.update(controller.q)
    c0 = kin.com().copy()
    controller.task("com").set_target(c0[:2] + [0.001, -0.002])
    q, v, _, _ = controller.step()
    kin.update(controller.q)  # (the controller's kinematics, now at the new q)
    # The floating base is free, so J v = lambda e = 10 (0.001, -0.002) m/s to ~eps.
    velocity = (kin.com()[:2] - c0[:2]) / DT
    assert np.allclose(velocity, [0.01, -0.02], atol=1e-5)


# --------------------------------------------------- joint position and velocity limits
def test_joint_position_bounds_by_hand_and_clipped_into_the_velocity_limits(robot):
    position, velocity = JointPositionLimit(robot, gain=0.5), JointVelocityLimit(robot, 1.0)
    j = robot.joint_index("l_elbow")
    lower, upper, vmax = robot.limits.lower[j], robot.limits.upper[j], robot.limits.velocity[j]
    q = robot.home_configuration()
    q[7 + j] = lower + 0.01
    bounds = position.velocity_bounds(q, DT).copy()
    # gamma (q_min - q) / dt = 0.5 * -0.01 / 0.01 = -0.5 rad/s.
    assert bounds[0, j] == pytest.approx(-0.5) and bounds[1, j] == pytest.approx(0.5 * (upper - q[7 + j]) / DT)
    both = joint_velocity_bounds(position, velocity, q, DT)
    assert both[0, j] == pytest.approx(-0.5) and both[1, j] == pytest.approx(vmax)
    # Started 0.02 rad below the range: must move back at 0.5 * 0.02 / 0.01 = 1 rad/s.
    q[7 + j] = lower - 0.02
    both = joint_velocity_bounds(position, velocity, q, DT)
    assert both[0, j] == pytest.approx(min(1.0, vmax)) and both[1, j] == pytest.approx(vmax)
    assert np.all(both[0] <= both[1])


def test_joint_acceleration_window_by_hand_and_position_bounds_take_precedence(robot):
    limit = JointAccelerationLimit(robot, 20.0)
    previous = np.zeros(robot.n_joints)
    previous[3] = 1.0
    limit.commanded(previous)
    bounds = np.vstack((np.full(robot.n_joints, -10.0), np.full(robot.n_joints, 10.0)))
    bounds[:, 5] = (-0.5, 0.5)
    previous[5] = 1.0
    limit.commanded(previous)
    limit.restrict(bounds, DT)
    assert tuple(bounds[:, 3]) == pytest.approx((0.8, 1.2))   # 1 -+ 20 * 0.01
    assert tuple(bounds[:, 0]) == pytest.approx((-0.2, 0.2))
    assert tuple(bounds[:, 5]) == pytest.approx((0.5, 0.5))   # window [0.8, 1.2] vs |v| <= 0.5


# ------------------------------------------------ feet: Eq. (1.17)'s top-priority equality
def test_contact_equality_J_c_v_equals_gain_times_log6_for_every_reduced_z(robot):
    kin = Kinematics(robot)
    kin.update(robot.home_configuration())
    contacts = ContactConstraint(robot, ("left_sole", "right_sole"), gain=100.0)
    contacts.hold(kin)
    twist = np.array([0.001, 0.0, 0.0, 0.0, 0.0, 0.002])  # the held left sole, 1 mm / 2 mrad away
    contacts.targets[0] = contacts.targets[0] * pin.exp6(twist)
    data = robot.model.createData()
    pin.computeJointJacobians(robot.model, data, kin.q)
    J = np.vstack([pin.getFrameJacobian(robot.model, data, robot.frame_id(f), pin.ReferenceFrame.LOCAL)
                   for f in ("left_sole", "right_sole")])
    for dt, rate in ((DT, 100.0), (0.05, 20.0)):   # gain capped at 1/dt
        reduction = contacts.reduction(kin, dt)
        expected = np.concatenate((rate * twist, np.zeros(6)))
        for seed in range(3):
            z = np.random.default_rng(seed).normal(size=reduction.size)
            assert np.allclose(J @ reduction.expand(z, robot.nv), expected, atol=1e-12)
        # P orthonormal and v0 orthogonal to it: ||v||^2 = ||v0||^2 + ||z||^2 (solve.py).
        assert np.allclose(reduction.basis.T @ reduction.basis, np.eye(reduction.basis.shape[1]), atol=1e-12)
        assert np.abs(reduction.basis.T @ reduction.offset).max() < 1e-12


def test_eliminated_and_equality_contacts_give_the_same_command_and_hold_the_feet(robot):
    commands = []
    for elimination in ("nullspace", "equality"):
        controller = WholeBodyController(robot, "default", mode="strict", contact_elimination=elimination)
        hand = controller.task("left_hand")
        hand.set_target(hand.target + [0.03, 0.0, 0.02])
        for _ in range(5):
            q, *_ = controller.step()
        controller.kin.update(q)
        assert controller.contacts.errors(controller.kin).max() < 1e-6
        commands.append(q)
    assert np.abs(commands[0] - commands[1]).max() < 1e-8


# ---------------------------------------------- CoM / ZMP inside the support polygon
def test_com_rows_by_hand_on_a_square():
    polygon = SupportPolygonConstraint(margin=0.02, recovery_speed=0.05)
    polygon.set_polygon(SQUARE)
    # Outward normals of the counter-clockwise square: -y, +x, +y, -x; offsets 0.1.
    assert np.allclose(polygon.normals, [[0, -1], [1, 0], [0, 1], [-1, 0]]) and np.allclose(polygon.offsets, 0.1)
    jacobian = np.zeros((3, 8))
    jacobian[0, 0] = jacobian[1, 1] = 1.0   # the CoM moves with v[0], v[1]
    rows, bounds = np.zeros((4, 8)), np.zeros(4)
    slack = polygon.fill(FakeKinematics([0.05, 0.0, 0.5], jacobian), DT, rows, bounds)
    # dt n' J v <= d - m - n' c: +x edge 0.1 - 0.02 - 0.05 = 0.03; -x edge 0.13; +-y 0.08.
    assert np.allclose(slack, [0.08, 0.03, 0.08, 0.13]) and np.allclose(bounds, slack)
    assert np.allclose(rows[1, :2], [DT, 0.0]) and np.allclose(rows[3, :2], [-DT, 0.0])
    # Already 0.12 m beyond the shrunk +x edge: move back at the recovery speed only.
    polygon.fill(FakeKinematics([0.2, 0.0, 0.5], jacobian), DT, rows, bounds)
    assert bounds[1] == pytest.approx(-0.05 * DT)


def test_lip_zmp_rows_by_hand(robot):
    # p = c + dt c' - (c_z / g)(c' - c'^-)/dt: the LIP ZMP (Eq. 2.14) of the next state.
    polygon = SupportPolygonConstraint(margin=0.02, zmp_margin=0.01, robot=robot, zmp_model="lip")
    polygon.set_polygon(SQUARE)
    nv = robot.nv
    jacobian = np.zeros((3, nv))
    jacobian[0, 0] = jacobian[1, 1] = 1.0
    kin = FakeKinematics([0.01, -0.02, 0.5], jacobian)
    rows, bounds = np.zeros((8, nv)), np.zeros(8)
    polygon.fill(kin, DT, rows, bounds)
    v1, v2 = np.zeros(nv), np.zeros(nv)
    v1[:2], v2[:2] = (0.002, -0.001), (0.003, 0.001)
    polygon.commanded(v1)
    slack = polygon.fill(kin, DT, rows, bounds)
    acceleration = (np.array([0.003, 0.001]) - [0.002, -0.001]) / DT           # (0.1, 0.2) m/s^2
    p = np.array([0.01, -0.02]) + DT * np.array([0.003, 0.001]) - 0.5 / G * acceleration
    unfloored = slack[4:] + rows[4:] @ v1   # fill returns the ZMP slacks minus G v^-
    assert np.allclose(rows[4:] @ v2 - unfloored, polygon.normals @ p - (0.1 - 0.01), atol=1e-12)
    assert np.allclose(bounds[4:], unfloored)   # far inside: no floor


def test_centroidal_zmp_rows_match_the_multibody_zmp_from_pinocchios_momentum(robot, home_kin):
    # p_x = c_x - (c_z h'_x + h'_Ly) / (m g), p_y = c_y - (c_z h'_y - h'_Lx) / (m g), with
    # h = [m c'; L] from pinocchio.computeCentroidalMomentum (not the map the rows use).
    polygon = SupportPolygonConstraint(margin=0.02, zmp_margin=0.01, robot=robot, zmp_model="centroidal")
    polygon.set_polygon(SQUARE + home_kin.com()[:2])
    nv, k = robot.nv, 4
    rows, bounds = np.zeros((2 * k, nv)), np.zeros(2 * k)
    rng = np.random.default_rng(3)
    v1, v2 = 0.05 * rng.normal(size=nv), 0.05 * rng.normal(size=nv)
    polygon.fill(home_kin, DT, rows, bounds)
    polygon.commanded(v1)
    slack = polygon.fill(home_kin, DT, rows, bounds)
    data, m = robot.model.createData(), robot.total_mass
    h1 = pin.computeCentroidalMomentum(robot.model, data, home_kin.q, v1).vector.copy()
    h2 = pin.computeCentroidalMomentum(robot.model, data, home_kin.q, v2).vector.copy()
    c = pin.centerOfMass(robot.model, data, home_kin.q)
    rate = (h2 - h1) / DT
    c_next = c[:2] + DT * h2[:2] / m
    p = c_next + np.array([-(c[2] * rate[0] + rate[4]), -(c[2] * rate[1] - rate[3])]) / (m * G)
    unfloored = slack[k:] + rows[k:] @ v1
    assert np.allclose(rows[k:] @ v2 - unfloored, polygon.normals @ p - (polygon.offsets - 0.01), atol=1e-10)


# ================================================================== bad input, refused
@pytest.mark.parametrize("dt", [0.0, -0.01, float("nan"), float("inf")])
def test_controller_refuses_a_bad_dt_at_construction_and_at_a_step(robot, dt):
    with pytest.raises(ValueError, match="dt"):
        WholeBodyController(robot, "default", dt=dt)
    controller = WholeBodyController(robot, "default")
    before = controller.q.copy()
    with pytest.raises(ValueError, match="dt"):
        controller.step(dt=dt)
    assert np.array_equal(controller.q, before)


@pytest.mark.parametrize("damping", [-1e-4, float("nan"), float("inf")])
def test_controller_refuses_a_bad_damping_from_a_stack_built_in_code(robot, damping):
    with pytest.raises(ValueError, match="damping"):
        WholeBodyController(robot, dataclasses.replace(load_stack("default"), damping=damping))


def test_step_refuses_a_misshapen_measured_q_and_holds_a_nan_one_without_touching_the_state(robot):
    controller = WholeBodyController(robot, "default")
    controller.step()
    before, accel = controller.q.copy(), controller.acceleration_limit.previous.copy()
    with pytest.raises(ValueError, match="q must be"):
        controller.step(controller.q[:-1])
    assert np.array_equal(controller.q, before) and np.array_equal(controller.acceleration_limit.previous, accel)
    bad = controller.q.copy()
    bad[12] = np.inf   # numerical trouble from a sensor: held (documented), never stored
    q, v, status, _ = controller.step(bad)
    assert status.value == "held" and np.array_equal(controller.q, before) and np.all(np.isfinite(q))


@pytest.mark.parametrize("which, value", [("q", "nan"), ("q", "short"), ("v", "nan"), ("v", "short")])
def test_commit_refuses_non_finite_or_misshapen_input_before_any_state_changes(robot, which, value):
    controller = WholeBodyController(robot, "default")
    controller.step()
    q, v = controller.q.copy(), np.zeros(robot.nv)
    bad = q.copy() if which == "q" else v.copy()
    bad = bad[:-1] if value == "short" else np.where(np.arange(len(bad)) == 9, np.nan, bad)
    before = (controller.q.copy(), controller.acceleration_limit.previous.copy(), controller.polygon._velocity.copy())
    with pytest.raises(ValueError, match=f"^{which} must be"):
        controller.commit(bad, v) if which == "q" else controller.commit(q, bad)
    after = (controller.q, controller.acceleration_limit.previous, controller.polygon._velocity)
    assert all(np.array_equal(a, b) for a, b in zip(before, after))


@pytest.mark.parametrize("zmp_model", ["centroidal", "lip"])
def test_commit_right_after_a_reset_works(robot, zmp_model):
    # It used to fail: the ZMP rows' map of v was only computed by the first step.
    stack = dataclasses.replace(load_stack("default"), zmp_model=zmp_model)
    controller = WholeBodyController(robot, stack)
    controller.commit(controller.q, np.zeros(robot.nv))
    assert controller.step().status.value == "ok"


def test_nan_and_misshapen_targets_are_refused_and_never_reach_the_controller(robot):
    controller = WholeBodyController(robot, "default")
    cases = [("com", [np.nan, 0.0]), ("com", [0.0, 0.0, 0.0]), ("left_hand", [0.1, np.inf, 0.4]),
             ("torso", [0.0, 0.0]), ("waist_height", [np.nan]), ("neck", np.full(3, np.nan))]
    for name, value in cases:
        task = controller.task(name)
        before = np.array(task.target, copy=True)
        with pytest.raises(ValueError, match="target"):
            task.set_target(value)
        assert np.array_equal(task.target, before), name
    q, v, status, _ = controller.step()
    assert status.value == "ok" and np.all(np.isfinite(q)) and np.all(np.isfinite(v))


@pytest.mark.parametrize("attribute, value", [("weight", -1.0), ("weight", np.nan), ("gain", -0.1),
                                              ("gain", np.inf)])
def test_negative_or_non_finite_weights_and_gains_are_refused(robot, attribute, value):
    task = WholeBodyController(robot, "default").task("left_hand")
    before = getattr(task, attribute)
    with pytest.raises(ValueError, match=attribute):
        setattr(task, attribute, value)
    assert getattr(task, attribute) == before
    # (A weight of 0 is allowed on purpose: the task then neither acts nor takes a
    # direction from the lower levels, see Task.has_zero_rows.)


@pytest.mark.parametrize("argument, kwargs", [
    ("margin", dict(margin=float("nan"))), ("margin", dict(margin=-0.01)),
    ("recovery_speed", dict(recovery_speed=float("nan"))), ("recovery_speed", dict(recovery_speed=float("inf"))),
    ("active_distance", dict(active_distance=float("nan"))),
    ("zmp_margin", dict(zmp_margin=float("nan"))),
])
def test_support_polygon_refuses_nan_or_negative_parameters(robot, argument, kwargs):
    with pytest.raises(ValueError, match=argument):
        SupportPolygonConstraint(robot=robot, **kwargs)


def test_support_polygon_refuses_non_finite_vertices_and_keeps_its_polygon():
    polygon = SupportPolygonConstraint()
    polygon.set_polygon(SQUARE)
    bad = SQUARE.copy()
    bad[2, 0] = np.nan
    with pytest.raises(ValueError, match="vertices"):
        polygon.set_polygon(bad)
    assert np.array_equal(polygon.vertices, SQUARE) and np.all(np.isfinite(polygon.offsets))


@pytest.mark.parametrize("gain", [float("nan"), -1.0, float("inf")])
def test_contact_gain_must_be_finite_and_non_negative(robot, gain):
    with pytest.raises(ValueError, match="contact gain"):
        ContactConstraint(robot, ("left_sole", "right_sole"), gain=gain)


@pytest.mark.parametrize("argument, kwargs", [
    ("damping_ratio", dict(damping_ratio=float("nan"))), ("damping_ratio", dict(damping_ratio=-1.0)),
    ("posture_damping_ratio", dict(posture_damping_ratio=float("nan"))),
    ("payload_mass", dict(payload_mass=float("nan"))), ("pinv_damping", dict(pinv_damping=-1e-3)),
    ("point_offset", dict(point_offset=(0.0, np.nan, 0.0))), ("point_offset", dict(point_offset=(0.0, 0.0))),
])
def test_cartesian_impedance_refuses_bad_parameters(robot, argument, kwargs):
    with pytest.raises(ValueError, match=argument):
        CartesianImpedance(robot, "left_hand", "left_arm", **kwargs)


def test_joint_impedance_refuses_a_nan_damping_ratio(robot):
    with pytest.raises(ValueError, match="damping_ratio"):
        JointImpedance(robot, "left_arm", damping_ratio=float("nan"))


@pytest.mark.parametrize("argument, kwargs", [
    ("control_dt", dict(control_dt=0.0)), ("control_dt", dict(control_dt=float("nan"))),
    ("physics_steps", dict(physics_steps=0)), ("physics_steps", dict(physics_steps=2.5)),
    ("settle_time", dict(settle_time=-0.1)), ("duration", dict(duration=0.0)),
])
def test_closed_loop_refuses_bad_timesteps_before_starting(robot, argument, kwargs):
    references = synthetic_references(robot, duration=0.1)
    with pytest.raises(ValueError, match=argument):
        run_closed_loop(references, robot=robot, **kwargs)


@pytest.mark.parametrize("argument, kwargs", [("duration", dict(duration=0.0)), ("rate", dict(rate=-100.0)),
                                              ("rate", dict(rate=float("nan")))])
def test_synthetic_references_refuse_bad_durations_and_rates(robot, argument, kwargs):
    with pytest.raises(ValueError, match=argument):
        synthetic_references(robot, **kwargs)


@pytest.mark.parametrize("task", ["frame_pose", "waist_height"])
@pytest.mark.parametrize("gain", [float("nan"), float("inf"), -1.0])
def test_an_orientation_gain_that_is_not_finite_and_non_negative_is_refused(task, gain):
    """A NaN orientation gain was kept and made the task's orientation rows NaN at every tick."""
    from teleop.control.tasks.frame_pose import FramePoseTask
    from teleop.control.tasks.waist_height import WaistHeightTask

    cls = FramePoseTask if task == "frame_pose" else WaistHeightTask
    with pytest.raises(ValueError, match="orientation gain must be finite and >= 0"):
        cls("t", 1, orientation_gain=gain)
