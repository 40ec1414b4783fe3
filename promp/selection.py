"""Leave-one-out model selection: the measurement behind the library's defaults.

For one task's demonstrations, each demo in turn is held out, a ProMP is learned from the
others, and the held-out motion is predicted by the online estimator after half of it was
observed (as in :func:`promp.evaluation.evaluate_library`, level "1/2"). The scores say how
a setting (basis size and width, covariance regularisation, ...) predicts motions it has
not seen, which is what the product needs, rather than how closely it fits the demos.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from promp.basis import RBFBasis
from promp.estimator import EstimatorConfig, OnlineEstimator
from promp.evaluation import evaluate_library
from promp.learning import DEFAULT_REGULARISATION, CovarianceRegularisation, Demonstration, fit_weights
from promp.library import TaskLibrary

__all__ = ["leave_one_out_scores"]


def leave_one_out_scores(demos: Sequence[Demonstration], basis: RBFBasis = RBFBasis(), *,
                         regularisation: CovarianceRegularisation = DEFAULT_REGULARISATION,
                         covariance: str = "full", config: EstimatorConfig = EstimatorConfig(),
                         ridge: float = 1e-12) -> dict[str, Any]:
    """Leave-one-out scores of one task's demonstrations (needs >= 3 demos).

    Returns:
        dict with "fit_rms" (RMS residual of the ridge fit over all demos, the basis's
        reconstruction error), "prior_rms" (remaining half, the task's prior mean at the
        nominal phase t / T_bar: the baseline "half_rms" is compared with),
        "half_rms" (remaining half after conditioning on the first half), "half_coverage"
        (2-sigma coverage of the remaining half) and "half_nll" (mean Gaussian negative
        log-likelihood per remaining sample and signal, with the predicted variances), all
        pooled over signals and averaged over the folds.
    """
    if len(demos) < 3:
        raise ValueError("leave-one-out needs at least 3 demonstrations")
    fit = np.sqrt(np.mean(np.concatenate(
        [fit_weights(basis, d.times, d.values, ridge)[1].ravel() for d in demos]) ** 2))
    prior, half, cover, nll = [], [], [], []
    for i, held in enumerate(demos):
        train = [d for j, d in enumerate(demos) if j != i]
        lib = TaskLibrary.learn({"task": train}, basis=basis, regularisation=regularisation,
                                covariance=covariance, ridge=ridge)
        res = evaluate_library(lib, [held], ["task"], groups={"all": range(held.n_signals)},
                               config=config)
        # The prior mean on the same remaining half as "half_rms" (level "none" would score
        # it over the whole motion, the first half included).
        prior.append(res["rms_remaining_prior"]["1/2"]["groups"]["all"]["mean"])
        half.append(res["rms_remaining"]["1/2"]["groups"]["all"]["mean"])
        cover.append(res["coverage_2sigma"]["1/2"]["overall"])
        nll.append(_half_nll(lib, held, config))
    return {"fit_rms": float(fit), "prior_rms": float(np.mean(prior)), "half_rms": float(np.mean(half)),
            "half_coverage": float(np.mean(cover)), "half_nll": float(np.mean(nll))}


def _half_nll(lib: TaskLibrary, held: Demonstration, config: EstimatorConfig) -> float:
    est = OnlineEstimator(lib, config)
    t = held.times - held.times[0]
    half = t <= 0.5 * t[-1]
    for ti, yi in zip(t[half], held.values[half]):
        est.update(ti, yi)
    mean, var = est.predict_many(t[~half], full_cov=False)
    err = held.values[~half] - mean
    return float(np.mean(0.5 * (np.log(2 * np.pi * var) + err ** 2 / var)))
