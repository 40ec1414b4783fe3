"""Jitter buffer on an injected clock: playout times, ordering, late frames, report."""

import pytest

from teleop.video.jitter_buffer import JitterBuffer
from teleop.video.receiver import FrameTiming, ReceivedFrame


def make_frame(frame_id: int, capture_s: float) -> ReceivedFrame:
    timing = FrameTiming(
        stream_id=0, frame_id=frame_id, frame_bytes=1, chunk_count=1, capture_s=capture_s,
        available_s=capture_s, encode_end_s=capture_s, send_start_s=capture_s, send_end_s=capture_s,
        first_arrival_s=0.0, complete_s=0.0, decode_end_s=0.0,
    )
    return ReceivedFrame(timing=timing, payload=b"", image=None)


class FakeClock:
    def __init__(self, now_s: float = 0.0) -> None:
        self.now_s = now_s

    def __call__(self) -> float:
        return self.now_s


def test_fixed_anchor_releases_in_order_at_playout_time():
    clock = FakeClock()
    # Sender clock is 100 s behind the receiver; the link delay anchor is 50 ms.
    buffer = JitterBuffer(buffer_length_s=0.1, clock_offset_s=100.0, delay_anchor_s=0.05, clock=clock)
    # Frames captured every 33 ms (sender clock), arriving with jitter and out of order.
    arrivals = [(1, 0.033, 100.090), (0, 0.000, 100.095), (2, 0.066, 100.110), (3, 0.100, 100.140)]
    for frame_id, capture_s, arrival_s in arrivals:
        clock.now_s = arrival_s
        assert buffer.push(make_frame(frame_id, capture_s))
    # Playout = capture + offset + anchor + buffer = capture + 100.15.
    assert buffer.next_playout_s() == pytest.approx(100.15)
    assert buffer.pop_due(100.149) == []
    released = buffer.pop_due(100.150)
    assert [f.timing.frame_id for f in released] == [0]
    assert released[0].timing.playout_s == pytest.approx(100.15)
    released = buffer.pop_due(100.25)
    assert [f.timing.frame_id for f in released] == [1, 2, 3]
    assert [f.timing.playout_s for f in released] == pytest.approx([100.183, 100.216, 100.25])


def test_late_and_out_of_order_frames_dropped_and_counted():
    clock = FakeClock()
    buffer = JitterBuffer(buffer_length_s=0.02, delay_anchor_s=0.05, clock=clock)
    clock.now_s = 0.06
    assert buffer.push(make_frame(0, 0.0))  # playout 0.07
    clock.now_s = 0.033 + 0.08  # 80 ms delay > 50 + 20 ms -> late
    assert not buffer.push(make_frame(1, 0.033))
    clock.now_s = 0.12
    assert buffer.push(make_frame(2, 0.066))  # playout 0.136
    assert [f.timing.frame_id for f in buffer.pop_due(0.14)] == [0, 2]
    # A frame older than one already shown cannot be shown in order.
    assert not buffer.push(make_frame(1, 0.033), arrival_s=0.06)
    report = buffer.report()
    assert report["frames_late"] == 1 and report["frames_out_of_order"] == 1
    assert report["frames_released"] == 2


def test_running_median_anchor_and_report():
    clock = FakeClock()
    buffer = JitterBuffer(buffer_length_s=0.05, clock=clock)
    delays = [0.04, 0.06, 0.05, 0.05]
    for k, delay in enumerate(delays):
        capture_s = k * 0.033
        clock.now_s = capture_s + delay
        assert buffer.push(make_frame(k, capture_s))
    # Frame 1 used the anchor of frame 0 (40 ms): playout 0.033 + 0.04 + 0.05.
    frames = buffer.pop_due(10.0)
    assert frames[1].timing.playout_s == pytest.approx(0.033 + 0.04 + 0.05)
    report = buffer.report()
    assert report["buffer_length_s"] == 0.05
    assert report["backward_delay_mean_s"] == pytest.approx(0.05)
    assert report["backward_delay_p50_s"] == pytest.approx(0.05)
    assert report["backward_delay_p95_s"] == pytest.approx(0.0585)
    assert report["backward_delay_samples"] == 4
    assert report["delay_anchor_s"] == pytest.approx(0.05)
    assert report["tau_b_s"] == pytest.approx(0.10)


@pytest.mark.parametrize("buffer_length_s", [0.0, 0.1])
def test_frames_queued_by_a_freeze_do_not_shift_the_backward_delay(buffer_length_s):
    """An operator process stopped for 3 s: 90 frames queued and arrive at once, 0.8-3.7 s
    old. The running mean put tau_b (what the robot predicts for) at 0.92 s for half a
    minute, where the link's delay is 0.75 s; the median stays there."""
    clock = FakeClock()
    buffer = JitterBuffer(buffer_length_s=buffer_length_s, clock=clock)
    k = 0
    for _ in range(200):                                   # 0.75 s, steady
        clock.now_s = k * 0.033 + 0.75
        buffer.push(make_frame(k, k * 0.033))
        k += 1
    thawed = k * 0.033 + 3.75
    for _ in range(90):                                    # the queue, delivered at once
        clock.now_s = thawed
        buffer.push(make_frame(k, k * 0.033))
        k += 1
    report = buffer.report()
    assert report["backward_delay_mean_s"] > 1.2           # what the estimate used to be
    expected = 0.75 + buffer_length_s
    assert report["tau_b_s"] == pytest.approx(expected, abs=1e-9)


def test_zero_length_buffer_is_pass_through():
    clock = FakeClock(5.0)
    buffer = JitterBuffer(buffer_length_s=0.0, clock_offset_s=lambda: 4.9, clock=clock)
    assert buffer.report()["backward_delay_mean_s"] is None  # nothing measured yet
    assert buffer.push(make_frame(0, 0.05))
    assert [f.timing.playout_s for f in buffer.pop_due()] == [5.0]
    report = buffer.report()
    assert report["backward_delay_mean_s"] == pytest.approx(0.05)
    assert report["tau_b_s"] == pytest.approx(0.05) and report["delay_anchor_s"] is None


def test_overflow_drops_oldest_and_bad_settings_rejected():
    buffer = JitterBuffer(buffer_length_s=1.0, delay_anchor_s=0.0, max_frames=2, clock=FakeClock())
    for k in range(3):
        buffer.push(make_frame(k, 0.1 * k), arrival_s=0.0)
    assert len(buffer) == 2 and buffer.frames_overflow == 1
    assert [f.timing.frame_id for f in buffer.pop_due(100.0)] == [1, 2]
    with pytest.raises(ValueError):
        JitterBuffer(buffer_length_s=-0.1)


def test_sender_restart_with_reset_clock_starts_over():
    buffer = JitterBuffer(buffer_length_s=0.0, clock=FakeClock())
    buffer.push(make_frame(100, 500.0), arrival_s=500.01)
    assert len(buffer.pop_due(500.01)) == 1
    assert not buffer.push(make_frame(99, 499.5), arrival_s=500.02)  # merely out of order
    # New session, clock reset: taken as one once RESTART_CONFIRM_FRAMES (3) of its frames
    # came in a row (one old frame alone is a stale copy: tests/test_video_adversarial.py).
    assert not buffer.push(make_frame(0, 3.0), arrival_s=500.03)
    assert not buffer.push(make_frame(1, 3.1), arrival_s=500.13)
    assert buffer.push(make_frame(2, 3.2), arrival_s=500.23)
    assert [f.timing.frame_id for f in buffer.pop_due(500.23)] == [2]
    report = buffer.report()
    assert report["sender_restarts"] == 1 and report["frames_out_of_order"] == 3
    assert report["backward_delay_samples"] == 1  # old-session statistics discarded
