"""Bugs that the mypy pass over retarget/ brought to light (each test failed before its fix)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from retarget.envelope import ReferenceEnvelope
from retarget.human import MotionFormatError
from retarget.readers.asf_amc import read_asf
from retarget.readers.bvh import read_bvh_file


def test_first_violation_names_a_frame_on_the_bound_as_violation_does():
    # Before: first_violation tested with np.hypot and violation with math.hypot, which
    # differ in the last bit: a CoM on the bound gave (1, None), a frame without a reason.
    x, y = 1.4645848756958895, 0.3086946964120938
    assert np.hypot(x, y) > math.hypot(x, y)          # by one bit: the bound lies between them
    envelope = ReferenceEnvelope(reach_m=2.2, low_m=-0.5, high_m=2.2, walk_m=math.hypot(x, y))
    values = np.zeros((3, 20))
    values[:, [2, 5, 8]] = 0.5
    values[1, :2] = x, y
    outside = envelope.first_violation(values)
    assert outside is not None and outside == (1, envelope.violation(values[1]))
    assert outside[1].startswith("com x, y")


def test_the_envelope_test_of_a_huge_value_is_quiet():
    envelope = ReferenceEnvelope(reach_m=2.2, low_m=-0.5, high_m=2.2)
    flat = np.zeros(20)
    flat[:2] = 1.7e308
    with np.errstate(all="raise"):
        assert envelope.violation(flat).startswith("com x, y inf m")


_BVH = """HIERARCHY
ROOT Hips
{{
  OFFSET 0 0 0
  CHANNELS 3 Xrotation Yrotation Zrotation
  End Site
  {{
{inside}
  }}
}}
MOTION
Frames: 1
Frame Time: 0.01
0 0 0
"""


@pytest.mark.parametrize("inside, message", [
    # Before: KeyError: None (a joint offset looked up under the End Site's stack entry).
    ("    JOINT X\n    {\n    }\n    OFFSET 0 0 1", "JOINT inside an End Site"),
    # Before: read as a second, parentless root joint X (despite "several ROOTs are not supported").
    ("    OFFSET 0 0 1\n    JOINT X\n    {\n      OFFSET 0 0 1\n    }", "JOINT inside an End Site"),
    # Before: KeyError: None.
    ("    {\n    }\n    OFFSET 0 0 1", "unexpected '{' inside an End Site"),
])
def test_a_bvh_joint_or_brace_inside_an_end_site_is_a_located_error(tmp_path, inside, message):
    path = tmp_path / "end.bvh"
    path.write_text(_BVH.format(inside=inside))
    with pytest.raises(MotionFormatError, match=message) as e:
        read_bvh_file(path)
    line = next(k for k, text in enumerate(path.read_text().splitlines(), start=1)
                if text.strip() in ("JOINT X", "{") and k > 7)
    assert str(e.value).startswith(f"{path}:{line}: ")


def test_a_bvh_end_site_still_reads(tmp_path):
    path = tmp_path / "ok.bvh"
    path.write_text(_BVH.format(inside="    OFFSET 0 0 1"))
    hips = read_bvh_file(path).joints["Hips"]
    assert np.array_equal(hips.end_site, [0.0, 0.0, 1.0]) and list(read_bvh_file(path).joints) == ["Hips"]


@pytest.mark.parametrize("axis", ["axis XYQ", "axis XY", "axis"])
def test_an_asf_root_axis_that_is_not_an_order_is_a_located_error(tmp_path, axis):
    # Before: "XYQ" read and failed in forward kinematics with KeyError 'Q', "XY" silently
    # dropped the third orientation angle, a bare "axis" was an IndexError.
    bone = "  begin\n    {}\n    direction 0 1 0\n    length 1\n    axis 0 0 0 XYZ\n  end\n"
    path = tmp_path / "root.asf"
    path.write_text(":units\n  length 1.0\n  angle deg\n:root\n  order TX TY TZ RX RY RZ\n"
                    f"  {axis}\n  orientation 0 0 0\n:bonedata\n" + bone.format("name a")
                    + ":hierarchy\n  begin\n    root a\n  end\n")
    with pytest.raises(MotionFormatError, match="root axis needs an order like XYZ") as e:
        read_asf(path)
    assert str(e.value).startswith(f"{path}:6: ")
