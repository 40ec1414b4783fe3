"""Online estimator: recognition, continuous speed, order independence, masks, Delta-sigma, onset."""

import re

import numpy as np
import pytest

from promp.basis import RBFBasis
from promp.estimator import EstimatorConfig, OnlineEstimator
from promp.onset import OnsetDetector, detect_onset
from promp.synthetic import learn_library, make_tasks

N_SIGNALS = 10


@pytest.fixture(scope="module")
def tasks():
    return make_tasks(seed=0, n_tasks=4, n_signals=N_SIGNALS, duration=3.0)


@pytest.fixture(scope="module")
def library(tasks):
    rng = np.random.default_rng(1)
    return learn_library(tasks, rng, 7, basis=RBFBasis(20))


def feed(est, demo, until):
    est.reset()
    e = None
    for t, y in zip(demo.times, demo.values):
        if t > until:
            break
        e = est.update(t, y)
    return e


@pytest.mark.parametrize("task_index", [0, 1, 2, 3])
def test_recognition_picks_the_right_task(tasks, library, task_index):
    rng = np.random.default_rng(10 + task_index)
    demo, _ = tasks[task_index].execution(rng, speed=1.1)
    est = OnlineEstimator(library)
    e = feed(est, demo, until=1.0)
    assert e.task == tasks[task_index].label
    assert e.task_probabilities[task_index] > 0.99


@pytest.mark.parametrize("speed", [0.7, 1.4])
def test_speed_estimate_recovers_slow_and_fast_executions(tasks, library, speed):
    rng = np.random.default_rng(int(speed * 10))
    demo, _ = tasks[1].execution(rng, speed=speed)
    est = OnlineEstimator(library)
    e = feed(est, demo, until=0.5 * demo.duration)
    # "speed" is relative to the task's mean demo duration; the truth is T_bar / T.
    truth = library.promps[1].duration / demo.duration
    assert abs(e.speed / truth - 1.0) < 0.10
    # ... and it is continuous, not one of the grid values.
    assert np.min(np.abs(est.filter.speed_grid - e.speed)) > 1e-6


def test_conditioning_cuts_the_prediction_error(tasks, library):
    rng = np.random.default_rng(5)
    demo, _ = tasks[2].execution(rng, speed=0.8, coeffs=np.array([1.5, -1.0, 1.0]))
    est = OnlineEstimator(library)
    half = demo.times <= 0.5 * demo.duration
    feed(est, demo, until=0.5 * demo.duration)
    mean, cov = est.predict_many(demo.times[~half])
    assert mean.shape == (int((~half).sum()), N_SIGNALS) and cov.shape[1:] == (N_SIGNALS, N_SIGNALS)
    prior = library.promps[2]
    prior_mean = prior.mean(prior.phase(demo.times[~half]))
    err = np.sqrt(np.mean((mean - demo.values[~half]) ** 2))
    err_prior = np.sqrt(np.mean((prior_mean - demo.values[~half]) ** 2))
    assert err < 0.2 * err_prior
    m1, c1 = est.predict(demo.times[-1])
    np.testing.assert_allclose(m1, mean[-1])
    np.testing.assert_allclose(c1, cov[-1])
    _, var = est.predict_many(demo.times[~half], full_cov=False)
    np.testing.assert_allclose(var, np.diagonal(cov, axis1=1, axis2=2), rtol=1e-9)


def test_out_of_order_updates_give_the_same_prediction(tasks, library):
    rng = np.random.default_rng(6)
    demo, _ = tasks[0].execution(rng, speed=1.2)
    n = int(0.5 * len(demo.times))
    future = demo.times[n:]
    a = OnlineEstimator(library)
    for t, y in zip(demo.times[:n], demo.values[:n]):
        a.update(t, y)
    b = OnlineEstimator(library)
    for i in rng.permutation(n):                      # old, shuffled packets
        b.update(demo.times[i], demo.values[i])
    ea, eb = a.estimate(), b.estimate()
    assert ea.task == eb.task
    assert eb.speed == pytest.approx(ea.speed, rel=1e-9)
    ma, ca = a.predict_many(future)
    mb, cb = b.predict_many(future)
    np.testing.assert_allclose(mb, ma, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(cb, ca, rtol=1e-6, atol=1e-12)


def test_masked_observations_still_predict_the_hidden_signals(tasks, library):
    rng = np.random.default_rng(7)
    demo, _ = tasks[3].execution(rng, coeffs=np.array([2.0, 1.0, -1.5]))
    est = OnlineEstimator(library)
    mask = np.zeros(N_SIGNALS, dtype=bool)
    mask[:6] = True                                   # e.g. only the hands arrive
    half = demo.times <= 0.5 * demo.duration
    for t, y in zip(demo.times[half], demo.values[half]):
        e = est.update(t, np.where(mask, y, np.nan), mask)
    assert e.task == tasks[3].label
    mean, _ = est.predict_many(demo.times[~half])
    prior = library.promps[3]
    prior_mean = prior.mean(prior.phase(demo.times[~half]))
    hidden = ~mask
    err = np.sqrt(np.mean((mean[:, hidden] - demo.values[~half][:, hidden]) ** 2))
    err_prior = np.sqrt(np.mean((prior_mean[:, hidden] - demo.values[~half][:, hidden]) ** 2))
    assert err < 0.5 * err_prior


def test_delta_sigma_fires_on_a_deviation_and_not_in_distribution(tasks, library):
    rng = np.random.default_rng(8)
    # In distribution: the task's mean motion, 10 % slower, with sensor noise; any false
    # alarm here would come from a wrong phase estimate.
    demo, _ = tasks[0].execution(rng, speed=0.9, coeffs=np.zeros(3))
    est = OnlineEstimator(library, EstimatorConfig(ood_indices=(0, 1, 2), ood_margin=0.05))
    flags = [est.update(t, y).out_of_distribution for t, y in zip(demo.times, demo.values)]
    assert not any(flags)
    deviating = demo.values.copy()
    late = demo.times > 0.6 * demo.duration
    deviating[late, 1] += 0.3                          # the hand goes 30 cm elsewhere
    est.reset()
    flags = np.array([est.update(t, y).out_of_distribution for t, y in zip(demo.times, deviating)])
    assert not flags[~late].any()
    assert flags[late].mean() > 0.9


def test_update_rejects_bad_observations(library):
    est = OnlineEstimator(library)
    # The estimator's own checks (a size mismatch also fails numpy's broadcasting, unsaid).
    with pytest.raises(ValueError, match=re.escape(f"observation y must have shape ({N_SIGNALS},), got "
                                                   f"({N_SIGNALS + 1},)")):
        est.update(0.1, np.zeros(N_SIGNALS + 1))
    with pytest.raises(ValueError, match="observation y has non-finite values"):
        est.update(0.1, np.full(N_SIGNALS, np.nan))


@pytest.mark.parametrize("bad_t", [np.nan, np.inf, -np.inf])
def test_a_non_finite_time_is_refused_and_leaves_the_estimator_unchanged(tasks, library, bad_t):
    rng = np.random.default_rng(12)
    demo, _ = tasks[2].execution(rng)
    est = OnlineEstimator(library)
    e = feed(est, demo, until=1.0)
    n, times = est.n_observations, est.observations[0].copy()
    mean, cov = est.predict(2.0)
    # Before: the time was stored first and the filter failed after (ValueError for NaN,
    # OverflowError for inf), so the weight posterior kept an observation at a NaN phase.
    with pytest.raises(ValueError, match="time t must be finite"):
        est.update(bad_t, demo.values[0])
    assert est.n_observations == n
    np.testing.assert_array_equal(est.observations[0], times)
    after = est.estimate()
    assert (after.task, after.speed, after.offset, after.phase) == (e.task, e.speed, e.offset, e.phase)
    np.testing.assert_array_equal(after.task_probabilities, e.task_probabilities)
    np.testing.assert_array_equal(est.predict(2.0)[0], mean)
    np.testing.assert_array_equal(est.predict(2.0)[1], cov)


def _state(est):
    """Everything an update may change, for before/after comparisons."""
    e = est.estimate()
    mean, cov = est.predict(2.0)
    return (est.n_observations, est.observations[0].copy(), est.observations[1].copy(), e.task, e.speed,
            e.offset, e.phase, e.task_probabilities.copy(), est.filter.log_posterior().copy(), mean, cov)


def _assert_same_state(a, b):
    for x, y in zip(a, b):
        if isinstance(x, np.ndarray):
            np.testing.assert_array_equal(x, y)
        else:
            assert x == y


def test_observations_outside_the_motion_are_stored_flagged_and_counted(tasks, library):
    """An observation long after the end of the motion under every hypothesis (the operator
    holds the final pose, the caller has not seen the end yet) is accepted like an old one:
    stored, used at phase 1, and now flagged and counted (it was clipped without a word)."""
    rng = np.random.default_rng(14)
    demo, _ = tasks[0].execution(rng)
    est = OnlineEstimator(library)
    e = feed(est, demo, until=1.0)
    assert not e.outside_motion and est.n_outside_motion == 0
    lo, hi = est.motion_span
    grid = est.filter
    assert lo == grid.offset_grid.min()
    assert hi == pytest.approx(grid.offset_grid.max() + max(p.duration for p in library.promps) / grid.speed_grid.min())
    n = est.n_observations
    late = est.update(hi + 30.0, demo.values[-1])
    assert late.outside_motion and late.phase == 1.0
    assert est.n_outside_motion == 1 and late.n_observations == n + 1
    early = est.update(lo - 1.0, demo.values[0])
    assert early.outside_motion and est.n_outside_motion == 2 and early.n_observations == n + 2
    # An exact repeat is not stored again, nor counted.
    est.update(hi + 30.0, demo.values[-1])
    assert est.n_outside_motion == 2 and est.n_observations == n + 2
    inside = est.update(0.5 * (lo + hi), demo.values[len(demo.times) // 2])
    assert not inside.outside_motion and est.n_outside_motion == 2
    assert np.all(np.isfinite(est.predict(hi + 60.0)[1]))
    est.reset()
    assert est.n_outside_motion == 0 and not est.estimate().outside_motion


@pytest.mark.parametrize("bad_t", [1.7e9, -2e6, 1e300, 1.7e308])
def test_a_time_beyond_any_motion_clock_is_refused_and_leaves_the_estimator_unchanged(tasks, library, bad_t):
    """A time stamp of an absolute clock (Unix seconds), or ms / ns read as s, was taken at
    phase 1 (or 0) without a word; near the float limit the filter's bucket overflowed after
    the observation had been stored (OverflowError, half an update)."""
    rng = np.random.default_rng(15)
    demo, _ = tasks[1].execution(rng)
    est = OnlineEstimator(library)
    feed(est, demo, until=1.0)
    before = _state(est)
    with pytest.raises(ValueError, match="observation time t must be seconds since the motion onset"):
        est.update(bad_t, demo.values[0])
    _assert_same_state(_state(est), before)
    with pytest.raises(ValueError, match="prediction times must be seconds since the motion onset"):
        est.predict_many([1.0, bad_t])
    _assert_same_state(_state(est), before)


def test_an_exact_repeat_of_an_observation_is_stored_once_distinct_values_twice(tasks, library):
    rng = np.random.default_rng(13)
    demo, _ = tasks[1].execution(rng)
    once, twice = OnlineEstimator(library), OnlineEstimator(library)
    mask = np.arange(N_SIGNALS) < 6
    for i, (t, y) in enumerate(zip(demo.times, demo.values)):
        if t > 1.0:
            break
        m = mask if i % 3 == 0 else None
        once.update(t, y, m)
        twice.update(t, y, m)
        # A duplicated packet: the same values where observed (the rest may differ).
        twice.update(t, np.where(mask, y, 123.0) if m is not None else y.copy(), m)
    # Before: the filter ignored the repeats, the weight posterior counted them twice
    # (a narrower band, a different mean).
    assert twice.n_observations == once.n_observations
    np.testing.assert_array_equal(twice.filter.log_posterior(), once.filter.log_posterior())
    for a, b in zip(twice.predict(2.0), once.predict(2.0)):
        np.testing.assert_array_equal(a, b)
    # Other values (or another mask) at the same time are a new observation for the posterior.
    t, y = float(demo.times[10]), demo.values[10]
    n = twice.n_observations
    twice.update(t, y + 0.01)
    twice.update(t, y, mask)
    assert twice.n_observations == n + 2


def test_onset_detection_finds_the_start_of_the_motion():
    t = np.arange(0, 3, 0.01)
    x = np.where(t < 1.0, 0.0, 0.3 * (t - 1.0))      # still, then 0.3 m/s
    y = np.stack([x, np.zeros_like(x), np.zeros_like(x)], 1)
    y += np.random.default_rng(0).normal(0, 2e-4, y.shape)   # 2 cm/s of jitter at 100 Hz
    onset = detect_onset(t, y, [0, 1, 2], speed_threshold=0.1, min_duration=0.1)
    assert onset == pytest.approx(1.0, abs=0.02)
    det = OnsetDetector([0, 1, 2])
    assert all(det.push(ti, yi) is None for ti, yi in zip(t[:100], y[:100]))
    assert detect_onset(t[:100], y[:100], [0, 1, 2]) is None
    # The onset is the first sample of the moving run, t = 1.0 exactly (samples are 10 ms
    # apart: within half a sample, a one-sample lag fails), and the online detector reports
    # it once the run has lasted min_duration (at t = 1.1, sample 110), then ever after.
    assert onset == pytest.approx(1.0, abs=0.005)
    det = OnsetDetector([0, 1, 2], speed_threshold=0.1, min_duration=0.1)
    reports = [det.push(ti, yi) for ti, yi in zip(t, y)]
    first = next(i for i, r in enumerate(reports) if r is not None)
    assert first == 110 and all(r == onset for r in reports[first:])
    det.reset()
    assert det.onset is None and det.push(t[0], y[0]) is None
    # A longer min_duration reports later, the same onset.
    slow = OnsetDetector([0, 1, 2], speed_threshold=0.1, min_duration=0.3)
    reports = [slow.push(ti, yi) for ti, yi in zip(t, y)]
    assert next(i for i, r in enumerate(reports) if r is not None) == 130 and reports[-1] == onset


def test_a_stream_held_at_a_higher_rate_has_the_onset_of_the_stream():
    """A robot's 100 Hz commands from a 50 Hz input repeat every sample: each repeat was a
    stop, the run never lasted 0.1 s, and no onset was found (an exported take then kept
    its still ends). A repeat during a motion is skipped; a real stop still ends the run."""
    t50 = np.arange(0, 3, 0.02)
    x = np.where(t50 < 1.0, 0.0, 0.3 * (t50 - 1.0))
    y50 = np.stack([x, np.zeros_like(x), np.zeros_like(x)], 1)
    y50 += np.random.default_rng(0).normal(0, 2e-4, y50.shape)
    t100 = np.arange(0, 3 - 0.01, 0.01)
    y100 = y50[np.searchsorted(t50, t100 + 1e-9, side="right") - 1]       # each sample twice
    onset = detect_onset(t50, y50, [0, 1, 2], speed_threshold=0.1, min_duration=0.1)
    assert onset == pytest.approx(1.0, abs=0.025)
    assert detect_onset(t100, y100, [0, 1, 2], speed_threshold=0.1, min_duration=0.1) == pytest.approx(onset, abs=0.011)
    # Moving for 50 ms, then held still for 0.3 s, then slowly on: no onset (the hold is a stop).
    t = np.arange(0, 1.0, 0.01)
    x = np.where(t < 0.05, 0.5 * t, np.where(t < 0.35, 0.025, 0.025 + 0.02 * (t - 0.35)))
    stop = np.stack([x, np.zeros_like(x), np.zeros_like(x)], 1)
    assert detect_onset(t, stop, [0, 1, 2], speed_threshold=0.1, min_duration=0.1) is None
