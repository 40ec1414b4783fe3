"""Datagram format of the video stream (independent of the control protocol in ``teleop.net``).

One encoded frame (a JPEG) is cut into ``chunk_count`` consecutive slices; each slice
travels in its own UDP datagram::

    datagram = header (50 bytes) || payload slice || tag (tag_len bytes, optional)

Header, network byte order (``struct`` format ``"!2sBBIHHIBBdddd"``, 50 bytes)::

    offset size type  field          meaning
    ------ ---- ----  -------------  ----------------------------------------------------
     0      2   2s    magic          b"TV" (teleop video); anything else is foreign
     2      1   u8    version        1
     3      1   u8    stream_id      camera: 0 = left eye, 1 = right eye (0..255 allowed)
     4      4   u32   frame_id       per-stream frame counter, +1 per frame sent
     8      2   u16   chunk_index    0 .. chunk_count-1, position of this slice
    10      2   u16   chunk_count    number of slices of the frame (>= 1)
    12      4   u32   frame_bytes    total length of the encoded frame in bytes
    16      1   u8    codec          payload format, 1 = JPEG
    17      1   u8    tag_len        length of the authentication tag at the end (0 = none)
    18      8   f64   capture_s      instant the image depicts           (sender clock, s)
    26      8   f64   available_s    render/capture finished, frame ready (sender clock, s)
    34      8   f64   encode_end_s   JPEG encoding finished              (sender clock, s)
    42      8   f64   send_s         this datagram handed to the socket  (sender clock, s)

All stage timestamps are in *every* datagram (32 bytes, 2.7 % of a 1200-byte datagram):
any chunk that arrives first tells the receiver everything, whatever the reordering,
and ``send_s`` is per datagram, so the receiver sees both when the frame started and
finished leaving the sender. The sender clock is :func:`teleop.video.clock.monotonic_s`.

Authentication hook: if the sender has an ``authenticate(message: bytes) -> bytes``
callable, the tag it returns for ``message = header || payload slice`` is appended and
``tag_len`` is set (the header is covered by the tag). The receiver, if given
``verify(message: bytes, tag: bytes) -> bool``, rejects datagrams without a tag or with
a tag that does not verify. Without ``verify`` a tag is stripped unchecked. The MAC
itself (key, algorithm) belongs to ``teleop.net`` and is plugged in by the integration.

Forward error correction: with a parity group size ``G`` (``fec_group``), the ``N`` slices of
a frame form ``K = ceil(N / G)`` parity groups, *interleaved*: group ``g`` holds the slices
``g, g + K, g + 2K, ...`` (at most ``G`` of them). After the frame's slices the sender adds
one parity datagram per group, continuing the slices' round of groups (``N mod K``, then
``N + 1 mod K``, ...), each with the same header but ``codec | PARITY_FLAG`` and
``chunk_index`` = ``g``, and the payload::

    parity payload = u16 G || XOR of the group's slices, each zero-padded to the slice size

Any one slice of a group lost on the way is the XOR of the parity with the others (its
length follows from ``frame_bytes``), so one lost datagram no longer costs its whole frame,
at 1/G more bytes: RFC 5109's single-level XOR FEC without its extra header, its groups
interleaved like the column FEC of SMPTE 2022-1. Interleaving costs nothing against
scattered losses and turns a burst of up to ``K`` consecutive datagrams lost (a wireless fade,
a full queue: losses come in runs) into one loss per group, all recoverable, wherever it falls
(the datagrams' groups repeat with period ``K`` to the last parity); consecutive groups (wire
version 1) lost the frame to any two losses in a row.

Size: ``max_datagram_bytes`` (default 1200, which fits the IPv6 minimum MTU with room
for UDP/IP and tunnel headers) bounds the whole UDP payload: header + slice + tag.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from enum import IntEnum
from typing import Callable, Iterator

MAGIC = b"TV"
#: 2: parity groups interleaved (1 grouped consecutive slices; the two do not mix).
VERSION = 2
HEADER = struct.Struct("!2sBBIHHIBBdddd")
HEADER_BYTES = HEADER.size  # 50
DEFAULT_MAX_DATAGRAM_BYTES = 1200
MAX_CHUNKS = 0xFFFF
#: Flag in the ``codec`` byte of a parity datagram (forward error correction, see above).
PARITY_FLAG = 0x80
#: Parity payload prefix: the group size G (u16).
PARITY_PREFIX = struct.Struct("!H")
#: Default parity group size: one parity datagram per 8 slices (12.5 % more bytes). At 1 %
#: datagram loss a 35-datagram frame (640x480 JPEG, 40 KB) is lost 30 % of the time without
#: parity, 1.7 % with (a group is lost with two of its 9 datagrams); at 3 %: 66 % and 13 %.
DEFAULT_FEC_GROUP = 8

#: ``authenticate(message) -> tag``: computes the tag appended to a datagram.
Authenticate = Callable[[bytes], bytes]
#: ``verify(message, tag) -> bool``: True if ``tag`` authenticates ``message``.
Verify = Callable[[bytes, bytes], bool]


class StreamId(IntEnum):
    """Camera stream identifiers (``stream_id`` byte)."""

    LEFT = 0
    RIGHT = 1


#: Display names of the streams, used by the web viewer's URLs.
STREAM_NAMES: dict[int, str] = {StreamId.LEFT: "left", StreamId.RIGHT: "right"}   # by stream_id byte


class MalformedDatagram(ValueError):
    """A datagram is not a valid video chunk. ``reason`` is a short counter key."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


@dataclass(frozen=True)
class ChunkHeader:
    """Decoded header of one datagram; times in seconds of the sender's monotonic clock."""

    stream_id: int
    frame_id: int
    chunk_index: int
    chunk_count: int
    frame_bytes: int
    codec: int
    tag_len: int
    capture_s: float
    available_s: float
    encode_end_s: float
    send_s: float

    @property
    def is_parity(self) -> bool:
        """A parity datagram (``chunk_index`` is then its group's number)."""
        return bool(self.codec & PARITY_FLAG)

    @property
    def payload_codec(self) -> int:
        """The frame's codec, whether this datagram carries a slice or a parity."""
        return self.codec & ~PARITY_FLAG & 0xFF


def chunk_payload_bytes(max_datagram_bytes: int, tag_len: int = 0) -> int:
    """Bytes of encoded frame carried per datagram for a datagram size limit (bytes)."""
    room = max_datagram_bytes - HEADER_BYTES - tag_len
    if room < 1:
        raise ValueError(
            f"max_datagram_bytes={max_datagram_bytes} leaves no room for payload after the "
            f"{HEADER_BYTES}-byte header and {tag_len}-byte tag"
        )
    return room


def frame_slice_bytes(max_datagram_bytes: int, tag_len: int = 0, fec_group: int = 0) -> int:
    """Bytes of encoded frame per slice: what a datagram carries, less the parity prefix when
    there is parity (a parity datagram is a slice's worth and its 2-byte prefix, and must
    fit the same limit)."""
    return chunk_payload_bytes(max_datagram_bytes - (PARITY_PREFIX.size if fec_group else 0), tag_len)


def packetize(
    payload: bytes,
    *,
    stream_id: int,
    frame_id: int,
    codec: int,
    capture_s: float,
    available_s: float,
    encode_end_s: float,
    send_clock: Callable[[], float],
    max_datagram_bytes: int = DEFAULT_MAX_DATAGRAM_BYTES,
    authenticate: Authenticate | None = None,
    tag_len: int = 0,
    fec_group: int = 0,
) -> Iterator[bytes]:
    """Yield the datagrams of one encoded frame: its slices in chunk order, then one parity
    datagram per interleaved group, in the slices' round of groups (see the module docstring;
    none when ``fec_group`` is 0).

    The generator stamps ``send_s`` with ``send_clock()`` when it builds each datagram,
    so a caller that sends each datagram as soon as it is yielded gets the true
    per-datagram send time.

    Args:
        payload: the encoded frame (non-empty).
        tag_len: exact length of the tags ``authenticate`` returns (bytes); required
            because the header announces it before the tag is computed.
        fec_group: slices per parity datagram, 0 (none) or 1..65535.

    Raises:
        ValueError: empty payload, a frame needing more than 65535 datagrams, or an
            ``authenticate`` hook returning a tag of another length than ``tag_len``.
    """
    if not payload:
        raise ValueError("cannot send an empty frame")
    if not 0 <= fec_group <= 0xFFFF:
        raise ValueError(f"fec_group must be 0 (no parity) or 1..65535, got {fec_group}")
    if authenticate is None:
        tag_len = 0
    slice_bytes = frame_slice_bytes(max_datagram_bytes, tag_len, fec_group)
    chunk_count = math.ceil(len(payload) / slice_bytes)
    if chunk_count > MAX_CHUNKS:
        raise ValueError(f"frame of {len(payload)} bytes needs {chunk_count} > {MAX_CHUNKS} datagrams")
    view = memoryview(payload)
    frame_id &= 0xFFFFFFFF

    def datagram(index: int, codec_byte: int, body: bytes | memoryview) -> bytes:
        header = HEADER.pack(
            MAGIC, VERSION, stream_id, frame_id, index, chunk_count, len(payload), codec_byte, tag_len,
            capture_s, available_s, encode_end_s, send_clock(),
        )
        message = header + body
        if authenticate is None:
            return message
        tag = authenticate(message)
        if len(tag) != tag_len:
            raise ValueError(f"authenticate returned a {len(tag)}-byte tag, expected {tag_len}")
        return message + tag

    groups = parity_groups(chunk_count, fec_group)
    parities = [0] * groups   # XOR of each group's slices, as one big integer (fast in CPython)
    for index in range(chunk_count):
        piece = view[index * slice_bytes : (index + 1) * slice_bytes]
        yield datagram(index, codec, piece)
        if groups:
            parities[index % groups] ^= int.from_bytes(bytes(piece).ljust(slice_bytes, b"\0"), "big")
    for group in parity_send_order(chunk_count, fec_group):
        body = PARITY_PREFIX.pack(fec_group) + parities[group].to_bytes(slice_bytes, "big")
        yield datagram(group, codec | PARITY_FLAG, body)


def parity_groups(chunk_count: int, fec_group: int) -> int:
    """Number of parity datagrams of a frame of ``chunk_count`` slices (0 without FEC)."""
    return -(-chunk_count // fec_group) if fec_group else 0


def parity_group_members(group: int, chunk_count: int, fec_group: int) -> range:
    """Indices of the slices of parity group ``group`` (interleaved: ``group``, ``group + K``,
    ... with ``K`` = :func:`parity_groups`)."""
    return range(group, chunk_count, parity_groups(chunk_count, fec_group))


def parity_send_order(chunk_count: int, fec_group: int) -> list[int]:
    """Groups of the parity datagrams in the order they follow the slices: the slices' round
    of groups continued (``N mod K``, ``N + 1 mod K``, ...), so that the groups of a frame's
    datagrams repeat with period K to the last parity and any K in a row are K groups."""
    groups = parity_groups(chunk_count, fec_group)
    return [(chunk_count + j) % groups for j in range(groups)]


def parity_group_of(index: int, chunk_count: int, fec_group: int) -> int:
    """Parity group of slice ``index`` (``fec_group`` ≥ 1)."""
    return index % parity_groups(chunk_count, fec_group)


def recover_slice(parity_body: bytes, others: list[bytes], length: int) -> bytes:
    """The one missing slice of a parity group: the XOR of the group's parity with its other
    slices (zero-padded to the slice size), cut to ``length`` bytes (the slice size, or less
    for the frame's last slice).

    Args:
        parity_body: the parity datagram's payload after its :data:`PARITY_PREFIX`.
        others: the group's slices that arrived.
    """
    size = len(parity_body)
    value = int.from_bytes(parity_body, "big")
    for piece in others:
        value ^= int.from_bytes(piece.ljust(size, b"\0"), "big")
    return value.to_bytes(size, "big")[:length]


def parse(datagram: bytes, verify: Verify | None = None) -> tuple[ChunkHeader, bytes]:
    """Validate one datagram and return its header and payload slice.

    Raises:
        MalformedDatagram: with ``reason`` one of ``"short"``, ``"magic"``,
            ``"version"``, ``"layout"`` (inconsistent counts/lengths), ``"timestamp"``
            (non-finite), ``"unauthenticated"`` (verify set, no tag), ``"auth"`` (tag
            does not verify, or the hook raised).
    """
    if len(datagram) < HEADER_BYTES:
        raise MalformedDatagram("short", f"{len(datagram)} bytes")
    fields = HEADER.unpack_from(datagram)
    if fields[0] != MAGIC:
        raise MalformedDatagram("magic")
    if fields[1] != VERSION:
        raise MalformedDatagram("version", str(fields[1]))
    header = ChunkHeader(*fields[2:])
    if header.chunk_count < 1 or header.chunk_index >= header.chunk_count:
        raise MalformedDatagram("layout", f"chunk {header.chunk_index}/{header.chunk_count}")
    body_end = len(datagram) - header.tag_len
    payload_len = body_end - HEADER_BYTES
    if header.is_parity:
        _check_parity_layout(header, datagram[HEADER_BYTES:body_end])
    elif payload_len < 1 or header.frame_bytes < header.chunk_count or payload_len > header.frame_bytes:
        raise MalformedDatagram("layout", f"payload {payload_len} B of frame {header.frame_bytes} B")
    if not all(math.isfinite(t) for t in (header.capture_s, header.available_s, header.encode_end_s, header.send_s)):
        raise MalformedDatagram("timestamp")
    if verify is not None:
        if header.tag_len == 0:
            raise MalformedDatagram("unauthenticated")
        try:
            authentic = bool(verify(datagram[:body_end], datagram[body_end:]))
        except Exception as error:  # a hook bug must not take the receiver down
            raise MalformedDatagram("auth", f"verify raised {error!r}") from None
        if not authentic:
            raise MalformedDatagram("auth")
    return header, datagram[HEADER_BYTES:body_end]


def _check_parity_layout(header: ChunkHeader, body: bytes) -> None:
    """A parity payload must be a group size and a slice's worth of bytes that fit the frame:
    the slice size it implies must cut ``frame_bytes`` into ``chunk_count`` slices, and its
    group number must be one of the frame's groups."""
    if len(body) < PARITY_PREFIX.size + 1:
        raise MalformedDatagram("layout", f"parity payload of {len(body)} B")
    (group,) = PARITY_PREFIX.unpack_from(body)
    slice_bytes = len(body) - PARITY_PREFIX.size
    if group < 1 or header.chunk_index >= parity_groups(header.chunk_count, group) \
            or -(-header.frame_bytes // slice_bytes) != header.chunk_count:
        raise MalformedDatagram("layout", f"parity {header.chunk_index} of groups of {group}, {slice_bytes} B "
                                          f"slices of a frame of {header.frame_bytes} B in {header.chunk_count}")


def split_parity(body: bytes) -> tuple[int, bytes]:
    """(group size G, XOR of the group's slices) of a parity datagram's payload (as
    :func:`parse` returns it, which checked its layout)."""
    return PARITY_PREFIX.unpack_from(body)[0], body[PARITY_PREFIX.size:]
