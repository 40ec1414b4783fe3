"""The operator's input path attacked with real components: the MVN receiver
(:class:`XsensLiveSource`) on a real loopback socket, datagrams made by the product's own
encoder (what `teleop stream-mvn` sends), and the operator station over a virtual link
retargeting what arrives. Time is a virtual clock given to the receiver and the station,
so nothing here depends on how fast the machine is.
"""

from __future__ import annotations

import os
import socket

import numpy as np
import pytest

from retarget.human import HumanMotion
from retarget.mapping import Retargeter
from teleop.clock import VirtualClock
from teleop.inputs.mvn_protocol import MvnCodec
from teleop.inputs.replay import FileReplay
from teleop.inputs.xsens_live import XsensLiveSource
from teleop.net.delay import LinkModel
from teleop.net.protocol import PacketCodec
from teleop.net.virtual import connect_virtual
from teleop.stations.operator_station import OperatorStation
from tests.conftest import SYNTHETIC

MOTION = HumanMotion.load_npz(SYNTHETIC / "squat" / "squat_0.npz")      # 23 segments, 50 Hz
#: What `teleop stream-mvn` of a CMU BVH or HDM05 take sends: their skeletons have no L5.
NO_L5 = tuple(name for name in MOTION.segment_names if name != "l5")


def pose(k: int, names=MOTION.segment_names, shift=(0.0, 0.0, 0.0)) -> dict:
    return {name: (MOTION.positions[k, MOTION.segment_names.index(name)] + np.asarray(shift),
                   MOTION.orientations[k, MOTION.segment_names.index(name)]) for name in names}


@pytest.fixture
def target(robot):
    from teleop.robot.target import robot_target

    return robot_target(robot)


def station(source, clock, target) -> OperatorStation:
    operator, robot_end = connect_virtual(PacketCodec(os.urandom(32)), LinkModel.thesis(0.0), clock, seed=1)
    return OperatorStation(operator, robot_end.address, source, target)


@pytest.fixture
def senders():
    socks = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(2)]
    yield socks
    for sock in socks:
        sock.close()


def test_two_streams_of_a_22_segment_take_on_one_port_are_not_interleaved(senders):
    """`teleop stream-mvn` of a BVH/AMC take (22 segments) and a second one left running:
    a pose counted as complete only with all 23 segments, no sender was ever followed and the
    two were interleaved sample by sample (pelvis 1 m to one side, then back, every pose)."""
    clock = VirtualClock(10.0)
    codec = MvnCodec(0.01)
    lateral = []
    with XsensLiveSource(("127.0.0.1", 0), clock=clock.now, notify=lambda line: None) as source:
        first, second = senders
        for k in range(10):
            for datagram in codec.encode_pose(k, 10 * k, pose(k, NO_L5)):
                first.sendto(datagram, source.address)
            lateral += [frame[1]["pelvis"][0][1] for frame in source.frames_until()]
            clock.advance(0.003)
            for datagram in codec.encode_pose(k, 5000 + 10 * k, pose(k + 50, NO_L5, shift=(0.0, 1.0, 0.0))):
                second.sendto(datagram, source.address)
            lateral += [frame[1]["pelvis"][0][1] for frame in source.frames_until()]
            clock.advance(0.007)
        assert source.sender[1] == first.getsockname()[1]
        assert source.stats["dropped_other_sender"] == 10
    np.testing.assert_allclose(lateral, MOTION.positions[:10, 0, 1], atol=1e-5)   # the first stream only


def test_a_22_segment_stream_in_metres_is_read_in_metres(senders):
    """The unit is found from the first complete pose: a 22-segment stream never had one, so
    a stream in metres (MVN's manual: `stream-mvn --unit 1`) was read as centimetres, the
    body 1.7 cm tall, and the station could never calibrate."""
    clock = VirtualClock(10.0)
    codec = MvnCodec(1.0)
    with XsensLiveSource(("127.0.0.1", 0), clock=clock.now) as source:
        for k in range(3):
            for datagram in codec.encode_pose(k, 20 * k, pose(k, NO_L5)):
                senders[0].sendto(datagram, source.address)
            frames = source.frames_until()
            clock.advance(0.02)
        assert source.position_unit_m == 1.0
    np.testing.assert_allclose(frames[-1][1]["head"][0], MOTION.positions[2, MOTION.segment_names.index("head")],
                               atol=1e-5)


def test_a_glitched_segment_in_the_first_mvn_pose_does_not_make_the_calibration_sparse(senders, target):
    """The first pose of the stream has one segment with a NaN position (a suit glitch): the
    receiver left it out, and the station calibrated on that pose as on a sparse source --
    lengths from proportions of the stature, the CoM mapped absolutely (2 cm off the robot's
    at the start) -- for the whole session. The same glitch in a file is held (NaN), and the
    station calibrates on the next whole pose; now the stream's too."""
    clock = VirtualClock(100.0)
    codec = MvnCodec(0.01)
    with XsensLiveSource(("127.0.0.1", 0), clock=clock.now) as source:
        live = station(source, clock, target)
        for k in range(10):
            segments = pose(k)
            if k == 0:
                segments["left_foot"] = (np.array([np.nan, 0.0, 0.0]), segments["left_foot"][1])
            for datagram in codec.encode_pose(k, 20 * k, segments):
                senders[0].sendto(datagram, source.address)
            live.tick()
            clock.advance(0.02)
    assert live.nonfinite_poses == 1 and live.sent == 9                 # the glitched pose: held
    calibration = live.retargeter.calibration
    assert calibration is not None and not calibration.estimated_dimensions
    clean = Retargeter(target)
    first_whole = MOTION.slice(1, 2)                                    # as streamed: no MVN CoM (type 24)
    clean.calibrate(HumanMotion(first_whole.times, first_whole.segment_names, first_whole.positions,
                                first_whole.orientations))
    expected = clean.step(live.current.t, MOTION.positions[9], MOTION.orientations[9], MOTION.segment_names)
    np.testing.assert_allclose(live.current.to_flat(), expected.to_flat(), atol=1e-4)


def test_a_take_streamed_as_mvn_gives_the_references_of_the_file(senders, target):
    """`stream-mvn FILE` into `--input xsens-live` against `--input FILE` on a 22-segment
    take: the same references, up to the wire's float32 centimetres and its millisecond
    time code (a 120 Hz take's 8.33 ms arrive as 8 ms; here 50 Hz, exact)."""
    motion = MOTION.slice(0, 60)
    motion = HumanMotion(motion.times, NO_L5, motion.positions[:, [MOTION.segment_names.index(n) for n in NO_L5]],
                         motion.orientations[:, [MOTION.segment_names.index(n) for n in NO_L5]], rate_hz=50.0)
    codec = MvnCodec(0.01)
    sent: dict[str, dict] = {"file": {}, "stream": {}}
    clock = VirtualClock(100.0)
    direct = station(FileReplay(motion, clock=clock.now), clock, target)
    with XsensLiveSource(("127.0.0.1", 0), clock=clock.now) as source:
        streamed = station(source, clock, target)
        streamed_index = 0
        for _ in range(120):
            elapsed = clock.now() - 100.0
            while streamed_index < len(motion) and motion.times[streamed_index] - motion.times[0] <= elapsed + 1e-9:
                k = streamed_index
                for datagram in codec.encode_pose(k, round(1000 * (motion.times[k] - motion.times[0])),
                                                  {n: (motion.positions[k, s], motion.orientations[k, s])
                                                   for s, n in enumerate(NO_L5)}):
                    senders[0].sendto(datagram, source.address)
                streamed_index += 1
            for name, st in (("file", direct), ("stream", streamed)):
                st.tick()
                sent[name].update({round(r.t - 100.0, 4): r for r in st.sent_in_tick})
            clock.advance(0.01)
    assert sorted(sent["file"]) == sorted(sent["stream"]) and len(sent["file"]) == 60
    for t, refs in sent["file"].items():
        other = sent["stream"][t]
        np.testing.assert_array_equal(refs.valid, other.valid)
        np.testing.assert_allclose(refs.to_flat(), other.to_flat(), atol=1e-4)
