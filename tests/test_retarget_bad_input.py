"""Bad input to the retargeting and the ZMP correction: one clear error, and no corrupted
state (each test failed before its fix: NaN went through and stuck in the corrector's
state for good, degenerate polygons and coincident feet gave silent numbers)."""

from dataclasses import replace

import numpy as np
import pytest

from retarget import skeleton
from retarget.calibration import CalibrationError, calibrate
from retarget.com_mapping import feet_frame
from retarget.human import HumanMotion
from retarget.mapping import Retargeter
from retarget.robot_target import RobotTarget
from retarget.zmp import ZmpCorrector, ZmpPrefilter

TARGET = RobotTarget.approximate_icub()
POLY = TARGET.support_polygon
STILL = dict(com_ref_vel_xy=[0.0, 0.0], measured_com=[0.02, 0.0, 0.5], measured_com_vel=[0.0, 0.0, 0.0])


@pytest.mark.parametrize("field, value", [("com_ref_xy", [np.nan, 0.0]), ("com_ref_vel_xy", [0.0, np.inf]),
                                          ("measured_com", [0.0, 0.0, np.nan]),
                                          ("measured_com", [np.nan, 0.0, 0.5]),
                                          ("measured_com_vel", [np.nan, 0.0, 0.0])])
def test_a_non_finite_input_is_refused_and_leaves_the_corrector_usable(field, value):
    zc = ZmpCorrector()
    args = dict(com_ref_xy=[0.02, 0.0], **STILL)
    good = zc.step(**args, support_polygon=POLY)
    with pytest.raises(ValueError, match=field):
        zc.step(**{**args, field: value}, support_polygon=POLY)
    np.testing.assert_allclose(zc.com, good)            # state untouched
    assert np.all(np.isfinite(zc.step(**args, support_polygon=POLY)))


@pytest.mark.parametrize("polygon, what", [
    (np.zeros((0, 2)), "no area"),
    (np.array([[0.0, 0.0]]), "no area"),
    (np.array([[0.0, -0.1], [0.0, 0.1]]), "no area"),
    (np.array([[0.0, -0.1], [0.0, 0.0], [0.0, 0.1], [0.0, 0.05]]), "no area"),      # collinear
    (np.r_[POLY, [[np.nan, 0.0]]], "not finite"),
    (np.zeros((4,)), "shape"),
])
def test_a_degenerate_support_polygon_is_refused(polygon, what):
    with pytest.raises(ValueError, match=f"support polygon.*{what}"):
        ZmpCorrector().step([0.0, 0.0], support_polygon=polygon, **STILL)
    with pytest.raises(ValueError, match=f"support polygon.*{what}"):
        ZmpPrefilter().step([0.0, 0.0], 0.5, polygon)


@pytest.mark.parametrize("kwargs", [dict(dt=np.nan), dict(dt=-0.01), dict(margin=-0.01), dict(margin=np.nan),
                                    dict(recovery_time=-0.2), dict(gravity=0.0), dict(min_height=0.0),
                                    dict(capture_margin=-0.01)])
def test_corrector_settings_are_checked(kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        ZmpCorrector(**kwargs)


def test_prefilter_refuses_a_non_finite_reference_or_height_and_stays_usable():
    f = ZmpPrefilter()
    good = f.step([0.02, 0.0], 0.5, POLY)
    for ref, height, name in (([np.nan, 0.0], 0.5, "com_ref_xy"), ([0.02, 0.0], np.nan, "com_height"),
                              ([0.02, 0.0], 0.0, "com_height"), ([0.02, 0.0], -0.5, "com_height")):
        with pytest.raises(ValueError, match=name):
            f.step(ref, height, POLY)
    with pytest.raises(ValueError, match="height"):
        f.waist_height(np.nan)
    with pytest.raises(ValueError, match="margin"):
        ZmpPrefilter(margin=-0.01)
    np.testing.assert_allclose(f.step([0.02, 0.0], 0.5, POLY), good, atol=1e-3)
    assert np.isfinite(f.waist_height(0.5))


def test_coincident_feet_are_refused():
    """Eq. 2.2 divides by |R - L|^2 and Eq. 2.8 by |A - B|^2: a zero feet line (or a polygon
    of no depth across it) has no offsets; it used to map every CoM onto the left foot."""
    corners = np.zeros((8, 2))
    with pytest.raises(ValueError, match="feet"):
        feet_frame(np.zeros(2), np.zeros(2), corners)
    flat = np.array([[0.0, 0.1], [0.0, -0.1]] * 4)             # every corner on the feet line
    with pytest.raises(ValueError, match="depth"):
        feet_frame(np.array([0.0, 0.1]), np.array([0.0, -0.1]), flat)
    # Per frame: the frame is named.
    left = np.array([[0.0, 0.1], [0.0, 0.0]])
    right = np.array([[0.0, -0.1], [0.0, 0.0]])
    with pytest.raises(ValueError, match="frame 1"):
        feet_frame(left, right, np.broadcast_to(TARGET.support_polygon, (2, 8, 2)))
    # A NaN frame (a lost tracker, streaming) stays NaN, as everywhere else in the mapping.
    nan_left = np.array([[0.0, 0.1], [np.nan, np.nan]])
    frame = feet_frame(nan_left, right * [1, 1] + [[0, 0], [0, -0.1]], np.broadcast_to(POLY, (2, 8, 2)))
    assert np.isnan(frame.left[1]).all()


def test_a_robot_whose_feet_coincide_is_refused_by_the_retargeter():
    same = replace(TARGET, right_sole_corners=TARGET.left_sole_corners)
    with pytest.raises(ValueError, match="feet"):
        Retargeter(same)


def test_a_robot_with_its_shoulders_below_its_waist_is_refused():
    """The trunk ratio of the hand mapping (robot / human shoulder height above the waist)
    would be negative, mirroring every trunk motion."""
    with pytest.raises(ValueError, match="trunk"):
        replace(TARGET, waist_height=0.9)


def test_a_calibration_pose_with_the_feet_on_top_of_each_other_is_refused():
    m = skeleton.standard_body_motion(np.arange(2) * 0.01)
    pos = m.positions.copy()
    for s in ("right_foot", "right_toe", "right_lower_leg"):
        j, k = m.index(s), m.index(s.replace("right", "left"))
        pos[:, j] = pos[:, k]
    bad = HumanMotion(m.times, m.segment_names, pos, m.orientations, source="feet together")
    with pytest.raises(CalibrationError, match="feet together: frame 0: .*feet"):
        calibrate(bad)
