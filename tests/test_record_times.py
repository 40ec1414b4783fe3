"""Times and sequence numbers the writer packs as fixed-size integers are checked in log();
what synchronous mode flushes, and when."""

import time

import numpy as np
import pytest
from mcap.reader import make_reader

from retarget.references import FLAT_SIZE, RobotReferences
from teleop.record import Recorder, open_recording


def refs(t: float = 0.0) -> RobotReferences:
    return RobotReferences.from_flat(t, np.zeros(FLAT_SIZE))


@pytest.mark.parametrize("threaded", [True, False])
def test_out_of_range_times_fail_at_the_call_site_and_recording_goes_on(tmp_path, threaded):
    """A bad time raises in log() naming channel and value; it never reaches the writer."""
    path = tmp_path / "times.mcap"
    rec = Recorder(path, threaded=threaded)
    rec.start_episode("squat", log_time_ns=1)
    rec.log_references(refs(), log_time_ns=2)
    with pytest.raises(ValueError, match=r"/references: log_time_ns = -1 "):
        rec.log_references(refs(), log_time_ns=-1)
    with pytest.raises(ValueError, match=r"/commands/delivered: publish_time_ns = -20000000 "):
        rec.log_delivered_command(refs(), log_time_ns=3, publish_time_ns=-20_000_000)
    with pytest.raises(ValueError, match=rf"/references: log_time_ns = {2 ** 64} "):
        rec.log_references(refs(), log_time_ns=2 ** 64)
    with pytest.raises(ValueError, match=r"/references: log_time_ns must be an integer.*1500\.0"):
        rec.log_references(refs(), log_time_ns=1500.0)
    with pytest.raises(ValueError, match=r"/episodes: log_time_ns = -5 "):
        rec.start_episode("wave", log_time_ns=-5)
    rec.log_references(refs(), log_time_ns=np.uint64(2 ** 64 - 1))  # the largest MCAP time
    rec.log_delivered_command(refs(), log_time_ns=4, publish_time_ns=0)
    rec.stop_episode(log_time_ns=5)
    stats = rec.close()                     # no RecordingWriteError: the writer never saw a bad time
    assert rec.error is None and stats.dropped_total == 0
    recording = open_recording(path)
    assert recording.complete
    assert recording.channel("references").count == 2 and recording.channel("delivered").count == 1
    assert [(e.task, e.stopped) for e in recording.episodes()] == [("squat", True)]


def test_a_clock_out_of_range_is_named(tmp_path):
    rec = Recorder(tmp_path / "clock.mcap", clock_ns=lambda: -1, threaded=False)
    with pytest.raises(ValueError, match=r"/references: log_time_ns \(from the recorder's clock\) = -1 "):
        rec.log_references(refs())
    rec.log_references(refs(), log_time_ns=0)
    rec.close()
    assert open_recording(tmp_path / "clock.mcap").message_count == 1


def test_sequence_numbers_wrap_at_32_bits(tmp_path):
    """MCAP's sequence field is 32 bits: the per-channel count wraps instead of failing the writer."""
    path = tmp_path / "seq.mcap"
    with Recorder(path) as rec:
        rec.log_references(refs(), log_time_ns=0)
        rec._sequence["/references"] = 2 ** 32 - 1  # as after four billion log() calls
        rec.log_references(refs(), log_time_ns=1)
        rec.log_references(refs(), log_time_ns=2)
    assert rec.error is None
    with open(path, "rb") as f:
        sequences = [m.sequence for _, _, m in make_reader(f).iter_messages()]
    assert sequences == [0, 2 ** 32 - 1, 0]


def test_synchronous_mode_flushes_on_the_next_call_not_when_idle(tmp_path):
    """threaded=False has no thread watching the time: idle data waits for the next log/marker/close."""
    path = tmp_path / "sync.mcap"
    # 2 s: the logging below must finish within it (the interval is wall-clock time, whatever
    # the recording clock: a busy machine preempted it past 10 ms, and could past 0.5 s).
    rec = Recorder(path, flush_interval_s=2.0, threaded=False)
    rec.start_episode("squat", log_time_ns=0)
    for i in range(10):
        rec.log_references(refs(i * 0.01), log_time_ns=i + 1)
    time.sleep(2.1)                                   # past the flush interval, but nothing calls the recorder
    assert open_recording(path).message_count == 0    # still in memory (the module docstring says so)
    rec.stop_episode(log_time_ns=20)                  # the next call flushes, the marker included
    assert open_recording(path).message_count == 12
    rec.close()
    assert open_recording(path).complete
