r"""Collision checks of the states *along* a commanded motion, not only at its end.

jog_control checks the IK target only; "if the current and target states are both free
while the path between them crosses an obstacle, the robot hits it" (reference Part B,
§B.8 collision test; fix proposed in §B.9.2: check states along the motion). Here every
commanded step q_from -> q_to is interpolated in joint space and each interpolated state
is checked in a pybullet collision world of its own (a DIRECT client holding a copy of
the robot's collision geometry and of the simulation's obstacles; physics is never
stepped there, so the simulation is not disturbed).

Why the interpolation cannot miss an obstacle (a certificate, not a sampling heuristic):
along a joint-space straight line, no point of the robot moves further than

.. math:: D = \|\Delta p_{base}\| + \|\Delta\theta_{base}\| r_{base} + \sum_i |\Delta q_i|\, r_i

with :math:`r_i` an upper bound of the distance from joint i's axis to any point of the
links it moves, at any posture (the summed fixed translations of the chain to each frame
origin it moves + a link-size allowance). With :math:`N = \lceil D / \rho \rceil` segments, every point moves at most
:math:`\rho` between two checked states; if each checked state keeps a clearance of at
least :math:`m` to every obstacle and :math:`\rho \le 2m`, no point can reach an obstacle
in between (the distance to a set is 1-Lipschitz). Defaults: m = 10 mm, rho = 20 mm.

Self-collision: the links of the jogged arm against every other link except their own
chain, minus pairs whose (convex-hull) geometries already overlap at the home posture;
contact means penetration (distance < 0), checked at the same states.

Vectors: q (nq,) in the pinocchio layout of :class:`teleop.robot.model.RobotModel`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Sequence

import numpy as np
import pinocchio as pin

from teleop.robot.model import NQ_BASE, RobotModel
from teleop.sim.pybullet_module import pb
from teleop.sim.scene import SceneObject, add_to_simulation
from teleop.sim.urdf_prep import load_failure, prepare_urdf

#: Allowance added to each joint's lever arm for the extent of the links themselves [m].
LINK_EXTENT_M = 0.08


@dataclass
class PathCheck:
    """Outcome of :meth:`CollisionWorld.check_path`.

    Attributes:
        free: True if every checked state is collision-free.
        q_safe: (nq,) the last free state along the path (q_from if the first step collides).
        fraction: fraction of the path that is free (1 = all of it).
        states_checked: number of interpolated states checked.
        hit: description of the first contact ("" if free).
        contact: (other body, arm-side link, other link) of the first contact, as pybullet
            numbers them in the collision world (None if free); see
            :meth:`CollisionWorld.distance_rate`.
    """

    free: bool
    q_safe: np.ndarray
    fraction: float
    states_checked: int
    hit: str = ""
    contact: tuple[int, int, int] | None = None


class CollisionWorld:
    """A kinematic copy of the robot and obstacles for collision queries.

    Args:
        robot: the robot model.
        obstacles: scene objects to avoid (the simulation's scene).
        arm: which arm is jogged (its links are checked against the rest of the body).
        clearance_m: m, distance to obstacles below which a state counts as colliding.
        resolution_m: rho, largest motion of any robot point between checked states.
    """

    def __init__(self, robot: RobotModel, obstacles: Sequence[SceneObject] = (), arm: str = "right",
                 clearance_m: float = 0.01, resolution_m: float = 0.02) -> None:
        if resolution_m > 2 * clearance_m + 1e-12:
            raise ValueError("resolution must be at most twice the clearance (see module docstring)")
        self.robot = robot
        self.clearance_m = float(clearance_m)
        self.resolution_m = float(resolution_m)
        d = robot.description
        keep = set(d.frames.values()) | {f.parent for f in d.extra_frames.values()} | {"l_foot", "r_foot"}
        urdf = prepare_urdf(d.urdf_path, keep, visual=False)
        self.client = pb.connect(pb.DIRECT)
        if self.client < 0:
            raise RuntimeError("pybullet could not start the collision world")
        try:
            self._set_up(urdf, obstacles, arm)
        except BaseException:
            self.close()      # no half-made pybullet world left connected
            raise

    def _set_up(self, urdf: Path, obstacles: Sequence[SceneObject], arm: str) -> None:
        """Everything after connecting: the robot from ``urdf``, the obstacles, the arm's links
        and the pairs to check."""
        robot = self.robot
        d = robot.description
        kw = self._kw = {"physicsClientId": self.client}
        try:
            self.body = pb.loadURDF(str(urdf), useFixedBase=True, **kw)
        except pb.error as exc:
            raise load_failure(urdf, exc) from exc
        info = pb.getDynamicsInfo(self.body, -1, **kw)
        self._inertial = (info[3], info[4])
        joint_of, link_of = {}, {}
        for j in range(pb.getNumJoints(self.body, **kw)):
            ji = pb.getJointInfo(self.body, j, **kw)
            joint_of[ji[1].decode()] = j
            link_of[ji[12].decode()] = j
        self._joint_ids = [joint_of[n] for n in robot.joint_names]
        # add_to_simulation only reads sim.client: this pybullet world is no Simulation.
        scene = add_to_simulation(SimpleNamespace(client=self.client), list(obstacles),  # type: ignore[arg-type]
                                  static=True) if obstacles else None
        self.obstacle_ids = scene.body_ids if scene else []
        self.obstacle_names = [o.name for o in obstacles]
        # Links of the jogged arm: every link downstream of the shoulder yaw (upper arm to
        # hand). They are checked against every other link except the shoulder chain they
        # hang from (touching by construction).
        n_links = pb.getNumJoints(self.body, **kw)
        parent = {j: pb.getJointInfo(self.body, j, **kw)[16] for j in range(n_links)}
        root = joint_of[f"{arm[0]}_shoulder_yaw"]

        def downstream(j: int) -> bool:
            while j != -1:
                if j == root:
                    return True
                j = parent[j]
            return False

        with_geometry = [j for j in [-1, *range(n_links)] if pb.getCollisionShapeData(self.body, j, **kw)]
        self.arm_links = [j for j in with_geometry if j != -1 and downstream(j)]
        upstream = set()
        j = root
        while j != -1:
            upstream.add(j)
            j = parent[j]
        others = [j for j in with_geometry if j not in self.arm_links and j not in upstream]
        self.links = with_geometry
        self.set_configuration(robot.home_configuration())
        self.self_pairs = [(a, b) for a in self.arm_links for b in others
                           if not pb.getClosestPoints(self.body, self.body, 0.0, linkIndexA=a, linkIndexB=b, **kw)]
        self._pair_index = np.array([[with_geometry.index(a), with_geometry.index(b)] for a, b in self.self_pairs],
                                    dtype=int).reshape(-1, 2)
        # Obstacles are static: their bounding boxes (grown by the clearance) once.
        boxes = [pb.getAABB(o, -1, **kw) for o in self.obstacle_ids]
        self._obstacle_lo = np.array([b[0] for b in boxes]).reshape(-1, 3) - self.clearance_m
        self._obstacle_hi = np.array([b[1] for b in boxes]).reshape(-1, 3) + self.clearance_m
        self._link_names = {v: k for k, v in link_of.items()}
        self._link_names[-1] = d.root_frame
        self._levers = self._joint_levers()
        self._data: pin.Data | None = None     # for distance_rate's Jacobians
        self.checks = 0

    def close(self) -> None:
        if self.client is not None and pb.isConnected(self.client):
            pb.disconnect(self.client)
        self.client = None

    # ------------------------------------------------------------------ geometry
    def _joint_levers(self) -> np.ndarray:
        """(n,) r_i: an upper bound, at *any* posture, of the distance from joint i's axis
        origin to the origin of a frame it moves, plus :data:`LINK_EXTENT_M` [m]; and r_base
        for the base rotation (stored as attribute).

        The distance along the chain is at most the sum of its fixed translations (joint
        placements, then the frame's placement on its joint), whatever the joint angles
        between: the triangle inequality. The distances at the home posture are not a
        bound: raising the arms lengthens the torso joints' levers by up to 0.23 m.
        """
        model = self.robot.model

        def chain_length(joint: int, frame: int) -> float:
            length = float(np.linalg.norm(model.frames[frame].placement.translation))
            j = model.frames[frame].parentJoint
            while j != joint:
                length += float(np.linalg.norm(model.jointPlacements[j].translation))
                j = model.parents[j]
            return length

        parents = [model.frames[f].parentJoint for f in range(len(model.frames))]
        levers = np.zeros(self.robot.n_joints)
        for k in range(self.robot.n_joints):
            joint = k + 2  # pinocchio joint index: 0 universe, 1 free flyer
            subtree = set(model.subtrees[joint])
            moved = [f for f, p in enumerate(parents) if p in subtree]
            levers[k] = max((chain_length(joint, f) for f in moved), default=0.0) + LINK_EXTENT_M
        self.base_lever = max(chain_length(1, f) for f in range(len(model.frames)) if parents[f] >= 1) + LINK_EXTENT_M
        return levers

    def displacement_bound(self, q_from: np.ndarray, q_to: np.ndarray) -> float:
        """D: upper bound of how far any robot point moves from q_from to q_to [m]."""
        dq = np.abs(q_to[NQ_BASE:] - q_from[NQ_BASE:])
        R0 = pin.Quaternion(q_from[6], *q_from[3:6]).toRotationMatrix()
        R1 = pin.Quaternion(q_to[6], *q_to[3:6]).toRotationMatrix()
        base = np.linalg.norm(q_to[:3] - q_from[:3]) + np.linalg.norm(pin.log3(R0.T @ R1)) * self.base_lever
        return float(base + dq @ self._levers)

    # ------------------------------------------------------------------ queries
    def set_configuration(self, q: np.ndarray) -> None:
        """Place the collision robot at q (nq,)."""
        kw = self._kw
        pos, orn = pb.multiplyTransforms(q[:3], q[3:7], *self._inertial)
        pb.resetBasePositionAndOrientation(self.body, pos, orn, **kw)
        pb.resetJointStatesMultiDof(self.body, self._joint_ids, [[float(a)] for a in q[NQ_BASE:]], **kw)

    def contact(self, q: np.ndarray) -> str:
        """"" if q (nq,) is free, else a description of the first contact found.

        Broad phase: the links' axis-aligned boxes (pybullet updates them on reset);
        narrow phase (``getClosestPoints`` on the convex hulls) only where boxes overlap.
        """
        found = self._first_contact(q)
        return "" if found is None else found[0]

    def _first_contact(self, q: np.ndarray) -> tuple[str, tuple[int, int, int]] | None:
        """(description, (other body, link, other link)) of the first contact at q (nq,), or None."""
        self.checks += 1
        self.set_configuration(q)
        kw = self._kw
        boxes = np.array([pb.getAABB(self.body, j, **kw) for j in self.links])  # (L, 2, 3)
        lo, hi = boxes[:, 0], boxes[:, 1]
        if len(self.obstacle_ids):
            overlap = np.all((lo[:, None] <= self._obstacle_hi[None]) & (hi[:, None] >= self._obstacle_lo[None]),
                             axis=2)
            for li, oi in zip(*np.nonzero(overlap)):
                link = self.links[li]
                if pb.getClosestPoints(self.body, self.obstacle_ids[oi], self.clearance_m, linkIndexA=link, **kw):
                    return (f"{self._link_names.get(link, link)} within {self.clearance_m * 1e3:.0f} mm "
                            f"of {self.obstacle_names[oi]}", (self.obstacle_ids[oi], link, -1))
        if len(self._pair_index):
            a, b = self._pair_index[:, 0], self._pair_index[:, 1]
            overlap = np.all((lo[a] <= hi[b]) & (hi[a] >= lo[b]), axis=1)
            for k in np.flatnonzero(overlap):
                la, lb = self.self_pairs[k]
                if pb.getClosestPoints(self.body, self.body, 0.0, linkIndexA=la, linkIndexB=lb, **kw):
                    return f"self-collision {self._link_names[la]} / {self._link_names[lb]}", (self.body, la, lb)
        return None

    def distance_rate(self, q: np.ndarray, contact: tuple[int, int, int],
                      reach_m: float = 0.05) -> tuple[np.ndarray, float] | None:
        """(c, d): at q (nq,), the distance d [m] between the two geometries of ``contact``
        (a :attr:`PathCheck.contact`) and the (nv,) row c with which it changes: d' = c v for
        a velocity v (nv,) in pinocchio's layout (first order: the witness points move with
        their links, along the normal between them). None if they are further apart than
        ``reach_m``, or a link has no frame of the model."""
        body, link_a, link_b = contact
        kw = self._kw
        self.set_configuration(q)
        points = pb.getClosestPoints(self.body, body, reach_m, linkIndexA=link_a, linkIndexB=link_b, **kw)
        if not points:
            return None
        point = min(points, key=lambda p: p[8])
        normal = np.asarray(point[7], dtype=float)       # on B, pointing towards A
        jacobian_a = self._point_jacobian(q, link_a, np.asarray(point[5], dtype=float))
        jacobian_b = self._point_jacobian(q, link_b, np.asarray(point[6], dtype=float)) \
            if body == self.body else 0.0                 # (an obstacle does not move)
        if jacobian_a is None or jacobian_b is None:
            return None
        return normal @ (jacobian_a - jacobian_b), float(point[8])

    def _point_jacobian(self, q: np.ndarray, link: int, point: np.ndarray) -> np.ndarray | None:
        """(3, nv) Jacobian of the world point ``point`` (3,) attached to ``link`` at q (nq,),
        or None if the model has no frame of that link's name."""
        model = self.robot.model
        name = self._link_names.get(link)
        if name is None or not model.existFrame(name):
            return None
        if self._data is None:
            self._data = model.createData()
        data = self._data
        frame = model.getFrameId(name)
        pin.computeJointJacobians(model, data, q)
        pin.updateFramePlacements(model, data)
        J = pin.getFrameJacobian(model, data, frame, pin.LOCAL_WORLD_ALIGNED)
        r = point - data.oMf[frame].translation
        return J[:3] - pin.skew(r) @ J[3:]

    def check_path(self, q_from: np.ndarray, q_to: np.ndarray) -> PathCheck:
        """Check the joint-space straight line q_from -> q_to (both (nq,)) at the
        interpolated states of the module docstring (q_from itself is assumed checked)."""
        n = max(1, math.ceil(self.displacement_bound(q_from, q_to) / self.resolution_m))
        previous = q_from
        for k in range(1, n + 1):
            q = interpolate(q_from, q_to, k / n)
            found = self._first_contact(q)
            if found is not None:
                return PathCheck(False, previous.copy(), (k - 1) / n, k, *found)
            previous = q
        return PathCheck(True, np.array(q_to, dtype=float), 1.0, n)


def interpolate(q_from: np.ndarray, q_to: np.ndarray, s: float) -> np.ndarray:
    """(nq,) configuration the fraction s along the straight line (base orientation by slerp)."""
    q = q_from + s * (q_to - q_from)
    a = pin.Quaternion(q_from[6], *q_from[3:6])
    b = pin.Quaternion(q_to[6], *q_to[3:6])
    c = a.slerp(s, b)
    q[3:7] = [c.x, c.y, c.z, c.w]
    return q
