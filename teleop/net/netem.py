"""``teleop netem``: a UDP proxy that impairs traffic in both directions, in real time.

Stand it between the two stations::

    operator ──▶ proxy --listen ──(forward model)──▶ --target robot
    operator ◀── proxy --listen ◀─(backward model)── robot replies

Each client (source address on the listen port) gets its own upstream socket, so the
robot's replies, which go back to the address the packets came from, find their way to
the right client. Packets are opaque bytes here: the proxy needs no secret and checks
nothing (it plays an untrusted network).

Scheduling: every datagram gets its delivery time(s) from :class:`teleop.net.delay.DelayLine`
(the same code the virtual-clock trials use) and waits in one heap; the loop sleeps in
``select`` until the next delivery or the next datagram, whichever comes first. Arrival
times come from kernel receive timestamps when available, so a busy loop does not add its
own latency to the configured delay. Datagrams the kernel dropped at the proxy's own sockets
(their receive buffers full: the proxy fell behind) are counted where the OS tells (Linux),
apart from the impairments. Everything is bounded: delays by the model's
``max_delay``, memory by ``max_pending`` queued datagrams, ``max_pending_bytes`` of them
and ``max_clients``.
"""

from __future__ import annotations

import heapq
import itertools
import math
import selectors
import socket
import sys
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TextIO

from teleop.net.delay import ChannelStats, DelayLine, DirectionModel, make_rng
from teleop.net.udp import (
    Address, KernelDropCounter, NonLoopbackRefused, enable_kernel_drop_counts, enable_kernel_timestamps, is_loopback,
    open_udp_socket, parse_address, read_drop_count, receive_datagram_counted, resolve,
)

#: Largest UDP payload; the proxy forwards anything a UDP socket can carry.
_MAX_UDP = 65535
#: Datagrams read from one socket per loop iteration, so one flooded direction cannot
#: starve deliveries in the other.
_READS_PER_STEP = 256


@dataclass
class DirectionStats:
    """Counters of one direction of the proxy. Delays are measured, not the model's.

    ``delay_*`` is from kernel arrival to the ``sendto`` of the copy [s]; ``lateness_*``
    is from the scheduled delivery time to that ``sendto`` [s] (the scheduler's error).
    ``kernel_dropped``: datagrams the kernel dropped at the proxy's sockets of this direction
    (forward: the listen socket; backward: the upstream ones) before the proxy read them, for
    their receive buffer was full; not among ``received``, None where the OS does not tell.
    """

    received: int = 0
    bytes_received: int = 0
    delivered: int = 0
    send_errors: int = 0
    overflow: int = 0        # dropped because max_pending datagrams (or max_pending_bytes) were queued
    no_client: int = 0       # backward datagrams from an address other than the target
    kernel_dropped: int | None = None
    delay_sum: float = 0.0
    delay_sq_sum: float = 0.0
    delay_max: float = 0.0
    lateness_sum: float = 0.0
    lateness_max: float = 0.0
    line: ChannelStats = field(default_factory=ChannelStats)

    def record_delivery(self, delay: float, lateness: float) -> None:
        self.delivered += 1
        self.delay_sum += delay
        self.delay_sq_sum += delay * delay
        self.delay_max = max(self.delay_max, delay)
        self.lateness_sum += lateness
        self.lateness_max = max(self.lateness_max, lateness)

    @property
    def delay_mean(self) -> float:
        return self.delay_sum / self.delivered if self.delivered else math.nan

    @property
    def delay_std(self) -> float:
        if self.delivered < 2:
            return math.nan
        mean = self.delay_mean
        return math.sqrt(max(self.delay_sq_sum / self.delivered - mean * mean, 0.0))

    def line_summary(self) -> str:
        delay = (f"delay={1e3 * self.delay_mean:.1f}±{1e3 * (self.delay_std if self.delivered > 1 else 0.0):.1f}ms "
                 f"late≤{1e3 * self.lateness_max:.2f}ms" if self.delivered else "delay=n/a")
        errors = f" send_errors={self.send_errors}" if self.send_errors else ""   # else unseen in the report
        # Not the link's impairments (lost=, qdrop=): the proxy's own, so said apart, and only when some.
        errors += f" kernel_dropped={self.kernel_dropped}" if self.kernel_dropped else ""
        return (f"rx={self.received} tx={self.delivered} lost={self.line.lost} "
                f"dup={self.line.duplicated} qdrop={self.line.queue_dropped + self.overflow}{errors} {delay}")

    def add_kernel_drops(self, counter: KernelDropCounter, value: int | None) -> None:
        """Take one socket's drop counter (None: not told) into :attr:`kernel_dropped`."""
        before = counter.total
        self.kernel_dropped = (self.kernel_dropped or 0) + counter.update(value) - before


class NetemProxy:
    """Real-time two-way UDP impairment proxy.

    Args:
        listen: (host, port) or "host:port" the clients send to.
        target: (host, port) or "host:port" the traffic is forwarded to.
        forward: impairments client → target.
        backward: impairments target → client.
        seed: reproducibility seed for the impairment decisions (None = random).
        allow_remote: allow a non-loopback listen or target address.
        max_clients: client addresses tracked; the least recently active is forgotten.
        max_pending: datagrams queued at most; more are dropped (counted as overflow).
        max_pending_bytes: bytes queued at most, likewise (datagrams reach 64 KB: 100,000
            of them would be 6.5 GB; 256 MB hold 3 s of 640x480 video at 30 fps many times).
    """

    def __init__(self, listen: tuple[str, int] | str, target: tuple[str, int] | str,
                 forward: DirectionModel, backward: DirectionModel, *, seed: int | str | None = None,
                 allow_remote: bool = False, max_clients: int = 16, max_pending: int = 100_000,
                 max_pending_bytes: int = 256 << 20) -> None:
        listen = parse_address(listen) if isinstance(listen, str) else listen
        target = parse_address(target) if isinstance(target, str) else target
        self._target_family, self.target = resolve(target)
        if not allow_remote and not is_loopback(self.target[0]):
            raise NonLoopbackRefused(f"refusing to forward to non-loopback address {self.target[0]}; "
                                     "pass allow_remote=True (--allow-remote)")
        self.clock = time.monotonic  # real time by definition; kernel stamps convert onto it
        self.max_clients = max_clients
        self.max_pending = max_pending
        self.max_pending_bytes = max_pending_bytes
        self.pending_bytes = 0
        self.forward_line = DelayLine(forward, make_rng(seed, "forward"))
        self.backward_line = DelayLine(backward, make_rng(seed, "backward"))
        self.forward_stats = DirectionStats(line=self.forward_line.stats)
        self.backward_stats = DirectionStats(line=self.backward_line.stats)

        self._selector = selectors.DefaultSelector()
        self.listen_sock = open_udp_socket(listen, allow_remote=allow_remote)
        self._listen_timestamps = enable_kernel_timestamps(self.listen_sock)
        # The sockets read whose kernel drops the OS counts (Linux), each with its counter: the
        # listen socket (forward) and the upstream ones (backward).
        self._kernel_drops: dict[socket.socket, KernelDropCounter] = {}
        if enable_kernel_drop_counts(self.listen_sock):
            self._kernel_drops[self.listen_sock] = KernelDropCounter()
            self.forward_stats.kernel_dropped = self.backward_stats.kernel_dropped = 0
        self._selector.register(self.listen_sock, selectors.EVENT_READ, None)
        # Self-pipe: stop() from a signal handler or another thread wakes select at once.
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._upstream_bind = self._upstream_bind_address()
        self._clients: OrderedDict[Address, socket.socket] = OrderedDict()
        # Upstream sockets of forgotten clients, kept open until the datagrams queued on them
        # are sent: closed at once, those failed (EBADF), counted only as send errors.
        self._retired: list[tuple[float, socket.socket]] = []   # (its last datagram's due time, socket)
        self._heap: list[tuple[float, int, float, socket.socket, Address, bytes, DirectionStats]] = []
        self._order = itertools.count()
        self._stopping = False

    def _upstream_bind_address(self) -> tuple[str, int]:
        v6 = self._target_family == socket.AF_INET6
        if is_loopback(self.target[0]):
            return ("::1" if v6 else "127.0.0.1", 0)
        return ("::" if v6 else "0.0.0.0", 0)

    @property
    def listen_address(self) -> Address:
        return self.listen_sock.getsockname()

    @property
    def pending(self) -> int:
        """Datagrams waiting for their delivery time."""
        return len(self._heap)

    # ------------------------------------------------------------------ loop
    def stop(self) -> None:
        """Ask :meth:`run` to return; safe from signal handlers and other threads."""
        self._stopping = True
        try:
            self._wake_w.send(b"\0")
        except OSError:
            pass  # buffer full or closed: the flag alone still stops the loop

    def run(self, duration: float | None = None, stats_interval: float | None = None,
            out: TextIO | None = None) -> None:
        """Forward until :meth:`stop` or ``duration`` seconds; print stats every ``stats_interval``."""
        out = out or sys.stdout
        start = self.clock()
        deadline = start + duration if duration is not None else math.inf
        next_stats = start + stats_interval if stats_interval else math.inf
        while not self._stopping:
            now = self.clock()
            if now >= deadline:
                break
            if stats_interval and now >= next_stats:
                print(self.stats_line(), file=out, flush=True)
                next_stats += stats_interval
            # Capped wait: stop() wakes the loop anyway, this only bounds a missed wake-up.
            self.step(min(deadline, next_stats, now + 1.0) - now)
        if stats_interval:
            print(self.final_line(), file=out, flush=True)

    def step(self, max_wait: float) -> None:
        """Wait up to ``max_wait`` seconds for traffic or a due delivery, then handle both."""
        if self._heap:
            max_wait = min(max_wait, self._heap[0][0] - self.clock())
        # epoll rounds timeouts *up* to whole milliseconds, which would make every delivery
        # up to 1 ms late: wait the whole milliseconds in select (the 1e-6 keeps float error
        # from rounding up a whole ms more), and the rest in time.sleep (ns resolution).
        events = self._selector.select(max(math.floor(max_wait * 1e3) * 1e-3 - 1e-6, 0.0))
        if not events and self._heap:
            rest = self._heap[0][0] - self.clock()
            if 0.0 < rest < 2e-3:
                time.sleep(rest)
        for key, _ in events:
            if key.data == "wake":
                self._drain_wake()
            elif key.data is None:
                self._read_clients()
            else:
                client, timestamps = key.data
                upstream = key.fileobj
                assert isinstance(upstream, socket.socket)   # only upstream sockets carry (client, timestamps)
                self._read_target(upstream, client, timestamps)
        self._deliver_due()

    # ------------------------------------------------------------------ receiving
    def _read_clients(self) -> None:
        drops = self._kernel_drops.get(self.listen_sock)
        for _ in range(_READS_PER_STEP):
            try:
                data, client, age, dropped = receive_datagram_counted(self.listen_sock, _MAX_UDP,
                                                                      self._listen_timestamps, drops is not None)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                continue
            if drops is not None:
                self.forward_stats.add_kernel_drops(drops, dropped)
            upstream = self._upstream_for(client)
            self._enqueue(data, self._arrival(age), self.forward_line, self.forward_stats, upstream, self.target)

    def _read_target(self, upstream: socket.socket, client: Address, timestamps: bool) -> None:
        drops = self._kernel_drops.get(upstream)
        for _ in range(_READS_PER_STEP):
            try:
                data, source, age, dropped = receive_datagram_counted(upstream, _MAX_UDP, timestamps, drops is not None)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                continue
            if drops is not None:
                self.backward_stats.add_kernel_drops(drops, dropped)
            if source[:2] != self.target[:2]:
                self.backward_stats.no_client += 1  # not from the target: not ours to relay
                continue
            self._enqueue(data, self._arrival(age), self.backward_line, self.backward_stats,
                          self.listen_sock, client)

    def _arrival(self, age: float | None) -> float:
        now = self.clock()
        return now - age if age is not None else now

    def _upstream_for(self, client: Address) -> socket.socket:
        upstream = self._clients.get(client)
        if upstream is not None:
            self._clients.move_to_end(client)
            return upstream
        if len(self._clients) >= self.max_clients:
            _, oldest = self._clients.popitem(last=False)
            self._selector.unregister(oldest)
            self._kernel_drops.pop(oldest, None)     # no longer read: its count so far stays in the stats
            # Closed once its queued datagrams are out (one scan of the queue, here, not per delivery).
            last_due = max((entry[0] for entry in self._heap if entry[3] is oldest), default=-math.inf)
            self._retired.append((last_due, oldest))
        # allow_remote: the caller already vetted the target; this only picks the interface.
        upstream = open_udp_socket(self._upstream_bind, allow_remote=True)
        timestamps = enable_kernel_timestamps(upstream)
        if enable_kernel_drop_counts(upstream):
            self._kernel_drops[upstream] = KernelDropCounter()
        self._selector.register(upstream, selectors.EVENT_READ, (client, timestamps))
        self._clients[client] = upstream
        return upstream

    def _enqueue(self, data: bytes, arrival: float, line: DelayLine, stats: DirectionStats,
                 sock: socket.socket, destination: Address) -> None:
        stats.received += 1
        stats.bytes_received += len(data)
        for due in line.schedule(arrival, len(data)):
            if len(self._heap) >= self.max_pending or self.pending_bytes + len(data) > self.max_pending_bytes:
                stats.overflow += 1
                continue
            heapq.heappush(self._heap, (due, next(self._order), arrival, sock, destination, data, stats))
            self.pending_bytes += len(data)

    # ------------------------------------------------------------------ delivering
    def _deliver_due(self) -> None:
        heap = self._heap
        now = self.clock()
        while heap and heap[0][0] <= now:
            due, _, arrival, sock, destination, data, stats = heapq.heappop(heap)
            self.pending_bytes -= len(data)
            try:
                sock.sendto(data, destination)
            except OSError:
                stats.send_errors += 1
                continue
            now = self.clock()
            stats.record_delivery(now - arrival, now - due)
        if self._retired:
            for due, sock in [entry for entry in self._retired if entry[0] < now]:
                sock.close()
                self._retired.remove((due, sock))

    def _drain_wake(self) -> None:
        try:
            while self._wake_r.recv(64):
                pass
        except OSError:
            pass

    # ------------------------------------------------------------------ reporting, cleanup
    def stats_line(self) -> str:
        return (f"netem forward: {self.forward_stats.line_summary()} | "
                f"backward: {self.backward_stats.line_summary()}")

    def final_line(self) -> str:
        """The last statistics line, with the kernel drops after the last datagram each socket
        read (:func:`teleop.net.udp.read_drop_count`; before :meth:`close`)."""
        for sock, drops in self._kernel_drops.items():
            stats = self.forward_stats if sock is self.listen_sock else self.backward_stats
            stats.add_kernel_drops(drops, read_drop_count(sock))
        return self.stats_line() + f" (final, {self.pending} in flight dropped)"

    def close(self) -> None:
        """Close every socket; datagrams still in flight are dropped."""
        self._heap.clear()
        self.pending_bytes = 0
        for upstream in [*self._clients.values(), *(sock for _, sock in self._retired)]:
            upstream.close()
        self._clients.clear()
        self._retired.clear()
        self._kernel_drops.clear()
        self._selector.close()
        for sock in (self.listen_sock, self._wake_r, self._wake_w):
            sock.close()

    def __enter__(self) -> "NetemProxy":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
