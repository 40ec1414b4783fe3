"""Track :class:`RobotReferences` with the whole-body controller (what the robot station runs).

Each tick the tracker checks the references (finite, inside the robot's workspace), turns
them into task targets of the stack (every task with a ``reference`` in the stack file),
and runs one controller tick. Invalid references are rejected as a whole: the previous
targets stay in force and the last command is held, with status ``REJECTED_TARGET``.

Open loop by default: the controller integrates its own state (as OpenSoT does on the real
iCub); send ``q_command[7:]`` to the position-controlled joints. Pass the measured ``q`` to
:meth:`ReferenceTracker.step` to close the loop on it instead.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pinocchio as pin

from retarget.references import SIGNALS, InvalidReferences, RobotReferences
from teleop.control.controller import ControlOutput, SolveStatus, WholeBodyController
from teleop.control.stack import StackConfig, reference_joints
from teleop.control.tasks import (ComTask, FrameOrientationTask, FramePositionTask, InvalidTarget, PostureTask,
                                  WaistHeightTask)
from teleop.control.tasks.frame_orientation import rotation_matrix
from teleop.robot.model import NQ_BASE, RobotModel

#: Posture signals of RobotReferences (name -> attribute).
POSTURE_SIGNALS = ("left_arm", "right_arm", "neck", "torso", "left_leg", "right_leg")

#: Largest feed-forward speed of a Cartesian reference (hands, CoM, waist) [m/s]: above
#: anything the robot can follow. The iCub's hand moves at most 3.3 m/s with every arm and
#: torso joint at 0.9 of its speed limit (the sum over those joints of |J column| x speed,
#: at home), the CoM 1.6 m/s (whose reference the ZMP pre-filter shapes anyway): a faster
#: reference velocity is noise, not a motion (see ReferenceTracker, ``feedforward``).
MAX_FEEDFORWARD_SPEED_M_S = 3.0


class OutOfWorkspace(InvalidTarget):
    """References the robot cannot possibly follow (e.g. a hand 2 m from its shoulder)."""


@dataclass
class WorkspaceLimits:
    """How far references may go before they are rejected as nonsense.

    Attributes:
        hand_reach_margin: a hand target may be at most (arm length + this) [m] from its
            shoulder's current position, else it is rejected.
        hand_clamp: hand targets farther than the arm length from the shoulder (but within
            the margin above) are pulled back onto that sphere instead of being tracked as
            they are. Retargeting clamps the reach around the *retargeted* shoulder; the
            robot's shoulder lags it whenever the trunk cannot bend like the human's (HDM05
            depositFloorR: left hand targets 0.42-0.45 m from a shoulder whose reach is
            0.31 m). Tracked as they are, such targets drag the trunk and the CoM; rejected,
            they froze every reference for up to 3 s and the robot jumped when they came
            back (measured: 218 of 298 ticks rejected on bd 003). The margin is 0.5 m, not
            0.35: reaching high on tiptoe (HDM05 grabHighR dg 012) retargets the right hand
            0.66-0.85 m from a shoulder of 0.30 m reach; with 0.35, 121 of 248 ticks were
            rejected and the jump when they resumed put the CoP 5.5 mm outside the soles
            (slip 6.1 mm); with 0.5, 72 ticks, CoP 0.7 mm outside, slip 1.2 mm.
        com_outside_polygon: a CoM target may be at most this far outside the support
            polygon [m] (the polygon constraint clamps the CoM anyway).
        waist_below_home, waist_above_home: waist heights tracked around home [m].
        waist_clamp_margin: waist targets up to this far beyond that range [m] are clamped
            onto it, farther ones rejected. A deep human squat retargets a little below
            the robot's range (HDM05 squat1Reps bk 013: 0.242 m for a lowest 0.269 m);
            rejected, those ticks froze every reference for 0.15 s and the jump when they
            came back put the CoP 0.9 mm outside the soles (all 24 bk and dg squats left
            the polygon, by up to 7.5 mm, and slipped up to 9.9 mm).
        max_position: any Cartesian target must be within this of the stance origin [m].
    """

    hand_reach_margin: float = 0.5
    hand_clamp: bool = True
    com_outside_polygon: float = 0.15
    waist_below_home: float = 0.35
    waist_above_home: float = 0.10
    waist_clamp_margin: float = 0.15
    max_position: float = 2.0


def references_from_configuration(robot: RobotModel, q: np.ndarray, t: float = 0.0) -> RobotReferences:
    """The references a robot at ``q`` is exactly tracking (e.g. the start of a trajectory)."""
    data = robot.model.createData()
    pin.framesForwardKinematics(robot.model, data, q)
    com = pin.centerOfMass(robot.model, data, q)

    def position(role: str) -> np.ndarray:
        return data.oMf[robot.frame_id(role)].translation.copy()

    def posture(signal: str) -> np.ndarray:
        return np.array([sign * q[NQ_BASE + robot.joint_index(joint)]
                         for joint, sign in robot.description.reference_joints[signal]])

    return RobotReferences(t=t, com_xy=com[:2].copy(), waist_height=float(position("waist")[2]),
                           left_hand=position("left_hand"), right_hand=position("right_hand"),
                           left_arm=posture("left_arm"), right_arm=posture("right_arm"),
                           neck=posture("neck"), torso=posture("torso"))


class ReferenceTracker:
    """Whole-body controller driven by :class:`RobotReferences`.

    Args:
        robot: robot model (default: a new iCub model).
        stack: stack preset or file (default: ``"default"``).
        dt: control period [s] (default: the stack's).
        mode: ``"strict"`` / ``"weighted"`` override.
        q0: initial configuration (default: home).
        feedforward: use the references' velocity (finite difference of consecutive
            samples) as the tasks' feed-forward; it removes the lag of pure feedback.
        workspace: limits beyond which references are rejected.
        max_sample_gap: consecutive samples further apart than this [s] give no
            feed-forward (a stream that resumes after a gap must not produce a jump).
        feedforward_ramp: after a sample without feed-forward (the first one, one after a
            gap, or one equal to its predecessor: references at rest) the feed-forward is
            faded in linearly over this time [s]. A stream that
            starts mid-motion otherwise steps every task velocity in one tick: HDM05 takes
            are cut mid-motion (depositFloorR bd 003: left hand already at 0.45 m/s), and
            the arms' reaction put the measured CoP on the toe edge on the first played
            tick (margin 69.5 -> 1.7 mm in 10 ms).

    The feed-forward is bounded: a Cartesian signal's speed by
    :data:`MAX_FEEDFORWARD_SPEED_M_S`, a posture angle's by its joint's velocity limit (what
    the controller may command). Unbounded, the finite difference of a stream that jitters
    at the control rate (hands +-20 cm every tick, inside the reference envelope) gave the
    hand tasks 40 m/s to track: their rows outweighed the CoM task's w = 100, the CoM was
    dragged to the edge of the polygon, the feet slid 8 cm and the robot fell within 2 s
    (tests/test_control_adversarial.py); bounded, the CoP stays 37 mm inside the soles.
    """

    def __init__(self, robot: RobotModel | None = None, stack: StackConfig | str | Path = "default", *,
                 dt: float | None = None, mode: str | None = None, q0: np.ndarray | None = None,
                 feedforward: bool = True, workspace: WorkspaceLimits | None = None,
                 max_sample_gap: float = 0.1, feedforward_ramp: float = 0.3) -> None:
        self.robot = robot if robot is not None else RobotModel()
        self.controller = WholeBodyController(self.robot, stack, dt=dt, mode=mode, q0=q0)
        self.feedforward = feedforward
        self.workspace = workspace or WorkspaceLimits()
        self.max_sample_gap = max_sample_gap
        self.feedforward_ramp = float(feedforward_ramp)
        self._ramp = 0.0
        c = self.controller
        # Bindings: (signal, task, posture joints, their signs, their indices in the signal).
        self._bindings: list[tuple] = []
        for name, signal in c.references.items():
            task = c.tasks[name]
            if isinstance(task, PostureTask):
                pairs = [(j, s) for j, s in reference_joints(self.robot, signal) if j in task.joint_names]
                if not pairs:
                    raise ValueError(f"posture task {name!r} has none of the joints of reference {signal!r}")
                indices = np.array([i for i, (j, _) in enumerate(reference_joints(self.robot, signal))
                                    if j in task.joint_names])
                self._bindings.append((signal, task, [j for j, _ in pairs],
                                       np.array([s for _, s in pairs]), indices))
            else:
                self._bindings.append((signal, task, None, None, None))
        # The speed bound of each posture binding's joints (see the class docstring).
        self._posture_speed = {id(task): self.controller.velocity_limit.maximum[
            [self.robot.joint_index(j) for j in joints]] for _, task, joints, *_ in self._bindings if joints}
        self._shoulder_ids = {side: self.robot.frame_id(f"{side[0]}_shoulder_pitch") for side in ("left", "right")}
        self.reset(q0)

    # ------------------------------------------------------------------ set-up
    def reset(self, q0: np.ndarray | None = None) -> RobotReferences:
        """Restart the controller at ``q0`` (default home); returns the references that
        hold the robot still there."""
        c = self.controller
        c.reset(q0)
        q = c.q
        self._previous: RobotReferences | None = None
        self._previous_clamped: dict[str, np.ndarray | float] = {}  # targets check() clamped
        self._ramp = 0.0
        home = references_from_configuration(self.robot, q)
        self._home_waist = home.waist_height
        data = self.robot.model.createData()
        pin.framesForwardKinematics(self.robot.model, data, q)
        self._head_home_rotation = data.oMf[self.robot.frame_id("head")].rotation.copy()
        self._reach = {}
        for side in ("left", "right"):
            p = side[0]
            shoulder = data.oMf[self.robot.frame_id(f"{p}_shoulder_pitch")].translation
            elbow = data.oMf[self.robot.frame_id(f"{p}_elbow")].translation
            hand = data.oMf[self.robot.frame_id(f"{side}_hand")].translation
            # Upper bound of the arm's reach: the segments aligned.
            self._reach[side] = float(np.linalg.norm(elbow - shoulder) + np.linalg.norm(hand - elbow))
        return home

    @property
    def q(self) -> np.ndarray:
        """The controller's internal (commanded) configuration."""
        return self.controller.q

    @property
    def waist_range(self) -> tuple[float, float]:
        """(low, high) waist heights tracked [m] (see :class:`WorkspaceLimits`)."""
        limits = self.workspace
        return self._home_waist - limits.waist_below_home, self._home_waist + limits.waist_above_home

    def timing_stats(self) -> dict[str, float]:
        return self.controller.timing_stats()

    # -------------------------------------------------------------- references
    def check(self, references: RobotReferences) -> dict[str, np.ndarray | float]:
        """Raise :class:`InvalidReferences` (non-finite) or :class:`OutOfWorkspace`;
        returns the clamped targets to track ({"left_hand", "right_hand"}: (3,) [m], clamped
        to the arm's reach; "waist_height": [m], clamped to its range; see
        :class:`WorkspaceLimits`)."""
        for name, size in SIGNALS:  # numpy would broadcast a 1-element signal silently
            value: Any = getattr(references, name, None)   # (a malformed sample may hold anything)
            shape = np.shape(value)
            if shape != ((size,) if name != "waist_height" else ()) and not (name == "waist_height" and shape == (1,)):
                raise InvalidReferences(f"malformed references: {name} has shape {shape}, expected ({size},)")
        for name, size in (("head_orientation", 4), ("left_leg", 6), ("right_leg", 6)):
            value = getattr(references, name, None)
            if value is not None and np.shape(value) != (size,):
                raise InvalidReferences(f"malformed references: {name} has shape {np.shape(value)}, expected ({size},)")
        try:
            references.validate()
        except (TypeError, ValueError) as exc:
            if isinstance(exc, InvalidReferences):
                raise
            raise InvalidReferences(f"malformed references: {exc}") from None
        targets = self._hand_targets(references)
        targets["waist_height"] = self._check_rest(references)
        return targets

    def _hand_targets(self, references: RobotReferences) -> dict[str, np.ndarray | float]:
        """The hand targets (3,) [m] to track, clamped to the reach (see WorkspaceLimits);
        raises OutOfWorkspace beyond the margin."""
        limits = self.workspace
        out: dict[str, np.ndarray | float] = {}
        # The kinematics of the last tick: one tick older than the internal state, which
        # is irrelevant for a check with a margin of tens of cm (``hand_reach_margin``,
        # default 0.5 m) and saves a kinematics pass.
        kin = self.controller.kin
        for side in ("left", "right"):
            target = np.asarray(getattr(references, f"{side}_hand"), dtype=float)
            if np.linalg.norm(target) > limits.max_position:
                raise OutOfWorkspace(f"{side} hand target {target} is more than {limits.max_position} m away")
            shoulder = kin.placement(self._shoulder_ids[side]).translation
            distance = float(np.linalg.norm(target - shoulder))
            if distance > self._reach[side] + limits.hand_reach_margin:
                raise OutOfWorkspace(f"{side} hand target is {distance:.2f} m from the shoulder "
                                     f"(reach {self._reach[side]:.2f} m)")
            if limits.hand_clamp and distance > self._reach[side]:
                target = shoulder + (target - shoulder) * (self._reach[side] / distance)
            out[f"{side}_hand"] = target
        return out

    def _check_rest(self, references: RobotReferences) -> float:
        """Check the CoM and waist targets; returns the waist height to track [m]."""
        limits = self.workspace
        polygon = self.controller.polygon
        com_xy = np.asarray(references.com_xy, dtype=float)
        if polygon is not None and polygon.margin_to_polygon(com_xy) < -limits.com_outside_polygon:
            raise OutOfWorkspace(f"CoM target {com_xy} is more than {limits.com_outside_polygon} m outside "
                                 "the support polygon")
        if np.linalg.norm(com_xy) > limits.max_position:
            raise OutOfWorkspace(f"CoM target {com_xy} is out of reach")
        height = float(references.waist_height)
        low, high = self.waist_range
        margin = limits.waist_clamp_margin
        if not low - margin <= height <= high + margin:
            raise OutOfWorkspace(f"waist height {height:.3f} m outside [{low:.3f}, {high:.3f}] m "
                                 f"(+-{margin:.2f} m clamped)")
        return min(max(height, low), high)

    def set_references(self, references: RobotReferences) -> None:
        """Check ``references`` and make them the task targets (all or none). A sample
        with the same ``t`` as the last accepted one is ignored (not even checked).

        Raises:
            InvalidReferences: NaN / infinite values.
            OutOfWorkspace, InvalidTarget: targets the robot cannot follow.
        """
        if self._previous is not None and references.t == self._previous.t:
            return  # the same sample again (references slower than the controller): keep going
        clamped = self.check(references)
        previous = self._previous
        previous_clamped = self._previous_clamped
        gap = 0.0 if previous is None else references.t - previous.t   # (0: no feed-forward)
        use_velocity = self.feedforward and previous is not None and 0.0 < gap <= self.max_sample_gap
        # Fade the feed-forward in after a (re)start (see feedforward_ramp).
        # It restarts whenever the references were at rest (e.g. held during settling).
        ramp = 0.0
        if use_velocity and previous is not None and not np.array_equal(references.to_flat(), previous.to_flat()):
            ramp = min(1.0, self._ramp + gap / self.feedforward_ramp) if self.feedforward_ramp > 0 else 1.0
        updates: list[tuple[Callable[..., None], tuple]] = []
        for signal, task, joints, signs, indices in self._bindings:
            value = clamped[signal] if signal in clamped else getattr(references, signal)
            if value is None:  # optional signals (head orientation, legs) not provided
                continue
            velocity = None
            if use_velocity and getattr(previous, signal) is not None and signal != "head_orientation":
                before = previous_clamped[signal] if signal in clamped else getattr(previous, signal)
                velocity = (np.asarray(value, dtype=float) - np.asarray(before, dtype=float)) * (ramp / gap)
                if not isinstance(task, PostureTask):   # (postures: per joint, below)
                    speed = float(np.linalg.norm(velocity))
                    if speed > MAX_FEEDFORWARD_SPEED_M_S:
                        velocity = velocity * (MAX_FEEDFORWARD_SPEED_M_S / speed)
            if isinstance(task, PostureTask):
                value = np.asarray(value, dtype=float)[indices] * signs
                if velocity is not None:
                    limit = self._posture_speed[id(task)]
                    velocity = np.clip(velocity[indices] * signs, -limit, limit)
                updates.append((task.set_target, (value, velocity, joints)))
            elif isinstance(task, FrameOrientationTask):
                # head_orientation is the head's rotation from its home orientation, in world
                # axes (Eq. 2.13's R_H (R_H^0)^-1): applied on the left of the home rotation.
                # The literal R_R^0 R_H (R_H^0)^-1 would apply it in the head frame's axes,
                # which on the iCub are not the world's (a human yaw would become a roll).
                updates.append((task.set_target, (rotation_matrix(value) @ self._head_home_rotation,)))
            elif isinstance(task, WaistHeightTask):
                updates.append((task.set_target, (float(value), None if velocity is None else float(velocity))))
            elif isinstance(task, (ComTask, FramePositionTask)):
                updates.append((task.set_target, (value, velocity)))
        # All or none: if any target is refused, restore the ones already set.
        saved = [(task, task.target, task.feedforward, task._has_feedforward) for _, task, *_ in self._bindings]
        try:
            for setter, args in updates:
                setter(*args)
        except (InvalidTarget, ValueError):
            for task, target, feedforward, has_feedforward in saved:
                task.target, task.feedforward, task._has_feedforward = target, feedforward, has_feedforward
            raise
        self._previous = references
        self._previous_clamped = clamped
        self._ramp = ramp

    # ------------------------------------------------------------------- ticks
    def step(self, references: RobotReferences | None = None, q: np.ndarray | None = None,
             dt: float | None = None) -> ControlOutput:
        """Set the references (if given) and run one control tick.

        Returns ``(q_command, v, status, timings)``; with rejected references the last
        command is held and the status is ``REJECTED_TARGET`` (see ``status_message``).
        """
        if references is not None:
            try:
                self.set_references(references)
            except (InvalidReferences, InvalidTarget, ValueError, TypeError, AttributeError) as exc:
                # Malformed input of any kind is the sender's problem: hold, never crash.
                return self.controller.hold(SolveStatus.REJECTED_TARGET, str(exc))
        return self.controller.step(q, dt)

    @property
    def status_message(self) -> str:
        return self.controller.status_message
