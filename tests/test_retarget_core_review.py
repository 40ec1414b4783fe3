"""Retargeting core on geometry with known answers (found in review; each test failed
before its fix)."""

import numpy as np
import pytest
from scipy.optimize import linprog
from scipy.spatial import ConvexHull, HalfspaceIntersection

from retarget import quat, skeleton
from retarget.anthropometry import whole_body_com
from retarget.human import HumanMotion
from retarget.mapping import retarget_motion
from retarget.polygon import contains, convex_hull, halfplanes, shrink
from retarget.robot_target import RobotTarget
from retarget.zmp import ZmpCorrector

TARGET = RobotTarget.approximate_icub()


def sole(cx: float, cy: float, yaw: float) -> np.ndarray:
    """(4, 2) corners of an iCub-sized sole (0.12 m x 0.05 m, ankle 0.04 m from the heel)."""
    local = np.array([[0.08, 0.025], [0.08, -0.025], [-0.04, -0.025], [-0.04, 0.025]])
    c, s = np.cos(yaw), np.sin(yaw)
    return local @ np.array([[c, -s], [s, c]]).T + [cx, cy]


def exact_shrunk_area(hull: np.ndarray, margin: float) -> float:
    """Area of {p : n_k . p <= b_k - margin} by scipy (0 if empty)."""
    n, b = halfplanes(hull)
    cheb = linprog([0.0, 0.0, -1.0], A_ub=np.c_[n, np.ones(len(n))], b_ub=b - margin,
                   bounds=[(None, None), (None, None), (0.0, None)])
    if cheb.x[2] < 1e-6:
        return 0.0
    corners = HalfspaceIntersection(np.c_[n, -(b - margin)], cheb.x[:2]).intersections
    return float(ConvexHull(corners).volume)


def test_the_hull_of_toed_out_feet_shrinks_to_the_offset_region_not_its_centroid():
    """A short edge of the hull (between the toes of rotated feet) vanishes under the
    margin while the rest of the polygon remains: shrink() read the vanished edge as the
    margin eating the polygon and returned its centroid, a point."""
    hull = convex_hull(np.vstack([sole(0.0, 0.07, 0.5), sole(0.0, -0.07, -0.5)]))   # 29 deg toe-out
    shrunk = shrink(hull, 0.04)
    assert len(shrunk) >= 3
    assert ConvexHull(shrunk).volume == pytest.approx(exact_shrunk_area(hull, 0.04), rel=1e-9)
    n, b = halfplanes(hull)
    assert np.all(shrunk @ n.T <= b - 0.04 + 1e-12)
    assert contains(shrunk, [0.03, 0.0])      # 4 cm (and more) inside every edge


def test_shrink_equals_the_half_plane_intersection_for_any_two_feet():
    rng = np.random.default_rng(7)
    for _ in range(300):
        yaw_l, yaw_r = rng.uniform(-0.6, 0.6, 2)
        hull = convex_hull(np.vstack([sole(rng.uniform(-0.05, 0.05), 0.07, yaw_l), sole(0.0, -0.07, yaw_r)]))
        margin = rng.uniform(0.005, 0.045)
        shrunk = shrink(hull, margin)
        area = ConvexHull(shrunk).volume if len(shrunk) >= 3 else 0.0
        assert area == pytest.approx(exact_shrunk_area(hull, margin), abs=1e-12)


def test_the_zmp_corrector_passes_a_still_feasible_com_on_toed_out_feet():
    feet = np.vstack([sole(0.0, 0.07, 0.5), sole(0.0, -0.07, -0.5)])
    z = ZmpCorrector(dt=0.01, margin=0.04)
    x = np.array([0.03, 0.0])
    out = z.step(x, np.zeros(2), np.r_[x, 0.5], np.zeros(3), feet)
    assert not z.saturated
    np.testing.assert_allclose(z.zmp, x, atol=1e-12)
    np.testing.assert_allclose(out, x, atol=1e-12)


def test_the_npose_reference_maps_the_com_against_the_feet_the_person_stands_on():
    """With reference="npose" the CoM offsets were measured against the virtual N-pose's
    feet (hip-width apart), not against the feet of the wide stance the person stood in:
    a CoM above the left foot went 11 cm beyond the robot's left sole."""
    wide = {"left_upper_leg": quat.about_x(0.15), "right_upper_leg": quat.about_x(-0.15),
            "left_foot": quat.about_x(-0.15), "right_foot": quat.about_x(0.15)}
    m = skeleton.standard_body_motion(np.arange(2) * 0.01, {k: np.stack([v, v]) for k, v in wide.items()})
    feet_y = m.position("left_foot")[0, 1] - m.position("right_foot")[0, 1]
    assert feet_y > 0.4                                           # a wide stance (N-pose: 0.17 m)
    com = whole_body_com(m)
    pos = m.positions.copy()
    pos[1, :, :2] += m.position("left_foot")[1, :2] - com[1, :2]  # frame 1: CoM above the left ankle
    m = HumanMotion(m.times, m.segment_names, pos, m.orientations, source="wide stance")
    for reference in ("frame", "npose"):
        traj = retarget_motion(m, TARGET, reference=reference)
        assert traj.values[0, 1] == pytest.approx(TARGET.com_xy[1], abs=1e-9)   # centred
        assert traj.values[1, 1] == pytest.approx(TARGET.left_foot_center[1], abs=1e-9), reference


def test_a_vertex_given_twice_does_not_make_a_nan_half_plane():
    """clip() can emit a corner twice; its zero-length edge had a NaN normal, and a NaN
    half-plane calls every point outside (project() would then move an inside ZMP)."""
    from retarget.polygon import project

    square = np.array([[0.0, 0.0], [1.0, 0.0], [1.0, 0.0], [1.0, 1.0], [0.0, 1.0]])
    with np.errstate(invalid="raise", divide="raise"):
        normals, offsets = halfplanes(square)
    assert np.all(np.isfinite(normals)) and len(normals) == 4
    assert contains(square, np.array([0.5, 0.5]))
    np.testing.assert_array_equal(project(square, np.array([0.25, 0.75])), [0.25, 0.75])
