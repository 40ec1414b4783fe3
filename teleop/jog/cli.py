"""``teleop jog`` (a hand-held AprilTag drives the robot's hand) and ``teleop calibrate-camera``.

``teleop jog --camera SOURCE``: frames from a device index, a video file or a stream URL
(:mod:`teleop.jog.camera`), AprilTag 36h11 detection and pose (:mod:`teleop.jog.detection`),
then :class:`teleop.jog.session.JogController` (filter, mapping, damping, whole-body QP,
safety, collision checks) driving the simulated robot (pybullet). Two clocks:

* live sources (devices, streams, or ``--realtime``/``--view web``): wall-clock time; a
  camera thread keeps only the newest frame, a detection thread turns frames into tag
  measurements, and the 100 Hz control loop consumes them (a slow detector never delays
  the control loop, and never works on stale frames);
* video files otherwise: virtual time, every frame processed, frame k taken at k / fps;
  as fast as the machine goes and reproducible (tests, offline evaluation).

``teleop calibrate-camera``: intrinsics from chessboard or ChArUco images, written as the
JSON file ``teleop jog --calibration`` reads (:mod:`teleop.jog.camera_intrinsics`).

This module holds the command lines; a jog session is :class:`teleop.jog.run.JogRun`, and
``--make-test-video`` is :mod:`teleop.jog.tag_video`.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import sys
from pathlib import Path

from teleop.cli_types import (UsageError, checked_text, float_in_interval, int_in_range, nonempty_path, port,
                              positive_float, positive_int)
from teleop.jog.run import JogRun, format_summary
from teleop.jog.tag_video import make_test_video
from teleop.json_safe import dumps

#: OpenCV's predefined ArUco dictionaries (cv2.aruco.DICT_*), listed here so that a wrong name
#: is refused by argparse with the valid ones (and cv2 is not imported for `teleop --help`).
ARUCO_DICTIONARIES = tuple(f"DICT_{n}X{n}_{k}" for n in (4, 5, 6, 7) for k in (50, 100, 250, 1000)) + (
    "DICT_ARUCO_ORIGINAL", "DICT_APRILTAG_16h5", "DICT_APRILTAG_25h9", "DICT_APRILTAG_36h10",
    "DICT_APRILTAG_36h11", "DICT_ARUCO_MIP_36h12")


def _hfov(text: str) -> float:
    """``--hfov``: a field of view in (0, 180) degrees (0 would mean an infinite focal length)."""
    return float_in_interval(text, 0.0, 180.0, low_open=True, high_open=True, unit="degrees")


def _damping(text: str) -> float:
    """``--damping``: the damping factor s in [0.1, 1] (0 would never move the hand)."""
    return float_in_interval(text, 0.1, 1.0)


#: AprilTag 36h11 has 587 tags.
MAX_TAG_ID = 586


def _tag_id(text: str) -> int:
    """``--tag-id``: an AprilTag 36h11 id (another would make a whole session of "no tag yet")."""
    return int_in_range(text, 0, MAX_TAG_ID, "AprilTag 36h11 id")


def _axis_map(text: str) -> str:
    """``--axis-map``: base x,y,z as signed camera axes, e.g. '-z,x,-y' (checked, kept as text)."""
    from teleop.jog.mapping import parse_axis_map

    return checked_text(text, parse_axis_map)


def _camera(text: str) -> str:
    """``--camera``: kept as text (a device index, a file or a URL: :mod:`teleop.jog.camera`),
    but a device index OpenCV cannot take is refused here, with the usage (it raised
    OverflowError from inside cv2)."""
    from teleop.jog.camera import MAX_DEVICE_INDEX, is_device_index

    if is_device_index(text) and int(text) > MAX_DEVICE_INDEX:
        raise argparse.ArgumentTypeError(f"device index {text.strip()} is too large (at most {MAX_DEVICE_INDEX}; "
                                         "give a device index such as 0, a video file or a stream URL)")
    return text


#: ``teleop jog`` options that only a jog session uses: with --make-test-video (which renders
#: its video through an ideal camera of --hfov, and jogs nothing) they would be ignored in
#: silence, so they are refused (exit code 2) when given, whatever the value (their default
#: too: see :func:`_jog_only_given`).
JOG_ONLY_OPTIONS = ("calibration", "detector", "mode", "clutch", "damping", "hand", "scale", "axis_map", "offset",
                    "no_orientation", "no_collision_checks", "view", "port", "realtime", "loop")


def _xyz(text: str) -> tuple[float, float, float]:
    """``--offset``: three comma-separated finite numbers x,y,z [m]."""
    try:
        values = tuple(float(x) for x in text.split(","))
    except ValueError:
        values = ()
    if len(values) != 3 or not all(math.isfinite(v) for v in values):
        raise argparse.ArgumentTypeError(f"must be three comma-separated numbers x,y,z [m], got {text!r}")
    return values


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("jog", help="jog the robot's hand with an AprilTag held in front of a camera",
                       description="Absolute or relative (clutched) jogging of the simulated robot's hand from the "
                                   "6-DoF pose of an AprilTag 36h11 seen by a camera (device index, video file or "
                                   "stream URL). The whole-body controller moves the hand while the robot keeps "
                                   "its balance; every step is checked for joint jumps, joint limits, velocity "
                                   "and collisions along the path.")
    p.add_argument("--camera", type=_camera,
                   help="camera: device index (0), video file, or stream URL (required unless --make-test-video)")
    p.add_argument("--make-test-video", type=nonempty_path, metavar="OUT",
                   help="instead of jogging, write a video of a tag going round 0.5 m in front of the camera to OUT "
                        "(.mp4 or .avi; sized by --tag-size, --tag-id, --hfov, --duration, default 10 s) to try "
                        "teleop jog --camera OUT on")
    p.add_argument("--calibration", type=nonempty_path,
                   help="intrinsics file (teleop calibrate-camera JSON, or OpenCV YAML/XML); default: a "
                        "distortion-free guess from --hfov")
    p.add_argument("--hfov", type=_hfov, default=60.0,
                   help="horizontal field of view for the guess, in (0, 180) [deg] (default 60)")
    p.add_argument("--tag-size", type=positive_float, default=0.08,
                   help="side of the tag's black square [m] (default 0.08)")
    p.add_argument("--tag-id", type=_tag_id,
                   help="follow only this tag id (default: the first tag seen, kept while others come into view)")
    p.add_argument("--detector", default="auto", choices=("auto", "aruco", "pupil"),
                   help="detector back-end (default auto: pupil-apriltags if installed, else OpenCV ArUco)")
    p.add_argument("--mode", default="absolute", choices=("absolute", "relative"),
                   help="absolute: the tag pose is the hand pose; relative: tag motion while the clutch is held "
                        "(default absolute)")
    p.add_argument("--clutch", choices=("held", "enter"),
                   help="relative mode's clutch: 'held' = engaged the whole run; 'enter' = Enter on the terminal "
                        "toggles it (default: enter on a terminal, else held)")
    p.add_argument("--damping", type=_damping, default=1.0,
                   help="damping factor s in [0.1, 1] (default 1: no slow-down)")
    p.add_argument("--hand", default="right", choices=("right", "left"), help="which hand (default right)")
    p.add_argument("--scale", type=positive_float, default=1.0, help="hand motion per tag motion (default 1)")
    p.add_argument("--axis-map", type=_axis_map, default=None,
                   help="base x,y,z as signed camera axes (default '-z,x,-y': the camera faces the operator)")
    p.add_argument("--offset", type=_xyz, default=None,
                   help="x,y,z [m]: base-frame point of the camera origin (absolute mode); default: chosen when "
                        "the tag is first seen so that the tag's pose then means the hand's pose then")
    p.add_argument("--no-orientation", action="store_true", help="follow the tag's position only")
    p.add_argument("--no-collision-checks", action="store_true", help="skip the collision checks (faster)")
    p.add_argument("--view", default="none", choices=("none", "web"),
                   help="web: browser view of camera and robot (default none)")
    p.add_argument("--port", type=port, default=8080, help="web viewer port (default 8080; 0 = any free port)")
    p.add_argument("--duration", type=positive_float,
                   help="stop after this many seconds (default: end of file / Ctrl-C); with --make-test-video: its "
                        "length (default 10)")
    p.add_argument("--realtime", action="store_true", help="pace a video file in wall-clock time")
    p.add_argument("--loop", action="store_true", help="restart a video file at its end")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--force", action="store_true", help="with --make-test-video: overwrite OUT if it exists")
    # The jog-only options are parsed with None for "not given" (argparse keeps no other trace
    # of an option typed with its default value: `--mode absolute` was ignored in silence with
    # --make-test-video); their defaults, declared above as --help says them, are kept
    # aside and applied by _run_jog.
    p.set_defaults(func=_run_jog, jog_only_defaults={name: p.get_default(name) for name in JOG_ONLY_OPTIONS},
                   **dict.fromkeys(JOG_ONLY_OPTIONS))

    c = sub.add_parser("calibrate-camera", help="camera intrinsics from chessboard or ChArUco images",
                       description="Calibrate a camera from images of a chessboard (--board = inner corners, "
                                   "e.g. 9x6) or a ChArUco board (--board = squares, e.g. 5x7). Prints the RMS "
                                   "reprojection error and writes the file teleop jog --calibration reads (a "
                                   "calibration that looks wrong is not written without --accept-problems, nor "
                                   "an existing file replaced without --force).")
    source = c.add_mutually_exclusive_group(required=True)
    source.add_argument("--images", nargs="+", type=_image_source, help="image files, folders or glob patterns")
    source.add_argument("--make-test-images", type=nonempty_path, metavar="DIR",
                        help="without a camera: write 12 rendered views of a 9x6 chessboard (25 mm squares) "
                             "through a known camera, and that camera as truth.json, to DIR; then calibrate "
                             "them with --images DIR (--force replaces earlier ones)")
    c.add_argument("--pattern", default="chessboard", choices=("chessboard", "charuco"),
                   help="the board the images show (default: chessboard)")
    c.add_argument("--board", type=_board, default="9x6",
                   help="COLSxROWS: inner corners (chessboard, at least 3x3) or squares (ChArUco) (default 9x6)")
    c.add_argument("--square-size", type=_board_length, default=0.025,
                   help=f"square side [m], {MIN_SQUARE_M:g} to {MAX_SQUARE_M:g} (default 0.025)")
    c.add_argument("--marker-size", type=_board_length,
                   help="ChArUco marker side, smaller than --square-size [m] (default 0.75 x square)")
    c.add_argument("--dictionary", default="DICT_4X4_50", choices=ARUCO_DICTIONARIES, metavar="NAME",
                   help="ChArUco marker dictionary, an OpenCV DICT_* name (default DICT_4X4_50)")
    c.add_argument("--min-views", type=positive_int, default=5, help="boards needed (default 5)")
    c.add_argument("--out", type=nonempty_path, default=Path("out/calibrate-camera/camera.json"),
                   help="calibration file to write (default: out/calibrate-camera/camera.json)")
    c.add_argument("--force", action="store_true",
                   help="overwrite --out if it exists (with --make-test-images: the images of DIR)")
    c.add_argument("--accept-problems", action="store_true",
                   help="write the calibration even if it looks wrong (RMS error above 1 px, fx/fy far from 1, "
                        "principal point far off-centre, distortion folding the image anywhere out to its "
                        "corners, board corners reaching less than half-way to the image corners, or only "
                        "face-on boards)")
    c.add_argument("--json", action="store_true", help="print the result as JSON")
    c.set_defaults(func=_run_calibrate)


# --------------------------------------------------------------------------- helpers
def _board(text: str) -> tuple[int, int]:
    """``--board``: inner corners (chessboard) or squares (ChArUco) as COLSxROWS, e.g. 9x6."""
    try:
        cols, rows = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"must look like 9x6, got {text!r}") from None
    if cols < 2 or rows < 2:
        # 3x3 for a chessboard's inner corners, checked with --pattern (a ChArUco board of
        # 2x2 squares is a board).
        raise argparse.ArgumentTypeError(f"needs at least 2x2, got {text!r}")
    return cols, rows


#: Range of a board's square (and marker) side [m]: printed boards have 5-100 mm squares. A
#: side of 1e10 m wrote a wrong calibration that passed the plausibility checks (the corners'
#: 3D coordinates lost all precision in float32), and 1e-30 ended in an OpenCV assertion.
MIN_SQUARE_M, MAX_SQUARE_M = 1e-3, 1.0


def _board_length(text: str) -> float:
    """``--square-size``/``--marker-size`` [m]: within [MIN_SQUARE_M, MAX_SQUARE_M]."""
    return float_in_interval(text, MIN_SQUARE_M, MAX_SQUARE_M, unit="m")


def _image_source(text: str) -> str:
    """``--images`` item: a file, folder or glob pattern, not an empty one (``''``, an unset
    shell variable, read the current folder, "holds no images", exit 1)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an image file, folder or pattern must not be empty")
    return text


# --------------------------------------------------------------------------- calibrate-camera
def _make_test_images(folder: Path, force: bool) -> int:
    """``calibrate-camera --make-test-images DIR``: a good calibration session rendered
    through a known camera (:func:`teleop.jog.render.spread_board_views`), with the camera
    in ``truth.json`` to compare a calibration with."""
    import cv2

    from teleop.cli_types import PreconditionError
    from teleop.data_args import check_out_folder
    from teleop.jog.render import spread_board_views

    if folder.exists() and not folder.is_dir():
        raise PreconditionError(f"--make-test-images {folder} is a file: give a folder for the images")
    # Before the rendering: a folder that cannot be made (/proc/x) failed after it, unnamed.
    check_out_folder(folder, "--make-test-images")
    earlier = sorted(folder.glob("board_*.png")) + ([folder / "truth.json"] if (folder / "truth.json").exists() else [])
    if earlier and not force:
        raise PreconditionError(f"--make-test-images {folder} holds test images already: pass --force to replace "
                                "them, or choose another folder")
    K, dist, images = spread_board_views()
    folder.mkdir(parents=True, exist_ok=True)
    for old in earlier:
        old.unlink()
    for i, image in enumerate(images):
        path = folder / f"board_{i:02d}.png"
        if not cv2.imwrite(str(path), image):
            raise OSError(f"--make-test-images: could not write {path}")
    truth = {"image_size": [640, 480], "K": K.tolist(), "dist": dist.tolist(), "board": "9x6", "square_size_m": 0.025,
             "note": "the camera these images were rendered through (OpenCV's K and distortion)"}
    (folder / "truth.json").write_text(json.dumps(truth, indent=1) + "\n")
    print(f"wrote {len(images)} chessboard views and the camera they were rendered through (truth.json: fx "
          f"{K[0, 0]:.1f} px, k1 {dist[0]:g}) to {folder}/; calibrate them with: "
          f"teleop calibrate-camera --images {folder}")
    return 0


def _among_images(out: Path, paths: list[str]) -> bool:
    """Whether ``out`` is one of the image files ``--images`` gives (a file named, or an
    image of a folder named; see :func:`teleop.jog.camera_intrinsics.images_from_paths`)."""
    from teleop.jog.camera_intrinsics import IMAGE_SUFFIXES

    target = out.resolve()
    for path in map(Path, paths):
        if path.is_dir():
            if target.parent == path.resolve() and target.suffix.lower() in IMAGE_SUFFIXES:
                return True
        elif path.resolve() == target:
            return True
    return False


def _run_calibrate(args: argparse.Namespace) -> int:
    if args.make_test_images is not None:
        return _make_test_images(args.make_test_images, args.force)
    from teleop.jog.camera_intrinsics import (CalibrationError, calibrate_charuco, calibrate_chessboard,
                                              images_from_paths)

    def fail(message: str) -> SystemExit:
        return SystemExit(f"teleop calibrate-camera: error: {message}")

    from teleop.data_args import check_out_folder, check_output_location

    cols, rows = args.board     # (a chessboard under 3x3: refused by calibrate_chessboard)
    # The output is checked before the calibration, not when it is saved after it.
    if args.out.is_dir():
        raise fail(f"--out {args.out} is a folder: give the calibration file to write, e.g. {args.out / 'camera.json'}")
    try:
        check_output_location(args.out, "--out")
        # Its folder made and written in, as a test: /proc/x/cam.json failed after the
        # calibration, unnamed ("/proc/x: No such file or directory").
        check_out_folder(args.out.parent, "--out", file=args.out)
    except ValueError as exc:
        raise fail(str(exc)) from None
    if args.out.exists() and not args.force:
        # What is on disk, not a malformed value: exit code 1, as every command's OUT that exists.
        raise fail(f"--out {args.out} exists: pass --force to overwrite it, or choose another file")
    marker = args.marker_size or 0.75 * args.square_size
    if args.pattern == "charuco" and marker >= args.square_size:  # OpenCV would fail with a SystemError
        # Two options that cannot go together: the command line's fault, exit code 2.
        raise UsageError(f"--marker-size ({marker:g} m) must be smaller than --square-size ({args.square_size:g} m): "
                         "each marker sits inside a white square")
    paths: list[str] = []
    for item in args.images:
        matches = sorted(glob.glob(item)) if any(ch in item for ch in "*?[") else [item]
        if not matches:
            raise fail(f"--images: no image matches {item!r}")
        paths += matches
    missing = [p for p in paths if not Path(p).exists()]
    if missing:
        raise fail(f"--images: not found: {', '.join(missing)}")
    if args.out.exists() and _among_images(args.out, paths):
        # With --force the calibration replaced the board image it was computed from.
        raise fail(f"--out {args.out} is one of the --images: choose another file (even --force does not replace "
                   "an input)")
    duplicates: list[Path] = []
    try:
        images = images_from_paths(paths, duplicates)
    except CalibrationError as exc:
        raise fail(f"--images: {exc}") from None
    if duplicates:
        # Left out (a repeated view is no new board: counted, it met --min-views with fewer).
        shown = ", ".join(map(str, duplicates[:3])) + (", ..." if len(duplicates) > 3 else "")
        print(f"teleop calibrate-camera: note: {len(duplicates)} of the images given repeat another one and are "
              f"left out ({shown})", file=sys.stderr)
    try:
        if args.pattern == "chessboard":
            calibration, views = calibrate_chessboard(images, cols, rows, args.square_size, args.min_views)
        else:
            calibration, views = calibrate_charuco(images, cols, rows, args.square_size, marker, args.dictionary,
                                                   args.min_views)
    except CalibrationError as exc:
        raise fail(f"{exc} (of {len(images)} images)") from None
    except (AttributeError, cv2_error()) as exc:
        raise fail(str(exc)) from None
    K = calibration.K
    problems = calibration.problems()
    summary = (f"fx {K[0, 0]:.1f}  fy {K[1, 1]:.1f}  cx {K[0, 2]:.1f}  cy {K[1, 2]:.1f} [px]; "
               f"distortion {', '.join(f'{d:.4f}' for d in calibration.dist)}")
    if problems and not args.accept_problems:
        raise fail(f"the calibration looks wrong, not written to {args.out}: {'; '.join(problems)}. "
                   f"Result: {summary}, RMS {calibration.rms_px:.3f} px from {views} boards. Take more images "
                   "(sharp, the board filling much of the frame, tilted in different directions), or pass "
                   "--accept-problems to write it anyway")
    for problem in problems:
        print(f"teleop calibrate-camera: warning: {problem} (written anyway: --accept-problems)", file=sys.stderr)
    calibration.source = f"{args.pattern} {cols}x{rows}, {views} views"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    calibration.save(args.out)
    result = {"rms_px": calibration.rms_px, "views": views, "images": len(images), "fx": K[0, 0], "fy": K[1, 1],
              "cx": K[0, 2], "cy": K[1, 2], "dist": calibration.dist.tolist(), "out": str(args.out),
              "problems": problems}
    if args.json:
        print(dumps(result))
    else:
        print(f"board found in {views} of {len(images)} images; RMS reprojection error {calibration.rms_px:.3f} px")
        print(summary)
        print(f"written to {args.out}")
    return 0


def cv2_error():
    import cv2

    return cv2.error


# --------------------------------------------------------------------------- jog
def _jog_only_given(args: argparse.Namespace) -> list[str]:
    """The jog-only options given on the command line ("--mode"), whatever their value: parsed
    with None for "not given" (see :func:`register`), so that one given its default counts too."""
    return [f"--{name.replace('_', '-')}" for name in getattr(args, "jog_only_defaults", {})
            if getattr(args, name) is not None]


def _apply_jog_only_defaults(args: argparse.Namespace) -> None:
    """Give the jog-only options not given their defaults (as declared in :func:`register`)."""
    for name, default in getattr(args, "jog_only_defaults", {}).items():
        if getattr(args, name) is None:
            setattr(args, name, default)


def _refuse_jog_only_options(args: argparse.Namespace) -> None:
    """With --make-test-video, refuse the options only a jog session uses, whatever their
    value: ``--calibration cam.json`` was ignored in silence, the video rendered through an
    ideal 60 deg camera all the same; and one given its default value (``--mode absolute``)
    still was while they were told apart by their values."""
    given = _jog_only_given(args)
    if given:
        said = ", ".join(given)
        raise UsageError(f"{said} {'has' if len(given) == 1 else 'have'} no effect with --make-test-video, which "
                         "renders its video through an ideal (distortion-free) 640x480 camera of --hfov (sized by "
                         "--tag-size, --tag-id, --hfov and --duration): give "
                         f"{'it' if len(given) == 1 else 'them'} to teleop jog --camera OUT instead")


def _run_jog(args: argparse.Namespace) -> int:
    import numpy as np

    from teleop.jog.camera_intrinsics import CalibrationError, CameraCalibration
    from teleop.jog.camera import CameraError, CameraSource
    from teleop.jog.detection import MIN_FRAME_SIDE_PX, make_detector
    from teleop.jog.mapping import DEFAULT_AXIS_MAP, TagMapping

    if args.make_test_video is not None:
        if args.camera is not None:
            raise UsageError("give --camera SOURCE to jog, or --make-test-video OUT, not both")
        _refuse_jog_only_options(args)
        return make_test_video(args)    # (which reads none of the jog-only options)
    _apply_jog_only_defaults(args)
    if args.camera is None:
        raise UsageError("--camera SOURCE is required (a device index, a video file or a stream URL; "
                         "--make-test-video OUT writes a video to try it on)")
    # (--damping, --tag-id, --axis-map and --offset are checked by argparse: exit code 2.)
    mapping = TagMapping(axis_map=args.axis_map or DEFAULT_AXIS_MAP, scale=args.scale)
    explicit_offset = args.offset is not None
    if explicit_offset:
        mapping.offset = np.array(args.offset)
    calibration = None
    calibration_problems: list[str] = []
    if args.calibration is not None:
        try:
            calibration = CameraCalibration.load(args.calibration)
        except CalibrationError as exc:   # a file that is no calibration: exit code 1, like unreadable files
            raise SystemExit(f"teleop jog: error: --calibration {exc}") from None
        calibration_problems = calibration.problems()
        if calibration_problems:
            # Used (it may have been written with --accept-problems), but said: with fx = 1e12
            # the run ended blaming lighting and focus for a tag it never saw.
            print(f"teleop jog: warning: --calibration {args.calibration} looks wrong: "
                  f"{'; '.join(calibration_problems)}; the tag's poses will be off, or it will go unseen",
                  file=sys.stderr)
    try:
        camera = CameraSource(args.camera, loop=args.loop)
        first = camera.read()
        if first is None:
            camera.close()
            raise CameraError(f"camera source {args.camera!r} delivered no frame")
    except CameraError as exc:
        raise SystemExit(f"teleop jog: error: {exc}") from None
    height, width = first[1].shape[:2]
    if min(width, height) < MIN_FRAME_SIDE_PX:
        camera.close()
        raise SystemExit(f"teleop jog: error: camera source {args.camera!r} gives frames of {width}x{height} px: "
                         f"too small to hold an AprilTag (at least {MIN_FRAME_SIDE_PX} px a side)")
    if calibration is None:
        calibration = CameraCalibration.pinhole(width, height, args.hfov)
    elif tuple(calibration.image_size) != (width, height):
        try:
            scaled = calibration.scaled_to(width, height)
        except CalibrationError as exc:
            camera.close()
            raise SystemExit(f"teleop jog: error: --calibration {args.calibration}: {exc}") from None
        # (Said once it is true: before a refusal it contradicted the error that followed.)
        print(f"note: calibration is for {calibration.image_size[0]}x{calibration.image_size[1]}, frames are "
              f"{width}x{height}: intrinsics scaled", file=sys.stderr)
        calibration = scaled
    try:
        detector = make_detector(args.detector, calibration, args.tag_size,
                                 None if args.tag_id is None else {args.tag_id})
    except (RuntimeError, ValueError) as exc:
        camera.close()
        raise SystemExit(f"teleop jog: error: {exc}") from None
    clutch_mode = args.clutch or ("enter" if sys.stdin is not None and sys.stdin.isatty() else "held")
    realtime = camera.is_file is False or args.realtime or args.view == "web"
    session = JogRun(args, mapping, explicit_offset, calibration, detector, clutch_mode)
    try:
        summary = session.run(camera, first, realtime)
    finally:
        session.close()
    if args.json:
        print(dumps(summary))
    else:
        print(format_summary(summary))
    if summary["error"] is not None:
        # The session ended early (the camera stopped delivering frames, the detector
        # failed): said after its summary, which it used to discard.
        print(f"teleop jog: error: {summary['error']}", file=sys.stderr)
        return 1
    short = camera.ended_early()
    if short is not None:
        print(f"teleop jog: error: {short}", file=sys.stderr)
        return 1
    if summary["frames"] and not summary["frames_with_tag"] and summary["frames_tag_unposed"]:
        # The detector found the tag, but its pose could not be solved from its corners:
        # blaming lighting and focus for it sent the user the wrong way.
        if calibration_problems:      # named first: it was said to look wrong
            given = f"--calibration {args.calibration}, which looks wrong (above), and --tag-size {args.tag_size:g} m"
        elif args.calibration is not None:
            given = f"--tag-size {args.tag_size:g} m and --calibration {args.calibration}"
        else:
            given = f"--tag-size {args.tag_size:g} m and --hfov {args.hfov:g} deg"
        print(f"teleop jog: warning: a tag was found in {summary['frames_tag_unposed']} of the {summary['frames']} "
              f"frames, but its pose could not be solved from its corners in any: check {given} (the tag's side, "
              "and the camera's field of view or calibration; --make-test-video OUT writes a video that works)",
              file=sys.stderr)
        return 1
    if summary["frames"] and not summary["frames_with_tag"]:
        # Nothing was jogged: say why it may be, rather than end as if all went well.
        wanted = "AprilTag 36h11" + (f" id {args.tag_id}" if args.tag_id is not None else "")
        suspect = f"--calibration {args.calibration}, which looks wrong (above), " if calibration_problems else ""
        print(f"teleop jog: warning: no {wanted} was seen in any of the {summary['frames']} frames (check "
              f"{suspect}--tag-id, the tag family, lighting and focus; --make-test-video OUT writes a video that "
              "works)", file=sys.stderr)
        return 1
    if summary["fell"]:
        # Said, not only in the summary's last line: the run stopped early, exit code 1.
        print(f"teleop jog: error: the robot fell at {summary['fell_at_s']:.2f} s (base height "
              f"{summary['base_height_min_m']:.3f} m, from {summary['base_height_start_m']:.3f} m): the run stopped; "
              "goals far out of reach pull the robot over (a smaller --scale keeps them within reach)",
              file=sys.stderr)
        return 1
    if summary["sank"]:
        start, low = summary["base_height_start_m"], summary["base_height_min_m"]
        print(f"teleop jog: error: the robot did not keep its balance: at {summary['sank_at_s']:.2f} s its base sank "
              f"below {1 - summary['sink_fraction']:.0%} of its starting height (to {low:.3f} m at the lowest, from "
              f"{start:.3f} m); goals far out of reach pull the robot down (a smaller --scale keeps them within "
              "reach)", file=sys.stderr)
        return 1
    return 0
