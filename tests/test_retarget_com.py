"""CoM ground-projection retargeting by normalised offsets (thesis Eqs. 2.2-2.10)."""

import numpy as np
import pytest

from retarget import quat
from retarget.com_mapping import feet_frame, normalized_offsets, retarget_com
from retarget.polygon import contains, convex_hull
from retarget.robot_target import RobotTarget


def rect(cx, cy, length, width, yaw=0.0):
    """(4, 2) corners of a sole centred at (cx, cy), rotated by yaw."""
    local = np.array([[length / 2, width / 2], [length / 2, -width / 2],
                      [-length / 2, -width / 2], [-length / 2, width / 2]])
    c, s = np.cos(yaw), np.sin(yaw)
    return local @ np.array([[c, s], [-s, c]]) + [cx, cy]


def human_feet(yaw=0.0, shift=(0.0, 0.0), stagger=0.0):
    """A human stance: feet 0.24 m apart, 0.26 x 0.10 m soles, optionally turned/staggered."""
    left = rect(stagger, 0.12, 0.26, 0.10)
    right = rect(0.0, -0.12, 0.26, 0.10)
    c, s = np.cos(yaw), np.sin(yaw)
    rot = np.array([[c, s], [-s, c]])
    left, right = left @ rot + shift, right @ rot + shift
    return feet_frame(left.mean(0), right.mean(0), np.vstack([left, right]))


@pytest.fixture
def robot():
    t = RobotTarget.approximate_icub()
    return t, feet_frame(t.left_foot_center, t.right_foot_center, t.support_polygon)


def test_standing_on_the_left_foot_puts_the_robot_com_on_its_left_sole(robot):
    target, rframe = robot
    human = human_feet()
    com = retarget_com(human.left[None], human, rframe)[0]
    np.testing.assert_allclose(com, target.left_foot_center, atol=1e-12)
    assert contains(convex_hull(target.left_sole_corners[:, :2]), com)
    com_r = retarget_com(human.right[None], human, rframe)[0]
    np.testing.assert_allclose(com_r, target.right_foot_center, atol=1e-12)


def test_symmetric_stance_maps_to_the_midpoint(robot):
    target, rframe = robot
    human = human_feet()
    com = retarget_com(human.origin[None], human, rframe)[0]
    np.testing.assert_allclose(com, 0.5 * (target.left_foot_center + target.right_foot_center), atol=1e-12)


def test_offsets_along_and_across_the_feet_line_are_replayed_proportionally(robot):
    target, rframe = robot
    human = human_feet()
    # A quarter of the way from the left to the right foot, and 30 % of the polygon depth
    # in front of the heel edge.
    depth_h = human.toe_edge - human.heel_edge
    com_h = human.left + 0.25 * (human.right - human.left) + (human.heel_edge - human.origin) + 0.3 * depth_h
    o, o_perp = normalized_offsets(com_h[None], human)
    np.testing.assert_allclose([o[0], o_perp[0]], [0.25, 0.3], atol=1e-12)
    com_r = retarget_com(com_h[None], human, rframe)[0]
    expected = (rframe.left + 0.25 * (rframe.right - rframe.left)
                + rframe.heel_edge + 0.3 * (rframe.toe_edge - rframe.heel_edge) - rframe.origin)
    np.testing.assert_allclose(com_r, expected, atol=1e-12)
    # The robot polygon here is 0.12 m deep, from x = -0.04 to 0.08.
    np.testing.assert_allclose(com_r, [-0.04 + 0.3 * 0.12, 0.07 - 0.25 * 0.14], atol=1e-12)


def test_side_by_side_feet_have_no_singularity(robot):
    """x_R == x_L (the normal stance) breaks the slope-intercept form of Eqs. 2.5-2.7."""
    _, rframe = robot
    human = human_feet()
    assert human.left[0] == human.right[0]
    pts = np.random.default_rng(0).uniform([-0.2, -0.3], [0.2, 0.3], size=(100, 2))
    out = retarget_com(pts, human, rframe)
    assert np.all(np.isfinite(out))
    # Written out for this stance: left foot at y = 0.12, right at -0.12 (o = (0.12 - y) / 0.24),
    # polygon from x = -0.13 to 0.13 (o' = (x + 0.13) / 0.26), replayed on the robot's
    # (feet at y = +-0.07, polygon from x = -0.04 to 0.08, see the test above).
    o, o_perp = (0.12 - pts[:, 1]) / 0.24, (pts[:, 0] + 0.13) / 0.26
    np.testing.assert_allclose(out, np.c_[-0.04 + 0.12 * o_perp, 0.07 - 0.14 * o], atol=1e-12)


def test_turned_and_moved_human_stance_gives_the_same_robot_com(robot):
    _, rframe = robot
    pts = np.random.default_rng(1).uniform([-0.2, -0.3], [0.2, 0.3], size=(50, 2))
    base = retarget_com(pts, human_feet(), rframe)
    yaw, shift = np.radians(37.0), np.array([1.3, -0.4])
    c, s = np.cos(yaw), np.sin(yaw)
    moved = pts @ np.array([[c, s], [-s, c]]) + shift
    np.testing.assert_allclose(retarget_com(moved, human_feet(yaw, shift), rframe), base, atol=1e-12)


def test_vector_form_equals_the_thesis_slope_intercept_form_for_staggered_feet(robot):
    """Eqs. 2.2-2.10 written as in the thesis (valid when x_R != x_L), zero-width feet."""
    _, rframe = robot
    # Zero-width feet: each sole is its toe and heel points (the thesis' T and H).
    tl, hl = np.array([0.20, 0.15]), np.array([-0.05, 0.10])
    tr, hr = np.array([0.05, -0.15]), np.array([-0.20, -0.12])
    L, R = 0.5 * (tl + hl), 0.5 * (tr + hr)
    human = feet_frame(L, R, np.array([tl, hl, tr, hr]))
    com = np.array([0.03, 0.02])

    # Thesis: line LR y = a x + b; orthogonal through O: y = m x + q.
    a = (R[1] - L[1]) / (R[0] - L[0])
    b = -a * R[0] + R[1]
    O = 0.5 * (L + R)  # noqa: E741 (the thesis's point O)
    m = -1 / a
    q = (R[0] - L[0]) / (R[1] - L[1]) * O[0] + O[1]
    dist = lambda p: abs(a * p[0] - p[1] + b) / np.hypot(a, 1)  # noqa: E731
    t_star = max((tl, tr), key=dist)                                # Eq. 2.4
    h_star = max((hl, hr), key=dist)

    def meet(p):  # line through p parallel to LR meets AB
        bp = p[1] - a * p[0]
        x = (q - bp) / (a - m)
        return np.array([x, a * x + bp])
    A, B = meet(t_star), meet(h_star)
    o = (com - L) @ (R - L) / ((R - L) @ (R - L))                   # Eq. 2.2
    o_p = (com - B) @ (A - B) / ((A - B) @ (A - B))                 # Eq. 2.8
    np.testing.assert_allclose(human.toe_edge, A, atol=1e-12)
    np.testing.assert_allclose(human.heel_edge, B, atol=1e-12)
    ours = normalized_offsets(com[None], human)
    np.testing.assert_allclose([ours[0][0], ours[1][0]], [o, o_p], atol=1e-12)
    robot_com = (rframe.left + o * (rframe.right - rframe.left)                          # 2.3
                 + rframe.heel_edge + o_p * (rframe.toe_edge - rframe.heel_edge) - rframe.origin)  # 2.9, 2.10
    np.testing.assert_allclose(retarget_com(com[None], human, rframe)[0], robot_com, atol=1e-12)


def test_offsets_are_not_clamped(robot):
    """Outside the human polygon -> outside the robot polygon (the ZMP stage clamps)."""
    target, rframe = robot
    human = human_feet()
    com = retarget_com(np.array([[0.5, 0.0]]), human, rframe)[0]
    assert not contains(convex_hull(target.support_polygon), com)
    # Beyond every edge (in front, behind, left of the left foot, right of the right foot,
    # and a corner): the offsets carry on linearly, o = (0.12 - y) / 0.24 and
    # o' = (x + 0.13) / 0.26 outside [0, 1] as inside it.
    outside = np.array([[0.5, 0.0], [-0.4, 0.0], [0.0, 0.36], [0.0, -0.6], [0.39, -0.36]])
    o, o_perp = normalized_offsets(outside, human)
    np.testing.assert_allclose(o, [0.5, 0.5, -1.0, 3.0, 2.0], atol=1e-12)
    np.testing.assert_allclose(o_perp, [0.63 / 0.26, -0.27 / 0.26, 0.5, 0.5, 2.0], atol=1e-12)
    np.testing.assert_allclose(retarget_com(outside, human, rframe),
                               np.c_[-0.04 + 0.12 * o_perp, 0.07 - 0.14 * o], atol=1e-12)


def test_rotation_helper_is_consistent():
    """The rotated-rectangle helper used above turns points counter-clockwise."""
    r = rect(0, 0, 2.0, 0.0, yaw=np.pi / 2)
    np.testing.assert_allclose(r[0], [0.0, 1.0], atol=1e-12)
    np.testing.assert_allclose(quat.rotate(quat.about_z(np.pi / 2), np.array([1.0, 0, 0])), [0, 1, 0], atol=1e-12)


def test_com_mapping_uses_the_calibrated_feet_by_default():
    """Feet that slide in the recording (marker noise, heel lift) must not swing the mapped
    CoM: with the robot's feet fixed, the calibrated feet frame is the reference."""
    from retarget.mapping import Retargeter
    from teleop.inputs.synthetic import generate

    motion = generate("squat", seed=4, rate_hz=50.0)
    perturbed = motion.slice(0, len(motion))
    perturbed.positions = motion.positions.copy()
    shift = np.linspace(0.0, 0.06, len(motion))  # the right foot "slides" 6 cm sideways
    for name in ("right_foot", "right_toe"):
        perturbed.positions[:, perturbed.index(name), 1] -= shift
    target = RobotTarget.approximate_icub()

    def com(m, mode):
        r = Retargeter(target, human_feet=mode)
        r.calibrate(m)
        return r.retarget_motion(m).values[:, :2]

    assert np.allclose(com(perturbed, "calibration"), com(motion, "calibration"), atol=1e-9)
    assert np.abs(com(perturbed, "per_frame") - com(motion, "per_frame")).max() > 0.005
    with pytest.raises(ValueError, match="human_feet"):
        Retargeter(target, human_feet="moving")
