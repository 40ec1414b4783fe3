"""The low-poly eye camera: images that change with the robot, a projection that agrees
with the pinhole model and with pybullet's renderer, and cached simplified meshes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pinocchio as pin
import pytest

from teleop.sim.camera import CameraIntrinsics, EyeCamera
from teleop.sim.lowpoly import (LowPolyEyeCamera, LowPolyRenderer, convex_hull_mesh, load_lowpoly_mesh,
                                primitive_mesh, robot_visuals)
from teleop.sim.lowpoly import meshes
from teleop.sim.lowpoly.renderer import TABLE_SHADOW
from teleop.sim.scene import Box, Cylinder, Sphere, add_to_simulation, default_scene


def _posture(robot, neck_pitch=-0.5, neck_yaw=0.0, reach=False) -> np.ndarray:
    """Home standing; head tilted down towards the table; optionally both arms forward."""
    q = robot.home_configuration()
    q[7 + robot.joint_index("neck_pitch")] = neck_pitch
    q[7 + robot.joint_index("neck_yaw")] = neck_yaw
    if reach:
        for side in "lr":
            q[7 + robot.joint_index(f"{side}_shoulder_pitch")] = -1.0
            q[7 + robot.joint_index(f"{side}_shoulder_roll")] = 0.2
            q[7 + robot.joint_index(f"{side}_elbow")] = 0.5
    return q


@pytest.fixture(scope="module")
def scene(sim):
    return add_to_simulation(sim)


@pytest.fixture(scope="module")
def camera(sim, robot, scene):
    return LowPolyEyeCamera(sim, robot, scene=scene)


def _signed_volume(mesh) -> float:
    a, b, c = (mesh.vertices[mesh.triangles[:, i]] for i in range(3))
    return float(np.einsum("ij,ij->i", a, np.cross(b, c)).sum() / 6)


# ------------------------------------------------------------------------ meshes
def test_convex_hull_is_small_and_outward():
    points = np.random.default_rng(0).normal(size=(2000, 3))
    mesh = convex_hull_mesh(points, max_vertices=40)
    assert len(mesh.vertices) <= 40 and len(mesh.triangles) <= 2 * 40 - 4
    centre = mesh.vertices.mean(axis=0)
    a, b, c = (mesh.vertices[mesh.triangles[:, i]] for i in range(3))
    outward = np.einsum("ij,ij->i", np.cross(b - a, c - a), a - centre)
    assert np.all(outward > 0)


@pytest.mark.parametrize("shape", [Box((0.3, 0.1, 0.05)), Cylinder(0.03, 0.11), Sphere(0.035)])
def test_primitive_meshes_are_closed_and_outward(shape):
    mesh = primitive_mesh(shape, max_edge=0.08)
    volume = {Box: lambda s: 8 * np.prod(s.half_extents), Cylinder: lambda s: np.pi * s.radius ** 2 * s.length,
              Sphere: lambda s: 4 / 3 * np.pi * s.radius ** 3}[type(shape)](shape)
    # Tessellated round shapes lose a little volume; a flipped face would subtract.
    assert 0.8 * volume < _signed_volume(mesh) <= volume * (1 + 1e-9)


def test_robot_meshes_are_low_poly_outward_and_cached(robot, tmp_path, monkeypatch):
    visuals = robot_visuals(robot, cache_dir=tmp_path)
    assert len(visuals) > 30
    assert all(_signed_volume(v.mesh) > 0 for v in visuals)
    # Hulls <= 116 triangles; only the small meshes (hands, wrists) are kept as they are.
    assert all(len(v.mesh.triangles) <= meshes.DEFAULT_KEEP_TRIANGLES for v in visuals)
    assert sum(len(v.mesh.triangles) for v in visuals) < 10_000
    assert len(list(tmp_path.glob("*.npz"))) == len(set(robot_mesh_paths(robot)))  # one file per mesh

    # Second load: from the cache only (simplifying or even reading an STL would fail).
    def forbidden(*args, **kwargs):
        raise AssertionError("mesh rebuilt although it is cached")

    monkeypatch.setattr(meshes, "read_stl", forbidden)
    monkeypatch.setattr(meshes, "convex_hull_mesh", forbidden)
    again = robot_visuals(robot, cache_dir=tmp_path)
    for first, second in zip(visuals, again):
        assert np.array_equal(first.mesh.vertices, second.mesh.vertices)
        assert np.array_equal(first.mesh.triangles, second.mesh.triangles)


def test_cache_key_follows_the_simplification_budget(robot, tmp_path):
    forearm = next(p for p in robot_mesh_paths(robot) if "l_forearm" in p.name)
    coarse = load_lowpoly_mesh(forearm, (0.001,) * 3, max_vertices=12, cache_dir=tmp_path)
    fine = load_lowpoly_mesh(forearm, (0.001,) * 3, max_vertices=60, cache_dir=tmp_path)
    assert len(coarse.vertices) == 12 and len(fine.vertices) == 60
    assert len(list(tmp_path.glob("*.npz"))) == 2


def robot_mesh_paths(robot):
    import xml.etree.ElementTree as ET

    from teleop.sim.urdf_prep import _resolve_package_uri

    urdf = robot.description.urdf_path
    return [Path(_resolve_package_uri(m.get("filename"), urdf))
            for m in ET.parse(urdf).getroot().iter("mesh")]


def test_visual_placements_agree_with_pinocchio_geometry(robot):
    """Our URDF reading places each visual where pinocchio's own geometry model does."""
    geometry = pin.buildGeomFromUrdf(robot.model, str(robot.description.urdf_path), pin.GeometryType.VISUAL,
                                     package_dirs=[str(robot.description.urdf_path.parents[3])])
    q = robot.random_configuration(np.random.default_rng(2))
    data, geometry_data = robot.model.createData(), geometry.createData()
    pin.framesForwardKinematics(robot.model, data, q)
    pin.updateGeometryPlacements(robot.model, data, geometry, geometry_data)
    renderer = LowPolyRenderer(robot)
    renderer_R, renderer_t = renderer.part_poses(data)
    index = {visual.name: i for i, visual in enumerate(renderer.visuals)}
    assert len(index) == geometry.ngeoms
    for g, geometry_object in enumerate(geometry.geometryObjects):
        i = index[geometry_object.name]  # both name a visual "<link>_<index in link>"
        assert np.allclose(geometry_data.oMg[g].rotation, renderer_R[i], atol=1e-9)
        assert np.allclose(geometry_data.oMg[g].translation, renderer_t[i], atol=1e-9)


# ------------------------------------------------------------------------ images
def test_image_shape_type_and_content(camera, robot):
    image = camera.render(_posture(robot))
    assert image.shape == (240, 320, 3) and image.dtype == np.uint8
    assert image.std() > 20  # table, objects, ground: far from a blank frame
    assert len(np.unique(image.reshape(-1, 3), axis=0)) > 50


def test_default_configuration_is_the_measured_state(camera, robot, sim):
    sim.reset(_posture(robot, neck_yaw=0.3))
    try:
        assert np.array_equal(camera.render(), camera.render(sim.state().q))
    finally:
        sim.reset()


def test_image_changes_when_the_head_turns(camera, robot):
    ahead = camera.render(_posture(robot)).astype(int)
    turned = camera.render(_posture(robot, neck_yaw=0.6)).astype(int)
    assert np.mean(np.abs(ahead - turned).max(axis=2) > 30) > 0.2


def test_hands_come_into_view_when_reaching(robot):
    camera = LowPolyEyeCamera(None, robot)  # robot and ground only: any change is the robot
    home = camera.render(_posture(robot)).astype(int)
    reaching = camera.render(_posture(robot, reach=True)).astype(int)
    changed = np.abs(home - reaching).max(axis=2) > 30
    assert changed.mean() > 0.05
    # They appear in the lower half of the image, on both sides of the centre.
    rows, cols = np.nonzero(changed)
    assert np.median(rows) > 120
    assert (cols < 140).sum() > 500 and (cols > 180).sum() > 500


def test_scene_object_projects_where_the_pinhole_model_says(camera, robot, sim):
    q = _posture(robot)
    image = camera.render(q)
    # The pinhole model, independently: eye frame x forward, y left, z up; optical frame
    # x right (= -y eye), y down (= -z eye), z forward (= x eye).
    robot.update(q)
    eye = robot.placement("left_eye")
    for name in ("red_cube", "blue_box", "green_can", "yellow_ball"):
        centre = np.array(next(o.position for o in default_scene() if o.name == name))
        local = eye.rotation.T @ (centre - eye.translation)
        optical = np.array([-local[1], -local[2], local[0]])
        u, v, w = camera.intrinsics.matrix() @ optical
        row, col = int(v / w), int(u / w)
        assert 0 <= row < 240 and 0 <= col < 320
        colour = image[row, col].astype(int)
        dominant = {"red_cube": [0], "blue_box": [2], "green_can": [1], "yellow_ball": [0, 1]}[name]
        other = [c for c in range(3) if c not in dominant]
        assert colour[dominant].min() > 1.5 * colour[other].max(), (name, colour)


def test_silhouettes_agree_with_pybullet(robot, sim, scene, camera):
    """Both renderers see the same objects at the same pixels (up to edge pixels)."""
    q = _posture(robot, reach=True)
    sim.reset(q)  # pybullet draws the robot where the physics has it
    try:
        ours = camera.render(q).astype(int)
        theirs = EyeCamera(sim, robot).render(q).astype(int)
    finally:
        sim.reset()

    def mask(image, channel):
        # Pixels where one channel clearly dominates (the shading differs between the
        # renderers, the hue does not).
        others = np.delete(image, channel, axis=2).max(axis=2)
        return (image[:, :, channel] > 1.6 * others) & (image[:, :, channel] > 60)

    for channel in range(3):  # red cube, green can, blue box
        a, b = mask(ours, channel), mask(theirs, channel)
        assert a.sum() > 100 and b.sum() > 100
        assert (a & b).sum() / (a | b).sum() > 0.7, channel


def test_can_shadow_falls_on_the_table_where_the_sun_projects_it(robot):
    scene = default_scene()
    renderer = LowPolyRenderer(robot, scene)
    data = robot.model.createData()
    pin.framesForwardKinematics(robot.model, data, robot.home_configuration())
    part_R, part_t = renderer.part_poses(data)
    can = next(o for o in scene if o.name == "green_can")
    table_top = next(o for o in scene if o.name == "table").position[2]
    # Looking straight down on the can from 0.6 m above it (eye x down, eye z = world x).
    down = np.column_stack([[0.0, 0.0, -1.0], [0.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    eye = pin.SE3(down, np.array(can.position) + [0.0, 0.0, 0.6])
    lit = renderer.render(eye, part_R, part_t).astype(int)
    renderer.shadows = False
    plain = renderer.render(eye, part_R, part_t).astype(int)
    sun = np.asarray(renderer.lighting.sun_direction) / np.linalg.norm(renderer.lighting.sun_direction)
    # The can's top centre slid along the sun onto the table: 6 cm from the can's axis.
    top_centre = np.array(can.position) + [0.0, 0.0, 0.055]
    offset = -sun * (top_centre[2] - table_top) / sun[2]
    for point, expected in ((top_centre + offset, TABLE_SHADOW), (top_centre - offset, 1.0)):
        point[2] = table_top
        col, row = renderer.project(eye, point)[0].astype(int)
        ratio = lit[row, col].sum() / plain[row, col].sum()
        assert abs(ratio - expected) < 0.05, (ratio, expected)


def test_stereo_pair_differs_by_a_small_horizontal_shift(camera, robot):
    left, right = camera.render_stereo(_posture(robot))
    assert left.shape == right.shape == (240, 320, 3)
    assert not np.array_equal(left, right)
    # The eyes are 68 mm apart: what the left eye sees at column x the right eye sees at
    # x - d, with a disparity d ~ f * 0.068 m / depth (~25 px for the table, 0.6 m away).
    shifts = np.arange(-60, 61, 2)
    errors = [np.abs(left[:, 60 + s: 260 + s].astype(int) - right[:, 60: 260].astype(int)).mean() for s in shifts]
    assert 10 < shifts[np.argmin(errors)] < 50


def test_larger_image_and_a_face_crossing_the_near_plane(robot):
    """A camera 1 cm before and above the table's front edge, looking 0.4 rad down: the
    table-top tiles under it cross the near plane (2 cm) and are clipped, not dropped or
    drawn inverted."""
    renderer = LowPolyRenderer(robot, default_scene(), CameraIntrinsics(640, 480))
    data = robot.model.createData()
    pin.framesForwardKinematics(robot.model, data, robot.home_configuration())
    part_R, part_t = renderer.part_poses(data)
    table = next(o for o in default_scene() if o.name == "table")
    eye = pin.SE3(pin.rpy.rpyToMatrix(0.0, 0.4, 0.0),
                  np.array([table.position[0] - 0.26, 0.0, table.position[2] + 0.01]))
    image = renderer.render(eye, part_R, part_t)
    assert image.shape == (480, 640, 3)
    red, green, blue = np.moveaxis(image.astype(int), 2, 0)
    wood = (red - blue > 50) & (green - blue > 20)  # brown, unlike the grey-blue ground
    # The table top fills the view from the horizon (row 240 - f tan 0.4 = 65) down to
    # where it comes nearer than the near plane: depth 0.921 d + 0.0039 m = 0.02 m at
    # d = 17.5 mm ahead, i.e. 29.7 deg down = row 240 + f tan(6.8 deg) = 289.
    assert wood[100:280].mean() > 0.95
    assert wood[300:, 100:540].mean() < 0.05  # past the near plane: ground under the table


# ------------------------------------------------------------------------- scene
def test_scene_bodies_exist_and_the_standing_robot_does_not_touch_them(robot, sim, scene):
    import pybullet as pb

    kw = {"physicsClientId": sim.client}
    names = [o.name for o in scene.objects]
    assert names[0] == "table" and len(names) == len(set(names)) >= 5
    for obj, body in zip(scene.objects, scene.body_ids):
        assert pb.getBodyInfo(body, **kw) is not None
        position, _ = pb.getBasePositionAndOrientation(body, **kw)
        assert np.allclose(position, obj.position, atol=1e-6)
    sim.reset()
    sim.step(300)
    for body in scene.body_ids:
        assert pb.getClosestPoints(sim.body, body, 0.02, **kw) == ()  # 2 cm clear
    # The light objects rest where they were put (nothing fell or slid).
    for obj, (position, _) in zip(scene.objects, scene.poses()):
        assert np.linalg.norm(position - np.asarray(obj.position)) < 0.005, obj.name
    assert sim.other_contacts() == 0


def test_static_scene_option(robot):
    from teleop.sim.simulator import Simulation

    with Simulation(robot, visual=False) as simulation:
        scene = add_to_simulation(simulation, static=True)
        assert all(o.mass == 0.0 for o in scene.objects)
        import pybullet as pb

        assert all(pb.getDynamicsInfo(b, -1, physicsClientId=simulation.client)[0] == 0.0 for b in scene.body_ids)
