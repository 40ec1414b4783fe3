"""Motion readers against an audit's crafted files: repeated segments or columns, absurd
frame times and rates, non-unit quaternions in .npz motions, AMC frame numbers, a damaged
Xsens joint-angle partner, VR JSON under another suffix, unbounded tokens in messages,
NumPy warnings before the error, and the ASF-only message. Each bad file is built here
from the product's own motions (the standard body, datasets/synthetic) or written inline."""

from __future__ import annotations

import json
import re
import warnings

import numpy as np
import pytest

from retarget import skeleton
from retarget.human import SEGMENTS, HumanMotion, MotionFormatError
from retarget.readers import read_motion, write_mvnx, write_vr_csv
from retarget.readers.asf_amc import find_asf, read_amc, read_asf
from retarget.readers.mvn import MVN_SEGMENTS
from retarget.readers.xsens_csv import DamagedJointAnglesWarning
from tests.conftest import SYNTHETIC, error_line, run_cli, shared_data


def standard(frames: int = 5, step: float = 0.01) -> HumanMotion:
    """A full-body motion of the standard body (the product's own), ``step`` s apart."""
    return skeleton.standard_body_motion(np.arange(frames) * step)


def line_of(text: str, needle: str, start: int = 0) -> int:
    """1-based line of the first ``needle`` at or after character ``start``."""
    return text[:text.index(needle, start)].count("\n") + 1


def no_runtime_warnings(caught) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]


# ------------------------------------------------------------------ 1. repeated names
def test_an_mvnx_segment_label_given_twice_is_refused_with_its_line(tmp_path):
    """L5 relabelled Pelvis: the pelvis took L5's data (torso 0.39 rad off), exit 0."""
    path = tmp_path / "dup.mvnx"
    write_mvnx(standard(), path)
    text = path.read_text()
    assert text.count('<segment label="L5"') == 1
    path.write_text(text.replace('<segment label="L5"', '<segment label="Pelvis"'))
    with pytest.raises(MotionFormatError, match="segment label Pelvis given twice") as e:
        read_motion(path)
    line = line_of(text, '<segment label="L5"')
    assert str(e.value).startswith(f"{path}:{line}: ")


def test_a_vr_csv_column_given_twice_is_refused_with_its_line(tmp_path):
    """A second head_px column: the last one won, silently."""
    good = tmp_path / "good.csv"
    write_vr_csv(standard(), good)
    lines = good.read_text().splitlines()
    header = next(k for k, line in enumerate(lines) if line.startswith("t,"))
    bad = tmp_path / "dup.csv"
    bad.write_text("\n".join(lines[:header] + [lines[header] + ",head_px"]
                             + [line + ",5.0" for line in lines[header + 1:]]) + "\n")
    assert len(read_motion(good)) == 5
    with pytest.raises(MotionFormatError, match=r"column head_px given twice \(columns 2 and ") as e:
        read_motion(bad)
    assert str(e.value).startswith(f"{bad}:{header + 1}: ")


def npz_fields(path) -> dict:
    with np.load(path, allow_pickle=False) as data:
        return {k: data[k] for k in data.files}


def test_a_motion_npz_with_a_segment_name_twice_is_refused(tmp_path):
    good = tmp_path / "good.npz"
    standard().save_npz(good)
    fields = npz_fields(good)
    names = [str(s) for s in fields["segment_names"]]
    names[names.index("l5")] = "pelvis"
    fields["segment_names"] = np.array(names)
    bad = tmp_path / "dupseg.npz"
    np.savez_compressed(bad, **fields)
    assert len(read_motion(good)) == 5
    with pytest.raises(MotionFormatError, match="segment pelvis given more than once") as e:
        read_motion(bad)
    assert str(e.value).startswith(f"{bad}: ")


def test_a_human_motion_refuses_repeated_segment_names():
    m = standard(3)
    with pytest.raises(MotionFormatError, match="segment head, left_hand given more than once"):
        HumanMotion(m.times, ("head", "left_hand", "head", "left_hand"), np.zeros((3, 4, 3)),
                    np.tile([1.0, 0, 0, 0], (3, 4, 1)), source="dup")


# ------------------------------------------------------------------ 2. absurd times and rates
TINY_BVH = """HIERARCHY
ROOT Hips
{{
  OFFSET 0 0 0
  CHANNELS 3 Xposition Yposition Zposition
  End Site
  {{
    OFFSET 0 1 0
  }}
}}
MOTION
Frames: 2
Frame Time: {frame_time}
0 0 0
0 0 1
"""


@pytest.mark.parametrize("frame_time", ["1e300", "1e-300", "inf", "nan", "0", "2"])
def test_a_bvh_frame_time_outside_a_mocap_range_is_refused_with_its_line(tmp_path, frame_time):
    """1e300 / 1e-300 gave a take of 1e302 s / 1e-298 s; inf failed later, without a line,
    after a RuntimeWarning."""
    path = tmp_path / "take.bvh"
    path.write_text(TINY_BVH.format(frame_time=frame_time))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(MotionFormatError, match=r"frame time .* a BVH frame time must be 0\.0001 to 1 s") as e:
            read_motion(path)
    assert str(e.value).startswith(f"{path}:13: ")
    assert not no_runtime_warnings(caught)


@pytest.mark.parametrize("step", [1e-12, 1e12])
def test_vr_times_absurdly_close_or_far_apart_are_refused(tmp_path, step):
    motion = standard(5)
    path = tmp_path / "vr.csv"
    write_vr_csv(HumanMotion(np.arange(5) * 0.01, motion.segment_names, motion.positions, motion.orientations),
                 path)
    lines = path.read_text().splitlines()
    rows = [k for k, line in enumerate(lines) if line[:1].isdigit()]
    for n, k in enumerate(rows):
        lines[k] = repr(n * step) + lines[k][lines[k].index(","):]
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(MotionFormatError, match=re.escape(f"samples are {step:.3g} s apart (median)")) as e:
        read_motion(path)
    assert str(e.value).startswith(f"{path}: ")


def test_mvnx_times_of_1e300_are_refused(tmp_path):
    path = tmp_path / "t.mvnx"
    write_mvnx(standard(), path)
    text = path.read_text()
    for k in range(1, 5):
        text = text.replace(f'<frame time="{10 * k}"', f'<frame time="{k}e300"')
    path.write_text(text)
    with pytest.raises(MotionFormatError, match="apart .*sample step must be"):
        read_motion(path)


@pytest.mark.parametrize("rate", ["nan", "-100", "inf", "1e300", "0"])
def test_an_mvnx_frame_rate_that_is_not_a_plausible_rate_is_refused_with_its_line(tmp_path, rate):
    path = tmp_path / "r.mvnx"
    write_mvnx(standard(), path)
    text = path.read_text()
    assert 'frameRate="100"' in text
    path.write_text(text.replace('frameRate="100"', f'frameRate="{rate}"'))
    with pytest.raises(MotionFormatError, match=f"frameRate '{rate}': a frame rate must be 1 to 10000 Hz") as e:
        read_motion(path)
    assert str(e.value).startswith(f"{path}:{line_of(text, 'frameRate=')}: ")


def test_a_one_frame_mvnx_written_without_a_rate_reads_back(tmp_path):
    """The writer leaves frameRate out when the rate is unknown (one frame), since the
    reader refuses a rate of 0."""
    path = tmp_path / "one.mvnx"
    write_mvnx(standard(1), path)
    assert "frameRate" not in path.read_text()
    assert len(read_motion(path)) == 1


@pytest.mark.parametrize("rate", [float("nan"), float("inf"), -5.0, 1e300, 0.5])
def test_a_human_motion_refuses_a_rate_that_is_no_rate(rate):
    m = standard(3)
    with pytest.raises(MotionFormatError, match="rate .* must be 1 to 10000 Hz"):
        HumanMotion(m.times, m.segment_names, m.positions, m.orientations, source="s", rate_hz=rate)
    assert HumanMotion(m.times, m.segment_names, m.positions, m.orientations, rate_hz=0.0).rate_hz == 0.0
    assert HumanMotion(m.times, m.segment_names, m.positions, m.orientations, rate_hz=np.float32(120)).rate_hz == 120


def test_a_motion_npz_with_a_nan_or_negative_rate_is_refused(tmp_path):
    good = tmp_path / "good.npz"
    standard().save_npz(good)
    for rate in (float("nan"), -5.0):
        fields = npz_fields(good)
        fields["rate_hz"] = np.array(rate)
        bad = tmp_path / "rate.npz"
        np.savez_compressed(bad, **fields)
        with pytest.raises(MotionFormatError, match="rate .* Hz: a motion's rate must be") as e:
            read_motion(bad)
        assert str(e.value).startswith(f"{bad}: ")


# ------------------------------------------------------------------ 3. .npz quaternions
@pytest.mark.parametrize("scale, norm", [(0.0, "0"), (3.0, "3")])
def test_a_motion_npz_with_non_unit_quaternions_is_refused_naming_frame_and_segment(tmp_path, scale, norm):
    """All-zero and x3 quaternions passed (posture references 0.76 and 1.41 rad off)."""
    good = tmp_path / "good.npz"
    standard().save_npz(good)
    fields = npz_fields(good)
    fields["orientations"] = fields["orientations"].copy()
    k, j = 3, SEGMENTS.index("t8")
    fields["orientations"][k, j] *= scale
    bad = tmp_path / "q.npz"
    np.savez_compressed(bad, **fields)
    with pytest.raises(MotionFormatError) as e:
        read_motion(bad)
    assert str(e.value) == f"{bad}: the quaternion of segment t8 at frame 3 of 5 is not of unit norm (norm {norm})"


def test_the_products_own_motions_pass_the_quaternion_check():
    files = sorted(SYNTHETIC.rglob("*.npz"))
    assert files
    for path in files:
        assert len(read_motion(path)) > 1


def test_a_motion_npz_whose_times_are_strings_names_the_file(tmp_path):
    good = tmp_path / "good.npz"
    standard().save_npz(good)
    fields = npz_fields(good)
    fields["times"] = np.array(["a"] * 5)
    bad = tmp_path / "str_times.npz"
    np.savez_compressed(bad, **fields)
    with pytest.raises(MotionFormatError, match="other than numbers") as e:   # was a bare ValueError
        read_motion(bad)
    assert str(e.value).startswith(f"{bad}: ")


# ------------------------------------------------------------------ 4. AMC frame numbers
ASF = """:version 1.10
:name tiny
:units
  length 0.45
  angle deg
:root
  order TX TY TZ RX RY RZ
  axis XYZ
  position 0 0 0
  orientation 0 0 0
:bonedata
  begin
    id 1
    name lowerback
    direction 0 1 0
    length 2
    axis 0 0 0 XYZ
    dof rx ry rz
  end
:hierarchy
  begin
    root lowerback
  end
"""


def amc(tmp_path, body: str):
    """(AMC path, skeleton) with ``body`` after the AMC header (header lines 1-2)."""
    asf = tmp_path / "tiny.asf"
    asf.write_text(ASF)
    path = tmp_path / "tiny.amc"
    path.write_text(":FULLY-SPECIFIED\n:DEGREES\n" + body)
    return path, read_asf(asf)


FRAME = "root 0 17 0 0 0 0\nlowerback 1 2 3\n"


def test_amc_frames_numbered_in_order_read(tmp_path):
    path, skel = amc(tmp_path, "".join(f"{k}\n{FRAME}" for k in range(1, 4)))
    data, first = read_amc(path, skel)
    assert len(data["root"]) == 3 and first == 3


def test_an_amc_whose_frame_numbers_are_lost_says_a_bone_is_repeated(tmp_path):
    """Frame number lines removed: read as 1 frame (later lines overwrote the first), then
    a misleading "1 frame: a motion needs at least 2"."""
    path, skel = amc(tmp_path, "1\n" + FRAME * 3)
    with pytest.raises(MotionFormatError) as e:
        read_amc(path, skel)
    assert str(e.value) == (f"{path}:6: bone root given twice in frame 1 (line 3; first at line 4): "
                            "a frame number line missing?")


def test_an_amc_bone_line_repeated_in_a_frame_is_refused(tmp_path):
    path, skel = amc(tmp_path, "1\n" + FRAME + "lowerback 9 9 9\n2\n" + FRAME)
    with pytest.raises(MotionFormatError,
                       match=r":6: bone lowerback given twice in frame 1 \(line 3; first at line 5\)"):
        read_amc(path, skel)


@pytest.mark.parametrize("numbers, line, message", [
    ((1, 1, 1), 6, r"frame number 1 after frame 1 \(line 3\): frame numbers count up by 1 \(a frame repeated\?\)"),
    ((1, 2, 4), 9, r"frame number 4 after frame 2 \(line 6\): frame numbers count up by 1 \(a frame missing\?\)"),
    ((1, 2, -5), 9, r"frame number -5 after frame 2"),
])
def test_amc_frame_numbers_must_count_up_by_one(tmp_path, numbers, line, message):
    path, skel = amc(tmp_path, "".join(f"{k}\n{FRAME}" for k in numbers))
    with pytest.raises(MotionFormatError, match=message) as e:
        read_amc(path, skel)
    assert str(e.value).startswith(f"{path}:{line}: ")


def test_an_amc_without_any_frame_number_says_so(tmp_path):
    path, skel = amc(tmp_path, FRAME * 2)
    with pytest.raises(MotionFormatError, match=":3: expected a frame number, found 'root 0 17 0 0 0 0': .*without "
                                                "frame numbers"):
        read_amc(path, skel)


# ------------------------------------------------------------------ 5. damaged N.csv partner
def xsens_pair(folder, frames: int = 5):
    """``folder/p1.csv`` (161 columns, unit quaternions) and a ``1.csv`` cut mid-line."""
    m = standard(frames)
    assert m.segment_names == SEGMENTS and len(MVN_SEGMENTS) == len(SEGMENTS)
    rows = np.concatenate([m.positions, m.orientations], axis=-1).reshape(frames, -1)
    pose = folder / "p1.csv"
    pose.write_text("".join(",".join(f"{v:.9g}" for v in row) + "\n" for row in rows))
    angles = folder / "1.csv"
    angles.write_text((",".join(["1.5"] * 66) + "\n") * 2 + ",".join(["1.5"] * 39) + "\n")
    return pose, angles


@pytest.mark.parametrize("given", ["p1.csv", "1.csv"])
def test_a_damaged_joint_angle_file_is_ignored_with_one_warning(tmp_path, given):
    """N.csv cut mid-line made its valid pN.csv unreadable ("1.csv:3: expected 66 joint
    angles"); N.csv is not the motion."""
    pose, angles = xsens_pair(tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        motion = read_motion(tmp_path / given)
    assert len(motion) == 5 and motion.source == str(pose)
    assert "joint_angles_deg" not in motion.meta and "joint_angles_file" not in motion.meta
    damaged = [w for w in caught if issubclass(w.category, DamagedJointAnglesWarning)]
    assert len(damaged) == 1 and len(caught) == 1
    assert str(damaged[0].message).startswith(f"{angles}:3: expected 66 joint angles")
    assert "damaged and ignored" in str(damaged[0].message)


def test_a_valid_joint_angle_file_is_still_attached(tmp_path):
    pose, angles = xsens_pair(tmp_path)
    angles.write_text((",".join(["1.5"] * 66) + "\n") * 3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        motion = read_motion(pose)
    assert motion.meta["joint_angles_deg"].shape == (3, 66) and motion.meta["joint_angles_file"] == str(angles)


# ------------------------------------------------------------------ 6. VR JSON under another suffix
@pytest.mark.parametrize("suffix", [".txt", ".csv", ""])
def test_vr_json_content_reads_whatever_the_suffix(tmp_path, suffix):
    samples = [{"t": k * 0.01, "head": {"p": [0.0, 0.0, 1.6], "q": [1.0, 0.0, 0.0, 0.0]},
                "left_hand": {"p": [0.0, 0.2, 0.8], "q": [1.0, 0.0, 0.0, 0.0]},
                "right_hand": {"p": [0.0, -0.2, 0.8], "q": [1.0, 0.0, 0.0, 0.0]}} for k in range(3)]
    path = tmp_path / f"vr{suffix}"
    path.write_text(json.dumps({"format": "vr-trackers-v1", "samples": samples}))
    motion = read_motion(path)      # was: "first column must be 't' (seconds), found '{"format"...'"
    assert len(motion) == 3 and motion.segment_names == ("head", "left_hand", "right_hand")


# ------------------------------------------------------------------ 7. unbounded tokens
def test_a_huge_bvh_token_is_cut_in_the_message(tmp_path):
    path = tmp_path / "huge.bvh"
    path.write_text("HIERARCHY\n" + "x" * 2_000_000 + "\n")
    with pytest.raises(MotionFormatError) as e:
        read_motion(path)
    assert str(e.value) == (f"{path}:2: unexpected {'x' * 40!r}... (2000000 characters) in the HIERARCHY")


def test_a_csv_body_under_a_bvh_header_is_cut_in_the_message(tmp_path):
    """The CSV line, one token without spaces, was printed whole (4.2 KB)."""
    row = ",".join(["1.467650532722470091e-01"] * 161)
    path = tmp_path / "csv.bvh"
    path.write_text("HIERARCHY\n" + row + "\n")
    with pytest.raises(MotionFormatError) as e:
        read_motion(path)
    assert len(str(e.value)) < len(str(path)) + 120 and f"({len(row)} characters)" in str(e.value)


def test_a_huge_amc_token_is_cut_in_the_message(tmp_path):
    path, skel = amc(tmp_path, "1\n" + "y" * 2_000_000 + " 1 2 3\n")
    with pytest.raises(MotionFormatError) as e:
        read_amc(path, skel)
    assert str(e.value) == f"{path}:4: bone {'y' * 40!r}... (2000000 characters) is not in the skeleton tiny.asf"


def test_a_huge_number_token_and_a_long_list_are_cut(tmp_path):
    path = tmp_path / "vr.csv"
    path.write_text("t,head_px\n0," + "9" * 100_000 + "z\n")
    with pytest.raises(MotionFormatError, match=r"not a number: '9{40}'\.\.\. \(100001 characters\)$"):
        read_motion(path)
    bvh = tmp_path / "chans.bvh"
    bvh.write_text("HIERARCHY\nROOT Hips\n{\n  OFFSET 0 0 0\n  CHANNELS 5000 " + " ".join(["Wrotation"] * 5000) + "\n")
    with pytest.raises(MotionFormatError) as e:
        read_motion(bvh)
    message = str(e.value)
    assert message.startswith(f"{bvh}:5: unknown channels 'Wrotation', ") and message.endswith(
        f"... (message cut: {len('unknown channels ') + 5000 * len(repr('Wrotation')) + 4999 * 2} characters)")
    assert len(message) < len(str(bvh)) + 460


# ------------------------------------------------------------------ 8. NumPy warnings
#: A CMU-like skeleton: joint -> (parent, OFFSET in cm, Y up, X left); "end" children are
#: End Sites. Enough joints for every canonical segment of the BVH reader.
CMU_JOINTS = {
    "Hips": (None, (0, 0, 0)),
    "LeftUpLeg": ("Hips", (10, 0, 0)), "LeftLeg": ("LeftUpLeg", (0, -45, 0)),
    "LeftFoot": ("LeftLeg", (0, -45, 0)), "LeftToeBase": ("LeftFoot", (0, -5, 12)),
    "RightUpLeg": ("Hips", (-10, 0, 0)), "RightLeg": ("RightUpLeg", (0, -45, 0)),
    "RightFoot": ("RightLeg", (0, -45, 0)), "RightToeBase": ("RightFoot", (0, -5, 12)),
    "LowerBack": ("Hips", (0, 5, 0)), "Spine": ("LowerBack", (0, 10, 0)), "Spine1": ("Spine", (0, 10, 0)),
    "Neck1": ("Spine1", (0, 15, 0)), "Head": ("Neck1", (0, 10, 0)),
    "LeftShoulder": ("Spine1", (3, 12, 0)), "LeftArm": ("LeftShoulder", (15, 0, 0)),
    "LeftForeArm": ("LeftArm", (28, 0, 0)), "LeftHand": ("LeftForeArm", (25, 0, 0)),
    "LeftHandIndex1": ("LeftHand", (8, 0, 0)),
    "RightShoulder": ("Spine1", (-3, 12, 0)), "RightArm": ("RightShoulder", (-15, 0, 0)),
    "RightForeArm": ("RightArm", (-28, 0, 0)), "RightHand": ("RightForeArm", (-25, 0, 0)),
    "RightHandIndex1": ("RightHand", (-8, 0, 0)),
}
END_SITES = {"Head": (0, 15, 0), "LeftToeBase": (0, 0, 5), "RightToeBase": (0, 0, 5),
             "LeftHandIndex1": (3, 0, 0), "RightHandIndex1": (-3, 0, 0)}


def cmu_bvh(path, frames: int = 4, root_x: str = "0"):
    """A small BVH of :data:`CMU_JOINTS` standing still; frame 1's root X position is
    ``root_x``."""
    out = ["HIERARCHY"]

    def joint(name, depth):
        pad = "  " * depth
        out.append(f"{pad}{'ROOT' if depth == 0 else 'JOINT'} {name}")
        out.append(pad + "{")
        out.append(f"{pad}  OFFSET {' '.join(map(str, CMU_JOINTS[name][1]))}")
        out.append(f"{pad}  CHANNELS " + ("6 Xposition Yposition Zposition " if depth == 0 else "3 ")
                   + "Zrotation Yrotation Xrotation")
        for child, (parent, _) in CMU_JOINTS.items():
            if parent == name:
                joint(child, depth + 1)
        if name in END_SITES:
            out.extend([f"{pad}  End Site", f"{pad}  {{", f"{pad}    OFFSET {' '.join(map(str, END_SITES[name]))}",
                        f"{pad}  }}"])
        out.append(pad + "}")

    joint("Hips", 0)
    channels = 6 + 3 * (len(CMU_JOINTS) - 1)
    out += ["MOTION", f"Frames: {frames}", "Frame Time: 0.008333"]
    for k in range(frames):
        row = ["0", "100", "0"] + ["0"] * (channels - 3)
        if k == 1:
            row[0] = root_x
        out.append(" ".join(row))
    path.write_text("\n".join(out) + "\n")
    return path


def test_a_bvh_value_that_overflows_gives_the_error_without_runtime_warnings(tmp_path):
    """A root position of 1e308 overflowed in the hip midpoint and the unit scaling: three
    RuntimeWarnings (bvh.py, articulated.py, quat.py) came before the error line."""
    assert len(read_motion(cmu_bvh(tmp_path / "good.bvh"))) == 4      # the skeleton itself reads
    path = cmu_bvh(tmp_path / "huge.bvh", root_x="1e308")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(MotionFormatError) as e:
            read_motion(path)
    assert str(e.value) == (f"{path}: non-finite positions (a value in the file too large) at frame 1 of 4, "
                            "segment pelvis")
    assert not no_runtime_warnings(caught)


def test_the_cli_shows_one_error_line_for_an_overflowing_file(tmp_path, capsys):
    path = cmu_bvh(tmp_path / "huge.bvh", root_x="1e308")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rc, _, err = run_cli(capsys, "retarget", path, "--out", tmp_path / "out")
    assert rc == 1 and error_line(err).startswith(f"{path}: non-finite positions")
    assert not no_runtime_warnings(caught) and "Warning" not in err


@pytest.mark.parametrize("value, norm", [("3", "6"), ("1e308", "inf")])
def test_an_mvnx_quaternion_not_of_unit_norm_is_refused_with_its_line(tmp_path, value, norm):
    """1e308 overflowed to a norm of inf and the quaternion was normalised to zero; (3, 3,
    3, 3) was normalised silently, where the other text readers refuse it."""
    path = tmp_path / "take.mvnx"
    write_mvnx(standard(3), path)
    text = path.read_text()
    i = text.rfind("<orientation>") + len("<orientation>")
    j = text.find("</orientation>", i)
    numbers = text[i:j].split()
    numbers[4:8] = [value] * 4                  # the second segment, L5
    path.write_text(text[:i] + " ".join(numbers) + text[j:])
    line = text[:i].count("\n") + 1
    with pytest.raises(MotionFormatError) as e:
        read_motion(path)
    assert str(e.value) == (f"{path}:{line}: <orientation> quaternion of segment L5 in motion frame 2 is not of "
                            f"unit norm (norm {norm})")


# ------------------------------------------------------------------ 9. the ASF-only message
def test_an_asf_given_alone_says_where_its_takes_find_it_without_python(tmp_path):
    skeletons = tmp_path / "skeletons"
    skeletons.mkdir()
    asf = skeletons / "HDM_xy.asf"
    asf.write_text(ASF)
    with pytest.raises(MotionFormatError) as e:
        read_motion(asf)
    message = str(e.value)
    assert "Python" not in message and "read_motion" not in message
    assert message == (f"{asf}: an ASF file is a skeleton without motion: give one of its .amc takes instead, "
                       "which finds it when the take is named HDM_xy_*.amc and lies in the same folder, or in a "
                       "folder beside a 'skeletons' folder holding it (the take's ../skeletons/HDM_xy.asf)")
    # What it says is what the reader does: a take in a folder beside skeletons/ finds it.
    (tmp_path / "squat").mkdir()
    assert find_asf(tmp_path / "squat" / "HDM_xy_squat_001_120.amc") == asf
    assert find_asf(skeletons / "HDM_xy_squat_001_120.amc") == asf


def test_an_asf_of_another_dataset_names_the_take_it_goes_with(tmp_path):
    asf = tmp_path / "walk.asf"
    asf.write_text(ASF)
    (tmp_path / "other.asf").write_text(ASF)
    with pytest.raises(MotionFormatError) as e:
        read_motion(asf)
    assert str(e.value).endswith("which finds it when the take lies in the same folder and is named walk.amc, or "
                                 "when this is the only .asf in the take's folder")
    assert find_asf(tmp_path / "walk.amc") == asf


def test_one_sample_at_a_corrupt_time_is_refused(tmp_path):
    """The last of 200 samples 100 ms apart at 1e5 s: the median step was right, and a 2 s take
    lasted 27 hours (`retarget --execute` simulated them, a replay waited them out)."""
    motion = standard(20)
    times = motion.times.copy()
    times[-1] = 1e5
    path = tmp_path / "vr.csv"
    write_vr_csv(HumanMotion(times, motion.segment_names, motion.positions, motion.orientations), path)
    with pytest.raises(MotionFormatError, match=re.escape(f"{path}: sample 19 of 20 is 99999.8 s after sample 18: "
                                                          "a motion may pause 60 s at most")):
        read_motion(path)
    times[-1] = times[-2] + 59.0         # a long pause, but a pause: kept
    write_vr_csv(HumanMotion(times, motion.segment_names, motion.positions, motion.orientations), path)
    assert read_motion(path).duration == pytest.approx(times[-1])


@pytest.mark.parametrize("offset_m, refused", [(1e6, True), (0.5, True), (0.1, False)])
def test_a_segment_that_jumps_for_one_sample_is_refused(tmp_path, offset_m, refused):
    """A VR hand at 1e6 m for one 10 ms sample was retargeted as a 22 cm jump of the robot's
    hand (clamped to its reach); 0.5 m in 10 ms is 50 m/s, 0.1 m is 10 m/s, a throw."""
    motion = standard(20)
    positions = motion.positions.copy()
    hand = motion.segment_names.index("left_hand")
    positions[10, hand, 0] += offset_m
    path = tmp_path / "vr.csv"
    write_vr_csv(HumanMotion(motion.times, motion.segment_names, positions, motion.orientations), path)
    if not refused:
        read_motion(path)
        return
    with pytest.raises(MotionFormatError, match=re.escape(f"{path}: segment left_hand moves ") + r"\S+ m in "
                       r"10 ms between samples (9 and 10|10 and 11) of 20 .*: a tracking glitch"):    # out, or back
        read_motion(path)


def test_a_bvh_of_another_skeleton_says_what_teleop_reads(tmp_path):
    """It said "pass segment_map= for this skeleton", an argument no command has."""
    path = tmp_path / "other.bvh"
    path.write_text("HIERARCHY\nROOT Hips\n{\n OFFSET 0 0 0\n CHANNELS 6 Xposition Yposition Zposition Zrotation "
                    "Xrotation Yrotation\n JOINT Head\n {\n  OFFSET 0 60 0\n"
                    "  CHANNELS 3 Zrotation Xrotation Yrotation\n  End Site\n  {\n   OFFSET 0 15 0\n  }\n }\n}\n"
                    "MOTION\nFrames: 2\nFrame Time: 0.01\n"
                    + "0 90 0 0 0 0 0 0 0\n" * 2)
    with pytest.raises(MotionFormatError, match=re.escape("joints not named as in the CMU conversion, which teleop "
                                                          "reads: no LeftArm, ") + r".*; it has Hips, Head: rename"):
        read_motion(path)


def _vr_csv_lines(tmp_path) -> tuple:
    motion = standard(10)
    path = tmp_path / "vr.csv"
    write_vr_csv(motion, path)
    lines = path.read_text().splitlines()
    return path, lines, [k for k, line in enumerate(lines) if line[:1].isdigit()]


def test_vr_csv_errors_name_the_line_and_tracker(tmp_path):
    """"tracker quaternions must be unit" and "times must increase (sample 50)" said neither
    line nor tracker, where every other error of the file names its line."""
    path, lines, rows = _vr_csv_lines(tmp_path)
    header = next(line for line in lines if line.startswith("t,")).split(",")
    cells = lines[rows[4]].split(",")
    cells[header.index("left_hand_qw")] = "2.0"
    lines[rows[4]] = ",".join(cells)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(MotionFormatError, match=re.escape(f"{path}:{rows[4] + 1}: tracker left_hand: quaternion of "
                                                          "norm ")):
        read_motion(path)
    path, lines, rows = _vr_csv_lines(tmp_path)
    lines[rows[6]] = lines[rows[5]]
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(MotionFormatError, match=re.escape(f"{path}:{rows[6] + 1}: times must increase: 0.05 s after "
                                                          "0.05 s")):
        read_motion(path)


def test_a_vr_json_tracker_missing_from_the_first_sample_is_not_dropped(tmp_path):
    """The trackers were those of sample 0: a pelvis in every sample but the first was
    dropped without a word, one in the first only refused."""
    motion = standard(5)
    samples = [{"t": float(t), **{s: {"p": motion.position(s)[k].tolist(), "q": [1.0, 0.0, 0.0, 0.0]}
                                  for s in ("head", "left_hand", "right_hand", "pelvis")}}
               for k, t in enumerate(motion.times)]
    del samples[0]["pelvis"]
    path = tmp_path / "vr.json"
    path.write_text(json.dumps({"format": "vr-trackers-v1", "samples": samples}))
    with pytest.raises(MotionFormatError, match=re.escape(f"{path}: sample 0: missing or malformed pelvis: ") +
                       r".*found nothing \(a tracker is in every sample, or in none\)"):
        read_motion(path)


def test_an_mvnx_frame_rate_its_frame_times_contradict_gives_way_to_them(tmp_path):
    """frameRate="240" over frames 10 ms apart was shown as the take's rate (the frames are
    played at their times)."""
    path = tmp_path / "t.mvnx"
    write_mvnx(standard(20, step=0.01), path)
    text = path.read_text()
    assert 'frameRate="100"' in text
    path.write_text(text.replace('frameRate="100"', 'frameRate="240"'))
    motion = read_motion(path)
    assert motion.rate_hz == pytest.approx(100.0) and motion.meta["stated_rate_hz"] == 240.0


def test_a_bvh_of_a_rest_pose_and_one_frame_says_the_rest_pose_was_dropped(tmp_path):
    """It said "1 frame: a motion needs at least 2" of a file of 2 frames."""
    source = shared_data("cmu_bvh", "115_06.bvh")
    text = source.read_text()
    head, _, rest = text.partition("MOTION")
    lines = rest.strip().splitlines()       # "Frames: N", "Frame Time: t", then the frames
    path = tmp_path / "two.bvh"
    path.write_text(head + "MOTION\nFrames: 2\n" + lines[1] + "\n" + "\n".join(lines[2:4]) + "\n")
    with pytest.raises(MotionFormatError, match=re.escape("2 frames, the first a rest pose (no root rotation), which "
                                                          "is dropped: a motion needs at least 2 more")):
        read_motion(path)
