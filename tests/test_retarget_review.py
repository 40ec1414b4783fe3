"""Readers on unusual but valid files and on damaged ones: a motion, or one clear error
naming the file (found in review; each test failed before its fix)."""

import json
from pathlib import Path

import numpy as np
import pytest

from retarget import skeleton
from retarget.human import MotionFormatError
from retarget.readers import read_motion, sniff_format, write_mvnx, write_vr_csv
from tests.conftest import shared_data

BOM = b"\xef\xbb\xbf"


def data(*parts) -> Path:
    return shared_data(*parts)


def standard(frames: int = 5):
    return skeleton.standard_body_motion(np.arange(frames) * 0.01)


def test_a_vr_tracker_csv_reads_with_the_rate_given_for_xsens_csv_files(tmp_path):
    """teleop passes its --rate-hz with every .csv (for Xsens CSV files); a VR tracker CSV
    stores its times and must read, not fail with a TypeError."""
    path = tmp_path / "vr.csv"
    write_vr_csv(standard(), path)
    motion = read_motion(path, rate_hz=100.0)
    assert motion.segment_names == ("head", "left_hand", "right_hand", "pelvis", "left_foot", "right_foot")
    np.testing.assert_allclose(motion.times, np.arange(5) * 0.01)


def test_a_vr_tracker_csv_retargets_from_the_cli(tmp_path, capsys):
    from teleop.cli import main

    path = tmp_path / "vr.csv"
    write_vr_csv(standard(), path)
    assert main(["retarget", str(path), "--out", str(tmp_path / "out"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["frames"] == 5


def test_a_motion_npz_without_frames_says_so(tmp_path):
    path = tmp_path / "empty.npz"
    standard().slice(0, 0).save_npz(path)
    with pytest.raises(MotionFormatError, match="no frames") as e:
        read_motion(path)
    assert str(e.value).startswith(f"{path}: ")


def test_a_damaged_motion_npz_names_the_file(tmp_path):
    """A zip whose directory is intact but whose compressed data is damaged fails only when
    a member is decompressed (zlib.error, not a ValueError: a traceback in the CLI)."""
    path = tmp_path / "m.npz"
    standard(50).save_npz(path)
    raw = bytearray(path.read_bytes())
    for k in range(len(raw) // 3, len(raw) // 3 + 200):
        raw[k] ^= 0x55
    path.write_bytes(bytes(raw))
    with pytest.raises(MotionFormatError, match="damaged") as e:
        read_motion(path)
    assert str(e.value).startswith(f"{path}: ")


@pytest.mark.parametrize("sample, shown", [(5, "5"), (None, "null"), ("head", '"head"')])
def test_a_vr_json_sample_that_is_not_an_object_names_file_and_sample(tmp_path, sample, shown):
    good = {"t": 0.0, **{s: {"p": [0.0, 0.0, 1.0], "q": [1.0, 0.0, 0.0, 0.0]}
                         for s in ("head", "left_hand", "right_hand")}}
    path = tmp_path / "v.json"
    path.write_text(json.dumps({"format": "vr-trackers-v1", "samples": [sample, good] if sample != "head"
                                else [good, sample]}))
    k = 1 if sample == "head" else 0
    with pytest.raises(MotionFormatError, match=f"sample {k}: expected an object") as e:
        read_motion(path)
    assert str(e.value).startswith(f"{path}: ") and str(e.value).endswith(shown)


def test_an_mvnx_frame_rate_that_is_not_a_number_names_file_and_line(tmp_path):
    path = tmp_path / "take.mvnx"
    write_mvnx(standard(), path)
    text = path.read_text()
    line = text[:text.index("frameRate=")].count("\n") + 1
    path.write_text(text.replace('frameRate="100"', 'frameRate="fast"'))
    with pytest.raises(MotionFormatError, match="frameRate 'fast' is not a number") as e:
        read_motion(path)
    assert str(e.value).startswith(f"{path}:{line}: ")


@pytest.mark.parametrize("src, name, frames", [(("cmu_bvh", "115_06.bvh"), "take.bvh", 357),
                                               (("cmu_bvh", "115_06.bvh"), "take", 357),
                                               (("xsens_putaside_box", "p1.csv"), "p1.csv", 272)])
def test_a_utf8_byte_order_mark_is_ignored(tmp_path, src, name, frames):
    """Windows editors and Excel start UTF-8 text with a byte-order mark; the file is the
    same motion, not "not a BVH file" or "not a number"."""
    path = tmp_path / name
    path.write_bytes(BOM + data(*src).read_bytes())
    assert len(read_motion(path)) == frames


def test_a_vr_csv_with_a_byte_order_mark_reads(tmp_path):
    path = tmp_path / "vr.csv"
    write_vr_csv(standard(), path)
    path.write_bytes(BOM + path.read_bytes())
    assert len(read_motion(path)) == 5


@pytest.mark.parametrize("content", [b"", b"\n\n  \n", BOM])
@pytest.mark.parametrize("name", ["take.csv", "take"])
def test_an_empty_file_is_called_empty(tmp_path, content, name):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(MotionFormatError, match="empty file") as e:
        sniff_format(path)
    assert str(e.value).startswith(f"{path}: ")


@pytest.mark.parametrize("unit", ["0", "-0.45"])
def test_an_asf_length_unit_that_is_not_positive_names_file_and_line(tmp_path, unit):
    """metres = ASF units * 0.0254 / length: 0 divided by zero (a traceback), a negative
    length mirrored the body silently."""
    lines = data("hdm05", "skeletons", "HDM_bd.asf").read_text(encoding="latin-1").splitlines()
    no = next(k for k, ln in enumerate(lines) if ln.split()[:1] == ["length"])
    lines[no] = f"  length {unit}"
    asf = tmp_path / "HDM_bd.asf"
    asf.write_text("\n".join(lines) + "\n", encoding="latin-1")
    amc = data("hdm05", "squat1Reps", "HDM_bd_squat1Reps_001_120.amc")
    with pytest.raises(MotionFormatError, match="length unit must be positive") as e:
        read_motion(amc, skeleton=asf)
    assert str(e.value).startswith(f"{asf}:{no + 1}: ")


def test_the_rate_reaches_an_xsens_csv_saved_under_another_suffix(tmp_path):
    """teleop's --rate-hz goes to Xsens CSV files by content, not only to *.csv names."""
    import shutil

    from teleop.takes import read_motion_file

    path = tmp_path / "p1.txt"
    shutil.copy(data("xsens_putaside_box", "p1.csv"), path)
    motion = read_motion_file(path, rate_hz=50.0)
    np.testing.assert_allclose(np.diff(motion.times[:3]), [0.02, 0.02])
