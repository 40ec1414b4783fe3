""".npz motion and reference files whose .npy headers declare far more data than the file
holds: refused with the module's error naming the file, before numpy allocates the
declared array (it asked for hundreds of terabytes: MemoryError, or swapping)."""

from __future__ import annotations

import io
import zipfile

import numpy as np
import pytest

from retarget.human import HumanMotion, MotionFormatError
from retarget.references import FLAT_SIZE, InvalidReferences, ReferenceTrajectory

#: (10**12, 20, 3) float64: 480 TB, more than any machine's address space.
HUGE = (10**12, 20, 3)


def _npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def _lying_npy(shape: tuple[int, ...]) -> bytes:
    """A .npy header declaring float64 ``shape``, followed by only 64 bytes of data."""
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, {"descr": "<f8", "fortran_order": False, "shape": shape})
    return buffer.getvalue() + b"\0" * 64


def _rewrite(source, target, replace: dict[str, bytes]) -> None:
    """Copy the .npz ``source`` to ``target`` with the members in ``replace`` (name without
    .npy -> raw member bytes) replaced."""
    with np.load(source, allow_pickle=False) as data, \
            zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as out:
        for key in data.files:
            out.writestr(key + ".npy", replace.get(key) or _npy(data[key]))


def _motion() -> HumanMotion:
    T = 4
    orientations = np.zeros((T, 2, 4))
    orientations[..., 0] = 1.0
    return HumanMotion(np.arange(T) * 0.01, ("pelvis", "head"), np.zeros((T, 2, 3)), orientations,
                       rate_hz=100.0, meta={"label": "squat"})


@pytest.mark.parametrize("member", ["positions", "times", "format"])
def test_motion_member_declaring_a_huge_shape_is_a_format_error(tmp_path, member):
    good = tmp_path / "good.npz"
    _motion().save_npz(good)
    assert len(HumanMotion.load_npz(good)) == 4                      # the untouched file loads
    bad = tmp_path / "hostile_motion.npz"
    _rewrite(good, bad, {member: _lying_npy(HUGE)})
    with pytest.raises(MotionFormatError) as err:                    # not MemoryError
        HumanMotion.load_npz(bad)
    message = str(err.value)
    assert message.startswith(f"{bad}: ") and f"'{member}.npy'" in message and "declares shape" in message
    assert "\n" not in message


def test_motion_member_whose_zip_entry_claims_an_impossible_size_is_a_format_error(tmp_path):
    """The zip directory's own sizes are forgeable too: a member claiming ~4 GB uncompressed
    from a few hundred compressed bytes (beyond deflate's ~1032:1) is refused before its
    header is believed."""
    path = tmp_path / "zip_bomb_claim.npz"
    _motion().save_npz(path)
    data = bytearray(path.read_bytes())
    # The member's central directory entry: its name starts 46 bytes in.
    entry = data.find(b"positions.npy", data.find(b"PK\x01\x02")) - 46
    assert data[entry:entry + 4] == b"PK\x01\x02"
    data[entry + 24:entry + 28] = (0xFFFFFFF0).to_bytes(4, "little")  # its uncompressed size
    path.write_bytes(bytes(data))
    with pytest.raises(MotionFormatError, match=r"zip_bomb_claim\.npz: .*'positions\.npy' declares 4294967280 bytes"):
        HumanMotion.load_npz(path)


def test_reference_member_declaring_a_huge_shape_is_invalid_references(tmp_path):
    good = tmp_path / "good_refs.npz"
    ReferenceTrajectory(np.arange(3) * 0.01, np.zeros((3, FLAT_SIZE)), label="wave").save_npz(good)
    assert ReferenceTrajectory.load_npz(good).label == "wave"
    bad = tmp_path / "hostile_refs.npz"
    _rewrite(good, bad, {"values": _lying_npy((10**12, FLAT_SIZE))})
    with pytest.raises(InvalidReferences) as err:                    # not MemoryError
        ReferenceTrajectory.load_npz(bad)
    message = str(err.value)
    assert message.startswith(f"{bad}: ") and "'values.npy' declares shape" in message and "\n" not in message


def test_joint_recording_member_declaring_a_huge_shape_is_a_recording_error(tmp_path):
    """teleop calibrate-sim's recordings (teleop.sim.recording_io) go through the same check."""
    from teleop.sim.recording_io import RecordingError, load_recording

    good = tmp_path / "joints.npz"
    np.savez(good, time=np.arange(4) * 0.01, joint_names=np.array(["r_elbow"]),
             commanded=np.zeros((4, 1)), measured=np.zeros((4, 1)))
    assert len(load_recording(good).time) == 4
    bad = tmp_path / "hostile_joints.npz"
    _rewrite(good, bad, {"measured": _lying_npy(HUGE)})
    with pytest.raises(RecordingError) as err:                       # not MemoryError
        load_recording(bad)
    assert str(err.value).startswith(f"{bad}: ") and "'measured.npy'" in str(err.value)
