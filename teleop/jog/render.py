"""Synthetic camera images of planar targets (AprilTags, chessboards) seen by a pinhole camera.

The product renders its own benchmark and test images: a planar texture (e.g. the image of
``cv2.aruco.generateImageMarker``) is placed at a known 6-DoF pose in the camera frame and
warped into the image by the plane-induced homography ``H = K [r1 r2 t] S``, where S maps
texture pixels to metres on the plane. Motion blur is the average of sub-frames rendered
along the motion during the exposure (what a rolling exposure integrates), then Gaussian
sensor noise is added.

Frames: OpenCV camera frame (x right, y down, z forward, metres). A target's own frame has
its origin at the texture centre, x to the texture's right, y to the texture's *top*, z out
of the texture towards the viewer (the frame ``solvePnP`` reports for the tag corners of
:data:`teleop.jog.detection.TAG_OBJECT_POINTS`). Images are (H, W) uint8 grey.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

#: AprilTag 36h11: 6x6 data cells inside a 1-cell black border = 8 cells across the black square.
TAG_CELLS = 8


def tag_texture(tag_id: int = 0, cell_px: int = 16, quiet_cells: int = 2) -> tuple[np.ndarray, float]:
    """Texture of an AprilTag 36h11 with a white quiet zone.

    Returns:
        (image (S, S) uint8, fraction of the texture width taken by the black square).
    """
    dictionary = cv2.aruco.getPredefinedDictionary(cv2.aruco.DICT_APRILTAG_36h11)
    marker = cv2.aruco.generateImageMarker(dictionary, tag_id, TAG_CELLS * cell_px, borderBits=1)
    pad = quiet_cells * cell_px
    texture = cv2.copyMakeBorder(marker, pad, pad, pad, pad, cv2.BORDER_CONSTANT, value=(255,))
    return texture, TAG_CELLS / (TAG_CELLS + 2 * quiet_cells)


def chessboard_texture(cols: int, rows: int, square_px: int = 40, margin_squares: int = 1) -> np.ndarray:
    """(H, W) uint8 chessboard of ``cols`` x ``rows`` squares with a white margin."""
    board = np.kron((np.add.outer(np.arange(rows), np.arange(cols)) % 2) * 255,
                    np.ones((square_px, square_px))).astype(np.uint8)
    pad = margin_squares * square_px
    return cv2.copyMakeBorder(board, pad, pad, pad, pad, cv2.BORDER_CONSTANT, value=(255,))


def rotation_from_rpy(roll: float, pitch: float, yaw: float) -> np.ndarray:
    """(3, 3) rotation R = Rz(yaw) Ry(pitch) Rx(roll) [rad]."""
    return cv2.Rodrigues(np.array([0.0, 0.0, yaw]))[0] @ cv2.Rodrigues(np.array([0.0, pitch, 0.0]))[0] \
        @ cv2.Rodrigues(np.array([roll, 0.0, 0.0]))[0]


#: Rotation of a target facing the camera squarely (its z towards the camera, its y up):
#: target x = camera x, target y = -camera y, target z = -camera z.
FACING_CAMERA = np.diag([1.0, -1.0, -1.0])


@dataclass
class PlanarScene:
    """A planar texture of physical width ``width_m`` in front of a camera.

    Attributes:
        texture: (S, S') uint8 grey texture.
        width_m: physical width of the whole texture [m].
        K: (3, 3) camera matrix [px]; image_size: (width, height) [px].
        background: grey level of the empty scene (a textured background is drawn
            from ``seed`` so the detector sees some clutter).
    """

    texture: np.ndarray
    width_m: float
    K: np.ndarray
    image_size: tuple[int, int] = (640, 480)
    background: int = 110
    seed: int = 0

    def __post_init__(self) -> None:
        w, h = self.image_size
        rng = np.random.default_rng(self.seed)
        # Low-frequency clutter: blurred noise, so the background is not a flat field.
        clutter = cv2.GaussianBlur(rng.normal(0.0, 40.0, (h, w)), (0, 0), 6.0)
        self._background = np.clip(self.background + clutter, 0, 255).astype(np.float32)
        th, tw = self.texture.shape[:2]
        metres_per_px = self.width_m / tw
        # Texture pixel (u, v) -> plane point (x, y) in metres, centred, y up.
        self._S = np.array([[metres_per_px, 0.0, -0.5 * tw * metres_per_px],
                            [0.0, -metres_per_px, 0.5 * th * metres_per_px],
                            [0.0, 0.0, 1.0]])
        self._texture = self.texture.astype(np.float32)
        self._mask = np.ones_like(self._texture)

    def homography(self, R: np.ndarray, t: np.ndarray) -> np.ndarray:
        """(3, 3) homography texture pixels -> image pixels for the target at (R, t)."""
        return self.K @ np.column_stack([R[:, 0], R[:, 1], t]) @ self._S

    def render_sharp(self, R: np.ndarray, t: np.ndarray) -> np.ndarray:
        """(H, W) float32 image of the target at pose (R (3, 3), t (3,) [m]), no blur or noise."""
        size = self.image_size
        t = np.asarray(t, dtype=float)
        # A target (partly) behind the camera: the homography would still map it into the
        # image, mirrored through the centre of projection. Not drawn (not seen) instead.
        th, tw = self.texture.shape[:2]
        corners = self._S @ np.array([[0.0, tw, tw, 0.0], [0.0, 0.0, th, th], [1.0, 1.0, 1.0, 1.0]])
        depth = R[2, 0] * corners[0] + R[2, 1] * corners[1] + t[2]
        if np.min(depth) <= 1e-3:
            return self._background.copy()
        H = self.homography(R, t)
        warped = cv2.warpPerspective(self._texture, H, size, flags=cv2.INTER_LINEAR)
        mask = cv2.warpPerspective(self._mask, H, size, flags=cv2.INTER_LINEAR)
        return warped * mask + self._background * (1.0 - mask)

    def render(self, poses: list[tuple[np.ndarray, np.ndarray]], noise_std: float = 0.0,
               rng: np.random.Generator | None = None) -> np.ndarray:
        """(H, W) uint8 image integrating the target over ``poses`` (the exposure's
        sub-frame poses: several = motion blur) plus Gaussian noise of ``noise_std`` grey levels."""
        image = np.mean([self.render_sharp(R, t) for R, t in poses], axis=0)
        if noise_std > 0:
            rng = rng or np.random.default_rng()
            image = image + rng.normal(0.0, noise_std, image.shape)
        return np.clip(image + 0.5, 0, 255).astype(np.uint8)


def default_camera_matrix(width: int = 640, height: int = 480, hfov_deg: float = 60.0) -> np.ndarray:
    """(3, 3) pinhole K of a webcam-like camera (horizontal field of view ``hfov_deg``)."""
    f = 0.5 * width / np.tan(np.radians(hfov_deg) / 2)
    return np.array([[f, 0.0, width / 2 - 0.5], [0.0, f, height / 2 - 0.5], [0.0, 0.0, 1.0]])


def tag_scene(tag_size_m: float, K: np.ndarray, image_size=(640, 480), tag_id: int = 0, seed: int = 0) -> PlanarScene:
    """Scene of one AprilTag whose black square is ``tag_size_m`` wide."""
    texture, fraction = tag_texture(tag_id)
    return PlanarScene(texture, tag_size_m / fraction, K, image_size, seed=seed)


def demo_tag_trajectory(t: float, radius_m: float = 0.04, depth_m: float = 0.02, period_s: float = 4.0,
                        still_s: float = 1.0, distance_m: float = 0.5) -> tuple[np.ndarray, np.ndarray]:
    """A tag to jog with (``teleop jog --make-test-video``): facing the camera ``distance_m``
    ahead, still for ``still_s``, then going round an upright ellipse through its start
    point, ``2 radius_m`` tall and ``2 depth_m`` deep (one turn per ``period_s``: towards the
    camera and up, then back and down), while nodding by up to 10 deg about the camera's
    horizontal axis. Returns (R (3, 3), centre (3,) [m]), camera frame.

    With ``teleop jog``'s default axis map the hand goes up and forwards and back, and
    never sideways or about the vertical, so either hand can follow the whole of it: the
    iCub's hand starts at the edge of its reach (97 % of the arm's length from the shoulder,
    below and in front of it) with the upper arm close to the hip. Measured over 10 s: the
    former circle, in the image plane beside the start, took the right hand's goal 40 mm
    beyond reach and stopped the left arm before the hip for 7.9 s; a circle above the start
    stays in reach, but its motion towards the body (from 2 cm on, or a rocking tag turning
    the hand about the vertical) stopped the upper arm before the hip for 2.2 s (right) and
    6 s (left). This one, jogged on its 10 s video: the hand within 3.5 mm of its goal
    throughout, no collision stop, either hand (the goal passes at most 2.5 mm beyond the
    reach sphere)."""
    u = max(0.0, t - still_s)
    ramp = min(1.0, u) ** 2 * (3 - 2 * min(1.0, u))     # smooth start: no velocity step
    w = 2 * np.pi / period_s
    # Camera frame: -y is up, -z towards the camera.
    centre = np.array([0.0, -radius_m * (1 - np.cos(w * u)) * ramp, distance_m - depth_m * np.sin(w * u) * ramp])
    nod = ramp * np.radians(10.0) * np.sin(w * u)
    return rotation_from_rpy(nod, 0.0, 0.0) @ FACING_CAMERA, centre


def exposure_times(duration_s: float, fps: float, subframes: int) -> np.ndarray:
    """(frames, subframes) times [s] the frames of a video integrate (frame k ends at
    (k + 1) / fps and is exposed over its whole period)."""
    n = int(round(duration_s * fps))
    t_end = (np.arange(n) + 1.0) / fps
    return t_end[:, None] - (1 - (np.arange(subframes) + 0.5) / subframes)[None, :] / fps


class TagVideoGeometry:
    """Where the tag of :func:`write_tag_video` (same arguments) lies in the video's frames,
    from the camera geometry alone: every pose the frames integrate is projected, nothing
    is rendered. The poses are sampled once; any tag size can then be asked about.

    Args:
        trajectory: t [s] -> (R (3, 3), centre (3,) [m]) of the tag, camera frame.
        duration_s, fps, subframes: as :func:`write_tag_video`.
        K: (3, 3) camera matrix [px]; image_size: (width, height) [px].
    """

    def __init__(self, trajectory, duration_s: float, fps: float, K: np.ndarray, image_size=(640, 480),
                 subframes: int = 3) -> None:
        times = exposure_times(duration_s, fps, subframes)
        self.frames, self.subframes = times.shape
        self.times = times.ravel()
        poses = [trajectory(float(t)) for t in self.times]
        self._R = np.array([r for r, _ in poses]).reshape(-1, 3, 3)
        self._t = np.array([c for _, c in poses]).reshape(-1, 3)
        self.K = np.asarray(K, float)
        self.image_size = tuple(image_size)
        #: Side of the whole texture (black square + white border) per side of the black square.
        self._border = 1.0 / tag_texture(0)[1]
        # The tag centre's image motion over each frame period [px]: how far a frame's
        # exposure smears the tag (frame k is exposed from k / fps to (k + 1) / fps).
        boundaries = np.array([trajectory(k / fps)[1] for k in range(self.frames + 1)]).reshape(-1, 3)
        with np.errstate(invalid="ignore", divide="ignore"):
            centres = (boundaries @ self.K.T)[:, :2] / boundaries[:, 2:3]
        self.motion_px = np.linalg.norm(np.diff(centres, axis=0), axis=1)

    def _project(self, half_side_m: float) -> tuple[np.ndarray, np.ndarray]:
        """((N, 4, 2) image points [px], (N, 4) depths [m]) of the corners of a square of
        half side ``half_side_m`` centred on the tag, at each sampled pose."""
        corners = half_side_m * np.array([[-1, 1, 0], [1, 1, 0], [1, -1, 0], [-1, -1, 0]], float)
        p = np.einsum("nij,cj->nci", self._R, corners) + self._t[:, None, :]
        z = p[..., 2]
        with np.errstate(invalid="ignore", divide="ignore"):
            uv = (p @ self.K.T)[..., :2] / np.where(z > 1e-9, z, np.nan)[..., None]
        return uv, z

    def side_px(self, tag_size_m: float) -> np.ndarray:
        """(frames,) the shortest side of the tag's black square (``tag_size_m`` [m]) in
        each frame [px] (0 where the tag is behind the camera)."""
        uv, _ = self._project(0.5 * tag_size_m)
        sides = np.linalg.norm(uv - np.roll(uv, 1, axis=1), axis=2).reshape(self.frames, -1)
        return np.nan_to_num(np.min(sides, axis=1), nan=0.0)

    def leaves_frame_s(self, tag_size_m: float, margin_px: float = 0.0) -> float | None:
        """The first time [s] at which the tag with its white border is not wholly inside the
        image, ``margin_px`` from its edges (or is behind the camera); None if it never is."""
        uv, z = self._project(0.5 * tag_size_m * self._border)
        w, h = self.image_size
        m = margin_px
        with np.errstate(invalid="ignore"):
            inside = np.all((z > 1e-9) & (uv[..., 0] >= m) & (uv[..., 0] <= w - 1 - m) & (uv[..., 1] >= m)
                            & (uv[..., 1] <= h - 1 - m), axis=1)
        out = np.flatnonzero(~inside)
        return None if out.size == 0 else float(self.times[out[0]])


def write_tag_video(path, trajectory, duration_s: float, fps: float = 30.0, tag_size_m: float = 0.08,
                    K: np.ndarray | None = None, image_size=(640, 480), noise_std: float = 2.0,
                    subframes: int = 3, seed: int = 0, tag_id: int = 0, on_frame=None) -> int:
    """Write a video file of an AprilTag moving along ``trajectory`` (for ``teleop jog
    --camera FILE`` without a camera, and the tests).

    Args:
        path: output file; ``.avi`` is written as MJPG, anything else as ``mp4v``.
        trajectory: t [s] -> (R (3, 3), centre (3,) [m]) of the tag in the camera frame.
        duration_s, fps: length [s] and frame rate [frames/s].
        K: (3, 3) camera matrix [px] (default :func:`default_camera_matrix`).
        subframes: poses averaged over one frame period (motion blur).
        tag_id: which AprilTag 36h11 (0-586).
        on_frame: called with no argument after each frame is written (a progress bar's
            ``update``; it may raise KeyboardInterrupt to stop, the file is then closed).

    Returns:
        number of frames written.
    """
    from pathlib import Path

    K = default_camera_matrix(*image_size) if K is None else K
    scene = tag_scene(tag_size_m, K, image_size, tag_id=tag_id, seed=seed)
    rng = np.random.default_rng(seed)
    path = Path(path)
    # MJPG in AVI is the container/codec pair every OpenCV build (with FFmpeg) both writes and reads.
    fourcc = cv2.VideoWriter.fourcc(*("MJPG" if path.suffix.lower() == ".avi" else "mp4v"))
    writer = cv2.VideoWriter(str(path), fourcc, float(fps), tuple(image_size))
    if not writer.isOpened():
        raise RuntimeError(f"OpenCV cannot write the video file {path}")
    frames = exposure_times(duration_s, fps, subframes)
    n = len(frames)
    try:
        for times in frames:
            grey = scene.render([trajectory(float(s)) for s in times], noise_std, rng)
            writer.write(cv2.cvtColor(grey, cv2.COLOR_GRAY2BGR))
            if on_frame is not None:
                on_frame()
    finally:
        writer.release()
    return n


# --------------------------------------------------------------------------- calibration boards
#: A mild barrel distortion, as of a webcam (OpenCV's k1, k2, p1, p2, k3): the camera of the
#: calibration test images.
MILD_DISTORTION = np.array([-0.12, 0.04, 0.0, 0.0, 0.0])


def undistort_precisely(points: np.ndarray, K: np.ndarray, dist: np.ndarray,
                        P: np.ndarray | None = None) -> np.ndarray:
    """(N, 1, 2) distorted pixels -> (N, 1, 2) undistorted points: normalised image points,
    or pixels of camera matrix ``P``; the distortion inverted to 1e-12 (up to 100
    iterations; OpenCV's default stops after 5). OpenCV 4 names the iterated form
    undistortPointsIter; OpenCV 5 gives undistortPoints the criteria argument instead."""
    criteria = (cv2.TERM_CRITERIA_COUNT | cv2.TERM_CRITERIA_EPS, 100, 1e-12)
    # Looked up by name: each version's stubs know only their own form (and OpenCV 4's
    # wrongly refuse P=None, which its undistortPointsIter takes).
    undistort_iter = getattr(cv2, "undistortPointsIter", None)
    if undistort_iter is not None:
        return undistort_iter(points, K, dist, np.eye(3), P, criteria)
    return getattr(cv2, "undistortPoints")(points, K, dist, R=np.eye(3), P=P, criteria=criteria)  # noqa: B009


def render_board_view(K: np.ndarray, dist: np.ndarray, R: np.ndarray, t: np.ndarray, rng: np.random.Generator,
                      size: tuple[int, int] = (640, 480), squares: tuple[int, int] = (10, 7),
                      square_m: float = 0.025, square_px: int = 40) -> np.ndarray:
    """(H, W) uint8 image of a chessboard of ``squares`` (cols, rows; 10x7 has 9x6 inner
    corners) of ``square_m`` [m], with one square of white margin, at pose (R (3, 3), t (3,)
    [m]) in the OpenCV camera frame, seen by a camera with matrix K [px] and OpenCV
    distortion coefficients ``dist`` (zeros: a pinhole camera), on a grey background with 2
    grey levels of noise. Each image pixel is undistorted to its ray and the ray meets the
    board's plane at a texture point, so the true intrinsics of the image are known."""
    texture = chessboard_texture(*squares, square_px=square_px).astype(np.float32)
    th, tw = texture.shape
    m = square_m / square_px
    # Texture pixel -> board plane [m], centred, y up (the frame of FACING_CAMERA).
    S = np.array([[m, 0.0, -0.5 * tw * m], [0.0, -m, 0.5 * th * m], [0.0, 0.0, 1.0]])
    w, h = size
    pixels = np.stack(np.meshgrid(np.arange(w, dtype=float), np.arange(h, dtype=float)), -1).reshape(-1, 1, 2)
    rays = undistort_precisely(pixels, K, np.asarray(dist, float)).reshape(-1, 2)
    H = np.column_stack([R[:, 0], R[:, 1], t]) @ S       # texture pixel -> normalised image point
    uvw = np.linalg.solve(H, np.vstack([rays.T, np.ones(len(rays))]))
    map_x, map_y = (uvw[:2] / uvw[2]).reshape(2, h, w).astype(np.float32)
    board = cv2.remap(texture, map_x, map_y, cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT, borderValue=(0.0,))
    mask = cv2.remap(np.ones_like(texture), map_x, map_y, cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT,
                     borderValue=(0.0,))
    image = board * mask + 110.0 * (1.0 - mask) + rng.normal(0.0, 2.0, (h, w))
    return np.clip(image + 0.5, 0, 255).astype(np.uint8)


def spread_board_views(seed: int = 0) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """12 views of a 9x6-inner-corner board of 25 mm squares, 0.42-0.5 m away, on a 3x3 grid
    reaching the image's edges and corners plus 3 near the centre, tilted by 25 degrees,
    through a 640x480, 70-degree camera with :data:`MILD_DISTORTION`: what a good
    calibration session looks like. Returns (K (3, 3) [px], dist (5,), images)."""
    K = default_camera_matrix(640, 480, hfov_deg=70.0)
    rng = np.random.default_rng(seed)
    tilt = np.radians(25)
    places = [(x, y) for y in (-0.08, 0.0, 0.08) for x in (-0.13, 0.0, 0.13)] + [(0, 0), (-0.05, 0.03), (0.05, -0.03)]
    images = []
    for i, (x, y) in enumerate(places):
        roll, pitch = [(tilt, 0.0), (-tilt, 0.0), (0.0, tilt), (0.0, -tilt)][i % 4]
        R = rotation_from_rpy(roll, pitch, rng.uniform(-0.2, 0.2)) @ FACING_CAMERA
        t = np.array([x, y, 0.42 + 0.04 * (i % 3)])
        images.append(render_board_view(K, MILD_DISTORTION, R, t, rng))
    return K, MILD_DISTORTION.copy(), images
