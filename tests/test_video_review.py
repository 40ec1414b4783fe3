"""Video path review: forged frames that cost memory, and MJPEG clients that left."""

import json
import socket
import time
import urllib.request

import cv2
import numpy as np
import pytest

from teleop.video import wire
from teleop.video.codec import MAX_DECODE_PIXELS, CodecError, JpegCodec, jpeg_size
from teleop.video.receiver import VideoReceiver
from teleop.video.sources import SyntheticSceneSource
from teleop.video.web import VideoWebViewer


def _declaring(width: int, height: int) -> bytes:
    """A valid 8x8 JPEG whose frame header (SOF0) is rewritten to declare width x height px."""
    jpeg = bytearray(JpegCodec().encode(np.zeros((8, 8, 3), np.uint8)))
    sof = jpeg.find(b"\xff\xc0")
    jpeg[sof + 5 : sof + 9] = height.to_bytes(2, "big") + width.to_bytes(2, "big")
    return bytes(jpeg)


def _single_chunk(payload: bytes, frame_id: int = 1) -> bytes:
    return wire.HEADER.pack(wire.MAGIC, wire.VERSION, 0, frame_id, 0, 1, len(payload), 1, 0,
                            1.0, 1.0, 1.0, 1.0) + payload


def test_jpeg_size_reads_the_frame_header():
    image = SyntheticSceneSource(320, 240).render(0)
    assert jpeg_size(JpegCodec().encode(image)) == (320, 240)
    ok, progressive = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_PROGRESSIVE, 1])
    assert ok and jpeg_size(progressive.tobytes()) == (320, 240)
    assert jpeg_size(_declaring(5000, 6000)) == (5000, 6000)
    for bad in (b"\xff\xd8", b"\xff\xd8\xff\xda\x00\x02", b"\x89PNG\r\n\x1a\n"):
        with pytest.raises(CodecError):
            jpeg_size(bad)


def test_forged_jpeg_declaring_a_huge_image_is_not_decoded():
    """One ~700-byte datagram declaring 20000x20000 px used to cost 1.2 GB and 6 s of
    decoding (libjpeg fills the missing data with grey) and was displayed as a frame."""
    huge = _declaring(5000, 5000)  # 25 Mpx > MAX_DECODE_PIXELS: quick to show, same path
    assert 5000 * 5000 > MAX_DECODE_PIXELS
    with pytest.raises(CodecError):
        JpegCodec.decode(huge)
    with VideoReceiver(clock=lambda: 0.0) as rx:
        assert rx.handle_datagram(_single_chunk(huge), 0.0) is None
        assert rx.stats.decode_errors == 1 and rx.stats.frames_completed == 0
        # A genuine frame still goes through.
        good = JpegCodec().encode(SyntheticSceneSource(64, 48).render(0))
        frame = rx.handle_datagram(_single_chunk(good, frame_id=2), 0.0)
        assert frame is not None and frame.image.shape == (48, 64, 3)


def test_payload_of_another_image_format_is_not_decoded():
    """The codec byte says JPEG: a PNG (or TIFF...) payload must not reach OpenCV's other decoders."""
    ok, png = cv2.imencode(".png", np.zeros((8, 8, 3), np.uint8))
    assert ok
    with pytest.raises(CodecError):
        JpegCodec.decode(png.tobytes())


def test_forged_chunks_cannot_hold_more_than_the_announced_frame_bytes():
    """Each slice was only checked against frame_bytes on its own: 65535 forged chunks of a
    frame could pile up far more than the frame's (and max_frame_bytes') size."""
    frame_bytes, piece = 4000, 1000
    with VideoReceiver(clock=lambda: 0.0, decode=False) as rx:
        for index in range(20):
            datagram = wire.HEADER.pack(wire.MAGIC, wire.VERSION, 0, 7, index, 100, frame_bytes, 1, 0,
                                        1.0, 1.0, 1.0, 1.0) + bytes(piece)
            assert rx.handle_datagram(datagram, 0.0) is None
        (partial,) = rx._partial.values()
        held = sum(len(c) for c in partial.chunks if c is not None)
        assert held <= frame_bytes
        assert rx.stats.malformed["inconsistent"] == 20 - frame_bytes // piece


def test_mjpeg_clients_that_leave_before_any_frame_are_released():
    """Page reloads while no video arrives: each handler waited for a frame forever (thread
    and socket kept, ``mjpeg_clients`` counting clients long gone)."""
    viewer = VideoWebViewer(port=0, streams=("left",)).start()
    try:
        for _ in range(5):
            with socket.create_connection(("127.0.0.1", viewer.port), timeout=5) as client:
                client.sendall(b"GET /stream/left.mjpg HTTP/1.0\r\n\r\n")
                assert client.recv(1000).startswith(b"HTTP/1.0 200")
        deadline = time.monotonic() + 20.0        # a guard against never, not a timing check
        while time.monotonic() < deadline:
            with urllib.request.urlopen(viewer.url + "stats", timeout=5) as response:
                clients = json.loads(response.read())["viewer"]["mjpeg_clients"]
            if clients == 0:
                break
            time.sleep(0.1)
        assert clients == 0
        # A client that stays still gets the frames.
        with urllib.request.urlopen(viewer.url + "stream/left.mjpg", timeout=5) as response:
            time.sleep(0.7)  # past a 0.5 s wait slice: a connected client is not taken as gone
            jpeg = JpegCodec().encode(SyntheticSceneSource(64, 48).render(0))
            viewer.publish_jpeg("left", jpeg)
            body = response.read(200)
            assert b"Content-Type: image/jpeg" in body
    finally:
        viewer.stop()
