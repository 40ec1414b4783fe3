"""Review of the browser-facing parts: the operator's and the jog's web viewer, the video
sender's socket. Server behaviour over raw HTTP; page behaviour in headless Chromium,
driven through the DevTools protocol (a small stdlib client below; skipped without
Chromium)."""

from __future__ import annotations

import base64
import itertools
import json
import os
import shutil
import socket
import struct
import subprocess
import tempfile
import threading
import time
import urllib.request

import numpy as np
import pytest

from teleop.jog.web import JogWebView
from teleop.video.codec import JpegCodec
from teleop.video.sender import VideoSender
from teleop.video.sources import SyntheticSceneSource
from teleop.video.web import MJPEG_BOUNDARY, VideoWebViewer
from tests.test_web_robot_view import find_chromium


def raw_request(port: int, request: bytes, timeout_s: float = 3.0) -> bytes:
    """Send ``request`` as is and return everything the server answers until it closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as sock:
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


def status_and_headers(answer: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), {k.lower(): v for k, v in headers.items()}, body


def get(port: int, path: str, host: str | None = "127.0.0.1") -> tuple[int, dict[str, str], bytes]:
    host_line = f"Host: {host}\r\n" if host is not None else ""
    return status_and_headers(raw_request(port, f"GET {path} HTTP/1.0\r\n{host_line}\r\n".encode()))


# --------------------------------------------------------------------------- server
def test_a_slow_mjpeg_client_falls_only_a_few_frames_behind():
    """The kernel used to buffer ~2 MB (60+ frames) for a client that reads slowly: it saw
    ever older video, and frame skipping never acted."""
    viewer = VideoWebViewer(port=0, streams=("left",)).start()
    client = socket.socket()
    try:
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        client.connect(("127.0.0.1", viewer.port))
        client.sendall(b"GET /stream/left.mjpg HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        frames = 150
        for i in range(frames):   # ~30 KB frames, each filled with its index; the client reads none yet
            viewer.publish_jpeg("left", b"\xff\xd8" + i.to_bytes(4, "big") * 7500 + b"\xff\xd9")
            time.sleep(0.005)     # lets the handler write (and block) between frames
        client.settimeout(5)
        newest, received = (frames - 1).to_bytes(4, "big") * 16, b""
        while newest not in received:
            chunk = client.recv(1 << 20)
            assert chunk, "stream ended before the newest frame"
            received += chunk
    finally:
        client.close()
        viewer.stop()
    parts_before_newest = received.count(f"--{MJPEG_BOUNDARY}\r\n".encode()) - 1
    assert parts_before_newest <= 10, f"{parts_before_newest} old frames queued before the newest"


@pytest.mark.parametrize("make", [
    lambda: VideoWebViewer(port=0, streams=("left",)),
    lambda: JogWebView(_robot(), port=0).viewer,
], ids=["operator", "jog"])
def test_dns_rebinding_is_refused_and_nosniff_is_sent(make):
    viewer = make().start()
    try:
        for host in ("127.0.0.1", f"127.0.0.1:{viewer.port}", f"localhost:{viewer.port}", "[::1]:80", None):
            status, headers, _ = get(viewer.port, "/stats", host)
            assert status == 200, host
            assert headers["x-content-type-options"] == "nosniff"
        for host in (f"evil.example:{viewer.port}", "127.0.0.1.evil.example", "[::2]:80"):
            status, headers, _ = get(viewer.port, "/stats", host)
            assert status == 403, host
            assert headers["x-content-type-options"] == "nosniff"
    finally:
        viewer.stop()


def test_head_is_answered_and_other_methods_get_405():
    viewer = VideoWebViewer(port=0, streams=("left",)).start()
    try:
        viewer.publish_jpeg("left", b"\xff\xd8" + bytes(500) + b"\xff\xd9")
        page = raw_request(viewer.port, b"HEAD / HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        status, headers, body = status_and_headers(page)
        assert status == 200 and int(headers["content-length"]) > 1000 and body == b""
        status, headers, body = status_and_headers(
            raw_request(viewer.port, b"HEAD /stream/left.mjpg HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n"))
        assert status == 200 and headers["content-type"].startswith("multipart/x-mixed-replace") and body == b""
        for method in ("POST", "PUT", "DELETE", "OPTIONS"):
            answer = raw_request(viewer.port, f"{method} / HTTP/1.0\r\nHost: 127.0.0.1\r\n"
                                              "Content-Length: 0\r\n\r\n".encode())
            status, headers, _ = status_and_headers(answer)
            assert status == 405 and headers["allow"] == "GET, HEAD", method
    finally:
        viewer.stop()


def test_listen_backlog_takes_a_burst_of_reconnecting_tabs():
    viewer = VideoWebViewer(port=0, streams=("left",)).start()
    try:
        assert viewer._server.request_queue_size >= 64
    finally:
        viewer.stop()


def test_requests_served_counts_concurrent_requests_exactly():
    viewer = VideoWebViewer(port=0, streams=("left",)).start()
    try:
        def fetch_stats() -> None:
            for _ in range(10):
                urllib.request.urlopen(viewer.url + "stats", timeout=5).read()

        threads = [threading.Thread(target=fetch_stats) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert viewer.stats()["viewer"]["requests_served"] == 80
    finally:
        viewer.stop()


def test_page_has_an_icon_and_each_view_its_own_captions():
    viewer = VideoWebViewer(port=0, streams=("left",))
    assert '<link rel="icon" href="data:,">' in viewer.page_html()
    assert "left eye" in viewer.page_html()
    jog = JogWebView(_robot(), port=0)
    page = jog.viewer.page_html()
    assert '<link rel="icon" href="data:,">' in page and "camera eye" not in page
    labels = jog._pose_document()["labels"]
    assert "ghost" not in labels and not any("delayed" in text for text in labels.values())


def test_jog_pose_document_is_built_once_per_control_tick(monkeypatch):
    robot = _robot()
    jog = JogWebView(robot, port=0)
    built = []
    original = jog._view.document
    monkeypatch.setattr(jog._view, "document", lambda **kw: built.append(1) or original(**kw))
    q = robot.home_configuration()
    jog.publish(None, q, q, {"tick": 1})
    first = [jog._pose_document() for _ in range(5)]
    assert len(built) == 1 and all(document is first[0] for document in first)
    jog.publish(None, q, q, {"tick": 2})
    assert jog._pose_document()["info"]["tick"] == 2 and len(built) == 2


def test_jog_port_in_use_names_the_option(tmp_path, capsys):
    from teleop.cli import main
    from teleop.jog.render import FACING_CAMERA, write_tag_video

    video = tmp_path / "tag.avi"
    write_tag_video(video, lambda t: (FACING_CAMERA, np.array([0.0, 0.0, 0.5])), duration_s=0.2, fps=10.0)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert main(["jog", "--camera", str(video), "--view", "web", "--port", str(port)]) == 1
    assert f"teleop jog: error: --port {port}: Address already in use" in capsys.readouterr().err


# --------------------------------------------------------------------------- sender
def test_video_sender_to_loopback_is_bound_to_loopback():
    receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    receiver.bind(("127.0.0.1", 0))
    receiver.settimeout(2)
    with VideoSender(receiver.getsockname()) as sender:
        sent = sender.send_encoded(b"\xff\xd8" + bytes(3000) + b"\xff\xd9", 1.0, 1.0, 1.0)
        assert sent.complete and sender.stats.frames_sent == 1
        assert sender._sock.getsockname()[0] == "127.0.0.1"
        assert receiver.recv(65536)
    receiver.close()


def test_video_sender_to_another_host_is_connected_not_on_every_interface():
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("192.0.2.1", 9))   # TEST-NET: nothing is sent, only a route is chosen
        local_ip = probe.getsockname()[0]
    except OSError:
        pytest.skip("no non-loopback IPv4 route on this machine")
    finally:
        probe.close()
    if local_ip.startswith("127."):
        pytest.skip("no non-loopback IPv4 address on this machine")
    receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    receiver.bind((local_ip, 0))
    receiver.settimeout(2)
    with VideoSender(receiver.getsockname()) as sender:
        assert sender.send_encoded(b"\xff\xd8" + bytes(3000) + b"\xff\xd9", 1.0, 1.0, 1.0).complete
        assert sender._sock.getsockname()[0] == local_ip
        assert sender.stats.frames_sent == 1 and sender.stats.datagrams_sent >= 1
        assert receiver.recv(65536)
    receiver.close()


_ROBOT = []


def _robot():
    from teleop.robot.model import RobotModel

    if not _ROBOT:
        _ROBOT.append(RobotModel())
    return _ROBOT[0]


# --------------------------------------------------------------------------- browser
class _WebSocket:
    """Just enough of a WebSocket client for the DevTools protocol (text frames)."""

    def __init__(self, url: str) -> None:
        host_port, path = url[len("ws://"):].split("/", 1)
        host, port = host_port.split(":")
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET /{path} HTTP/1.1\r\nHost: {host_port}\r\nUpgrade: websocket\r\n"
                           f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                           "Sec-WebSocket-Version: 13\r\n\r\n").encode())
        buffer = b""
        while b"\r\n\r\n" not in buffer:
            buffer += self.sock.recv(4096)
        self.buffer = buffer.split(b"\r\n\r\n", 1)[1]

    def _read(self, n: int) -> bytes:
        while len(self.buffer) < n:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise EOFError("DevTools connection closed")
            self.buffer += chunk
        out, self.buffer = self.buffer[:n], self.buffer[n:]
        return out

    def send(self, text: str) -> None:
        data, mask = text.encode(), os.urandom(4)
        n = len(data)
        header = bytes([0x81]) + (bytes([0x80 | n]) if n < 126 else
                                  bytes([0x80 | 126]) + struct.pack(">H", n) if n < 65536 else
                                  bytes([0x80 | 127]) + struct.pack(">Q", n))
        self.sock.sendall(header + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

    def recv(self) -> str:
        message = b""
        while True:
            first, second = self._read(2)
            n = second & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._read(8))[0]
            message += self._read(n)
            if first & 0x80:
                return message.decode()


class Browser:
    """Headless Chromium with one page, driven through the DevTools protocol."""

    def __init__(self, chromium: str, width: int = 1400) -> None:
        self.profile = tempfile.mkdtemp(prefix="teleop-cdp-")
        self.process = subprocess.Popen(
            [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--remote-debugging-port=0", f"--user-data-dir={self.profile}", f"--window-size={width},900",
             "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        port_file = os.path.join(self.profile, "DevToolsActivePort")
        deadline = time.monotonic() + 60.0    # a cold start on a loaded machine: seconds, not 10
        while time.monotonic() < deadline:
            if os.path.exists(port_file) and open(port_file).read().count("\n") >= 1:
                break
            time.sleep(0.05)
        port = open(port_file).read().split()[0]
        targets = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json", timeout=5))
        self.ws = _WebSocket(next(t for t in targets if t["type"] == "page")["webSocketDebuggerUrl"])
        self.ids = itertools.count(1)

    def call(self, method: str, **params) -> dict:
        request_id = next(self.ids)
        self.ws.send(json.dumps({"id": request_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == request_id:
                return message.get("result", message.get("error"))

    def eval(self, expression: str):
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        return result.get("result", {}).get("value")

    def wait_for(self, expression: str, timeout_s: float = 20.0):
        """Evaluate until truthy; returns the last value (falsy when it never became true)."""
        deadline = time.monotonic() + timeout_s
        while True:
            value = self.eval(expression)
            if value or time.monotonic() > deadline:
                return value
            time.sleep(0.1)

    def close(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(5)
        except subprocess.TimeoutExpired:
            self.process.kill()
        shutil.rmtree(self.profile, ignore_errors=True)


@pytest.fixture
def browser():
    chromium = find_chromium()
    if chromium is None:
        pytest.skip("chromium not found (apt-get install chromium, or set TELEOP_CHROMIUM): browser test skipped")
    instance = Browser(chromium)
    yield instance
    instance.close()


def _jpeg(width: int, height: int, seed: int = 0) -> bytes:
    return JpegCodec().encode(SyntheticSceneSource(width, height).render(seed))


def _posed_viewer(port: int = 0, **kwargs) -> VideoWebViewer:
    robot = _robot()
    home = robot.home_configuration()
    from teleop.video.robot_view import RobotPoseView

    view = RobotPoseView(robot)
    return VideoWebViewer(port=port, streams=("left",), robot_pose_provider=lambda: view.document(None, home, home),
                          **kwargs)


class Publisher:
    """Publishes a frame every 50 ms (Chrome shows an MJPEG part once the next one starts)."""

    def __init__(self, viewer: VideoWebViewer, jpeg: bytes) -> None:
        self.viewer, self.jpeg, self.stop_event = viewer, jpeg, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop_event.wait(0.05):
            self.viewer.publish_jpeg("left", self.jpeg)

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join()


STREAMING = "document.querySelector('img.video').src.includes('/stream/')"
IMAGE_WIDTH = "document.querySelector('img.video').naturalWidth"


def test_camera_image_reconnects_after_the_server_restarts(browser):
    first = _posed_viewer().start()
    port = first.port
    publishers = [Publisher(first, _jpeg(160, 120))]
    second = None
    try:
        browser.call("Page.navigate", url=first.url)
        assert browser.wait_for(f"{STREAMING} && {IMAGE_WIDTH} === 160")
        first.stop()
        assert browser.wait_for("document.getElementById('stats').textContent.startsWith('stats unavailable')")
        second = _posed_viewer(port=port).start()   # the operator restarted: another image size
        publishers.append(Publisher(second, _jpeg(64, 48)))
        assert browser.wait_for(f"{IMAGE_WIDTH} === 64"), browser.eval(IMAGE_WIDTH)
    finally:
        for publisher in publishers:
            publisher.stop()
        first.stop()
        if second is not None:
            second.stop()


def test_pose_view_drops_stale_poses_when_the_server_is_gone(browser):
    viewer = _posed_viewer().start()
    try:
        browser.call("Page.navigate", url=viewer.url)
        assert browser.wait_for("window.teleopRobotView.lastDocument() !== null")
    finally:
        viewer.stop()
    assert browser.wait_for("window.teleopRobotView.lastDocument() === null"), "old poses still drawn"


def test_polls_do_not_pile_up_while_the_server_stalls(browser):
    stalled = threading.Event()
    released = threading.Event()
    in_flight = {"stats": 0, "pose": 0}
    most = {"stats": 0, "pose": 0}
    lock = threading.Lock()

    def counted(name, answer):
        def provider():
            with lock:
                in_flight[name] += 1
                most[name] = max(most[name], in_flight[name])
            try:
                if stalled.is_set():
                    released.wait(5)
                return answer()
            finally:
                with lock:
                    in_flight[name] -= 1
        return provider

    viewer = _posed_viewer(stats_provider=counted("stats", lambda: {"ok": 1}))
    viewer.robot_pose_provider = counted("pose", viewer.robot_pose_provider)
    viewer.start()
    try:
        browser.call("Page.navigate", url=viewer.url)
        assert browser.wait_for("window.teleopRobotView.lastDocument() !== null")
        most.update(stats=0, pose=0)
        stalled.set()
        time.sleep(1.5)   # old page: a /robot-pose request every 100 ms, up to Chrome's per-host limit
        observed = dict(most)
        released.set()
        stalled.clear()
        assert observed["pose"] <= 1 and observed["stats"] <= 1, observed
    finally:
        released.set()
        viewer.stop()


def test_hidden_tab_releases_its_stream(browser):
    viewer = _posed_viewer().start()
    viewer.publish_jpeg("left", _jpeg(160, 120))

    def stream_clients() -> int:
        return viewer.stats()["viewer"]["mjpeg_clients"]

    def wait_clients(expected: int) -> int:
        deadline = time.monotonic() + 20       # a guard against never, as wait_for's
        while stream_clients() != expected and time.monotonic() < deadline:
            time.sleep(0.1)
        return stream_clients()

    set_hidden = ("Object.defineProperty(document, 'hidden', {{value: {0}, configurable: true}});"
                  "Object.defineProperty(document, 'visibilityState', {{value: '{1}', configurable: true}});"
                  "document.dispatchEvent(new Event('visibilitychange')); true")
    try:
        browser.call("Page.navigate", url=viewer.url)
        assert browser.wait_for(STREAMING) and wait_clients(1) == 1
        browser.eval(set_hidden.format("true", "hidden"))
        assert wait_clients(0) == 0, "a hidden tab still holds its MJPEG connection"
        browser.eval(set_hidden.format("false", "visible"))
        assert wait_clients(1) == 1
    finally:
        viewer.stop()


def test_jog_page_legend_caption_and_narrow_window(browser):
    robot = _robot()
    jog = JogWebView(robot, port=0).start()
    q = robot.home_configuration()
    jog.publish(SyntheticSceneSource(160, 120).render(0), q, q, {"frames": 1})
    try:
        browser.call("Emulation.setDeviceMetricsOverride", width=600, height=900, deviceScaleFactor=1, mobile=False)
        browser.call("Page.navigate", url=jog.url)
        legend = "[...document.querySelectorAll('.legend-text')].map(e => e.textContent).join(' / ')"
        assert browser.wait_for(f"window.teleopRobotView.lastDocument() !== null && {legend}.length > 0")
        text = browser.eval(legend)
        assert "ghost" not in text and "delayed" not in text and "no data yet" not in text, text
        assert "camera eye" not in browser.eval("document.querySelector('figcaption').textContent")
        width, window_width = browser.eval("[document.documentElement.scrollWidth, innerWidth]")
        assert width <= window_width, (width, window_width)
    finally:
        jog.stop()
