"""Review regressions: non-positive noise variances, observations sharing a time stamp,
inputs of the wrong shape and non-finite demonstration times."""

import numpy as np
import pytest

from promp.basis import RBFBasis
from promp.estimator import EstimatorConfig, OnlineEstimator
from promp.learning import Demonstration, learn_promp
from promp.library import LibraryFormatError, TaskLibrary
from promp.phase_filter import TaskPhaseFilter
from promp.posterior import StructuredPosterior
from promp.synthetic import learn_library, make_tasks

N_SIGNALS = 4


@pytest.fixture(scope="module")
def tasks():
    return make_tasks(seed=3, n_tasks=3, n_signals=N_SIGNALS, duration=2.0)


@pytest.fixture(scope="module")
def library(tasks):
    rng = np.random.default_rng(2)
    return learn_library(tasks, rng, 6, basis=RBFBasis(10))


@pytest.mark.parametrize("bad", [0.0, -1e-3])
def test_a_library_file_with_a_non_positive_noise_variance_is_refused(tmp_path, library, bad):
    # Before: the file loaded; with 0 the estimator's predictions were NaN, with a
    # negative variance a LinAlgError came out of the first update.
    path = tmp_path / "lib.npz"
    library.save(path)
    data = dict(np.load(path))
    data["t1/noise_var"] = np.full(N_SIGNALS, bad)
    np.savez(path, **data)
    with pytest.raises(LibraryFormatError, match="noise_var must be > 0"):
        TaskLibrary.load(path)


def test_a_zero_conditioning_noise_is_refused(library):
    # Before: StructuredPosterior divided by it and every mean and covariance was NaN.
    with pytest.raises(ValueError, match="conditioning noise"):
        StructuredPosterior(library.promps[0], np.zeros(N_SIGNALS))
    with pytest.raises(ValueError, match="conditioning noise"):
        OnlineEstimator(library, EstimatorConfig(conditioning_noise_scale=0.0))


def test_observations_sharing_a_time_stamp_give_the_same_estimate_in_any_order(tasks, library):
    # Two distinct observations with one time stamp: the filter keeps one per evidence
    # bucket, and before the fix it kept whichever arrived first, so the same set of
    # observations gave another speed (by 0.09 here) and another prediction.
    rng = np.random.default_rng(4)
    demo, _ = tasks[2].execution(rng, speed=1.1)
    t, y = demo.times[:60], demo.values[:60]
    other = y[40] + 0.05
    mask = np.array([True, True, False, True])
    orders = [[(t[40], y[40], None), (t[40], other, None), (t[50], y[50], mask), (t[50], other, mask)],
              [(t[50], other, mask), (t[40], other, None), (t[50], y[50], mask), (t[40], y[40], None)]]
    results = []
    for order in orders:
        est = OnlineEstimator(library)
        for i in range(60):
            if i not in (40, 50):
                est.update(t[i], y[i])
        for ti, yi, mi in order:
            est.update(ti, yi, mi)
        e = est.estimate()
        results.append((e, *est.predict_many(np.linspace(0.0, 2.0, 9))))
    (ea, ma, ca), (eb, mb, cb) = results
    assert eb.speed == pytest.approx(ea.speed, rel=1e-12)
    assert eb.offset == pytest.approx(ea.offset, abs=1e-12)
    np.testing.assert_allclose(eb.task_probabilities, ea.task_probabilities, rtol=1e-9, atol=1e-300)
    np.testing.assert_allclose(mb, ma, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(cb, ca, rtol=1e-9, atol=1e-15)


def test_conditioning_refuses_inputs_of_the_wrong_shape(library):
    # Before, each of these was read partially without an error: extra rows or entries
    # ignored, a short mask cycled over the observations, (n, 1) values broadcast over
    # every signal, a longer task prior cut to the library's size.
    promp = library.promps[0]
    z = np.array([0.2, 0.4, 0.6])
    y = promp.mean(z) + 0.1
    with pytest.raises(ValueError):
        promp.condition(0.2, y)                                   # 3 rows for one phase
    with pytest.raises(ValueError):
        promp.condition(z[:2], y)                                 # 3 rows for two phases
    with pytest.raises(ValueError):
        promp.condition(z, y, mask=np.ones((2, N_SIGNALS), dtype=bool))
    with pytest.raises(ValueError):
        promp.condition(0.2, np.r_[y[0], 5.0])                    # D + 1 values
    with pytest.raises(ValueError):
        promp.belief().update(promp.basis(0.2), np.r_[y[0], 5.0])
    with pytest.raises(ValueError):
        StructuredPosterior(promp).condition(promp.basis(z), y[:, :1])
    # A (D,) mask is broadcast over the rows (test_review_library_s38); one of D + 1 is refused.
    with pytest.raises(ValueError):
        StructuredPosterior(promp).condition(promp.basis(z), y, np.ones(N_SIGNALS + 1, dtype=bool))
    with pytest.raises(ValueError):
        TaskPhaseFilter(library.promps, task_log_prior=np.log([0.2, 0.2, 0.3, 0.3]))
    # The accepted forms still work and agree.
    one = promp.condition(0.2, y[0])
    np.testing.assert_allclose(promp.condition([0.2], y[:1]).weight_mean, one.weight_mean)
    masked = promp.condition(z, y, mask=np.array([True, False, True, True]))
    np.testing.assert_allclose(masked.weight_mean,
                               promp.condition(z, y, mask=np.tile([True, False, True, True], (3, 1))).weight_mean)


@pytest.mark.parametrize("times", [[0.0, np.nan, 2.0, 3.0], [0.0, 1.0, 2.0, np.inf], [np.nan, 1.0, 2.0, 3.0]])
def test_a_demonstration_with_non_finite_times_is_refused(times):
    # Before: accepted (NaN fails every comparison of the increasing-times check), and
    # learning failed later with "weight_mean must be finite".
    with pytest.raises(ValueError, match="times must be finite"):
        Demonstration(np.array(times), np.zeros((4, 2)))


def test_learning_still_accepts_demonstrations_of_two_samples():
    rng = np.random.default_rng(5)
    demos = [Demonstration([0.0, 1.0 + 0.1 * i], rng.normal(size=(2, 3))) for i in range(3)]
    promp = learn_promp(demos, RBFBasis(6))
    assert np.all(np.isfinite(promp.weight_cov)) and np.all(promp.noise_var > 0)


def test_prediction_refuses_non_finite_times_and_task_indices_out_of_range():
    """predict_many(nan) failed in a table lookup (IndexError), inf was accepted, and task=-1
    silently meant the last task."""
    from promp.estimator import OnlineEstimator
    from promp.library import TaskLibrary

    rng = np.random.default_rng(0)
    t = np.linspace(0.0, 1.0, 50)
    demos = [Demonstration(t * (1 + 0.1 * i), np.stack([np.sin(2 * t) + 0.01 * rng.normal(size=50),
                                                        np.cos(2 * t)], 1)) for i in range(4)]
    library = TaskLibrary.learn({"a": demos, "b": [Demonstration(d.times, -d.values) for d in demos]},
                                basis=RBFBasis(8))
    estimator = OnlineEstimator(library)
    estimator.update(0.1, demos[0].values[5])
    for bad in (np.nan, np.inf):
        with pytest.raises(ValueError, match="finite"):
            estimator.predict_many([0.2, bad])
    for task in (-1, 2):
        with pytest.raises(ValueError, match="task"):
            estimator.predict_many([0.2], task=task)
    mean, _ = estimator.predict_many([0.2], task=1, full_cov=False)
    assert np.all(np.isfinite(mean))


def test_a_missing_library_file_is_called_missing(tmp_path):
    """It was "not a ProMP task library (cannot read as .npz: [Errno 2] No such file ...)"."""
    with pytest.raises(LibraryFormatError, match="no such file") as e:
        TaskLibrary.load(tmp_path / "missing.npz")
    assert "not a ProMP task library" not in str(e.value)
    with pytest.raises(LibraryFormatError, match="is a directory"):
        TaskLibrary.load(tmp_path)


def test_the_stored_observations_cannot_be_written_through_and_a_shared_promp_keeps_both_labels():
    """Writing into OnlineEstimator.observations changed what the next update conditioned on
    (by 192 signal units); TaskLibrary({'a': q, 'b': q}) labelled task 'a' 'b'."""
    from promp import OnlineEstimator, TaskLibrary
    from promp.synthetic import make_tasks

    rng = np.random.default_rng(0)
    task = make_tasks(1, 2, 4)[0]
    library = TaskLibrary.learn({task.label: task.demonstrations(rng, 5)})
    estimator = OnlineEstimator(library)
    held = task.execution(rng)[0]
    for t, y in zip(held.times[:20], held.values[:20]):
        estimator.update(t, y)
    times, values, masks = estimator.observations
    for array in (times, values, masks):
        with pytest.raises(ValueError, match="read-only"):
            array[...] = 0
    estimator.update(held.times[20], held.values[20])          # the buffers themselves stay writable

    shared = library[task.label]
    both = TaskLibrary({"a": shared, "b": shared})
    assert (both["a"].label, both["b"].label) == ("a", "b")


@pytest.mark.parametrize("field, value, words", [
    ("n_speeds", 0, "n_speeds must be an integer >= 1"),
    ("speed_range", (-1.0, 2.0), "speed_range must be 0 < low <= high"),
    ("evidence_rate_hz", 0.0, "evidence_rate_hz must be a positive finite number"),
    ("speed_estimate", "meen", "speed_estimate must be one of smooth, mean, map"),
    ("latent_rank", -1, "latent_rank must be an integer >= 0"),
    ("n_phase_points", 1, "n_phase_points must be an integer >= 2"),
])
def test_a_phase_grid_that_cannot_work_is_refused_naming_its_field(field, value, words):
    """These failed deep in numpy (n_speeds=0, a negative speed) or silently gave wrong
    numbers (a misspelt estimate fell back to the MAP; rate 0 counted one observation)."""
    from promp.phase_filter import PhaseGridConfig

    with pytest.raises(ValueError, match=words):
        PhaseGridConfig(**{field: value})


def test_a_one_speed_grid_is_the_ranges_middle():
    from promp.phase_filter import PhaseGridConfig

    assert PhaseGridConfig(n_speeds=1).speeds() == pytest.approx([1.0])      # (0.5, 2.0): not 0.5


def test_logsumexp_matches_scipy_and_passes_a_nan_on():
    """The phase filter's own log-sum-exp (3x faster than scipy's here) dropped NaN and
    +inf: a NaN likelihood vanished from the normalisation without a word."""
    from scipy.special import logsumexp

    from promp.phase_filter import _logsumexp

    rng = np.random.default_rng(0)
    x = rng.normal(size=500) * 30.0
    x[::7] = -np.inf
    assert _logsumexp(x) == pytest.approx(float(logsumexp(x)), rel=1e-12)
    assert _logsumexp(np.full(4, -np.inf)) == -np.inf
    assert np.isnan(_logsumexp(np.array([1.0, np.nan])))
    assert _logsumexp(np.array([1.0, np.inf])) == np.inf
