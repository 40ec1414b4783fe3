"""The one input interface: every backend yields timestamped human poses the same way,
and the operator station retargets whatever it gets (real UDP on loopback)."""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest

from retarget.human import SEGMENTS, HumanMotion
from retarget.references import RobotReferences
from teleop.inputs.base import (
    GatedSource,
    InputEvent,
    PoseSource,
    StationEvent,
    check_frame,
    close_source,
    drain_events,
    frame_to_motion,
    open_source,
)
from teleop.inputs.mvn_cli import stream_motion
from teleop.inputs.replay import FileReplay
from teleop.inputs.synthetic import SyntheticOperator, VirtualClock
from teleop.inputs.xsens_live import XsensLiveSource
from tests.conftest import REPO_ROOT

SYNTHETIC = REPO_ROOT / "datasets" / "synthetic" / "squat" / "squat_0.npz"


def _check(frame, segments=SEGMENTS):
    t, pose = check_frame(frame)
    assert set(pose) == set(segments)
    for position, orientation in pose.values():
        assert np.all(np.isfinite(position)) and abs(np.linalg.norm(orientation) - 1) < 1e-3
    return t


def test_existing_backends_conform_to_the_interface():
    clock = VirtualClock(10.0)
    with SyntheticOperator(seed=1, clock=clock, prefetch=False) as synthetic:
        replay = FileReplay(SYNTHETIC, clock=clock)
        for source in (synthetic, replay):
            assert isinstance(source, PoseSource)
            first = _check(source.poll(10.0))
            assert source.poll(10.0) is None                  # nothing new at the same instant
            assert _check(source.poll(10.5)) == pytest.approx(first + 0.5, abs=0.011)
            assert drain_events(source) == []
        close_source(replay)


def test_open_source_specs(tmp_path):
    with open_source("synthetic", seed=2) as synthetic:
        assert isinstance(synthetic, SyntheticOperator)
    assert isinstance(open_source(str(SYNTHETIC), speed=2.0, loop=True), FileReplay)
    live = open_source("xsens-live:0")
    try:
        assert isinstance(live, XsensLiveSource) and live.address[0] == "127.0.0.1"
    finally:
        live.close()
    with pytest.raises(Exception, match="no such file"):
        open_source(str(tmp_path / "missing.bvh"))
    with pytest.raises(ValueError, match="the MVN port must be a number 1-65535"):
        open_source("xsens-live:port")


def test_frame_helpers_validate_and_convert():
    pose = {"head": (np.zeros(3), np.array([1.0, 0, 0, 0])), "pelvis": (np.ones(3), np.array([1.0, 0, 0, 0]))}
    motion = frame_to_motion((3.0, pose), source="test")
    assert isinstance(motion, HumanMotion) and motion.segment_names == ("head", "pelvis")
    assert motion.times.tolist() == [3.0] and np.allclose(motion.positions[0, 1], 1.0)
    with pytest.raises(ValueError, match="unknown segment"):
        check_frame((0.0, {"tail": pose["head"]}))
    with pytest.raises(ValueError, match="position must be"):
        check_frame((0.0, {"head": (np.zeros(2), np.zeros(4))}))
    with pytest.raises(ValueError, match="finite"):
        check_frame((float("nan"), pose))


class _ScriptedSource:
    """A source that emits a frame on every poll and the events it is told to."""

    def __init__(self) -> None:
        self.pending: list[StationEvent] = []
        self.closed = False

    def poll(self, now=None):
        return now, {"head": (np.zeros(3), np.array([1.0, 0, 0, 0]))}

    def events(self):
        out, self.pending = self.pending, []
        return out

    def close(self):
        self.closed = True


def test_gated_source_pauses_resumes_and_stops_for_good():
    inner, seen = _ScriptedSource(), []
    gated = GatedSource(inner, on_event=seen.append)
    assert gated.poll(0.0) is not None
    inner.pending = [StationEvent(InputEvent.PAUSE_TOGGLE, 0.1)]
    assert gated.poll(0.1) is None and gated.poll(0.2) is None
    inner.pending = [StationEvent(InputEvent.PAUSE_TOGGLE, 0.3)]
    assert gated.poll(0.3) is not None
    inner.pending = [StationEvent(InputEvent.EMERGENCY_STOP, 0.4)]
    assert gated.poll(0.4) is None
    inner.pending = [StationEvent(InputEvent.PAUSE_TOGGLE, 0.5)]
    assert gated.poll(0.5) is None                             # an emergency stop is final
    assert [e.kind for e in seen] == [InputEvent.PAUSE_TOGGLE, InputEvent.PAUSE_TOGGLE,
                                      InputEvent.EMERGENCY_STOP, InputEvent.PAUSE_TOGGLE]
    gated.close()
    assert inner.closed


def test_operator_station_retargets_an_xsens_live_stream_over_loopback():
    """MVN datagrams -> XsensLiveSource -> OperatorStation -> references on a UDP socket."""
    from teleop.net.protocol import PacketCodec, PacketType
    from teleop.net.udp import UdpEndpoint
    from teleop.robot.model import RobotModel
    from teleop.robot.target import robot_target
    from teleop.stations.operator_station import OperatorStation

    secret = os.urandom(32)
    robot_side = UdpEndpoint(PacketCodec(secret), ("127.0.0.1", 0))
    operator_side = UdpEndpoint(PacketCodec(secret), ("127.0.0.1", 0))
    motion = HumanMotion.load_npz(SYNTHETIC).slice(20, 170)       # from just before the squat begins
    source = XsensLiveSource(("127.0.0.1", 0))
    polled: list = []                                            # the poses the station was given

    class Spy:
        def poll(self, now=None):
            frame = source.poll(now)
            if frame is not None:
                polled.append(frame)
            return frame

    streamer = threading.Thread(target=stream_motion, args=(motion, source.address), kwargs={"speed": 1.0})
    target = robot_target(RobotModel())
    station = OperatorStation(operator_side, robot_side.address, Spy(), target)
    received: list[RobotReferences] = []
    sent: list[RobotReferences] = []
    try:
        streamer.start()
        for _ in range(3000):                                    # bounded; time is not asserted
            refs = station.tick()
            if refs is not None:
                sent.append(refs)
            received += [r.packet.message for r in robot_side.poll()
                         if r.packet.packet_type == PacketType.REFERENCES]
            if len(received) >= 20:
                break
            time.sleep(0.002)
    finally:
        streamer.join()
        source.close()
        robot_side.close()
        operator_side.close()
    assert len(received) >= 20, dict(source.stats)
    times = np.array([r.t for r in received])
    assert np.all(np.diff(times) > 0)                            # MVN time codes on the operator clock
    assert all(np.all(np.isfinite(r.to_flat())) for r in received)
    # Every pose was retargeted, by a retargeting calibrated once, on the first pose, and
    # sent as it is (float64 on the wire): the same poses through a Retargeter of our own
    # give the same references.
    from retarget.mapping import Retargeter

    assert len(sent) == len(polled) and len(received) <= len(sent)
    names = tuple(polled[0][1])
    stack = lambda pose, i: np.array([pose[n][i] for n in names])  # noqa: E731
    offline = Retargeter(target)
    offline.calibrate(HumanMotion(np.array([polled[0][0]]), names, stack(polled[0][1], 0)[None],
                                  stack(polled[0][1], 1)[None], source="first pose"))
    for (t, pose), refs in zip(polled, sent):
        assert refs.t == t
        np.testing.assert_allclose(refs.to_flat(), offline.step(t, stack(pose, 0), stack(pose, 1), names).to_flat(),
                                   rtol=0, atol=1e-12)
    for refs in received:
        np.testing.assert_array_equal(refs.to_flat(), next(r for r in sent if r.t == refs.t).to_flat())
    # ...and they follow the operator: the squat begins within these poses (the first 20
    # frames of it move a reference by 3 cm), so the references move.
    assert np.ptp(np.array([r.to_flat() for r in sent]), axis=0).max() > 1e-3


def test_an_xsens_csv_replay_plays_at_the_rate_it_is_given():
    """An Xsens CSV export does not state its rate: the operator's file source read it at
    100 Hz whatever it was, with no option to say otherwise (`teleop operator --rate-hz`)."""
    from teleop.cli import build_parser
    from teleop.stations.cli import _make_source
    from tests.conftest import shared_data

    take = shared_data("xsens_putaside_box", "p1.csv")
    default = open_source(str(take))
    args = build_parser().parse_args(["operator", "--input", str(take), "--rate-hz", "50"])
    at_50 = _make_source(args)
    assert np.allclose(np.diff(default.motion.times), 0.01) and np.allclose(np.diff(at_50.motion.times), 0.02)
    assert at_50.motion.duration == pytest.approx(2 * default.motion.duration)
