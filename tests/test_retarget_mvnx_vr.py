"""MVNX (write + streaming read) and VR tracker files."""

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from conftest import shared_data

from retarget import quat, skeleton
from retarget.anthropometry import whole_body_com
from retarget.human import HumanMotion, MotionFormatError
from retarget.mapping import retarget_motion
from retarget.postures import arm_local_rotations
from retarget.readers import read_motion, read_mvnx, read_vr_trackers, write_mvnx, write_vr_csv
from retarget.readers.vr_trackers import OPENVR_TO_Z_UP
from retarget.references import SIGNAL_SLICES
from retarget.robot_target import RobotTarget


def moving_body(n=40, seed=0) -> HumanMotion:
    """Standard body: N-pose at frame 0, then random arm/trunk/head motion."""
    rng = np.random.default_rng(seed)
    t = np.linspace(0, 1, n)[:, None]
    local = {"t8": quat.from_euler_yxz(0.3 * t * rng.uniform(-1, 1, 3)),
             "head": quat.from_euler_yxz(0.5 * t * rng.uniform(-1, 1, 3))}
    for side in ("left", "right"):
        a = arm_local_rotations(0.0, 0.0, 0.0, side)
        a[f"{side}_upper_arm"] = quat.from_axis_angle(np.array([0.3, 1.0, 0.2]), -1.2 * t[:, 0])
        a[f"{side}_forearm"] = quat.about_y(-1.5 * t[:, 0])
        a[f"{side}_hand"] = quat.about_z(0.8 * t[:, 0])
        local.update(a)
    root = np.c_[0.1 * t, 0.05 * t, 0.99 - 0.1 * t]
    m = skeleton.standard_body_motion(np.arange(n) / 60.0, local, root)
    m.com = whole_body_com(m)
    return m


def same_rotations(a, b, atol=1e-7):
    np.testing.assert_allclose(np.abs(np.sum(a * b, axis=-1)), 1.0, atol=atol)


# ------------------------------------------------------------------------------ MVNX
def test_mvnx_round_trip(tmp_path):
    m = moving_body()
    write_mvnx(m, tmp_path / "take.mvnx")
    back = read_motion(tmp_path / "take.mvnx")
    assert back.segment_names == m.segment_names and len(back) == len(m)
    np.testing.assert_allclose(back.positions, m.positions, atol=1e-8)
    same_rotations(back.orientations, m.orientations)
    np.testing.assert_allclose(back.times, m.times - m.times[0], atol=5e-4)   # ms in the file
    np.testing.assert_allclose(back.com, m.com, atol=1e-8)
    assert back.rate_hz == pytest.approx(60.0, rel=1e-3)
    assert back.meta["mvn_arm_frames"] == {"left": "tpose", "right": "tpose"}


def test_mvnx_writer_follows_mvn_conventions(tmp_path):
    """Namespaced <mvnx>, segments in MVN order, calibration frame, T-pose arm frames."""
    m = moving_body(n=3)
    path = tmp_path / "take.mvnx"
    write_mvnx(m, path)
    root = ET.parse(path).getroot()
    ns = {"m": "http://www.xsens.com/mvn/mvnx"}
    assert root.tag == "{http://www.xsens.com/mvn/mvnx}mvnx"
    labels = [s.get("label") for s in root.iterfind("m:subject/m:segments/m:segment", ns)]
    assert labels[:5] == ["Pelvis", "L5", "L3", "T12", "T8"] and len(labels) == 23
    frames = root.findall("m:subject/m:frames/m:frame", ns)
    assert [f.get("type") for f in frames] == ["identity", "normal", "normal", "normal"]
    # In the file, the right forearm lies along -y of the right upper arm (MVN's T-pose frames).
    f = frames[1]
    q = np.array(f.find("m:orientation", ns).text.split(), float).reshape(-1, 4)
    p = np.array(f.find("m:position", ns).text.split(), float).reshape(-1, 3)
    ua, fa = labels.index("RightUpperArm"), labels.index("RightForeArm")
    local = quat.rotate(quat.conj(q[ua]), p[fa] - p[ua])
    assert local[1] < -0.99 * np.linalg.norm(local)


def test_mvnx_round_trip_of_real_xsens_data(tmp_path):
    src = shared_data("xsens_putaside_box", "p2.csv")
    m = read_motion(src)
    write_mvnx(m, tmp_path / "p2.mvnx")
    back = read_mvnx(tmp_path / "p2.mvnx")
    np.testing.assert_allclose(back.positions, m.positions, atol=1e-8)
    same_rotations(back.orientations, m.orientations)
    np.testing.assert_allclose(retarget_motion(back, RobotTarget.approximate_icub()).values,
                               retarget_motion(m, RobotTarget.approximate_icub()).values, atol=1e-6)


def test_mvnx_streams_frame_by_frame(tmp_path, monkeypatch):
    """The reader frees each frame: the <frames> element never holds more than one."""
    m = moving_body(n=30)
    write_mvnx(m, tmp_path / "t.mvnx")
    seen = []
    real = ET.XMLPullParser

    class Spy(real):
        def read_events(self):
            for event, elem in super().read_events():
                if event == "end" and elem.tag.endswith("}frame"):
                    seen.append(elem)
                yield event, elem

    monkeypatch.setattr(ET, "XMLPullParser", Spy)
    back = read_mvnx(tmp_path / "t.mvnx")
    assert len(back) == 30 and len(seen) == 31
    assert all(len(e) == 0 for e in seen)           # cleared after reading


def broken(tmp_path, name, edit) -> Path:
    m = moving_body(n=5)
    path = tmp_path / name
    write_mvnx(m, path)
    lines = path.read_text().splitlines()
    path.write_text("\n".join(edit(lines)) + "\n")
    return path


def located(exc, path, line=None):
    msg = str(exc.value)
    assert str(path) in msg, msg
    if line is not None:
        assert re.search(rf":{line}\b", msg), msg


def test_mvnx_errors_name_file_and_line(tmp_path):
    cut = broken(tmp_path, "cut.mvnx", lambda ls: ls[: len(ls) // 2])
    with pytest.raises(MotionFormatError, match="malformed XML") as e:
        read_motion(cut)
    located(e, cut)
    n_lines = len(cut.read_text().splitlines())
    assert re.search(rf":{n_lines + 1}\b|:{n_lines}\b", str(e.value))

    def short_orientation(ls):
        k = next(i for i, line in enumerate(ls) if 'type="normal"' in line) + 1
        ls[k] = ls[k].replace("<orientation>1 ", "<orientation>")
        return ls
    short = broken(tmp_path, "short.mvnx", short_orientation)
    line = next(i for i, s in enumerate(short.read_text().splitlines(), 1) if 'type="normal"' in s) + 1
    with pytest.raises(MotionFormatError, match="expected 92") as e:
        read_motion(short)
    located(e, short, line)

    def alien(ls):
        return [s.replace('label="Head"', 'label="Tail"') for s in ls]
    with pytest.raises(MotionFormatError, match="Tail") as e:
        read_motion(broken(tmp_path, "alien.mvnx", alien))

    other = tmp_path / "other.mvnx"
    other.write_text('<?xml version="1.0"?>\n<svg></svg>\n')
    with pytest.raises(MotionFormatError, match="not <mvnx>") as e:
        read_motion(other)
    located(e, other, 2)


# ------------------------------------------------------------------------ VR trackers
def sparse(m: HumanMotion, segs=("head", "left_hand", "right_hand", "pelvis")) -> HumanMotion:
    idx = [m.index(s) for s in segs]
    return HumanMotion(m.times, segs, m.positions[:, idx], m.orientations[:, idx], source="sparse")


def test_vr_csv_round_trip(tmp_path):
    m = sparse(moving_body())
    write_vr_csv(m, tmp_path / "vr.csv")
    back = read_motion(tmp_path / "vr.csv", npose_frame=None)
    assert back.segment_names == ("head", "left_hand", "right_hand", "pelvis")
    np.testing.assert_allclose(back.positions, m.positions, atol=1e-8)
    same_rotations(back.orientations, m.orientations)


def device_frames(m: HumanMotion, yaw: float, seed: int = 1):
    """What a VR system would log: OpenVR axes, room turned by yaw, arbitrary device frames."""
    rng = np.random.default_rng(seed)
    turn = quat.about_z(yaw)
    c_inv = quat.from_matrix(OPENVR_TO_Z_UP.T)
    mount = quat.normalize(rng.normal(size=(len(m.segment_names), 4)))   # tracker-in-segment
    pos = quat.rotate(c_inv, quat.rotate(turn, m.positions))
    ori = quat.mul(quat.mul(c_inv, quat.mul(turn, m.orientations)), mount)
    return pos, ori


def test_vr_openvr_axes_and_npose_calibration_in_json(tmp_path):
    m = sparse(moving_body())
    pos, ori = device_frames(m, yaw=np.radians(70))
    doc = {"format": "vr-trackers-v1", "axes": "openvr", "samples": [
        {"t": float(m.times[k]), **{s: {"p": pos[k, i].tolist(), "q": ori[k, i].tolist()}
                                    for i, s in enumerate(m.segment_names)}} for k in range(len(m))]}
    (tmp_path / "vr.json").write_text(json.dumps(doc, indent=1))
    back = read_motion(tmp_path / "vr.json")                 # npose_frame=0: frame 0 is the N-pose
    np.testing.assert_allclose(back.positions, m.positions, atol=1e-9)
    same_rotations(back.orientations, m.orientations, atol=1e-9)
    assert back.meta["initial_heading_deg"] == pytest.approx(70.0)


def test_vr_motion_retargets_to_a_sparse_reference_set(tmp_path):
    m = sparse(moving_body(), segs=("head", "left_hand", "right_hand"))
    write_vr_csv(m, tmp_path / "vr.csv")
    traj = retarget_motion(read_vr_trackers(tmp_path / "vr.csv"), RobotTarget.approximate_icub())
    assert traj.valid[SIGNAL_SLICES["right_hand"]].all() and not traj.valid[SIGNAL_SLICES["torso"]].any()
    assert np.all(np.isfinite(traj.values))
    assert np.ptp(traj.values[:, SIGNAL_SLICES["right_hand"]], axis=0).max() > 0.05


def test_vr_errors_name_file_and_line(tmp_path):
    m = sparse(moving_body(n=6))
    write_vr_csv(m, tmp_path / "ok.csv")
    lines = (tmp_path / "ok.csv").read_text().splitlines()
    bad = list(lines)
    bad[5] = bad[5].replace(",", ",nan?", 1)
    p = tmp_path / "bad.csv"
    p.write_text("\n".join(bad))
    with pytest.raises(MotionFormatError, match="not a number") as e:
        read_vr_trackers(p)
    located(e, p, 6)
    no_head = [",".join(c for c in ln.split(",")) for ln in lines]
    no_head[2] = no_head[2].replace("head_qz", "head_qq")
    p2 = tmp_path / "hdr.csv"
    p2.write_text("\n".join(no_head))
    with pytest.raises(MotionFormatError, match="head_qq") as e:
        read_vr_trackers(p2)
    located(e, p2, 3)
    j = tmp_path / "bad.json"
    j.write_text('{"format": "vr-trackers-v1",\n "samples": [\n {"t": 0,}\n]}')
    with pytest.raises(MotionFormatError, match="malformed JSON") as e:
        read_motion(j)
    located(e, j, 3)
    hands_only = tmp_path / "hands.csv"
    hands_only.write_text("t," + ",".join(f"left_hand_{x}" for x in ("px", "py", "pz", "qw", "qx", "qy", "qz"))
                          + "\n0,0,0,1,1,0,0,0\n")
    with pytest.raises(MotionFormatError, match="required"):
        read_motion(hands_only)


@pytest.mark.parametrize("path", ["hdm05/grabHighR/HDM_bd_grabHighR_001_120.amc", "cmu_bvh/115_10.bvh"])
def test_head_hands_pelvis_trackers_approximate_the_full_body_mapping(path):
    """Real motion reduced to VR trackers: hands within 4 cm of the full-body mapping."""
    src = shared_data(path)
    m = read_motion(src)
    target = RobotTarget.approximate_icub()
    full = retarget_motion(m, target)
    vr = retarget_motion(sparse(m), target)
    for name, tol in (("left_hand", 0.04), ("right_hand", 0.04), ("waist_height", 0.01)):
        sl = SIGNAL_SLICES[name]
        assert np.abs(vr.values[:, sl] - full.values[:, sl]).max() < tol, name
    pitch = SIGNAL_SLICES["torso"].start
    assert np.abs(vr.values[:, pitch] - full.values[:, pitch]).max() < 0.25
