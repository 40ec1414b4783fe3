"""Bad input to the promp public API: a clear ValueError / TypeError naming the argument,
and an estimator (filter, posterior, onset detector) left as it was by a call that raises."""

import numpy as np
import pytest

from promp.basis import RBFBasis
from promp.estimator import EstimatorConfig, OnlineEstimator
from promp.learning import Demonstration, learn_promp
from promp.library import LibraryFormatError, TaskLibrary
from promp.model import ProMP
from promp.onset import OnsetDetector
from promp.phase_filter import TaskPhaseFilter
from promp.posterior import StructuredPosterior
from promp.synthetic import learn_library, make_tasks

N_SIGNALS = 5


@pytest.fixture(scope="module")
def tasks():
    return make_tasks(seed=4, n_tasks=2, n_signals=N_SIGNALS, duration=2.0)


@pytest.fixture(scope="module")
def library(tasks):
    rng = np.random.default_rng(3)
    return learn_library(tasks, rng, 5, basis=RBFBasis(10))


@pytest.fixture(scope="module")
def demo(tasks):
    return tasks[0].execution(np.random.default_rng(4))[0]


@pytest.fixture
def estimator(library, demo):
    est = OnlineEstimator(library)
    for t, y in zip(demo.times[:50], demo.values[:50]):
        est.update(t, y)
    return est


def _state(est):
    e = est.estimate()
    mean, cov = est.predict_many([0.3, 1.0, 2.5])
    return [est.n_observations, est.observations[0].copy(), est.observations[1].copy(),
            est.observations[2].copy(), e.task, e.speed, e.offset, e.phase, e.task_probabilities.copy(),
            est.filter.log_posterior().copy(), est.filter.n_evidence, mean, cov]


def _assert_unchanged(est, before):
    for a, b in zip(_state(est), before):
        if isinstance(a, np.ndarray):
            np.testing.assert_array_equal(a, b)
        else:
            assert a == b


# ------------------------------------------------------------------ update
@pytest.mark.parametrize("mask, words", [
    (np.full(N_SIGNALS, np.nan), "mask must hold booleans"),      # NaN was True
    (np.full(N_SIGNALS, 0.5), "mask must hold booleans"),
    (np.full(N_SIGNALS, 2), "mask must hold booleans"),
    (np.array(["no"] * N_SIGNALS), "mask must hold booleans"),
    (np.zeros(N_SIGNALS, dtype=bool), "mask observes no signal"),  # stored, moved the phase
    (np.ones(N_SIGNALS + 1, dtype=bool), r"mask must have shape \(5,\)"),
])
def test_a_bad_mask_is_refused_and_changes_nothing(estimator, demo, mask, words):
    before = _state(estimator)
    with pytest.raises(ValueError, match=words):
        estimator.update(float(demo.times[50]), demo.values[50], mask)
    _assert_unchanged(estimator, before)


def test_a_mask_of_zeros_and_ones_is_a_boolean_mask(library, demo):
    a, b = OnlineEstimator(library), OnlineEstimator(library)
    mask = np.arange(N_SIGNALS) < 3
    for t, y in zip(demo.times[:40], demo.values[:40]):
        a.update(t, y, mask)
        b.update(t, y, mask.astype(int))
    for x, y in zip(a.predict_many([0.5, 1.5]), b.predict_many([0.5, 1.5])):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("t", ["0.5", True, None, np.array([0.5]), 1 + 1j])
def test_a_time_that_is_not_a_real_number_is_refused(estimator, demo, t):
    """'0.5' and True were taken as times (float() of them)."""
    before = _state(estimator)
    with pytest.raises(TypeError, match="observation time t must be a real number"):
        estimator.update(t, demo.values[50])
    _assert_unchanged(estimator, before)


@pytest.mark.parametrize("y", [np.full(N_SIGNALS, 1.0 + 1j), np.array(["a"] * N_SIGNALS)])
def test_values_that_are_not_real_numbers_are_refused(estimator, demo, y):
    """Complex values lost their imaginary part with a warning."""
    before = _state(estimator)
    with pytest.raises(TypeError, match="observation y must hold real numbers"):
        estimator.update(float(demo.times[50]), y)
    _assert_unchanged(estimator, before)


def test_nan_where_a_signal_is_not_observed_is_accepted(estimator, demo):
    mask = np.arange(N_SIGNALS) < 2
    y = np.where(mask, demo.values[50], np.nan)
    n = estimator.n_observations
    estimator.update(float(demo.times[50]), y, mask)
    assert estimator.n_observations == n + 1
    assert np.all(np.isfinite(estimator.predict(1.0)[1]))


# -------------------------------------------------------------- prediction
def test_prediction_refuses_bad_times_and_tasks_naming_them(estimator):
    before = _state(estimator)
    with pytest.raises(ValueError, match=r"prediction times must be a scalar or 1-D .* shape \(2, 2\)"):
        estimator.predict_many(np.ones((2, 2)))       # failed deep in a broadcast
    with pytest.raises(ValueError, match="predict takes one time t"):
        estimator.predict([1.0, 2.0])
    with pytest.raises(TypeError, match="prediction times must hold real numbers"):
        estimator.predict_many(["a"])
    with pytest.raises(TypeError, match="task must be an integer index"):   # was an IndexError
        estimator.predict_many([1.0], task=1.0)
    with pytest.raises(ValueError, match=r"task '0' is not in the library \(tasks: "):   # a label, not an index
        estimator.predict_many([1.0], task="0")
    for call in (estimator.time_warp, estimator.weight_posterior):
        for task in (99, -1):                         # IndexError; -1 was the last task
            with pytest.raises(ValueError, match=r"task must be an index in 0\.\.1"):
                call(task)
    _assert_unchanged(estimator, before)


def test_a_task_may_be_named_by_its_label(estimator):
    """predict/predict_many/time_warp/weight_posterior took only an index: a caller holding
    the label (Estimate.task) had to look it up."""
    for index, label in enumerate(estimator.library.labels):
        by_label, by_index = estimator.predict_many([0.5, 1.0], task=label), estimator.predict_many([0.5, 1.0],
                                                                                                    task=index)
        assert all(np.array_equal(a, b) for a, b in zip(by_label, by_index))
        assert estimator.time_warp(label) == estimator.time_warp(index)


def test_predicting_at_negative_horizons_is_allowed_and_changes_nothing(estimator):
    """Before the newest observation (and before the onset) the posterior is read at a
    past phase (phase 0 before every hypothesis' start); the estimate does not move."""
    before = _state(estimator)
    latest = float(estimator.observations[0].max())
    mean, cov = estimator.predict_many([-5.0, -0.1, 0.0, latest - 0.2, latest])
    assert np.all(np.isfinite(mean)) and np.all(np.isfinite(cov))
    np.testing.assert_allclose(mean[0], estimator.predict_many([estimator.motion_span[0] - 1.0])[0][0])
    _assert_unchanged(estimator, before)


# ------------------------------------------------------------------ config
@pytest.mark.parametrize("field, value", [
    ("variance_scale", -1.0), ("variance_scale", np.nan), ("variance_scale", 0.0),
    ("conditioning_noise_scale", np.inf), ("future_speed_std", -0.1), ("future_speed_std", np.nan),
    ("offset_fraction", np.nan), ("ramp_fraction", -1.0), ("amplitude_fraction", np.inf),
    ("group_amplitude_fraction", -0.3), ("group_offset_scale", np.nan), ("ood_n_std", -1.0),
    ("ood_margin", np.nan), ("ood_indices", (-1,)), ("ood_indices", (0.5,)), ("phase_averaging", "mean"),
])
def test_an_estimator_setting_that_cannot_work_is_refused_naming_its_field(field, value):
    """A negative or NaN variance_scale gave negative / NaN covariances, a NaN margin never
    fired, a negative ood index wrapped to the last signals: all were accepted."""
    with pytest.raises(ValueError, match=f"^{field} must"):
        EstimatorConfig(**{field: value})


def test_ood_indices_beyond_the_signals_and_impossible_task_priors_are_refused(library):
    with pytest.raises(ValueError, match=r"ood_indices must be signal indices in 0\.\.4"):
        OnlineEstimator(library, EstimatorConfig(ood_indices=(3, N_SIGNALS)))   # IndexError
    for prior in ((np.inf, 0.0), (-np.inf, -np.inf)):                           # NaN posteriors
        with pytest.raises(ValueError, match="task_log_prior must be log-probabilities"):
            OnlineEstimator(library, EstimatorConfig(task_log_prior=prior))


# ------------------------------------------------------------ phase filter
def _filter_state(f):
    return [f._quad.copy(), f._lam.copy(), f._eta.copy(), f._logdet_noise.copy(), f.n_evidence,
            sorted(f._buckets), f.log_posterior().copy()]


@pytest.mark.parametrize("args, words", [
    ((-1.0, np.ones(N_SIGNALS + 1)), r"y must have shape \(5,\)"),
    ((-1.0, np.full(N_SIGNALS, np.nan)), "non-finite"),
    ((-1.0, np.ones(N_SIGNALS), np.ones(3, dtype=bool)), r"mask must have shape \(5,\)"),
    ((-1.0, np.ones(N_SIGNALS), np.full(N_SIGNALS, np.nan)), "mask must hold booleans"),
    ((np.nan, np.ones(N_SIGNALS)), "t must be finite"),
    ((1.7e308, np.ones(N_SIGNALS)), "t must be finite"),           # OverflowError
])
def test_the_filter_refuses_bad_observations_before_changing_anything(library, demo, args, words):
    """A late packet that should replace its bucket's representative subtracted the old one
    and then failed on its own values; NaN values were accumulated (a NaN posterior)."""
    f = TaskPhaseFilter(library.promps)
    for t, y in zip(demo.times[:30], demo.values[:30]):
        f.add(t, y)
    # An earlier time in the first bucket: a replacement if it were valid.
    args = (float(demo.times[0]) - 1e-4 if args[0] == -1.0 else args[0],) + args[1:]
    before = _filter_state(f)
    with pytest.raises(ValueError, match=words):
        f.add(*args)
    for a, b in zip(_filter_state(f), before):
        np.testing.assert_array_equal(a, b)


# --------------------------------------------------------------- posterior
def test_the_posterior_refuses_non_finite_input_and_keeps_its_observations(library):
    promp = library.promps[0]
    post = StructuredPosterior(promp)
    phi = promp.basis(np.array([0.1, 0.3]))
    values = promp.mean(np.array([0.1, 0.3]))
    post.add(phi, values)
    mean = post.mean_weights.copy()
    bad = values.copy()
    bad[1, 2] = np.nan
    with pytest.raises(ValueError, match="must be finite"):          # a NaN posterior
        post.add(phi, bad)
    with pytest.raises(ValueError, match="must be finite"):          # LinAlgError later
        post.add(np.full_like(phi, np.nan), values)
    assert post.n_observations == 2
    np.testing.assert_array_equal(post.mean_weights, mean)
    mask = np.ones_like(bad, dtype=bool)
    mask[1, 2] = False
    post.add(phi, bad, mask)                                           # NaN not observed: fine
    assert np.all(np.isfinite(post.mean_weights))
    with pytest.raises(ValueError, match=r"phi must be finite \(F, 10\) basis rows, got shape \(1, 4\)"):
        post.predict(np.ones((1, 4)))
    with pytest.raises(ValueError, match="with NaN or inf"):
        post.predict(np.full((1, 10), np.nan))
    with pytest.raises(ValueError, match=r"extra_factor must be \(2, 5, c\)"):
        post.predict(phi, extra_factor=np.ones((3, 1, 1)))


def test_dense_conditioning_names_the_bad_argument(library):
    """NaN y or z was refused only as the result's "weight_mean must be finite"; a negative
    noise variance was used as is."""
    promp = library.promps[0]
    with pytest.raises(ValueError, match="y must be finite where observed"):
        promp.condition(0.3, np.full(N_SIGNALS, np.nan))
    with pytest.raises(ValueError, match="phases z must be finite"):
        promp.condition(np.nan, np.zeros(N_SIGNALS))
    with pytest.raises(ValueError, match="noise_var must be finite and >= 0"):
        promp.condition(0.3, np.zeros(N_SIGNALS), noise_var=-1.0)
    y = np.full(N_SIGNALS, np.nan)
    y[0] = 0.1
    mask = np.arange(N_SIGNALS) == 0
    assert np.all(np.isfinite(promp.condition(0.3, y, mask).weight_mean))


# ----------------------------------------------------------------- learning
def test_demonstrations_without_signals_or_real_values_are_refused():
    t = np.linspace(0.0, 1.0, 5)
    with pytest.raises(ValueError, match="no signal"):                # a (0, k) ProMP was learned
        Demonstration(t, np.zeros((5, 0)))
    with pytest.raises(ValueError, match="disagree"):                  # (T, 2, 2) taken as 2 signals
        Demonstration(t, np.zeros((5, 2, 2)))
    with pytest.raises(TypeError, match="demonstration values must hold real numbers"):
        Demonstration(t, np.ones((5, 2)) + 1j)
    with pytest.raises(TypeError, match="demonstration times must hold real numbers"):
        Demonstration(["a", "b"], np.ones((2, 2)))
    with pytest.raises(ValueError, match="at least one signal"):
        ProMP(RBFBasis(4), np.zeros((0, 4)), np.ones(0), [1.0], low_rank=np.zeros((0, 4, 1)), block_var=np.ones(0))


def test_learning_refuses_bad_settings_naming_them(demo):
    demos = [demo] * 3
    with pytest.raises(TypeError, match="demos must be Demonstration objects"):
        learn_promp([(demo.times, demo.values)] * 3)
    with pytest.raises(TypeError, match="basis must be an RBFBasis"):
        learn_promp(demos, 10)
    for ridge in (-1.0, np.nan):                                       # -1 was accepted
        with pytest.raises(ValueError, match="ridge must be"):
            learn_promp(demos, ridge=ridge)
    for floor in (np.nan, -1.0, np.ones(N_SIGNALS + 1)):               # a numpy broadcast error
        with pytest.raises(ValueError, match="min_noise_std must be"):
            learn_promp(demos, min_noise_std=floor)


# ------------------------------------------------------------------ library
def _rewrite(path, **changes):
    with np.load(path) as data:
        arrays = dict(data)
    for key, value in changes.items():
        key = key.replace("__", "/")
        if value is None:
            del arrays[key]
        else:
            arrays[key] = value
    np.savez(path, **arrays)


@pytest.mark.parametrize("changes, words", [
    ({"version": None}, "has no format version field"),               # said "format version -1"
    ({"labels": np.array(["task0"])}, "holds task fields t1 beyond its 1 labels"),   # loaded 1 of 2
    ({"t0__group_var": np.array(["a"] * N_SIGNALS)}, "group_var must hold real numbers"),
])
def test_a_damaged_library_file_is_refused_with_the_reason(tmp_path, library, changes, words):
    path = tmp_path / "lib.npz"
    library.save(path)
    _rewrite(path, **changes)
    with pytest.raises(LibraryFormatError, match=words):
        TaskLibrary.load(path)


def test_a_truncated_library_file_is_refused(tmp_path, library):
    path = tmp_path / "lib.npz"
    library.save(path)
    raw = path.read_bytes()
    for size in (0, 10, len(raw) // 2, len(raw) - 1):
        path.write_bytes(raw[:size])
        with pytest.raises(LibraryFormatError, match=f"^{path}: "):
            TaskLibrary.load(path)


# -------------------------------------------------------------------- onset
def test_the_onset_detector_refuses_bad_samples_and_keeps_its_state():
    """A NaN sample was taken (a NaN speed, never above the threshold), a short one failed
    in numpy (IndexError)."""
    det = OnsetDetector([0, 1], speed_threshold=0.1, min_duration=0.05)
    det.push(0.0, np.zeros(3))
    det.push(0.01, np.array([0.01, 0.0, 0.0]))
    state = (det._prev[0], det._prev[1].copy(), det._run_start)
    for t, y, words in ((0.02, np.array([np.nan, 0.0, 0.0]), "finite"), (np.nan, np.zeros(3), "time t must be finite"),
                        (0.02, np.zeros(1), "must be 1-D with the signals")):
        with pytest.raises(ValueError, match=words):
            det.push(t, y)
        assert (det._prev[0], det._run_start) == (state[0], state[2])
        np.testing.assert_array_equal(det._prev[1], state[1])
