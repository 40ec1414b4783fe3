"""Command-line options shared by the commands that read folders of takes."""

from __future__ import annotations

import argparse
from pathlib import Path

from teleop.takes import Take, load_takes, split_csv


def add_take_filters(parser: argparse.ArgumentParser, prefix: str = "") -> None:
    """--[prefix]performers, --[prefix]exclude-performers, --[prefix]tasks."""
    dash = f"{prefix}-" if prefix else ""
    parser.add_argument(f"--{dash}performers", help="comma-separated performer codes to keep (HDM05: bd,bk,dg)")
    parser.add_argument(f"--{dash}exclude-performers", default="", help="comma-separated performer codes to drop")
    parser.add_argument(f"--{dash}tasks", help="comma-separated task labels to keep (default: all)")


def add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--robot", default="icub", help="robot description (default: icub)")
    parser.add_argument("--rate-hz", type=float, default=100.0,
                        help="sampling rate of Xsens CSV files, which do not state it (default: 100)")


def read_takes(args: argparse.Namespace, root: Path, prefix: str = "", target=None) -> list[Take]:
    """Load the takes under ``root`` with the filters of ``prefix``."""
    from teleop.robot.model import RobotModel
    from teleop.robot.target import robot_target

    key = f"{prefix}_" if prefix else ""
    target = target or robot_target(RobotModel(args.robot))
    return load_takes(root, target, performers=split_csv(getattr(args, f"{key}performers")),
                      exclude_performers=split_csv(getattr(args, f"{key}exclude_performers")) or (),
                      tasks=split_csv(getattr(args, f"{key}tasks")), rate_hz=args.rate_hz)
