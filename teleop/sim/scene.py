"""The task scene in front of the robot: a table, objects on it and a box on the floor.

A scene is a list of :class:`SceneObject`, each a rigid body made of primitive shapes
(:class:`Box`, :class:`Cylinder`, :class:`Sphere`) with colours. The same list feeds both
the physics (:func:`add_to_simulation` creates the pybullet bodies) and the picture
(:mod:`teleop.sim.lowpoly` tessellates the shapes), so what the operator sees is
what the robot can touch.

Frames: the stance frame of :mod:`teleop.robot.model` (x forward, y left, z up, origin on
the ground between the feet at home). Units: metres, kilograms, RGB colours in [0, 1].
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Union

import numpy as np

from teleop.sim.pybullet_module import pb

if TYPE_CHECKING:  # only for annotations: the scene description needs no simulator
    from teleop.sim.simulator import Simulation


@dataclass(frozen=True)
class Box:
    """Axis-aligned box (in its part frame) of half sizes ``half_extents`` (3,) [m]."""

    half_extents: tuple[float, float, float]


@dataclass(frozen=True)
class Cylinder:
    """Cylinder along its part frame's z axis, centred on the origin [m]."""

    radius: float
    length: float


@dataclass(frozen=True)
class Sphere:
    """Sphere centred on its part frame's origin [m]."""

    radius: float


Shape = Union[Box, Cylinder, Sphere]


@dataclass(frozen=True)
class ShapePart:
    """One primitive of a body: its shape, its offset in the body frame [m], its colour."""

    shape: Shape
    rgb: tuple[float, float, float]
    offset: tuple[float, float, float] = (0.0, 0.0, 0.0)


@dataclass(frozen=True)
class SceneObject:
    """A rigid body of the scene.

    Attributes:
        name: what it is ("table", "red_cube"...).
        parts: its primitives (a table is a top and four legs).
        position: (3,) body origin in the stance frame [m].
        orientation_xyzw: (4,) body orientation quaternion (x, y, z, w).
        mass: [kg]; 0 makes a static body (pybullet's convention).
        friction: lateral friction coefficient of all its surfaces.
    """

    name: str
    parts: tuple[ShapePart, ...]
    position: tuple[float, float, float]
    orientation_xyzw: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 1.0)
    mass: float = 0.0
    friction: float = 0.8

    def rotation(self) -> np.ndarray:
        """(3, 3) rotation matrix of :attr:`orientation_xyzw`."""
        return np.array(pb.getMatrixFromQuaternion(self.orientation_xyzw)).reshape(3, 3)


#: Table-top height [m] of the default scene (the iCub's hands hang at z ~ 0.55 m at home).
TABLE_HEIGHT = 0.60
#: x of the table's near edge [m]. Measured: at home the robot is 13 cm clear of it; the
#: arms alone (any shoulder pitch / elbow) stay >= 1 cm clear; leaning the torso forward
#: (torso_pitch 0.3 rad) with the arms forward brings the hands onto the table top.
TABLE_NEAR_EDGE = 0.42

_WOOD = (0.62, 0.45, 0.30)
_WOOD_DARK = (0.45, 0.32, 0.21)


def default_scene(table_height: float = TABLE_HEIGHT, table_near_edge: float = TABLE_NEAR_EDGE) -> list[SceneObject]:
    """The default task scene: a table in front of the robot with four light objects on it,
    and a heavier box on the floor beside the table.

    Args:
        table_height: height of the table top above the ground [m].
        table_near_edge: x of the table edge nearest to the robot [m].

    Returns:
        The objects, table first.
    """
    depth, width, top_thickness, leg_side = 0.50, 0.90, 0.03, 0.04
    top_half = (depth / 2, width / 2, top_thickness / 2)
    leg_length = table_height - top_thickness
    leg_half = (leg_side / 2, leg_side / 2, leg_length / 2)
    centre_x = table_near_edge + depth / 2
    # Body origin at the centre of the table top's upper face: object heights read easily.
    legs = tuple(
        ShapePart(Box(leg_half), _WOOD_DARK,
                  (sx * (depth / 2 - leg_side), sy * (width / 2 - leg_side), -top_thickness - leg_length / 2))
        for sx in (-1, 1) for sy in (-1, 1))
    table = SceneObject("table", (ShapePart(Box(top_half), _WOOD, (0.0, 0.0, -top_thickness / 2)),) + legs,
                        (centre_x, 0.0, table_height), mass=0.0)

    def on_table(dx: float, dy: float, half_height: float) -> tuple[float, float, float]:
        return (table_near_edge + dx, dy, table_height + half_height)

    yaw_20deg = tuple(pb.getQuaternionFromEuler((0.0, 0.0, np.radians(20.0))))
    objects = [
        table,
        SceneObject("red_cube", (ShapePart(Box((0.025, 0.025, 0.025)), (0.85, 0.12, 0.10)),),
                    on_table(0.10, 0.12, 0.025), yaw_20deg, mass=0.10),
        SceneObject("green_can", (ShapePart(Cylinder(0.03, 0.11), (0.15, 0.65, 0.20)),),
                    on_table(0.12, -0.14, 0.055), mass=0.15),
        SceneObject("blue_box", (ShapePart(Box((0.06, 0.03, 0.04)), (0.15, 0.30, 0.85)),),
                    on_table(0.28, 0.0, 0.04), mass=0.20),
        SceneObject("yellow_ball", (ShapePart(Sphere(0.035), (0.95, 0.80, 0.10)),),
                    on_table(0.25, 0.28, 0.035), mass=0.05),
        SceneObject("floor_crate", (ShapePart(Box((0.12, 0.12, 0.10)), (0.55, 0.55, 0.60)),),
                    (0.50, -0.70, 0.10), tuple(pb.getQuaternionFromEuler((0.0, 0.0, np.radians(-15.0)))),
                    mass=2.0),
    ]
    return objects


@dataclass
class SimulatedScene:
    """Scene objects living in a pybullet simulation.

    Attributes:
        objects: the scene description.
        body_ids: pybullet body id of each object, same order.
        client: pybullet client id.
    """

    objects: list[SceneObject]
    body_ids: list[int]
    client: int
    _static: list[bool] = field(default_factory=list)

    def poses(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """Current (position (3,) [m], rotation (3, 3)) of each object's body frame.

        Static bodies are not queried: they cannot move.
        """
        poses = []
        for obj, body, static in zip(self.objects, self.body_ids, self._static):
            if static:
                poses.append((np.asarray(obj.position, dtype=float), obj.rotation()))
                continue
            position, orientation = pb.getBasePositionAndOrientation(body, physicsClientId=self.client)
            poses.append((np.array(position), np.array(pb.getMatrixFromQuaternion(orientation)).reshape(3, 3)))
        return poses

    def body(self, name: str) -> int:
        """pybullet body id of the object called ``name``."""
        for obj, body in zip(self.objects, self.body_ids):
            if obj.name == name:
                return body
        raise KeyError(f"no scene object {name!r}")


def _shape_kwargs(shape: Shape, visual: bool) -> dict:
    if isinstance(shape, Box):
        return {"shapeType": pb.GEOM_BOX, "halfExtents": list(shape.half_extents)}
    if isinstance(shape, Cylinder):
        # pybullet names the cylinder's length differently for collision and visual shapes.
        return {"shapeType": pb.GEOM_CYLINDER, "radius": shape.radius,
                ("length" if visual else "height"): shape.length}
    if isinstance(shape, Sphere):
        return {"shapeType": pb.GEOM_SPHERE, "radius": shape.radius}
    raise TypeError(f"unknown shape {shape!r}")


def add_to_simulation(sim: Simulation, objects: list[SceneObject] | None = None,
                      static: bool = False) -> SimulatedScene:
    """Create the scene's bodies in ``sim`` (collision and visual shapes, so pybullet's own
    camera sees them too).

    The default scene adds no measurable physics cost (1 kHz step CPU time within the
    +-5% noise of this machine); ``static=True`` is there for scenes with many objects.

    Args:
        sim: the simulation (its ``client`` is used).
        objects: the scene; default :func:`default_scene`.
        static: make every object static (mass 0: the robot cannot move them).

    Returns:
        The objects with their body ids.
    """
    objects = default_scene() if objects is None else list(objects)
    if static:
        objects = [replace(obj, mass=0.0) for obj in objects]
    kw = {"physicsClientId": sim.client}
    body_ids = []
    for obj in objects:
        if len(obj.parts) == 1:
            part = obj.parts[0]
            collision = pb.createCollisionShape(**_shape_kwargs(part.shape, visual=False),
                                                collisionFramePosition=list(part.offset), **kw)
            visual = pb.createVisualShape(**_shape_kwargs(part.shape, visual=True), rgbaColor=[*part.rgb, 1.0],
                                          visualFramePosition=list(part.offset), **kw)
        else:
            collision = pb.createCollisionShapeArray(
                shapeTypes=[_shape_kwargs(p.shape, False)["shapeType"] for p in obj.parts],
                halfExtents=[list(p.shape.half_extents) if isinstance(p.shape, Box) else [0, 0, 0] for p in obj.parts],
                radii=[getattr(p.shape, "radius", 0.0) for p in obj.parts],
                lengths=[getattr(p.shape, "length", 0.0) for p in obj.parts],
                collisionFramePositions=[list(p.offset) for p in obj.parts], **kw)
            visual = pb.createVisualShapeArray(
                shapeTypes=[_shape_kwargs(p.shape, True)["shapeType"] for p in obj.parts],
                halfExtents=[list(p.shape.half_extents) if isinstance(p.shape, Box) else [0, 0, 0] for p in obj.parts],
                radii=[getattr(p.shape, "radius", 0.0) for p in obj.parts],
                lengths=[getattr(p.shape, "length", 0.0) for p in obj.parts],
                visualFramePositions=[list(p.offset) for p in obj.parts], **kw)
            # A visual shape array takes one colour per body: colour each part afterwards.
        body = pb.createMultiBody(baseMass=obj.mass, baseCollisionShapeIndex=collision,
                                  baseVisualShapeIndex=visual, basePosition=list(obj.position),
                                  baseOrientation=list(obj.orientation_xyzw), **kw)
        if len(obj.parts) > 1:
            for shape_index, part in enumerate(obj.parts):
                pb.changeVisualShape(body, -1, shapeIndex=shape_index, rgbaColor=[*part.rgb, 1.0], **kw)
        pb.changeDynamics(body, -1, lateralFriction=obj.friction, **kw)
        body_ids.append(body)
    return SimulatedScene(objects, body_ids, sim.client, [obj.mass == 0.0 for obj in objects])
