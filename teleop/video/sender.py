"""Robot side of the video path: encode frames and send them as UDP datagrams.

:class:`VideoSender` encodes one image and sends its datagrams (format in
:mod:`teleop.video.wire`) through a **non-blocking** UDP socket to ``destination`` --
the operator station, or a delay proxy in front of it. It never waits on the network:
if the kernel send buffer is full the rest of that frame is abandoned and counted (a
partial frame is useless to the receiver, and waiting would delay every later frame).

:class:`VideoStreamer` is the paced loop: it reads a :class:`FrameSource` at a fixed
rate (frames/s), optionally resizes to a fixed size, and hands each frame to the sender,
in a background thread or in the caller's thread for a bounded number of frames.

Timestamps (seconds, :func:`teleop.video.clock.monotonic_s` = ``CLOCK_MONOTONIC``):
``capture_s`` comes from the source, ``available_s`` is taken when ``read()`` (and the
optional resize) returned, ``encode_end_s`` after the JPEG encoder, ``send_s`` per
datagram right before ``sendto``.
"""

from __future__ import annotations

import errno
import socket
import threading
from dataclasses import dataclass, field

import cv2
import numpy as np

from teleop.net.udp import is_loopback
from teleop.video import wire
from teleop.video.clock import Clock, monotonic_s
from teleop.video.codec import JpegCodec
from teleop.video.sources import EndOfStream, FrameSource

#: Kernel send buffer requested for the video socket, in bytes: several 640x480 frames,
#: so a burst of ~35 datagrams never hits "would block" on a healthy link.
DEFAULT_SEND_BUFFER_BYTES = 1 << 20


@dataclass
class SentFrame:
    """What happened to one frame on the sender; times in sender-clock seconds."""

    frame_id: int
    frame_bytes: int
    chunk_count: int     # slices of the frame
    chunks_sent: int     # datagrams accepted by the kernel, parity included
    capture_s: float
    available_s: float
    encode_end_s: float
    send_end_s: float
    parity_count: int = 0   # parity datagrams of the frame (forward error correction)

    @property
    def complete(self) -> bool:
        """True if every datagram of the frame was accepted by the kernel."""
        return self.chunks_sent == self.chunk_count + self.parity_count


@dataclass
class SenderStats:
    """Cumulative sender counters."""

    frames_sent: int = 0
    frames_aborted: int = 0  # send buffer full or socket error in the middle of a frame
    datagrams_sent: int = 0
    bytes_sent: int = 0  # UDP payload bytes, headers included
    send_errors: dict[str, int] = field(default_factory=dict)  # errno name -> count


class VideoSender:
    """Encode frames and send them as datagrams to ``destination``.

    Args:
        destination: ``(host, port)`` of the receiver or of a delay proxy.
        stream_id: camera id written into every datagram (see :class:`wire.StreamId`).
        codec: JPEG settings (quality etc.).
        max_datagram_bytes: bound on each UDP payload (header + slice + tag), bytes.
        authenticate: optional MAC hook ``authenticate(message) -> tag``; its tag length
            is probed once at construction and must stay constant.
        sock: an existing UDP socket to use (set non-blocking here); by default a new
            one is created and closed by :meth:`close`. A socket created here never
            listens on every interface: to a loopback destination it is bound to loopback,
            to another one it is connected (the OS picks the one route's interface).
        send_buffer_bytes: ``SO_SNDBUF`` requested for a socket created here.
        clock: time source in seconds (injectable for tests).
        fec_group: slices per parity datagram (forward error correction, :mod:`wire`); 0 = none.
    """

    def __init__(
        self,
        destination: tuple[str, int],
        stream_id: int = wire.StreamId.LEFT,
        codec: JpegCodec | None = None,
        max_datagram_bytes: int = wire.DEFAULT_MAX_DATAGRAM_BYTES,
        authenticate: wire.Authenticate | None = None,
        sock: socket.socket | None = None,
        send_buffer_bytes: int = DEFAULT_SEND_BUFFER_BYTES,
        clock: Clock = monotonic_s,
        fec_group: int = wire.DEFAULT_FEC_GROUP,
    ) -> None:
        if not 0 <= int(fec_group) <= 0xFFFF:
            raise ValueError(f"fec_group must be 0 (no parity) or 1..65535, got {fec_group}")
        if not 0 <= int(stream_id) <= 255:
            raise ValueError(f"stream_id must fit in a byte, got {stream_id}")
        self.destination = destination
        self.stream_id = int(stream_id)
        self.codec = codec or JpegCodec()
        self.max_datagram_bytes = int(max_datagram_bytes)
        self._authenticate = authenticate
        self._tag_len = len(authenticate(b"")) if authenticate is not None else 0
        if self._tag_len > 255:
            raise ValueError(f"authentication tag of {self._tag_len} bytes does not fit the tag_len byte")
        self.fec_group = int(fec_group)
        wire.frame_slice_bytes(self.max_datagram_bytes, self._tag_len, self.fec_group)  # validates the size
        self._clock = clock
        self._owns_socket = sock is None
        if sock is None:
            family = socket.AF_INET6 if ":" in destination[0] else socket.AF_INET
            sock = socket.socket(family, socket.SOCK_DGRAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer_bytes)
            self._connected = _bind_or_connect(sock, destination)
        else:
            self._connected = False
        sock.setblocking(False)
        self._sock = sock
        self._next_frame_id = 0
        self.stats = SenderStats()

    @property
    def chunk_payload_bytes(self) -> int:
        """Encoded-frame bytes carried per datagram."""
        return wire.frame_slice_bytes(self.max_datagram_bytes, self._tag_len, self.fec_group)

    def send_image(self, image: np.ndarray, capture_s: float, available_s: float | None = None) -> SentFrame:
        """Encode ``image`` (BGR uint8) and send it; returns what was sent.

        Args:
            capture_s: instant the image depicts, sender-clock seconds.
            available_s: when the image became available (default: now).
        """
        if available_s is None:
            available_s = self._clock()
        payload = self.codec.encode(image)
        encode_end_s = self._clock()
        return self.send_encoded(payload, capture_s, available_s, encode_end_s)

    def send_encoded(self, payload: bytes, capture_s: float, available_s: float, encode_end_s: float) -> SentFrame:
        """Send an already encoded frame (times in sender-clock seconds)."""
        frame_id = self._next_frame_id
        self._next_frame_id = (self._next_frame_id + 1) & 0xFFFFFFFF
        datagrams = wire.packetize(
            payload, stream_id=self.stream_id, frame_id=frame_id, codec=self.codec.codec_id,
            capture_s=capture_s, available_s=available_s, encode_end_s=encode_end_s,
            send_clock=self._clock, max_datagram_bytes=self.max_datagram_bytes,
            authenticate=self._authenticate, tag_len=self._tag_len, fec_group=self.fec_group,
        )
        chunk_count = -(-len(payload) // self.chunk_payload_bytes)
        parity_count = wire.parity_groups(chunk_count, self.fec_group)
        sent = 0
        for datagram in datagrams:
            try:
                if self._connected:
                    self._sock.send(datagram)
                else:
                    self._sock.sendto(datagram, self.destination)
            except OSError as error:
                # BlockingIOError (buffer full) or e.g. ECONNREFUSED from an earlier ICMP:
                # the frame cannot be completed any more, later frames may succeed.
                name = type(error).__name__ if error.errno is None else _errno_name(error.errno)
                self.stats.send_errors[name] = self.stats.send_errors.get(name, 0) + 1
                break
            sent += 1
            self.stats.datagrams_sent += 1
            self.stats.bytes_sent += len(datagram)
        if sent == chunk_count + parity_count:
            self.stats.frames_sent += 1
        else:
            self.stats.frames_aborted += 1
        return SentFrame(
            frame_id=frame_id, frame_bytes=len(payload), chunk_count=chunk_count, chunks_sent=sent,
            capture_s=capture_s, available_s=available_s, encode_end_s=encode_end_s, send_end_s=self._clock(),
            parity_count=parity_count,
        )

    def close(self) -> None:
        """Close the socket if this sender created it. Idempotent."""
        if self._owns_socket:
            self._sock.close()

    def __enter__(self) -> "VideoSender":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _bind_or_connect(sock: socket.socket, destination: tuple[str, int]) -> bool:
    """Keep the sender's socket off the network: an unbound socket is bound by its first
    sendto to *every* interface, on a random port nobody reads. A loopback destination:
    bind to loopback (sendto then behaves as before). Another: connect, so the socket is
    bound to the route's interface only; returns True (use send). If connect fails (no
    route yet) the socket stays unconnected and each frame reports the error as before."""
    if is_loopback(destination[0]):
        sock.bind(("::1" if sock.family == socket.AF_INET6 else "127.0.0.1", 0))
        return False
    try:
        sock.connect(destination)
    except OSError:
        return False
    return True


def _errno_name(number: int) -> str:
    return errno.errorcode.get(number, f"errno{number}")


class VideoStreamer:
    """Read a source at a fixed rate and send every frame.

    Ticks are scheduled on an absolute grid ``start + k / fps``; if a tick is missed
    (slow source or encoder), the streamer skips to the next future tick instead of
    bursting to catch up, because a late burst only adds latency.

    Args:
        source: where frames come from.
        sender: where frames go.
        fps: target rate in frames per second (> 0).
        size: optional ``(width, height)`` in pixels to resize frames to before encoding.
        clock: time source in seconds (must be the clock of the source's timestamps).
    """

    def __init__(
        self,
        source: FrameSource,
        sender: VideoSender,
        fps: float = 30.0,
        size: tuple[int, int] | None = None,
        clock: Clock = monotonic_s,
    ) -> None:
        if fps <= 0:
            raise ValueError(f"fps must be positive, got {fps}")
        self.source = source
        self.sender = sender
        self.fps = float(fps)
        self.size = size
        self._clock = clock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.frames_streamed = 0
        self.ticks_skipped = 0
        self.error: BaseException | None = None  # what ended a background run, if anything

    def step(self) -> SentFrame:
        """Read, resize if configured, encode and send one frame now."""
        capture_s, image = self.source.read()
        if self.size is not None and (image.shape[1], image.shape[0]) != tuple(self.size):
            image = cv2.resize(image, tuple(self.size), interpolation=cv2.INTER_AREA)
        available_s = self._clock()
        sent = self.sender.send_image(image, capture_s, available_s)
        self.frames_streamed += 1
        return sent

    def run(self, max_frames: int | None = None, duration_s: float | None = None) -> int:
        """Stream in the calling thread until ``max_frames`` frames, ``duration_s``
        seconds, :meth:`stop`, or the end of the source; returns the frames sent.

        At least one bound (or a later :meth:`stop` from another thread) is required so
        the loop always terminates.
        """
        if max_frames is None and duration_s is None and self._thread is None:
            raise ValueError("run() needs max_frames or duration_s when not in a thread")
        period_s = 1.0 / self.fps
        start_s = self._clock()
        end_s = start_s + duration_s if duration_s is not None else float("inf")
        next_tick_s = start_s
        sent = 0
        while not self._stop.is_set() and (max_frames is None or sent < max_frames):
            now_s = self._clock()
            if now_s >= end_s:
                break
            if now_s < next_tick_s:
                # Event.wait sleeps interruptibly, so stop() takes effect immediately.
                self._stop.wait(min(next_tick_s, end_s) - now_s)
                continue
            try:
                self.step()
            except EndOfStream:
                break
            sent += 1
            next_tick_s += period_s
            now_s = self._clock()
            if now_s > next_tick_s:
                missed = int((now_s - next_tick_s) / period_s) + 1
                self.ticks_skipped += missed
                next_tick_s += missed * period_s
        return sent

    def start(self) -> None:
        """Stream in a daemon thread until :meth:`stop` or the end of the source."""
        if self._thread is not None:
            raise RuntimeError("streamer already started")
        self._stop.clear()

        def target() -> None:
            try:
                self.run()
            except BaseException as error:  # kept for the owner to inspect after stop()
                self.error = error

        self._thread = threading.Thread(target=target, name="video-streamer", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 2.0) -> None:
        """Stop a background stream and wait for its thread (at most ``timeout_s``)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None
