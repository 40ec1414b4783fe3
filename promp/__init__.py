"""ProMP library for prescient teleoperation (thesis Ch. 5): numpy/scipy only.

Modules, in data-flow order:
    basis        normalised Gaussian RBFs over the phase (Eq. 5.3)
    learning     demonstrations -> ProMP (Eqs. 5.5-5.6, covariance regularisation, noise)
    model        ProMP: trajectory mean/cov, sampling, dense sequential conditioning (5.9-5.12)
    posterior    fast exact conditioning of learned (structured) ProMPs, information form
    library      one ProMP per task label; versioned .npz file
    phase_filter task recognition (5.7) and continuous speed/offset estimation (5.8)
    onset        motion-onset detection (t_0 of Eq. 5.13)
    ood          the Delta-sigma out-of-distribution test (§5.3.12)
    estimator    online estimator: one update per observation, predict / predict_many
    evaluation   recognition accuracy, prediction RMS and coverage (Table 5.2 protocol)
    selection    leave-one-out scores (how the defaults were chosen)
    synthetic    seeded synthetic tasks for tests and benchmarks

User guide, with examples: promp/README.md.
"""

from promp.basis import RBFBasis
from promp.estimator import Estimate, EstimatorConfig, OnlineEstimator
from promp.learning import CovarianceRegularisation, Demonstration, SingleDemonstrationWarning, learn_promp
from promp.library import LibraryFormatError, TaskLibrary
from promp.model import GaussianWeights, ProMP
from promp.onset import OnsetDetector, detect_onset
from promp.ood import DeltaSigmaTest
from promp.phase_filter import PhaseGridConfig, TaskPhaseFilter, TimeWarp
from promp.posterior import StructuredPosterior

__all__ = [
    "RBFBasis", "Demonstration", "CovarianceRegularisation", "SingleDemonstrationWarning", "learn_promp", "ProMP",
    "GaussianWeights", "StructuredPosterior", "TaskLibrary", "LibraryFormatError",
    "PhaseGridConfig", "TaskPhaseFilter", "TimeWarp", "OnsetDetector", "detect_onset",
    "DeltaSigmaTest", "EstimatorConfig", "Estimate", "OnlineEstimator",
]
