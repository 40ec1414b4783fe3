"""``teleop demo``: the main job on the embedded default (see teleop/demo.py)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from teleop.cli_types import (burst_length, check_loss_burst, float_in_interval, nonempty_path, probability,
                              round_trip)
from teleop.data_args import check_out_folder
from teleop.json_safe import dumps

#: Longest demo session [s]: its two sessions (with and without compensation) run at about
#: real time each, so an hour's takes two (--duration 1e12 was accepted, with an ETA of 248
#: million hours).
MAX_DEMO_S = 3600.0


def _session_length(text: str) -> float:
    """``--duration``: seconds in (0, :data:`MAX_DEMO_S`]."""
    return float_in_interval(text, 0.0, MAX_DEMO_S, low_open=True, unit="s")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="run the full teleoperation loop on the built-in synthetic operator",
                       description="Both stations in one process on a virtual clock: a synthetic operator the "
                                   "library never saw, retargeting, a delayed jittery link, ProMP compensation, "
                                   "ZMP correction, the whole-body QP on the simulated iCub, the eye camera "
                                   "streamed back as JPEG through the delayed link. Run with and without "
                                   "compensation; writes summary.json, demo.png and camera frames.")
    # Not an empty path: Path("") is ".", and --out '' (an unset shell variable) wrote
    # summary.json, demo.png and frames/ into the current folder without a word.
    p.add_argument("--out", type=nonempty_path, default=Path("out") / "demo", help="output folder (default: out/demo)")
    p.add_argument("--duration", type=_session_length, default=20.0,
                   help=f"simulated session length [s], at most {MAX_DEMO_S:g} (default: 20); a motion under way then "
                        "is finished and the session ends with the operator and the robot at rest")
    p.add_argument("--rtt", type=round_trip, default=1.5, help="round-trip delay [s], at most 10 (default: 1.5)")
    p.add_argument("--seed", type=int, default=7, help="seed of the operator and the link (default: 7)")
    p.add_argument("--loss", type=probability, default=0.0,
                   help="share of the datagrams lost, commands and video, in [0, 1) (default 0)")
    p.add_argument("--loss-burst", type=burst_length, default=None, metavar="PACKETS",
                   help="lose them in runs of this mean length (Gilbert model, >= 1; default: independent)")
    p.add_argument("--headless", action="store_true", help="print only the summary JSON on stdout")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from teleop.demo import DemoSettings, run_demo

    check_loss_burst(args.loss, args.loss_burst)
    settings = DemoSettings(duration=args.duration, rtt=args.rtt, seed=args.seed, loss=args.loss,
                            loss_burst=args.loss_burst)
    check_out_folder(args.out)   # before the sessions, not when the frames are written after them
    summary = run_demo(args.out, settings, progress=not args.headless)
    if args.headless:
        print(dumps(summary))
        return _fell(summary)
    seen = summary["seen_hand_error_cm"]
    robot = summary["robot"]
    print(f"Round trip {summary['round_trip_s']} s, {summary['duration_s']} s session, "
          f"library of {len(summary['library']['tasks'])} tasks from {summary['library']['demonstrations']} demos")
    if seen["compensated"]["moving_cm"] is None or seen["delayed"]["moving_cm"] is None:
        # No tick qualified: the operator never moved within what the delayed video covers.
        print("Operator's hand error while moving: none measured (the operator did not move in the part of the "
              "session the delayed video covers: give a longer --duration)")
    else:
        print(f"Operator sees the robot's hands off by {seen['compensated']['moving_cm']:.1f} cm with compensation, "
              f"{seen['delayed']['moving_cm']:.1f} cm without (while moving)")
    if seen["compensated"].get("predicting_cm") is not None and seen["delayed"].get("predicting_cm") is not None:
        print(f"  while the robot executes predictions: {seen['compensated']['predicting_cm']:.1f} cm with, "
              f"{seen['delayed']['predicting_cm']:.1f} cm without")
    margins = {name: figures["min_cop_margin_mm"] for name, figures in robot["sessions"].items()}
    print(f"Robot: fell={robot['fell']}, max foot slip {robot['max_foot_slip_mm']:.1f} mm, min CoP margin "
          f"{margins['compensated']:+.1f} mm with compensation, {margins['delayed']:+.1f} mm without (0: at a "
          f"sole's edge), joint speeds up to {robot['max_joint_speed_ratio']:.2f} of their limits"
          + (f" (it touched the scene for {robot['scene_contact_s']:.2f} s)" if robot.get("scene_contact_s") else ""))
    timing = summary.get("controller_timing_ms") or {}
    if timing:
        print("Controller per tick [ms]: " + ", ".join(f"{k.removesuffix('_ms')} {v:.3f}" for k, v in timing.items()
                                                       if k != "ticks")
              + f" (the last {timing.get('ticks', 0)} ticks)")
    video = summary["video"]
    due = f" of the {video['frames_due']} due" if video.get("frames_due") is not None else ""
    print(f"Video frames shown: {video.get('frames_displayed')}{due}"
          + (f" ({video.get('datagrams_lost')} datagrams lost; commands lost: "
             f"{summary['link']['commands_lost']})" if args.loss else "") + f"; outputs in {args.out}/")
    return _fell(summary)


def _fell(summary: dict) -> int:
    """Exit code 1, said, when the robot fell: the figures of a fallen robot mean nothing, and
    a session with another actuator model (TELEOP_SIM_ACTUATOR) ended with exit code 0."""
    robot = summary["robot"]
    if not robot["fell"]:
        return 0
    print(f"teleop demo: error: the robot fell (actuator model: {robot['actuator']}); the figures above are not "
          "a teleoperation's", file=sys.stderr)
    return 1
