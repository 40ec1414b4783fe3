"""Synthetic demonstrations: one task trial as a HumanMotion, and a data set of them on disk."""

from __future__ import annotations

import csv
import zlib
from dataclasses import replace
from pathlib import Path

import numpy as np

from retarget.human import HumanMotion
from teleop.inputs.synthetic.body import Body, realise
from teleop.inputs.synthetic.performer import Performer
from teleop.inputs.synthetic.tasks import DURATION_FACTOR_RANGE, TASK_BUILDERS, TASKS, Trial, task_rest


def resolve_performer(performer: int | Performer | None, height_m: float | None) -> Performer:
    """The performer ``performer`` stands for (an id, default 0, or a :class:`Performer`), with
    its height replaced by ``height_m`` [m] when given."""
    if isinstance(performer, Performer):
        return performer if height_m is None else replace(performer, height_m=float(height_m))
    return Performer.from_id(0 if performer is None else int(performer), height_m)


def generate(task: str, seed: int, rate_hz: float = 100.0, height_m: float | None = None,
             speed: float | None = None, performer: int | Performer | None = None) -> HumanMotion:
    """One synthetic demonstration of ``task``.

    Args:
        task: one of :data:`TASKS`.
        seed: trial seed; the same (task, seed, rate, height, speed, performer) gives the
            same motion bit for bit, and different seeds give different trials.
        rate_hz: sampling rate [Hz].
        height_m: body height [m]; default: the performer's height.
        speed: tempo multiplier (1 = nominal; durations scale as 1 / speed). Default: drawn
            per trial so that the motion lasts 0.75-1.35 x nominal, biased by the
            performer's tempo.
        performer: a :class:`Performer` or a performer id (default 0). Different ids are
            different people (height 1.55-1.95 m and movement style).
    Returns:
        A HumanMotion with all 23 segments and ``com``; ``times`` start at 0. ``meta``
        holds "label" (the task), "seed", "speed", "performer", "height_m", "sex",
        "targets" (task targets of the wrists, world frame [m]; e.g. "right_hand"),
        "phases" (name -> (start, end) [s]) and "motion_window" (start, end) [s], the
        part between the still N-poses.
    """
    if task not in TASK_BUILDERS:
        raise ValueError(f"unknown task {task!r}; known: {', '.join(TASKS)}")
    return generate_motion(task, seed, rate_hz, resolve_performer(performer, height_m), speed)


def generate_motion(task: str, seed: int, rate_hz: float, who: Performer, speed: float | None,
                    rest_s: float = 1.0) -> HumanMotion:
    if rate_hz <= 0:
        raise ValueError(f"rate_hz must be positive, got {rate_hz}")
    rng = np.random.default_rng([int(seed) & 0xFFFFFFFF, zlib.crc32(task.encode()), who.performer_id])
    if speed is None:
        factor = np.clip(rng.uniform(*DURATION_FACTOR_RANGE) / who.tempo, *DURATION_FACTOR_RANGE)
        speed = 1.0 / factor
    elif speed <= 0:
        raise ValueError(f"speed must be positive, got {speed}")
    trial = Trial(task, int(seed), float(rate_hz), float(speed), who, _body_of(who), rng)
    plan, targets = task_rest(trial, rest_s) if task == "rest" else TASK_BUILDERS[task](trial)
    positions, rotations, com = realise(trial.body, plan)
    meta = {"label": task, "seed": int(seed), "speed": float(speed), "performer": who.performer_id,
            "height_m": who.height_m, "sex": who.sex,
            "targets": {k: np.asarray(v, dtype=float).copy() for k, v in targets.items()},
            "phases": {k: (float(a), float(b)) for k, (a, b) in trial.phases.items()},
            "motion_window": tuple(float(t) for t in trial.motion_window)}
    return trial.body.skeleton.to_motion(trial.times, positions, rotations, com=com,
                                         source=f"synthetic:{task}:performer{who.performer_id}:seed{seed}",
                                         rate_hz=rate_hz, meta=meta)


_BODY_CACHE: dict[tuple[float, str], Body] = {}


def _body_of(who: Performer) -> Body:
    key = (round(who.height_m, 6), who.sex)
    if key not in _BODY_CACHE:
        _BODY_CACHE[key] = Body.of(who.height_m, who.sex)
    return _BODY_CACHE[key]


# --------------------------------------------------------------------------- datasets
#: Storage grids of the "compact" dataset precision: positions/CoM [m] and quaternion components.
COMPACT_POSITION_STEP = 2.0 ** -13      # 0.12 mm
COMPACT_QUATERNION_STEP = 2.0 ** -15    # 3.1e-5 (~0.004 deg)


def generate_dataset(out_dir, n_per_task: int, seed: int, *, tasks: tuple[str, ...] = TASKS,
                     rate_hz: float = 100.0, n_performers: int = 3, precision: str = "float64") -> list[Path]:
    """Write ``n_per_task`` demonstrations of each task as ``<out_dir>/<task>/<task>_<k>.npz``.

    Demonstration k of a task has trial seed ``seed * 1000 + k`` and performer
    ``k % n_performers`` (so every performer appears in every task and a held-out
    performer is any id >= n_performers). Files are written with
    :meth:`HumanMotion.save_npz` (compressed) and read back with ``HumanMotion.load_npz``;
    ``<out_dir>/index.csv`` lists file, task, k, seed, performer, height, sex, speed,
    duration and frame count, because the npz format keeps only the label.

    Args:
        out_dir: target folder (created).
        n_per_task: demonstrations per task (< 1000).
        seed: dataset seed.
        tasks: which tasks.
        rate_hz: sampling rate [Hz].
        n_performers: number of distinct performers cycled through.
        precision: "float64" (as generated), "float32" (positions, orientations and CoM as
            float32: rounding < 0.1 um / 1e-7), or "compact" (float32 rounded to a grid of
            :data:`COMPACT_POSITION_STEP` m and :data:`COMPACT_QUATERNION_STEP`, which the
            npz deflate compresses ~1.8x better; still 10x finer than the ~1 mm tremor).
            ``HumanMotion.load_npz`` returns float64 in every case.
    Returns:
        The written .npz paths, in order.
    """
    if not 0 < n_per_task < 1000:
        raise ValueError(f"n_per_task must be in 1..999, got {n_per_task}")
    if precision not in ("float64", "float32", "compact"):
        raise ValueError(f"precision must be float64, float32 or compact, got {precision!r}")
    out = Path(out_dir)
    written, rows = [], []
    for task in tasks:
        (out / task).mkdir(parents=True, exist_ok=True)
        for k in range(n_per_task):
            trial_seed = seed * 1000 + k
            motion = generate(task, trial_seed, rate_hz, performer=k % n_performers)
            assert motion.com is not None             # generate() always computes the CoM
            if precision == "compact":
                # "+ 0.0" turns the -0.0 that rounding gives a tiny negative value into +0.0:
                # the committed dataset and one regenerated on another machine differed in
                # these signs alone (last-bit differences of the generated values), so its
                # bytes could not be checked against a regeneration.
                motion.positions = np.round(motion.positions / COMPACT_POSITION_STEP) * COMPACT_POSITION_STEP + 0.0
                motion.com = np.round(motion.com / COMPACT_POSITION_STEP) * COMPACT_POSITION_STEP + 0.0
                motion.orientations = (np.round(motion.orientations / COMPACT_QUATERNION_STEP)
                                       * COMPACT_QUATERNION_STEP + 0.0)
            if precision != "float64":
                # HumanMotion holds float64; save_npz writes whatever dtype the arrays hold.
                motion.positions = motion.positions.astype(np.float32)
                motion.orientations = motion.orientations.astype(np.float32)
                motion.com = motion.com.astype(np.float32)
            path = out / task / f"{task}_{k}.npz"
            motion.save_npz(path)
            written.append(path)
            rows.append({"file": f"{task}/{path.name}", "task": task, "k": k, "seed": trial_seed,
                         "performer": motion.meta["performer"], "height_m": f"{motion.meta['height_m']:.4f}",
                         "sex": motion.meta["sex"], "speed": f"{motion.meta['speed']:.4f}",
                         "duration_s": f"{motion.duration:.3f}", "frames": len(motion), "rate_hz": rate_hz})
    with open(out / "index.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return written
