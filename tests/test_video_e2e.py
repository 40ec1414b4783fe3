"""End to end over real loopback UDP: source -> sender -> receiver -> jitter buffer -> display."""

import time

import numpy as np
import pytest

from teleop.video import (
    JpegCodec,
    SyntheticSceneSource,
    VideoPlayback,
    VideoReceiver,
    VideoSender,
    VideoStreamer,
    psnr_db,
)

FRAMES = 30


def _wait_until(condition, bound_s: float = 20.0) -> None:
    """Poll ``condition`` every 10 ms until it holds or ``bound_s`` passed (a guard against
    never, not a timing check: the caller asserts what it waited for)."""
    deadline = time.monotonic() + bound_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)


def test_thirty_frames_over_loopback_in_order_with_timings():
    scene = SyntheticSceneSource(320, 240)
    displayed = []
    with VideoReceiver(("127.0.0.1", 0)) as receiver, VideoSender(receiver.address) as sender:
        playback = VideoPlayback(receiver, displayed.append, buffer_length_s=0.0)
        playback.start()
        try:
            streamer = VideoStreamer(SyntheticSceneSource(320, 240), sender, fps=60.0)
            assert streamer.run(max_frames=FRAMES) == FRAMES
            # Bounded wait for the tail of the stream to be displayed.
            _wait_until(lambda: len(displayed) == FRAMES)
        finally:
            playback.stop()
    assert sender.stats.frames_sent == FRAMES
    assert [f.timing.frame_id for f in displayed] == list(range(FRAMES))
    assert receiver.stats.as_dict()["malformed_total"] == 0
    for frame in displayed:
        t = frame.timing
        # Every stage in causal order (one host, one clock).
        stages = [t.capture_s, t.available_s, t.encode_end_s, t.send_start_s, t.send_end_s,
                  t.complete_s, t.decode_end_s, t.playout_s, t.display_s]
        assert all(a <= b for a, b in zip(stages, stages[1:])), stages
        assert t.first_arrival_s <= t.complete_s
    assert psnr_db(scene.render(FRAMES - 1), displayed[-1].image) > 30.0
    report = playback.reports()["left"]
    # (Pass-through playout, buffer 0: no frame can be late there; the delay is measured.)
    assert report["backward_delay_samples"] == FRAMES and report["backward_delay_p50_s"] > 0.0
    assert isinstance(displayed[0].image, np.ndarray)


def test_buffered_playout_over_loopback():
    displayed = []
    with VideoReceiver() as receiver, VideoSender(receiver.address, codec=JpegCodec(quality=60)) as sender:
        # Generous buffer: on a loaded shared machine no frame may turn late.
        playback = VideoPlayback(receiver, displayed.append, buffer_length_s=0.2, delay_anchor_s=0.01)
        streamer = VideoStreamer(SyntheticSceneSource(160, 120), sender, fps=100.0)
        playback.start()
        try:
            streamer.run(max_frames=10)
            _wait_until(lambda: len(displayed) == 10)
        finally:
            playback.stop()
    assert [f.timing.frame_id for f in displayed] == list(range(10))
    for frame in displayed:
        t = frame.timing
        # Displayed at capture + anchor + buffer (210 ms), never early (how late is the
        # machine's scheduling, not the buffer's).
        assert t.playout_s == pytest.approx(t.capture_s + 0.21, abs=1e-9)
        assert t.display_s >= t.playout_s


def test_streamer_rate_size_and_background_stop():
    with VideoReceiver() as receiver, VideoSender(receiver.address) as sender:
        streamer = VideoStreamer(SyntheticSceneSource(160, 120), sender, fps=50.0, size=(80, 60))
        sent = streamer.run(duration_s=0.2)
        assert 1 <= sent <= 11  # 50 frames/s for 0.2 s: never faster (a busy machine may send fewer)
        frames = []
        for _ in range(50):
            frames += receiver.poll()
            if len(frames) == sent:
                break
            receiver.wait_readable(0.01)
        assert len(frames) == sent and all(f.image.shape == (60, 80, 3) for f in frames)

        streamer.start()
        time.sleep(0.05)
        streamer.stop()
        assert streamer.error is None and streamer.frames_streamed > sent
