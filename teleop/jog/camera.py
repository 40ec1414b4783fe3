"""Camera frames through OpenCV: a device index, a video file or a stream URL.

``CameraSource("0")`` opens device 0 (``"/dev/video0"`` too), ``CameraSource("clip.mp4")``
a file (``"file:///.../clip.mp4"`` too), ``CameraSource("rtsp://...")``/``"http://..."`` a
stream. A source that cannot be opened raises :class:`CameraError` naming it; so does a
named pipe, a socket or a device other than a video4linux camera given as a file (OpenCV
would wait in ``open()`` for a writer for ever, deaf to Ctrl-C). :class:`LatestFrameGrabber`
reads in a thread and keeps only the newest frame, so a slow consumer never works on stale,
buffered images (the reference's delay grew with queued inputs, §B.5 [Note]).

Frames: (H, W, 3) uint8 BGR, with the wall-clock time [s] (``time.monotonic``) they were read.
"""

from __future__ import annotations

import os
import stat
import threading
import time
from pathlib import Path
from urllib.parse import unquote, urlparse

import cv2
import numpy as np

from teleop.native_stderr import native_stderr_silenced
from teleop.video.opencv_log import opencv_warnings_silenced


class CameraError(RuntimeError):
    """A camera source that cannot be opened or stopped delivering frames."""


#: The largest device index OpenCV takes (a C int): a larger one raised OverflowError
#: ("Python int too large to convert to C long") from deep inside cv2.
MAX_DEVICE_INDEX = 2**31 - 1

#: The major device number of video4linux devices (/dev/video*): cameras OpenCV opens by path.
V4L_MAJOR = 81


def is_device_index(text: str) -> bool:
    """Whether ``text`` is a device index (ASCII digits: ``"²".isdigit()`` is True too)."""
    text = text.strip()
    return text.isascii() and text.isdigit()


def parse_source(source: str | int) -> str | int:
    """A device index (``"0"`` -> 0), a local ``file://`` URL's path, or the string itself
    (file path or URL). A device index beyond :data:`MAX_DEVICE_INDEX` raises ValueError."""
    if isinstance(source, int):
        index = source
    else:
        text = str(source).strip()
        if not is_device_index(text):
            return file_url_path(text) or text
        index = int(text)
    if not 0 <= index <= MAX_DEVICE_INDEX:
        raise ValueError(f"a camera device index is at most {MAX_DEVICE_INDEX}, got {index}")
    return index


def file_url_path(text: str) -> str | None:
    """The path of a local ``file://`` URL (``file:///tmp/a%20b.mp4`` -> ``/tmp/a b.mp4``), or
    None for anything else. Such a URL was taken for a stream: played unpaced, as fast as
    frames came, and its end reported as a camera that "stopped delivering frames"."""
    if not text.lower().startswith("file://"):
        return None
    url = urlparse(text)
    if url.netloc not in ("", "localhost"):
        return None
    return unquote(url.path)


def is_video_device(path: str) -> bool:
    """Whether ``path`` is a video4linux device (a camera OpenCV opens by its path)."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return False
    return stat.S_ISCHR(st.st_mode) and os.major(st.st_rdev) == V4L_MAJOR


class CameraSource:
    """An opened OpenCV capture.

    Args:
        source: device index, video file path or stream URL.
        width, height: requested size for devices (files and streams keep theirs).
        loop: for video files, restart at the end instead of stopping.
    """

    def __init__(self, source: str | int, width: int | None = None, height: int | None = None,
                 loop: bool = False) -> None:
        from retarget.file_checks import refuse_special_file

        try:
            self.source = parse_source(source)
        except ValueError as exc:
            raise CameraError(f"camera source {source!r}: {exc}") from None
        self.loop = loop
        path = self.source if isinstance(self.source, str) and "://" not in self.source else None
        self.is_file = path is not None and not is_video_device(path)
        is_device = isinstance(self.source, int) or (path is not None and not self.is_file)
        if path is not None and not Path(path).exists():
            raise CameraError(f"camera source {source!r}: no such file (give a device index, a video file or a URL)")
        if self.is_file and path is not None:
            # Before OpenCV opens it: a named pipe blocked open() for ever (no signal could
            # stop it), a device read as endless or empty data.
            refuse_special_file(path, lambda text: CameraError(
                f"camera source {text}: give a video file, a device index or a stream URL"))
        # The error below says it for the user: OpenCV's warnings, and the lines its FFmpeg
        # backend writes straight to descriptor 2 ("[mov,mp4,... @ 0x...] moov atom not found").
        with opencv_warnings_silenced(), native_stderr_silenced():
            self.capture = cv2.VideoCapture(self.source)
        if not self.capture.isOpened():
            self.capture.release()
            kind = "file" if self.is_file else ("device" if is_device else "stream")
            raise CameraError(f"cannot open camera {kind} {source!r} with OpenCV")
        if is_device:
            if width:
                self.capture.set(cv2.CAP_PROP_FRAME_WIDTH, width)
            if height:
                self.capture.set(cv2.CAP_PROP_FRAME_HEIGHT, height)
        self.fps = float(self.capture.get(cv2.CAP_PROP_FPS) or 0.0)
        #: Frames a video file says it holds (0: it does not say; devices and streams: 0).
        self.declared_frames = max(0, int(self.capture.get(cv2.CAP_PROP_FRAME_COUNT) or 0)) if self.is_file else 0
        self.frames_read = 0
        self.reached_end = False

    def read(self) -> tuple[float, np.ndarray] | None:
        """(wall time [s], BGR frame), or None at the end of a (non-looping) file."""
        ok, frame = self.capture.read()
        if not ok and self.is_file and self.loop:
            self.capture.set(cv2.CAP_PROP_POS_FRAMES, 0)
            ok, frame = self.capture.read()
        if not ok:
            if self.is_file:
                self.reached_end = True
                return None
            raise CameraError(f"camera {self.source!r} stopped delivering frames")
        self.frames_read += 1
        return time.monotonic(), frame

    def ended_early(self) -> str | None:
        """Why a video file that was read to its end stopped short of the frames it declares
        (truncated, or damaged so that OpenCV stops decoding), or None. A truncated AVI
        read as half a video, exit code 0 and no word. A couple of frames' slack: some
        containers estimate their count from the duration."""
        if not (self.reached_end and self.declared_frames and not self.loop):
            return None
        if self.frames_read >= 0.98 * self.declared_frames - 2:
            return None
        return (f"the video {self.source} ended after {self.frames_read} of the {self.declared_frames} frames it "
                "declares: the file looks truncated or damaged, and the rest of it was not jogged")

    def close(self) -> None:
        self.capture.release()

    def __enter__(self) -> "CameraSource":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class LatestFrameGrabber:
    """Reads a :class:`CameraSource` in a background thread, keeping only the newest frame.

    Video files are paced to their frame rate (else they would be read at full speed).
    """

    def __init__(self, camera: CameraSource) -> None:
        self.camera = camera
        self._lock = threading.Lock()
        self._frame: tuple[int, float, np.ndarray] | None = None
        self._count = 0
        self.error: Exception | None = None
        self.finished = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="jog-camera", daemon=True)

    def start(self) -> "LatestFrameGrabber":
        self._thread.start()
        return self

    def _run(self) -> None:
        period = 1.0 / self.camera.fps if self.camera.is_file and self.camera.fps > 0 else 0.0
        next_time = time.monotonic()
        while not self._stop.is_set():
            try:
                item = self.camera.read()
            except Exception as exc:  # reported to the consumer, which decides
                self.error = exc
                break
            if item is None:
                self.finished = True
                break
            with self._lock:
                self._count += 1
                self._frame = (self._count, *item)
            if period:
                next_time += period
                time.sleep(max(0.0, next_time - time.monotonic()))

    def latest(self) -> tuple[int, float, np.ndarray] | None:
        """(frame number, wall time [s], frame) of the newest frame, or None."""
        with self._lock:
            return self._frame

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2.0)
        self.camera.close()
