"""Wire format: round trips, authentication, malformed input, anti-replay, secrets."""

import hashlib
import hmac
import os
import random
import stat
import struct

import numpy as np
import pytest

from retarget.references import FLAT_SIZE, RobotReferences
from teleop.net import secret as secret_mod
from teleop.net.auth import derive_mac_key
from teleop.net.packet_filter import PacketFilter, ReplayWindow
from teleop.net.protocol import (
    HEADER, MAC_SIZE, MAGIC, OVERHEAD, PROTOCOL_VERSION, BadMac, BadMagic, ClockPing, ClockPong,
    Feedback, MalformedPacket, OversizedPacket, PacketCodec, PacketType, ProtocolError,
    TruncatedPacket, UnknownPacketType, UnsupportedVersion, VideoReport,
)

SECRET = b"0123456789abcdef-test-secret"


@pytest.fixture
def codec():
    return PacketCodec(SECRET)


def references(t=1.25, extras=True):
    flat = np.linspace(-1.0, 1.0, FLAT_SIZE)
    kw = dict(head_orientation=np.array([1.0, 0.0, 0.0, 0.0]), left_leg=np.arange(6) * 0.1,
              right_leg=-np.arange(6) * 0.1) if extras else {}
    return RobotReferences.from_flat(t, flat, **kw)


def encode(codec, message, seq=1, stream_id=1, source_id=7, send_time=10.5):
    return codec.encode(message, source_id=source_id, stream_id=stream_id, seq=seq, send_time=send_time)


MESSAGES = [
    ClockPing(exchange_id=42),
    ClockPong(exchange_id=42, ping_send_time=1.5, ping_receive_time=2.75),
    Feedback(),
    Feedback(last_ref_seq=2**40, last_ref_time=3.5, forward_delay=0.75, forward_delay_std=0.1,
             clock_offset=-0.002, watchdog_state=3, compensation_state=200, packets_accepted=10,
             packets_dropped=2, executed=np.arange(FLAT_SIZE, dtype=float), measured_com_xy=np.array([0.01, -0.02])),
    VideoReport(jitter_buffer=0.1, backward_delay=0.75, backward_delay_std=0.01, frames_received=900, frames_lost=3),
]


# --------------------------------------------------------------------------- round trips
@pytest.mark.parametrize("extras", [False, True])
def test_references_round_trip(codec, extras):
    refs = references(extras=extras)
    data = encode(codec, refs, seq=3, stream_id=9, send_time=12.0)
    packet = codec.decode(data)
    assert (packet.packet_type, packet.source_id, packet.stream_id, packet.seq, packet.send_time, packet.size) == \
        (PacketType.REFERENCES, 7, 9, 3, 12.0, len(data))
    decoded = packet.message
    assert isinstance(decoded, RobotReferences) and decoded.t == refs.t
    np.testing.assert_array_equal(decoded.to_flat(), refs.to_flat())
    for name in ("head_orientation", "left_leg", "right_leg"):
        if extras:
            np.testing.assert_array_equal(getattr(decoded, name), getattr(refs, name))
        else:
            assert getattr(decoded, name) is None
    assert len(data) == OVERHEAD + 2 + 8 * (1 + FLAT_SIZE + (16 if extras else 0))


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: type(m).__name__)
def test_every_other_type_round_trips(codec, message):
    packet = codec.decode(encode(codec, message, seq=2**63))
    assert packet.message == message and packet.seq == 2**63


def test_video_report_effective_backward_delay():
    assert VideoReport(jitter_buffer=0.2, backward_delay=0.75).effective_backward_delay == pytest.approx(0.95)


def test_encode_refuses_bad_fields_and_unknown_classes(codec):
    with pytest.raises(TypeError):
        encode(codec, object())
    with pytest.raises(ValueError):
        encode(codec, ClockPing(1), seq=0)
    with pytest.raises(ValueError):
        encode(codec, Feedback(watchdog_state=300))
    with pytest.raises(OversizedPacket):
        encode(PacketCodec(SECRET, max_datagram=100), references())


# --------------------------------------------------------------------------- rejection
def test_tampering_anywhere_is_detected(codec):
    data = encode(codec, references())
    for bit in range(len(data) * 8):  # every single-bit flip, header, payload and MAC
        corrupted = bytearray(data)
        corrupted[bit // 8] ^= 1 << (bit % 8)
        with pytest.raises(ProtocolError):
            codec.decode(bytes(corrupted))
    tampered_mac = data[:-1] + bytes([data[-1] ^ 0xFF])
    with pytest.raises(BadMac):
        codec.decode(tampered_mac)


def test_wrong_secret_is_rejected(codec):
    data = encode(PacketCodec(b"another-secret-of-enough-length"), ClockPing(1))
    with pytest.raises(BadMac):
        codec.decode(data)


def test_truncated_wrong_magic_wrong_version_oversized(codec):
    data = encode(codec, references())
    for n in range(len(data)):
        with pytest.raises((TruncatedPacket, BadMac)):
            codec.decode(data[:n])
    with pytest.raises(BadMagic):
        codec.decode(b"XXXX" + data[4:])
    with pytest.raises(UnsupportedVersion):
        codec.decode(data[:4] + bytes([PROTOCOL_VERSION + 1]) + data[5:])
    with pytest.raises(OversizedPacket):
        codec.decode(data + bytes(codec.max_datagram))
    with pytest.raises(MalformedPacket):  # trailing bytes after the MAC
        codec.decode(data + b"\0")


def forge(packet_type, payload, seq=1, source_id=7):
    """A correctly authenticated packet with arbitrary type and payload."""
    body = HEADER.pack(MAGIC, PROTOCOL_VERSION, packet_type, 0, source_id, 1, seq, 0.0, len(payload)) + payload
    return body + hmac.new(derive_mac_key(SECRET), body, hashlib.sha256).digest()[:MAC_SIZE]


def test_authenticated_but_malformed_payloads(codec):
    with pytest.raises(UnknownPacketType):
        codec.decode(forge(200, b""))
    with pytest.raises(MalformedPacket):
        codec.decode(forge(PacketType.CLOCK_PONG, b"\0" * 3))
    with pytest.raises(MalformedPacket):
        codec.decode(forge(PacketType.REFERENCES, struct.pack("!Hd", 0x80, 0.0) + bytes(160)))
    with pytest.raises(MalformedPacket):  # seq 0 is never sent
        codec.decode(forge(PacketType.CLOCK_PING, b"\0" * 4, seq=0))
    nan_refs = RobotReferences.from_flat(0.0, np.full(FLAT_SIZE, np.nan))
    with pytest.raises(MalformedPacket, match="non-finite"):
        codec.decode(encode(codec, nan_refs))


def test_filter_counts_and_never_raises_on_garbage(codec):
    rng = random.Random(1)
    packet_filter = PacketFilter(codec)
    valid_prefix = encode(codec, references())[:6]
    for i in range(10_000):
        data = bytes(rng.getrandbits(8) for _ in range(rng.randrange(0, 300)))
        if i % 3 == 1:  # gets past the magic/version checks
            data = valid_prefix + data
        elif i % 3 == 2:  # consistent length too: goes all the way to the MAC check
            data = valid_prefix + data[:26].ljust(26, b"\0") + struct.pack("!I", max(len(data) - 26, 0)) \
                + data[26:] + bytes(MAC_SIZE)
        with pytest.raises(ProtocolError):
            codec.decode(data)
        assert packet_filter.accept(data) is None
    stats = packet_filter.stats
    assert stats.received == 10_000 and stats.accepted == 0 and stats.dropped_total == 10_000
    assert stats.dropped["bad_mac"] > 3000 and stats.dropped["bad_magic"] > 2000
    assert stats.dropped["truncated"] + stats.dropped["oversized"] > 1000
    assert stats.dropped["internal_error"] == 0


def test_filter_drop_reasons(codec):
    packet_filter = PacketFilter(codec, own_source_id=99, accept_types={PacketType.REFERENCES})
    assert packet_filter.accept(encode(codec, references())) is not None
    assert packet_filter.accept(encode(codec, references())) is None  # same seq again
    assert packet_filter.accept(encode(codec, references(), seq=2, source_id=99)) is None
    assert packet_filter.accept(encode(codec, ClockPing(1), seq=3)) is None
    assert packet_filter.accept(encode(codec, references(), seq=4)[:-1]) is None
    assert packet_filter.accept(bytes(3000)) is None
    assert dict(packet_filter.stats.dropped) == {"replayed": 1, "reflected": 1, "unexpected_type": 1,
                                                 "truncated": 1, "oversized": 1}


def test_replay_window_accepts_reordering_rejects_duplicates(codec):
    packet_filter = PacketFilter(codec, window_size=64)
    packets = [encode(codec, ClockPing(i), seq=i) for i in range(1, 201)]
    rng = random.Random(2)
    # Reorder within the window: shuffle blocks of 50 < 64.
    order = [p for start in range(0, 200, 50) for p in rng.sample(packets[start:start + 50], 50)]
    assert all(packet_filter.accept(p) is not None for p in order)
    assert all(packet_filter.accept(p) is None for p in packets)  # every replay refused
    assert packet_filter.stats.dropped["replayed"] + packet_filter.stats.dropped["too_old"] == 200
    # Streams are independent: the same seq on another stream is new.
    assert packet_filter.accept(encode(codec, ClockPing(1), seq=1, stream_id=2)) is not None


def test_replay_window_edges():
    window = ReplayWindow(size=64)
    assert window.check_and_update(1) is None
    assert window.check_and_update(100) is None
    assert window.check_and_update(36) == "too_old"  # 64 behind the highest: outside
    assert window.check_and_update(37) is None       # 63 behind: inside, not seen yet
    assert window.check_and_update(37) == "replayed"
    assert window.check_and_update(164) is None      # a jump of exactly the window size
    assert window.check_and_update(100) == "too_old"
    assert window.check_and_update(101) is None
    assert window.check_and_update(164) == "replayed"


def test_filter_bounds_the_number_of_streams(codec):
    packet_filter = PacketFilter(codec, max_streams=2, max_retired=1)
    for stream in range(4):
        packet_filter.accept(encode(codec, ClockPing(1), stream_id=stream))
    # The third stream retires the first; the fourth finds both tables full.
    assert packet_filter.stats.accepted == 3 and packet_filter.stats.dropped["too_many_streams"] == 1


def test_restarted_senders_are_never_locked_out_and_old_streams_stay_closed(codec):
    """A sender restarted many times (a new source id each run, three streams) keeps being
    accepted once the window table is full; the silent streams it evicts are retired, so
    their captured packets cannot be replayed. Before, the 86th restart was refused."""
    packet_filter = PacketFilter(codec, max_streams=256)
    first_run = [encode(codec, ClockPing(1), seq=1, source_id=1000, stream_id=s) for s in range(3)]
    assert all(packet_filter.accept(p) is not None for p in first_run)
    for run in range(1, 200):
        for stream in range(3):
            for seq in (1, 2):
                packet = encode(codec, ClockPing(seq), seq=seq, source_id=1000 + run, stream_id=stream)
                assert packet_filter.accept(packet) is not None, (run, stream, seq)
    assert all(packet_filter.accept(p) is None for p in first_run)  # retired: refused
    assert packet_filter.stats.dropped["too_old"] == 3


def test_the_stream_evicted_is_the_one_silent_longest(codec):
    packet_filter = PacketFilter(codec, max_streams=2)
    assert packet_filter.accept(encode(codec, ClockPing(1), seq=1, stream_id=1)) is not None
    assert packet_filter.accept(encode(codec, ClockPing(1), seq=1, stream_id=2)) is not None
    assert packet_filter.accept(encode(codec, ClockPing(2), seq=2, stream_id=1)) is not None  # 1 is live
    assert packet_filter.accept(encode(codec, ClockPing(1), seq=1, stream_id=3)) is not None  # evicts 2
    assert packet_filter.accept(encode(codec, ClockPing(3), seq=3, stream_id=1)) is not None
    assert packet_filter.accept(encode(codec, ClockPing(2), seq=2, stream_id=2)) is None
    assert packet_filter.stats.dropped["too_old"] == 1


# --------------------------------------------------------------------------- secrets
@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    monkeypatch.delenv(secret_mod.ENV_VAR, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    return tmp_path


def test_secret_not_configured_is_a_clear_error(clean_env):
    with pytest.raises(secret_mod.SecretNotConfigured, match="TELEOP_SECRET"):
        secret_mod.load_secret()
    assert secret_mod.load_secret(insecure_dev=True) == secret_mod.INSECURE_DEV_SECRET


def test_secret_from_environment_and_explicit_file(clean_env, monkeypatch):
    monkeypatch.setenv(secret_mod.ENV_VAR, "an environment secret")
    assert secret_mod.load_secret() == b"an environment secret"
    path = clean_env / "key"
    path.write_bytes(b"file secret, long enough\n")
    path.chmod(0o600)
    assert secret_mod.load_secret(path) == b"file secret, long enough"  # explicit file wins
    monkeypatch.setenv(secret_mod.ENV_VAR, "short")
    with pytest.raises(secret_mod.SecretError, match="at least"):
        secret_mod.load_secret()


def test_secret_file_must_be_private_and_exist(clean_env):
    path = clean_env / "key"
    with pytest.raises(secret_mod.SecretError, match="does not exist"):
        secret_mod.load_secret(path)
    path.write_bytes(b"0123456789abcdef0123")
    path.chmod(0o644)
    with pytest.raises(secret_mod.SecretError, match="chmod 600"):
        secret_mod.load_secret(path)


def test_default_secret_file_created_once_with_0600(clean_env):
    first = secret_mod.load_secret(create_default=True)
    path = secret_mod.default_secret_path()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert len(first) == 64 and secret_mod.load_secret() == first  # found again, not recreated
    assert os.listdir(path.parent) == ["secret"]  # no temporary file left behind


def test_session_secrets_differ():
    assert secret_mod.session_secret() != secret_mod.session_secret()
    assert len(secret_mod.session_secret()) == 32


def test_a_references_validity_mask_crosses_the_link(codec):
    """A VR source measures the head and the hands only: the mask was not encoded, and the
    robot recorded (and exported) every scalar as measured."""
    from retarget.references import FLAT_SIZE, RobotReferences

    valid = np.zeros(FLAT_SIZE, bool)
    valid[3:9] = True
    refs = RobotReferences.from_flat(1.0, np.arange(FLAT_SIZE) * 0.01, valid=valid)
    packet = codec.decode(codec.encode(refs, source_id=1, stream_id=1, seq=1, send_time=1.0))
    np.testing.assert_array_equal(packet.message.valid, valid)
    whole = RobotReferences.from_flat(1.0, np.zeros(FLAT_SIZE), valid=np.ones(FLAT_SIZE, bool))
    assert len(codec.encode(whole, source_id=1, stream_id=1, seq=2, send_time=1.0)) == \
        len(codec.encode(RobotReferences.from_flat(1.0, np.zeros(FLAT_SIZE)), source_id=1, stream_id=1, seq=3,
                         send_time=1.0))                    # all measured: no mask on the wire
    assert codec.decode(codec.encode(whole, source_id=1, stream_id=1, seq=4, send_time=1.0)).message.valid is None
