"""Low-poly meshes: STL files simplified to small convex hulls (cached on disk), and the
scene's primitive shapes tessellated into tiles."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.spatial import ConvexHull

from teleop.sim.scene import Box, Cylinder, Shape, Sphere


#: Vertices kept per robot mesh: a convex hull of V vertices has at most 2V - 4 triangles.
DEFAULT_HULL_VERTICES = 60
#: Closed meshes up to this many triangles are drawn unsimplified if their convex hull
#: would visibly fill them in: mean gap (hull volume - mesh volume) / hull area above this
#: [m]. iCub: hands 4.1 mm (kept: the thumb and fingers), wrist and elbow pieces 1.4-2.5 mm.
DEFAULT_KEEP_TRIANGLES = 600
KEEP_MIN_GAP = 0.003
#: Bump when the simplification changes, to invalidate the disk cache.
CACHE_FORMAT = 2


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
                       keep_triangles, CACHE_FORMAT))
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
