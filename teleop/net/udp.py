"""Non-blocking UDP endpoint speaking :mod:`teleop.net.protocol`, for fixed-rate loops.

No threads, no asyncio: a station's loop calls :meth:`UdpEndpoint.poll` with timeout 0
once per tick to drain what arrived, and :meth:`UdpEndpoint.send` to send. Sockets bind
to loopback unless ``allow_remote=True`` is passed explicitly.

Arrival times. A packet that arrives just after a 100 Hz loop polled waits up to 10 ms in
the socket buffer. Where the OS offers it (Linux), the endpoint asks the kernel to stamp
each datagram on receipt (SO_TIMESTAMPNS) and converts that stamp to the endpoint's clock,
so measured delays and clock exchanges do not include the loop's polling latency.

Kernel drops. A datagram that finds the socket's receive buffer full (a router queue
flushed at once after a stall: of 1000 commands, ~835 did not fit the default ~213 KB on
loopback) is dropped by the kernel before the endpoint sees it. Where the OS counts them
per socket (Linux, SO_RXQ_OVFL), the endpoint reads the count from each datagram's
ancillary data and reports it as ``kernel_dropped``. The kernel stamps a datagram with the
count when it queues it, so drops are seen with the next datagram that arrives after them;
those after the last one are read from /proc/net/udp at the session's end
(:meth:`UdpEndpoint.count_late_kernel_drops`).
"""

from __future__ import annotations

import abc
import errno
import ipaddress
import os
import platform
import secrets
import selectors
import socket
import struct
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable

from teleop.clock import Clock, WallClock
from teleop.net.packet_filter import FilterStats, PacketFilter
from teleop.net.protocol import DEFAULT_REPLAY_WINDOW, Packet, PacketCodec, packet_type_of

Address = tuple  # (host, port) for IPv4, (host, port, flowinfo, scope_id) for IPv6

#: SO_TIMESTAMPNS is not exported by Python's socket module. 35 is its value in Linux's
#: asm-generic socket.h, used by the architectures listed; elsewhere we do not guess.
_SO_TIMESTAMPNS = 35
_TIMESTAMPNS_MACHINES = {"x86_64", "amd64", "i386", "i686", "aarch64", "arm64", "armv7l", "riscv64"}
_TIMESPEC = struct.Struct("@ll")  # struct timespec: (time_t, long), both C long here
#: SO_RXQ_OVFL, not exported by Python's socket module either: 40 in asm-generic socket.h
#: (the same architectures; alpha, mips, parisc and sparc have their own values).
_SO_RXQ_OVFL = getattr(socket, "SO_RXQ_OVFL", 40)
_DROP_COUNT = struct.Struct("=I")  # the socket's drop counter: a 32-bit unsigned, wrapping


def parse_address(text: str, default_host: str = "127.0.0.1") -> tuple[str, int]:
    """Parse ``host:port``, ``[v6host]:port`` or ``:port`` (host = default_host)."""
    host, sep, port = text.rpartition(":")
    if not sep:
        raise ValueError(f"address {text!r} must look like host:port")
    host = host.strip("[]") or default_host
    try:
        port_number = int(port)
    except ValueError:
        raise ValueError(f"bad port in address {text!r}") from None
    if not 0 <= port_number < 65536:
        raise ValueError(f"port out of range in address {text!r}")
    return host, port_number


def resolve(address: tuple[str, int]) -> tuple[int, Address]:
    """(address family, socket address) of a (host, port) pair."""
    host, port = address[0], address[1]
    family, _, _, _, sockaddr = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)[0]
    return family, sockaddr


def reaches_own_socket(destination: str, bound: str) -> bool:
    """Whether sending to ``destination`` (``host:port`` text) lands on a socket bound to
    ``bound``: the same socket address (``localhost:9001`` is ``127.0.0.1:9001``), or a
    loopback address on the port of a wildcard bind (``0.0.0.0:9001``, ``[::]:9001``).
    A bind to port 0 (any free port) is never reached by a named one; an address that does
    not resolve is left to the caller, which names its option."""
    try:
        host, port = parse_address(bound)
        if port == 0:
            return False
        _, bound_address = resolve((host, port))
        _, sent_to = resolve(parse_address(destination))
    except (OSError, ValueError):
        return False
    if sent_to == bound_address:
        return True
    wildcard = ipaddress.ip_address(str(bound_address[0]).split("%")[0]).is_unspecified
    return wildcard and sent_to[1] == bound_address[1] and is_loopback(str(sent_to[0]))


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False


class NonLoopbackRefused(PermissionError):
    """A non-loopback address refused without ``--allow-remote`` (``allow_remote=True``).

    Raised before any port is opened: ``before_work`` tells the command line to report it as
    a check made before the command started (the error line alone, no TELEOP_DEBUG hint).
    """

    before_work = True


def open_udp_socket(bind: tuple[str, int], *, allow_remote: bool = False) -> socket.socket:
    """A non-blocking UDP socket bound to ``bind``.

    Raises:
        NonLoopbackRefused: ``bind`` is not a loopback address and ``allow_remote`` is False.
    """
    family, sockaddr = resolve(bind)
    if not allow_remote and not is_loopback(sockaddr[0]):
        raise NonLoopbackRefused(f"refusing to listen on non-loopback address {sockaddr[0]}; "
                                 "give --allow-remote (allow_remote=True) to expose the port")
    sock = socket.socket(family, socket.SOCK_DGRAM)
    try:
        sock.setblocking(False)
        sock.bind(sockaddr)
    except OSError:
        sock.close()
        raise
    return sock


def _linux_socket_option_known() -> bool:
    """Whether the Linux socket option numbers above hold on this machine."""
    return sys.platform.startswith("linux") and platform.machine().lower() in _TIMESTAMPNS_MACHINES


def enable_kernel_timestamps(sock: socket.socket) -> bool:
    """Ask the kernel to timestamp received datagrams; True if it will."""
    if not _linux_socket_option_known():
        return False
    if not hasattr(sock, "recvmsg"):
        return False
    try:
        sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
    except OSError:
        return False
    return True


def enable_kernel_drop_counts(sock: socket.socket) -> bool:
    """Ask the kernel to attach its count of datagrams dropped on ``sock`` (receive buffer
    full) to the datagrams received (SO_RXQ_OVFL); True if it will. False, and nothing
    changed, where the option or ``recvmsg`` is missing (macOS, Windows)."""
    if not hasattr(sock, "recvmsg") or not hasattr(socket, "CMSG_SPACE") or not _linux_socket_option_known():
        return False
    try:
        sock.setsockopt(socket.SOL_SOCKET, _SO_RXQ_OVFL, 1)
    except OSError:
        return False
    return True


_ANCILLARY_SIZE = socket.CMSG_SPACE(_TIMESPEC.size) if hasattr(socket, "CMSG_SPACE") else 0
_DROP_COUNT_SIZE = socket.CMSG_SPACE(_DROP_COUNT.size) if hasattr(socket, "CMSG_SPACE") else 0


def ancillary_size(kernel_timestamps: bool, drop_counts: bool) -> int:
    """``recvmsg`` ancillary buffer for the messages asked for (one too small for both would
    have the kernel truncate the second, the drop count: it comes after the stamp)."""
    return (_ANCILLARY_SIZE if kernel_timestamps else 0) + (_DROP_COUNT_SIZE if drop_counts else 0)


def parse_drop_count(ancillary: Iterable[tuple[int, int, bytes]]) -> int | None:
    """The SO_RXQ_OVFL counter in a datagram's ancillary data, or None when it carries none
    (the kernel attaches none while the socket has dropped nothing)."""
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == _SO_RXQ_OVFL and len(payload) >= _DROP_COUNT.size:
            return int(_DROP_COUNT.unpack_from(payload)[0])
    return None


class KernelDropCounter:
    """Datagrams the kernel dropped on one socket, from the wrapping 32-bit SO_RXQ_OVFL
    counters of the datagrams received, and of :func:`read_drop_count` (counted since the
    socket was created, so the first counter seen is taken from 0).

    A step is the counter's difference modulo 2**32 from the last one seen. One of 2**31
    or more is the counter going back, not forward (serial-number arithmetic, RFC 1982):
    the kernel reads the counter before it queues the datagram, so two datagrams queued at
    once from two CPUs may carry their counters in the other order. It is ignored, and the
    larger counter kept; a true step that large (two billion drops between two datagrams
    read) is not a case.
    """

    def __init__(self) -> None:
        self.total = 0
        self._last = 0

    def update(self, counter: int | None) -> int:
        """Take the counter of one datagram (None: it carried none); returns :attr:`total`."""
        if counter is not None:
            step = (counter - self._last) % 2**32
            if step < 2**31:
                self.total += step
                self._last = counter
        return self.total


#: The files listing a family's UDP sockets with their drop counters (Linux).
_PROC_NET_UDP = {socket.AF_INET: "/proc/net/udp", socket.AF_INET6: "/proc/net/udp6"}


def read_drop_count(sock: socket.socket) -> int | None:
    """The kernel's counter of datagrams dropped on the UDP socket ``sock``, read now: the
    "drops" column of /proc/net/udp (/proc/net/udp6 for IPv6) in the row of the socket's
    inode; None where the file is absent or does not list the socket (macOS, Windows, a
    socket of another network namespace).

    It is the counter SO_RXQ_OVFL attaches to the datagrams (the socket's ``sk_drops``,
    counted since it was created, 32 bits wrapping: give it to
    :meth:`KernelDropCounter.update`): datagrams the kernel dropped before they could be
    read, nearly always for a full receive buffer (also a bad checksum, or a socket filter's
    refusal). Read after the last datagram, it includes the drops no datagram carried. It
    lists every UDP socket of the host's network namespace: read it at a session's end, not
    once a tick.
    """
    path = _PROC_NET_UDP.get(sock.family)
    if path is None:
        return None
    try:
        inode = os.fstat(sock.fileno()).st_ino
        with open(path, encoding="ascii") as table:
            header = table.readline().split()
            # Counted from the end: the header splits some of the first columns differently.
            inode_at, drops_at = header.index("inode") - len(header), header.index("drops") - len(header)
            for row in table:
                fields = row.split()
                if int(fields[inode_at]) == inode:
                    # Printed as a signed int: back to the 32-bit counter.
                    return int(fields[drops_at]) % 2**32
    except (OSError, ValueError, IndexError):   # no such file, or not the layout known
        return None
    return None


#: The oldest a kernel receive stamp is believed [s]: a datagram waits in the socket for a
#: poll period or a stalled tick, not longer (a larger age is a wall-clock step).
MAX_KERNEL_STAMP_AGE_S = 2.0


def receive_datagram(sock: socket.socket, bufsize: int, kernel_timestamps: bool) -> tuple[bytes, Address, float | None]:
    """One ``recvfrom``: (data, sender, seconds since the kernel received it or None).

    Raises BlockingIOError when nothing is waiting.
    """
    data, peer, age, _ = receive_datagram_counted(sock, bufsize, kernel_timestamps, False)
    return data, peer, age


def receive_datagram_counted(sock: socket.socket, bufsize: int, kernel_timestamps: bool,
                             drop_counts: bool) -> tuple[bytes, Address, float | None, int | None]:
    """:func:`receive_datagram` plus the socket's SO_RXQ_OVFL counter the datagram carries
    (None: none, or ``drop_counts`` False; see :class:`KernelDropCounter`).

    Raises BlockingIOError when nothing is waiting.
    """
    if not kernel_timestamps and not drop_counts:
        data, peer = sock.recvfrom(bufsize)
        return data, peer, None, None
    data, ancillary, _flags, peer = sock.recvmsg(bufsize, ancillary_size(kernel_timestamps, drop_counts))
    return data, peer, _stamp_age(ancillary) if kernel_timestamps else None, parse_drop_count(ancillary)


def _stamp_age(ancillary: Iterable[tuple[int, int, bytes]]) -> float | None:
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPNS and len(payload) >= _TIMESPEC.size:
            seconds, nanoseconds = _TIMESPEC.unpack_from(payload)
            age = time.time() - (seconds + nanoseconds * 1e-9)
            if age > MAX_KERNEL_STAMP_AGE_S:
                # Both stamps are wall-clock time: a clock step (NTP, set by hand) between the
                # kernel's stamp and now made the age anything, and the arrival jump into the
                # past (τ_f, the clock exchange, the watchdog). Not believed: arrived now.
                return None
            return max(age, 0.0)
    return None


@dataclass(frozen=True)
class Received:
    """An accepted packet with where and when it arrived.

    Attributes:
        packet: the decoded, authenticated, fresh packet.
        peer: sender's socket address (reply here).
        arrival_time: when it reached this host, on the endpoint's clock [s] (the kernel's
            receive stamp where available, else the time of the poll that read it).
    """

    packet: Packet
    peer: Address
    arrival_time: float


@dataclass
class EndpointStats:
    """Counters of a :class:`UdpEndpoint`.

    ``rx`` holds received/accepted/bytes and drops by reason (see :class:`PacketFilter`);
    socket-level errors are counted by errno name. ``kernel_dropped``: datagrams the kernel
    dropped before they were read, the socket's receive buffer full (not among ``received``);
    None where the OS does not count them for us (then absent from :meth:`summary`).
    """

    sent: int = 0
    bytes_sent: int = 0
    send_errors: Counter = field(default_factory=Counter)
    receive_errors: Counter = field(default_factory=Counter)
    rx: FilterStats = field(default_factory=FilterStats)
    kernel_dropped: int | None = None

    def summary(self) -> dict[str, Any]:
        """Flat dict for logs and telemetry."""
        return {
            "sent": self.sent, "bytes_sent": self.bytes_sent,
            "received": self.rx.received, "accepted": self.rx.accepted,
            "bytes_received": self.rx.bytes_received,
            **{f"accepted_{kind}": n for kind, n in sorted(self.rx.accepted_by_type.items())},
            **{f"dropped_{reason}": n for reason, n in sorted(self.rx.dropped.items())},
            **{f"send_error_{name}": n for name, n in sorted(self.send_errors.items())},
            **{f"receive_error_{name}": n for name, n in sorted(self.receive_errors.items())},
            **({} if self.kernel_dropped is None else {"kernel_dropped": self.kernel_dropped}),
        }


class PacketEndpoint(abc.ABC):
    """Transport-independent half of an endpoint: sequence numbers, encoding, filtering.

    :class:`UdpEndpoint` moves the bytes over a socket, :class:`teleop.net.virtual.VirtualEndpoint`
    over a :class:`teleop.net.delay.VirtualLink`; station code sees the same ``send``/``poll``.

    Args:
        codec: packet codec holding the shared secret.
        clock: time source for send timestamps and arrival times (a :mod:`teleop.clock` clock).
        source_id: this endpoint's id in the packet header (random if None).
        window_size: anti-replay window per stream [packets].
        accept_types: packet types accepted (None = all).
    """

    def __init__(self, codec: PacketCodec, clock: Clock, *, source_id: int | None = None,
                 window_size: int = DEFAULT_REPLAY_WINDOW, accept_types: Iterable[int] | None = None) -> None:
        self.codec = codec
        self.clock = clock
        self.source_id = source_id if source_id is not None else 1 + secrets.randbelow(2**32 - 1)
        self.filter = PacketFilter(codec, window_size=window_size, own_source_id=self.source_id,
                                   accept_types=None if accept_types is None else set(accept_types))
        self.stats = EndpointStats(rx=self.filter.stats)
        self._next_seq: dict[int, int] = {}

    def send(self, message: Any, peer: Address, *, stream_id: int | None = None) -> float | None:
        """Encode and send ``message`` to ``peer``.

        Args:
            message: a registered message (RobotReferences, ClockPing, Feedback, ...).
            peer: destination address.
            stream_id: logical stream; default is the message's packet type.

        Returns:
            The send_time stamped in the packet [s], or None if the transport refused the
            datagram (counted in ``stats.send_errors``; UDP gives no delivery guarantee
            anyway, so the caller's loop carries on).
        """
        stream = int(packet_type_of(message)) if stream_id is None else stream_id
        seq = self._next_seq.get(stream, 1)
        self._next_seq[stream] = seq + 1
        send_time = self.clock.now()
        data = self.codec.encode(message, source_id=self.source_id, stream_id=stream, seq=seq,
                                 send_time=send_time)
        error = self._transmit(data, peer)
        if error is not None:
            self.stats.send_errors[error] += 1
            return None
        self.stats.sent += 1
        self.stats.bytes_sent += len(data)
        return send_time

    @abc.abstractmethod
    def _transmit(self, data: bytes, peer: Address) -> str | None:
        """Hand one datagram to the transport; returns an error name if it refused."""

    def _accept(self, data: bytes, peer: Address, arrival_time: float) -> Received | None:
        packet = self.filter.accept(data, peer)
        return None if packet is None else Received(packet, peer, arrival_time)


class UdpEndpoint(PacketEndpoint):
    """One station's UDP socket: authenticated send and filtered, timestamped receive.

    Args:
        codec: packet codec holding the shared secret.
        bind: local (host, port) or "host:port"; port 0 picks a free port.
        allow_remote: allow binding to a non-loopback address.
        clock: time source for send timestamps and arrival times. Default
            :class:`teleop.clock.WallClock` (``time.monotonic``): it never steps, and stations
            on one host share it; across hosts the offset is estimated (:mod:`teleop.net.clock_sync`).
        kernel_timestamps: use kernel receive timestamps where available.
        kernel_drop_counts: count the datagrams the kernel dropped (receive buffer full) in
            ``stats.kernel_dropped`` where the OS tells (Linux).
        **kw: ``source_id``, ``window_size``, ``accept_types`` (see :class:`PacketEndpoint`).
    """

    def __init__(self, codec: PacketCodec, bind: tuple[str, int] | str = ("127.0.0.1", 0), *,
                 allow_remote: bool = False, clock: Clock | None = None,
                 kernel_timestamps: bool = True, kernel_drop_counts: bool = True, **kw: Any) -> None:
        super().__init__(codec, clock or WallClock(), **kw)
        if isinstance(bind, str):
            bind = parse_address(bind)
        self.sock = open_udp_socket(bind, allow_remote=allow_remote)
        self.kernel_timestamps = kernel_timestamps and enable_kernel_timestamps(self.sock)
        # The receive buffer stays the system's default (net.core.rmem_default): a larger one
        # would keep more of a flushed burst, but the robot reads 256 datagrams a tick, so
        # each extra 256 queued delay the newest command, behind stale ones, by one tick.
        self.kernel_drop_counts = kernel_drop_counts and enable_kernel_drop_counts(self.sock)
        self._kernel_drops = KernelDropCounter()
        if self.kernel_drop_counts:
            self.stats.kernel_dropped = 0
        self._selector = selectors.DefaultSelector()
        self._selector.register(self.sock, selectors.EVENT_READ)
        # One byte more than the largest valid packet, so an oversized datagram shows up as
        # such instead of being silently truncated to a valid-looking length.
        self._bufsize = codec.max_datagram + 1

    @property
    def address(self) -> Address:
        """The bound socket address (with the actual port when bound to port 0)."""
        return self.sock.getsockname()

    def _transmit(self, data: bytes, peer: Address) -> str | None:
        try:
            self.sock.sendto(data, peer)
        except OSError as exc:
            return _errno_name(exc)
        return None

    def poll(self, timeout: float = 0.0, max_packets: int = 256) -> list[Received]:
        """Receive what is waiting; returns accepted packets in arrival order.

        Args:
            timeout: longest wait for the first datagram [s]; 0 never blocks.
            max_packets: bound on datagrams read per call, so a flood cannot stall the loop.
        """
        if timeout > 0:
            self._selector.select(timeout)
        accepted: list[Received] = []
        for _ in range(max_packets):
            try:
                data, peer, age, drops = receive_datagram_counted(self.sock, self._bufsize, self.kernel_timestamps,
                                                                  self.kernel_drop_counts)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:  # e.g. ICMP port unreachable reported on Windows
                self.stats.receive_errors[_errno_name(exc)] += 1
                continue
            if drops is not None:
                self.stats.kernel_dropped = self._kernel_drops.update(drops)
            now = self.clock.now()
            received = self._accept(data, peer, now - age if age is not None else now)
            if received is not None:
                accepted.append(received)
        return accepted

    def count_late_kernel_drops(self) -> None:
        """Bring ``stats.kernel_dropped`` up to the kernel's count now (:func:`read_drop_count`),
        adding the drops after the last datagram read, which no datagram told of. For a
        session's end, before the socket is closed; nothing changes where the count is not
        known (then the drops told by the datagrams read stand)."""
        if self.kernel_drop_counts:
            self.stats.kernel_dropped = self._kernel_drops.update(read_drop_count(self.sock))

    def close(self) -> None:
        self._selector.close()
        self.sock.close()

    def __enter__(self) -> "UdpEndpoint":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _errno_name(exc: OSError) -> str:
    return errno.errorcode.get(exc.errno, type(exc).__name__) if exc.errno else type(exc).__name__
