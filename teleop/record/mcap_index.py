"""Index of an MCAP file, complete or cut short, and raw message access through it.

Two ways to build the index, one result (:class:`FileIndex`):

* **Summary** (complete files): the footer points at the summary section; its chunk
  indexes say where the chunks are and the per-chunk message indexes give every channel's
  message count and time range without decompressing anything.
* **Scan** (files without a usable footer, e.g. after SIGKILL): records are read one by one
  from the start. Each record's length is checked against the bytes left in the file
  before it is read, and each chunk is decompressed and CRC-checked, so the scan stops
  cleanly at the first record that is cut short or damaged. Everything before it is kept.
  This is what makes a crashed recording readable: the recorder flushes whole chunks, so
  only the chunk being written when the process died is lost.

Messages are then read block by block (a block is a chunk, or a message outside chunks),
skipping blocks that hold none of the wanted channels or lie outside the time window.
"""

from __future__ import annotations

import io
import os
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from mcap.data_stream import ReadDataStream
from mcap.opcode import Opcode
from mcap.records import (
    Channel,
    Chunk,
    ChunkIndex,
    Footer,
    Header,
    Message,
    Metadata,
    MetadataIndex,
    Schema,
    Statistics,
)
from mcap.stream_reader import breakup_chunk

#: The 8 bytes that open and close every MCAP file.
MAGIC = b"\x89MCAP0\r\n"
_RECORD_PREFIX = 9  # opcode (1 byte) + body length (8 bytes)
_FOOTER_BODY = 20  # summary_start (8) + summary_offset_start (8) + summary_crc (4)
_KNOWN_OPCODES = {int(op) for op in Opcode}


class RecordingFormatError(ValueError):
    """A file that is not an MCAP recording, or is damaged before its first message.

    The message always names the file.
    """


@dataclass
class DataBlock:
    """Where some messages are: a chunk record or a single message record.

    Attributes:
        offset: file offset of the record (its opcode byte) [bytes].
        body_length: length of the record body [bytes].
        is_chunk: chunk (True) or lone message (False).
        start_ns, end_ns: log-time range of its messages [ns].
        channel_ids: channels with messages in it.
    """

    offset: int
    body_length: int
    is_chunk: bool
    start_ns: int
    end_ns: int
    channel_ids: frozenset[int]


@dataclass
class ChannelCounts:
    """Message count and log-time range of one channel (times in ns; 0 when empty)."""

    count: int = 0
    first_ns: int = 0
    last_ns: int = 0

    def add(self, count: int, first_ns: int, last_ns: int) -> None:
        if count == 0:
            return
        if self.count == 0:
            self.first_ns, self.last_ns = first_ns, last_ns
        else:
            self.first_ns = min(self.first_ns, first_ns)
            self.last_ns = max(self.last_ns, last_ns)
        self.count += count


@dataclass
class FileIndex:
    """Everything known about an MCAP file without holding its messages.

    Attributes:
        path: the file.
        complete: True when the file has a valid footer and summary (closed properly).
        header: the MCAP header record.
        schemas, channels: records by id.
        counts: per channel id, message count and time range.
        blocks: where the messages are, in file order.
        metadata: metadata records, in file order.
        file_bytes: size of the file [bytes].
        valid_bytes: bytes up to the end of the last intact record [bytes].
        problem: why a scan stopped early (None for complete files and clean ends).
    """

    path: Path
    complete: bool
    header: Header
    schemas: dict[int, Schema] = field(default_factory=dict)
    channels: dict[int, Channel] = field(default_factory=dict)
    counts: dict[int, ChannelCounts] = field(default_factory=dict)
    blocks: list[DataBlock] = field(default_factory=list)
    metadata: list[Metadata] = field(default_factory=list)
    file_bytes: int = 0
    valid_bytes: int = 0
    problem: str | None = None

    @property
    def message_count(self) -> int:
        return sum(c.count for c in self.counts.values())

    @property
    def discarded_bytes(self) -> int:
        return self.file_bytes - self.valid_bytes


class _Damaged(Exception):
    """Internal: the summary path cannot be trusted; fall back to a scan."""


def _looks_like(head: bytes) -> str:
    """What a file's first bytes suggest it is instead, for the error message."""
    if head.startswith(b"PK"):
        return "it looks like a zip archive, e.g. an .npz"
    if head.startswith(b"\x93NUMPY"):
        return "it looks like a .npy array"
    try:
        text = head.decode("ascii")
    except UnicodeDecodeError:
        return "it is some other binary file"
    return "it looks like a text file" if text.isprintable() or text.strip() else "it is some other file"

def _stream(body: bytes) -> ReadDataStream:
    return ReadDataStream(io.BytesIO(body))


def _read_exact(f, offset: int, length: int) -> bytes:
    f.seek(offset)
    data = f.read(length)
    if len(data) != length:
        raise _Damaged(f"short read at {offset}")
    return data


def _records(buf: bytes) -> Iterator[tuple[int, bytes]]:
    """(opcode, body) of the records packed in ``buf``; raises _Damaged if they overrun it."""
    pos = 0
    while pos < len(buf):
        if pos + _RECORD_PREFIX > len(buf):
            raise _Damaged("record prefix overruns its section")
        opcode, length = struct.unpack_from("<BQ", buf, pos)
        pos += _RECORD_PREFIX
        if pos + length > len(buf):
            raise _Damaged("record overruns its section")
        yield opcode, buf[pos:pos + length]
        pos += length


def build_index(path: str | os.PathLike) -> FileIndex:
    """Index an MCAP file; complete files through their summary, others by a tolerant scan.

    Raises:
        FileNotFoundError: no such file.
        RecordingFormatError: not an MCAP file, or cut short before the end of its header.
    """
    path = Path(path)
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(len(MAGIC))
        if head != MAGIC:
            if len(head) < len(MAGIC) and MAGIC.startswith(head):
                raise RecordingFormatError(f"{path}: truncated MCAP file ({size} bytes, shorter than its magic)")
            raise RecordingFormatError(f"{path}: not an MCAP recording (it does not begin with MCAP's "
                                       f"{len(MAGIC)}-byte signature; {_looks_like(head)})")
        header, header_end = _read_header(f, path, size)
        try:
            index = _index_from_summary(f, path, size, header)
        except Exception:  # any inconsistency in the summary: trust only what a scan can check
            index = None
        if index is None:
            index = _index_by_scan(f, path, size, header, header_end)
            # A file whose summary cannot count its messages (another tool's, without
            # indexes or statistics) may still have been closed properly.
            index.complete = index.problem is None and _footer(f, size) is not None
            if index.complete:  # the scan stops at DataEnd: the summary and footer after it are not a lost tail
                index.valid_bytes = size
    return index


def _read_header(f, path: Path, size: int) -> tuple[Header, int]:
    prefix = f.read(_RECORD_PREFIX)
    if len(prefix) < _RECORD_PREFIX:
        raise RecordingFormatError(f"{path}: truncated MCAP file (header record missing, {size} bytes)")
    opcode, length = struct.unpack("<BQ", prefix)
    if opcode != Opcode.HEADER:
        raise RecordingFormatError(f"{path}: damaged MCAP file (first record has opcode {opcode:#x}, "
                                   "expected a header)")
    end = len(MAGIC) + _RECORD_PREFIX + length
    if end > size:
        raise RecordingFormatError(f"{path}: truncated MCAP file (header record cut short)")
    try:
        header = Header.read(_stream(f.read(length)))
    except Exception as exc:
        raise RecordingFormatError(f"{path}: damaged MCAP header ({exc})") from None
    return header, end


# ------------------------------------------------------------------------ summary path


def _footer(f, size: int) -> tuple[Footer, int] | None:
    """(the footer, its offset) of a file that ends with one and the closing magic, else None."""
    tail = len(MAGIC) + _RECORD_PREFIX + _FOOTER_BODY
    if size < len(MAGIC) + tail:
        return None
    f.seek(size - tail)
    raw = f.read(tail)
    if raw[-len(MAGIC):] != MAGIC or raw[0] != Opcode.FOOTER:
        return None
    return Footer.read(_stream(raw[_RECORD_PREFIX:_RECORD_PREFIX + _FOOTER_BODY])), size - tail


def _index_from_summary(f, path: Path, size: int, header: Header) -> FileIndex | None:
    """Index from the summary section; None when the file has no usable footer/summary."""
    found = _footer(f, size)
    if found is None:
        return None
    footer, footer_offset = found
    if footer.summary_start == 0 or not len(MAGIC) < footer.summary_start <= footer_offset:
        return None
    summary = _read_exact(f, footer.summary_start, footer_offset - footer.summary_start)

    index = FileIndex(path=path, complete=True, header=header, file_bytes=size, valid_bytes=size)
    chunk_indexes: list[ChunkIndex] = []
    metadata_indexes: list[MetadataIndex] = []
    statistics: Statistics | None = None
    for opcode, body in _records(summary):
        if opcode == Opcode.SCHEMA:
            schema = Schema.read(_stream(body))
            index.schemas[schema.id] = schema
        elif opcode == Opcode.CHANNEL:
            channel = Channel.read(_stream(body))
            index.channels[channel.id] = channel
        elif opcode == Opcode.CHUNK_INDEX:
            chunk_indexes.append(ChunkIndex.read(_stream(body)))
        elif opcode == Opcode.METADATA_INDEX:
            metadata_indexes.append(MetadataIndex.read(_stream(body)))
        elif opcode == Opcode.STATISTICS:
            statistics = Statistics.read(_stream(body))
    if not chunk_indexes and (statistics is None or statistics.message_count):
        # Messages outside chunks, or a writer that wrote neither chunk indexes nor
        # statistics (another tool's): only a scan can count them.
        return None

    for channel_id in index.channels:
        index.counts[channel_id] = ChannelCounts()
    for ci in sorted(chunk_indexes, key=lambda c: c.chunk_start_offset):
        if ci.message_index_length == 0 and ci.message_index_offsets == {}:
            return None  # chunk without message indexes: counts need a scan
        block_ids = _count_from_message_indexes(f, ci, index)
        index.blocks.append(DataBlock(ci.chunk_start_offset, ci.chunk_length - _RECORD_PREFIX, True,
                                      ci.message_start_time, ci.message_end_time, frozenset(block_ids)))
    for mi in metadata_indexes:
        raw_record = _read_exact(f, mi.offset, mi.length)
        if raw_record[0] != Opcode.METADATA:
            raise _Damaged("metadata index points at another record")
        index.metadata.append(Metadata.read(_stream(raw_record[_RECORD_PREFIX:])))
    if statistics is not None and statistics.message_count != index.message_count:
        raise _Damaged("message indexes disagree with the statistics")
    return index


def _count_from_message_indexes(f, ci: ChunkIndex, index: FileIndex) -> set[int]:
    start = ci.chunk_start_offset + ci.chunk_length
    ids = set()
    for opcode, body in _records(_read_exact(f, start, ci.message_index_length)):
        if opcode != Opcode.MESSAGE_INDEX:
            continue
        channel_id, records_length = struct.unpack_from("<HI", body, 0)
        # Each entry is (log_time, offset), two little-endian uint64.
        entries = np.frombuffer(body, dtype="<u8", count=records_length // 8, offset=6).reshape(-1, 2)
        if len(entries):
            ids.add(channel_id)
            index.counts.setdefault(channel_id, ChannelCounts()).add(
                len(entries), int(entries[:, 0].min()), int(entries[:, 0].max()))
    return ids


# --------------------------------------------------------------------------- scan path


def _index_by_scan(f, path: Path, size: int, header: Header, start: int) -> FileIndex:
    index = FileIndex(path=path, complete=False, header=header, file_bytes=size, valid_bytes=start)
    pos = start
    f.seek(pos)
    while True:
        prefix = f.read(_RECORD_PREFIX)
        if len(prefix) == 0:
            break  # clean end between records
        if len(prefix) < _RECORD_PREFIX:
            index.problem = f"last record cut short at byte {pos}"
            break
        opcode, length = struct.unpack("<BQ", prefix)
        if opcode not in _KNOWN_OPCODES:
            index.problem = f"unknown record (opcode {opcode:#x}) at byte {pos}: damaged data"
            break
        if pos + _RECORD_PREFIX + length > size:
            index.problem = (f"{Opcode(opcode).name.lower()} record at byte {pos} cut short "
                             f"({size - pos - _RECORD_PREFIX} of {length} bytes)")
            break
        body = f.read(length)
        try:
            finished = _scan_record(index, opcode, body, pos)
        except Exception as exc:  # a corrupt record: keep what came before it
            index.problem = f"damaged {Opcode(opcode).name.lower()} record at byte {pos} ({exc})"
            break
        pos += _RECORD_PREFIX + length
        index.valid_bytes = pos
        if finished:
            break
    return index


def _scan_record(index: FileIndex, opcode: int, body: bytes, offset: int) -> bool:
    """Add one record to the index; True when the data section has ended."""
    if opcode == Opcode.CHUNK:
        chunk = Chunk.read(_stream(body))
        ids: dict[int, list[int]] = {}
        for record in breakup_chunk(chunk, validate_crc=True):
            if isinstance(record, Message):
                ids.setdefault(record.channel_id, []).append(record.log_time)
            else:
                _scan_definition(index, record)
        for channel_id, times in ids.items():
            index.counts.setdefault(channel_id, ChannelCounts()).add(len(times), min(times), max(times))
        if ids:
            all_times = [t for times in ids.values() for t in times]
            index.blocks.append(DataBlock(offset, len(body), True, min(all_times), max(all_times),
                                          frozenset(ids)))
    elif opcode == Opcode.MESSAGE:
        message = Message.read(_stream(body), len(body))
        index.counts.setdefault(message.channel_id, ChannelCounts()).add(1, message.log_time, message.log_time)
        index.blocks.append(DataBlock(offset, len(body), False, message.log_time, message.log_time,
                                      frozenset([message.channel_id])))
    elif opcode in (Opcode.SCHEMA, Opcode.CHANNEL):
        _scan_definition(index, (Schema if opcode == Opcode.SCHEMA else Channel).read(_stream(body)))
    elif opcode == Opcode.METADATA:
        index.metadata.append(Metadata.read(_stream(body)))
    elif opcode in (Opcode.DATA_END, Opcode.FOOTER):
        return True
    return False


def _scan_definition(index: FileIndex, record) -> None:
    if isinstance(record, Schema):
        index.schemas[record.id] = record
    elif isinstance(record, Channel):
        index.channels[record.id] = record
        index.counts.setdefault(record.id, ChannelCounts())


# ------------------------------------------------------------------------ message access


def iter_raw_messages(index: FileIndex, channel_ids: Iterable[int] | None = None,
                      start_ns: int | None = None, end_ns: int | None = None) -> Iterator[Message]:
    """Messages of the given channels with ``start_ns <= log_time < end_ns``, in file order.

    ``None`` means all channels / no bound.
    """
    wanted = None if channel_ids is None else frozenset(channel_ids)
    with open(index.path, "rb") as f:
        for block in index.blocks:
            if wanted is not None and not (block.channel_ids & wanted):
                continue
            if (start_ns is not None and block.end_ns < start_ns) or (end_ns is not None and block.start_ns >= end_ns):
                continue
            f.seek(block.offset + _RECORD_PREFIX)
            body = f.read(block.body_length)
            try:
                if block.is_chunk:  # CRC checked, as the scan does: damaged data must not pass as messages
                    records = breakup_chunk(Chunk.read(_stream(body)), validate_crc=True)
                else:
                    records = [Message.read(_stream(body), len(body))]
            except Exception as exc:  # a file damaged after it was closed (its summary is intact)
                kind = "chunk" if block.is_chunk else "message"
                raise RecordingFormatError(f"{index.path}: damaged {kind} record at byte {block.offset} "
                                           f"({type(exc).__name__}: {exc})") from None
            for record in records:
                if not isinstance(record, Message):
                    continue
                if wanted is not None and record.channel_id not in wanted:
                    continue
                if (start_ns is not None and record.log_time < start_ns) or (end_ns is not None and record.log_time >= end_ns):
                    continue
                yield record
