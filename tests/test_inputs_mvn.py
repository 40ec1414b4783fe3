"""Xsens MVN live: the network-streaming codec and the UDP receiver, over real loopback sockets.

The round trip on the shipped synthetic demonstrations never skips; the tests on the real
suit recordings (../shared/data/xsens_putaside_box) skip when that folder is absent.
"""

from __future__ import annotations

import os
import socket
import struct
import time

import numpy as np
import pytest

from retarget.human import SEGMENTS, HumanMotion
from retarget.readers import read_motion
from teleop.inputs.base import PoseSource
from teleop.inputs.mvn_cli import motion_datagrams, stream_motion
from teleop.inputs.mvn_protocol import (
    HEADER,
    JOINT_NAMES,
    POSE_QUATERNION,
    CharacterScale,
    MvnCodec,
    MvnFormatError,
    Reassembler,
    parse_header,
)
from teleop.inputs.xsens_live import XsensLiveSource, parse_bind
from tests.conftest import REPO_ROOT, shared_data

SYNTHETIC = REPO_ROOT / "datasets" / "synthetic" / "put_aside" / "put_aside_0.npz"


def _same_rotation(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Angle [rad] between quaternions (..., 4), sign-insensitive (the stored demos are
    quantised, their norms are 1 to ~2e-5 only, hence the normalisation)."""
    a = a / np.linalg.norm(a, axis=-1, keepdims=True)
    b = b / np.linalg.norm(b, axis=-1, keepdims=True)
    return 2 * np.arccos(np.clip(np.abs(np.sum(a * b, axis=-1)), 0, 1))


def _receive_until(source: XsensLiveSource, condition, max_polls: int = 2000):
    """Poll until condition(frame) holds; the loop is bounded by polls, not asserted in time."""
    for _ in range(max_polls):
        frame = source.poll()
        if frame is not None and condition(frame):
            return frame
        time.sleep(0.001)
    raise AssertionError(f"condition never met; receiver stats {dict(source.stats)}")


# ------------------------------------------------------------------ codec (never skips)
def test_pose_round_trip_on_the_shipped_synthetic_demonstration():
    motion = HumanMotion.load_npz(SYNTHETIC)
    codec = MvnCodec()
    worst_position, worst_angle = 0.0, 0.0
    for i in range(0, len(motion), 7):
        datagrams = motion_datagrams(codec, motion, i, sample_counter=i, time_code_ms=10 * i)
        # 23 segments x 32 B fit one datagram; the synthetic operator also knows its CoM (type 24).
        assert [parse_header(d).message_type for d in datagrams] == ["02", "24"]
        com = codec.decode(parse_header(datagrams[1]), datagrams[1][HEADER.size:]).data
        assert np.allclose(com, motion.com[i], atol=1e-5)
        header = parse_header(datagrams[0])
        assert (header.message_type, header.sample_counter, header.item_count) == (POSE_QUATERNION, i, 23)
        assert header.last and header.datagram_index == 0 and header.payload_size == 23 * 32
        pose = codec.decode(header, datagrams[0][HEADER.size:]).data
        assert tuple(pose) == SEGMENTS
        for s, name in enumerate(motion.segment_names):
            worst_position = max(worst_position, float(np.abs(pose[name][0] - motion.positions[i, s]).max()))
            worst_angle = max(worst_angle, float(_same_rotation(pose[name][1], motion.orientations[i, s])))
    # float32 on the wire: ~1e-7 relative, positions in cm.
    assert worst_position < 1e-5
    assert worst_angle < 1e-3


def test_positions_are_centimetres_on_the_wire_and_arm_frames_are_mvn_tpose_frames():
    codec = MvnCodec()
    identity = np.array([1.0, 0, 0, 0])
    datagram = codec.encode_pose(1, 0, {"pelvis": (np.array([0.1, 0.2, 0.9]), identity),
                                        "right_upper_arm": (np.array([0.0, -0.2, 1.4]), identity)})[0]
    (sid, x, y, z, *q) = struct.unpack_from(">i3f4f", datagram, HEADER.size)
    assert sid == 1 and np.allclose([x, y, z], [10, 20, 90], atol=1e-4)
    (sid, *_, qw, qx, qy, qz) = struct.unpack_from(">i3f4f", datagram, HEADER.size + 32)
    # An N-pose upper arm hanging down is, in MVN's T-pose frame, rotated 90 degrees about x.
    assert sid == 9 and np.allclose(np.abs([qw, qx]), [np.sqrt(0.5)] * 2, atol=1e-6)


def test_multi_datagram_sample_reassembles_in_any_order():
    motion = HumanMotion.load_npz(SYNTHETIC)
    codec = MvnCodec(max_datagram_bytes=200)              # forces 23 segments over 5 datagrams
    datagrams = motion_datagrams(codec, motion, 5, sample_counter=77, time_code_ms=50)[:-1]  # without the CoM
    headers = [parse_header(d) for d in datagrams]
    assert len(datagrams) == 5
    assert [h.datagram_index for h in headers] == [0, 1, 2, 3, 4]
    assert [h.last for h in headers] == [False] * 4 + [True]
    assert datagrams[-1][10] == 0x84                      # counter byte (offset 10): index 4 | last flag
    reassembler = Reassembler()
    order = [3, 4, 0, 2, 1]
    results = [reassembler.add(headers[k], datagrams[k][HEADER.size:]) for k in order]
    assert all(r is None for r in results[:-1])
    header, payload = results[-1]
    pose = codec.decode(header, payload).data
    assert header.item_count == 23 and len(pose) == 23
    assert np.allclose(pose["left_hand"][0], motion.position("left_hand")[5], atol=1e-5)


def test_other_message_types_round_trip():
    codec = MvnCodec()

    def decode(datagrams):
        assert len(datagrams) == 1
        return codec.decode(parse_header(datagrams[0]), datagrams[0][HEADER.size:]).data

    assert np.allclose(decode(codec.encode_center_of_mass(3, 30, np.array([0.01, -0.02, 0.95]))),
                       [0.01, -0.02, 0.95], atol=1e-6)
    angles = np.arange(66, dtype=float).reshape(22, 3) - 30
    joints = decode(codec.encode_joint_angles(3, 30, angles))
    assert len(joints) == len(JOINT_NAMES) == 22
    assert (joints[0].parent_segment, joints[0].child_segment) == (1, 2)            # jL5S1: pelvis -> L5
    assert (joints[14].parent_segment, joints[14].child_segment) == (1, 16)         # jRightHip
    assert np.allclose([j.angles for j in joints], angles, atol=1e-5)
    assert decode(codec.encode_meta(3, 30, {"name": "operator", "color": "FF8800"})) == \
        {"name": "operator", "color": "FF8800"}
    assert decode(codec.encode_time_code(3, 3_723_456)) == "01:02:03.456"
    scale = CharacterScale([("Pelvis", np.array([0, 0, 0.95]))], [(1, 13, "Sacrum", 0, np.array([-0.1, 0, 0.05]))])
    back = decode(codec.encode_scale(3, 30, scale))
    assert back.segments[0][0] == "Pelvis" and np.allclose(back.segments[0][1], [0, 0, 0.95], atol=1e-6)
    assert back.points[0][:4] == (1, 13, "Sacrum", 0) and np.allclose(back.points[0][4], [-0.1, 0, 0.05], atol=1e-6)
    euler = decode(codec.encode_pose_euler(3, 30, {1: (np.array([0, 0.9, 0]), np.array([10.0, 20, 30]))}))
    assert np.allclose(euler[1][0], [0, 0.9, 0], atol=1e-6) and np.allclose(euler[1][1], [10, 20, 30])
    points = decode(codec.encode_points(3, 30, {269: np.array([0.1, 1.0, 0.0])}))
    assert np.allclose(points[269], [0.1, 1.0, 0.0], atol=1e-6)


@pytest.mark.parametrize("datagram, reason", [
    (b"", "foreign"),
    (b"hello world, not MVN", "foreign"),
    (b"MXTP02" + bytes(10), "truncated"),
    (b"MXTPxx" + bytes(18), "bad_type"),
])
def test_bad_headers_raise_a_format_error_with_a_reason(datagram, reason):
    with pytest.raises(MvnFormatError) as info:
        parse_header(datagram)
    assert info.value.reason == reason


def test_truncated_pose_datagram_is_detected_from_the_item_count():
    datagram = MvnCodec().encode_pose(1, 0, {"pelvis": (np.zeros(3), np.array([1.0, 0, 0, 0]))})[0]
    for cut in (HEADER.size + 1, len(datagram) - 1):
        with pytest.raises(MvnFormatError) as info:
            parse_header(datagram[:cut])
        assert info.value.reason == "truncated"
    legacy = datagram[:22] + b"\x00\x00" + datagram[24:]     # pre-2019 senders: payload size 0
    assert parse_header(legacy).item_count == 1


def test_bind_spec_parsing():
    assert parse_bind("") == ("127.0.0.1", 9763)
    assert parse_bind("9000") == ("127.0.0.1", 9000)
    assert parse_bind("0.0.0.0:9001") == ("0.0.0.0", 9001)
    with pytest.raises(ValueError, match="the MVN port must be a number 1-65535"):
        parse_bind("abc")
    with pytest.raises(ValueError, match="allow_remote"):
        XsensLiveSource(("0.0.0.0", 0))


# ------------------------------------------------------- receiver over loopback (real UDP)
def test_receiver_over_loopback_drops_and_counts_garbage_and_never_crashes():
    motion = HumanMotion.load_npz(SYNTHETIC)
    codec = MvnCodec()
    sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with XsensLiveSource(("127.0.0.1", 0)) as source:
        assert isinstance(source, PoseSource)
        first = motion_datagrams(codec, motion, 10, sample_counter=1, time_code_ms=100)[0]
        sender.sendto(first, source.address)
        _receive_until(source, lambda f: True)                 # character 0 is now the one followed
        good = motion_datagrams(codec, motion, 11, sample_counter=2, time_code_ms=110)[0]
        rng = np.random.default_rng(0)
        garbage = {                                            # datagram -> expected drop reason
            b"": "foreign", b"GET / HTTP/1.1\r\n": "foreign", b"\x00" + rng.bytes(299): "foreign",
            good[:40]: "truncated", good[:-5]: "truncated", good + b"xx": "bad_size",
            b"MXTPab" + good[6:]: "bad_type", b"MXTP99" + good[6:]: "unknown_type",
            b"MXTP02" + bytes(18) + good[24:]: "bad_size",    # 0 items announced, 736 bytes follow
            MvnCodec(character_id=3).encode_pose(2, 110, {"pelvis": (np.zeros(3), np.array([1.0, 0, 0, 0]))})[0]:
                "other_character",
        }
        for datagram in garbage:
            sender.sendto(datagram, source.address)
        sender.sendto(good, source.address)
        t, pose = _receive_until(source, lambda f: True)
        assert len(pose) == 23
        assert np.allclose(pose["head"][0], motion.position("head")[11], atol=1e-5)
        expected: dict[str, int] = {}
        for reason in garbage.values():
            expected[f"dropped_{reason}"] = expected.get(f"dropped_{reason}", 0) + 1
        assert {k: v for k, v in source.stats.items() if k.startswith("dropped_") and v} == expected
        assert source.stats["samples"] == 2
        assert source.stats["datagrams"] == len(garbage) + 2
    sender.close()


def test_timestamps_follow_the_time_code_on_the_callers_clock():
    codec = MvnCodec()
    now = [100.0]
    source = XsensLiveSource(("127.0.0.1", 0), clock=lambda: now[0])
    identity = (np.zeros(3), np.array([1.0, 0, 0, 0]))
    try:
        arrivals = [100.01, 100.03, 100.025, 100.06]         # jittered arrivals of 10 ms samples
        times = []
        for k, arrival in enumerate(arrivals):
            source.handle_datagram(codec.encode_pose(k, 5000 + 10 * k, {"pelvis": identity})[0], arrival)
            times.append(source.poll(arrival)[0])
        # offset = min(arrival - code) = 100.025 - 5.02 (sample 2 was the least delayed),
        # aged by the drift allowance (200 ppm of 10 ms: 2 us) when no sample is less delayed.
        assert np.allclose(np.diff(times[2:]), 0.01, rtol=0, atol=1e-5)
        assert np.allclose(times[2], 100.025)
        # A reordered (older) sample is dropped; a big backwards jump (MVN restarted) is taken.
        source.handle_datagram(codec.encode_pose(9, 5010, {"pelvis": identity})[0], 100.1)
        assert source.poll() is None and source.stats["dropped_stale_sample"] == 1
        source.handle_datagram(codec.encode_pose(10, 0, {"pelvis": identity})[0], 200.0)
        assert source.poll()[0] == pytest.approx(200.0)
    finally:
        source.close()


def test_stream_motion_tool_feeds_the_receiver_over_loopback():
    motion = HumanMotion.load_npz(SYNTHETIC).slice(0, 40)
    with XsensLiveSource(("127.0.0.1", 0)) as source:
        stats = stream_motion(motion, source.address, speed=20.0)
        # 40 poses + 40 CoMs + 1 meta message (once a second of motion time).
        assert stats == {"samples": 40, "datagrams": 81, "bytes": stats["bytes"], "send_errors": 0}
        last = _receive_until(source, lambda f: np.allclose(f[1]["pelvis"][0], motion.position("pelvis")[-1],
                                                            atol=1e-5))
        assert source.meta == {"name": "teleop"}
        assert source.stats["samples"] >= 1 and last is not None
    # The byte count is what went on the wire: the same stream (on a virtual clock) to a
    # plain socket, whose datagrams are counted and measured here. Each pose carries 23
    # segments of 32 bytes and each CoM 3 floats, after the 24-byte header.
    receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    receiver.bind(("127.0.0.1", 0))
    now, sizes = [0.0], {}

    def drain(block: bool) -> None:
        receiver.settimeout(2.0 if block else 0.0)
        while sum(map(len, sizes.values())) < 81:
            try:
                datagram = receiver.recv(65536)
            except (BlockingIOError, socket.timeout):
                return
            sizes.setdefault(parse_header(datagram).message_type, []).append(len(datagram))

    def sleep(seconds: float) -> None:       # virtual time; empties the socket between samples
        now[0] += seconds
        drain(block=False)

    try:
        counted = stream_motion(motion, receiver.getsockname(), speed=20.0, clock=lambda: now[0], sleep=sleep)
        drain(block=True)
    finally:
        receiver.close()
    assert HEADER.size == 24
    assert sizes["02"] == [24 + 23 * 32] * 40 and sizes["24"] == [24 + 3 * 4] * 40 and len(sizes["12"]) == 1
    assert counted["bytes"] == sum(sum(v) for v in sizes.values()) == stats["bytes"]


def test_stream_mvn_command(tmp_path):
    from teleop.cli import main

    with XsensLiveSource(("127.0.0.1", 0)) as source:
        assert main(["stream-mvn", str(SYNTHETIC), "--port", str(source.address[1]), "--speed", "50",
                     "--duration", "0.05"]) == 0
        _receive_until(source, lambda f: True)
    assert main(["stream-mvn", str(tmp_path / "missing.csv"), "--port", "9"]) == 1


# ------------------------------------------------------------- the real suit recordings
def test_real_xsens_recording_streams_through_the_receiver_frame_by_frame():
    pose_file = shared_data("xsens_putaside_box", "p1.csv")
    motion = read_motion(pose_file, rate_hz=100.0)
    codec = MvnCodec()
    sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    worst_position, worst_angle, received = 0.0, 0.0, 0
    with XsensLiveSource(("127.0.0.1", 0)) as source:
        for i in range(0, len(motion), 5):
            for datagram in motion_datagrams(codec, motion, i, sample_counter=i, time_code_ms=10 * i):
                sender.sendto(datagram, source.address)
            sender.sendto(os.urandom(64), source.address)          # foreign traffic in between
            _, pose = _receive_until(source, lambda f: True)
            received += 1
            for s, name in enumerate(motion.segment_names):
                worst_position = max(worst_position, float(np.abs(pose[name][0] - motion.positions[i, s]).max()))
                worst_angle = max(worst_angle, float(_same_rotation(pose[name][1], motion.orientations[i, s])))
        assert source.stats["samples"] == received == len(range(0, len(motion), 5))
        assert source.stats["dropped_foreign"] + source.stats["dropped_bad_type"] >= received - 2  # random bytes
    sender.close()
    assert worst_position < 1e-5 and worst_angle < 1e-3


def test_real_xsens_joint_angles_travel_as_type_20():
    angle_file = shared_data("xsens_putaside_box", "1.csv")
    motion = read_motion(angle_file, rate_hz=100.0)
    angles = motion.meta["joint_angles_deg"]
    codec = MvnCodec()
    sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with XsensLiveSource(("127.0.0.1", 0)) as source:
        k = len(angles) // 2
        for datagram in codec.encode_joint_angles(1, 10, angles[k]) + motion_datagrams(codec, motion, 0, 1, 10):
            sender.sendto(datagram, source.address)
        _receive_until(source, lambda f: source.joint_angles is not None)
        assert np.allclose([j.angles for j in source.joint_angles], angles[k].reshape(22, 3), atol=1e-3)
    sender.close()


@pytest.mark.parametrize("speed", [0.5, 2.0])
def test_streamed_time_codes_run_with_the_sending_not_the_motion(speed):
    """MVN's time code is the stream's clock: at --speed 0.5 a sample of motion time t is
    sent at t / 0.5 and must carry that time code (before: t, so the receiver's frame times
    fell 0.5 s further behind every second)."""
    import socket

    from teleop.inputs.mvn_protocol import parse_header

    motion = HumanMotion.load_npz(SYNTHETIC).slice(0, 30)
    receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    receiver.bind(("127.0.0.1", 0))
    receiver.settimeout(2.0)
    now = [0.0]
    try:
        stream_motion(motion, receiver.getsockname(), speed=speed, clock=lambda: now[0],
                      sleep=lambda s: now.__setitem__(0, now[0] + s))
        codes = {}
        for _ in range(61):                                 # 30 poses, 30 CoMs, 1 meta
            header = parse_header(receiver.recv(65536))
            codes[header.sample_counter] = header.time_code_ms
    finally:
        receiver.close()
    t = motion.times - motion.times[0]
    expected = np.round(t / speed * 1000).astype(int)
    assert [codes[k] for k in range(len(t))] == list(expected)


@pytest.mark.parametrize("wire_unit", [0.01, 1.0])
def test_the_receiver_finds_the_position_unit_from_the_first_pose(wire_unit):
    """The specification says centimetres, MVN's manual says metres: whichever the sender
    streams, the poses come out in metres (before, a metre stream came out 100x too small)."""
    motion = HumanMotion.load_npz(SYNTHETIC)
    codec = MvnCodec(wire_unit)
    with XsensLiveSource(("127.0.0.1", 0)) as source:
        assert source.position_unit_m is None
        for k in (10, 11):
            for datagram in motion_datagrams(codec, motion, k, sample_counter=k, time_code_ms=10 * k):
                source.handle_datagram(datagram, 1.0 + 0.01 * k)
            _, pose = source.poll()
            assert np.allclose(pose["head"][0], motion.position("head")[k], atol=1e-4)
            assert np.allclose(pose["left_toe"][0], motion.position("left_toe")[k], atol=1e-4)
        assert source.position_unit_m == wire_unit
    # A unit given explicitly is used as it is.
    with XsensLiveSource(("127.0.0.1", 0), position_unit_m=0.01) as source:
        for datagram in motion_datagrams(MvnCodec(1.0), motion, 10, sample_counter=1, time_code_ms=100):
            source.handle_datagram(datagram, 1.0)
        _, pose = source.poll()
        assert np.allclose(pose["head"][0], motion.position("head")[10] * 0.01, atol=1e-4)


@pytest.mark.parametrize("rate_ppm", [-50.0, 50.0])
def test_timestamps_follow_an_mvn_clock_that_drifts(rate_ppm):
    """An hour of a 5 Hz stream whose time code runs ``rate_ppm`` slow or fast against the
    caller's clock, arrivals delayed 1-30 ms: the timestamps stay within a few ms of the
    least-delayed arrival instead of falling behind by the accumulated drift (a plain
    minimum of arrival - time code lags 0.18 s after an hour of a 50 ppm slow clock)."""
    codec = MvnCodec()
    source = XsensLiveSource(("127.0.0.1", 0), clock=lambda: 0.0)
    identity = {"pelvis": (np.zeros(3), np.array([1.0, 0, 0, 0]))}
    rng = np.random.default_rng(3)
    errors = []
    try:
        for k in range(5 * 3600):
            true_time = 10.0 + 0.2 * k                       # the caller's clock when MVN sampled
            code_ms = int(round(1000 * 0.2 * k * (1 - rate_ppm * 1e-6)))
            arrival = true_time + 0.001 + rng.exponential(0.005)
            source.handle_datagram(codec.encode_pose(k, code_ms, identity)[0], arrival)
            errors.append(source.poll(arrival)[0] - true_time)
    finally:
        source.close()
    late = np.abs(np.array(errors[-5 * 600:]))                # the last ten minutes
    assert late.max() < 0.004, f"timestamps drift off the caller's clock by {late.max() * 1000:.1f} ms"


def test_the_receiver_says_why_no_pose_came_from_what_arrived():
    codec = MvnCodec()
    source = XsensLiveSource(("127.0.0.1", 0))
    try:
        assert "is MVN's network streamer" in source.pose_stream_hint()           # nothing at all
        source.handle_datagram(b"GET / HTTP/1.1\r\n\r\n" + bytes(20), 0.0)
        assert source.pose_stream_hint() == ("datagrams arrive on this port but are not an MVN stream "
                                             "(dropped: foreign 1)")
        source.handle_datagram(codec.encode_center_of_mass(0, 0, np.zeros(3))[0], 0.0)
        source.handle_datagram(codec.encode_points(0, 0, {1: np.zeros(3)})[0], 0.0)
        assert source.pose_stream_hint().startswith(
            "MVN sends message types 03 (points), 24 (centre of mass) but no 02 (pose, quaternions)")
    finally:
        source.close()


def test_the_receiver_says_the_stream_stopped_after_poses_came():
    """After poses had come, a stopped stream was diagnosed "MVN's poses arrive but none could
    be used (see the receiver's counts)": nothing was arriving, and no counts were shown."""
    codec = MvnCodec()
    source = XsensLiveSource(("127.0.0.1", 0))
    try:
        pose = {"pelvis": (np.array([0.0, 0.0, 0.9]), np.array([1.0, 0, 0, 0]))}
        for k in range(3):
            for datagram in codec.encode_pose(k, 10 * k, pose):
                source.handle_datagram(datagram, 0.01 * k)
        assert source.stats["samples"] == 3
        assert source.pose_stream_hint().startswith("the stream stopped: nothing has arrived on this port since "
                                                    "its last pose")
        source.handle_datagram(b"GET / HTTP/1.1\r\n\r\n" + bytes(20), 1.0)    # something else arrives now
        assert "the stream stopped" not in source.pose_stream_hint()
    finally:
        source.close()


def test_timestamps_follow_a_time_code_that_stalled():
    """MVN's playback paused for 15 s, its time code standing still, then went on: the times
    kept the old offset and lagged every arrival by 15 s (which the robot station refuses as
    10 s old); a network stall of one late sample is undone by the next on-time one."""
    codec = MvnCodec()
    source = XsensLiveSource(("127.0.0.1", 0), clock=lambda: 0.0)
    identity = {"pelvis": (np.zeros(3), np.array([1.0, 0, 0, 0]))}
    try:
        for k, (code_ms, arrival) in enumerate([(0, 10.0), (10, 10.01), (20, 25.02), (30, 25.03)]):
            source.handle_datagram(codec.encode_pose(k, code_ms, identity)[0], arrival)
            assert source.poll(arrival)[0] == pytest.approx(arrival, abs=1e-4), k
        source.handle_datagram(codec.encode_pose(4, 40, identity)[0], 26.54)     # held 1.5 s by the network
        source.handle_datagram(codec.encode_pose(5, 1550, identity)[0], 26.55)   # the next on time: its minimum
        assert source.poll(26.55)[0] == pytest.approx(26.55, abs=1e-4)
    finally:
        source.close()


def test_every_pose_received_between_two_ticks_is_given_in_order():
    """A 100 Hz stream into the 100 Hz operator loop: two poses often arrive between two
    ticks, and taking the newest lost the other (a recording streamed back by `stream-mvn`
    was sent at 70-77 poses a second, and recorded so). ``frames_until`` gives them all;
    ``poll`` still gives the newest, as a live tracker's reader does."""
    codec = MvnCodec()
    identity = (np.zeros(3), np.array([1.0, 0, 0, 0]))
    source = XsensLiveSource(("127.0.0.1", 0), clock=lambda: 100.0)
    try:
        for k in range(3):
            source.handle_datagram(codec.encode_pose(k, 5000 + 10 * k, {"pelvis": identity})[0], 100.0 + 0.01 * k)
        frames = source.frames_until()
        assert np.allclose(np.diff([t for t, _ in frames]), 0.01, atol=1e-5) and len(frames) == 3
        assert source.frames_until() == [] and source.poll() is None        # each pose once
        for k in range(3, 5):
            source.handle_datagram(codec.encode_pose(k, 5000 + 10 * k, {"pelvis": identity})[0], 100.0 + 0.01 * k)
        newest = source.poll()
        assert newest is not None and newest[0] == pytest.approx(frames[-1][0] + 0.02, abs=1e-5)
        assert source.frames_until() == []                                   # taken with the newest
    finally:
        source.close()
