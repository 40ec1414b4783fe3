"""Benchmark plumbing: a very short run through the real sender subprocess, and the table."""

from teleop.benchmarks import video_bench


def test_short_run_and_table():
    # 1.5 s: the sender skips ticks when the machine is busy, and the first 10 frames are warm-up.
    row = video_bench.run_one(160, 120, fps=30.0, duration_s=1.5)
    assert row["frames_displayed"] == row["frames_streamed"] >= video_bench.WARMUP_FRAMES + 2
    # The percentiles' frames, which the table's note counts: the warm-up is not among them.
    assert row["frames_measured"] == row["frames_displayed"] - video_bench.WARMUP_FRAMES
    # Measured figures, not judged: how fast is the machine's business (the benchmark's own).
    assert 0.0 < row["added_latency_p50_ms"] <= row["added_latency_p99_ms"]
    assert row["fps"] > 0.0
    render = video_bench.measure_render(seconds=0.3)
    assert render["render_fps"] > 0 and render["rtf_with_camera"] > 0
    result = {"160x120": row, "render_fps_320x240": render["render_fps"], "render": render,
              "targets_met_640x480": video_bench.targets_met(row)}
    table = video_bench.format_table(result)
    assert "160x120" in table and "eye camera 320x240" in table
    assert table.endswith(": met" if result["targets_met_640x480"] else ": NOT met")


def test_the_targets_verdict_takes_every_target():
    """Latency p50 and p99 within their targets and the frame rate sustained: met; any one
    missed: not met."""
    good = {"added_latency_p50_ms": video_bench.TARGET_P50_MS, "added_latency_p99_ms": video_bench.TARGET_P99_MS,
            "fps": video_bench.TARGET_FPS}
    assert video_bench.targets_met(good)
    for key, worse in (("added_latency_p50_ms", 1.01), ("added_latency_p99_ms", 1.01), ("fps", 0.5)):
        assert not video_bench.targets_met({**good, key: good[key] * worse}), key
    assert video_bench.format_table({"targets_met_640x480": False}).endswith(": NOT met")


def test_the_table_says_where_the_p99_of_the_frames_shown_lies():
    """The note said "of 150, about the second worst" whatever the run (--quick shows 35)."""
    import re

    import numpy as np

    for frames in (2, 35, 100, 101, 150, 2300):
        place = video_bench.p99_place(frames)
        ranks = [int(k) for k in re.findall(r"the (\d+)\w\w worst", place)] + [1] * place.count("the worst")
        # Latencies 1..frames: the value x is the (frames + 1 - x)-th worst.
        rank = frames + 1 - np.percentile(np.arange(1.0, frames + 1), 99)   # as the benchmark computes it
        assert min(ranks) <= rank <= max(ranks) and max(ranks) - min(ranks) <= 1, (frames, place, rank)
    row = {"fps": 20.0, "added_latency_p50_ms": 9.0, "added_latency_p99_ms": 20.0, "frames_displayed": 45,
           "frames_measured": 35}
    table = video_bench.format_table({"640x480": row})
    assert "after the first 10: of 35, between the worst and the 2nd worst)" in table
