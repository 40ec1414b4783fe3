"""The operator's web viewer (teleop/video/web.py) against hostile or broken HTTP clients,
on the real server over a real loopback socket.

What every test here holds the viewer to: a bad request gets a clear 4xx (or a closed
connection), never a traceback on the operator's console (the stdlib's server prints one
for any exception that leaves a handler); a well-formed client right after, or at the same
time, still gets the page and new frames; and clients that stall, vanish or come and go in
numbers leave no thread, socket or buffered video behind.

Hangs are guarded by generous deadlines only: nothing here asserts how fast the server is.
"""

from __future__ import annotations

import os
import re
import socket
import struct
import threading
import time
from typing import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from teleop.video.web import MJPEG_BOUNDARY, VideoWebViewer
from tests.conftest import fuzz_examples

#: Hang guard of every wait [s]: far above what a loaded 2-core machine needs.
DEADLINE_S = 30.0
#: The viewer's per-connection socket timeout in these tests [s]: short, so that the
#: "eventually dropped / closed" cases end in a second instead of the default five.
CLIENT_TIMEOUT_S = 1.0
#: What the stdlib's server prints when an exception leaves a request handler.
HANDLER_ESCAPE = "Exception occurred during processing of request"
HOST = b"Host: 127.0.0.1\r\n"


def wait_for(condition: Callable[[], bool], what: str, deadline_s: float = DEADLINE_S) -> None:
    """Poll ``condition`` until true; fail naming ``what`` after ``deadline_s`` (a hang guard)."""
    end = time.monotonic() + deadline_s
    while not condition():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.02)


def frame(index: int, size: int = 30_000) -> bytes:
    """A JPEG-framed payload filled with its index (the viewer serves bytes as is)."""
    return b"\xff\xd8" + index.to_bytes(4, "big") * (size // 4) + b"\xff\xd9"


def frame_index(jpeg: bytes) -> int:
    return int.from_bytes(jpeg[2:6], "big")


class Publisher:
    """Publishes ever newer frames on ``left`` in a background thread, as a station does."""

    def __init__(self, viewer: VideoWebViewer, size: int = 30_000, period_s: float = 0.005) -> None:
        self.viewer, self.size, self.period_s = viewer, size, period_s
        self.published = 0
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="test-publisher", daemon=True)
        self.thread.start()
        wait_for(lambda: self.published > 0, "the first frame")

    def _run(self) -> None:
        while not self._stop.is_set():
            self.viewer.publish_jpeg("left", frame(self.published, self.size))
            self.published += 1
            self._stop.wait(self.period_s)   # pacing only: the tests wait on conditions

    def stop(self) -> None:
        self._stop.set()
        self.thread.join()


class MjpegClient:
    """A well-behaved MJPEG client on a raw socket: reads the HTTP head, then parts."""

    def __init__(self, port: int, rcvbuf: int | None = None) -> None:
        self.sock = socket.socket()
        if rcvbuf is not None:   # before connect, so the window is small from the start
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(DEADLINE_S)
        self.sock.connect(("127.0.0.1", port))
        self.sock.sendall(b"GET /stream/left.mjpg HTTP/1.1\r\n" + HOST + b"\r\n")
        self.buffer = b""

    def _read_until(self, marker: bytes) -> bytes:
        while marker not in self.buffer:
            chunk = self.sock.recv(65536)
            assert chunk, "the stream ended"
            self.buffer += chunk
        head, self.buffer = self.buffer.split(marker, 1)
        return head

    def _read_exactly(self, n: int) -> bytes:
        while len(self.buffer) < n:
            chunk = self.sock.recv(65536)
            assert chunk, "the stream ended mid-part"
            self.buffer += chunk
        data, self.buffer = self.buffer[:n], self.buffer[n:]
        return data

    def read_head(self) -> str:
        head = self._read_until(b"\r\n\r\n").decode("latin-1")
        assert head.startswith("HTTP/1.0 200") and "multipart/x-mixed-replace" in head, head
        return head

    def read_part(self) -> bytes:
        head = self._read_until(b"\r\n\r\n").decode("latin-1")
        assert head.lstrip("\r\n").startswith(f"--{MJPEG_BOUNDARY}\r\n"), head
        length = int(re.search(r"Content-Length: (\d+)", head).group(1))
        return self._read_exactly(length)

    def close(self) -> None:
        self.sock.close()


def new_frames(client: MjpegClient, count: int) -> list[int]:
    """Read parts until ``count`` frames newer than the first one arrived; their indices."""
    first = frame_index(client.read_part())
    seen: list[int] = []
    while len(seen) < count:
        index = frame_index(client.read_part())
        assert index > (seen[-1] if seen else first), "a frame came out of order"
        seen.append(index)
    return seen


def exchange(port: int, request: bytes, half_close: bool = True) -> bytes:
    """Send ``request`` as is and return all the server answers until it closes.

    ``half_close`` shuts our sending side after the request, so that an incomplete request
    ends at once (EOF) instead of at the viewer's timeout. A server that resets the
    connection (it closed with part of a huge request unread) answers what arrived first.
    """
    with socket.create_connection(("127.0.0.1", port), timeout=DEADLINE_S) as sock:
        answer = b""
        try:
            sock.sendall(request)
            if half_close:
                sock.shutdown(socket.SHUT_WR)
            while chunk := sock.recv(65536):
                answer += chunk
        except (ConnectionResetError, BrokenPipeError):
            pass   # the server answered (maybe) and closed with our request unread
    return answer


def status_of(answer: bytes) -> int | None:
    """The status of a response: from its status line, or from the stdlib's error page when
    it answers a request it could not read as HTTP/1.x without a status line (HTTP/0.9
    style); ``None`` for no recognisable response."""
    if answer.startswith(b"HTTP/"):
        return int(answer.split(b" ", 2)[1])
    match = re.search(rb"Error code: (\d{3})", answer)
    return int(match.group(1)) if match else None


def get(port: int, path: str, host: bytes = HOST, method: str = "GET") -> tuple[int, bytes, bytes]:
    """(status, head, body) of a one-shot request."""
    answer = exchange(port, f"{method} {path} HTTP/1.1\r\n".encode() + host + b"\r\n")
    head, _, body = answer.partition(b"\r\n\r\n")
    status = status_of(answer)
    assert status is not None, answer[:200]
    return status, head, body


def assert_viewer_serves(viewer: VideoWebViewer) -> None:
    """A well-formed client gets the page and the newest frame."""
    status, _, body = get(viewer.port, "/")
    assert status == 200 and b'id="robot-view"' in body
    status, _, body = get(viewer.port, "/frame/left.jpg")
    assert status == 200 and body.startswith(b"\xff\xd8")


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture()
def viewer():
    instance = VideoWebViewer(port=0, streams=("left",), client_timeout_s=CLIENT_TIMEOUT_S).start()
    yield instance
    instance.stop()


@pytest.fixture()
def publisher(viewer):
    instance = Publisher(viewer)
    yield instance
    instance.stop()


# --------------------------------------------------------------------------- fuzzing
#: Header-ish lines: names and values of any bytes, CR and LF included (a folded or split
#: header), plus a good Host line now and then so that some requests reach the routes.
HEADER_LINES = st.lists(st.one_of(st.just(HOST), st.binary(max_size=60).map(lambda b: b + b"\r\n"),
                                  st.tuples(st.binary(max_size=20), st.binary(max_size=40))
                                  .map(lambda nv: nv[0] + b": " + nv[1] + b"\r\n")), max_size=8)
REQUEST_LINES = st.tuples(
    st.sampled_from([b"GET", b"HEAD", b"POST", b"OPTIONS", b"get", b"FOO", b"", b"G\x00T", b"GET GET"]),
    st.one_of(st.sampled_from([b"/", b"/stats", b"/frame/left.jpg", b"/robot-pose", b"/robot_view.js",
                               b"/../../etc/passwd", b"*", b"http://127.0.0.1/", b"/stats?x=1#y", b"/%2e%2e/"]),
              st.binary(max_size=80)),
    st.sampled_from([b"HTTP/1.0", b"HTTP/1.1", b"HTTP/2.0", b"HTTP/0.9", b"HTTP/1.x", b"HTTP/", b"FTP/1.0",
                     b"HTTP/1.1 extra", b"HTTP/9999999999999999999.1"]),
).map(lambda parts: b" ".join(parts) + b"\r\n")
#: What a hostile request may be answered with: a route's own answer, or a clear error.
ACCEPTED_STATUSES = {200, 400, 403, 404, 405, 414, 431, 501, 503, 505}


def check_answer(request: bytes, answer: bytes) -> None:
    status = status_of(answer)
    if status is None:
        # Nothing (closed) is fine. Anything else must be an HTTP/0.9 answer to a 0.9-style
        # request line ("GET /path" and no version), the only one without a status.
        first = request.split(b"\n", 1)[0].split()
        assert answer == b"" or len(first) == 2, (request, answer[:200])
        return
    assert status in ACCEPTED_STATUSES, (request, answer[:300])


@pytest.mark.parametrize("kind", ["raw bytes", "request-shaped"])
def test_fuzzed_requests_get_a_clear_answer_and_the_viewer_keeps_serving(viewer, capsys, kind):
    """Random bytes, and requests built of random methods, targets, versions and header
    lines (CR/LF/NUL inside them), get a 4xx/501/505 or a closed connection, never a
    traceback (an exception out of the handler thread); the next well-formed client gets
    the page and the newest frame, and after all of them an MJPEG client gets new frames."""
    viewer.publish_jpeg("left", frame(0, 1000))
    requests = (st.binary(max_size=600) if kind == "raw bytes"
                else st.tuples(REQUEST_LINES, HEADER_LINES, st.sampled_from([b"\r\n", b"", b"\n", b"\r\n\r\n"]))
                .map(lambda parts: parts[0] + b"".join(parts[1]) + parts[2]))

    @settings(max_examples=fuzz_examples(250))
    @given(request=requests)
    def hostile_then_good(request: bytes) -> None:
        check_answer(request, exchange(viewer.port, request))
        assert_viewer_serves(viewer)

    hostile_then_good()
    publisher = Publisher(viewer, size=1000)
    try:
        client = MjpegClient(viewer.port)
        client.read_head()
        new_frames(client, 3)
        client.close()
    finally:
        publisher.stop()
    assert viewer._thread is not None and viewer._thread.is_alive()
    err = capsys.readouterr().err
    assert HANDLER_ESCAPE not in err and "Traceback" not in err, err[-3000:]


# --------------------------------------------------------------------------- oversized and unfinished requests
MEGABYTE = 1 << 20


@pytest.mark.parametrize("request_bytes, statuses", [
    (b"GET /" + b"a" * MEGABYTE + b" HTTP/1.1\r\n" + HOST + b"\r\n", {414}),
    (b"GET / HTTP/1.1\r\n" + HOST + b"X-Big: " + b"a" * MEGABYTE + b"\r\n\r\n", {431}),
    (b"GET / HTTP/1.1\r\n" + HOST + b"X-Many: a\r\n" * 100_000 + b"\r\n", {431}),
    (b"GET / HTTP/1.1\r\n" + HOST + b"X-Some: a\r\n" * 150 + b"\r\n", {431}),
], ids=["1 MB request line", "1 MB header", "100k headers", "150 headers"])
def test_oversized_requests_are_refused_while_a_stream_goes_on(viewer, publisher, capsys, request_bytes, statuses):
    """A request line or header block far over the stdlib's limits (64 KiB a line, 100
    headers) gets 414/431, or a reset once the server closes with the rest unread; it never
    prints a traceback, and an MJPEG client streaming meanwhile keeps getting new frames.

    The stdlib's server used to print a BrokenPipeError/ConnectionResetError traceback on the
    operator's console each time the client was gone by the time the 414/431 was written."""
    streaming = MjpegClient(viewer.port)
    streaming.read_head()
    for _ in range(3):
        answer = exchange(viewer.port, request_bytes, half_close=False)
        assert answer == b"" or status_of(answer) in statuses, answer[:200]
        new_frames(streaming, 2)
    streaming.close()
    assert_viewer_serves(viewer)
    err = capsys.readouterr().err
    assert HANDLER_ESCAPE not in err and "Traceback" not in err, err[-3000:]


@pytest.mark.parametrize("leave", ["close", "reset"])
def test_a_client_gone_while_its_request_is_read_prints_no_traceback(viewer, capsys, leave):
    """A client that sends part of a request (or an oversized line) and then closes or resets
    the connection (a tab closed while loading, a port scanner, a killed curl) must leave
    nothing on the operator's console. It used to print a ConnectionResetError traceback
    from the stdlib's readline, or a BrokenPipeError one from writing the 414."""
    viewer.publish_jpeg("left", frame(0, 1000))
    threads_before = threading.active_count()
    for partial in (b"GET / HTT", b"GET /stats HTTP/1.1\r\nHost: 127.0", b"GET /" + b"a" * 100_000):
        for _ in range(5):
            sock = socket.create_connection(("127.0.0.1", viewer.port), timeout=DEADLINE_S)
            try:
                sock.sendall(partial)
            except (ConnectionResetError, BrokenPipeError):
                pass
            if leave == "reset":
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()
    # Every handler has run (and printed whatever it would) once no handler thread is left.
    wait_for(lambda: threading.active_count() <= threads_before, "the handlers of the dropped clients to end")
    assert_viewer_serves(viewer)
    err = capsys.readouterr().err
    assert HANDLER_ESCAPE not in err and "Traceback" not in err, err[-3000:]


def test_unfinished_requests_do_not_hold_up_a_stream_and_are_closed(viewer, publisher):
    """Clients that open a connection and never finish their request (no blank line after
    the headers, half a request line, nothing at all, or a header trickled a byte at a time)
    each hold only their own handler: an MJPEG client meanwhile gets new frames, and the
    silent ones are closed by the viewer's client timeout."""
    silent = []
    for partial in (b"GET /stream/left.mjpg HTTP/1.1\r\n" + HOST, b"GET /sta", b""):
        sock = socket.create_connection(("127.0.0.1", viewer.port), timeout=DEADLINE_S)
        sock.sendall(partial)
        silent.append(sock)
    trickler = socket.create_connection(("127.0.0.1", viewer.port), timeout=DEADLINE_S)
    trickler.sendall(b"GET / HTTP/1.1\r\n" + HOST + b"X-Slow: ")
    streaming = MjpegClient(viewer.port)
    try:
        streaming.read_head()
        for _ in range(5):
            trickler.sendall(b"a")   # a byte now and then keeps this request alive
            new_frames(streaming, 3)
        assert_viewer_serves(viewer)
        for sock in silent:
            # The viewer gives up on a silent request after client_timeout_s: EOF, no answer.
            assert sock.recv(65536) == b""
    finally:
        for sock in silent + [trickler]:
            sock.close()
        streaming.close()


# --------------------------------------------------------------------------- slow and vanishing stream clients
def test_a_stream_client_that_never_reads_is_dropped_and_others_keep_their_frames(viewer, publisher):
    """An MJPEG client that asks for the stream and never reads fills its socket buffers;
    then the handler's writes block. Other clients must keep getting new frames, the video
    queued for the stalled client must stay bounded (a few frames in the socket buffers,
    none in the viewer), and the stalled client must be dropped after client_timeout_s."""
    stalled = MjpegClient(viewer.port, rcvbuf=4096)
    streaming = MjpegClient(viewer.port)
    streaming.read_head()
    wait_for(lambda: viewer.stats()["viewer"]["mjpeg_clients"] == 2, "both streams to start")
    # Read the good stream until the stalled one is dropped: frames must keep coming meanwhile.
    read = 0
    end = time.monotonic() + DEADLINE_S
    while viewer.stats()["viewer"]["mjpeg_clients"] != 1:
        assert time.monotonic() < end, "the stalled client was never dropped"
        streaming.read_part()
        read += 1
    new_frames(streaming, 5)
    published_bytes = viewer.stats()["viewer"]["streams"]["left"]["bytes_published"]
    # Everything the stalled client was ever sent, now that the viewer has closed its side.
    stalled.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    queued = len(stalled.buffer)
    try:
        while chunk := stalled.sock.recv(1 << 20):
            queued += len(chunk)
    except ConnectionResetError:
        pass
    stalled.close()
    streaming.close()
    assert read > 0
    # Socket buffers only (64 KiB send buffer, doubled by Linux, and the small receive
    # window): well under a megabyte, where a queue in the viewer would hold all that was
    # published during the client timeout (megabytes at the publisher's pace).
    assert queued < MEGABYTE, f"{queued} bytes queued for a client that never read"
    assert published_bytes > queued


def test_clients_leaving_mid_stream_leave_no_thread_or_socket_behind(viewer, publisher, capsys):
    """Fifty clients in a row connect, take part of the stream (or the page, or half a
    request) and leave, by close or by reset, mid-frame: the viewer's threads and open
    descriptors come back to where they were, no stream stays counted, a client streaming
    all along keeps getting frames, and nothing is printed."""
    assert_viewer_serves(viewer)
    threads_before, fds_before = threading.active_count(), open_fds()
    streaming = MjpegClient(viewer.port)
    streaming.read_head()
    for i in range(50):
        sock = socket.create_connection(("127.0.0.1", viewer.port), timeout=DEADLINE_S)
        kind = i % 5
        if kind in (0, 1):     # a stream, left mid-frame
            sock.sendall(b"GET /stream/left.mjpg HTTP/1.1\r\n" + HOST + b"\r\n")
            got = 0
            while got < 1000 + 20_000 * (i % 3):
                got += len(sock.recv(65536))
        elif kind == 2:        # a stream, left before reading anything
            sock.sendall(b"GET /stream/left.mjpg HTTP/1.1\r\n" + HOST + b"\r\n")
        elif kind == 3:        # the page, left before the answer is read
            sock.sendall(b"GET / HTTP/1.1\r\n" + HOST + b"\r\n")
        else:                  # half a request
            sock.sendall(b"GET /stream/left")
        if i % 2:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
        if i % 10 == 9:
            new_frames(streaming, 2)
    new_frames(streaming, 3)
    streaming.close()
    margin = 3   # a handler still finishing its last write when counted
    wait_for(lambda: viewer.stats()["viewer"]["mjpeg_clients"] == 0, "every stream to end")
    wait_for(lambda: threading.active_count() <= threads_before + margin
             and open_fds() <= fds_before + margin, "threads and sockets to come back")
    wait_for(lambda: threading.active_count() <= threads_before and open_fds() <= fds_before,
             "the last handler threads and sockets to go")
    assert_viewer_serves(viewer)
    err = capsys.readouterr().err
    assert HANDLER_ESCAPE not in err and "Traceback" not in err, err[-3000:]


# --------------------------------------------------------------------------- hosts, paths, methods
@pytest.mark.parametrize("host", [
    b"Host: evil.example\r\n", b"Host: evil.example:80\r\n", b"Host: localhost.evil.example\r\n",
    b"Host: 127.0.0.2\r\n", b"Host: 0.0.0.0\r\n", b"Host: \r\n", b"Host: 192.168.1.10\r\n",
])
@pytest.mark.parametrize("path, method", [
    ("/stream/left.mjpg", "GET"), ("/stream/left.mjpg", "HEAD"), ("/frame/left.jpg", "GET"),
    ("/robot-pose", "GET"), ("/", "HEAD"),
])
def test_a_foreign_host_is_refused_on_every_route(viewer, host, path, method):
    """DNS rebinding: a page on another name that resolves to 127.0.0.1 would read the
    camera. Every route, the stream included, answers 403 to a foreign Host, and no stream
    is started (a refused stream would otherwise hold a handler thread)."""
    viewer.publish_jpeg("left", frame(0, 1000))
    status, head, body = get(viewer.port, path, host=host, method=method)
    assert status == 403, head
    assert b"\xff\xd8" not in body
    assert viewer.stats()["viewer"]["mjpeg_clients"] == 0


@pytest.mark.parametrize("path", [
    "/../../../../etc/passwd", "/stream/../../web.py", "/frame/..%2f..%2fweb.py.jpg", "/robot_view.js/../web.py",
    "/frame/../frame/left.jpg", "/stream/left.mjpg/..", "/%2e%2e/%2e%2e/etc/passwd", "/..\\..\\web.py",
    "/frame/left.jpg%00.html", "/frame/LEFT.jpg", "/frame/left.jpg.", "/stats/", "/viewer.html", "/web.py",
])
def test_paths_outside_the_routes_get_404_and_no_file(viewer, path):
    """The viewer serves no folder, so ``..``, encoded dots, backslashes or NULs reach no
    file: each such path is a plain 404 and the body holds nothing of the package's files."""
    viewer.publish_jpeg("left", frame(0, 1000))
    status, head, body = get(viewer.port, path)
    assert status == 404, (path, head)
    assert body == b"not found"


@pytest.mark.parametrize("path, content_type", [
    ("/stats?x=1&y=2", "application/json"), ("/?reload=1", "text/html"), ("/frame/left.jpg?t=123", "image/jpeg"),
    ("/stats?", "application/json"), ("/robot_view.js?v=2", "text/javascript"),
])
def test_query_strings_are_ignored(viewer, path, content_type):
    """Browsers and scripts add cache-busting query strings: the route answers as without."""
    viewer.publish_jpeg("left", frame(0, 1000))
    status, head, _ = get(viewer.port, path)
    assert status == 200 and f"Content-Type: {content_type}".encode() in head


def test_a_stream_with_a_query_string_streams(viewer, publisher):
    """``/stream/left.mjpg?t=...`` (a page forcing a fresh stream) gets the stream."""
    sock = socket.create_connection(("127.0.0.1", viewer.port), timeout=DEADLINE_S)
    client = MjpegClient.__new__(MjpegClient)
    client.sock, client.buffer = sock, b""
    sock.sendall(b"GET /stream/left.mjpg?t=1700000000 HTTP/1.1\r\n" + HOST + b"\r\n")
    client.read_head()
    new_frames(client, 2)
    client.close()


@pytest.mark.parametrize("request_bytes, status", [
    (b"HEAD /stats HTTP/1.1\r\n" + HOST + b"\r\n", 200),
    (b"HEAD /frame/left.jpg HTTP/1.1\r\n" + HOST + b"\r\n", 503),     # no frame yet: headers only
    (b"HEAD /nope HTTP/1.1\r\n" + HOST + b"\r\n", 404),
    (b"OPTIONS * HTTP/1.1\r\n" + HOST + b"\r\n", 405),
    (b"OPTIONS /stream/left.mjpg HTTP/1.1\r\n" + HOST + b"Origin: http://evil.example\r\n"
     b"Access-Control-Request-Method: GET\r\n\r\n", 405),
    (b"POST /stream/left.mjpg HTTP/1.1\r\n" + HOST + b"Content-Length: 5\r\n\r\nhello", 405),
    (b"POST /stats HTTP/1.1\r\n" + HOST + b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", 405),
    (b"TRACE / HTTP/1.1\r\n" + HOST + b"\r\n", 405),
    (b"CONNECT 127.0.0.1:22 HTTP/1.1\r\n" + HOST + b"\r\n", 405),
    (b"get / HTTP/1.1\r\n" + HOST + b"\r\n", 501),                    # methods are case-sensitive
    (b"PROPFIND / HTTP/1.1\r\n" + HOST + b"\r\n", 501),
])
def test_methods_other_than_get_are_answered_with_headers_only_or_an_error(viewer, capsys, request_bytes, status):
    """HEAD gets the route's status and no body (the 503 before a first frame too); OPTIONS
    (a CORS preflight included), POST with a body, TRACE and CONNECT get 405 with Allow;
    an unknown method gets the stdlib's 501. No CORS header lets another origin in."""
    answer = exchange(viewer.port, request_bytes)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert status_of(answer) == status, answer[:300]
    assert b"Access-Control-Allow-Origin" not in head
    if request_bytes.startswith(b"HEAD"):
        assert body == b""
    if status == 405:
        assert b"Allow: GET, HEAD" in head
    assert viewer.stats()["viewer"]["mjpeg_clients"] == 0
    err = capsys.readouterr().err
    assert HANDLER_ESCAPE not in err and "Traceback" not in err, err[-3000:]


def test_a_refused_post_with_a_large_body_still_gets_its_405(viewer):
    """A form or script POSTing a large body is told 405, and the viewer is unharmed."""
    body = b"x" * MEGABYTE
    answer = exchange(viewer.port, b"POST / HTTP/1.1\r\n" + HOST + f"Content-Length: {len(body)}\r\n\r\n".encode()
                      + body, half_close=False)
    assert answer == b"" or status_of(answer) == 405
    viewer.publish_jpeg("left", frame(0, 1000))
    assert_viewer_serves(viewer)


def test_a_stream_client_that_sent_more_and_left_is_let_go_while_no_frame_comes(viewer):
    """A stream client that sends a byte after its request (a pipelined request, a stray
    newline) and then closes, while the video is paused: the handler used to peek at that
    byte forever and never see the EOF behind it, so each such client left a thread and a
    socket behind, counted in ``mjpeg_clients``, until the viewer stopped."""
    viewer.publish_jpeg("left", frame(0, 1000))
    threads_before, fds_before = threading.active_count(), open_fds()
    for extra in (b"\r\n", b"GET / HTTP/1.1\r\n" + HOST + b"\r\n", b"x" * 100_000):
        client = MjpegClient(viewer.port)
        client.read_head()
        client.read_part()        # the one frame there is; no newer one comes
        client.sock.sendall(extra)
        client.close()
    wait_for(lambda: viewer.stats()["viewer"]["mjpeg_clients"] == 0, "the streams of the clients gone to end")
    wait_for(lambda: threading.active_count() <= threads_before and open_fds() <= fds_before,
             "their threads and sockets to go")


# --------------------------------------------------------------------------- many connections
def test_connections_past_the_limit_evict_the_oldest_unfinished_and_bound_the_descriptors():
    """A local program opening connections without end (the port is open to every local
    user) must not take the station's descriptors: the stdlib's server gave each one a
    thread and a socket, until the process could open no file and its accept loop spun on
    EMFILE. Past MAX_CONNECTIONS a connection evicts the oldest one still waiting for its
    request (so the flood cannot lock a browser out either: tests/test_web_viewer_slow_clients.py);
    a stream opened before keeps getting frames; once the flood ends, new clients are served
    again."""
    from teleop.video.http_server import MAX_CONNECTIONS

    # A client timeout longer than the flood takes, so that no flooding connection is let
    # go by it: every one past the limit must be evicted, not timed out.
    viewer = VideoWebViewer(port=0, streams=("left",), client_timeout_s=10.0).start()
    publisher = Publisher(viewer)
    streaming = MjpegClient(viewer.port)
    streaming.read_head()
    threads_before, fds_before = threading.active_count(), open_fds()
    flood = []
    try:
        for _ in range(MAX_CONNECTIONS + 40):
            sock = socket.create_connection(("127.0.0.1", viewer.port), timeout=DEADLINE_S)
            sock.sendall(b"GET / HTTP/1.1\r\n")   # and never the end of the request
            flood.append(sock)
        # Each one past the limit evicted the oldest still waiting for its request (a 408,
        # or a bare close): the newest MAX_CONNECTIONS - 1 hold the slots (the stream one).
        kept = MAX_CONNECTIONS - 1
        for sock in flood[:-kept]:
            answer = sock.recv(65536)
            assert answer == b"" or answer.startswith(b"HTTP/1.0 408"), answer[:100]
        wait_for(lambda: viewer._server._connections == MAX_CONNECTIONS, "the evicted handlers to end")
        # Server side: at most one thread and one socket per served connection (the flood's
        # own client sockets are in this process too).
        assert threading.active_count() <= threads_before + MAX_CONNECTIONS
        assert open_fds() <= fds_before + len(flood) + MAX_CONNECTIONS
        new_frames(streaming, 3)
        for sock in flood:
            sock.close()
        wait_for(lambda: threading.active_count() <= threads_before, "the flood's handlers to end")
        assert_viewer_serves(viewer)
        new_frames(streaming, 2)
    finally:
        for sock in flood:
            sock.close()
        streaming.close()
        publisher.stop()
        viewer.stop()
