"""Between-performer variance: measured at learning, saved, and used by the recogniser.

A task demonstrated by several performers measures how much their mean trajectories
differ (promp.learning.between_group_variance); the task/phase filter adds it (averaged
over the tasks) to its likelihood's residual variance, so that a new performer's style on a
signal the performers are known to disagree on does not decide the recognition.
"""

import numpy as np
import pytest

from promp.basis import RBFBasis
from promp.learning import Demonstration, between_group_variance, learn_promp
from promp.library import TaskLibrary
from promp.phase_filter import PhaseGridConfig, TaskPhaseFilter

BASIS = RBFBasis(12)


def _demo(label, group, s0, s1, duration=1.0, rate=100.0, rng=None, noise=1e-3):
    """A take whose two signals are functions of the phase z in [0, 1]."""
    t = np.arange(0.0, duration + 1e-9, 1.0 / rate)
    z = t / duration
    y = np.stack([s0(z), s1(z)], axis=1)
    if rng is not None:
        y = y + noise * rng.standard_normal(y.shape)
    return Demonstration(t, y, label=label, group=group)


def test_between_group_variance_is_half_the_squared_group_difference():
    # Group "a" at s1 = 0, group "b" at s1 = 0.2 z: the unbiased variance of two group means
    # is half their squared difference, 0.02 z^2, whose phase average is 0.02 / 3.
    rng = np.random.default_rng(0)
    demos = [_demo("t", "a", lambda z: z, lambda z: 0 * z, rng=rng) for _ in range(3)] + \
            [_demo("t", "b", lambda z: z, lambda z: 0.2 * z, rng=rng) for _ in range(3)]
    var = between_group_variance(demos, BASIS)
    assert var.shape == (2,)
    assert var[0] < 1e-5                                   # the groups agree on s0
    assert var[1] == pytest.approx(0.02 / 3, rel=0.05)


def test_between_group_variance_needs_two_named_groups():
    rng = np.random.default_rng(1)
    one = [_demo("t", "a", lambda z: z, lambda z: z, rng=rng) for _ in range(3)]
    unnamed = [_demo("t", None, lambda z: z, lambda z: z, rng=rng) for _ in range(3)]
    assert between_group_variance(one, BASIS) is None
    assert between_group_variance(unnamed, BASIS) is None
    assert learn_promp(one, BASIS).group_var is None


def test_group_var_survives_save_and_load(tmp_path):
    rng = np.random.default_rng(2)
    demos = [_demo("t", g, lambda z: z, lambda z: (0.1 if g == "b" else 0.0) * z, rng=rng)
             for g in "aabb"]
    lib = TaskLibrary.learn({"t": demos}, basis=BASIS)
    assert lib["t"].group_var is not None and lib["t"].group_var[1] > 1e-4
    path = tmp_path / "lib.npz"
    lib.save(path)
    np.testing.assert_array_equal(TaskLibrary.load(path)["t"].group_var, lib["t"].group_var)


def _two_task_library():
    """Tasks "up" and "flat" over (s0, s1).

    "up": s0 rises 0 -> 1 and both training performers keep s1 at 0 exactly.
    "flat": s0 rises only 0 -> 0.6; on s1 the two performers disagree (+0.15 z vs -0.15 z),
    so the library knows that performers differ on s1 by about 0.15 z.
    """
    rng = np.random.default_rng(3)
    up = [_demo("up", g, lambda z: z, lambda z: 0 * z, rng=rng) for g in "aaabbb"]
    flat = [_demo("flat", "a", lambda z: 0.6 * z, lambda z: 0.15 * z, rng=rng) for _ in range(3)] + \
           [_demo("flat", "b", lambda z: 0.6 * z, lambda z: -0.15 * z, rng=rng) for _ in range(3)]
    return TaskLibrary.learn({"up": up, "flat": flat}, basis=BASIS)


def _recognise(lib, config, take):
    filt = TaskPhaseFilter(lib.promps, config)
    for t, y in zip(take.times, take.values):
        if t > 0.25 * take.duration:
            break
        filt.add(t, y)
    return lib.labels[filt.best_task()]


def test_new_performers_style_on_a_disputed_signal_does_not_decide_recognition():
    # A third performer does "up" (s0 rises to 1) with a style of its own on s1 (0.2 z, as
    # far off as the training performers are from each other on "flat"). Without the
    # between-performer variance, s1's residual variance of "up" is the ridge noise and
    # the style alone hands the take to "flat"; with it, s0 decides, as it should.
    lib = _two_task_library()
    take = _demo("up", "c", lambda z: z, lambda z: 0.2 * z, rng=np.random.default_rng(4))
    assert _recognise(lib, PhaseGridConfig(between_group_variance=True), take) == "up"
    assert _recognise(lib, PhaseGridConfig(between_group_variance=False), take) == "flat"


def test_filter_uses_the_measured_variance_only_when_there_is_one():
    lib = _two_task_library()
    filt = TaskPhaseFilter(lib.promps)
    expected = np.mean([p.group_var for p in lib.promps], axis=0)
    np.testing.assert_allclose(filt.between_group_var, expected)
    # Every task's residual variance is at least the measured between-performer part.
    assert np.all(1.0 / filt._w_tab >= expected[None, None, :] * (1 - 1e-12))
    assert TaskPhaseFilter(lib.promps, PhaseGridConfig(between_group_variance=False)).between_group_var is None
    # A one-performer library (no group_var) builds exactly the tables it built before.
    for p in lib.promps:
        p.group_var = None
    plain = TaskPhaseFilter(lib.promps)
    off = TaskPhaseFilter(lib.promps, PhaseGridConfig(between_group_variance=False))
    assert plain.between_group_var is None
    np.testing.assert_array_equal(plain._w_tab, off._w_tab)


def test_group_offset_column_is_the_measured_between_performer_std():
    # augment_promp(group_offset=g): one constant column per signal with std g sqrt(group_var_d);
    # without a measured group_var the hand-set offset fraction of the demo spread applies.
    from promp.learning import augment_promp
    promp = _two_task_library()["flat"]
    D, k, r = promp.low_rank.shape
    aug = augment_promp(promp, offset=0.3, group_offset=2.0)
    assert aug.low_rank.shape == (D, k, r + D)
    expected = np.zeros((D, k, D))
    expected[np.arange(D), :, np.arange(D)] = 2.0 * np.sqrt(promp.group_var)[:, None]
    np.testing.assert_allclose(aug.low_rank[:, :, r:], expected)
    spread_based = augment_promp(promp, offset=0.3)
    assert not np.allclose(spread_based.low_rank[:, :, r:], expected)
    promp.group_var = None
    np.testing.assert_allclose(augment_promp(promp, offset=0.3, group_offset=2.0).low_rank,
                               spread_based.low_rank)
    assert augment_promp(promp, group_offset=2.0) is promp           # nothing to add


def test_group_offset_carries_a_new_performers_offset_into_the_remainder():
    # On "flat", the training performers disagree on s1 by +-0.15 z; a third performer runs
    # s1 = 0.1 + 0.15 z (shifted by 0.1 throughout). Conditioned on the first half (true
    # phases), the between-performer offset prior predicts the shift at the end of the
    # motion, the learned covariance alone (whose s1 directions all start at 0) does not.
    from promp.learning import augment_promp
    from promp.posterior import StructuredPosterior
    promp = _two_task_library()["flat"]
    take = _demo("flat", "c", lambda z: 0.6 * z, lambda z: 0.1 + 0.15 * z, rng=np.random.default_rng(5))
    z = take.phases
    seen = z <= 0.5
    errors = {}
    for name, model in (("plain", promp), ("group", augment_promp(promp, group_offset=1.0))):
        post = StructuredPosterior(model, promp.noise_var * 100.0)
        post.condition(BASIS(z[seen]), take.values[seen])
        mean, _ = post.predict(BASIS(z[-1:]), full_cov=False)
        errors[name] = abs(mean[0, 1] - take.values[-1, 1])
    assert errors["group"] < 0.5 * errors["plain"]
    assert errors["group"] < 0.03


def test_group_amplitude_applies_only_to_models_that_know_several_performers():
    # A scaling between performers is added to the prior of a model learned from two named
    # performers; a one-performer model (group_var None) is left as it is.
    from promp.learning import augment_promp
    promp = _two_task_library()["flat"]
    D, k, r = promp.low_rank.shape
    aug = augment_promp(promp, group_amplitude=0.3)
    assert aug.low_rank.shape == (D, k, r + 1)
    np.testing.assert_allclose(aug.low_rank[:, :, r], 0.3 * (promp.weight_mean - promp.weight_mean[:, :1]))
    promp.group_var = None
    assert augment_promp(promp, group_amplitude=0.3) is promp
    assert augment_promp(promp, amplitude=0.2, group_amplitude=0.3).low_rank.shape == (D, k, r + 1)
