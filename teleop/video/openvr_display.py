"""The robot's camera in the operator's headset, through the OpenVR compositor.

``teleop operator --view headset`` hands every displayed frame to
:class:`HeadsetDisplay`. The image is given to SteamVR's compositor as the texture of a
**head-locked overlay**: a quad ``distance_m`` in front of the eyes, ``width_m`` wide,
that follows the head (the robot's view replaces the operator's, as in the thesis set-up).

Why an overlay and not ``IVRCompositor.submit``: ``submit`` takes a GPU texture handle
(OpenGL/Vulkan/D3D), i.e. a graphics context this product does not otherwise need;
``IVROverlay.setOverlayRaw`` takes the pixels from memory and the compositor uploads
and draws them, with the same lens distortion and reprojection as any scene.

Stereo: when frames from both eye cameras arrive (streams "left" and "right", see
:mod:`teleop.video.wire`), the two images are put side by side and the overlay is
flagged ``VROverlayFlags_SideBySide_Parallel``, so each eye sees its own camera. With
one camera (the default robot station) the overlay is mono: both eyes see the same image.
A right image older than ``stereo_timeout_s`` falls back to mono (the right camera stopped);
a right camera without a live left one (a right-only stream) is shown mono.

Without the ``openvr`` package or a running SteamVR, the constructor raises
:class:`~teleop.inputs.openvr_input.OpenVRUnavailable` with the reason; the web viewer
(``--view web``) needs neither.
"""

from __future__ import annotations

import ctypes
import time
from typing import Callable

import cv2
import numpy as np

from teleop.inputs.openvr_input import import_openvr, init_openvr
from teleop.video.codec import CodecError, JpegCodec


class HeadsetDisplay:
    """Camera images in the headset (see the module docstring).

    Args:
        distance_m: distance of the image in front of the eyes [m].
        width_m: width of the image (of one eye's image in stereo) [m].
        stereo_timeout_s: a right image older than this is not used [s].
        clock: clock for the stereo timeout [s].
        openvr_module: the ``openvr`` module (default: imported; tests pass a fake of its API).
    """

    OVERLAY_KEY = "teleop.robot_camera"

    def __init__(self, distance_m: float = 1.0, width_m: float = 1.3, stereo_timeout_s: float = 0.5,
                 clock: Callable[[], float] = time.monotonic, openvr_module=None) -> None:
        if distance_m <= 0 or width_m <= 0:
            raise ValueError("distance_m and width_m must be positive")
        self.vr = openvr_module or import_openvr()
        self.system = init_openvr(self.vr, self.vr.VRApplication_Overlay)
        vr = self.vr
        self.overlay = vr.VROverlay()
        self.handle = self.overlay.createOverlay(self.OVERLAY_KEY, "Robot camera")
        self.width_m = float(width_m)
        self.overlay.setOverlayWidthInMeters(self.handle, self.width_m)
        # Head-locked: identity rotation, the quad on the headset's -z (forward) axis.
        transform = vr.HmdMatrix34_t()
        for i, row in enumerate(((1.0, 0.0, 0.0, 0.0), (0.0, 1.0, 0.0, 0.0), (0.0, 0.0, 1.0, -float(distance_m)))):
            for j, value in enumerate(row):
                transform.m[i][j] = value
        self.overlay.setOverlayTransformTrackedDeviceRelative(self.handle, vr.k_unTrackedDeviceIndex_Hmd, transform)
        self.overlay.showOverlay(self.handle)
        self.stereo_timeout_s = stereo_timeout_s
        self._clock = clock
        self._latest: dict[str, tuple[float, np.ndarray]] = {}
        self._stereo: bool | None = None
        # Keeps the pixels alive while SteamVR copies them.
        self._buffer: ctypes.Array[ctypes.c_ubyte] | None = None
        self.shown = 0
        self.decode_errors = 0

    # ----------------------------------------------------------------- images
    def show_jpeg(self, camera: str, payload: bytes) -> None:
        """Decode a JPEG frame of ``camera`` ("left"/"right") and show it."""
        try:
            # The codec checks the declared size before decoding (a forged header must not
            # make OpenCV allocate gigabytes) and accepts JPEG only.
            image = JpegCodec.decode(payload)
        except CodecError:
            self.decode_errors += 1                     # a damaged frame: keep the previous image
            return
        self.show(camera, image)

    def show(self, camera: str, image: np.ndarray) -> None:
        """Show a BGR uint8 image (H, W, 3) of ``camera``: "left" (or the only camera) / "right"."""
        if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8:
            raise ValueError(f"expected a BGR uint8 image (H, W, 3), got {image.dtype} {image.shape}")
        now = self._clock()
        self._latest[camera] = (now, image)
        right: tuple[float, np.ndarray] | None
        if camera == "right":
            left = self._latest.get("left")
            if left is None or now - left[0] > self.stereo_timeout_s:
                # No live left camera (a right-only stream, or the left one stopped): mono right.
                self._set_mode(False)
                self._submit(image)
                return
            right = self._latest["right"]
            if right[1].shape != left[1].shape:
                return                                  # mismatched cameras: mono shows the left one
        else:
            left = self._latest[camera]
            right = self._latest.get("right")
        stereo = (right is not None and now - right[0] <= self.stereo_timeout_s
                  and right[1].shape == left[1].shape)
        picture = np.hstack([left[1], right[1]]) if stereo and right is not None else left[1]
        self._set_mode(stereo)
        self._submit(picture)

    def _set_mode(self, stereo: bool) -> None:
        if stereo == self._stereo:
            return
        self.overlay.setOverlayFlag(self.handle, self.vr.VROverlayFlags_SideBySide_Parallel, stereo)
        # A side-by-side picture is two eyes wide: keep each eye's image width_m wide.
        self.overlay.setOverlayWidthInMeters(self.handle, self.width_m * (2 if stereo else 1))
        self._stereo = stereo

    def _submit(self, bgr: np.ndarray) -> None:
        rgba = np.ascontiguousarray(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGBA))
        height, width = rgba.shape[:2]
        self._buffer = (ctypes.c_ubyte * rgba.nbytes).from_buffer(rgba.data)   # .data: the array's buffer
        self.overlay.setOverlayRaw(self.handle, self._buffer, width, height, 4)
        self.shown += 1

    @property
    def stereo(self) -> bool:
        return bool(self._stereo)

    def close(self) -> None:
        if self.system is None:
            return
        try:
            self.overlay.destroyOverlay(self.handle)
        finally:
            self.system = None
            self.vr.shutdown()
