"""A contact scene for impedance experiments: a fixed flat panel and a tool welded to a hand.

Reference: ../shared/reference/controller_coupling_and_jogging.md, §A.8 and §A.11. The
thesis welds a rigid wiper to the hand link and wipes a solar panel; it proposes a
"simpler panel collider" and a press test at several commanded depths (§5.3 / §A.8).
Here:

* :class:`ContactPanel` is a static box (pybullet mass 0) whose top face is the panel
  surface, horizontal at height ``surface_z`` [m] (stance frame: x forward, y left, z up).
* :class:`WeldedTool` is a small sphere (the wiper head) held on a hand link by a fixed
  pybullet constraint at a given offset in the hand frame. Its contact with the panel is a
  single point, as the thesis's rigid wiper (§A.8), which makes the measured force easy to
  read and to compare with stiffness x depth.

Collision filtering: the panel collides **only** with the tool (the robot's own meshes
pass through it), so the measured panel force is the tool's contact force and nothing
else; the tool does not collide with the robot either.

Only the public API of :class:`teleop.sim.simulator.Simulation` is used (``sim.client``,
``sim.body``, ``sim.link_index``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from teleop.sim.pybullet_module import pb

if TYPE_CHECKING:
    from teleop.sim.simulator import Simulation

# Collision groups (bit masks): pybullet lets A and B collide when
# (groupA & maskB) and (groupB & maskA) are both non-zero.
_TOOL_GROUP = 0b0100
_PANEL_GROUP = 0b1000


class ContactPanel:
    """A fixed, horizontal, flat panel (a box) whose top face is at ``surface_z``.

    Args:
        sim: the simulation.
        center_xy: (2,) centre of the panel top face [m].
        surface_z: height of the top face [m].
        half_extents: (3,) half sizes of the box [m] (x depth, y width, z thickness).
        friction: lateral friction coefficient (the tool takes the product with its own
            coefficient, pybullet's combination rule).
    """

    def __init__(self, sim: "Simulation", center_xy=(0.30, 0.15), surface_z: float = 0.60,
                 half_extents=(0.15, 0.25, 0.01), friction: float = 0.3) -> None:
        self.sim = sim
        self.surface_z = float(surface_z)
        half = [float(h) for h in half_extents]
        if len(half) != 3 or min(half) <= 0:
            raise ValueError("half_extents must be 3 positive sizes [m]")
        kw = {"physicsClientId": sim.client}
        shape = pb.createCollisionShape(pb.GEOM_BOX, halfExtents=half, **kw)
        center = [float(center_xy[0]), float(center_xy[1]), self.surface_z - half[2]]
        self.body = pb.createMultiBody(baseMass=0.0, baseCollisionShapeIndex=shape, basePosition=center, **kw)
        pb.changeDynamics(self.body, -1, lateralFriction=float(friction), **kw)
        pb.setCollisionFilterGroupMask(self.body, -1, _PANEL_GROUP, _TOOL_GROUP, **kw)

    def remove(self) -> None:
        pb.removeBody(self.body, physicsClientId=self.sim.client)


class WeldedTool:
    """A sphere (the wiper head) welded to a robot link.

    Args:
        sim: the simulation.
        link: URDF link name of the hand ("l_hand").
        offset: (3,) sphere centre in the link frame [m].
        radius: sphere radius [m].
        mass: sphere mass [kg] (the controller should compensate its weight).
        friction: lateral friction coefficient.
    """

    def __init__(self, sim: "Simulation", link: str, offset, radius: float = 0.015, mass: float = 0.02,
                 friction: float = 1.0) -> None:
        if link not in sim.link_index:
            raise KeyError(f"the simulated robot has no link {link!r}")
        if radius <= 0 or mass <= 0:
            raise ValueError("radius and mass must be > 0")
        self.sim = sim
        self.link = sim.link_index[link]
        self.offset = np.asarray(offset, dtype=float).reshape(3)
        self.radius = float(radius)
        self.mass = float(mass)
        kw = {"physicsClientId": sim.client}
        pos, orn = self._link_pose()
        center, _ = pb.multiplyTransforms(pos, orn, self.offset.tolist(), [0, 0, 0, 1])
        shape = pb.createCollisionShape(pb.GEOM_SPHERE, radius=self.radius, **kw)
        inertia = 0.4 * self.mass * self.radius**2
        self.body = pb.createMultiBody(baseMass=self.mass, baseCollisionShapeIndex=shape, basePosition=center,
                                       baseOrientation=orn, baseInertialFramePosition=[0, 0, 0], **kw)
        pb.changeDynamics(self.body, -1, lateralFriction=float(friction), localInertiaDiagonal=[inertia] * 3,
                          linearDamping=0.0, angularDamping=0.0, **kw)
        pb.setCollisionFilterGroupMask(self.body, -1, _TOOL_GROUP, _PANEL_GROUP, **kw)
        # The weld: a fixed constraint from the hand link frame (offset) to the sphere's centre.
        # pybullet's child frame is the link's *inertial* frame, so express the offset there.
        info = pb.getDynamicsInfo(sim.body, self.link, **kw)
        inv_pos, inv_orn = pb.invertTransform(info[3], info[4])
        parent_pos, parent_orn = pb.multiplyTransforms(inv_pos, inv_orn, self.offset.tolist(), [0, 0, 0, 1])
        self.constraint = pb.createConstraint(sim.body, self.link, self.body, -1, pb.JOINT_FIXED, [0, 0, 0],
                                              parent_pos, [0, 0, 0], parent_orn, [0, 0, 0, 1], **kw)
        pb.changeConstraint(self.constraint, maxForce=1e4, **kw)

    def _link_pose(self):
        state = pb.getLinkState(self.sim.body, self.link, computeForwardKinematics=True,
                                physicsClientId=self.sim.client)
        return state[4], state[5]  # URDF link frame (not the inertial frame)

    def position(self) -> np.ndarray:
        """(3,) world position of the sphere centre as simulated [m]."""
        return np.array(pb.getBasePositionAndOrientation(self.body, physicsClientId=self.sim.client)[0])

    def contact_force(self, panel: ContactPanel) -> tuple[float, np.ndarray, int]:
        """Contact between the tool and the panel.

        Returns:
            (normal force [N] summed over contact points, (3,) total contact force on the
            tool in the world frame [N] (normal + both friction directions), number of points).
        """
        normal = 0.0
        total = np.zeros(3)
        points = pb.getContactPoints(self.body, panel.body, physicsClientId=self.sim.client)
        for c in points:
            # c[7]: contact normal on B (panel) pointing towards A (tool); c[9] normal force;
            # c[10]/c[11] and c[12]/c[13]: the two lateral friction forces and directions.
            # pybullet reports the friction as the force on whichever body Bullet keeps
            # first in the pair (the one created first), not on A: asked with A and B the
            # other way round it flips the normal but not the friction directions. Bullet
            # builds (dir1, dir2, normal towards its first body) right-handed, so the
            # handedness against the reported normal says which body the friction acts on.
            n = np.array(c[7])
            d1, d2 = np.array(c[11]), np.array(c[13])
            on_tool = 1.0 if np.dot(np.cross(d1, d2), n) >= 0 else -1.0
            normal += c[9]
            total += c[9] * n + on_tool * (c[10] * d1 + c[12] * d2)
        return float(normal), total, len(points)

    def remove(self) -> None:
        kw = {"physicsClientId": self.sim.client}
        pb.removeConstraint(self.constraint, **kw)
        pb.removeBody(self.body, **kw)
