r"""The jogging loop: tag pose -> filter -> mapping -> damping -> whole-body QP -> safety -> robot.

One :meth:`JogController.tick` per control period (100 Hz by default; the reference's
absolute-jogging node runs at 10 Hz and waits on two ROS service round trips per cycle,
§B.5 [Note], which is where its 0.35-0.65 s delay comes from). Per tick:

1. the newest tag measurement (if any) goes through :class:`PoseFilter` (tag lost: the
   target is held);
2. the filtered pose becomes a hand goal in the base frame: absolute jogging
   (:meth:`TagMapping.absolute`) or, while the clutch is held, relative jogging
   (:class:`RelativeJog`); orientation only while it passes its noise gate;
3. reachability: a goal beyond the arm's reach is pulled back onto the reachable sphere
   around the shoulder (the hand goes as far as it can instead of freezing), and a tick
   after which the hand stays short of the goal is reported "out of reach" (see
   :attr:`JogSettings.reach_tolerance_m`);
4. damping (§B.5 Eq. 5.2, slerp), a Cartesian speed limit on the hand target, and an
   acceleration limit on its feed-forward velocity (camera frames make the target jump a
   little; unlimited, those jumps shook the simulated robot until its feet crept);
5. the whole-body controller (the product's strict-priority QP with the feet as contacts,
   CoM inside the support polygon: the rest of the robot keeps its balance) computes the
   next configuration from the *committed* one;
6. :class:`JointSafety` (continuous-joint unwrapping, 90 deg guard, limits, joint velocity
   limits) and :class:`CollisionWorld` (interpolated states against the robot itself and
   the obstacles) accept, shorten or refuse the step; a step stopped before a collision is
   replaced, where it can be, by one that moves the arm along the contact instead of into
   it (:meth:`JogController._slide`); the result is committed and sent, and the
   whole-body controller is told which step that was (its next tick's acceleration
   window and ZMP rows start from the committed velocity, not from the one it solved).

Deliberate differences from the reference's absolute-jogging node (§B.5): no cycle is
skipped when the hand is within a threshold of the target (§B.5 B; the thesis gives no
threshold): the QP keeps tracking and the tag filter, not a dead band, keeps a still hand
still; the damped target j = c + s d is the hand task's target, reached at ``hand_gain``
within the speed limits, not solved by IK in one cycle (s = 1 is "no slow-down", not "there
in 10 ms"); a step stopped before a collision slides along the contact where it can instead
of halting there (§B.8: jog_control halts and stays short of the target).

The hand task is the default stack's hand position task with a higher gain (the default
10/s is tuned for whole-body teleoperation with feed-forward; jogging wants a snappy hand)
plus a hand orientation task composed from :class:`FrameOrientationTask`; no control file
is changed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Sequence

import numpy as np
import pinocchio as pin

from teleop.control.controller import SolveStatus, WholeBodyController
from teleop.control.stack import TaskSpec, load_stack
from teleop.control.tasks import FrameOrientationTask, FramePositionTask
from teleop.jog.collision import CollisionWorld, interpolate
from teleop.jog.filtering import FilteredPose, PoseFilter
from teleop.jog.mapping import HandPose, RelativeJog, TagMapping, damp
from teleop.jog.safety import JointSafety
from teleop.robot.model import NQ_BASE, NV_BASE, RobotModel
from teleop.sim.scene import SceneObject


@dataclass
class JogSettings:
    """Jogging parameters.

    Attributes:
        hand: ``"right"`` or ``"left"``.
        mode: ``"absolute"`` or ``"relative"`` (clutch).
        damping: s in [0.1, 1] (§B.5; 1 = no slow-down).
        mapping: camera -> base mapping.
        control_dt: control period [s].
        hand_gain: gain of the hand position task [1/s].
        arm_acceleration: joint acceleration bound of the jogged arm [rad/s^2] (the rest of
            the robot keeps its stack's bounds, which protect the balance).
        orientation: follow the tag's orientation (when its noise gate allows).
        orientation_weight, orientation_gain: of the hand orientation task.
        max_hand_speed: Cartesian speed limit of the hand target [m/s].
        max_hand_acceleration: limit of the change of the hand's feed-forward velocity [m/s^2]
            (a hand-held tag's figure-eight needs ~0.2 m/s^2).
        reach_fraction: goals are kept within this fraction of the arm's reach from the shoulder
            (or within the hand's starting distance from it, if that is further).
        reach_tolerance_m: a tick is "out of reach" when, after its step, the hand is farther
            than this from the goal [m] and cannot close the gap: the goal lies beyond the
            reachable sphere by more than this, or the step did not bring the hand closer to
            the goal by ``approach_speed * control_dt`` (the hand is as close as it gets: joint
            limits, balance). A hand still on its way to a goal it can reach is not. 15 mm:
            following a tag that moves within reach, the hand lags its goal by 3.5 mm at
            0.06 m/s (``--make-test-video``'s tag), 6 mm at 0.13 m/s and 12 mm at 0.25 m/s
            (measured, either hand); beyond that speed it lags more but keeps approaching.
        approach_speed: the least speed towards the goal [m/s] that counts as still on the way
            (a hand reaching a goal 10 cm away closes in at 0.13-0.7 m/s until it is within 15 mm).
        predict_s: the filtered position is extrapolated by its velocity over the
            measurement's age, at most this long [s] (hides the camera's frame period).
        collision_checks: check interpolated states for collisions.
        clearance_m, resolution_m: see :class:`CollisionWorld`.
        stack: the controller stack preset the jogging stack is built from.
    """

    hand: str = "right"
    mode: str = "absolute"
    damping: float = 1.0
    mapping: TagMapping = field(default_factory=TagMapping)
    control_dt: float = 0.01
    hand_gain: float = 40.0
    arm_acceleration: float = 80.0
    orientation: bool = True
    orientation_weight: float = 1.0
    orientation_gain: float = 10.0
    max_hand_speed: float = 1.0
    max_hand_acceleration: float = 10.0
    reach_fraction: float = 0.95
    reach_tolerance_m: float = 0.015
    approach_speed: float = 0.05
    predict_s: float = 0.05
    collision_checks: bool = True
    clearance_m: float = 0.01
    resolution_m: float = 0.02
    stack: str = "default"

    def __post_init__(self) -> None:
        if self.hand not in ("left", "right"):
            raise ValueError("hand must be 'left' or 'right'")
        if self.mode not in ("absolute", "relative"):
            raise ValueError("mode must be 'absolute' or 'relative'")
        if not 0.1 <= self.damping <= 1.0:
            raise ValueError("damping factor must be in [0.1, 1]")
        if not self.arm_acceleration > 0:
            raise ValueError("arm_acceleration must be > 0 [rad/s^2]")


@dataclass
class TickReport:
    """What one tick did.

    Attributes:
        t: control time [s]. q: (nq,) committed configuration.
        goal: hand goal (base frame) or None before the first sighting.
        target: damped, speed-limited target given to the controller.
        status: "ok", "held" (no tag yet / QP held), "out of reach" (the hand stays short
            of the goal: :attr:`JogSettings.reach_tolerance_m`), or the safety action taken
            ("refused: ...", "velocity limited", "stopped before collision: ...", "slid along
            a collision: ...")
        filtered: the filter's output (None before the first sighting).
        reachable: False if the goal had to be pulled back into reach.
        hand_to_goal_m: distance from the hand (committed configuration) to the goal [m]
            after the step; None without a goal.
        orientation_followed: the goal's orientation is the tag's (False: held, because of
            ``orientation=False`` or the orientation's noise gate).
        compute_ms: wall-clock time of the tick (filter + QP + safety) [ms].
        collision_ms: part of it spent in collision checks [ms].
    """

    t: float
    q: np.ndarray
    goal: HandPose | None
    target: HandPose | None
    status: str
    filtered: FilteredPose | None
    reachable: bool = True
    compute_ms: float = 0.0
    collision_ms: float = 0.0
    hand_to_goal_m: float | None = None
    orientation_followed: bool = False


def jog_stack(settings: JogSettings):
    """The default stack rearranged for jogging one hand.

    The jogged hand's position keeps its level (with the CoM, waist and torso: balance
    first) but with ``hand_gain``; its arm posture moves one level down, next to a new
    hand orientation task: in the default stack the arm posture shares the hand's level
    and, weighted against it, leaves a steady hand error of ~3 cm at a forward target
    (measured); one level down it only uses the arm's redundancy.

    The jogged arm's joint acceleration bound is raised to ``arm_acceleration``. The
    default stack's 20 rad/s^2 keeps whole-body motion from jolting the centre of pressure;
    for one light arm it made the hand's step response the slowest link of the loop: on
    ``teleop bench jog``'s 1 cm steps the commanded hand covered 0.9 mm in the first tick
    after a 7 mm target jump, whatever the task gain (40, 60 or 80/s: command to motion
    47-48 ms each). With 40 / 80 / 150 rad/s^2: 40 / 35 / 31 ms, figure-eight RMS 1.3-1.4 mm
    throughout, and the base drifted no more over the figure-eight (5.9 mm at 80 against
    7.6 mm at 20).
    """
    config = load_stack(settings.stack)
    hand = settings.hand
    level = next(t.level for t in config.tasks if t.name == f"{hand}_hand")
    lower = level + 1
    tasks = []
    for t in config.tasks:
        if t.name == f"{hand}_hand":
            t = replace(t, gain=settings.hand_gain)
        elif t.name == f"{hand}_arm":
            t = replace(t, level=lower)
        tasks.append(t)
    if settings.orientation:
        tasks.append(TaskSpec(name=f"{hand}_hand_orientation", type="frame_orientation", level=lower,
                              weight=settings.orientation_weight, gain=settings.orientation_gain,
                              frame=f"{hand}_hand"))
    acceleration = config.acceleration_limit
    if acceleration is not None:
        acceleration = dict(acceleration) if isinstance(acceleration, dict) else {"default": float(acceleration)}
        acceleration[f"{hand}_arm"] = settings.arm_acceleration
    return replace(config, tasks=tasks, acceleration_limit=acceleration, name=f"{config.name}+jog_{hand}")


class JogController:
    """Tag measurements in, committed robot configurations out (module docstring).

    Args:
        robot: the robot model.
        settings: jogging parameters.
        obstacles: scene objects the collision checks avoid.
        q0: (nq,) initial configuration (default: home).
        pose_filter: the tag pose filter (default :class:`PoseFilter`).
    """

    def __init__(self, robot: RobotModel | None = None, settings: JogSettings | None = None,
                 obstacles: Sequence[SceneObject] = (), q0: np.ndarray | None = None,
                 pose_filter: PoseFilter | None = None) -> None:
        self.robot = robot or RobotModel()
        self.settings = settings or JogSettings()
        s = self.settings
        self.controller = WholeBodyController(self.robot, jog_stack(s), dt=s.control_dt, q0=q0)
        position_task = self.controller.task(f"{s.hand}_hand")
        orientation_task = self.controller.tasks.get(f"{s.hand}_hand_orientation")
        if not isinstance(position_task, FramePositionTask) or not (
                orientation_task is None or isinstance(orientation_task, FrameOrientationTask)):
            raise ValueError(f"stack {s.stack!r}: jogging needs a frame_position task {s.hand}_hand "
                             f"(and a frame_orientation task {s.hand}_hand_orientation, if any)")
        self.position_task = position_task
        self.orientation_task = orientation_task
        self.safety = JointSafety(self.robot)
        self.collisions = CollisionWorld(self.robot, list(obstacles), s.hand, s.clearance_m, s.resolution_m) \
            if s.collision_checks else None
        self.filter = pose_filter or PoseFilter()
        self.relative = RelativeJog(s.mapping)
        self._frame = self.robot.frame_id(f"{s.hand}_hand")
        self._shoulder = self.robot.frame_id(f"{s.hand[0]}_shoulder_pitch")
        self._data = self.robot.model.createData()
        self.q = self.controller.q.copy()
        home = self.hand_pose(self.q)
        #: Hand orientation meaning "tag facing the camera" in absolute mode.
        self.hand_reference = home.rotation.copy()
        pin.framesForwardKinematics(self.robot.model, self._data, self.q)
        shoulder = self._data.oMf[self._shoulder].translation
        elbow = self._data.oMf[self.robot.frame_id(f"{s.hand[0]}_elbow")].translation
        self.reach = float(np.linalg.norm(elbow - shoulder) + np.linalg.norm(home.position - elbow))
        #: Radius of the sphere around the shoulder goals are kept in [m]: reach_fraction of
        #: the reach, but never less than where the hand starts (the iCub's home hand is at
        #: 97 % of this reach: 0.95 pulled a goal at the start 7 mm in, so the hand moved
        #: when the tag was first seen standing still, and could never come back there).
        self.reach_limit = max(s.reach_fraction * self.reach, float(np.linalg.norm(home.position - shoulder)))
        self.goal: HandPose | None = None
        self.target: HandPose | None = None
        #: (3,) feed-forward velocity of the hand task [m/s], base frame.
        self.feedforward = np.zeros(3)
        #: Whether the goal's orientation is the tag's (set with the goal, see _update_goal).
        self.orientation_followed = False
        self._measurements: list[tuple[float, np.ndarray | None, np.ndarray | None]] = []
        self.counts: dict[str, int] = {}
        #: Absolute mode aligned on the tag when first seen (:meth:`align_absolute`): the tag
        #: orientation meaning the hand's is taken when the filter first trusts one (see
        #: _update_goal), not from the first raw detection.
        self.reference_pending = False

    # ------------------------------------------------------------------ inputs
    def measure(self, t: float, position: np.ndarray | None, rotation: np.ndarray | None = None) -> None:
        """Queue a tag measurement taken at ``t`` [s] (camera frame: position (3,) [m],
        rotation (3, 3)); ``None`` = the tag was not seen in that frame."""
        self._measurements.append((t, None if position is None else np.asarray(position, float),
                                   None if rotation is None else np.asarray(rotation, float)))

    def hand_pose(self, q: np.ndarray) -> HandPose:
        """The hand pose (base frame) at configuration q (nq,)."""
        pin.framesForwardKinematics(self.robot.model, self._data, q)
        M = self._data.oMf[self._frame]
        return HandPose(M.translation.copy(), M.rotation.copy())

    def align_absolute(self, p_cam: np.ndarray) -> None:
        """Set the mapping's offset so the tag's current position means the hand's current
        position (absolute mode without a hand jump at start)."""
        self.settings.mapping.offset = self.settings.mapping.offset_for(p_cam, self.hand_pose(self.q).position)

    # ------------------------------------------------------------------ the tick
    def tick(self, t: float, clutch: bool = False) -> TickReport:
        """One control period at time ``t`` [s]; ``clutch``: relative-mode clutch held."""
        started = time.perf_counter()
        s = self.settings
        filtered = None
        if self._measurements:
            # Every measurement since the last tick goes through the filter, in order.
            for t_meas, p, R in self._measurements:
                filtered = self.filter.update(t_meas, p, R)
            self._measurements.clear()
        elif self.filter.last is not None:
            filtered = self.filter.update(t, None)
        if filtered is not None:
            filtered = replace(filtered, age_s=max(0.0, t - filtered.t))
        self._update_goal(filtered, clutch)
        reachable = True
        status = "ok"
        beyond_m = 0.0
        current = None
        if self.goal is None:
            status = "held: no tag yet"
        else:
            goal = self.goal
            reachable, goal_position = self._within_reach(goal.position)
            beyond_m = float(np.linalg.norm(goal.position - goal_position))
            current = self.hand_pose(self.q)
            # Damping (Eq. 5.2): from the hand's committed pose towards the goal.
            target = damp(current, HandPose(goal_position, goal.rotation), s.damping)
            previous = self.target.position if self.target is not None else current.position
            step = target.position - previous
            max_step = s.max_hand_speed * s.control_dt
            norm = float(np.linalg.norm(step))
            if norm > max_step:
                target.position = previous + step * (max_step / norm)
            # Feed-forward velocity: the target's finite difference, acceleration-limited.
            # The target jumps a little at each camera frame (the extrapolation's error, and
            # bunched frames when detection times vary); differentiated at 100 Hz those jumps
            # were velocity spikes of 0.1-0.5 m/s that shook the robot until its feet crept
            # (measured: 10 mm/s drift with 0-40 ms detection-time jitter). The position
            # error they leave is taken up by the task gain instead.
            raw_velocity = (target.position - previous) / s.control_dt
            dv = raw_velocity - self.feedforward
            dv_norm = float(np.linalg.norm(dv))
            max_dv = s.max_hand_acceleration * s.control_dt
            if dv_norm > max_dv:
                dv *= max_dv / dv_norm
            self.feedforward = self.feedforward + dv
            self.position_task.set_target(target.position, self.feedforward)
            if self.orientation_task is not None:
                self.orientation_task.set_target(target.rotation)
            self.target = target
        collision_ms = 0.0
        out = self.controller.step(self.q)
        if out.status in (SolveStatus.HELD, SolveStatus.REJECTED_TARGET):
            status = f"held: {self.controller.status_message}"
            q_new = self.q
        else:
            check = self.safety.check(self.q[NQ_BASE:], out.q[NQ_BASE:], s.control_dt)
            if not check.ok:
                status, q_new = f"refused: {check.reason}", self.q
            else:
                q_new = interpolate(self.q, out.q, check.velocity_scale) if check.velocity_scale < 1.0 else out.q.copy()
                q_new[NQ_BASE:] = check.q
                if check.reason:
                    status = check.reason
                if self.collisions is not None:
                    c0 = time.perf_counter()
                    path = self.collisions.check_path(self.q, q_new)
                    if not path.free:
                        slid = self._slide(path, q_new)
                        if slid is None:
                            status, q_new = f"stopped before collision: {path.hit}", path.q_safe
                        else:
                            status, q_new = f"slid along a collision: {path.hit}", slid
                    collision_ms = (time.perf_counter() - c0) * 1e3
        hand_to_goal = None
        if current is not None:
            assert self.goal is not None   # current is only set with a goal
            hand_to_goal = float(np.linalg.norm(self.hand_pose(q_new).position - self.goal.position))
            # Only an "ok" step: a refused or shortened one already says why the hand stays short.
            if status == "ok" and self._out_of_reach(current.position, hand_to_goal, beyond_m):
                status = f"out of reach: hand {hand_to_goal * 1e3:.0f} mm from the goal"
        key = status.split(":")[0]
        self.counts[key] = self.counts.get(key, 0) + 1
        if out.status not in (SolveStatus.HELD, SolveStatus.REJECTED_TARGET):
            self._commit_to_controller(q_new)
        self.q = q_new
        return TickReport(t, self.q.copy(), self.goal, self.target, status, filtered, reachable,
                          (time.perf_counter() - started) * 1e3, collision_ms, hand_to_goal,
                          self.goal is not None and self.orientation_followed)

    def _slide(self, path, q_to: np.ndarray) -> np.ndarray | None:
        """A collision-free step instead of the one ``path`` stopped (q_from -> ``q_to``, both
        (nq,)), or None: the rest of the step from the last free state, with the jogged arm's
        part of it rid of its motion towards the contact (first order: the distance between
        the two geometries then stays, or grows back to :attr:`JogSettings.clearance_m`);
        checked again, joints and path.

        Without it the hand stayed where the stop left it as long as the controller's step
        kept heading into the contact, although the goal could be reached around it: at a
        looping test video's jump back to its start, the upper arm met the hull of the pelvis
        and the hand stayed 37 mm short of the goal for 1.4 s, until the goal moved away."""
        assert self.collisions is not None and path.contact is not None
        s = self.settings
        q_safe = path.q_safe
        found = self.collisions.distance_rate(q_safe, path.contact)
        if found is None:
            return None
        row, distance = found
        arm = NV_BASE + self.robot.group_indices(f"{s.hand}_arm")
        dq = pin.difference(self.robot.model, q_safe, q_to)
        row_arm = row[arm]
        norm2 = float(row_arm @ row_arm)
        if norm2 < 1e-12:     # the arm cannot move away from it (a contact of the body's)
            return None
        wanted = 0.5 * max(0.0, s.clearance_m - distance)   # back out towards the clearance
        approach = float(row @ dq)
        if approach >= wanted:
            return None
        dq[arm] += row_arm * ((wanted - approach) / norm2)
        q_slid = pin.integrate(self.robot.model, q_safe, dq)
        check = self.safety.check(self.q[NQ_BASE:], q_slid[NQ_BASE:], s.control_dt)
        if not check.ok or check.velocity_scale < 1.0:
            return None
        q_slid[NQ_BASE:] = check.q       # (unwrapped continuous joints, if any)
        if not self.collisions.check_path(q_safe, q_slid).free:
            return None
        return q_slid

    def _commit_to_controller(self, q_new: np.ndarray) -> None:
        """Tell the whole-body controller which step was committed: its whole solution, or
        what safety and the collision checks left of it (refused: none; shortened: part).

        The controller records the velocity it commanded each tick, which bounds the next
        tick's (the joint acceleration limit) and its ZMP rows. Left to believe its refused
        steps were taken, it kept accelerating a robot that stood still: during the collision
        stops after a looping test video's jump, the elbow's recorded velocity stayed at its
        2.7 rad/s limit (every next step had to move it about that fast, into the same
        contact) while the knees' grew to 4.2 rad/s; when a step was free again, 1.4 s later,
        the robot crouched at that speed, its base sinking 29 cm (0.619 to 0.332 m) in a run
        summed up as "kept its balance"."""
        self.controller.commit(q_new, pin.difference(self.robot.model, self.q, q_new) / self.settings.control_dt)

    def _out_of_reach(self, hand_before: np.ndarray, hand_to_goal: float, beyond_m: float) -> bool:
        """Whether the hand, ``hand_to_goal`` [m] from the goal after this tick's step (from
        ``hand_before`` (3,) [m]), stays short of it (:attr:`JogSettings.reach_tolerance_m`);
        ``beyond_m``: how far the goal lies beyond the reachable sphere [m]."""
        s = self.settings
        if hand_to_goal <= s.reach_tolerance_m:
            return False
        if beyond_m > s.reach_tolerance_m:
            # The controller aims at the sphere: the hand cannot come closer than this.
            return True
        assert self.goal is not None   # only called after a step towards a goal
        approach = float(np.linalg.norm(hand_before - self.goal.position)) - hand_to_goal
        return approach < s.approach_speed * s.control_dt

    def _update_goal(self, filtered: FilteredPose | None, clutch: bool) -> None:
        s = self.settings
        if filtered is None:
            return
        if s.mode == "relative" and self.relative.engaged and filtered.age_s > self.filter.reset_after_s:
            # Lost long enough for the filter to restart: where the tag reappears says
            # nothing about how it moved meanwhile, so (like lifting a mouse) the clutch
            # re-anchors on reacquisition instead of jumping the hand by the difference.
            self.relative.release()
        if not filtered.fresh and filtered.age_s > s.predict_s and self.goal is not None:
            # No new measurement and the last one is older than the extrapolation horizon (a
            # frame missed or late, or the tag lost): hold the goal where the extrapolation
            # left it. Recomputing it from the unextrapolated position would pull it back by
            # velocity x predict_s (a sawtooth at every frame of a camera slower than 20 Hz).
            if s.mode == "relative" and not clutch:
                self.relative.release()
            return
        # Extrapolate the filtered position over the measurement's age (up to predict_s;
        # older = the tag is lost and the target is held): a 60 Hz camera otherwise adds
        # a 17 ms zero-order hold, plus the exposure and the detection time.
        position = filtered.position
        velocity = self.filter.position_filter.dx
        if velocity is not None and 0.0 < filtered.age_s <= s.predict_s:
            position = position + velocity * filtered.age_s
        rotation = filtered.rotation
        held_rotation = self.goal.rotation if self.goal is not None else self.hand_pose(self.q).rotation
        if s.mode == "absolute":
            use_rotation = s.orientation and filtered.orientation_valid
            if use_rotation and self.reference_pending:
                # The reference was the first raw detection's orientation, which may be the
                # IPPE planar ambiguity's flipped solution: the filter rejects it as an
                # outlier, and when its gate opened the hand turned by the flip (24 deg for
                # a still tag seen tilted 12 deg) although the tag never moved. The
                # orientation the filter first trusts means the hand's orientation instead.
                s.mapping.tag_reference = rotation.copy()
                self.reference_pending = False
            pose = s.mapping.absolute(position, rotation, self.hand_reference)
            self.goal = HandPose(pose.position, pose.rotation if use_rotation else held_rotation)
            self.orientation_followed = use_rotation
            return
        # Relative: the clutch anchors tag and hand; released, the goal stays where it is.
        if clutch and not self.relative.engaged:
            if self.goal is not None:
                # Anchored on the goal as far as the hand can follow it: a goal left beyond
                # reach would make the next tag motion back towards the body do nothing
                # until it had made up the unreachable part.
                anchor_hand = HandPose(self._within_reach(self.goal.position)[1], self.goal.rotation)
            else:
                anchor_hand = self.hand_pose(self.q)
            self.relative.engage(position, rotation, anchor_hand)
        elif not clutch and self.relative.engaged:
            self.relative.release()
        if self.relative.engaged:
            pose = self.relative.target(position, rotation)
            use_rotation = s.orientation and filtered.orientation_valid
            self.goal = HandPose(pose.position, pose.rotation if use_rotation else held_rotation)
            self.orientation_followed = use_rotation

    def _within_reach(self, position: np.ndarray) -> tuple[bool, np.ndarray]:
        """(reachable, position pulled onto the reachable sphere around the shoulder)."""
        pin.framesForwardKinematics(self.robot.model, self._data, self.q)
        shoulder = self._data.oMf[self._shoulder].translation
        offset = position - shoulder
        distance = float(np.linalg.norm(offset))
        limit = self.reach_limit
        if distance <= limit:
            return True, position
        return False, shoulder + offset * (limit / distance)

    def close(self) -> None:
        if self.collisions is not None:
            self.collisions.close()


class SimulatedRobot:
    """The pybullet robot driven by committed configurations, ramped over the physics
    steps of each control period (see teleop/control/closed_loop.py for why ramping)."""

    def __init__(self, robot: RobotModel, q0: np.ndarray, obstacles: Sequence[SceneObject] = (),
                 control_dt: float = 0.01, physics_steps: int = 10, realtime: bool = False) -> None:
        from teleop.sim.scene import add_to_simulation
        from teleop.sim.simulator import Simulation

        self.robot = robot
        self.sim = Simulation(robot, dt=control_dt / physics_steps, visual=False, realtime=realtime)
        self.sim.reset(q0)
        self.scene = add_to_simulation(self.sim, list(obstacles), static=True) if obstacles else None
        self.physics_steps = physics_steps
        self._previous = q0[NQ_BASE:].copy()
        self.hand_links = {side: robot.description.frames[f"{side}_hand"] for side in ("left", "right")}
        self.contact_steps = 0

    def send(self, q: np.ndarray) -> None:
        """Ramp the joint targets to q[7:] over one control period, counting physics
        steps in which the robot touches an obstacle."""
        from teleop.sim.pybullet_module import pb

        joints = q[NQ_BASE:]
        for i in range(1, self.physics_steps + 1):
            self.sim.set_joint_targets(self._previous + (joints - self._previous) * (i / self.physics_steps))
            self.sim.step(1)
            if self.scene is not None and any(
                    pb.getContactPoints(self.sim.body, b, physicsClientId=self.sim.client)
                    for b in self.scene.body_ids):
                self.contact_steps += 1
        self._previous = joints.copy()

    def hand_position(self, side: str) -> np.ndarray:
        """(3,) measured hand position in the simulation [m]."""
        return self.sim.link_position(self.hand_links[side])

    def close(self) -> None:
        self.sim.close()
