"""Recording for hours: what the recorder holds per hour, a long recording cut by SIGKILL,
and a disk that fills up mid-session.

A live soak (robot + operator stations on loopback, both recording, video at 10 Hz, 11.5
min, then SIGKILL of the operator and SIGINT of the robot) measured: the robot's RSS rising
~4 MB/h with its 1,368 chunks (the MCAP writer's chunk index, one record per chunk: see
:mod:`teleop.record.recorder`, "Memory over a long session"), descriptors and threads
constant, files growing 709 / 721 MB/h, the operator's recording cut by SIGKILL 0.48 s short
of the robot's and read back whole up to there. These tests pin the same properties without
a wall clock: a simulated hour on a fake monotonic clock, counted by what the recorder holds.

Already covered elsewhere, not repeated here: a SIGKILL after 2 s of recording
(``test_record_crash.py``) and of both stations (``test_station_record.py``); the stations'
error line and exit code when the file-size limit stops a recording
(``test_station_record.py``); the writer idle after a write error (``test_recorder_errors.py``).
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import textwrap
import time
import types
from pathlib import Path

import numpy as np
import pytest
from mcap.reader import make_reader

from retarget.references import FLAT_SIZE, RobotReferences
from teleop.record import Recorder, RecordingWriteError, dataset_cli, open_recording
from teleop.record import recorder as recorder_module

REPO_ROOT = Path(__file__).resolve().parents[1]
HOUR_S = 3600.0
FLUSH_S = 0.5                    # the stations' flush interval (the recorder's default)


def _deep_size(chunk_index) -> int:
    """Bytes of Python objects one MCAP chunk index holds (an upper bound: small ints and
    the compression string are shared in fact)."""
    fields = vars(chunk_index)
    offsets = chunk_index.message_index_offsets
    size = sys.getsizeof(chunk_index) + sys.getsizeof(fields) + sys.getsizeof(offsets)
    size += sum(sys.getsizeof(value) for value in fields.values() if value is not offsets)
    return size + sum(sys.getsizeof(k) + sys.getsizeof(v) for k, v in offsets.items())


def test_an_hour_of_recording_holds_one_small_index_record_per_chunk_and_nothing_per_message(tmp_path, monkeypatch):
    """An hour of three channels on a fake monotonic clock (the flush deadline is on it):
    the recorder and its MCAP writer keep one chunk index per flush, each with an entry per
    channel at most, and nothing per message; the per-hour size stays under the ~10 MB/h
    that would make a day's session a problem (the module docstring says ~4 MB/h)."""
    now = [0.0]
    monkeypatch.setattr(recorder_module, "time", types.SimpleNamespace(
        monotonic=lambda: now[0], time_ns=time.time_ns, thread_time=time.thread_time))
    path = tmp_path / "hour.mcap"
    rec = Recorder(path, threaded=False, flush_interval_s=FLUSH_S)
    rec.start_episode("squat", log_time_ns=1)
    refs = RobotReferences.from_flat(0.0, np.zeros(FLAT_SIZE))
    writer = rec._writer                                   # the mcap Writer's private state, counted
    intervals = round(HOUR_S / FLUSH_S)
    for k in range(intervals):
        t_ns = 1_000_000 + k * 500_000_000
        rec.log("references", refs, log_time_ns=t_ns)
        rec.log("/commands/delivered", refs, log_time_ns=t_ns + 1)
        rec.log("/network/stats", {"sent": k}, log_time_ns=t_ns + 2)
        now[0] += FLUSH_S
    chunk_indexes = writer._Writer__chunk_indices
    stats = rec.stats()
    assert stats.logged == stats.written == 3 * intervals + 1 and stats.queued_messages == stats.queued_bytes == 0
    # One chunk per flush (the last interval's messages still in the open chunk), not per message.
    assert len(chunk_indexes) == stats.flushes == intervals - 1
    assert max(len(index.message_index_offsets) for index in chunk_indexes) <= 4   # 3 channels + episodes
    builder = writer._Writer__chunk_builder
    assert len(builder.message_indices) <= 4 and builder.num_messages <= 3       # one interval's worth
    assert len(writer._Writer__statistics.channel_message_counts) == 4
    assert len(rec._sequence) == len(rec._specs) == 4 and len(rec._topic_of_name) <= 3
    per_hour = sum(_deep_size(index) for index in chunk_indexes) + sys.getsizeof(chunk_indexes)
    assert per_hour < 10e6, f"{per_hour / 1e6:.1f} MB held after an hour"

    rec.close()
    with open(path, "rb") as f:                            # every chunk listed in the summary
        summary = make_reader(f).get_summary()
    assert len(summary.chunk_indexes) == summary.statistics.chunk_count == intervals
    recording = open_recording(path)
    assert recording.complete and recording.channel("references").count == intervals


_LONG_CHILD = textwrap.dedent("""
    import sys
    import numpy as np
    from retarget.references import FLAT_SIZE, RobotReferences
    from teleop.record import Recorder

    # Synchronous, a flush (a chunk) per message: when the child prints i, messages 0..i are
    # in the kernel's hands, whatever the machine's load.
    rec = Recorder(sys.argv[1], threaded=False, flush_interval_s=1e-9)
    rec.start_episode("squat", log_time_ns=1)
    i = 0
    while True:
        rec.log_references(RobotReferences.from_flat(i * 0.01, np.full(FLAT_SIZE, float(i))),
                           log_time_ns=10_000_000 * (i + 1))
        if i % 100 == 0:
            print(i, flush=True)
        i += 1
""")


def test_a_long_recording_cut_by_sigkill_reads_and_recovers_to_its_last_flushed_chunk(tmp_path, capsys):
    """Thousands of chunks, then SIGKILL: no summary, so the readers scan them all; every
    message flushed before the kill is there, in order, and `teleop dataset inspect` and
    `recover` (a complete, indexed copy) work on it."""
    path = tmp_path / "long.mcap"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])))
    child = subprocess.Popen([sys.executable, "-c", _LONG_CHILD, str(path)], stdout=subprocess.PIPE, text=True,
                             env=env, cwd=REPO_ROOT)
    flushed = -1
    try:
        for line in child.stdout:
            flushed = int(line)
            if flushed >= 3000:
                break
        os.kill(child.pid, signal.SIGKILL)
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()
        child.stdout.close()
    assert child.returncode == -signal.SIGKILL and flushed >= 3000, (child.returncode, flushed)

    recording = open_recording(path)
    assert not recording.complete
    count = recording.channel("references").count
    assert count >= flushed + 1
    np.testing.assert_array_equal(recording.reference_trajectory().values[:, 0], np.arange(count))
    [episode] = recording.episodes()
    assert episode.task == "squat" and not episode.stopped

    assert dataset_cli.main(["inspect", str(path)]) == 0
    assert "incomplete" in capsys.readouterr().out
    repaired = tmp_path / "repaired.mcap"
    assert dataset_cli.main(["recover", str(path), "-o", str(repaired)]) == 0
    with open(repaired, "rb") as f:
        summary = make_reader(f).get_summary()
    assert summary.statistics.message_count == count + 1          # + the episode's start marker
    assert sum(index.message_start_time <= 10_000_000 * count <= index.message_end_time
               for index in summary.chunk_indexes) == 1           # the last message is indexed
    assert open_recording(repaired).complete


class _FillingFile:
    """The recorder's file on a disk with ``room`` bytes left: a write that does not fit
    stores what fits, then fails as a full disk does (ENOSPC) or a file-size limit (EFBIG)."""

    def __init__(self, file, room: int, code: int) -> None:
        self._file, self._room, self._code = file, room, code

    def write(self, data) -> int:
        fits = max(0, min(len(data), self._room - self._file.tell()))
        self._file.write(bytes(data[:fits]))
        if fits < len(data):
            raise OSError(self._code, os.strerror(self._code))
        return fits

    def __getattr__(self, name):
        return getattr(self._file, name)


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EFBIG])
def test_a_disk_that_fills_mid_recording_is_one_error_line_and_keeps_what_was_written(tmp_path, monkeypatch, code):
    """The threaded recorder (as in the stations) on a disk that fills after some chunks:
    later messages are dropped (log() returns False, the caller never blocks), close() raises
    one line naming the file and the reason, and the file reads back up to the failure, its
    torn last chunk dropped; `teleop dataset recover` makes a complete copy of it."""
    path = tmp_path / "full.mcap"
    opened = Recorder._open_locked
    monkeypatch.setattr(Recorder, "_open_locked", staticmethod(lambda p: _FillingFile(opened(p), 40_000, code)))
    rec = Recorder(path, flush_interval_s=0.02, compression="none")
    rec.start_episode("squat")
    logged = 0
    for i in range(20_000):            # bounded; 40 kB of room is ~150 references
        if not rec.log_references(RobotReferences.from_flat(i * 0.01, np.full(FLAT_SIZE, float(i))),
                                  log_time_ns=10_000_000 * (i + 1)):
            break
        logged += 1
        time.sleep(0.002)
    assert rec.error is not None and getattr(rec.error, "errno", None) == code, rec.error
    with pytest.raises(RecordingWriteError) as failure:
        rec.close()
    message = str(failure.value)
    assert "\n" not in message and str(path) in message and os.strerror(code) in message, message

    recording = open_recording(path)
    assert not recording.complete
    count = recording.channel("references").count
    assert 0 < count <= logged         # the failed write took the last chunk (or only its index)
    np.testing.assert_array_equal(recording.reference_trajectory().values[:, 0], np.arange(count))
    assert path.stat().st_size <= 40_000
    monkeypatch.undo()                 # the copy goes to a disk with room
    assert dataset_cli.main(["recover", str(path), "-o", str(tmp_path / "copy.mcap")]) == 0
    assert open_recording(tmp_path / "copy.mcap").channel("references").count == count


@pytest.mark.parametrize("threaded", [True, False])
def test_a_finished_recording_is_synced_to_the_disk_once(tmp_path, monkeypatch, threaded):
    """close() puts the finished file on the disk (fsync), so that a session that ended
    survives a power cut; the flushes during the session are not synced (two disk syncs a
    second would cost more than the recording)."""
    synced: list[int] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.fstat(fd).st_ino)
        real_fsync(fd)

    monkeypatch.setattr(recorder_module.os, "fsync", fsync)
    path = tmp_path / "synced.mcap"
    rec = Recorder(path, threaded=threaded, flush_interval_s=1e-9)
    for k in range(50):
        rec.log("/network/stats", {"sent": k}, log_time_ns=k + 1)
    assert synced == []
    rec.close()
    assert synced == [path.stat().st_ino]
    assert open_recording(path).complete


def test_a_recording_to_a_device_is_not_synced(monkeypatch):
    """/dev/null cannot be synced (EINVAL): the recording ends as before, without an error."""
    monkeypatch.setattr(recorder_module.os, "fsync", lambda fd: pytest.fail("a device was synced"))
    rec = Recorder(Path("/dev/null"), threaded=False)
    rec.log("/network/stats", {"sent": 1}, log_time_ns=1)
    rec.close()
