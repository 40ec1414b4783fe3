"""AprilTag 36h11 detection and 6-DoF pose (reference Part B, §B.6: "a regular camera
pointing towards the user estimates the tag's 6-DoF pose from a 2D image").

Two detector back-ends with one interface, :meth:`TagDetector.detect`:

* :class:`ArucoTagDetector`: OpenCV's ``cv2.aruco.ArucoDetector`` with the
  ``DICT_APRILTAG_36h11`` dictionary (contour-based quads, sub-pixel corner refinement);
* :class:`PupilTagDetector`: ``pupil_apriltags`` (the AprilTag 3 C library).

Both give the four outer corners of the black square, ordered like OpenCV's ArUco
(top-left, top-right, bottom-right, bottom-left of the upright tag); the pose is then
solved the same way for both (``cv2.solvePnP`` with ``SOLVEPNP_IPPE_SQUARE``, which is
exact for a square and reports the planar ambiguity's better solution), so the benchmark
compares the detectors and nothing else. ``teleop bench jog`` measures both; the choice
made in :data:`DEFAULT_BACKEND` is explained there.

Pose convention: ``R`` (3, 3), ``t`` (3,) [m] map tag-frame points into the camera frame
(x right, y down, z forward). Tag frame: origin at the tag centre, x right, y up, z out of
the tag towards the camera (so a tag facing the camera has R = diag(1, -1, -1)).
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

from teleop.jog.camera_intrinsics import CameraCalibration

#: Back-end used by default: ``"auto"`` = pupil-apriltags when it is installed, else OpenCV
#: ArUco. ``teleop bench jog`` on 640x480 rendered frames with motion blur and noise: ArUco
#: ~3 ms/frame with ~1.6 mm RMS tag-position error, pupil-apriltags (quad_decimate 2) ~12
#: ms/frame with ~0.6 mm: both exceed 60 frames/s, so the more accurate one is preferred.
#: pupil-apriltags is an optional dependency, hence the fallback.
DEFAULT_BACKEND = "auto"

#: Smallest frame side [px] searched for tags. A 36h11 tag is 10 cells across (8 of code,
#: a black border each side) and needs a pixel per cell at the very least, so a smaller
#: frame holds no detectable tag; pupil-apriltags also crashes (segfault) on frames under
#: 5 px high instead of finding nothing.
MIN_FRAME_SIDE_PX = 16


def pupil_available() -> bool:
    """True if the optional pupil-apriltags package can be imported."""
    try:
        import pupil_apriltags  # noqa: F401
    except ImportError:
        return False
    return True


def tag_object_points(size_m: float) -> np.ndarray:
    """(4, 3) corners of a tag's black square in the tag frame [m], in ArUco order
    (top-left, top-right, bottom-right, bottom-left), as ``SOLVEPNP_IPPE_SQUARE`` wants them."""
    h = 0.5 * size_m
    return np.array([[-h, h, 0.0], [h, h, 0.0], [h, -h, 0.0], [-h, -h, 0.0]])


@dataclass
class TagDetection:
    """One detected tag.

    Attributes:
        tag_id: the tag's id in the 36h11 family.
        corners: (4, 2) image corners [px], ArUco order.
        R: (3, 3) tag orientation in the camera frame; t: (3,) tag centre [m].
        reprojection_px: RMS reprojection error of the pose [px].
    """

    tag_id: int
    corners: np.ndarray
    R: np.ndarray
    t: np.ndarray
    reprojection_px: float


class TagDetector:
    """Base: corners from a back-end, pose from IPPE_SQUARE.

    Args:
        calibration: the camera's intrinsics (K, distortion).
        tag_size_m: side of the tag's black square [m].
        tag_ids: ids to accept (None: any).
    """

    backend = "base"

    def __init__(self, calibration: CameraCalibration, tag_size_m: float, tag_ids: set[int] | None = None) -> None:
        if not tag_size_m > 0:
            raise ValueError("tag size must be > 0 m")
        self.calibration = calibration
        self.tag_size_m = float(tag_size_m)
        self.tag_ids = tag_ids
        self._object_points = tag_object_points(self.tag_size_m)
        #: Tags (of the ids accepted) found in the last frame whose pose could not be solved
        #: (``cv2.solvePnP`` failed: a --tag-size, --hfov or calibration far off); they were
        #: dropped in silence, and a session of them ended "no AprilTag was seen".
        self.last_unposed = 0
        #: The same, over every frame.
        self.unposed = 0

    def corners(self, grey: np.ndarray) -> list[tuple[int, np.ndarray]]:
        """[(tag id, (4, 2) corners [px])] of the tags in a (H, W) uint8 image."""
        raise NotImplementedError

    def detect(self, image: np.ndarray) -> list[TagDetection]:
        """Detect tags in a grey (H, W) or BGR (H, W, 3) uint8 image and solve their poses
        (none in a frame with a side under :data:`MIN_FRAME_SIDE_PX`)."""
        if min(image.shape[:2]) < MIN_FRAME_SIDE_PX:
            self.last_unposed = 0
            return []
        grey = image if image.ndim == 2 else cv2.cvtColor(image, cv2.COLOR_BGR2GRAY)
        out = []
        unposed = 0
        for tag_id, corners in self.corners(grey):
            if self.tag_ids is not None and tag_id not in self.tag_ids:
                continue
            pose = self.solve_pose(corners)
            if pose is not None:
                out.append(TagDetection(tag_id, corners, *pose))
            else:
                unposed += 1
        self.last_unposed = unposed
        self.unposed += unposed
        return out

    def solve_pose(self, corners: np.ndarray) -> tuple[np.ndarray, np.ndarray, float] | None:
        """(R, t, RMS reprojection error [px]) of a tag from its (4, 2) corners."""
        K, dist = self.calibration.K, self.calibration.dist
        image_points = np.ascontiguousarray(corners, dtype=np.float64).reshape(4, 1, 2)
        ok, rvec, tvec = cv2.solvePnP(self._object_points, image_points, K, dist, flags=cv2.SOLVEPNP_IPPE_SQUARE)
        if not ok or not (np.all(np.isfinite(rvec)) and np.all(np.isfinite(tvec))):
            return None
        projected, _ = cv2.projectPoints(self._object_points, rvec, tvec, K, dist)
        error = float(np.sqrt(np.mean(np.sum((projected.reshape(4, 2) - corners) ** 2, axis=1))))
        return cv2.Rodrigues(rvec)[0], tvec.reshape(3), error


class ArucoTagDetector(TagDetector):
    """OpenCV ArUco detector on the AprilTag 36h11 dictionary, sub-pixel corners."""

    backend = "aruco"

    def __init__(self, calibration: CameraCalibration, tag_size_m: float, tag_ids: set[int] | None = None,
                 refine: str = "subpix") -> None:
        super().__init__(calibration, tag_size_m, tag_ids)
        params = cv2.aruco.DetectorParameters()
        # Sub-pixel refinement of the corners: the pose error is dominated by corner noise.
        # (CORNER_REFINE_APRILTAG is the AprilTag library's edge refinement; much slower here.)
        params.cornerRefinementMethod = {"none": cv2.aruco.CORNER_REFINE_NONE,
                                         "subpix": cv2.aruco.CORNER_REFINE_SUBPIX,
                                         "apriltag": cv2.aruco.CORNER_REFINE_APRILTAG}[refine]
        dictionary = cv2.aruco.getPredefinedDictionary(cv2.aruco.DICT_APRILTAG_36h11)
        self._detector = cv2.aruco.ArucoDetector(dictionary, params)

    def corners(self, grey: np.ndarray) -> list[tuple[int, np.ndarray]]:
        corners, ids, _ = self._detector.detectMarkers(grey)
        if ids is None:
            return []
        return [(int(i), c.reshape(4, 2).astype(np.float64)) for i, c in zip(ids.ravel(), corners)]


def _safe_pupil_detector_class():
    """``pupil_apriltags.Detector`` with a destructor that frees in the right order.

    pupil-apriltags 1.0.4's ``Detector.__del__`` destroys the tag families first and the
    detector second, but ``apriltag_detector_destroy`` still reads the families (it clears
    their decode tables): a use-after-free that crashed the interpreter intermittently
    (segfault when a second ``teleop jog`` ran in the same process). Detector first here.
    """
    from pupil_apriltags import Detector

    class SafeDetector(Detector):
        def __del__(self) -> None:
            pointer = getattr(self, "tag_detector_ptr", None)
            if pointer is None:
                return
            self.tag_detector_ptr = None
            self.libc.apriltag_detector_destroy.restype = None
            self.libc.apriltag_detector_destroy(pointer)
            for family, handle in self.tag_families.items():
                destroy = getattr(self.libc, f"{family}_destroy")
                destroy.restype = None
                destroy(handle)
            self.tag_families: dict = {}

    return SafeDetector


class PupilTagDetector(TagDetector):
    """``pupil_apriltags`` (AprilTag 3) detector, family tag36h11."""

    backend = "pupil"

    def __init__(self, calibration: CameraCalibration, tag_size_m: float, tag_ids: set[int] | None = None,
                 quad_decimate: float = 2.0, threads: int = 1) -> None:
        super().__init__(calibration, tag_size_m, tag_ids)
        try:
            Detector = _safe_pupil_detector_class()
        except ImportError as exc:  # optional back-end
            raise RuntimeError("the 'pupil' back-end needs pupil-apriltags (pip install pupil-apriltags)") from exc
        # quad_decimate 2: quads are searched on a half-resolution image (4x faster: ~12 ms
        # instead of ~50 ms per 640x480 frame, measured by ``teleop bench jog``), and
        # refine_edges then fits the edges on the full-resolution image, so the corners stay
        # sub-pixel accurate (pose error unchanged in the bench: 0.56 vs 0.61 mm).
        self._detector = Detector(families="tag36h11", nthreads=threads, quad_decimate=quad_decimate,
                                  refine_edges=1, decode_sharpening=0.25)

    def corners(self, grey: np.ndarray) -> list[tuple[int, np.ndarray]]:
        out = []
        for d in self._detector.detect(np.ascontiguousarray(grey)):
            # pupil_apriltags lists the corners counter-clockwise *in the image* (tr, tl,
            # bl, br of the upright tag; checked on rendered tags); ArUco order is
            # clockwise (tl, tr, br, bl).
            c = np.asarray(d.corners, dtype=np.float64)
            out.append((int(d.tag_id), c[[1, 0, 3, 2]]))
        return out


BACKENDS = {"aruco": ArucoTagDetector, "pupil": PupilTagDetector}


def make_detector(backend: str, calibration: CameraCalibration, tag_size_m: float,
                  tag_ids: set[int] | None = None) -> TagDetector:
    """A detector by back-end name (``"aruco"``, ``"pupil"`` or ``"auto"``, see :data:`DEFAULT_BACKEND`)."""
    if backend == "auto":
        backend = "pupil" if pupil_available() else "aruco"
    try:
        cls = BACKENDS[backend]
    except KeyError:
        raise ValueError(f"unknown detector back-end {backend!r} (choose from {sorted(BACKENDS)})") from None
    return cls(calibration, tag_size_m, tag_ids)


def draw_detections(image: np.ndarray, detections: list[TagDetection], calibration: CameraCalibration,
                    axis_length_m: float) -> np.ndarray:
    """BGR copy of ``image`` with each tag's outline, id and pose axes drawn."""
    out = cv2.cvtColor(image, cv2.COLOR_GRAY2BGR) if image.ndim == 2 else image.copy()
    for d in detections:
        cv2.polylines(out, [np.round(d.corners).astype(np.int32)], True, (0, 255, 0), 2)
        cv2.putText(out, str(d.tag_id), tuple(np.round(d.corners[0]).astype(int)), cv2.FONT_HERSHEY_SIMPLEX,
                    0.6, (0, 255, 255), 2)
        cv2.drawFrameAxes(out, calibration.K, calibration.dist, cv2.Rodrigues(d.R)[0], d.t, axis_length_m, 2)
    return out
