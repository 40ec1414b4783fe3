"""Motion readers on the real data in ../shared/data, and on broken files."""

import re
from pathlib import Path

import numpy as np
import pytest

from conftest import shared_data

from retarget import quat, skeleton
from retarget.calibration import calibrate
from retarget.human import SEGMENTS, HumanMotion, MotionFormatError
from retarget.readers import read_motion, sniff_format
from retarget.readers.asf_amc import read_asf
from retarget.readers.bvh import read_bvh_file


def data(*parts) -> Path:
    """A file or folder of the real recorded motion (the test skips, saying so, without it)."""
    return shared_data(*parts)


def tilt_deg(q: np.ndarray, axis, expected) -> np.ndarray:
    """Angle [deg] between a segment axis (segment frame) mapped to the world and a direction."""
    d = quat.rotate(q, np.asarray(axis, dtype=float))
    return np.degrees(np.arccos(np.clip(d @ np.asarray(expected, dtype=float), -1, 1)))


def check_body(m: HumanMotion, stature_range=(1.5, 2.0)):
    """Physical sanity of a full-body motion in metres, z up."""
    assert m.segment_names == tuple(s for s in SEGMENTS if s in m.segment_names)
    assert np.all(np.isfinite(m.positions)) and np.all(np.isfinite(m.orientations))
    np.testing.assert_allclose(np.linalg.norm(m.orientations, axis=-1), 1.0, atol=1e-9)
    assert np.all(np.diff(m.times) > 0)
    c = calibrate(m)
    assert stature_range[0] <= c.stature <= stature_range[1], c.stature
    # Head above the pelvis: standing at frame 0, and along the trunk in every frame
    # (bending forward can bring the head below the pelvis in the world).
    assert m.position("head")[0, 2] > m.position("pelvis")[0, 2] + 0.4
    head_in_pelvis = quat.rotate(quat.conj(m.orientation("pelvis")), m.position("head") - m.position("pelvis"))
    assert np.all(head_in_pelvis[:, 2] > 0.0)
    assert np.all(np.linalg.norm(head_in_pelvis, axis=1) > 0.25 * c.stature)
    # Feet on the floor at frame 0 (ankles 3-16 cm up), never below it.
    assert np.all((m.positions[0, [m.index("left_foot"), m.index("right_foot")], 2] > 0.03)
                  & (m.positions[0, [m.index("left_foot"), m.index("right_foot")], 2] < 0.16))
    for seg in ("left_foot", "right_foot", "left_toe", "right_toe"):
        assert m.position(seg)[:, 2].min() > -0.02, seg
    assert 0.03 <= c.ankle_height <= 0.16
    arm = c.arm_length / c.stature                              # shoulder->wrist ~0.30 H
    assert np.all((arm > 0.25) & (arm < 0.36)), arm
    assert 0.4 < c.waist_height / c.stature < 0.65
    # The chain is rigid: every offset in the parent frame is constant over the take.
    for seg in ("left_forearm", "right_hand", "left_lower_leg", "t8"):
        parent = skeleton.present_parent(seg, set(m.segment_names))
        local = quat.rotate(quat.conj(m.orientation(parent)), m.position(seg) - m.position(parent))
        assert np.max(np.std(local, axis=0)) < 0.01, seg
    return c


def check_npose_frames(m: HumanMotion):
    """Segment frames are N-pose aligned: limbs hang along -z, the spine along +z."""
    for seg, child in (("left_upper_arm", "left_forearm"), ("right_forearm", "right_hand"),
                       ("left_upper_leg", "left_lower_leg"), ("right_lower_leg", "right_foot")):
        local = quat.rotate(quat.conj(m.orientation(seg)), m.position(child) - m.position(seg))
        assert np.all(local[:, 2] < -0.99 * np.linalg.norm(local, axis=1)), seg
    local = quat.rotate(quat.conj(m.orientation("t12")), m.position("t8") - m.position("t12"))
    assert np.all(local[:, 2] > 0.99 * np.linalg.norm(local, axis=1))


# ------------------------------------------------------------------------------ Xsens
def test_xsens_csv_pairs():
    folder = data("xsens_putaside_box")
    for k in range(1, 9):
        m = read_motion(folder / f"p{k}.csv")
        assert len(m.segment_names) == 23 and m.rate_hz == 100.0
        np.testing.assert_allclose(np.diff(m.times), 0.01)
        assert m.meta["quaternion_scale"] == pytest.approx(180 / np.pi)
        # MVN's arm frames are T-pose frames; the reader found and converted them.
        assert m.meta["mvn_arm_frames"] == {"right": "tpose", "left": "tpose"}
        assert m.meta["joint_angles_deg"].shape[1] == 66
        check_body(m)
        check_npose_frames(m)
        # Frame 0: the actor stands facing +x; trunk and legs are near their N-pose frames.
        for seg in ("pelvis", "t8", "left_upper_leg", "right_lower_leg"):
            assert tilt_deg(m.orientation(seg)[0], [0, 0, 1], [0, 0, 1]) < 25, seg
        assert abs(np.degrees(quat.yaw_of(m.orientation("pelvis")[0]))) < 20
        # The toes touch the floor (ground at z = 0).
        assert 0.0 < m.position("left_toe")[0, 2] < 0.05
    # Either member of the pair gives the same motion.
    a, b = read_motion(folder / "1.csv"), read_motion(folder / "p1.csv")
    np.testing.assert_array_equal(a.positions, b.positions)


def test_xsens_joint_angle_file_covers_the_same_motion():
    """N.csv's jRightElbow third angle is the elbow flexion of the poses (same extremes)."""
    from retarget.postures import elbow_flexion
    m = read_motion(data("xsens_putaside_box", "p4.csv"))
    flex = np.degrees(elbow_flexion(m.orientation("right_upper_arm"), m.orientation("right_forearm")))
    elbow = m.meta["joint_angles_deg"][:, 3 * 8 + 2]                 # jRightElbow, 3rd angle
    assert abs(flex.max() - elbow.max()) < 0.5 and abs(flex.min() - elbow.min()) < 0.5
    assert len(m) != len(elbow)                                      # not row-aligned


# ----------------------------------------------------------------------------- HDM05
@pytest.mark.parametrize("performer, take", [("bd", "001"), ("bk", "005"), ("dg", "011")])
def test_hdm05_grab_high_right(performer, take):
    m = read_motion(data("hdm05", "grabHighR", f"HDM_{performer}_grabHighR_{take}_120.amc"))
    assert m.rate_hz == 120.0 and m.meta["label"] == "grabHighR" and m.meta["performer"] == performer
    c = check_body(m)
    check_npose_frames(m)
    # Facing +x at frame 0 (pelvis heading), standing with the upper arms hanging.
    assert abs(np.degrees(quat.yaw_of(m.orientation("pelvis")[0]))) < 20
    for seg in ("left_upper_arm", "right_upper_arm"):
        assert tilt_deg(m.orientation(seg)[0], [0, 0, -1], [0, 0, -1]) < 30
    # The right hand reaches high: well above the head's starting height, and moves a lot.
    rh = m.position("right_hand")
    assert rh[:, 2].max() > m.position("head")[0, 2]
    assert np.linalg.norm(rh - rh[0], axis=1).max() > 0.5
    lh = m.position("left_hand")
    assert np.linalg.norm(lh - lh[0], axis=1).max() < np.linalg.norm(rh - rh[0], axis=1).max()
    assert c.stature == pytest.approx(calibrate(m, frame=len(m) // 2).stature, rel=0.02)


@pytest.mark.parametrize("performer, take", [("bd", "001"), ("bk", "013"), ("dg", "025")])
def test_hdm05_squat_lowers_the_pelvis(performer, take):
    m = read_motion(data("hdm05", "squat1Reps", f"HDM_{performer}_squat1Reps_{take}_120.amc"))
    check_body(m)
    z = m.position("pelvis")[:, 2]
    assert z[0] - z.min() > 0.2 and abs(z[-1] - z[0]) < 0.1
    # The feet stay put while squatting.
    foot = m.position("left_foot")
    assert np.linalg.norm(foot - foot[0], axis=1).max() < 0.1


def test_every_hdm05_task_reads():
    folder = data("hdm05")
    tasks = sorted(p.name for p in folder.iterdir() if p.is_dir() and p.name != "skeletons")
    assert len(tasks) == 6
    for task in tasks:
        take = sorted((folder / task).glob("*.amc"))[-1]
        m = read_motion(take)
        assert m.meta["label"] == task
        check_body(m)


def test_asf_units_and_explicit_skeleton():
    skel = read_asf(data("hdm05", "skeletons", "HDM_bd.asf"))
    assert skel.unit_m == pytest.approx(0.0254 / 0.45)
    assert skel.bones["lhumerus"].dof == ["rx", "ry", "rz"] and skel.bones["lfoot"].dof == ["rx", "rz"]
    amc = data("hdm05", "squat1Reps", "HDM_bd_squat1Reps_001_120.amc")
    a = read_motion(amc, skeleton=data("hdm05", "skeletons", "HDM_bd.asf"))
    b = read_motion(amc)
    np.testing.assert_array_equal(a.positions, b.positions)


# ------------------------------------------------------------------------------- CMU
@pytest.mark.parametrize("name", ["115_06", "115_10"])
def test_cmu_bvh(name):
    m = read_motion(data("cmu_bvh", f"{name}.bvh"))
    raw = read_bvh_file(data("cmu_bvh", f"{name}.bvh"))
    assert m.meta["dropped_rest_frame"] and len(m) == len(raw.data) - 1
    assert m.meta["length_unit"].startswith("acclaim") and m.rate_hz == pytest.approx(120.0, rel=1e-4)
    check_body(m)
    check_npose_frames(m)
    assert abs(np.degrees(quat.yaw_of(m.orientation("pelvis")[0]))) < 20


def test_cmu_knee_bend_versus_waist_bend():
    """115_06 bends the knees (pelvis drops), 115_10 bends from the waist (trunk pitches)."""
    from retarget.postures import torso_angles
    knees, waist = read_motion(data("cmu_bvh", "115_06.bvh")), read_motion(data("cmu_bvh", "115_10.bvh"))
    drop = lambda m: m.position("pelvis")[0, 2] - m.position("pelvis")[:, 2].min()  # noqa: E731
    pitch = lambda m: np.degrees(torso_angles(m.orientation("pelvis"), m.orientation("t8"))[:, 0]).max()  # noqa: E731
    hip = lambda m: tilt_deg(m.orientation("pelvis"), [0, 0, 1], [0, 0, 1]).max()  # noqa: E731
    assert drop(knees) > 0.25 and drop(knees) > 2 * drop(waist)
    assert hip(waist) + pitch(waist) > 60                      # bending forward from the waist
    assert hip(waist) > hip(knees)


# -------------------------------------------------------------------------- dispatcher
def test_sniffing_by_content(tmp_path):
    src = data("cmu_bvh", "115_06.bvh")
    copy = tmp_path / "take"
    copy.write_bytes(src.read_bytes())
    assert sniff_format(copy) == "bvh"
    assert len(read_motion(copy)) == 357
    xs = tmp_path / "poses.txt"
    xs.write_bytes(data("xsens_putaside_box", "p2.csv").read_bytes())
    assert sniff_format(xs) == "xsens-csv"


def test_native_npz_round_trip(tmp_path):
    m = read_motion(data("xsens_putaside_box", "p3.csv"))
    m.save_npz(tmp_path / "m.npz")
    back = read_motion(tmp_path / "m.npz")
    np.testing.assert_array_equal(back.orientations, m.orientations)
    assert back.segment_names == m.segment_names


# -------------------------------------------------------------------- broken files
def assert_located(exc_info, path: Path, line: int | None = None):
    msg = str(exc_info.value)
    assert str(path) in msg, msg
    if line is not None:
        assert re.search(rf"{re.escape(str(path))}:{line}\b", msg), msg


def write(tmp_path, name, text) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_truncated_and_garbage_amc(tmp_path):
    src = data("hdm05", "squat1Reps", "HDM_bd_squat1Reps_001_120.amc")
    asf = data("hdm05", "skeletons", "HDM_bd.asf")
    lines = src.read_text(encoding="latin-1").splitlines()
    cut = write(tmp_path, "cut.amc", "\n".join(lines[:100]) + "\n")    # ends inside frame 4
    with pytest.raises(MotionFormatError, match="lacks") as e:
        read_motion(cut, skeleton=asf)
    assert_located(e, cut, 100)
    bad = list(lines)
    bad[50] = bad[50].split()[0] + " 1.0 banana 3.0"
    junk = write(tmp_path, "junk.amc", "\n".join(bad))
    with pytest.raises(MotionFormatError, match="banana|expected") as e:
        read_motion(junk, skeleton=asf)
    assert_located(e, junk, 51)
    short = list(lines)
    short[60] = " ".join(short[60].split()[:-1])
    short_p = write(tmp_path, "short.amc", "\n".join(short))
    with pytest.raises(MotionFormatError, match="expected") as e:
        read_motion(short_p, skeleton=asf)
    assert_located(e, short_p, 61)


def test_truncated_asf(tmp_path):
    src = data("hdm05", "skeletons", "HDM_bd.asf").read_text(encoding="latin-1").splitlines()
    cut = write(tmp_path, "cut.asf", "\n".join(src[:120]))
    with pytest.raises(MotionFormatError) as e:
        read_asf(cut)
    assert_located(e, cut)


def test_truncated_and_garbage_bvh(tmp_path):
    lines = data("cmu_bvh", "115_10.bvh").read_text().splitlines()
    cut = write(tmp_path, "cut.bvh", "\n".join(lines[:250]))
    with pytest.raises(MotionFormatError, match="truncated") as e:
        read_motion(cut)
    assert_located(e, cut)
    bad = list(lines)
    bad[200] = bad[200].replace(" ", " x", 1)
    junk = write(tmp_path, "junk.bvh", "\n".join(bad))
    with pytest.raises(MotionFormatError) as e:
        read_motion(junk)
    assert_located(e, junk, 201)
    hier = list(lines)
    hier[40] = "\tCHANNELS 3 Zrotation Yrotation"
    h = write(tmp_path, "hier.bvh", "\n".join(hier))
    with pytest.raises(MotionFormatError, match="announces 3") as e:
        read_motion(h)
    assert_located(e, h, 41)


def test_garbage_xsens_csv(tmp_path):
    lines = data("xsens_putaside_box", "p1.csv").read_text().splitlines()
    lines[10] = ",".join(lines[10].split(",")[:-3])
    p = write(tmp_path, "p9.csv", "\n".join(lines))
    with pytest.raises(MotionFormatError, match="expected 161") as e:
        read_motion(p)
    assert_located(e, p, 11)


def test_unsupported_and_missing_files(tmp_path):
    p = write(tmp_path, "notes.txt", "hello\nworld\n")
    with pytest.raises(MotionFormatError, match="unsupported") as e:
        read_motion(p)
    assert_located(e, p)            # no line: nothing in it was recognised (it said ":1")
    assert f"{p}:1" not in str(e.value)
    with pytest.raises(MotionFormatError, match="no such file"):
        read_motion(tmp_path / "absent.bvh")
    with pytest.raises(MotionFormatError, match=f"^{re.escape(str(tmp_path))}: a folder, not a motion file$"):
        read_motion(tmp_path)                      # it said "no such file" of a folder that exists
    z = tmp_path / "fake.npz"
    z.write_bytes(b"PK\x03\x04 not really a zip")
    with pytest.raises(MotionFormatError) as e:
        read_motion(z)
    assert_located(e, z)
    asf = write(tmp_path, "skel.asf", ":version 1.10\n:bonedata\n")
    with pytest.raises(MotionFormatError, match="skeleton without motion"):
        read_motion(asf)
    # An AMC take without a skeleton: where to put it, in the terms of a command-line user.
    lone = tmp_path / "alone"
    lone.mkdir()
    amc = write(lone, "take.amc", ":FULLY-SPECIFIED\n:DEGREES\n1\nroot 0 0 0 0 0 0\n")
    with pytest.raises(MotionFormatError, match="cannot find its ASF skeleton: put it next to the take as "
                                                "take.asf"):
        read_motion(amc)


@pytest.mark.parametrize("path", ["xsens_putaside_box/p5.csv", "cmu_bvh/115_06.bvh",
                                  "hdm05/squat1Reps/HDM_dg_squat1Reps_025_120.amc"])
def test_calibrated_soles_lie_on_the_floor(path):
    """Foot geometry from the foot and toe segments: standing at frame 0, the modelled sole
    corners are on the floor and the foot is 0.15-0.17 of the stature long."""
    m = read_motion(data(*path.split("/")))
    c = calibrate(m)
    length = np.ptp(c.foot_corners_local[:, 0])
    assert 0.12 < length / c.stature < 0.17
    for side in ("left", "right"):
        corners = m.position(f"{side}_foot")[0] + quat.rotate(m.orientation(f"{side}_foot")[0], c.foot_corners_local)
        assert np.all(np.abs(corners[:, 2]) < 0.03), (side, corners[:, 2])


def test_a_damaged_format_member_of_a_native_npz_is_a_motion_format_error(tmp_path):
    # Before: zlib.error / BadZipFile escaped from the first data["format"] read, which sat
    # outside the try that turns damaged members into a MotionFormatError.
    path = tmp_path / "m.npz"
    skeleton.standard_body_motion(np.arange(3) * 0.01).save_npz(path)
    import zipfile
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo("format.npy")
    raw = bytearray(path.read_bytes())
    head = info.header_offset
    start = (head + 30 + int.from_bytes(raw[head + 26:head + 28], "little")
             + int.from_bytes(raw[head + 28:head + 30], "little"))
    size = info.compress_size
    for k in range(start + 2, start + size - 2):
        raw[k] ^= 0x5A
    path.write_bytes(bytes(raw))
    with pytest.raises(MotionFormatError, match="damaged") as e:
        read_motion(path)
    assert str(e.value).startswith(f"{path}: ") and "\n" not in str(e.value)


def test_a_bvh_offset_before_any_joint_is_a_located_error(tmp_path):
    # Before: IndexError (stack[-1] of an empty joint stack).
    p = write(tmp_path, "offset.bvh", "HIERARCHY\nOFFSET 0 0 0\n")
    with pytest.raises(MotionFormatError, match="OFFSET outside a joint") as e:
        read_motion(p)
    assert_located(e, p, 2)


def _asf(bone_b_name="name b", hierarchy="root a\n    a b"):
    bone = "  begin\n    {}\n    direction 0 1 0\n    length 1\n    axis 0 0 0 XYZ\n  end\n"
    return (":units\n  length 1.0\n  angle deg\n:root\n  order TX TY TZ RX RY RZ\n  axis XYZ\n"
            "  orientation 0 0 0\n:bonedata\n" + bone.format("name a") + bone.format(bone_b_name)
            + f":hierarchy\n  begin\n    {hierarchy}\n  end\n")


def test_a_small_hand_written_asf_reads(tmp_path):
    assert read_asf(write(tmp_path, "ok.asf", _asf())).order() == ["a", "b"]


def test_an_asf_name_without_value_is_a_located_error(tmp_path):
    # Before: IndexError (tok[1] of a bare "name" line).
    p = write(tmp_path, "name.asf", _asf(bone_b_name="name"))
    with pytest.raises(MotionFormatError, match="'name' needs exactly one bone name") as e:
        read_asf(p)
    assert_located(e, p, 16)


@pytest.mark.parametrize("hierarchy, message", [
    ("root a", r"bones \['b'\] are not connected to the root"),
    ("root a\n    a b\n    b a", "appears more than once"),
])
def test_asf_bones_outside_the_hierarchy_or_in_a_cycle_are_refused(tmp_path, hierarchy, message):
    # Before: a bone missing from the :hierarchy gave a KeyError in forward kinematics
    # (read_motion(take.amc, skeleton=asf)), and a cycle looped forever in order().
    p = write(tmp_path, "hier.asf", _asf(hierarchy=hierarchy))
    with pytest.raises(MotionFormatError, match=message) as e:
        read_asf(p)
    assert_located(e, p)


def test_an_mvnx_frame_nested_in_a_frame_is_a_located_error(tmp_path):
    # Before: a plain ValueError from list.remove (the inner frame is no child of <frames>).
    from retarget.readers import write_mvnx
    path = tmp_path / "nested.mvnx"
    write_mvnx(skeleton.standard_body_motion(np.arange(3) * 0.01), path)
    text = path.read_text()
    first_end = text.find("</frame>", text.find('type="normal"'))
    second_end = text.find("</frame>", first_end + 1)
    nested = (text[:first_end] + text[first_end + len("</frame>"):second_end + len("</frame>")]
              + "</frame>" + text[second_end + len("</frame>"):])
    path.write_text(nested)
    line = nested[:nested.find("<frame", nested.find('type="normal"') + 1)].count("\n") + 1
    with pytest.raises(MotionFormatError, match="<frame> inside another <frame>") as e:
        read_motion(path)
    assert_located(e, path, line)


def test_a_motion_whose_time_goes_backwards_is_refused_naming_file_and_sample(tmp_path, capsys):
    """`teleop retarget` used to retarget such a clip (and `train` refused it later, deep in the
    ProMP): every reader now refuses it where the motion is made."""
    from conftest import SYNTHETIC, error_line, run_cli

    m = read_motion(SYNTHETIC / "squat" / "squat_0.npz")
    m.times[6] = m.times[4]                  # a glitch in the producer's clock
    m.save_npz(tmp_path / "glitch.npz")
    with pytest.raises(MotionFormatError, match=r"sample times must increase, but sample 6 is at"):
        read_motion(tmp_path / "glitch.npz")
    rc, _, err = run_cli(capsys, "retarget", tmp_path / "glitch.npz", "--out", tmp_path / "out")
    assert rc == 1
    assert "glitch.npz: sample times must increase" in error_line(err)
    with pytest.raises(MotionFormatError, match="finite"):
        HumanMotion(np.array([0.0, np.nan]), ("pelvis",), np.zeros((2, 1, 3)), np.ones((2, 1, 4)))
