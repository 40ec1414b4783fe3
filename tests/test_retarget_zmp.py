"""ZMP/LIP correction of the CoM reference (thesis Eq. 2.15 and its closed form)."""

import numpy as np
import pytest
from scipy.optimize import minimize

from retarget.polygon import contains, convex_hull, halfplanes, project, shrink
from retarget.robot_target import RobotTarget
from retarget.zmp import GRAVITY, ZmpCorrector, zmp_axis_closed_form

DT, H = 0.01, 0.5


def test_closed_form_equals_a_brute_force_scalar_qp():
    rng = np.random.default_rng(0)
    grid = np.linspace(0.0, 1.0, 200001)
    for _ in range(200):
        x_m, v_des, v_m = rng.uniform(-0.1, 0.1), rng.uniform(-1, 1), rng.uniform(-0.5, 0.5)
        z_min, z_max = sorted(rng.uniform(-0.1, 0.1, 2))
        h = rng.uniform(0.3, 0.9)
        z, v = zmp_axis_closed_form(x_m, v_des, v_m, h, DT, z_min, z_max)
        zs = z_min + grid * (z_max - z_min)                                  # brute force
        cost = (v_des - (v_m + DT * GRAVITY / h * (x_m - zs))) ** 2
        k = np.argmin(cost)
        assert abs(z - zs[k]) <= (z_max - z_min) / 200000 + 1e-12
        assert (v_des - v) ** 2 <= cost[k] + 1e-12
        assert z_min <= z <= z_max


def test_polygon_projection_equals_a_general_qp():
    """2-D Eq. 2.15 (min |v_des - v|^2, z in polygon) solved by SLSQP vs the projection."""
    rng = np.random.default_rng(1)
    for _ in range(30):
        poly = convex_hull(rng.uniform(-0.1, 0.1, size=(8, 2)))
        n, b = halfplanes(poly)
        x_m, v_m, v_des = rng.uniform(-0.05, 0.05, 2), rng.uniform(-0.3, 0.3, 2), rng.uniform(-1, 1, 2)
        k = DT * GRAVITY / H
        z_free = x_m - (v_des - v_m) / k
        ours = project(poly, z_free)

        def cost(z):
            r = v_des - (v_m + k * (x_m - z))
            return r @ r, 2 * k * r
        res = minimize(cost, poly.mean(0), jac=True, method="SLSQP",
                       constraints=[{"type": "ineq", "fun": lambda z: b - n @ z, "jac": lambda z: -n}],
                       options={"ftol": 1e-15, "maxiter": 500})
        assert res.success
        np.testing.assert_allclose(ours, res.x, atol=1e-6)


def test_shrunk_polygon_keeps_the_margin():
    poly = convex_hull(RobotTarget.approximate_icub().support_polygon)
    inner = shrink(poly, 0.01)
    n, b = halfplanes(poly)
    assert np.all(n @ inner.T <= b[:, None] - 0.01 + 1e-12)
    np.testing.assert_allclose(inner.min(0), poly.min(0) + 0.01)
    assert len(shrink(poly, 0.5)) == 1                     # eaten: collapses to the centroid


def lip_rollout(corrector, x_ref, v_ref, polygon, x0):
    """Robot that realises the corrected velocity exactly (perfect tracking, LIP)."""
    x, v = np.array([*x0, H]), np.zeros(3)
    out, zmps, states = [], [], []
    for k in range(len(x_ref)):
        states.append((x.copy(), v.copy()))
        c = corrector.step(x_ref[k], v_ref[k], x, v, polygon)
        out.append(c)
        zmps.append(corrector.zmp.copy())
        v = np.array([*corrector.com_velocity, 0.0])
        x = np.array([*(x[:2] + DT * v[:2]), H])
    return np.array(out), np.array(zmps), states


def test_passes_through_when_feasible():
    target = RobotTarget.approximate_icub()
    t = np.arange(300) * DT
    # Smooth and starting at rest: feasible everywhere.
    x_ref = np.stack([0.02 + 0.01 * (1 - np.cos(t)), 0.03 * (1 - np.cos(0.5 * t))], axis=1)
    v_ref = np.vstack([[0.0, 0.0], np.diff(x_ref, axis=0) / DT])      # consistent, backward
    zc = ZmpCorrector(dt=DT, margin=0.01)
    zc.reset(x_ref[0])
    out, _, _ = lip_rollout(zc, x_ref, v_ref, target.support_polygon, x_ref[0])
    np.testing.assert_allclose(out, x_ref, atol=1e-12)
    assert not zc.saturated


@pytest.mark.parametrize("bounds", ["polygon", "box"])
def test_keeps_the_zmp_in_the_support_polygon(bounds):
    target = RobotTarget.approximate_icub()
    inner = shrink(convex_hull(target.support_polygon), 0.01)
    n = 400
    # A violent reference: square-wave sway and a jump onto the right foot and back.
    t = np.arange(n) * DT
    x_ref = np.stack([0.02 + 0.03 * np.sign(np.sin(2 * np.pi * 0.5 * t)),
                      np.where((t > 0.5) & (t < 2.0), -0.07, 0.0)], axis=1)
    v_ref = np.vstack([[0.0, 0.0], np.diff(x_ref, axis=0) / DT])
    # Uncorrected, the reference's accelerations put the LIP ZMP metres outside.
    assert np.max(np.abs(np.diff(v_ref, axis=0) / DT)) * H / GRAVITY > 0.5
    zc = ZmpCorrector(dt=DT, margin=0.01, bounds=bounds)
    out, zmps, states = lip_rollout(zc, x_ref, v_ref, target.support_polygon, x_ref[0])
    for z in zmps:
        assert contains(inner, z, tol=1e-9)
    # The chosen ZMP is the LIP ZMP of the realised motion: x - h/g x_ddot (Euler).
    for k in range(1, n - 1):
        (x, v), (_, v_next) = states[k], states[k + 1]
        lip = x[:2] - H / GRAVITY * (v_next[:2] - v[:2]) / DT
        np.testing.assert_allclose(lip, zmps[k], atol=1e-9)
    # The capture point never leaves the polygon: the CoM stays recoverable.
    omega = np.sqrt(GRAVITY / H)
    for x, v in states:
        assert contains(inner, x[:2] + v[:2] / omega, tol=1e-9)


def test_returns_to_a_stepped_reference_without_overshoot():
    target = RobotTarget.approximate_icub()
    t = np.arange(300) * DT
    x_ref = np.stack([np.where(t > 0.1, 0.06, 0.0), np.where(t > 0.1, -0.06, 0.0)], axis=1)
    v_ref = np.vstack([[0.0, 0.0], np.diff(x_ref, axis=0) / DT])
    zc = ZmpCorrector(dt=DT, margin=0.01)
    out, _, _ = lip_rollout(zc, x_ref, v_ref, target.support_polygon, (0.0, 0.0))
    assert np.max(np.abs(out)) <= 0.06 + 1e-6
    np.testing.assert_allclose(out[t > 1.2], x_ref[t > 1.2], atol=2e-3)


def test_the_literal_greedy_correction_can_diverge_which_the_capture_point_prevents():
    target = RobotTarget.approximate_icub()
    t = np.arange(300) * DT
    x_ref = np.stack([np.where(t > 0.1, 0.06, 0.0), np.zeros_like(t)], axis=1)
    v_ref = np.vstack([[0.0, 0.0], np.diff(x_ref, axis=0) / DT])
    literal = ZmpCorrector(dt=DT, margin=0.01, recovery_time=0.01, capture_point=False)
    safe = ZmpCorrector(dt=DT, margin=0.01, recovery_time=0.01)
    out_literal, _, _ = lip_rollout(literal, x_ref, v_ref, target.support_polygon, (0.0, 0.0))
    out_safe, _, _ = lip_rollout(safe, x_ref, v_ref, target.support_polygon, (0.0, 0.0))
    assert np.max(np.abs(out_literal)) > 1.0
    assert np.max(np.abs(out_safe)) < 0.1


def test_rotated_feet_polygon_is_respected():
    """Feet turned 45 degrees: the per-axis box would allow ZMPs outside; the polygon does not."""
    c, s = np.cos(np.pi / 4), np.sin(np.pi / 4)
    rot = np.array([[c, s], [-s, c]])
    polygon = RobotTarget.approximate_icub().support_polygon @ rot
    zc = ZmpCorrector(dt=DT, margin=0.005)
    x_ref = np.tile([0.15, 0.15], (100, 1))                             # far outside
    out, zmps, _ = lip_rollout(zc, x_ref, np.zeros((100, 2)), polygon, (0.0, 0.0))
    inner = shrink(convex_hull(polygon), 0.005)
    assert all(contains(inner, z, tol=1e-9) for z in zmps)
    assert zc.saturated


def test_step_validates_and_uses_the_measured_height():
    zc = ZmpCorrector(dt=DT, margin=0.0, capture_point=False)
    poly = np.array([[-0.1, -0.1], [0.1, -0.1], [0.1, 0.1], [-0.1, 0.1]])
    zc.reset(np.zeros(2))
    zc.step([0.05, 0.0], [0.0, 0.0], [0.0, 0.0, 0.3], [0.0, 0.0, 0.0], poly)
    v_low = zc.com_velocity.copy()
    zc.reset(np.zeros(2))
    zc.step([0.05, 0.0], [0.0, 0.0], [0.0, 0.0, 1.2], [0.0, 0.0, 0.0], poly)
    # A 4x higher CoM reaches the ZMP bound with a 4x smaller acceleration.
    assert zc.saturated and zc.com_velocity[1] == 0.0
    np.testing.assert_allclose(v_low[0] / zc.com_velocity[0], 4.0, rtol=1e-9)
    with pytest.raises(ValueError):
        ZmpCorrector(dt=0.0)
    with pytest.raises(ValueError):
        ZmpCorrector(bounds="circle")


def test_prefilter_passes_a_feasible_reference_and_bounds_a_step():
    """ZmpPrefilter (Eq. 2.15 on its own state): a slow reference passes through; a step
    of the CoM reference is turned into a motion whose LIP ZMP stays in the polygon."""
    from retarget.zmp import ZmpPrefilter

    polygon = np.array([[-0.05, -0.11], [0.10, -0.11], [0.10, 0.11], [-0.05, 0.11]])
    height, dt, g = 0.55, 0.01, 9.81
    # The literal Eq. 2.15 pre-filter: no CoM clamp, no smoothing, no ZMP slew limit.
    literal = dict(com_margin=0.0, smoothing_frequency=None)
    slow = ZmpPrefilter(dt=dt, margin=0.01, **literal)
    ref = [np.array([0.01 * np.sin(0.5 * k * dt), 0.0]) for k in range(300)]
    out = np.array([slow.step(r, height, polygon) for r in ref])
    assert np.abs(out - np.array(ref)).max() < 2e-3

    step = ZmpPrefilter(dt=dt, margin=0.01, **literal)
    out = np.array([step.step(np.array([0.0, 0.08 if k > 10 else 0.0]), height, polygon) for k in range(400)])
    acc = np.gradient(np.gradient(out[:, 1], dt), dt)
    zmp_y = out[:, 1] - acc * height / g
    assert np.all(np.isfinite(out))
    assert zmp_y.max() < 0.11 + 0.005 and zmp_y.min() > -0.11 - 0.005
    assert abs(out[-1, 1] - 0.08) < 0.005  # it gets there


def _lip_zmp(out: np.ndarray, dt: float, height: float, g: float = 9.81) -> np.ndarray:
    acc = np.gradient(np.gradient(out, dt, axis=0), dt, axis=0)
    return out - acc * height / g


def test_default_prefilter_keeps_the_com_inside_and_its_zmp_smooth():
    """The robot-station defaults: a CoM reference far outside the feet (a human who
    steps) is held com_margin inside the polygon, the LIP ZMP stays margin inside, and
    the ZMP never jumps (bounded acceleration of the smoothed reference)."""
    from retarget.zmp import ZmpPrefilter

    polygon = np.array([[-0.05, -0.11], [0.10, -0.11], [0.10, 0.11], [-0.05, 0.11]])
    height, dt = 0.55, 0.01
    f = ZmpPrefilter(dt=dt)
    # A ramp to 0.4 m sideways and back, then a step forward: both far outside.
    ref = [np.array([0.0, min(0.4, 0.004 * k) if k < 300 else 0.0]) if k < 450 else np.array([0.3, 0.0])
           for k in range(700)]
    out, saturated = [], []
    for r in ref:
        out.append(f.step(r, height, polygon))
        saturated.append(f.corrector.saturated)
    out, saturated = np.array(out), np.array(saturated)
    assert np.all(np.isfinite(out))
    # Eq. 2.15 is the safety net: the smoothed reference rarely needs it.
    assert saturated.mean() < 0.05
    inner_y = 0.11 - f.com_margin
    # (the acceleration- and jerk-limited smoothing filter overshoots a 30 cm step by < 1.5 cm)
    assert out[:, 1].max() <= inner_y + 0.015 and out[:, 0].max() <= 0.10 - f.com_margin + 0.015
    zmp = _lip_zmp(out, dt, height)[2:-2]
    assert np.abs(zmp[:, 1]).max() <= 0.11 - f.corrector.margin + 2e-3
    # Bounded acceleration: the LIP ZMP is within max_acceleration * h / g of the CoM,
    # and bounded jerk: it moves at most max_jerk * h / g * dt per step.
    assert np.abs(zmp - out[2:-2]).max() <= f.max_acceleration * height / 9.81 + 2e-3
    # (where Eq. 2.15 did not have to intervene)
    steps = np.abs(np.diff(zmp, axis=0)).max(axis=1)
    calm = ~(saturated[2:-3] | saturated[3:-2] | saturated[1:-4] | saturated[4:-1])
    assert steps[calm].max() <= f.max_jerk * height / 9.81 * dt + 1e-3
    assert abs(out[280, 1] - inner_y) < 5e-3    # it gets as far as it may
