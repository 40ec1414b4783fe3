"""Datagrams the kernel dropped (receive buffer full) are said where a user looks: the
stations' status lines while a session runs, and `teleop netem`'s statistics lines.

The counting itself is tested in test_udp_kernel_drops.py; here real sockets overflow for
the proxy, whose loop is stepped by hand (no thread, no waiting).
"""

import socket

import pytest

import teleop.net.udp as udp
from teleop.net.delay import DirectionModel
from teleop.net.netem import NetemProxy
from teleop.net.protocol import Feedback
from teleop.stations.cli import _status_kernel_drops
from teleop.stations.operator_status import status_line
from teleop.wording import dropped_by_the_kernel

SMALL_BUFFER = 4096         # bytes asked for; Linux doubles it and holds a handful of datagrams
BURST = 3000
HELD = 60.0                 # [s] a delay no datagram of a test outlives: nothing is delivered


def _counts_drops() -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return udp.enable_kernel_drop_counts(sock) and udp.read_drop_count(sock) == 0


needs_drop_counts = pytest.mark.skipif(not _counts_drops(), reason="the OS does not count a socket's dropped "
                                       "datagrams for us (SO_RXQ_OVFL and /proc/net/udp are Linux-only)")


def test_the_operator_line_ends_with_the_kernel_drops_when_there_are_some():
    feedback = Feedback(forward_delay=0.75, clock_offset=0.0)
    plain = status_line(2.0, 200, 20, feedback, {"tau_b_s": 0.8}, "loop: 0.1 % late")
    line = status_line(2.0, 200, 20, feedback, {"tau_b_s": 0.8}, "loop: 0.1 % late",
                       video_kernel_dropped=12, kernel_dropped=3)
    assert line == plain + "  12 video datagrams and 3 packets dropped by the kernel"
    assert status_line(2.0, 200, 20, feedback, {"tau_b_s": 0.8}, "loop: 0.1 % late",
                       video_kernel_dropped=0, kernel_dropped=7).endswith("late  7 packets dropped by the kernel")


@pytest.mark.parametrize("video, packets", [(None, None), (0, 0), (0, None)])
def test_the_operator_line_says_nothing_of_none_or_of_counts_not_known(video, packets):
    args = (2.0, 200, 20, None, {"tau_b_s": None}, "loop: 0.0 % late")
    assert status_line(*args, video_kernel_dropped=video, kernel_dropped=packets) == status_line(*args)


def test_the_robot_line_ends_with_the_kernel_drops_when_there_are_some():
    assert _status_kernel_drops(835) == "  835 packets dropped by the kernel"
    assert _status_kernel_drops(0) == "" and _status_kernel_drops(None) == ""


def test_the_wording_lists_the_counts_above_zero():
    assert dropped_by_the_kernel([(2, "datagrams"), (None, "packets")]) == "2 datagrams dropped by the kernel"
    assert dropped_by_the_kernel([(2, "a"), (3, "b"), (4, "c")]) == "2 a, 3 b and 4 c dropped by the kernel"
    assert dropped_by_the_kernel([]) == ""


def _udp_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    return sock


def _drain(proxy: NetemProxy) -> None:
    """Steps the proxy until a step reads nothing more (every burst was sent before)."""
    def read() -> int:
        return proxy.forward_stats.received + proxy.backward_stats.received

    before = -1
    while read() != before:
        before = read()
        proxy.step(0.0)


@needs_drop_counts
def test_netem_counts_the_datagrams_the_kernel_dropped_at_its_listen_socket():
    robot, client = _udp_socket(), _udp_socket()
    with robot, client, NetemProxy("127.0.0.1:0", robot.getsockname(), DirectionModel.constant(HELD),
                                   DirectionModel.constant(HELD)) as proxy:
        proxy.listen_sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SMALL_BUFFER)
        for _ in range(BURST):
            client.sendto(b"command", proxy.listen_address)
        _drain(proxy)
        forward = proxy.forward_stats
        assert 0 < forward.received < BURST
        assert forward.kernel_dropped == 0                # no datagram after the drops told of them
        assert "kernel_dropped" not in proxy.stats_line()
        final = proxy.final_line()                        # reads them from /proc
        assert forward.kernel_dropped == BURST - forward.received
        assert f"qdrop=0 kernel_dropped={BURST - forward.received} " in final.split(" | ")[0]
        assert "kernel_dropped" not in final.split(" | ")[1]     # none backward
        # One more: it carries the same counter, which is not counted twice.
        client.sendto(b"command", proxy.listen_address)
        _drain(proxy)
        assert forward.received + forward.kernel_dropped == BURST + 1
        proxy.final_line()
        assert forward.kernel_dropped == BURST - forward.received + 1


@needs_drop_counts
def test_netem_counts_the_datagrams_the_kernel_dropped_at_its_upstream_socket():
    robot, client = _udp_socket(), _udp_socket()
    robot.settimeout(10.0)                                # a guard against never, not a timing check
    with robot, client, NetemProxy("127.0.0.1:0", robot.getsockname(), DirectionModel.constant(0.0),
                                   DirectionModel.constant(HELD)) as proxy:
        client.sendto(b"command", proxy.listen_address)
        _drain(proxy)                                     # forwarded at once (no delay)
        _, upstream_address = robot.recvfrom(64)
        # The proxy's socket for this client, which the robot's replies go to.
        (upstream,) = proxy._clients.values()
        assert upstream.getsockname() == upstream_address
        upstream.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SMALL_BUFFER)
        for _ in range(BURST):
            robot.sendto(b"video", upstream_address)
        _drain(proxy)
        backward = proxy.backward_stats
        assert 0 < backward.received < BURST and backward.kernel_dropped == 0
        final = proxy.final_line()
        assert backward.kernel_dropped == BURST - backward.received
        assert f"kernel_dropped={BURST - backward.received} " in final.split(" | ")[1]
        assert proxy.forward_stats.kernel_dropped == 0
