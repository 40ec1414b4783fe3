"""Readers refuse non-finite and degenerate numbers with an error naming file and place."""

import json

import numpy as np
import pytest

from retarget import skeleton
from retarget.human import MotionFormatError
from retarget.readers import read_motion, write_mvnx
from tests.conftest import shared_data

TRACKERS = ("head", "left_hand", "right_hand")


def vr_json(path, bad_sample: int, tracker: str, field: str, value: float):
    """Three still samples; one number of one sample replaced (json.dump writes NaN/Infinity)."""
    samples = []
    for k in range(3):
        sample = {"t": k * 0.01, "head": {"p": [0.0, 0.0, 1.6], "q": [1.0, 0.0, 0.0, 0.0]},
                  "left_hand": {"p": [0.0, 0.2, 0.8], "q": [1.0, 0.0, 0.0, 0.0]},
                  "right_hand": {"p": [0.0, -0.2, 0.8], "q": [1.0, 0.0, 0.0, 0.0]}}
        if k == bad_sample:
            if field == "t":
                sample["t"] = value
            else:
                sample[tracker][field][0] = value
        samples.append(sample)
    with open(path, "w") as f:
        json.dump({"format": "vr-trackers-v1", "samples": samples}, f)
    return path


@pytest.mark.parametrize("tracker, field, value, expected", [
    ("head", "t", float("nan"), "sample 2: non-finite t"),
    ("right_hand", "p", float("nan"), "sample 1: non-finite right_hand.p"),
    ("left_hand", "q", float("nan"), "sample 1: non-finite left_hand.q"),
    ("head", "p", float("inf"), "sample 1: non-finite head.p"),
])
def test_vr_json_rejects_non_finite_numbers(tmp_path, tracker, field, value, expected):
    path = vr_json(tmp_path / "v.json", 2 if field == "t" else 1, tracker, field, value)
    assert ("NaN" in path.read_text()) or ("Infinity" in path.read_text())
    with pytest.raises(MotionFormatError, match=expected) as e:
        read_motion(path)
    assert str(e.value).startswith(f"{path}: ")


def test_vr_json_finite_file_still_reads(tmp_path):
    motion = read_motion(vr_json(tmp_path / "v.json", 1, "head", "p", 0.1))
    assert motion.segment_names == TRACKERS and np.all(np.isfinite(motion.positions))


def mvnx_with_quaternion(tmp_path, values):
    """A 3-frame MVNX take whose last frame's first segment has the given orientation."""
    path = tmp_path / "take.mvnx"
    write_mvnx(skeleton.standard_body_motion(np.arange(3) * 0.01), path)
    text = path.read_text()
    i = text.rfind("<orientation>") + len("<orientation>")
    j = text.find("</orientation>", i)
    numbers = text[i:j].split()
    numbers[:4] = values
    path.write_text(text[:i] + " ".join(numbers) + text[j:])
    line = text[:i].count("\n") + 1
    return path, line


def test_mvnx_rejects_a_zero_quaternion_naming_the_frame(tmp_path):
    path, line = mvnx_with_quaternion(tmp_path, ["0", "0", "0", "0"])
    with pytest.raises(MotionFormatError,
                       match="zero <orientation> quaternion of segment Pelvis in motion frame 2") as e:
        read_motion(path)
    assert str(e.value).startswith(f"{path}:{line}: ")


def test_mvnx_rejects_non_finite_quaternions(tmp_path):
    path, line = mvnx_with_quaternion(tmp_path, ["nan", "0", "0", "0"])
    with pytest.raises(MotionFormatError, match="non-finite") as e:
        read_motion(path)
    assert str(e.value).startswith(f"{path}:{line}: ")


@pytest.mark.parametrize("field, literal, expected", [
    ("t", "1" + "0" * 400, "sample 1: missing or malformed"),       # float() overflows
    ("p", "1" + "0" * 400, "sample 1: missing or malformed"),
    ("t", "1" + "0" * 5000, "malformed JSON"),                       # beyond int digit limit
    ("t", "[" * 100000 + "]" * 100000, "malformed JSON .*nested too deeply"),
])
def test_vr_json_huge_integers_and_deep_nesting_are_refused(tmp_path, field, literal, expected):
    # Before: OverflowError (int too large to convert to float), plain ValueError (integer
    # string conversion limit) and RecursionError escaped.
    path = vr_json(tmp_path / "v.json", 1, "head", field, 12345.5)
    path.write_text(path.read_text().replace("12345.5", literal))
    with pytest.raises(MotionFormatError, match=expected) as e:
        read_motion(path)
    assert str(e.value).startswith(f"{path}: ") and "\n" not in str(e.value)


@pytest.mark.parametrize("kind", ["amc", "bvh"])
def test_a_finite_but_huge_value_that_overflows_in_kinematics_is_refused(tmp_path, kind):
    # Before: 1e308 passed the per-number finiteness check, overflowed to inf / NaN in unit
    # scaling and forward kinematics, and read_motion returned non-finite positions.
    if kind == "amc":
        lines = shared_data("hdm05", "squat1Reps", "HDM_bd_squat1Reps_001_120.amc").read_text(
            encoding="latin-1").splitlines()
        k = next(i for i, line in enumerate(lines) if line.startswith("root "))
        tok = lines[k].split()
        tok[2] = "1e308"
        lines[k] = " ".join(tok)
        opts = {"skeleton": shared_data("hdm05", "skeletons", "HDM_bd.asf")}
    else:
        lines = shared_data("cmu_bvh", "115_10.bvh").read_text().splitlines()
        k = next(i for i, line in enumerate(lines) if line.strip().lower().startswith("frame time")) + 2
        tok = lines[k].split()
        tok[2] = "1e308"
        lines[k] = " ".join(tok)
        opts = {}
    path = tmp_path / f"huge.{kind}"
    path.write_text("\n".join(lines) + "\n")
    with np.errstate(all="ignore"):
        with pytest.raises(MotionFormatError, match="non-finite .* too large") as e:
            read_motion(path, **opts)
    assert str(e.value).startswith(f"{path}: ")


@pytest.mark.parametrize("entry, found", [(None, "null"), ([0, 0, 1], "[0, 0, 1]"),
                                          ({"p": [0, 0, 1]}, '{"p": [0, 0, 1]}')])
def test_vr_json_a_tracker_that_is_no_pose_is_said_as_what_is_there(tmp_path, entry, found):
    """A null tracker was "missing or malformed 'NoneType' object is not subscriptable"."""
    path = vr_json(tmp_path / "v.json", 1, "head", "t", 0.01)
    doc = json.loads(path.read_text())
    doc["samples"][1]["left_hand"] = entry
    path.write_text(json.dumps(doc))
    with pytest.raises(MotionFormatError) as e:
        read_motion(path)
    assert str(e.value) == (f"{path}: sample 1: missing or malformed left_hand: expected {{\"p\": [x, y, z], "
                            f"\"q\": [w, x, y, z]}}, found {found}")
