"""A session recording replayed (`teleop retarget/operator --input/stream-mvn FILE.mcap`)
that is cut short or damaged says so: its input read in part was replayed without a word,
and one with nothing readable was called "a recording without operator input"."""

import warnings

import pytest

from teleop.inputs.synthetic import generate
from teleop.record.recorder import Recorder
from teleop.takes import DamagedRecordingWarning, recording_motion


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    """An operator input recording of 3 s (300 poses), in chunks of about 0.1 s."""
    path = tmp_path_factory.mktemp("rec") / "session.mcap"
    motion = generate("squat", seed=1, rate_hz=100.0)
    with Recorder(path, threaded=False, chunk_size_bytes=16 << 10) as rec:
        for k in range(300):
            rec.log_operator_input(motion, k, log_time_ns=int(motion.times[k] * 1e9) + 1)
    return path


def test_a_whole_recording_is_read_without_a_warning(session):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(recording_motion(session)) == 300


def test_a_recording_cut_short_is_read_with_a_warning(session, tmp_path):
    cut = tmp_path / "cut.mcap"
    cut.write_bytes(session.read_bytes()[: session.stat().st_size // 2])
    with pytest.warns(DamagedRecordingWarning, match=r"cut\.mcap is cut short .*: \d+ frames of operator input read"):
        motion = recording_motion(cut)
    assert 0 < len(motion) < 300


def test_a_recording_with_nothing_readable_says_it_is_damaged(session, tmp_path):
    stub = tmp_path / "stub.mcap"
    stub.write_bytes(session.read_bytes()[:100])
    with pytest.raises(ValueError, match=r"no operator input could be read: the file is cut short"):
        recording_motion(stub)


def test_a_complete_recording_with_a_damaged_chunk_is_read_with_a_warning(session, tmp_path):
    data = bytearray(session.read_bytes())
    data[len(data) // 3] ^= 0xFF          # inside a chunk's compressed data
    flipped = tmp_path / "flipped.mcap"
    flipped.write_bytes(bytes(data))
    with pytest.warns(DamagedRecordingWarning, match=r"flipped\.mcap is damaged \(1 damaged chunk skipped"):
        motion = recording_motion(flipped)
    assert 0 < len(motion) < 300
