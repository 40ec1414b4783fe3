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
JSON file ``teleop jog --calibration`` reads (:mod:`teleop.jog.calibration`).
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import queue
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from teleop.cli_types import (UsageError, checked_text, float_in_interval, int_in_range, nonempty_path, port,
                              positive_float, positive_int)
from teleop.stop_request import raise_if_stop_lost, stop_handled

if TYPE_CHECKING:
    import numpy as np

    from teleop.jog.session import TickReport

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
    p.add_argument("--camera", help="camera: device index (0), video file, or stream URL (required unless "
                                    "--make-test-video)")
    p.add_argument("--make-test-video", type=Path, metavar="OUT",
                   help="instead of jogging, write a video of a tag going round 0.5 m in front of the camera to OUT "
                        "(.mp4 or .avi; sized by --tag-size, --tag-id, --hfov, --duration, default 10 s) to try "
                        "teleop jog --camera OUT on")
    p.add_argument("--calibration", type=Path,
                   help="intrinsics file (teleop calibrate-camera JSON, or OpenCV YAML/XML); default: a "
                        "distortion-free guess from --hfov")
    p.add_argument("--hfov", type=_hfov, default=60.0,
                   help="horizontal field of view for the guess, in (0, 180) [deg] (default 60)")
    p.add_argument("--tag-size", type=positive_float, default=0.08, help="side of the tag's black square [m] (default 0.08)")
    p.add_argument("--tag-id", type=_tag_id, help="follow only this tag id (default: the first tag seen, kept while others come into view)")
    p.add_argument("--detector", default="auto", choices=("auto", "aruco", "pupil"),
                   help="detector back-end (default auto: pupil-apriltags if installed, else OpenCV ArUco)")
    p.add_argument("--mode", default="absolute", choices=("absolute", "relative"),
                   help="absolute: the tag pose is the hand pose; relative: tag motion while the clutch is held")
    p.add_argument("--clutch", choices=("held", "enter"),
                   help="relative mode's clutch: 'held' = engaged the whole run; 'enter' = Enter on the terminal "
                        "toggles it (default: enter on a terminal, else held)")
    p.add_argument("--damping", type=_damping, default=1.0, help="damping factor s in [0.1, 1] (default 1: no slow-down)")
    p.add_argument("--hand", default="right", choices=("right", "left"), help="which hand (default right)")
    p.add_argument("--scale", type=positive_float, default=1.0, help="hand motion per tag motion (default 1)")
    p.add_argument("--axis-map", type=_axis_map, default=None,
                   help="base x,y,z as signed camera axes (default '-z,x,-y': the camera faces the operator)")
    p.add_argument("--offset", type=_xyz, default=None,
                   help="x,y,z [m]: base-frame point of the camera origin (absolute mode); default: chosen when "
                        "the tag is first seen so that the tag's pose then means the hand's pose then")
    p.add_argument("--no-orientation", action="store_true", help="follow the tag's position only")
    p.add_argument("--no-collision-checks", action="store_true", help="skip the collision checks (faster)")
    p.add_argument("--view", default="none", choices=("none", "web"), help="web: browser view of camera and robot")
    p.add_argument("--port", type=port, default=8080, help="web viewer port (default 8080; 0 = any free port)")
    p.add_argument("--duration", type=positive_float,
                   help="stop after this many seconds (default: end of file / Ctrl-C); with --make-test-video: its "
                        "length (default 10)")
    p.add_argument("--realtime", action="store_true", help="pace a video file in wall-clock time")
    p.add_argument("--loop", action="store_true", help="restart a video file at its end")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--force", action="store_true", help="with --make-test-video: overwrite OUT if it exists")
    p.set_defaults(func=_run_jog)

    c = sub.add_parser("calibrate-camera", help="camera intrinsics from chessboard or ChArUco images",
                       description="Calibrate a camera from images of a chessboard (--board = inner corners, "
                                   "e.g. 9x6) or a ChArUco board (--board = squares, e.g. 5x7). Prints the RMS "
                                   "reprojection error and writes the file teleop jog --calibration reads (a "
                                   "calibration that looks wrong is not written without --accept-problems, nor "
                                   "an existing file replaced without --force).")
    source = c.add_mutually_exclusive_group(required=True)
    source.add_argument("--images", nargs="+", help="image files, folders or glob patterns")
    source.add_argument("--make-test-images", type=nonempty_path, metavar="DIR",
                        help="without a camera: write 12 rendered views of a 9x6 chessboard (25 mm squares) "
                             "through a known camera, and that camera as truth.json, to DIR; then calibrate "
                             "them with --images DIR (--force replaces earlier ones)")
    c.add_argument("--pattern", default="chessboard", choices=("chessboard", "charuco"))
    c.add_argument("--board", type=_board, default="9x6",
                   help="COLSxROWS: inner corners (chessboard) or squares (ChArUco) (default 9x6)")
    c.add_argument("--square-size", type=positive_float, default=0.025, help="square side [m] (default 0.025)")
    c.add_argument("--marker-size", type=positive_float,
                   help="ChArUco marker side, smaller than --square-size [m] (default 0.75 x square)")
    c.add_argument("--dictionary", default="DICT_4X4_50", choices=ARUCO_DICTIONARIES, metavar="NAME",
                   help="ChArUco marker dictionary, an OpenCV DICT_* name (default DICT_4X4_50)")
    c.add_argument("--min-views", type=positive_int, default=5, help="boards needed (default 5)")
    c.add_argument("--out", type=Path, default=Path("out/calibrate-camera/camera.json"),
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
        raise argparse.ArgumentTypeError(f"needs at least 2x2, got {text!r}")
    return cols, rows


# --------------------------------------------------------------------------- calibrate-camera
def _make_test_images(folder: Path, force: bool) -> int:
    """``calibrate-camera --make-test-images DIR``: a good calibration session rendered
    through a known camera (:func:`teleop.jog.render.spread_board_views`), with the camera
    in ``truth.json`` to compare a calibration with."""
    import cv2

    from teleop.cli_types import PreconditionError
    from teleop.data_args import check_output_location
    from teleop.jog.render import spread_board_views

    if folder.exists() and not folder.is_dir():
        raise PreconditionError(f"--make-test-images {folder} is a file: give a folder for the images")
    check_output_location(folder, "--make-test-images")
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


def _run_calibrate(args: argparse.Namespace) -> int:
    if args.make_test_images is not None:
        return _make_test_images(args.make_test_images, args.force)
    from teleop.jog.calibration import CalibrationError, calibrate_charuco, calibrate_chessboard, images_from_paths

    def fail(message: str) -> SystemExit:
        return SystemExit(f"teleop calibrate-camera: error: {message}")

    from teleop.data_args import check_output_location

    cols, rows = args.board
    # The output is checked before the calibration, not when it is saved after it.
    if args.out.is_dir():
        raise fail(f"--out {args.out} is a folder: give the calibration file to write, e.g. {args.out / 'camera.json'}")
    try:
        check_output_location(args.out, "--out")
    except ValueError as exc:
        raise fail(str(exc)) from None
    if args.out.exists() and not args.force:
        # What is on disk, not a malformed value: exit code 1, as every command's OUT that exists.
        raise fail(f"--out {args.out} exists: pass --force to overwrite it, or choose another file")
    marker = args.marker_size or 0.75 * args.square_size
    if args.pattern == "charuco" and marker >= args.square_size:  # OpenCV would fail with a SystemError
        raise fail(f"--marker-size ({marker:g} m) must be smaller than --square-size ({args.square_size:g} m): "
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
    try:
        images = images_from_paths(paths)
    except CalibrationError as exc:
        raise fail(f"--images: {exc}") from None
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
        print(json.dumps(result))
    else:
        print(f"board found in {views} of {len(images)} images; RMS reprojection error {calibration.rms_px:.3f} px")
        print(summary)
        print(f"written to {args.out}")
    return 0


def cv2_error():
    import cv2

    return cv2.error


# --------------------------------------------------------------------------- jog
def _run_jog(args: argparse.Namespace) -> int:
    import numpy as np

    from teleop.jog.calibration import CalibrationError, CameraCalibration
    from teleop.jog.camera import CameraError, CameraSource
    from teleop.jog.detection import make_detector
    from teleop.jog.mapping import DEFAULT_AXIS_MAP, TagMapping

    if args.make_test_video is not None:
        if args.camera is not None:
            raise UsageError("give --camera SOURCE to jog, or --make-test-video OUT, not both")
        return _make_test_video(args)
    if args.camera is None:
        raise UsageError("--camera SOURCE is required (a device index, a video file or a stream URL; "
                           "--make-test-video OUT writes a video to try it on)")
    # (--damping, --tag-id, --axis-map and --offset are checked by argparse: exit code 2.)
    mapping = TagMapping(axis_map=args.axis_map or DEFAULT_AXIS_MAP, scale=args.scale)
    explicit_offset = args.offset is not None
    if explicit_offset:
        mapping.offset = np.array(args.offset)
    calibration = None
    if args.calibration is not None:
        try:
            calibration = CameraCalibration.load(args.calibration)
        except CalibrationError as exc:   # a file that is no calibration: exit code 1, like unreadable files
            raise SystemExit(f"teleop jog: error: --calibration {exc}") from None
    try:
        camera = CameraSource(args.camera, loop=args.loop)
        first = camera.read()
        if first is None:
            camera.close()
            raise CameraError(f"camera source {args.camera!r} delivered no frame")
    except CameraError as exc:
        raise SystemExit(f"teleop jog: error: {exc}") from None
    height, width = first[1].shape[:2]
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
        print(json.dumps(summary))
    else:
        print(format_summary(summary))
    if summary["frames"] and not summary["frames_with_tag"]:
        # Nothing was jogged: say why it may be, rather than end as if all went well.
        wanted = "AprilTag 36h11" + (f" id {args.tag_id}" if args.tag_id is not None else "")
        print(f"teleop jog: warning: no {wanted} was seen in any of the {summary['frames']} frames (check "
              "--tag-id, the tag family, lighting and focus; --make-test-video OUT writes a video that works)",
              file=sys.stderr)
        return 1
    if summary["fell"]:
        # Said, not only in the summary's last line: the run stopped early, exit code 1.
        print(f"teleop jog: error: the robot fell at {summary['fell_at_s']:.2f} s (base height "
              f"{summary['base_height_min_m']:.3f} m, from {summary['base_height_start_m']:.3f} m): the run stopped; "
              "goals far out of reach pull the robot over (a smaller --scale keeps them within reach)",
              file=sys.stderr)
        return 1
    return 0


def partial_path(out: Path) -> Path:
    """The temporary file a video for ``out`` is written to before it is renamed to ``out``:
    hidden, in the same folder (so the rename is atomic), with ``out``'s extension."""
    import os

    return out.parent / f".{out.name}.{os.getpid()}.partial{out.suffix}"


def _discard(partial: Path) -> None:
    """Remove a partial video if there is one (on a read-only file system, unlinking even
    a file that was never made fails, which must not hide the error that brought us here)."""
    import contextlib

    with contextlib.suppress(OSError):
        partial.unlink(missing_ok=True)


#: What the tag of a test video needs to be detected in every frame, measured on videos of
#: demo_tag_trajectory at 640x480 (.avi and .mp4, both detectors, --hfov 30-90):
#:
#: * its black square at least MIN_TAG_PX wide: from 22 px on the tag was found in every
#:   frame of a 60 deg video, at 16-20 px up to 7 % of the frames were missed, at 12-14 px
#:   half or more (36h11's 8 cells across get under 2 px each). 24 px = 3 px per cell;
#: * its motion during a frame at most MAX_BLUR_CELLS of its 8 cells: of 2,250 frames,
#:   pupil-apriltags missed none below 1.5 cells, 24 % at 1.5-1.75, nearly all beyond 1.75
#:   (ArUco missed 0.6 % below 1.5 cells, whatever the blur). Motion and cell size scale with the
#:   focal length, so only a larger tag (not another --hfov) helps: at 30 deg the tag moves
#:   up to 6.8 px per frame and needs 36 px, at 60 deg 3.1 px and the 24 px floor holds;
#: * the tag with its white border FRAME_MARGIN_PX inside the frame: the ArUco detector
#:   missed the largest tags whenever their white border came within 10 px of the edge
#:   (with the black square still 55-70 px inside; 11-14 % of the frames), and no frame
#:   from 10.8 px on (its adaptive threshold's window reaches 11 px out).
MIN_TAG_PX = 24.0
MAX_BLUR_CELLS = 1.5
FRAME_MARGIN_PX = 12.0

#: The test video's frame size [px] and rate [frames/s].
TEST_VIDEO_SIZE = (640, 480)
TEST_VIDEO_FPS = 30.0


def _round_up(x: float) -> float:
    """``x`` > 0 rounded up to two significant digits (a size to suggest that passes)."""
    unit = 10.0 ** (math.floor(math.log10(x)) - 1)
    return math.ceil(x / unit - 1e-9) * unit


def _round_down(x: float) -> float:
    """``x`` > 0 rounded down to two significant digits."""
    unit = 10.0 ** (math.floor(math.log10(x)) - 1)
    return math.floor(x / unit + 1e-9) * unit


def check_test_video_options(tag_size_m: float, hfov_deg: float, duration_s: float) -> str | None:
    """Why ``--make-test-video`` with these --tag-size [m], --hfov [deg] and --duration [s]
    would make a video whose tag cannot be detected in every frame, or None. Decided on the
    tag's size, motion and place in pixels in each frame (:class:`TagVideoGeometry`): its
    black square at least :data:`MIN_TAG_PX` wide and moving at most :data:`MAX_BLUR_CELLS`
    of its cells per frame, the tag with its white border :data:`FRAME_MARGIN_PX` inside the
    frame throughout."""
    import numpy as np

    from teleop.jog.render import TAG_CELLS, TagVideoGeometry, default_camera_matrix, demo_tag_trajectory

    w, h = TEST_VIDEO_SIZE
    if int(round(duration_s * TEST_VIDEO_FPS)) < 1:
        return (f"--duration {duration_s:g} s is shorter than one frame at {TEST_VIDEO_FPS:g} frames/s: give "
                f"--duration {_round_up(1 / TEST_VIDEO_FPS):g} or more")
    geometry = TagVideoGeometry(demo_tag_trajectory, duration_s, TEST_VIDEO_FPS,
                                default_camera_matrix(w, h, hfov_deg), TEST_VIDEO_SIZE)
    # The side each frame needs [px]: the floor, or enough cells for that frame's motion.
    needed = np.maximum(MIN_TAG_PX, geometry.motion_px * TAG_CELLS / MAX_BLUR_CELLS)

    def detectable(size_m: float) -> bool:
        return bool(np.all(geometry.side_px(size_m) >= needed))

    def in_frame(size_m: float) -> bool:
        return geometry.leaves_frame_s(size_m, FRAME_MARGIN_PX) is None

    def too_small(size_m: float) -> bool:
        return not detectable(size_m)

    if detectable(tag_size_m) and in_frame(tag_size_m):
        return None
    options = f"--tag-size {tag_size_m:g} m with --hfov {hfov_deg:g} deg"
    # The sizes that work lie between a lower bound (the detectors) and an upper one (the
    # frame): the side in pixels and the tag's extent both grow with its size.
    bracket = _boundary(too_small, tag_size_m)
    if bracket is None:
        return (f"{options}: the tag would be too small to detect at any --tag-size (the detectors need "
                f"{MIN_TAG_PX:g} px across its black square): give a narrower --hfov")
    big_enough = _round_up(bracket[1])              # the smallest detectable size, rounded up
    bracket = _boundary(in_frame, big_enough) if in_frame(big_enough) else None
    small_enough = None if bracket is None else bracket[0]     # the largest that fits
    if small_enough is None or _round_down(small_enough) < big_enough:
        return (f"{options}: the tag going round 0.5 m from the camera would leave the {w}x{h} frame at any "
                f"--tag-size large enough to detect: give a wider --hfov")
    sizes = f"give --tag-size {big_enough:g} to {_round_down(small_enough):g}"
    if not detectable(tag_size_m):
        sides = geometry.side_px(tag_size_m)
        k = int(np.argmax(needed - sides))            # the frame that falls shortest
        if needed[k] > MIN_TAG_PX:
            why = (f"moving {geometry.motion_px[k]:.1f} px during a frame, it needs {needed[k]:.0f} px (motion blur "
                   f"over at most {MAX_BLUR_CELLS:g} of its {TAG_CELLS} cells)")
            other = ""        # the motion grows with the focal length as the tag does
        else:
            why = f"the detectors need {MIN_TAG_PX:g} px"
            other = ", or a narrower --hfov"
        return (f"{options}: the tag's black square would be {sides[k]:.0f} px wide in the {w}x{h} video, too "
                f"small to detect in every frame: {why}; {sizes}{other}")
    return (f"{options}: the tag (with its white border) would not stay {FRAME_MARGIN_PX:g} px inside the {w}x{h} "
            f"video (it leaves at {geometry.leaves_frame_s(tag_size_m, FRAME_MARGIN_PX):.1f} s): {sizes}, or a "
            "wider --hfov")


def _boundary(below, start_m: float, largest_m: float = 100.0) -> tuple[float, float] | None:
    """(last size for which ``below(size)`` is True, first for which it is False) [m], 1e-12
    of the search range apart (bisection: ``below`` is True for sizes under a boundary and
    False above it, and True at ``start_m`` or at 0); None if it is True up to ``largest_m``."""
    low, high = 0.0, max(start_m, 1e-3)
    while below(high):
        if high >= largest_m:
            return None
        low, high = high, high * 2.0
    for _ in range(40):
        middle = 0.5 * (low + high)
        low, high = (middle, high) if below(middle) else (low, middle)
    return low, high


def _make_test_video(args: argparse.Namespace) -> int:
    """``teleop jog --make-test-video OUT``: the tag of :func:`teleop.jog.render.demo_tag_trajectory`,
    filmed by a distortion-free 640x480 camera with ``--hfov`` (what ``teleop jog`` assumes
    without ``--calibration``), 30 frames/s. Option values that would make a video whose tag
    cannot be detected are refused (exit code 2) before anything is written."""
    from teleop.jog.render import default_camera_matrix, demo_tag_trajectory, write_tag_video
    from teleop.progress import progress_bar

    out, duration, fps = args.make_test_video, args.duration or 10.0, TEST_VIDEO_FPS
    if out.is_dir():
        raise UsageError(f"--make-test-video {out} is a folder: give the video file to write, "
                           f"e.g. {out / 'tag.mp4'}")
    if out.suffix.lower() not in (".mp4", ".avi"):
        raise UsageError(f"--make-test-video {out}: give a .mp4 or .avi file name")
    if out.exists() and not args.force:
        # What is on disk, not a malformed value: 1, as calibrate-sim's --make-test-recording.
        raise SystemExit(f"teleop jog: error: --make-test-video {out} exists: pass --force to overwrite it, "
                         "or choose another file")
    problem = check_test_video_options(args.tag_size, args.hfov, duration)
    if problem:
        raise UsageError(problem)
    tag_id = args.tag_id or 0   # (--tag-id is checked by argparse)
    out.parent.mkdir(parents=True, exist_ok=True)
    if not args.json:
        print(f"rendering {int(round(duration * fps))} frames to {out}", file=sys.stderr, flush=True)
    # Written to a temporary file beside OUT (same extension: OpenCV picks the container by
    # it) and renamed into place when complete: an interrupted or failed run leaves the
    # previous OUT (or none), not a truncated video.
    partial = partial_path(out)
    try:
        # Made first: OpenCV says only that it cannot write (a read-only or full disk
        # would be blamed on the container), the file system says why.
        partial.touch()
        with progress_bar(desc="rendering", total=int(round(duration * fps)), enabled=not args.json) as bar:
            frames = write_tag_video(partial, demo_tag_trajectory, duration, fps, tag_size_m=args.tag_size,
                                     K=default_camera_matrix(*TEST_VIDEO_SIZE, args.hfov),
                                     image_size=TEST_VIDEO_SIZE, tag_id=tag_id, on_frame=bar.update)
        partial.replace(out)
    except RuntimeError as exc:   # OpenCV has no writer for this container
        _discard(partial)
        message = str(exc).replace(str(partial), str(out))   # name the file the user gave
        raise SystemExit(f"teleop jog: error: {message} (try .avi: MJPG, which every OpenCV build writes)") from None
    except OSError as exc:        # a read-only or full file system: name OUT, not the temporary file
        _discard(partial)
        raise SystemExit(f"teleop jog: error: --make-test-video {out}: cannot write it "
                         f"({exc.strerror or exc})") from None
    except BaseException:         # Ctrl-C, SIGTERM, a full disk
        _discard(partial)
        raise
    command = f"teleop jog --camera {out}" + (f" --tag-size {args.tag_size:g}" if args.tag_size != 0.08 else "") \
        + (f" --hfov {args.hfov:g}" if args.hfov != 60.0 else "")
    if args.json:
        print(json.dumps({"video": str(out), "frames": frames, "fps": fps, "duration_s": duration,
                          "image_size": [640, 480], "tag_id": tag_id, "tag_size_m": args.tag_size,
                          "hfov_deg": args.hfov, "try": command}))
        return 0
    print(f"written: {out} ({frames} frames, {duration:g} s at {fps:g} frames/s, 640x480; AprilTag 36h11 id "
          f"{tag_id}, {args.tag_size * 100:g} cm, going round an upright ellipse 8 cm tall and 4 cm deep 0.5 m in "
          f"front of a {args.hfov:g} deg camera)")
    print(f"try it: {command}")
    return 0


#: Seconds without a camera frame after which `teleop jog` says the camera stalled.
CAMERA_STALL_S = 2.0


def followed_tag(detections: list, followed_id: int | None) -> tuple:
    """(the detection of the tag followed or None, its id): the tag ``followed_id``, or the
    first one seen when no tag is followed yet. The detectors list several tags in no fixed
    order, so taking the first in each frame made the hand jump between tags."""
    if followed_id is None and detections:
        followed_id = detections[0].tag_id
    return next((d for d in detections if d.tag_id == followed_id), None), followed_id


class JogRun:
    """One ``teleop jog`` session: detector, jogging controller, simulated robot, viewer."""

    def __init__(self, args, mapping, explicit_offset: bool, calibration, detector, clutch_mode: str) -> None:
        from teleop.jog.session import JogController, JogSettings, SimulatedRobot
        from teleop.robot.model import RobotModel

        self.args = args
        self.calibration = calibration
        self.detector = detector
        self.explicit_offset = explicit_offset
        self.robot = RobotModel()
        self.settings = JogSettings(hand=args.hand, mode=args.mode, damping=args.damping, mapping=mapping,
                                    orientation=not args.no_orientation,
                                    collision_checks=not args.no_collision_checks)
        self.jog = JogController(self.robot, self.settings)
        self.sim = SimulatedRobot(self.robot, self.jog.q, control_dt=self.settings.control_dt)
        self.base_height0 = float(self.sim.sim.state().q[2])
        self.clutch = clutch_mode == "held"
        self.clutch_mode = clutch_mode
        self.clutch_toggled = False     # ever engaged with Enter (--clutch enter)
        self.view = None
        if args.view == "web":
            from teleop.jog.web import JogWebView

            try:
                self.view = JogWebView(self.robot, port=args.port).start()
            except OSError as exc:   # name the option, as `teleop operator` does
                raise OSError(f"--port {args.port}: {exc.strerror or exc}") from None
            print(f"jog viewer: {self.view.url}", file=sys.stderr)
        self.frames = 0
        self.detected = 0
        self.followed_id: int | None = args.tag_id    # the tag the hand follows (see _accept)
        self.detect_ms: list[float] = []
        self.aligned = explicit_offset or args.mode == "relative"
        self.hand_start = self.jog.hand_pose(self.jog.q).position.copy()
        self.sim_hand_start = self.sim.hand_position(args.hand).copy()
        self.min_base_height = self.base_height0
        self.fell = False
        self.fell_at: float | None = None     # control time of the fall [s]
        self.goal_start: np.ndarray | None = None
        self.last_report: TickReport | None = None
        self.sim_time = 0.0
        self.goal_ticks = 0              # control ticks with a hand goal
        self.orientation_ticks = 0       # ... whose goal orientation was the tag's
        self.hand_to_goal_max = 0.0      # [m], committed hand to goal after each tick's step
        self.reach_warned = False

    # -------------------------------------------------------------- per frame
    def measure_frame(self, t_frame: float, image) -> list:
        """Detect in one (H, W, 3) BGR frame taken at ``t_frame`` [s]; queue the measurement."""
        started = time.perf_counter()
        detections = self.detector.detect(image)
        self._accept(t_frame, detections, (time.perf_counter() - started) * 1e3)
        return detections

    def _accept(self, t_frame: float, detections: list, took_ms: float) -> None:
        """A frame's detections become a measurement for the controller: of the tag being
        followed (the first one seen, unless --tag-id chose it), never of another tag in view:
        the detectors list several tags in no fixed order, and the hand would jump between them."""
        self.detect_ms.append(took_ms)
        self.frames += 1
        d, self.followed_id = followed_tag(detections, self.followed_id)
        if d is not None:
            self.detected += 1
            if not self.aligned:
                # Absolute mode without --offset: the tag's pose when first seen means the
                # hand's pose now (no jump at start-up).
                self.jog.align_absolute(d.t)
                self.settings.mapping.tag_reference = d.R.copy()
                self.aligned = True
        self.jog.measure(t_frame, None if d is None else d.t, None if d is None else d.R)

    def control_tick(self, t: float) -> None:
        report = self.jog.tick(t, clutch=self.clutch)
        self.sim.send(report.q)
        self.last_report = report
        if report.goal is not None:
            if self.goal_start is None:
                self.goal_start = report.goal.position.copy()
            self.goal_ticks += 1
            self.orientation_ticks += report.orientation_followed
            if report.hand_to_goal_m is not None:   # measured on every tick with a goal
                self.hand_to_goal_max = max(self.hand_to_goal_max, report.hand_to_goal_m)
        if report.status.startswith("out of reach") and not self.reach_warned and report.hand_to_goal_m is not None:
            self._warn_out_of_reach(t, report.hand_to_goal_m)
        z = float(self.sim.sim.state().q[2])
        self.min_base_height = min(self.min_base_height, z)
        if (z < 0.5 * self.base_height0 or self.sim.sim.other_contacts() > 0) and not self.fell:
            self.fell, self.fell_at = True, t

    def _warn_out_of_reach(self, t: float, hand_to_goal_m: float) -> None:
        """Said once, when it first happens (live, the operator can still react); the
        summary counts the ticks."""
        self.reach_warned = True
        if self.args.mode == "relative":
            remedy = "release the clutch, bring the tag back and engage it again"
        elif self.explicit_offset:   # the goal is where --offset and --scale put it
            remedy = "check --offset and --scale"
        else:
            remedy = "move the tag back towards where it was first seen"
        short = f"{hand_to_goal_m:.1f} m" if hand_to_goal_m >= 1.0 else f"{hand_to_goal_m * 1e3:.0f} mm"
        print(f"teleop jog: warning: at {t:.2f} s the hand's goal went out of the arm's reach: the hand stays "
              f"{short} short of it (more than {self.settings.reach_tolerance_m * 1e3:g} mm is 'out of reach' in "
              f"the summary's statuses); {remedy}", file=sys.stderr)

    def publish(self, image, detections) -> None:
        if self.view is None:
            return
        from teleop.jog.detection import draw_detections

        drawn = None if image is None else draw_detections(image, detections, self.calibration, 0.5 * self.args.tag_size)
        r = self.last_report
        stats = {"frames": self.frames, "detected": self.detected, "mode": self.args.mode,
                 "clutch": self.clutch, "status": r.status if r else "starting",
                 "detect_ms": self.detect_ms[-1] if self.detect_ms else None,
                 "orientation_valid": bool(r and r.filtered and r.filtered.orientation_valid),
                 "orientation_followed": bool(r and r.orientation_followed)}
        self.view.publish(drawn, self.sim.sim.state().q, self.jog.q, stats)

    # -------------------------------------------------------------- loops
    def run(self, camera, first, realtime: bool) -> dict:
        started = time.monotonic()
        if self.clutch_mode == "enter" and self.args.mode == "relative":
            print("relative mode: press Enter to engage / release the clutch", file=sys.stderr)
            threading.Thread(target=self._read_enter, daemon=True, name="jog-clutch").start()
        try:
            if realtime:
                t_end = self._run_realtime(camera, first)
            else:
                t_end = self._run_virtual(camera, first)
        except KeyboardInterrupt:
            stop_handled()
            # Stopped: a file played on the virtual clock got as far as the simulation did
            # (the wall time was reported as its "virtual time" before).
            t_end = time.monotonic() - started if realtime else self.sim_time
        return self.summary(t_end, time.monotonic() - started, realtime)

    def _read_enter(self) -> None:
        for _ in sys.stdin:
            self.clutch = not self.clutch
            self.clutch_toggled = True
            print(f"clutch {'engaged' if self.clutch else 'released'}", file=sys.stderr)
        # Standard input ended (not a terminal: </dev/null, a finished pipe): nothing can
        # toggle the clutch any more, which the run otherwise never said.
        print(f"teleop jog: warning: standard input ended: the clutch stays {'engaged' if self.clutch else 'released'} "
              "(--clutch held engages it for the whole run)", file=sys.stderr)

    def _run_virtual(self, camera, first) -> float:
        """Every frame of the file, frame k at t = k / fps; control ticks in between."""
        fps = camera.fps if camera.fps and camera.fps > 0 else 30.0
        dt = self.settings.control_dt
        duration = self.args.duration
        k, tick, item = 0, 0, first
        while item is not None:
            raise_if_stop_lost()
            t_frame = k / fps
            if duration is not None and t_frame >= duration:
                break
            detections = self.measure_frame(t_frame, item[1])
            while tick * dt < (k + 1) / fps and (duration is None or tick * dt < duration):
                self.control_tick(tick * dt)
                tick += 1
                self.sim_time += dt
            if self.fell:
                break
            self.publish(item[1], detections)
            k += 1
            item = camera.read()
        camera.close()
        return tick * dt

    def _run_realtime(self, camera, first) -> float:
        """Wall-clock loop: camera thread -> detection thread -> 100 Hz control loop."""
        from teleop.jog.camera import LatestFrameGrabber

        # Control and measurement times are both wall-clock times since t0, so the filter's
        # ages and the velocity extrapolation are right even when the simulation (about
        # 10 ms of pybullet per 10 ms control period on this iCub) cannot keep up: the
        # robot then lags, which the summary's real-time factor reports.
        t0 = time.monotonic()
        grabber = LatestFrameGrabber(camera).start()
        measurements: queue.Queue = queue.Queue()
        stop = threading.Event()

        def detect_loop() -> None:
            # (``first``, read while the robot was being loaded, is stale: not used.)
            last = 0
            while not stop.is_set():
                latest = grabber.latest()
                if latest is None or latest[0] == last:
                    if grabber.finished or grabber.error is not None:
                        measurements.put(None)
                        return
                    time.sleep(0.001)
                    continue
                number, t_frame, image = latest
                last = number
                measurements.put((t_frame - t0, image))

        # Detecting in the control thread would stall the 100 Hz loop for a whole detection
        # (~10 ms); a worker thread does it instead (OpenCV and the AprilTag C library
        # release the GIL while they work).
        detected: queue.Queue = queue.Queue()

        def detection_worker() -> None:
            while not stop.is_set():
                try:
                    item = measurements.get(timeout=0.1)
                except queue.Empty:  # look at ``stop`` again
                    continue
                if item is None:
                    detected.put(None)
                    return
                t_frame, image = item
                # Only the newest frame matters: skip frames that queued up meanwhile.
                while not measurements.empty():
                    newer = measurements.get()
                    if newer is None:
                        detected.put(None)
                        return
                    t_frame, image = newer
                started = time.perf_counter()
                try:
                    detections = self.detector.detect(image)
                except Exception as exc:  # noqa: BLE001 - handed to the control loop, which stops on it
                    # A dead worker would leave the loop holding the target forever and
                    # blaming the camera ("no frame for 2 s"): say what failed instead.
                    detected.put(exc)
                    return
                detected.put((t_frame, image, detections, (time.perf_counter() - started) * 1e3))

        threads = [threading.Thread(target=detect_loop, daemon=True, name="jog-frames"),
                   threading.Thread(target=detection_worker, daemon=True, name="jog-detect")]
        for thread in threads:
            thread.start()
        dt = self.settings.control_dt
        tick = 0
        finished = False
        t = 0.0
        last_frame_t, stalled = 0.0, False
        try:
            while not finished and not self.fell:
                raise_if_stop_lost()
                t = time.monotonic() - t0
                if self.args.duration is not None and t >= self.args.duration:
                    break
                if grabber.error is not None:
                    raise SystemExit(f"teleop jog: error: {grabber.error}")
                while True:
                    try:
                        item = detected.get_nowait()
                    except queue.Empty:
                        break
                    if item is None:
                        finished = True
                        break
                    if isinstance(item, Exception):
                        raise SystemExit(f"teleop jog: error: tag detection failed: {type(item).__name__}: {item}")
                    t_frame, image, detections, took_ms = item
                    self._consume(t_frame, image, detections, took_ms)
                    last_frame_t = t
                # A stream that stops sending raises nothing for OpenCV's 30 s: the target
                # is held meanwhile (the filter's tag-lost rule); say so, and when it resumes.
                if not stalled and t - last_frame_t > CAMERA_STALL_S:
                    stalled = True
                    print(f"teleop jog: the camera has delivered no frame for {CAMERA_STALL_S:g} s: holding the "
                          "hand's target", file=sys.stderr)
                elif stalled and t - last_frame_t <= CAMERA_STALL_S:
                    stalled = False
                    print("teleop jog: the camera delivers frames again", file=sys.stderr)
                self.control_tick(t)
                tick += 1
                self.sim_time += dt
                # Next tick on the next control period boundary (none skipped, none doubled).
                time.sleep(max(0.0, t0 + (math.floor(t / dt) + 1) * dt - time.monotonic()))
        finally:
            stop.set()
            grabber.stop()
        return t

    def _consume(self, t_frame: float, image, detections, took_ms: float) -> None:
        """A detection made in the worker thread enters the controller (control thread)."""
        self._accept(t_frame, detections, took_ms)
        self.publish(image, detections)

    # -------------------------------------------------------------- results
    def summary(self, t_end: float, wall_s: float, realtime: bool) -> dict:
        import numpy as np

        hand = self.jog.hand_pose(self.jog.q).position
        sim_hand = self.sim.hand_position(self.args.hand)
        goal = self.jog.goal.position if self.jog.goal is not None else None
        r = self.last_report

        def mm(v) -> float | None:
            return None if v is None else float(np.linalg.norm(v) * 1e3)

        return {
            "camera": str(self.args.camera), "mode": self.args.mode, "realtime": realtime,
            "detector": self.detector.backend, "duration_s": float(t_end), "wall_s": float(wall_s),
            "simulated_s": float(self.sim_time),
            # Simulated time per wall-clock time of the loop (< 1: the simulation lagged).
            "realtime_factor": float(self.sim_time / t_end) if realtime and t_end > 0 else None,
            "frames": self.frames, "frames_with_tag": self.detected,
            "detect_ms_mean": float(np.mean(self.detect_ms)) if self.detect_ms else None,
            "hand_start": self.hand_start.tolist(), "hand_end": hand.tolist(),
            "sim_hand_start": self.sim_hand_start.tolist(), "sim_hand_end": sim_hand.tolist(),
            "goal_start": None if self.goal_start is None else self.goal_start.tolist(),
            "goal_end": None if goal is None else goal.tolist(),
            "hand_moved_mm": mm(sim_hand - self.sim_hand_start),
            "goal_moved_mm": None if goal is None or self.goal_start is None else mm(goal - self.goal_start),
            "hand_to_goal_mm": None if goal is None else mm(sim_hand - goal),
            # The committed hand's distance to the goal after each tick's step, at most, and
            # how far short of its goal a hand may stay before the tick is "out of reach".
            "hand_to_goal_max_mm": self.hand_to_goal_max * 1e3 if self.goal_ticks else None,
            "reach_tolerance_mm": self.settings.reach_tolerance_m * 1e3,
            "statuses": dict(self.jog.counts), "last_status": r.status if r else None,
            # What the hand did (False throughout with --no-orientation), and the filter's
            # orientation noise gate at the end (open or not, whether or not it was followed).
            "orientation_followed": bool(r and r.orientation_followed),
            "orientation_ticks": self.orientation_ticks, "goal_ticks": self.goal_ticks,
            "orientation_enabled": self.settings.orientation,
            "orientation_valid": bool(r and r.filtered and r.filtered.orientation_valid),
            "base_height_start_m": self.base_height0, "base_height_min_m": self.min_base_height,
            "fell": bool(self.fell), "fell_at_s": self.fell_at,
            "clutch_never_engaged": bool(self.args.mode == "relative" and self.clutch_mode == "enter"
                                         and not self.clutch_toggled and not self.clutch),
        }

    def close(self) -> None:
        if self.view is not None:
            self.view.stop()
        self.jog.close()
        self.sim.close()


def format_summary(s: dict) -> str:
    def f(v, fmt="{:.1f}"):
        return "-" if v is None else fmt.format(v)

    if not s["orientation_enabled"]:
        orientation = "no (--no-orientation)"
    elif not s["goal_ticks"] and s.get("clutch_never_engaged"):
        orientation = "no (the clutch was never engaged)"
    elif not s["goal_ticks"]:
        orientation = "no (no tag seen)"
    elif not s["orientation_ticks"]:
        orientation = "no (the tag's orientation never passed its noise gate)"
    else:
        orientation = f"yes, in {s['orientation_ticks']} of {s['goal_ticks']} control ticks"
    lines = [f"teleop jog: {s['camera']} ({s['mode']}, detector {s['detector']}, "
             f"{'wall-clock' if s['realtime'] else 'virtual'} time {s['duration_s']:.2f} s, {s['wall_s']:.1f} s wall"
             + (f", simulation real-time factor {s['realtime_factor']:.2f}" if s['realtime_factor'] else "") + ")",
             f"frames {s['frames']}, tag seen in {s['frames_with_tag']}, detection {f(s['detect_ms_mean'], '{:.1f}')} ms/frame",
             f"goal moved {f(s['goal_moved_mm'])} mm, simulated hand moved {f(s['hand_moved_mm'])} mm, "
             f"hand-to-goal at the end {f(s['hand_to_goal_mm'])} mm (commanded hand: at most "
             f"{f(s['hand_to_goal_max_mm'])} mm; out of reach beyond {s['reach_tolerance_mm']:g} mm)",
             f"statuses {', '.join(f'{name} {n}' for name, n in s['statuses'].items())}; "
             f"orientation followed: {orientation}",
             f"robot {'FELL' if s['fell'] else 'kept its balance'} (base height {s['base_height_start_m']:.3f} m, "
             f"min {s['base_height_min_m']:.3f} m)"]
    return "\n".join(lines)
