"""A delay sweep: every test take at every round-trip delay, with and without compensation.

Aggregation follows the thesis (Table 5.3, Fig. 5.18): per take, the RMS errors over the
window after compensation engaged and blended in (the uncompensated run of the take is
scored over the same window), then mean and standard deviation over the takes that
engaged. The same figures over the whole take and the time until engagement are reported
too, since a late engagement hides error outside the window.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
from tqdm import tqdm

from promp.library import TaskLibrary
from retarget.references import ReferenceTrajectory
from teleop.trials.delay_trial import TakeResult, TrialSettings, run_take

METRICS = ("hand_cm", "com_cm", "posture_rad")


@dataclass
class SweepCase:
    """One test take with the library that predicts it (leave-one-out gives each its own)."""

    take: ReferenceTrajectory
    library: TaskLibrary


def run_sweep(cases: Sequence[SweepCase], rtts: Sequence[float], *, seed: int = 0,
              settings: TrialSettings = TrialSettings(), progress: bool = True,
              on_result: Callable[[TakeResult, TakeResult], None] | None = None) -> dict[float, list[tuple[TakeResult, TakeResult]]]:
    """{rtt: [(compensated, uncompensated) per case]}."""
    out: dict[float, list] = {rtt: [] for rtt in rtts}
    jobs = [(rtt, i, case) for rtt in rtts for i, case in enumerate(cases)]
    for rtt, i, case in tqdm(jobs, desc="trials", disable=not progress):
        take_seed = seed * 100_003 + i
        comp = run_take(case.take, rtt, case.library, compensate=True, seed=take_seed, settings=settings)
        nocomp = run_take(case.take, rtt, case.library, compensate=False, seed=take_seed, settings=settings)
        nocomp.window = nocomp.errors_after(comp.engaged_at)
        out[rtt].append((comp, nocomp))
        if on_result:
            on_result(comp, nocomp)
    return out


def summarise(results: dict[float, list[tuple[TakeResult, TakeResult]]], labels: Sequence[str]) -> dict:
    """JSON-ready summary keyed by the round trips as given (``labels``)."""
    summary = {"rtt": {}}
    for label, (rtt, pairs) in zip(labels, results.items()):
        engaged = [(c, n) for c, n in pairs if c.engaged_at is not None]
        entry = {}
        for name, idx in (("comp", 0), ("nocomp", 1)):
            runs = [pair[idx] for pair in engaged]
            row = {m: _mean([r.window[m] for r in runs]) for m in METRICS}
            row.update({f"{m}_std": _std([r.window[m] for r in runs]) for m in METRICS})
            row["whole"] = {m: _mean([pair[idx].whole[m] for pair in pairs]) for m in METRICS}
            entry[name] = row
        entry["engaged_takes"] = len(engaged)
        entry["takes"] = len(pairs)
        entry["engage_after_s"] = _mean([c.engaged_at for c, _ in engaged])
        summary["rtt"][label] = entry
    return summary


def _mean(values) -> float | None:
    values = [v for v in values if v is not None and np.isfinite(v)]
    return float(np.mean(values)) if values else None


def _std(values) -> float | None:
    values = [v for v in values if v is not None and np.isfinite(v)]
    return float(np.std(values)) if values else None
