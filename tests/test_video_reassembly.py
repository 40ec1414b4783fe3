"""Datagram format, chunking and reassembly: reordering, duplicates, loss, garbage, MAC hooks."""

import hashlib
import hmac
import random
import socket
import struct

import numpy as np
import pytest

from teleop.video import wire
from teleop.video.codec import JpegCodec
from teleop.video.receiver import VideoReceiver
from teleop.video.sender import VideoSender
from teleop.video.sources import SyntheticSceneSource

MAX_DATAGRAM = 300  # small datagrams so a small test image spans several chunks
KEY = b"test-key"


def _tag(message: bytes) -> bytes:
    return hmac.new(KEY, message, hashlib.sha256).digest()[:16]


def _verify(message: bytes, tag: bytes) -> bool:
    return hmac.compare_digest(_tag(message), tag)


@pytest.fixture(scope="module")
def jpegs():
    scene = SyntheticSceneSource(96, 72)
    return [JpegCodec().encode(scene.render(i)) for i in range(4)]


@pytest.fixture
def receiver():
    with VideoReceiver(frame_timeout_s=0.1, max_frames_in_flight=4, clock=lambda: 0.0) as rx:
        yield rx


def datagrams_of(payload, frame_id, stream_id=0, capture_s=None, authenticate=None, tag_len=0):
    send_times = iter(np.arange(1000) * 1e-4 + 10.0)
    return list(
        wire.packetize(
            payload, stream_id=stream_id, frame_id=frame_id, codec=1,
            capture_s=float(frame_id) if capture_s is None else capture_s,
            available_s=frame_id + 0.001, encode_end_s=frame_id + 0.002,
            send_clock=lambda: float(next(send_times)), max_datagram_bytes=MAX_DATAGRAM,
            authenticate=authenticate, tag_len=tag_len,
        )
    )


def test_header_is_50_bytes_and_datagrams_respect_size_limit(jpegs):
    assert wire.HEADER_BYTES == 50
    grams = datagrams_of(jpegs[0], 0)
    assert len(grams) > 3
    assert all(len(g) <= MAX_DATAGRAM for g in grams)
    header, piece = wire.parse(grams[0])
    assert (header.chunk_index, header.chunk_count, header.frame_bytes) == (0, len(grams), len(jpegs[0]))
    assert b"".join(wire.parse(g)[1] for g in grams) == jpegs[0]


def test_shuffled_and_duplicated_chunks_reassemble_once(receiver, jpegs):
    grams = datagrams_of(jpegs[0], 0)
    noisy = grams + grams[1:3]  # two duplicates
    random.Random(1).shuffle(noisy)
    completed = [f for i, g in enumerate(noisy) if (f := receiver.handle_datagram(g, 1.0 + i * 1e-3))]
    assert len(completed) == 1
    frame = completed[0]
    assert frame.payload == jpegs[0]
    assert np.array_equal(frame.image, JpegCodec.decode(jpegs[0]))
    # Duplicates that arrive after completion are ignored too (no ghost partial frame).
    assert receiver.stats.duplicate_chunks == 2
    assert receiver.frames_in_flight == 0
    t = frame.timing
    assert (t.capture_s, t.available_s, t.encode_end_s) == (0.0, 0.001, 0.002)
    assert t.send_start_s == 10.0 and t.send_end_s == pytest.approx(10.0 + (len(grams) - 1) * 1e-4)
    assert t.first_arrival_s == 1.0 and t.complete_s >= t.first_arrival_s
    assert t.playout_s is None and t.display_s is None


def test_lost_chunk_drops_only_that_frame(receiver, jpegs):
    lossy = datagrams_of(jpegs[0], 0)
    missing = lossy.pop(2)
    for g in lossy:
        assert receiver.handle_datagram(g, 1.0) is None
    assert receiver.frames_in_flight == 1
    later = [f for fid in (1, 2) for g in datagrams_of(jpegs[fid], fid) if (f := receiver.handle_datagram(g, 1.05))]
    assert [f.timing.frame_id for f in later] == [1, 2]
    assert receiver.expire(1.05) == 0  # not timed out yet (0.1 s)
    assert receiver.expire(1.2) == 1
    assert receiver.stats.frames_dropped_timeout == 1 and receiver.frames_in_flight == 0
    # The lost chunk finally shows up: ignored, does not resurrect the frame.
    assert receiver.handle_datagram(missing, 1.3) is None
    assert receiver.frames_in_flight == 0
    assert receiver.stats.frames_completed == 2


def test_interleaved_frames_and_streams(receiver, jpegs):
    grams = datagrams_of(jpegs[0], 5, stream_id=0) + datagrams_of(jpegs[1], 5, stream_id=1)
    grams += datagrams_of(jpegs[2], 6, stream_id=0)
    random.Random(7).shuffle(grams)
    done = {(f.timing.stream_id, f.timing.frame_id): f.payload
            for g in grams if (f := receiver.handle_datagram(g, 0.0))}
    assert done == {(0, 5): jpegs[0], (1, 5): jpegs[1], (0, 6): jpegs[2]}


def test_table_of_frames_in_flight_is_bounded(receiver, jpegs):
    for fid in range(6):  # first chunk only of 6 frames; table holds 4
        receiver.handle_datagram(datagrams_of(jpegs[0], fid)[0], arrival_s=fid * 1e-3)
    assert receiver.frames_in_flight == 4
    assert receiver.stats.frames_dropped_evicted == 2


def _forge(**overrides):
    fields = dict(magic=wire.MAGIC, version=wire.VERSION, stream_id=0, frame_id=1, chunk_index=0, chunk_count=1,
                  frame_bytes=4, codec=1, tag_len=0, capture_s=0.0, available_s=0.0, encode_end_s=0.0, send_s=0.0)
    fields.update(overrides)
    return wire.HEADER.pack(*fields.values())


def test_garbage_datagrams_are_counted_never_raised(receiver, jpegs):
    rng = np.random.default_rng(0)
    garbage = [
        b"",
        b"TV",
        rng.bytes(49),
        rng.bytes(1200),
        _forge(magic=b"XX") + b"data",
        _forge(version=9) + b"data",
        _forge(chunk_index=3, chunk_count=2) + b"data",
        _forge(chunk_count=0) + b"data",
        _forge(frame_bytes=2) + b"data",  # payload longer than the frame
        _forge() ,  # no payload
        _forge(capture_s=float("nan")) + b"data",
        _forge(codec=7) + b"data",
        _forge(frame_bytes=1 << 30, chunk_count=2) + b"data",
        _forge(tag_len=200) + b"data",
    ]
    for g in garbage:
        assert receiver.handle_datagram(g, 0.0) is None
    stats = receiver.stats.as_dict()
    assert stats["malformed_total"] == len(garbage)
    assert {"short", "magic", "version", "layout", "timestamp", "codec", "too_large"} <= set(stats["malformed"])
    # Chunk contradicting the first chunk of its frame.
    grams = datagrams_of(jpegs[0], 9)
    receiver.handle_datagram(grams[0], 0.0)
    receiver.handle_datagram(datagrams_of(jpegs[1], 9)[1], 0.0)
    assert receiver.stats.malformed["inconsistent"] == 1
    # The receiver still works afterwards.
    assert [f for g in datagrams_of(jpegs[2], 10) if (f := receiver.handle_datagram(g, 0.0))]


def test_authentication_hooks(jpegs):
    with VideoReceiver(verify=_verify, clock=lambda: 0.0) as rx:
        good = datagrams_of(jpegs[0], 0, authenticate=_tag, tag_len=16)
        assert all(len(g) <= MAX_DATAGRAM for g in good)
        assert [f for g in good if (f := rx.handle_datagram(g, 0.0))][0].payload == jpegs[0]
        tampered = bytearray(datagrams_of(jpegs[1], 1, authenticate=_tag, tag_len=16)[0])
        tampered[60] ^= 0xFF
        assert rx.handle_datagram(bytes(tampered), 0.0) is None
        assert rx.handle_datagram(datagrams_of(jpegs[1], 2)[0], 0.0) is None
        assert rx.stats.malformed == {"auth": 1, "unauthenticated": 1}

    def broken_verify(message, tag):
        raise RuntimeError("bug in hook")

    with VideoReceiver(verify=broken_verify) as rx:
        assert rx.handle_datagram(good[0], 0.0) is None
        assert rx.stats.malformed["auth"] == 1


def test_sender_datagrams_on_the_wire(jpegs):
    sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sink.bind(("127.0.0.1", 0))
    sink.settimeout(2.0)
    try:
        with VideoSender(sink.getsockname(), stream_id=wire.StreamId.RIGHT, authenticate=_tag) as sender:
            image = SyntheticSceneSource(320, 240).render(3)
            sent = sender.send_image(image, capture_s=5.0, available_s=5.001)
            assert sent.complete and sent.chunk_count > 8
            assert sent.parity_count == -(-sent.chunk_count // wire.DEFAULT_FEC_GROUP)
            grams = [sink.recv(65536) for _ in range(sent.chunk_count + sent.parity_count)]
    finally:
        sink.close()
    assert max(len(g) for g in grams) <= 1200      # parity datagrams included
    every = [wire.parse(g, _verify)[0] for g in grams]
    headers = [h for h in every if not h.is_parity]
    assert {h.stream_id for h in every} == {1}
    assert [h.chunk_index for h in headers] == list(range(sent.chunk_count))
    # The slices, then one parity per interleaved group, continuing the slices' round of groups.
    n, k = sent.chunk_count, sent.parity_count
    assert [(i, h.chunk_index) for i, h in enumerate(every) if h.is_parity] == [
        (n + j, (n + j) % k) for j in range(k)]
    assert headers[0].capture_s == 5.0 and headers[0].available_s == 5.001
    assert headers[0].encode_end_s <= headers[0].send_s <= headers[-1].send_s
    assert struct.unpack_from("!2sB", grams[0]) == (b"TV", wire.VERSION) and wire.VERSION == 2


def test_restarted_sender_reusing_frame_ids_is_not_taken_for_duplicates(receiver, jpegs):
    first = [f for g in datagrams_of(jpegs[0], 0, capture_s=50.0) if (f := receiver.handle_datagram(g, 0.0))]
    again = [f for g in datagrams_of(jpegs[1], 0, capture_s=2.0) if (f := receiver.handle_datagram(g, 0.0))]
    assert len(first) == len(again) == 1 and again[0].payload == jpegs[1]
    assert receiver.stats.duplicate_chunks == 0
