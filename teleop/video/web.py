"""Browser viewer for the operator: MJPEG video, JSON stats, and a canvas for a 3D view.

:class:`VideoWebViewer` is a stdlib ``http.server`` running in a background thread,
bound to 127.0.0.1 by default. Routes:

=========================  ==========================================================
``GET /``                  HTML page: one ``<img>`` per stream fed by the MJPEG URL,
                           a stats panel polling ``/stats`` twice a second, and the
                           ``<canvas id="robot-view">`` reserved for the 3D robot view
``GET /stream/<name>.mjpg`` ``multipart/x-mixed-replace; boundary=frame``: the newest
                           JPEG of stream ``<name>`` as one part, each time the client
                           can take one: a slow client skips frames, and with its small
                           send buffer (64 KiB) it falls at most 2-3 frames behind
``GET /frame/<name>.jpg``  the latest JPEG of the stream (503 before the first one)
``GET /stats``             JSON: viewer counters plus whatever ``stats_provider()``
                           returns (e.g. :meth:`VideoPlayback.stats`)
``GET /robot-pose``        JSON returned by ``robot_pose_provider()``: skeletons of
                           the ghost / actual / predicted robot poses (see
                           teleop/video/robot_view.py); 404 without a provider
``GET /robot_view.js``     the built-in 3D view script (teleop/video/robot_view.js)
=========================  ==========================================================

Every route also answers HEAD (headers only); other methods get 405. When the viewer is
bound to a loopback address it answers 403 to a request whose Host header names another
host (DNS rebinding: a web page whose name resolves to 127.0.0.1 must not read the
viewer).

Layout: the camera(s) left, the 3D robot view right (with its legend), stats below.

Frames are published as JPEG bytes (:meth:`publish_jpeg`): the received payload is
served as is, without re-encoding. :meth:`publish_image` encodes a BGR image first.

3D view hook (JavaScript): the page defines ``window.teleopRobotView.setRenderer(fn)``.
After every ``/stats`` poll the page calls ``renderRobotView(stats)``, which invokes
``fn(canvas, stats)`` if one was registered; otherwise an overlay says that no renderer
is registered. The page itself never draws on the canvas, so the renderer is free to take
a WebGL context. When a ``robot_pose_provider`` is set, the page loads the built-in
renderer (``/robot_view.js``): it polls ``/robot-pose`` every ``robot_pose_period_ms``
and draws the three poses with a perspective projection on the 2D canvas (drag to orbit,
wheel to zoom); it registers itself through the same hook.

Connections: at most ``MAX_CONNECTIONS`` at once, each given ``REQUEST_DEADLINE_S`` to send
its whole request; when all are taken a newcomer evicts the one waiting longest for its
request, and only slots serving requests (streams) earn it a 503 (teleop/video/http_server.py).

Shutdown: :meth:`stop` ends the accept loop, wakes every streaming client so its
handler returns, closes the listening socket and joins the threads (bounded waits).
"""

from __future__ import annotations

import html
import http.server
import json
import re
import select
import socket
import string
import threading
from http import HTTPStatus
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np

from teleop.json_safe import dumps
from teleop.net.udp import is_loopback
from teleop.video.clock import monotonic_s
from teleop.video.codec import JpegCodec
from teleop.video.http_server import ViewerHTTPServer

#: MJPEG part boundary (without the leading dashes).
MJPEG_BOUNDARY = "frame"
_STREAM_ROUTE = re.compile(r"^/stream/([A-Za-z0-9_-]+)\.mjpg$")
_FRAME_ROUTE = re.compile(r"^/frame/([A-Za-z0-9_-]+)\.jpg$")
#: Socket send buffer of an MJPEG client [bytes]: 2-3 frames. The default (autotuned up
#: to megabytes) would queue a minute of old video for a slow client before _next_jpeg
#: could skip a frame.
MJPEG_SEND_BUFFER_BYTES = 64 * 1024
#: Host header names accepted by a viewer bound to a loopback address (any port).
LOOPBACK_HOST_NAMES = frozenset({"127.0.0.1", "localhost", "[::1]"})
#: Methods other than GET and HEAD that get 405 instead of the stdlib's 501.
_REFUSED_METHODS = ("POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "CONNECT")

#: The page served at ``/`` (teleop/video/viewer.html: its styles and script): a
#: :class:`string.Template` of ``title``, ``figures`` (one per camera stream),
#: ``stats_period_ms`` and ``robot_view_script``.
_PAGE_TEMPLATE = string.Template(Path(__file__).with_name("viewer.html").read_text(encoding="utf-8"))

_FIGURE_TEMPLATE = """      <figure>
        <img class="video" id="video-{name}" src="/frame/{name}.jpg" data-src="/stream/{name}.mjpg"
             data-stream="{name}"
             alt="{name} camera">
        <figcaption>{caption}</figcaption>
      </figure>"""

#: The built-in 3D view (teleop/video/robot_view.js), included when a pose provider is set.
_ROBOT_VIEW_SCRIPT = '<script src="/robot_view.js" data-poll-ms="{poll_ms}"></script>'
_ROBOT_VIEW_JS = Path(__file__).with_name("robot_view.js")


def _host_name(host_header: str) -> str:
    """Host part of a Host header: ``"localhost:8080"`` -> ``"localhost"``,
    ``"[::1]:8080"`` -> ``"[::1]"``."""
    host = host_header.strip().lower()
    if host.startswith("["):
        return host.split("]", 1)[0] + "]"
    return host.split(":", 1)[0]


class _StreamSlot:
    """Latest JPEG of one stream plus a version counter that wakes streaming clients."""

    __slots__ = ("jpeg", "version", "published_s", "bytes_published")

    def __init__(self) -> None:
        self.jpeg: bytes | None = None
        self.version = 0
        self.published_s: float | None = None
        self.bytes_published = 0


class VideoWebViewer:
    """HTTP viewer serving the latest frame of each stream (see module docstring).

    Args:
        host: interface to bind; keep 127.0.0.1 unless the page must be reachable remotely.
        port: TCP port; 0 picks a free one (read :attr:`port` after :meth:`start`).
        streams: stream names shown on the page and accepted in URLs.
        stats_provider: callable returning a JSON-serialisable dict merged into ``/stats``.
        title: page title.
        jpeg_quality: quality used by :meth:`publish_image` (1-100).
        client_timeout_s: socket timeout of each connection, seconds: a client that stops
            reading cannot hold its handler thread longer than this.
        robot_pose_provider: callable returning the ``/robot-pose`` document (e.g.
            :meth:`teleop.video.robot_view.RobotPoseView.from_station`); it runs in the
            HTTP thread, once per poll of each open page. May be set after construction,
            before the page is loaded.
        robot_pose_period_ms: how often the page polls ``/robot-pose`` [ms].
        captions: caption under each stream's image (default ``"<name> eye"``).
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 8080,
        streams: Iterable[str] = ("left", "right"),
        stats_provider: Callable[[], dict[str, Any]] | None = None,
        title: str = "Teleoperation video",
        jpeg_quality: int = 80,
        client_timeout_s: float = 5.0,
        robot_pose_provider: Callable[[], dict[str, Any]] | None = None,
        robot_pose_period_ms: int = 100,
        captions: dict[str, str] | None = None,
    ) -> None:
        self.host = host
        self.robot_pose_provider = robot_pose_provider
        self.robot_pose_period_ms = int(robot_pose_period_ms)
        self.requested_port = int(port)
        self.stream_names = tuple(streams)
        self.captions = {name: f"{name} eye" for name in self.stream_names} | dict(captions or {})
        self.stats_provider = stats_provider
        self.title = title
        self.client_timeout_s = float(client_timeout_s)
        self._codec = JpegCodec(quality=jpeg_quality)
        self._slots = {name: _StreamSlot() for name in self.stream_names}
        self._condition = threading.Condition()
        self._stopping = threading.Event()
        self._server: http.server.ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._active_streams = 0
        self.requests_served = 0

    # ----------------------------------------------------------------- publishing
    def publish_jpeg(self, stream: str, jpeg: bytes) -> None:
        """Make ``jpeg`` the latest frame of ``stream`` and wake its MJPEG clients."""
        slot = self._slots.get(stream)
        if slot is None:
            raise KeyError(f"unknown stream {stream!r}; configured: {self.stream_names}")
        with self._condition:
            slot.jpeg = bytes(jpeg)
            slot.version += 1
            slot.published_s = monotonic_s()
            slot.bytes_published += len(jpeg)
            self._condition.notify_all()

    def publish_image(self, stream: str, image: np.ndarray) -> None:
        """Encode a BGR ``uint8`` image and publish it on ``stream``."""
        self.publish_jpeg(stream, self._codec.encode(image))

    # ----------------------------------------------------------------- lifecycle
    @property
    def port(self) -> int:
        """Bound TCP port (after :meth:`start`)."""
        if self._server is None:
            raise RuntimeError("viewer not started")
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """Base URL of the page, e.g. ``http://127.0.0.1:8080/``."""
        return f"http://{self.host}:{self.port}/"

    def start(self) -> "VideoWebViewer":
        """Bind and serve in a daemon thread; returns ``self``."""
        if self._server is not None:
            raise RuntimeError("viewer already started")
        self._stopping.clear()
        server = ViewerHTTPServer((self.host, self.requested_port), _make_handler(self))
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.1}, name="video-web", daemon=True
        )
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 2.0) -> None:
        """Stop serving: wake streaming clients, stop accepting, close, join. Idempotent."""
        if self._server is None:
            return
        self._stopping.set()
        with self._condition:
            self._condition.notify_all()
        self._server.shutdown()  # returns once serve_forever has exited
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout_s)
        # Streaming handlers notice _stopping at their next wake-up (immediately, via notify).
        with self._condition:
            self._condition.wait_for(lambda: self._active_streams == 0, timeout=timeout_s)
        self._server = None
        self._thread = None

    def __enter__(self) -> "VideoWebViewer":
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # ----------------------------------------------------------------- content
    def page_html(self) -> str:
        """The HTML page served at ``/``."""
        figures = "\n".join(_FIGURE_TEMPLATE.format(name=html.escape(name), caption=html.escape(self.captions[name]))
                            for name in self.stream_names)
        script = ""
        if self.robot_pose_provider is not None:
            script = _ROBOT_VIEW_SCRIPT.format(poll_ms=self.robot_pose_period_ms)
        return _PAGE_TEMPLATE.substitute(title=html.escape(self.title), figures=figures, stats_period_ms=500,
                                         robot_view_script=script)

    def stats(self) -> dict[str, Any]:
        """The ``/stats`` document: ``{"viewer": {...}, **stats_provider()}``."""
        with self._condition:
            now_s = monotonic_s()
            viewer = {
                "streams": {
                    name: {
                        "frames_published": slot.version,
                        "bytes_published": slot.bytes_published,
                        "last_frame_age_s": None if slot.published_s is None else now_s - slot.published_s,
                    }
                    for name, slot in self._slots.items()
                },
                "mjpeg_clients": self._active_streams,
                "requests_served": self.requests_served,
            }
        document: dict[str, Any] = {"viewer": viewer}
        if self.stats_provider is not None:
            document.update(self.stats_provider())
        return document

    def _next_jpeg(self, stream: str, last_version: int,
                   client_gone: Callable[[], bool] | None = None) -> tuple[bytes, int] | None:
        """Wait for a frame newer than ``last_version``; ``None`` when stopping or when
        ``client_gone()`` says the client left (asked at each wake-up without a new frame,
        at least every 0.5 s).

        Waits in bounded slices so a missed notification can never hang a handler. The
        client check matters while no frame comes (no video yet, or the video stopped):
        only a write notices a closed connection, so each page reload would otherwise
        leave a handler thread and its socket behind, counted in ``mjpeg_clients``.
        """
        slot = self._slots[stream]
        with self._condition:
            while not self._stopping.is_set():
                if slot.jpeg is not None and slot.version != last_version:
                    return slot.jpeg, slot.version
                self._condition.wait(0.5)
                if client_gone is not None and client_gone():
                    return None
        return None


def _make_handler(viewer: VideoWebViewer) -> type[http.server.BaseHTTPRequestHandler]:
    """Request handler class bound to ``viewer``."""

    class Handler(http.server.BaseHTTPRequestHandler):
        server: ViewerHTTPServer   # the only server it is made for (start())
        server_version = "TeleopVideo/1"
        timeout = viewer.client_timeout_s

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
            """Silence per-request logging (it would flood the operator console)."""

        def handle_one_request(self) -> None:
            # Each request gets its own REQUEST_DEADLINE_S. (With protocol_version HTTP/1.0
            # the stdlib closes after every answer: a second request on a connection only
            # comes if that changes, and then an idle keep-alive connection counts as waiting.)
            if not self.server.await_request(self.request):
                self.close_connection = True
                return
            super().handle_one_request()

        def parse_request(self) -> bool:
            if not super().parse_request():
                return False
            if not self.server.request_received(self.request):   # evicted or timed out meanwhile
                self.close_connection = True
                return False
            if self.request_version == "HTTP/0.9":
                # No browser has sent HTTP/0.9 for decades: refused (with a status line,
                # see send_response_only), not served.
                self.send_error(HTTPStatus.HTTP_VERSION_NOT_SUPPORTED, "HTTP/0.9 is not supported: use HTTP/1.x")
                return False
            return True

        def send_response_only(self, code: int, message: str | None = None) -> None:
            # Every answer, the stdlib's own errors (400, 414, 431, ...) included, starts
            # here: an evicted connection, already answered 408 and shut down, gets nothing
            # more (the handler's callers take a ConnectionError as the client gone).
            if not self.server.request_received(self.request):
                self.close_connection = True
                raise ConnectionAbortedError("connection closed by the viewer (request deadline or eviction)")
            if self.request_version == "HTTP/0.9":
                # The stdlib answers an HTTP/0.9-style line ("GET /", "POST /": its 400) with
                # a bare body, no status line: a page a client cannot tell from content.
                self.request_version = "HTTP/1.0"
                self.close_connection = True
            super().send_response_only(code, message)

        head_only = False   # a HEAD request: every response stops after its headers

        def end_headers(self) -> None:
            # On every response, errors included: a browser must not guess another type.
            self.send_header("X-Content-Type-Options", "nosniff")
            super().end_headers()

        def do_GET(self) -> None:  # noqa: N802 - stdlib naming
            self._answer()

        def do_HEAD(self) -> None:  # noqa: N802 - stdlib naming
            self.head_only = True
            self._answer()

        def _refuse_method(self) -> None:
            self._send_bytes(405, "text/plain", b"method not allowed", {"Allow": "GET, HEAD"})

        def _host_allowed(self) -> bool:
            """False for a loopback-bound viewer asked for another host (DNS rebinding). A
            missing Host header passes: browsers always send one, so it is no rebinding."""
            if not is_loopback(str(self.server.server_address[0])):   # a numeric address, as bound
                return True
            host = self.headers.get("Host")
            return host is None or _host_name(host) in LOOPBACK_HOST_NAMES

        def _answer(self) -> None:
            """Route a GET or HEAD request."""
            with viewer._condition:  # handler threads run concurrently
                viewer.requests_served += 1
            if not self._host_allowed():
                self._send_bytes(403, "text/plain", b"host not allowed")
                return
            path = self.path.split("?", 1)[0]
            if path in ("/", "/index.html"):
                self._send_bytes(200, "text/html; charset=utf-8", viewer.page_html().encode())
                return
            if path == "/stats":
                try:
                    body = dumps(viewer.stats()).encode()
                except Exception as error:  # a provider bug shows up in the page, not as a hang
                    body = json.dumps({"error": repr(error)}).encode()
                    self._send_bytes(500, "application/json", body)
                    return
                self._send_bytes(200, "application/json", body)
                return
            if path == "/robot-pose":
                self._send_robot_pose()
                return
            if path == "/robot_view.js":
                self._send_bytes(200, "text/javascript; charset=utf-8", _ROBOT_VIEW_JS.read_bytes())
                return
            match = _FRAME_ROUTE.match(path)
            if match and match.group(1) in viewer.stream_names:
                with viewer._condition:
                    jpeg = viewer._slots[match.group(1)].jpeg
                if jpeg is None:
                    self._send_bytes(503, "text/plain", b"no frame yet")
                else:
                    self._send_bytes(200, "image/jpeg", jpeg)
                return
            match = _STREAM_ROUTE.match(path)
            if match and match.group(1) in viewer.stream_names:
                self._stream_mjpeg(match.group(1))
                return
            self._send_bytes(404, "text/plain", b"not found")

        def _send_robot_pose(self) -> None:
            provider = viewer.robot_pose_provider
            if provider is None:
                self._send_bytes(404, "application/json", b'{"error": "no robot pose provider"}')
                return
            try:
                body = dumps(provider()).encode()
            except Exception as error:  # a provider bug shows up in the page, not as a hang
                self._send_bytes(500, "application/json", json.dumps({"error": repr(error)}).encode())
                return
            self._send_bytes(200, "application/json", body)

        def _send_bytes(self, status: int, content_type: str, body: bytes,
                        extra_headers: dict[str, str] | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            for name, value in (extra_headers or {}).items():
                self.send_header(name, value)
            try:
                self.end_headers()
                if not self.head_only:
                    self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                # The page went away mid-response (tab closed, reload): nothing to report.
                self.close_connection = True

        def _client_gone(self) -> bool:
            """True if the client closed or reset the connection (the socket reads EOF).
            A browser sends nothing after its GET; whatever else a client sends is dropped."""
            try:
                poller = select.poll()  # not select.select: it fails on descriptors >= 1024
                poller.register(self.connection, select.POLLIN)
                if not poller.poll(0):
                    return False
                # Read and drop, not peek: a client that sent anything after its GET and
                # then closed kept that byte in front of the EOF, so a peek never saw it
                # leave; while no frame came, its handler thread and socket stayed (and
                # counted in mjpeg_clients) until the viewer stopped. The stream reads
                # nothing else from the client, so the bytes are of no use.
                return self.connection.recv(65536, socket.MSG_DONTWAIT) == b""
            except BlockingIOError:  # readable, then nothing to read after all
                return False
            except OSError:  # reset by the peer
                return True

        def _stream_mjpeg(self, stream: str) -> None:
            try:
                self.send_response(200)
                self.send_header("Content-Type", f"multipart/x-mixed-replace; boundary={MJPEG_BOUNDARY}")
                self.send_header("Cache-Control", "no-store")
                self.send_header("Connection", "close")
                self.end_headers()
                # Small, so a slow client blocks the writes below after 2-3 frames and
                # _next_jpeg skips to the newest frame instead of queueing old ones.
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, MJPEG_SEND_BUFFER_BYTES)
            except (BrokenPipeError, ConnectionResetError):   # gone before the headers: nothing to report
                self.close_connection = True
                return
            if self.head_only:
                self.close_connection = True
                return
            with viewer._condition:
                viewer._active_streams += 1
            try:
                last_version = -1
                while True:
                    item = viewer._next_jpeg(stream, last_version, self._client_gone)
                    if item is None:  # viewer stopping (or client gone): close the multipart body
                        self.wfile.write(f"--{MJPEG_BOUNDARY}--\r\n".encode())
                        self.wfile.flush()
                        break
                    jpeg, last_version = item
                    self.wfile.write(
                        f"--{MJPEG_BOUNDARY}\r\nContent-Type: image/jpeg\r\n"
                        f"Content-Length: {len(jpeg)}\r\n\r\n".encode() + jpeg + b"\r\n"
                    )
                    self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError, TimeoutError, OSError):
                pass  # client went away or stalled: end this stream only
            finally:
                self.close_connection = True
                with viewer._condition:
                    viewer._active_streams -= 1
                    viewer._condition.notify_all()

    for method in _REFUSED_METHODS:
        setattr(Handler, f"do_{method}", Handler._refuse_method)
    return Handler
