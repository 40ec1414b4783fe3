"""The receiving end's filter: datagrams in, authenticated and fresh packets out, never an
exception (:class:`PacketFilter`), with the per-stream anti-replay window
(:class:`ReplayWindow`) and the counters of what was dropped and why (:class:`FilterStats`).
The packets themselves are :mod:`teleop.net.protocol`'s.
"""

from __future__ import annotations

import logging
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from typing import Any

from teleop.net.protocol import (DEFAULT_REPLAY_WINDOW, Packet, PacketCodec, ProtocolError, format_address,
                                 packet_type_name)

log = logging.getLogger(__name__)


class ReplayWindow:
    """Sliding anti-replay window over sequence numbers (RFC 4303 §3.4.3 style).

    Accepts each sequence number at most once and accepts out-of-order packets as long as
    they are less than ``size`` behind the highest number seen. Only feed it sequence
    numbers of authenticated packets, or a forger could slide the window.
    """

    def __init__(self, size: int = DEFAULT_REPLAY_WINDOW) -> None:
        if size < 1:
            raise ValueError("window size must be ≥ 1")
        self.size = size
        self.highest = 0
        # Bit i set ⇔ sequence number (highest − i) was seen. Python ints are arbitrary
        # precision, so a 1024-bit window is one integer.
        self._bits = 0
        self._mask = (1 << size) - 1

    def check_and_update(self, seq: int) -> str | None:
        """Record ``seq``; return None if new, else the drop reason ("replayed"/"too_old")."""
        if seq > self.highest:
            shift = seq - self.highest
            self._bits = ((self._bits << shift) | 1) & self._mask if shift < self.size else 1
            self.highest = seq
            return None
        behind = self.highest - seq
        if behind >= self.size:
            return "too_old"
        if (self._bits >> behind) & 1:
            return "replayed"
        self._bits |= 1 << behind
        return None


@dataclass
class FilterStats:
    """Counters of a :class:`PacketFilter`. ``dropped`` is keyed by drop reason,
    ``accepted_by_type`` by packet type name ("references", "clock_ping", ...): a station's
    "accepted 1390 packets" said nothing of how many were commands and how many clock
    exchanges or video reports."""

    received: int = 0
    accepted: int = 0
    bytes_received: int = 0
    bytes_accepted: int = 0
    dropped: Counter = field(default_factory=Counter)
    accepted_by_type: Counter = field(default_factory=Counter)

    @property
    def dropped_total(self) -> int:
        return sum(self.dropped.values())


class PacketFilter:
    """Turns raw datagrams into authenticated, fresh packets; never raises.

    Drops (and counts in :attr:`stats`) everything :meth:`PacketCodec.decode` rejects, plus:
    ``replayed`` (already seen), ``too_old`` (behind the replay window, or of a retired
    stream), ``reflected`` (carries our own source id: one of our packets sent back to us),
    ``unexpected_type`` (not in ``accept_types``), ``too_many_streams`` (window table and
    retired set both full) and ``internal_error`` (a payload decoder raised something other
    than a :class:`ProtocolError`, ``ValueError``, ``struct.error`` or ``TypeError``).

    Args:
        codec: the packet codec (holds the secret).
        window_size: anti-replay window per (source_id, stream_id) [packets].
        own_source_id: our endpoint's source id, to reject reflected packets.
        accept_types: packet types this receiver handles (None = all known).
        max_streams: bound on tracked (source_id, stream_id) windows. Once full, a new
            stream evicts the window that has been silent longest, and that stream is
            *retired*: its packets are refused from then on (a bare key, ~100 bytes, instead
            of a window), so that eviction opens no door to replaying them. Refusing new
            streams outright, as this did before, locked out the 86th restart of an operator
            station (each run is a new source with three streams).
        max_retired: bound on retired streams; once that is full too, packets of new
            streams are dropped (``too_many_streams``).

    Limitation: windows are per source id and a restarted sender picks a new one, so a
    packet captured in an *earlier* session under the same secret looks like a new stream
    and is accepted. Per-run secrets (:func:`teleop.net.secret.session_secret`) rule this
    out; with a long-lived secret file, rotate the file. A per-session key handshake would
    close the gap and is not implemented.
    """

    def __init__(self, codec: PacketCodec, *, window_size: int = DEFAULT_REPLAY_WINDOW,
                 own_source_id: int | None = None, accept_types: set[int] | None = None,
                 max_streams: int = 256, max_retired: int = 1 << 16) -> None:
        if max_streams < 1 or max_retired < 0:
            raise ValueError("max_streams must be >= 1 and max_retired >= 0")
        self.codec = codec
        self.window_size = window_size
        self.own_source_id = own_source_id
        self.accept_types = None if accept_types is None else frozenset(int(t) for t in accept_types)
        self.max_streams = max_streams
        self.max_retired = max_retired
        self.stats = FilterStats()
        # Least recently accepted first: the eviction order.
        self._windows: OrderedDict[tuple[int, int], ReplayWindow] = OrderedDict()
        self._retired: set[tuple[int, int]] = set()
        self._warned_bad_mac = False

    def accept(self, data: bytes, peer: Any = None) -> Packet | None:
        """Return the packet if it is valid and new, else None (and count why)."""
        stats = self.stats
        stats.received += 1
        stats.bytes_received += len(data)
        try:
            packet = self.codec.decode(data)
            reason = self._check_fresh(packet)
        except ProtocolError as exc:
            reason = exc.reason
            if reason == "bad_mac" and not self._warned_bad_mac:
                self._warned_bad_mac = True
                log.warning("packets from %s fail authentication and are dropped: do both stations use the "
                            "same secret ($TELEOP_SECRET or --secret-file)?", format_address(peer))
        except Exception:  # a bug in a payload decoder must not kill the robot's loop
            log.exception("unexpected error while decoding a packet")
            reason = "internal_error"
        if reason is not None:
            stats.dropped[reason] += 1
            return None
        stats.accepted += 1
        stats.bytes_accepted += len(data)
        stats.accepted_by_type[packet_type_name(packet.packet_type)] += 1
        return packet

    def _check_fresh(self, packet: Packet) -> str | None:
        if self.own_source_id is not None and packet.source_id == self.own_source_id:
            return "reflected"
        if self.accept_types is not None and packet.packet_type not in self.accept_types:
            return "unexpected_type"
        key = (packet.source_id, packet.stream_id)
        window = self._windows.get(key)
        if window is None:
            if key in self._retired:
                return "too_old"
            if len(self._windows) >= self.max_streams:
                if len(self._retired) >= self.max_retired:
                    return "too_many_streams"
                evicted, _ = self._windows.popitem(last=False)
                self._retired.add(evicted)
            window = self._windows[key] = ReplayWindow(self.window_size)
        reason = window.check_and_update(packet.seq)
        if reason is None:
            self._windows.move_to_end(key)
        return reason
