"""The online estimator under adversarial observation streams, now that the robot station
feeds it per-signal masks (a VR operator measures the hands and the neck only).

Masked conditioning and the masked likelihood are checked against direct dense Gaussian
formulas on small problems (correct, not just finite); randomised streams mix changing
masks, NaN / inf where unobserved, duplicates, out-of-order and same-time parts; and the
edges: one task, a one-point grid, speeds beyond the grid, two near-identical demos, a
library read back from file, time stamps at +-MAX_TIME_S, long sessions.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from promp.basis import RBFBasis
from promp.estimator import MAX_TIME_S, EstimatorConfig, OnlineEstimator
from promp.learning import Demonstration
from promp.library import TaskLibrary
from promp.model import structured_to_dense
from promp.phase_filter import PhaseGridConfig, TaskPhaseFilter
from promp.posterior import StructuredPosterior, _mask_patterns
from promp.synthetic import learn_library, make_tasks
from tests.conftest import fuzz_examples

D = 6


@pytest.fixture(scope="module")
def tasks():
    return make_tasks(seed=3, n_tasks=3, n_signals=D, duration=2.0)


@pytest.fixture(scope="module")
def library(tasks):
    return learn_library(tasks, np.random.default_rng(1), 5, basis=RBFBasis(8))


def dense_posterior(prior, noise, phi, values, masks):
    """Weight posterior by the dense information-form formula: each observed (row, signal)
    adds phi phi^T / sigma_d^2 to the precision of signal d's weights."""
    k = prior.n_basis
    cov = structured_to_dense(*prior.structure(), prior.coupled)
    precision = np.linalg.inv(cov)
    info = np.linalg.solve(cov, prior.weight_mean.ravel())
    for d in range(prior.n_signals):
        rows = masks[:, d]
        s = slice(d * k, (d + 1) * k)
        precision[s, s] += phi[rows].T @ phi[rows] / noise[d]
        info[s] += phi[rows].T @ values[rows, d] / noise[d]
    post_cov = np.linalg.inv(precision)
    return (post_cov @ info).reshape(prior.n_signals, k), post_cov


def random_mask(rng, kind):
    """(D,) mask of one of the adversarial kinds, never all False."""
    if kind == "vr":                                     # the hands only, in this D = 6 world
        mask = np.zeros(D, bool)
        mask[[1, 2, 4]] = True
    elif kind == "single":
        mask = np.zeros(D, bool)
        mask[rng.integers(D)] = True
    elif kind == "no_hands":
        mask = np.ones(D, bool)
        mask[[1, 2, 4]] = False
    else:
        mask = rng.random(D) < rng.uniform(0.1, 0.9)
        mask[rng.integers(D)] = True
    return mask


def poisoned(y, mask, rng):
    """y with NaN / inf / huge values where unobserved (allowed there by the docstring)."""
    y = np.array(y, dtype=float)
    y[~mask] = rng.choice([np.nan, np.inf, -np.inf, 1e300], size=int((~mask).sum()))
    return y


def check_posterior(est, task):
    """The estimator's weight posterior of ``task`` equals the dense formula on its stored
    observations at the current warp, is symmetric PSD, and predicts finite PSD values."""
    times, values, masks = est.observations
    warp = est.filter.time_warp(task)
    prior = est._prior_models[task]
    post = est.weight_posterior(task)
    mean_ref, cov_ref = dense_posterior(prior, est._cond_noise[task], prior.basis.lookup(warp.phase(times)),
                                        values, masks)
    cov = post.dense_cov()
    scale = np.abs(cov_ref).max()
    np.testing.assert_allclose(cov, cov_ref, rtol=0, atol=1e-9 * scale)
    np.testing.assert_allclose(post.mean_weights, mean_ref, rtol=0, atol=1e-7 * max(1.0, np.abs(mean_ref).max()))
    assert np.abs(cov - cov.T).max() <= 1e-12 * scale
    assert np.linalg.eigvalsh(0.5 * (cov + cov.T)).min() > -1e-10 * scale
    mean, pcov = est.predict_many(np.linspace(-1.0, 6.0, 15), task=task)
    assert np.all(np.isfinite(mean)) and np.all(np.isfinite(pcov))
    assert np.abs(pcov - pcov.transpose(0, 2, 1)).max() <= 1e-12 * np.abs(pcov).max()
    assert min(np.linalg.eigvalsh(c).min() for c in pcov) > 0


# ------------------------------------------------------------------ masked conditioning
@pytest.mark.parametrize("covariance", ["full", "per_signal"])
def test_masked_conditioning_equals_the_dense_formula(tasks, covariance):
    lib = learn_library(tasks[:1], np.random.default_rng(2), 5, basis=RBFBasis(6), covariance=covariance)
    prior = lib.promps[0]
    noise = prior.noise_var * 100.0
    rng = np.random.default_rng(7)
    for kind in ["vr", "single", "no_hands", "random", "mixed", "mixed", "broadcast"]:
        n = int(rng.integers(1, 25))
        phi = prior.basis(rng.uniform(0.0, 1.0, n))
        y = rng.normal(0.0, 0.3, (n, D))
        if kind == "mixed":        # a new mask every sample
            masks = np.array([random_mask(rng, rng.choice(["vr", "single", "no_hands", "random"])) for _ in range(n)])
        elif kind == "broadcast":  # one (D,) mask for every row
            masks = np.broadcast_to(random_mask(rng, "random"), (n, D))
        else:
            masks = np.array([random_mask(rng, kind)] * n)
        y_in = np.where(masks, y, np.nan)        # never read where unobserved
        post = StructuredPosterior(prior, noise).condition(phi, y_in, masks[0] if kind == "broadcast" else masks)
        mean_ref, cov_ref = dense_posterior(prior, noise, phi, y, masks)
        np.testing.assert_allclose(post.dense_cov(), cov_ref, rtol=0, atol=1e-10 * np.abs(cov_ref).max())
        np.testing.assert_allclose(post.mean_weights, mean_ref, rtol=0, atol=1e-9)
        # Added in pieces, in another order: the same posterior.
        order = rng.permutation(n)
        half = n // 2
        pieces = StructuredPosterior(prior, noise)
        pieces.add(phi[order[:half]], y_in[order[:half]], masks[order[:half]])
        pieces.add(phi[order[half:]], y_in[order[half:]], masks[order[half:]])
        np.testing.assert_allclose(pieces.mean_weights, post.mean_weights, rtol=0, atol=1e-10)


@given(seed=st.integers(0, 2 ** 32 - 1), n=st.integers(1, 60), n_signals=st.sampled_from([1, 3, 20, 63, 70]),
       n_patterns=st.integers(1, 6))
@settings(max_examples=fuzz_examples(60))
def test_mask_grouping_is_exactly_numpys_row_unique(seed, n, n_signals, n_patterns):
    """The cheap grouping of the rows by mask pattern (the masked refresh cost 7 ms after
    2600 VR observations: np.unique sorting the rows) gives np.unique's patterns, in its
    order, with the same rows in the same order: the Grams are bit for bit the same."""
    rng = np.random.default_rng(seed)
    pool = rng.random((n_patterns, n_signals)) < 0.5
    mask = pool[rng.integers(n_patterns, size=n)]
    patterns, inverse = np.unique(mask, axis=0, return_inverse=True)
    got = _mask_patterns(mask)
    assert len(got) == len(patterns)
    for p, (pattern, rows) in enumerate(got):
        np.testing.assert_array_equal(pattern, patterns[p])
        expected = np.flatnonzero(inverse.ravel() == p)
        np.testing.assert_array_equal(np.arange(n) if rows is None else rows, expected)


def test_masked_filter_likelihood_equals_the_dense_gaussian(library):
    """The filter's grid log-posterior with masked evidence equals, hypothesis by hypothesis,
    the joint Gaussian of the observed entries under its latent model (shared latent:
    covariance L L^T + diag(v) over every evidence observation)."""
    f = TaskPhaseFilter(library.promps[:2], PhaseGridConfig(n_speeds=5, n_offsets=3, latent_rank=3))
    rng = np.random.default_rng(5)
    for i in range(9):
        mask = None if i % 4 == 0 else random_mask(rng, ["vr", "single", "no_hands"][i % 3])
        y = rng.normal(0.0, 0.3, D)
        f.add(float(rng.uniform(-0.3, 2.5)), y if mask is None else poisoned(y, mask, rng), mask)
    evidence = list(f._buckets.values())
    ref = np.zeros((2, len(f.speed_grid), len(f.offset_grid)))
    for k, (i, a), (j, off) in itertools.product(range(2), enumerate(f.speed_grid), enumerate(f.offset_grid)):
        res, lat, var = [], [], []
        for t, y, mask in evidence:
            g = int(np.rint(np.clip(a * (t - off) / f.durations[k], 0.0, 1.0) * (f._G - 1)))
            m = np.ones(D, bool) if mask is None else mask
            res.append(y[m] - f._m_tab[k, g][m])
            lat.append(f._lat_tab[k, g][m])
            var.append(1.0 / f._w_tab[k, g][m])
        r, lm = np.concatenate(res), np.concatenate(lat)
        cov = lm @ lm.T + np.diag(np.concatenate(var))
        ref[k, i, j] = -0.5 * (r @ np.linalg.solve(cov, r) + np.linalg.slogdet(2 * np.pi * cov)[1])
    ref += f._grid_log_prior.reshape(ref.shape[1:])[None] + f._task_log_prior[:, None, None]
    ref -= np.log(np.sum(np.exp(ref - ref.max()))) + ref.max()
    np.testing.assert_allclose(f.log_posterior(), ref, rtol=0, atol=1e-9)


# ------------------------------------------------------------------ adversarial streams
@given(seed=st.integers(0, 2 ** 32 - 1), kinds=st.lists(st.sampled_from(["vr", "single", "no_hands", "random",
                                                                         "none"]), min_size=1, max_size=4),
       shuffle=st.booleans(), averaging=st.sampled_from(["none", "unscented"]))
@settings(max_examples=fuzz_examples(12))
def test_a_randomised_masked_stream_keeps_the_posterior_exact_and_proper(tasks, library, seed, kinds, shuffle,
                                                                       averaging):
    rng = np.random.default_rng(seed)
    task = int(rng.integers(len(tasks)))
    demo, _ = tasks[task].execution(rng, speed=float(np.exp(rng.uniform(-0.8, 0.8))), rate_hz=50.0)
    est = OnlineEstimator(library, EstimatorConfig(ood_indices=(1, 2, 4), phase_averaging=averaging))
    order = rng.permutation(len(demo.times)) if shuffle else np.arange(len(demo.times))
    for i in order[: int(rng.integers(5, len(order)))]:
        kind = kinds[int(rng.integers(len(kinds)))]
        mask = None if kind == "none" else random_mask(rng, kind)
        y = demo.values[i] if mask is None else poisoned(demo.values[i], mask, rng)
        e = est.update(float(demo.times[i]), y, mask)
        if rng.random() < 0.15:   # a duplicated packet changes nothing
            assert est.update(float(demo.times[i]), y, mask).n_observations == e.n_observations
        if rng.random() < 0.1:    # the same time, another part or version of the sample
            other = random_mask(rng, "random")
            est.update(float(demo.times[i]), poisoned(demo.values[i] + 0.01, other, rng), other)
        assert np.all(np.isfinite(e.task_probabilities)) and abs(e.task_probabilities.sum() - 1) < 1e-9
        assert np.isfinite(e.speed) and np.isfinite(e.offset) and 0 <= e.phase <= 1
    check_posterior(est, est.filter.best_task())


def test_an_all_false_mask_is_refused_and_changes_nothing(library, tasks):
    est = OnlineEstimator(library)
    y = tasks[0].values(np.array([0.2]))[0]
    est.update(0.4, y, random_mask(np.random.default_rng(0), "vr"))
    before = (est.estimate(), est.predict_many([0.5, 1.0]))
    for mask in (np.zeros(D, bool), np.zeros(D, int), [False] * D):
        with pytest.raises(ValueError, match="observes no signal"):
            est.update(0.5, np.full(D, np.nan), mask)
    after = (est.estimate(), est.predict_many([0.5, 1.0]))
    assert est.n_observations == 1 and after[0].n_observations == 1
    assert (before[0].speed, before[0].offset, before[0].phase) == (after[0].speed, after[0].offset, after[0].phase)
    np.testing.assert_array_equal(before[0].task_probabilities, after[0].task_probabilities)
    np.testing.assert_array_equal(before[1][0], after[1][0])
    # The filter alone ignores it (nothing to add), as its docstring says.
    assert est.filter.add(0.5, np.full(D, np.nan), np.zeros(D, bool)) is False


def same_time_packets(tasks):
    """Packets of one time stamp: parts of one sample (disjoint masks) with an overlapping
    version (other values), as duplicated / re-sent packets with other masks bring them."""
    y = tasks[0].values(np.array([0.25]))[0]
    m = np.zeros((4, D), bool)
    m[0, :2] = m[1, 2:] = m[2, :5] = m[3, :2] = True
    return [(y + 0.01, m[0]), (y, m[1]), (y - 0.02, m[2]), (y - 0.01, m[3])]


@pytest.mark.parametrize("subset", [(0, 1, 2), (0, 3, 1), (0, 1, 2, 3)])
def test_the_filter_evidence_of_same_time_parts_does_not_depend_on_their_order(library, tasks, subset):
    """Failed before the fix: the bucket's representative was merged into or compared with
    the current one on arrival (A, B, C kept A+B, while C, A, B kept C), so the evidence,
    hence the task and speed estimates, depended on the order of arrival."""
    packets = [same_time_packets(tasks)[i] for i in subset]
    results = []
    for perm in itertools.permutations(packets):
        f = TaskPhaseFilter(library.promps)
        for y, mask in perm:
            f.add(0.5, poisoned(y, mask, np.random.default_rng(0)), mask)
        assert f.n_evidence == 1
        results.append(f.log_posterior())
    for lp in results[1:]:
        np.testing.assert_allclose(lp, results[0], rtol=0, atol=1e-12)


def test_the_estimator_does_not_depend_on_the_order_of_masked_packets(library, tasks):
    """A stream with changing masks, same-time parts and duplicates, in three arrival
    orders: the same estimate and prediction (the filter's representative per time stamp
    and the posterior's sums are functions of the set of packets)."""
    rng = np.random.default_rng(11)
    demo, _ = tasks[1].execution(rng, speed=1.2, rate_hz=40.0)
    packets = []
    for t, y in zip(demo.times[:40], demo.values[:40]):
        mask = random_mask(rng, "random")
        packets.append((float(t), poisoned(y, mask, rng), mask))
        if rng.random() < 0.4 and (~mask).sum() >= 2:   # the rest of the sample, sent apart ...
            packets.append((float(t), poisoned(y, ~mask, rng), ~mask))
            # ... and a re-sent version overlapping both parts, with other values.
            version = mask.copy()
            version[np.flatnonzero(~mask)[0]] = True
            packets.append((float(t), poisoned(y - 0.02, version, rng), version))
        if rng.random() < 0.3:   # a re-sent version with another mask and values
            other = random_mask(rng, "random")
            packets.append((float(t), poisoned(y + 0.02, other, rng), other))
    outs = []
    for order in (np.arange(len(packets)), np.arange(len(packets))[::-1], rng.permutation(len(packets))):
        est = OnlineEstimator(library)
        for i in order:
            t, y, mask = packets[i]
            est.update(t, y, mask)
        e = est.estimate()
        outs.append((e.task_probabilities, e.speed, e.offset, *est.predict_many(np.linspace(0.0, 3.0, 7))))
    for other in outs[1:]:
        for a, b in zip(outs[0], other):
            np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)


def test_a_prediction_at_the_motion_start_is_not_spread_by_an_observation_before_it(library, tasks):
    """Failed before the fix: with the newest observation before the start of the motion
    (phase 0 under every speed), the future-speed nodes were anchored at its unclipped,
    negative phase, so at the start itself, where every speed gives phase 0, they mixed in
    later phases (mean off by 0.04, variance x 1.3)."""
    y0 = tasks[0].values(np.array([0.0]))[0]
    spread, plain = OnlineEstimator(library), OnlineEstimator(library, EstimatorConfig(future_speed_std=0.0))
    for est in (spread, plain):
        est.update(-3.0, y0)
    offset = spread.time_warp().offset
    assert spread.time_warp() == plain.time_warp()
    times = np.array([offset - 0.5, offset])
    mean, cov = spread.predict_many(times)
    mean0, cov0 = plain.predict_many(times)
    np.testing.assert_allclose(mean, mean0, rtol=0, atol=1e-12)
    np.testing.assert_allclose(cov, cov0, rtol=1e-12, atol=1e-15)
    # Later on, the spread over the future speeds is there (the feature still works).
    late_mean, late_cov = spread.predict_many([offset + 1.0])
    assert np.trace(late_cov[0]) > np.trace(plain.predict_many([offset + 1.0])[1][0])


# ------------------------------------------------------------------ edges
@pytest.mark.parametrize("grid", [PhaseGridConfig(), PhaseGridConfig(n_speeds=1, n_offsets=1),
                                  PhaseGridConfig(n_speeds=2, n_offsets=1, latent_rank=0)],
                         ids=["default", "one_point", "rank0"])
@pytest.mark.parametrize("n_tasks", [1, 3])
def test_grid_edges_one_task_and_speeds_beyond_the_grid(library, tasks, grid, n_tasks):
    lib = TaskLibrary(dict(list(library.items())[:n_tasks]))
    rng = np.random.default_rng(n_tasks)
    for speed in (0.3, 0.5, 2.0, 3.0):          # the grid spans 0.5 .. 2
        demo, _ = tasks[0].execution(rng, speed=speed, rate_hz=40.0)
        est = OnlineEstimator(lib, EstimatorConfig(grid=grid, ood_indices=(1, 2)))
        for i, (t, y) in enumerate(zip(demo.times, demo.values)):
            mask = None if i % 3 == 0 else random_mask(rng, "single")
            e = est.update(float(t), y if mask is None else poisoned(y, mask, rng), mask)
            assert np.isfinite(e.speed) and np.all(np.isfinite(e.task_probabilities))
        check_posterior(est, e.task_index)


@pytest.mark.parametrize("gap", [0.0, 1e-12], ids=["identical", "near_identical"])
def test_a_task_learned_from_two_near_identical_demos(tasks, gap):
    rng = np.random.default_rng(4)
    d1, _ = tasks[1].execution(rng, coeffs=np.zeros(3), noise_std=0.0, rate_hz=50.0)
    d2 = Demonstration(d1.times.copy(), d1.values + gap, label=d1.label)
    lib = TaskLibrary.learn({"flat": [d1, d2], "other": tasks[2].demonstrations(rng, 4, rate_hz=50.0)},
                            basis=RBFBasis(8))
    est = OnlineEstimator(lib)
    demo, _ = tasks[1].execution(rng, speed=1.2, rate_hz=50.0)
    for i, (t, y) in enumerate(zip(demo.times, demo.values)):
        mask = random_mask(rng, ["vr", "single", "no_hands"][i % 3])
        est.update(float(t), poisoned(y, mask, rng), mask)
    for task in (0, 1):
        check_posterior(est, task)


def test_a_library_read_from_file_gives_identical_estimates(library, tasks, tmp_path):
    library.save(tmp_path / "lib.npz")
    loaded = TaskLibrary.load(tmp_path / "lib.npz")
    rng = np.random.default_rng(9)
    demo, _ = tasks[2].execution(rng, speed=0.9, rate_hz=50.0)
    masks = [random_mask(rng, "random") for _ in demo.times]
    outs = []
    for lib in (library, loaded):
        est = OnlineEstimator(lib, EstimatorConfig(ood_indices=(1, 2, 4)))
        trace = [est.update(float(t), y, m) for t, y, m in zip(demo.times, demo.values, masks)]
        outs.append(([(e.task_index, e.speed, e.offset, e.out_of_distribution, *e.task_probabilities)
                      for e in trace], *est.predict_many(np.linspace(0.0, 3.0, 7))))
    assert outs[0][0] == outs[1][0]
    np.testing.assert_array_equal(outs[0][1], outs[1][1])
    np.testing.assert_array_equal(outs[0][2], outs[1][2])


def test_time_stamps_at_the_clock_limits(library, tasks):
    rng = np.random.default_rng(2)
    demo, _ = tasks[0].execution(rng, rate_hz=25.0)
    est = OnlineEstimator(library)
    for t, y in zip(demo.times, demo.values):
        est.update(float(t), y, random_mask(rng, "vr"))
    for t in (-MAX_TIME_S, MAX_TIME_S, 1e5, -1e5):
        mask = random_mask(rng, "single")
        e = est.update(t, poisoned(demo.values[0], mask, rng), mask)
        assert e.outside_motion
    with pytest.raises(ValueError):
        est.update(MAX_TIME_S * 1.0001, demo.values[0])
    assert est.n_outside_motion == 4
    check_posterior(est, est.filter.best_task())
    mean, cov = est.predict_many([-MAX_TIME_S, 0.0, 1.0, MAX_TIME_S])
    assert np.all(np.isfinite(mean)) and np.all(np.isfinite(cov))


def test_a_long_masked_session_does_not_drift(library, tasks):
    """3000 out-of-order updates with changing masks and late replacements: the filter's
    running sums equal those of a fresh filter given only the final evidence, and the
    weight posterior stays the dense formula's."""
    rng = np.random.default_rng(21)
    demo, _ = tasks[1].execution(rng, rate_hz=50.0)
    est = OnlineEstimator(library)
    for _ in range(3000):
        j = int(rng.integers(len(demo.times)))
        t = float(demo.times[j] + rng.uniform(-0.03, 0.03) + 5.0 * rng.integers(0, 3))
        mask = random_mask(rng, "vr" if rng.random() < 0.7 else "random")
        est.update(t, poisoned(demo.values[j], mask, rng), mask)
    fresh = TaskPhaseFilter(library.promps)
    for t, y, mask in est.filter._buckets.values():
        fresh.add(t, y, mask)
    np.testing.assert_allclose(est.filter.log_posterior(), fresh.log_posterior(), rtol=0, atol=1e-8)
    check_posterior(est, est.filter.best_task())
    assert len(est._times) <= 2 * est.n_observations      # buffers grow by doubling, no more


# ------------------------------------------------------------------ cost (printed, not asserted)
