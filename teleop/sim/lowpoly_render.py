"""A fast CPU renderer of what the robot's eye cameras see: low-poly robot, task scene, ground.

pybullet's TinyRenderer needs ~95 ms for a 320x240 frame of the full iCub meshes (~415k
triangles). The eye camera needs far less detail, so this module draws

* the robot as one small convex hull per visual mesh of its URDF (<= 116 triangles each;
  the small hand meshes, ~400 triangles, are kept as they are), built once and cached on
  disk, placed by the pinocchio model's kinematics: ~6,000 triangles in all;
* the scene's primitive shapes (:mod:`teleop.sim.scene`), tessellated into tiles;
* the ground as a checkerboard texture mapped by one homography (cv2.warpPerspective),
  pre-filtered and hazed with distance so it does not alias; a sky gradient above the
  horizon (cv2.warpAffine of a colour ramp);
* sun shadows of every part on the ground and on the table top (one convex blob per
  part), the operator's cue for how high a hand is above the table;

with flat Lambert shading and the painter's algorithm (faces sorted far to near, filled
by cv2.fillConvexPoly with sub-pixel precision and anti-aliasing). Images are (H, W, 3)
uint8 RGB.

Painter's algorithm is exact for non-intersecting convex parts seen from outside and good
enough here: robot hulls are convex, and the table top's plane splits the drawing order
(everything on the far side of it first, whatever the face sizes), so a cube on the
table or a hand above it always comes out in front of the table top.

Frames: world = stance frame (x forward, y left, z up). Eye frames look along +x with +z
up; internally the camera frame follows OpenCV (x right, y down, z forward).

Measured (``python -m teleop.sim.lowpoly_render``, shared 2-core machine, medians): see
:func:`benchmark`; ~5-10 ms per 320x240 frame against ~115 ms for pybullet's TinyRenderer.
"""

from __future__ import annotations

import hashlib
import os
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
import pinocchio as pin
from scipy.spatial import ConvexHull

from teleop.robot.model import RobotModel
from teleop.sim.camera import STANDARD_SIZES, CameraIntrinsics, EyeCamera, finite_configuration
from teleop.sim.scene import Box, Cylinder, SceneObject, Shape, SimulatedScene, Sphere, add_to_simulation
from teleop.sim.simulator import Simulation
# The same package:// resolution as the pybullet URDF, so both renderers load one mesh set.
from teleop.sim.urdf_prep import _resolve_package_uri

#: Vertices kept per robot mesh: a convex hull of V vertices has at most 2V - 4 triangles.
DEFAULT_HULL_VERTICES = 60
#: Closed meshes up to this many triangles are drawn unsimplified if their convex hull
#: would visibly fill them in: mean gap (hull volume - mesh volume) / hull area above this
#: [m]. iCub: hands 4.1 mm (kept: the thumb and fingers), wrist and elbow pieces 1.4-2.5 mm.
DEFAULT_KEEP_TRIANGLES = 600
KEEP_MIN_GAP = 0.003
#: The sky is drawn at 1/this resolution, then upscaled.
_SKY_SUBSAMPLE = 8
#: Light left in the shadows on the ground and on a table top (fraction).
GROUND_SHADOW = 0.62
TABLE_SHADOW = 0.55
#: Bump when the simplification changes, to invalidate the disk cache.
_CACHE_FORMAT = 2

#: Rotation from the OpenCV camera frame (x right, y down, z forward) to the eye frame
#: (x forward, y left, z up): columns are the OpenCV axes in eye coordinates.
EYE_FROM_CV = np.array([[0.0, 0.0, 1.0],
                        [-1.0, 0.0, 0.0],
                        [0.0, -1.0, 0.0]])


# ============================================================================ meshes
@dataclass(frozen=True)
class LowPolyMesh:
    """A closed triangle mesh in its own frame.

    Attributes:
        vertices: (V, 3) float64 positions [m].
        triangles: (F, 3) int32 vertex indices, counter-clockwise seen from outside (the
            right-hand normal points out of the solid).
    """

    vertices: np.ndarray
    triangles: np.ndarray


def read_stl(path: Path | str) -> np.ndarray:
    """(T, 3, 3) float32 triangle corners of a binary or ASCII STL file [file units]."""
    data = Path(path).read_bytes()
    if len(data) >= 84:
        count = int(np.frombuffer(data, dtype="<u4", count=1, offset=80)[0])
        if len(data) == 84 + 50 * count:
            record = np.dtype([("normal", "<f4", 3), ("corners", "<f4", (3, 3)), ("attribute", "<u2")])
            return np.frombuffer(data, dtype=record, count=count, offset=84)["corners"].copy()
    # ASCII: every "vertex x y z" line, three per facet.
    numbers = [line.split()[1:4] for line in data.decode("ascii", "replace").splitlines()
               if line.strip().startswith("vertex")]
    return np.asarray(numbers, dtype=np.float32).reshape(-1, 3, 3)


def _farthest_point_subset(points: np.ndarray, count: int) -> np.ndarray:
    """Indices of ``count`` of the (N, 3) ``points`` spread as evenly as possible (greedy
    farthest-point sampling, starting from the point farthest from the centroid)."""
    chosen = [int(np.argmax(np.linalg.norm(points - points.mean(axis=0), axis=1)))]
    distance = np.linalg.norm(points - points[chosen[0]], axis=1)
    for _ in range(count - 1):
        nxt = int(np.argmax(distance))
        chosen.append(nxt)
        distance = np.minimum(distance, np.linalg.norm(points - points[nxt], axis=1))
    return np.array(chosen)


def convex_hull_mesh(points: np.ndarray, max_vertices: int = DEFAULT_HULL_VERTICES) -> LowPolyMesh:
    """A low-poly convex hull of a point cloud.

    The exact hull is computed first; if it has more than ``max_vertices`` vertices, a
    farthest-point subset of them is hulled again. It keeps the extremities: on the iCub
    parts (60 vertices, 116 triangles) the original surface pokes out of the simplified
    hull by 3 mm (median) to 12 mm (head, chest), 5-8% of the hull volume.

    Args:
        points: (N, 3) points [m], N >= 4, not all coplanar.
        max_vertices: vertex budget (>= 4).

    Returns:
        The hull with outward-oriented triangles, unused vertices dropped.
    """
    points = np.asarray(points, dtype=np.float64)
    hull = ConvexHull(points)
    corners = points[hull.vertices]
    if len(corners) > max_vertices:
        corners = corners[_farthest_point_subset(corners, max_vertices)]
    hull = ConvexHull(corners)  # again, on the kept corners only: indices into them
    triangles = hull.simplices.astype(np.int32)
    # qhull orders simplex vertices arbitrarily: flip those whose normal points inwards.
    a, b, c = (corners[triangles[:, i]] for i in range(3))
    inward = np.einsum("ij,ij->i", np.cross(b - a, c - a), hull.equations[:, :3]) < 0
    triangles[inward] = triangles[inward][:, ::-1]
    used, remap = np.unique(triangles, return_inverse=True)
    return LowPolyMesh(corners[used], remap.reshape(-1, 3).astype(np.int32))


def mesh_cache_dir() -> Path:
    """Where simplified meshes are cached: ``$XDG_CACHE_HOME/prescient-teleop/lowpoly``
    (default ``~/.cache/...``)."""
    root = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return root / "prescient-teleop" / "lowpoly"


def _welded_closed_mesh(corners: np.ndarray) -> LowPolyMesh | None:
    """The (T, 3, 3) triangle soup as an indexed mesh if it is closed (every edge shared by
    exactly two triangles), oriented so its normals point outwards; else None."""
    vertices, inverse = np.unique(corners.reshape(-1, 3), axis=0, return_inverse=True)
    triangles = inverse.reshape(-1, 3).astype(np.int32)
    triangles = triangles[(triangles[:, 0] != triangles[:, 1]) & (triangles[:, 1] != triangles[:, 2])
                          & (triangles[:, 2] != triangles[:, 0])]
    edges = np.sort(np.concatenate([triangles[:, [0, 1]], triangles[:, [1, 2]], triangles[:, [2, 0]]]), axis=1)
    _, counts = np.unique(edges, axis=0, return_counts=True)
    if len(triangles) < 4 or np.any(counts != 2):
        return None
    a, b, c = (vertices[triangles[:, i]] for i in range(3))
    signed_volume = np.einsum("ij,ij->i", a, np.cross(b, c)).sum() / 6.0
    if signed_volume < 0:
        triangles = triangles[:, ::-1].copy()
    return LowPolyMesh(vertices, triangles)


def load_lowpoly_mesh(path: Path | str, scale: np.ndarray | tuple = (1.0, 1.0, 1.0),
                      max_vertices: int = DEFAULT_HULL_VERTICES, keep_triangles: int = DEFAULT_KEEP_TRIANGLES,
                      cache_dir: Path | None = None) -> LowPolyMesh:
    """The low-poly version of a mesh file (STL), from the disk cache when possible.

    A closed mesh of at most ``keep_triangles`` triangles whose hull would fill it in
    (:data:`KEEP_MIN_GAP`) is kept as it is (the iCub hands: ~400 triangles, whose thumb
    and fingers a hull would melt into a wedge); anything else becomes its convex hull of
    at most ``max_vertices`` vertices.

    The cache key is the file's path, size and modification time plus the scale, budgets
    and cache format, so an edited mesh or a new budget is rebuilt.

    Args:
        path: STL file.
        scale: (3,) per-axis scale applied to the file's coordinates (URDF ``scale``).
        max_vertices: vertex budget of a hull.
        keep_triangles: meshes up to this size are not simplified.
        cache_dir: cache directory (default :func:`mesh_cache_dir`).

    Returns:
        The mesh in metres (after ``scale``).
    """
    path = Path(path).resolve()
    stat = path.stat()
    scale = np.asarray(scale, dtype=float).reshape(3)
    key_source = repr((str(path), stat.st_size, stat.st_mtime_ns, scale.round(12).tolist(), max_vertices,
                       keep_triangles, _CACHE_FORMAT))
    key = hashlib.sha256(key_source.encode()).hexdigest()[:16]
    cache = Path(cache_dir) if cache_dir is not None else mesh_cache_dir()
    cached = cache / f"{path.stem}_{key}.npz"
    if cached.exists():
        try:
            with np.load(cached) as stored:
                return LowPolyMesh(stored["vertices"], stored["triangles"])
        except (OSError, ValueError, KeyError):
            pass  # a corrupt entry (e.g. a crash mid-write elsewhere): rebuild it below
    corners = read_stl(path).astype(np.float64) * scale
    mesh = _welded_closed_mesh(corners) if len(corners) <= keep_triangles else None
    if mesh is not None:
        a, b, c = (mesh.vertices[mesh.triangles[:, i]] for i in range(3))
        volume = np.einsum("ij,ij->i", a, np.cross(b, c)).sum() / 6.0
        hull = ConvexHull(mesh.vertices)
        if (hull.volume - volume) / hull.area < KEEP_MIN_GAP:
            mesh = None  # nearly convex: the hull looks the same for fewer triangles
    if mesh is None:
        mesh = convex_hull_mesh(np.unique(corners.reshape(-1, 3), axis=0), max_vertices)
    cache.mkdir(parents=True, exist_ok=True)
    tmp = cached.with_name(f"{cached.stem}.{os.getpid()}.tmp.npz")
    np.savez(tmp, vertices=mesh.vertices, triangles=mesh.triangles)
    tmp.replace(cached)  # atomic: concurrent processes never read a half-written file
    return mesh


def _subdivide_rectangle(corner: np.ndarray, edge_u: np.ndarray, edge_v: np.ndarray, max_edge: float):
    """Vertices (M, 3) and triangles (K, 3) of a rectangle cut into a grid of tiles no
    longer than ``max_edge`` [m]; counter-clockwise around edge_u x edge_v."""
    nu = max(1, int(np.ceil(np.linalg.norm(edge_u) / max_edge)))
    nv = max(1, int(np.ceil(np.linalg.norm(edge_v) / max_edge)))
    s, t = np.meshgrid(np.linspace(0, 1, nu + 1), np.linspace(0, 1, nv + 1), indexing="ij")
    vertices = corner + s.reshape(-1, 1) * edge_u + t.reshape(-1, 1) * edge_v
    index = np.arange((nu + 1) * (nv + 1)).reshape(nu + 1, nv + 1)
    a, b = index[:-1, :-1].ravel(), index[1:, :-1].ravel()
    c, d = index[1:, 1:].ravel(), index[:-1, 1:].ravel()
    triangles = np.concatenate([np.stack([a, b, c], 1), np.stack([a, c, d], 1)])
    return vertices, triangles


def _icosphere(radius: float) -> LowPolyMesh:
    """An 80-triangle geodesic sphere (icosahedron with its edges split once) [m]."""
    g = (1 + 5 ** 0.5) / 2
    ico = np.array([[-1, g, 0], [1, g, 0], [-1, -g, 0], [1, -g, 0], [0, -1, g], [0, 1, g],
                    [0, -1, -g], [0, 1, -g], [g, 0, -1], [g, 0, 1], [-g, 0, -1], [-g, 0, 1]], dtype=float)
    hull = ConvexHull(ico)
    point_list = [*ico]
    # Edge midpoints, pushed out to the sphere by the normalisation below.
    for i, j in {tuple(sorted((int(a), int(b)))) for simplex in hull.simplices
                 for a, b in zip(simplex, np.roll(simplex, 1))}:
        point_list.append(0.5 * (ico[i] + ico[j]))
    points = np.array(point_list)
    points *= radius / np.linalg.norm(points, axis=1, keepdims=True)
    return convex_hull_mesh(points, max_vertices=len(points))


def primitive_mesh(shape: Shape, max_edge: float = 0.08, segments: int = 16) -> LowPolyMesh:
    """Tessellate a primitive shape centred on its frame.

    Args:
        shape: :class:`~teleop.sim.scene.Box`, :class:`~teleop.sim.scene.Cylinder` (axis
            z) or :class:`~teleop.sim.scene.Sphere`.
        max_edge: flat faces are cut into tiles no longer than this [m], so that depth
            sorting by tile stays right next to other objects.
        segments: facets around a cylinder (a sphere has 80 triangles).
    """
    if isinstance(shape, Box):
        h = np.asarray(shape.half_extents, dtype=float)
        faces: list[np.ndarray] = []
        face_triangles: list[np.ndarray] = []
        for axis in range(3):
            for sign in (-1.0, 1.0):
                u, v = (axis + 1) % 3, (axis + 2) % 3
                normal = np.zeros(3)
                normal[axis] = sign
                edge_u, edge_v = np.zeros(3), np.zeros(3)
                edge_u[u], edge_v[v] = 2 * h[u], 2 * h[v]
                if sign < 0:  # keep counter-clockwise seen from outside
                    edge_u, edge_v = edge_v, edge_u
                corner = normal * h - 0.5 * (edge_u + edge_v)
                verts, tris = _subdivide_rectangle(corner, edge_u, edge_v, max_edge)
                face_triangles.append(tris + sum(len(x) for x in faces))
                faces.append(verts)
        return LowPolyMesh(np.concatenate(faces), np.concatenate(face_triangles).astype(np.int32))
    if isinstance(shape, Cylinder):
        angles = np.linspace(0, 2 * np.pi, segments, endpoint=False)
        ring = np.stack([shape.radius * np.cos(angles), shape.radius * np.sin(angles), np.zeros(segments)], 1)
        half = np.array([0.0, 0.0, shape.length / 2])
        vertices = np.concatenate([ring - half, ring + half, [-half, half]])
        i = np.arange(segments)
        j = (i + 1) % segments
        bottom, top = 2 * segments, 2 * segments + 1
        triangles = np.concatenate([
            np.stack([i, j, j + segments], 1), np.stack([i, j + segments, i + segments], 1),  # sides
            np.stack([np.full(segments, bottom), j, i], 1),  # bottom cap, facing -z
            np.stack([np.full(segments, top), i + segments, j + segments], 1),  # top cap, facing +z
        ])
        return LowPolyMesh(vertices, triangles.astype(np.int32))
    if isinstance(shape, Sphere):
        return _icosphere(shape.radius)
    raise TypeError(f"unknown shape {shape!r}")


# ===================================================================== robot visuals
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


# ======================================================================== renderer
@dataclass(frozen=True)
class Lighting:
    """Flat shading: colour * (ambient + sun * max(0, n.l) + headlight * max(0, -n.a)),
    with n the face normal, l the direction to the sun, a the camera's optical axis.

    The headlight term keeps faces turned away from the sun from collapsing into one flat
    ambient colour, which would hide the shapes.

    Attributes:
        sun_direction: (3,) direction towards the sun in the world frame (normalised on use).
        ambient, sun, headlight: weights of the three terms.
    """

    sun_direction: tuple[float, float, float] = (-0.45, 0.35, 1.0)
    ambient: float = 0.30
    sun: float = 0.55
    headlight: float = 0.25


@dataclass(frozen=True)
class GroundStyle:
    """The checkerboard ground, the sky and the haze between them.

    Attributes:
        square: checker square side [m] (1 m like pybullet's plane.urdf, so that both
            renderers show the same floor).
        light, dark: (3,) RGB colours of the squares in [0, 1].
        haze: horizon colour the ground fades into, shared with the bottom of the sky.
        zenith: colour at the top of the sky.
        haze_distance: distance [m] at which the ground is ~63% hazed.
        extent: half side [m] of the textured ground around the camera (haze beyond).
        texel: texture resolution [m per texel].
    """

    square: float = 1.0
    light: tuple[float, float, float] = (0.90, 0.90, 0.88)
    dark: tuple[float, float, float] = (0.60, 0.69, 0.84)
    haze: tuple[float, float, float] = (0.80, 0.84, 0.90)
    zenith: tuple[float, float, float] = (0.42, 0.60, 0.88)
    haze_distance: float = 7.0
    extent: float = 12.0
    texel: float = 0.02


class _Ground:
    """Checkerboard ground and sky, drawn with one homography and one affine warp.

    Args:
        style: colours and sizes.
        focal_px: the camera's focal length [px], to pre-filter the texture for it.
        eye_height: typical camera height above the ground [m] (for the pre-filter only).
    """

    def __init__(self, style: GroundStyle, focal_px: float, eye_height: float = 0.9) -> None:
        self.style = style
        self.period = 2 * style.square
        n = int(round(2 * style.extent / style.texel))
        self.texture_size = n
        # Texel centres in metres relative to the camera's ground point (texture centre).
        coords: np.ndarray = (np.arange(n, dtype=np.float32) + 0.5) * style.texel - style.extent
        x = coords[None, :]
        y = coords[:, None]
        r2 = x * x + y * y
        # Pre-filtered checker: each 1-D square wave becomes a clipped sine with an edge
        # ramp as wide as the footprint of a pixel on the ground at that distance
        # (~ r^2 / (f h) along the view for a camera h above the ground), so far squares
        # blend into their mean instead of aliasing (a poor man's mip-map).
        ramp = 1.5 * style.texel + r2 / (focal_px * eye_height)
        gain = style.square / (np.pi * ramp)
        cx = np.clip(gain * np.sin(np.pi * x / style.square), -1.0, 1.0)
        cy = np.clip(gain * np.sin(np.pi * y / style.square), -1.0, 1.0)
        mix = 0.5 + 0.5 * cx * cy  # 1 on light squares, 0 on dark
        light, dark, haze = (np.asarray(c, dtype=np.float32) * 255 for c in (style.light, style.dark, style.haze))
        colour = dark + mix[..., None] * (light - dark)
        # Haze 1 - exp(-(r / haze_distance)^2): light in the robot's workspace, thick
        # towards the horizon; rescaled to be complete at the texture's inscribed circle
        # so that its edge (haze colour beyond) never shows.
        fog = np.clip((1.0 - np.exp(-r2 / style.haze_distance ** 2))
                      / (1.0 - np.exp(-(style.extent / style.haze_distance) ** 2)), 0.0, 1.0)[..., None]
        self.texture = np.ascontiguousarray((colour + fog * (haze - colour)).round().astype(np.uint8))
        ramp_rows = 256
        t = np.linspace(0.0, 1.0, ramp_rows, dtype=np.float32)[:, None] ** 0.6
        zenith = np.asarray(style.zenith, dtype=np.float32) * 255
        sky = haze + t * (zenith - haze)
        self.sky_ramp = np.repeat(sky[:, None, :], 2, axis=1).round().astype(np.uint8)  # (256, 2, 3)
        self.haze_rgb = tuple(int(round(c)) for c in haze)

    def draw(self, image: np.ndarray, K: np.ndarray, R_wc: np.ndarray, camera_position: np.ndarray) -> None:
        """Fill ``image`` (H, W, 3) with sky and ground for a camera at ``camera_position``
        (3,) [m] with OpenCV-frame orientation ``R_wc`` (3, 3) and intrinsics ``K``."""
        h, w = image.shape[:2]
        K_inv = np.linalg.inv(K)
        # Horizon: pixels p whose ray R_wc K^-1 p is horizontal, i.e. horizon . p = 0;
        # positive above the horizon (sky).
        horizon = K_inv.T @ (R_wc.T @ np.array([0.0, 0.0, 1.0]))
        image_corners = np.array([[0, 0], [w, 0], [w, h], [0, h]], dtype=float)
        sky_polygon = _clip_polygon_2d(image_corners, horizon)
        ground_polygon = _clip_polygon_2d(image_corners, -horizon) if camera_position[2] > 1e-3 else np.empty((0, 2))
        if len(sky_polygon) >= 3 or len(ground_polygon) < 3:
            self._draw_sky(image, horizon)
        if len(ground_polygon) < 3:
            return
        # Ground z = 0 seen by the camera: pixel ~ K R_cw [X - c]; with texel (s, t) and
        # X = extent_origin + texel * (s + 0.5, t + 0.5), compose into one homography.
        # The texture is centred on the camera's ground point snapped to the checker
        # period, so the pattern stays fixed in the world while the haze follows the eye.
        style = self.style
        centre = np.round(camera_position[:2] / self.period) * self.period
        R_cw = R_wc.T
        t_cw = -R_cw @ camera_position
        plane_to_pixel = K @ np.column_stack([R_cw[:, 0], R_cw[:, 1], t_cw])
        texel_to_plane = np.array([[style.texel, 0.0, centre[0] - style.extent + 0.5 * style.texel],
                                   [0.0, style.texel, centre[1] - style.extent + 0.5 * style.texel],
                                   [0.0, 0.0, 1.0]])
        # Texture column s is x on the ground, row t is y. Only the rows from the top of
        # the ground polygon down are warped, into OpenCV pixel coordinates (centres at
        # integers: -0.5).
        top = int(np.clip(np.floor(ground_polygon[:, 1].min()), 0, h - 1))
        to_roi_pixels = np.array([[1.0, 0, -0.5], [0, 1.0, -0.5 - top], [0, 0, 1.0]])
        H = to_roi_pixels @ plane_to_pixel @ texel_to_plane
        if len(sky_polygon) < 3:  # all ground: straight into the image
            cv2.warpPerspective(self.texture, H, (w, h - top), dst=image[top:], flags=cv2.INTER_LINEAR,
                                borderMode=cv2.BORDER_CONSTANT, borderValue=self.haze_rgb)
            return
        ground = cv2.warpPerspective(self.texture, H, (w, h - top), flags=cv2.INTER_LINEAR,
                                     borderMode=cv2.BORDER_CONSTANT, borderValue=self.haze_rgb)
        # Keep the ground only below the horizon: above it the homography maps rays to
        # the ground point behind the camera.
        mask = np.zeros((h - top, w), np.uint8)
        roi_polygon = ground_polygon - np.array([0.5, 0.5 + top])
        cv2.fillConvexPoly(mask, np.round(roi_polygon * 16).astype(np.int32), (255,), cv2.LINE_8, 4)
        cv2.copyTo(ground, mask, image[top:])

    def _draw_sky(self, image: np.ndarray, horizon: np.ndarray) -> None:
        """Fill ``image`` with the sky gradient above the ``horizon`` line (3,) (pixels p
        with horizon . (p, 1) > 0 are above it; below it the haze colour)."""
        h, w = image.shape[:2]
        # The ramp row grows with the (image-space) distance above the horizon line,
        # reaching the zenith colour ~1.2 image heights above it. The sky is smooth, so it
        # is drawn at 1/8 resolution and upscaled (a full-size linear warp costs ~1 ms).
        rows = self.sky_ramp.shape[0] - 1
        scale = np.linalg.norm(horizon[:2])
        small_w, small_h = -(-w // _SKY_SUBSAMPLE), -(-h // _SKY_SUBSAMPLE)
        sx, sy = w / small_w, h / small_h
        if scale > 1e-12:
            a, b, c0 = horizon * (rows / (1.2 * h) / scale)
        else:  # looking straight up or down: uniform
            a, b, c0 = 0.0, 0.0, float(rows if horizon[2] > 0 else 0)
        # Small pixel (i, j) has its centre at full-size continuous ((j+0.5) sx, (i+0.5) sy).
        warp = np.array([[0.0, 0.0, 0.5], [a * sx, b * sy, c0 + 0.5 * (a * sx + b * sy)]])
        small = cv2.warpAffine(self.sky_ramp, warp, (small_w, small_h), flags=cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP,
                               borderMode=cv2.BORDER_REPLICATE)
        cv2.resize(small, (w, h), dst=image, interpolation=cv2.INTER_LINEAR)


def _clip_polygon_2d(polygon: np.ndarray, line: np.ndarray) -> np.ndarray:
    """Sutherland-Hodgman: the part of a convex (N, 2) polygon where line . (p, 1) >= 0."""
    values = polygon @ line[:2] + line[2]
    out = []
    n = len(polygon)
    for i in range(n):
        j = (i + 1) % n
        if values[i] >= 0:
            out.append(polygon[i])
        if (values[i] >= 0) != (values[j] >= 0):
            s = values[i] / (values[i] - values[j])
            out.append(polygon[i] + s * (polygon[j] - polygon[i]))
    return np.array(out).reshape(-1, 2)


@dataclass
class _Batch:
    """All meshes of the scene, concatenated for vectorised transforms.

    vertices (V, 3) in their part frames, vertex_part (V,), triangles (F, 3) global vertex
    indices, face_rgb (F, 3) in [0, 1]; vertex_slices / face_slices: (start, stop) of
    each part's rows.
    """

    vertices: np.ndarray
    vertex_part: np.ndarray
    triangles: np.ndarray
    face_rgb: np.ndarray
    vertex_slices: list[tuple[int, int]]
    face_slices: list[tuple[int, int]]

    @staticmethod
    def build(meshes: list[LowPolyMesh], colours: list[np.ndarray]) -> "_Batch":
        vertices, vertex_part, triangles, face_rgb, vertex_slices, face_slices = [], [], [], [], [], []
        v0 = f0 = 0
        for part, (mesh, rgb) in enumerate(zip(meshes, colours)):
            vertices.append(mesh.vertices)
            vertex_part.append(np.full(len(mesh.vertices), part))
            triangles.append(mesh.triangles + v0)
            face_rgb.append(np.tile(rgb, (len(mesh.triangles), 1)))
            vertex_slices.append((v0, v0 + len(mesh.vertices)))
            face_slices.append((f0, f0 + len(mesh.triangles)))
            v0 += len(mesh.vertices)
            f0 += len(mesh.triangles)
        return _Batch(np.concatenate(vertices), np.concatenate(vertex_part), np.concatenate(triangles),
                      np.concatenate(face_rgb), vertex_slices, face_slices)


@dataclass(frozen=True)
class _SupportSurface:
    """A large upward face of a static box (a table top).

    normal: (3,) unit world normal (up); offset: n . x on the plane [m]; corners: (4, 3)
    world corners of the face [m]; area [m^2].
    """

    normal: np.ndarray
    offset: float
    corners: np.ndarray
    area: float


def _support_surfaces(objects: list[SceneObject], min_area: float = 0.04) -> list[_SupportSurface]:
    """The large upward faces of static box parts (table tops), largest first.

    Their planes partition the drawing order (see :meth:`LowPolyRenderer.render`): nothing
    on the far side of such a plane can hide anything on the camera's side of it, whatever
    the face sizes, which fixes the painter's algorithm where it is weakest: small objects
    standing on a large surface. The largest one also receives shadows.
    """
    surfaces = []
    for obj in objects:
        if obj.mass != 0.0:
            continue  # a moving body's plane would move: not worth the bookkeeping
        R = obj.rotation()
        for part in obj.parts:
            if not isinstance(part.shape, Box):
                continue
            h = np.asarray(part.shape.half_extents, dtype=float)
            for axis in range(3):
                u, v = (axis + 1) % 3, (axis + 2) % 3
                area = 4 * h[u] * h[v]
                for sign in (-1.0, 1.0):
                    normal = sign * R[:, axis]
                    if normal[2] < np.cos(np.radians(10)) or area < min_area:
                        continue
                    centre = np.asarray(obj.position) + R @ (np.asarray(part.offset) + sign * h[axis] * np.eye(3)[axis])
                    corners = np.array([centre + R[:, u] * su * h[u] + R[:, v] * sv * h[v]
                                        for su, sv in ((-1, -1), (1, -1), (1, 1), (-1, 1))])
                    surfaces.append(_SupportSurface(normal, float(normal @ centre), corners, float(area)))
    return sorted(surfaces, key=lambda surface: -surface.area)


def _clip_polygon_near(polygon: np.ndarray, near: float) -> np.ndarray:
    """Sutherland-Hodgman: the part of a convex (N, 3) camera-frame polygon at z >= near."""
    out = []
    n = len(polygon)
    for i in range(n):
        p, q = polygon[i], polygon[(i + 1) % n]
        if p[2] >= near:
            out.append(p)
        if (p[2] >= near) != (q[2] >= near):
            out.append(p + (near - p[2]) / (q[2] - p[2]) * (q - p))
    return np.array(out).reshape(-1, 3)


class LowPolyRenderer:
    """Renders the low-poly robot and scene from any camera pose.

    Args:
        model: the robot model (for its visual meshes and kinematics structure).
        scene: scene objects to draw: a list of :class:`~teleop.sim.scene.SceneObject`
            (drawn where described) or a :class:`~teleop.sim.scene.SimulatedScene` (drawn
            where the physics has them); None for robot and ground only.
        intrinsics: image size and field of view.
        lighting: shading parameters.
        ground: ground and sky style.
        max_hull_vertices: vertex budget per simplified robot mesh.
        keep_triangles: robot meshes up to this size are drawn unsimplified.
        tile: scene faces are cut into tiles no longer than this [m] for depth sorting.
        antialias: anti-aliased face edges (cv2.LINE_AA: ~+15% time; edges shared by two
            faces may show a faint seam).
        shadows: cast sun shadows (one convex blob per part) on the ground and on the
            largest table top: they show the operator how high a hand is above the table.
        cache_dir: mesh cache directory (default :func:`mesh_cache_dir`).
    """

    def __init__(self, model: RobotModel, scene: list[SceneObject] | SimulatedScene | None = None,
                 intrinsics: CameraIntrinsics | None = None, lighting: Lighting | None = None,
                 ground: GroundStyle | None = None, max_hull_vertices: int = DEFAULT_HULL_VERTICES,
                 keep_triangles: int = DEFAULT_KEEP_TRIANGLES, tile: float = 0.15, antialias: bool = True,
                 shadows: bool = True, cache_dir: Path | None = None) -> None:
        self.model = model
        self.intrinsics = intrinsics or CameraIntrinsics()
        self.lighting = lighting or Lighting()
        self._line_type = cv2.LINE_AA if antialias else cv2.LINE_8
        self.K = self.intrinsics.matrix()
        self.visuals = robot_visuals(model, max_hull_vertices, keep_triangles, cache_dir)
        self.scene = scene
        self.scene_objects: list[SceneObject] = scene.objects if isinstance(scene, SimulatedScene) else list(scene or [])
        meshes = [v.mesh for v in self.visuals]
        colours = [v.rgb for v in self.visuals]
        #: Scene object of each scene part; part meshes are stored in their body's frame.
        self.scene_part_object: list[int] = []
        for index, obj in enumerate(self.scene_objects):
            for part in obj.parts:
                mesh = primitive_mesh(part.shape, max_edge=tile)
                meshes.append(LowPolyMesh(mesh.vertices + np.asarray(part.offset), mesh.triangles))
                colours.append(np.asarray(part.rgb, dtype=float))
                self.scene_part_object.append(index)
        self.n_robot_parts = len(self.visuals)
        self.n_parts = len(meshes)
        self._batch = _Batch.build(meshes, colours)
        self._vertex_starts = np.array([start for start, _ in self._batch.vertex_slices])
        self._visual_frame = [v.frame_id for v in self.visuals]
        self._visual_offset_R = np.array([v.placement.rotation for v in self.visuals])
        self._visual_offset_t = np.array([v.placement.translation for v in self.visuals])
        # Per part: bounding-sphere centre (part frame) and radius, to skip whole parts
        # outside the view before touching their vertices.
        bounds = [(m.vertices.min(axis=0), m.vertices.max(axis=0)) for m in meshes]
        self._part_centre = np.array([0.5 * (lo + hi) for lo, hi in bounds])
        self._part_radius = np.array([0.5 * np.linalg.norm(hi - lo) for lo, hi in bounds])
        self._surfaces = _support_surfaces(self.scene_objects)
        # Distinct support planes, the largest surface's last: it is the primary sort key.
        planes: list[tuple[np.ndarray, float]] = []
        for surface in reversed(self._surfaces):
            planes = [(n, d) for n, d in planes
                      if not (np.allclose(n, surface.normal, atol=1e-3) and abs(d - surface.offset) < 1e-3)]
            planes.append((surface.normal, surface.offset))
        self._planes = planes
        self.shadows = shadows
        self._ground = _Ground(ground or GroundStyle(), float(self.K[1, 1]))

    # ----------------------------------------------------------------- geometry
    @property
    def triangle_count(self) -> int:
        """Total triangles of robot and scene."""
        return len(self._batch.triangles)

    def part_poses(self, data: pin.Data) -> tuple[np.ndarray, np.ndarray]:
        """World poses of all parts: rotations (P, 3, 3) and translations (P, 3) [m].

        Args:
            data: pinocchio data after frame forward kinematics of :attr:`model`.
        """
        frames_R = np.array([data.oMf[i].rotation for i in self._visual_frame])
        frames_t = np.array([data.oMf[i].translation for i in self._visual_frame])
        robot_R = frames_R @ self._visual_offset_R
        robot_t = np.einsum("pij,pj->pi", frames_R, self._visual_offset_t) + frames_t
        if not self.scene_part_object:
            return robot_R, robot_t
        if isinstance(self.scene, SimulatedScene):
            object_poses = self.scene.poses()
        else:
            object_poses = [(np.asarray(o.position, dtype=float), o.rotation()) for o in self.scene_objects]
        scene_t = np.array([object_poses[i][0] for i in self.scene_part_object])
        scene_R = np.array([object_poses[i][1] for i in self.scene_part_object])
        return np.concatenate([robot_R, scene_R]), np.concatenate([robot_t, scene_t])

    def project(self, camera: pin.SE3, points: np.ndarray) -> np.ndarray:
        """(N, 2) continuous pixel coordinates (pixel (row i, column j) spans [j, j+1) x
        [i, i+1)) of (N, 3) world points [m] seen from the eye pose ``camera``; the points
        must be in front of the camera."""
        R_wc = camera.rotation @ EYE_FROM_CV
        in_camera = (np.atleast_2d(points) - camera.translation) @ R_wc
        uvw = in_camera @ self.K.T
        return uvw[:, :2] / uvw[:, 2:]

    # ------------------------------------------------------------------ drawing
    def render(self, camera: pin.SE3, part_R: np.ndarray, part_t: np.ndarray,
               hidden_parts: np.ndarray | None = None) -> np.ndarray:
        """Draw the scene.

        Drawing order: sky and ground, shadows on the ground; then the faces, far to near
        by the depth of their centroid, except that the support planes (table tops) come
        first: faces on the far side of a support plane are drawn before those on it, then
        the shadows on the table top, then the faces on the camera's side.

        Args:
            camera: world pose of the eye frame (looks along +x, +z up).
            part_R, part_t: (P, 3, 3), (P, 3) part poses from :meth:`part_poses`.
            hidden_parts: (P,) bool, parts not to draw (e.g. the camera's own head; it
                still casts its shadow).

        Returns:
            (H, W, 3) uint8 RGB image.
        """
        intr = self.intrinsics
        w, h, near = intr.width, intr.height, intr.near
        K = self.K
        R_wc = camera.rotation @ EYE_FROM_CV
        R_cw = R_wc.T
        c = camera.translation
        image = np.empty((h, w, 3), np.uint8)
        self._ground.draw(image, K, R_wc, c)

        # All vertices into the camera frame: R_cp = R_cw R_wp, t_cp = R_cw (t_wp - c).
        b = self._batch
        cam_R = R_cw @ part_R
        cam_t = (part_t - c) @ R_wc
        vertices = np.einsum("vij,vj->vi", cam_R[b.vertex_part], b.vertices) + cam_t[b.vertex_part]
        sun = R_cw @ np.asarray(self.lighting.sun_direction, dtype=float)
        sun /= np.linalg.norm(sun)
        if self.shadows:
            # The ground z = 0 in the camera frame: n = R_cw e_z, n . x = -c_z.
            self._draw_shadows(image, vertices, R_cw[:, 2], -c[2], sun, None, GROUND_SHADOW)

        centres = np.einsum("pij,pj->pi", cam_R, self._part_centre) + cam_t
        visible = self._sphere_in_frustum(centres, self._part_radius)
        if hidden_parts is not None:
            visible &= ~hidden_parts
        parts = [int(p) for p in np.flatnonzero(visible)]
        if not parts:
            return image
        face_index = np.concatenate([np.arange(*b.face_slices[p]) for p in parts])
        corners = vertices[b.triangles[face_index]]  # (F, 3 corners, xyz)
        normal = np.cross(corners[:, 1] - corners[:, 0], corners[:, 2] - corners[:, 0])
        # Keep front faces (normal towards the camera at the origin) within near..far.
        # (Element-wise min/max of the three columns: much faster than reductions along a
        # length-3 axis.)
        x, y, z = corners[:, :, 0], corners[:, :, 1], corners[:, :, 2]
        z_min = np.minimum(np.minimum(z[:, 0], z[:, 1]), z[:, 2])
        z_max = np.maximum(np.maximum(z[:, 0], z[:, 1]), z[:, 2])
        keep = (np.einsum("ij,ij->i", normal, corners[:, 0]) < 0) & (z_max > near) & (z_min < intr.far)
        # Drop faces wholly outside one side plane of the view (planes through the eye, so
        # the test holds for vertices behind it too; 1 px margin for anti-aliased edges).
        fx, fy, cx, cy = K[0, 0], K[1, 1], K[0, 2], K[1, 2]
        for outside in (fx * x + (cx + 1) * z < 0, fx * x - (w - cx + 1) * z > 0,
                        fy * y + (cy + 1) * z < 0, fy * y - (h - cy + 1) * z > 0):
            keep &= ~(outside[:, 0] & outside[:, 1] & outside[:, 2])
        face_index, corners, normal, z, z_min = face_index[keep], corners[keep], normal[keep], z[keep], z_min[keep]
        if len(face_index) == 0:
            return image

        # Project (faces crossing the near plane are clipped below), in fixed point:
        # 1/16 px, as cv2's sub-pixel fill expects; continuous pixel coordinates minus
        # 0.5, as OpenCV puts pixel centres at integers.
        zc = np.maximum(z, near)
        u = (fx * corners[:, :, 0] / zc + (cx - 0.5)) * 16
        v = (fy * corners[:, :, 1] / zc + (cy - 0.5)) * 16
        crossing = z_min < near

        # Flat shading.
        normal /= np.linalg.norm(normal, axis=1, keepdims=True) + 1e-300
        centroid = (corners[:, 0] + corners[:, 1] + corners[:, 2]) / 3.0
        light = self.lighting
        # The headlight shines along the optical axis (not towards each face) so that the
        # tiles of one flat face get one colour.
        facing_camera = np.clip(-normal[:, 2], 0, None)
        intensity = light.ambient + light.sun * np.clip(normal @ sun, 0, None) + light.headlight * facing_camera
        colours = np.clip(b.face_rgb[face_index] * intensity[:, None] * 255, 0, 255).round().astype(np.int32)

        # Order: support-plane sides (far side, on the plane, camera side), then depth.
        keys = [-centroid[:, 2]]
        for normal_w, offset in self._planes:
            normal_c = R_cw @ normal_w
            offset_c = offset - normal_w @ c
            camera_side = 1.0 if offset_c < 0 else -1.0  # the camera is at the origin
            signed = centroid @ normal_c - offset_c
            keys.append(np.where(np.abs(signed) < 1e-3, 0.0, np.sign(signed)) * camera_side)
        order = np.lexsort(keys)
        # Table-top shadows go after the faces up to the primary plane's (last key <= 0).
        split = int(np.count_nonzero(keys[-1] <= 0)) if self._planes else len(order)

        # cv2 works in int32 fixed point: clamp far-off coordinates (only faces nearly
        # edge-on to the near plane get there; the clamp bends them off-screen only).
        bound = float(1 << 24)
        points = np.stack([np.clip(u, -bound, bound), np.clip(v, -bound, bound)], -1).round().astype(np.int32)
        polygons: list[np.ndarray | None] = list(points[order])
        for k in np.flatnonzero(crossing[order]):
            polygon = _clip_polygon_near(corners[order[k]], near)
            if len(polygon) >= 3:
                projected = np.stack([(fx * polygon[:, 0] / polygon[:, 2] + cx - 0.5) * 16,
                                      (fy * polygon[:, 1] / polygon[:, 2] + cy - 0.5) * 16], -1)
                polygons[k] = np.clip(projected, -bound, bound).round().astype(np.int32)
            else:
                polygons[k] = None
        colour_list = colours[order].tolist()
        self._fill(image, polygons[:split], colour_list[:split])
        if self.shadows and self._surfaces and split < len(order):
            top = self._surfaces[0]
            normal_c = R_cw @ top.normal
            region = (top.corners - c) @ R_wc
            self._draw_shadows(image, vertices, normal_c, top.offset - top.normal @ c, sun, region, TABLE_SHADOW)
        self._fill(image, polygons[split:], colour_list[split:])
        return image

    def _fill(self, image: np.ndarray, polygons: list[np.ndarray | None], colours: list[list[int]]) -> None:
        """Fill (N, 2) int32 fixed-point (1/16 px) convex polygons in order, one colour each."""
        fill, line_type = cv2.fillConvexPoly, self._line_type
        for polygon, colour in zip(polygons, colours):
            if polygon is not None:
                fill(image, polygon, colour, line_type, 4)

    def _draw_shadows(self, image: np.ndarray, vertices: np.ndarray, normal: np.ndarray, offset: float,
                      sun: np.ndarray, region: np.ndarray | None, darkness: float) -> None:
        """Darken ``image`` where parts hide the sun from a receiving plane.

        Each part above the plane casts the convex hull of its vertices projected along
        the sun direction: exact for the convex hulls, a filled-in blob for the hands.

        Args:
            image: (H, W, 3) uint8, drawn up to the receiver.
            vertices: (V, 3) all part vertices in the camera frame [m].
            normal, offset: receiving plane n . x = offset in the camera frame (n upward).
            sun: (3,) unit direction towards the sun, camera frame.
            region: (4, 3) camera-frame corners of the receiving face (shadows are clipped
                to it), or None for the whole plane.
            darkness: remaining light fraction in the shadow.
        """
        near = self.intrinsics.near
        sun_height = float(normal @ sun)
        if sun_height < 0.05 or offset >= 0:  # sun grazing or below; camera under the plane
            return
        heights = vertices @ normal - offset
        b = self._batch
        casters = np.maximum.reduceat(heights, self._vertex_starts) > 1e-3
        if not casters.any():
            return
        # Vertices above the plane slide along the sun onto it; those below drop onto it.
        on_plane = vertices - np.where(heights[:, None] > 0, sun[None, :] * (heights / sun_height)[:, None],
                                       normal[None, :] * heights[:, None])
        # Each shadow lies in the box spanned by its part's shadow points: skip the parts
        # whose box is wholly outside one plane of the view frustum.
        low = np.minimum.reduceat(on_plane, self._vertex_starts)
        high = np.maximum.reduceat(on_plane, self._vertex_starts)
        box_corners = np.stack([np.where(np.array([i & 1, i & 2, i & 4], bool), high, low) for i in range(8)], 1)
        casters &= self._boxes_in_frustum(box_corners)
        if region is not None:
            # ... or that miss the receiving face's box.
            region_low, region_high = region.min(axis=0) - 1e-6, region.max(axis=0) + 1e-6
            casters &= np.all((high >= region_low) & (low <= region_high), axis=1)
        if not casters.any():
            return
        # Plane coordinates (2-D) for the hulls.
        axis_u = np.cross(normal, [1.0, 0.0, 0.0] if abs(normal[0]) < 0.9 else [0.0, 1.0, 0.0])
        axis_u /= np.linalg.norm(axis_u)
        axis_v = np.cross(normal, axis_u)
        origin = normal * offset
        planar = ((on_plane - origin) @ np.column_stack([axis_u, axis_v])).astype(np.float32)
        h, w = image.shape[:2]
        mask = np.zeros((h, w), np.uint8)
        for part in np.flatnonzero(casters):
            start, stop = b.vertex_slices[part]
            hull = cv2.convexHull(planar[start:stop])[:, 0, :].astype(float)
            polygon = origin + hull[:, :1] * axis_u + hull[:, 1:] * axis_v
            if polygon[:, 2].min() < near:
                polygon = _clip_polygon_near(polygon, near)
                if len(polygon) < 3:
                    continue
            self._fill_mask(mask, polygon)
        if region is not None:
            # Clip to the receiving face by masking (one polygon instead of one clip each).
            region_polygon = _clip_polygon_near(region, near)
            if len(region_polygon) < 3:
                return
            region_mask = np.zeros_like(mask)
            self._fill_mask(region_mask, region_polygon)
            cv2.bitwise_and(mask, region_mask, dst=mask)
        x, y, bw, bh = cv2.boundingRect(mask)
        if bw == 0:
            return
        # Darken through the (anti-aliased) mask, within its bounding box: pixel -=
        # pixel * alpha * (1 - darkness), in saturating uint8 arithmetic.
        roi = image[y:y + bh, x:x + bw]
        alpha = cv2.cvtColor(mask[y:y + bh, x:x + bw], cv2.COLOR_GRAY2RGB)
        cv2.subtract(roi, cv2.multiply(roi, alpha, scale=(1.0 - darkness) / 255.0), dst=roi)

    def _fill_mask(self, mask: np.ndarray, polygon: np.ndarray) -> None:
        """Fill a convex (N, 3) camera-frame polygon (in front of the near plane) into an
        (H, W) uint8 mask, anti-aliased."""
        pixels = polygon @ self.K.T
        pixels = pixels[:, :2] / pixels[:, 2:] - 0.5
        cv2.fillConvexPoly(mask, np.clip(pixels * 16, -2.0 ** 24, 2.0 ** 24).round().astype(np.int32),
                           (255,), cv2.LINE_AA, 4)

    def _boxes_in_frustum(self, corners: np.ndarray) -> np.ndarray:
        """(N,) bool: False for the boxes whose (N, 8, 3) camera-frame corners all lie
        outside one plane of the view frustum (near, or one of the four sides)."""
        intr = self.intrinsics
        x, y, z = corners[..., 0], corners[..., 1], corners[..., 2]
        outside = np.all(z < intr.near, axis=1) | np.all(z > intr.far, axis=1)
        for half_size, focal, coordinate in ((intr.width / 2, self.K[0, 0], x), (intr.height / 2, self.K[1, 1], y)):
            # Inside the side planes: |coordinate| * focal <= half_size * z.
            outside |= np.all(coordinate * focal > half_size * z, axis=1)
            outside |= np.all(-coordinate * focal > half_size * z, axis=1)
        return np.logical_not(outside)

    def _sphere_in_frustum(self, centres: np.ndarray, radii: np.ndarray) -> np.ndarray:
        """(P,) bool: spheres (camera-frame centres (P, 3), radii (P,) [m]) touching the view."""
        intr = self.intrinsics
        x, y, z = centres.T
        ok = (z + radii > intr.near) & (z - radii < intr.far)
        # Side planes through the origin, inward unit normals (+-cos a, 0, sin a) etc.
        for half_size, focal, coordinate in ((intr.width / 2, self.K[0, 0], x), (intr.height / 2, self.K[1, 1], y)):
            angle = np.arctan2(half_size, focal)
            cos, sin = np.cos(angle), np.sin(angle)
            ok &= (cos * coordinate + sin * z > -radii) & (-cos * coordinate + sin * z > -radii)
        return ok


class LowPolyEyeCamera:
    """Drop-in fast replacement of :class:`teleop.sim.camera.EyeCamera`.

    Differences from ``EyeCamera``:

    * the robot is drawn at the configuration ``q`` given to :meth:`render` (``EyeCamera``
      takes only the eye pose from ``q`` and draws the robot where the physics has it; with
      the default ``q`` = measured state the two agree);
    * it does not touch ``model.data``: the kinematics run in its own pinocchio data, so it
      can render in another thread than the controller's. (With ``q=None`` or a
      :class:`~teleop.sim.scene.SimulatedScene` it also reads pybullet, as ``EyeCamera``
      does; with an explicit ``q`` and a list of objects it makes no pybullet call.)
    * the ground extends to a hazy horizon rather than stopping at ``intrinsics.far``.

    Args:
        sim: the simulation whose measured state :meth:`render` shows by default (may be
            None if ``q`` is always given).
        model: the robot model.
        eye: ``"left_eye"`` or ``"right_eye"`` (the eye of :meth:`render`).
        intrinsics: image size and field of view (``near``/``far`` clip robot and scene).
        scene: what to draw besides the robot: a list of scene objects, a
            :class:`~teleop.sim.scene.SimulatedScene` (poses read from the physics every
            frame) or None.
        hide_own_head: skip the meshes that move with the eye (the head shell around it).
        **renderer_options: passed on to :class:`LowPolyRenderer` (lighting, ground,
            max_hull_vertices, keep_triangles, tile, antialias, shadows, cache_dir).
    """

    EYES = ("left_eye", "right_eye")

    def __init__(self, sim: Simulation | None, model: RobotModel, eye: str = "left_eye",
                 intrinsics: CameraIntrinsics | None = None,
                 scene: list[SceneObject] | SimulatedScene | None = None,
                 hide_own_head: bool = True, **renderer_options) -> None:
        if eye not in self.EYES:
            raise ValueError(f"eye must be one of {self.EYES}, not {eye!r}")
        self.sim, self.model, self.eye = sim, model, eye
        self.renderer = LowPolyRenderer(model, scene, intrinsics, **renderer_options)
        self.intrinsics = self.renderer.intrinsics
        self._data = model.model.createData()
        frames = model.model.frames
        self._hidden = {}
        for name in self.EYES:
            hidden = np.zeros(self.renderer.n_parts, bool)
            if hide_own_head:
                eye_joint = frames[model.frame_id(name)].parentJoint
                hidden[: self.renderer.n_robot_parts] = [
                    frames[v.frame_id].parentJoint == eye_joint for v in self.renderer.visuals]
            self._hidden[name] = hidden

    def _poses(self, q: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        if q is None:
            if self.sim is None:
                raise ValueError("no simulation to read the configuration from: pass q")
            q = self.sim.state().q
        pin.framesForwardKinematics(self.model.model, self._data, finite_configuration(q))
        return self.renderer.part_poses(self._data)

    def eye_placement(self, eye: str | None = None) -> pin.SE3:
        """World pose of an eye frame at the last rendered configuration."""
        return self._data.oMf[self.model.frame_id(eye or self.eye)]

    def render(self, q: np.ndarray | None = None) -> np.ndarray:
        """(H, W, 3) uint8 RGB image from the eye at ``q`` (nq,) (default: measured state)."""
        part_R, part_t = self._poses(q)
        return self.renderer.render(self.eye_placement(), part_R, part_t, self._hidden[self.eye])

    def render_stereo(self, q: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(left, right) images, each (H, W, 3) uint8 RGB, at one configuration ``q``
        (kinematics and scene poses computed once for both eyes)."""
        part_R, part_t = self._poses(q)
        left, right = (self.renderer.render(self.eye_placement(name), part_R, part_t, self._hidden[name])
                       for name in self.EYES)
        return left, right


# ===================================================================== benchmark
def example_postures(model: RobotModel) -> dict[str, np.ndarray]:
    """(nq,) configurations for demos and benchmarks: standing at home with the head
    tilted 0.5 rad down towards the table ("home"), and the same with both arms raised
    forward into view ("reach")."""
    home = model.home_configuration()
    home[7 + model.joint_index("neck_pitch")] = -0.5
    reach = home.copy()
    for side in "lr":
        reach[7 + model.joint_index(f"{side}_shoulder_pitch")] = -1.0
        reach[7 + model.joint_index(f"{side}_shoulder_roll")] = 0.2
        reach[7 + model.joint_index(f"{side}_elbow")] = 0.5
    return {"home": home, "reach": reach}


def benchmark(frames: int = 20, image_dir: Path | None = None) -> dict[tuple[str, str, str], float]:
    """Time pybullet's :class:`~teleop.sim.camera.EyeCamera` against :class:`LowPolyEyeCamera`
    (one eye, and both eyes with :meth:`LowPolyEyeCamera.render_stereo`) on the default
    scene, in the :func:`example_postures`.

    The renderers take turns frame by frame, so that the load of a shared machine weighs
    on all of them alike.

    Args:
        frames: frames per measurement (the median is reported).
        image_dir: if given, write ``render_<renderer>_<posture>_<width>.png`` there.

    Returns:
        {(renderer, posture, size): median wall-clock ms per frame}.
    """
    model = RobotModel()
    results = {}
    with Simulation(model) as sim:
        scene = add_to_simulation(sim)
        for posture, q in example_postures(model).items():
            sim.reset(q)  # pybullet draws the robot where the physics has it
            for size, (width, height) in STANDARD_SIZES.items():
                intrinsics = CameraIntrinsics(width, height)
                pybullet_camera = EyeCamera(sim, model, intrinsics=intrinsics)
                lowpoly_camera = LowPolyEyeCamera(sim, model, intrinsics=intrinsics, scene=scene)
                renders = {"pybullet": lambda: pybullet_camera.render(q), "lowpoly": lambda: lowpoly_camera.render(q),
                           "lowpoly-stereo": lambda: lowpoly_camera.render_stereo(q)}
                times: dict[str, list[float]] = {name: [] for name in renders}
                for _ in range(frames + 1):  # the first round warms up
                    for name, render in renders.items():
                        start = time.perf_counter()
                        render()
                        times[name].append(time.perf_counter() - start)
                for name, values in times.items():
                    results[(name, posture, size)] = 1000 * float(np.median(values[1:]))
                if image_dir is not None:
                    for name, camera_render in (("pybullet", pybullet_camera.render),
                                                ("lowpoly", lowpoly_camera.render)):
                        path = Path(image_dir) / f"render_{name}_{posture}_{width}.png"
                        cv2.imwrite(str(path), camera_render(q)[:, :, ::-1])
        sim.reset()
    return results


def main(argv: list[str] | None = None) -> None:
    """``python -m teleop.sim.lowpoly_render [--frames N] [--images DIR]``: print the
    benchmark table."""
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--frames", type=int, default=20)
    parser.add_argument("--images", type=Path, default=None, help="directory for example PNGs")
    args = parser.parse_args(argv)
    results = benchmark(args.frames, args.images)
    print(f"{'renderer':10s} {'posture':8s} {'size':8s} {'ms/frame':>9s} {'fps':>6s}")
    for (renderer, posture, size), ms in results.items():
        print(f"{renderer:10s} {posture:8s} {size:8s} {ms:9.1f} {1000 / ms:6.0f}")


if __name__ == "__main__":
    main()
