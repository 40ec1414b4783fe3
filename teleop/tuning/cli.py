"""``teleop tune``: the reference's PID-tuning experiment on the simulated iCub's left arm."""

from __future__ import annotations

import argparse
import sys
import time
import zipfile
from pathlib import Path

from teleop.cli_types import (PreconditionError, UsageError, finite_float, float_in_interval, non_negative_float,
                              nonempty_path, positive_int, unit_fraction)
from teleop.data_args import check_out_folder
from teleop.json_safe import dumps

#: Fastest playback of the motions: ten times a human's pace. At 10000 the motions were a few
#: samples long, every tracking error 0, and the comparison with the heuristics divided by it.
MAX_SPEED = 10.0
#: Slowest: a tenth of a human's pace (each simulation of a motion then takes 20 times the
#: default's). ``--speed 1e-9`` asked for 35 TiB of set-points (a MemoryError traceback), and
#: ``--speed 0.001`` for a run of days.
MIN_SPEED = 0.1


def _speed(text: str) -> float:
    """``--speed``: a playback speed factor in [:data:`MIN_SPEED`, :data:`MAX_SPEED`]; nan and
    inf are said as not finite numbers, as every number option's."""
    finite_float(text)
    value = float_in_interval(text, 0.0, MAX_SPEED, low_open=True)
    if value < MIN_SPEED:
        raise argparse.ArgumentTypeError(f"must be at least {MIN_SPEED:g} (a tenth of a human's pace: the run "
                                         f"lasts longer in proportion, days at 0.001), got {text}")
    return value

#: The setups of teleop.tuning.setups.SETUPS (not imported here: `teleop --help` stays fast).
SETUP_NUMBERS = (1, 2, 3, 4)


def _setups(text: str) -> list[int]:
    """``--setups``: a non-empty comma-separated list of setup numbers."""
    try:
        numbers = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        numbers = None
    if not numbers or any(n not in SETUP_NUMBERS for n in numbers):
        raise argparse.ArgumentTypeError(f"expected comma-separated setups from 1-4 (e.g. 1,2,3,4 or 2), got {text!r}")
    return list(dict.fromkeys(numbers))   # "1,1" is setup 1 once (it ran twice), in the order given


def _motion_files(text: str) -> tuple[Path, ...]:
    """``--eval-motions`` / ``--train-motions``: a comma-separated list of at least one motion
    file ("" or "," has none: the setups failed on the empty list, then exit code 1)."""
    paths = tuple(Path(x.strip()) for x in text.split(",") if x.strip())
    if not paths:
        raise argparse.ArgumentTypeError(f"expected comma-separated motion files, got {text!r}")
    return paths


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tune", help="tune the simulated arm's joint PIDs: relay + ZN heuristics vs an optimiser",
                       description="Runs the experiment of the PID-tuning reference (Webel 2019, §4.1) on the "
                                   "simulated iCub's left arm (shoulder x3, elbow, wrist): four setups (1 no "
                                   "gravity; 2 gravity, realistic torque limits; 3 severely limited torque; "
                                   "4 a 10 kg payload in the hand), relay auto-tuning with each of the seven "
                                   "Ziegler-Nichols-family heuristics, and an optimiser that tunes the limb "
                                   "together on recorded motions. Prints the reference's table (AE-A, AE-S, OS, "
                                   "ST5, R50) next to the reference's own numbers and writes plots and data.")
    p.add_argument("--setups", type=_setups, default="1,2,3,4", help="comma-separated setups to run (default: 1,2,3,4)")
    p.add_argument("--quick", action="store_true", help="short motions and a tiny optimiser budget (tests)")
    p.add_argument("--evaluations", type=positive_int,
                   help="optimiser budget: simulations of the training set, warm-start candidates included "
                        "(default: 70)")
    p.add_argument("--speed", type=_speed,
                   help=f"playback speed of the motions, {MIN_SPEED:g} to {MAX_SPEED:g} (default: 2, a 'fast' "
                        "motion)")
    p.add_argument("--eval-motions", type=_motion_files,
                   help="comma-separated motion files for AE-A (default: synthetic demos)")
    p.add_argument("--train-motions", type=_motion_files, help="comma-separated motion files the optimiser trains on")
    p.add_argument("--relay-per-heuristic", action="store_true",
                   help="repeat the relay tests for every heuristic, as the reference's protocol (slower)")
    p.add_argument("--gains", type=nonempty_path, action="append", default=[],
                   help="also evaluate this gains file (PidConfiguration JSON covering the 5 arm joints), e.g. a "
                        "manual tuning; its row is named after the file (repeatable)")
    p.add_argument("--payload-kg", type=non_negative_float,
                   help="payload of setup 4 [kg] (default: the reference's 10 kg; holding the step animation's "
                        "postures then needs up to 37 N m of the iCub's 30 N m shoulder pitch, measured)")
    p.add_argument("--limited-torque", type=unit_fraction,
                   help="torque limits of setup 3 as a fraction of the iCub's efforts (default 0.2; the "
                        "optimiser meets the target from 0.3, measured)")
    p.add_argument("--jobs", type=positive_int, default=2, help="setups run in parallel processes (default: 2)")
    p.add_argument("--out", type=nonempty_path, default=Path("out") / "tune",
                   help="folder for plots, gains and data (default: out/tune)")
    p.add_argument("--no-save", action="store_true", help="write no files (table / JSON only)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=_run)


def _gains_label(path: Path) -> str:
    """The row of a ``--gains`` file: the file's stem, unless it is a method's name, which the
    file's row would replace (and the optimiser's warm start with it)."""
    from teleop.tuning.experiment import OPTIMISER
    from teleop.tuning.heuristics import HEURISTICS

    return path.stem if path.stem not in (*HEURISTICS, OPTIMISER) else f"{path.stem} (file)"


def _check_options(args: argparse.Namespace) -> None:
    """UsageError (exit code 2) for options that cannot go together: an override of a setup
    --setups does not run (it silently did nothing), two --gains files that would be one row."""
    for option, value, number in (("--payload-kg", args.payload_kg, 4), ("--limited-torque", args.limited_torque, 3)):
        if value is not None and number not in args.setups:
            raise UsageError(f"{option} changes setup {number} only, which --setups "
                             f"{','.join(map(str, args.setups))} does not run (add {number} to --setups)")
    rows: dict[str, Path] = {}
    for path in args.gains:
        label = _gains_label(path)
        if label in rows and rows[label] == path:
            raise UsageError(f"--gains {path} is given twice: give each file once")
        if label in rows:
            raise UsageError(f"--gains {rows[label]} and {path} would both be the row {label!r}: rename one")
        rows[label] = path


def _settings(args: argparse.Namespace):
    """The experiment's settings from the options, their files read: the checks made before
    any work (PreconditionError: the error line alone, exit code 1, for a file to change)."""
    from teleop.tuning.experiment import ExperimentSettings
    from teleop.tuning.motions import human_left_arm_angles, read_human_motion

    _check_options(args)
    settings = ExperimentSettings.quick() if args.quick else ExperimentSettings()
    # Progress goes to stderr: --json keeps stdout for the JSON alone, and a long run still shows it.
    settings.progress = settings.optimiser.progress = not args.quick
    settings.relay_per_heuristic = args.relay_per_heuristic
    if args.payload_kg is not None:
        settings.payload_kg = args.payload_kg
    if args.limited_torque is not None:
        settings.limited_torque_scale = args.limited_torque
    if args.gains:
        from teleop.tuning.gains_io import GainsFormatError, load_gains
        from teleop.tuning.setups import LEFT_ARM

        for path in args.gains:
            if path.is_dir():
                raise PreconditionError(f"--gains {path} is a folder: give a gains JSON file")
            if not path.exists():
                raise PreconditionError(f"--gains {path}: no such file")
            try:
                settings.extra_gains[_gains_label(path)] = load_gains(path, LEFT_ARM)
            except OSError as exc:
                raise PreconditionError(f"--gains {path}: cannot read it ({exc.strerror or exc})") from None
            except GainsFormatError as exc:   # a binary file included: load_gains says so
                raise PreconditionError(f"--gains: {exc}") from None
    if args.evaluations is not None:
        settings.optimiser.max_evaluations = args.evaluations
    if args.speed is not None:
        settings.speed = args.speed
    for option, attr, paths in (("--eval-motions", "evaluation_motions", args.eval_motions),
                                ("--train-motions", "training_motions", args.train_motions)):
        if paths is not None:
            missing = [str(x) for x in paths if not x.exists()]
            if missing:
                raise PreconditionError(f"{option} {', '.join(missing)}: no such file{'s' if len(missing) > 1 else ''}")
            for path in paths:   # read now, not minutes later when a setup starts
                try:
                    motion = read_human_motion(path)
                    human_left_arm_angles(motion)    # the arm's segments are there
                except (OSError, ValueError, zipfile.BadZipFile) as exc:
                    # The file's own error (it names the file): said alone, as a check before the work.
                    setattr(exc, "before_work", True)   # noqa: B010 (an attribute of no exception type)
                    raise
                if len(motion.times) < 2:
                    # It has no set-point to play: an IndexError traceback once the relay tests
                    # (or, for --train-motions, the seven rules' evaluations too) were done.
                    raise PreconditionError(f"{option} {path}: a single sample, no motion to play: give a "
                                            "motion of at least two samples")
            setattr(settings, attr, paths)
    return settings


def _check_out_layout(out: Path, numbers: list[int]) -> None:
    """PreconditionError (before the work) when a path of the outputs in ``out`` is taken by
    the wrong kind of entry: a file ``setup<N>`` where the setup's folder goes, a folder
    where ``summary.json`` or a plot goes. The save failed on it after the whole run, whose
    results were lost ("Not a directory")."""
    for number in numbers:
        folder = out / f"setup{number}"
        if folder.exists() and not folder.is_dir():
            raise PreconditionError(f"--out {out}: {folder} is a file where setup {number}'s folder goes: move it "
                                    "or give another --out")
    for path in [out / "summary.json", *(out / f"setup{n}_errors.png" for n in numbers)]:
        if path.is_dir():
            raise PreconditionError(f"--out {out}: {path} is a folder where the file goes: move it or give "
                                    "another --out")


def _say_what_was_kept(out: Path, stage: str, made_out: bool, save_start: float) -> None:
    """On stderr, after a Ctrl-C (or SIGTERM / SIGHUP) in ``stage`` ("run", "save" or "saved"):
    what ``out`` now holds. The outputs are written as one set (teleop/output_set.py): a stop
    while saving leaves all of them (it came during the renames, which it waits for) or none;
    this run's summary.json, renamed into place last-written, is newer than ``save_start``."""
    summary = out / "summary.json"
    if stage == "save" and summary.is_file() and summary.stat().st_mtime >= save_start:
        stage = "saved"
    earlier = "" if made_out else " (an earlier run's files there are as they were)"
    if stage == "run":
        kept = f"stopped before the results were saved: nothing was written in {out}/{earlier}"
    elif stage == "save":
        kept = f"stopped while saving: nothing was written in {out}/{earlier}"
    else:
        kept = f"stopped after saving: this run's outputs are in {out}/"
    print(f"teleop tune: {kept}", file=sys.stderr)


def _run(args: argparse.Namespace) -> int:
    from teleop.tuning.experiment import run_experiment
    from teleop.tuning.relay import RelayTestError
    from teleop.tuning.report import (earlier_run, format_report, json_summary, remove_stale_outputs, save_outputs)

    numbers = args.setups
    settings = _settings(args)
    if not args.no_save:
        # Now, not after minutes of simulation: an --out that is a file (or not writable)
        # would otherwise fail only when the results are saved, and they would be lost.
        check_out_folder(args.out)
        _check_out_layout(args.out, numbers)
    # An earlier run's outputs that this one does not redo are removed after it, so that the
    # folder says one run's results: those its summary.json lists, no other file. A folder
    # whose summary.json is another tool's is refused: it would be replaced.
    earlier = None
    if not args.no_save:
        try:
            earlier = earlier_run(args.out)
        except ValueError as exc:
            raise PreconditionError(f"--out {args.out}: {exc}; give another folder (nothing was changed)") from None
    made_out = not args.no_save and not args.out.exists()
    if made_out:
        args.out.mkdir(parents=True)
    start = time.time()
    stage = "run"          # then "save", "saved": what an interruption left in --out is said
    save_start = 0.0
    files: list[Path] = []
    try:
        try:
            results = run_experiment(numbers, settings, jobs=args.jobs)
        except RelayTestError as exc:
            # A traceback before (--limited-torque 0.05, --payload-kg 50): exit code 1, one line.
            raise ValueError(f"{exc}; the joint did not oscillate under the relay, so no rule has gains for it "
                             "(too little torque to move it, as with a small --limited-torque, or a payload it "
                             "cannot lift, as with a large --payload-kg)") from None
        elapsed = time.time() - start
        if not args.no_save:
            stage, save_start = "save", time.time()
            files = save_outputs(results, args.out)       # the plots too: one set
            stage = "saved"
            # After the new outputs are written (an interrupted run leaves the old ones whole).
            removed = remove_stale_outputs(args.out, results, earlier) if earlier else []
            if removed and not args.json:
                print(f"removed {len(removed)} file(s) an earlier run wrote in {args.out}/ for setups or methods "
                      "this run did not redo (summary.json lists what is current)", file=sys.stderr)
    except BaseException as exc:
        if made_out and not any(args.out.iterdir()):   # an interrupted run leaves no empty --out
            args.out.rmdir()
        if isinstance(exc, KeyboardInterrupt) and not args.no_save:
            _say_what_was_kept(args.out, stage, made_out, save_start)
        raise
    if args.json:
        print(dumps(json_summary(results)))
    else:
        print(format_report(results))
        processes = min(args.jobs, len(numbers))     # as run_experiment runs them
        print(f"\n{len(numbers)} setup(s) in {elapsed:.0f} s wall-clock ({processes} process"
              f"{'es' if processes > 1 else ''})")
        if files:
            print(f"written: {args.out}/ (summary.json, setup<N>_errors.png, setup<N>/<method>/"
                  "{gains,evaluation,dance,step}.json)")
    met = all(r["target"]["met"] for r in results.values())
    if not met and not args.json:
        print("target NOT met in every setup (see the 'target' lines)"
              + (" -- with --quick's small budget, which is for trying the tool, not for judging it"
                 if args.quick else ""), file=sys.stderr)
    return 0
