"""Review regressions (library, s38): HumanMotion and ReferenceTrajectory built in code
refuse non-finite values (and, for references, times that do not increase), naming the
sample and the segment or signal, while the raw operator input a recording keeps stays
recordable and readable; StructuredPosterior takes a (D,) mask for any number of rows."""

import re

import numpy as np
import pytest

from promp.basis import RBFBasis
from promp.posterior import StructuredPosterior
from promp.synthetic import learn_library, make_tasks
from retarget.human import HumanMotion, MotionFormatError
from retarget.references import FLAT_LABELS, FLAT_SIZE, InvalidReferences, ReferenceTrajectory
from teleop.inputs.base import frame_to_motion
from teleop.record import Recorder, open_recording

NAMES = ("pelvis", "head", "left_hand", "right_hand")


def motion_arrays(n: int = 10, n_segments: int = len(NAMES)) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(T,) times at 100 Hz [s], (T, S, 3) positions [m], (T, S, 4) identity quaternions,
    (T, 3) CoM [m]: a still, finite motion."""
    times = np.arange(n) / 100.0
    positions = np.tile(np.linspace(0.1, 1.6, 3 * n_segments).reshape(n_segments, 3), (n, 1, 1))
    orientations = np.tile([1.0, 0.0, 0.0, 0.0], (n, n_segments, 1))
    com = np.tile([0.0, 0.0, 0.9], (n, 1))
    return times, positions, orientations, com


# ------------------------------------------------------------------ HumanMotion


@pytest.mark.parametrize("array, index, words", [
    ("positions", (3, 2, 1), "non-finite positions (NaN or inf) at frame 3 of 10, segment left_hand"),
    ("orientations", (7, 0, 0), "non-finite orientations (NaN or inf) at frame 7 of 10, segment pelvis"),
    ("com", (5, 2), "non-finite com (NaN or inf) at frame 5 of 10"),
])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_a_motion_built_in_code_refuses_non_finite_values_naming_frame_and_segment(array, index, words, bad):
    """Only times were checked: a NaN position ran through the retargeting into the
    references, the training and the controller."""
    arrays = dict(zip(("times", "positions", "orientations", "com"), motion_arrays()))
    arrays[array][index] = bad
    with pytest.raises(MotionFormatError) as e:
        HumanMotion(arrays["times"], NAMES, arrays["positions"], arrays["orientations"], arrays["com"],
                    source="glove-7")
    assert str(e.value) == f"glove-7: {words}"


def test_a_finite_motion_and_an_empty_one_are_still_built():
    times, positions, orientations, com = motion_arrays()
    assert len(HumanMotion(times, NAMES, positions, orientations, com)) == 10
    assert len(HumanMotion(np.zeros(0), (), np.zeros((0, 0, 3)), np.zeros((0, 0, 4)))) == 0


def test_the_shape_and_time_checks_come_first_and_still_hold_for_raw_motions():
    times, positions, orientations, _ = motion_arrays()
    positions[4, 1, 0] = np.nan
    with pytest.raises(MotionFormatError, match=r"positions must be \(10, 3, 3\)"):
        HumanMotion(times, NAMES[:3], positions, orientations)
    with pytest.raises(MotionFormatError, match=r"positions must be \(10, 3, 3\)"):
        HumanMotion.raw(times, NAMES[:3], positions, orientations)
    with pytest.raises(MotionFormatError, match="sample times must increase, but sample 5"):
        HumanMotion.raw(np.r_[times[:5], times[3:8]], NAMES, positions, orientations)


def test_a_raw_motion_keeps_non_finite_values_and_converts_like_the_constructor():
    """The operator's raw input: a device glitch (NaN in a segment) is held by the station
    like a lost segment, and recorded as it came."""
    times, positions, orientations, com = motion_arrays()
    positions[4, 1, 0] = np.nan
    motion = HumanMotion.raw(list(times), list(NAMES), positions.tolist(), orientations, com, source="vr", rate_hz=100)
    assert isinstance(motion.positions, np.ndarray) and np.isnan(motion.positions[4, 1, 0])
    assert motion.segment_names == NAMES and motion.rate_hz == 100.0 and motion.meta == {}
    with pytest.raises(MotionFormatError, match="vr: non-finite positions .* frame 4 of 10, segment head"):
        motion.slice(0, 10)                        # anything built from it again is checked


def test_a_glitched_operator_frame_is_recorded_and_read_back_and_a_take_of_it_refused(tmp_path):
    """Refused when the recorder took the frame, one glitch would have stopped a recorded
    session, and the recording's operator channel would no longer decode."""
    _, positions, orientations, _ = motion_arrays(3)
    path = tmp_path / "glitch.mcap"
    with Recorder(path, threaded=False) as rec:
        for k in range(3):
            pose = {name: (positions[k, i].copy(), orientations[k, i].copy()) for i, name in enumerate(NAMES)}
            if k == 1:
                pose["right_hand"][0][2] = np.nan
            rec.log_operator_input(frame_to_motion((k / 100.0, pose)), log_time_ns=10**9 + k * 10**7)
    recording = open_recording(path)
    frames = [frame for _, frame in recording.decoded("operator")]
    assert len(frames) == 3 and np.isnan(frames[1].positions[0, 3, 2])
    assert np.isfinite(frames[0].positions).all() and np.isfinite(frames[2].positions).all()
    # As one motion (a take to retarget), it is refused like a motion file with a NaN.
    with pytest.raises(MotionFormatError, match=re.escape(f"{path}: non-finite positions (NaN or inf) at frame 1 of 3, "
                                                          "segment right_hand")):
        recording.operator_motion()


# ------------------------------------------------------------------ ReferenceTrajectory


def reference_arrays(n: int = 10) -> tuple[np.ndarray, np.ndarray]:
    """(T,) times at 100 Hz [s] and (T, 20) finite references."""
    return np.arange(n) / 100.0, np.random.default_rng(1).normal(scale=0.1, size=(n, FLAT_SIZE))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_references_built_in_code_refuse_a_non_finite_value_naming_frame_and_signals(bad):
    times, values = reference_arrays()
    values[6, 7] = bad                                           # r.hand y
    values[6, 15] = bad                                          # neck pitch
    values[8, 0] = bad                                           # a later frame: the first is named
    with pytest.raises(InvalidReferences) as e:
        ReferenceTrajectory(times, values)
    assert str(e.value) == f"non-finite values (NaN or inf) at frame 6 of 10 ({FLAT_LABELS[7]}, {FLAT_LABELS[15]})"


def test_a_non_finite_value_of_a_signal_not_measured_is_refused_too():
    """The retargeting holds a signal a source lacks at the robot's initial posture (never
    NaN), and the training, the interpolation, the wire and the controller read all 20."""
    times, values = reference_arrays()
    valid = np.ones(FLAT_SIZE, dtype=bool)
    valid[:2] = False                                            # no CoM (VR head + hands)
    values[2, 0] = np.nan
    with pytest.raises(InvalidReferences, match=r"at frame 2 of 10 \(com x\)"):
        ReferenceTrajectory(times, values, valid=valid)


@pytest.mark.parametrize("k, bad", [(0, np.nan), (4, np.inf), (9, -np.inf)])
def test_references_refuse_a_non_finite_time(k, bad):
    times, values = reference_arrays()
    times[k] = bad
    with pytest.raises(InvalidReferences, match=f"^non-finite time \\(NaN or inf\\) at sample {k} of 10$"):
        ReferenceTrajectory(times, values)


@pytest.mark.parametrize("k, t, words", [
    (5, 0.04, "sample 5 of 10 is at 0.04 s after sample 4 at 0.04 s"),       # stands still
    (5, 0.01, "sample 5 of 10 is at 0.01 s after sample 4 at 0.04 s"),       # goes back
])
def test_references_refuse_times_that_do_not_increase(k, t, words):
    times, values = reference_arrays()
    times[k] = t
    with pytest.raises(InvalidReferences, match=f"^sample times must increase, but {words}$"):
        ReferenceTrajectory(times, values)


def test_finite_increasing_references_and_short_ones_are_still_built():
    times, values = reference_arrays()
    assert len(ReferenceTrajectory(times, values, valid=np.ones(FLAT_SIZE, bool))) == 10
    assert len(ReferenceTrajectory(times[:1], values[:1])) == 1
    assert len(ReferenceTrajectory(np.zeros(0), np.zeros((0, FLAT_SIZE)))) == 0


def test_a_reference_file_with_a_nan_is_refused_with_its_path(tmp_path):
    times, values = reference_arrays()
    values[3, 4] = np.nan
    path = tmp_path / "take.npz"
    ReferenceTrajectory.raw(times, values).save_npz(path)
    expected = "^" + re.escape(f"{path}: non-finite values (NaN or inf) at frame 3 of 10 ({FLAT_LABELS[4]})")
    with pytest.raises(InvalidReferences, match=expected):
        ReferenceTrajectory.load_npz(path)


def test_raw_references_keep_what_a_recording_holds_but_not_wrong_shapes():
    times, values = reference_arrays()
    values[3, 4], times[7] = np.nan, np.nan
    raw = ReferenceTrajectory.raw(times, values, label="squat", source="rec.mcap#episode0")
    assert np.isnan(raw.values[3, 4]) and np.isnan(raw.times[7]) and raw.meta == {} and raw.valid is None
    with pytest.raises(InvalidReferences, match=r"values must be \(T, 20\)"):
        ReferenceTrajectory.raw(times, values[:, :7])
    with pytest.raises(InvalidReferences, match="valid mask must be"):
        ReferenceTrajectory.raw(times, values, valid=np.ones(3, bool))


# ------------------------------------------------------------------ StructuredPosterior masks

N_SIGNALS = 4


@pytest.fixture(scope="module")
def promp():
    tasks = make_tasks(seed=3, n_tasks=2, n_signals=N_SIGNALS, duration=2.0)
    return learn_library(tasks, np.random.default_rng(2), 6, basis=RBFBasis(10)).promps[0]


@pytest.mark.parametrize("n", [1, 3, N_SIGNALS, 7])
def test_a_signal_mask_is_broadcast_over_every_row(promp, n):
    """A (D,) mask, "these signals observed at every row", was refused for n > 1."""
    z = np.linspace(0.1, 0.6, n)
    phi, y = promp.basis(z), promp.mean(z) + 0.05
    mask = np.array([True, False, True, False])
    future = promp.basis(np.array([0.7, 0.9]))
    one = StructuredPosterior(promp).condition(phi, y, mask)
    tiled = StructuredPosterior(promp).condition(phi, y, np.tile(mask, (n, 1)))
    np.testing.assert_allclose(one.mean_weights, tiled.mean_weights, rtol=0, atol=1e-12)
    for a, b in zip(one.predict(future), tiled.predict(future)):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-12)
    # add() takes it too (its Gram sums in another order: rounding only), and the result
    # agrees with the dense conditioning of the same mask.
    added = StructuredPosterior(promp).add(phi[:1], y[:1], mask).add(phi[1:], y[1:], mask)
    np.testing.assert_allclose(added.mean_weights, one.mean_weights, rtol=1e-10, atol=1e-12)
    dense = promp.condition(z, y, mask=mask)
    np.testing.assert_allclose(one.predict(future, include_noise=False)[0], dense.mean(np.array([0.7, 0.9])),
                               rtol=1e-9, atol=1e-9)


def test_a_full_signal_mask_equals_no_mask(promp):
    z = np.linspace(0.1, 0.6, 5)
    phi, y = promp.basis(z), promp.mean(z) - 0.02
    np.testing.assert_allclose(StructuredPosterior(promp).condition(phi, y, np.ones(N_SIGNALS, bool)).mean_weights,
                               StructuredPosterior(promp).condition(phi, y).mean_weights, rtol=0, atol=1e-12)


@pytest.mark.parametrize("shape", [(N_SIGNALS + 1,), (N_SIGNALS - 1,), (3, N_SIGNALS + 1), (2, N_SIGNALS), (3,)])
def test_a_mask_of_another_shape_is_still_refused_and_changes_nothing(promp, shape):
    z = np.array([0.2, 0.4, 0.6])
    phi, y = promp.basis(z), promp.mean(z)
    post = StructuredPosterior(promp).condition(phi[:1], y[:1])
    before = post.mean_weights.copy()
    expected = re.escape(f"mask (3, {N_SIGNALS}) or ({N_SIGNALS},) expected, got ") + ".*" + re.escape(f"{shape}")
    with pytest.raises(ValueError, match=expected):
        post.add(phi, y, np.ones(shape, dtype=bool))
    assert post.n_observations == 1
    np.testing.assert_array_equal(post.mean_weights, before)
