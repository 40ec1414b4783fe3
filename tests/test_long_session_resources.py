"""Long-running sessions: what a station owns stays bounded however often its peers come and go.

A live soak (robot + operator through two ``teleop netem`` proxies at 750 ms, jitter and 5 %
loss, video on, the web viewer streamed and polled, 13 min) showed no growth: the robot's RSS
flat at 308.2 MB from the fourth minute on, the operator's between 164 and 171 MB with no
trend, descriptors and threads constant in every process. These tests pin the churn cases
of that soak without its wall clock: N cycles of the operation, then the count of what the
process or the station owns is compared with what it was after the first few.
"""

from __future__ import annotations

import gc
import os
import socket
import threading
import time
import weakref

import pytest

from retarget.references import RobotReferences
from teleop.clock import VirtualClock
from teleop.control.tracker import references_from_configuration
from teleop.net.clock_sync import answer_ping
from teleop.net.protocol import PacketCodec
from teleop.net.udp import UdpEndpoint
from teleop.stations.robot_station import RobotStation, RobotStationConfig


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def wait_for(condition, what: str, limit_s: float = 10.0) -> None:
    """Poll ``condition`` until it holds (handler threads end on their own schedule); the
    limit only turns a leak into a failure instead of a hang."""
    deadline = time.monotonic() + limit_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"still waiting for {what} after {limit_s:g} s")
        time.sleep(0.02)


pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors in /proc/self/fd")


def test_a_robot_station_keeps_nothing_of_the_operators_that_left(robot, station_sim):
    """40 operator stations in turn (each a new port and source id, as a restarted station),
    on a virtual clock: each is attached, clock-synchronised, then silent past the stale
    timeout so that the next takes over. The station's per-operator objects (compensator,
    clock exchange and estimate) are replaced, not accumulated, and no descriptor is left."""
    secret = os.urandom(32)
    clock = VirtualClock()
    robot_ep = UdpEndpoint(PacketCodec(secret), ("127.0.0.1", 0), clock=clock)
    station = RobotStation(robot_ep, robot, station_sim, None,
                           RobotStationConfig(video_hz=0, feedback_hz=50, stale_timeout=0.2,
                                              clock_ping_interval=0.02))
    home = references_from_configuration(robot, station.tracker.q).to_flat()

    def operator_session() -> None:
        with UdpEndpoint(PacketCodec(secret), ("127.0.0.1", 0), clock=clock) as operator:
            for _ in range(6):
                operator.send(RobotReferences.from_flat(clock.now(), home), robot_ep.address)
                station.tick()
                clock.advance(0.01)
                for received in operator.poll():
                    answer_ping(operator, received)
        clock.advance(3 * station.config.stale_timeout)    # silent: the next operator may take over

    try:
        for _ in range(5):
            operator_session()
        fds, threads = open_fds(), threading.active_count()
        replaced = []     # weak references to each operator's objects, taken while it is the operator
        for _ in range(35):
            operator_session()
            replaced += [weakref.ref(station.compensator), weakref.ref(station.clock_estimator)]
            if station.clock_sync is not None:
                replaced.append(weakref.ref(station.clock_sync))
        assert station.operators_attached == 40        # every one was taken as the operator in turn
        assert station.clock_estimator.ready            # ... and clock-synchronised
        gc.collect()
        current = {id(station.compensator), id(station.clock_estimator), id(station.clock_sync)}
        kept = [ref() for ref in replaced if ref() is not None and id(ref()) not in current]
        assert not kept, f"{len(kept)} objects of operators that left are still alive: {kept[:3]}"
        # Other tests' threads may still be ending in this process: a margin far below the
        # 35 sockets or threads a per-operator leak would leave.
        assert open_fds() <= fds + 5 and threading.active_count() <= threads + 2
    finally:
        robot_ep.close()


def test_an_operator_station_restarted_in_process_leaves_no_socket_or_thread_behind(secret, capsys):
    """``teleop operator --view web`` started and stopped 8 times in one process (its command
    link, video port, web viewer and its thread): descriptors and threads are back to what
    they were after the first run. The robot address is a socket nobody reads, so each run
    ends with "never answered" (exit code 1), the path a station that cannot reach its
    robot takes."""
    from teleop.cli import main

    silent_robot = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    silent_robot.bind(("127.0.0.1", 0))
    argv = ["operator", "--robot", f"127.0.0.1:{silent_robot.getsockname()[1]}", "--video-listen", "127.0.0.1:0",
            "--view", "web", "--port", "0", "--duration", "0.2", "--secret-file", str(secret)]
    try:
        assert main(argv) == 1      # the first run imports and caches what later runs reuse
        fds, threads = open_fds(), threading.active_count()
        for _ in range(7):
            assert main(argv) == 1
        # A margin for other tests' threads still ending in this process, below the 7 x 3
        # sockets (command link, video port, viewer) and 7 threads a leaking run would leave.
        assert open_fds() <= fds + 5 and threading.active_count() <= threads + 2
        assert capsys.readouterr().err.count("never answered") == 8
    finally:
        silent_robot.close()


def test_web_viewer_clients_coming_and_going_500_times_leave_nothing_behind():
    """500 clients, in turn: a poll of /stats, a frame, an MJPEG stream read and closed, one
    reset mid-stream, a connection closed without a request and one closed mid-request. Once
    they are gone the viewer holds no stream, thread or descriptor for any of them."""
    import struct

    from teleop.video.codec import JpegCodec
    from teleop.video.sources import SyntheticSceneSource
    from teleop.video.web import VideoWebViewer

    jpeg = JpegCodec().encode(SyntheticSceneSource(64, 48).render(0))
    viewer = VideoWebViewer(port=0, streams=("left",)).start()
    viewer.publish_jpeg("left", jpeg)
    stop = threading.Event()

    def publish() -> None:      # a stream's handler notices its client gone when it writes a frame
        while not stop.wait(0.02):
            viewer.publish_jpeg("left", jpeg)

    publisher = threading.Thread(target=publish, daemon=True)
    publisher.start()

    def client(kind: int) -> None:
        with socket.create_connection(("127.0.0.1", viewer.port), timeout=5) as sock:
            if kind == 4:
                return                                            # connected, no request
            if kind == 5:
                sock.sendall(b"GET /sta")                         # gone mid-request
                return
            path = {0: "/stats", 1: "/frame/left.jpg", 2: "/stream/left.mjpg", 3: "/stream/left.mjpg"}[kind]
            sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode())
            received = b""
            while (kind < 2 or len(received) < len(jpeg)) and (chunk := sock.recv(65536)):
                received += chunk
            assert received.startswith(b"HTTP/1.") and b" 200 " in received.split(b"\r\n", 1)[0]
            if kind == 3:                                         # reset, not closed
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

    try:
        client(0)
        wait_for(lambda: viewer.stats()["viewer"]["mjpeg_clients"] == 0, "the first client's handler to end")
        fds, threads = open_fds(), threading.active_count()
        for i in range(500):
            client(i % 6)
        wait_for(lambda: viewer.stats()["viewer"]["mjpeg_clients"] == 0, "the streams of the clients gone to end")
        wait_for(lambda: threading.active_count() <= threads and open_fds() <= fds,
                 "the handlers of the clients gone to end and their sockets to close")
    finally:
        stop.set()
        publisher.join()
        viewer.stop()
