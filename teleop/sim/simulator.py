"""The simulated robot: pybullet on the same URDF as the pinocchio model.

* 1 kHz physics (``dt`` configurable), headless by default, GUI on request.
* Joints position-controlled by pybullet's motors, each limited to its effort limit from
  the robot description (the URDF's upper-body limits are placeholders) and, as a real
  motor is, to its velocity limit (the motor's ``maxVelocity``: without it a servo that
  fell behind a command moving at 0.9 of the limit caught up at up to 1.24 times it).
* A ground plane with friction; the contact forces under each foot and the measured centre
  of pressure are readable.
* Two modes: lock-step (``step`` returns as soon as physics is done: as fast as it can go,
  for trials and tests) and real time (``realtime=True``: ``step`` paces to the wall clock).
* Two joint servos (the ``servo`` argument, else the environment variable
  ``TELEOP_SIM_SERVO``, for running a test suite both ways, else the description's
  ``[sim] servo``; the order of the actuator below): ``"pybullet"`` (pybullet's constraint
  motors, the default) or ``"explicit"`` (:mod:`teleop.sim.servo`: a PD + gravity
  feed-forward computed here and applied through pybullet's torque mode; about twice as
  fast, since the 32 motor constraints dominate the solver).
* An optional actuator model (description ``[sim.actuator]`` or the ``actuator``
  argument; :mod:`teleop.sim.actuator`): servo gains, viscous and Coulomb friction,
  torque limit, command latency, noise on the measured angles, link mass / CoM scales
  (reference pid_tuning_and_sim_to_real.md, Part B). Off by default; on, it runs on the
  explicit servo. The environment variable ``TELEOP_SIM_ACTUATOR`` switches it for every
  simulation a command makes (demo, stations, trials, tuning) without editing the
  description: ``on`` (the description's values), ``off``, or a parameter file such as
  the one ``teleop calibrate-sim`` writes.

State is reported in the pinocchio layout of :class:`teleop.robot.model.RobotModel`
(base pose of the URDF root frame, not pybullet's inertial frame), in the stance frame.
"""

from __future__ import annotations

import hashlib
import os
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pybullet_data

from teleop.clock import RealTimePacer
from retarget.polygon import convex_hull
from teleop.robot.model import NQ_BASE, NV_BASE, RobotModel
from teleop.sim.actuator import (ActuatorFileError, ActuatorParams, description_actuator_params, link_scale_for,
                                 params_from_dict, read_parameter_file)
from teleop.sim.pybullet_module import pb
from teleop.sim.target_spline import TickInterpolator
from teleop.sim.urdf_prep import cache_dir, load_failure, mark_used, prepare_urdf, usable_copy, write_cached

if TYPE_CHECKING:
    from teleop.sim.servo import JointServo

GRAVITY = 9.81
#: Solver iterations of simulations that measure joints precisely (see Simulation).
PRECISE_SOLVER_ITERATIONS = 30
SERVO_KINDS = ("pybullet", "explicit")
#: Environment variable that overrides the description's servo kind.
SERVO_ENV = "TELEOP_SIM_SERVO"
ACTUATOR_ENV = "TELEOP_SIM_ACTUATOR"
#: Period [s] at which the explicit servo's gravity feed-forward is refreshed (the control
#: rate: gravity torques change with the posture, which moves at control-rate speeds).
FEEDFORWARD_PERIOD = 0.01
#: [sim] contact settings that [sim.explicit_servo] may override for the explicit servo.
EXPLICIT_CONTACT_KEYS = ("foot_rolling_friction", "foot_spinning_friction")
#: Explicit servo gains when the description gives none [N m/rad], [N m s/rad].
DEFAULT_EXPLICIT_GAINS = {"kp": 3000.0, "kd": 30.0}


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


class DisplayUnavailable(OSError):
    """pybullet's GUI window was asked for where no display can be opened."""


def check_display() -> None:
    """Raise :class:`DisplayUnavailable` if pybullet's GUI window cannot open here.

    On Linux pybullet's GUI talks to an X server, and when it cannot reach one it prints
    "cannot connect to X server" and exits the whole process (status 1): no exception to
    catch. So the display is tried first, with Xlib's own XOpenDisplay (the library
    pybullet loads). macOS and Windows need no X server: nothing to check there.
    """
    import ctypes
    import ctypes.util
    import sys

    if not sys.platform.startswith("linux"):
        return
    hint = "run it on a desktop session, over `ssh -X`, or under `xvfb-run`; or leave the GUI out"
    display = os.environ.get("DISPLAY", "")
    if not display:
        raise DisplayUnavailable(f"pybullet's GUI window needs a display, and DISPLAY is not set ({hint})")
    name = ctypes.util.find_library("X11")
    if name is None:          # pybullet would not find it either: let it report that itself
        return
    x11 = ctypes.CDLL(name)
    x11.XOpenDisplay.argtypes = [ctypes.c_char_p]
    x11.XOpenDisplay.restype = ctypes.c_void_p
    x11.XCloseDisplay.argtypes = [ctypes.c_void_p]
    handle = x11.XOpenDisplay(display.encode())
    if not handle:
        raise DisplayUnavailable(f"pybullet's GUI window needs a display, and the X server at DISPLAY={display} "
                                 f"cannot be reached (not running, or access refused: xhost/xauth) ({hint})")
    x11.XCloseDisplay(handle)


class Simulation:
    """A pybullet simulation of one robot on flat ground.

    Args:
        robot: the robot model (its description says which URDF and limits).
        dt: physics time step [s].
        gui: open pybullet's GUI window instead of running headless
            (:class:`DisplayUnavailable` if no display can be opened).
        realtime: pace :meth:`step` to the wall clock.
        visual: load visual meshes (needed for the eye cameras).
        fixed_base: bolt the root link to the world (bench tests of single limbs).
        servo: "pybullet" or "explicit" (default: ``$TELEOP_SIM_SERVO``, else the
            description's ``[sim] servo``, else "pybullet").
        actuator: actuator model: :class:`ActuatorParams`, a parameter file path, False
            (off), or None (``$TELEOP_SIM_ACTUATOR`` if set, else the description's
            ``[sim.actuator]``, off unless enabled).
            When on, the explicit servo runs with these parameters.
        collisions: False drops every collision shape (a fixed-base robot in the air, as
            in calibration: loads ~20x faster, since pybullet need not build mesh hulls).
        solver_iterations: pybullet's constraint-solver iterations per step (default: the
            description's ``[sim] solver_iterations``, else :data:`PRECISE_SOLVER_ITERATIONS`).
            Experiments that measure the joints precisely (PID tuning, calibration, the
            fidelity benchmark) pass :data:`PRECISE_SOLVER_ITERATIONS` whatever the
            description trades for speed: with the iCub's 15, the arm's held joints give way
            more and the tuning table's rule rows moved (setup 1 PDControl AE-A 2.06 -> 3.19 deg).
    """

    def __init__(self, robot: RobotModel, dt: float = 0.001, gui: bool = False,
                 realtime: bool = False, visual: bool = True, fixed_base: bool = False,
                 servo: str | None = None, actuator: ActuatorParams | str | Path | bool | None = None,
                 collisions: bool = True, solver_iterations: int | None = None) -> None:
        self.robot = robot
        self.dt = dt
        self.fixed_base = fixed_base
        self.actuator = self._resolve_actuator(actuator)
        self.servo_kind = "explicit" if self.actuator is not None else self._resolve_servo(servo)
        self.realtime = realtime
        self._pacer = RealTimePacer() if realtime else None
        # The model file is prepared before pybullet is connected: a failure there (a mesh
        # not found, a disk full) leaves no client behind.
        keep = set(robot.description.frames.values()) | {f.parent for f in robot.description.extra_frames.values()}
        keep |= {f"{side}_foot" for side in ("l", "r")}
        urdf = prepare_urdf(robot.description.urdf_path, keep, visual=visual)
        link_scales = self.actuator.link_scales if self.actuator is not None else {}
        if link_scales or not collisions:
            urdf = _rewritten_urdf(urdf, link_scales, collisions)
        try:
            if gui:
                check_display()   # else pybullet exits the whole process ("cannot connect to X server")
            self.client = pb.connect(pb.GUI if gui else pb.DIRECT)
            if self.client < 0:
                if gui:
                    raise DisplayUnavailable("pybullet could not open its GUI window (a GUI simulation already runs "
                                             "in this process, or the display refused it)")
                raise RuntimeError("pybullet could not start a simulation")
            try:
                self._set_up(urdf, fixed_base, solver_iterations)
            except BaseException:
                self.close()      # no half-made simulation left connected
                raise
        finally:
            if link_scales:
                urdf.unlink(missing_ok=True)  # one per parameter set (calibration): not cached

    def _set_up(self, urdf: Path, fixed_base: bool, solver_iterations: int | None) -> None:
        """Everything after connecting: the world, the robot from ``urdf``, its contacts and
        servo, at the home posture."""
        robot = self.robot
        dt = self.dt
        self._pb_kwargs = {"physicsClientId": self.client}
        pb.setTimeStep(dt, **self._pb_kwargs)
        pb.setGravity(0, 0, -GRAVITY, **self._pb_kwargs)
        # 30 solver iterations (the default; a description may set fewer, see icub.toml)
        # with pyramid friction cost ~40% less than pybullet's default (50, cone friction)
        # with the same joint tracking and contact forces within 0.1% of the weight (CoP
        # jitter 0.1 mm); an early-exit residual threshold was faster still but made the
        # foot forces chatter by +-50%, which ruins the measured CoP.
        iterations = int(solver_iterations or robot.description.sim.get("solver_iterations", PRECISE_SOLVER_ITERATIONS))
        pb.setPhysicsEngineParameter(numSolverIterations=iterations, enableConeFriction=0, **self._pb_kwargs)
        pb.setAdditionalSearchPath(pybullet_data.getDataPath(), **self._pb_kwargs)
        self.plane = pb.loadURDF("plane.urdf", **self._pb_kwargs)
        friction = float(robot.description.sim.get("ground_friction", 1.0))
        pb.changeDynamics(self.plane, -1, lateralFriction=friction, **self._pb_kwargs)

        q_home = robot.home_configuration()
        try:
            self.body = pb.loadURDF(str(urdf), q_home[:3], q_home[3:7], useFixedBase=fixed_base,
                                    flags=pb.URDF_USE_INERTIA_FROM_FILE, **self._pb_kwargs)
        except pb.error as exc:
            raise load_failure(urdf, exc) from exc
        self._index_links_and_joints()
        info = pb.getDynamicsInfo(self.body, -1, **self._pb_kwargs)
        # pybullet's base frame is the root link's inertial frame; keep the offset to
        # convert to and from the URDF root frame that pinocchio uses.
        self._base_inertial_pos = np.array(info[3])
        self._base_inertial_orn = np.array(info[4])
        sim_cfg = dict(robot.description.sim)
        if self.servo_kind == "explicit":
            # The explicit servo may set its own foot contact settings (see the description).
            sim_cfg.update({k: v for k, v in sim_cfg.get("explicit_servo", {}).items() if k in EXPLICIT_CONTACT_KEYS})
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
        self._steps = 0     # physics steps taken: t = k dt, not a sum of k dts (1e-12 s off after 3000)
        self.torque_joints: np.ndarray = np.zeros(0, dtype=int)
        self._user_torques = np.zeros(robot.n_joints)   # torque-mode joints' torques [N m], held
        self._joint_id_list = self.joint_ids.tolist()
        n = robot.n_joints
        self._motor_arguments = {"forces": robot.limits.effort.tolist(), "positionGains": [self.position_gain] * n,
                                 "velocityGains": [self.velocity_gain] * n, **self._pb_kwargs}
        self._servo: JointServo | None = None
        self._noise_rng: np.random.Generator | None = None
        if self.servo_kind == "explicit":
            self._setup_explicit_servo()
        self.reset(q_home)
        if self._servo is None:
            self._arm_position_motors(np.arange(n), self.joint_positions())

    def _arm_position_motors(self, idx: np.ndarray, q: np.ndarray) -> None:
        """Put the pybullet motors of joints ``idx`` (model indices) in position control,
        holding ``q`` ((n_joints,) [rad]), limited to their effort [N m] and velocity [rad/s]
        limits.

        setJointMotorControlArray has no maxVelocity, hence one call per joint here; the
        motor keeps the velocity cap through the array calls of every later command, but
        not through torque (velocity) mode, so re-arming comes here too. Measured without
        the cap: the demo's wrist pitch, commanded at 2.7 rad/s = 0.9 of its limit, ran at
        up to 3.72 rad/s catching up after a lag; with it, 3.0 rad/s."""
        for j in np.asarray(idx, dtype=int):
            pb.setJointMotorControl2(self.body, int(self.joint_ids[j]), pb.POSITION_CONTROL, targetPosition=float(q[j]),
                                     force=float(self.robot.limits.effort[j]), positionGain=self.position_gain,
                                     velocityGain=self.velocity_gain, maxVelocity=float(self.robot.limits.velocity[j]),
                                     **self._pb_kwargs)

    @property
    def t(self) -> float:
        """Simulated time [s] since the simulation was made: physics steps taken times dt."""
        return self._steps * self.dt

    def _resolve_servo(self, servo: str | None) -> str:
        # An explicit argument wins, as ``actuator``'s does: a test or benchmark that asks for
        # one servo got the other under $TELEOP_SIM_SERVO, without a word.
        kind = servo or os.environ.get(SERVO_ENV) or self.robot.description.sim.get("servo", "pybullet")
        if kind not in SERVO_KINDS:
            raise ValueError(f"servo must be one of {SERVO_KINDS}, got {kind!r} "
                             f"(argument, ${SERVO_ENV} or {self.robot.description.source} [sim] servo)")
        return kind

    def _resolve_actuator(self, actuator) -> ActuatorParams | None:
        """The actuator parameters, or None when the actuator model is off."""
        robot = self.robot
        if actuator is False:
            return None
        if isinstance(actuator, ActuatorParams):
            return actuator
        from_env = os.environ.get(ACTUATOR_ENV, "").strip()
        if actuator is None and from_env:
            if from_env.lower() in ("off", "0", "false"):
                return None
            if from_env.lower() in ("on", "1", "true"):
                return description_actuator_params(robot)
            path = Path(from_env)
            if not path.is_file():
                raise ActuatorFileError(f"${ACTUATOR_ENV}={from_env}: no such parameter file "
                                        "(or say on / off)")
            try:
                return params_from_dict(read_parameter_file(path), robot.joint_names, robot.limits.effort,
                                        source=str(path))
            except ActuatorFileError as exc:
                # Named by the variable: a user who set it long ago would not know where the
                # file comes from (the missing file above is said the same way).
                raise ActuatorFileError(f"${ACTUATOR_ENV}: {exc}") from None
        if actuator is not None:
            return params_from_dict(read_parameter_file(actuator), robot.joint_names, robot.limits.effort,
                                    source=str(actuator))
        section = robot.description.sim.get("actuator", {})
        if not isinstance(section, dict):
            raise ActuatorFileError(f"{robot.description.source} [sim.actuator]: must be a table")
        if not section.get("enabled", False):
            return None
        return description_actuator_params(robot)

    def _setup_explicit_servo(self) -> None:
        """Release pybullet's motors for good and build the explicit servo (teleop.sim.servo)."""
        from teleop.sim.servo import GravityFeedForward, JointServo, apparent_inertia

        robot = self.robot
        params = self.actuator
        if params is None:
            section = {k: v for k, v in robot.description.sim.get("explicit_servo", {}).items()
                       if k not in EXPLICIT_CONTACT_KEYS}
            section.setdefault("default", {})
            for key, value in DEFAULT_EXPLICIT_GAINS.items():
                section["default"].setdefault(key, value)
            params = params_from_dict(section, robot.joint_names, robot.limits.effort,
                                      source=f"{robot.description.source} [sim.explicit_servo]")
        soles = () if self.fixed_base else ("left_sole", "right_sole")
        inertia = apparent_inertia(robot, robot.home_configuration(), self.fixed_base, soles)
        self._servo = JointServo(params, inertia, self.dt)
        self._feedforward = GravityFeedForward(robot, self.fixed_base) if params.feedforward == "gravity" else None
        self._ff_every = max(1, int(round(FEEDFORWARD_PERIOD / self.dt)))
        self._ff_countdown = 0
        self._inertia_data = robot.model.createData()
        self._explicit_torques: np.ndarray | None = None   # the explicit servo's last torques [N m]
        if self.actuator is not None and np.any(self.actuator.noise_std > 0):
            self._noise_rng = np.random.default_rng(self.actuator.seed)
        if self.actuator is not None:
            # The actuator model is the joint's whole damping (B4: K_d + k_v): pybullet also
            # applied the URDF's <dynamics damping> (1 N m s/rad on every iCub joint, 5x the
            # wrists' K_d + k_v), unseen by the parameter file and fitted around by the
            # calibration (tests/test_reference_sim.py, B3 check: 106 rad/s^2 off at 0.5 rad/s).
            for joint_id in self._joint_id_list:
                pb.changeDynamics(self.body, joint_id, jointDamping=0.0, **self._pb_kwargs)
        n = robot.n_joints
        pb.setJointMotorControlArray(self.body, self._joint_id_list, pb.VELOCITY_CONTROL,
                                     targetVelocities=[0.0] * n, forces=[0.0] * n, **self._pb_kwargs)

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
        self._link_names = {index: name for name, index in self.link_index.items()}
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
        if self._servo is not None:
            self._servo.reset(q[NQ_BASE:])
            self._ff_countdown = 0
        # No step since: no applied torque (pybullet keeps reporting the last step's).
        self._stepped_since_reset = False
        if self._noise_rng is not None:
            # The sensor noise restarts with the robot: a reset session reads the same
            # noise as the first one (lock-step sessions are promised to be reproducible).
            assert self.actuator is not None  # the noise comes with the actuator model
            self._noise_rng = np.random.default_rng(self.actuator.seed)
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
        if velocities is not None:
            velocities = np.asarray(velocities, dtype=float)
            if velocities.shape != (self.robot.n_joints,) or not np.all(np.isfinite(velocities)):
                raise ValueError(f"joint target velocities must be {self.robot.n_joints} finite values")
        if self._servo is not None:
            # Torque-mode joints ignore the command: step() overrides their torques.
            self._servo.command(joints, velocities)
            return
        kwargs = {}
        if not self.torque_mode:
            # Every joint servoed (the usual case, once per physics step): the motor
            # arguments other than the targets are built once.
            if velocities is not None:
                kwargs["targetVelocities"] = velocities.tolist()
            pb.setJointMotorControlArray(self.body, self._joint_id_list, pb.POSITION_CONTROL,
                                         targetPositions=joints.tolist(), **self._motor_arguments, **kwargs)
            return
        # Joints under torque control keep their torques: only the servoed ones take targets.
        idx = np.setdiff1d(np.arange(self.robot.n_joints), self.torque_joints)
        if velocities is not None:
            kwargs["targetVelocities"] = velocities[idx].tolist()
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
        if self._servo is not None:
            # pybullet's motors are off for good; the explicit servo skips torque joints
            # (and leaves them out of its coupling, refreshed at the next step).
            self._ff_countdown = 0
            if enabled:
                self.torque_joints = np.union1d(self.torque_joints, idx).astype(int)
                self._user_torques[idx] = 0.0
            else:
                self.torque_joints = np.setdiff1d(self.torque_joints, idx).astype(int)
                self._servo.hold(idx, self._true_joint_states()[0][idx])
            return
        if enabled:
            pb.setJointMotorControlArray(self.body, self.joint_ids[idx].tolist(), pb.VELOCITY_CONTROL,
                                         targetVelocities=[0.0] * len(idx), forces=[0.0] * len(idx),
                                         **self._pb_kwargs)
            self.torque_joints = np.union1d(self.torque_joints, idx).astype(int)
            self._user_torques[idx] = 0.0
        else:
            self.torque_joints = np.setdiff1d(self.torque_joints, idx).astype(int)
            self._arm_position_motors(idx, self.joint_positions())

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
        self._user_torques[idx] = torques  # applied (held) by every physics step of step()

    def joint_positions(self) -> np.ndarray:
        """(n_joints,) measured joint angles [rad], model order (with the actuator model's
        sensor noise, if any)."""
        q = np.array([s[0] for s in pb.getJointStates(self.body, self._joint_id_list, **self._pb_kwargs)])
        return self._add_noise(q)

    def _add_noise(self, q: np.ndarray) -> np.ndarray:
        if self._noise_rng is not None:
            assert self.actuator is not None  # the noise comes with the actuator model
            q = q + self._noise_rng.normal(0.0, self.actuator.noise_std)
        return q

    def _true_joint_states(self) -> tuple[np.ndarray, np.ndarray]:
        """((n,) angles [rad], (n,) velocities [rad/s]) without sensor noise."""
        states = pb.getJointStates(self.body, self._joint_id_list, **self._pb_kwargs)
        qv = np.array([s[:2] for s in states])
        return qv[:, 0], qv[:, 1]

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
        # The explicit servo also gets the ramp's velocity, so its damping does not brake
        # the motion (pybullet's motors keep their behaviour: targets only).
        return self.step_through(*TickInterpolator(start, "linear").targets(end, n, n * self.dt))

    def step_through(self, positions: np.ndarray, velocities: np.ndarray | None = None) -> float:
        """One physics step per row of (n, n_joints) joint position targets [rad] (see
        :class:`teleop.sim.target_spline.TickInterpolator`); the explicit servo also gets the
        rows of ``velocities`` [rad/s] (pybullet's motors: targets only, as in
        :meth:`step_ramped`)."""
        if self._servo is None:
            velocities = None
        for i in range(len(positions)):
            self.set_joint_targets(positions[i], None if velocities is None else velocities[i])
            self.step(1)
        return self.t

    def step(self, n: int = 1) -> float:
        """Advance physics by ``n`` steps; returns the simulated time [s]."""
        if self._servo is not None:
            self._step_explicit(n)
        else:
            # pybullet clears a TORQUE_CONTROL force after each stepSimulation: the torques
            # the caller gave are re-applied every physics step, so they are held until
            # changed, as under the explicit servo (once per step(n) they acted for one
            # physics step only, and gravity had the joint for the other n - 1).
            torque_ids = self.joint_ids[self.torque_joints].tolist() if len(self.torque_joints) else None
            torques = self._user_torques[self.torque_joints].tolist() if torque_ids else None
            for _ in range(n):
                if torque_ids:
                    pb.setJointMotorControlArray(self.body, torque_ids, pb.TORQUE_CONTROL, forces=torques,
                                                 **self._pb_kwargs)
                pb.stepSimulation(**self._pb_kwargs)
                self._steps += 1
        self._stepped_since_reset = self._stepped_since_reset or n > 0
        if self._pacer is not None:
            self._pacer.wait(self.t)
        return self.t

    def _step_explicit(self, n: int) -> None:
        """``n`` physics steps with the explicit servo's torques (teleop.sim.servo)."""
        if n <= 0:
            return  # (no step: no torques applied, the last ones stay)
        kw = self._pb_kwargs
        servo = self._servo
        assert servo is not None  # step() calls this only with the explicit servo
        torque_joints = self.torque_joints
        apply_friction_to_torque_joints = self.actuator is not None
        from teleop.sim.servo import inverse_inertia
        for _ in range(n):
            if self._ff_countdown <= 0:
                # Gravity feed-forward and the servo's coupled inverse inertia follow the
                # posture at the control rate (teleop.sim.servo.JointServo.set_inverse_inertia).
                q_now, feet = self._true_state().q, self._feet_in_contact()
                if self._feedforward is not None:
                    servo.feedforward = self._feedforward(q_now, feet)
                soles = tuple(f"{side}_sole" for side, on in zip(("left", "right"), feet) if on)
                servo.set_inverse_inertia(inverse_inertia(self.robot, q_now, self.fixed_base, soles,
                                                          self._inertia_data), torque_joints)
                self._ff_countdown = self._ff_every
            self._ff_countdown -= 1
            q, qdot = self._true_joint_states()
            tau, friction = servo.torques(q, qdot)
            if friction is not None:
                tau += friction
            if len(torque_joints):
                tau[torque_joints] = self._user_torques[torque_joints]
                if friction is not None and apply_friction_to_torque_joints:
                    tau[torque_joints] += friction[torque_joints]
            pb.setJointMotorControlArray(self.body, self._joint_id_list, pb.TORQUE_CONTROL, forces=tau.tolist(), **kw)
            pb.stepSimulation(**kw)
            self._steps += 1
        self._explicit_torques = tau

    def applied_joint_torques(self) -> np.ndarray:
        """(n_joints,) torque each joint's actuator applied in the last physics step [N m].

        Under pybullet's position motors, the motor torque pybullet reports (0 for joints in
        torque mode: their torque is the caller's). Under the explicit servo, the torques it
        applied, friction and torque-mode joints included: pybullet reports 0 for every
        torque-controlled joint, which made every torque read from it zero there.
        Zero after :meth:`reset` until the next step (the robot is at rest, nothing applied).
        """
        if not self._stepped_since_reset:
            return np.zeros(self.robot.n_joints)
        if self._servo is not None:
            return np.array(self._explicit_torques if self._explicit_torques is not None
                            else np.zeros(self.robot.n_joints))
        states = pb.getJointStates(self.body, self._joint_id_list, **self._pb_kwargs)
        return np.array([s[3] for s in states])

    def _feet_in_contact(self) -> tuple[bool, bool]:
        """Which feet touch the ground (for sharing the gravity load, teleop.sim.servo)."""
        if self.fixed_base:
            return (False, False)
        links = {c[3] for c in pb.getContactPoints(self.body, self.plane, **self._pb_kwargs)}
        return bool(links & self._foot_links_all["left"]), bool(links & self._foot_links_all["right"])

    # ------------------------------------------------------------ measuring
    def state(self) -> SimState:
        """Measured state in the pinocchio layout (root frame pose, base velocity in the
        root frame, joint angles and velocities; joint angles with the actuator model's
        sensor noise, if any)."""
        state = self._true_state()
        if self._noise_rng is not None:
            state.q[NQ_BASE:] = self._add_noise(state.q[NQ_BASE:])
        return state

    def _true_state(self) -> SimState:
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

    def link_pose(self, urdf_link: str) -> tuple[np.ndarray, np.ndarray]:
        """((3,) position [m], (3, 3) rotation) of a non-root URDF link frame in the world."""
        state = pb.getLinkState(self.body, self.link_index[urdf_link], computeForwardKinematics=True,
                                **self._pb_kwargs)
        rotation = np.array(pb.getMatrixFromQuaternion(state[5])).reshape(3, 3)
        return np.array(state[4]), rotation

    def sole_corners(self, side: str) -> np.ndarray:
        """(4, 3) world positions of a sole's contact corners where the simulated foot is now [m]."""
        position, rotation = self.link_pose(self.robot.description.frames[f"{side}_sole"])
        return self.robot.sole_corners_at(side, rotation, position)

    def support_polygon(self, sides: tuple[str, ...] = ("left", "right")) -> np.ndarray:
        """(K, 2) counter-clockwise support polygon of the feet as they stand now (they may
        have slipped or rotated since the start), ground plane [m]."""
        return convex_hull(np.vstack([self.sole_corners(side)[:, :2] for side in sides]))

    def total_mass(self) -> float:
        """Total simulated mass [kg]."""
        kw = self._pb_kwargs
        return float(sum(pb.getDynamicsInfo(self.body, i, **kw)[0]
                         for i in range(-1, pb.getNumJoints(self.body, **kw))))

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
        return sum((c.force * np.nan_to_num(c.cop) for c in contacts), np.zeros(2)) / total

    def touching(self) -> list[tuple[int, str]]:
        """(body id, robot link name) of each body other than the ground that the robot
        touches now, e.g. a hand on the table of the scene, sorted. Such a contact pushes the
        joints: their measured speeds then exceed what the controller commands."""
        pairs = {(c[2], c[3]) for c in pb.getContactPoints(self.body, **self._pb_kwargs)
                 if c[2] not in (self.plane, self.body)}
        return sorted((body, self._link_names.get(link, str(link))) for body, link in pairs)

    def other_contacts(self) -> int:
        """Number of robot–ground contact points not under the feet (a fall touches down)."""
        feet = self._foot_links_all["left"] | self._foot_links_all["right"]
        return sum(1 for c in pb.getContactPoints(self.body, self.plane, **self._pb_kwargs) if c[3] not in feet)


def _rewritten_urdf(urdf: Path, link_scales: dict[str, tuple[float, float]], collisions: bool = True) -> Path:
    """A copy of ``urdf`` with each link's mass and rotational inertia scaled by its mass
    scale and its centre-of-mass offset (inertial origin) by its CoM scale (reference B1:
    CAD masses and CoMs are off; B2 calibrates them), and without collision shapes if
    ``collisions`` is False. pybullet cannot move a link's CoM after loading, hence a
    rewritten file (cached by content)."""
    source = Path(urdf).read_bytes()
    key = hashlib.sha256(source + repr((sorted(link_scales.items()), collisions)).encode()).hexdigest()[:16]
    # Scaled files are written per process and deleted once loaded; collision-free ones are cached.
    out = cache_dir() / (f"scaled_{key}_{os.getpid()}.urdf" if link_scales else f"nocollision_{key}.urdf")
    if not link_scales and usable_copy(out):   # a cut-short copy is made again
        mark_used(out)    # kept by prepare_urdf's pruning while in use
        return out
    root = ET.fromstring(source)
    for link in root.findall("link"):
        if not collisions:
            for collision in link.findall("collision"):
                link.remove(collision)
        mass_scale, com_scale = link_scale_for(link_scales, link.get("name", ""))
        inertial = link.find("inertial")
        if inertial is None or (mass_scale == 1.0 and com_scale == 1.0):
            continue
        mass = inertial.find("mass")
        if mass is not None:
            mass.set("value", repr(float(mass.get("value", "0")) * mass_scale))
        inertia = inertial.find("inertia")
        if inertia is not None:
            for k in ("ixx", "ixy", "ixz", "iyy", "iyz", "izz"):
                inertia.set(k, repr(float(inertia.get(k, "0")) * mass_scale))
        origin = inertial.find("origin")
        if origin is not None:
            xyz = [float(x) * com_scale for x in origin.get("xyz", "0 0 0").split()]
            origin.set("xyz", " ".join(repr(x) for x in xyz))
    write_cached(ET.ElementTree(root), out)
    return out
