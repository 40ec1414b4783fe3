"""Operator side of the video path: reassemble datagrams into frames and decode them.

:class:`VideoReceiver` owns a non-blocking UDP socket. :meth:`VideoReceiver.poll` drains
whatever datagrams are queued (never waits), feeds them to the reassembly table and
returns the frames that completed, decoded. The pure part,
:meth:`VideoReceiver.handle_datagram`, takes ``(bytes, arrival time)`` and is what the
tests drive directly.

Reassembly rules:

* Chunks may arrive in any order; a frame completes when all ``chunk_count`` slices are in.
* A frame is identified by ``(stream_id, frame_id, capture_s)``: the capture time makes
  ids reused by a restarted sender distinct from the previous session's.
* A duplicate chunk (same frame, same index) is counted and ignored, including late
  copies of chunks of frames already completed or dropped (the last
  ``RECENT_FRAMES_REMEMBERED`` frames per stream are remembered for that).
* At most ``max_frames_in_flight`` incomplete frames are kept; a new frame beyond that
  evicts the incomplete frame whose first chunk is oldest.
* A parity datagram (``wire`` forward error correction) restores the one slice of its group
  that is missing, whichever arrives last; a parity arriving after its frame completed is
  counted as unused.
* An incomplete frame whose first chunk arrived more than ``frame_timeout_s`` ago is
  dropped (two datagrams lost in one parity group, or one without parity, cost one frame;
  the next frames are independent).
* Malformed, foreign, unauthenticated or inconsistent datagrams are counted by reason
  and dropped; nothing in here raises on network input.

Every completed frame carries a :class:`FrameTiming` with all stage times. Sender-side
times are in the sender's clock, receiver-side times in this process's
:func:`teleop.video.clock.monotonic_s`, all in seconds; converting between the two needs
the clock offset (zero on one host), see :mod:`teleop.video.jitter_buffer`.
"""

from __future__ import annotations

import collections
import selectors
import socket
from dataclasses import asdict, dataclass, field
import numpy as np

from teleop.net.udp import (
    KernelDropCounter, ancillary_size, enable_kernel_drop_counts, parse_drop_count, read_drop_count,
)
from teleop.video import wire
from teleop.video.clock import Clock, monotonic_s
from teleop.video.codec import CODEC_JPEG, CodecError, JpegCodec

#: Frame ids per stream remembered after completion/drop, to recognise late duplicates.
RECENT_FRAMES_REMEMBERED = 64
#: Largest encoded frame accepted, bytes: bounds the memory a forged header can claim.
DEFAULT_MAX_FRAME_BYTES = 8 << 20
#: Default age of an incomplete frame's first chunk at which the frame is dropped, s.
DEFAULT_FRAME_TIMEOUT_S = 0.2
#: Kernel receive buffer requested, bytes (the kernel may cap it at net.core.rmem_max).
DEFAULT_RECEIVE_BUFFER_BYTES = 4 << 20


@dataclass
class FrameTiming:
    """All stage times of one frame, in seconds.

    Sender clock: ``capture_s`` (instant depicted), ``available_s`` (render/capture
    done), ``encode_end_s``, ``send_start_s`` / ``send_end_s`` (earliest / latest
    ``send_s`` among the datagrams received).
    Receiver clock: ``first_arrival_s`` (first datagram), ``complete_s`` (last missing
    datagram), ``decode_end_s``, ``playout_s`` (scheduled by the jitter buffer) and
    ``display_s`` (handed to the display callback); the last two stay ``None`` until set.
    """

    stream_id: int
    frame_id: int
    frame_bytes: int
    chunk_count: int
    capture_s: float
    available_s: float
    encode_end_s: float
    send_start_s: float
    send_end_s: float
    first_arrival_s: float
    complete_s: float
    decode_end_s: float
    playout_s: float | None = None
    display_s: float | None = None

    def as_dict(self) -> dict[str, float | int | None]:
        """Plain dict of all fields (for logging/recording)."""
        return asdict(self)


@dataclass
class ReceivedFrame:
    """A reassembled frame: its encoded bytes, the decoded BGR image (or ``None`` when
    the receiver does not decode) and its timing record."""

    timing: FrameTiming
    payload: bytes
    image: np.ndarray | None


@dataclass
class ReceiverStats:
    """Cumulative receiver counters."""

    datagrams: int = 0
    authenticated: int = 0         # datagrams that parsed and passed the MAC check (signed with our secret)
    bytes: int = 0
    malformed: collections.Counter = field(default_factory=collections.Counter)  # reason -> count
    duplicate_chunks: int = 0
    frames_completed: int = 0
    frames_dropped_timeout: int = 0
    frames_dropped_evicted: int = 0
    decode_errors: int = 0
    parity_datagrams: int = 0      # parity datagrams accepted (forward error correction)
    parity_unused: int = 0         # of which arrived after their frame was complete or dropped
    chunks_recovered: int = 0      # slices rebuilt from a parity: lost, or overtaken by it (then duplicates)
    recovered_then_arrived: int = 0  # of which arrived after all (overtaken, not lost; also duplicates)
    # Dropped by the kernel before they were read (receive buffer full), not in ``datagrams``;
    # None where the OS does not tell (see teleop.net.udp.KernelDropCounter).
    kernel_dropped: int | None = None

    @property
    def chunks_lost_recovered(self) -> int:
        """Slices rebuilt from a parity that never arrived themselves (as far as the last
        ``RECENT_FRAMES_REMEMBERED`` frames tell): the datagrams the parity saved."""
        return self.chunks_recovered - self.recovered_then_arrived

    def as_dict(self) -> dict:
        """JSON-friendly copy; ``malformed_total`` sums all reasons."""
        data = asdict(self)
        data["malformed"] = dict(self.malformed)
        data["malformed_total"] = sum(self.malformed.values())
        data["chunks_lost_recovered"] = self.chunks_lost_recovered
        return data


class _PartialFrame:
    """Chunks received so far for one (stream, frame)."""

    __slots__ = ("header", "chunks", "missing", "bytes_held", "first_arrival_s", "send_start_s", "send_end_s",
                 "parities", "group_size", "slice_bytes", "recovered")

    def __init__(self, header: wire.ChunkHeader, arrival_s: float) -> None:
        self.header = header
        self.chunks: list[bytes | None] = [None] * header.chunk_count
        self.missing = header.chunk_count
        self.bytes_held = 0  # sum of the slices stored, bytes; never above header.frame_bytes
        self.first_arrival_s = arrival_s
        self.send_start_s = header.send_s
        self.send_end_s = header.send_s
        self.parities: dict[int, bytes] = {}   # group number -> XOR of its slices
        self.group_size = 0                     # slices per parity group (0: no parity seen)
        self.slice_bytes = 0                    # size of every slice but the last
        self.recovered: set[int] = set()        # slices rebuilt from a parity

    def recover(self, group: int) -> tuple[int, bytes] | None:
        """(index, slice) of the one missing slice of ``group`` rebuilt from its parity, or None
        when it has no parity yet or is missing none or several."""
        parity = self.parities.get(group)
        if parity is None:
            return None
        members = wire.parity_group_members(group, len(self.chunks), self.group_size)
        present = {i: chunk for i in members if (chunk := self.chunks[i]) is not None}
        missing = [i for i in members if i not in present]
        if len(missing) != 1:
            return None
        index, last = missing[0], len(self.chunks) - 1
        last_length = self.header.frame_bytes - last * self.slice_bytes

        def expected(i: int) -> int:
            return last_length if i == last else self.slice_bytes

        length = expected(index)
        # Slices of another size than the parity's would rebuild garbage: not a frame of ours.
        # The last slice is checked too: one longer than the parity (a forged 6-byte last
        # slice over 5-byte slices passes wire.parse, which bounds it by frame_bytes only)
        # made wire.recover_slice raise OverflowError out of handle_datagram.
        if not 0 < length <= self.slice_bytes or any(len(p) != expected(i) for i, p in present.items()):
            return None
        return index, wire.recover_slice(parity, list(present.values()), length)


class VideoReceiver:
    """Receive, reassemble and decode video datagrams.

    Args:
        bind: local ``(host, port)``; port 0 picks a free port (see :attr:`address`).
        verify: optional MAC hook ``verify(message, tag) -> bool`` (see :mod:`wire`).
        frame_timeout_s: age of the first chunk after which an incomplete frame is dropped, s.
        max_frames_in_flight: bound on incomplete frames kept across all streams.
        max_frame_bytes: larger announced frames are dropped as ``"too_large"``, bytes.
        decode: decode completed frames to images (off: only the JPEG bytes are kept).
        receive_buffer_bytes: ``SO_RCVBUF`` requested, bytes.
        sock: an existing bound UDP socket to use instead of creating one.
        clock: receiver time source in seconds (injectable for tests).
    """

    def __init__(
        self,
        bind: tuple[str, int] = ("127.0.0.1", 0),
        verify: wire.Verify | None = None,
        frame_timeout_s: float = DEFAULT_FRAME_TIMEOUT_S,
        max_frames_in_flight: int = 16,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        decode: bool = True,
        receive_buffer_bytes: int = DEFAULT_RECEIVE_BUFFER_BYTES,
        sock: socket.socket | None = None,
        clock: Clock = monotonic_s,
    ) -> None:
        if frame_timeout_s <= 0:
            raise ValueError(f"frame_timeout_s must be positive, got {frame_timeout_s}")
        if max_frames_in_flight < 1:
            raise ValueError(f"max_frames_in_flight must be >= 1, got {max_frames_in_flight}")
        self.verify = verify
        self.frame_timeout_s = float(frame_timeout_s)
        self.max_frames_in_flight = int(max_frames_in_flight)
        self.max_frame_bytes = int(max_frame_bytes)
        self.decode = decode
        self._clock = clock
        # Frame key: (stream_id, frame_id, capture_s); see the module docstring.
        self._partial: dict[tuple[int, int, float], _PartialFrame] = {}
        # Per stream: (frame_id, capture_s) of the frames finished lately -> the slices their
        # parities rebuilt.
        self._recent: dict[int, collections.OrderedDict[tuple[int, float], set[int]]] = collections.defaultdict(
            collections.OrderedDict
        )
        self.stats = ReceiverStats()
        self._owns_socket = sock is None
        if sock is None:
            family = socket.AF_INET6 if ":" in bind[0] else socket.AF_INET
            sock = socket.socket(family, socket.SOCK_DGRAM)
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer_bytes)
                sock.bind(bind)
            except OSError:     # e.g. the port is in use: do not leak the socket
                sock.close()
                raise
        sock.setblocking(False)
        self._sock = sock
        self._buffer = bytearray(65536)  # any UDP payload fits; larger ones are impossible
        self._selector = selectors.DefaultSelector()
        self._selector.register(sock, selectors.EVENT_READ)
        self._kernel_drops = KernelDropCounter()
        # A socket passed in may have dropped datagrams before: its count starts from those.
        self._drops_ancillary = ancillary_size(False, True) if enable_kernel_drop_counts(sock) else 0
        if self._drops_ancillary:
            self.stats.kernel_dropped = 0

    @property
    def address(self) -> tuple[str, int]:
        """Bound ``(host, port)`` of the socket."""
        return self._sock.getsockname()[:2]

    @property
    def frames_in_flight(self) -> int:
        """Number of incomplete frames currently held."""
        return len(self._partial)

    def fileno(self) -> int:
        return self._sock.fileno()

    def wait_readable(self, timeout_s: float) -> bool:
        """Block at most ``timeout_s`` seconds until a datagram is queued; True if one is."""
        return bool(self._selector.select(max(0.0, timeout_s)))

    def poll(self, max_datagrams: int = 1024) -> list[ReceivedFrame]:
        """Read up to ``max_datagrams`` queued datagrams without blocking, drop timed-out
        frames, and return the frames completed (in completion order)."""
        completed: list[ReceivedFrame] = []
        for _ in range(max_datagrams):
            try:
                if self._drops_ancillary:
                    size, ancillary, _, _ = self._sock.recvmsg_into([self._buffer], self._drops_ancillary)
                    drops = parse_drop_count(ancillary)
                    if drops is not None:
                        self.stats.kernel_dropped = self._kernel_drops.update(drops)
                else:
                    size = self._sock.recv_into(self._buffer)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                # E.g. ECONNREFUSED surfaced from an ICMP error: not a datagram, keep going.
                self.stats.malformed["socket_error"] += 1
                continue
            arrival_s = self._clock()
            frame = self.handle_datagram(bytes(memoryview(self._buffer)[:size]), arrival_s)
            if frame is not None:
                completed.append(frame)
        self.expire(self._clock())
        return completed

    def handle_datagram(self, datagram: bytes, arrival_s: float) -> ReceivedFrame | None:
        """Process one datagram that arrived at ``arrival_s`` (receiver seconds).

        Returns the frame it completed, if any. Never raises on bad input.
        """
        self.stats.datagrams += 1
        self.stats.bytes += len(datagram)
        try:
            header, piece = wire.parse(datagram, self.verify)
        except wire.MalformedDatagram as error:
            self.stats.malformed[error.reason] += 1
            return None
        self.stats.authenticated += 1
        if header.payload_codec != CODEC_JPEG:
            self.stats.malformed["codec"] += 1
            return None
        if header.frame_bytes > self.max_frame_bytes:
            self.stats.malformed["too_large"] += 1
            return None
        key = (header.stream_id, header.frame_id, header.capture_s)
        recent = self._recent[header.stream_id]
        if (header.frame_id, header.capture_s) in recent:
            if header.is_parity:
                self.stats.parity_datagrams += 1
                self.stats.parity_unused += 1     # the frame completed without it: no loss
            else:
                self.stats.duplicate_chunks += 1
                self._arrived_after_recovery(recent[(header.frame_id, header.capture_s)], header.chunk_index)
            return None
        partial = self._partial.get(key)
        if partial is None:
            if len(self._partial) >= self.max_frames_in_flight:
                oldest_key = min(self._partial, key=lambda k: self._partial[k].first_arrival_s)
                self._forget(oldest_key)
                self.stats.frames_dropped_evicted += 1
            partial = self._partial[key] = _PartialFrame(header, arrival_s)
        else:
            first = partial.header
            if (header.chunk_count, header.frame_bytes, header.payload_codec) != (
                first.chunk_count, first.frame_bytes, first.payload_codec
            ):
                self.stats.malformed["inconsistent"] += 1
                return None
        if header.is_parity:
            return self._add_parity(key, partial, header, piece, arrival_s)
        if partial.chunks[header.chunk_index] is not None:
            self.stats.duplicate_chunks += 1
            # Overtaken by its parity while other groups still wait: not lost either. Only
            # the late arrivals after the frame completed were told apart, so on a reordering
            # link the datagrams "restored" the operator reports counted these too (18 for 6
            # lost, tests/test_video_adversarial.py).
            self._arrived_after_recovery(partial.recovered, header.chunk_index)
            return None
        if partial.bytes_held + len(piece) > header.frame_bytes:
            # The slices of a frame add up to exactly frame_bytes: this one cannot belong.
            # Not storing it is what bounds a partial frame's memory by frame_bytes (forged
            # chunks of up to 64 KiB each, 65535 of them, would otherwise pile up to 4 GiB).
            self.stats.malformed["inconsistent"] += 1
            return None
        partial.chunks[header.chunk_index] = piece
        partial.bytes_held += len(piece)
        partial.missing -= 1
        partial.send_start_s = min(partial.send_start_s, header.send_s)
        partial.send_end_s = max(partial.send_end_s, header.send_s)
        if partial.group_size:
            self._recover(partial, wire.parity_group_of(header.chunk_index, len(partial.chunks), partial.group_size))
        return self._complete_if_whole(key, partial, arrival_s)

    def _add_parity(self, key, partial: _PartialFrame, header: wire.ChunkHeader, piece: bytes,
                    arrival_s: float) -> ReceivedFrame | None:
        group_size, parity = wire.split_parity(piece)
        if partial.group_size and (group_size, len(parity)) != (partial.group_size, partial.slice_bytes):
            self.stats.malformed["inconsistent"] += 1
            return None
        if header.chunk_index in partial.parities:
            self.stats.duplicate_chunks += 1
            return None
        self.stats.parity_datagrams += 1
        # (Memory: wire.parse checked that the slice size cuts frame_bytes into chunk_count
        # slices, so one parity per group holds about frame_bytes more at most.)
        partial.group_size, partial.slice_bytes = group_size, len(parity)
        partial.parities[header.chunk_index] = parity
        partial.send_start_s = min(partial.send_start_s, header.send_s)
        partial.send_end_s = max(partial.send_end_s, header.send_s)
        self._recover(partial, header.chunk_index)
        return self._complete_if_whole(key, partial, arrival_s)

    def _recover(self, partial: _PartialFrame, group: int) -> None:
        rebuilt = partial.recover(group)
        if rebuilt is None:
            return
        index, piece = rebuilt
        if partial.bytes_held + len(piece) > partial.header.frame_bytes:
            self.stats.malformed["inconsistent"] += 1
            return
        partial.chunks[index] = piece
        partial.bytes_held += len(piece)
        partial.missing -= 1
        partial.recovered.add(index)
        self.stats.chunks_recovered += 1

    def _complete_if_whole(self, key, partial: _PartialFrame, arrival_s: float) -> ReceivedFrame | None:
        if partial.missing:
            return None
        self._forget(key)
        return self._finish(partial, arrival_s)

    def expire(self, now_s: float) -> int:
        """Drop incomplete frames whose first chunk is older than the timeout; returns how many."""
        deadline_s = now_s - self.frame_timeout_s
        stale = [key for key, partial in self._partial.items() if partial.first_arrival_s < deadline_s]
        for key in stale:
            self._forget(key)
        self.stats.frames_dropped_timeout += len(stale)
        return len(stale)

    def _forget(self, key: tuple[int, int, float]) -> None:
        """Remove a frame from the table and remember it as finished, with the slices its
        parities rebuilt (so that one arriving late is known to have been overtaken)."""
        partial = self._partial.pop(key, None)
        stream_id, frame_id, capture_s = key
        recent = self._recent[stream_id]
        recent[(frame_id, capture_s)] = partial.recovered if partial is not None else set()
        while len(recent) > RECENT_FRAMES_REMEMBERED:
            recent.popitem(last=False)

    def _finish(self, partial: _PartialFrame, complete_s: float) -> ReceivedFrame | None:
        header = partial.header
        payload = b"".join(partial.chunks)  # type: ignore[arg-type]  # all filled
        if len(payload) != header.frame_bytes:
            self.stats.malformed["inconsistent"] += 1
            return None
        image = None
        if self.decode:
            try:
                image = JpegCodec.decode(payload)
            except CodecError:
                self.stats.decode_errors += 1
                return None
        decode_end_s = self._clock()
        self.stats.frames_completed += 1
        timing = FrameTiming(
            stream_id=header.stream_id, frame_id=header.frame_id, frame_bytes=header.frame_bytes,
            chunk_count=header.chunk_count, capture_s=header.capture_s, available_s=header.available_s,
            encode_end_s=header.encode_end_s, send_start_s=partial.send_start_s, send_end_s=partial.send_end_s,
            first_arrival_s=partial.first_arrival_s, complete_s=complete_s, decode_end_s=decode_end_s,
        )
        return ReceivedFrame(timing=timing, payload=payload, image=image)

    def _arrived_after_recovery(self, rebuilt: set[int], chunk_index: int) -> None:
        """A datagram its frame's parity had already rebuilt (``rebuilt``: those chunk indices)
        arrived after all: it was not lost, so it is counted as such, once."""
        if chunk_index in rebuilt:
            rebuilt.discard(chunk_index)
            self.stats.recovered_then_arrived += 1

    def count_late_kernel_drops(self) -> None:
        """Bring ``stats.kernel_dropped`` up to the kernel's count now, with the drops after the
        last datagram read (see :meth:`teleop.net.udp.UdpEndpoint.count_late_kernel_drops`)."""
        if self._drops_ancillary:
            self.stats.kernel_dropped = self._kernel_drops.update(read_drop_count(self._sock))

    def close(self) -> None:
        """Close the selector and, if created here, the socket. Idempotent."""
        try:
            self._selector.close()
        except (ValueError, OSError):
            pass
        if self._owns_socket:
            self._sock.close()

    def __enter__(self) -> "VideoReceiver":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
