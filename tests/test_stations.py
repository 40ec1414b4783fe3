"""The robot station: forged traffic, stale commands, and the full loop on the virtual clock."""

import os
import socket

import numpy as np
import pytest

from retarget.references import RobotReferences
from teleop.clock import VirtualClock
from teleop.control.tracker import references_from_configuration
from teleop.net.delay import LinkModel
from teleop.net.protocol import PacketCodec
from teleop.net.virtual import connect_virtual
from teleop.net.watchdog import WatchdogState
from teleop.stations.robot_station import RobotStation, RobotStationConfig


def test_robot_station_rejects_garbage_and_forged_packets_over_udp(robot, station_sim):
    """A running station on a real UDP socket: garbage, packets signed with the wrong
    secret and replays are all dropped and counted; genuine commands keep working."""
    from teleop.clock import WallClock
    from teleop.net.udp import UdpEndpoint

    secret, wrong = os.urandom(32), os.urandom(32)
    robot_ep = UdpEndpoint(PacketCodec(secret), ("127.0.0.1", 0), clock=WallClock())
    good = UdpEndpoint(PacketCodec(secret), ("127.0.0.1", 0), clock=WallClock())
    forger = UdpEndpoint(PacketCodec(wrong), ("127.0.0.1", 0), clock=WallClock())
    raw = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    station = RobotStation(robot_ep, robot, station_sim, None, RobotStationConfig(video_hz=0))
    home = references_from_configuration(robot, station.tracker.q)
    rng = np.random.default_rng(0)
    try:
        far = home.to_flat()
        far[6] += 0.5  # a forged command would throw the right hand forward
        for k in range(30):
            raw.sendto(rng.bytes(int(rng.integers(1, 1500))), robot_ep.address)
            forger.send(RobotReferences.from_flat(k * 0.01, far), robot_ep.address)
            station.tick()
        assert station.compensator.observed_count == 0
        assert station.watchdog.update().state == WatchdogState.WAITING
        # Genuine commands are accepted...
        for _ in range(20):
            good.send(home.with_time(good.clock.now()), robot_ep.address)
            station.tick()
        accepted = station.compensator.observed_count
        assert accepted > 0
        # ...and a replay of captured genuine datagrams is not.
        captured = good.codec.encode(home.with_time(0.5), source_id=good.source_id, stream_id=1, seq=1, send_time=0.5)
        for _ in range(5):
            raw.sendto(captured, robot_ep.address)
        station.tick()
        assert station.compensator.observed_count == accepted
        stats = robot_ep.stats.summary()
        assert stats.get("dropped_bad_mac", 0) >= 30
        assert sum(v for k, v in stats.items() if k.startswith("dropped_")) >= 60
        assert np.all(np.isfinite(station.last_executed))
        np.testing.assert_allclose(station.last_executed[6], home.right_hand[0], atol=0.02)
    finally:
        raw.close()
        for ep in (robot_ep, good, forger):
            ep.close()


def test_robot_station_holds_a_safe_pose_when_commands_go_stale(robot, station_sim):
    clock = VirtualClock()
    operator, robot_ep = connect_virtual(PacketCodec(os.urandom(32)), LinkModel.thesis(0.0), clock, seed=1)
    station = RobotStation(robot_ep, robot, station_sim, None,
                           RobotStationConfig(video_hz=0, stale_timeout=0.2, resume_duration=0.5, smoothing_hz=0))
    home = references_from_configuration(robot, station.tracker.q).to_flat()
    moved = home.copy()
    moved[6:9] += [0.05, 0.0, 0.05]  # right hand forward and up
    back = moved.copy()
    back[6:9] += [0.04, -0.03, 0.02]  # the commands that come back ask for the hand elsewhere
    states, executed = [], []
    for k in range(250):
        clock.set(k * 0.01)
        if k < 100 or k >= 160:  # commands stop for 0.6 s
            operator.send(RobotReferences.from_flat(k * 0.01, moved if k < 100 else back), robot_ep.address)
        record = station.tick()
        states.append(record.watchdog)
        executed.append(np.array(record.executed))
        if record.watchdog == "STALE":
            held = record.executed
    assert "STALE" in states and states[-1] == "ACTIVE"
    # While stale, the last executed references are held, not dropped to anything else.
    np.testing.assert_allclose(held[6:9], moved[6:9], atol=1e-6)
    for k, state in enumerate(states):
        if state == "STALE":
            np.testing.assert_array_equal(executed[k], held)
    # Resuming blends from the held pose to the commands along a minimum-jerk profile
    # 10u^3 - 15u^4 + 6u^5 over resume_duration (0.5 s: 50 ticks), from the first
    # RESUMING tick: no jump, where executing the commands at once jumps by 5.4 cm.
    last_stale = max(k for k, state in enumerate(states) if state == "STALE")
    resuming = [k for k, state in enumerate(states) if state == "RESUMING" and k > last_stale]
    assert len(resuming) in (49, 50) and resuming == list(range(resuming[0], resuming[0] + len(resuming)))
    assert states[resuming[-1] + 1] == "ACTIVE"
    for k in resuming:
        u = (k - resuming[0]) * 0.01 / 0.5
        blend = 10 * u ** 3 - 15 * u ** 4 + 6 * u ** 5
        np.testing.assert_allclose(executed[k], (1 - blend) * held + blend * back, rtol=0, atol=1e-9)
    steps = np.linalg.norm(np.diff([e[6:9] for e in executed[resuming[0] - 1:resuming[-1] + 2]], axis=0), axis=1)
    # The profile's steepest slope is 1.875 / resume_duration: 1.875 * 0.01 / 0.5 of the way per tick.
    assert steps.max() <= 1.875 * 0.01 / 0.5 * np.linalg.norm(back[6:9] - held[6:9]) + 1e-9
    np.testing.assert_array_equal(executed[-1], back)


@pytest.mark.slow
def test_full_loop_demo_session_keeps_balance(robot):
    from teleop.demo import DemoSettings, run_session

    log = run_session(DemoSettings(duration=8, seed=11), None, with_video=False, progress=False)
    assert not log.fell
    assert log.max_foot_slip_mm < 5.0


@pytest.mark.slow
def test_demo_session_finishes_the_motion_under_way(robot):
    """The session outlasts ``duration`` while the operator is in a motion and ends once
    the operator has rested a round trip plus ``settle``: the demo's plot and figures
    never stop with the robot in the middle of a motion."""
    from teleop.clock import VirtualClock
    from teleop.demo import DemoSettings, run_session
    from teleop.inputs.synthetic import SyntheticOperator

    settings = DemoSettings(duration=4.0, seed=5, rtt=1.5)
    log = run_session(settings, None, with_video=False, progress=True)   # the bar's text changes past 4 s
    t = np.asarray(log.times)
    clock = VirtualClock(0.0)
    with SyntheticOperator(seed=settings.seed, performer=settings.performer, clock=clock.now) as operator:
        operator.poll(0.0)
        operator.frames_until(t[-1])
        assert operator.task_at(settings.duration) != "rest"   # the case under test
        tail = t[t >= t[-1] - settings.rtt - settings.settle + 0.02]
        assert all(operator.task_at(x) == "rest" for x in tail)
        # ... and not longer than needed: the operator was still moving just before.
        assert operator.task_at(t[-1] - settings.rtt - settings.settle - 0.05) != "rest"
    assert t[-1] < settings.duration + settings.max_overrun


@pytest.mark.slow
@pytest.mark.parametrize("robot_clock_offset", [3600.0, -3600.0])
def test_stations_on_two_hosts_measure_both_delays_despite_the_clock_offset(robot, robot_clock_offset):
    """Two hosts' clocks differ by their uptimes: the robot must still measure τ_f and τ̂_b
    (0.75 s each way here) and compensate; before, τ̂_b carried the whole offset (compensation
    off, or predicting an hour ahead) and τ_f took seconds to forget the unmeasured offset."""
    from teleop.demo import DemoSettings, run_session, train_library

    settings = DemoSettings(duration=6.0, seed=11, robot_clock_offset=robot_clock_offset)
    library, _ = train_library(settings.dataset)
    log = run_session(settings, library, with_video=True, progress=False)
    # 15 ms: the clock exchange's median over 128 pings 0.25 s apart (0.747 s here); over 16
    # pings 0.5 s apart it read 0.730 s.
    assert log.telemetry["tau_b_s"] == pytest.approx(0.75, abs=0.015)
    assert log.telemetry["tau_f_mean_s"] == pytest.approx(0.75, abs=0.1)
    assert "predicting" in log.states


def _station_over_udp(robot, station_sim):
    """(secret, the robot's UDP endpoint on loopback, a robot station on it with a 0.2 s stale
    timeout, the (20,) home references)."""
    from teleop.clock import WallClock
    from teleop.net.udp import UdpEndpoint

    secret = os.urandom(32)
    robot_ep = UdpEndpoint(PacketCodec(secret), ("127.0.0.1", 0), clock=WallClock())
    station = RobotStation(robot_ep, robot, station_sim, None,
                           RobotStationConfig(video_hz=0, feedback_hz=50, stale_timeout=0.2))
    return secret, robot_ep, station, references_from_configuration(robot, station.tracker.q).to_flat()


def test_a_restarted_operator_takes_over_once_the_first_is_silent(robot, station_sim):
    """Over real UDP: operator A stops; operator B (a restarted station: new port, new
    source id) gets the FEEDBACK and the clock exchange from then on. While A is still
    sending, a second sender is refused."""
    import time

    from teleop.clock import WallClock
    from teleop.net.clock_sync import answer_ping
    from teleop.net.protocol import PacketType
    from teleop.net.udp import UdpEndpoint

    secret, robot_ep, station, home = _station_over_udp(robot, station_sim)
    a = UdpEndpoint(PacketCodec(secret), ("127.0.0.1", 0), clock=WallClock())
    b = UdpEndpoint(PacketCodec(secret), ("127.0.0.1", 0), clock=WallClock())

    def run(senders, ticks: int) -> dict:
        feedback = {id(ep): 0 for ep in (a, b)}
        for _ in range(ticks):
            for ep in senders:
                ep.send(RobotReferences.from_flat(ep.clock.now(), home), robot_ep.address)
            time.sleep(0.003)
            station.tick()
            for ep in (a, b):
                for received in ep.poll():
                    if not answer_ping(ep, received):
                        feedback[id(ep)] += received.packet.packet_type == PacketType.FEEDBACK
        return feedback

    try:
        first = run([a], 40)
        assert first[id(a)] > 0 and station.operator == a.address
        both = run([a, b], 20)                     # B while A is active: refused
        assert station.operator == a.address and station.foreign_references > 0
        # Said, not only counted: the refused station sees a robot that never answers.
        assert station.first_foreign_sender == f"{b.address[0]}:{b.address[1]}"
        assert station.telemetry()["refused_other_operator"] == station.foreign_references
        # A goes silent for longer than stale_timeout: 3x, not a 0.1 s margin (arrival times are
        # kernel stamps converted at each poll, so the silence is measured, not only slept).
        time.sleep(3 * station.config.stale_timeout)
        later = run([b], 60)
        assert station.operator == b.address and station.operators_attached == 2
        assert later[id(b)] > 0 and both[id(b)] == 0
        assert station.clock_estimator.offset is not None    # the clock exchange runs with B
    finally:
        for ep in (robot_ep, a, b):
            ep.close()


def test_packets_the_network_lost_replayed_while_the_operator_is_silent_take_nothing_over(robot, station_sim,
                                                                                          tmp_path):
    """Authentic packets the network never delivered (captured on the way) are new to the
    replay window. Replayed from another address while the operator was silent, they made
    the replayer the operator and the robot executed seconds-old commands; replayed from the
    operator's own address, they kept the watchdog from going stale. A recording holds as
    delivered only what the station took: the recorder judged the packets itself, and
    recorded the refused replay as the operator's commands (training data)."""
    import socket
    import time

    from teleop.clock import WallClock
    from teleop.net.protocol import PacketType
    from teleop.net.udp import UdpEndpoint
    from teleop.record import open_recording
    from teleop.stations.recording import RobotRecording

    secret, robot_ep, station, home = _station_over_udp(robot, station_sim)
    recording = RobotRecording(tmp_path / "robot.mcap", robot_ep.clock, robot.joint_names)
    a = UdpEndpoint(PacketCodec(secret), ("127.0.0.1", 0), clock=WallClock())
    stream = int(PacketType.REFERENCES)

    def send(ticks: int, deliver: bool = True) -> list[bytes]:
        """Run the operator ``ticks`` ticks; undelivered packets (sent by the operator, lost
        by the network, captured on the way) are returned."""
        lost = []
        for _ in range(ticks):
            refs = RobotReferences.from_flat(a.clock.now(), home)
            if deliver:
                a.send(refs, robot_ep.address)
            else:
                seq = a._next_seq.get(stream, 1)
                a._next_seq[stream] = seq + 1
                lost.append(a.codec.encode(refs, source_id=a.source_id, stream_id=stream, seq=seq,
                                           send_time=refs.t))
            time.sleep(0.003)
            recording.after_tick(station, station.tick())
        return lost

    def replay(datagrams: list[bytes], sock) -> None:
        for data in datagrams:
            sock.sendto(data, robot_ep.address)
        for _ in range(20):
            time.sleep(0.003)
            recording.after_tick(station, station.tick())

    replayer = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        send(30)
        lost_first = send(15, deliver=False)
        send(10)
        lost_second = send(15, deliver=False)
        send(30)
        assert station.operator == a.address
        time.sleep(3 * station.config.stale_timeout)   # the operator goes silent (3x stale_timeout)
        replay(lost_first, replayer)               # from another address
        assert station.operator == a.address and station.operators_attached == 1
        assert station.foreign_references == len(lost_first)
        assert station.watchdog.update().state == WatchdogState.STALE
        # From the operator's own address (a spoofed source): new to the replay window, so
        # accepted, but older than what the operator sent: not a sign of it being there.
        accepted = robot_ep.filter.stats.accepted
        replay(lost_second, a.sock)
        assert robot_ep.filter.stats.accepted == accepted + len(lost_second)
        assert station.watchdog.update().state == WatchdogState.STALE
        recording.close()
        delivered = open_recording(tmp_path / "robot.mcap").channel("delivered").count
        assert delivered == 30 + 10 + 30 + len(lost_second)   # the operator's own, not the replayer's
    finally:
        recording.close()
        replayer.close()
        for ep in (robot_ep, a):
            ep.close()


def test_the_operator_video_report_gives_the_delay_spread_and_the_frames_lost():
    """VideoPath.report(): the median backward delay (the mean was pulled up by frames that
    queued in a stall, and the robot predicted that much too far ahead), its standard
    deviation (not p95 - mean) and the frames lost (a frame with a missing chunk, a frame that
    came too late)."""
    from teleop.clock import VirtualClock
    from teleop.stations.operator_station import VideoPath
    from teleop.video import wire
    from teleop.video.codec import JpegCodec

    clock = VirtualClock(0.0)
    video = VideoPath(clock, buffer_s=0.05)
    jpeg = JpegCodec().encode(np.zeros((48, 64, 3), np.uint8))
    delays = [0.75, 0.76, 0.74, 0.75, 0.77, 0.73, 0.75, 0.95]   # the last one too late for the buffer
    try:
        for k, delay in enumerate(delays):
            capture = 0.1 * k
            datagrams = list(wire.packetize(jpeg, stream_id=0, frame_id=k, codec=1, capture_s=capture,
                                            available_s=capture, encode_end_s=capture, send_clock=lambda: capture,
                                            max_datagram_bytes=300))
            assert len(datagrams) > 1
            for datagram in datagrams:
                video.handle(datagram, capture + delay)
        lost_chunk = list(wire.packetize(jpeg, stream_id=0, frame_id=99, codec=1, capture_s=2.0, available_s=2.0,
                                         encode_end_s=2.0, send_clock=lambda: 2.0, max_datagram_bytes=300))
        for datagram in lost_chunk[1:]:
            video.handle(datagram, 2.75)
        clock.set(10.0)
        video.play()                       # expires the incomplete frame
        report = video.report()
    finally:
        video.close()
    assert report.backward_delay == pytest.approx(np.median(delays))
    assert np.median(delays) != pytest.approx(np.mean(delays))          # (the test tells them apart)
    assert report.backward_delay_std == pytest.approx(np.std(delays))
    assert report.frames_received == len(delays)
    assert report.frames_lost == 2         # the late frame and the one with a missing chunk


def _frames_shown_over_jittered_link(buffer_s: float, jitter_s: float, seed: int = 0,
                                     fps: float = 10.0) -> tuple[int, int]:
    """(frames shown, frames sent): 100 frames at ``fps``, each frame in 8 or more datagrams,
    each datagram delayed by 0.75 s + N(0, jitter_s) on its own (`teleop netem --jitter-ms`),
    into the operator's VideoPath on a virtual clock ticking at 100 Hz."""
    from teleop.clock import VirtualClock
    from teleop.stations.operator_station import VideoPath
    from teleop.video import wire
    from teleop.video.codec import JpegCodec

    rng = np.random.default_rng(seed)
    jpeg = JpegCodec().encode(rng.integers(0, 255, (48, 64, 3), dtype=np.uint8))
    arrivals = []
    for k in range(100):
        capture = k / fps
        datagrams = list(wire.packetize(jpeg, stream_id=0, frame_id=k, codec=1, capture_s=capture, available_s=capture,
                                        encode_end_s=capture, send_clock=lambda: capture, max_datagram_bytes=400))
        assert len(datagrams) >= 8
        delays = np.maximum(0.75 + jitter_s * rng.standard_normal(len(datagrams)), 0.001)
        arrivals += [(capture + d, i, datagram) for i, (d, datagram) in enumerate(zip(delays, datagrams))]
    arrivals.sort(key=lambda a: (a[0], a[1]))
    clock = VirtualClock(0.0)
    video = VideoPath(clock, buffer_s=buffer_s)
    try:
        i = 0
        for tick in np.arange(0.0, 100 / fps + 4.0, 0.01):
            clock.set(tick)
            while i < len(arrivals) and arrivals[i][0] <= tick:
                video.handle(arrivals[i][2], arrivals[i][0])
                i += 1
            video.play()
        return video.displayed, 100
    finally:
        video.close()


def test_a_jitter_buffer_keeps_the_video_of_a_link_that_spreads_each_frames_datagrams():
    """Each datagram of a frame is delayed on its own, so a frame completes with its slowest
    datagram. The reassembly waits as long as the jitter buffer absorbs: before, it dropped
    every frame not complete 0.2 s after its first datagram, and a link jittering by 300 ms
    showed none of 100 frames whatever the buffer (now 95 with a 1 s buffer)."""
    for fps in (10.0, 30.0):         # at 30 frames/s, 36 open at once: 16 evicted most (44 of 100)
        shown, sent = _frames_shown_over_jittered_link(buffer_s=1.0, jitter_s=0.3, fps=fps)
        assert shown >= 0.9 * sent, fps
    shown_no_jitter, _ = _frames_shown_over_jittered_link(buffer_s=0.0, jitter_s=0.0)
    assert shown_no_jitter == sent


def test_a_video_receiver_on_a_port_in_use_fails_without_leaking_its_socket():
    import gc
    import warnings

    from teleop.video.receiver import VideoReceiver

    taken = VideoReceiver(bind=("127.0.0.1", 0))
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ResourceWarning)
            with pytest.raises(OSError):
                VideoReceiver(bind=taken.address)
            gc.collect()
        assert not [w for w in caught if issubclass(w.category, ResourceWarning)]
    finally:
        taken.close()


def test_the_resume_blend_is_long_enough_for_the_distance_it_covers():
    """A fixed 1 s towards an operator caught mid-motion swung the torso 1 rad and dropped the
    waist 25 cm in a second (the robot ended on its toe edges): the blend now lasts until no
    reference moves faster than the resume peak speeds (minimum-jerk peak 1.875 x gap / T)."""
    from retarget.references import SIGNAL_SLICES
    from teleop.stations.robot_station import RESUME_PEAK_SPEED_M_S, RESUME_PEAK_SPEED_RAD_S, resume_duration_for

    hold = np.zeros(20)
    near = hold.copy()
    near[SIGNAL_SLICES["right_hand"]] = [0.054, 0.0, 0.0]
    assert resume_duration_for(hold, near, 1.0) == 1.0                      # a small gap: the minimum
    far = hold.copy()
    far[SIGNAL_SLICES["torso"].start] = 1.0                                  # torso pitch, 1 rad
    far[SIGNAL_SLICES["waist_height"]] = -0.25
    duration = resume_duration_for(hold, far, 1.0)
    assert duration == pytest.approx(1.875 * max(1.0 / RESUME_PEAK_SPEED_RAD_S, 0.25 / RESUME_PEAK_SPEED_M_S))
    assert duration > 3.0
    far[0] = np.nan                                                          # a signal the source lacks
    assert resume_duration_for(hold, far, 1.0) == pytest.approx(duration)


def test_the_station_notices_when_the_robot_falls(robot, station_sim):
    """A kick that tips the simulated robot over: the station says it fell (telemetry, and
    `teleop robot` warns once), where before only the demo's own loop looked."""
    import pybullet as pb

    clock = VirtualClock()
    _, robot_ep = connect_virtual(PacketCodec(os.urandom(32)), LinkModel.thesis(0.0), clock, seed=1)
    station = RobotStation(robot_ep, robot, station_sim, None, RobotStationConfig(video_hz=0))
    for k in range(50):                     # standing at home: no fall
        clock.set(k * 0.01)
        station.tick()
    assert station.fell_at is None and not station.telemetry()["fell"]
    # 4 rad/s about the pitch axis at 0.5 s: forward, faster than the balance can catch.
    pb.resetBaseVelocity(station_sim.body, [0.0, 0.0, 0.0], [0.0, 4.0, 0.0], physicsClientId=station_sim.client)
    for k in range(50, 500):
        clock.set(k * 0.01)
        station.tick()
        if station.fell_at is not None:
            break
    assert station.fell_at is not None and 0.5 < station.fell_at < 5.0
    telemetry = station.telemetry()
    assert telemetry["fell"] and telemetry["max_joint_speed_ratio"] > 1.0   # a fall is no controlled motion


def test_a_station_starts_still_in_the_posture_it_holds(robot, station_sim):
    """The description's home posture has its CoM 8.7 mm behind the region the ZMP
    pre-filter keeps the CoM reference in: every station start pulled it forward, the wrists
    swung 19 deg at 0.58 of their speed limit and the CoP swung 8 cm. The station now
    starts in the posture its controller holds: waiting for an operator, nothing moves."""
    clock = VirtualClock()
    _, robot_ep = connect_virtual(PacketCodec(os.urandom(32)), LinkModel.thesis(0.0), clock, seed=1)
    station = RobotStation(robot_ep, robot, station_sim, None, RobotStationConfig(video_hz=0))
    start = station.last_joint_command.copy()
    cops = []
    for k in range(100):
        clock.set(k * 0.01)
        record = station.tick()
        assert record.watchdog == "WAITING"
        cops.append(record.cop)
    assert np.abs(station.last_joint_command - start).max() < 1e-3           # rad
    assert station.max_joint_speed_ratio < 0.05
    # The CoP only settles on the compliant floor (2.6 -> 1.2 cm forward of the ankles in
    # the first ticks); before, it swung by 8 cm (-4.8 to +3.3 cm) as the body leant.
    cops = np.array(cops)
    assert np.ptp(cops, axis=0).max() < 0.02                                 # m
    # Its home references pass the ZMP pre-filter unchanged: nothing left to correct.
    com = station.zmp.step(station.home[:2], station._com_height, station.support_polygon)
    np.testing.assert_allclose(com, station.home[:2], atol=1e-4)


def test_the_feedback_counts_the_commands_accepted_and_the_summary_names_each_kind(robot, station_sim):
    """FEEDBACK's ``packets_accepted`` is documented as the REFERENCES accepted; it counted
    every packet (clock pings and pongs, video reports too), and the robot's summary said
    "accepted 1390 packets" without saying how many were commands."""
    import time

    from teleop.clock import WallClock
    from teleop.net.clock_sync import answer_ping
    from teleop.net.protocol import ClockPing, Feedback
    from teleop.net.udp import UdpEndpoint
    from teleop.stations.cli import _accepted_kinds

    secret, robot_ep, station, home = _station_over_udp(robot, station_sim)
    operator = UdpEndpoint(PacketCodec(secret), ("127.0.0.1", 0), clock=WallClock())
    feedback: list[Feedback] = []
    try:
        for k in range(30):
            operator.send(RobotReferences.from_flat(operator.clock.now(), home), robot_ep.address)
            operator.send(ClockPing(k), robot_ep.address)
            time.sleep(0.003)
            station.tick()
            feedback += [r.packet.message for r in operator.poll(0.002)
                         if not answer_ping(operator, r) and isinstance(r.packet.message, Feedback)]
        stats = robot_ep.stats.summary()
        assert stats["accepted_references"] > 0 and stats["accepted_clock_ping"] > 0
        assert stats["accepted"] == sum(v for key, v in stats.items() if key.startswith("accepted_"))
        assert feedback and feedback[-1].packets_accepted <= stats["accepted_references"]
        assert max(f.packets_accepted for f in feedback) <= 30          # the 30 pings are not in it
        said = _accepted_kinds(stats)
        assert said.startswith(f": {stats['accepted_references']} commands, ") and "clock pings" in said
    finally:
        operator.close()
        robot_ep.close()


def test_a_restarted_proxy_between_the_stations_keeps_the_operator_and_its_clock(robot, station_sim):
    """`teleop netem` restarted between the stations forwards the same operator's commands
    from a new port. The robot took it for a new operator: a fresh clock estimate, τ̂_b and
    compensator, and the delayed commands passed through for ~2 s. Its own newer commands
    (same source id) only move the operator; another station's are still a new operator."""
    import threading
    import time

    from teleop.clock import WallClock
    from teleop.net.clock_sync import answer_ping
    from teleop.net.delay import DirectionModel
    from teleop.net.netem import NetemProxy
    from teleop.net.udp import UdpEndpoint

    secret, robot_ep, station, home = _station_over_udp(robot, station_sim)
    operator = UdpEndpoint(PacketCodec(secret), ("127.0.0.1", 0), clock=WallClock())

    def proxied(listen: str):
        proxy = NetemProxy(listen, robot_ep.address, DirectionModel.constant(0.0), DirectionModel.constant(0.0), seed=0)
        thread = threading.Thread(target=proxy.run, kwargs=dict(duration=30.0), daemon=True)
        thread.start()
        return proxy, thread

    def run(proxy_address, ticks: int) -> None:
        for _ in range(ticks):
            operator.send(RobotReferences.from_flat(operator.clock.now(), home), proxy_address)
            time.sleep(0.004)
            station.tick()
            for received in operator.poll():
                answer_ping(operator, received)

    proxy, thread = proxied("127.0.0.1:0")
    address = proxy.listen_address
    try:
        deadline = time.monotonic() + 20.0
        while station.clock_estimator.offset is None and time.monotonic() < deadline:
            run(address, 10)
        first_path, estimator, compensator = station.operator, station.clock_estimator, station.compensator
        assert estimator.offset is not None
        proxy.stop(), thread.join(5.0), proxy.close()
        proxy, thread = proxied(f"{address[0]}:{address[1]}")       # restarted on the same port
        run(address, 40)
        assert station.operator != first_path and station.operator_moves == 1
        assert station.operator_moved == (f"{first_path[0]}:{first_path[1]}",
                                          f"{station.operator[0]}:{station.operator[1]}")
        assert station.operators_attached == 1 and station.foreign_references == 0
        assert station.clock_estimator is estimator and station.compensator is compensator
        assert station.clock_sync.peer == station.operator               # pings follow it
        # A restarted operator station (a new source id) is still a new operator.
        time.sleep(3 * station.config.stale_timeout)
        operator.close()
        operator = UdpEndpoint(PacketCodec(secret), ("127.0.0.1", 0), clock=WallClock())
        run(address, 20)
        assert station.operators_attached == 2 and station.operator_moves == 1
    finally:
        proxy.stop(), thread.join(5.0), proxy.close()
        operator.close()
        robot_ep.close()
