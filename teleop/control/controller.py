r"""The whole-body controller: velocity IK-QP over a stack of tasks (thesis Eqs. 1.1-1.3, 1.16).

Each tick, at configuration :math:`q`:

1. kinematics once (:class:`Kinematics`), every task writes its rows :math:`\sqrt{w}J`,
   :math:`\sqrt{w}b` into one preallocated matrix;
2. the contacts are eliminated, :math:`v = v_0 + P z` (or kept as equality rows), the joint
   limits become bounds on z and the support polygon linear rows;
3. one QP (``mode="weighted"``) or a cascade of QPs (``mode="strict"``) gives z;
4. :math:`q_{k+1} = q \oplus v\,\Delta t` (``pin.integrate``), clipped into the limits.

Open loop or closed loop: :meth:`WholeBodyController.step` without ``q`` linearises and
integrates the controller's *own* state (open loop, what OpenSoT does on the real iCub and
the standard choice for a position-controlled robot or simulator: the commanded posture
stays consistent and the servo's tracking lag is not fed back). Passing the measured
``q`` closes the loop on it instead (useful after a reset or to re-synchronise).
"""

from __future__ import annotations

import enum
import math
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pinocchio as pin

from teleop.control.kinematics import Kinematics
from teleop.control.limits import (ContactConstraint, JointAccelerationLimit, JointPositionLimit, JointVelocityLimit,
                                   SupportPolygonConstraint, identity_reduction, joint_velocity_bounds)
from teleop.control.limits.contacts import as_slice
from teleop.control.qp import EQUALITY, Constraints
from teleop.control.solve import HierarchyResult, solve_hierarchy, solve_weighted
from teleop.control.stack import StackConfig, StackError, build_task, load_stack
from teleop.control.tasks import PostureTask, Task
from teleop.control.tasks.base import all_finite
from teleop.control.tasks.posture import PostureRows
from teleop.control.timing import TickTimings, TimingWindow
from teleop.robot.model import NV_BASE, RobotModel


#: Base quaternions shorter than this are refused rather than normalised (no rotation).
_MIN_QUATERNION_NORM = 1e-6


class SolveStatus(str, enum.Enum):
    """What the controller did this tick."""

    #: Every level was solved under every constraint.
    OK = "ok"
    #: Something was relaxed: a lower level kept the higher levels' solution, or the joint
    #: acceleration bound, the ZMP rows and/or the support-polygon constraint were dropped
    #: because the hard constraints conflicted.
    #: The command is still within joint limits and keeps the feet fixed.
    RELAXED = "relaxed"
    #: No solve succeeded (or the input was unusable): the last command is held, v = 0.
    HELD = "held"
    #: The targets were rejected (NaN, infinite, out of the workspace): the last command
    #: is held, v = 0, and the previous targets stay in force.
    REJECTED_TARGET = "rejected_target"


class ControlOutput(NamedTuple):
    """Result of one tick: unpacks as ``q, v, status, timings``.

    Attributes:
        q: (nq,) commanded configuration: base position [m], base quaternion (x, y, z, w),
            joint angles [rad] (send ``q[7:]`` as joint position targets).
        v: (nv,) commanded velocity: base twist in the base frame [m/s, rad/s], joint
            velocities [rad/s].
        status: see :class:`SolveStatus`.
        timings: cost of this tick.
    """

    q: np.ndarray
    v: np.ndarray
    status: SolveStatus
    timings: TickTimings


class WholeBodyController:
    """Velocity-level whole-body IK for a floating-base robot standing on its feet.

    Args:
        robot: the robot model (default: a new iCub model).
        stack: a :class:`StackConfig`, a preset name (``"default"``, ``"ch2_icub"``...) or
            the path of a stack file.
        dt: control period [s] (default: the stack's ``dt``); ``step`` may override it.
        mode: ``"strict"`` or ``"weighted"`` to override the stack's mode. In weighted mode
            all levels are merged into one, each task keeping its weight.
        contact_elimination: ``"nullspace"``, ``"equality"`` or ``"auto"`` to override the
            stack's. ``"auto"`` eliminates the contacts in strict mode (every level's QP
            shrinks) and keeps them as equality rows in weighted mode, where the one QP
            is cheaper than the QR and the products of the elimination (see
            :class:`~teleop.control.limits.contacts.ContactConstraint`).
        q0: initial configuration (default: the robot's home configuration).
        timing_window: number of ticks of the timing percentiles.
    """

    def __init__(self, robot: RobotModel | None = None, stack: StackConfig | str | Path = "default", *,
                 dt: float | None = None, mode: str | None = None, contact_elimination: str | None = None,
                 q0: np.ndarray | None = None, timing_window: int = 1000) -> None:
        self.robot = robot if robot is not None else RobotModel()
        self.config = stack if isinstance(stack, StackConfig) else load_stack(stack)
        self.mode = mode or self.config.mode
        if self.mode not in ("strict", "weighted"):
            raise ValueError(f"mode must be 'strict' or 'weighted', got {self.mode!r}")
        self.dt = float(dt if dt is not None else self.config.dt)
        # Checked here, not only at the first step: a StackConfig built in code skips
        # parse_stack's checks, and a NaN/negative dt or damping would otherwise only show
        # up ticks later as NaN bounds or an indefinite Hessian.
        if not (math.isfinite(self.dt) and self.dt > 0):
            raise ValueError(f"dt must be a positive, finite control period [s], got {self.dt}")
        self.damping = float(self.config.damping)
        if not (math.isfinite(self.damping) and self.damping >= 0):
            raise ValueError(f"damping (epsilon of eps * ||v||^2) must be finite and >= 0, got {self.damping}")
        elimination = contact_elimination or self.config.contact_elimination
        if elimination not in ("auto", "nullspace", "equality"):
            raise ValueError("contact_elimination must be 'auto', 'nullspace' or 'equality'")
        if elimination == "auto":
            elimination = "nullspace" if self.mode == "strict" else "equality"
        self.contact_elimination = elimination
        nv = self.robot.nv
        self.kin = Kinematics(self.robot)

        # Tasks, grouped by level (highest priority first), rows allocated in that order
        # so that every level is a contiguous block of the task matrix.
        specs = sorted(self.config.tasks, key=lambda s: s.level)
        # Errors that depend on the robot (unknown frames, joints, groups) name the file too.
        where = str(self.config.source) if self.config.source else f"stack {self.config.name!r}"
        try:
            self.tasks: dict[str, Task] = {s.name: build_task(s, self.robot) for s in specs}
        except StackError as exc:
            raise StackError(f"{where}: {exc}") from None
        self.task_levels: dict[str, int] = {s.name: s.level for s in specs}
        self.references: dict[str, str] = {s.name: s.reference for s in specs if s.reference}
        self._task_rows: list[tuple[Task, slice]] = []   # tasks that fill their own rows
        postures: list[tuple[PostureTask, int]] = []      # filled together (PostureRows)
        level_rows: dict[int, list[int]] = {}
        start = 0
        for spec in specs:
            task = self.tasks[spec.name]
            if isinstance(task, PostureTask):
                postures.append((task, start))
            else:
                self._task_rows.append((task, slice(start, start + task.dim)))
            level_rows.setdefault(spec.level, [start, start])[1] = start + task.dim
            start += task.dim
        self._posture_rows = PostureRows(postures) if postures else None
        self._level_rows = [slice(a, b) for a, b in level_rows.values()]
        if self.mode == "weighted":
            self._level_rows = [slice(0, start)]
        self._n_task_rows = start  # the support-polygon rows follow them (allocated at reset)

        # Constraints.
        self.position_limit = JointPositionLimit(self.robot, self.config.position_limit_gain)
        self.velocity_limit = JointVelocityLimit(self.robot, self.config.velocity_limit_scale)
        try:
            self.acceleration_limit = (None if self.config.acceleration_limit is None
                                       else JointAccelerationLimit(self.robot, self.config.acceleration_limit))
        except (KeyError, ValueError) as exc:
            raise StackError(f"{where}: limits.acceleration: {exc}") from None
        frames = self.config.contact_frames
        try:
            self.contacts = ContactConstraint(self.robot, frames, self.config.contact_gain) if frames else None
        except (KeyError, ValueError) as exc:
            raise StackError(f"{where}: contacts: {exc}") from None
        self.polygon: SupportPolygonConstraint | None = None
        self._polygon_sides = tuple(side for side in ("left", "right") if f"{side}_sole" in frames)
        if self.config.polygon_enabled and self._polygon_sides:
            self.polygon = SupportPolygonConstraint(self.config.polygon_margin, self.config.polygon_active_distance,
                                                    self.config.polygon_recovery_speed, self.config.zmp_margin,
                                                    self.robot, self.config.zmp_model)
        # ZMP rows follow the CoM rows when every edge is emitted (active_distance inf).
        self._has_zmp_rows = (self.polygon is not None and self.polygon.zmp_margin is not None
                              and self.polygon.active_distance == float("inf"))
        eliminate = self.contacts is not None and self.contact_elimination == "nullspace"
        self._eliminate = eliminate
        self._identity_reduction = identity_reduction(nv)
        # z = v (no elimination) and a fixed constraint set: the contact equation and the
        # polygon rows are written straight into the constraint buffers (no per-tick copy).
        self._in_place = not eliminate and (self.polygon is None or
                                            self.polygon.active_distance == float("inf"))
        if self.contacts is not None and eliminate:
            free, support = self.contacts.free_columns, self.contacts.support_columns
        else:  # z = v: every coordinate is simply bounded, the base by +-inf
            free, support = np.arange(nv), np.arange(0)
        # Joints whose bounds are simple bounds on z (free) or rows through the basis
        # (support), and where in z those simply bounded joints are.
        self._free_joints = as_slice(free[free >= NV_BASE] - NV_BASE)
        self._free_joint_positions = as_slice(np.flatnonzero(free >= NV_BASE))
        self._support_joint_positions = as_slice(np.flatnonzero(support >= NV_BASE))
        self._n_support_joints = int(np.count_nonzero(support >= NV_BASE))
        self._support_joints = as_slice(support[support >= NV_BASE] - NV_BASE)
        self._n_free = len(free)
        self._n_equalities = self.contacts.size if (self.contacts is not None and not eliminate) else 0
        # Length of z: the contact equalities remove 6 per contact when eliminated.
        self._n_reduced = nv - (self.contacts.size if self.contacts is not None and eliminate else 0)
        # A first level made only of posture tasks on free joints has selection rows in z:
        # the next levels keep those coordinates fixed and the others free (no QR).
        self._first_level_free = None
        first = [self.tasks[s.name] for s in specs if s.level == specs[0].level]
        first_postures = [t for t in first if isinstance(t, PostureTask)]
        free_list = list(free)
        if self.mode == "strict" and len(first_postures) == len(first):
            coordinates = {free_list.index(c) for t in first_postures for c in t.velocity_indices if c in free_list}
            if len(coordinates) == sum(t.dim for t in first):  # all on free joints, no overlap
                self._first_level_free = np.array([i for i in range(self._n_reduced) if i not in coordinates])

        self._weights_version = -1
        self._any_zero_weight = True
        self.timing = TimingWindow(timing_window)
        self.status_message = ""
        self.last_result: HierarchyResult | None = None
        self.reset(q0)

    # ----------------------------------------------------------------- set-up
    @property
    def n_levels(self) -> int:
        return len(self._level_rows)

    def task(self, name: str) -> Task:
        """The task called ``name`` in the stack."""
        try:
            return self.tasks[name]
        except KeyError:
            raise KeyError(f"stack {self.config.name!r} has no task {name!r} (tasks: {list(self.tasks)})") from None

    def reset(self, q0: np.ndarray | None = None) -> None:
        """Restart from ``q0`` (default: home): internal state, held contacts, support
        polygon, and every task's target set to its current value (hold still)."""
        q = self.robot.home_configuration() if q0 is None else np.array(q0, dtype=float)
        if q.shape != (self.robot.nq,) or not np.all(np.isfinite(q)):
            raise ValueError(f"q0 must be {self.robot.nq} finite values")
        # (A zero quaternion would become NaN here: every later command would be NaN.)
        if not np.linalg.norm(q[3:7]) > _MIN_QUATERNION_NORM:
            raise ValueError(f"q0: the base quaternion q0[3:7] = {q[3:7]} is not a rotation")
        q[3:7] /= np.linalg.norm(q[3:7])
        self.position_limit.clip(q)
        self.q = self.last_command = q
        if self.acceleration_limit is not None:
            self.acceleration_limit.reset()
        self.kin.update(q)
        for task in self.tasks.values():
            task.set_target_from(self.kin)
            task.set_feedforward(None)
        if self.contacts is not None:
            self.contacts.hold(self.kin)
        n_edges = 0
        if self.polygon is not None:
            # The feet are held, so the polygon only changes at a reset.
            self.robot.update(q)
            self.polygon.set_polygon(self.robot.support_polygon(self._polygon_sides))
            n_edges = self.polygon.n_rows
            self.polygon.reset_motion()
            self.polygon.linearise(self.kin)   # for a commit() before the first step
        # One matrix for the tasks' rows sqrt(w) J (right-hand sides sqrt(w) b) and, below
        # them, the polygon's rows G (bounds h): a single product maps them all to z.
        n_tasks = self._n_task_rows
        # (In place, the polygon's rows live in the constraint buffers instead.)
        n_polygon_rows = 0 if self._in_place else n_edges
        self._rows = np.zeros((n_tasks + n_polygon_rows, self.robot.nv))
        self._targets = np.zeros(n_tasks + n_polygon_rows)
        # Views made once (slicing costs a call per tick otherwise).
        self._task_views = [(task, self._rows[block], self._targets[block]) for task, block in self._task_rows]
        self._polygon_views = (self._rows[n_tasks:], self._targets[n_tasks:])
        # The same layout in z, and per-level views of the task part (made once).
        if self._eliminate:
            self._reduced_rows = np.empty((n_tasks + n_edges, self._n_reduced))
            self._reduced_targets = np.empty(n_tasks + n_edges)
        else:  # z = v: the same buffers (the reduction is then a no-op)
            self._reduced_rows, self._reduced_targets = self._rows, self._targets
        self._reduced_task_views = (self._reduced_rows[:n_tasks], self._reduced_targets[:n_tasks])
        self._reduced_level_views = [(self._reduced_rows[block], self._reduced_targets[block])
                                     for block in self._level_rows]
        # Constraint buffers: [support-joint bounds | contact equalities | polygon edges].
        n_rows = self._n_support_joints + self._n_equalities + n_edges
        self._constraint_rows = np.zeros((n_rows, self._n_reduced))
        self._constraint_lower = np.full(self._n_free + n_rows, -np.inf)
        self._constraint_upper = np.full(self._n_free + n_rows, np.inf)
        self._constraint_sense = np.zeros(self._n_free + n_rows, dtype=np.int32)
        equalities = slice(self._n_free + self._n_support_joints,
                           self._n_free + self._n_support_joints + self._n_equalities)
        self._constraint_sense[equalities] = EQUALITY
        # With every polygon edge emitted (the default) the constraint set has a fixed
        # size: build it once over the buffers, which each tick fills in place.
        self._full_constraints = Constraints(self._n_free, self._constraint_rows, self._constraint_lower,
                                             self._constraint_upper, self._constraint_sense)
        if self._in_place:
            if self._n_equalities:
                assert self.contacts is not None  # equalities come from the contacts
                self.contacts.write_equation_into(self._constraint_rows[:self._n_equalities])
            start = self._n_equalities  # (no support-joint rows without elimination)
            self._polygon_views = (self._constraint_rows[start:start + n_edges],
                                   self._constraint_upper[self._n_free + start:self._n_free + start + n_edges])
        self.timing.clear()

    # ------------------------------------------------------------------ ticks
    def hold(self, status: SolveStatus = SolveStatus.HELD, message: str = "",
             started: float | None = None) -> ControlOutput:
        """Hold the last command (v = 0) and report ``status``."""
        started = time.perf_counter() if started is None else started
        self.status_message = message
        if self.polygon is not None:
            self.polygon.reset_motion()   # held: v = 0 from now on
        if self.acceleration_limit is not None:
            self.acceleration_limit.reset()
        total = (time.perf_counter() - started) * 1e3
        timings = TickTimings(0.0, 0.0, total)
        self.timing.add(timings)
        return ControlOutput(self.last_command.copy(), np.zeros(self.robot.nv), status, timings)

    def step(self, q: np.ndarray | None = None, dt: float | None = None) -> ControlOutput:
        """One control tick from the internal state (``q=None``, open loop) or from a
        measured configuration. Never raises on numerical trouble: see the status."""
        started = time.perf_counter()
        dt = self.dt if dt is None else float(dt)
        if not (math.isfinite(dt) and dt > 0):
            raise ValueError(f"dt must be a positive number, got {dt}")
        if q is None:
            q = self.q
        else:
            q = np.asarray(q, dtype=float)
            if q.shape != (self.robot.nq,):
                # A wrong shape is a caller's bug, not numerical trouble: refused, not held
                # (holding hid it behind the message "not finite").
                raise ValueError(f"q must be the ({self.robot.nq},) measured configuration, got shape {q.shape}")
            if not np.all(np.isfinite(q)):
                return self.hold(SolveStatus.HELD, "measured configuration is not finite", started)
            # The kinematics read the base quaternion as a unit one: normalise it (a copy:
            # the caller's array is left alone), and refuse one that is no rotation at all.
            norm = math.sqrt(float(q[3:7] @ q[3:7]))
            if not norm > _MIN_QUATERNION_NORM:
                return self.hold(SolveStatus.HELD, "measured base quaternion is zero", started)
            if abs(norm - 1.0) > 1e-12:
                q = q.copy()
                q[3:7] /= norm

        # ---- build: kinematics, task rows, constraints (reduced coordinates z)
        self.kin.update(q)
        bounds = joint_velocity_bounds(self.position_limit, self.velocity_limit, q, dt)
        if self.acceleration_limit is not None:
            self.acceleration_limit.restrict(bounds, dt)
        # (2, n) rows, as views: a relaxation below rewrites them in place. Indexing, not
        # tuple-unpacking: iterating an array costs ~2 us.
        lower, upper = bounds[0], bounds[1]
        equality_rows = None
        try:
            if self._eliminate:
                assert self.contacts is not None  # eliminated contacts exist
                reduction = self.contacts.reduction(self.kin, dt)
            else:
                reduction = self._identity_reduction
                if self.contacts is not None:
                    equality_rows = self.contacts.equation(self.kin, dt)
        except np.linalg.LinAlgError as exc:
            return self.hold(SolveStatus.HELD, f"contact elimination failed: {exc}", started)
        rows, targets = self._rows, self._targets
        kin = self.kin
        for task, task_rows, task_targets in self._task_views:
            task.fill(kin, task_rows, task_targets)
        if self._posture_rows is not None:
            self._posture_rows.fill(kin, rows, targets)
        slack = None
        if self.polygon is not None:
            slack = self.polygon.fill(kin, dt, *self._polygon_views)
        # In z: task rows A P with targets b - A v0; polygon rows G P with bounds h - G v0.
        reduced_rows = reduction.reduce(rows, self._reduced_rows)
        reduced_targets = np.subtract(targets, reduction.apply_offset(rows), out=self._reduced_targets)
        constraints, polygon_rows = self._constraints(reduction, lower, upper, equality_rows,
                                                      reduced_rows, reduced_targets, slack)
        objective_rows, objective_targets = self._reduced_task_views  # the tasks' part
        built = time.perf_counter()

        # ---- solve, relaxing first the acceleration bound and the ZMP rows, then the
        # support polygon, if the hard constraints conflict (the feet and the
        # position/velocity limits stay).
        result = self._solve(objective_rows, objective_targets, constraints)
        status, message = SolveStatus.OK, ""
        dropped: list[str] = []
        if result.z is None and (self.acceleration_limit is not None or self._has_zmp_rows):
            # The feet fix the legs' velocities up to the base's 6: a narrow acceleration
            # window around last tick's may not meet that subspace at the new q; nor may the
            # ZMP rows (which bound the velocity change too) near the polygon's edge.
            if self.acceleration_limit is not None:
                joint_velocity_bounds(self.position_limit, self.velocity_limit, q, dt)  # into lower, upper
                constraints, polygon_rows = self._constraints(reduction, lower, upper, equality_rows,
                                                              reduced_rows, reduced_targets, slack)
                dropped.append("joint acceleration bound")
            if self._has_zmp_rows and polygon_rows.stop > polygon_rows.start:
                assert self.polygon is not None  # ZMP rows are the polygon's
                zmp_start = polygon_rows.start + self.polygon.n_edges
                constraints = constraints.without_rows(zmp_start, polygon_rows.stop)
                polygon_rows = slice(polygon_rows.start, zmp_start)
                dropped.append("ZMP rows")
            result = self._solve(objective_rows, objective_targets, constraints)
            status, message = SolveStatus.RELAXED, f"{' and '.join(dropped)} dropped (hard constraints infeasible)"
        if result.z is None and polygon_rows.stop > polygon_rows.start:
            result = self._solve(objective_rows, objective_targets,
                                 constraints.without_rows(polygon_rows.start, polygon_rows.stop))
            # (What the first relaxation dropped stays dropped: the message says it too.)
            dropped.append("support polygon constraint")
            status, message = SolveStatus.RELAXED, f"{', '.join(dropped)} dropped (hard constraints infeasible)"
        if result.z is not None and result.levels_solved < self.n_levels:
            status = SolveStatus.RELAXED
            message = (message + "; " if message else "") + \
                f"levels {result.levels_solved + 1}..{self.n_levels} kept the solution of level {result.levels_solved}"
        self.last_result = result
        solved = time.perf_counter()
        if result.z is None:
            return self.hold(SolveStatus.HELD, f"QP failed (DAQP exit flags {result.exitflags})", started)

        # ---- integrate, with the output forced inside the limits
        v = reduction.expand(result.z, self.robot.nv)
        # DAQP meets bounds to ~1e-6; clipping makes "within limits" exact.
        joint_velocities = v[NV_BASE:]
        np.maximum(joint_velocities, lower, out=joint_velocities)
        np.minimum(joint_velocities, upper, out=joint_velocities)
        q_next = pin.integrate(self.robot.model, q, v * dt)
        self.position_limit.clip(q_next)
        if not all_finite(q_next):
            return self.hold(SolveStatus.HELD, "non-finite solution", started)
        # The internal state is the command (open loop); the caller gets a copy it may keep
        # or modify without corrupting either.
        self._record(q_next, v)
        self.status_message = message
        finished = time.perf_counter()
        timings = TickTimings((built - started) * 1e3, (solved - built) * 1e3, (finished - started) * 1e3)
        self.timing.add(timings)
        return ControlOutput(q_next.copy(), v, status, timings)

    def commit(self, q: np.ndarray, v: np.ndarray) -> None:
        """Record the step executed: configuration ``q`` (nq,) reached with velocity ``v`` (nv,)
        [rad/s, m/s]. :meth:`step` commits its own solution; a caller whose safety filter then
        refused or shortened it commits what was left (none: ``v`` = 0), since the recorded
        velocity bounds the next tick's (the joint acceleration limit) and its ZMP rows: left
        to believe refused steps were taken, the controller kept accelerating a robot that
        stood still (see :class:`teleop.jog.session.JogController`).

        Raises ValueError, before any state changes, if ``q`` or ``v`` has the wrong shape
        or a non-finite entry (a NaN committed here became every later command)."""
        q = np.array(q, dtype=float)
        v = np.asarray(v, dtype=float)
        if q.shape != (self.robot.nq,) or not np.all(np.isfinite(q)):
            raise ValueError(f"q must be {self.robot.nq} finite values, got shape {q.shape}")
        if v.shape != (self.robot.nv,) or not np.all(np.isfinite(v)):
            raise ValueError(f"v must be {self.robot.nv} finite values, got shape {v.shape}")
        self._record(q, v)

    def _record(self, q: np.ndarray, v: np.ndarray) -> None:
        """:meth:`commit` without its checks, for :meth:`step`, whose (nq,) ``q`` and (nv,)
        ``v`` are already known finite (the checks would cost every tick)."""
        self.q = self.last_command = np.array(q, dtype=float)
        if self.polygon is not None:
            self.polygon.commanded(v)
        if self.acceleration_limit is not None:
            self.acceleration_limit.commanded(v[NV_BASE:])

    def _constraints(self, reduction, lower, upper, equality_rows, reduced_rows, reduced_targets,
                     slack) -> tuple[Constraints, slice]:
        """Hard constraints on z, and where the support-polygon rows are among its rows.

        Filled into buffers preallocated at reset (this runs every tick)."""
        n_free, n_joints = self._n_free, self._n_support_joints
        rows, row_lower, row_upper = self._constraint_rows, self._constraint_lower, self._constraint_upper
        row_lower[self._free_joint_positions] = lower[self._free_joints]
        row_upper[self._free_joint_positions] = upper[self._free_joints]
        if n_joints:
            # Bounds of the joints inside the eliminated block: rows of the basis.
            rows[:n_joints, n_free:] = reduction.basis[self._support_joint_positions]
            offset = reduction.offset[self._support_joint_positions]
            np.subtract(lower[self._support_joints], offset, out=row_lower[n_free:n_free + n_joints])
            np.subtract(upper[self._support_joints], offset, out=row_upper[n_free:n_free + n_joints])
        used = n_joints
        if self._n_equalities:
            jacobian, rhs = equality_rows
            if not self._in_place:
                reduction.reduce(jacobian, out=rows[used:used + len(rhs)])
            row_lower[n_free + used:n_free + used + len(rhs)] = rhs
            row_upper[n_free + used:n_free + used + len(rhs)] = rhs
            used += len(rhs)
        polygon_start = used
        if slack is not None and self._in_place:  # the polygon filled its rows there
            used += len(slack)
        elif slack is not None:
            assert self.polygon is not None  # the slack is the polygon's
            polygon_rows, polygon_bounds = reduced_rows[self._n_task_rows:], reduced_targets[self._n_task_rows:]
            if self.polygon.active_distance != float("inf"):  # optional: only the near edges
                near = slack < self.polygon.active_distance
                polygon_rows, polygon_bounds = polygon_rows[near], polygon_bounds[near]
            k = len(polygon_bounds)
            rows[used:used + k] = polygon_rows
            row_upper[n_free + used:n_free + used + k] = polygon_bounds
            used += k
        if used == len(rows):
            return self._full_constraints, slice(polygon_start, used)
        total = n_free + used
        constraints = Constraints(n_free, rows[:used], row_lower[:total], row_upper[:total],
                                  self._constraint_sense[:total])
        return constraints, slice(polygon_start, used)

    def _solve(self, rows: np.ndarray, targets: np.ndarray, constraints: Constraints) -> HierarchyResult:
        """Solve the reduced problem (``rows``/``targets`` are the task part of the reduced
        buffers, whose per-level views were made at reset)."""
        if self.mode == "weighted":
            return solve_weighted(rows, targets, self.damping, constraints)
        levels = self._reduced_level_views
        if self._weights_version != Task.parameters_version:  # weights rarely change
            self._weights_version = Task.parameters_version
            self._any_zero_weight = any(t.has_zero_rows for t in self.tasks.values())
        free = self._first_level_free if not self._any_zero_weight else None
        return solve_hierarchy(levels, self.damping, constraints, free, self._any_zero_weight)

    # ------------------------------------------------------------- inspection
    def timing_stats(self) -> dict[str, float]:
        """p50/p99 of build, solve and total time over the sliding window [ms]."""
        return self.timing.stats()

    def task_errors(self, q: np.ndarray | None = None) -> dict[str, float]:
        """Norm of each task's error at ``q`` (default: the internal state)."""
        self.kin.update(self.q if q is None else q)
        return {name: float(np.linalg.norm(task.error(self.kin))) for name, task in self.tasks.items()}
