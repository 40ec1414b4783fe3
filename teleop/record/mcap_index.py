"""Index of an MCAP file, complete or cut short, and raw message access through it.

Two ways to build the index, one result (:class:`FileIndex`):

* **Summary** (complete files): the footer points at the summary section; its chunk
  indexes say where the chunks are and the per-chunk message indexes give every channel's
  message count and time range without decompressing anything. What is read is checked
  first: the summary against the footer's CRC, each chunk index against the header of the
  chunk it points at, each message-index time against its chunk's time range and the totals
  against the statistics. One flipped bit there would otherwise report nonsense (a duration
  of days) for a file that opens as complete: any disagreement falls back to the scan.
* **Scan** (files without a usable footer, e.g. after SIGKILL, or with a damaged summary):
  records are read one by one from the start. Each record's length is checked against the
  bytes left in the file before it is read, and each chunk is decompressed and CRC-checked.
  The scan stops cleanly at the first record that is cut short or damaged beyond its
  length: everything before it is kept. This is what makes a crashed recording readable:
  the recorder flushes whole chunks, so only the chunk being written when the process died
  is lost.

A chunk whose length fits in the file but whose data fails its CRC or decompression (bit
rot, a bad copy) is **skipped**, not fatal: the records after it are still found by its
length, so one bad chunk costs its own messages and no others. The scan notes it
(:attr:`FileIndex.damaged`); the summary path does not read chunks, so a complete file's
damage is found when a reader meets it, or by :meth:`FileIndex.verify_chunks`. Readers warn
once on stderr how many chunks (and messages) were skipped. Damaged chunks with nothing
intact after them are the file's lost tail, reported like a tail cut short.

Messages are then read block by block (a block is a chunk, or a message outside chunks),
skipping blocks that hold none of the wanted channels or lie outside the time window.
"""

from __future__ import annotations

import io
import os
import struct
import sys
import zlib
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
from mcap.stream_reader import breakup_chunk, get_chunk_data_stream

from retarget.file_checks import refuse_special_file

#: The 8 bytes that open and close every MCAP file.
MAGIC = b"\x89MCAP0\r\n"
_RECORD_PREFIX = 9  # opcode (1 byte) + body length (8 bytes)
_FOOTER_BODY = 20  # summary_start (8) + summary_offset_start (8) + summary_crc (4)
_FOOTER_CRC_COVERED = _RECORD_PREFIX + 16  # the footer's bytes before its summary_crc field
_CHUNK_TIMES = 16  # a chunk body opens with message_start_time (8) and message_end_time (8)
_KNOWN_OPCODES = {int(op) for op in Opcode}
#: Chunk bytes from which checking them shows a progress bar: below, it takes well under a
#: second (~250 MB/s), and a bar would only be noise on stderr.
_PROGRESS_MIN_BYTES = 64 << 20


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
        message_counts: messages per channel id in it (None when not counted), so that the
            messages of a chunk found damaged later can be told.
    """

    offset: int
    body_length: int
    is_chunk: bool
    start_ns: int
    end_ns: int
    channel_ids: frozenset[int]
    message_counts: dict[int, int] | None = None


@dataclass
class DamagedChunk:
    """A chunk record whose length fits in the file but whose data fails its CRC check or
    decompression: skipped, the records after it are still read.

    Attributes:
        offset: file offset of the record (its opcode byte) [bytes].
        record_length: length of the whole record [bytes].
        reason: what failed, e.g. "CRCValidationError: ...".
        message_counts: its messages per channel id, from the message indexes of a complete
            file; None after a scan, which cannot count what it cannot read.
    """

    offset: int
    record_length: int
    reason: str
    message_counts: dict[int, int] | None = None

    @property
    def message_count(self) -> int | None:
        return None if self.message_counts is None else sum(self.message_counts.values())

    def describe(self) -> str:
        return f"damaged chunk record at byte {self.offset} ({self.reason})"


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
        counts: per channel id, message count and time range. From a complete file's
            message indexes these include the messages of chunks found damaged later
            (:meth:`readable_counts` leaves them out); after a scan, only intact chunks'.
        blocks: where the messages are, in file order.
        metadata: metadata records, in file order.
        file_bytes: size of the file [bytes].
        valid_bytes: bytes up to the end of the last intact record [bytes].
        problem: why a scan stopped early (None for complete files and clean ends).
        damaged: damaged chunks skipped within the file (not its lost tail), in file order.
        chunks_verified: whether every chunk has been read and checked, so that
            ``damaged`` is all there is (a scan reads them all; the summary path none).
        orphaned_messages: messages dropped because their channel was defined only in a
            damaged chunk (nothing says what they are).
        undefined_channel_ids: the channel ids of those messages, which readers skip.
        warn_damaged: readers warn on stderr, once, about the damaged chunks they skip; a
            command that reports them itself turns this off.
        damage_warned: that warning has been given.
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
    damaged: list[DamagedChunk] = field(default_factory=list)
    chunks_verified: bool = False
    orphaned_messages: int = 0
    undefined_channel_ids: frozenset[int] = frozenset()
    warn_damaged: bool = True
    damage_warned: bool = False

    @property
    def message_count(self) -> int:
        return sum(c.count for c in self.counts.values())

    @property
    def discarded_bytes(self) -> int:
        return self.file_bytes - self.valid_bytes

    @property
    def damaged_chunks(self) -> int:
        """How many damaged chunks were skipped (so far, unless ``chunks_verified``)."""
        return len(self.damaged)

    def readable_counts(self) -> dict[int, int]:
        """Messages per channel id that can be read: ``counts`` less those of damaged chunks."""
        counts = {channel_id: c.count for channel_id, c in self.counts.items()}
        for chunk in self.damaged:
            for channel_id, count in (chunk.message_counts or {}).items():
                counts[channel_id] = counts.get(channel_id, 0) - count
        return counts

    @property
    def readable_message_count(self) -> int:
        return sum(self.readable_counts().values())

    def is_damaged(self, block: DataBlock) -> bool:
        return any(chunk.offset == block.offset for chunk in self.damaged)

    def verify_chunks(self, *, progress: bool = False) -> list[DamagedChunk]:
        """Check every chunk (decompression and CRC), noting the damaged ones in ``damaged``;
        returns it. A scan checked them already; a complete file's chunks are read here, once,
        as the summary vouches for none (``progress``: a bar on stderr when that takes long)."""
        return _verify_chunks(self, progress)

    def damage_report(self) -> str | None:
        """One line on the damaged chunks skipped, for warnings and reports; None without any."""
        return _damage_report(self)


class _Damaged(Exception):
    """Internal: the summary path cannot be trusted; fall back to a scan."""


def _damage_report(index: FileIndex) -> str | None:
    """:meth:`FileIndex.damage_report`: how many chunks, where, and the messages lost with
    them (counted from a complete file's message indexes; a scan cannot count them)."""
    count = len(index.damaged)
    if not count:
        return None
    plural = "s" if count > 1 else ""
    where = ", ".join(str(chunk.offset) for chunk in index.damaged[:3]) + (", ..." if count > 3 else "")
    known = [chunk.message_count for chunk in index.damaged if chunk.message_count is not None]
    lost = f"{sum(known)} messages lost" if len(known) == count else "their messages lost"
    text = (f"{count} damaged chunk{plural} skipped (CRC check or decompression failed; at byte{plural} {where}): "
            f"{lost}")
    if index.orphaned_messages:
        text += f", and {index.orphaned_messages} messages of channels defined only in them"
    return text


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
        NotRegularFileError: a named pipe, a device or a socket (an OSError naming the file).
        RecordingFormatError: not an MCAP file, or cut short before the end of its header.
    """
    path = Path(path)
    refuse_special_file(path)     # open() of a named pipe waits for a writer: every dataset command hung
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
        except _CODE_ERRORS:
            raise       # a bug of ours (or of the mcap package's API), not a damaged file: not hidden by a scan
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


#: Exceptions no file content raises, only code: a misspelt name, an attribute an mcap
#: release renamed. The summary path falls back to a full scan on anything else a damaged
#: summary raises (struct, decompression, value errors): these would have made every read
#: a slow scan with the bug unseen.
_CODE_ERRORS = (AttributeError, NameError, ImportError)


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
    """Index from the summary section; None when the file has no usable footer/summary.

    Raises _Damaged (or whatever a garbled record raises) when what it says is inconsistent.
    """
    found = _footer(f, size)
    if found is None:
        return None
    footer, footer_offset = found
    if footer.summary_start == 0 or not len(MAGIC) < footer.summary_start <= footer_offset:
        return None
    summary = _read_exact(f, footer.summary_start, footer_offset - footer.summary_start)
    _check_summary_crc(f, footer, footer_offset, summary)

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
        _check_chunk_index(f, ci, footer.summary_start)
        block_counts = _count_from_message_indexes(f, ci, index)
        index.blocks.append(DataBlock(ci.chunk_start_offset, ci.chunk_length - _RECORD_PREFIX, True,
                                      ci.message_start_time, ci.message_end_time, frozenset(block_counts),
                                      block_counts))
    for mi in metadata_indexes:
        raw_record = _read_exact(f, mi.offset, mi.length)
        if raw_record[0] != Opcode.METADATA:
            raise _Damaged("metadata index points at another record")
        index.metadata.append(Metadata.read(_stream(raw_record[_RECORD_PREFIX:])))
    if statistics is not None:
        _check_statistics(statistics, index)
    return index


def _check_summary_crc(f, footer: Footer, footer_offset: int, summary: bytes) -> None:
    """The footer's CRC covers the summary and the footer's own fields before it; 0 means
    the writer computed none (the spec makes it optional)."""
    if footer.summary_crc == 0:
        return
    covered_footer = _read_exact(f, footer_offset, _FOOTER_CRC_COVERED)
    if zlib.crc32(covered_footer, zlib.crc32(summary)) != footer.summary_crc:
        raise _Damaged("summary CRC mismatch")


def _check_chunk_index(f, ci: ChunkIndex, data_end: int) -> None:
    """A chunk index must point, within the data section, at a chunk of its length and times:
    without a summary CRC nothing else vouches for it."""
    if not len(MAGIC) < ci.chunk_start_offset or \
            ci.chunk_start_offset + ci.chunk_length + ci.message_index_length > data_end:
        raise _Damaged("chunk index points outside the data section")
    head = _read_exact(f, ci.chunk_start_offset, _RECORD_PREFIX + _CHUNK_TIMES)
    opcode, length, start_ns, end_ns = struct.unpack("<BQQQ", head)
    if opcode != Opcode.CHUNK or _RECORD_PREFIX + length != ci.chunk_length or \
            (start_ns, end_ns) != (ci.message_start_time, ci.message_end_time):
        raise _Damaged("chunk index disagrees with its chunk")


def _count_from_message_indexes(f, ci: ChunkIndex, index: FileIndex) -> dict[int, int]:
    """Add a chunk's message indexes to ``index.counts``; its message count per channel id."""
    start = ci.chunk_start_offset + ci.chunk_length
    counts: dict[int, int] = {}
    seen: set[int] = set()
    for opcode, body in _records(_read_exact(f, start, ci.message_index_length)):
        if opcode != Opcode.MESSAGE_INDEX:
            continue
        channel_id, entries = _message_index_entries(body)
        if channel_id not in index.channels or channel_id in seen:
            raise _Damaged("message index of an unknown or repeated channel")
        seen.add(channel_id)
        _check_entries(entries, ci)
        if len(entries):
            counts[channel_id] = len(entries)
            index.counts[channel_id].add(len(entries), int(entries[:, 0].min()), int(entries[:, 0].max()))
    if seen != set(ci.message_index_offsets):
        raise _Damaged("message indexes disagree with their chunk index")
    return counts


def _message_index_entries(body: bytes) -> tuple[int, np.ndarray]:
    """(channel id, (n, 2) array of (log_time, offset)) of a message index record body."""
    channel_id, records_length = struct.unpack_from("<HI", body, 0)
    if records_length % 16 or 6 + records_length > len(body):
        raise _Damaged("message index entries overrun their record")
    # Each entry is (log_time, offset), two little-endian uint64.
    return channel_id, np.frombuffer(body, dtype="<u8", count=records_length // 8, offset=6).reshape(-1, 2)


def _check_entries(entries: np.ndarray, ci: ChunkIndex) -> None:
    """Each message-index entry must lie within its chunk: its time in the chunk index's
    range, its offset in the decompressed data. A flipped bit in a time otherwise becomes the
    recording's start or end."""
    if not len(entries):
        return
    times, offsets = entries[:, 0], entries[:, 1]
    if int(times.min()) < ci.message_start_time or int(times.max()) > ci.message_end_time:
        raise _Damaged("message index time outside its chunk's time range")
    if int(offsets.max()) >= ci.uncompressed_size:
        raise _Damaged("message index offset outside its chunk")


def _check_statistics(statistics: Statistics, index: FileIndex) -> None:
    """The statistics record must agree with the message indexes' count and time range."""
    if statistics.message_count != index.message_count:
        raise _Damaged("message indexes disagree with the statistics")
    counted = [c for c in index.counts.values() if c.count]
    if counted and (min(c.first_ns for c in counted), max(c.last_ns for c in counted)) != \
            (statistics.message_start_time, statistics.message_end_time):
        raise _Damaged("message index times disagree with the statistics")


# --------------------------------------------------------------------------- scan path


def _index_by_scan(f, path: Path, size: int, header: Header, start: int) -> FileIndex:
    index = FileIndex(path=path, complete=False, header=header, file_bytes=size, valid_bytes=start,
                      chunks_verified=True)
    pending: list[DamagedChunk] = []  # damaged chunks no intact record has followed yet
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
        except Exception as exc:  # a corrupt record
            if opcode != Opcode.CHUNK:  # keep what came before it
                index.problem = f"damaged {Opcode(opcode).name.lower()} record at byte {pos} ({exc})"
                break
            # Its length fits, so the records after it can still be found: skip its data.
            pending.append(DamagedChunk(pos, _RECORD_PREFIX + length, f"{type(exc).__name__}: {exc}"))
            pos += _RECORD_PREFIX + length
            continue
        index.damaged += pending  # an intact record follows them: damage within the file, not its tail
        pending = []
        pos += _RECORD_PREFIX + length
        index.valid_bytes = pos
        if finished:
            break
    if pending:  # nothing intact after them: the lost tail, as a last chunk cut short would be
        index.problem = pending[0].describe()
    _drop_undefined_channels(index)
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
                                          frozenset(ids), {channel_id: len(t) for channel_id, t in ids.items()}))
    elif opcode == Opcode.MESSAGE:
        message = Message.read(_stream(body), len(body))
        index.counts.setdefault(message.channel_id, ChannelCounts()).add(1, message.log_time, message.log_time)
        index.blocks.append(DataBlock(offset, len(body), False, message.log_time, message.log_time,
                                      frozenset([message.channel_id]), {message.channel_id: 1}))
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


def _drop_undefined_channels(index: FileIndex) -> None:
    """Set aside the messages of channels whose Channel record was in a skipped damaged chunk
    (a recorder defines each channel in the chunk of its first message): nothing says what
    they are. Without damage, an undefined channel is the file's own fault, reported when read."""
    if not index.damaged:
        return
    undefined = [channel_id for channel_id in index.counts if channel_id not in index.channels]
    for channel_id in undefined:
        index.orphaned_messages += index.counts.pop(channel_id).count
    index.undefined_channel_ids = frozenset(undefined)


# ------------------------------------------------------------------------ damaged chunks


def _verify_chunks(index: FileIndex, progress: bool) -> list[DamagedChunk]:
    """:meth:`FileIndex.verify_chunks`: decompress and CRC-check each chunk not known to be
    damaged (without parsing its records: over twice as fast, and what fails is almost always this)."""
    if index.chunks_verified:
        return index.damaged
    chunks = [block for block in index.blocks if block.is_chunk and not index.is_damaged(block)]
    if progress and sum(block.body_length for block in chunks) >= _PROGRESS_MIN_BYTES:
        from teleop.progress import progress_bar   # tqdm: imported only for the work that shows it

        chunks = progress_bar(chunks, desc="checking chunks")
    with open(index.path, "rb") as f:
        for block in chunks:
            try:
                get_chunk_data_stream(Chunk.read(_stream(_block_body(f, block))), validate_crc=True)
            except Exception as exc:
                index.damaged.append(_damaged(block, exc))
    index.damaged.sort(key=lambda chunk: chunk.offset)
    index.chunks_verified = True
    return index.damaged


def _damaged(block: DataBlock, exc: Exception) -> DamagedChunk:
    """The record of a damaged chunk block, with the message counts its index had."""
    return DamagedChunk(block.offset, _RECORD_PREFIX + block.body_length, f"{type(exc).__name__}: {exc}",
                        block.message_counts)


def _note_damaged_chunk(index: FileIndex, block: DataBlock, exc: Exception) -> None:
    """A reader met a chunk that does not decode: find all such chunks once (to tell how many),
    refuse a file with nothing readable left, and warn about what is skipped."""
    _verify_chunks(index, progress=False)
    if not index.is_damaged(block):  # it passed the CRC check, yet its records do not parse
        index.damaged.append(_damaged(block, exc))
        index.damaged.sort(key=lambda chunk: chunk.offset)
    _check_something_readable(index)
    _warn_damaged(index)


def _check_something_readable(index: FileIndex) -> None:
    """A file whose index counts messages but all of whose chunks are damaged: an error, not
    a silent empty result (skipping is for saving what is intact)."""
    if index.damaged and index.message_count and not index.readable_message_count:
        more = f" and {len(index.damaged) - 1} more" if len(index.damaged) > 1 else ""
        raise RecordingFormatError(f"{index.path}: {index.damaged[0].describe()}{more}: no intact chunk "
                                   "left to read")


def _warn_damaged(index: FileIndex) -> None:
    """Say once on stderr what damaged chunks the readers of ``index`` skip."""
    if not index.damaged or not index.warn_damaged or index.damage_warned:
        return
    index.damage_warned = True
    # tqdm.write: a progress bar open on stderr (a long rewrite) is redrawn below the line.
    from tqdm import tqdm

    tqdm.write(f"warning: {index.path}: {_damage_report(index)}", file=sys.stderr)


# ------------------------------------------------------------------------ message access


def select_blocks(index: FileIndex, channel_ids: Iterable[int] | None = None,
                  start_ns: int | None = None, end_ns: int | None = None) -> list[DataBlock]:
    """The blocks that may hold messages of the given channels with ``start_ns <= log_time <
    end_ns``, in file order (``None``: all channels / no bound)."""
    wanted = None if channel_ids is None else frozenset(channel_ids)
    return [block for block in index.blocks
            if (wanted is None or block.channel_ids & wanted)
            and (start_ns is None or block.end_ns >= start_ns) and (end_ns is None or block.start_ns < end_ns)]


def iter_block_messages(index: FileIndex, blocks: Iterable[DataBlock], channel_ids: Iterable[int] | None = None,
                        start_ns: int | None = None, end_ns: int | None = None
                        ) -> Iterator[tuple[DataBlock, list[Message]]]:
    """Each of ``blocks`` with its messages of the given channels in the window, in file order.

    A damaged chunk is skipped with its messages (an empty list) and a warning on stderr, once
    per index (see :attr:`FileIndex.warn_damaged`).

    Raises:
        RecordingFormatError: a damaged lone message record, or no intact chunk left at all.
    """
    wanted = None if channel_ids is None else frozenset(channel_ids)
    _check_something_readable(index)
    _warn_damaged(index)
    with open(index.path, "rb") as f:
        for block in blocks:
            yield block, [record for record in _block_records(index, f, block)
                          if isinstance(record, Message) and record.channel_id not in index.undefined_channel_ids
                          and (wanted is None or record.channel_id in wanted)
                          and (start_ns is None or record.log_time >= start_ns)
                          and (end_ns is None or record.log_time < end_ns)]


def iter_raw_messages(index: FileIndex, channel_ids: Iterable[int] | None = None,
                      start_ns: int | None = None, end_ns: int | None = None) -> Iterator[Message]:
    """Messages of the given channels with ``start_ns <= log_time < end_ns``, in file order.

    ``None`` means all channels / no bound. Damaged chunks are skipped as
    :func:`iter_block_messages` says.
    """
    blocks = select_blocks(index, channel_ids, start_ns, end_ns)
    for _, messages in iter_block_messages(index, blocks, channel_ids, start_ns, end_ns):
        yield from messages


def _block_body(f, block: DataBlock) -> bytes:
    f.seek(block.offset + _RECORD_PREFIX)
    return f.read(block.body_length)


def _block_records(index: FileIndex, f, block: DataBlock) -> list:
    """The records of a block, CRC checked as the scan does (damaged data must not pass as
    messages); none for a damaged chunk."""
    if index.is_damaged(block):
        return []
    body = _block_body(f, block)
    try:
        if block.is_chunk:
            return breakup_chunk(Chunk.read(_stream(body)), validate_crc=True)
        return [Message.read(_stream(body), len(body))]
    except Exception as exc:  # a file damaged after it was closed (its summary is intact)
        if block.is_chunk:
            _note_damaged_chunk(index, block, exc)
            return []
        raise RecordingFormatError(f"{index.path}: damaged message record at byte {block.offset} "
                                   f"({type(exc).__name__}: {exc})") from None
