"""Play every take of a folder on the simulated robot, with and without the ZMP correction.

The acceptance measurement of the retargeting: does the robot fall, does the measured
centre of pressure leave the support polygon, how much do the feet slip? Usage:

    python tools/eval_retarget_execute.py ../shared/data/hdm05 --tasks squat1Reps,grabHighR,depositFloorR
    python tools/eval_retarget_execute.py ../shared/data/xsens_putaside_box
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tqdm import tqdm

from teleop.control.closed_loop import run_closed_loop
from teleop.robot.model import RobotModel
from teleop.robot.target import robot_target
from teleop.takes import load_takes, split_csv


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("data", type=Path)
    parser.add_argument("--tasks")
    parser.add_argument("--performers")
    parser.add_argument("--json", type=Path, help="write per-take results here")
    args = parser.parse_args(argv)
    robot = RobotModel()
    takes = load_takes(args.data, robot_target(robot), tasks=split_csv(args.tasks), performers=split_csv(args.performers))
    rows = []
    for take in tqdm(takes, desc="takes"):
        row = {"take": take.path.name, "task": take.label, "performer": take.performer}
        for zmp in (True, False):
            m = run_closed_loop(take.trajectory, robot=robot, zmp_correction=zmp)
            key = "zmp" if zmp else "raw"
            row[key] = {k: float(m[k]) for k in ("fell", "min_cop_margin_mm", "max_foot_slip_mm", "hand_rms_cm")}
        rows.append(row)
    for key in ("zmp", "raw"):
        fell = sum(r[key]["fell"] for r in rows)
        outside = sum(r[key]["min_cop_margin_mm"] < 0 for r in rows)
        worst_margin = min(r[key]["min_cop_margin_mm"] for r in rows)
        worst_slip = max(r[key]["max_foot_slip_mm"] for r in rows)
        hand = sum(r[key]["hand_rms_cm"] for r in rows) / len(rows)
        print(f"{key:4s}: {len(rows)} takes, fell {fell}, CoP outside the polygon in {outside} "
              f"(worst margin {worst_margin:.1f} mm), worst foot slip {worst_slip:.1f} mm, mean hand RMS {hand:.2f} cm")
    for r in rows:
        if r["zmp"]["fell"] or r["raw"]["fell"] or r["zmp"]["min_cop_margin_mm"] < 0:
            print(f"  {r['take']}: zmp {r['zmp']}  raw {r['raw']}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
