"""Play every take of a folder on the simulated robot, with and without the ZMP correction.

The acceptance measurement of the retargeting: does the robot fall, does the measured
centre of pressure leave the support polygon, how much do the feet slip, how well do the
hands track? Usage:

    python tools/eval_retarget_execute.py ../shared/data/hdm05 --tasks squat1Reps,grabHighR,depositFloorR
    python tools/eval_retarget_execute.py ../shared/data/hdm05 --tasks depositFloorR --performers bk,dg --json out.json
    python tools/eval_retarget_execute.py ../shared/data/xsens_putaside_box

``--modes zmp`` (or ``raw``) plays only one of the two; the summary is printed per task
and per performer (tuning vs held-out performers: pass ``--performers``), and the JSON
file (``--json``) is rewritten after every take, so a long run can be read while it goes.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

from teleop.control.closed_loop import run_closed_loop
from teleop.json_safe import dumps
from teleop.progress import end_progress_bars, progress_bar
from teleop.robot.model import RobotModel
from teleop.robot.target import robot_target
from teleop.takes import list_take_files, load_take_files, select_take_files, split_csv

METRICS = ("fell", "min_cop_margin_mm", "min_cop_margin_initial_mm", "max_foot_slip_mm", "hand_rms_cm")
#: A CoP this close to the polygon's edge [mm] means the foot was rolling on that edge.
EDGE_MM = 0.5


def summarise(rows: list[dict], key: str) -> str:
    """One line: takes, falls, CoP outside, worst margin / slip, mean hand RMS."""
    rows = [r for r in rows if key in r]
    if not rows:
        return "no takes"
    fell = sum(bool(r[key]["fell"]) for r in rows)   # a count ("fell 2", not "fell 2.0": rows hold floats)
    outside = sum(r[key]["min_cop_margin_mm"] < 0 for r in rows)
    edge = sum(r[key]["min_cop_margin_mm"] < EDGE_MM for r in rows)
    worst_margin = min(r[key]["min_cop_margin_mm"] for r in rows)
    outside_initial = sum(r[key]["min_cop_margin_initial_mm"] < 0 for r in rows)
    worst_slip = max(r[key]["max_foot_slip_mm"] for r in rows)
    hand = sum(r[key]["hand_rms_cm"] for r in rows) / len(rows)
    return (f"{len(rows)} takes, fell {fell}, CoP outside the feet's polygon in {outside}, "
            f"within {EDGE_MM} mm of its edge (foot rolling) in {edge} (worst margin {worst_margin:+.1f} mm; "
            f"outside the initial polygon in {outside_initial}), worst foot slip {worst_slip:.1f} mm, "
            f"mean hand RMS {hand:.2f} cm")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("data", type=Path)
    parser.add_argument("--tasks")
    parser.add_argument("--performers")
    parser.add_argument("--modes", default="zmp,raw", help="zmp, raw or both (default)")
    parser.add_argument("--json", type=Path, help="write per-take results here")
    args = parser.parse_args(argv)
    modes = split_csv(args.modes)
    if not modes or set(modes) - {"zmp", "raw"}:
        parser.error("--modes takes zmp and/or raw")
    # Checked before any take is read and played: a --json that cannot be written used to
    # fail after the first take's simulation, and filters that select nothing printed
    # "no takes" and exited 0.
    if args.json is not None and (args.json.is_dir() or not args.json.parent.is_dir()):
        parser.error(f"--json {args.json}: " + ("is a folder: give the file to write" if args.json.is_dir()
                                                else f"{args.json.parent} is not a folder"))
    try:
        every = list_take_files(args.data)
    except FileNotFoundError as exc:
        parser.error(str(exc))
    files = select_take_files(every, tasks=split_csv(args.tasks), performers=split_csv(args.performers))
    if not files:
        tasks = ", ".join(sorted({label for _, label in every}))
        parser.error(f"no takes under {args.data} match --tasks {args.tasks or '(any)'} --performers "
                     f"{args.performers or '(any)'} (tasks there: {tasks})")
    robot = RobotModel()
    try:
        takes = load_take_files(files, robot_target(robot), desc=f"reading {args.data.name}")
    except (OSError, ValueError) as exc:   # a take that cannot be read: the file and why, not a traceback
        end_progress_bars()
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 1
    rows = []
    for take in progress_bar(takes, desc="takes", leave=True):
        row = {"take": take.path.name, "task": take.label, "performer": take.performer}
        for key in modes:
            m = run_closed_loop(take.trajectory, robot=robot, zmp_correction=key == "zmp")
            row[key] = {k: float(m[k]) for k in METRICS}
            row[key]["rejected_ticks"] = int(m["statuses"].get("rejected_target", 0))
        rows.append(row)
        if args.json:
            # Strict JSON: a metric that could not be measured (no CoP while airborne) is null, not NaN.
            args.json.write_text(dumps(rows, indent=1))
    groups = defaultdict(list)
    for r in rows:
        groups[(r["task"], r["performer"])].append(r)
    for key in modes:
        print(f"{key}: all: {summarise(rows, key)}")
        for (task, performer), group in sorted(groups.items()):
            print(f"  {key} {task} {performer or '-'}: {summarise(group, key)}")
    for r in rows:
        if any(r[k]["fell"] or r[k]["min_cop_margin_mm"] < EDGE_MM for k in modes):
            print(f"  {r['take']}: " + "  ".join(f"{k} {r[k]}" for k in modes))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:   # Ctrl-C in a run of minutes: a line, not a traceback (--json holds the takes done)
        end_progress_bars()
        print("interrupted", file=sys.stderr)
        sys.exit(130)
