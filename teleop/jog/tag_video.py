"""``teleop jog --make-test-video OUT``: a video of a moving AprilTag to try ``teleop jog`` on
without a camera, and the checks that its tag can be detected in every frame.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from teleop.cli_types import PreconditionError, UsageError
from teleop.json_safe import dumps


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


#: Longest test video --make-test-video renders [s].
MAX_TEST_VIDEO_S = 600.0


def check_test_video_options(tag_size_m: float, hfov_deg: float, duration_s: float) -> str | None:
    """Why ``--make-test-video`` with these --tag-size [m], --hfov [deg] and --duration [s]
    would make a video whose tag cannot be detected in every frame, or None. Decided on the
    tag's size, motion and place in pixels in each frame (:class:`TagVideoGeometry`): its
    black square at least :data:`MIN_TAG_PX` wide and moving at most :data:`MAX_BLUR_CELLS`
    of its cells per frame, the tag with its white border :data:`FRAME_MARGIN_PX` inside the
    frame throughout."""
    import numpy as np

    from teleop.jog.render import TAG_CELLS

    w, h = TEST_VIDEO_SIZE
    if duration_s > MAX_TEST_VIDEO_S:
        # 1e6 s was 30 million frames to render: hours of work, and a file of tens of GB.
        return (f"--duration {duration_s:g} s: a test video lasts at most {MAX_TEST_VIDEO_S:g} s "
                "(replay it with --loop for a longer session)")
    if int(round(duration_s * TEST_VIDEO_FPS)) < 1:
        return (f"--duration {duration_s:g} s is shorter than one frame at {TEST_VIDEO_FPS:g} frames/s: give "
                f"--duration {_round_up(1 / TEST_VIDEO_FPS):g} or more")
    window = _TagSizes(hfov_deg, duration_s)
    geometry, needed = window.geometry, window.needed
    detectable, in_frame = window.detectable, window.in_frame
    if detectable(tag_size_m) and in_frame(tag_size_m):
        return None
    options = f"--tag-size {tag_size_m:g} m with --hfov {hfov_deg:g} deg"
    big_enough, small_enough = window.sizes(tag_size_m)
    if big_enough is None:
        return (f"{options}: the tag would be too small to detect at any --tag-size (the detectors need "
                f"{MIN_TAG_PX:g} px across its black square): {_hfov_advice(hfov_deg, duration_s)}")
    if small_enough is None:
        return (f"{options}: the tag going round 0.5 m from the camera would leave the {w}x{h} frame at any "
                f"--tag-size large enough to detect: {_hfov_advice(hfov_deg, duration_s)}")
    sizes = f"give --tag-size {big_enough:g} to {small_enough:g}"
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


class _TagSizes:
    """The test video's tag at one --hfov [deg] and --duration [s]: whether a --tag-size is
    detectable in every frame and stays in the frame, and the sizes that are both."""

    def __init__(self, hfov_deg: float, duration_s: float) -> None:
        import numpy as np

        from teleop.jog.render import TAG_CELLS, TagVideoGeometry, default_camera_matrix, demo_tag_trajectory

        w, h = TEST_VIDEO_SIZE
        self.geometry = TagVideoGeometry(demo_tag_trajectory, duration_s, TEST_VIDEO_FPS,
                                         default_camera_matrix(w, h, hfov_deg), TEST_VIDEO_SIZE)
        # The side each frame needs [px]: the floor, or enough cells for that frame's motion.
        self.needed = np.maximum(MIN_TAG_PX, self.geometry.motion_px * TAG_CELLS / MAX_BLUR_CELLS)

    def detectable(self, size_m: float) -> bool:
        import numpy as np

        return bool(np.all(self.geometry.side_px(size_m) >= self.needed))

    def in_frame(self, size_m: float) -> bool:
        return self.geometry.leaves_frame_s(size_m, FRAME_MARGIN_PX) is None

    def sizes(self, start_m: float = 0.08) -> tuple[float | None, float | None]:
        """(the smallest detectable --tag-size rounded up, the largest that stays in the frame
        rounded down, if not smaller) [m]; (None, None) if no size is detectable, (size, None)
        if none large enough to detect stays in the frame. The sizes that work lie between a
        lower bound (the detectors) and an upper one (the frame): the side in pixels and the
        tag's extent both grow with its size."""
        bracket = _boundary(lambda size: not self.detectable(size), start_m)
        if bracket is None:
            return None, None
        big_enough = _round_up(bracket[1])              # the smallest detectable size, rounded up
        bracket = _boundary(self.in_frame, big_enough) if self.in_frame(big_enough) else None
        if bracket is None or _round_down(bracket[0]) < big_enough:
            return big_enough, None
        return big_enough, _round_down(bracket[0])


def _workable(hfov_deg: float, duration_s: float) -> bool:
    """Whether some --tag-size makes a test video of this --hfov and --duration that works."""
    return _TagSizes(hfov_deg, duration_s).sizes()[1] is not None


def _hfov_advice(hfov_deg: float, duration_s: float) -> str:
    """Which --hfov to give when no --tag-size works with ``hfov_deg``: the nearest one that
    works, towards 60 deg (the default). Too wide a view makes the tag too small to detect
    unless it is so large that it leaves the frame; too narrow a one makes its motion leave
    the frame: "give a wider --hfov" was said at 178 deg, where only a narrower one works."""
    reference = 60.0
    if not _workable(reference, duration_s):
        return "give another --hfov"
    bad, good = hfov_deg, reference
    while abs(good - bad) > 0.5:     # bisection to half a degree (each step ~0.1 s)
        middle = 0.5 * (bad + good)
        bad, good = (bad, middle) if _workable(middle, duration_s) else (middle, good)
    narrower = good < hfov_deg
    suggestion: float = math.floor(good) if narrower else math.ceil(good)
    if not _workable(suggestion, duration_s):
        suggestion = good
    if narrower:
        return f"give a narrower --hfov ({suggestion:g} deg or less; the wider the view, the smaller the tag)"
    return f"give a wider --hfov ({suggestion:g} deg or more; the narrower the view, the further the tag moves)"


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


def make_test_video(args: argparse.Namespace) -> int:
    """``teleop jog --make-test-video OUT``: the tag of :func:`teleop.jog.render.demo_tag_trajectory`,
    filmed by a distortion-free 640x480 camera with ``--hfov`` (what ``teleop jog`` assumes
    without ``--calibration``), 30 frames/s. Option values that would make a video whose tag
    cannot be detected are refused (exit code 2) before anything is written."""
    from teleop.data_args import check_output_location
    from teleop.jog.render import default_camera_matrix, demo_tag_trajectory, write_tag_video
    from teleop.progress import progress_bar

    out, duration, fps = args.make_test_video, args.duration or 10.0, TEST_VIDEO_FPS
    if out.is_dir():   # what is on disk, not a malformed value: exit code 1, as the existing file below
        raise PreconditionError(f"--make-test-video {out} is a folder: give the video file to write, "
                                f"e.g. {out / 'tag.mp4'}")
    if out.suffix.lower() not in (".mp4", ".avi"):
        raise UsageError(f"--make-test-video {out}: give a .mp4 or .avi file name")
    # Below a file (text.txt/x.mp4): said before the check of the values, not as mkdir's
    # "text.txt: File exists" with a TELEOP_DEBUG hint.
    check_output_location(out, "--make-test-video")
    if out.exists() and not args.force:
        raise PreconditionError(f"--make-test-video {out} exists: pass --force to overwrite it, "
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
        print(dumps({"video": str(out), "frames": frames, "fps": fps, "duration_s": duration,
                     "image_size": [640, 480], "tag_id": tag_id, "tag_size_m": args.tag_size,
                     "hfov_deg": args.hfov, "try": command}))
        return 0
    print(f"written: {out} ({frames} frames, {duration:g} s at {fps:g} frames/s, 640x480; AprilTag 36h11 id "
          f"{tag_id}, {args.tag_size * 100:g} cm, going round an upright ellipse 8 cm tall and 4 cm deep 0.5 m in "
          f"front of a {args.hfov:g} deg camera)")
    print(f"try it: {command}")
    return 0
