"""Data of the web viewer's 3D robot view: stick-figure skeletons of three robot poses.

The operator's page (teleop/video/web.py) draws three poses of the robot over each other:

=============  ==========================================================================
``ghost``      the operator's *current* retargeted references, turned into a whole-body
               configuration on this side (translucent: where the operator is now)
``actual``     the robot's measured configuration, as the last FEEDBACK packet carried it
               (it left the robot τ_b ago: what the delayed video shows)
``predicted``  the configuration the robot's controller was commanding when that FEEDBACK
               left, i.e. the delay compensator's prediction turned into joints
=============  ==========================================================================

With working compensation ``predicted`` (and, after the servo lag, ``actual``) lines up
with ``ghost``; without it the robot trails the ghost by the round-trip delay.

The server computes the 3D points (pinocchio forward kinematics on :class:`RobotModel`)
and the page only projects and draws them (teleop/video/robot_view.js), so the browser
needs no robot model and no library.

Ghost pose: the references hold hand positions, CoM, waist height and a few posture
angles, not joint angles. The ghost is the configuration the robot's own whole-body
controller (:class:`ReferenceTracker`, same stack, feet fixed at the home stance) reaches
for those references, solved with a few warm-started iterations per request. Using the
robot's controller keeps the ghost comparable to ``predicted``: the difference between the
two is the prediction error, not a different inverse kinematics.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pinocchio as pin

from retarget.references import RobotReferences
from teleop.control.tracker import ReferenceTracker
from teleop.json_safe import json_safe
from teleop.net.watchdog import WatchdogState
from teleop.prescient.compensator import CompensationState
from teleop.robot.model import RobotModel
from teleop.stations.operator_status import state_name

#: Names of the three poses, in drawing order (the translucent ghost last, on top).
POSE_NAMES = ("actual", "predicted", "ghost")

#: Legend text per pose (the page shows it next to the colour).
POSE_LABELS = {
    "ghost": "operator now (ghost)",
    "actual": "robot measured (delayed)",
    "predicted": "predicted command",
}

#: Radius of the head circle [m], drawn around a point 4 cm behind the eyes' midpoint along
#: the head's forward axis (see :meth:`Skeleton.points`).
HEAD_RADIUS_M = 0.065


@dataclass(frozen=True)
class Chain:
    """One polyline of the skeleton: ``start`` frame, joint origins, ``end`` frame.

    Attributes:
        name: chain name (``left_leg``...).
        start: frame role or URDF frame the line starts at.
        joints: joint names whose origins the line passes through, root to tip.
        end: frame role or URDF frame the line ends at.
    """

    name: str
    start: str
    joints: tuple[str, ...]
    end: str


def skeleton_chains(robot: RobotModel) -> tuple[Chain, ...]:
    """The skeleton of a robot from its description's joint groups and frame roles.

    Legs run waist → hip … ankle → sole, arms chest → shoulder … wrist → hand, the neck
    chest → neck joints → head. The torso is drawn waist → chest only: the iCub's torso
    joint origins sit up to 7 cm behind the spine and would draw a zigzag.
    """
    groups = robot.description.groups
    return (
        Chain("left_leg", "waist", tuple(groups["left_leg"]), "left_sole"),
        Chain("right_leg", "waist", tuple(groups["right_leg"]), "right_sole"),
        Chain("torso", "waist", (), "chest"),
        Chain("neck", "chest", tuple(groups["neck"]), "head"),
        Chain("left_arm", "chest", tuple(groups["left_arm"]), "left_hand"),
        Chain("right_arm", "chest", tuple(groups["right_arm"]), "right_hand"),
    )


def _rounded(points: npt.ArrayLike) -> list:
    """Round to 0.1 mm (4 decimals of a metre): plenty on screen, and keeps the JSON small."""
    return np.round(np.asarray(points, dtype=float), 4).tolist()


class Skeleton:
    """Forward kinematics of the skeleton points of configurations (own pinocchio data).

    Args:
        robot: the robot model; only its ``model`` and description are read.
        min_segment_m: consecutive points closer than this are merged [m] (several iCub
            joints share an origin).
    """

    def __init__(self, robot: RobotModel, min_segment_m: float = 0.005) -> None:
        self.robot = robot
        self.chains = skeleton_chains(robot)
        self.min_segment_m = float(min_segment_m)
        self._data = robot.model.createData()
        model = robot.model
        self._joint_ids = {j: model.getJointId(j) for c in self.chains for j in c.joints}
        frames = {c.start for c in self.chains} | {c.end for c in self.chains} | {"head", "left_sole", "right_sole"}
        self._frame_ids = {f: robot.frame_id(f) for f in frames}
        self._eye_ids = [robot.frame_id(e) for e in ("left_eye", "right_eye") if e in robot.frame_ids]
        self._sole_corners = {side: robot.description.sole_corners[side] for side in ("left", "right")}
        # The head's forward axis in the head frame: stance +x at the home posture (the
        # URDF's head axes are not forward-aligned).
        data = robot.model.createData()
        pin.framesForwardKinematics(robot.model, data, robot.home_configuration())
        self._head_forward = data.oMf[self._frame_ids["head"]].rotation.T @ np.array([1.0, 0.0, 0.0])

    def points(self, q: np.ndarray) -> dict[str, Any]:
        """Skeleton of configuration ``q`` ((nq,), pinocchio layout), stance frame [m].

        Returns:
            ``{"chains": {name: (k, 3) list}, "soles": [(4, 3), (4, 3)] lists (left,
            right sole contact corners), "head": {"center": (3,), "radius": float},
            "gaze": [(3,), (3,)] from between the eyes 8 cm along the head's forward axis}``.
        """
        q = np.asarray(q, dtype=float)
        if q.shape != (self.robot.nq,) or not np.all(np.isfinite(q)):
            raise ValueError(f"configuration must be ({self.robot.nq},) and finite, got {q.shape}")
        q = q.copy()
        q[3:7] /= np.linalg.norm(q[3:7]) or 1.0  # a wire-rounded quaternion: renormalise
        data = self._data
        pin.framesForwardKinematics(self.robot.model, data, q)
        chains = {}
        for chain in self.chains:
            pts = [data.oMf[self._frame_ids[chain.start]].translation]
            pts += [data.oMi[self._joint_ids[j]].translation for j in chain.joints]
            pts.append(data.oMf[self._frame_ids[chain.end]].translation)
            kept = [pts[0]]
            for p in pts[1:]:
                if np.linalg.norm(p - kept[-1]) >= self.min_segment_m:
                    kept.append(p)
            chains[chain.name] = _rounded(kept)
        soles = []
        for side in ("left", "right"):
            M = data.oMf[self._frame_ids[f"{side}_sole"]]
            soles.append(_rounded(self._sole_corners[side] @ M.rotation.T + M.translation))
        head = data.oMf[self._frame_ids["head"]]
        forward = head.rotation @ self._head_forward
        if self._eye_ids:
            eyes = np.mean([data.oMf[i].translation for i in self._eye_ids], axis=0)
        else:
            eyes = head.translation + 0.06 * forward
        center = eyes - 0.04 * forward  # the skull sits behind the eyes
        return {"chains": chains, "soles": soles,
                "head": {"center": _rounded(center), "radius": HEAD_RADIUS_M},
                "gaze": _rounded([eyes, eyes + 0.08 * forward])}


class GhostSolver:
    """Whole-body configuration for operator references (see the module docstring).

    Args:
        robot: the robot model (a private copy is built: the solver owns its data).
        iterations: controller ticks per call (one call per page poll); warm-started from
            the last solution, so a changing stream is followed over consecutive calls and a
            still one converges (then left alone after ``max_ticks_per_sample`` ticks).
        step_s: integration step of those ticks [s]. The default stack's gains are 10/s,
            so 0.1 s corrects the whole error per tick (dead-beat) while the joint velocity
            limits (≥ 2 rad/s here) keep each tick's change bounded; measured from home to a
            hand target 29 cm away: 13.5, 8.4, 2.4, 1.0 cm after 1..4 ticks.
    """

    def __init__(self, robot: RobotModel | None = None, iterations: int = 2, step_s: float = 0.1) -> None:
        description = robot.description if robot is not None else "icub"
        self.robot = RobotModel(description)
        self.tracker = ReferenceTracker(self.robot, feedforward=False)
        self.iterations = int(iterations)
        self.step_s = float(step_s)
        #: Ticks after which a sample that does not change is taken as converged.
        self.max_ticks_per_sample = 12
        self.status = "home"
        self._last_t: float | None = None
        self._ticks = 0   # ticks spent on the current sample
        self._stamp = 0   # private, strictly increasing sample stamps for the tracker

    @property
    def q(self) -> np.ndarray:
        """(nq,) current ghost configuration."""
        return self.tracker.q.copy()

    def solve(self, references: RobotReferences) -> np.ndarray:
        """(nq,) configuration tracking ``references``; repeated calls refine it."""
        if references.t == self._last_t and self._ticks >= self.max_ticks_per_sample:
            return self.q  # converged on this sample: spare the CPU
        if references.t != self._last_t:
            self._last_t, self._ticks = references.t, 0
        for _ in range(self.iterations):
            # The tracker skips samples whose t it has seen; a fresh stamp per tick makes it
            # re-read the (same) targets. The stamps stay private to this solver.
            self._stamp += 1
            self._ticks += 1
            stamped = references.with_time(float(self._stamp))
            out = self.tracker.step(stamped, dt=self.step_s)
            self.status = out.status.value
        return self.q


class RobotPoseView:
    """Builds the ``/robot-pose`` JSON document of the web viewer. Thread-safe.

    Cost: the document runs in the viewer's HTTP thread and holds the GIL while it solves,
    so it competes with the operator's 100 Hz loop. :meth:`from_station` therefore reuses
    its last document for ``min_interval_s`` whatever the number of open pages, and the
    robot's skeletons are recomputed only when a new FEEDBACK arrived.

    Args:
        robot: robot model (default: the iCub); the view keeps its own copies.
        ghost_iterations: see :class:`GhostSolver`.
        min_interval_s: :meth:`from_station` builds at most one document per this period [s].
        labels: legend text per pose (default :data:`POSE_LABELS`); the page's legend
            lists only the poses named here, so a view without a ghost leaves it out.
    """

    def __init__(self, robot: RobotModel | None = None, ghost_iterations: int = 2,
                 min_interval_s: float = 0.1, labels: dict[str, str] | None = None) -> None:
        self.robot = RobotModel(robot.description) if robot is not None else RobotModel()
        self.skeleton = Skeleton(self.robot)
        self.ghost = GhostSolver(self.robot, iterations=ghost_iterations)
        self.min_interval_s = float(min_interval_s)
        self.labels = dict(POSE_LABELS if labels is None else labels)
        self._lock = threading.Lock()
        self._cached: tuple[float, dict[str, Any]] | None = None  # (monotonic time, document)
        # (feedback, {pose: skeleton}, {error key: message}) of the last FEEDBACK drawn.
        self._robot_skeletons: tuple[Any, dict[str, Any], dict[str, Any]] = (None, {}, {})

    def document(self, operator_references: RobotReferences | None = None,
                 measured_q: np.ndarray | None = None, commanded_q: np.ndarray | None = None,
                 info: dict[str, Any] | None = None) -> dict[str, Any]:
        """The JSON-ready document the page draws.

        Args:
            operator_references: the operator's current references (ghost), or None.
            measured_q: (nq,) the robot's measured configuration (actual), or None.
            commanded_q: (nq,) the robot's commanded configuration (predicted), or None.
            info: extra figures shown under the view (delays, states...).

        Returns:
            ``{"frame": str, "poses": {name: skeleton or None}, "labels": {...},
            "info": {...}}`` with skeletons as :meth:`Skeleton.points` returns them.
        """
        with self._lock:
            details: dict[str, Any] = dict(info or {})
            poses: dict[str, Any] = dict.fromkeys(POSE_NAMES)
            poses["ghost"] = self._ghost_pose(operator_references, details)
            poses.update(self._robot_poses(measured_q, commanded_q, details))
            return self._assemble(poses, details)

    def _ghost_pose(self, references: RobotReferences | None, details: dict[str, Any]) -> dict[str, Any] | None:
        if references is None:
            return None
        try:
            pose = self.skeleton.points(self.ghost.solve(references))
        except (ValueError, TypeError) as error:  # bad input shows up on the page, never as a 500
            details["ghost_error"] = str(error)
            return None
        details["ghost_solver"] = self.ghost.status
        return pose

    def _robot_poses(self, measured_q: np.ndarray | None, commanded_q: np.ndarray | None,
                     details: dict[str, Any]) -> dict[str, Any]:
        poses = {}
        for name, q in (("actual", measured_q), ("predicted", commanded_q)):
            if q is None:
                continue
            try:
                poses[name] = self.skeleton.points(q)
            except ValueError as error:  # e.g. a peer with another robot model
                details[f"{name}_error"] = str(error)
        return poses

    def _assemble(self, poses: dict[str, Any], details: dict[str, Any]) -> dict[str, Any]:
        return {"frame": "stance: x forward, y left, z up [m]", "poses": poses,
                "labels": dict(self.labels), "info": json_safe(details)}

    def _document_from_station(self, station: Any) -> dict[str, Any]:
        feedback = getattr(station, "feedback", None)
        details: dict[str, Any] = {}
        if feedback is not None:
            details = {"forward_delay_s": feedback.forward_delay, "last_ref_time": feedback.last_ref_time,
                       "compensation": state_name(CompensationState, feedback.compensation_state),
                       "watchdog": state_name(WatchdogState, feedback.watchdog_state)}
        with self._lock:
            poses: dict[str, Any] = dict.fromkeys(POSE_NAMES)
            poses["ghost"] = self._ghost_pose(getattr(station, "current", None), details)
            cached_feedback, robot_poses, robot_details = self._robot_skeletons
            if feedback is not cached_feedback:  # a FEEDBACK is immutable: same object, same poses
                robot_details = {}
                robot_poses = self._robot_poses(getattr(feedback, "measured_q", None),
                                                getattr(feedback, "commanded_q", None), robot_details)
                self._robot_skeletons = (feedback, robot_poses, robot_details)
            poses.update(robot_poses)
            details.update(robot_details)
            return self._assemble(poses, details)

    def from_station(self, station: Any) -> dict[str, Any]:
        """Document for an :class:`teleop.stations.operator_station.OperatorStation` (or
        None: nothing to draw yet): its current references and the last FEEDBACK (measured
        and commanded q). Rate-limited, see the class docstring."""
        now = time.monotonic()
        cached = self._cached
        if cached is not None and now - cached[0] < self.min_interval_s:
            return cached[1]
        document = self._document_from_station(station)
        self._cached = (now, document)
        return document
