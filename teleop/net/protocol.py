"""Wire format of the teleoperation link: versioned, authenticated UDP packets.

Every datagram is one packet::

    header (36 bytes, network byte order) | payload (payload_length bytes) | MAC (16 bytes)

=======  ====  ==============  =============================================================
offset   size  field           meaning
=======  ====  ==============  =============================================================
0        4     magic           ``b"TELE"``
4        1     version         :data:`PROTOCOL_VERSION` (1)
5        1     packet_type     :class:`PacketType`
6        2     flags           reserved, sent as 0, ignored on receive
8        4     source_id       random id of the sending endpoint (u32, never 0)
12       4     stream_id       logical stream of the sender (u32); default = packet type
16       8     seq             sequence number per (source_id, stream_id), from 1 (u64)
24       8     send_time       sender's clock when the packet was encoded [s] (float64)
32       4     payload_length  bytes of payload that follow (u32)
36       n     payload         type-specific, see the ``encode_*`` functions below
36 + n   16    mac             HMAC-SHA256(key, header + payload), first 16 bytes
=======  ====  ==============  =============================================================

The MAC key is derived from the shared secret (:func:`teleop.net.auth.derive_mac_key`) so that the raw
secret is never used directly as a key for anything else. Nothing in a packet is trusted
before the MAC has been checked: the decoder only looks at the fixed-size header fields it
needs to find the MAC (magic, version, length) before verifying it.

Payloads (all big-endian; float64 unless stated):

* REFERENCES: ``u16 extras_flags | t | 20 × flat`` then, by flag bit 0/1/2,
  ``4 × head_orientation``, ``6 × left_leg``, ``6 × right_leg``, and by flag bit 3 a
  ``u32`` validity mask (bit i: flat scalar i was measured; absent: all were)
  (:class:`retarget.references.RobotReferences`; ``t`` is the sample time on the operator
  clock, which may precede the packet's ``send_time`` by up to ``MAX_SAMPLE_AGE_S`` and
  follow it by up to ``MAX_SAMPLE_LEAD_S``: a receiver refuses it otherwise,
  :func:`sample_time_problem`).
* CLOCK_PING: ``u32 exchange_id`` (t1 is the packet's ``send_time``).
* CLOCK_PONG: ``u32 exchange_id | ping_send_time (t1) | ping_receive_time (t2)``
  (t3 is the pong packet's ``send_time``).
* FEEDBACK: see :class:`Feedback`.
* VIDEO_REPORT: see :class:`VideoReport`.

Decoding returns a :class:`Packet` or raises a :class:`ProtocolError` subclass whose
``reason`` names the drop counter it belongs to. :class:`teleop.net.packet_filter.PacketFilter`
adds the per-stream anti-replay window and never raises.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import math
import struct
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple

import numpy as np

from retarget.references import FLAT_SIZE, RobotReferences
from teleop.net.auth import derive_mac_key


MAGIC = b"TELE"
PROTOCOL_VERSION = 1

#: Header layout, see the module docstring. "!" = network order, no padding.
HEADER = struct.Struct("!4sBBHIIQdI")
HEADER_SIZE = HEADER.size
MAC_SIZE = 16
OVERHEAD = HEADER_SIZE + MAC_SIZE

#: Largest datagram we send or accept [bytes]: Ethernet MTU 1500 − IPv4 header 20 − UDP
#: header 8. Staying under it avoids IP fragmentation, where losing one fragment loses the
#: whole packet and which some paths drop outright.
DEFAULT_MAX_DATAGRAM = 1472

#: Default width of the anti-replay window [packets]. 1024 packets is ~10 s of commands at
#: 100 Hz, far more than the reordering a Gaussian jitter of σ = 100 ms produces (~±60
#: packets); a 64-packet window (IPsec's default) would reject legitimately late packets.
DEFAULT_REPLAY_WINDOW = 1024


class PacketType(enum.IntEnum):
    """Packet type byte. New types take the next free value; 0 is never valid."""

    REFERENCES = 1    #: operator → robot: one RobotReferences sample
    CLOCK_PING = 2    #: either way: NTP-style exchange, first half
    CLOCK_PONG = 3    #: either way: NTP-style exchange, reply
    FEEDBACK = 4      #: robot → operator: telemetry (delays, executed refs, state)
    VIDEO_REPORT = 5  #: operator → robot: jitter buffer length, measured backward delay


# --------------------------------------------------------------------------- errors
class ProtocolError(ValueError):
    """A datagram that is not a valid packet. ``reason`` is its drop-counter name."""

    reason = "malformed"


class TruncatedPacket(ProtocolError):
    reason = "truncated"


class OversizedPacket(ProtocolError):
    reason = "oversized"


class BadMagic(ProtocolError):
    reason = "bad_magic"


class UnsupportedVersion(ProtocolError):
    reason = "bad_version"


class BadMac(ProtocolError):
    """The MAC does not match: tampered, corrupted, or signed with another secret."""

    reason = "bad_mac"


class UnknownPacketType(ProtocolError):
    reason = "unknown_type"


class MalformedPacket(ProtocolError):
    """Authenticated, but the header or payload does not parse."""

    reason = "malformed"


# --------------------------------------------------------------------------- messages
@dataclass(frozen=True)
class ClockPing:
    """First half of a clock exchange. Its packet's ``send_time`` is t1."""

    exchange_id: int


@dataclass(frozen=True)
class ClockPong:
    """Reply to a :class:`ClockPing`. Its packet's ``send_time`` is t3.

    Attributes:
        exchange_id: the ping's exchange id.
        ping_send_time: t1, the ping's ``send_time`` (pinger's clock) [s].
        ping_receive_time: t2, when the ping arrived (responder's clock) [s].
    """

    exchange_id: int
    ping_send_time: float
    ping_receive_time: float


@dataclass(frozen=True)
class Feedback:
    """Robot → operator telemetry, sent a few times per second.

    NaN means "not known yet" for every float field.

    Attributes:
        last_ref_seq: sequence number of the newest REFERENCES packet applied (0 = none).
        last_ref_time: sample time ``t`` of those references (operator clock) [s].
        forward_delay: mean measured forward delay τ_f (Eq. 5.19) over the robot's recent
            REFERENCES (the robot station keeps the last 100) [s].
        forward_delay_std: standard deviation of τ_f over the same window [s].
        clock_offset: robot clock − operator clock, as estimated by the robot [s].
        watchdog_state: :class:`teleop.net.watchdog.WatchdogState` value.
        compensation_state: state code of the delay-compensation module (owned by it;
            opaque to the network layer), 0..255.
        packets_accepted: REFERENCES packets accepted so far (wraps at 2**32).
        packets_dropped: packets dropped by the robot's filter so far (wraps at 2**32).
        executed: optional (20,) flat references the controller is tracking now.
        measured_com_xy: optional (2,) measured CoM ground projection [m].
        measured_q: optional (nq,) measured configuration of the robot (pinocchio layout:
            base position [m], base quaternion x y z w, joint angles [rad]); the operator's
            3D view draws the robot's actual (delayed) pose from it.
        commanded_q: optional (nq,) configuration the whole-body controller commands now,
            i.e. the compensated (predicted) references turned into joints; drawn as the
            predicted pose.
    """

    last_ref_seq: int = 0
    last_ref_time: float = math.nan
    forward_delay: float = math.nan
    forward_delay_std: float = math.nan
    clock_offset: float = math.nan
    watchdog_state: int = 0
    compensation_state: int = 0
    packets_accepted: int = 0
    packets_dropped: int = 0
    executed: np.ndarray | None = None
    measured_com_xy: np.ndarray | None = None
    measured_q: np.ndarray | None = None
    commanded_q: np.ndarray | None = None

    def __eq__(self, other: object) -> bool:  # arrays need element-wise comparison
        if not isinstance(other, Feedback):
            return NotImplemented
        return all(_field_equal(getattr(self, f), getattr(other, f)) for f in self.__dataclass_fields__)


@dataclass(frozen=True)
class VideoReport:
    """Operator → robot report on the video stream (thesis §5.3.10).

    The robot's estimate of the backward delay is ``backward_delay + jitter_buffer``:
    the jitter buffer turns the backward jitter into this extra constant delay.

    Attributes:
        jitter_buffer: current jitter-buffer length [s].
        backward_delay: mean measured backward (robot → operator) delay τ_b [s].
        backward_delay_std: its standard deviation [s].
        frames_received: video frames received so far (wraps at 2**32).
        frames_lost: video frames lost or late so far (wraps at 2**32).
    """

    jitter_buffer: float
    backward_delay: float
    backward_delay_std: float = math.nan
    frames_received: int = 0
    frames_lost: int = 0

    @property
    def effective_backward_delay(self) -> float:
        """τ̂_b to use for prediction: measured delay plus jitter buffer [s]."""
        return self.backward_delay + self.jitter_buffer

    def __eq__(self, other: object) -> bool:  # NaN == NaN for round-trip checks
        if not isinstance(other, VideoReport):
            return NotImplemented
        return all(_field_equal(getattr(self, f), getattr(other, f)) for f in self.__dataclass_fields__)


def _field_equal(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True)
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


# --------------------------------------------------------------------------- sample times
#: Plausible age of a references sample when its packet is sent [s]: every input stamps its
#: samples on the operator's clock as they come (a tracker's newest pose, a replayed frame
#: when it is due), so a sample is not older than its packet by more than a loop period or
#: two; a sample time 10 s before, or 1 s after, its packet's send time is a broken (or
#: forged) clock, which would otherwise pass into τ_f and a recording's message times.
MAX_SAMPLE_AGE_S = 10.0
MAX_SAMPLE_LEAD_S = 1.0


def sample_time_problem(t: float, send_time: float) -> str | None:
    """What is wrong with a references sample stamped ``t`` sent at ``send_time`` (both on
    the sender's clock) [s], or None: see ``MAX_SAMPLE_AGE_S``."""
    lead = t - send_time
    if -MAX_SAMPLE_AGE_S <= lead <= MAX_SAMPLE_LEAD_S:
        return None
    return (f"sample time {t:.6g} s is {lead:+.3g} s from its packet's send time "
            f"(plausible: -{MAX_SAMPLE_AGE_S:g} to +{MAX_SAMPLE_LEAD_S:g} s)")


# --------------------------------------------------------------------------- payload codecs
_F64 = np.dtype(">f8")
_REF_FIXED = struct.Struct("!Hd")
#: (attribute, size, flag bit) of the optional extras, in wire order.
_REF_EXTRAS: tuple[tuple[str, int, int], ...] = (
    ("head_orientation", 4, 0x1),
    ("left_leg", 6, 0x2),
    ("right_leg", 6, 0x4),
)
#: Flag of the validity mask: a u32 after the extras, bit i set when flat scalar i was
#: measured (a VR source has the head and the hands only); absent: all were.
_REF_VALID_FLAG = 0x8
_REF_VALID = struct.Struct("!I")
_REF_KNOWN_FLAGS = 0xF


def _f64_array(values: Any, size: int, name: str) -> bytes:
    array = np.asarray(values, dtype=float).reshape(-1)
    if array.shape != (size,):
        raise ValueError(f"{name} must have {size} values, got {array.shape}")
    return array.astype(_F64).tobytes()


def _read_f64(payload: bytes, offset: int, size: int) -> np.ndarray:
    return np.frombuffer(payload, dtype=_F64, count=size, offset=offset).astype(np.float64)


def encode_references(refs: RobotReferences) -> bytes:
    """Payload of a REFERENCES packet (170 bytes, up to 302 with all extras and the mask)."""
    flags = 0
    tail = []
    for name, size, bit in _REF_EXTRAS:
        value = getattr(refs, name)
        if value is not None:
            flags |= bit
            tail.append(_f64_array(value, size, name))
    if refs.valid is not None and not np.all(refs.valid):
        # Sent: the robot recorded every scalar as measured, and its exported takes said so.
        flags |= _REF_VALID_FLAG
        valid = np.asarray(refs.valid, dtype=bool).reshape(-1)
        if valid.shape != (FLAT_SIZE,):
            raise ValueError(f"valid must have {FLAT_SIZE} values, got {valid.shape}")
        tail.append(_REF_VALID.pack(int(np.sum(valid.astype(np.int64) << np.arange(FLAT_SIZE)))))
    return b"".join([_REF_FIXED.pack(flags, refs.t), _f64_array(refs.to_flat(), FLAT_SIZE, "flat"), *tail])


def decode_references(payload: bytes) -> RobotReferences:
    """Inverse of :func:`encode_references`; rejects non-finite values (never tracked)."""
    flags, _t = _REF_FIXED.unpack_from(payload, 0)
    if flags & ~_REF_KNOWN_FLAGS:
        raise MalformedPacket(f"unknown references flags {flags:#x}")
    count = 1 + FLAT_SIZE + sum(size for _, size, bit in _REF_EXTRAS if flags & bit)
    expected = 2 + 8 * count + (_REF_VALID.size if flags & _REF_VALID_FLAG else 0)
    if len(payload) != expected:
        raise MalformedPacket(f"references payload is {len(payload)} bytes, expected {expected}")
    # One array for t, the flat vector and the extras: one finiteness check for all of them.
    values = _read_f64(payload, 2, count)
    if not np.isfinite(values).all():
        raise MalformedPacket("non-finite values in references")
    offset = 1 + FLAT_SIZE
    extras = {}
    for name, size, bit in _REF_EXTRAS:
        if flags & bit:
            extras[name] = values[offset:offset + size]
            offset += size
    if flags & _REF_VALID_FLAG:
        (bits,) = _REF_VALID.unpack_from(payload, 2 + 8 * count)
        if bits >> FLAT_SIZE:
            raise MalformedPacket(f"references validity mask {bits:#x} names signals beyond {FLAT_SIZE}")
        extras["valid"] = (bits >> np.arange(FLAT_SIZE)) & 1 == 1
    return RobotReferences.from_flat(values[0], values[1:1 + FLAT_SIZE], **extras)


_PING = struct.Struct("!I")
_PONG = struct.Struct("!Idd")


def encode_clock_ping(ping: ClockPing) -> bytes:
    return _PING.pack(ping.exchange_id)


def decode_clock_ping(payload: bytes) -> ClockPing:
    _expect_size(payload, _PING.size, "clock ping")
    return ClockPing(*_PING.unpack(payload))


def encode_clock_pong(pong: ClockPong) -> bytes:
    return _PONG.pack(pong.exchange_id, pong.ping_send_time, pong.ping_receive_time)


def decode_clock_pong(payload: bytes) -> ClockPong:
    _expect_size(payload, _PONG.size, "clock pong")
    return ClockPong(*_PONG.unpack(payload))


_FEEDBACK_FIXED = struct.Struct("!QddddBBHII")
_FEEDBACK_HAS_EXECUTED = 0x1
_FEEDBACK_HAS_COM = 0x2
# Added later, additively: the flags word is the payload's version. A receiver built before
# these bits rejects such packets as malformed (unknown flags) instead of misreading them.
_FEEDBACK_HAS_MEASURED_Q = 0x4
_FEEDBACK_HAS_COMMANDED_Q = 0x8
_FEEDBACK_KNOWN_FLAGS = 0xF
#: Configurations are sent as ``u16 n | n × f64``: n is the robot's nq (39 for the iCub).
_CONFIG_COUNT = struct.Struct("!H")
#: Upper bound on n, so that two configurations always fit in a datagram.
_MAX_CONFIG_SIZE = 64


def _encode_configuration(values: Any, name: str) -> bytes:
    array = np.asarray(values, dtype=float).reshape(-1)
    if not 0 < array.size <= _MAX_CONFIG_SIZE:
        raise ValueError(f"{name} must have 1..{_MAX_CONFIG_SIZE} values, got {array.size}")
    return _CONFIG_COUNT.pack(array.size) + array.astype(_F64).tobytes()


def _decode_configuration(payload: bytes, offset: int, name: str) -> tuple[np.ndarray, int]:
    (count,) = _CONFIG_COUNT.unpack_from(payload, offset)
    if not 0 < count <= _MAX_CONFIG_SIZE:
        raise MalformedPacket(f"{name} announces {count} values")
    offset += _CONFIG_COUNT.size
    if len(payload) < offset + 8 * count:
        raise MalformedPacket(f"{name} is truncated")
    return _read_f64(payload, offset, count), offset + 8 * count


def encode_feedback(feedback: Feedback) -> bytes:
    """Payload of a FEEDBACK packet: 52 bytes + 160 with executed refs + 16 with CoM
    + (2 + 8 nq) per configuration (measured, commanded): 856 bytes in all for the iCub."""
    flags = (_FEEDBACK_HAS_EXECUTED if feedback.executed is not None else 0) | (
        _FEEDBACK_HAS_COM if feedback.measured_com_xy is not None else 0
    ) | (_FEEDBACK_HAS_MEASURED_Q if feedback.measured_q is not None else 0) | (
        _FEEDBACK_HAS_COMMANDED_Q if feedback.commanded_q is not None else 0
    )
    parts = [
        _FEEDBACK_FIXED.pack(
            feedback.last_ref_seq, feedback.last_ref_time, feedback.forward_delay,
            feedback.forward_delay_std, feedback.clock_offset, feedback.watchdog_state,
            feedback.compensation_state, flags,
            feedback.packets_accepted & 0xFFFFFFFF, feedback.packets_dropped & 0xFFFFFFFF,
        )
    ]
    if feedback.executed is not None:
        parts.append(_f64_array(feedback.executed, FLAT_SIZE, "executed"))
    if feedback.measured_com_xy is not None:
        parts.append(_f64_array(feedback.measured_com_xy, 2, "measured_com_xy"))
    if feedback.measured_q is not None:
        parts.append(_encode_configuration(feedback.measured_q, "measured_q"))
    if feedback.commanded_q is not None:
        parts.append(_encode_configuration(feedback.commanded_q, "commanded_q"))
    return b"".join(parts)


def decode_feedback(payload: bytes) -> Feedback:
    fields = _FEEDBACK_FIXED.unpack_from(payload, 0)
    flags = fields[7]
    if flags & ~_FEEDBACK_KNOWN_FLAGS:
        raise MalformedPacket(f"unknown feedback flags {flags:#x}")
    has_executed = bool(flags & _FEEDBACK_HAS_EXECUTED)
    has_com = bool(flags & _FEEDBACK_HAS_COM)
    fixed_size = _FEEDBACK_FIXED.size + 8 * (FLAT_SIZE * has_executed + 2 * has_com)
    if not flags & (_FEEDBACK_HAS_MEASURED_Q | _FEEDBACK_HAS_COMMANDED_Q):
        _expect_size(payload, fixed_size, "feedback")
    elif len(payload) < fixed_size:
        raise MalformedPacket(f"feedback payload is {len(payload)} bytes, expected at least {fixed_size}")
    offset = _FEEDBACK_FIXED.size
    executed = _read_f64(payload, offset, FLAT_SIZE) if has_executed else None
    offset += 8 * FLAT_SIZE * has_executed
    com = _read_f64(payload, offset, 2) if has_com else None
    offset += 16 * has_com
    measured_q = commanded_q = None
    if flags & _FEEDBACK_HAS_MEASURED_Q:
        measured_q, offset = _decode_configuration(payload, offset, "measured_q")
    if flags & _FEEDBACK_HAS_COMMANDED_Q:
        commanded_q, offset = _decode_configuration(payload, offset, "commanded_q")
    _expect_size(payload, offset, "feedback")
    # mypy cannot tell that fields[:7] holds exactly seven values, so it counts the keywords twice.
    return Feedback(*fields[:7], packets_accepted=fields[8], packets_dropped=fields[9],  # type: ignore[misc]
                    executed=executed, measured_com_xy=com, measured_q=measured_q, commanded_q=commanded_q)


_VIDEO_REPORT = struct.Struct("!dddII")


def encode_video_report(report: VideoReport) -> bytes:
    return _VIDEO_REPORT.pack(report.jitter_buffer, report.backward_delay, report.backward_delay_std,
                              report.frames_received & 0xFFFFFFFF, report.frames_lost & 0xFFFFFFFF)


def decode_video_report(payload: bytes) -> VideoReport:
    _expect_size(payload, _VIDEO_REPORT.size, "video report")
    return VideoReport(*_VIDEO_REPORT.unpack(payload))


def _expect_size(payload: bytes, size: int, what: str) -> None:
    if len(payload) != size:
        raise MalformedPacket(f"{what} payload is {len(payload)} bytes, expected {size}")


class PayloadCodec(NamedTuple):
    """How one packet type's message is turned into payload bytes and back."""

    packet_type: int   # a PacketType for the built-in types
    message_class: type
    encode: Callable[[Any], bytes]
    decode: Callable[[bytes], Any]


#: Payload codecs by packet type, and by message class for encoding.
PAYLOAD_CODECS: dict[int, PayloadCodec] = {}
_CODEC_BY_CLASS: dict[type, PayloadCodec] = {}


def register_payload(packet_type: int, message_class: type,
                     encode: Callable[[Any], bytes], decode: Callable[[bytes], Any]) -> None:
    """Add a packet type (the way to extend the protocol without touching the codec).

    ``decode`` may raise :class:`ProtocolError`, ``ValueError``, ``struct.error`` or
    ``TypeError`` on bad input; the codec turns the latter three into :class:`MalformedPacket`.
    """
    if not 0 < packet_type < 256:
        raise ValueError("packet type must fit in one byte and not be 0")
    if packet_type in PAYLOAD_CODECS or message_class in _CODEC_BY_CLASS:
        raise ValueError(f"packet type {packet_type} or class {message_class.__name__} already registered")
    codec = PayloadCodec(packet_type, message_class, encode, decode)
    PAYLOAD_CODECS[packet_type] = codec
    _CODEC_BY_CLASS[message_class] = codec


register_payload(PacketType.REFERENCES, RobotReferences, encode_references, decode_references)
register_payload(PacketType.CLOCK_PING, ClockPing, encode_clock_ping, decode_clock_ping)
register_payload(PacketType.CLOCK_PONG, ClockPong, encode_clock_pong, decode_clock_pong)
register_payload(PacketType.FEEDBACK, Feedback, encode_feedback, decode_feedback)
register_payload(PacketType.VIDEO_REPORT, VideoReport, encode_video_report, decode_video_report)


# --------------------------------------------------------------------------- packets
@dataclass(frozen=True)
class Packet:
    """A decoded, authenticated packet.

    Attributes:
        packet_type: the type byte (a :class:`PacketType` for the built-in types).
        source_id: the sending endpoint's id.
        stream_id: the sender's logical stream.
        seq: sequence number within (source_id, stream_id), from 1.
        send_time: sender's clock when encoded [s].
        message: the typed payload (RobotReferences, ClockPing, ClockPong, Feedback,
            VideoReport, or a registered class).
        size: datagram size [bytes].
    """

    packet_type: int
    source_id: int
    stream_id: int
    seq: int
    send_time: float
    message: Any
    size: int


def packet_type_of(message: Any) -> int:
    """The packet type that carries ``message``; TypeError if its class is not registered."""
    codec = _CODEC_BY_CLASS.get(type(message))
    if codec is None:
        raise TypeError(f"no packet type registered for {type(message).__name__}")
    return codec.packet_type


class PacketCodec:
    """Encodes and decodes packets authenticated with one shared secret.

    Args:
        secret: shared secret (see :mod:`teleop.net.secret`), at least 16 bytes.
        max_datagram: largest datagram encoded or accepted [bytes].
    """

    def __init__(self, secret: bytes, *, max_datagram: int = DEFAULT_MAX_DATAGRAM) -> None:
        if max_datagram < OVERHEAD:
            raise ValueError(f"max_datagram must be at least {OVERHEAD} bytes")
        self.max_datagram = max_datagram
        # Keyed once; copying a keyed HMAC is ~3x cheaper than re-keying for every packet.
        self._mac = hmac.new(derive_mac_key(secret), digestmod=hashlib.sha256)

    def _mac_of(self, data: memoryview | bytes) -> bytes:
        mac = self._mac.copy()
        mac.update(data)
        return mac.digest()[:MAC_SIZE]

    def encode(self, message: Any, *, source_id: int, stream_id: int, seq: int, send_time: float) -> bytes:
        """Encode ``message`` (a registered message class) into one datagram.

        Raises:
            TypeError: unregistered message class.
            ValueError: field out of range, or the packet would exceed ``max_datagram``.
        """
        codec = _CODEC_BY_CLASS.get(type(message))
        if codec is None:
            raise TypeError(f"no packet type registered for {type(message).__name__}")
        if not 0 < source_id < 2**32 or not 0 <= stream_id < 2**32 or not 0 < seq < 2**64:
            raise ValueError("source_id (u32, ≠0), stream_id (u32) or seq (u64, ≠0) out of range")
        try:
            payload = codec.encode(message)
        except struct.error as exc:  # an integer field out of its wire range
            raise ValueError(f"cannot encode {type(message).__name__}: {exc}") from exc
        size = OVERHEAD + len(payload)
        if size > self.max_datagram:
            raise OversizedPacket(f"packet of {size} bytes exceeds the {self.max_datagram}-byte limit")
        header = HEADER.pack(MAGIC, PROTOCOL_VERSION, codec.packet_type, 0, source_id, stream_id,
                             seq, float(send_time), len(payload))
        body = header + payload
        return body + self._mac_of(body)

    def decode(self, data: bytes) -> Packet:
        """Decode one datagram. Raises a :class:`ProtocolError` subclass, nothing else (unless a
        registered payload decoder has a bug: see :class:`PacketFilter`'s ``internal_error``)."""
        size = len(data)
        if size > self.max_datagram:
            raise OversizedPacket(f"{size}-byte datagram exceeds the {self.max_datagram}-byte limit")
        if size < OVERHEAD:
            raise TruncatedPacket(f"{size} bytes is shorter than a packet with no payload")
        magic, version, packet_type, _flags, source_id, stream_id, seq, send_time, length = \
            HEADER.unpack_from(data, 0)
        if magic != MAGIC:
            raise BadMagic("not a teleop packet")
        if version != PROTOCOL_VERSION:
            raise UnsupportedVersion(f"protocol version {version}, this build speaks {PROTOCOL_VERSION}")
        if length > self.max_datagram - OVERHEAD:
            raise OversizedPacket(f"declared payload of {length} bytes exceeds the limit")
        if size < OVERHEAD + length:
            raise TruncatedPacket(f"{size} bytes, header announces {OVERHEAD + length}")
        if size > OVERHEAD + length:
            # Trailing bytes are not covered by the MAC; accepting them would let anyone pad.
            raise MalformedPacket(f"{size - OVERHEAD - length} bytes after the MAC")
        view = memoryview(data)
        end = HEADER_SIZE + length
        if not hmac.compare_digest(self._mac_of(view[:end]), view[end:]):
            raise BadMac("MAC mismatch (tampered, corrupted or another secret)")
        # Authenticated from here on: the fields come from a holder of the secret.
        codec = PAYLOAD_CODECS.get(packet_type)
        if codec is None:
            raise UnknownPacketType(f"packet type {packet_type} is not known to this build")
        if source_id == 0 or seq == 0 or not math.isfinite(send_time):
            raise MalformedPacket("source_id 0, seq 0 or non-finite send_time")
        try:
            message = codec.decode(bytes(view[HEADER_SIZE:end]))
        except ProtocolError:
            raise
        except (ValueError, struct.error, TypeError) as exc:
            raise MalformedPacket(f"bad {codec.message_class.__name__} payload: {exc}") from exc
        return Packet(packet_type, source_id, stream_id, seq, send_time, message, size)


def packet_type_name(packet_type: int) -> str:
    """A packet type as the counters name it: "references" for a built-in type, "type_<n>"
    for one registered with :func:`register_payload`."""
    try:
        return PacketType(packet_type).name.lower()
    except ValueError:
        return f"type_{packet_type}"


def format_address(peer) -> str:
    """A socket address (host, port, ...) as a user writes it: "127.0.0.1:9001", "[::1]:9001"
    ("an unknown sender" for None: a filter fed datagrams without their sender)."""
    if peer is None:
        return "an unknown sender"
    host, port = peer[0], peer[1]
    return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"
