"""Datagrams the kernel drops for want of receive buffer are counted (SO_RXQ_OVFL, Linux).

The kernel stamps each datagram with the socket's drop counter when it queues it, so the
drops of a burst that overflowed the buffer are seen with the first datagram queued after
them: the tests send one more once the queue is drained, as the next command of a live
session would be.
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
