"""The low-poly renderer: robot parts and scene faces shaded flat and painted far to near
over the ground, with sun shadows on the ground and on table tops."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
import pinocchio as pin

from teleop.robot.model import RobotModel
from teleop.sim.camera import CameraIntrinsics
from teleop.sim.lowpoly.ground import GROUND_SHADOW, Ground, GroundStyle
from teleop.sim.lowpoly.meshes import DEFAULT_HULL_VERTICES, DEFAULT_KEEP_TRIANGLES, LowPolyMesh, primitive_mesh
from teleop.sim.lowpoly.robot_visuals import robot_visuals
from teleop.sim.scene import Box, SceneObject, SimulatedScene


#: Light left in the shadows on a table top (fraction).
TABLE_SHADOW = 0.55

#: Rotation from the OpenCV camera frame (x right, y down, z forward) to the eye frame
#: (x forward, y left, z up): columns are the OpenCV axes in eye coordinates.
EYE_FROM_CV = np.array([[0.0, 0.0, 1.0],
                        [-1.0, 0.0, 0.0],
                        [0.0, -1.0, 0.0]])


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
        self.scene_objects: list[SceneObject] = (scene.objects if isinstance(scene, SimulatedScene)
                                                 else list(scene or []))
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
        self._ground = Ground(ground or GroundStyle(), float(self.K[1, 1]))

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
