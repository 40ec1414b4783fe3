"""``teleop retarget FILE``: human motion -> robot references, optionally executed on the robot."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Literal

from teleop.cli_types import PreconditionError, UsageError, nonempty_path, sample_rate_hz
from teleop.data_args import check_out_folder, robot_model_of
from teleop.json_safe import dumps
from teleop.output_set import write_outputs_together


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("retarget", help="retarget a motion file to robot references (and execute it on the robot)",
                       description="Read a motion file (Xsens CSV/MVNX, ASF/AMC, BVH, VR trackers, .npz, or the "
                                   "operator input of a teleop operator --record .mcap), retarget it "
                                   "to the robot references (calibrated on its first frame), write the references and "
                                   "a plot of human vs robot hands and CoM. --execute plays them on the simulated "
                                   "robot through the whole-body controller, with the ZMP correction of the CoM "
                                   "reference.")
    # nonempty_path: Path("") is "." (an unset shell variable): --out '' wrote the references
    # into the current folder without a word, and FILE '' was called "a folder".
    p.add_argument("file", type=nonempty_path, help="motion file")
    p.add_argument("--out", type=nonempty_path, help="output folder (default: out/retarget/<file stem>)")
    p.add_argument("--execute", action="store_true", help="play the references on the simulated robot")
    p.add_argument("--no-zmp-correction", action="store_true", help="with --execute: track the raw CoM reference")
    p.add_argument("--view", action="store_true", help="with --execute: show the simulation in pybullet's GUI window")
    p.add_argument("--json", action="store_true", help="print the measured figures as JSON")
    p.add_argument("--robot", default="icub", help="robot description (default: icub)")
    p.add_argument("--rate-hz", type=sample_rate_hz, default=None,
                   help="rate of an Xsens CSV or AMC file, which do not state it (default: 100 and 120); other formats "
                        "state theirs")
    p.set_defaults(func=_run)


def corrected_com(traj, support_polygon, com_height: float, margin: float, control_dt: float | None = None):
    """(T, 2) the CoM reference after the robot station's ZMP pre-filter (Eq. 2.15, see
    :class:`retarget.zmp.ZmpPrefilter`) at the references' times [m].

    The filter runs as the station runs it: every control period ``control_dt`` [s] (default:
    the station's, 0.01 s) on the references interpolated linearly (as ``--execute`` plays
    them). Run at the references' own rate instead, a take read at ``--rate-hz 2`` stepped
    the filter every 0.5 s, where its smoothing (4 rad/s, integrated explicitly) is unstable:
    the plot's "what the robot tracks" was 9 cm from what the robot tracked."""
    import numpy as np

    from retarget.references import SIGNAL_SLICES
    from retarget.zmp import ZmpPrefilter
    from teleop.stations.robot_station import RobotStationConfig

    dt = 1.0 / RobotStationConfig.control_hz if control_dt is None else float(control_dt)
    times = np.asarray(traj.times, dtype=float)
    ticks = np.arange(int(round((times[-1] - times[0]) / dt)) + 1)   # as run_closed_loop plays them
    com_ref = traj.interpolate(times[0] + ticks * dt)[:, SIGNAL_SLICES["com_xy"]]
    prefilter = ZmpPrefilter(dt=dt, margin=margin)
    corrected = np.array([prefilter.step(row, com_height, support_polygon) for row in com_ref])
    # Each reference sample's time -> the tick that plays it.
    at = np.clip(np.round((times - times[0]) / dt).astype(int), 0, len(corrected) - 1)
    return corrected[at]


def plot_retargeting(motion, traj, path: Path, *, title: str = "", support_polygon=None, com=None) -> Path:
    """PNG: human vs robot hand displacements from their start [cm] against time [s], and the
    CoM's ground projection (top view) with the robot's feet and, given ``com`` (T, 2) [m],
    the CoM reference after the ZMP correction (a human CoM that leaves the robot's feet is
    clamped there: drawn raw alone, it read as a mapping fault)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from retarget.anthropometry import whole_body_com
    from retarget.references import SIGNAL_SLICES

    fig, axes = plt.subplots(1, 3, figsize=(14, 4.6), dpi=110)
    t_h = motion.times - motion.times[0]
    t_r = traj.times - traj.times[0]
    for ax, side in ((axes[0], "right"), (axes[1], "left")):
        sl = SIGNAL_SLICES[f"{side}_hand"]
        human = motion.position(f"{side}_hand") if motion.has(f"{side}_hand") else None
        for k, axis in enumerate("xyz"):
            line, = ax.plot(t_r, 100 * (traj.values[:, sl][:, k] - traj.values[0, sl][k]), label=f"robot {axis}")
            if human is not None:
                ax.plot(t_h, 100 * (human[:, k] - human[0, k]), "--", color=line.get_color(), alpha=0.6,
                        label=f"human {axis}")
        ax.set_title(f"{side} hand, displacement from start", fontsize=9)
        ax.set_xlabel("time [s]")
        ax.set_ylabel("displacement [cm]")
        ax.grid(alpha=0.3)
        # Below the axes: inside, it covered the curves.
        ax.legend(fontsize=7, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.16))
    human_com = motion.com if motion.com is not None else whole_body_com(motion)
    ax = axes[2]
    origin = traj.values[0, :2]
    if support_polygon is not None:
        feet = 100 * (np.vstack([support_polygon, support_polygon[:1]]) - origin)
        ax.fill(feet[:, 1], feet[:, 0], color="0.85", label="robot's feet (support polygon)")
    if human_com is not None:
        ax.plot(100 * (human_com[:, 1] - human_com[0, 1]), 100 * (human_com[:, 0] - human_com[0, 0]), "--",
                label="human CoM")
    ax.plot(100 * (traj.values[:, 1] - origin[1]), 100 * (traj.values[:, 0] - origin[0]),
            label="robot CoM reference, retargeted")
    if com is not None:
        ax.plot(100 * (com[:, 1] - origin[1]), 100 * (com[:, 0] - origin[0]), "k-", lw=1.2,
                label="after the ZMP correction (what the robot tracks)")
    ax.set_title("CoM ground projection (top view), from the start", fontsize=9)
    ax.set_xlabel("y (left) [cm]")
    ax.set_ylabel("x (forward) [cm]")
    ax.invert_xaxis()
    ax.set_aspect("equal", adjustable="datalim")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16))
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def _run(args: argparse.Namespace) -> int:
    import numpy as np

    from retarget.envelope import ReferenceEnvelope
    from retarget.human import MotionFormatError
    from retarget.mapping import retarget_motion
    from teleop.robot.target import robot_target
    from teleop.takes import check_rate_hz, read_motion_file, reference_problem, takes_a_rate

    for option, given in (("--view", args.view), ("--no-zmp-correction", args.no_zmp_correction)):
        if given and not args.execute:   # else silently ignored: the user expects a window or a raw CoM
            raise UsageError(f"{option} is about playing the references on the robot: give --execute too")
    if args.file.is_dir():
        raise PreconditionError(f"{args.file} is a folder: teleop retarget takes one motion file "
                                "(teleop train, eval and trial read folders of takes)")
    out = args.out or Path("out") / "retarget" / args.file.stem
    if out.exists() and not out.is_dir():   # found before the work, not after it
        raise PreconditionError(f"--out {out} is a file: give a folder for the references and the plot")
    # Below a file, or where nothing can be written (--out /proc/x): failed with 'Not a
    # directory' or 'No such file or directory' after the work, when the references were saved.
    check_out_folder(out, "--out")
    for name in ("references.npz", "retargeting.png"):
        if (out / name).resolve() == args.file.resolve():
            # A human motion .npz named references.npz, retargeted into its own folder, was
            # replaced by its references: the only copy of the motion lost, exit code 0.
            raise PreconditionError(f"--out {out} would replace the motion file {args.file} with the {name} it "
                                    "writes: give another folder")
    # Else silently ignored: the user expects the take to play at the rate given. Refused
    # before the reading, which takes seconds for a long take.
    check_rate_hz(args.rate_hz, [args.file])
    rate_given = args.rate_hz is not None and takes_a_rate(args.file)
    try:
        motion = read_motion_file(args.file, args.rate_hz)
    except MotionFormatError as exc:
        if not rate_given:
            raise
        # "moves 0.0126 m in 0.1 ms: a tracking glitch or a corrupt value" blamed the file for
        # the rate the user gave it (an HDM05 take at --rate-hz 10000).
        raise MotionFormatError(f"{exc} (read at --rate-hz {args.rate_hz:g}: is that the file's rate?)") from None
    if motion.source and Path(motion.source).resolve() != args.file.resolve():
        # An Xsens joint-angle file (N.csv): the poses retargeted are its partner's (pN.csv).
        print(f"teleop retarget: reading the segment poses of {args.file} from {motion.source}", file=sys.stderr)
    robot = robot_model_of(args)
    target = robot_target(robot)
    # A finite but absurd input (a pelvis x of 1e300) overflows here: said below, by frame
    # and signal, instead of as numpy's RuntimeWarning.
    with np.errstate(over="ignore", invalid="ignore"):
        traj = retarget_motion(motion, target)
    if len(traj.times) < 2:
        # Else written as "frames 1, duration 0.0", exit code 0: a pose, not references to play.
        raise ValueError(f"{args.file}: {len(traj.times)} frame{'s' if len(traj.times) != 1 else ''}: a motion "
                         "needs at least 2")
    # References the robot station would refuse as a fault upstream (hands at 1.27e299 m
    # from one pelvis x of 1e300) were written with exit code 0.
    problem = reference_problem(traj, ReferenceEnvelope.for_target(target))
    if problem:
        raise ValueError(f"{args.file}: retargeted references: {problem}")
    result: dict = {"frames": len(traj), "duration_s": round(traj.duration, 6),
                    "references": str(out / "references.npz"), "plot": str(out / "retargeting.png")}
    if args.execute:
        from teleop.control.closed_loop import run_closed_loop
        from teleop.stations.robot_station import RobotStationConfig

        # The robot station's ZMP margin, so that --execute shows what a session would do.
        zmp: dict[str, float] | Literal[False] = \
            {"margin": RobotStationConfig.zmp_margin} if not args.no_zmp_correction else False
        metrics = run_closed_loop(traj, robot=robot, zmp_correction=zmp, gui=args.view)
        result.update({key: metrics[key] for key in ("fell", "min_cop_margin_mm", "max_foot_slip_mm", "hand_rms_cm")})
        result["zmp_correction"] = not args.no_zmp_correction
        result["zmp_margin_m"] = zmp["margin"] if zmp else None
    # Written after the execution, together: an interrupted or failed run (Ctrl-C while the
    # robot plays them, a bad $TELEOP_SIM_ACTUATOR) leaves the previous run's files as they were.
    from teleop.stations.robot_station import RobotStationConfig

    polygon, com_height = robot.double_support()     # the stance the station starts in (as its ZMP filter)
    # Not drawn with --no-zmp-correction: its curve, labelled "what the robot tracks", said
    # so of a correction the robot had not had.
    com = None if args.no_zmp_correction else corrected_com(traj, polygon, com_height, RobotStationConfig.zmp_margin)
    title = (f"{args.file.name}: {len(traj)} frames, {traj.duration:.2f} s ({motion.rate_hz:.4g} Hz)"
             + (f"; executed on the simulated robot{' without the ZMP correction' if args.no_zmp_correction else ''}"
                f": hands {result['hand_rms_cm']:.1f} cm RMS from the references"
                f"{', the robot fell' if result['fell'] else ''}" if args.execute else ""))
    from teleop.record.export import save_with_arrays
    from teleop.robot.target import library_metadata, robot_note_arrays

    # The robot they were made for, which `teleop train` notes in a library of them.
    note = robot_note_arrays(library_metadata(target))
    write_outputs_together({out / "references.npz": lambda tmp: save_with_arrays(traj, tmp, note),
                            out / "retargeting.png": lambda tmp: plot_retargeting(
                                motion, traj, tmp, title=title, support_polygon=polygon, com=com)})
    if args.json:
        print(dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:20s} {f'{value:.4g}' if isinstance(value, float) else value}")
    if args.execute and result["fell"]:
        # Exit code 1, as `teleop demo`, `jog` and `robot` when the robot fell: a script that
        # checks takes with --execute took exit 0 for a take the robot can play.
        print("teleop retarget: error: the robot fell playing the references"
              + (" (--no-zmp-correction: the raw CoM reference)" if args.no_zmp_correction else "")
              + f"; they are written all the same, to {out}", file=sys.stderr)
        return 1
    return 0
