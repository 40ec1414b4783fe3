"""Camera intrinsics: the calibration file, and calibration from chessboard or ChArUco images.

File format (JSON, written by ``teleop calibrate-camera``)::

    {"image_size": [640, 480], "camera_matrix": [[fx, 0, cx], [0, fy, cy], [0, 0, 1]],
     "dist_coeffs": [k1, k2, p1, p2, k3], "rms_px": 0.21, "source": "..."}

OpenCV's own YAML/XML files (``camera_matrix`` and ``distortion_coefficients`` nodes, as
written by OpenCV's calibration sample) are read too.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import cv2
import numpy as np

from teleop import json_input


class CalibrationError(ValueError):
    """A calibration file that cannot be read, or images that do not calibrate."""


#: Limits of a plausible calibration (:meth:`CameraCalibration.problems`). A correct
#: calibration is far inside them: the rendered boards of tests/test_jog_calibration.py give
#: an RMS error of 0.05-0.25 px, fx/fy within 0.1 % of 1, the principal point within 3 px of
#: the centre and boards tilted by 20-30 degrees.
MAX_RMS_PX = 1.0             # corners found poorly: blurred, or a wrong board mistaken for one
MAX_ASPECT = 1.2             # fx/fy (or fy/fx): pixels are square on nearly every camera
MAX_CENTRE_OFFSET = 0.25     # principal point's distance from the centre, as a fraction of width/height
MIN_TILT_DEG = 10.0          # face-on boards only: the focal length cannot be told from the distance


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
    #: From the calibration (not saved): the steepest board tilt [deg] and the largest
    #: normalised image radius the board corners covered.
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
        if abs(cx - width / 2) > MAX_CENTRE_OFFSET * width or abs(cy - height / 2) > MAX_CENTRE_OFFSET * height:
            where = "outside the image" if not (0 <= cx < width and 0 <= cy < height) else "far from its centre"
            found.append(f"principal point ({cx:.0f}, {cy:.0f}) px is {where} ({width}x{height}, centre "
                         f"({width / 2:.0f}, {height / 2:.0f}))")
        radius = self.coverage.get("max_radius")
        if radius and not radial_distortion_is_monotonic(self.dist, radius):
            found.append(f"the distortion ({', '.join(f'{d:.3g}' for d in self.dist[:5])}) folds the image over "
                         "inside the area the boards covered")
        tilt = self.coverage.get("max_tilt_deg")
        if tilt is not None and tilt < MIN_TILT_DEG:
            found.append(f"every board faces the camera squarely (steepest tilt {tilt:.1f} deg): the focal "
                         f"length is undetermined; tilt the board by {MIN_TILT_DEG:g}-45 deg in some images")
        return found

    def save(self, path: Path | str) -> None:
        data = {"image_size": list(map(int, self.image_size)), "camera_matrix": self.K.tolist(),
                "dist_coeffs": self.dist.ravel().tolist(), "rms_px": self.rms_px, "source": self.source}
        Path(path).write_text(json.dumps(data, indent=1))

    @classmethod
    def load(cls, path: Path | str) -> "CameraCalibration":
        path = Path(path)
        if not path.is_file():
            raise CalibrationError(f"calibration file {path} does not exist")
        if path.suffix.lower() in (".yaml", ".yml", ".xml"):
            return cls._load_opencv(path)
        try:
            data = json_input.loads(path.read_bytes())
            if not isinstance(data, dict):
                raise TypeError(f"expected a JSON object, got {type(data).__name__}")
            K = np.array(data["camera_matrix"], dtype=float).reshape(3, 3)
            dist = np.array(data.get("dist_coeffs", [0.0] * 5), dtype=float).ravel()
            size = tuple(int(v) for v in data["image_size"])
            rms = data.get("rms_px")
            rms = float("nan") if rms is None else float(rms)
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
            raise CalibrationError(f"{path}: not a calibration file ({type(exc).__name__}: {exc})") from None
        return cls._validated(cls(K, dist, size, rms, str(path)), path)

    @staticmethod
    def _validated(cal: "CameraCalibration", path: Path) -> "CameraCalibration":
        """``cal`` if it is a usable pinhole camera, else :class:`CalibrationError` (a file
        with, e.g., fx = 0 would otherwise fail much later, inside solvePnP)."""
        K = cal.K
        if not (np.all(np.isfinite(K)) and np.all(np.isfinite(cal.dist))):
            raise CalibrationError(f"{path}: non-finite values in the calibration")
        if not (K[0, 0] > 0 and K[1, 1] > 0 and np.allclose(K[2], [0.0, 0.0, 1.0])):
            raise CalibrationError(f"{path}: camera_matrix must be [[fx, s, cx], [0, fy, cy], [0, 0, 1]] "
                                   "with fx, fy > 0")
        if cal.dist.size not in (4, 5, 8, 12, 14):
            raise CalibrationError(f"{path}: {cal.dist.size} distortion coefficients (OpenCV takes 4, 5, 8, 12 or 14)")
        if len(cal.image_size) != 2 or min(cal.image_size) <= 0 or max(cal.image_size) >= 1 << 31:
            raise CalibrationError(f"{path}: image_size must be [width, height] > 0 (and < 2^31)")
        return cal

    @classmethod
    def _load_opencv(cls, path: Path) -> "CameraCalibration":
        # OpenCV raises cv2.error for a malformed file and SystemError for some text files
        # it cannot parse at all; either way the file is not one of its calibrations.
        try:
            fs = cv2.FileStorage(str(path), cv2.FILE_STORAGE_READ)
        except (cv2.error, SystemError) as exc:
            raise CalibrationError(f"{path}: not an OpenCV calibration file ({getattr(exc, 'err', exc)})") from None
        try:
            K = fs.getNode("camera_matrix").mat()
            dist = fs.getNode("distortion_coefficients").mat()
            width, height = fs.getNode("image_width").real(), fs.getNode("image_height").real()
        except (cv2.error, SystemError) as exc:   # e.g. a top level that is not a map
            raise CalibrationError(f"{path}: not an OpenCV calibration file ({getattr(exc, 'err', exc)})") from None
        finally:
            fs.release()
        if K is None or K.shape != (3, 3):
            raise CalibrationError(f"{path}: no 3x3 'camera_matrix' node")
        dist = np.zeros(5) if dist is None else dist.ravel()
        if not (math.isfinite(width) and math.isfinite(height)):
            raise CalibrationError(f"{path}: image_width/image_height must be finite, got {width}, {height}")
        return cls._validated(cls(K.astype(float), dist.astype(float), (int(width), int(height)), source=str(path)),
                              path)


def _read_grey(path: Path) -> np.ndarray:
    image = cv2.imread(str(path), cv2.IMREAD_GRAYSCALE)
    if image is None:
        raise CalibrationError(f"cannot read image {path}")
    return image


def calibrate_chessboard(images: Iterable[np.ndarray], cols: int, rows: int, square_m: float,
                         min_views: int = 5) -> tuple[CameraCalibration, int]:
    """Calibrate from views of a chessboard with ``cols`` x ``rows`` *inner* corners.

    Returns (calibration, number of views where the board was found).
    """
    pattern = (cols, rows)
    objp = np.zeros((cols * rows, 3), np.float32)
    objp[:, :2] = np.mgrid[0:cols, 0:rows].T.reshape(-1, 2) * square_m
    object_points, image_points, sizes = [], [], []
    criteria = (cv2.TERM_CRITERIA_EPS + cv2.TERM_CRITERIA_MAX_ITER, 30, 1e-3)
    for grey in images:
        found, corners = cv2.findChessboardCorners(grey, pattern, flags=cv2.CALIB_CB_ADAPTIVE_THRESH)
        if not found:
            continue
        corners = cv2.cornerSubPix(grey, corners, (5, 5), (-1, -1), criteria)
        object_points.append(objp)
        image_points.append(corners)
        sizes.append(grey.shape[::-1])
    return _calibrate(object_points, image_points, sizes, min_views, f"chessboard {cols}x{rows}", "chessboard")


def calibrate_charuco(images: Iterable[np.ndarray], squares_x: int, squares_y: int, square_m: float,
                      marker_m: float, dictionary: str = "DICT_4X4_50",
                      min_views: int = 5) -> tuple[CameraCalibration, int]:
    """Calibrate from views of a ChArUco board (``squares_x`` x ``squares_y`` squares)."""
    board = cv2.aruco.CharucoBoard((squares_x, squares_y), square_m, marker_m,
                                   cv2.aruco.getPredefinedDictionary(getattr(cv2.aruco, dictionary)))
    detector = cv2.aruco.CharucoDetector(board)
    object_points, image_points, sizes = [], [], []
    for grey in images:
        corners, ids, _, _ = detector.detectBoard(grey)
        if ids is None or len(ids) < 6:  # fewer corners constrain the pose poorly
            continue
        obj, img = board.matchImagePoints(corners, ids)
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
        raise CalibrationError(f"{board} found in images of different sizes ({', '.join(f'{w}x{h}' for w, h in distinct)}): "
                               "calibrate one camera at one resolution at a time")
    size = distinct[0]
    rms, K, dist, rvecs, tvecs = cv2.calibrateCamera(object_points, image_points, size, None, None)
    calibration = CameraCalibration(K, dist.ravel(), tuple(size), float(rms), method)
    tilts, radii = [], []
    for obj, rvec, tvec in zip(object_points, rvecs, tvecs):
        R = cv2.Rodrigues(rvec)[0]
        tilts.append(np.degrees(np.arccos(min(1.0, abs(R[2, 2])))))   # board normal vs optical axis
        p = np.asarray(obj, float).reshape(-1, 3) @ R.T + np.asarray(tvec, float).ravel()
        radii.append(np.max(np.hypot(p[:, 0], p[:, 1]) / np.maximum(p[:, 2], 1e-9)))
    calibration.coverage = {"max_tilt_deg": float(max(tilts)), "max_radius": float(max(radii))}
    return calibration, len(image_points)


def radial_distortion_is_monotonic(dist: np.ndarray, max_radius: float) -> bool:
    """Whether OpenCV's radial distortion (k1, k2, k3 and the rational k4-k6) keeps the
    distorted radius increasing from the centre out to normalised radius ``max_radius``:
    if not, two image points map to one (a fit gone wrong, not a lens)."""
    d = np.zeros(8)
    d[:min(8, dist.size)] = np.asarray(dist, float).ravel()[:8]
    k1, k2, _, _, k3, k4, k5, k6 = d
    r = np.linspace(0.0, max_radius, 400)
    r2 = r * r
    distorted = r * (1 + r2 * (k1 + r2 * (k2 + r2 * k3))) / (1 + r2 * (k4 + r2 * (k5 + r2 * k6)))
    return bool(np.all(np.isfinite(distorted)) and np.all(np.diff(distorted) > 0))


def images_from_paths(paths: Iterable[Path | str]) -> list[np.ndarray]:
    """Grey images from files and folders (folders: their :data:`IMAGE_SUFFIXES` files, sorted)."""
    files: list[Path] = []
    empty: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(f for f in p.iterdir() if f.suffix.lower() in IMAGE_SUFFIXES)
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
    return [_read_grey(f) for f in files]


#: The image files a folder given to :func:`images_from_paths` contributes.
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff")
