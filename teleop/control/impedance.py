"""Impedance control as joint torques: joint impedance and Cartesian (hand) impedance.

Reference: ../shared/reference/controller_coupling_and_jogging.md, Part A, §A.6 (controller
modes of Lohmann 2022, Table 3.3). The thesis reuses DLR's controller as a black box and
gives no control law; these are the standard forms the reference's [Note] in §A.6 names:

* joint impedance (Eq. JI)::

      tau = g(q) + K_q (q_d - q) - D_q qdot

* Cartesian impedance of a hand point, with a joint-impedance posture task in the null
  space (Eq. CI)::

      tau = g(q) + J^T [K_x (x_d - x) - D_x xdot] + N^T [K_n (q_d - q) - D_n qdot]
      N^T = I - J^T (J^T)^+                      (static null-space projector)

  ``(J^T)^+`` is the Moore-Penrose pseudo-inverse (damped near singularities). With it,
  the posture torque produces no static force at the hand point (the projector removes
  the range of J^T), so at rest against a surface the contact force equals
  ``K_x (x_d - x)`` (exactly for an undamped pseudo-inverse; the damping lets a small
  part of the posture torque through, e.g. ~0.03 N per N m at the iCub's home arm
  posture): "commanding the hand behind the surface" sets the force
  (§A.6, "Setting contact force"). The task is the hand point (3-D) or the hand pose
  (6-D: point + orientation, x_d - x then stacks the rotation error log3(R_d R^T)). The
  7-DoF arm keeps a 1-DoF null space for the 6-D task, as Justin's arms (§A.6), or 4 DoF
  for the 3-D one; the posture task stops their drift, as priority 2 does in §A.6.

Only a subset of the joints (an arm, or both) is under torque control; the others stay on
the simulator's position servos. All quantities use the pinocchio layout of
:class:`teleop.robot.model.RobotModel`: ``q`` (nq,), ``v`` (nv,) from
``Simulation.state()``; the controlled joints are given as indices into the (n_joints,)
joint vector, and every torque vector returned is (k,) for those k joints [N m].

Dynamics come from pinocchio (gravity g(q) by RNEA, frame Jacobians, the joint-space
mass matrix for damping design). Coriolis/centrifugal terms are not compensated, as in
the modes of Table 3.3 (gravity compensation + spring-damper); the motions here are slow.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pinocchio as pin

from teleop.robot.model import NQ_BASE, NV_BASE, RobotModel

LOCAL_WORLD_ALIGNED = pin.ReferenceFrame.LOCAL_WORLD_ALIGNED
#: How far R^T R of a desired rotation may be from the identity (entry-wise): room for
#: rotations built from rounded (e.g. float32) quaternions, none for a scaled or sheared matrix.
ROTATION_TOLERANCE = 1e-5


def _check_state(robot: RobotModel, q: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    q = np.asarray(q, dtype=float)
    v = np.asarray(v, dtype=float)
    if q.shape != (robot.nq,) or v.shape != (robot.nv,):
        raise ValueError(f"state must be q ({robot.nq},) and v ({robot.nv},) in the pinocchio layout, "
                         f"got {q.shape} and {v.shape}")
    if not (np.all(np.isfinite(q)) and np.all(np.isfinite(v))):
        raise ValueError("state contains non-finite values")
    return q, v


def _joint_indices(robot: RobotModel, joints) -> np.ndarray:
    """(k,) joint-vector indices from group names / joint names / integer indices."""
    if isinstance(joints, str):
        joints = [joints]
    out: list[int] = []
    for j in joints:
        if isinstance(j, (int, np.integer)):
            if not 0 <= int(j) < robot.n_joints:
                raise ValueError(f"joint index {j} out of range 0..{robot.n_joints - 1}")
            out.append(int(j))
        else:
            out.extend(int(i) for i in robot.group_indices(j))
    idx = np.array(out, dtype=int)
    if len(np.unique(idx)) != len(idx):
        raise ValueError("a joint is listed twice")
    return idx


def _non_negative(value, name: str) -> float:
    """``value`` as a float, or a ValueError naming ``name`` unless it is finite and >= 0
    (NaN included: ``NaN < 0`` is False, and a NaN ratio made every torque NaN)."""
    value = float(value)
    if not (np.isfinite(value) and value >= 0.0):
        raise ValueError(f"{name} must be finite and >= 0, got {value}")
    return value


def _per_joint(value, k: int, name: str) -> np.ndarray:
    arr = np.broadcast_to(np.asarray(value, dtype=float), (k,)).copy()
    if np.any(arr < 0) or not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite and >= 0")
    return arr


def gravity_torques(robot: RobotModel, q: np.ndarray) -> np.ndarray:
    """(n_joints,) joint torques [N m] that hold the robot still against gravity at ``q``
    (the joint rows of RNEA with zero velocity and acceleration). The joint rows do not
    depend on whether the base is fixed, so this serves fixed-base benches too."""
    g = pin.computeGeneralizedGravity(robot.model, robot.data, np.asarray(q, dtype=float))
    return g[NV_BASE:].copy()


def min_jerk(q0: np.ndarray, q1: np.ndarray, s: float) -> np.ndarray:
    """Minimum-jerk (quintic) interpolation from ``q0`` to ``q1`` at phase s in [0, 1].

    The reference's controller feeds a spline interpolator every step (§A.3, step 2); a
    quintic has zero velocity and acceleration at both ends, so the set point never jumps.
    """
    s = float(np.clip(s, 0.0, 1.0))
    blend = 10 * s**3 - 15 * s**4 + 6 * s**5
    return np.asarray(q0) + (np.asarray(q1) - np.asarray(q0)) * blend


@dataclass
class TorqueCommand:
    """One controller output: ``tau`` (k,) [N m] for ``joints`` (k,) (joint-vector indices);
    ``saturated`` is True when any torque was clipped to its effort limit."""

    joints: np.ndarray
    tau: np.ndarray
    saturated: bool


class JointImpedance:
    """Joint impedance (Eq. JI above, §A.6 "Joint impedance": each joint a mass-spring-damper).

    Args:
        robot: the model (gravity and mass matrix).
        joints: the torque-controlled joints: group names ("left_arm"), joint names or
            indices into the (n_joints,) joint vector.
        stiffness: K_q, scalar or (k,) [N m/rad].
        damping_ratio: zeta; the damping is D_q,i = 2 zeta sqrt(K_q,i M_ii(q)) with M_ii
            the joint's diagonal mass-matrix entry, i.e. critically damped per joint when 1.
        damping: fixed D_q, scalar or (k,) [N m s/rad], instead of ``damping_ratio``.
        clip_to_limits: clip each torque to the description's effort limit (a real drive
            saturates; the simulator does not clip torques itself).
    """

    def __init__(self, robot: RobotModel, joints, stiffness=50.0, damping_ratio: float = 1.0,
                 damping=None, clip_to_limits: bool = True) -> None:
        self.robot = robot
        self.joints = _joint_indices(robot, joints)
        k = len(self.joints)
        self.stiffness = _per_joint(stiffness, k, "stiffness")
        self.damping_ratio = _non_negative(damping_ratio, "damping_ratio")
        self.damping = None if damping is None else _per_joint(damping, k, "damping")
        self.clip_to_limits = clip_to_limits
        self._v_idx = NV_BASE + self.joints
        self._q_idx = NQ_BASE + self.joints
        self.data = robot.model.createData()

    def damping_gains(self, q: np.ndarray) -> np.ndarray:
        """(k,) D_q [N m s/rad] at configuration ``q`` (nq,)."""
        if self.damping is not None:
            return self.damping
        M = pin.crba(self.robot.model, self.data, q)
        m_ii = np.diag(M)[self._v_idx]
        return 2.0 * self.damping_ratio * np.sqrt(self.stiffness * m_ii)

    def torques(self, q: np.ndarray, v: np.ndarray, q_desired: np.ndarray) -> TorqueCommand:
        """Torques of Eq. JI.

        Args:
            q: (nq,) measured configuration, v: (nv,) measured velocity (pinocchio layout).
            q_desired: (n_joints,) or (k,) desired joint angles [rad].
        """
        q, v = _check_state(self.robot, q, v)
        q_desired = np.asarray(q_desired, dtype=float)
        if q_desired.shape == (self.robot.n_joints,):
            q_desired = q_desired[self.joints]
        if q_desired.shape != (len(self.joints),) or not np.all(np.isfinite(q_desired)):
            raise ValueError(f"q_desired must be {self.robot.n_joints} or {len(self.joints)} finite values")
        g = pin.computeGeneralizedGravity(self.robot.model, self.data, q)[self._v_idx]
        tau = g + self.stiffness * (q_desired - q[self._q_idx]) - self.damping_gains(q) * v[self._v_idx]
        return _clip(self.robot, self.joints, tau, self.clip_to_limits)


def _clip(robot: RobotModel, joints: np.ndarray, tau: np.ndarray, enabled: bool) -> TorqueCommand:
    if not enabled:
        return TorqueCommand(joints, tau, False)
    limit = robot.limits.effort[joints]
    clipped = np.clip(tau, -limit, limit)
    return TorqueCommand(joints, clipped, bool(np.any(clipped != tau)))


def _skew(w: np.ndarray) -> np.ndarray:
    return np.array([[0.0, -w[2], w[1]], [w[2], 0.0, -w[0]], [-w[1], w[0], 0.0]])


class CartesianImpedance:
    """Cartesian impedance of one hand with a null-space posture task (Eq. CI above).

    The controlled point is ``point_offset`` (3,) [m] in the hand frame (e.g. the centre of
    a tool welded to the hand, §A.8 "The wiper"); its position x (3,) is in the world
    frame. With ``orientation_stiffness`` the hand orientation R (3, 3) is controlled too
    (a 6-D task: the 7-DoF arm keeps a 1-DoF null space, as Justin's arms in §A.6);
    without, only the point (3-D task, 4-DoF null space). The task Jacobian J (m, k),
    m = 3 or 6, is the LOCAL_WORLD_ALIGNED point Jacobian (linear rows, then angular rows)
    restricted to the k torque-controlled arm joints (the other joints are servoed
    stiffly and treated as fixed). The orientation error is log3(R_d R^T) (3,) [rad], a
    rotation vector in the world frame, so its spring torque is K_r log3(R_d R^T).

    Args:
        robot: the model.
        frame: the hand's role or frame name ("left_hand").
        joints: the arm's joints (group name, names or indices), k of them.
        stiffness: K_x, scalar or (3,) diagonal [N/m].
        orientation_stiffness: K_r, scalar or (3,) diagonal [N m/rad], or None (point only).
        damping_ratio: zeta; D = zeta (A K1 + K1 A) with A = Lambda^(1/2), K1 = K^(1/2)
            (the "double diagonalisation"-free factorisation design; for isotropic K and
            zeta = 1 it is the critical damping 2 sqrt(Lambda K)). Lambda =
            (J M_aa^-1 J^T + pinv_damping^2 I)^-1 is the arm's (regularised)
            operational-space inertia.
        posture_stiffness: K_n, scalar or (k,) [N m/rad]; ``posture_damping_ratio`` as
            :class:`JointImpedance`'s damping ratio.
        point_offset: (3,) controlled point in the hand frame [m].
        payload_mass: mass [kg] carried at the controlled point (the tool); its weight is
            added to the gravity compensation through J^T.
        pinv_damping: lambda [-] of the damped pseudo-inverse (J^T)^+ = (J J^T + lambda^2 I)^-1 J,
            which keeps N bounded near singularities.
        clip_to_limits: as for :class:`JointImpedance`.
    """

    def __init__(self, robot: RobotModel, frame: str, joints, stiffness=500.0, orientation_stiffness=None,
                 damping_ratio: float = 1.0, posture_stiffness=10.0, posture_damping_ratio: float = 1.0,
                 point_offset=(0.0, 0.0, 0.0), payload_mass: float = 0.0, pinv_damping: float = 1e-3,
                 clip_to_limits: bool = True) -> None:
        self.robot = robot
        self.frame_id = robot.frame_id(frame)
        self.joints = _joint_indices(robot, joints)
        k = len(self.joints)
        gains = list(_per_joint(stiffness, 3, "stiffness"))
        if orientation_stiffness is not None:
            gains += list(_per_joint(orientation_stiffness, 3, "orientation_stiffness"))
        self.m = len(gains)
        if self.m > k:
            raise ValueError(f"a {self.m}-D task needs at least {self.m} joints, got {k}")
        self.stiffness = np.diag(gains)
        self.damping_ratio = _non_negative(damping_ratio, "damping_ratio")
        self.posture_stiffness = _per_joint(posture_stiffness, k, "posture_stiffness")
        self.posture_damping_ratio = _non_negative(posture_damping_ratio, "posture_damping_ratio")
        offset = np.asarray(point_offset, dtype=float)
        if offset.size != 3 or not np.all(np.isfinite(offset)):
            raise ValueError(f"point_offset must be 3 finite values [m], got {point_offset!r}")
        self.point_offset = offset.reshape(3).copy()
        self.payload_mass = _non_negative(payload_mass, "payload_mass")
        self.pinv_damping = _non_negative(pinv_damping, "pinv_damping")
        self.clip_to_limits = clip_to_limits
        self._v_idx = NV_BASE + self.joints
        self._q_idx = NQ_BASE + self.joints
        self.data = robot.model.createData()
        #: Last computed point position x (3,) [m], hand rotation R (3, 3) and task
        #: velocity (m,) [m/s, rad/s].
        self.x = np.zeros(3)
        self.R = np.eye(3)
        self.xdot = np.zeros(self.m)
        #: Last task wrench K (x_d - x) - D xdot, (m,) [N, N m], the controller asked for.
        self.force = np.zeros(self.m)

    def point_kinematics(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Position (3,) [m] and (6, nv) LOCAL_WORLD_ALIGNED Jacobian (linear rows of the
        controlled point, then angular rows) at ``q`` (nq,). Also sets :attr:`R`."""
        model, data = self.robot.model, self.data
        pin.computeJointJacobians(model, data, q)
        pin.updateFramePlacements(model, data)
        M = data.oMf[self.frame_id]
        r = M.rotation @ self.point_offset
        J6 = pin.getFrameJacobian(model, data, self.frame_id, LOCAL_WORLD_ALIGNED).copy()
        # Velocity of a point rigidly offset by r: v_p = v_frame + w x r = v - r x w.
        J6[:3] -= _skew(r) @ J6[3:]
        self.R = M.rotation.copy()
        return M.translation + r, J6

    def position(self, q: np.ndarray) -> np.ndarray:
        """(3,) world position of the controlled point at ``q`` (nq,) [m]."""
        return self.point_kinematics(np.asarray(q, dtype=float))[0]

    def pose(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Controlled point (3,) [m] and hand rotation (3, 3) at ``q`` (nq,)."""
        x, _ = self.point_kinematics(np.asarray(q, dtype=float))
        return x, self.R.copy()

    def torques(self, q: np.ndarray, v: np.ndarray, x_desired: np.ndarray, q_posture: np.ndarray,
                R_desired: np.ndarray | None = None) -> TorqueCommand:
        """Torques of Eq. CI.

        Args:
            q: (nq,) and v: (nv,) measured state (pinocchio layout).
            x_desired: (3,) desired world position of the controlled point [m].
            q_posture: (n_joints,) or (k,) desired arm angles of the null-space task [rad].
            R_desired: (3, 3) desired hand rotation (required with orientation control).
        """
        q, v = _check_state(self.robot, q, v)
        x_desired = np.asarray(x_desired, dtype=float)
        if x_desired.shape != (3,) or not np.all(np.isfinite(x_desired)):
            raise ValueError("x_desired must be 3 finite values [m]")
        if self.m == 6:
            if R_desired is None:
                raise ValueError("this controller has orientation stiffness: give R_desired (3, 3)")
            R_desired = np.asarray(R_desired, dtype=float)
            if R_desired.shape != (3, 3) or not np.all(np.isfinite(R_desired)):
                raise ValueError("R_desired must be a finite (3, 3) rotation matrix")
            # log3 of anything else is silently meaningless (a zero matrix gives NaN torques).
            if (not np.allclose(R_desired.T @ R_desired, np.eye(3), atol=ROTATION_TOLERANCE)
                    or np.linalg.det(R_desired) <= 0):
                raise ValueError("R_desired must be a rotation matrix (orthonormal, determinant +1)")
        q_posture = np.asarray(q_posture, dtype=float)
        if q_posture.shape == (self.robot.n_joints,):
            q_posture = q_posture[self.joints]
        if q_posture.shape != (len(self.joints),) or not np.all(np.isfinite(q_posture)):
            raise ValueError(f"q_posture must be {self.robot.n_joints} or {len(self.joints)} finite values")
        model, data = self.robot.model, self.data
        x, J6_full = self.point_kinematics(q)
        J_full = J6_full[:self.m]
        J = J_full[:, self._v_idx]                                   # (m, k)
        qdot = v[self._v_idx]
        xdot = J_full @ v                                            # includes servoed joints' motion
        error = x_desired - x
        if self.m == 6:
            assert R_desired is not None  # checked above with orientation stiffness (m == 6)
            error = np.concatenate([error, pin.log3(R_desired @ self.R.T)])
        g = pin.computeGeneralizedGravity(model, data, q)[self._v_idx]
        if self.payload_mass > 0:
            g = g + J[:3].T @ np.array([0.0, 0.0, self.payload_mass * 9.81])
        M = pin.crba(model, data, q)
        M_aa = M[np.ix_(self._v_idx, self._v_idx)]
        eye = np.eye(self.m)
        Lambda = np.linalg.inv(J @ np.linalg.solve(M_aa, J.T) + self.pinv_damping**2 * eye)
        A = _sqrtm_psd(Lambda)
        K1 = np.sqrt(self.stiffness)
        D = self.damping_ratio * (A @ K1 + K1 @ A)
        force = self.stiffness @ error - D @ xdot
        # Null-space projector N^T = I - J^T (J^T)^+, with (J^T)^+ = (J J^T + l^2 I)^-1 J.
        JT_pinv = np.linalg.solve(J @ J.T + self.pinv_damping**2 * eye, J)   # (m, k)
        N_T = np.eye(len(self.joints)) - J.T @ JT_pinv
        D_n = 2.0 * self.posture_damping_ratio * np.sqrt(self.posture_stiffness * np.diag(M_aa))
        tau_posture = self.posture_stiffness * (q_posture - q[self._q_idx]) - D_n * qdot
        tau = g + J.T @ force + N_T @ tau_posture
        self.x, self.xdot, self.force = x, xdot, force
        return _clip(self.robot, self.joints, tau, self.clip_to_limits)


def _sqrtm_psd(A: np.ndarray) -> np.ndarray:
    """Square root of a (nearly) symmetric positive semi-definite matrix."""
    S = 0.5 * (A + A.T)
    w, V = np.linalg.eigh(S)
    return (V * np.sqrt(np.clip(w, 0.0, None))) @ V.T
