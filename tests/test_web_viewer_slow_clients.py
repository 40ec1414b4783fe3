"""The operator's web viewer (teleop/video/web.py; its server, teleop/video/http_server.py)
against clients that hold connections without finishing their requests, on the real server over real loopback sockets.

Two gaps this holds the viewer to: a client trickling a byte every few seconds restarted
the socket timeout at each byte and kept its connection for ever (slowloris): now every
request must arrive whole within ``REQUEST_DEADLINE_S``; and one local program holding
every slot with unfinished requests locked every browser out (503): now a newcomer evicts
the connection that has waited longest for its request, and only slots serving a request
read whole (MJPEG streams) still earn a 503.

The deadline and the number of slots are shortened by monkeypatching the module's
constants (read at each accept). Timing bounds are hang guards only, far above what a
loaded 2-core machine needs.
"""

from __future__ import annotations

import select
import socket
import time

import pytest

from teleop.video import http_server
from teleop.video.web import VideoWebViewer
from tests.test_fuzz_web_viewer import (
    DEADLINE_S,
    HANDLER_ESCAPE,
    HOST,
    MjpegClient,
    Publisher,
    frame,
    get,
    new_frames,
    wait_for,
)

#: Shortened request deadline of these tests [s].
SHORT_DEADLINE_S = 1.0
#: Pause between two trickled bytes [s]: well under the socket timeout (which the bytes
#: keep restarting) and the deadline, so that only the deadline can close the connection.
TRICKLE_PERIOD_S = 0.3
#: Slots of the viewer in the tests that fill them all.
FEW_SLOTS = 4


def server_of(viewer: VideoWebViewer) -> http_server.ViewerHTTPServer:
    server = viewer._server
    assert isinstance(server, http_server.ViewerHTTPServer)
    return server


def connections(viewer: VideoWebViewer) -> int:
    """Connections whose handler thread still runs (evicted ones included)."""
    return server_of(viewer)._connections


def assert_all_connections_ended(viewer: VideoWebViewer) -> None:
    """Once every client is gone the viewer's bookkeeping is back to zero, exactly."""
    server = server_of(viewer)
    wait_for(lambda: connections(viewer) == 0, "every connection to end")
    with server._connections_lock:
        assert server._connections == 0 and server._released == 0 and not server._records


def unfinished(viewer: VideoWebViewer, partial: bytes) -> socket.socket:
    """A connection that sends ``partial`` and never the end of its request; returns once
    the viewer has admitted it, so that the order of admission is the order of the calls."""
    before = connections(viewer)
    sock = socket.create_connection(("127.0.0.1", viewer.port), timeout=DEADLINE_S)
    if partial:
        sock.sendall(partial)
    wait_for(lambda: connections(viewer) > before, "the viewer to admit the connection")
    return sock


def is_open(sock: socket.socket) -> bool:
    """True while the viewer neither answered nor closed (nothing to read, no EOF)."""
    return not select.select([sock], [], [], 0)[0]


def answer_until_closed(sock: socket.socket) -> bytes:
    """What the viewer sent before closing (a reset after it counts as closed too)."""
    answer = b""
    try:
        while chunk := sock.recv(65536):
            answer += chunk
    except ConnectionResetError:
        pass
    return answer


def assert_closed_by_the_viewer(sock: socket.socket) -> None:
    """The viewer closed the connection: with its best-effort 408, or nothing at all."""
    answer = answer_until_closed(sock)
    assert answer == b"" or answer.startswith(b"HTTP/1.0 408"), answer[:200]


@pytest.fixture()
def viewer():
    # A client timeout far above what the tests take: whatever closes a connection here is
    # the request deadline or an eviction, never the socket timeout.
    instance = VideoWebViewer(port=0, streams=("left",), client_timeout_s=DEADLINE_S).start()
    instance.publish_jpeg("left", frame(0, 1000))
    yield instance
    instance.stop()


@pytest.fixture()
def few_slots(monkeypatch):
    monkeypatch.setattr(http_server, "MAX_CONNECTIONS", FEW_SLOTS)


# --------------------------------------------------------------------------- request deadline
@pytest.mark.parametrize("head, trickled", [
    (b"GET /" , b"a"),                                  # one endless request line: one readline
    (b"GET / HTTP/1.1\r\n" + HOST + b"X-Slow: ", b"a"),  # an endless header
    (b"GET / HTTP/1.1\r\n", HOST),                      # whole header lines, one at a time
], ids=["request line", "header", "header lines"])
def test_a_trickling_client_is_closed_by_the_request_deadline(viewer, monkeypatch, capsys, head, trickled):
    """A client sending its request a little at a time, each piece well within the socket
    timeout, is closed once its request is REQUEST_DEADLINE_S old (with a 408 when it can
    be read), however the stdlib reads it; meanwhile and after, the viewer serves others."""
    monkeypatch.setattr(http_server, "REQUEST_DEADLINE_S", SHORT_DEADLINE_S)
    start = time.monotonic()
    sock = unfinished(viewer, head)
    sock.settimeout(TRICKLE_PERIOD_S)
    answer = b""
    try:
        while True:
            assert time.monotonic() - start < 5 * SHORT_DEADLINE_S, "the trickling client was never closed"
            try:
                chunk = sock.recv(65536)
            except TimeoutError:     # nothing from the viewer yet: the next piece
                sock.sendall(trickled)
                continue
            answer += chunk
            if not chunk or answer.endswith(b"request not received in time"):
                break
    except (ConnectionResetError, BrokenPipeError):   # a piece sent after the viewer closed
        pass
    finally:
        sock.close()
    # The viewer closed the connection, not the socket timeout (far longer) nor the test.
    assert time.monotonic() - start >= 0.9 * SHORT_DEADLINE_S
    assert answer == b"" or answer.startswith(b"HTTP/1.0 408"), answer[:200]
    status, _, body = get(viewer.port, "/frame/left.jpg")
    assert status == 200 and body.startswith(b"\xff\xd8")
    assert_all_connections_ended(viewer)
    err = capsys.readouterr().err
    assert HANDLER_ESCAPE not in err and "Traceback" not in err, err[-3000:]


def test_a_request_read_whole_is_not_closed_by_the_deadline(viewer, monkeypatch):
    """The deadline is for receiving the request only: a stream that has been served for
    longer than it keeps getting frames."""
    monkeypatch.setattr(http_server, "REQUEST_DEADLINE_S", SHORT_DEADLINE_S)
    publisher = Publisher(viewer, size=1000)
    client = MjpegClient(viewer.port)
    try:
        client.read_head()
        end = time.monotonic() + 1.5 * SHORT_DEADLINE_S
        while time.monotonic() < end:
            client.read_part()
        new_frames(client, 3)
    finally:
        client.close()
        publisher.stop()
    assert_all_connections_ended(viewer)


# --------------------------------------------------------------------------- full house
def test_unfinished_requests_in_every_slot_do_not_lock_a_browser_out(viewer, few_slots, capsys):
    """Every slot held by a connection that never finishes its request (nothing sent, half
    a request line, headers without their end): a browser still gets the page and a frame.
    The connection waiting longest was evicted to make room; the others stay open."""
    holders = [unfinished(viewer, partial) for partial in (
        b"GET / HTTP/1.1\r\n" + HOST,  # the oldest: evicted first
        b"",
        b"GET /sta",
        b"GET /stream/left.mjpg HTTP/1.1\r\n" + HOST,
    )]
    assert connections(viewer) == FEW_SLOTS
    try:
        status, _, body = get(viewer.port, "/")
        assert status == 200 and b'id="robot-view"' in body
        assert_closed_by_the_viewer(holders[0])
        assert all(is_open(sock) for sock in holders[1:])
        # Its slot is free again: the next one is served without evicting anybody else.
        status, _, body = get(viewer.port, "/frame/left.jpg")
        assert status == 200 and body.startswith(b"\xff\xd8")
        assert all(is_open(sock) for sock in holders[1:])
    finally:
        for sock in holders:
            sock.close()
    assert_all_connections_ended(viewer)
    err = capsys.readouterr().err
    assert HANDLER_ESCAPE not in err and "Traceback" not in err, err[-3000:]


def test_a_newcomer_evicts_an_unfinished_request_and_never_a_stream(viewer, few_slots):
    """Streams and unfinished requests share the slots: a new stream client evicts the
    oldest unfinished request, even one younger than a stream, and the streams go on."""
    publisher = Publisher(viewer, size=1000)
    old_stream = MjpegClient(viewer.port)
    old_stream.read_head()
    waiting = [unfinished(viewer, b"GET /"), unfinished(viewer, b"GET / HTTP/1.1\r\n")]
    young_stream = MjpegClient(viewer.port)
    young_stream.read_head()
    newcomer = None
    try:
        assert connections(viewer) == FEW_SLOTS
        newcomer = MjpegClient(viewer.port)
        newcomer.read_head()
        new_frames(newcomer, 2)
        assert_closed_by_the_viewer(waiting[0])
        assert is_open(waiting[1])
        for client in (old_stream, young_stream):
            new_frames(client, 2)
    finally:
        for client in [old_stream, young_stream] + ([newcomer] if newcomer else []):
            client.close()
        for sock in waiting:
            sock.close()
        publisher.stop()
    assert_all_connections_ended(viewer)


def test_every_slot_streaming_refuses_a_newcomer_and_the_streams_go_on(viewer, few_slots):
    """Every slot serving a request read whole (an MJPEG stream each): a newcomer gets the
    503 as before, a complete request or not, and every stream keeps getting new frames.
    Once one stream ends, the next client is served."""
    publisher = Publisher(viewer, size=1000)
    streams = []
    try:
        for _ in range(FEW_SLOTS):
            streams.append(MjpegClient(viewer.port))
            streams[-1].read_head()
            streams[-1].read_part()
        wait_for(lambda: viewer.stats()["viewer"]["mjpeg_clients"] == FEW_SLOTS, "every stream to start")
        for request in (b"GET / HTTP/1.1\r\n" + HOST + b"\r\n", b"GET / HTTP/1.1\r\n"):   # unfinished too
            with socket.create_connection(("127.0.0.1", viewer.port), timeout=DEADLINE_S) as sock:
                try:
                    sock.sendall(request)
                except (ConnectionResetError, BrokenPipeError):   # refused before it was sent
                    pass
                answer = answer_until_closed(sock)
            assert answer.startswith(b"HTTP/1.0 503") and b"too many connections" in answer, answer[:200]
        for client in streams:
            new_frames(client, 2)
        streams.pop().close()
        wait_for(lambda: connections(viewer) < FEW_SLOTS, "the closed stream to end")
        status, _, body = get(viewer.port, "/frame/left.jpg")
        assert status == 200 and body.startswith(b"\xff\xd8")
    finally:
        for client in streams:
            client.close()
        publisher.stop()
    assert_all_connections_ended(viewer)


def test_a_flood_of_unfinished_requests_keeps_the_newest_and_bounded(viewer, few_slots, capsys):
    """A program opening connections without end and finishing none: each newcomer evicts
    the oldest waiting one, so the newest hold the slots, the server's connections stay
    within the limit once the evicted ones have ended, a stream opened before keeps getting
    frames, and once the flood ends a browser is served and the count is back to zero."""
    publisher = Publisher(viewer, size=1000)
    streaming = MjpegClient(viewer.port)
    streaming.read_head()
    flood = []
    try:
        for _ in range(3 * FEW_SLOTS):
            sock = socket.create_connection(("127.0.0.1", viewer.port), timeout=DEADLINE_S)
            sock.sendall(b"GET / HTTP/1.1\r\n")
            flood.append(sock)
        kept = FEW_SLOTS - 1    # the stream holds a slot
        for sock in flood[:-kept]:
            assert_closed_by_the_viewer(sock)
        wait_for(lambda: connections(viewer) == FEW_SLOTS, "the evicted connections to end")
        assert all(is_open(sock) for sock in flood[-kept:])
        new_frames(streaming, 3)
        for sock in flood:
            sock.close()
        wait_for(lambda: connections(viewer) == 1, "the flood's connections to end")
        status, _, body = get(viewer.port, "/")
        assert status == 200 and b'id="robot-view"' in body
    finally:
        for sock in flood:
            sock.close()
        streaming.close()
        publisher.stop()
    assert_all_connections_ended(viewer)
    err = capsys.readouterr().err
    assert HANDLER_ESCAPE not in err and "Traceback" not in err, err[-3000:]


def test_the_best_effort_answers_never_wait_on_a_full_socket():
    """The 408 of an eviction is sent from the accept loop, on a handler's socket that has a
    timeout: CPython's send waits up to that timeout for room despite MSG_DONTWAIT. With the
    buffer full, the answer is dropped at once instead."""
    ours, theirs = socket.socketpair()
    try:
        ours.setblocking(False)
        try:
            while True:
                ours.send(b"x" * 65536)
        except BlockingIOError:
            pass
        ours.settimeout(DEADLINE_S)
        start = time.monotonic()
        http_server._send_without_waiting(ours, http_server._REQUEST_TIMEOUT)
        assert time.monotonic() - start < DEADLINE_S / 2
    finally:
        ours.close()
        theirs.close()
