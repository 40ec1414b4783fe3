"""Leave-one-out scores: every figure is on the part of the held-out motion it says."""

import numpy as np
import pytest

from promp.basis import RBFBasis
from promp.learning import Demonstration
from promp.library import TaskLibrary
from promp.selection import leave_one_out_scores


def test_prior_rms_is_the_prior_mean_on_the_remaining_half_like_half_rms():
    rng = np.random.default_rng(0)
    demos = []
    for i in range(4):
        T = 1.0 + 0.1 * i
        t = np.linspace(0.0, T, 80)
        demos.append(Demonstration(t, np.stack([np.sin((d + 1) * 2 * t / T + 0.2 * rng.normal())
                                                * (1 + 0.3 * rng.normal()) for d in range(2)], 1)))
    basis = RBFBasis(12)
    scores = leave_one_out_scores(demos, basis)
    remaining, whole = [], []
    for i, held in enumerate(demos):
        promp = TaskLibrary.learn({"task": [d for j, d in enumerate(demos) if j != i]}, basis=basis)["task"]
        t = held.times - held.times[0]
        err = promp.mean(promp.phase(t)) - held.values
        remaining.append(np.sqrt(np.mean(err[t > 0.5 * t[-1]] ** 2)))
        whole.append(np.sqrt(np.mean(err ** 2)))
    # Before: the prior over the whole motion (first half included), not the baseline of
    # "half_rms", which scores the remaining half only.
    assert scores["prior_rms"] == pytest.approx(np.mean(remaining), rel=1e-9)
    assert abs(np.mean(remaining) - np.mean(whole)) > 0.01
