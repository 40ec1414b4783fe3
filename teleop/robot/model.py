"""The robot's kinematic and dynamic model (pinocchio), with the roles of its description.

Configuration layout (pinocchio free-flyer): ``q`` is (7 + n,) = base position (3) [m],
base orientation quaternion (x, y, z, w), then the n actuated joint angles [rad] in
:attr:`RobotModel.joint_names` order; ``v`` is (6 + n,) = base linear and angular velocity
(in the base frame) then joint velocities [rad/s].

World frame = the *stance frame*: x forward, y left, z up, origin on the ground midway
between the soles at the home posture (see retarget/references.py).
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pinocchio as pin

from retarget.polygon import convex_hull
from teleop.robot.description import DescriptionError, RobotDescription, load_description

#: Base-configuration sizes of a free-flyer joint in q and v.
NQ_BASE, NV_BASE = 7, 6


@dataclass(frozen=True)
class JointLimits:
    """Per-joint limits, (n,) arrays in :attr:`RobotModel.joint_names` order."""

    lower: np.ndarray     # [rad]
    upper: np.ndarray     # [rad]
    velocity: np.ndarray  # [rad/s]
    effort: np.ndarray    # [N m]


class RobotModel:
    """A floating-base robot: pinocchio model + data, named frames, groups and limits.

    Args:
        description: a :class:`RobotDescription` or the name/path of a description file.
    """

    def __init__(self, description: RobotDescription | str = "icub") -> None:
        self.description = description if isinstance(description, RobotDescription) else load_description(description)
        d = self.description
        self.model: pin.Model = pin.buildModelFromUrdf(str(d.urdf_path), pin.JointModelFreeFlyer())
        self.joint_names: list[str] = [self.model.names[i] for i in range(2, self.model.njoints)]
        for name in (j for group in d.groups.values() for j in group):
            if name not in self.joint_names:
                raise DescriptionError(f"{d.source}: joint {name!r} of a group is not in the URDF")
        for signal, pairs in d.reference_joints.items():
            unknown = [joint for joint, _ in pairs if joint not in self.joint_names]
            if unknown:   # found here, not as a KeyError when the references are first mapped
                raise DescriptionError(f"{d.source}: [reference_joints] {signal} names joints that are not "
                                       f"in the URDF: {unknown}")
        for role, frame in d.frames.items():
            if not self.model.existFrame(frame):
                raise DescriptionError(f"{d.source}: frame {frame!r} for role {role!r} is not in the URDF")
        for extra in d.extra_frames.values():
            if not self.model.existFrame(extra.parent):
                raise DescriptionError(f"{d.source}: parent {extra.parent!r} of extra frame {extra.name!r} "
                                       "is not in the URDF")
            if extra.name in d.frames or self.model.existFrame(extra.name):
                # It would silently replace that role's (or URDF frame's) placement.
                raise DescriptionError(f"{d.source}: extra frame {extra.name!r} has the name of a frame role or "
                                       "of a URDF frame; give it its own name")
        for table in ("home", "velocity_limits", "effort_limits"):
            # Limits may use patterns ("*_elbow"); a name or pattern that matches no joint is a typo.
            patterns = table != "home"
            unknown = [name for name in getattr(d, table) if name not in self.joint_names
                       and not (patterns and any(fnmatch.fnmatchcase(joint, name) for joint in self.joint_names))]
            if unknown:
                raise DescriptionError(f"{d.source}: [{table}] names joints that are not in the URDF: {unknown}")
        self.limits = self._limits()
        # Pinocchio clamps nothing itself: keep the model's own limits in sync with the
        # description so that every consumer (QP bounds, sampling) sees the same numbers.
        self.model.velocityLimit[NV_BASE:] = self.limits.velocity
        self.model.effortLimit[NV_BASE:] = self.limits.effort
        self._add_extra_frames()
        self.data: pin.Data = self.model.createData()
        self.frame_ids: dict[str, int] = {role: self.model.getFrameId(name) for role, name in d.frames.items()}
        for name in d.extra_frames:
            self.frame_ids[name] = self.model.getFrameId(name)

    # ------------------------------------------------------------------ structure
    @property
    def n_joints(self) -> int:
        """Number of actuated joints n."""
        return len(self.joint_names)

    @property
    def nq(self) -> int:
        return self.model.nq

    @property
    def nv(self) -> int:
        return self.model.nv

    @cached_property
    def total_mass(self) -> float:
        """Total mass of the robot [kg]."""
        return float(sum(inertia.mass for inertia in self.model.inertias))

    def joint_index(self, name: str) -> int:
        """Index of an actuated joint in the (n,) joint vector."""
        try:
            return self.joint_names.index(name)
        except ValueError:
            raise KeyError(f"{self.description.name} has no joint {name!r}") from None

    def group_indices(self, group: str) -> np.ndarray:
        """(k,) indices in the joint vector of the joints of a group (or of a joint name)."""
        if group in self.description.groups:
            return np.array([self.joint_index(j) for j in self.description.groups[group]], dtype=int)
        return np.array([self.joint_index(group)], dtype=int)

    def frame_id(self, role: str) -> int:
        """Pinocchio frame id of a role (``left_hand``...) or of any URDF frame name."""
        if role in self.frame_ids:
            return self.frame_ids[role]
        if self.model.existFrame(role):
            return self.model.getFrameId(role)
        raise KeyError(f"{self.description.name} has no frame or role {role!r}")

    def _limits(self) -> JointLimits:
        d, m = self.description, self.model
        lower = m.lowerPositionLimit[NQ_BASE:].copy()
        upper = m.upperPositionLimit[NQ_BASE:].copy()
        velocity = m.velocityLimit[NV_BASE:].copy()
        effort = m.effortLimit[NV_BASE:].copy()
        for i, name in enumerate(self.joint_names):
            v = d.limit_override(d.velocity_limits, name)
            e = d.limit_override(d.effort_limits, name)
            velocity[i] = v if v is not None else velocity[i]
            effort[i] = e if e is not None else effort[i]
        return JointLimits(lower, upper, velocity, effort)

    def _add_extra_frames(self) -> None:
        """Add the description's extra frames (offsets given in stance-aligned axes)."""
        if not self.description.extra_frames:
            return
        data = self.model.createData()
        q = self.home_configuration(_raw=True)
        pin.framesForwardKinematics(self.model, data, q)
        for extra in self.description.extra_frames.values():
            parent_id = self.model.getFrameId(extra.parent)
            parent = self.model.frames[parent_id]
            world_parent = data.oMf[parent_id]
            # Offset and orientation such that the new frame is stance-aligned at home.
            offset_parent = world_parent.rotation.T @ np.asarray(extra.xyz_stance)
            placement = parent.placement * pin.SE3(world_parent.rotation.T, offset_parent)
            self.model.addFrame(pin.Frame(extra.name, parent.parentJoint, parent_id, placement,
                                          pin.FrameType.OP_FRAME))

    # ------------------------------------------------------------ configurations
    def joints_to_q(self, joints: np.ndarray, base_position=(0.0, 0.0, 0.0),
                    base_quaternion_xyzw=(0.0, 0.0, 0.0, 1.0)) -> np.ndarray:
        """Assemble a (nq,) configuration from (n,) joint angles and a base pose."""
        q = np.empty(self.nq)
        q[:3] = base_position
        q[3:7] = base_quaternion_xyzw
        q[NQ_BASE:] = joints
        return q

    def home_joints(self) -> np.ndarray:
        """(n,) joint angles of the home posture [rad]."""
        joints = np.zeros(self.n_joints)
        for name, value in self.description.home.items():
            joints[self.joint_index(name)] = value
        return joints

    def home_configuration(self, _raw: bool = False) -> np.ndarray:
        """(nq,) home configuration standing on the ground in the stance frame.

        The base is yawed so the robot faces +x and placed so that the lowest sole corner
        touches z = 0 and the midpoint of the sole frames is at x = y = 0.
        """
        yaw = self.description.root_yaw_in_stance
        quat = pin.Quaternion(pin.rpy.rpyToMatrix(0.0, 0.0, yaw)).coeffs()  # x, y, z, w
        q = self.joints_to_q(self.home_joints(), (0.0, 0.0, 0.0), quat)
        if _raw:
            return q
        data = self.model.createData()
        pin.framesForwardKinematics(self.model, data, q)
        soles = [data.oMf[self.frame_ids[f"{side}_sole"]] for side in ("left", "right")]
        corners = np.vstack([self.sole_corners_at(side, M.rotation, M.translation)
                             for M, side in zip(soles, ("left", "right"))])
        mid = 0.5 * (soles[0].translation + soles[1].translation)
        q[0] -= mid[0]
        q[1] -= mid[1]
        q[2] -= corners[:, 2].min()
        return q

    def random_configuration(self, rng: np.random.Generator, margin: float = 0.05) -> np.ndarray:
        """(nq,) configuration with joints uniform within limits (shrunk by ``margin`` rad)
        and a random base pose (position within 1 m, uniform orientation)."""
        lo, hi = self.limits.lower + margin, self.limits.upper - margin
        joints = rng.uniform(np.minimum(lo, hi), np.maximum(lo, hi))
        quat = rng.normal(size=4)
        quat /= np.linalg.norm(quat)
        return self.joints_to_q(joints, rng.uniform(-1, 1, 3), quat)

    # ---------------------------------------------------------------- kinematics
    def update(self, q: np.ndarray) -> None:
        """Forward kinematics of all frames and the CoM at ``q`` (into :attr:`data`)."""
        pin.framesForwardKinematics(self.model, self.data, q)
        pin.centerOfMass(self.model, self.data, q, False)

    def placement(self, role: str) -> pin.SE3:
        """World placement of a frame after :meth:`update`."""
        return self.data.oMf[self.frame_id(role)]

    def position(self, role: str) -> np.ndarray:
        """(3,) world position of a frame after :meth:`update` [m]."""
        return self.data.oMf[self.frame_id(role)].translation.copy()

    def com(self) -> np.ndarray:
        """(3,) centre of mass after :meth:`update` [m]."""
        return self.data.com[0].copy()

    def sole_corners_at(self, side: str, rotation: np.ndarray, translation: np.ndarray) -> np.ndarray:
        """(4, 3) world positions [m] of a sole's contact corners for a sole frame at
        ``rotation`` (3, 3) and ``translation`` (3,) [m] (from any source: this model, the
        simulation)."""
        return self.description.sole_corners[side] @ rotation.T + translation

    def sole_corners(self, side: str) -> np.ndarray:
        """(4, 3) world positions of a sole's contact corners after :meth:`update` [m]."""
        sole = self.placement(f"{side}_sole")
        return self.sole_corners_at(side, sole.rotation, sole.translation)

    def support_polygon(self, sides: tuple[str, ...] = ("left", "right")) -> np.ndarray:
        """(K, 2) convex hull (counter-clockwise) of the active soles' corners, ground plane."""
        points = np.vstack([self.sole_corners(side)[:, :2] for side in sides])
        return convex_hull(points)

    def double_support(self, q: np.ndarray | None = None) -> tuple[np.ndarray, float]:
        """The balance the ZMP pre-filter keeps in a stance on both feet: the (K, 2) support
        polygon [m] and the CoM height [m] (Eq. 2.15's z_c) at configuration ``q`` (nq,)
        (default: the home configuration). Computed on a model of its own: this one's data
        (a controller's, mid-solve) is left as it is."""
        stance = RobotModel(self.description)
        stance.update(self.home_configuration() if q is None else q)
        return stance.support_polygon(), float(stance.com()[2])
