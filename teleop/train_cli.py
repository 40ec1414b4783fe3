"""``teleop train`` (build a ProMP task library) and ``teleop eval promp`` (Table 5.2)."""

from __future__ import annotations

import argparse
import hashlib
import sys
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

from teleop.cli_types import PreconditionError, int_at_least, nonempty_path
from teleop.data_args import (add_common, add_take_filters, check_filter_names, check_out_folder,
                              check_output_location, read_take_files, robot_target_of, take_files)
from teleop.json_safe import dumps
from teleop.takes import (Take, check_left_out, check_rate_hz, check_take_kinds, list_take_files, same_take,
                          tasks_not_learned)

DEFAULT_LIBRARY = Path("out") / "library.npz"

#: Most basis functions per signal. The full covariance of the 20 signals holds
#: (20 × basis)² numbers, 122 MiB at 200; --basis 100000 asked numpy for 74.5 GiB and died
#: with a traceback. The default is 20, and no take may have fewer samples in its moving
#: part than the count (_check_lengths): the shortest real take (HDM05) has 85.
MAX_BASIS = 200


def min_basis() -> int:
    """The fewest basis functions per signal ``teleop train`` can learn with: the basis it
    uses (``RBFBasis(n)``, default width and margin factors) needs
    ``n - 1 - 2 * margin_factor * width_factor > 0`` (:func:`promp.basis.min_n_basis`)."""
    from promp.basis import RBFBasis, min_n_basis

    return min_n_basis(width_factor=RBFBasis.width_factor, margin_factor=RBFBasis.margin_factor)


def basis_count(text: str) -> int:
    """Basis functions per signal: an integer from :func:`min_basis` (4 with the default
    basis; --basis 2 and 3 failed after every take was read, "margin_factor * width_factor
    too large for n_basis") to :data:`MAX_BASIS`, refused by argparse instead."""
    from promp.basis import RBFBasis

    low = min_basis()
    value = int_at_least(text, low, why=f"(the basis functions span the motion plus a margin of "
                                        f"{RBFBasis.margin_factor:g} width on each side, width "
                                        f"{RBFBasis.width_factor:g} x their spacing: fewer than {low} cannot)")
    if value > MAX_BASIS:
        raise argparse.ArgumentTypeError(
            f"must be <= {MAX_BASIS}, got {text} (the full covariance of the 20 signals holds (20 × basis)² numbers: "
            f"{(20 * MAX_BASIS) ** 2 * 8 / 2 ** 20:.0f} MiB at {MAX_BASIS})")
    return value


def register(sub: argparse._SubParsersAction) -> None:
    train = sub.add_parser("train",
                           help="learn a ProMP task library from folders of motion files (recordings: teleop dataset "
                                "export first)",
                           description="Retarget every take (one folder per task, or Xsens pN.csv files) to robot "
                                       "references, cut each to its moving part and learn one ProMP per task.")
    train.add_argument("data", nargs="+", type=nonempty_path,
                       help="folders of takes: one folder per task (the hdm05 layout), Xsens "
                            "pN.csv files, or the motion files of one task (named after its folder)")
    train.add_argument("-o", "--out", type=nonempty_path, default=DEFAULT_LIBRARY,
                       help=f"library file (default: {DEFAULT_LIBRARY}); an existing task library there is replaced, "
                            "any other file only with --force, and a take being learned from never")
    train.add_argument("--force", action="store_true",
                       help="replace an existing -o that is not a task library (a task library is replaced without "
                            "it)")
    train.add_argument("--basis", type=basis_count, default=20, help="basis functions per signal (default: 20)")
    train.add_argument("--covariance", choices=("full", "per_signal"), default="full",
                       help="full: keep cross-signal covariance (default); per_signal: the thesis's model")
    add_take_filters(train)
    add_common(train)
    # None when not given (the Xsens reader's own default, 100 Hz, applies), so that a
    # --rate-hz that no take would use is refused instead of ignored (see teleop.takes.check_rate_hz).
    train.set_defaults(func=_train, rate_hz=None)

    ev = sub.add_parser("eval", help="evaluate a component offline (eval promp: recognition and prediction, Table 5.2)",
                        description="eval promp: learn ProMPs from the --train takes, then score task recognition "
                                    "and the predicted rest of each --test take after 1/4 and 1/2 of it (Table 5.2); "
                                    "writes summary.json and predictions.png to --out.")
    # metavar: argparse names a missing positional by it ("required: {promp}", not "required: what").
    ev.add_argument("what", choices=("promp",), metavar="{promp}", help="what to evaluate")
    ev.add_argument("--train", type=nonempty_path, required=True,
                    help="training takes: a folder of task folders, of Xsens pN.csv files or of one task's takes")
    ev.add_argument("--test", type=nonempty_path, required=True, help="test takes (as --train)")
    ev.add_argument("--leave-one-out", action="store_true",
                    help="with --train and --test the same folder: each test take is predicted by a library "
                         "trained on all the other takes")
    ev.add_argument("--json", action="store_true", help="print the result as JSON")
    ev.add_argument("--out", type=nonempty_path, default=Path("out") / "eval",
                    help="folder for summary.json and predictions.png (one take per task, predicted after 1/4 "
                         "and 1/2; default: out/eval)")
    add_take_filters(ev, "train")
    add_take_filters(ev, "test")
    add_common(ev)
    ev.set_defaults(func=_eval)


def _learn(takes, basis: int = 20, covariance: str = "full"):
    """One ProMP per task label from the takes, each cut to its moving part and tagged
    with its performer (HDM05: bd, bk, dg; unknown: one group), see
    :func:`teleop.prescient.training.learn_library`."""
    import warnings

    from promp.basis import RBFBasis
    from promp.learning import SingleDemonstrationWarning
    from teleop.prescient.training import learn_library

    with warnings.catch_warnings():
        # `teleop train` says it in its own words (a trial's leave-one-out may leave one take).
        warnings.simplefilter("ignore", SingleDemonstrationWarning)
        return learn_library([t.trajectory for t in takes], groups=[t.performer or None for t in takes],
                             basis=RBFBasis(basis), covariance=covariance)


def _each_once(files: list[tuple[Path, str]]) -> list[tuple[Path, str]]:
    """The (file, label) takes with each file once (by resolved path), saying on stderr how
    many were given more than once (``train S S``, or a dataset and one of its task folders):
    a take learned twice would count double in its task's mean and covariance. Copies in
    other files are found once read, by content (:func:`_each_content_once`)."""
    seen: set[Path] = set()
    out = []
    for path, label in files:
        key = Path(path).resolve()
        if key not in seen:
            seen.add(key)
            out.append((path, label))
    if len(out) < len(files):
        print(f"note: {len(files) - len(out)} take(s) given more than once (overlapping folders); each is learned once",
              file=sys.stderr)
    return out


def _each_content_once(takes: list[Take]) -> list[Take]:
    """The takes with each motion once: a take whose times and values arrays equal an
    earlier take's of the same task is dropped, with a warning naming both. Byte-identical
    copies, and a crashed recording exported beside its recovered copy (the same samples in
    files that differ in their source fields), counted as two takes: double weight in the
    task's mean and covariance, and a task learned from one motion was not warned of.
    The same motion under two task labels is kept: which task it is, is the user's call."""
    first: dict[tuple, Take] = {}
    out = []
    for take in takes:
        times = np.ascontiguousarray(take.trajectory.times, dtype=float)
        values = np.ascontiguousarray(take.trajectory.values, dtype=float)
        key = (take.label, values.shape, hashlib.sha256(times.tobytes() + values.tobytes()).hexdigest())
        earlier = first.get(key)
        if earlier is not None and np.array_equal(earlier.trajectory.times, times) \
                and np.array_equal(earlier.trajectory.values, values):
            print(f"teleop train: warning: {take.path} holds the same motion as {earlier.path} (same times and "
                  "values: a copy, or a recording exported beside its recovered copy); learned once",
                  file=sys.stderr)
            continue
        first.setdefault(key, take)
        out.append(take)
    return out


def _check_out(args: argparse.Namespace, listed: list[tuple[Path, str]]) -> None:
    """Refuse, before anything is read, an -o that would destroy what the user has: one of
    the takes under the data folders (``-o demos/wave/r1_0.npz`` replaced a demonstration,
    --force or not), or an existing file that is not a task library (``-o notes.csv``)
    without --force. A task library is replaced as before: re-training into the same file
    is the usual way to update it (README: ``teleop train ... -o out/library.npz``)."""
    from promp.library import LibraryFormatError, TaskLibrary

    out = args.out.resolve()
    for path, _ in listed:
        if Path(path).resolve() == out:
            raise PreconditionError(f"-o {args.out} is one of the takes given ({path}): writing the library there "
                                    "would replace it; give another file")
    if args.out.exists() and not args.force:
        try:
            TaskLibrary.load(args.out)
        except LibraryFormatError as exc:
            reason = str(exc).removeprefix(f"{args.out}: ")
            said = "not a ProMP task library ("      # said by the message below already
            if reason.startswith(said) and reason.endswith(")"):
                reason = reason[len(said):-1]
            raise PreconditionError(f"-o {args.out} exists and is not a task library ({reason}): pass --force to "
                                    "replace it, or give another file") from None


def _check_lengths(takes: list[Take], basis: int) -> None:
    """Refuse a --basis the shortest take cannot carry, and warn of a take much shorter than
    the rest of its task. Measured on the moving part of each take (what the ProMP learns,
    :func:`teleop.prescient.training.to_demonstration`): a basis function per signal more
    than its samples is a fit with more unknowns than data (``--basis 300`` on a 2-sample
    take was learned, without a word); a take that moves for less than a third of its
    task's median, or more than three times it, skews the mean motion and widens the speeds
    the model allows (a 0.01 s take beside 3 s ones: speed ratios up to 180)."""
    from teleop.prescient.training import to_demonstration

    demos = [to_demonstration(t.trajectory) for t in takes]
    shortest = min(range(len(takes)), key=lambda i: len(demos[i].times))
    samples = len(demos[shortest].times)
    if basis > samples:
        whole = len(takes[shortest].trajectory.times)
        part = f" in its moving part (of {whole})" if whole != samples else ""
        raise ValueError(f"--basis {basis}: take {takes[shortest].path} has {samples} samples{part}, too few for "
                         f"{basis} basis functions per signal: give --basis {samples} or fewer, or leave the take out")
    moving: dict[str, list[tuple[Take, float]]] = defaultdict(list)
    for take, demo in zip(takes, demos):
        moving[take.label].append((take, float(demo.times[-1] - demo.times[0])))
    for label, spans in moving.items():
        median = float(np.median([d for _, d in spans]))
        for take, duration in spans:
            if duration < median / 3:
                print(f"teleop train: warning: {take.path} moves for {duration:.2f} s, less than a third of the "
                      f"{median:.2f} s median of task {label}'s takes: a fragment or another motion? it pulls the "
                      "task's mean motion and widens the speeds it allows; leave it out if so", file=sys.stderr)
            elif duration > 3 * median:
                # As harmful the other way: a `teleop operator --loop --task` session is one
                # take of several repetitions, and it stretched the task's mean motion by half.
                print(f"teleop train: warning: {take.path} moves for {duration:.2f} s, more than three times the "
                      f"{median:.2f} s median of task {label}'s takes: several repetitions in one take (a --loop "
                      "session)? it pulls the task's mean motion and widens the speeds it allows; label each "
                      "repetition as an episode (teleop dataset label --start S --end E) or leave it out",
                      file=sys.stderr)


def _robot_note_of(takes: list, retargeted_here: dict[str, str]) -> tuple[dict[str, str] | None, int]:
    """(the note of the robot every take was made for, how many takes do not say): a take
    retargeted here was made for ``retargeted_here`` (--robot's note); a references file
    says in its own note, when ``teleop retarget`` or ``teleop dataset export`` wrote it.
    A note that gives neither geometry nor sizes does not say. The note is None when any
    take does not say.

    Every two different notes are compared, not each with the first: "within 1 mm" is not
    transitive, so robots A ~ B ~ C with A and C 2 mm apart are refused in any order.

    Raises:
        PreconditionError: two takes were made for different robots (the ProMPs would
            learn a mean of two robots' references).
    """
    from teleop.robot.target import note_tells_robot, robot_notes_comparable, robot_notes_mismatch

    noted = [(take, retargeted_here if take.retargeted else take.robot_note) for take in takes]
    noted = [(take, note) for take, note in noted if note is not None and note_tells_robot(note)]
    distinct: dict[tuple, tuple] = {}    # one (take, note) per different note, in take order
    for take, note in noted:
        distinct.setdefault(tuple(sorted(note.items())), (take, note))
    pairs = list(distinct.values())
    for i, (first, first_note) in enumerate(pairs):
        for take, note in pairs[i + 1:]:
            if not robot_notes_comparable(first_note, note):
                raise PreconditionError(
                    f"{first.path} and {take.path} note their robots by different things (one by its geometry, "
                    "the other by its sizes only), so they cannot be told to be one robot: a task library learns "
                    "one robot's references (give the human motion files to retarget them all to --robot, or learn "
                    "each robot's takes apart)")
            mismatch = robot_notes_mismatch(first_note, note)
            if mismatch:
                raise PreconditionError(
                    f"{first.path} and {take.path} were made for different robots, {mismatch}: a task library "
                    "learns one robot's references (give the human motion files to retarget them all to --robot, "
                    "or learn each robot's takes apart)")
    unnoted = len(takes) - len(noted)
    return (noted[0][1] if noted and not unnoted else None), unnoted


def check_one_robot(takes: list, target) -> None:
    """Refuse takes made for different robots (:func:`_robot_note_of`), as ``train`` does:
    ``eval`` and ``trial`` learn from them too, and score against them."""
    from teleop.robot.target import library_metadata

    _robot_note_of(takes, library_metadata(target))


def _train(args: argparse.Namespace) -> int:
    from teleop.robot.target import described_robot, library_metadata

    if args.out.is_dir():   # found now, not after the learning
        raise PreconditionError(f"-o {args.out} is a folder: give the library file to write, "
                                f"e.g. {args.out / 'library.npz'}")
    check_output_location(args.out, "-o")
    # A folder that cannot be made or written in (-o /proc/none/lib.npz) failed only when
    # the library was saved, after all the reading.
    check_out_folder(args.out.parent, "-o")
    # Every folder checked before any is read; a filter's names against all of them together
    # (a task may be in one folder only).
    chosen = [take_files(args, root, check_names=False) for root in args.data]
    listed = [pair for root in args.data for pair in list_take_files(root, warn=lambda _: None)]  # said once, above
    check_filter_names(args, listed, ", ".join(str(root) for root in args.data))
    _check_out(args, listed)
    files = _each_once([pair for files in chosen for pair in files])
    check_take_kinds(files)     # a recording or a library among the takes: said before any is read
    check_rate_hz(args.rate_hz, [path for path, _ in files])   # before any take is read
    target = robot_target_of(args)
    takes = _each_content_once(read_take_files(args, files, target))
    # Takes made for different robots are refused before the learning, not after it.
    note, unnoted = _robot_note_of(takes, library_metadata(target))
    _check_lengths(takes, args.basis)
    counts = Counter(t.label for t in takes)
    library = _learn(takes, args.basis, args.covariance)
    if note is not None:
        library.metadata.update(note)    # the robot station checks it is its robot's
    args.out.parent.mkdir(parents=True, exist_ok=True)
    library.save(args.out)
    print(f"learned {len(library)} task{'s' if len(library) != 1 else ''} from {len(takes)} "
          f"take{'s' if len(takes) != 1 else ''} -> {args.out}")
    for label in library.labels:
        promp = library[label]
        print(f"  {label:32s} {counts[label]:3d} takes, mean motion {promp.duration:.2f} s")
    if note is None:
        # Noting --robot's for them would have the robot station refuse (or accept) the library on a guess.
        are = "is a references file that does" if unnoted == 1 else "are references files that do"
        print(f"  robot: not noted ({unnoted} of the {len(takes)} takes {are} not note the geometry or sizes of "
              "the robot they were made for); teleop robot cannot check the library was learned for it")
    else:
        print(f"  robot: {described_robot(note)}")
    single = [label for label in library.labels if counts[label] == 1]
    if single:
        # Its ProMP has no spread: the robot would replay that one take whatever the operator does.
        print(f"teleop train: warning: {', '.join(single)} learned from one take{' each' if len(single) > 1 else ''}: "
              "a task learned from one take has no spread to follow an operator who moves otherwise; record "
              "several (5 or more)", file=sys.stderr)
    return 0


def check_test_tasks(train: list[tuple[Path, str]], test: list[tuple[Path, str]], leave_one_out: bool) -> None:
    """Every test take's task must be learned from the training takes (with --leave-one-out:
    from the training takes other than itself), else it cannot be scored. Takes are
    (file, label) pairs, so this runs before anything is read."""
    unlearned = tasks_not_learned(train, test, leave_one_out)
    if unlearned:
        raise PreconditionError(unlearned[0][2])
    if leave_one_out:
        check_left_out(train, test)


def evaluate(train_takes, test_takes, leave_one_out: bool = False, progress: bool = False) -> dict:
    """The ``teleop eval promp`` figures (see the issue's JSON layout), from
    :func:`promp.evaluation.evaluate_library` per test take.

    Levels as Table 5.2's columns (reference §6.4): "none" (the true task's prior mean),
    "recog" (after the first 1 s of the motion: the thesis recognises after about 1 s),
    "quarter" and "half" of the motion (the take's moving part, from its detected onset).

    * ``recognition``: share of the takes whose task is recognised, at none, quarter and half.
    * ``hand_rms_cm``: RMS over the part not yet observed, per axis [cm, robot reference
      space], averaged over the 6 axes of the two hands, then over the takes;
      ``hand_rms_whole_cm`` the same over the whole motion; ``hand_rms_prior_cm`` the prior
      mean's over each level's unobserved part; ``posture_rms_rad``: per joint signal [rad]
      over the unobserved part, averaged over the 11 posture signals and the takes.
    * ``coverage_2sigma``: at half, the share of the unobserved (sample, signal) pairs, all
      20 signals pooled, inside the predicted mean ± 2 σ.

    Deliberate differences from Table 5.2, which lists each signal of the right hand and 7
    joints with mean ± SD over the motions: the issue asks for one figure per group (hands
    averaged over axes and both hands, postures over all joints), so no per-signal rows
    and no SD are printed (``evaluate_library`` returns both per signal), and the CoM and
    waist rows of the table are not reported.
    """
    from teleop.progress import progress_bar

    from promp.evaluation import evaluate_library
    from retarget.references import HAND_INDICES, POSTURE_INDICES
    from promp.estimator import EstimatorConfig
    from teleop.prescient.training import to_demonstration

    # The library's estimator as it comes. The robot station's differs only in what it
    # executes (no averaging over the remaining speed, promp.estimator eighth round): its
    # recognition is the same, and `teleop trial` measures what it executes.
    config = EstimatorConfig()

    hands, postures = list(HAND_INDICES), list(POSTURE_INDICES)
    # (test takes, their evaluation): one per take with --leave-one-out, else one per task
    # (the estimator restarts for every take, so the split changes no figure).
    groups: list[tuple[list, dict]] = []
    if leave_one_out:
        for take in progress_bar(test_takes, desc="leave-one-out", enabled=progress):
            library = _learn([t for t in train_takes if not same_take(t.path, take.path)])
            groups.append(([take], evaluate_library(library, [to_demonstration(take.trajectory)], [take.label],
                                                    config=config)))
    else:
        library = _learn(train_takes)
        for label in sorted({t.label for t in test_takes}):
            takes = [t for t in test_takes if t.label == label]
            groups.append((takes, evaluate_library(library, [to_demonstration(t.trajectory) for t in takes],
                                                   [label] * len(takes), config=config)))
    level_keys = {"none": "none", "recog": "recog", "quarter": "1/4", "half": "1/2"}

    def figures(results: list[dict]) -> dict:
        n = sum(r["n_test"] for r in results)

        def pooled(metric: str, idx: list[int], level: str, scale: float) -> float:
            # Per-signal RMS (per axis), averaged over the signals of the group, then over takes.
            values = [np.mean(np.asarray(r[metric][level]["per_signal_mean"])[idx]) * r["n_test"] for r in results]
            return float(scale * np.sum(values) / n)

        coverage = [r["coverage_2sigma"]["1/2"] for r in results]
        return {
            "recognition": {k: float(sum(r["recognition_accuracy"][lv] * r["n_test"] for r in results) / n)
                            for k, lv in level_keys.items() if k != "recog"},
            "hand_rms_cm": {k: pooled("rms_remaining", hands, lv, 100.0) for k, lv in level_keys.items()},
            "hand_rms_whole_cm": {k: pooled("rms_whole", hands, lv, 100.0) for k, lv in level_keys.items()},
            # The unconditioned mean ("none") scored on each level's own unobserved part: the
            # yardstick of that level's "hand_rms_cm" (for "none" the two are the same).
            "hand_rms_prior_cm": {k: pooled("rms_remaining_prior", hands, lv, 100.0)
                                  for k, lv in level_keys.items()},
            "posture_rms_rad": {k: pooled("rms_remaining", postures, lv, 1.0) for k, lv in level_keys.items()},
            # Fraction of all unobserved (sample, signal) pairs inside the band, pooled.
            "coverage_2sigma": float(sum(c["overall"] * c["samples"] for c in coverage)
                                     / sum(c["samples"] for c in coverage)),
            "n_test": n,
        }

    result = figures([r for _, r in groups])
    truth = [t.label for takes, _ in groups for t in takes]
    # Which task each test take was taken for: {level: {true task: {recognised task: count}}}.
    result["confusion"] = {k: _confusion(truth, [label for _, r in groups for label in r["recognised"][lv]])
                           for k, lv in level_keys.items() if k in ("quarter", "half")}
    result["per_task"] = {label: figures([r for takes, r in groups if takes[0].label == label])
                          for label in sorted(set(truth))}
    return result


def _confusion(truth: list[str], recognised: list[str]) -> dict[str, dict[str, int]]:
    table: dict[str, dict[str, int]] = {}
    for true, seen in zip(truth, recognised):
        row = table.setdefault(true, {})
        row[seen] = row.get(seen, 0) + 1
    return table


def _eval(args: argparse.Namespace) -> int:
    from teleop.output_set import write_outputs_together

    if args.out.exists() and not args.out.is_dir():   # found before the work, not after it
        raise PreconditionError(f"--out {args.out} is a file: give a folder for the summary and the plot")
    # Also whether the folder can be made and written in: `--out /proc/x` failed only after
    # the whole evaluation, with an error that did not name --out.
    check_out_folder(args.out, "--out")
    train_files, test_files = take_files(args, args.train, "train"), take_files(args, args.test, "test")
    check_take_kinds(train_files + test_files)     # the file's own problem before any label mismatch
    # --rate-hz that neither set would use, refused before the reading (as train and
    # retarget do): HDM05's AMC takes use it, a folder of BVH takes ignored it silently.
    check_rate_hz(args.rate_hz, [path for path, _ in train_files + test_files])
    check_test_tasks(train_files, test_files, args.leave_one_out)
    target = robot_target_of(args)
    train, test = read_take_files(args, train_files, target), read_take_files(args, test_files, target)
    check_one_robot(train + test, target)
    result = evaluate(train, test, args.leave_one_out, progress=True)   # on stderr, --json or not
    write_outputs_together({
        args.out / "summary.json": lambda tmp: tmp.write_text(dumps(result, indent=1)),
        args.out / "predictions.png": lambda tmp: _plot_examples(train, test, args.leave_one_out, tmp),
    })
    if args.json:
        print(dumps(result))
        return 0
    print(f"{result['n_test']} test takes; recognition accuracy: " +
          ", ".join(f"{k} {v:.0%}" for k, v in result["recognition"].items()))
    print(f"{'observed':10s} {'hands, rest [cm]':>18s} {'unconditioned [cm]':>19s} {'hands, whole [cm]':>18s} "
          f"{'postures [rad]':>15s}")
    for level in ("none", "recog", "quarter", "half"):
        print(f"{level:10s} {result['hand_rms_cm'][level]:18.2f} {result['hand_rms_prior_cm'][level]:19.2f} "
              f"{result['hand_rms_whole_cm'][level]:18.2f} {result['posture_rms_rad'][level]:15.3f}")
    print("(observed: none; recog = the first 1 s, predicted as the task the estimator then recognised, right or "
          "wrong; quarter, half = that fraction of the motion. unconditioned: the prior mean's error over the "
          "same unobserved part)")
    print(f"2-sigma coverage of the unobserved part at 1/2: {result['coverage_2sigma']:.1%}")
    if len(result["per_task"]) > 1:
        width = max(12, *(len(label) for label in result["per_task"]))
        print(f"\n{'task':{width}s} {'takes':>5s} {'recognised 1/4':>15s} {'1/2':>5s} "
              f"{'hands rest 1/2 [cm]':>20s} {'unconditioned [cm]':>19s}")
        for label, f in result["per_task"].items():
            print(f"{label:{width}s} {f['n_test']:5d} {f['recognition']['quarter']:15.0%} "
                  f"{f['recognition']['half']:5.0%} {f['hand_rms_cm']['half']:20.2f} "
                  f"{f['hand_rms_prior_cm']['half']:19.2f}")
    for level, table in result["confusion"].items():
        mistakes = [f"{true} as {seen} x{n}" for true, row in table.items() for seen, n in row.items() if seen != true]
        print(f"mistaken after {level}: " + ("; ".join(mistakes) if mistakes else "none"))
    print(f"written: {args.out}/summary.json, predictions.png")
    return 0


def _plot_examples(train_takes, test_takes, leave_one_out: bool, path: Path) -> Path:
    """predictions.png: the first test take of each task, predicted after 1/4 and 1/2."""
    from teleop.eval_plot import plot_predictions
    from promp.estimator import EstimatorConfig
    from teleop.prescient.training import to_demonstration

    first_of: dict = {}
    for take in test_takes:
        first_of.setdefault(take.label, take)
    firsts = [first_of[label] for label in sorted(first_of)]
    shared = None if leave_one_out else _learn(train_takes)

    def library_for(i: int):
        return shared or _learn([t for t in train_takes if not same_take(t.path, firsts[i].path)])

    how = "each take predicted by a library learned without it" if leave_one_out else "one library for all"
    return plot_predictions([(to_demonstration(t.trajectory), t.label) for t in firsts], library_for, path,
                            EstimatorConfig(), names=[t.path.name for t in firsts],
                            title=f"learned from {len(train_takes)} takes, {how}")
