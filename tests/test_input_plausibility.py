"""Inputs that are well-formed but implausible, and motion files under the wrong name.

1. The live Xsens MVN source: a datagram with finite but absurd positions (a pelvis at
   1e30 m, segments 500 m apart, a centre of mass 1e30 m away) is refused by the decoder
   or the live source with a counted, stated reason -- not passed on for the operator
   station's reach check to withhold. Poses far from the origin but within the bound (MVN's
   position drifts over a session) still pass. Datagrams are made with the product's own
   encoder (:class:`MvnCodec`), then altered.
2. Motion files whose extension does not match their content (an AMC take named .bvh, a
   BVH named .amc, an MVNX or binary data named .bvh): the error names the file and what
   its content looks like; correctly named files read as before.

Real recordings (../shared/data) are only read, into tmp_path copies; those tests skip
when the data is absent.
"""

from __future__ import annotations

import shutil
import struct

import numpy as np
import pytest

from retarget.human import HumanMotion, MotionFormatError
from retarget.readers import looks_like, read_motion, write_mvnx
from teleop.inputs.mvn_protocol import (
    HEADER,
    MAGIC,
    MAX_POSITION_M,
    MAX_SEGMENT_SPAN_M,
    MvnCodec,
    MvnFormatError,
    Reassembler,
    implausible_pose,
    parse_header,
)
from teleop.inputs.xsens_live import XsensLiveSource
from tests.conftest import REPO_ROOT, shared_data
from tests.test_fuzz_inputs import _amc_text, _asf_text, _bvh_text

SYNTHETIC = REPO_ROOT / "datasets" / "synthetic" / "put_aside" / "put_aside_0.npz"
MOTION = HumanMotion.load_npz(SYNTHETIC)
SENDER = ("127.0.0.1", 40001)


def pose(k: int = 0, shift=(0.0, 0.0, 0.0), moved: dict | None = None) -> dict:
    """Frame ``k`` of the synthetic demonstration (all 23 segments) moved by ``shift`` [m],
    with the segments of ``moved`` {segment: position [m]} put elsewhere."""
    out = {name: (MOTION.positions[k, s] + np.asarray(shift), MOTION.orientations[k, s])
           for s, name in enumerate(MOTION.segment_names)}
    for name, position in (moved or {}).items():
        out[name] = (np.asarray(position, dtype=float), out[name][1])
    return out


def decode(datagrams: list[bytes], codec: MvnCodec | None = None):
    """Parse, reassemble and decode one sample's datagrams."""
    codec = codec or MvnCodec()
    reassembler, whole = Reassembler(), None
    for gram in datagrams:
        whole = reassembler.add(parse_header(gram), gram[HEADER.size:])
    assert whole is not None
    return codec.decode(*whole)


def live(**options) -> XsensLiveSource:
    return XsensLiveSource(("127.0.0.1", 0), notify=lambda line: None, clock=lambda: 0.0, **options)


def feed(source: XsensLiveSource, datagrams: list[bytes], k: int, sender=SENDER) -> None:
    for gram in datagrams:
        source.handle_datagram(gram, 100.0 + 0.04 * k, sender)


def frames(source: XsensLiveSource) -> list:
    """The frames produced so far (without reading the socket)."""
    out = list(source._pending)
    source._pending.clear()
    return out


# ================================================================ 1. MVN: the decoder
def test_a_real_looking_pose_decodes_whole():
    message = decode(MvnCodec().encode_pose(1, 40, pose()))
    assert len(message.data) == 23 and message.ignored_items == 0 and message.implausible_items == 0
    assert message.implausible is None and implausible_pose(message.data) is None


def test_a_pelvis_at_1e30_m_is_skipped_and_counted_with_its_reason():
    message = decode(MvnCodec().encode_pose(1, 40, pose(moved={"pelvis": [1e30, 0.0, 0.0]})))
    assert "pelvis" not in message.data and len(message.data) == 22
    assert message.ignored_items == 1 and message.implausible_items == 1
    assert message.implausible == (f"segment pelvis is 1e+30 m from MVN's origin, more than {MAX_POSITION_M:g} m")


@pytest.mark.parametrize("distance", [1.5 * MAX_POSITION_M, 1e6, 3e36])
def test_positions_beyond_the_bound_are_skipped_in_any_direction(distance):
    direction = np.array([-1.0, 2.0, -2.0]) / 3.0
    message = decode(MvnCodec().encode_pose(1, 40, pose(moved={"left_hand": distance * direction})))
    assert "left_hand" not in message.data and message.implausible_items == 1


def test_a_pose_far_from_the_origin_but_within_the_bound_passes_the_decoder():
    """MVN's global position drifts over a long session: 50 m, 5 km from the origin pass."""
    for shift in ([50.0, -30.0, 0.0], [5000.0, 0.0, 0.0], [0.0, 0.0, 0.99 * MAX_POSITION_M - 2.0]):
        message = decode(MvnCodec().encode_pose(1, 40, pose(shift=shift)))
        assert len(message.data) == 23 and message.implausible_items == 0, shift
        assert implausible_pose(message.data) is None


def test_segments_500_m_apart_are_named_by_the_span_check():
    """The decoder passes segments within the bound (a partial pose may be any stray
    segments); the span check names the two segments too far apart."""
    message = decode(MvnCodec().encode_pose(1, 40, pose(moved={"right_hand": [500.0, 0.0, 1.0]})))
    assert len(message.data) == 23
    problem = implausible_pose(message.data)
    assert problem is not None and "right_hand" in problem and "apart" in problem
    assert f"({MAX_SEGMENT_SPAN_M:g} m)" in problem


def test_the_span_bound_is_above_a_tall_person_stretched_and_below_two_people():
    """A body stretched to 3.3 m (tallest on record, arms up) passes; 4.5 m does not."""
    standing = pose()
    pelvis = standing["pelvis"][0]
    stretched = dict(standing, right_hand=(pelvis + [0, 0, 2.0], standing["right_hand"][1]),
                     left_toe=(pelvis - [0, 0, 1.3], standing["left_toe"][1]))
    assert implausible_pose(stretched) is None
    apart = dict(standing, right_hand=(pelvis + [0, 0, 3.2], standing["right_hand"][1]),
                 left_toe=(pelvis - [0, 0, 1.3], standing["left_toe"][1]))
    assert "apart" in (implausible_pose(apart) or "")


def test_type_03_points_and_type_01_positions_beyond_the_bound_or_non_finite_are_skipped():
    codec = MvnCodec()
    points = decode(codec.encode_points(1, 40, {256 + 1: np.array([0.1, 1.0, 0.2]),
                                                256 * 2 + 3: np.array([0.0, 1e30, 0.0])}))
    assert list(points.data) == [257] and points.ignored_items == 1 and points.implausible_items == 1
    assert "point 515" in points.implausible
    nan_point = HEADER.pack(MAGIC + b"03", 1, 0x80, 1, 40, 0, 23, 0, 0, 16) + struct.pack(">i3f", 257, np.nan, 0, 0)
    assert decode([nan_point]).data == {} and decode([nan_point]).ignored_items == 1
    euler = decode(codec.encode_pose_euler(1, 40, {1: (np.array([0.0, 1.0, 0.0]), np.zeros(3)),
                                                   2: (np.array([2e4, 1.0, 0.0]), np.zeros(3))}))
    assert list(euler.data) == [1] and euler.implausible_items == 1 and "segment ID 2" in euler.implausible


def test_a_centre_of_mass_beyond_the_bound_or_non_finite_is_refused():
    codec = MvnCodec()
    np.testing.assert_allclose(decode(codec.encode_center_of_mass(1, 40, np.array([40.0, 3.0, 0.9]))).data,
                               [40.0, 3.0, 0.9], atol=1e-5)
    with pytest.raises(MvnFormatError, match="centre of mass is 1e\\+30 m from MVN's origin") as far:
        decode(codec.encode_center_of_mass(1, 40, np.array([1e30, 0.0, 0.0])))
    assert far.value.reason == "implausible_com"
    nan_com = HEADER.pack(MAGIC + b"24", 1, 0x80, 1, 40, 0, 23, 0, 0, 12) + struct.pack(">3f", 0.0, np.nan, 1.0)
    with pytest.raises(MvnFormatError, match="non-finite centre of mass") as bad:
        decode([nan_com])
    assert bad.value.reason == "bad_content"


# ============================================================= 1. MVN: the live source
def test_the_live_source_drops_a_pose_with_a_segment_at_1e30_m_whole_and_says_why():
    source = live()
    try:
        codec = MvnCodec()
        feed(source, codec.encode_pose(1, 40, pose()), 1)
        assert len(frames(source)) == 1
        for k in range(2, 6):
            feed(source, codec.encode_pose(k, 40 * k, pose(k, moved={"pelvis": [0.0, 1e30, 0.0]})), k)
        assert frames(source) == []
        assert source.stats["dropped_implausible_pose"] == 4 and source.stats["ignored_items"] == 4
        assert source.stats["samples"] == 1
        assert source.implausible is not None and "segment pelvis is 1e+30 m" in source.implausible
        hint = source.pose_stream_hint()
        assert hint.startswith("MVN's poses arrive but are no person's: segment pelvis is 1e+30 m"), hint
        assert "implausible_pose 4" in hint and "position unit" in hint
        # A good pose afterwards passes as before.
        feed(source, codec.encode_pose(6, 240, pose(6)), 6)
        assert len(frames(source)) == 1 and source.stats["samples"] == 2
    finally:
        source.close()


def test_the_live_source_drops_a_pose_whose_segments_are_500_m_apart():
    source = live()
    try:
        codec = MvnCodec()
        feed(source, codec.encode_pose(1, 40, pose(1)), 1)
        feed(source, codec.encode_pose(2, 80, pose(2, moved={"left_hand": [500.0, 0.0, 1.0]})), 2)
        feed(source, codec.encode_pose(3, 120, pose(3, moved={"head": pose(3)["pelvis"][0] + [0.0, 4.5, 0.0]})), 3)
        assert len(frames(source)) == 1
        assert source.stats["dropped_implausible_pose"] == 2
        assert "apart" in source.implausible and "head" in source.implausible
        assert "no person's" in source.pose_stream_hint()
    finally:
        source.close()


def test_the_live_source_passes_poses_that_drifted_far_from_the_origin():
    """A pelvis 50 m (and 5 km) from MVN's origin after drift: frames, not drops."""
    source = live()
    try:
        codec = MvnCodec()
        for k, shift in enumerate([(0, 0, 0), (50.0, 0, 0), (50.0, 30.0, 0), (5000.0, -2000.0, 0)], start=1):
            feed(source, codec.encode_pose(k, 40 * k, pose(k, shift=shift)), k)
        got = frames(source)
        assert len(got) == 4 and not source.stats["dropped_implausible_pose"]
        np.testing.assert_allclose(got[1][1]["pelvis"][0], MOTION.positions[2, 0] + [50.0, 0, 0], atol=1e-3)
        assert source.position_unit_m == 0.01
    finally:
        source.close()


def test_a_stream_in_metres_is_never_refused_before_its_unit_is_decided():
    """Before the unit is decided, positions are read as centimetres: a stream in metres
    reads 100 times smaller, so the bounds never refuse it; its first human-sized complete
    pose then decides metres, and the drifted poses after it pass."""
    source = live()
    try:
        codec = MvnCodec(position_unit_m=1.0)
        for k, shift in enumerate([(0, 0, 0), (50.0, 0, 0), (3000.0, 0, 0)], start=1):
            feed(source, codec.encode_pose(k, 40 * k, pose(k, shift=shift)), k)
        got = frames(source)
        assert source.position_unit_m == 1.0 and len(got) == 3, dict(source.stats)
        np.testing.assert_allclose(got[2][1]["pelvis"][0], MOTION.positions[3, 0] + [3000.0, 0, 0], atol=1e-2)
    finally:
        source.close()


def test_a_wrong_unit_given_is_refused_with_the_unit_in_the_hint():
    """Centimetres on the wire read as metres (unit given 1.0): a body 100 times too big."""
    source = live(position_unit_m=1.0)
    try:
        codec = MvnCodec()                                  # centimetres
        for k in range(1, 4):
            feed(source, codec.encode_pose(k, 40 * k, pose(k)), k)
        assert frames(source) == [] and source.stats["dropped_implausible_pose"] == 3
        hint = source.pose_stream_hint()
        assert "apart" in hint and "1 m per unit, given" in hint, hint
    finally:
        source.close()


def test_an_implausible_complete_pose_does_not_lock_the_sender():
    """A stray sender's garbage pose (all 23 segments, 500 m apart) must not become the
    stream followed, so the real stream that follows is not dropped as another sender."""
    source = live()
    try:
        codec, stray = MvnCodec(), ("127.0.0.1", 40002)
        feed(source, codec.encode_pose(1, 40, pose(1, moved={"right_toe": [0.0, 0.0, -500.0]})), 1, sender=stray)
        assert source.sender is None and source.stats["dropped_implausible_pose"] == 1
        feed(source, codec.encode_pose(2, 80, pose(2)), 2)
        assert source.sender == SENDER and len(frames(source)) == 1
        assert not source.stats["dropped_other_sender"]
    finally:
        source.close()


def test_the_live_source_keeps_no_implausible_centre_of_mass():
    source = live()
    try:
        codec = MvnCodec()
        feed(source, codec.encode_pose(1, 40, pose(1)) + codec.encode_center_of_mass(1, 40, np.array([0.1, 0, 1])), 1)
        feed(source, codec.encode_pose(2, 80, pose(2)) + codec.encode_center_of_mass(2, 80, np.array([0, 1e30, 0])),
             2)
        nan_com = HEADER.pack(MAGIC + b"24", 3, 0x80, 1, 120, 0, 23, 0, 0, 12) + struct.pack(">3f", np.nan, 0, 1)
        feed(source, codec.encode_pose(3, 120, pose(3)) + [nan_com], 3)
        np.testing.assert_allclose(source.com, [0.1, 0, 1], atol=1e-6)
        assert source.stats["dropped_implausible_com"] == 1 and source.stats["dropped_bad_content"] == 1
        assert "centre of mass" in source.implausible
        assert len(frames(source)) == 3
    finally:
        source.close()


def test_far_points_are_counted_by_the_live_source():
    source = live()
    try:
        codec = MvnCodec()
        feed(source, codec.encode_points(1, 40, {257: np.zeros(3), 258: np.array([1e9, 0, 0])}), 1)
        assert source.stats["ignored_items"] == 1 and source.stats["messages_03"] == 1
    finally:
        source.close()


# ===================================================== 2. motion files under the wrong name
def _write(path, text: str):
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def mvnx_text(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("mvnx") / "take.mvnx"
    write_mvnx(MOTION.slice(0, 5), path)
    return path.read_text(encoding="utf-8")


def _refusal(path) -> str:
    with pytest.raises(MotionFormatError) as refused:
        read_motion(path)
    return str(refused.value)


def test_correctly_named_files_read_as_before(tmp_path, mvnx_text):
    assert read_motion(_write(tmp_path / "walk.bvh", _bvh_text())).positions.shape[1] == 22
    _write(tmp_path / "take.asf", _asf_text())
    assert read_motion(_write(tmp_path / "take.amc", _amc_text())).positions.shape == (3, 22, 3)
    assert len(read_motion(_write(tmp_path / "m.mvnx", mvnx_text))) > 0


def test_an_amc_take_named_bvh_is_said_to_be_an_amc_take(tmp_path):
    _write(tmp_path / "walk.asf", _asf_text())
    message = _refusal(_write(tmp_path / "walk.bvh", _amc_text()))
    assert message.startswith(f"{tmp_path / 'walk.bvh'}:1: expected 'HIERARCHY': not a BVH file; "), message
    assert "walk.bvh looks like an ASF/AMC motion file (AMC frames" in message
    assert "not a BVH file as its name says; rename it walk.amc and put its ASF skeleton beside it (walk.asf)" \
        in message


def test_a_bvh_named_amc_is_said_to_be_a_bvh(tmp_path):
    message = _refusal(_write(tmp_path / "take.amc", _bvh_text()))
    assert str(tmp_path / "take.amc") in message
    assert "take.amc looks like a BVH file (it starts with HIERARCHY), not an AMC take as its name says; " \
           "rename it take.bvh" in message
    # With an ASF beside it, the AMC reader gets further; the hint is the same.
    _write(tmp_path / "take.asf", _asf_text())
    assert "rename it take.bvh" in _refusal(tmp_path / "take.amc")


def test_an_mvnx_named_bvh_is_said_to_be_mvnx(tmp_path, mvnx_text):
    message = _refusal(_write(tmp_path / "suit.bvh", mvnx_text))
    assert "suit.bvh looks like an Xsens MVNX file (XML), not a BVH file as its name says; rename it suit.mvnx" \
        in message


def test_binary_data_named_bvh_is_said_to_be_binary(tmp_path):
    rng = np.random.default_rng(7)
    path = tmp_path / "noise.bvh"
    path.write_bytes(b"\x00" + rng.integers(0, 256, 3000, dtype=np.uint8).tobytes())
    message = _refusal(path)
    assert message.startswith(f"{path}: binary data where a text file was expected; "), message
    assert "noise.bvh looks like binary data (not text), not a BVH file" in message
    assert "no motion file teleop reads" in message


def test_a_c3d_and_an_npz_named_bvh_are_named(tmp_path):
    head = bytearray(1024)
    head[0], head[1], head[512:516] = 2, 0x50, bytes([1, 0x50, 1, 84])
    (tmp_path / "capture.bvh").write_bytes(bytes(head))
    assert "capture.bvh looks like a C3D motion capture file" in _refusal(tmp_path / "capture.bvh")
    MOTION.save_npz(tmp_path / "take.npz")
    shutil.copy(tmp_path / "take.npz", tmp_path / "saved.bvh")
    assert "saved.bvh looks like a NumPy .npz archive, not a BVH file as its name says; rename it saved.npz" \
        in _refusal(tmp_path / "saved.bvh")


def test_other_mislabels_are_named(tmp_path, mvnx_text):
    assert "rename it b.bvh" in _refusal(_write(tmp_path / "b.mvnx", _bvh_text()))
    assert "rename it b2.bvh" in _refusal(_write(tmp_path / "b2.json", _bvh_text()))
    assert "an ASF skeleton" in _refusal(_write(tmp_path / "skeleton.bvh", _asf_text()))
    assert "rename it m.mvnx" in _refusal(_write(tmp_path / "m.npz", mvnx_text))


def test_a_damaged_file_of_the_right_format_gets_no_hint(tmp_path):
    """A BVH that is a BVH but broken: the reader's message alone, no "looks like"."""
    text = _bvh_text().replace("MOTION", "MOTON")
    message = _refusal(_write(tmp_path / "broken.bvh", text))
    assert "looks like" not in message and "broken.bvh" in message


def test_looks_like_reads_only_the_head():
    assert looks_like(b"HIERARCHY\nROOT Hips") == ("bvh", "a BVH file (it starts with HIERARCHY)")
    assert looks_like(b":FULLY-SPECIFIED\n:DEGREES\n1\nroot 0 0 0 0 0 0\n")[0] == "amc"
    assert looks_like(b"1\nroot 1 2 3 4 5 6\nlowerback 1 2 3\n")[0] == "amc"
    assert looks_like(b"<?xml version='1.0'?>\n<mvnx version='4'>")[0] == "mvnx"
    assert looks_like(b"<?xml version='1.0'?>\n<svg/>")[0] == "xml"
    assert looks_like(b"\x89MCAP0\r\n")[0] == "mcap"
    assert looks_like(b"just some words") is None


# ------------------------------------------------ real recordings (skip without them)
def test_a_real_hdm05_amc_named_bvh(tmp_path):
    folder = shared_data("hdm05", "squat1Reps")
    take = sorted(folder.glob("*.amc"))[0]
    shutil.copy(take, tmp_path / "squat.bvh")
    message = _refusal(tmp_path / "squat.bvh")
    assert "squat.bvh looks like an ASF/AMC motion file" in message and "rename it squat.amc" in message


def test_a_real_cmu_bvh_named_amc_and_read_under_its_own_name(tmp_path):
    source = shared_data("cmu_bvh", needs=("115_06.bvh",)) / "115_06.bvh"
    shutil.copy(source, tmp_path / "115_06.amc")
    assert "115_06.amc looks like a BVH file" in _refusal(tmp_path / "115_06.amc")
    shutil.copy(source, tmp_path / "115_06.bvh")
    motion = read_motion(tmp_path / "115_06.bvh")
    np.testing.assert_array_equal(motion.positions, read_motion(source).positions)
