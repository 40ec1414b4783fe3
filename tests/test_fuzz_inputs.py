"""Property-based fuzzing of everything that parses bytes from outside the process.

The product's rule: bad input gets a clear error and loses nothing; malformed, replayed or
oversized packets are dropped and counted, never crash anything. Each property below feeds
a parser arbitrary bytes, or valid input damaged the way a network or a disk damages it
(bits flipped, cut short, extended, reordered, duplicated), and checks that only the
parser's documented exception escapes (or, where the API is "drop and count", that nothing
escapes and the drop is counted). Valid input still round-trips, and no NaN or infinity
comes out of a decoder that was given finite numbers.

Examples are drawn deterministically (tests/conftest.py: derandomize=True), so CI fails
for a change and not for a draw; ``TELEOP_FUZZ=explore`` draws new ones for a fuzzing
session. Every failure hypothesis found is kept as an explicit ``@example``.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import math
import struct
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from retarget.human import MotionFormatError
from retarget.readers import read_motion
from retarget.readers.bvh import read_bvh_file
from retarget.readers.mvnx import write_mvnx
from retarget.readers.vr_trackers import write_vr_csv
from retarget.readers.xsens_csv import DamagedJointAnglesWarning
from retarget.references import FLAT_SIZE, RobotReferences
from teleop import json_input
from teleop.inputs import mvn_protocol as mvn
from teleop.inputs.openvr_input import OpenVRConfig
from teleop.inputs.xsens_live import XsensLiveSource
from teleop.net import protocol
from teleop.net.auth import derive_mac_key
from teleop.net.packet_filter import PacketFilter
from teleop.net.secret import SecretError, load_secret, read_secret_file
from teleop.record import Recorder, RecordingFormatError, open_recording
from teleop.video import wire
from teleop.video.codec import CodecError, JpegCodec, jpeg_size
from teleop.video.receiver import VideoReceiver
from tests.conftest import fuzz_examples

SECRET = b"a fuzzing secret of more than 16 bytes"
#: Finite values in the ranges a station really sends (metres, radians, seconds).
REALISTIC = st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False)
TIMES = st.floats(0.0, 1e6, allow_nan=False, allow_infinity=False)
#: Any float64 a forger can put on the wire: NaN and infinities included.
ANY_FLOAT = st.floats(allow_nan=True, allow_infinity=True)


def _flip_bits(data: bytes, flips: list[tuple[int, int]]) -> bytes:
    """``data`` with bit ``bit`` of byte ``position % len`` flipped for each (position, bit)."""
    out = bytearray(data)
    for position, bit in flips:
        if out:
            out[position % len(out)] ^= 1 << bit
    return bytes(out)


#: A damage done to one datagram or file: bits flipped, cut short, or extended.
DAMAGE = st.one_of(
    st.tuples(st.just("flip"), st.lists(st.tuples(st.integers(0, 1 << 16), st.integers(0, 7)), min_size=1,
                                        max_size=4)),
    st.tuples(st.just("cut"), st.integers(0, 1 << 16)),
    st.tuples(st.just("extend"), st.binary(min_size=1, max_size=32)),
    # Positions as fractions of the length: small integers (which hypothesis favours) hit
    # only the first bytes of a long file, its magic and header.
    st.tuples(st.just("flip_rel"), st.lists(st.tuples(st.floats(0, 1), st.integers(0, 7)), min_size=1, max_size=4)),
    st.tuples(st.just("cut_rel"), st.floats(0, 1)),
)


_FOLDERS = itertools.count()


def _fresh(tmp_path):
    """A new empty folder for one example: tmp_path is shared by all the examples of a
    test, and a file an earlier example left (an .asf beside an .amc) changes what is read."""
    folder = tmp_path / f"example{next(_FOLDERS)}"
    folder.mkdir()
    return folder


def _damage(data: bytes, damage) -> bytes:
    kind, arg = damage
    if kind == "flip":
        return _flip_bits(data, arg)
    if kind == "flip_rel":
        return _flip_bits(data, [(int(fraction * (len(data) - 1)), bit) for fraction, bit in arg])
    if kind == "cut":
        return data[:arg % max(len(data), 1)]
    if kind == "cut_rel":
        return data[:int(arg * len(data))]
    return data + arg


# =========================================================================== teleop.net.protocol
@st.composite
def references(draw) -> RobotReferences:
    """Valid references: finite values, the optional extras and validity mask drawn."""
    flat = np.array(draw(st.lists(REALISTIC, min_size=FLAT_SIZE, max_size=FLAT_SIZE)))
    extras = {}
    for name, size in (("head_orientation", 4), ("left_leg", 6), ("right_leg", 6)):
        if draw(st.booleans()):
            extras[name] = np.array(draw(st.lists(REALISTIC, min_size=size, max_size=size)))
    if draw(st.booleans()):
        extras["valid"] = np.array(draw(st.lists(st.booleans(), min_size=FLAT_SIZE, max_size=FLAT_SIZE)))
    return RobotReferences.from_flat(draw(TIMES), flat, **extras)


def _arrays(size_min: int, size_max: int):
    return st.lists(REALISTIC, min_size=size_min, max_size=size_max).map(np.array)


FEEDBACK = st.builds(
    protocol.Feedback,
    last_ref_seq=st.integers(0, 2**64 - 1), last_ref_time=TIMES, forward_delay=REALISTIC,
    forward_delay_std=REALISTIC, clock_offset=REALISTIC, watchdog_state=st.integers(0, 255),
    compensation_state=st.integers(0, 255), packets_accepted=st.integers(0, 2**32 - 1),
    packets_dropped=st.integers(0, 2**32 - 1),
    executed=st.none() | _arrays(FLAT_SIZE, FLAT_SIZE), measured_com_xy=st.none() | _arrays(2, 2),
    measured_q=st.none() | _arrays(1, 64), commanded_q=st.none() | _arrays(1, 64),
)
MESSAGES = st.one_of(
    references(),
    st.builds(protocol.ClockPing, st.integers(0, 2**32 - 1)),
    st.builds(protocol.ClockPong, st.integers(0, 2**32 - 1), TIMES, TIMES),
    FEEDBACK,
    st.builds(protocol.VideoReport, REALISTIC, REALISTIC, REALISTIC, st.integers(0, 2**32 - 1),
              st.integers(0, 2**32 - 1)),
)
HEADER_FIELDS = st.fixed_dictionaries({
    "source_id": st.integers(1, 2**32 - 1), "stream_id": st.integers(0, 2**32 - 1),
    "seq": st.integers(1, 2**64 - 1), "send_time": TIMES,
})


def _references_equal(a: RobotReferences, b: RobotReferences) -> bool:
    def same(x, y):
        return (x is None and y is None) or (x is not None and y is not None and np.array_equal(x, y))

    sent_valid = None if a.valid is None or np.all(a.valid) else a.valid   # "all measured" is not sent
    return (a.t == b.t and np.array_equal(a.to_flat(), b.to_flat()) and same(a.head_orientation, b.head_orientation)
            and same(a.left_leg, b.left_leg) and same(a.right_leg, b.right_leg) and same(sent_valid, b.valid))


def _sign(body: bytes) -> bytes:
    """``body`` with the MAC a holder of ``SECRET`` appends (computed here, independently of
    the codec, as the wire format specifies it)."""
    return body + hmac.new(derive_mac_key(SECRET), body, hashlib.sha256).digest()[:protocol.MAC_SIZE]


def _decode_or_protocol_error(codec: protocol.PacketCodec, data: bytes) -> protocol.Packet | None:
    try:
        return codec.decode(data)
    except protocol.ProtocolError:
        return None


@settings(max_examples=fuzz_examples(200))
@given(message=MESSAGES, fields=HEADER_FIELDS)
def test_valid_packets_round_trip(message, fields):
    """Encode then decode gives back what was sent, for every built-in message and any
    header in range: the codec loses nothing of a valid packet (and, for references, turns
    no finite value into a non-finite one)."""
    codec = protocol.PacketCodec(SECRET)
    packet = codec.decode(codec.encode(message, **fields))
    assert (packet.source_id, packet.stream_id, packet.seq, packet.send_time) == (
        fields["source_id"], fields["stream_id"], fields["seq"], fields["send_time"])
    if isinstance(message, RobotReferences):
        assert _references_equal(message, packet.message)
        assert np.isfinite(packet.message.to_flat()).all()
    else:
        assert packet.message == message


@settings(max_examples=fuzz_examples(300))
@given(data=st.binary(max_size=2000))
@example(data=b"TELE\x01" + bytes(31) + bytes(16))       # a header announcing no payload, MAC all zero
def test_packet_decode_of_arbitrary_bytes_raises_only_protocol_errors(data):
    """Any datagram at all: decode returns a packet or raises a ProtocolError (whose reason
    names a drop counter), and the receiving filter never raises and counts the drop."""
    codec = protocol.PacketCodec(SECRET)
    assert _decode_or_protocol_error(codec, data) is None      # no forger guesses the MAC
    accept = PacketFilter(codec)
    assert accept.accept(data) is None
    assert accept.stats.dropped_total == 1 and "internal_error" not in accept.stats.dropped


@settings(max_examples=fuzz_examples(300))
@given(message=MESSAGES, fields=HEADER_FIELDS, damage=DAMAGE)
def test_damaged_packets_are_dropped_and_counted(message, fields, damage):
    """A valid packet with bits flipped, cut short or extended is refused with a
    ProtocolError (the MAC or the framing catches it), never decoded into something else,
    and the filter counts it."""
    codec = protocol.PacketCodec(SECRET)
    sent = codec.encode(message, **fields)
    data = _damage(sent, damage)
    assume(data != sent)
    assert _decode_or_protocol_error(codec, data) is None
    accept = PacketFilter(codec)
    assert accept.accept(data) is None and accept.stats.dropped_total == 1
    assert "internal_error" not in accept.stats.dropped


@settings(max_examples=fuzz_examples(300), suppress_health_check=[HealthCheck.too_slow])
@given(packet_type=st.sampled_from(list(protocol.PacketType)), message=MESSAGES, fields=HEADER_FIELDS,
       payload_damage=st.one_of(DAMAGE, st.tuples(st.just("replace"), st.binary(max_size=1200))),
       send_time=st.one_of(TIMES, ANY_FLOAT))
def test_signed_malformed_payloads_are_refused_cleanly(packet_type, message, fields, payload_damage, send_time):
    """A payload that does not parse, signed with the right key (a peer with a bug, or a
    holder of the secret): it gets past the MAC to the payload parser, which must refuse it
    with a MalformedPacket, not crash the receiver's loop (``internal_error``). A payload of
    another type's message under this type's byte is one such case. Whatever is accepted
    holds finite references and a finite send time."""
    codec = protocol.PacketCodec(SECRET)
    payload = protocol.PAYLOAD_CODECS[protocol.packet_type_of(message)].encode(message)
    kind, arg = payload_damage
    payload = arg if kind == "replace" else _damage(payload, payload_damage)
    header = protocol.HEADER.pack(protocol.MAGIC, protocol.PROTOCOL_VERSION, packet_type, 0, fields["source_id"],
                                  fields["stream_id"], fields["seq"], send_time, len(payload))
    data = _sign(header + payload)
    assume(len(data) <= protocol.DEFAULT_MAX_DATAGRAM)
    packet = _decode_or_protocol_error(codec, data)
    accept = PacketFilter(codec)
    assert (accept.accept(data) is None) == (packet is None)
    assert "internal_error" not in accept.stats.dropped
    if packet is not None:
        assert math.isfinite(packet.send_time)
        if isinstance(packet.message, RobotReferences):
            assert np.isfinite(packet.message.to_flat()).all() and math.isfinite(packet.message.t)


# =========================================================================== teleop.net.secret


@settings(max_examples=fuzz_examples(100), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(content=st.binary(max_size=80))
def test_secret_files_of_any_content(tmp_path, content):
    """A secret file of any bytes (owner-only): its stripped bytes, used verbatim, or a
    SecretError when too short; never a decoding error."""
    path = _fresh(tmp_path) / "secret"
    path.write_bytes(content)
    path.chmod(0o600)
    try:
        secret = read_secret_file(path)
    except SecretError:
        assert len(content.strip()) < 16
        return
    assert secret == content.strip() and len(secret) >= 16


@settings(max_examples=fuzz_examples(100), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=st.binary(min_size=1, max_size=40).filter(lambda b: b"\x00" not in b))
@example(value=b"passphrase-caf\xe9-0123456789")   # Latin-1 bytes: UnicodeEncodeError before the fix
def test_secret_from_the_environment_of_any_bytes(monkeypatch, value):
    """TELEOP_SECRET set to any bytes (a terminal in another locale): the secret, or a
    SecretError the station CLI reports as a user error; never a UnicodeEncodeError."""
    # os.environ holds what the process got as bytes decoded with surrogateescape.
    monkeypatch.setenv("TELEOP_SECRET", value.decode("utf-8", "surrogateescape"))
    try:
        secret = load_secret()
    except SecretError:
        return
    assert secret == value and len(secret) >= 16


# =========================================================================== teleop.video
def _datagrams(payload: bytes, fec_group: int, frame_id: int = 0) -> list[bytes]:
    return list(wire.packetize(payload, stream_id=0, frame_id=frame_id, codec=1, capture_s=float(frame_id),
                               available_s=frame_id + 0.001, encode_end_s=frame_id + 0.002,
                               send_clock=lambda: 10.0, max_datagram_bytes=wire.HEADER_BYTES + 2 + 16,
                               fec_group=fec_group))


def _receiver() -> VideoReceiver:
    # decode=False: reassembly is what is fuzzed here (JPEG decoding has its own property).
    return VideoReceiver(decode=False, clock=lambda: 0.0, max_frames_in_flight=4)


#: A datagram with a plausible video header (so that it gets past the magic and the version
#: to the layout checks and the reassembly) over an arbitrary body.
CRAFTED_DATAGRAM = st.builds(
    lambda fields, body: wire.HEADER.pack(wire.MAGIC, wire.VERSION, *fields) + body,
    st.tuples(st.integers(0, 1), st.integers(0, 2), st.integers(0, 4), st.integers(0, 4), st.integers(0, 64),
              st.sampled_from([1, 1 | wire.PARITY_FLAG, 2]), st.integers(0, 3),
              st.sampled_from([0.0, 1.0]), st.just(0.0), st.just(0.0), st.just(0.0)),
    st.binary(max_size=40),
)


@settings(max_examples=fuzz_examples(300))
@given(data=st.binary(max_size=200))
def test_video_parse_of_arbitrary_bytes_raises_only_malformed_datagram(data):
    """wire.parse of any bytes returns a header and a slice, or raises MalformedDatagram
    with a counter reason; a slice it returns lies inside the datagram."""
    try:
        header, piece = wire.parse(data)
    except wire.MalformedDatagram as error:
        assert error.reason
        return
    assert len(piece) <= len(data) - wire.HEADER_BYTES and header.chunk_index < header.chunk_count


@settings(max_examples=fuzz_examples(300))
@given(grams=st.lists(st.one_of(CRAFTED_DATAGRAM, st.binary(max_size=120)), min_size=1, max_size=12))
@example(grams=[
    # A frame of 10 bytes in 2 slices of 5: its last slice arrives 6 bytes long, then the
    # parity of its one group (G = 2). Rebuilding slice 0 XORed 6 bytes into a 5-byte parity:
    # OverflowError out of handle_datagram, i.e. the operator's video loop.
    wire.HEADER.pack(wire.MAGIC, wire.VERSION, 0, 0, 1, 2, 10, 1, 0, 0.0, 0.0, 0.0, 0.0) + b"\xff" * 6,
    wire.HEADER.pack(wire.MAGIC, wire.VERSION, 0, 0, 0, 2, 10, 1 | wire.PARITY_FLAG, 0, 0.0, 0.0, 0.0, 0.0)
    + b"\x00\x02" + bytes(5),
])
def test_video_receiver_never_raises_on_crafted_datagrams(grams):
    """Datagrams with plausible headers and inconsistent counts, lengths, parities and
    tags: the receiver never raises (its docstring: "nothing in here raises on network
    input"), counts every datagram, and a frame it completes has the announced size."""
    receiver = _receiver()
    try:
        for gram in grams:
            frame = receiver.handle_datagram(gram, 0.0)
            if frame is not None:
                assert len(frame.payload) == frame.timing.frame_bytes
        assert receiver.stats.datagrams == len(grams)
        receiver.expire(1.0)
        assert receiver.frames_in_flight == 0
    finally:
        receiver.close()


@settings(max_examples=fuzz_examples(200))
@given(payload=st.binary(min_size=1, max_size=120), fec_group=st.sampled_from([0, 2, 3]),
       order=st.randoms(use_true_random=False), duplicates=st.lists(st.integers(0, 100), max_size=3),
       dropped=st.lists(st.integers(0, 100), max_size=2, unique=True),
       damaged=st.lists(st.tuples(st.integers(0, 100), DAMAGE), max_size=2))
def test_video_reassembly_of_reordered_duplicated_damaged_datagrams(payload, fec_group, order, duplicates, dropped,
                                                                     damaged):
    """The datagrams of one frame, reordered, duplicated, some lost and some damaged: the
    receiver never raises. Undamaged, with no loss or one loss per parity group (parities
    kept), the frame completes exactly once with the bytes sent."""
    grams = _datagrams(payload, fec_group)
    n = len(grams)
    slices = [i for i, g in enumerate(grams) if not wire.parse(g)[0].is_parity]
    lost = {slices[d % len(slices)] for d in dropped}
    delivered = [g for i, g in enumerate(grams) if i not in lost] + [grams[d % n] for d in duplicates]
    order.shuffle(delivered)
    for index, damage in damaged:
        if delivered:
            k = index % len(delivered)
            delivered[k] = _damage(delivered[k], damage)
    receiver = _receiver()
    try:
        frames = [f for f in (receiver.handle_datagram(g, 0.0) for g in delivered) if f is not None]
    finally:
        receiver.close()
    intact = all(g in grams for g in delivered)
    groups = wire.parity_groups(len(slices), fec_group)
    recoverable = not lost or (groups and all(
        len(lost & set(wire.parity_group_members(g, len(slices), fec_group))) <= 1 for g in range(groups)))
    if intact and recoverable:
        assert [f.payload for f in frames] == [payload]
    assert receiver.stats.datagrams == len(delivered)


@settings(max_examples=fuzz_examples(150))
@given(payload=st.binary(min_size=1, max_size=120), fec_group=st.sampled_from([2, 3]),
       bodies=st.lists(st.binary(min_size=0, max_size=24), min_size=1, max_size=4),
       group_sizes=st.lists(st.integers(0, 6), min_size=1, max_size=4))
def test_video_parity_datagrams_that_disagree_never_crash(payload, fec_group, bodies, group_sizes):
    """Parity datagrams whose group size or XOR disagree with the frame's slices (forged,
    or from a sender with a bug) arrive before and after the slices, one slice missing: the
    receiver never raises, and whatever it completes has the announced size."""
    grams = _datagrams(payload, fec_group)
    first = wire.parse(grams[0])[0]
    forged = [wire.HEADER.pack(wire.MAGIC, wire.VERSION, 0, first.frame_id, k % max(first.chunk_count, 1),
                               first.chunk_count, first.frame_bytes, 1 | wire.PARITY_FLAG, 0, first.capture_s,
                               first.available_s, first.encode_end_s, 10.0)
              + struct.pack("!H", size) + body for k, (size, body) in enumerate(zip(group_sizes, bodies))]
    receiver = _receiver()
    try:
        for gram in forged + grams[1:] + forged:
            frame = receiver.handle_datagram(gram, 0.0)
            if frame is not None:
                assert len(frame.payload) == frame.timing.frame_bytes
    finally:
        receiver.close()


@pytest.fixture(scope="module")
def small_jpeg() -> bytes:
    image = np.zeros((16, 24, 3), np.uint8)
    image[4:12, 6:18] = (40, 200, 90)
    return JpegCodec().encode(image)


@settings(max_examples=fuzz_examples(300), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.one_of(st.binary(max_size=400), st.binary(max_size=400).map(lambda b: b"\xff\xd8" + b)),
       damage=st.none() | DAMAGE)
def test_jpeg_decode_of_arbitrary_or_damaged_bytes(small_jpeg, data, damage):
    """JpegCodec.decode of arbitrary bytes, or of a real JPEG damaged: an HxWx3 uint8 image
    or a CodecError, never an OpenCV exception (cv2.error) or a huge allocation."""
    payload = data if damage is None else _damage(small_jpeg, damage)
    for bytes_ in (payload, data):
        try:
            image = JpegCodec.decode(bytes_)
        except CodecError:
            continue
        assert image.dtype == np.uint8 and image.ndim == 3 and image.shape[2] == 3
        try:
            width, height = jpeg_size(bytes_)
        except CodecError:
            raise AssertionError("decoded a payload whose size cannot be read") from None
        assert width * height <= 4096 * 4096


@settings(max_examples=fuzz_examples(100), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(width=st.sampled_from([0, 1, 7, 8, 9, 16, 17, 24, 4097, 65535]),
       height=st.sampled_from([0, 1, 7, 8, 9, 16, 17, 24, 4097, 65535]),
       components=st.sampled_from([None, 0, 1, 2, 4, 255]))
def test_jpeg_with_forged_frame_header(small_jpeg, width, height, components):
    """A real JPEG whose frame header (SOF) declares another size or component count: a
    CodecError, or an image of the declared size, never a cv2.error or an image larger than
    MAX_DECODE_PIXELS."""
    data = bytearray(small_jpeg)
    sof = next(i for i in range(2, len(data) - 1) if data[i] == 0xFF and data[i + 1] == 0xC0)
    data[sof + 5:sof + 9] = struct.pack(">HH", height, width)
    if components is not None:
        data[sof + 9] = components
    try:
        image = JpegCodec.decode(bytes(data))
    except CodecError:
        return
    assert image.shape[:2] == (height, width) and image.shape[0] * image.shape[1] <= 4096 * 4096


# =========================================================================== teleop.inputs (MVN)
POSITIONS_M = st.floats(-3.0, 3.0, allow_nan=False, allow_infinity=False)


@st.composite
def mvn_poses(draw) -> dict:
    """A pose of some of the 23 segments: positions [m], unit quaternions (N-pose frames)."""
    names = draw(st.lists(st.sampled_from(list(mvn.SEGMENT_BY_ID.values())), min_size=1, max_size=23, unique=True))
    pose = {}
    for name in names:
        q = np.array(draw(st.lists(st.floats(-1, 1, allow_nan=False), min_size=4, max_size=4)))
        assume(np.linalg.norm(q) > 0.1)
        pose[name] = (np.array(draw(st.lists(POSITIONS_M, min_size=3, max_size=3))), q / np.linalg.norm(q))
    return pose


@settings(max_examples=fuzz_examples(150))
@given(pose=mvn_poses(), counter=st.integers(0, 2**32 - 1), code=st.integers(0, 2**32 - 1),
       max_bytes=st.sampled_from([1472, 24 + 44, 200]))
def test_mvn_pose_round_trips(pose, counter, code, max_bytes):
    """A type-02 pose encoded (split over datagrams when it does not fit one), parsed,
    reassembled and decoded gives back the same segments, positions and orientations (to
    the protocol's float32 precision; a quaternion and its negative are one rotation), all
    finite."""
    codec = mvn.MvnCodec(max_datagram_bytes=max_bytes)
    reassembler = mvn.Reassembler()
    whole = None
    for gram in codec.encode_pose(counter, code, pose):
        whole = reassembler.add(mvn.parse_header(gram), gram[24:])
    assert whole is not None
    message = codec.decode(*whole)
    assert message.header.sample_counter == counter and message.header.time_code_ms == code
    assert set(message.data) == set(pose) and message.ignored_items == 0
    for name, (position, q) in message.data.items():
        assert np.all(np.isfinite(position)) and np.all(np.isfinite(q))
        np.testing.assert_allclose(position, pose[name][0], atol=1e-5)
        assert abs(abs(float(np.dot(q, pose[name][1]))) - 1.0) < 1e-5


def _mvn_datagrams(draw_pose, counter: int) -> list[bytes]:
    codec = mvn.MvnCodec()
    return (codec.encode_pose(counter, 40 * counter, draw_pose) + codec.encode_center_of_mass(counter, 40 * counter,
                                                                                             np.array([0.1, 0, 1]))
            + codec.encode_joint_angles(counter, 40 * counter, np.zeros((22, 3)))
            + codec.encode_meta(counter, 0, {"name": "fuzz"})
            + codec.encode_scale(counter, 0, mvn.CharacterScale([("Pelvis", np.zeros(3))],
                                                                [(1, 2, "pHip", 0, np.ones(3))]))
            + codec.encode_time_code(counter, 40 * counter))


#: An MVN header over an arbitrary payload (to get past the magic to the item parsers).
CRAFTED_MVN = st.builds(
    lambda kind, fields, payload, sized: mvn.HEADER.pack(b"MXTP" + kind, *fields, len(payload) if sized else 0)
    + payload,
    st.sampled_from([b"01", b"02", b"03", b"12", b"13", b"20", b"24", b"25", b"05", b"99", b"0x"]),
    st.tuples(st.integers(0, 3), st.sampled_from([0, 1, 0x80, 0x81, 0x7F]), st.integers(0, 40),
              st.integers(0, 2**32 - 1), st.integers(0, 2), st.integers(0, 30), st.integers(0, 4),
              st.sampled_from([0, 40])),
    st.binary(max_size=200), st.booleans(),
)


@settings(max_examples=fuzz_examples(300))
@given(grams=st.lists(st.one_of(st.binary(max_size=120), CRAFTED_MVN), min_size=1, max_size=8),
       pose=mvn_poses(), damage=st.lists(st.tuples(st.integers(0, 100), DAMAGE), max_size=3))
def test_mvn_stream_never_raises(grams, pose, damage):
    """The live MVN source fed arbitrary datagrams, crafted headers over garbage, and a
    real stream (pose, CoM, joint angles, meta, scale, time code) with some datagrams
    damaged: handle_datagram never raises ("never raises on bad input"), counts every
    datagram, and every frame it produces holds finite positions and unit quaternions."""
    stream = _mvn_datagrams(pose, 1) + _mvn_datagrams(pose, 2)
    for index, harm in damage:
        k = index % len(stream)
        stream[k] = _damage(stream[k], harm)
    source = XsensLiveSource(("127.0.0.1", 0), notify=lambda line: None, clock=lambda: 0.0)
    try:
        everything = grams + stream + grams
        for k, gram in enumerate(everything):
            source.handle_datagram(gram, 0.01 * k, sender=("127.0.0.1", 9763))
        assert source.stats["datagrams"] == len(everything)
        for _t, frame_pose in source.frames_until(10.0):
            for position, q in frame_pose.values():
                assert np.all(np.isfinite(position)) and abs(np.linalg.norm(q) - 1.0) < 1e-6
    finally:
        source.close()


@settings(max_examples=fuzz_examples(300))
@given(gram=CRAFTED_MVN)
def test_mvn_codec_decode_raises_only_format_errors(gram):
    """parse_header then decode of any datagram with an MVN header: a message or an
    MvnFormatError (a ValueError), never struct.error, IndexError or ZeroDivisionError."""
    try:
        header = mvn.parse_header(gram)
        mvn.MvnCodec().decode(header, gram[mvn.HEADER.size:])
    except mvn.MvnFormatError:
        pass


# =========================================================================== JSON input
@settings(max_examples=fuzz_examples(300))
@given(text=st.one_of(st.binary(max_size=200), st.text(max_size=200),
                      st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                                   lambda inner: st.lists(inner, max_size=3)
                                   | st.dictionaries(st.text(max_size=8), inner, max_size=3),
                                   max_leaves=10).map(lambda v: json.dumps(v)),
                      st.integers(1, 3000).map(lambda n: "[" * n), st.integers(4000, 5000).map(lambda n: "9" * n)))
def test_json_loads_raises_only_value_error(text):
    """json_input.loads of anything: a value or a one-line ValueError (bad syntax, bad
    UTF-8, nesting too deep, an integer of too many digits); finite_float of what it returns
    is a finite float or a ValueError."""
    try:
        value = json_input.loads(text)
    except ValueError as error:
        assert "\n" not in str(error)
        return
    for item in (value, *(value.values() if isinstance(value, dict) else value if isinstance(value, list) else ())):
        try:
            assert math.isfinite(json_input.finite_float(item))
        except ValueError:
            pass


@settings(max_examples=fuzz_examples(200), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(doc=st.one_of(
    st.binary(max_size=100),
    st.fixed_dictionaries({}, optional={
        "trackers": st.dictionaries(st.text(max_size=6), st.one_of(st.text(max_size=6), st.just("pelvis"),
                                                                   st.integers()), max_size=2)
        | st.lists(st.integers(), max_size=2),
        "roles": st.dictionaries(st.sampled_from(["vive_tracker_waist", "x"]), st.sampled_from(["pelvis", "nose"]),
                                 max_size=2),
        "buttons": st.dictionaries(st.sampled_from(["left_grip", "right_x", "grip", "_"]),
                                   st.sampled_from(["emergency_stop", "fly"]), max_size=2),
        "rate_hz": st.one_of(st.floats(), st.integers(-5, 10**400), st.text(max_size=3), st.booleans(), st.none()),
        "other": st.none(),
    }).map(lambda d: json.dumps(d).encode()),
))
def test_openvr_config_load_raises_only_value_error(tmp_path, doc):
    """An OpenVR config file of any content: a config with a finite positive rate, or a
    ValueError naming the file (never a TypeError or AttributeError from the JSON's types)."""
    path = tmp_path / "vr.json"
    path.write_bytes(doc)
    try:
        config = OpenVRConfig.load(path)
    except ValueError as error:
        assert str(path) in str(error)
        return
    assert math.isfinite(config.rate_hz) and config.rate_hz > 0


# =========================================================================== retarget.readers

#: A CMU-like skeleton (the joint names read_bvh maps): (joint, parent, offset, end site).
_CMU_JOINTS = [
    ("Hips", None, (0, 0, 0), None),
    ("LeftUpLeg", "Hips", (1.2, -0.5, 0), None), ("LeftLeg", "LeftUpLeg", (0, -7.5, 0), None),
    ("LeftFoot", "LeftLeg", (0, -7.5, 0), None), ("LeftToeBase", "LeftFoot", (0, -0.8, 1.8), (0, 0, 0.9)),
    ("RightUpLeg", "Hips", (-1.2, -0.5, 0), None), ("RightLeg", "RightUpLeg", (0, -7.5, 0), None),
    ("RightFoot", "RightLeg", (0, -7.5, 0), None), ("RightToeBase", "RightFoot", (0, -0.8, 1.8), (0, 0, 0.9)),
    ("LowerBack", "Hips", (0, 0.5, 0), None), ("Spine", "LowerBack", (0, 2.5, 0), None),
    ("Spine1", "Spine", (0, 2.5, 0), None), ("Neck", "Spine1", (0, 0, 0), None),
    ("Neck1", "Neck", (0, 2.0, 0), None), ("Head", "Neck1", (0, 1.5, 0), (0, 2.5, 0)),
    ("LeftShoulder", "Spine1", (0, 0, 0), None), ("LeftArm", "LeftShoulder", (2.8, 0, 0), None),
    ("LeftForeArm", "LeftArm", (4.5, 0, 0), None), ("LeftHand", "LeftForeArm", (4.0, 0, 0), None),
    ("LeftHandIndex1", "LeftHand", (1.0, 0, 0), (0.6, 0, 0)),
    ("RightShoulder", "Spine1", (0, 0, 0), None), ("RightArm", "RightShoulder", (-2.8, 0, 0), None),
    ("RightForeArm", "RightArm", (-4.5, 0, 0), None), ("RightHand", "RightForeArm", (-4.0, 0, 0), None),
    ("RightHandIndex1", "RightHand", (-1.0, 0, 0), (-0.6, 0, 0)),
]


def _bvh_text(frames: int = 3) -> str:
    """A small valid BVH take of the CMU skeleton above (root: 6 channels, others: 3)."""
    children: dict[str | None, list] = {}
    for joint in _CMU_JOINTS:
        children.setdefault(joint[1], []).append(joint)
    lines = ["HIERARCHY"]

    def write(joint, depth: int) -> None:
        name, parent, offset, end = joint
        pad = "  " * depth
        lines.append(f"{pad}{'ROOT' if parent is None else 'JOINT'} {name}")
        lines.append(pad + "{")
        lines.append(f"{pad}  OFFSET {' '.join(map(str, offset))}")
        chans = "6 Xposition Yposition Zposition Zrotation Yrotation Xrotation" if parent is None \
            else "3 Zrotation Xrotation Yrotation"
        lines.append(f"{pad}  CHANNELS {chans}")
        for child in children.get(name, []):
            write(child, depth + 1)
        if end is not None:
            lines.extend([f"{pad}  End Site", pad + "  {", f"{pad}    OFFSET {' '.join(map(str, end))}", pad + "  }"])
        lines.append(pad + "}")

    write(children[None][0], 0)
    n_channels = 6 + 3 * (len(_CMU_JOINTS) - 1)
    lines += ["MOTION", f"Frames: {frames}", "Frame Time: 0.008333"]
    for k in range(frames):
        row = [0.0, 17.0, 0.1 * k, 1.0 + k, 2.0, 0.5] + [0.5 * k + 0.1 * (j % 5) for j in range(n_channels - 6)]
        lines.append(" ".join(f"{v:g}" for v in row))
    return "\n".join(lines) + "\n"


_ASF_BONES = [  # (bone, parent, direction, length)
    ("lhipjoint", "root", (1, -1, 0), 2.0), ("lfemur", "lhipjoint", (0, -1, 0), 7.0),
    ("ltibia", "lfemur", (0, -1, 0), 7.0), ("lfoot", "ltibia", (0, -0.3, 1), 2.0), ("ltoes", "lfoot", (0, 0, 1), 1.0),
    ("rhipjoint", "root", (-1, -1, 0), 2.0), ("rfemur", "rhipjoint", (0, -1, 0), 7.0),
    ("rtibia", "rfemur", (0, -1, 0), 7.0), ("rfoot", "rtibia", (0, -0.3, 1), 2.0), ("rtoes", "rfoot", (0, 0, 1), 1.0),
    ("lowerback", "root", (0, 1, 0), 2.0), ("upperback", "lowerback", (0, 1, 0), 2.0),
    ("thorax", "upperback", (0, 1, 0), 2.0), ("lowerneck", "thorax", (0, 1, 0), 1.5),
    ("head", "lowerneck", (0, 1, 0), 1.5),
    ("lclavicle", "thorax", (1, 0.2, 0), 3.0), ("lhumerus", "lclavicle", (1, 0, 0), 4.5),
    ("lradius", "lhumerus", (1, 0, 0), 4.0), ("lhand", "lradius", (1, 0, 0), 1.0),
    ("rclavicle", "thorax", (-1, 0.2, 0), 3.0), ("rhumerus", "rclavicle", (-1, 0, 0), 4.5),
    ("rradius", "rhumerus", (-1, 0, 0), 4.0), ("rhand", "rradius", (-1, 0, 0), 1.0),
]


def _asf_text() -> str:
    """A small valid ASF skeleton with every bone read_asf_amc maps (Acclaim units)."""
    lines = [":version 1.10", ":name fuzz", ":units", "  mass 1.0", "  length 0.45", "  angle deg", ":root",
             "  order TX TY TZ RX RY RZ", "  axis XYZ", "  position 0 0 0", "  orientation 0 0 0", ":bonedata"]
    for k, (bone, _parent, direction, length) in enumerate(_ASF_BONES, start=1):
        lines += ["  begin", f"    id {k}", f"    name {bone}", f"    direction {' '.join(map(str, direction))}",
                  f"    length {length}", "    axis 0 0 0 XYZ", "    dof rx ry rz", "  end"]
    lines += [":hierarchy", "  begin"]
    parents: dict[str, list[str]] = {}
    for bone, parent, _d, _l in _ASF_BONES:
        parents.setdefault(parent, []).append(bone)
    lines += [f"    {parent} {' '.join(kids)}" for parent, kids in parents.items()]
    lines += ["  end"]
    return "\n".join(lines) + "\n"


def _amc_text(frames: int = 3) -> str:
    lines = [":FULLY-SPECIFIED", ":DEGREES"]
    for k in range(1, frames + 1):
        lines.append(str(k))
        lines.append(f"root {0.1 * k:g} 17 0 {k:g} 2 0.5")
        lines += [f"{bone} {0.5 * k:g} 1 {j % 4:g}" for j, (bone, *_rest) in enumerate(_ASF_BONES)]
    return "\n".join(lines) + "\n"


#: A line-level edit of a text file: a line deleted, duplicated or replaced, a token
#: replaced with a hostile one, the file cut short, or garbage inserted.
HOSTILE_TOKENS = st.sampled_from(["nan", "inf", "-inf", "1e308", "-1e308", "1e-320", "0", "-1", "", "{", "}",
                                  "999999999999", "0x10", "ROOT", "JOINT", "End", "Site", "OFFSET", "CHANNELS 2",
                                  "MOTION", "Frames:", "Frame Time:", "begin", "end", "root", ":bonedata",
                                  ":hierarchy", "<frame>", "</frame>", "\"", ",", ",,", "é", "\ufeff", "\x00"])
TEXT_EDIT = st.one_of(
    st.tuples(st.just("delete"), st.integers(0, 10_000)),
    st.tuples(st.just("duplicate"), st.integers(0, 10_000)),
    st.tuples(st.just("token"), st.integers(0, 10_000), st.integers(0, 50), HOSTILE_TOKENS | st.text(max_size=6)),
    st.tuples(st.just("cut"), st.integers(0, 100_000)),
    st.tuples(st.just("insert"), st.integers(0, 10_000), st.text(max_size=30)),
)


def _edit_text(text: str, edits) -> str:
    for edit in edits:
        lines = text.split("\n")
        kind, where = edit[0], edit[1]
        k = where % max(len(lines), 1)
        if kind == "delete":
            del lines[k]
        elif kind == "duplicate":
            lines.insert(k, lines[k])
        elif kind == "token":
            tokens = lines[k].split(" ")
            tokens[edit[2] % len(tokens)] = edit[3]
            lines[k] = " ".join(tokens)
        elif kind == "insert":
            lines.insert(k, edit[2])
        else:
            return text[:where % max(len(text), 1)]
        text = "\n".join(lines)
    return text


def _read_refusing_cleanly(path, **opts):
    """read_motion(path): the motion, or None for a MotionFormatError naming the file. Any
    other exception (IndexError, KeyError, ZeroDivisionError, struct.error,
    UnicodeDecodeError, a bare ValueError...) fails the property; a motion returned must
    be all finite (never NaN data handed on silently)."""
    try:
        motion = read_motion(path, **opts)
    except MotionFormatError as error:
        # The file read, or the one read beside it (an AMC take's ASF skeleton).
        assert any(p.name in str(error) for p in path.parent.iterdir()), error
        return None
    assert np.all(np.isfinite(motion.positions)) and np.all(np.isfinite(motion.orientations))
    assert np.all(np.isfinite(motion.times)) and np.all(np.diff(motion.times) > 0)
    return motion


@pytest.fixture(scope="module")
def reference_motion(tmp_path_factory):
    """A motion of every segment, read from the small BVH (the seed of the other formats)."""
    path = tmp_path_factory.mktemp("seed") / "seed.bvh"
    path.write_text(_bvh_text(4))
    return read_motion(path)


def test_the_seed_files_read(tmp_path, reference_motion):
    """The seeds of the mutation properties are valid: a mutation starts from a file that
    reads, so that it reaches every stage of the reader (a seed refused at its first line
    would fuzz nothing but that line)."""
    assert reference_motion.positions.shape == (4, 22, 3)
    assert len(read_bvh_file(_write(tmp_path / "a.bvh", _bvh_text())).joints) == len(_CMU_JOINTS)
    _write(tmp_path / "take.asf", _asf_text())
    assert _read_refusing_cleanly(_write(tmp_path / "take.amc", _amc_text())).positions.shape == (3, 22, 3)
    write_mvnx(reference_motion, tmp_path / "m.mvnx")
    write_vr_csv(reference_motion, tmp_path / "v.csv")
    assert _read_refusing_cleanly(tmp_path / "m.mvnx") is not None
    assert _read_refusing_cleanly(tmp_path / "v.csv") is not None


def _write(path, text: str):
    path.write_text(text, encoding="utf-8")
    return path


@settings(max_examples=fuzz_examples(200), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(suffix=st.sampled_from([".bvh", ".amc", ".asf", ".csv", ".json", ".mvnx", ".txt", ""]),
       content=st.one_of(st.binary(max_size=300), st.text(max_size=300).map(str.encode),
                         st.sampled_from(["HIERARCHY\n", ":FULLY-SPECIFIED\n1\nroot 0 0 0 0 0 0\n", "{", "<mvnx>",
                                          "t,head_px\n0,1\n", "1,2\n3,4\n", "<?xml version='1.0'?><mvnx/>"])
                         .map(str.encode)))
def test_motion_files_of_arbitrary_content(tmp_path, suffix, content):
    """read_motion of a file of any content under any of the supported names: a finite
    motion or a MotionFormatError naming the file; never another exception, never a hang."""
    path = _fresh(tmp_path) / f"take{suffix}"
    path.write_bytes(content)
    _read_refusing_cleanly(path)


@settings(max_examples=fuzz_examples(250), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(edits=st.lists(TEXT_EDIT, min_size=1, max_size=3))
def test_damaged_bvh(tmp_path, edits):
    """A valid BVH take with lines deleted, duplicated, replaced, tokens made hostile (NaN,
    1e308, braces, keywords) or cut short: a finite motion or a located MotionFormatError."""
    path = _fresh(tmp_path) / "take.bvh"
    path.write_text(_edit_text(_bvh_text(), edits), encoding="utf-8")
    _read_refusing_cleanly(path)


@settings(max_examples=fuzz_examples(250), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(edits=st.lists(TEXT_EDIT, min_size=1, max_size=3), which=st.sampled_from(["asf", "amc"]))
def test_damaged_asf_amc(tmp_path, edits, which):
    """A valid ASF skeleton and AMC take, one of the two damaged: a finite motion or a
    located MotionFormatError."""
    folder = _fresh(tmp_path)
    asf, amc = folder / "take.asf", folder / "take.amc"
    asf.write_text(_edit_text(_asf_text(), edits) if which == "asf" else _asf_text(), encoding="utf-8")
    amc.write_text(_edit_text(_amc_text(), edits) if which == "amc" else _amc_text(), encoding="utf-8")
    _read_refusing_cleanly(amc)


@settings(max_examples=fuzz_examples(200), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(edits=st.lists(TEXT_EDIT, min_size=1, max_size=3), layout=st.sampled_from(["vr.csv", "mvnx", "vr.json"]))
def test_damaged_vr_and_mvnx_files(tmp_path, reference_motion, edits, layout):
    """A valid VR tracker CSV or JSON, or MVNX, written by the product itself, then damaged:
    a finite motion or a MotionFormatError naming the file."""
    tmp_path = _fresh(tmp_path)
    seed = tmp_path / f"seed.{layout}"
    if layout == "mvnx":
        write_mvnx(reference_motion, seed)
    else:
        write_vr_csv(reference_motion, tmp_path / "seed.csv")
        if layout == "vr.json":
            rows = [line.split(",") for line in (tmp_path / "seed.csv").read_text().splitlines()
                    if not line.startswith("#")]
            header, rows = rows[0], rows[1:]
            samples = []
            for row in rows:
                sample: dict = {"t": float(row[0])}
                for k in range(1, len(header), 7):
                    sample[header[k][:-3]] = {"p": [float(v) for v in row[k:k + 3]],
                                              "q": [float(v) for v in row[k + 3:k + 7]]}
                samples.append(sample)
            seed.write_text(json.dumps({"format": "vr-trackers-v1", "axes": "z-up", "samples": samples}, indent=1))
        else:
            seed = tmp_path / "seed.csv"
    path = tmp_path / f"take.{layout.split('.')[-1]}"
    path.write_text(_edit_text(seed.read_text(encoding="utf-8"), edits), encoding="utf-8")
    _read_refusing_cleanly(path)


@settings(max_examples=fuzz_examples(150), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(edits=st.lists(TEXT_EDIT, min_size=1, max_size=3),
       positions=st.lists(st.floats(-2, 2, allow_nan=False), min_size=69, max_size=69),
       damaged_file=st.sampled_from(["pN.csv", "N.csv"]))
def test_damaged_xsens_csv(tmp_path, edits, positions, damaged_file):
    """An Xsens pair, pN.csv of three rows (23 segments x position and the export's
    quaternion x 180/pi) and N.csv of joint angles, one of them damaged: a finite motion
    or a MotionFormatError naming the file (a damaged N.csv only warns: the motion is in
    pN.csv)."""
    row = ",".join(f"{positions[3 * k]:.6g},{positions[3 * k + 1]:.6g},{positions[3 * k + 2]:.6g},57.29578,0,0,0"
                   for k in range(23))
    texts = {"pN.csv": f"{row}\n{row}\n{row}\n", "N.csv": ",".join(["1.5"] * 66) + "\n" + ",".join(["2"] * 66) + "\n"}
    texts[damaged_file] = _edit_text(texts[damaged_file], edits)
    folder = _fresh(tmp_path)
    for name, text in texts.items():
        _write(folder / name, text)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DamagedJointAnglesWarning)
        _read_refusing_cleanly(folder / "pN.csv", rate_hz=100.0)


#: XML prologues a file from another tool may open with: encodings Python may not know, a
#: DOCTYPE declaring entities (expanded, or external), a byte-order mark.
XML_PROLOGUES = st.sampled_from([
    "", '<?xml version="1.0" encoding="UTF-8"?>\n', '<?xml version="1.0" encoding="ANSI"?>\n',
    '<?xml version="1.0" encoding="x-unknown"?>\n', '<?xml version="1.0" encoding="utf-16"?>\n',
    '<?xml version="1.0" encoding="latin-1"?>\n', '<?xml version="2.0"?>\n', "\ufeff",
    '<!DOCTYPE mvnx [<!ENTITY e SYSTEM "file:///etc/hostname">]>\n',
    '<!DOCTYPE mvnx [<!ENTITY a "1 1 1 1 1 1 1 1"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">]>\n',
])


@settings(max_examples=fuzz_examples(150), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(prologue=XML_PROLOGUES, edits=st.lists(TEXT_EDIT, max_size=2))
@example(prologue='<?xml version="1.0" encoding="x-unknown"?>\n', edits=[])   # LookupError before the fix
def test_mvnx_with_foreign_prologues(tmp_path, reference_motion, prologue, edits):
    """An MVNX file (written by the product, then edited) behind an XML declaration or
    DOCTYPE of another tool: a finite motion or a MotionFormatError naming the file. An
    encoding the XML declaration names and Python does not know raised LookupError."""
    folder = _fresh(tmp_path)
    write_mvnx(reference_motion, folder / "seed.mvnx")
    text = (folder / "seed.mvnx").read_text(encoding="utf-8")
    if text.startswith("<?xml"):
        text = text.split("\n", 1)[1]
    path = folder / "take.mvnx"
    path.write_bytes((prologue + _edit_text(text, edits)).encode("utf-8"))
    _read_refusing_cleanly(path)


#: Numbers a file can hold that break arithmetic downstream: huge, tiny, negative zero.
HOSTILE_NUMBERS = st.one_of(st.floats(allow_nan=False, allow_infinity=False).map(repr),
                            st.sampled_from(["1e308", "-1e308", "1.7e308", "5e-324", "-0", "1e200", "nan", "inf"]))


@settings(max_examples=fuzz_examples(200), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 80), HOSTILE_NUMBERS), min_size=1, max_size=4),
       frame_line=st.none() | st.sampled_from(["Frames: 0", "Frames: -3", "Frames: 99999999999", "Frames: 2",
                                                "Frame Time: 0", "Frame Time: -1", "Frame Time: 1e-300",
                                                "Frame Time: nan", "Frame Time: 1e300"]))
def test_bvh_hostile_channel_values(tmp_path, values, frame_line):
    """The channel values and frame header of a valid BVH made hostile (1e308, subnormals,
    NaN, a frame count or time out of range): forward kinematics overflows to NaN on such
    numbers, and read_motion must refuse them with a MotionFormatError, not hand on NaN."""
    lines = _bvh_text().split("\n")
    motion = lines.index("MOTION")
    rows = [motion + 3 + k for k in range(3)]
    for row, column, number in values:
        tokens = lines[rows[row]].split(" ")
        tokens[column % len(tokens)] = number
        lines[rows[row]] = " ".join(tokens)
    if frame_line is not None:
        lines[motion + (1 if frame_line.startswith("Frames") else 2)] = frame_line
    path = _fresh(tmp_path) / "take.bvh"
    path.write_text("\n".join(lines), encoding="utf-8")
    _read_refusing_cleanly(path)


# =========================================================================== teleop.record (MCAP)


@pytest.fixture(scope="module")
def recording_bytes(tmp_path_factory) -> bytes:
    """A small complete recording: two episodes of references (some with extras) and
    network stats, in several small chunks."""
    path = tmp_path_factory.mktemp("mcap") / "seed.mcap"
    clock = {"t": 0}
    with Recorder(path, clock_ns=lambda: clock["t"], threaded=False, chunk_size_bytes=600) as rec:
        for episode, task in enumerate(("reach", "")):
            rec.start_episode(task or None)
            for i in range(12):
                clock["t"] = (episode * 20 + i) * 10_000_000
                extras = {"left_leg": np.full(6, 0.1 * i)} if i % 3 == 0 else {}
                rec.log_references(RobotReferences.from_flat(i * 0.01, np.full(FLAT_SIZE, float(i)), **extras))
                rec.log_network_stats({"received": i, "dropped": {"bad_mac": 1}})
            rec.stop_episode()
    return path.read_bytes()


def _read_everything(path) -> None:
    """Open a recording and read all of it the ways the commands do: every channel decoded,
    the episodes, and the references of each episode as a trajectory."""
    recording = open_recording(path)
    for topic in recording.channels:
        for _t, _message in recording.decoded(topic):
            pass
    for episode in recording.episodes():
        if "/references" in recording.channels:
            try:
                recording.reference_trajectory("references", episode.start_ns, episode.stop_ns)
            except ValueError as error:   # e.g. no reference in that window: said, not a crash
                assert str(path) in str(error) or "reference" in str(error), error


def test_the_seed_recording_reads(tmp_path, recording_bytes):
    """The seed of the MCAP property is a complete recording with two episodes."""
    path = tmp_path / "seed.mcap"
    path.write_bytes(recording_bytes)
    recording = open_recording(path)
    assert recording.complete and len(recording.episodes()) == 2
    _read_everything(path)


@settings(max_examples=fuzz_examples(200), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(damage=st.lists(DAMAGE, min_size=1, max_size=3))
def test_damaged_recordings_raise_only_recording_format_errors(tmp_path, recording_bytes, capsys, damage):
    """A recording cut short (a crash), with bits flipped (bit rot, a bad copy) or with
    bytes appended: it opens and reads what is intact, or raises a RecordingFormatError (a
    ValueError) naming the file; never a struct.error, KeyError, zlib or mcap exception."""
    data = recording_bytes
    for harm in damage:
        data = _damage(data, harm)
    path = _fresh(tmp_path) / "take.mcap"
    path.write_bytes(data)
    try:
        _read_everything(path)
    except RecordingFormatError as error:
        assert str(path) in str(error), error
    capsys.readouterr()   # warnings of damaged chunks: said on stderr, by design
