"""``teleop calibrate-sim``: fit the simulation's actuator model and link masses/CoMs to a
recording of commanded and measured joint angles (teleop.sim.calibration), or make such a
recording from the simulation with hidden, perturbed parameters to test the fit on."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from teleop.cli_types import (PreconditionError, UsageError, int_at_least, non_negative_float, nonempty_path,
                              positive_float, positive_int)
from teleop.json_safe import dumps
from teleop.output_set import write_outputs_together
from teleop.wording import listed


#: What a fit writes into --out.
PARAMS_FILE, REPORT_FILE = "fitted_actuator.toml", "report.json"


def _seed(text: str) -> int:
    """A seed: an integer >= 0 (numpy's generators refuse negative ones, in words that name
    no option)."""
    return int_at_least(text, 0)


def _reduction_text(before: float, after: float) -> str:
    """How much lower the fitted joint RMSE is than the nominal's (RMSEs [rad]), in words
    where a ratio means nothing: a perfect fit's ratio is infinite (or 0/0)."""
    from teleop.sim.calibration import rmse_reduction

    ratio = rmse_reduction(before, after)
    if ratio is not None:
        return f"{ratio:.1f}x lower"
    if after == 0:
        return "error 0 before and after fitting" if before == 0 else "error 0 after fitting"
    return "no ratio: an RMSE is not finite"


def _check_earlier_fit(out: Path, force: bool) -> None:
    """Refuse (ValueError) an ``out`` that holds an earlier fit's files, unless ``force``:
    a fitted parameter file took minutes to make and may be the one a robot description
    points at."""
    earlier = [name for name in (PARAMS_FILE, REPORT_FILE) if (out / name).exists()]
    if earlier and not force:
        raise PreconditionError(f"--out {out} holds {' and '.join(earlier)} of an earlier fit: pass --force to "
                                f"overwrite {'them' if len(earlier) > 1 else 'it'}, or choose another --out")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "calibrate-sim", help="fit actuator parameters and link mass/CoM scales to a joint recording",
        description="Replay the recorded joint commands in the simulation and fit, by least squares, the "
                    "command latency and per-group scale factors of link mass, CoM offset and the actuator's "
                    "damping, viscous and Coulomb friction (and with --fit-kp the stiffness) so that the "
                    "simulated angles match the measured ones. Writes the fitted actuator parameter file and "
                    "reports the joint RMSE before and after. --make-test-recording instead writes a recording "
                    "made in the simulation with hidden parameters (stored in its metadata, so a later fit "
                    "reports how well it recovered them). Recording format: .npz or .json with time (T,), "
                    "joint_names (k,), commanded (T, k), measured (T, k), optional commanded_velocity (T, k) "
                    "(the velocities the servo was sent; without them the fit takes a position-only servo, "
                    "and a servo that was sent some fits with a wrong latency and damping) and meta (see "
                    "teleop/sim/recording_io.py; a test recording's hidden 'truth' is checked with the rest, "
                    "before any replay). A parameter fitted at a bound of its range, and a fit stopped "
                    "by its budget, are warned of and listed in report.json's warnings. An option marked "
                    "'with --data' or 'with --make-test-recording' belongs to that mode: the other refuses it.")
    p.add_argument("--data", type=nonempty_path, help="recording to fit (.npz or .json)")
    p.add_argument("--make-test-recording", type=nonempty_path, metavar="OUT",
                   help="write a recording made with hidden perturbed parameters to OUT (.npz or .json)")
    p.add_argument("--force", action="store_true",
                   help="with --make-test-recording: overwrite OUT if it exists; with --data: replace the "
                        "fitted_actuator.toml and report.json an earlier fit left in --out")
    # The options of one mode default to None (MODE_DEFAULTS fills them in): one given to the
    # other mode is refused, not silently ignored.
    p.add_argument("--perturb", type=non_negative_float,
                   help="with --make-test-recording: hidden scales drawn in [1-P, 1+P], P < 0.7 (default 0.2)")
    p.add_argument("--seed", type=_seed, help="with --make-test-recording: seed >= 0 (default 0)")
    p.add_argument("--duration", type=positive_float,
                   help="with --make-test-recording: length [s] (default 3), long enough for a meaningful fit "
                        "(10 values per fitted parameter; a shorter one is refused, saying how long)")
    p.add_argument("--noise", type=non_negative_float,
                   help="with --make-test-recording: noise on the measured angles [rad] (default 2e-4)")
    p.add_argument("--groups", help="both modes: comma-separated joint groups or joints to calibrate, or to hide "
                                    "parameters of (default: the recording's meta; for a test recording: right_arm)")
    p.add_argument("--params", type=nonempty_path,
                   help="both modes: nominal actuator parameter file (TOML/JSON; default: the description's "
                        "[sim.actuator])")
    p.add_argument("--fit-kp", action="store_true",
                   help="both modes: also fit (with --make-test-recording: also hide) the servo stiffness K_p "
                        "(not identifiable together with the mass from angles alone: see "
                        "teleop/sim/calibration.py)")
    p.add_argument("--max-evaluations", type=positive_int,
                   help="with --data: budget of simulated replays (default 200), at least 2 + 2 x (1 + the number "
                        "of fitted parameters): one least-squares step")
    p.add_argument("--out", type=nonempty_path,
                   help="with --data: folder for fitted_actuator.toml and report.json (default out/calibration; "
                        "--make-test-recording writes to its OUT)")
    p.add_argument("--json", action="store_true",
                   help="with --data: print the report as JSON (the progress bar stays on stderr)")
    p.add_argument("--robot", default="icub", help="both modes: robot description (default: icub)")
    p.set_defaults(func=_run)


#: The options of one mode (the other refuses them) and their defaults: argparse leaves
#: them None (False for --json) unless given.
MODE_DEFAULTS: dict[str, dict[str, Any]] = {
    "--data": {"max_evaluations": 200, "out": Path("out") / "calibration", "json": False},
    "--make-test-recording": {"perturb": 0.2, "seed": 0, "duration": 3.0, "noise": 2e-4},
}
#: What each mode does, in the refusal of the other's options.
MODE_WORDS = {"--data": "fitting a recording", "--make-test-recording": "making a test recording"}


def _check_mode_options(args: argparse.Namespace) -> None:
    """UsageError for an option of the other mode than the one given (``--out`` with
    ``--make-test-recording``, ``--seed`` with ``--data``): it was ignored without a word
    (``--json`` printed text); then set the defaults of this mode's options."""
    mode = "--data" if args.data is not None else "--make-test-recording"
    for other, options in MODE_DEFAULTS.items():
        # (`is`: --seed 0 is given, and 0 == False.)
        given = [f"--{dest.replace('_', '-')}" for dest in options
                 if getattr(args, dest) is not None and getattr(args, dest) is not False]
        if other != mode and given:
            raise UsageError(f"{listed(given)} {'is an option' if len(given) == 1 else 'are options'} of {other} "
                             f"({MODE_WORDS[other]}), not of {mode} ({MODE_WORDS[mode]}): leave "
                             f"{'it' if len(given) == 1 else 'them'} out")
    for dest, default in MODE_DEFAULTS[mode].items():
        if getattr(args, dest) is None:
            setattr(args, dest, default)


def _run(args: argparse.Namespace) -> int:
    """Exit code 2 for an option value (checked before any work), 1 for a file or data the
    command cannot use (raised, as ValueError or OSError, for teleop.cli to report)."""
    from teleop.data_args import robot_model_of
    from teleop.sim.calibration import DEFAULT_FIT

    if (args.data is None) == (args.make_test_recording is None):
        raise UsageError("give exactly one of --data RECORDING or --make-test-recording OUT")
    _check_mode_options(args)
    if args.make_test_recording is not None and args.make_test_recording.is_dir():
        # What is on disk, not a malformed value: exit code 1, as every output of the wrong kind.
        raise PreconditionError(f"--make-test-recording {args.make_test_recording} is a folder: "
                                "give a .npz or .json file")
    problem = _test_recording_option_problem(args) if args.make_test_recording is not None else None
    if problem:
        raise UsageError(problem)
    robot = robot_model_of(args)
    groups = _groups(args.groups, robot) if args.groups else None
    fit = (("kp",) if args.fit_kp else ()) + DEFAULT_FIT
    if args.make_test_recording is not None:
        return _make_test_recording(args, robot, groups or ["right_arm"], fit)
    return _fit(args, robot, groups, fit)


#: Longest test recording [s] (a fit needs seconds; 10 minutes is 60,000 samples a joint).
MAX_TEST_DURATION_S = 600.0
#: Largest noise on a test recording's angles [rad] (encoders resolve ~1e-4 rad; 0.1 rad is
#: already larger than most of the motion).
MAX_TEST_NOISE_RAD = 0.1


def _groups(text: str, robot) -> list[str]:
    """--groups: the named groups or joints, each once, sharing no joint. A repeated group
    was fitted twice (an IndexError after every replay), and a joint in two groups got the
    product of both groups' scales in the fitted file."""
    from teleop.sim.calibration import group_joints

    groups = list(dict.fromkeys(g.strip() for g in text.split(",") if g.strip()))
    owner: dict[str, str] = {}
    for group in groups:
        try:
            joints = group_joints(robot, group)
        except KeyError as exc:
            raise UsageError(f"--groups {text}: {exc.args[0]}") from None
        for joint in joints:
            if joint in owner:
                raise UsageError(f"--groups {text}: {group} and {owner[joint]} share the joint {joint}: "
                                 "give each joint in one group")
            owner[joint] = group
    return groups


def _test_recording_option_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with --make-test-recording's own options (values, not files), or None."""
    out = args.make_test_recording
    if not 0.0 <= args.perturb < 0.7:
        return f"--perturb must be in [0, 0.7), got {args.perturb:g}"
    # Bounded: 1e6 s asked for 26 GiB of samples, 1e308 s overflowed (tracebacks both).
    if args.duration > MAX_TEST_DURATION_S:
        return f"--duration must be at most {MAX_TEST_DURATION_S:g} s for a test recording, got {args.duration:g}"
    # Noise beyond it is no servo's: 1e308 rad ran the whole simulation, then blamed the file.
    if args.noise > MAX_TEST_NOISE_RAD:
        return f"--noise must be at most {MAX_TEST_NOISE_RAD:g} rad, got {args.noise:g}"
    if out.suffix.lower() not in (".npz", ".json"):
        return f"--make-test-recording {out}: unknown recording format (expected .npz or .json)"
    return None


def _duration_problem(robot, groups: list[str], fit: tuple[str, ...], duration: float) -> str | None:
    """Why a test recording of ``duration`` [s] is too short to fit ``fit`` per group of
    ``groups`` (fewer samples than teleop.sim.calibration.min_samples), or None."""
    from teleop.sim.calibration import MIN_VALUES_PER_PARAMETER, TEST_SAMPLE_DT, group_joints, min_samples, \
        n_parameters

    n_joints = sum(len(group_joints(robot, g)) for g in groups)
    n_params = n_parameters(len(groups), fit)
    needed = min_samples(n_params, n_joints)
    if int(round(duration / TEST_SAMPLE_DT)) >= needed:   # the samples make_test_recording makes
        return None
    joints = f"{n_joints} joint{'s' if n_joints != 1 else ''}"
    return (f"--duration {duration:g} s is too short to fit: {n_params} parameters over {joints} need at least "
            f"{needed} samples at {1 / TEST_SAMPLE_DT:g} Hz ({MIN_VALUES_PER_PARAMETER} residual values per "
            f"parameter, after the first sample: the starting posture): give --duration "
            f"{needed * TEST_SAMPLE_DT:g} or more")


def _check_params_file(path: Path) -> None:
    """PreconditionError unless --params names a text file: a folder, a missing file, a
    named pipe, a binary file (an image: it was "not valid JSON (not UTF-8 text ...)")."""
    from retarget.file_checks import refuse_special_file

    if path.is_dir():
        raise PreconditionError(f"--params {path} is a folder: give an actuator parameter file (TOML or JSON)")
    refuse_special_file(path, lambda text: PreconditionError(f"--params {text}: give an actuator parameter file"))
    if not path.is_file():
        raise PreconditionError(f"--params {path}: no such file")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise PreconditionError(f"--params {path}: cannot read it ({exc.strerror or exc})") from None
    try:
        if b"\x00" in data[:4096]:
            raise UnicodeError
        data.decode("utf-8")
    except UnicodeError:
        raise PreconditionError(f"--params {path}: not a TOML or JSON text file (binary content): give an actuator "
                                f"parameter file, e.g. the {PARAMS_FILE} a fit wrote") from None


def _nominal(args: argparse.Namespace, robot):
    """The nominal actuator parameters: --params, else the robot description's. Read before
    any work: a file's error says what is wrong in it, without the TELEOP_DEBUG hint."""
    from teleop.sim.actuator import ActuatorFileError, description_actuator_params, load_actuator_params

    try:
        if args.params:
            _check_params_file(args.params)
            return load_actuator_params(args.params, robot.joint_names, robot.limits.effort)
        return description_actuator_params(robot)
    except ActuatorFileError as exc:
        exc.before_work = True   # type: ignore[attr-defined]  # (teleop.cli: the error line alone)
        raise


def _make_test_recording(args: argparse.Namespace, robot, groups: list[str], fit: tuple[str, ...]) -> int:
    """--make-test-recording: a recording made with hidden parameters, written to OUT."""
    from teleop.data_args import check_out_folder, check_output_location
    from teleop.sim.calibration import make_test_recording
    from teleop.sim.recording_io import save_recording

    out = args.make_test_recording
    # Checked before any work: the recording is not made only to be refused when written.
    problem = _duration_problem(robot, groups, fit, args.duration)
    if problem:
        raise UsageError(problem)
    if out.exists() and not args.force:
        raise PreconditionError(f"--make-test-recording {out} exists: pass --force to overwrite it, "
                                "or choose another file")
    check_output_location(out, "--make-test-recording")
    # A folder that cannot be written in: said now, not after the simulation, naming a hidden
    # temporary file ("/proc/.x.<hex>.tmp.npz: No such file or directory").
    check_out_folder(out.parent, "--make-test-recording", file=out)
    rec = make_test_recording(robot, _nominal(args, robot), groups, args.perturb, args.seed,
                              duration=args.duration, noise_std=args.noise, perturbed=fit)
    save_recording(rec, out)
    print(f"written: {out} ({len(rec.time)} samples x {len(rec.joint_names)} joints; "
          f"hidden parameters in its meta['truth'])")
    return 0


def _fit(args: argparse.Namespace, robot, groups: list[str] | None, fit: tuple[str, ...]) -> int:
    """--data: fit, write the parameter file and the report into --out, print the report."""
    from teleop.data_args import check_out_folder, warn_skipped
    from teleop.sim.actuator import write_actuator_params
    from teleop.sim.calibration import calibrate, check_recording, groups_to_fit, min_evaluations, n_parameters
    from teleop.sim.recording_io import load_recording

    source = str(args.data)
    nominal = _nominal(args, robot)
    check_out_folder(args.out)   # before the minutes of replays, not when the results are written
    rec = load_recording(args.data)
    check_recording(robot, rec, source)
    groups = groups_to_fit(robot, rec, groups, source)
    n_params = n_parameters(len(groups), fit)
    needed = min_evaluations(n_params)
    if args.max_evaluations < needed:
        # scipy would run its minimum anyway, past the budget, and stop on the nominal.
        raise UsageError(f"--max-evaluations {args.max_evaluations} is below the {needed} replays a fit of "
                         f"{n_params} parameters needs (the nominal's and the result's, and one least-squares "
                         f"step: 2 x (1 + {n_params}) for a residual and its finite-difference Jacobian, before "
                         f"and after the step): give --max-evaluations {needed} or more")
    # After the recording's own errors (fixed first, whatever the folder), before the fit.
    _check_earlier_fit(args.out, args.force)
    # (check_recording checked the meta's 'truth' too: the fit compares its result with it.)
    result = calibrate(robot, rec, nominal, groups, max_evaluations=args.max_evaluations,
                       progress=True, fit=fit, source=source)   # on stderr, --json or not
    for warning in ([result.data_warning] if result.data_warning else []) + result.fit_warnings:
        warn_skipped(args, warning)
    args.out.mkdir(parents=True, exist_ok=True)
    params_path, report_path = args.out / PARAMS_FILE, args.out / REPORT_FILE
    report = {"recording": source, **result.summary(rec.joint_names), "fitted_parameters": str(params_path)}
    write_outputs_together({params_path: lambda tmp: write_actuator_params(result.params, tmp),
                            report_path: lambda tmp: tmp.write_text(dumps(report, indent=1))})
    if args.json:
        print(dumps(report))
    else:
        _print_report(result, fit, params_path, report_path)
    return 0


def _print_report(result, fit: tuple[str, ...], params_path: Path, report_path: Path) -> None:
    """The fit as text: RMSE before and after, the fitted values, the files and how to use them."""
    print(f"joint RMSE before: {1000 * result.rmse_before:.3f} mrad   after: {1000 * result.rmse_after:.3f} mrad   "
          f"({_reduction_text(result.rmse_before, result.rmse_after)}; {result.evaluations} replays)")
    print(f"latency: {1000 * result.fitted.latency:.2f} ms")
    for group, scales in result.fitted.scales.items():
        print(f"{group}: " + ", ".join(f"{k} x{v:.4f}" for k, v in scales.items() if k in fit))
    if result.recovery_error:
        worst = max(result.recovery_error, key=result.recovery_error.get)
        print(f"recovery of the hidden parameters: worst error {100 * result.recovery_error[worst]:.2f}% ({worst})"
              + (f"; not compared: {', '.join(result.recovery_not_compared)} (the recording hides its parameters "
                 "per other groups)" if result.recovery_not_compared else ""))
    print(f"written: {params_path}, {report_path}")
    print(f"use it: TELEOP_SIM_ACTUATOR={params_path} teleop COMMAND (any command that simulates), or "
          "[sim.actuator] file = ... in the robot description, or Simulation(actuator=...) in Python")
