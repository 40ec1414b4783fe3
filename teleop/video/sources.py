"""Frame sources: where the images streamed by :mod:`teleop.video.sender` come from.

A :class:`FrameSource` is anything with ``read() -> (capture_s, image)`` and ``close()``:

* ``capture_s`` -- the instant the image depicts (camera exposure, or the start of the
  simulator render), in seconds of :func:`teleop.video.clock.monotonic_s`
  (``CLOCK_MONOTONIC``). The sender stamps "frame available" itself right after
  ``read()`` returns, so ``available_s - capture_s`` is the capture/render time.
* ``image`` -- ``H x W x 3`` ``uint8`` array in **BGR** channel order (OpenCV's
  convention; a pybullet RGBA render must be converted with
  ``cv2.cvtColor(rgba, cv2.COLOR_RGBA2BGR)``).

Implemented here:

* :class:`OpenCVCaptureSource` -- a camera (device index), a video file or a URL through
  ``cv2.VideoCapture``; raises :class:`SourceOpenError` with the reason if it cannot open.
* :class:`SyntheticSceneSource` -- a deterministic, moving, rendered-looking test scene
  (perspective checkerboard floor, textured wall, shaded moving spheres, a rotating bar
  and a frame counter). Its JPEG size is in the range of a real textured render, unlike
  a flat colour, so it is what the tests and the benchmark stream.

The simulator eye camera is added by the integration code as another source.
"""

from __future__ import annotations

import math
from typing import Protocol, runtime_checkable

import cv2
import numpy as np

from teleop.video.clock import Clock, monotonic_s
from teleop.video.opencv_log import opencv_warnings_silenced


class SourceOpenError(RuntimeError):
    """A frame source could not be opened (missing device, unreadable file, bad URL)."""


class EndOfStream(EOFError):
    """A finite source (a video file) has no more frames."""


@runtime_checkable
class FrameSource(Protocol):
    """Something that produces timestamped BGR images (see the module docstring)."""

    def read(self) -> tuple[float, np.ndarray]:
        """Return ``(capture_s, image)``: monotonic seconds and an ``HxWx3`` uint8 BGR image."""
        ...

    def close(self) -> None:
        """Release the underlying device or file. Idempotent."""
        ...


class OpenCVCaptureSource:
    """Frames from ``cv2.VideoCapture``: a device index, a file path or a URL.

    ``capture_s`` is stamped with :func:`monotonic_s` right after ``grab()`` returns, i.e.
    when the frame reached this process (OpenCV's own ``CAP_PROP_POS_MSEC`` is a
    different, per-backend clock and is not used).

    Args:
        target: device index (``0`` = first camera), file path or URL.
        size: optional ``(width, height)`` in pixels to resize every frame to.
        loop: for files, rewind at the end instead of raising :class:`EndOfStream`.
        open_timeout_s: how long the backend may try to open a device/stream, seconds
            (network URLs would otherwise block for the FFmpeg default of ~30 s).
        read_timeout_s: how long one ``read()`` may wait for a frame, seconds.
        clock: time source in seconds (injectable for tests).

    Raises:
        SourceOpenError: if OpenCV cannot open ``target``.
    """

    def __init__(
        self,
        target: int | str,
        size: tuple[int, int] | None = None,
        loop: bool = False,
        open_timeout_s: float = 5.0,
        read_timeout_s: float = 5.0,
        clock: Clock = monotonic_s,
    ) -> None:
        self.target = target
        self.size = size
        self.loop = loop
        self._clock = clock
        timeouts = [
            cv2.CAP_PROP_OPEN_TIMEOUT_MSEC, int(open_timeout_s * 1000),
            cv2.CAP_PROP_READ_TIMEOUT_MSEC, int(read_timeout_s * 1000),
        ]
        with opencv_warnings_silenced():     # SourceOpenError below says it for the user
            self._capture = cv2.VideoCapture(target, cv2.CAP_ANY, timeouts)
        if not self._capture.isOpened():
            self._capture.release()
            kind = "camera device" if isinstance(target, int) else "file or URL"
            raise SourceOpenError(
                f"OpenCV could not open {kind} {target!r} "
                "(missing device/file, unsupported codec, or no backend for the URL scheme)"
            )

    @property
    def nominal_fps(self) -> float:
        """Frame rate reported by the backend in frames/s, ``0.0`` if unknown."""
        return float(self._capture.get(cv2.CAP_PROP_FPS) or 0.0)

    def read(self) -> tuple[float, np.ndarray]:
        if not self._capture.grab():
            if not self.loop:
                raise EndOfStream(f"no more frames from {self.target!r}")
            # Rewind once; a file that still yields nothing is empty or broken.
            self._capture.set(cv2.CAP_PROP_POS_FRAMES, 0)
            if not self._capture.grab():
                raise EndOfStream(f"no frames at all from {self.target!r}")
        capture_s = self._clock()
        ok, image = self._capture.retrieve()
        if not ok or image is None:
            raise EndOfStream(f"grabbed frame from {self.target!r} could not be decoded")
        if image.ndim == 2:
            image = cv2.cvtColor(image, cv2.COLOR_GRAY2BGR)
        if self.size is not None and (image.shape[1], image.shape[0]) != tuple(self.size):
            image = cv2.resize(image, tuple(self.size), interpolation=cv2.INTER_AREA)
        return capture_s, image

    def close(self) -> None:
        self._capture.release()

    def __enter__(self) -> "OpenCVCaptureSource":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _make_static_scene(width: int, height: int, rng: np.random.Generator) -> np.ndarray:
    """Render the static part of the test scene (BGR uint8): wall and checkerboard floor.

    It imitates a simple rasterised simulator view: a perspective checkerboard ground
    plane fading with distance, a wall with a low-frequency stain and fine grain, and a
    shadow band at the horizon -- enough texture that JPEG sizes are realistic.
    """
    ys, xs = np.mgrid[0:height, 0:width].astype(np.float32)
    horizon = 0.42 * height
    image = np.empty((height, width, 3), np.float32)

    # Wall: vertical gradient times a blurred stain pattern.
    stain = cv2.GaussianBlur(rng.random((height, width), dtype=np.float32), (0, 0), width / 40)
    stain = (stain - stain.mean()) / (stain.std() + 1e-6)
    wall_shade = 0.75 + 0.25 * (ys / height) + 0.05 * stain
    image[...] = np.array([180, 190, 200], np.float32) * wall_shade[..., None]

    # Floor: checkerboard projected from a camera at height 1 m, focal length ~ width.
    below = ys > horizon + 1.0
    depth = np.where(below, width * 0.9 / np.maximum(ys - horizon, 1.0), 1.0)
    world_x = (xs - width / 2) * depth / (width * 0.9)
    checker = (np.floor(world_x * 2.0) + np.floor(depth * 2.0)).astype(np.int32) & 1
    fog = np.clip(np.exp(-depth / 8.0), 0.0, 1.0)
    floor_dark = np.array([70, 90, 60], np.float32)
    floor_light = np.array([170, 200, 160], np.float32)
    floor = np.where(checker[..., None] == 1, floor_light, floor_dark)
    floor = floor * fog[..., None] + np.array([200, 200, 205], np.float32) * (1 - fog[..., None])
    image[below] = floor[below]

    # Ambient occlusion-ish dark band where floor meets wall.
    band = np.exp(-(((ys - horizon) / (0.02 * height)) ** 2))
    image *= (1.0 - 0.35 * band)[..., None]

    # Fine grain, the way textured materials and anti-aliasing leave high frequencies.
    image += rng.normal(0.0, 4.0, size=image.shape).astype(np.float32)
    return np.clip(image, 0, 255).astype(np.uint8)


def _make_sphere_sprite(radius: int, colour_bgr: tuple[int, int, int]) -> tuple[np.ndarray, np.ndarray]:
    """A Lambert/Phong-shaded sphere: (BGR sprite, float alpha mask), both ``2r x 2r``."""
    size = 2 * radius
    ys, xs = np.mgrid[0:size, 0:size].astype(np.float32)
    nx = (xs + 0.5 - radius) / radius
    ny = (ys + 0.5 - radius) / radius
    r2 = nx**2 + ny**2
    inside = r2 <= 1.0
    nz = np.sqrt(np.clip(1.0 - r2, 0.0, 1.0))
    light = np.array([-0.4, -0.5, 0.77], np.float32)
    light /= np.linalg.norm(light)
    diffuse = np.clip(nx * light[0] + ny * light[1] + nz * light[2], 0.0, 1.0)
    specular = diffuse**40
    colour = np.array(colour_bgr, np.float32)
    sprite = colour * (0.2 + 0.8 * diffuse[..., None]) + 255.0 * 0.6 * specular[..., None]
    # Soft edge (1 px) so the silhouette is anti-aliased like a render.
    alpha = np.clip((1.0 - np.sqrt(r2)) * radius, 0.0, 1.0) * inside
    return np.clip(sprite, 0, 255).astype(np.uint8), alpha.astype(np.float32)


class SyntheticSceneSource:
    """A deterministic moving test scene that looks like a simple simulator render.

    Each ``read()`` renders frame ``n``: three shaded spheres on Lissajous paths, a
    rotating bar and the frame number as text over a precomputed textured background.
    Rendering costs well under 2 ms at 640x480, so it does not dominate the benchmark.

    ``capture_s`` is :func:`monotonic_s` at the start of rendering the frame (the instant
    a simulator would snapshot its state). Frames are produced as fast as ``read()`` is
    called; pacing is the sender's job.

    Args:
        width, height: image size in pixels.
        seed: seed of the static texture (same seed -> same images).
        clock: time source in seconds (injectable for tests).
    """

    def __init__(self, width: int = 640, height: int = 480, seed: int = 0, clock: Clock = monotonic_s) -> None:
        if width < 32 or height < 32:
            raise ValueError(f"synthetic scene needs at least 32x32 pixels, got {width}x{height}")
        self.width = width
        self.height = height
        self.frame_index = 0
        self._clock = clock
        rng = np.random.default_rng(seed)
        self._background = _make_static_scene(width, height, rng)
        radius = max(4, height // 10)
        self._sprites = [
            _make_sphere_sprite(radius, (40, 40, 200)),
            _make_sphere_sprite(int(radius * 0.8), (200, 80, 30)),
            _make_sphere_sprite(int(radius * 0.6), (30, 180, 220)),
        ]

    def render(self, frame_index: int) -> np.ndarray:
        """Return frame ``frame_index`` (BGR uint8, ``height x width x 3``); pure function of the index."""
        image = self._background.copy()
        t = frame_index / 30.0  # scene time in seconds at the nominal 30 frames/s
        w, h = self.width, self.height
        for k, (sprite, alpha) in enumerate(self._sprites):
            size = sprite.shape[0]
            cx = 0.5 * w + 0.35 * w * math.sin(0.9 * t * (k + 1) + k)
            cy = 0.55 * h + 0.25 * h * math.sin(1.3 * t + 2.0 * k)
            x0 = int(round(cx)) - size // 2
            y0 = int(round(cy)) - size // 2
            # Clip the sprite to the image.
            sx0, sy0 = max(0, -x0), max(0, -y0)
            sx1, sy1 = min(size, w - x0), min(size, h - y0)
            if sx1 <= sx0 or sy1 <= sy0:
                continue
            roi = image[y0 + sy0 : y0 + sy1, x0 + sx0 : x0 + sx1]
            a = alpha[sy0:sy1, sx0:sx1, None]
            blended = roi * (1.0 - a) + sprite[sy0:sy1, sx0:sx1] * a
            roi[...] = blended.astype(np.uint8)
        # A rotating bar: straight high-contrast edges at changing angles.
        angle = 1.7 * t
        centre = (int(0.2 * w), int(0.25 * h))
        length = 0.15 * w
        tip = (int(centre[0] + length * math.cos(angle)), int(centre[1] + length * math.sin(angle)))
        cv2.line(image, centre, tip, (20, 20, 20), max(2, w // 100), cv2.LINE_AA)
        cv2.putText(
            image, f"frame {frame_index:06d}", (int(0.03 * w), int(0.08 * h)),
            cv2.FONT_HERSHEY_SIMPLEX, h / 600.0, (10, 10, 10), max(1, h // 240), cv2.LINE_AA,
        )
        return image

    def read(self) -> tuple[float, np.ndarray]:
        capture_s = self._clock()
        image = self.render(self.frame_index)
        self.frame_index += 1
        return capture_s, image

    def close(self) -> None:
        """Nothing to release; present to satisfy :class:`FrameSource`."""
