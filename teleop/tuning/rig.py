"""The simulated left arm under the product's PID torque control (pybullet, 1 kHz).

:class:`ArmRig` wraps :class:`teleop.sim.simulator.Simulation` (fixed base, headless) for
bench tests of one limb:

* the tuned joints run under :class:`teleop.tuning.pid.PidController` through
  ``set_torque_mode`` / ``apply_joint_torques``; joint friction of the setup is added to the
  applied torque (it is part of the plant, not of the controller);
* every other joint is held at home. pybullet's position servos cost ~0.5 ms per physics step
  for the ~27 other joints (measured: 0.65 ms/step with them, 0.15–0.3 ms with torque control),
  so the heavy joints (legs, torso, right arm, neck) are held by a stiff PD in torque mode
  (gains from the joint-space inertia, ω = 50 rad/s, critically damped) and only the two light
  left-wrist joints distal to the payload (pitch, yaw), whose explicit PD would be unstable at
  1 kHz, keep a pybullet servo, with a 1000 N m force so a 10 kg payload cannot fold the wrist;
* collisions are switched off: the base is bolted to the world and the test needs no contact
  (and collision detection of the whole body costs step time).

This works around the simulator's API without editing it: ``Simulation.reset`` re-arms the
servos with the description's effort limits, so the rig re-applies its own holding servos
after every reset.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import cast

import numpy as np
import pinocchio as pin

from teleop.robot.model import NV_BASE, RobotModel
from teleop.sim.pybullet_module import pb
from teleop.tuning.experiment_data import Recording
from teleop.tuning.pid import PidController, PidGains
from teleop.tuning.setups import LEFT_ARM, PAYLOAD_LINK, PAYLOAD_RADIUS_M, Setup

HOLD_BANDWIDTH = 50.0          # [rad/s] of the PD holding the joints not under test
SERVO_HELD = ("l_wrist_pitch", "l_wrist_yaw")
SERVO_HOLD_FORCE = 1000.0      # [N m]
#: Coulomb friction is smoothed over this velocity [rad/s] (tanh) to avoid chattering at rest.
COULOMB_SMOOTHING = 0.01
#: Torque bandwidth of the arm's actuators: the commanded torque reaches the joint through a
#: first-order lag of this time constant [s] (a motor's current loop and transmission).
ACTUATOR_LAG_S = 0.01


@dataclass
class Relay:
    """A relay in place of one tuned joint's PID (§3.5.2): u = ±amplitude by the sign of e.

    Attributes:
        joint: position of the joint in the rig's tuned joints.
        amplitude: relay torque d [N m].
        start_offset: initial angle offset from the target [rad] (``RelayStartAngle``).
    """

    joint: int
    amplitude: float
    start_offset: float


class ArmRig:
    """One setup's simulated arm.

    Args:
        setup: the :class:`Setup` (gravity, torque limits, friction, payload).
        joints: names of the joints under PID control (default: the left arm of §4.1).
        robot: a loaded model (default: iCub).
        dt: physics and control period [s].
    """

    def __init__(self, setup: Setup, joints: tuple[str, ...] = LEFT_ARM, robot: RobotModel | None = None,
                 dt: float = 0.001, actuator_lag_s: float = ACTUATOR_LAG_S) -> None:
        from teleop.sim.simulator import PRECISE_SOLVER_ITERATIONS, Simulation

        self.robot = robot or RobotModel("icub")
        unknown = [j for j in joints if j not in self.robot.joint_names]
        if unknown:
            raise ValueError(f"unknown joint(s) {unknown}; the robot has {list(self.robot.joint_names)}")
        self.setup = setup
        self.actuator_lag_s = float(actuator_lag_s)
        self.joints = tuple(joints)
        self.dt = dt
        self.sim = Simulation(self.robot, dt=dt, visual=False, fixed_base=True,
                              solver_iterations=PRECISE_SOLVER_ITERATIONS)
        self._kw = {"physicsClientId": self.sim.client}
        for link in range(-1, pb.getNumJoints(self.sim.body, **self._kw)):
            pb.setCollisionFilterGroupMask(self.sim.body, link, 0, 0, **self._kw)
        self.sim.set_gravity(setup.gravity)
        if setup.payload_kg > 0:
            self._add_payload(setup.payload_kg)
        n = self.robot.n_joints
        self.idx = np.array([self.robot.joint_index(j) for j in self.joints], dtype=int)
        self.servo_idx = np.array([self.robot.joint_index(j) for j in SERVO_HELD
                                   if j in self.robot.joint_names and j not in self.joints], dtype=int)
        self.torque_idx = np.setdiff1d(np.arange(n), self.servo_idx)
        self.held_idx = np.setdiff1d(self.torque_idx, self.idx)
        self.torque_limit = setup.torque_scale * self.robot.limits.effort[self.idx]
        self.lower = self.robot.limits.lower[self.idx]
        self.upper = self.robot.limits.upper[self.idx]
        self.home = self.robot.home_joints()
        mass = pin.crba(self.robot.model, self.robot.data, self.robot.home_configuration())
        inertia = np.diag(mass)[NV_BASE:]
        self.hold_kp = inertia[self.held_idx] * HOLD_BANDWIDTH ** 2
        self.hold_kd = inertia[self.held_idx] * 2 * HOLD_BANDWIDTH
        # Positions of the tuned / held joints inside torque_idx (the order torques are sent in).
        self._arm_in_torque = np.searchsorted(self.torque_idx, self.idx)
        self._held_in_torque = np.searchsorted(self.torque_idx, self.held_idx)
        self._pb_joints = self.sim.joint_ids.tolist()
        self._torque_pb = self.sim.joint_ids[self.torque_idx].tolist()

    # ------------------------------------------------------------------ set-up
    def _add_payload(self, mass_kg: float) -> None:
        link = self.sim.link_index[PAYLOAD_LINK]
        info = pb.getDynamicsInfo(self.sim.body, link, **self._kw)
        extra = 0.4 * mass_kg * PAYLOAD_RADIUS_M ** 2
        pb.changeDynamics(self.sim.body, link, mass=info[0] + mass_kg,
                          localInertiaDiagonal=[i + extra for i in info[2]], **self._kw)

    def close(self) -> None:
        self.sim.close()

    def __enter__(self) -> "ArmRig":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def reset(self, arm_angles: np.ndarray) -> None:
        """Teleport to home with the tuned joints at (n,) ``arm_angles`` [rad], at rest."""
        joints = self.home.copy()
        joints[self.idx] = arm_angles
        self.sim.reset(self.robot.joints_to_q(joints))
        self.sim.set_torque_mode(True, joints=self.torque_idx)
        if len(self.servo_idx):
            pb.setJointMotorControlArray(
                self.sim.body, self.sim.joint_ids[self.servo_idx].tolist(), pb.POSITION_CONTROL,
                targetPositions=self.home[self.servo_idx].tolist(), forces=[SERVO_HOLD_FORCE] * len(self.servo_idx),
                **self._kw)

    # ------------------------------------------------------------------ running
    def friction(self, velocity: np.ndarray) -> np.ndarray:
        """(n,) joint friction torque [N m] of the setup at (n,) velocities [rad/s]."""
        return -self.setup.viscous * velocity - self.setup.coulomb * np.tanh(velocity / COULOMB_SMOOTHING)

    def run(self, setpoints: np.ndarray, gains: list[PidGains], motion: str = "motion",
            record_every: int = 10, relay: Relay | None = None, time_stretch: float = 1.0,
            derivative_filter_s: float = 0.002) -> Recording:
        """Play (T, n) set-points [rad], one row per physics step, under PID control.

        Args:
            setpoints: (T, n) set-points of the tuned joints [rad] at the physics rate.
            gains: n :class:`PidGains` (ignored for the relay joint).
            motion: label of the recording.
            record_every: record one sample every this many physics steps (10: 100 Hz).
            relay: replace one joint's PID by a relay (see :class:`Relay`).

        Returns:
            the :class:`Recording` (degrees): the set-point and the angle measured at the
            same instant, before the step's torque acts.
        """
        sp = np.asarray(setpoints, dtype=float)
        n = len(self.joints)
        if sp.ndim != 2 or sp.shape[1] != n:
            raise ValueError(f"setpoints must be (T, {n}), got {sp.shape}")
        start = sp[0].copy()
        if relay is not None:
            start[relay.joint] += relay.start_offset
        self.reset(start)
        pid = PidController(gains, self.dt, self.torque_limit, derivative_filter_s)
        held_target = self.home[self.held_idx]
        samples = range(0, len(sp), record_every)
        t_rec = np.empty(len(samples))
        q_rec = np.empty((len(samples), n))
        r = 0
        body, kw, ids = self.sim.body, self._kw, self._pb_joints
        arm, held = self.idx.tolist(), self.held_idx.tolist()
        hold = list(zip(self.hold_kp.tolist(), self.hold_kd.tolist(), held_target.tolist()))
        viscous, coulomb = self.setup.viscous, self.setup.coulomb
        arm_slots, held_slots = [int(i) for i in self._arm_in_torque], [int(i) for i in self._held_in_torque]
        sp_list = cast("list[list[float]]", sp.tolist())
        relay_joint = None if relay is None else relay.joint
        relay_amplitude = 0.0 if relay is None else relay.amplitude
        torques = [0.0] * len(self.torque_idx)
        # Actuator model: first-order lag (backward Euler) from commanded to applied torque.
        lag = self.dt / (self.actuator_lag_s + self.dt)
        applied = [0.0] * n
        for k in range(len(sp)):
            # The loop is plain Python on lists: at 1 kHz numpy's per-call overhead on these
            # tiny vectors would cost more than the physics step itself.
            states = pb.getJointStates(body, ids, **kw)
            qa = [states[i][0] for i in arm]
            if k % record_every == 0:
                t_rec[r], q_rec[r] = k * self.dt, qa
                r += 1
            tau = pid.update_fast(sp_list[k], qa)
            if relay_joint is not None:
                e = sp_list[k][relay_joint] - qa[relay_joint]
                tau[relay_joint] = relay_amplitude * (1.0 if e > 0 else (-1.0 if e < 0 else 0.0))
            for j, (slot, i, u) in enumerate(zip(arm_slots, arm, tau)):
                applied[j] += lag * (u - applied[j])
                u = applied[j]
                v = states[i][1]
                # Joint friction of the setup (part of the plant): viscous + smoothed Coulomb.
                torques[slot] = u - viscous * v - coulomb * math.tanh(v / COULOMB_SMOOTHING)
            for slot, i, (kp, kd, target) in zip(held_slots, held, hold):
                torques[slot] = kp * (target - states[i][0]) - kd * states[i][1]
            # Simulation.apply_joint_torques's checks (np.isin) cost ~0.1 ms per call, a
            # third of the step; the joints were put in torque mode by reset(), so the
            # torques go to pybullet directly.
            pb.setJointMotorControlArray(body, self._torque_pb, pb.TORQUE_CONTROL, forces=torques, **kw)
            self.sim.step()
        return Recording.from_arrays(motion, list(self.joints), t_rec, sp[::record_every], q_rec, time_stretch)
