"""Datagrams the kernel drops for want of receive buffer are counted (SO_RXQ_OVFL, Linux).

The kernel stamps each datagram with the socket's drop counter when it queues it, so the
drops of a burst that overflowed the buffer are seen with the first datagram queued after
them: the tests send one more once the queue is drained, as the next command of a live
session would be. Those after the last datagram are read from /proc/net/udp at the end.
"""

import socket

import pytest

import teleop.net.udp as udp
from teleop.net.protocol import ClockPing, PacketCodec
from teleop.net.udp import KernelDropCounter, UdpEndpoint
from teleop.video.receiver import VideoReceiver

SECRET = b"k" * 32
SMALL_BUFFER = 4096         # bytes asked for; Linux doubles it and holds a handful of datagrams
BURST = 3000


def _shrink_receive_buffer(sock: socket.socket) -> None:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SMALL_BUFFER)


def _probe_supported() -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        return udp.enable_kernel_drop_counts(sock)


needs_drop_counts = pytest.mark.skipif(not _probe_supported(),
                                       reason="the OS does not count a socket's dropped datagrams for us "
                                              "(SO_RXQ_OVFL is Linux-only)")


def _proc_lists_sockets() -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return udp.read_drop_count(sock) == 0


needs_proc = pytest.mark.skipif(not _proc_lists_sockets(), reason="no /proc/net/udp (Linux-only)")


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as sock:
            sock.bind(("::1", 0))
    except OSError:
        return False
    return True


def _drain(endpoint: UdpEndpoint) -> int:
    """Polls until the socket is empty (non-blocking); the datagrams accepted."""
    accepted = 0
    while batch := endpoint.poll(0.0, max_packets=256):
        accepted += len(batch)
    # poll stops at 256 datagrams or an empty socket: once more, nothing left.
    assert endpoint.poll(0.0) == []
    return accepted


def _received(endpoint: UdpEndpoint) -> int:
    return endpoint.stats.summary()["received"]


@needs_drop_counts
def test_a_burst_that_overflows_the_receive_buffer_is_counted_as_kernel_drops():
    codec = PacketCodec(SECRET)
    with UdpEndpoint(codec) as receiver, UdpEndpoint(codec) as sender:
        assert receiver.kernel_drop_counts
        assert receiver.stats.summary()["kernel_dropped"] == 0
        _shrink_receive_buffer(receiver.sock)
        for i in range(BURST):
            assert sender.send(ClockPing(i), receiver.address) is not None
        _drain(receiver)
        queued = _received(receiver)
        assert 0 < queued < BURST                       # the buffer held only some
        # The datagrams queued before the first drop carry no counter: nothing known yet.
        assert receiver.stats.kernel_dropped == 0
        sender.send(ClockPing(BURST), receiver.address)  # the next one, queued after the drops
        _drain(receiver)
        summary = receiver.stats.summary()
        assert summary["received"] == queued + 1
        assert summary["accepted"] == summary["received"]   # none dropped by the filter
        # Loopback loses nothing else: every datagram sent was read or dropped by the kernel.
        assert summary["kernel_dropped"] == BURST - queued
        assert summary["received"] + summary["kernel_dropped"] == BURST + 1
        # Not among the filter's reasons: those count datagrams read.
        assert not any(key.startswith("dropped_") for key in summary)


@needs_drop_counts
def test_a_second_overflow_adds_to_the_count():
    codec = PacketCodec(SECRET)
    with UdpEndpoint(codec) as receiver, UdpEndpoint(codec) as sender:
        _shrink_receive_buffer(receiver.sock)
        sent = 0
        for _ in range(2):
            for _ in range(BURST):
                sender.send(ClockPing(sent), receiver.address)
                sent += 1
            _drain(receiver)
        sender.send(ClockPing(sent), receiver.address)
        sent += 1
        _drain(receiver)
        dropped = receiver.stats.kernel_dropped
        assert dropped is not None and dropped > BURST    # each burst overflowed
        assert _received(receiver) + dropped == sent


@needs_drop_counts
def test_the_video_receiver_counts_its_kernel_drops():
    receiver = VideoReceiver(decode=False, receive_buffer_bytes=SMALL_BUFFER)
    sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        assert receiver.stats.kernel_dropped == 0
        for _ in range(BURST):
            sender.sendto(b"not video", receiver.address)
        receiver.poll(max_datagrams=10 * BURST)
        queued = receiver.stats.datagrams
        assert 0 < queued < BURST
        sender.sendto(b"not video", receiver.address)
        receiver.poll(max_datagrams=10 * BURST)
        assert receiver.stats.datagrams == queued + 1
        assert receiver.stats.kernel_dropped == BURST - queued
        assert receiver.stats.as_dict()["kernel_dropped"] == BURST - queued
    finally:
        receiver.close()
        sender.close()


def _overflow(receiver: UdpEndpoint, sender: UdpEndpoint) -> int:
    """Sends a burst that overflows the receiver's buffer and reads what it kept; that count."""
    _shrink_receive_buffer(receiver.sock)
    for i in range(BURST):
        sender.send(ClockPing(i), receiver.address)
    _drain(receiver)
    queued = _received(receiver)
    assert 0 < queued < BURST
    return queued


@needs_drop_counts
@needs_proc
@pytest.mark.parametrize("host", ["127.0.0.1", pytest.param("::1", marks=pytest.mark.skipif(
    not _ipv6_loopback(), reason="no IPv6 loopback"))])
def test_drops_after_the_last_datagram_read_are_counted_at_the_end(host):
    """No datagram came after the burst: none carried its drops, the session's end reads them."""
    codec = PacketCodec(SECRET)
    with UdpEndpoint(codec, (host, 0)) as receiver, UdpEndpoint(codec, (host, 0)) as sender:
        queued = _overflow(receiver, sender)
        assert receiver.stats.kernel_dropped == 0        # what the datagrams read told
        receiver.count_late_kernel_drops()
        assert receiver.stats.kernel_dropped == BURST - queued
        # A datagram after it carries the same counter: not counted twice.
        sender.send(ClockPing(BURST), receiver.address)
        _drain(receiver)
        receiver.count_late_kernel_drops()
        assert receiver.stats.kernel_dropped == BURST - queued
        assert _received(receiver) + receiver.stats.kernel_dropped == BURST + 1


@needs_drop_counts
@needs_proc
def test_the_proc_count_is_the_counter_the_datagrams_carry():
    codec = PacketCodec(SECRET)
    with UdpEndpoint(codec) as receiver, UdpEndpoint(codec) as sender:
        queued = _overflow(receiver, sender)
        sender.send(ClockPing(BURST), receiver.address)
        _drain(receiver)
        assert receiver.stats.kernel_dropped == BURST - queued       # told by the last datagram
        assert udp.read_drop_count(receiver.sock) == BURST - queued


@needs_drop_counts
@needs_proc
def test_the_video_receiver_counts_its_drops_after_the_last_datagram_at_the_end():
    receiver = VideoReceiver(decode=False, receive_buffer_bytes=SMALL_BUFFER)
    sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        for _ in range(BURST):
            sender.sendto(b"not video", receiver.address)
        receiver.poll(max_datagrams=10 * BURST)
        assert receiver.stats.kernel_dropped == 0
        receiver.count_late_kernel_drops()
        assert 0 < receiver.stats.datagrams < BURST
        assert receiver.stats.kernel_dropped == BURST - receiver.stats.datagrams
    finally:
        receiver.close()
        sender.close()


@needs_drop_counts
def test_without_proc_the_end_keeps_what_the_datagrams_told(monkeypatch, tmp_path):
    """Where /proc/net/udp is absent the count stays the one the datagrams carried."""
    monkeypatch.setattr(udp, "_PROC_NET_UDP", {socket.AF_INET: str(tmp_path / "absent")})
    codec = PacketCodec(SECRET)
    with UdpEndpoint(codec) as receiver, UdpEndpoint(codec) as sender:
        _overflow(receiver, sender)
        assert udp.read_drop_count(receiver.sock) is None
        receiver.count_late_kernel_drops()
        assert receiver.stats.kernel_dropped == 0


def test_a_socket_proc_does_not_list_has_no_count():
    left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    with left, right:
        assert udp.read_drop_count(left) is None


def test_without_the_option_nothing_is_claimed(monkeypatch):
    """Where the OS does not count (macOS, Windows), the endpoint still works and says
    nothing of kernel drops rather than a 0 it does not know."""
    monkeypatch.setattr(udp, "enable_kernel_drop_counts", lambda sock: False)
    codec = PacketCodec(SECRET)
    with UdpEndpoint(codec) as receiver, UdpEndpoint(codec) as sender:
        assert not receiver.kernel_drop_counts
        sender.send(ClockPing(1), receiver.address)
        received = receiver.poll(1.0)
        assert [r.packet.message for r in received] == [ClockPing(1)]
        assert receiver.stats.kernel_dropped is None
        assert "kernel_dropped" not in receiver.stats.summary()
        receiver.count_late_kernel_drops()                  # nor at the end
        assert "kernel_dropped" not in receiver.stats.summary()


def test_an_endpoint_asked_not_to_count_does_not():
    with UdpEndpoint(PacketCodec(SECRET), kernel_drop_counts=False) as receiver:
        assert not receiver.kernel_drop_counts
        assert "kernel_dropped" not in receiver.stats.summary()


def test_the_counter_is_read_from_the_ancillary_data():
    other = (socket.SOL_SOCKET, udp._SO_TIMESTAMPNS, b"\0" * udp._TIMESPEC.size)
    counter = (socket.SOL_SOCKET, udp._SO_RXQ_OVFL, udp._DROP_COUNT.pack(2**32 - 1))
    assert udp.parse_drop_count([other, counter]) == 2**32 - 1
    assert udp.parse_drop_count([other]) is None
    assert udp.parse_drop_count([]) is None
    assert udp.parse_drop_count([(socket.SOL_SOCKET, udp._SO_RXQ_OVFL, b"\1")]) is None   # truncated


def test_the_count_follows_the_32_bit_counter_across_its_wrap():
    counter = KernelDropCounter()
    assert counter.update(None) == 0                  # datagrams queued before any drop carry none
    assert counter.update(5) == 5
    assert counter.update(5) == 5                     # no new drops
    assert counter.update(None) == 5                  # no counter: nothing changes
    assert counter.update(2**31) == 2**31
    assert counter.update(2**32 - 3) == 2**32 - 3
    assert counter.update(4) == 2**32 + 4             # wrapped: 3 to 2**32 and 4 past it
    assert counter.update(10) == 2**32 + 10
    counter = KernelDropCounter()
    for value in range(0, 2**32, 2**30):              # the largest forward steps (< 2**31)
        counter.update(value)
    assert counter.total == 3 * 2**30
    assert counter.update(0) == 2**32                 # once round


def test_a_counter_going_back_is_ignored():
    """Two datagrams queued at once from two CPUs may carry their counters in the other
    order: a step back is not 2**32 - 1 drops."""
    counter = KernelDropCounter()
    assert counter.update(100) == 100
    assert counter.update(99) == 100
    assert counter.update(101) == 101
    counter = KernelDropCounter()
    counter.update(2)
    assert counter.update(2**32 - 1) == 2             # 2 -> -1 (mod 2**32) is a step back
