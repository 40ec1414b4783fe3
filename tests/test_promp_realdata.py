"""Real data: the 8 Xsens "put the box aside" demos (hands), learn from 7, predict the 8th."""

import numpy as np
import pytest

from conftest import shared_data

from promp.estimator import OnlineEstimator
from promp.evaluation import evaluate_library
from promp.learning import Demonstration
from promp.library import TaskLibrary

RATE_HZ = 100.0                      # not stated by the source; see shared/data/README.md
RIGHT_HAND, LEFT_HAND = 10, 14       # MVN segment indices; 7 columns per segment


def load_hand_demos() -> list[Demonstration]:
    folder = shared_data("xsens_putaside_box", needs=tuple(f"p{i}.csv" for i in range(1, 9)))
    demos = []
    for i in range(1, 9):
        poses = np.loadtxt(folder / f"p{i}.csv", delimiter=",")
        assert poses.shape[1] == 161
        hands = np.concatenate([poses[:, 7 * RIGHT_HAND:7 * RIGHT_HAND + 3],
                                poses[:, 7 * LEFT_HAND:7 * LEFT_HAND + 3]], axis=1)   # metres
        demos.append(Demonstration(np.arange(len(poses)) / RATE_HZ, hands, label="put_box_aside"))
    return demos


def test_conditioning_on_half_of_a_real_motion_cuts_the_remaining_error():
    demos = load_hand_demos()
    library = TaskLibrary.learn({"put_box_aside": demos[:7]})
    test = demos[7]
    t = test.times - test.times[0]
    half = t <= 0.5 * t[-1]
    est = OnlineEstimator(library)
    for ti, yi in zip(t[half], test.values[half]):
        est.update(ti, yi)
    mean, var = est.predict_many(t[~half], full_cov=False)
    promp = library["put_box_aside"]
    prior = promp.mean(promp.phase(t[~half]))
    rms = np.sqrt(np.mean((mean - test.values[~half]) ** 2))
    rms_prior = np.sqrt(np.mean((prior - test.values[~half]) ** 2))
    print(f"remaining-half RMS: prior mean {rms_prior:.4f} m, conditioned {rms:.4f} m")
    # 0.47 x the prior with conditioning_noise_scale 1, 0.68 x with 100 (the default since
    # the held-out-performer round: over the whole Xsens leave-one-out the remainder after
    # 1/2 went 1.68 -> 1.53 cm, on HDM05 holdouts up to 4 cm better; this one take loses).
    # Averaging over the remaining speed (future_speed_std 0.3, the eighth round) costs this
    # take 2.96 -> 3.12 cm while the whole leave-one-out goes 1.53 -> 1.51 cm.
    assert rms < 0.75 * rms_prior
    assert rms < 0.033                                  # metres
    # The evaluation helper agrees with the hand-written loop at level "1/2".
    res = evaluate_library(library, [test], ["put_box_aside"], groups={"hands": range(6)})
    assert res["rms_remaining"]["1/2"]["groups"]["hands"]["mean"] == pytest.approx(rms, rel=1e-6)
    prior_whole = np.sqrt(np.mean((promp.mean(promp.phase(t)) - test.values) ** 2))
    assert res["rms_remaining"]["none"]["groups"]["hands"]["mean"] == pytest.approx(prior_whole, rel=1e-6)
