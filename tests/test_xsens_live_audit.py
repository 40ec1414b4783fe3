"""Xsens MVN live, from an audit: which stream the receiver follows (sender, character,
unit), how its times behave when the time code jumps, what its hints say, bounded meta
data, and `teleop stream-mvn` on values the protocol cannot carry and on --rate.

Datagrams are made with the product's own encoder (:class:`MvnCodec`) and handed to the
receiver directly (``handle_datagram`` with an arrival time and a sender address) or sent
over real loopback sockets.
"""

from __future__ import annotations

import socket
import struct
import time

import numpy as np
import pytest

from retarget.human import HumanMotion
from teleop.inputs.mvn_protocol import HEADER, MAGIC, MvnCodec
from teleop.inputs.xsens_live import SENDER_SILENCE_S, XsensLiveSource
from tests.conftest import REPO_ROOT, shared_data

SYNTHETIC = REPO_ROOT / "datasets" / "synthetic" / "put_aside" / "put_aside_0.npz"
MOTION = HumanMotion.load_npz(SYNTHETIC)
A, B = ("127.0.0.1", 40001), ("127.0.0.1", 40002)


def pose(k: int, shift=(0.0, 0.0, 0.0)) -> dict:
    """Frame ``k`` of the synthetic demonstration (all 23 segments), moved by ``shift`` [m]."""
    return {name: (MOTION.positions[k, s] + np.asarray(shift), MOTION.orientations[k, s])
            for s, name in enumerate(MOTION.segment_names)}


def feed(source: XsensLiveSource, datagrams: list[bytes], arrival: float, sender=A) -> None:
    for datagram in datagrams:
        source.handle_datagram(datagram, arrival, sender)


def newest(source: XsensLiveSource):
    """The frame the last datagrams produced, if any (poll() without reading the socket)."""
    frames = list(source._pending)
    source._pending.clear()
    return frames[-1] if frames else None


def header(message_type: bytes = b"02", items: int = 0, payload: int = 0, character: int = 0) -> bytes:
    return HEADER.pack(MAGIC + message_type, 0, 0x80, items, 0, character, 23, 0, 0, payload)


# ----------------------------------------------------------------- 1. two senders, one port
def test_two_senders_on_one_port_are_not_interleaved_over_loopback():
    """Two `teleop stream-mvn` into one port: the poses alternated A/B, the robot commanded
    25 cm hand jumps every tick. The first sender is followed, the other dropped and named."""
    notices: list[str] = []
    a, b = (socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(2))
    a.bind(("127.0.0.1", 0))
    b.bind(("127.0.0.1", 0))
    codec = MvnCodec()
    try:
        with XsensLiveSource(("127.0.0.1", 0), notify=notices.append) as source:
            frames = []
            for k in range(20):
                for sock, shift in ((a, (0.0, 0.0, 0.0)), (b, (0.25, 0.0, 0.0))):
                    before = source.stats["datagrams"]
                    sock.sendto(codec.encode_pose(k, 10 * k, pose(k, shift))[0], source.address)
                    for _ in range(2000):                  # bounded by reads, not by time
                        source.receive()
                        if source.stats["datagrams"] > before:
                            break
                        time.sleep(0.0005)
                    frame = newest(source)
                    if frame is not None:
                        frames.append(frame)
            assert len(frames) == 20
            hand = MOTION.segment_names.index("right_hand")
            for k, (_, segments) in enumerate(frames):    # all of A's, none of B's
                np.testing.assert_allclose(segments["right_hand"][0], MOTION.positions[k, hand], atol=1e-5)
            assert source.stats["dropped_other_sender"] == 20
            assert source.sender == a.getsockname()
            a_name, b_name = (f"127.0.0.1:{s.getsockname()[1]}" for s in (a, b))
            assert notices == [f"warning: a second MVN stream from {b_name} is ignored; the first, from {a_name}, is "
                               f"followed (stop the one not wanted: the other is followed once the first has sent no "
                               f"pose for {SENDER_SILENCE_S:g} s)"]
    finally:
        a.close()
        b.close()


def test_a_silent_sender_is_replaced_by_the_one_that_streams():
    """MVN restarted on another port must not be locked out forever: once the followed
    sender has given no pose for SENDER_SILENCE_S, the other one's complete poses are
    followed, with their own clock, and that is said."""
    notices: list[str] = []
    codec = MvnCodec()
    with XsensLiveSource(("127.0.0.1", 0), notify=notices.append) as source:
        for k in range(10):
            feed(source, codec.encode_pose(k, 10 * k, pose(k)), 10.0 + 0.01 * k, A)
        # B streams (its own time code) while A is silent, but not yet for long enough.
        for k in range(10):
            feed(source, codec.encode_pose(k, 50_000 + 10 * k, pose(k, (0.25, 0, 0))), 11.0 + 0.01 * k, B)
            assert newest(source) is None or k == 0
        assert source.stats["dropped_other_sender"] == 10 and source.sender == A
        # 2 s after A's last pose: B's next complete pose makes B the stream followed.
        arrival = 10.09 + SENDER_SILENCE_S + 0.05
        feed(source, codec.encode_pose(10, 50_100, pose(10, (0.25, 0, 0))), arrival, B)
        t, segments = newest(source)
        assert source.sender == B and source.stats["sender_switches"] == 1
        assert t == pytest.approx(arrival)               # B's clock, not A's offset
        np.testing.assert_allclose(segments["pelvis"][0], MOTION.positions[10, 0] + [0.25, 0, 0], atol=1e-5)
        assert notices[-1] == ("the MVN stream from 127.0.0.1:40001 has sent no usable pose for 2.1 s: now following "
                               "the one from 127.0.0.1:40002")
        # A coming back is now the second stream: ignored.
        feed(source, codec.encode_pose(11, 110, pose(11)), arrival + 0.01, A)
        assert newest(source) is None and source.stats["dropped_other_sender"] == 11


# ------------------------------------------------------------ 2. character and unit locks
def test_a_stray_datagram_of_another_character_does_not_lock_out_the_stream():
    """One empty CoM datagram from character 3 decided the character: the real character-0
    stream was dropped (100 of 100) and the hint said "not an MVN stream"."""
    codec = MvnCodec()
    with XsensLiveSource(("127.0.0.1", 0)) as source:
        source.handle_datagram(header(b"24", character=3), 1.0, A)        # no item: bad content
        for k in range(100):
            feed(source, codec.encode_pose(k, 10 * k, pose(k)), 2.0 + 0.01 * k)
        assert source.character_id == 0 and source.stats["samples"] == 100
        assert source.stats["dropped_other_character"] == 0
        # Then character 0 stops and character 3 streams: the hint names both.
        other = MvnCodec(character_id=3)
        for k in range(5):
            feed(source, other.encode_pose(k, 10 * k, pose(k)), 4.0 + 0.01 * k)
        assert source.stats["dropped_other_character"] == 5
        hint = source.pose_stream_hint()
        assert hint.startswith("MVN streams character 3, but character 0 is followed"), hint
        assert "not an MVN stream" not in hint


def test_a_stray_partial_pose_does_not_decide_the_position_unit():
    """One 2-segment pose spanning 1 cm fixed the unit at metres: every real centimetre
    pose then came out 100 times too large (a pelvis at 102 m)."""
    codec = MvnCodec(0.01)
    with XsensLiveSource(("127.0.0.1", 0)) as source:
        items = struct.pack(">i3f4f", 1, 0, 0, 0, 1, 0, 0, 0) + struct.pack(">i3f4f", 2, 0, 0, 1, 1, 0, 0, 0)
        source.handle_datagram(header(items=2, payload=64) + items, 1.0, A)
        degenerate = {name: (np.zeros(3), q) for name, (_, q) in pose(0).items()}   # complete, no span
        feed(source, codec.encode_pose(1, 5, degenerate), 1.005)
        assert source.position_unit_m is None                     # neither decides
        for k in range(10):
            feed(source, codec.encode_pose(k + 2, 100 + 10 * k, pose(k)), 2.0 + 0.01 * k)
        _, segments = newest(source)
        assert source.position_unit_m == 0.01
        np.testing.assert_allclose(segments["pelvis"][0], MOTION.positions[9, 0], atol=1e-5)


# ------------------------------------------------------------------- 3. time code jumps
def _stream(events, sender=A) -> tuple[XsensLiveSource, list]:
    """Feed (arrival, time code, frame index) poses; the frames produced, as (arrival, t)."""
    codec = MvnCodec()
    source = XsensLiveSource(("127.0.0.1", 0))
    got = []
    for sample, (arrival, code, k) in enumerate(events):
        feed(source, codec.encode_pose(sample, code, pose(k)), arrival, sender)
        frame = newest(source)
        if frame is not None:
            got.append((arrival, frame[0]))
    source.close()
    return source, got


def test_one_time_code_ahead_does_not_block_the_stream():
    """A sample 999 ms ahead (stray, spoofed) became the newest time code: the next 50 real
    samples were all dropped as "older" (0 of 50 accepted)."""
    events = [(10 + j * 0.01, j * 10, j) for j in range(100)]
    events.insert(50, (10.495, 490 + 999, 0))
    source, got = _stream(events)
    assert len([a for a, _ in got if a > 10.495]) == 50
    assert source.stats["dropped_ahead_sample"] == 1 and source.stats["dropped_stale_sample"] == 0
    # A real jump forward (playback scrubbed forward): the second sample in a row is taken.
    source, got = _stream([(10 + j * 0.01, j * 10 + (3_600_000 if j >= 50 else 0), j) for j in range(100)])
    assert len(got) == 99 and got[-1][1] == pytest.approx(got[-1][0])


def test_a_restarted_or_rewound_time_code_is_followed_at_once():
    """A stream restarted 3 s later with its time code from 0 lost 89 of 150 samples, one
    whose time code went back 0.5 s lost 49: both were taken as samples reordered by the
    network until the time code passed the old newest one."""
    restart = [(10 + j * 0.01, j * 10, j) for j in range(90)] + [(13.9 + j * 0.01, j * 10, j) for j in range(150)]
    source, got = _stream(restart)
    assert len([a for a, _ in got if a >= 13.9]) == 150 and source.stats["dropped_stale_sample"] == 0
    back = [(10 + j * 0.01, j * 10, j) for j in range(100)] + [(11 + j * 0.01, 500 + j * 10, j) for j in range(100)]
    source, got = _stream(back)
    assert len(got) >= 198 and source.stats["dropped_stale_sample"] <= 2
    for arrival, t in got:
        assert abs(t - arrival) < 0.02


# ---------------------------------------------------------------- 4. times always increase
def test_frame_times_always_increase_so_a_recording_replays():
    """A stalled time code (MVN paused) gave frames with the same time; recorded, the
    session could not be replayed ("sample times must increase")."""
    events = [(10 + j * 0.01, min(j, 50) * 10, min(j, 50)) for j in range(300)]
    source, got = _stream(events)
    times = np.array([t for _, t in got])
    assert np.all(np.diff(times) > 0)
    assert source.stats["dropped_duplicate"] > 0 and source.stats["samples"] == len(got)
    # The frames as the recording keeps them make a motion (its constructor checks the times).
    n = len(times)
    HumanMotion(times, MOTION.segment_names, np.repeat(MOTION.positions[:1], n, 0),
                np.repeat(MOTION.orientations[:1], n, 0), source="live")
    # Same time code, same arrival (a duplicated datagram): one frame.
    codec = MvnCodec()
    with XsensLiveSource(("127.0.0.1", 0)) as source:
        datagram = codec.encode_pose(1, 10, pose(1))[0]
        feed(source, [datagram, datagram], 5.0)
        assert source.stats["samples"] == 1 and source.stats["dropped_duplicate"] == 1


# ---------------------------------------------------------------------- 5. meta messages
def test_meta_data_keeps_known_tags_only_with_capped_values():
    """11 MB of meta messages kept 1,000,000 tags (92 MB)."""
    codec = MvnCodec(max_datagram_bytes=65000)
    with XsensLiveSource(("127.0.0.1", 0)) as source:
        for j in range(20):
            feed(source, codec.encode_meta(j, j, {f"k{j}_{i}": "v" for i in range(1000)}), 1.0)
        feed(source, codec.encode_meta(99, 99, {"name": "x" * 10_000, "xmid": "00B4", "color": "red"}), 1.0)
        assert source.meta == {"name": "x" * 256, "xmid": "00B4", "color": "red"}
        assert source.stats["ignored_meta_tags"] == 20_000


# ------------------------------------------------------------------------------ 6. hints
def test_the_hint_counts_what_came_since_the_last_pose_not_since_the_start():
    """3 s after a stream stopped the hint said "MVN's poses arrive but none could be used
    (dropped: bad_content 2912 ...)" from lifetime counts, though nothing was arriving."""
    codec = MvnCodec()
    with XsensLiveSource(("127.0.0.1", 0)) as source:
        for k in range(30):
            source.handle_datagram(header(b"02"), 1.0 + 0.01 * k, A)      # empty poses: bad content
        for k in range(10):                                              # then a stream, with CoMs
            feed(source, codec.encode_pose(k, 10 * k, pose(k)) + codec.encode_center_of_mass(k, 10 * k, np.zeros(3)),
                 2.0 + 0.01 * k)
        assert source.stats["dropped_bad_content"] == 30
        assert source.pose_stream_hint().startswith("the stream stopped: nothing has arrived on this port since its "
                                                    "last pose")
        assert source.pose_stream_hint().startswith("nothing has arrived on this port since the last warning")


def test_the_hint_says_truncated_datagrams_are_damaged_mvn_datagrams():
    """Truncated MVN datagrams were reported as "not an MVN stream"."""
    good = MvnCodec().encode_pose(1, 10, pose(1))[0]
    with XsensLiveSource(("127.0.0.1", 0)) as source:
        for cut in (40, 100, len(good) - 5):
            source.handle_datagram(good[:cut], 1.0, A)
        hint = source.pose_stream_hint()
        assert hint.startswith("MVN datagrams arrive damaged or cut (dropped: truncated 3)"), hint


def test_the_hint_names_the_ignored_sender_when_the_followed_one_sends_nothing_usable():
    codec = MvnCodec()
    with XsensLiveSource(("127.0.0.1", 0), notify=lambda m: None) as source:
        feed(source, codec.encode_pose(0, 0, pose(0)), 1.0, A)
        source.pose_stream_hint()
        feed(source, codec.encode_center_of_mass(1, 10, np.zeros(3)), 1.5, B)   # no pose: not followed
        hint = source.pose_stream_hint()
        assert hint.startswith("the MVN stream followed, from 127.0.0.1:40001, sends no usable pose, and the one "
                               "from 127.0.0.1:40002 is ignored (dropped: other_sender 1)"), hint


# --------------------------------------------------------------- 7. values beyond float32
def test_encoder_refuses_values_beyond_32_bit_floats_with_a_value_error():
    huge = pose(0)
    huge["pelvis"] = (np.array([1e300, 0.0, 0.0]), huge["pelvis"][1])
    with pytest.raises(ValueError, match="segment pelvis: .* beyond the MVN protocol's 32-bit floats"):
        MvnCodec().encode_pose(0, 0, huge)
    with pytest.raises(ValueError, match="centre of mass"):
        MvnCodec().encode_center_of_mass(0, 0, np.array([0.0, 1e300, 0.0]))


def test_stream_mvn_says_which_frame_cannot_be_streamed(tmp_path, capsys):
    """`teleop stream-mvn` crashed with "OverflowError: float too large to pack with f format"."""
    from teleop.cli import main

    motion = MOTION.slice(0, 10)
    motion.positions[:, 0, 0] = 1e300     # in every frame: one frame there is a glitch, refused when read
    path = tmp_path / "huge.npz"
    motion.save_npz(path)
    capsys.readouterr()
    assert main(["stream-mvn", str(path), "--port", "9"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"teleop stream-mvn: error: {path}: frame 0: position of pelvis (1e+300 m, more than 3.4e+36 m) "
                   "cannot be streamed (beyond the MVN protocol's 32-bit floats)"]


# ---------------------------------------------------------------------------- 8. --rate
def test_stream_mvn_rate_follows_retargets_rule(tmp_path, capsys):
    """--rate was ignored for BVH and applied to AMC, while `teleop retarget --rate-hz`
    refuses it for every format but Xsens CSV (which does not state its rate)."""
    from teleop.cli import main

    capsys.readouterr()
    assert main(["stream-mvn", str(SYNTHETIC), "--rate-hz", "50", "--port", "9"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"teleop stream-mvn: error: --rate-hz applies to Xsens CSV and AMC files only (they do not "
                          f"state their rate); {SYNTHETIC} is a human motion .npz file, which states its own\n"), err


def test_stream_mvn_refuses_rate_for_bvh(capsys):
    from teleop.cli import main

    path = shared_data("cmu_bvh", "115_06.bvh")
    capsys.readouterr()
    assert main(["stream-mvn", str(path), "--rate", "50", "--port", "9"]) == 2
    assert "--rate-hz applies to Xsens CSV and AMC files only" in capsys.readouterr().err


def test_an_amc_take_is_read_at_the_rate_given():
    """AMC files do not state their rate: a 60 Hz take was read at 120 Hz, twice as fast, and
    every command refused --rate-hz for it."""
    from teleop.takes import read_motion_file

    path = shared_data("hdm05", "squat1Reps", "HDM_bd_squat1Reps_001_120.amc")
    at_120, at_60 = read_motion_file(path), read_motion_file(path, 60.0)
    assert at_120.rate_hz == 120.0 and at_60.rate_hz == 60.0
    assert at_60.duration == pytest.approx(2 * at_120.duration)


def test_stream_mvn_takes_rate_for_xsens_csv():
    from teleop.cli import main

    path = shared_data("xsens_putaside_box", "p1.csv")
    with XsensLiveSource(("127.0.0.1", 0)) as source:
        assert main(["stream-mvn", str(path), "--rate", "50", "--port", str(source.address[1]), "--speed", "50",
                     "--duration", "0.05"]) == 0
