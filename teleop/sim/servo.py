"""Explicit joint servo: the actuator model of Part B as torques on pybullet's torque mode.

Reference: ../shared/reference/pid_tuning_and_sim_to_real.md, B4 (servo model) and B5
(latency, noise, limits). Per physics step and joint, with q_bar / qdot_bar the command
that arrived ``latency`` ago:

    tau_motor = clip(tau_pd + tau_ff, -tau_max, tau_max)
    tau_pd    = [K_p (q_bar - q - dt qdot) + K_d (qdot_bar - qdot)] / (1 + (K_p dt + K_d) dt / I)
    tau_fric  = -k_v qdot / (1 + k_v dt / I) - sgn(qdot) min(k_c, c |qdot|)
    tau       = tau_motor + tau_fric

``tau_pd`` is B4's K_p (q_bar - q) + K_d (qdot_bar - qdot) evaluated at the *end* of the step
(the "stable PD" of Tan, Liu & Turk 2011, diagonal form) [not in the reference]: pybullet
integrates applied torques explicitly, and a plain PD with the stiffness a standing robot
needs is unstable on the light wrist and neck links at 1 ms (K_d dt / I > 2). For heavy
joints (I >> K_p dt^2) it is the plain PD. ``I`` is each joint's apparent inertia
1 / (M^-1)_jj at the home posture, standing on both feet (:func:`apparent_inertia`): a
stance leg then gets its full stiffness. A foot in the air sees far less inertia, so the
leg gains must also be stable as a plain PD on the free foot, (K_d + K_p dt) dt / I_free
< 2 (the description's [sim.explicit_servo] gains are chosen so). Friction is treated the same way: Coulomb friction can
slow a joint but never reverse it within a step: near rest it acts as a damper c of at
most a tenth of the one-step stopping damping I/dt, and less when the servo's damping
already nears it (see ``DAMPING_BUDGET``), which is what a sgn() does physically without
the chatter of an explicit sgn().

The simulator uses the matrix form of the same stable PD (:meth:`JointServo.set_inverse_inertia`):
the damping B = K_p dt + K_d + k_v + c of every servoed joint taken at the end of the step
on the coupled system, tau = (1 + dt B M^-1)^-1 [...], with the constrained inverse inertia
M^-1 of the current posture, refreshed with the feed-forward. The diagonal form above keeps
each joint stable alone, not the chain: the stance legs and torso went unstable once the
knees straightened (rho(dt M^-1 B) from 1.44 at home to 2.29, past the limit of 2).

``tau_ff`` is the model-based gravity feed-forward (``feedforward = "gravity"``): the
generalised gravity of the nominal pinocchio model, with the floating base's share carried
by the feet in contact (minimum-norm contact wrenches), refreshed at the control rate. The
servo then only corrects the error, so moderate gains track well.
"""

from __future__ import annotations

from collections import deque

import numpy as np
import pinocchio as pin

from teleop.robot.model import NV_BASE, RobotModel
from teleop.sim.actuator import ActuatorParams, per_joint_array


def inverse_inertia(robot: RobotModel, q: np.ndarray, fixed_base: bool,
                    contact_frames: tuple[str, ...] = (), data=None) -> np.ndarray:
    """(n, n) joint block of the inverse inertia [1/(kg m^2)] at configuration q (nq,), of
    the constrained system when ``contact_frames`` are held (see :func:`apparent_inertia`)."""
    data = robot.model.createData() if data is None else data
    mass = pin.crba(robot.model, data, q)
    mass = np.triu(mass) + np.triu(mass, 1).T  # crba fills the upper triangle only
    if fixed_base:
        return np.linalg.inv(mass[NV_BASE:, NV_BASE:])
    inverse = np.linalg.inv(mass)
    if contact_frames:
        pin.computeJointJacobians(robot.model, data, q)
        pin.updateFramePlacements(robot.model, data)
        jac = np.vstack([pin.getFrameJacobian(robot.model, data, robot.frame_id(f), pin.LOCAL_WORLD_ALIGNED)
                         for f in contact_frames])
        projected = inverse @ jac.T
        inverse = inverse - projected @ np.linalg.solve(jac @ projected, projected.T)
    return inverse[NV_BASE:, NV_BASE:]


def apparent_inertia(robot: RobotModel, q: np.ndarray, fixed_base: bool,
                     contact_frames: tuple[str, ...] = ()) -> np.ndarray:
    """(n,) apparent inertia [kg m^2] of each joint, 1 / (M^-1)_jj, at configuration q (nq,).

    Args:
        fixed_base: the root is bolted to the world (base rows removed).
        contact_frames: roles/frames held fixed in the world (e.g. the soles of a standing
            robot): the inverse inertia is that of the constrained system,
            M^-1 - M^-1 J^T (J M^-1 J^T)^-1 J M^-1, so a stance ankle sees the body it
            carries, not just its foot.
    """
    return 1.0 / np.diag(inverse_inertia(robot, q, fixed_base, contact_frames))


#: Fraction of the one-step stopping damping I/dt used by Coulomb friction near rest ...
COULOMB_REST_DAMPING = 0.1
#: ... and the total near-rest damping (servo + viscous + Coulomb) it may bring a joint to.
DAMPING_BUDGET = 0.9


class GravityFeedForward:
    """Gravity torques of the nominal model, shared with the ground through the feet.

    Args:
        robot: the nominal model (the controller's knowledge, not the simulated truth).
        fixed_base: the root is bolted to the world (no contact sharing needed).
    """

    def __init__(self, robot: RobotModel, fixed_base: bool) -> None:
        self.robot = robot
        self.data = robot.model.createData()
        self.fixed_base = fixed_base
        self.sole_ids = [robot.frame_id(f"{side}_sole") for side in ("left", "right")]

    def __call__(self, q: np.ndarray, feet_in_contact: tuple[bool, bool]) -> np.ndarray:
        """(n,) joint torques [N m] that hold configuration q (nq,) against gravity.

        Floating base: g(q) = [g_b; g_j] must be balanced by the contact wrenches f
        (J_c^T f = g on the base rows, minimum-norm f), leaving g_j - J_cj^T f for the
        joints. No foot in contact (a fall, a jump): no gravity load on the joints.
        """
        model, data = self.robot.model, self.data
        gravity = pin.computeGeneralizedGravity(model, data, q)
        if self.fixed_base:
            return gravity[NV_BASE:].copy()
        contacts = [fid for fid, on in zip(self.sole_ids, feet_in_contact) if on]
        if not contacts:
            return np.zeros(self.robot.n_joints)
        pin.computeJointJacobians(model, data, q)
        pin.updateFramePlacements(model, data)
        jac = np.vstack([pin.getFrameJacobian(model, data, fid, pin.LOCAL_WORLD_ALIGNED) for fid in contacts])
        # Minimum-norm f with J_b^T f = g_b: f = J_b (J_b^T J_b)^-1 g_b (J_b^T is 6 x 6k,
        # full row rank with a foot down); solve() is ~5x cheaper than lstsq here.
        jac_base = jac[:, :NV_BASE]
        wrench = jac_base @ np.linalg.solve(jac_base.T @ jac_base, gravity[:NV_BASE])
        return gravity[NV_BASE:] - jac[:, NV_BASE:].T @ wrench


def _joint_vector(value, n: int, name: str) -> np.ndarray:
    """``value`` as an (n,) float array, or ValueError naming ``name`` (wrong shape, NaN/inf).
    Checked before the servo's state changes: a wrong-shaped command broadcast into every
    later torque, a NaN one made NaN torques that pybullet turned into a blow-up."""
    array = per_joint_array(value, n, name)
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} must be finite, got {array[~np.isfinite(array)][0]!r} at joint "
                         f"{int(np.argmax(~np.isfinite(array)))}")
    return array


class JointServo:
    """Per-joint position servo with friction, torque limit and command latency.

    Args:
        params: actuator parameters (n,) per joint (gains, friction, limits, latency).
        inertia: (n,) apparent joint inertia [kg m^2] (see :func:`apparent_inertia`).
        dt: physics step [s]. A latency between whole steps blends the commands of the
            two neighbouring steps linearly, so that a fit sees the error change smoothly
            with the latency (teleop.sim.calibration).
    """

    def __init__(self, params: ActuatorParams, inertia: np.ndarray, dt: float) -> None:
        # Everything checked before anything is set (ValueError naming the argument).
        params.check("JointServo params")
        n = len(params.joint_names)
        if isinstance(dt, bool) or not isinstance(dt, (int, float)) or not np.isfinite(dt) or dt <= 0:
            raise ValueError(f"JointServo dt must be a finite physics step > 0 [s], got {dt!r}")
        inertia = _joint_vector(inertia, n, "JointServo inertia")
        if np.any(inertia <= 0):
            raise ValueError(f"JointServo inertia must be > 0 [kg m^2] for every joint, got "
                             f"{inertia[inertia <= 0][0]!r} for {params.joint_names[int(np.argmax(inertia <= 0))]}")
        self.params = params
        self.dt = dt
        self.inertia = inertia
        steps = params.latency / dt
        self.latency_steps = int(np.floor(steps + 1e-9))
        self._latency_fraction = max(0.0, steps - self.latency_steps) if steps - self.latency_steps > 1e-9 else 0.0
        p = params
        # tau_pd = A (q_bar - q) - D qdot + B qdot_bar: the stable-PD law expanded once, so
        # the per-step work is a handful of vector operations (it runs at 1 kHz in Python).
        scale = 1.0 / (1.0 + (p.kp * dt + p.kd) * dt / self.inertia)
        self._a = scale * p.kp
        self._b = scale * p.kd
        self._d = scale * (p.kd + p.kp * dt)
        self._viscous = p.viscous / (1.0 + p.viscous * dt / self.inertia)
        # Near rest Coulomb friction becomes a damper. With all damping of a joint at the
        # one-step stopping value I/dt the coupled joints of a standing robot chatter and
        # the feet bounce (+6% mean normal force, or hop with stiff gains): the friction's
        # damper gets what is left of DAMPING_BUDGET x I/dt after the servo's and viscous
        # damping, and at most COULOMB_REST_DAMPING x I/dt (measured: 0.25 still made the hips
        # and torso of the standing robot chatter at the 2-step period, -9% mean foot force).
        used = self._d + self._viscous
        self._stop = np.clip(DAMPING_BUDGET * self.inertia / dt - used, 0.0, COULOMB_REST_DAMPING * self.inertia / dt)
        self._has_viscous = bool(np.any(p.viscous > 0))
        # Coupled form (set_inverse_inertia): the per-joint scaling above keeps each joint
        # stable on its own, not the coupled chain (see set_inverse_inertia).
        self._coupling: np.ndarray | None = None
        # Coulomb's near-rest damper only where there is Coulomb friction: a phantom c in S
        # (every joint had one) would add -c (v_next - v), an inertia the joints do not have.
        # Where k_c is saturated (a moving joint) the friction is constant and c in S is a
        # small surplus of damping, kept: S is refreshed every 10 ms, not per step.
        self._implicit_damping = p.kp * dt + p.kd + p.viscous + np.where(p.coulomb > 0, self._stop, 0.0)
        self._has_coulomb = bool(np.any(p.coulomb > 0))
        self._limit = p.torque_limit.copy()
        n = len(self.inertia)
        self._feedforward: np.ndarray = np.zeros(n)
        self._queue: deque = deque()
        self.reset(np.zeros(n))

    @property
    def feedforward(self) -> np.ndarray:
        """(n,) feed-forward torque tau_ff [N m] added to the PD before the limit."""
        return self._feedforward

    @feedforward.setter
    def feedforward(self, tau: np.ndarray) -> None:
        self._feedforward = _joint_vector(tau, len(self.inertia), "JointServo feedforward")
        self._update_constant()

    def _update_constant(self) -> None:
        f = self._latency_fraction
        if f > 0.0:
            # Fractional latency: the command in force is (1 - f) x this step's + f x the
            # previous step's (the one that arrived latency_steps + 1 steps ago).
            self._target_used = (1.0 - f) * self.target + f * self._previous_target
            velocity = (1.0 - f) * self.target_velocity + f * self._previous_velocity
        else:
            self._target_used = self.target
            velocity = self.target_velocity
        self._velocity_used = velocity
        self._constant = self._b * velocity + self._feedforward

    def set_inverse_inertia(self, inverse: np.ndarray | None, unservoed: np.ndarray | None = None) -> None:
        """Use the (n, n) joint inverse inertia ``inverse`` [1/(kg m^2)] of the current posture
        (None: back to the per-joint form above); joints ``unservoed`` (torque mode: their
        torques are the caller's) are left out of the coupling.

        The per-joint form makes each joint's damping stable against its own apparent inertia
        at home, but the joints are coupled: the damping of the stance legs and torso acts on
        M^-1, not on diag(M^-1), and the explicit step is stable only while
        rho(dt M^-1 B) < 2, B = diag of the servo's and friction's damping. At home that is
        1.44 for the actuator model; as the knees straighten it grows (2.00 at knee -0.15 rad,
        2.29 straight), and the hip-torso-knee mode chattered at 500 Hz and shook the robot
        off its feet (demo with the actuator model: 197 mm of foot slip, a fall).
        Here the servo's PD and the friction's linear (near-rest) part are taken at the end
        of the step on the coupled system, the matrix form of the stable PD:

            tau = S [K_p (q_bar - q - dt qdot) + K_d (qdot_bar - qdot) + tau_fric] (+ tau_ff),
            S = (1 + dt diag(K_p dt + K_d + k_v + c) M^-1)^-1

        (c, the near-rest Coulomb damper, only on joints with Coulomb friction),
        which is stable for every posture (the velocity map is (1 + dt M^-1 B)^-1)."""
        if inverse is None:
            self._coupling = None
            return
        n = len(self.inertia)
        inverse = np.asarray(inverse, dtype=float)
        if inverse.shape != (n, n) or not np.all(np.isfinite(inverse)):
            raise ValueError(f"JointServo inverse inertia must be a finite ({n}, {n}) matrix, got shape "
                             f"{inverse.shape}")
        servoed = np.ones(n, dtype=bool)
        if unservoed is not None:
            servoed[np.asarray(unservoed, dtype=int)] = False
        block = np.ix_(servoed, servoed)
        coupling = np.eye(n)
        coupling[block] = np.linalg.inv(np.eye(int(servoed.sum()))
                                        + self.dt * self._implicit_damping[servoed, None] * inverse[block])
        self._coupling = coupling

    def reset(self, q: np.ndarray) -> None:
        """Hold the (n,) angles q [rad]; forget commands in flight."""
        self.target = _joint_vector(q, len(self.inertia), "JointServo.reset q").copy()
        self.target_velocity = np.zeros_like(self.target)
        self._previous_target, self._previous_velocity = self.target, self.target_velocity
        self._queue.clear()
        self._step = 0
        self._update_constant()

    def command(self, q_bar: np.ndarray, qdot_bar: np.ndarray | None = None) -> None:
        """Send a (n,) position [rad] (and velocity [rad/s]) command; it takes effect
        ``latency`` later (B5). Raises ValueError (nothing queued) for a wrong shape or NaN."""
        n = len(self.inertia)
        q_bar = _joint_vector(q_bar, n, "JointServo.command q_bar")
        qdot_bar = np.zeros(n) if qdot_bar is None else _joint_vector(qdot_bar, n, "JointServo.command qdot_bar")
        self._queue.append((self._step + self.latency_steps, q_bar.copy(), qdot_bar.copy()))

    def hold(self, idx: np.ndarray, q: np.ndarray) -> None:
        """Make joints ``idx`` hold angles q (len(idx),) [rad] now and in every queued command."""
        idx = np.asarray(idx, dtype=int).reshape(-1)
        # (A scalar idx holds one joint: q may be a scalar too.)
        q = _joint_vector(np.atleast_1d(np.asarray(q, dtype=float)), len(idx), "JointServo.hold q")
        if np.any((idx < 0) | (idx >= len(self.inertia))):
            raise ValueError(f"JointServo.hold idx must be joint indices in [0, {len(self.inertia)}), got {idx}")
        self.target[idx] = q
        self.target_velocity[idx] = 0.0
        self._previous_target = self._previous_target.copy()
        self._previous_velocity = self._previous_velocity.copy()
        self._previous_target[idx] = q
        self._previous_velocity[idx] = 0.0
        for _, q_bar, qdot_bar in self._queue:
            q_bar[idx] = q
            qdot_bar[idx] = 0.0
        self._update_constant()

    def torques(self, q: np.ndarray, qdot: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """Advance one physics step; returns ((n,) motor torque, (n,) friction torque or
        None when there is no friction) [N m] for the true (noise-free) joint state
        q [rad], qdot [rad/s]. Raises ValueError (the step not taken) for a wrong shape or
        a NaN state (a simulation that blew up), which made NaN torques."""
        n = len(self.inertia)
        if np.shape(q) != (n,) or np.shape(qdot) != (n,) or not (np.isfinite(q).all() and np.isfinite(qdot).all()):
            _joint_vector(q, n, "JointServo.torques q")
            _joint_vector(qdot, n, "JointServo.torques qdot")
        queue = self._queue
        if self._latency_fraction > 0.0:
            if self._previous_target is not self.target:
                self._previous_target, self._previous_velocity = self.target, self.target_velocity
                self._update_constant()
        if queue and queue[0][0] <= self._step:
            while queue and queue[0][0] <= self._step:
                _, self.target, self.target_velocity = queue.popleft()
            self._update_constant()
        self._step += 1
        if self._coupling is not None:
            return self._coupled_torques(q, qdot)
        motor = self._a * (self._target_used - q) - self._d * qdot + self._constant
        np.clip(motor, -self._limit, self._limit, out=motor)
        if not (self._has_viscous or self._has_coulomb):
            return motor, None
        friction = -self._viscous * qdot
        if self._has_coulomb:
            friction -= self._coulomb(qdot)
        return motor, friction

    def _coulomb(self, qdot: np.ndarray) -> np.ndarray:
        """(n,) Coulomb friction magnitude with qdot's sign [N m]: a damper c near rest."""
        return np.sign(qdot) * np.minimum(self.params.coulomb, self._stop * np.abs(qdot))

    def _coupled_torques(self, q: np.ndarray, qdot: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """:meth:`torques` in the coupled form (see :meth:`set_inverse_inertia`)."""
        p = self.params
        total = p.kp * (self._target_used - q - self.dt * qdot) + p.kd * (self._velocity_used - qdot)
        friction = None
        if self._has_viscous or self._has_coulomb:
            friction = -p.viscous * qdot
            if self._has_coulomb:
                friction -= self._coulomb(qdot)
            total = total + friction
        total = self._coupling @ total
        if friction is None:
            motor = total + self._feedforward
        else:
            # What the joint's friction takes is reported as friction; the rest is the motor's.
            motor = total - friction + self._feedforward
        np.clip(motor, -self._limit, self._limit, out=motor)
        return motor, friction
