"""The delay-compensation equations of the reference (§5.7-5.9; thesis Eqs. 5.13-5.27) on
tiny hand-computable cases, and the compensator's public API on bad input.

The compensator is driven with a stub estimator whose prediction at motion time s is s on
every signal, so what the compensator asks for (Eq. 5.24) can be read off its output.
"""

from __future__ import annotations

import math
import random
from types import SimpleNamespace

import numpy as np
import pytest

from retarget.references import FLAT_SIZE
from teleop.net.delay import THESIS_JITTER_RATIO, DelayLine, DirectionModel, LinkModel
from teleop.prescient.blending import STEP_UNITS, SigmoidBlend, blend_steps, sigmoid_weight
from teleop.prescient.compensator import CompensationState, CompensatorConfig, PrescientCompensator

HAND_X = 3          # a hand signal: drives onset detection
POSTURE = 10        # a posture signal [rad]


class _StubEstimator:
    """Confident estimator whose prediction at motion time s is s on every signal."""

    def reset(self) -> None:
        pass

    def update(self, t, y, mask=None):
        return SimpleNamespace(task="a", task_index=0, task_probabilities=np.array([1.0]), speed=1.0,
                               phase=0.5, out_of_distribution=False)

    def predict_many(self, times, full_cov=False):
        times = np.asarray(times, dtype=float)
        # Certain (variance 0): the change shrinkage (CompensatorConfig.shrunk_signals) keeps it.
        return np.repeat(times[:, None], FLAT_SIZE, axis=1), np.zeros((len(times), FLAT_SIZE))


#: No smoothing, one-tick blends, no rate limit: the output is the prediction itself.
_BARE = CompensatorConfig(blend_max_steps=1, smoothing_time=0.0, max_speed_cartesian=1e9, max_speed_angular=1e9)


def _compensator(config: CompensatorConfig = _BARE) -> PrescientCompensator:
    comp = PrescientCompensator(None, config)
    comp.estimator = _StubEstimator()
    return comp


def _drive(comp, ticks: int, tau_b: float, delays, dt: float = 0.01):
    """The operator's hand moves at 0.5 m/s from t = 0; the sample of time s arrives at
    s + delays(s). Returns [(t, output)] of one step per tick."""
    pending = sorted((k * dt + delays(k * dt), k * dt) for k in range(ticks))
    outs, i = [], 0
    for k in range(ticks):
        t = k * dt
        while i < len(pending) and pending[i][0] <= t + 1e-12:
            arrival, stamp = pending[i]
            y = np.zeros(FLAT_SIZE)
            y[HAND_X] = 0.5 * stamp
            comp.observe(stamp, y, arrival_op=arrival)
            i += 1
        outs.append((t, comp.step(t, tau_b)))
    return outs


@pytest.mark.parametrize("jitter", [0.0, 0.05])
def test_the_prediction_is_read_at_t_star_plus_tau_f_plus_tau_b(jitter):
    """Eq. 5.24 with Eq. 5.13: mu(t* + tau_f + tau_b), t* = t - tau_f - t_0, i.e. the current
    time plus the backward delay, counted from the onset, whatever the forward delay of the
    newest sample (jittered and reordered here)."""
    rng = random.Random(1)
    draws = {}
    delays = (lambda s: 0.3) if jitter == 0 else (lambda s: draws.setdefault(s, 0.3 + rng.gauss(0, jitter)))
    comp = _compensator()
    tau_b = 0.5
    outs = _drive(comp, 200, tau_b, delays)
    t0 = comp._t0
    assert 0.0 <= t0 <= 0.1
    predicting = [(t, o) for t, o in outs if o.state is CompensationState.PREDICTING]
    assert len(predicting) > 50
    for t, o in predicting:
        assert o.motion_time == pytest.approx(t + tau_b - t0)
        np.testing.assert_allclose(o.references[POSTURE], t + tau_b - t0)


def test_blend_weight_is_the_sigmoid_of_eq_5_26():
    """beta_n(i) = 1 / (1 + exp(-12 (i / dy_n - 1/2))), i = 0 .. dy_n (1 from dy_n on)."""
    steps = np.array([10.0, 4.0])
    for i in range(10):
        expected = [1 / (1 + math.exp(-12 * (i / 10 - 0.5))), 1 / (1 + math.exp(-12 * (i / 4 - 0.5))) if i < 4 else 1]
        np.testing.assert_allclose(sigmoid_weight(i, steps), expected)
    assert sigmoid_weight(5, steps)[0] == 0.5
    np.testing.assert_array_equal(sigmoid_weight(10, steps), [1.0, 1.0])


def test_blend_steps_count_millimetres_and_tenths_of_a_degree():
    """dy_n is the initial difference in mm (Cartesian) or 0.1 degree (postures), one step
    per unit; an exact whole number of units is that many steps (0.7 degrees took 8)."""
    diff = np.zeros(FLAT_SIZE)
    diff[HAND_X], diff[POSTURE], diff[POSTURE + 1] = 0.012, np.radians(0.7), np.radians(-2.35)
    steps = blend_steps(diff)
    assert steps[HAND_X] == 12
    assert steps[POSTURE] == 7
    assert steps[POSTURE + 1] == 24          # 23.5 tenths: a started step counts
    assert steps[0] == 1                     # no difference: one step
    assert blend_steps(np.full(FLAT_SIZE, 10.0), max_steps=100).max() == 100
    np.testing.assert_array_equal(blend_steps(diff * 6, STEP_UNITS * 6)[[HAND_X, POSTURE]], [12, 7])


def test_blend_in_and_out_mix_the_current_samples_per_dimension():
    """Eq. 5.25 y' = (1 - beta) y_d + beta y_p, Eq. 5.27 y' = (1 - beta) Y_p + beta y_d,
    each dimension with its own number of steps."""
    y_from = np.zeros(FLAT_SIZE)
    y_to = np.zeros(FLAT_SIZE)
    y_to[HAND_X], y_to[POSTURE] = 0.004, np.radians(1.0)        # 4 and 10 steps
    blend = SigmoidBlend(y_from, y_to)
    assert blend.steps[HAND_X] == 4 and blend.steps[POSTURE] == 10
    for i in range(10):
        moved_from, moved_to = y_from + 0.001 * i, y_to + 0.002 * i    # current samples
        out = blend.step(moved_from, moved_to)
        beta = sigmoid_weight(i, blend.steps)
        np.testing.assert_allclose(out, (1 - beta) * moved_from + beta * moved_to)
        assert blend.done == (i == 9)


def test_scalar_conditioning_follows_eqs_5_10_to_5_12():
    """L = Sigma_w phi (Sigma_y + phi^T Sigma_w phi)^-1, mu' = mu + L (y - phi^T mu),
    Sigma' = Sigma_w - L phi^T Sigma_w, on one signal with two basis functions."""
    from promp.basis import RBFBasis
    from promp.model import GaussianWeights, ProMP
    from promp.posterior import StructuredPosterior

    basis = RBFBasis(2, margin_factor=0.0)
    phi = basis(0.3)
    mu, sigma_y, y = np.array([1.0, 2.0]), 0.1, 3.0
    for cov, structured in ((np.diag([0.5, 0.2]), False), (0.5 * np.eye(2), True)):
        gain = cov @ phi / (sigma_y + phi @ cov @ phi)
        if structured:
            promp = ProMP(basis, mu[None], noise_var=np.array([sigma_y]), durations=np.array([1.0]),
                          low_rank=np.zeros((1, 2, 1)), block_var=np.array([0.5]))
            post = StructuredPosterior(promp).condition(phi[None], np.array([[y]]))
            mean, new_cov = post.mean_weights[0], post.dense_cov()
        else:
            belief = GaussianWeights(mu[None], cov)
            belief.update(phi, np.array([y]), noise_var=sigma_y)
            mean, new_cov = belief.mean[0], belief.cov
        np.testing.assert_allclose(mean, mu + gain * (y - phi @ mu))
        np.testing.assert_allclose(new_cov, cov - np.outer(gain, phi @ cov), atol=1e-15)


def test_delta_sigma_compares_the_observation_with_the_learned_band():
    """§5.3.12: outside when |y - mu(z)| > n_std sigma(z) + margin on a checked signal."""
    from promp.basis import RBFBasis
    from promp.model import ProMP
    from promp.ood import DeltaSigmaTest

    basis = RBFBasis(2, margin_factor=0.0)
    promp = ProMP(basis, np.array([[1.0, 2.0], [0.0, 0.0]]), noise_var=np.array([1e-4, 1e-4]),
                  durations=np.array([1.0]), low_rank=np.zeros((2, 2, 1)), block_var=np.array([0.01, 0.01]))
    z = 0.5                                   # phi = (1/2, 1/2): mean 1.5, std sqrt(0.005)
    std = math.sqrt(0.01 * 0.5)
    test = DeltaSigmaTest([0], margin=0.05, n_std=2.0)
    inside, outside = 1.5 + 2 * std + 0.05 - 1e-6, 1.5 - 2 * std - 0.05 - 1e-6
    assert test.excess(promp, z, np.array([inside, 9.0]))[0] == pytest.approx(-1e-6)
    assert not test.is_outside(promp, z, np.array([inside, 9.0]))   # signal 1 is not checked
    assert test.is_outside(promp, z, np.array([outside, 0.0]))
    assert test.tabulate(promp).is_outside(z, np.array([outside, 0.0]))


def test_the_thesis_delay_model():
    """Eqs. 5.16-5.18: tau_f ~ N(tau_D, (2/15) tau_D), tau_b = tau_D constant."""
    assert THESIS_JITTER_RATIO == pytest.approx(2 / 15)
    link = LinkModel.thesis(0.75)
    assert link.forward.delay == 0.75 and link.forward.sigma == pytest.approx(0.1)
    assert link.backward.delay == 0.75 and link.backward.sigma == 0.0
    line = DelayLine(link.forward, random.Random(3))
    delays = np.array([line.schedule(float(k), 10)[0] - k for k in range(4000)])
    assert delays.mean() == pytest.approx(0.75, abs=0.01)
    assert delays.std() == pytest.approx(0.1, rel=0.05)
    assert DelayLine(link.backward, random.Random(3)).schedule(2.0, 10) == [2.75]
    assert DirectionModel(delay=1.0).sigma == pytest.approx(2 / 15)


# ------------------------------------------------------------------- bad input
def _engaged() -> PrescientCompensator:
    comp = _compensator()
    _drive(comp, 100, 0.5, lambda s: 0.3)
    assert comp.state is CompensationState.PREDICTING
    return comp


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_non_finite_arrival_time_is_refused_and_the_delay_estimate_kept(bad):
    comp = _engaged()
    tau_f, n = comp.tau_f, comp.observed_count
    with pytest.raises(ValueError, match="arrival time"):
        comp.observe(0.75, np.zeros(FLAT_SIZE), arrival_op=bad)
    assert comp.tau_f == tau_f and comp.observed_count == n
    assert math.isfinite(comp.step(1.0, 0.5).tau_f)


def test_a_nan_sample_is_refused():
    comp = _engaged()
    y = np.zeros(FLAT_SIZE)
    y[HAND_X] = np.nan
    with pytest.raises(ValueError, match="finite"):
        comp.observe(0.75, y, arrival_op=1.0)
    with pytest.raises(ValueError, match="finite"):
        comp.observe(float("nan"), np.zeros(FLAT_SIZE), arrival_op=1.0)


def test_a_time_stamp_from_another_clock_is_refused_before_it_becomes_the_delayed_reference():
    comp = _engaged()
    latest = comp.latest_delayed.copy()
    with pytest.raises(ValueError, match="clock error"):
        comp.observe(2e6, np.ones(FLAT_SIZE), arrival_op=2e6)
    np.testing.assert_array_equal(comp.latest_delayed, latest)


@pytest.mark.parametrize("t_now, tau_b, words", [
    (float("nan"), 0.5, "t_op_now"), (float("inf"), 0.5, "t_op_now"),
    (1.0, float("nan"), "tau_b"), (1.0, -0.1, "tau_b"), (1.0, float("inf"), "tau_b")])
@pytest.mark.parametrize("state", ["predicting", "blend_out"])
def test_bad_step_times_and_backward_delays_are_refused_and_change_nothing(t_now, tau_b, words, state):
    comp = _engaged()
    if state == "blend_out":
        comp.state = comp._start_blend_out(comp._out_prev[1], rejected=True)
    before = comp.state
    with pytest.raises(ValueError, match=words):
        comp.step(t_now, tau_b)
    assert comp.state is before
    out = comp.step(1.0, 0.5)
    assert np.all(np.isfinite(out.references))


def test_out_of_order_samples_and_a_clock_stepping_back_are_handled():
    """Older samples feed the estimator but never replace the newest delayed reference; a
    step back of the operator clock allows no change of the output that tick."""
    comp = _engaged()
    newest = comp.latest_delayed.copy()
    comp.observe(0.2, np.full(FLAT_SIZE, 7.0), arrival_op=1.0)
    np.testing.assert_array_equal(comp.latest_delayed, newest)
    first = comp.step(1.0, 0.5)
    back = comp.step(0.9, 0.5)
    np.testing.assert_array_equal(back.references, first.references)
    assert np.all(np.isfinite(comp.step(1.01, 0.5).references))


class _UnsureEstimator(_StubEstimator):
    """The stub's prediction (s at motion time s) with a predictive variance of VAR on every signal."""

    VAR = 0.04

    def predict_many(self, times, full_cov=False):
        mean, _ = super().predict_many(times, full_cov)
        return mean, np.full_like(mean, self.VAR)


@pytest.mark.parametrize("shrunk", [(("com_xy", 1.0), ("left_hand", 0.1)), ()])
def test_an_uncertain_predicted_change_is_shrunk_towards_the_delayed_reference(shrunk):
    """CompensatorConfig.shrunk_signals: output y + g (p - y), g = D^2 / (D^2 + k var), with y
    the newest delayed reference, p the prediction, D the model's change since y (here the
    motion time between them) and k the signal's factor; the others executed as predicted."""
    comp = PrescientCompensator(None, CompensatorConfig(blend_max_steps=1, smoothing_time=0.0, max_speed_cartesian=1e9,
                                                        max_speed_angular=1e9, shrunk_signals=shrunk))
    comp.estimator = _UnsureEstimator()
    outs = _drive(comp, 200, 0.5, lambda s: 0.3)
    t, last = outs[-1]
    assert last.state is CompensationState.PREDICTING
    p = last.motion_time                                   # the stub's prediction, every signal
    change = p - (comp._latest_t - comp._t0)               # since the newest delayed sample (about 0.8 s)
    assert change == pytest.approx(0.8, abs=0.02)
    var = _UnsureEstimator.VAR
    gain_com = change ** 2 / (change ** 2 + var) if shrunk else 1.0
    gain_hand = change ** 2 / (change ** 2 + 0.1 * var) if shrunk else 1.0
    # In _drive the operator's CoM is 0 and its left hand x (HAND_X) 0.5 m/s x the newest time stamp.
    np.testing.assert_allclose(last.references[[0, 1]], gain_com * p, rtol=1e-12)
    y_hand = 0.5 * comp._latest_t
    assert last.references[HAND_X] == pytest.approx(y_hand + gain_hand * (p - y_hand), rel=1e-12)
    assert last.references[6] == pytest.approx(p, rel=1e-12)          # the right hand: not shrunk here
    assert last.references[POSTURE] == pytest.approx(p, rel=1e-12)


@pytest.mark.parametrize("shrunk, words", [
    ((("elbow", 1.0),), "at most once"), ((("com_xy", 1.0), ("com_xy", 2.0)), "at most once"),
    ((("com_xy", 0.0),), "finite number > 0"), ((("left_hand", float("nan")),), "finite number > 0"),
])
def test_shrunk_signals_must_name_signals_once_with_positive_factors(shrunk, words):
    with pytest.raises(ValueError, match=words):
        PrescientCompensator(None, CompensatorConfig(shrunk_signals=shrunk))


def test_a_change_predicted_with_certainty_is_executed_whole():
    """Zero variance and zero change (0 / 0) keep the prediction: nothing to shrink."""
    comp = _compensator()
    prediction = np.arange(FLAT_SIZE, dtype=float)
    comp._latest_y = np.zeros(FLAT_SIZE)
    out = comp._shrunk(prediction, comp._shrink_gain(change=np.zeros(FLAT_SIZE), variance=np.zeros(FLAT_SIZE)))
    np.testing.assert_array_equal(out, prediction)
