"""From reference trajectories to a ProMP task library.

Recorded takes start and end at rest; a ProMP's phase runs from motion onset to motion end
(Eq. 5.13 counts time from the onset t_0), so each take is cut to its moving part with the
same onset detector the compensator uses live, plus a short margin that keeps the
acceleration phase in the model.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Iterable, Sequence

from promp.learning import Demonstration
from promp.library import TaskLibrary
from promp.onset import detect_onset
from retarget.references import FLAT_LABELS, ReferenceTrajectory
from teleop.prescient.compensator import CompensatorConfig


def motion_span(traj: ReferenceTrajectory, config: CompensatorConfig = CompensatorConfig()) -> tuple[float, float]:
    """(onset, end) times [s] of the moving part of a take.

    The onset is what the live detector would report; the end is the onset of the
    time-reversed take (the last moment the hands move faster than the threshold).
    Falls back to the whole take when the hands never move, or move for less than 0.2 s.
    """
    idx = list(config.onset_indices)
    onset = detect_onset(traj.times, traj.values, idx, config.onset_speed, config.onset_min_duration)
    rev_times = traj.times[-1] - traj.times[::-1]
    end_rev = detect_onset(rev_times, traj.values[::-1], idx, config.onset_speed, config.onset_min_duration)
    start = traj.times[0] if onset is None else onset
    end = traj.times[-1] if end_rev is None else traj.times[-1] - end_rev
    if end - start < 0.2:
        return float(traj.times[0]), float(traj.times[-1])
    return float(start), float(end)


def to_demonstration(traj: ReferenceTrajectory, config: CompensatorConfig = CompensatorConfig()) -> Demonstration:
    """The moving part of a take as a ProMP demonstration, time counted from the onset."""
    start, end = motion_span(traj, config)
    keep = (traj.times >= start) & (traj.times <= end)
    return Demonstration(traj.times[keep] - start, traj.values[keep], label=traj.label)


def learn_library(trajectories: Iterable[ReferenceTrajectory], config: CompensatorConfig = CompensatorConfig(),
                  groups: Sequence[str | None] | None = None, **learn_kwargs) -> TaskLibrary:
    """One ProMP per task label from labelled reference trajectories.

    ``groups``: who performed each trajectory (e.g. the HDM05 performer code; None if
    unknown). A task demonstrated by two or more performers then measures how much they
    differ (:func:`promp.learning.between_group_variance`), which the recogniser uses for
    a performer it never saw.
    """
    trajectories = list(trajectories)
    if groups is not None and len(groups) != len(trajectories):
        raise ValueError(f"{len(groups)} groups for {len(trajectories)} trajectories")
    by_label: dict[str, list[Demonstration]] = defaultdict(list)
    for i, traj in enumerate(trajectories):
        if not traj.label:
            raise ValueError(f"trajectory {traj.source or '?'} has no task label")
        demo = to_demonstration(traj, config)
        demo.group = groups[i] if groups is not None else None
        by_label[traj.label].append(demo)
    if not by_label:
        raise ValueError("no trajectories to learn from")
    # The signals' names travel with the library (the recogniser names the ones it
    # down-weights: CompensatorConfig.estimator).
    learn_kwargs.setdefault("signal_names", FLAT_LABELS)
    return TaskLibrary.learn(by_label, **learn_kwargs)
