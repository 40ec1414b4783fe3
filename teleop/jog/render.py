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
    texture = cv2.copyMakeBorder(marker, pad, pad, pad, pad, cv2.BORDER_CONSTANT, value=255)
    return texture, TAG_CELLS / (TAG_CELLS + 2 * quiet_cells)


def chessboard_texture(cols: int, rows: int, square_px: int = 40, margin_squares: int = 1) -> np.ndarray:
    """(H, W) uint8 chessboard of ``cols`` x ``rows`` squares with a white margin."""
    board = np.kron((np.add.outer(np.arange(rows), np.arange(cols)) % 2) * 255,
                    np.ones((square_px, square_px))).astype(np.uint8)
    pad = margin_squares * square_px
    return cv2.copyMakeBorder(board, pad, pad, pad, pad, cv2.BORDER_CONSTANT, value=255)


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


def demo_tag_trajectory(t: float, radius_m: float = 0.04, period_s: float = 4.0, still_s: float = 1.0,
                        distance_m: float = 0.5) -> tuple[np.ndarray, np.ndarray]:
    """A tag to jog with (``teleop jog --make-test-video``): facing the camera ``distance_m``
    ahead, still for ``still_s``, then circling (``radius_m``, one turn per ``period_s``)
    in the image plane while rocking by up to 10 deg. The circle starts where the tag
    stands and lies to the image's left of it (with ``teleop jog``'s default axis map: the
    right hand moves outwards and up, away from the body). Returns (R (3, 3), centre (3,)
    [m]), camera frame."""
    u = max(0.0, t - still_s)
    ramp = min(1.0, u) ** 2 * (3 - 2 * min(1.0, u))     # smooth start: no velocity step
    w = 2 * np.pi / period_s
    centre = np.array([-radius_m * (1 - np.cos(w * u)) * ramp, -radius_m * np.sin(w * u) * ramp, distance_m])
    tilt = ramp * np.radians(10.0)
    return rotation_from_rpy(tilt * np.sin(w * u), tilt * np.cos(w * u) - tilt, 0.0) @ FACING_CAMERA, centre


def write_tag_video(path, trajectory, duration_s: float, fps: float = 30.0, tag_size_m: float = 0.08,
                    K: np.ndarray | None = None, image_size=(640, 480), noise_std: float = 2.0,
                    subframes: int = 3, seed: int = 0, tag_id: int = 0) -> int:
    """Write a video file of an AprilTag moving along ``trajectory`` (for ``teleop jog
    --camera FILE`` without a camera, and the tests).

    Args:
        path: output file; ``.avi`` is written as MJPG, anything else as ``mp4v``.
        trajectory: t [s] -> (R (3, 3), centre (3,) [m]) of the tag in the camera frame.
        duration_s, fps: length [s] and frame rate [frames/s].
        K: (3, 3) camera matrix [px] (default :func:`default_camera_matrix`).
        subframes: poses averaged over one frame period (motion blur).
        tag_id: which AprilTag 36h11 (0-586).

    Returns:
        number of frames written.
    """
    from pathlib import Path

    K = default_camera_matrix(*image_size) if K is None else K
    scene = tag_scene(tag_size_m, K, image_size, tag_id=tag_id, seed=seed)
    rng = np.random.default_rng(seed)
    path = Path(path)
    # MJPG in AVI is the container/codec pair every OpenCV build (with FFmpeg) both writes and reads.
    fourcc = cv2.VideoWriter_fourcc(*("MJPG" if path.suffix.lower() == ".avi" else "mp4v"))
    writer = cv2.VideoWriter(str(path), fourcc, float(fps), tuple(image_size))
    if not writer.isOpened():
        raise RuntimeError(f"OpenCV cannot write the video file {path}")
    n = int(round(duration_s * fps))
    try:
        for k in range(n):
            t_end = (k + 1) / fps
            times = t_end - (1 - (np.arange(subframes) + 0.5) / subframes) / fps
            grey = scene.render([trajectory(float(s)) for s in times], noise_std, rng)
            writer.write(cv2.cvtColor(grey, cv2.COLOR_GRAY2BGR))
    finally:
        writer.release()
    return n
