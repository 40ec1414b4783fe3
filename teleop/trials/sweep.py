"""A delay sweep: every test take at every round-trip delay, with and without compensation.

Aggregation follows the thesis (Table 5.3, Fig. 5.18): per take, the RMS errors over the
window after compensation engaged and blended in (the uncompensated run of the take is
scored over the same window), then mean and standard deviation over the takes that
engaged while there was still motion to score. A take that engaged only after the operator
had finished (a late recognition on a short take) has an empty window: it is counted apart
(``engaged_late_takes``) and left out of every window mean, so that the counts the table
prints are the takes it averaged. The same figures over the whole take (mean over all takes) and the time until
engagement (from the start of the padded take, lead-in rest included) are reported too,
since a late engagement hides error outside the window.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from promp.library import TaskLibrary
from retarget.references import ReferenceTrajectory
from teleop.progress import progress_bar
from teleop.trials.delay_trial import TakeResult, TrialSettings, run_take, score_pair

METRICS = ("hand_cm", "com_cm", "posture_rad")


@dataclass
class SweepCase:
    """One test take with the library that predicts it (leave-one-out gives each its own)."""

    take: ReferenceTrajectory
    library: TaskLibrary


def run_sweep(cases: Sequence[SweepCase], rtts: Sequence[float], *, seed: int = 0,
              settings: TrialSettings = TrialSettings(), progress: bool = True,
              on_result: Callable[[TakeResult, TakeResult], None] | None = None
              ) -> dict[float, list[tuple[TakeResult, TakeResult]]]:
    """{rtt: [(compensated, uncompensated) per case]}, in the order of ``rtts``.

    Raises ValueError if a round trip is given twice (the dict would merge their runs).
    """
    check_distinct_rtts(rtts)
    out: dict[float, list] = {rtt: [] for rtt in rtts}
    jobs = [(rtt, i, case) for rtt in rtts for i, case in enumerate(cases)]
    for rtt, i, case in progress_bar(jobs, desc="trials", enabled=progress, leave=True):
        take_seed = seed * 100_003 + i
        comp = run_take(case.take, rtt, case.library, compensate=True, seed=take_seed, settings=settings)
        nocomp = run_take(case.take, rtt, case.library, compensate=False, seed=take_seed, settings=settings)
        out[rtt].append(score_pair(comp, nocomp))
        if on_result:
            on_result(comp, nocomp)
    return out


def summarise(results: dict[float, list[tuple[TakeResult, TakeResult]]], labels: Sequence[str]) -> dict:
    """JSON-ready summary keyed by the round trips as given (``labels``, one per entry of
    ``results``, in its order; ValueError otherwise)."""
    _check_labels(results, labels)
    summary: dict[str, dict[str, Any]] = {"rtt": {}}
    for label, pairs in zip(labels, results.values()):
        engaged = [(c, n) for c, n in pairs if c.engaged_at is not None]
        scored = [(c, n) for c, n in engaged if _has_window(c)]
        entry: dict[str, Any] = {}
        for name, idx in (("comp", 0), ("nocomp", 1)):
            runs = [pair[idx] for pair in scored]
            row: dict[str, Any] = {m: _mean([r.window[m] for r in runs]) for m in METRICS}
            row.update({f"{m}_std": _std([r.window[m] for r in runs]) for m in METRICS})
            row["whole"] = {m: _mean([pair[idx].whole[m] for pair in pairs]) for m in METRICS}
            entry[name] = row
        entry["engaged_takes"] = len(engaged)
        entry["scored_takes"] = len(scored)
        entry["engaged_late_takes"] = len(engaged) - len(scored)
        entry["takes"] = len(pairs)
        entry["engage_after_s"] = _mean([c.engaged_at for c, _ in engaged])
        # Takes on which compensation began with another task than the take's own (the
        # robot started the wrong motion), whether or not its blend-in then finished (a
        # blend-in cut short by the fallback began the wrong motion too), and by how much it
        # was ever worse than no compensation at all.
        entry["wrong_task_engagements"] = sum(1 for c, _ in pairs if _wrong_start(c))
        # Of the takes that never engaged, those that began to blend in and fell back (the
        # out-of-distribution test, a delay that vanished): they count in the wrong starts
        # and the worst excess (the robot did begin a motion) but not in the window means.
        entry["never_engaged_takes"] = len(pairs) - len(engaged)
        entry["abandoned_takes"] = sum(1 for c, _ in pairs if c.engaged_at is None and c.engaged_task)
        excess = [c.worst_excess_cm for c, _ in pairs]
        entry["worst_excess_cm"] = {"mean": _mean(excess), "max": _max(excess)}
        entry["per_task"] = _per_task(pairs)
        summary["rtt"][label] = entry
    return summary


def _has_window(comp: TakeResult) -> bool:
    """The take has ticks to score after engagement (False when compensation engaged after
    the operator's motion had ended: nothing it did could be seen before the take ended)."""
    return comp.window.get("hand_cm") is not None and bool(np.isfinite(comp.window["hand_cm"]))


def _wrong_start(comp: TakeResult) -> bool:
    """Compensation began with another task than the take's own. A take without a label
    cannot start wrong (nothing to compare with): it counts nowhere, in no table."""
    return bool(comp.label and comp.engaged_task and comp.engaged_task != comp.label)


def check_distinct_rtts(rtts: Sequence[float]) -> None:
    """ValueError if a round trip [s] appears twice (3 and 3.0 are the same)."""
    seen = set()
    for rtt in rtts:
        if float(rtt) in seen:
            raise ValueError(f"round trip {rtt:g} s is given twice; list each round trip once")
        seen.add(float(rtt))


def _check_labels(results: dict, labels: Sequence[str]) -> None:
    """ValueError unless ``labels`` names each round trip of ``results`` once (zip would
    silently drop the extra ones, a repeated label overwrite an entry)."""
    if len(labels) != len(results):
        raise ValueError(f"{len(labels)} round-trip labels {list(labels)} for {len(results)} round trips")
    if len(set(labels)) != len(labels):
        raise ValueError(f"round-trip labels must be distinct, got {list(labels)}")


def _per_task(pairs: list[tuple[TakeResult, TakeResult]]) -> dict:
    """Where the error is: per task label (takes without one: ""), the scored takes' hands
    error in the window with and without compensation [cm] (means) and the wrong starts
    (of all its takes, as in the summary; never for the takes without a label, see
    :func:`_wrong_start`)."""
    tasks: dict[str, dict] = {}
    for label in sorted({c.label or "" for c, _ in pairs}):
        takes = [(c, n) for c, n in pairs if (c.label or "") == label]
        engaged = [(c, n) for c, n in takes if c.engaged_at is not None]
        scored = [(c, n) for c, n in engaged if _has_window(c)]
        tasks[label] = {"takes": len(takes),
                        "engaged_takes": len(engaged),
                        "scored_takes": len(scored),
                        "hand_cm_comp": _mean([c.window["hand_cm"] for c, _ in scored]),
                        "hand_cm_nocomp": _mean([n.window["hand_cm"] for _, n in scored]),
                        "wrong_task_engagements": sum(1 for c, _ in takes if _wrong_start(c))}
    return tasks


def _mean(values) -> float | None:
    values = [v for v in values if v is not None and np.isfinite(v)]
    return float(np.mean(values)) if values else None


def _max(values) -> float | None:
    values = [v for v in values if v is not None and np.isfinite(v)]
    return float(np.max(values)) if values else None


def take_rows(results: dict[float, list[tuple[TakeResult, TakeResult]]], labels: Sequence[str],
              sources: Sequence[str]) -> list[dict]:
    """One row per take and round trip (for ``takes.csv``): its errors, when and as what it
    was recognised, and its worst excess over no compensation."""
    _check_labels(results, labels)
    rows = []
    for label, pairs in zip(labels, results.values()):
        for source, (c, n) in zip(sources, pairs):
            rows.append({"rtt": label, "take": source, "task": c.label or "",
                         "engaged_at_s": c.engaged_at, "engaged_task": c.engaged_task or "",
                         "hand_cm_comp": c.window["hand_cm"], "hand_cm_nocomp": n.window["hand_cm"],
                         "whole_hand_cm_comp": c.whole["hand_cm"], "whole_hand_cm_nocomp": n.whole["hand_cm"],
                         "worst_excess_cm": c.worst_excess_cm})
    return rows


def _std(values) -> float | None:
    values = [v for v in values if v is not None and np.isfinite(v)]
    return float(np.std(values)) if values else None
