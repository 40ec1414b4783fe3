"""Web viewer: page, stats JSON, single frame and one MJPEG part over 127.0.0.1."""

import json
import urllib.error
import urllib.request

import pytest

from teleop.video.codec import JpegCodec, psnr_db
from teleop.video.sources import SyntheticSceneSource
from teleop.video.web import MJPEG_BOUNDARY, VideoWebViewer


def read_mjpeg_part(response) -> bytes:
    """Read one multipart part (headers + body) and return its body."""
    line = response.readline()
    while line.strip() == b"":
        line = response.readline()
    assert line.strip() == f"--{MJPEG_BOUNDARY}".encode()
    headers = {}
    while (line := response.readline().strip()):
        name, value = line.decode().split(":", 1)
        headers[name.strip().lower()] = value.strip()
    assert headers["content-type"] == "image/jpeg"
    return response.read(int(headers["content-length"]))


def test_page_stats_frame_and_mjpeg():
    image = SyntheticSceneSource(160, 120).render(0)
    jpeg = JpegCodec().encode(image)
    viewer = VideoWebViewer(port=0, stats_provider=lambda: {"video": {"frames": 1}})
    with viewer:
        base = viewer.url
        with urllib.request.urlopen(base, timeout=5) as response:
            page = response.read().decode()
        assert 'id="robot-view"' in page and "teleopRobotView" in page and "renderRobotView" in page
        assert "/stream/left.mjpg" in page and "/stream/right.mjpg" in page

        with pytest.raises(urllib.error.HTTPError) as error:
            urllib.request.urlopen(base + "frame/left.jpg", timeout=5)
        assert error.value.code == 503

        viewer.publish_jpeg("left", jpeg)
        with urllib.request.urlopen(base + "frame/left.jpg", timeout=5) as response:
            assert response.read() == jpeg

        with urllib.request.urlopen(base + "stream/left.mjpg", timeout=5) as response:
            assert response.headers["Content-Type"].startswith("multipart/x-mixed-replace")
            assert read_mjpeg_part(response) == jpeg  # the latest frame comes first
            newer = SyntheticSceneSource(160, 120).render(5)
            viewer.publish_image("left", newer)  # a new frame is pushed to the open stream
            pushed = read_mjpeg_part(response)
            assert pushed != jpeg
            # It is the new image, BGR as given: the default codec keeps > 30 dB
            # (test_video_codec); the first frame or a red/blue swap is far below.
            assert psnr_db(newer, JpegCodec.decode(pushed)) > 30.0
            assert psnr_db(image, JpegCodec.decode(pushed)) < 25.0

        with urllib.request.urlopen(base + "stats", timeout=5) as response:
            stats = json.loads(response.read())
        assert stats["video"] == {"frames": 1}
        assert stats["viewer"]["streams"]["left"]["frames_published"] == 2

        with pytest.raises(urllib.error.HTTPError) as error:
            urllib.request.urlopen(base + "stream/nope.mjpg", timeout=5)
        assert error.value.code == 404
    with pytest.raises(RuntimeError):
        _ = viewer.port  # stopped


def test_stop_ends_open_mjpeg_stream():
    viewer = VideoWebViewer(port=0, streams=("left",)).start()
    viewer.publish_jpeg("left", JpegCodec().encode(SyntheticSceneSource(64, 48).render(0)))
    response = urllib.request.urlopen(viewer.url + "stream/left.mjpg", timeout=5)
    read_mjpeg_part(response)
    viewer.stop(timeout_s=2.0)  # must not hang on the open client
    # Closing delimiter, then end of stream: the handler returned and closed the connection.
    assert response.read() == f"\r\n--{MJPEG_BOUNDARY}--\r\n".encode()
    response.close()


def test_a_client_gone_before_the_stream_headers_prints_no_traceback(capsys):
    """A browser that resets the connection as it asks for the MJPEG stream (reload, tab
    closed) used to print a ConnectionResetError traceback on the operator's console."""
    import socket
    import struct
    import time

    from teleop.video.web import VideoWebViewer

    viewer = VideoWebViewer(port=0).start()
    try:
        viewer.publish_jpeg("left", b"\xff\xd8" + bytes(1000) + b"\xff\xd9")
        for _ in range(20):
            s = socket.socket()
            s.connect(("127.0.0.1", viewer.port))
            s.sendall(b"GET /stream/left.mjpg HTTP/1.0\r\n\r\n")
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()                                  # RST at once
        # Until the handlers have read the 20 requests (bounded): a handler not yet run
        # cannot fail the test; then every stream they began has ended.
        deadline = time.monotonic() + 30
        while viewer.stats()["viewer"]["requests_served"] < 20 and time.monotonic() < deadline:
            time.sleep(0.05)
        while viewer.stats()["viewer"]["mjpeg_clients"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert viewer.stats()["viewer"]["mjpeg_clients"] == 0
    finally:
        viewer.stop()
    assert "Traceback" not in capsys.readouterr().err
