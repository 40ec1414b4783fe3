"""``teleop trial``: delayed-network trials with and without compensation."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from pathlib import Path

from teleop.cli_types import burst_length, check_loss_burst, delay_list, nonempty_path, probability
from teleop.data_args import (add_common, add_take_filters, check_out_folder, read_take_files, robot_target_of,
                              take_files)
from teleop.json_safe import dumps
from teleop.takes import check_left_out, check_rate_hz, same_take, tasks_not_learned


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("trial", help="measure delay compensation over a sweep of round-trip delays",
                       description="For each test take and round-trip delay, play the take through the delayed "
                                   "link (tau_f ~ N(RTT/2, 2/15 RTT/2), tau_b = RTT/2) into the robot station's "
                                   "compensator, with and without compensation, and measure the error between what "
                                   "the operator sees the robot do and what the operator does. Virtual time, or the "
                                   "real stations and proxy on loopback with --realtime.")
    p.add_argument("--train", type=nonempty_path, required=True,
                   help="training takes: a folder of task folders, of Xsens pN.csv files or of one task's motion files")
    p.add_argument("--test", type=nonempty_path, required=True, help="test takes (as --train)")
    p.add_argument("--rtt", type=delay_list, default="0,0.5,1,1.5,2,3,4",
                   help="comma-separated round trips [s], each at most 10 (default: 0,0.5,1,1.5,2,3,4)")
    p.add_argument("--leave-one-out", action="store_true",
                   help="each test take is predicted by a library trained on all other training takes")
    p.add_argument("--seed", type=int, default=0, help="seed of the delay model (default: 0)")
    p.add_argument("--loss", type=probability, default=0.0,
                   help="forward packet loss probability, in [0, 1) (default: 0)")
    p.add_argument("--loss-burst", type=burst_length, default=None, metavar="PACKETS",
                   help="lose commands in runs of this mean length (Gilbert model, >= 1; default: independent)")
    p.add_argument("--out", type=nonempty_path, default=Path("out") / "trial",
                   help="folder for the table and plots (default: out/trial)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--realtime", action="store_true",
                   help="run the real stations through the real UDP proxy on loopback (wall-clock time)")
    add_take_filters(p, "train")
    add_take_filters(p, "test")
    add_common(p)
    p.set_defaults(func=_run)


def check_leave_one_out(train: list[tuple[Path, str]], test: list[tuple[Path, str]]) -> None:
    """Each test take must leave some training take to learn from. (Unlike ``eval promp``, a
    test task the library lacks is a valid trial: it measures wrong-task engagement; see
    :func:`warn_unlearned_tasks`.)"""
    check_left_out(train, test)
    for path, _ in test:
        if all(same_take(f, path) for f, _ in train):
            raise ValueError(f"--leave-one-out: {path} is the only training take, so nothing is left to learn from")


def read_trial_takes(args: argparse.Namespace) -> tuple[list[str], list[float], list, list]:
    """The round trips as written (they key the results: "1.5", "3") and as numbers [s], and
    the training and test takes, every folder and the leave-one-out checked before any take
    is read. Shared by the virtual and the ``--realtime`` trial."""
    from teleop.takes import check_take_kinds
    from teleop.train_cli import check_one_robot

    labels = args.rtt
    train_files, test_files = take_files(args, args.train, "train"), take_files(args, args.test, "test")
    # --rate-hz that neither set would use, refused before the reading (as train and
    # retarget do): HDM05's AMC takes use it, a folder of BVH takes ignored it silently.
    check_rate_hz(args.rate_hz, [path for path, _ in train_files + test_files])
    # A library or a stray file given as --train is labelled by its folder: said as what it
    # is, not first as "1 of 1 test takes are of a task their library does not know".
    check_take_kinds(train_files + test_files)
    if args.leave_one_out:
        check_leave_one_out(train_files, test_files)
    warn_unlearned_tasks(train_files, test_files, args.leave_one_out)
    target = robot_target_of(args)
    train, test = read_take_files(args, train_files, target), read_take_files(args, test_files, target)
    check_one_robot(train + test, target)     # learnt from and scored against: one robot's references
    rtts = [float(x) for x in labels]
    warn_round_trips_past_the_takes(rtts, [t.trajectory for t in test])
    return labels, rtts, train, test


def warn_unlearned_tasks(train: list[tuple[Path, str]], test: list[tuple[Path, str]], leave_one_out: bool) -> None:
    """Say which test takes are of a task their library does not know. Such a trial is valid
    (it measures whether compensation starts a wrong motion, the "wrong task" column), but
    unlike ``eval promp``, which refuses them, it must not pass for a trial of known tasks."""
    unlearned = tasks_not_learned(train, test, leave_one_out)
    if not unlearned:
        return
    print(f"note: {len(unlearned)} of {len(test)} test takes are of a task their library does not know; "
          "their compensation can only start a wrong task or stay out (see 'wrong task'):", file=sys.stderr)
    for _, _, why in unlearned[:5]:
        print(f"  {why}", file=sys.stderr)
    if len(unlearned) > 5:
        print(f"  ... and {len(unlearned) - 5} more", file=sys.stderr)


def warn_round_trips_past_the_takes(rtts: list[float], takes: list) -> None:
    """Say which round trips [s] have a forward delay (half the round trip) longer than every
    test take: the operator has finished each take before its first command reaches the
    robot, so the figures measure how soon the robot shows the final pose, not how well it
    follows a motion."""
    longest = max((float(t.times[-1] - t.times[0]) for t in takes), default=0.0)
    past = [f"{r:g}" for r in rtts if r / 2.0 > longest]
    if past and takes:
        print(f"note: at round trip(s) {', '.join(past)} s the forward delay exceeds the longest test take "
              f"({longest:.2f} s): the operator finishes before the first command arrives, and those rows score "
              "only how soon the robot shows the final pose", file=sys.stderr)


def _run(args: argparse.Namespace) -> int:
    check_loss_burst(args.loss, args.loss_burst)
    check_out_folder(args.out)
    from teleop.output_set import write_outputs_together
    from teleop.train_cli import _learn
    from teleop.trials.delay_trial import TrialSettings
    from teleop.trials.report import format_table, plot_error_vs_delay, write_take_rows
    from teleop.trials.sweep import SweepCase, run_sweep, summarise, take_rows

    if args.realtime:
        from teleop.trials.realtime import run_realtime_trial

        results, summary, labels, test = run_realtime_trial(args)
    else:
        labels, rtts, train, test = read_trial_takes(args)
        if args.leave_one_out:
            cases = [SweepCase(t.trajectory, _learn([o for o in train if not same_take(o.path, t.path)])) for t in test]
        else:
            library = _learn(train)
            cases = [SweepCase(t.trajectory, library) for t in test]
        results = run_sweep(cases, rtts, seed=args.seed,
                            settings=TrialSettings(loss=args.loss, loss_burst=args.loss_burst),
                            progress=True)   # on stderr: --json keeps stdout for the JSON
        summary = summarise(results, labels)
    # The link the figures were measured on (a lossy run's files must not read as a clean one's).
    summary["link"] = {"loss": args.loss, "loss_burst": args.loss_burst, "seed": args.seed}
    # A real-time run's files carry "_realtime", so that the two modes' results on the same
    # takes sit side by side in one folder (before, each removed the other's summary and
    # overwrote its table, takes and plots).
    suffix = "_realtime" if args.realtime else ""
    names = [f"summary{suffix}.json", f"table{suffix}.txt", f"takes{suffix}.csv", f"error_vs_delay{suffix}.png"]
    table = format_table(summary)
    rows = take_rows(results, labels, [str(t.path) for t in test])
    writers = {
        args.out / names[0]: lambda tmp: tmp.write_text(dumps(summary, indent=1)),
        args.out / names[1]: lambda tmp: tmp.write_text(table + "\n"),
        args.out / names[2]: lambda tmp: write_take_rows(rows, tmp),
        args.out / names[3]: lambda tmp: plot_error_vs_delay(summary, tmp),
    }
    plot_writers, stale = _take_plots(results, [t.path.name for t in test], min(results, key=lambda r: abs(r - 1.5)),
                                      args.out, suffix)
    # All at once: an interrupted run leaves the previous run's set as it was (before, a
    # Ctrl-C while plotting left the new summary and table without their take plots).
    write_outputs_together({**writers, **plot_writers}, remove=stale)
    plots = [path.name for path in plot_writers]
    if args.json:
        print(dumps(summary))
    else:
        print(table)
        if args.realtime:
            print(f"robot station control rate achieved: ≥ {summary['robot_tick_hz_min']:.0f} Hz (target 100)")
        print(f"written: {args.out}/{names[0]}, {', '.join(names[1:] + plots)}")
    return 0


def _take_plots(results, names: list[str], rtt: float, out: Path,
                suffix: str = "") -> tuple[dict[Path, Callable[[Path], object]], list[Path]]:
    """At the round trip nearest 1.5 s: the first take, and the take where compensation did
    the most harm (largest worst excess over no compensation; the first take again if it is
    that one), as ``take0_rtt<rtt><suffix>.png`` and ``worst_rtt<rtt><suffix>.png``: their
    writers (path -> function drawing into a given file), for
    :func:`teleop.output_set.write_outputs_together`, and the take plots an earlier run of
    the same mode left in ``out`` (of another round trip), to be removed with the new
    plots' arrival, so that every take plot there is of this run or of the other mode's last."""
    from teleop.trials.report import plot_take

    pairs = results[rtt]
    excess = [c.worst_excess_cm for c, _ in pairs]
    worst = max(range(len(pairs)), key=lambda i: excess[i] if excess[i] == excess[i] else -1.0)
    chosen = {f"take0_rtt{rtt:g}{suffix}.png": 0, f"worst_rtt{rtt:g}{suffix}.png": worst}
    realtime = re.compile(r"(take0|worst)_rtt[0-9.]+_realtime\.png")
    stale = [path for path in [*out.glob("take0_rtt*.png"), *out.glob("worst_rtt*.png")]
             if path.name not in chosen and bool(realtime.fullmatch(path.name)) == bool(suffix)]

    def writer(i: int) -> Callable[[Path], object]:
        comp, nocomp = pairs[i]
        began = f", began as {comp.engaged_task}" if comp.engaged_task and comp.engaged_task != comp.label else ""
        return lambda tmp: plot_take(comp, nocomp, tmp, title=f"{names[i]}{began}; worst excess {excess[i]:.1f} cm")

    return {out / file: writer(i) for file, i in chosen.items()}, stale
