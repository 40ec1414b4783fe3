"""ProMP conditioning: our library vs the peer ``movement_primitives.promp.ProMP``.

Set-up (seeded): one task over 32 signals learned from 8 random smooth demonstrations
(:mod:`promp.synthetic`), 20 basis functions per signal (640 weights), then the same 25
observations of all 32 signals (a held-out execution, at 25 phases spread over its first
60 %, in time order like delayed packets) are conditioned on, one at a time, by both
libraries.

Same model for both, so the posteriors must agree:
- basis: the peer's RBFs (centres linspace(0, 1, k), variance h = -1 / (8 k^2 ln 0.7),
  normalised), i.e. our ``RBFBasis(k, margin_factor=0, width=sqrt(h))``;
- prior: our learned N(mu_w, Sigma_w), given to the peer as dense arrays with
  ``from_weight_distribution`` (the peer's own learning is EM with a different noise
  model, so it is not used);
- noise: the peer adds ``y_cov`` to Psi^T Sigma_w Psi in ``condition_position``, exactly
  where Eq. 5.12 puts Sigma*_y: we pass our learned per-signal noise as diag(noise_var).

What is timed, per conditioning point:
- ours: ``StructuredPosterior.add`` of the point, then ``predict`` of the mean (32,) and
  full covariance (32, 32) at the next point's phase, which forces the posterior refresh
  (so the time includes conditioning AND a prediction);
- peer: ``condition_position`` only (it returns the conditioned ProMP; no prediction is
  charged to it).
Reported: medians over all points of all repetitions, the speed-up (peer / ours), and the
largest relative difference between the final posteriors (mean weights and the dense
640 x 640 covariance, each relative to the peer's largest absolute entry). The peer is an
optional dependency (``peers`` extra): without it, ours is still timed and the peer's
figures are None.
"""

from __future__ import annotations

import sys
import time

import numpy as np

from promp.basis import RBFBasis
from promp.learning import learn_promp
from promp.posterior import StructuredPosterior
from promp.synthetic import learn_library, make_tasks
from teleop.benchmarks.stages import verdict

__all__ = ["run", "format_table", "time_estimator"]

N_SIGNALS = 32
N_BASIS = 20
N_DEMOS = 8
N_POINTS = 25
#: What to install for the peer.
PEER_INSTALL = "pip install -e '.[peers]'"
#: The speed-up over the peer the README states as the target (the peer's median / ours, per point).
TARGET_SPEEDUP = 10.0


def _peer_basis(k: int) -> RBFBasis:
    h = -1.0 / (8.0 * k ** 2 * np.log(0.7))
    return RBFBasis(n_basis=k, margin_factor=0.0, width=float(np.sqrt(h)))


def run(quick: bool = False, progress: bool = False) -> dict:
    """Run the comparison (``quick``: 1 repetition instead of 5) and return the figures.

    Without movement_primitives, ``peer_median_ms``, ``speedup`` and ``max_rel_diff``
    are None (and a note goes to stderr); ours is timed all the same.
    """
    try:
        from movement_primitives.promp import ProMP as PeerProMP
    except ImportError as exc:
        PeerProMP = None
        print(f"bench promp: movement_primitives cannot be imported ({exc}): timing ours only "
              f"({PEER_INSTALL} to compare)", file=sys.stderr)

    from teleop.benchmarks.stages import Stages

    stage = Stages("bench promp", 3, progress)
    stage(f"conditioning on {N_POINTS} points, ours and movement_primitives")
    rng = np.random.default_rng(7)
    task = make_tasks(seed=3, n_tasks=1, n_signals=N_SIGNALS, duration=3.0)[0]
    basis = _peer_basis(N_BASIS)
    promp = learn_promp(task.demonstrations(rng, N_DEMOS), basis)
    test, _ = task.execution(rng)
    rows = np.linspace(0, int(0.6 * (len(test.times) - 1)), N_POINTS + 1).astype(int)
    phases = test.phases[rows]
    values = test.values[rows]
    noise_cov = np.diag(promp.noise_var)
    prior_mean, prior_cov = promp.weight_mean.ravel(), promp.weight_cov

    repeats = 1 if quick else 5
    ours_ms, peer_ms = [], []
    for _ in range(repeats):
        post = StructuredPosterior(promp)
        for i in range(N_POINTS):
            t0 = time.perf_counter()
            post.add(basis(phases[i:i + 1]), values[i:i + 1])
            post.predict(basis(phases[i + 1:i + 2]))
            ours_ms.append((time.perf_counter() - t0) * 1e3)
        if PeerProMP is None:
            continue
        peer = PeerProMP(N_SIGNALS, N_BASIS).from_weight_distribution(prior_mean, prior_cov)
        peer.centers = basis.centres
        for i in range(N_POINTS):
            t0 = time.perf_counter()
            peer = peer.condition_position(values[i], y_cov=noise_cov, t=float(phases[i]), t_max=1.0)
            peer_ms.append((time.perf_counter() - t0) * 1e3)

    ours = float(np.median(ours_ms))
    theirs = speedup = max_rel_diff = None
    if PeerProMP is not None:
        mean_diff = np.max(np.abs(post.mean_weights.ravel() - peer.weight_mean)) / np.max(np.abs(peer.weight_mean))
        cov_diff = np.max(np.abs(post.dense_cov() - peer.weight_cov)) / np.max(np.abs(peer.weight_cov))
        theirs = float(np.median(peer_ms))
        speedup, max_rel_diff = theirs / ours, float(max(mean_diff, cov_diff))
    # The online estimator's step (the issue's <= 1 ms target), as the library comes and as
    # the robot station configures it (no averaging over the remaining speed).
    stage("online estimator, as the library comes")
    library_step = time_estimator(quick)
    stage("online estimator, as the robot station sets it")
    station_step = time_estimator(quick, future_speed_std=0.0)
    # A VR operator measures the hands and the neck only: every update is masked.
    stage("online estimator, robot station, a VR operator's mask")
    vr_step = time_estimator(quick, future_speed_std=0.0, mask=vr_mask())
    stage.done()
    return {"ours_median_ms": ours, "peer_median_ms": theirs, "speedup": speedup,
            "max_rel_diff": max_rel_diff, "dims": N_SIGNALS, "tasks": 1,
            "estimator_step_ms": {"library": library_step, "robot_station": station_step,
                                  "robot_station_vr": vr_step}}


def format_table(result: dict) -> str:
    """Human-readable summary of :func:`run`'s result."""
    lines = [
        f"ProMP conditioning, {result['dims']} signals x {N_BASIS} basis, {result['tasks']} task, "
        f"{N_POINTS} points",
        f"{'':<34}{'median ms / point':>18}",
        f"{'ours (add + predict mean & cov)':<34}{result['ours_median_ms']:>18.3f}",
    ]
    if result["peer_median_ms"] is None:
        lines.append(f"{'movement_primitives (condition)':<34} not installed ({PEER_INSTALL} to compare)")
    else:
        lines += [f"{'movement_primitives (condition)':<34}{result['peer_median_ms']:>18.3f}",
                  f"speed-up {result['speedup']:.1f}x (target >= {TARGET_SPEEDUP:g}x: "
                  f"{verdict(result['speedup'] >= TARGET_SPEEDUP)}), "
                  f"max relative posterior difference {result['max_rel_diff']:.2e}",
                  "(both libraries on one BLAS thread, as teleop runs: threads only wait on our small products; "
                  "the peer's dense products gain from them, see README)"]
    steps = result.get("estimator_step_ms")
    if steps:
        lines += ["", "online estimator: update + predict the next 3 s at 50 Hz (6 tasks, 20 signals, "
                      "20 basis) [ms], target: median <= 1",
                  f"{'':<24}{'variances median / p90':>24}{'covariances median / p90':>27}  target"]
        for name, t in steps.items():
            met = "met" if max(t["var_median_ms"], t["full_cov_median_ms"]) <= 1.0 else "NOT met"
            lines.append(f"{name.replace('_', ' '):<24}{t['var_median_ms']:>15.3f} / {t['var_p90_ms']:<6.3f}"
                         f"{t['full_cov_median_ms']:>18.3f} / {t['full_cov_p90_ms']:<6.3f}  {met}")
    return "\n".join(lines)


def vr_mask() -> np.ndarray:
    """(20,) the signals a VR operator's references measure (head and hand trackers: the
    hands and the neck; :mod:`retarget.mapping`)."""
    from retarget.references import FLAT_SIZE, SIGNAL_SLICES

    mask = np.zeros(FLAT_SIZE, dtype=bool)
    for name in ("left_hand", "right_hand", "neck"):
        mask[SIGNAL_SLICES[name]] = True
    return mask


def time_estimator(quick: bool = False, rate_hz: float = 100.0, horizon_s: float = 3.0,
                   output_hz: float = 50.0, future_speed_std: float | None = None,
                   mask: np.ndarray | None = None) -> dict:
    """Cost of one online-estimator step: ``update`` then ``predict_many`` of the next 3 s.

    Library: 6 synthetic tasks x 20 signals x 20 basis functions, 7 demos each. One test
    motion (about 4 s) arrives at ``rate_hz``; after every observation the next
    ``horizon_s`` seconds are predicted at ``output_hz`` (150 times at 50 Hz, the thesis's
    reference output rate), once with per-signal variances and once with full (20 x 20)
    covariances. Returns medians and 90th percentiles [ms] over every step of the motion,
    and over the first second only (all 6 tasks still alive, before pruning).
    ``future_speed_std``: the estimator's setting (None: its default). ``mask``: (20,) the
    signals every observation measures (None: all), as a VR operator's (:func:`vr_mask`).
    """
    from promp.estimator import EstimatorConfig, OnlineEstimator

    rng = np.random.default_rng(1)
    tasks = make_tasks(seed=0, n_tasks=6, n_signals=20, duration=4.0)
    lib = learn_library(tasks, rng, 7)
    demo, _ = tasks[2].execution(rng, speed=1.1, rate_hz=rate_hz)
    offsets = np.arange(1, int(horizon_s * output_hz) + 1) / output_hz
    config = EstimatorConfig() if future_speed_std is None else EstimatorConfig(future_speed_std=future_speed_std)
    est = OnlineEstimator(lib, config)
    out = {}
    for full in (False, True):
        times = []
        for _ in range(1 if quick else 3):
            est.reset()
            for t, y in zip(demo.times, demo.values):
                t0 = time.perf_counter()
                est.update(t, y, mask)
                est.predict_many(t + offsets, full_cov=full)
                times.append((time.perf_counter() - t0) * 1e3)
        per_tick = np.array(times).reshape(-1, len(demo.times))
        first = per_tick[:, demo.times <= 1.0]
        key = "full_cov" if full else "var"
        out[f"{key}_median_ms"] = float(np.median(per_tick))
        out[f"{key}_p90_ms"] = float(np.percentile(per_tick, 90))
        out[f"{key}_first_second_median_ms"] = float(np.median(first))
    out["predicted_points"] = len(offsets)
    return out
