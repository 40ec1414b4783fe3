"""``teleop train`` (build a ProMP task library) and ``teleop eval promp`` (Table 5.2)."""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

import numpy as np

from teleop.data_args import add_common, add_take_filters, read_takes

DEFAULT_LIBRARY = Path("out") / "library.npz"


def register(sub: argparse._SubParsersAction) -> None:
    train = sub.add_parser("train", help="learn a ProMP task library from folders of motion files or recordings",
                           description="Retarget every take (one folder per task, or Xsens pN.csv files) to robot "
                                       "references, cut each to its moving part and learn one ProMP per task.")
    train.add_argument("data", nargs="+", type=Path, help="folders of takes (the hdm05 layout: one folder per task)")
    train.add_argument("-o", "--out", type=Path, default=DEFAULT_LIBRARY, help=f"library file (default: {DEFAULT_LIBRARY})")
    train.add_argument("--basis", type=int, default=20, help="basis functions per signal (default: 20)")
    train.add_argument("--covariance", choices=("full", "per_signal"), default="full",
                       help="full: keep cross-signal covariance (default); per_signal: the thesis's model")
    add_take_filters(train)
    add_common(train)
    train.set_defaults(func=_train)

    ev = sub.add_parser("eval", help="evaluate a component offline (eval promp: recognition and prediction, Table 5.2)")
    ev.add_argument("what", choices=("promp",), help="what to evaluate")
    ev.add_argument("--train", type=Path, required=True, help="folder of training takes")
    ev.add_argument("--test", type=Path, required=True, help="folder of test takes")
    ev.add_argument("--leave-one-out", action="store_true",
                    help="with --train and --test the same folder: each test take is predicted by a library "
                         "trained on all the other takes")
    ev.add_argument("--json", action="store_true", help="print the result as JSON")
    add_take_filters(ev, "train")
    add_take_filters(ev, "test")
    add_common(ev)
    ev.set_defaults(func=_eval)


def _learn(takes, basis: int = 20, covariance: str = "full"):
    """One ProMP per task label from the takes, each cut to its moving part and tagged
    with its performer (HDM05: bd, bk, dg; unknown: one group), see
    :func:`teleop.prescient.training.learn_library`."""
    from promp.basis import RBFBasis
    from teleop.prescient.training import learn_library

    return learn_library([t.trajectory for t in takes], groups=[t.performer or None for t in takes],
                         basis=RBFBasis(basis), covariance=covariance)


def _train(args: argparse.Namespace) -> int:
    takes = [take for root in args.data for take in read_takes(args, root)]
    counts = Counter(t.label for t in takes)
    library = _learn(takes, args.basis, args.covariance)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    library.save(args.out)
    print(f"learned {len(library)} tasks from {len(takes)} takes -> {args.out}")
    for label in library.labels:
        promp = library[label]
        print(f"  {label:32s} {counts[label]:3d} takes, mean motion {promp.duration:.2f} s")
    return 0


def evaluate(train_takes, test_takes, leave_one_out: bool = False) -> dict:
    """The ``teleop eval promp`` figures (see the issue's JSON layout)."""
    from promp.evaluation import evaluate_library
    from retarget.references import HAND_INDICES, POSTURE_INDICES
    from teleop.prescient.compensator import CompensatorConfig
    from teleop.prescient.training import to_demonstration

    config = CompensatorConfig().estimator   # the robot station's estimator settings

    hands, postures = list(HAND_INDICES), list(POSTURE_INDICES)
    results = []
    if leave_one_out:
        for take in test_takes:
            library = _learn([t for t in train_takes if t.path != take.path])
            results.append(evaluate_library(library, [to_demonstration(take.trajectory)], [take.label], config=config))
    else:
        library = _learn(train_takes)
        results.append(evaluate_library(library, [to_demonstration(t.trajectory) for t in test_takes],
                                        [t.label for t in test_takes], config=config))
    n = sum(r["n_test"] for r in results)
    level_keys = {"none": "none", "recog": "recog", "quarter": "1/4", "half": "1/2"}

    def pooled(metric: str, idx: list[int], level: str, scale: float) -> float:
        # Per-signal RMS (per axis), averaged over the signals of the group, then over takes.
        values = [np.mean(np.asarray(r[metric][level]["per_signal_mean"])[idx]) * r["n_test"] for r in results]
        return float(scale * np.sum(values) / n)

    return {
        "recognition": {k: float(sum(r["recognition_accuracy"][lv] * r["n_test"] for r in results) / n)
                        for k, lv in level_keys.items() if k != "recog"},
        "hand_rms_cm": {k: pooled("rms_remaining", hands, lv, 100.0) for k, lv in level_keys.items()},
        "hand_rms_whole_cm": {k: pooled("rms_whole", hands, lv, 100.0) for k, lv in level_keys.items()},
        "posture_rms_rad": {k: pooled("rms_remaining", postures, lv, 1.0) for k, lv in level_keys.items()},
        "coverage_2sigma": float(np.mean([r["coverage_2sigma"]["1/2"]["overall"] for r in results])),
        "n_test": n,
    }


def _eval(args: argparse.Namespace) -> int:
    from teleop.robot.model import RobotModel
    from teleop.robot.target import robot_target

    target = robot_target(RobotModel(args.robot))
    train = read_takes(args, args.train, "train", target)
    test = read_takes(args, args.test, "test", target)
    result = evaluate(train, test, args.leave_one_out)
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"{result['n_test']} test takes; recognition accuracy: " +
          ", ".join(f"{k} {v:.0%}" for k, v in result["recognition"].items()))
    print(f"{'observed':10s} {'hands, rest [cm]':>18s} {'hands, whole [cm]':>18s} {'postures [rad]':>15s}")
    for level in ("none", "recog", "quarter", "half"):
        print(f"{level:10s} {result['hand_rms_cm'][level]:18.2f} {result['hand_rms_whole_cm'][level]:18.2f} "
              f"{result['posture_rms_rad'][level]:15.3f}")
    print(f"2-sigma coverage of the unobserved part at 1/2: {result['coverage_2sigma']:.1%}")
    return 0
