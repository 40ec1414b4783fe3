"""Tag pose filtering: One-Euro behaviour, orientation gated by its own noise, hold on loss."""

from __future__ import annotations

import math

import numpy as np
import pinocchio as pin

from teleop.jog.filtering import OneEuroFilter, OrientationOneEuroFilter, PoseFilter

FPS = 60.0
R0 = np.diag([1.0, -1.0, -1.0])


def _noisy_rotation(rng, sigma_deg):
    return R0 @ pin.exp3(rng.normal(0.0, math.radians(sigma_deg), 3))


def test_one_euro_smooths_jitter_at_rest():
    rng = np.random.default_rng(0)
    f = OneEuroFilter(min_cutoff_hz=1.0, beta=10.0)
    raw = np.array([0.1, 0.2, 0.5]) + rng.normal(0.0, 0.002, (300, 3))
    out = np.array([f(k / FPS, x) for k, x in enumerate(raw)])[60:]
    # At rest the cutoff stays near 1 Hz: jitter (2 mm) drops several-fold.
    assert np.std(out, axis=0).max() < 0.35 * np.std(raw[60:], axis=0).min()
    assert np.allclose(out.mean(axis=0), [0.1, 0.2, 0.5], atol=0.001)


def test_one_euro_lag_shrinks_with_speed_coefficient():
    """beta raises the cutoff with speed: a ramp is followed with less lag."""
    def lag(beta):
        f = OneEuroFilter(min_cutoff_hz=1.0, beta=beta)
        times = np.arange(120) / FPS
        out = [f(t, np.array([0.3 * t])) for t in times]  # 0.3 m/s ramp
        return 0.3 * times[-1] - out[-1][0]

    slow, fast = lag(0.0), lag(20.0)
    assert slow > 0.03          # a plain 1 Hz low-pass lags 0.3 m/s x ~0.16 s
    assert fast < 0.4 * slow


def test_one_euro_ignores_out_of_order_samples():
    f, reference = OneEuroFilter(), OneEuroFilter()   # the reference never sees the late sample
    for filt in (f, reference):
        filt(0.0, np.zeros(3))
        last = filt(0.1, np.ones(3))
    held = f(0.05, 10 * np.ones(3))
    assert np.all(held < 1.0)
    np.testing.assert_array_equal(held, last)          # the estimate is held as it was
    np.testing.assert_array_equal(f(0.1, 5 * np.ones(3)), last)   # a repeated time is no newer
    # ... and the late sample left no trace: the next samples filter as if it never came.
    for t, x in ((0.2, 2 * np.ones(3)), (0.25, np.full(3, 3.0))):
        np.testing.assert_array_equal(f(t, x), reference(t, x))


def test_orientation_filter_converges_to_a_rotation():
    f = OrientationOneEuroFilter()
    target = R0 @ pin.exp3(np.array([0.0, 0.0, 0.5]))
    out = R0
    for k in range(120):
        out = f(k / FPS, R0 if k == 0 else target)
    assert np.linalg.norm(pin.log3(out.T @ target)) < math.radians(1)
    assert np.allclose(out.T @ out, np.eye(3), atol=1e-9)


def test_orientation_gate_opens_on_quiet_tag_and_closes_on_noisy_one():
    rng = np.random.default_rng(1)
    pf = PoseFilter(max_noise_deg=3.0)
    p = np.array([0.0, 0.0, 0.5])
    for k in range(90):  # quiet: 0.5 deg
        out = pf.update(k / FPS, p, _noisy_rotation(rng, 0.5))
    assert out.orientation_valid
    trusted = out.rotation.copy()
    for k in range(90, 240):  # noisy: 8 deg
        out = pf.update(k / FPS, p, _noisy_rotation(rng, 8.0))
    assert not out.orientation_valid
    assert out.orientation_noise_deg > 3.0
    # While gated, the last trusted orientation is held (not the noisy one).
    assert np.linalg.norm(pin.log3(trusted.T @ out.rotation)) < math.radians(2)
    for k in range(240, 400):  # quiet again: gate reopens (hysteresis)
        out = pf.update(k / FPS, p, _noisy_rotation(rng, 0.3))
    assert out.orientation_valid


def test_single_orientation_flip_rejected_as_outlier():
    """The IPPE planar ambiguity can flip a face-on tag's orientation for one frame."""
    rng = np.random.default_rng(2)
    pf = PoseFilter()
    p = np.array([0.0, 0.0, 0.5])
    for k in range(60):
        out = pf.update(k / FPS, p, _noisy_rotation(rng, 0.3))
    flipped = R0 @ pin.exp3(np.array([math.radians(40), 0.0, 0.0]))
    out = pf.update(60 / FPS, p, flipped)
    assert pf.outliers == 1
    assert np.linalg.norm(pin.log3(R0.T @ out.rotation)) < math.radians(2)


def test_tag_lost_holds_last_target_then_restarts_on_reacquisition():
    pf = PoseFilter(reset_after_s=1.0)
    assert pf.update(0.0, None) is None  # nothing seen yet: nothing to hold
    for k in range(60):
        out = pf.update(k / FPS, np.array([0.1, 0.0, 0.5]), R0)
    last = out.position.copy()
    for k in range(60, 200):  # lost for 2.3 s
        held = pf.update(k / FPS, None)
        assert not held.fresh
        assert np.array_equal(held.position, last)
    assert held.age_s > 2.0
    # Seen again elsewhere after the reset delay: the target goes there at once (the
    # filter restarted) instead of being dragged across by the low-pass.
    out = pf.update(200 / FPS, np.array([-0.1, 0.05, 0.6]), R0)
    assert out.fresh
    assert np.allclose(out.position, [-0.1, 0.05, 0.6])


def _angle_deg(A: np.ndarray, B: np.ndarray) -> float:
    return math.degrees(float(np.linalg.norm(pin.log3(A.T @ B))))


def test_a_quick_real_turn_is_followed_not_rejected_for_good():
    """A 90 degree turn within 0.1 s, then held: the samples agree with each other, so after
    ``turn_confirm_s`` they are a turn, not outliers. Before, every later sample was rejected
    (the filter stayed 90 degrees off, orientation invalid) for as long as the tag was in view."""
    pf = PoseFilter()
    p = np.array([0.0, 0.0, 0.5])
    for k in range(60):
        pf.update(k / FPS, p, R0)
    turned = R0 @ pin.exp3(np.array([0.0, 0.0, math.radians(90.0)]))
    for k in range(60, 66):
        pf.update(k / FPS, p, R0 @ pin.exp3(np.array([0.0, 0.0, math.radians(90.0 * (k - 59) / 6)])))
    for k in range(66, 66 + 5 * int(FPS)):
        out = pf.update(k / FPS, p, turned)
    assert pf.turns_confirmed == 1
    assert _angle_deg(out.rotation, turned) < 1.0 and out.orientation_valid


def test_alternating_flips_are_never_taken_for_a_turn():
    pf = PoseFilter()
    p = np.array([0.0, 0.0, 0.5])
    flipped = R0 @ pin.exp3(np.array([math.radians(40), 0.0, 0.0]))
    for k in range(60):
        pf.update(k / FPS, p, R0)
    for k in range(60, 60 + 3 * int(FPS)):
        out = pf.update(k / FPS, p, flipped if k % 2 else R0)
    assert pf.turns_confirmed == 0 and pf.outliers > 0
    assert _angle_deg(out.rotation, R0) < 1.0


def test_position_only_measurements_hold_the_orientation():
    """A measurement without a rotation (orientation off) used to crash the filter."""
    pf = PoseFilter()
    out = pf.update(0.0, np.array([0.0, 0.0, 0.5]))
    assert out is not None and not out.orientation_valid
    np.testing.assert_array_equal(out.rotation, np.eye(3))
    for k in range(1, 30):
        out = pf.update(k / FPS, np.array([0.01 * k, 0.0, 0.5]))
    assert out.position[0] > 0.05 and not out.orientation_valid
