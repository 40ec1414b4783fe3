"""UDP endpoints on loopback: send/receive, drops counted, loopback-only by default."""

import socket
import time

import numpy as np
import pytest

from retarget.references import FLAT_SIZE, RobotReferences
from teleop.net.protocol import ClockPing, PacketCodec, PacketType
from teleop.net.udp import UdpEndpoint, is_loopback, parse_address

SECRET = b"udp-test-secret-0123456789"


def poll_until(endpoint, count, timeout=2.0):
    """Poll until ``count`` packets were accepted or ``timeout`` seconds passed."""
    received = []
    deadline = time.monotonic() + timeout
    while len(received) < count and time.monotonic() < deadline:
        received += endpoint.poll(timeout=0.05)
    return received


@pytest.fixture
def pair():
    codec = PacketCodec(SECRET)
    with UdpEndpoint(codec) as operator, UdpEndpoint(codec) as robot:
        yield operator, robot


def test_send_and_receive_references(pair):
    operator, robot = pair
    refs = RobotReferences.from_flat(3.0, np.ones(FLAT_SIZE))
    sent_at = [operator.send(refs.with_time(k), robot.address) for k in range(20)]
    received = poll_until(robot, 20)
    assert [r.packet.seq for r in received] == list(range(1, 21))  # loopback keeps order
    assert all(r.packet.packet_type == PacketType.REFERENCES and r.peer == operator.address for r in received)
    assert [r.packet.send_time for r in received] == sent_at
    # Kernel stamps (or the poll's time) on the sender's clock: never before the send; the upper
    # bound only catches another clock or unit (a loaded machine may deschedule us mid-send).
    assert all(0 <= r.arrival_time - r.packet.send_time < 1.0 for r in received)
    assert operator.stats.sent == 20 and robot.stats.rx.accepted == 20
    assert robot.stats.rx.bytes_received == operator.stats.bytes_sent
    assert robot.poll() == []  # timeout 0 never blocks


def test_garbage_oversized_and_wrong_secret_are_dropped_and_counted(pair, caplog):
    operator, robot = pair
    raw = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    stranger = UdpEndpoint(PacketCodec(b"some-other-secret-0123456"))
    port = stranger.address[1]
    try:
        raw.sendto(b"hello", robot.address)
        raw.sendto(bytes(5000), robot.address)
        stranger.send(ClockPing(1), robot.address)
        operator.send(ClockPing(2), robot.address)
        received = poll_until(robot, 1)
        time.sleep(0.02)
        received += robot.poll()
    finally:
        raw.close()
        stranger.close()
    assert len(received) == 1 and received[0].packet.message == ClockPing(2)
    assert robot.stats.rx.dropped == {"truncated": 1, "oversized": 1, "bad_mac": 1}
    summary = robot.stats.summary()
    assert summary["received"] == 4 and summary["dropped_oversized"] == 1
    # Said in the user's words (was "bad MAC (from ('127.0.0.1', 60319)) ... see teleop.net.secret").
    assert (f"packets from 127.0.0.1:{port} fail authentication and are dropped: do both stations use the same "
            "secret ($TELEOP_SECRET or --secret-file)?") in caplog.text


def test_kernel_timestamps_exclude_the_time_spent_waiting_for_poll(pair):
    operator, robot = pair
    if not robot.kernel_timestamps:
        pytest.skip("kernel receive timestamps are only used on Linux")
    operator.send(ClockPing(1), robot.address)
    time.sleep(0.5)  # the loop is busy elsewhere
    polled_at = time.monotonic()
    (received,) = poll_until(robot, 1)
    # Stamped as the send went through, not when polled 0.5 s later (margins of 0.25 s and
    # 0.1 s: a loaded machine may deschedule the sender between its send time and the send).
    assert received.arrival_time - received.packet.send_time < 0.25
    assert polled_at - received.arrival_time > 0.4


def test_reflected_packets_are_refused():
    codec = PacketCodec(SECRET)
    with UdpEndpoint(codec) as endpoint:
        endpoint.send(ClockPing(1), endpoint.address)  # our own packet coming back to us
        time.sleep(0.02)
        assert endpoint.poll() == [] and endpoint.stats.rx.dropped["reflected"] == 1


def test_only_loopback_without_explicit_permission():
    with pytest.raises(PermissionError, match="allow_remote"):
        UdpEndpoint(PacketCodec(SECRET), bind="0.0.0.0:0")
    assert is_loopback("127.0.0.1") and is_loopback("::1") and not is_loopback("0.0.0.0")


def test_ipv6_loopback():
    if not socket.has_ipv6:
        pytest.skip("no IPv6 in this Python build")
    codec = PacketCodec(SECRET)
    try:
        a, b = UdpEndpoint(codec, bind="[::1]:0"), UdpEndpoint(codec, bind="[::1]:0")
    except OSError:
        pytest.skip("IPv6 loopback not configured on this host")
    with a, b:
        a.send(ClockPing(5), b.address)
        assert poll_until(b, 1)[0].packet.message == ClockPing(5)


def test_parse_address():
    assert parse_address("127.0.0.1:9000") == ("127.0.0.1", 9000)
    assert parse_address("[::1]:9000") == ("::1", 9000)
    assert parse_address(":9000") == ("127.0.0.1", 9000)
    for bad, said in (("9000", "must look like host:port"), ("host:port", "bad port"),
                      ("127.0.0.1:70000", "port out of range")):
        with pytest.raises(ValueError, match=f"{said} in address '{bad}'|address '{bad}' {said}"):
            parse_address(bad)


def test_a_kernel_receive_stamp_across_a_wall_clock_step_is_not_believed(monkeypatch):
    """The stamp's age is wall-clock now minus the wall-clock stamp: a clock stepped forward
    in between made a datagram arrive minutes in the past (τ_f, the clock exchange and the
    watchdog took it). Beyond a poll period's worth, it arrived now."""
    import socket
    import time

    import teleop.net.udp as udp

    receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        receiver.bind(("127.0.0.1", 0))
        if not udp.enable_kernel_timestamps(receiver):
            pytest.skip("no kernel receive timestamps on this platform")
        receiver.settimeout(1.0)
        sender.sendto(b"x", receiver.getsockname())
        time.sleep(0.05)
        real = time.time
        monkeypatch.setattr(udp.time, "time", lambda: real() + 600.0)     # NTP stepped the clock
        data, _, age = udp.receive_datagram(receiver, 64, True)
        assert data == b"x" and age is None
        monkeypatch.setattr(udp.time, "time", real)
        sender.sendto(b"y", receiver.getsockname())
        time.sleep(0.05)
        data, _, age = udp.receive_datagram(receiver, 64, True)
        assert data == b"y" and 0.0 <= age < udp.MAX_KERNEL_STAMP_AGE_S
    finally:
        receiver.close()
        sender.close()
