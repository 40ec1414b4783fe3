"""The robot's visual meshes, from its URDF, as low-poly meshes placed on the model's frames."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pinocchio as pin

from teleop.robot.model import RobotModel
from teleop.sim.lowpoly.meshes import (DEFAULT_HULL_VERTICES, DEFAULT_KEEP_TRIANGLES, LowPolyMesh, load_lowpoly_mesh,
                                       primitive_mesh)
from teleop.sim.scene import Box, Cylinder, Sphere
# The same package:// resolution as the pybullet URDF, so both renderers load one mesh set.
from teleop.sim.urdf_prep import _resolve_package_uri


@dataclass(frozen=True)
class RobotVisual:
    """One visual mesh of the robot, rigidly attached to a pinocchio frame.

    Attributes:
        name: URDF link name plus index of the visual within it.
        frame_id: pinocchio frame (the link's BODY frame) it moves with.
        placement: pose of the mesh frame in the link frame (URDF visual ``origin``).
        mesh: the low-poly mesh [m].
        rgb: (3,) colour in [0, 1] (URDF material).
    """

    name: str
    frame_id: int
    placement: pin.SE3
    mesh: LowPolyMesh
    rgb: np.ndarray


def _attribute(element: ET.Element, key: str, urdf_path: Path) -> str:
    """A required attribute of a URDF element (a clear error if it lacks it)."""
    value = element.get(key)
    if value is None:
        raise ValueError(f"{urdf_path}: a <{element.tag}> has no {key}")
    return value


def _origin(element: ET.Element | None) -> pin.SE3:
    if element is None:
        return pin.SE3.Identity()
    xyz = np.array([float(x) for x in element.get("xyz", "0 0 0").split()])
    rpy = np.array([float(x) for x in element.get("rpy", "0 0 0").split()])
    return pin.SE3(pin.rpy.rpyToMatrix(rpy), xyz)


def robot_visuals(model: RobotModel, max_vertices: int = DEFAULT_HULL_VERTICES,
                  keep_triangles: int = DEFAULT_KEEP_TRIANGLES, cache_dir: Path | None = None) -> list[RobotVisual]:
    """The robot's URDF visual geometry as low-poly meshes attached to pinocchio frames.

    The URDF is read directly (with ElementTree) rather than through
    ``pin.buildGeomFromUrdf``: that would load every full-resolution mesh into a collision
    structure (~2 s for the iCub) only for us to throw the meshes away. The placement
    arithmetic is the same: visual pose = link frame pose * visual origin.

    Args:
        model: the robot model (its description names the URDF).
        max_vertices: vertex budget per hull.
        keep_triangles: closed meshes up to this size are kept unsimplified.
        cache_dir: mesh cache directory (default :func:`mesh_cache_dir`).
    """
    urdf_path = Path(model.description.urdf_path)
    root = ET.parse(urdf_path).getroot()
    named_colours: dict[str | None, str] = {}
    for material in root.findall("material"):
        colour = material.find("color")
        if colour is not None and "rgba" in colour.attrib:
            named_colours[material.get("name")] = colour.attrib["rgba"]
    visuals = []
    for link in root.findall("link"):
        link_name = link.get("name")
        for index, visual in enumerate(link.findall("visual")):
            geometry = visual.find("geometry")
            if geometry is None or len(geometry) == 0:
                continue
            shape = geometry[0]
            if shape.tag == "mesh":
                mesh_path = _resolve_package_uri(_attribute(shape, "filename", urdf_path), urdf_path)
                scale = tuple(float(s) for s in shape.get("scale", "1 1 1").split())
                mesh = load_lowpoly_mesh(mesh_path, scale, max_vertices, keep_triangles, cache_dir)
            elif shape.tag == "box":
                sx, sy, sz = (0.5 * float(s) for s in _attribute(shape, "size", urdf_path).split())
                mesh = primitive_mesh(Box((sx, sy, sz)))
            elif shape.tag == "cylinder":
                mesh = primitive_mesh(Cylinder(float(_attribute(shape, "radius", urdf_path)),
                                               float(_attribute(shape, "length", urdf_path))))
            elif shape.tag == "sphere":
                mesh = primitive_mesh(Sphere(float(_attribute(shape, "radius", urdf_path))))
            else:
                continue
            rgba = "0.8 0.8 0.8 1"
            visual_material = visual.find("material")
            if visual_material is not None:
                colour = visual_material.find("color")
                rgba = (colour.get("rgba", rgba) if colour is not None
                        else named_colours.get(visual_material.get("name"), rgba))
            rgb = np.array([float(x) for x in rgba.split()[:3]])
            frame_id = model.model.getFrameId(link_name, pin.FrameType.BODY)
            if frame_id >= len(model.model.frames):
                raise KeyError(f"{urdf_path}: link {link_name!r} has no pinocchio frame")
            visuals.append(RobotVisual(f"{link_name}_{index}", frame_id, _origin(visual.find("origin")), mesh, rgb))
    return visuals
