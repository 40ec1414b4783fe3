"""The simulated robot: pybullet on the same URDF as the pinocchio model.

* 1 kHz physics (``dt`` configurable), headless by default, GUI on request.
* Joints position-controlled by pybullet's motors, each limited to its effort limit from
  the robot description (the URDF's upper-body limits are placeholders).
* A ground plane with friction; the contact forces under each foot and the measured centre
  of pressure are readable.
* Two modes: lock-step (``step`` returns as soon as physics is done: as fast as it can go,
  for trials and tests) and real time (``realtime=True``: ``step`` paces to the wall clock).

State is reported in the pinocchio layout of :class:`teleop.robot.model.RobotModel`
(base pose of the URDF root frame, not pybullet's inertial frame), in the stance frame.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pybullet as pb
import pybullet_data

from teleop.clock import RealTimePacer
from teleop.robot.model import NQ_BASE, NV_BASE, RobotModel
from teleop.sim.urdf_prep import prepare_urdf

GRAVITY = 9.81


@dataclass
class FootContact:
    """Ground contact under one foot.

    Attributes:
        force: total normal force [N] (0 when the foot is in the air).
        cop: (2,) centre of pressure on the ground [m], NaN when there is no contact.
        points: number of contact points.
    """

    force: float
    cop: np.ndarray
    points: int


@dataclass
class SimState:
    """Measured robot state. q (nq,), v (nv,) in the pinocchio layout; t [s]."""

    t: float
    q: np.ndarray
    v: np.ndarray


class Simulation:
    """A pybullet simulation of one robot on flat ground.

    Args:
        robot: the robot model (its description says which URDF and limits).
        dt: physics time step [s].
        gui: open pybullet's GUI window instead of running headless.
        realtime: pace :meth:`step` to the wall clock.
        visual: load visual meshes (needed for the eye cameras).
        fixed_base: bolt the root link to the world (bench tests of single limbs).
    """

    def __init__(self, robot: RobotModel, dt: float = 0.001, gui: bool = False,
                 realtime: bool = False, visual: bool = True, fixed_base: bool = False) -> None:
        self.robot = robot
        self.dt = dt
        self.realtime = realtime
        self._pacer = RealTimePacer() if realtime else None
        self.client = pb.connect(pb.GUI if gui else pb.DIRECT)
        if self.client < 0:
            raise RuntimeError("pybullet could not start (GUI requested without a display?)")
        self._pb_kwargs = {"physicsClientId": self.client}
        pb.setTimeStep(dt, **self._pb_kwargs)
        pb.setGravity(0, 0, -GRAVITY, **self._pb_kwargs)
        # 30 solver iterations with pyramid friction cost ~40% less than pybullet's default
        # (50, cone friction) with the same joint tracking and contact forces within 0.1% of
        # the weight (CoP jitter 0.1 mm); an early-exit residual threshold was faster still
        # but made the foot forces chatter by +-50%, which ruins the measured CoP.
        pb.setPhysicsEngineParameter(numSolverIterations=30, enableConeFriction=0, **self._pb_kwargs)
        pb.setAdditionalSearchPath(pybullet_data.getDataPath(), **self._pb_kwargs)
        self.plane = pb.loadURDF("plane.urdf", **self._pb_kwargs)
        friction = float(robot.description.sim.get("ground_friction", 1.0))
        pb.changeDynamics(self.plane, -1, lateralFriction=friction, **self._pb_kwargs)

        keep = set(robot.description.frames.values()) | {f.parent for f in robot.description.extra_frames.values()}
        keep |= {f"{side}_foot" for side in ("l", "r")}
        urdf = prepare_urdf(robot.description.urdf_path, keep, visual=visual)
        q_home = robot.home_configuration()
        self.body = pb.loadURDF(str(urdf), q_home[:3], q_home[3:7], useFixedBase=fixed_base,
                                flags=pb.URDF_USE_INERTIA_FROM_FILE, **self._pb_kwargs)
        self._index_links_and_joints()
        info = pb.getDynamicsInfo(self.body, -1, **self._pb_kwargs)
        # pybullet's base frame is the root link's inertial frame; keep the offset to
        # convert to and from the URDF root frame that pinocchio uses.
        self._base_inertial_pos = np.array(info[3])
        self._base_inertial_orn = np.array(info[4])
        sim_cfg = robot.description.sim
        contact = {}
        if "foot_contact_stiffness" in sim_cfg:
            contact = {"contactStiffness": float(sim_cfg["foot_contact_stiffness"]),
                       "contactDamping": float(sim_cfg.get("foot_contact_damping", 0.0))}
        for side in ("left", "right"):
            pb.changeDynamics(self.body, self._foot_link[side], lateralFriction=friction,
                              rollingFriction=float(sim_cfg.get("foot_rolling_friction", 0.0)),
                              spinningFriction=float(sim_cfg.get("foot_spinning_friction", 0.0)),
                              **contact, **self._pb_kwargs)
        self.position_gain = float(robot.description.sim.get("position_gain", 1.0))
        self.velocity_gain = float(robot.description.sim.get("velocity_gain", 1.0))
        self.t = 0.0
        self.torque_joints = np.zeros(0, dtype=int)
        self.reset(q_home)

    # ------------------------------------------------------------------ set-up
    def _index_links_and_joints(self) -> None:
        kw = self._pb_kwargs
        self.link_index: dict[str, int] = {pb.getBodyInfo(self.body, **kw)[0].decode(): -1}
        name_to_joint: dict[str, int] = {}
        for j in range(pb.getNumJoints(self.body, **kw)):
            info = pb.getJointInfo(self.body, j, **kw)
            self.link_index[info[12].decode()] = j
            if info[2] != pb.JOINT_FIXED:
                name_to_joint[info[1].decode()] = j
        missing = [n for n in self.robot.joint_names if n not in name_to_joint]
        if missing:
            raise RuntimeError(f"simulator lacks joints {missing}")
        #: pybullet joint index of each model joint, in model order.
        self.joint_ids = np.array([name_to_joint[n] for n in self.robot.joint_names], dtype=int)
        self._foot_link = {}
        for side, prefix in (("left", "l"), ("right", "r")):
            # The sole's contact geometry hangs on the foot link.
            self._foot_link[side] = self.link_index[f"{prefix}_foot"]
        self._foot_links_all = {side: {idx} for side, idx in self._foot_link.items()}
        for side in ("left", "right"):
            sole = self.link_index[self.robot.description.frames[f"{side}_sole"]]
            self._foot_links_all[side].add(sole)

    def reset(self, q: np.ndarray | None = None) -> None:
        """Teleport the robot to configuration ``q`` (default: home) at rest."""
        q = self.robot.home_configuration() if q is None else np.asarray(q, dtype=float)
        pos, orn = self._root_to_inertial(q[:3], q[3:7])
        pb.resetBasePositionAndOrientation(self.body, pos, orn, **self._pb_kwargs)
        pb.resetBaseVelocity(self.body, [0, 0, 0], [0, 0, 0], **self._pb_kwargs)
        for jid, angle in zip(self.joint_ids, q[NQ_BASE:]):
            pb.resetJointState(self.body, int(jid), float(angle), 0.0, **self._pb_kwargs)
        self.set_joint_targets(q[NQ_BASE:])
        if self.torque_mode:
            self.set_torque_mode(True, self.torque_joints)

    def close(self) -> None:
        if self.client is not None and pb.isConnected(self.client):
            pb.disconnect(self.client)
        self.client = None

    def __enter__(self) -> "Simulation":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --------------------------------------------------------------- frames
    def _root_to_inertial(self, pos, orn_xyzw):
        return pb.multiplyTransforms(pos, orn_xyzw, self._base_inertial_pos, self._base_inertial_orn)

    def _inertial_to_root(self, pos, orn_xyzw):
        inv_pos, inv_orn = pb.invertTransform(self._base_inertial_pos, self._base_inertial_orn)
        return pb.multiplyTransforms(pos, orn_xyzw, inv_pos, inv_orn)

    # -------------------------------------------------------------- control
    def set_joint_targets(self, joints: np.ndarray, velocities: np.ndarray | None = None) -> None:
        """Command (n,) joint positions [rad] (and optional feed-forward velocities [rad/s])
        to the position-controlled joints, each limited to its effort limit."""
        joints = np.asarray(joints, dtype=float)
        if joints.shape != (self.robot.n_joints,) or not np.all(np.isfinite(joints)):
            raise ValueError(f"joint targets must be {self.robot.n_joints} finite values")
        # Joints under torque control keep their torques: only the servoed ones take targets.
        idx = np.setdiff1d(np.arange(self.robot.n_joints), self.torque_joints) if self.torque_mode \
            else np.arange(self.robot.n_joints)
        kwargs = {}
        if velocities is not None:
            kwargs["targetVelocities"] = np.asarray(velocities, dtype=float)[idx].tolist()
        n = len(idx)
        pb.setJointMotorControlArray(
            self.body, self.joint_ids[idx].tolist(), pb.POSITION_CONTROL, targetPositions=joints[idx].tolist(),
            forces=self.robot.limits.effort[idx].tolist(), positionGains=[self.position_gain] * n,
            velocityGains=[self.velocity_gain] * n, **kwargs, **self._pb_kwargs)

    def set_torque_mode(self, enabled: bool = True, joints: np.ndarray | None = None) -> None:
        """Switch joints between pybullet's position servos and direct torque control.

        Args:
            enabled: True releases the servos of ``joints``; False re-arms them.
            joints: model joint indices (default: all joints).

        In torque mode pybullet's motors are released (a velocity motor with zero force is
        how pybullet turns them off), and those joints move only under the torques given
        to :meth:`apply_joint_torques` before each :meth:`step` (held until changed).
        Re-arming holds the current angles, so nothing jumps. Joints not in torque mode
        keep their position servos and targets.
        """
        idx = np.arange(self.robot.n_joints) if joints is None else np.asarray(joints, dtype=int)
        if enabled:
            pb.setJointMotorControlArray(self.body, self.joint_ids[idx].tolist(), pb.VELOCITY_CONTROL,
                                         targetVelocities=[0.0] * len(idx), forces=[0.0] * len(idx),
                                         **self._pb_kwargs)
            self.torque_joints = np.union1d(self.torque_joints, idx).astype(int)
        else:
            self.torque_joints = np.setdiff1d(self.torque_joints, idx).astype(int)
            q = self.joint_positions()
            pb.setJointMotorControlArray(
                self.body, self.joint_ids[idx].tolist(), pb.POSITION_CONTROL, targetPositions=q[idx].tolist(),
                forces=self.robot.limits.effort[idx].tolist(), positionGains=[self.position_gain] * len(idx),
                velocityGains=[self.velocity_gain] * len(idx), **self._pb_kwargs)

    @property
    def torque_mode(self) -> bool:
        """True when any joint is under direct torque control."""
        return len(self.torque_joints) > 0

    def apply_joint_torques(self, torques: np.ndarray, joints: np.ndarray | None = None) -> None:
        """Apply joint torques [N m] to torque-mode joints.

        Args:
            torques: (len(joints),) torques, or (n_joints,) when ``joints`` is None.
            joints: model joint indices (default: all joints, which must all be in torque mode).

        pybullet applies them during the next :meth:`step`; they are *not* clipped here, so
        a controller is responsible for its own torque limits.
        """
        idx = np.arange(self.robot.n_joints) if joints is None else np.asarray(joints, dtype=int)
        if not np.all(np.isin(idx, self.torque_joints)):
            raise RuntimeError("apply_joint_torques needs set_torque_mode(True) for those joints first")
        torques = np.asarray(torques, dtype=float)
        if torques.shape != (len(idx),) or not np.all(np.isfinite(torques)):
            raise ValueError(f"joint torques must be {len(idx)} finite values")
        pb.setJointMotorControlArray(self.body, self.joint_ids[idx].tolist(), pb.TORQUE_CONTROL,
                                     forces=torques.tolist(), **self._pb_kwargs)

    def joint_positions(self) -> np.ndarray:
        """(n_joints,) measured joint angles [rad], model order."""
        return np.array([s[0] for s in pb.getJointStates(self.body, self.joint_ids.tolist(), **self._pb_kwargs)])

    def joint_velocities(self) -> np.ndarray:
        """(n_joints,) measured joint velocities [rad/s], model order."""
        return np.array([s[1] for s in pb.getJointStates(self.body, self.joint_ids.tolist(), **self._pb_kwargs)])

    def set_gravity(self, g: float = GRAVITY) -> None:
        """Set the gravity magnitude [m/s^2] (0 for the no-gravity tuning setup)."""
        pb.setGravity(0, 0, -float(g), **self._pb_kwargs)

    def step_ramped(self, start: np.ndarray, end: np.ndarray, n: int) -> float:
        """Advance ``n`` physics steps while moving the (n_joints,) position targets linearly
        from ``start`` to ``end`` [rad].

        A controller at 100 Hz over 1 kHz physics must not hand each new command to the
        stiff position servos as a step: a step every 10 ms makes the robot hop from foot to
        foot and slide (56 mm of foot slip on an 8 cm squat); ramped, 0.07 mm.
        """
        start, end = np.asarray(start, dtype=float), np.asarray(end, dtype=float)
        for i in range(1, n + 1):
            self.set_joint_targets(start + (end - start) * (i / n))
            self.step(1)
        return self.t

    def step(self, n: int = 1) -> float:
        """Advance physics by ``n`` steps; returns the simulated time [s]."""
        for _ in range(n):
            pb.stepSimulation(**self._pb_kwargs)
            self.t += self.dt
        if self._pacer is not None:
            self._pacer.wait(self.t)
        return self.t

    # ------------------------------------------------------------ measuring
    def state(self) -> SimState:
        """Measured state in the pinocchio layout (root frame pose, base velocity in the
        root frame, joint angles and velocities)."""
        kw = self._pb_kwargs
        pos, orn = pb.getBasePositionAndOrientation(self.body, **kw)
        root_pos, root_orn = self._inertial_to_root(pos, orn)
        lin, ang = pb.getBaseVelocity(self.body, **kw)
        rot = np.array(pb.getMatrixFromQuaternion(root_orn)).reshape(3, 3)
        # Velocity of the root origin = velocity of the inertial origin + w x (root - com).
        lin_root = np.array(lin) + np.cross(ang, np.array(root_pos) - np.array(pos))
        states = pb.getJointStates(self.body, self.joint_ids.tolist(), **kw)
        q = np.empty(self.robot.nq)
        v = np.empty(self.robot.nv)
        q[:3], q[3:7] = root_pos, root_orn
        q[NQ_BASE:] = [s[0] for s in states]
        v[:3] = rot.T @ lin_root
        v[3:6] = rot.T @ np.array(ang)
        v[NV_BASE:] = [s[1] for s in states]
        return SimState(self.t, q, v)

    def link_position(self, urdf_link: str) -> np.ndarray:
        """(3,) world position of a URDF link frame as pybullet computes it [m]."""
        idx = self.link_index[urdf_link]
        if idx == -1:
            pos, orn = pb.getBasePositionAndOrientation(self.body, **self._pb_kwargs)
            return np.array(self._inertial_to_root(pos, orn)[0])
        return np.array(pb.getLinkState(self.body, idx, computeForwardKinematics=True, **self._pb_kwargs)[4])

    def total_mass(self) -> float:
        """Total simulated mass [kg]."""
        kw = self._pb_kwargs
        return float(sum(pb.getDynamicsInfo(self.body, i, **kw)[0] for i in range(-1, pb.getNumJoints(self.body, **kw))))

    def foot_contact(self, side: str) -> FootContact:
        """Normal force and centre of pressure under one foot (``"left"`` / ``"right"``)."""
        force, moment = 0.0, np.zeros(2)
        points = 0
        for link in self._foot_links_all[side]:
            for c in pb.getContactPoints(self.body, self.plane, link, -1, **self._pb_kwargs):
                fn = c[9]
                force += fn
                moment += fn * np.array(c[6][:2])  # contact position on the plane
                points += 1
        cop = moment / force if force > 1e-9 else np.full(2, np.nan)
        return FootContact(force, cop, points)

    def measured_cop(self) -> np.ndarray:
        """(2,) centre of pressure of both feet together [m] (NaN when airborne)."""
        contacts = [self.foot_contact(s) for s in ("left", "right")]
        total = sum(c.force for c in contacts)
        if total <= 1e-9:
            return np.full(2, np.nan)
        return sum(c.force * np.nan_to_num(c.cop) for c in contacts) / total

    def other_contacts(self) -> int:
        """Number of robot–ground contact points not under the feet (a fall touches down)."""
        feet = self._foot_links_all["left"] | self._foot_links_all["right"]
        return sum(1 for c in pb.getContactPoints(self.body, self.plane, **self._pb_kwargs) if c[3] not in feet)
