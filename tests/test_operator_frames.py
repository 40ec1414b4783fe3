"""Which input frames the operator station sends each tick (OperatorStation.due_frames), and
FileReplay.frames_until, which gives them."""

import os

import numpy as np
import pytest

from teleop.clock import VirtualClock
from teleop.inputs.replay import FileReplay
from teleop.inputs.synthetic import generate
from teleop.net.delay import LinkModel
from teleop.net.protocol import PacketCodec
from teleop.net.virtual import connect_virtual
from teleop.stations.operator_station import OperatorStation


class Frames:
    """A source whose ``frames_until`` gives what the test says, each frame once."""

    def __init__(self, rate_hz: float) -> None:
        self.rate_hz, self.last = rate_hz, -1

    def frames_until(self, now):
        upto = int(np.floor(now * self.rate_hz + 1e-9))
        frames = [(k / self.rate_hz, {}) for k in range(self.last + 1, upto + 1)]
        self.last = max(self.last, upto)
        return frames

    def poll(self, now=None):            # the interface's; never used when frames_until exists
        raise AssertionError("poll used")


@pytest.fixture
def station(robot):
    from teleop.robot.target import robot_target

    clock = VirtualClock()
    operator, robot_ep = connect_virtual(PacketCodec(os.urandom(32)), LinkModel.thesis(0.0), clock, seed=1)
    return OperatorStation(operator, robot_ep.address, Frames(100.0), robot_target(robot))


def sample_times(station, rate_hz: float, ticks: list[float]) -> list[list[float]]:
    station.source = Frames(rate_hz)
    return [[t for t, _ in station.due_frames(now)] for now in ticks]


def test_a_source_faster_than_the_loop_is_thinned_and_the_newest_always_goes(station):
    """A 240 Hz file at the 100 Hz loop: every frame would be 240 packets a second for the
    robot to condition on; thinned to frames at least 5 ms apart, 120 a second."""
    taken = sample_times(station, 240.0, [k * 0.01 for k in range(1, 101)])
    times = np.concatenate(taken)
    assert all(ts and ts[-1] == pytest.approx(np.floor(k * 2.4 + 1e-9) / 240) for k, ts in enumerate(taken, 1))
    assert np.diff(times).min() >= 0.005 - 1e-12
    assert 100 <= len(times) <= 125


def test_a_stalled_tick_sends_the_newest_frames_not_the_backlog(station):
    taken = sample_times(station, 100.0, [0.01, 0.02, 1.02, 1.03])
    assert [len(ts) for ts in taken] == [2, 1, 4, 1]          # (the first: frames at 0 and 10 ms)
    assert taken[2] == pytest.approx([0.99, 1.0, 1.01, 1.02])


def test_a_100hz_source_sends_every_frame_and_no_frame_twice(station):
    rng = np.random.default_rng(3)
    ticks = np.arange(1, 400) * 0.01 + rng.uniform(0.0, 0.009, 399)
    times = np.concatenate(sample_times(station, 100.0, list(ticks)))
    np.testing.assert_allclose(times, np.arange(len(times)) * 0.01)
    assert len(times) == int(np.floor(ticks[-1] * 100 + 1e-9)) + 1


@pytest.mark.parametrize("loop", [False, True])
def test_file_replay_frames_until_gives_each_frame_once_as_poll_stamps_it(loop):
    """Across the end of a lap (the return to the first pose included), in order, each frame
    once, at the time ``poll`` gives it."""
    motion = generate("squat", seed=1, rate_hz=50.0).slice(0, 40)
    clock = VirtualClock(10.0)
    replay, stamps = FileReplay(motion, loop=loop, clock=clock.now), FileReplay(motion, loop=loop, clock=clock.now)
    taken, polled = [], []
    for k in range(0, 300, 7):                     # every 70 ms: several frames each time
        clock.set(10.0 + k * 0.01)
        taken += [t for t, _ in replay.frames_until()]
        for j in range(7):                          # the same times, one by one through poll
            frame = stamps.poll(10.0 + (k + j) * 0.01)
            polled += [] if frame is None else [frame[0]]
    assert np.all(np.diff(taken) > 0)
    expected = len(replay.motion) * 2 if loop else len(motion)
    assert len(taken) >= expected if loop else len(taken) == expected
    np.testing.assert_allclose(taken[: len(polled)], polled[: len(taken)], atol=1e-9)
