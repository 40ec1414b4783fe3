"""The reference's retargeting and ZMP equations on tiny hand-computable cases.

Each test writes the expected number from the reference text
(/work/shared/reference/penco_whole_body_teleoperation.md, §2-3), not from the code's own
helpers (no ``Retargeter.ratios``, no ``zmp_axis_closed_form`` on the expected side).

Numbers chosen for arithmetic by hand: g = 9.81 m/s^2, h = 0.981 m, delta = 0.01 s, so
delta g / h = 0.1 [1/s] and h / g = 0.1 [s^2].
"""

from dataclasses import replace

import numpy as np
import pytest

from retarget import quat, skeleton
from retarget.calibration import calibrate
from retarget.mapping import Retargeter
from retarget.references import SIGNAL_SLICES
from retarget.robot_target import RobotTarget
from retarget.zmp import ZmpCorrector, zmp_axis_closed_form

TARGET = RobotTarget.approximate_icub()
G, H, DT = 9.81, 0.981, 0.01          # delta g / h = 0.1, h / g = 0.1
SQUARE = np.array([[-0.1, -0.1], [0.1, -0.1], [0.1, 0.1], [-0.1, 0.1]])


# ------------------------------------------------------------------ Eqs. 2.14-2.15
def test_eq_2_15_closed_form_on_one_axis_by_hand():
    """[NOTE] closed form: z* = clip(x - h/(delta g) (v_ref - v^m), z_min, z_max),
    v = v^m + (delta g / h)(x - z*). x = 0, v^m = 0, v_ref = 0.05: the free ZMP is
    -0.05 / 0.1 = -0.5 m, clipped to -0.1 m; v = 0.1 * 0.1 = 0.01 m/s."""
    z, v = zmp_axis_closed_form(0.0, 0.05, 0.0, H, DT, -0.1, 0.1, gravity=G)
    assert z == pytest.approx(-0.1, abs=1e-12) and v == pytest.approx(0.01, abs=1e-12)
    # Inside the bounds the desired velocity is met exactly: v_ref = 0.005 -> z = -0.05.
    z, v = zmp_axis_closed_form(0.0, 0.005, 0.0, H, DT, -0.1, 0.1, gravity=G)
    assert z == pytest.approx(-0.05, abs=1e-12) and v == pytest.approx(0.005, abs=1e-12)
    # Measured state enters with the reference's signs: x^m = 0.02, v^m = 0.01, v_ref = 0.01
    # -> z = 0.02 - (0.01 - 0.01) / 0.1 = 0.02 (the CoM keeps its velocity over its ZMP).
    z, v = zmp_axis_closed_form(0.02, 0.01, 0.01, H, DT, -0.1, 0.1, gravity=G)
    assert z == pytest.approx(0.02, abs=1e-12) and v == pytest.approx(0.01, abs=1e-12)


@pytest.mark.parametrize("bounds", ["polygon", "box"])
def test_literal_corrector_step_by_hand(bounds):
    """ZmpCorrector without the capture-point addition is Eq. 2.15 on both axes, the
    corrected reference integrated as x <- x + delta v. Desired velocity (0.05, 0.005):
    free ZMP (-0.5, -0.05), x clipped to the polygon edge at -0.1, y met; v = (0.01, 0.005);
    x_c = (0.0001, 0.00005). The chosen ZMP is the LIP ZMP of Eq. 2.14, x - (h/g) x_ddot,
    with x_ddot = (v - v^m) / delta = (1.0, 0.5): (0 - 0.1, 0 - 0.05)."""
    zc = ZmpCorrector(dt=DT, margin=0.0, bounds=bounds, gravity=G, capture_point=False)
    zc.reset(np.zeros(2))
    v_ref = np.array([0.05, 0.005])
    out = zc.step(DT * v_ref, v_ref, [0.0, 0.0, H], [0.0, 0.0, 0.0], SQUARE)
    np.testing.assert_allclose(zc.zmp, [-0.1, -0.05], atol=1e-12)
    np.testing.assert_allclose(zc.com_velocity, [0.01, 0.005], atol=1e-12)
    np.testing.assert_allclose(out, [0.0001, 0.00005], atol=1e-15)
    assert zc.saturated
    x_ddot = (zc.com_velocity - 0.0) / DT
    np.testing.assert_allclose(zc.zmp, 0.0 - (H / G) * x_ddot, atol=1e-12)        # Eq. 2.14


def test_the_margin_moves_the_bound_inwards():
    """A 2 cm margin on the +-0.1 m square: the same step clips x at -0.08 m."""
    zc = ZmpCorrector(dt=DT, margin=0.02, gravity=G, capture_point=False)
    zc.reset(np.zeros(2))
    v_ref = np.array([0.05, 0.0])
    zc.step(DT * v_ref, v_ref, [0.0, 0.0, H], [0.0, 0.0, 0.0], SQUARE)
    np.testing.assert_allclose(zc.zmp, [-0.08, 0.0], atol=1e-12)
    np.testing.assert_allclose(zc.com_velocity, [0.008, 0.0], atol=1e-12)


def test_the_measured_height_is_the_pendulum_length():
    """h^m of Eq. 2.15 is the measured CoM height: at h = 0.4905 m (half), delta g / h = 0.2,
    so the same clipped ZMP gives twice the velocity."""
    zc = ZmpCorrector(dt=DT, margin=0.0, gravity=G, capture_point=False)
    zc.reset(np.zeros(2))
    v_ref = np.array([0.05, 0.0])
    zc.step(DT * v_ref, v_ref, [0.0, 0.0, H / 2], [0.0, 0.0, 0.0], SQUARE)
    np.testing.assert_allclose(zc.zmp, [-0.1, 0.0], atol=1e-12)
    np.testing.assert_allclose(zc.com_velocity, [0.02, 0.0], atol=1e-12)


# -------------------------------------------------------------- Eqs. 2.1, 2.11-2.13
def _standing(frames: list[dict], roots=None):
    n = len(frames)
    keys = {k for f in frames for k in f}
    local = {k: np.stack([f.get(k, quat.IDENTITY) for f in frames]) for k in keys}
    return skeleton.standard_body_motion(np.arange(n) * 0.01, local, roots)


def test_eq_2_11_ratio_is_robot_over_human_npose_length():
    """alpha = l_R / l_H with the human in the N-pose: the waist height alpha is the robot's
    waist height over the human's N-pose pelvis height, measured here straight from the
    positions (the standard body stands in the N-pose). A robot whose waist is half as high
    as the person's moves its waist by half the person's pelvis displacement (Eq. 2.12)."""
    n0 = _standing([{}])
    human_waist = float(n0.position("pelvis")[0, 2])
    c = calibrate(n0)
    assert c.waist_height == pytest.approx(human_waist, abs=1e-9)
    half = replace(TARGET, waist_height=0.5 * human_waist)
    r = Retargeter(half, calibration=c)
    pelvis0 = n0.position("pelvis")[0]
    squat = _standing([{}, {}], roots=np.stack([pelvis0, pelvis0 - [0.0, 0.0, 0.2]]))
    out = r.retarget_motion(squat).values[:, SIGNAL_SLICES["waist_height"]][:, 0]
    np.testing.assert_allclose(out, [half.waist_height, half.waist_height - 0.1], atol=1e-12)


def test_eq_2_12_hand_displacement_scaled_by_the_arm_ratio():
    """p_R = p_R^0 + alpha (p_H - p_H^0), alpha = robot arm / human arm (shoulder -> wrist in
    the N-pose, measured from the positions). Only the right arm moves (60 degrees of
    shoulder flexion), so only the arm term of the chain mapping is non-zero."""
    n0 = _standing([{}])
    shoulder, elbow, wrist = (n0.position(s)[0] for s in ("right_upper_arm", "right_forearm", "right_hand"))
    human_arm = np.linalg.norm(elbow - shoulder) + np.linalg.norm(wrist - elbow)
    motion = _standing([{}, {"right_upper_arm": quat.about_y(-np.pi / 3)}])
    r = Retargeter(TARGET, clamp_reach=False)
    r.calibrate(motion)
    out = r.retarget_motion(motion).values[:, SIGNAL_SLICES["right_hand"]]
    d_human = motion.position("right_hand")[1] - motion.position("right_hand")[0]
    np.testing.assert_allclose(out[1] - out[0], TARGET.arm_length / human_arm * d_human, atol=1e-12)


def test_eq_2_1_posture_offsets_about_the_start():
    """q_R = q_R^0 + (q_H - q_H^0): the torso pitched 0.2 rad at the start and 0.5 rad later
    asks the robot for its own start pitch + 0.3 rad."""
    robot = replace(TARGET, torso=np.array([0.1, 0.0, 0.0]))
    motion = _standing([{"t8": quat.about_y(0.2)}, {"t8": quat.about_y(0.5)}])
    r = Retargeter(robot)
    r.calibrate(motion)
    torso = r.retarget_motion(motion).values[:, SIGNAL_SLICES["torso"]]
    np.testing.assert_allclose(torso, [[0.1, 0.0, 0.0], [0.4, 0.0, 0.0]], atol=1e-12)


def test_eq_2_13_head_orientation_with_the_robot_head_upright_at_start():
    """R_R = R_R^0 R_H (R_H^0)^-1 with R_R^0 = identity: a head turned 0.3 rad left at the
    start, then pitched 0.2 rad down in its own frame, gives R_z(0.3) R_y(0.2) R_z(-0.3)."""
    start = quat.about_z(0.3)
    later = quat.mul(quat.about_z(0.3), quat.about_y(0.2))
    motion = _standing([{"head": start}, {"head": later}])
    r = Retargeter(TARGET)
    r.calibrate(motion)
    head = r.retarget_motion(motion).meta["head_orientation"]
    expected = quat.mul(quat.mul(quat.about_z(0.3), quat.about_y(0.2)), quat.about_z(-0.3))
    assert abs(head[0] @ quat.IDENTITY) == pytest.approx(1.0, abs=1e-12)
    assert abs(head[1] @ expected) == pytest.approx(1.0, abs=1e-12)


def test_without_the_additions_the_corrector_is_eq_2_15_iterated():
    """capture_point=False, recovery_time=inf: v_des = v_ref, and after a saturated step
    the corrected reference keeps its offset (the thesis' behaviour the recovery term of
    the default removes). On the robot-free rollout x^m = x_c, v^m = v*: by hand, on x,
    step 1 as above (x_c = 0.0001, v = 0.01); step 2 asks v_ref = 0 from x^m = 0.0001,
    v^m = 0.01: z = 0.0001 - (0 - 0.01) / 0.1 = 0.1001 -> clipped to 0.1,
    v = 0.01 + 0.1 (0.0001 - 0.1) = 0.00001, x_c = 0.0001 + 0.0000001."""
    zc = ZmpCorrector(dt=DT, margin=0.0, gravity=G, capture_point=False, recovery_time=np.inf)
    zc.reset(np.zeros(2))
    zc.step([0.0005, 0.0], [0.05, 0.0], [0.0, 0.0, H], [0.0, 0.0, 0.0], SQUARE)
    out = zc.step([0.0005, 0.0], [0.0, 0.0], [0.0001, 0.0, H], [0.01, 0.0, 0.0], SQUARE)
    np.testing.assert_allclose(zc.zmp, [0.1, 0.0], atol=1e-12)
    np.testing.assert_allclose(zc.com_velocity, [0.00001, 0.0], atol=1e-12)
    np.testing.assert_allclose(out, [0.0001001, 0.0], atol=1e-15)
    # Held there: a still reference 0.4 mm away is never reached (v_des = v_ref = 0).
    for _ in range(50):
        out = zc.step([0.0005, 0.0], [0.0, 0.0], [*out, H], [*zc.com_velocity, 0.0], SQUARE)
    assert abs(out[0] - 0.0005) > 3e-4
