"""Camera intrinsics: the calibration file, and calibration from chessboard or ChArUco images.

File format (JSON, written by ``teleop calibrate-camera``)::

    {"image_size": [640, 480], "camera_matrix": [[fx, 0, cx], [0, fy, cy], [0, 0, 1]],
     "dist_coeffs": [k1, k2, p1, p2, k3], "rms_px": 0.21, "source": "..."}

OpenCV's own YAML/XML files (``camera_matrix`` and ``distortion_coefficients`` nodes, as
written by OpenCV's calibration sample) are read too.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import cv2
import numpy as np

from retarget.file_checks import refuse_special_file
from teleop import json_input
from teleop.native_stderr import native_stderr_silenced
from teleop.output_set import is_hidden, write_outputs_together


class CalibrationError(ValueError):
    """A calibration file that cannot be read, or images that do not calibrate."""


#: Limits of a plausible calibration (:meth:`CameraCalibration.problems`). A correct
#: calibration is far inside them: the rendered boards of tests/test_jog_calibration.py give
#: an RMS error of 0.05-0.25 px, fx/fy within 0.1 % of 1, the principal point within 3 px of
#: the centre and boards tilted by 20-30 degrees.
MAX_RMS_PX = 1.0             # corners found poorly: blurred, or a wrong board mistaken for one
MAX_ASPECT = 1.2             # fx/fy (or fy/fx): pixels are square on nearly every camera
MAX_CENTRE_OFFSET = 0.25     # principal point's distance from the centre, as a fraction of width/height
MIN_HFOV_DEG = 1.0           # horizontal field of view from fx: a telescope's is wider (fx = 1e12 px: 0)
MIN_TILT_DEG = 10.0          # face-on boards only: the focal length cannot be told from the distance
#: Fraction of the image's half-diagonal (centre to corner) the farthest board corner must
#: reach: the distortion beyond is extrapolated, and a fit to boards near the centre only
#: (a quarter of the way out, k3 in the hundreds) crushes or folds the image's outer part.
#: The centred boards of tests/test_calibrate_camera_checks.py reach 0.25-0.3, its boards
#: spread over the image 0.65-0.8 (their distortion then right within 8 px at the corners).
MIN_IMAGE_REACH = 0.5


@dataclass
class CameraCalibration:
    """Pinhole intrinsics with distortion.

    Attributes:
        K: (3, 3) camera matrix [px]. dist: (k,) OpenCV distortion coefficients.
        image_size: (width, height) [px] the calibration is valid for.
        rms_px: RMS reprojection error of the calibration [px] (NaN if unknown).
    """

    K: np.ndarray
    dist: np.ndarray = field(default_factory=lambda: np.zeros(5))
    image_size: tuple[int, int] = (640, 480)
    rms_px: float = float("nan")
    source: str = ""
    #: From the calibration (not saved): the steepest board tilt [deg] (``max_tilt_deg``), the
    #: largest normalised image radius the board corners covered (``max_radius``), and the
    #: farthest detected corner's distance from the image centre as a fraction of the
    #: half-diagonal (``image_reach``).
    coverage: dict = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def pinhole(cls, width: int = 640, height: int = 480, hfov_deg: float = 60.0) -> "CameraCalibration":
        """A distortion-free guess from the field of view (for an uncalibrated webcam)."""
        f = 0.5 * width / np.tan(np.radians(hfov_deg) / 2)
        K = np.array([[f, 0.0, width / 2 - 0.5], [0.0, f, height / 2 - 0.5], [0.0, 0.0, 1.0]])
        return cls(K, np.zeros(5), (width, height), source=f"pinhole guess, {hfov_deg:g} deg horizontal FoV")

    def scaled_to(self, width: int, height: int) -> "CameraCalibration":
        """The same camera at another resolution of the same aspect ratio.

        Raises CalibrationError for another aspect ratio: the camera then crops or
        stretches its sensor in a way the intrinsics cannot say (a 1280x720 calibration
        scaled to 640x480 gives fx 554, fy 739): calibrate at that resolution.
        """
        sx, sy = width / self.image_size[0], height / self.image_size[1]
        if abs(sx / sy - 1.0) > 0.01:
            raise CalibrationError(f"the calibration is for {self.image_size[0]}x{self.image_size[1]}, the frames are "
                                   f"{width}x{height}: another aspect ratio, so the intrinsics cannot be scaled; "
                                   "calibrate the camera at this resolution")
        K = self.K.copy()
        K[0] *= sx
        K[1] *= sy
        return CameraCalibration(K, self.dist.copy(), (width, height), self.rms_px, self.source)

    def problems(self) -> list[str]:
        """Why this calibration looks wrong (empty if it looks plausible): see :data:`MAX_RMS_PX`
        and the other limits. Each item is one sentence naming the value."""
        K, (width, height) = self.K, self.image_size
        fx, fy, cx, cy = K[0, 0], K[1, 1], K[0, 2], K[1, 2]
        found = []
        if self.rms_px > MAX_RMS_PX:
            found.append(f"RMS reprojection error {self.rms_px:.2f} px is above {MAX_RMS_PX:g} px "
                         "(blurred images, or the board mis-detected)")
        if not (fx > 0 and fy > 0) or max(fx / fy, fy / fx) > MAX_ASPECT:
            found.append(f"fx {fx:.1f} and fy {fy:.1f} px differ by more than a factor {MAX_ASPECT:g} "
                         "(pixels are square on nearly every camera)")
        hfov = math.degrees(2 * math.atan(width / (2 * fx))) if fx > 0 else float("nan")
        if hfov < MIN_HFOV_DEG:
            found.append(f"fx {fx:.4g} px gives a horizontal field of view of {hfov:.2g} deg over {width} px, "
                         f"under {MIN_HFOV_DEG:g} deg (a unit or typing mistake?)")
        if abs(cx - width / 2) > MAX_CENTRE_OFFSET * width or abs(cy - height / 2) > MAX_CENTRE_OFFSET * height:
            where = "outside the image" if not (0 <= cx < width and 0 <= cy < height) else "far from its centre"
            found.append(f"principal point ({cx:.0f}, {cy:.0f}) px is {where} ({width}x{height}, centre "
                         f"({width / 2:.0f}, {height / 2:.0f}))")
        radius = self.coverage.get("max_radius") or 0.0
        # The fit only sees where the boards were, but the model is used out to the image's
        # corners: a fold there (pixels without an undistorted point) is as wrong as one inside.
        image_radius = 0.0
        if fx > 0 and fy > 0:
            image_radius = max(math.hypot((u - cx) / fx, (v - cy) / fy)
                               for u in (0, width - 1) for v in (0, height - 1))
        coefficients = ", ".join(f"{d:.3g}" for d in self.dist[:5])
        if radius and not radial_distortion_is_monotonic(self.dist, radius):
            found.append(f"the distortion ({coefficients}) folds the image over inside the area the boards covered")
        elif not radial_distortion_is_monotonic(self.dist, radius, image_radius):
            where = (f"between the area the boards covered (normalised radius {radius:.2f}) and the image corners "
                     f"({image_radius:.2f})" if radius else
                     f"inside the image (its corners at normalised radius {image_radius:.2f})")
            found.append(f"the distortion ({coefficients}) folds the image over {where}: pixels out there have no "
                         "undistorted point")
        reach = self.coverage.get("image_reach")
        if reach is not None and reach < MIN_IMAGE_REACH:
            found.append(f"the board corners reach only {100 * reach:.0f} % of the way from the image centre to its "
                         f"corners (less than {100 * MIN_IMAGE_REACH:.0f} %): the distortion out there is "
                         "extrapolated, not measured; hold the board near the image's edges and corners too")
        tilt = self.coverage.get("max_tilt_deg")
        if tilt is not None and tilt < MIN_TILT_DEG:
            found.append(f"every board faces the camera squarely (steepest tilt {tilt:.1f} deg): the focal "
                         f"length is undetermined; tilt the board by {MIN_TILT_DEG:g}-45 deg in some images")
        return found

    def save(self, path: Path | str) -> None:
        data = {"image_size": list(map(int, self.image_size)), "camera_matrix": self.K.tolist(),
                "dist_coeffs": self.dist.ravel().tolist(), "rms_px": self.rms_px, "source": self.source}
        # Beside the file, then renamed over it: a failed write (a full disk) truncated the
        # calibration it replaced (with --force).
        write_outputs_together({Path(path): lambda tmp: tmp.write_text(json.dumps(data, indent=1))})

    @classmethod
    def load(cls, path: Path | str) -> "CameraCalibration":
        """Read a calibration file (JSON, or OpenCV YAML/XML by its suffix).

        Raises CalibrationError naming the file and what is wrong with it in one line (a
        missing or malformed field, an unparsable file): never a KeyError, a numpy reshape
        error or OpenCV's internal assertion text.
        """
        path = Path(path)
        if path.is_dir():
            raise CalibrationError(f"{path} is a folder, not a calibration file")
        refuse_special_file(path, CalibrationError)   # is_file() is False for one too: "does not exist"
        if not path.is_file():
            raise CalibrationError(f"{path} does not exist")
        try:
            content = path.read_bytes()
        except OSError as exc:
            raise CalibrationError(f"{path}: cannot read it ({exc.strerror or exc})") from None
        if not content.strip():
            raise CalibrationError(f"{path}: the file is empty")
        if path.suffix.lower() in (".yaml", ".yml", ".xml"):
            return cls._load_opencv(path)
        try:
            data = json_input.loads(content)
            if not isinstance(data, dict):
                raise ValueError(f"expected a JSON object, got {_json_kind(data)}")
            for key in ("camera_matrix", "image_size"):
                if key not in data:
                    raise ValueError(f"no {key!r}")
            K = _json_numbers(data["camera_matrix"], "'camera_matrix'", (9,), "3 rows of 3 numbers "
                              "[[fx, 0, cx], [0, fy, cy], [0, 0, 1]]").reshape(3, 3)
            dist = _json_numbers(data.get("dist_coeffs", [0.0] * 5), "'dist_coeffs'", DIST_COEFF_COUNTS,
                                 "a list of 4, 5, 8, 12 or 14 numbers")
            width, height = _json_numbers(data["image_size"], "'image_size'", (2,), "[width, height] in pixels")
            if not (width.is_integer() and height.is_integer()):
                raise ValueError(f"'image_size' must be whole pixels, got {_json_short(data['image_size'])}")
            rms = data.get("rms_px")
            # NaN = unknown: what save() writes for a calibration that was not fitted (pinhole).
            if rms is None or (isinstance(rms, float) and math.isnan(rms)):
                rms = float("nan")
            elif isinstance(rms, bool) or not isinstance(rms, (int, float)):
                raise ValueError(f"'rms_px' must be a number or null, got {_json_short(rms)}")
            else:
                rms = json_input.finite_float(rms, "'rms_px'")
        except ValueError as exc:
            raise CalibrationError(f"{path}: not a calibration file: {exc} ({EXPECTED_JSON})") from None
        return cls._validated(cls(K, dist, (int(width), int(height)), rms, str(path)), path)

    @staticmethod
    def _validated(cal: "CameraCalibration", path: Path, size_name: str = "image_size") -> "CameraCalibration":
        """``cal`` if it is a usable pinhole camera, else :class:`CalibrationError` (a file
        with, e.g., fx = 0 would otherwise fail much later, inside solvePnP). ``size_name``:
        what the file calls the image size (JSON ``image_size``, OpenCV ``image_width``/``image_height``)."""
        K = cal.K
        if not (np.all(np.isfinite(K)) and np.all(np.isfinite(cal.dist))):
            raise CalibrationError(f"{path}: non-finite values in the calibration")
        if not (K[0, 0] > 0 and K[1, 1] > 0 and np.allclose(K[2], [0.0, 0.0, 1.0])):
            raise CalibrationError(f"{path}: camera_matrix must be [[fx, s, cx], [0, fy, cy], [0, 0, 1]] "
                                   "with fx, fy > 0")
        if cal.dist.size not in DIST_COEFF_COUNTS:
            raise CalibrationError(f"{path}: {cal.dist.size} distortion coefficients (OpenCV takes 4, 5, 8, 12 or 14)")
        if len(cal.image_size) != 2 or min(cal.image_size) <= 0 or max(cal.image_size) >= 1 << 31:
            raise CalibrationError(f"{path}: {size_name} must be > 0 (and < 2^31) pixels, got "
                                   f"{cal.image_size[0]}x{cal.image_size[1]}")
        return cal

    @classmethod
    def _load_opencv(cls, path: Path) -> "CameraCalibration":
        fail = functools.partial(_opencv_error, path)
        # OpenCV raises cv2.error for a malformed file and SystemError for some text files
        # it cannot parse at all; either way the file is not one of its calibrations.
        try:
            fs = cv2.FileStorage(str(path), cv2.FILE_STORAGE_READ)
        except (cv2.error, SystemError) as exc:
            raise fail(f"OpenCV cannot parse it{_opencv_parse_error(exc)}") from None
        try:
            if not fs.isOpened() or not fs.root().isMap():
                raise fail("its top level is not a map of named nodes")
            K = _opencv_matrix(fs, "camera_matrix", fail, required=True)
            dist = _opencv_matrix(fs, "distortion_coefficients", fail, required=False)
            width, height = (_opencv_number(fs, name, fail) for name in ("image_width", "image_height"))
        finally:
            fs.release()
        assert K is not None   # required=True raises instead of returning None
        if K.shape != (3, 3):
            raise fail(f"'camera_matrix' is {K.shape[0]}x{K.shape[1]}, not 3x3")
        dist = np.zeros(5) if dist is None else dist.ravel()
        if not (math.isfinite(width) and math.isfinite(height)):
            raise fail(f"image_width/image_height must be finite, got {width}, {height}")
        return cls._validated(cls(K.astype(float), dist.astype(float), (int(width), int(height)), source=str(path)),
                              path, "image_width/image_height")


#: Numbers of distortion coefficients OpenCV's models take.
DIST_COEFF_COUNTS = (4, 5, 8, 12, 14)

#: What a JSON calibration file holds (said when one does not).
EXPECTED_JSON = ('expected {"image_size": [width, height], "camera_matrix": [[fx, 0, cx], [0, fy, cy], [0, 0, 1]], '
                 '"dist_coeffs": [k1, k2, p1, p2, k3]}, as teleop calibrate-camera writes')

#: What an OpenCV calibration file holds (said when one does not).
EXPECTED_OPENCV = ("expected the nodes camera_matrix (3x3 !!opencv-matrix), image_width, image_height and "
                   "optionally distortion_coefficients, as OpenCV's calibration sample writes")


def _json_kind(value) -> str:
    """A JSON value's kind in JSON's words (``list``, not Python's ``list`` type repr)."""
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number")


def _json_short(value) -> str:
    """``value`` as (at most 40 characters of) JSON, for messages."""
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _json_numbers(value, name: str, sizes: tuple[int, ...], expected: str) -> np.ndarray:
    """(n,) float array of a JSON list of numbers, or of a list of equal-length lists of
    numbers (flattened row by row), with n in ``sizes``; ValueError naming ``name`` and
    saying what was ``expected`` otherwise."""
    def wrong() -> ValueError:
        return ValueError(f"{name} must be {expected}, got {_json_short(value)}")

    if not isinstance(value, list):
        raise wrong()
    rows = value if value and all(isinstance(row, list) for row in value) else [value]
    if len({len(row) for row in rows}) != 1:
        raise wrong()
    numbers = [item for row in rows for item in row]
    if len(numbers) not in sizes or any(isinstance(v, (bool, list, dict, str)) or v is None for v in numbers):
        raise wrong()
    return np.array([json_input.finite_float(v, name) for v in numbers])


def _opencv_error(path: Path, reason: str) -> CalibrationError:
    return CalibrationError(f"{path}: not an OpenCV calibration file: {reason} ({EXPECTED_OPENCV})")


def _opencv_parse_error(exc: BaseException) -> str:
    """": line N: <OpenCV's reason>" from a FileStorage parse error, or "" (OpenCV's text is
    mostly its own source file and assertion; only the line and reason help the user)."""
    import re

    text = " ".join(str(e) for e in (exc, exc.__cause__, exc.__context__) if e is not None)
    found = re.search(r"'[^']*\((\d+)\): ([^']+)'", text)
    return f": line {found.group(1)}: {found.group(2).strip()}" if found else ""


def _opencv_matrix(fs, name: str, fail, required: bool) -> np.ndarray | None:
    """The matrix node ``name`` of an open cv2.FileStorage (None if absent and not
    ``required``); ``fail(reason)`` is the error raised otherwise."""
    node = fs.getNode(name)
    if node.empty() or node.isNone():
        if required:
            raise fail(f"no {name!r} node")
        return None
    try:
        matrix = node.mat() if node.isMap() else None
    except (cv2.error, SystemError):
        matrix = None
    if matrix is None:
        raise fail(f"{name!r} is not a matrix (an !!opencv-matrix with rows, cols, dt and data)")
    return matrix


def _opencv_number(fs, name: str, fail) -> float:
    """The number node ``name`` of an open cv2.FileStorage; ``fail(reason)`` is raised if
    it is missing or not a number."""
    node = fs.getNode(name)
    if node.empty() or node.isNone():
        raise fail(f"no {name!r} node")
    if not (node.isInt() or node.isReal()):
        raise fail(f"{name!r} is not a number")
    return node.real()


#: Smallest image side [px] a calibration board is looked for in: OpenCV's chessboard
#: finder fails an assertion on images under 15 px (its threshold window would be < 3 px),
#: and no board of a few squares across can be told apart in fewer pixels.
MIN_BOARD_IMAGE_SIDE_PX = 16


def _read_grey(path: Path) -> np.ndarray:
    refuse_special_file(path, CalibrationError)   # cv2.imread of a named pipe waits for a writer
    with native_stderr_silenced():    # libpng's "libpng error: Read Error": the error below names the file
        image = cv2.imread(str(path), cv2.IMREAD_GRAYSCALE)
    if image is None:
        raise CalibrationError(f"cannot read image {path}")
    if min(image.shape) < MIN_BOARD_IMAGE_SIDE_PX:
        height, width = image.shape
        raise CalibrationError(f"{path}: an image of {width}x{height} px, too small to show a calibration board "
                               f"(at least {MIN_BOARD_IMAGE_SIDE_PX} px a side); remove it from the images given")
    return image


def calibrate_chessboard(images: Iterable[np.ndarray], cols: int, rows: int, square_m: float,
                         min_views: int = 5) -> tuple[CameraCalibration, int]:
    """Calibrate from views of a chessboard with ``cols`` x ``rows`` *inner* corners.

    Returns (calibration, number of views where the board was found). Raises
    :class:`~teleop.cli_types.UsageError` for a board OpenCV's finder does not take (fewer
    than 3 inner corners a side: it said so in an OpenCV assertion).
    """
    from teleop.cli_types import UsageError

    if min(cols, rows) < 3:
        raise UsageError(f"--board {cols}x{rows}: a chessboard needs at least 3x3 inner corners (OpenCV's finder)")
    pattern = (cols, rows)
    objp = None   # made once a board is found: --board 100000x100000 asked for 112 GiB first (a MemoryError traceback)
    object_points, image_points, sizes = [], [], []
    criteria = (cv2.TERM_CRITERIA_EPS + cv2.TERM_CRITERIA_MAX_ITER, 30, 1e-3)
    for grey in images:
        if min(grey.shape) < MIN_BOARD_IMAGE_SIDE_PX:
            continue                    # no board can be found there (and OpenCV would raise)
        found, corners = cv2.findChessboardCorners(grey, pattern, flags=cv2.CALIB_CB_ADAPTIVE_THRESH)
        if not found:
            continue
        corners = cv2.cornerSubPix(grey, corners, (5, 5), (-1, -1), criteria)
        if objp is None:
            objp = np.zeros((cols * rows, 3), np.float32)
            objp[:, :2] = np.mgrid[0:cols, 0:rows].T.reshape(-1, 2) * square_m
        object_points.append(objp)
        image_points.append(corners)
        sizes.append(grey.shape[::-1])
    return _calibrate(object_points, image_points, sizes, min_views, f"chessboard {cols}x{rows}", "chessboard")


def calibrate_charuco(images: Iterable[np.ndarray], squares_x: int, squares_y: int, square_m: float,
                      marker_m: float, dictionary: str = "DICT_4X4_50",
                      min_views: int = 5) -> tuple[CameraCalibration, int]:
    """Calibrate from views of a ChArUco board (``squares_x`` x ``squares_y`` squares).

    Raises :class:`~teleop.cli_types.UsageError` for a board with more markers than
    ``dictionary`` holds."""
    from teleop.cli_types import UsageError

    aruco_dictionary = cv2.aruco.getPredefinedDictionary(getattr(cv2.aruco, dictionary))
    # One marker in every other square, each a different one of the dictionary: a board that
    # needs more cannot exist (OpenCV numbers them past the dictionary's end, and "found in 0
    # images" followed), and a huge one (1000x1000) took OpenCV minutes to lay out.
    markers, available = squares_x * squares_y // 2, len(aruco_dictionary.bytesList)
    if markers > available:
        raise UsageError(f"--board {squares_x}x{squares_y}: a ChArUco board of that many squares holds {markers} "
                         f"markers, and --dictionary {dictionary} has {available}: give the board's own --board and "
                         "--dictionary")
    board = cv2.aruco.CharucoBoard((squares_x, squares_y), square_m, marker_m, aruco_dictionary)
    detector = cv2.aruco.CharucoDetector(board)
    object_points, image_points, sizes = [], [], []
    for grey in images:
        if min(grey.shape) < MIN_BOARD_IMAGE_SIDE_PX:
            continue                    # no board can be found there
        corners, ids, _, _ = detector.detectBoard(grey)
        if ids is None or len(ids) < 6:  # fewer corners constrain the pose poorly
            continue
        # The stubs type detectedCorners as a sequence of arrays, but that form selects the
        # marker-corner path; the ChArUco corners go in as the one (N, 1, 2) array detected.
        obj, img = board.matchImagePoints(corners, ids)  # type: ignore[call-overload]
        object_points.append(obj)
        image_points.append(img)
        sizes.append(grey.shape[::-1])
    return _calibrate(object_points, image_points, sizes, min_views, "ChArUco board", "charuco")


def _calibrate(object_points: list, image_points: list, sizes: list, min_views: int, board: str,
               method: str) -> tuple[CameraCalibration, int]:
    """cv2.calibrateCamera on the views where the board was found (at least ``min_views``;
    ``sizes``: their (width, height) [px], which must agree)."""
    if len(image_points) < min_views:
        raise CalibrationError(f"{board} found in {len(image_points)} images; need {min_views}")
    # The image size is that of the boards' images (not of the last image given, which may
    # be another camera's or resolution's: the file would then claim a size its intrinsics
    # are not for, and teleop jog would rescale them wrongly).
    distinct = sorted(set(map(tuple, sizes)))
    if len(distinct) > 1:
        raise CalibrationError(f"{board} found in images of different sizes "
                               f"({', '.join(f'{w}x{h}' for w, h in distinct)}): "
                               "calibrate one camera at one resolution at a time")
    size = distinct[0]
    no_guess: Any = None  # OpenCV allocates K and dist (OpenCV 4.10's stubs wrongly refuse None)
    rms, K, dist, rvecs, tvecs = cv2.calibrateCamera(object_points, image_points, size, no_guess, no_guess)
    calibration = CameraCalibration(K, dist.ravel(), tuple(size), float(rms), method)
    tilts, radii = [], []
    for obj, rvec, tvec in zip(object_points, rvecs, tvecs):
        R = cv2.Rodrigues(rvec)[0]
        tilts.append(np.degrees(np.arccos(min(1.0, abs(R[2, 2])))))   # board normal vs optical axis
        p = np.asarray(obj, float).reshape(-1, 3) @ R.T + np.asarray(tvec, float).ravel()
        radii.append(np.max(np.hypot(p[:, 0], p[:, 1]) / np.maximum(p[:, 2], 1e-9)))
    # How far out the detected corners reach, in pixels from the image centre over the
    # half-diagonal: the distortion beyond is extrapolated (CameraCalibration.problems).
    corners = np.concatenate([np.asarray(p, float).reshape(-1, 2) for p in image_points])
    reach = np.max(np.hypot(corners[:, 0] - (size[0] - 1) / 2, corners[:, 1] - (size[1] - 1) / 2))
    calibration.coverage = {"max_tilt_deg": float(max(tilts)), "max_radius": float(max(radii)),
                            "image_reach": float(reach / (0.5 * math.hypot(*size)))}
    return calibration, len(image_points)


def radial_distortion_is_monotonic(dist: np.ndarray, max_radius: float, image_radius: float = 0.0) -> bool:
    """Whether OpenCV's radial distortion (k1, k2, k3 and the rational k4-k6) keeps the
    distorted radius r_d = r (1 + k1 r^2 + k2 r^4 + k3 r^6) / (1 + k4 r^2 + k5 r^4 + k6 r^6)
    increasing from the centre out to normalised (undistorted) radius ``max_radius``, and on
    until r_d reaches ``image_radius`` (normalised, distorted: that of the image's farthest
    corner), so that every pixel out to there has one undistorted point. If not, two image
    points map to one (a fit gone wrong, not a lens). Radii are in units of the focal length."""
    d = np.zeros(8)
    d[:min(8, dist.size)] = np.asarray(dist, float).ravel()[:8]
    k1, k2, _, _, k3, k4, k5, k6 = d
    # r_d of a barrel lens lags r: searched out to 3x the image's radius (a lens whose corners
    # come from farther out than that is beyond any webcam's; not called folded here).
    r = np.linspace(0.0, max(max_radius, 3.0 * image_radius), 4000)
    r2 = r * r
    with np.errstate(all="ignore"):      # a rational model's pole shows as a non-finite value
        distorted = r * (1 + r2 * (k1 + r2 * (k2 + r2 * k3))) / (1 + r2 * (k4 + r2 * (k5 + r2 * k6)))
    beyond = np.flatnonzero((r > max_radius) & (distorted >= image_radius))
    distorted = distorted[:beyond[0] + 1] if beyond.size else distorted
    return bool(np.all(np.isfinite(distorted)) and np.all(np.diff(distorted) > 0))


def images_from_paths(paths: Iterable[Path | str], duplicates: list[Path] | None = None) -> list[np.ndarray]:
    """Grey images from files and folders (folders: their :data:`IMAGE_SUFFIXES` files, sorted),
    each distinct image once: a file named twice (``--images boards boards/board_00.png``)
    or a copy of another image is left out (and appended to ``duplicates``, if given). Counted
    as views, copies met ``--min-views`` with fewer boards than it asks for, and five copies
    of one tilted view wrote a calibration 16 % off in fx that passed every plausibility check
    ("board found in 5 of 5 images")."""
    files: list[Path] = []
    empty: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(f for f in p.iterdir() if f.suffix.lower() in IMAGE_SUFFIXES and not is_hidden(f))
            files += found
            if not found:
                empty.append(p)
        else:
            files.append(p)
    if not files:
        looked_for = ", ".join(f"*{suffix}" for suffix in IMAGE_SUFFIXES)
        if not empty:
            raise CalibrationError("no calibration images given")
        others = sorted({f.suffix.lower() for d in empty for f in d.iterdir() if f.is_file() and f.suffix})
        raise CalibrationError(f"{', '.join(map(str, empty))}: {'folder holds' if len(empty) == 1 else 'folders hold'} "
                               f"no images (looked for {looked_for}"
                               + (f"; found only {', '.join(others[:8])} files" if others else "") + ")")
    images: list[np.ndarray] = []
    seen: set[tuple] = set()
    for f in files:
        key: tuple = ("path", f.resolve())
        if key in seen:
            if duplicates is not None:
                duplicates.append(f)
            continue
        seen.add(key)
        image = _read_grey(f)
        content = ("pixels", image.shape, hashlib.sha256(image.tobytes()).digest())
        if content in seen:
            if duplicates is not None:
                duplicates.append(f)
            continue
        seen.add(content)
        images.append(image)
    return images


#: The image files a folder given to :func:`images_from_paths` contributes.
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff")
