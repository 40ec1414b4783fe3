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
VERSION = 1
HEADER = struct.Struct("!2sBBIHHIBBdddd")
HEADER_BYTES = HEADER.size  # 50
DEFAULT_MAX_DATAGRAM_BYTES = 1200
MAX_CHUNKS = 0xFFFF

#: ``authenticate(message) -> tag``: computes the tag appended to a datagram.
Authenticate = Callable[[bytes], bytes]
#: ``verify(message, tag) -> bool``: True if ``tag`` authenticates ``message``.
Verify = Callable[[bytes, bytes], bool]


class StreamId(IntEnum):
    """Camera stream identifiers (``stream_id`` byte)."""

    LEFT = 0
    RIGHT = 1


#: Display names of the streams, used by the web viewer's URLs.
STREAM_NAMES = {StreamId.LEFT: "left", StreamId.RIGHT: "right"}


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


def chunk_payload_bytes(max_datagram_bytes: int, tag_len: int = 0) -> int:
    """Bytes of encoded frame carried per datagram for a datagram size limit (bytes)."""
    room = max_datagram_bytes - HEADER_BYTES - tag_len
    if room < 1:
        raise ValueError(
            f"max_datagram_bytes={max_datagram_bytes} leaves no room for payload after the "
            f"{HEADER_BYTES}-byte header and {tag_len}-byte tag"
        )
    return room


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
) -> Iterator[bytes]:
    """Yield the datagrams of one encoded frame, in chunk order.

    The generator stamps ``send_s`` with ``send_clock()`` when it builds each datagram,
    so a caller that sends each datagram as soon as it is yielded gets the true
    per-datagram send time.

    Args:
        payload: the encoded frame (non-empty).
        tag_len: exact length of the tags ``authenticate`` returns (bytes); required
            because the header announces it before the tag is computed.

    Raises:
        ValueError: empty payload, a frame needing more than 65535 datagrams, or an
            ``authenticate`` hook returning a tag of another length than ``tag_len``.
    """
    if not payload:
        raise ValueError("cannot send an empty frame")
    if authenticate is None:
        tag_len = 0
    slice_bytes = chunk_payload_bytes(max_datagram_bytes, tag_len)
    chunk_count = math.ceil(len(payload) / slice_bytes)
    if chunk_count > MAX_CHUNKS:
        raise ValueError(f"frame of {len(payload)} bytes needs {chunk_count} > {MAX_CHUNKS} datagrams")
    view = memoryview(payload)
    frame_id &= 0xFFFFFFFF
    for index in range(chunk_count):
        piece = view[index * slice_bytes : (index + 1) * slice_bytes]
        header = HEADER.pack(
            MAGIC, VERSION, stream_id, frame_id, index, chunk_count, len(payload), codec, tag_len,
            capture_s, available_s, encode_end_s, send_clock(),
        )
        message = header + piece
        if authenticate is None:
            yield message
            continue
        tag = authenticate(message)
        if len(tag) != tag_len:
            raise ValueError(f"authenticate returned a {len(tag)}-byte tag, expected {tag_len}")
        yield message + tag


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
    if payload_len < 1 or header.frame_bytes < header.chunk_count or payload_len > header.frame_bytes:
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
