"""The validity mask of RobotReferences survives recording, reading and export."""

import json

import numpy as np
import pytest

from retarget.references import FLAT_SIZE, HAND_INDICES, ReferenceTrajectory, RobotReferences
from teleop.record import Recorder, export_episodes, open_recording
from teleop.record.codecs import decode_references, encode_references

STEP_NS = 10_000_000  # 100 Hz


def hands_only() -> np.ndarray:
    """The mask of a head + hands VR source: only the hand positions measured."""
    valid = np.zeros(FLAT_SIZE, bool)
    valid[list(HAND_INDICES)] = True
    return valid


def refs_at(i: int, valid: np.ndarray | None) -> RobotReferences:
    return RobotReferences.from_flat(i * 0.01, np.arange(FLAT_SIZE) + float(i), valid=valid)


@pytest.mark.parametrize("threaded", [True, False])
def test_valid_mask_round_trips_to_messages_and_trajectory(tmp_path, threaded):
    path = tmp_path / "vr.mcap"
    valid = hands_only()
    with Recorder(path, threaded=threaded) as rec:
        for i in range(3):
            rec.log_references(refs_at(i, valid), log_time_ns=i * STEP_NS)
    recording = open_recording(path)
    for _, refs in recording.decoded("references"):
        assert refs.valid is not None and refs.valid.dtype == bool
        np.testing.assert_array_equal(refs.valid, valid)
    trajectory = recording.reference_trajectory("references")
    np.testing.assert_array_equal(trajectory.valid, valid)


def test_references_without_mask_read_back_as_none(tmp_path):
    """Recordings made before the mask was recorded (no "valid" field) stay readable: None."""
    old = json.loads(encode_references(refs_at(0, None)))
    assert "valid" not in old
    assert decode_references(json.dumps(old).encode()).valid is None
    path = tmp_path / "full.mcap"
    with Recorder(path, threaded=False) as rec:
        for i in range(3):
            rec.log_references(refs_at(i, None), log_time_ns=i * STEP_NS)
    assert open_recording(path).reference_trajectory("references").valid is None


def test_trajectory_mask_keeps_what_every_sample_measured(tmp_path):
    """Samples with different masks: a scalar is valid only if measured in all of them."""
    path = tmp_path / "mixed.mcap"
    first = hands_only()
    second = hands_only()
    second[3] = False          # left hand x lost in one sample
    second[0] = True           # CoM x measured in one sample only
    with Recorder(path, threaded=False) as rec:
        rec.log_references(refs_at(0, first), log_time_ns=0)
        rec.log_references(refs_at(1, None), log_time_ns=STEP_NS)     # None: all measured
        rec.log_references(refs_at(2, second), log_time_ns=2 * STEP_NS)
    recording = open_recording(path)
    np.testing.assert_array_equal(recording.reference_trajectory("references").valid, first & second)
    # The window decides: the sample without a mask alone gives no mask.
    alone = recording.reference_trajectory("references", STEP_NS, 2 * STEP_NS)
    assert len(alone) == 1 and alone.valid is None


def test_recorded_mask_is_a_copy_checked_at_the_call_site(tmp_path):
    path = tmp_path / "copy.mcap"
    valid = hands_only()
    with Recorder(path) as rec:
        rec.log_references(refs_at(0, valid), log_time_ns=0)
        valid[:] = True        # the caller reuses its array at once
        with pytest.raises(ValueError, match="valid"):
            rec.log_references(refs_at(1, np.ones(5, bool)), log_time_ns=STEP_NS)
    [(_, refs)] = open_recording(path).decoded("references")
    np.testing.assert_array_equal(refs.valid, hands_only())


def test_export_keeps_the_mask(tmp_path):
    path = tmp_path / "data" / "vr.mcap"
    with Recorder(path, threaded=False) as rec:
        rec.start_episode("wave", log_time_ns=0)
        for i in range(10):   # the fewest samples export writes (teleop train's MIN_TAKE_FRAMES)
            rec.log_references(refs_at(i, hands_only()), log_time_ns=i * STEP_NS)
        rec.stop_episode(log_time_ns=10 * STEP_NS)
    result = export_episodes(tmp_path / "data", tmp_path / "out")
    [written] = result.written
    np.testing.assert_array_equal(ReferenceTrajectory.load_npz(written).valid, hands_only())
