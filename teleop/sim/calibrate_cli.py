"""``teleop calibrate-sim``: fit the simulation's actuator model and link masses/CoMs to a
recording of commanded and measured joint angles (teleop.sim.calibration), or make such a
recording from the simulation with hidden, perturbed parameters to test the fit on."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Callable

from teleop.cli_types import non_negative_float, positive_float, positive_int


#: What a fit writes into --out.
PARAMS_FILE, REPORT_FILE = "fitted_actuator.toml", "report.json"


def _check_earlier_fit(out: Path, force: bool) -> None:
    """Refuse (ValueError) an ``out`` that holds an earlier fit's files, unless ``force``:
    a fitted parameter file took minutes to make and may be the one a robot description
    points at."""
    earlier = [name for name in (PARAMS_FILE, REPORT_FILE) if (out / name).exists()]
    if earlier and not force:
        raise ValueError(f"--out {out} holds {' and '.join(earlier)} of an earlier fit: pass --force to "
                         f"overwrite {'them' if len(earlier) > 1 else 'it'}, or choose another --out")


def _write_atomically(writers: dict[Path, Callable[[Path], object]]) -> None:
    """Write each file ``path`` with ``writers[path](tmp)`` into a temporary file next to it
    (same suffix: it picks the format), then move them all into place with os.replace, so
    an interrupted run leaves each file either as it was or complete, never half-written.
    (All are written before any is moved: only an interruption between two renames leaves
    a new file beside an old one.)"""
    temps = {path: path.with_name(f".{path.stem}.{os.getpid()}.tmp{path.suffix}") for path in writers}
    try:
        for path, write in writers.items():
            write(temps[path])
        for path, tmp in temps.items():
            os.replace(tmp, path)
    finally:
        for tmp in temps.values():
            tmp.unlink(missing_ok=True)


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
                    "and meta (see teleop/sim/recording_io.py).")
    p.add_argument("--data", type=Path, help="recording to fit (.npz or .json)")
    p.add_argument("--make-test-recording", type=Path, metavar="OUT",
                   help="write a recording made with hidden perturbed parameters to OUT (.npz or .json)")
    p.add_argument("--force", action="store_true",
                   help="with --make-test-recording: overwrite OUT if it exists; with --data: replace the "
                        "fitted_actuator.toml and report.json an earlier fit left in --out")
    p.add_argument("--perturb", type=non_negative_float, default=0.2,
                   help="with --make-test-recording: hidden scales drawn in [1-P, 1+P], P < 0.7 (default 0.2)")
    p.add_argument("--seed", type=int, default=0, help="with --make-test-recording: seed (default 0)")
    p.add_argument("--duration", type=positive_float, default=3.0, help="with --make-test-recording: length [s] (default 3)")
    p.add_argument("--noise", type=non_negative_float, default=2e-4,
                   help="with --make-test-recording: noise on the measured angles [rad] (default 2e-4)")
    p.add_argument("--groups", help="comma-separated joint groups or joints to calibrate "
                                    "(default: the recording's meta; for a test recording: right_arm)")
    p.add_argument("--params", type=Path,
                   help="nominal actuator parameter file (TOML/JSON; default: the description's [sim.actuator])")
    p.add_argument("--fit-kp", action="store_true",
                   help="also fit the servo stiffness K_p (not identifiable together with the mass from angles "
                        "alone: see teleop/sim/calibration.py)")
    p.add_argument("--max-evaluations", type=positive_int, default=200, help="budget of simulated replays (default 200)")
    p.add_argument("--out", type=Path, default=Path("out") / "calibration",
                   help="folder for fitted_actuator.toml and report.json (default out/calibration)")
    p.add_argument("--json", action="store_true", help="print the report as JSON (no progress bar)")
    p.add_argument("--robot", default="icub", help="robot description (default: icub)")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    import sys

    from teleop.robot.model import RobotModel
    from teleop.sim.actuator import ActuatorFileError, description_actuator_params, load_actuator_params, \
        write_actuator_params
    from teleop.sim.calibration import DEFAULT_FIT, calibrate, check_recording, group_joints, make_test_recording
    from teleop.data_args import check_out_folder, check_output_location
    from teleop.sim.recording_io import RecordingError, load_recording, save_recording

    if (args.data is None) == (args.make_test_recording is None):
        print("teleop calibrate-sim: error: give exactly one of --data RECORDING or --make-test-recording OUT",
              file=sys.stderr)
        return 2
    out = args.make_test_recording
    # Checked before any work: the recording is not made only to be refused when written.
    problem = None
    if out is not None:
        if not 0.0 <= args.perturb < 0.7:
            problem = f"--perturb must be in [0, 0.7), got {args.perturb:g}"
        elif out.is_dir():
            problem = f"--make-test-recording {out} is a folder: give a .npz or .json file"
        elif out.suffix.lower() not in (".npz", ".json"):
            problem = f"--make-test-recording {out}: unknown recording format (expected .npz or .json)"
        elif out.exists() and not args.force:
            problem = f"--make-test-recording {out} exists: pass --force to overwrite it, or choose another file"
        else:
            try:
                check_output_location(out, "--make-test-recording")
            except ValueError as exc:
                problem = str(exc)
    if problem:
        print(f"teleop calibrate-sim: error: {problem}", file=sys.stderr)
        return 2
    robot = RobotModel(args.robot)
    groups = [g.strip() for g in args.groups.split(",") if g.strip()] if args.groups else None
    for group in groups or ():
        try:
            group_joints(robot, group)
        except KeyError as exc:
            print(f"teleop calibrate-sim: error: --groups {args.groups}: {exc.args[0]}", file=sys.stderr)
            return 2
    fit = (("kp",) if args.fit_kp else ()) + DEFAULT_FIT
    try:
        nominal = load_actuator_params(args.params, robot.joint_names, robot.limits.effort) if args.params \
            else description_actuator_params(robot)
        if args.make_test_recording is not None:
            rec = make_test_recording(robot, nominal, groups or ["right_arm"], args.perturb, args.seed,
                                      duration=args.duration, noise_std=args.noise, perturbed=fit)
            save_recording(rec, args.make_test_recording)
            print(f"written: {args.make_test_recording} ({len(rec.time)} samples x {len(rec.joint_names)} joints; "
                  f"hidden parameters in its meta['truth'])")
            return 0
        check_out_folder(args.out)   # before the minutes of replays, not when the results are written
        rec = load_recording(args.data)
        check_recording(robot, rec, str(args.data))
        # After the recording's own errors (fixed first, whatever the folder), before the fit.
        _check_earlier_fit(args.out, args.force)
        result = calibrate(robot, rec, nominal, groups, max_evaluations=args.max_evaluations,
                           progress=not args.json, fit=fit)
    except (ActuatorFileError, RecordingError, KeyError, ValueError) as exc:
        # A KeyError's str() is its message's repr (quoted): print the message itself.
        print(f"teleop calibrate-sim: error: {exc.args[0] if isinstance(exc, KeyError) and exc.args else exc}",
              file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    params_path, report_path = args.out / PARAMS_FILE, args.out / REPORT_FILE
    report = {"recording": str(args.data), **result.summary(rec.joint_names), "fitted_parameters": str(params_path)}
    _write_atomically({params_path: lambda tmp: write_actuator_params(result.params, tmp),
                       report_path: lambda tmp: tmp.write_text(json.dumps(report, indent=1))})
    if args.json:
        print(json.dumps(report))
        return 0
    print(f"joint RMSE before: {1000 * result.rmse_before:.3f} mrad   after: {1000 * result.rmse_after:.3f} mrad   "
          f"({result.rmse_before / max(result.rmse_after, 1e-12):.1f}x lower; {result.evaluations} replays)")
    print(f"latency: {1000 * result.fitted.latency:.2f} ms")
    for group, scales in result.fitted.scales.items():
        print(f"{group}: " + ", ".join(f"{k} x{v:.4f}" for k, v in scales.items() if k in fit))
    if result.recovery_error:
        worst = max(result.recovery_error, key=result.recovery_error.get)
        print(f"recovery of the hidden parameters: worst error {100 * result.recovery_error[worst]:.2f}% ({worst})")
    print(f"written: {params_path}, {report_path}")
    print(f"use it: TELEOP_SIM_ACTUATOR={params_path} teleop COMMAND (any command that simulates), or "
          "[sim.actuator] file = ... in the robot description, or Simulation(actuator=...) in Python")
    return 0
