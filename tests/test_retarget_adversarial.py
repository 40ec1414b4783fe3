"""Adversarial checks of the retargeting on the real recorded takes (../shared/data).

Each test reads one real take and changes it the way a different recording of the same
motion would (other units, a taller or shorter performer, left and right swapped), then
checks that the robot references change only as the mapping promises.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from conftest import shared_data

from retarget import HumanMotion, RobotTarget, read_motion
from retarget.mapping import retarget_motion
from retarget.references import SIGNAL_SLICES

SQUAT_BD = "squat1Reps/HDM_bd_squat1Reps_001_120.amc"


def _hdm05_squat() -> tuple[Path, Path]:
    root = shared_data("hdm05", needs=(SQUAT_BD, "skeletons/HDM_bd.asf"))
    return root / SQUAT_BD, root / "skeletons" / "HDM_bd.asf"


def _asf_in_radians(text: str) -> str:
    """The same ASF skeleton with ``:units angle rad`` and its bone axes in radians."""
    out = []
    for line in text.splitlines():
        tok = line.split()
        if tok[:1] == ["angle"] and tok[1:] == ["deg"]:
            line = "  angle rad"
        elif tok[:1] == ["axis"] and len(tok) == 5:
            line = "     axis " + " ".join(f"{math.radians(float(v)):.15g}" for v in tok[1:4]) + " " + tok[4]
        out.append(line)
    return "\n".join(out) + "\n"


def test_amc_degrees_header_wins_over_an_asf_in_radians(tmp_path: Path) -> None:
    # An AMC states its own angle unit (":DEGREES" / ":RADIANS", Acclaim spec). The reader
    # honoured ":RADIANS" only: the HDM05 take, unchanged (":DEGREES"), under its skeleton
    # rewritten with ``angle rad`` had its degrees read as radians and was refused as a
    # tracking glitch ("left_toe moves 1.01 m in 8.33 ms").
    amc, asf = _hdm05_squat()
    assert ":DEGREES" in amc.read_text(encoding="latin-1")
    (tmp_path / "take.asf").write_text(_asf_in_radians(asf.read_text(encoding="latin-1")), encoding="latin-1")
    (tmp_path / "take.amc").write_bytes(amc.read_bytes())
    original = read_motion(amc)
    in_radians = read_motion(tmp_path / "take.amc")
    assert np.allclose(in_radians.positions, original.positions, atol=1e-9)
    assert np.allclose(np.abs(np.sum(in_radians.orientations * original.orientations, axis=-1)), 1.0, atol=1e-9)


def _scaled(m: HumanMotion, s: float) -> HumanMotion:
    return HumanMotion(m.times, m.segment_names, s * m.positions, m.orientations,
                       None if m.com is None else s * m.com, rate_hz=m.rate_hz, source=m.source, meta=m.meta)


def _mirrored(m: HumanMotion) -> HumanMotion:
    """Left and right swapped: y negated, segments renamed, rotations reflected in x-z."""
    names = list(m.segment_names)
    swap = {n: n.replace("left", "@").replace("right", "left").replace("@", "right") for n in names}
    perm = [names.index(swap[n]) for n in names]
    positions = m.positions[:, perm] * np.array([1.0, -1.0, 1.0])
    orientations = m.orientations[:, perm] * np.array([1.0, -1.0, 1.0, -1.0])
    return HumanMotion(m.times, m.segment_names, positions, orientations, source=m.source, rate_hz=m.rate_hz)


def _mirror_references(values: np.ndarray) -> np.ndarray:
    out = values.copy()
    for a, b in (("left_hand", "right_hand"), ("left_arm", "right_arm")):
        out[:, SIGNAL_SLICES[a]], out[:, SIGNAL_SLICES[b]] = values[:, SIGNAL_SLICES[b]], values[:, SIGNAL_SLICES[a]]
    sign = np.ones(values.shape[1])
    sign[[SIGNAL_SLICES["com_xy"].start + 1, SIGNAL_SLICES["left_hand"].start + 1,
          SIGNAL_SLICES["right_hand"].start + 1, SIGNAL_SLICES["neck"].start + 1,
          SIGNAL_SLICES["torso"].start + 1, SIGNAL_SLICES["torso"].start + 2]] = -1.0   # y, yaws, roll
    return out * sign


@pytest.mark.parametrize("scale", [0.8, 1.25])
def test_taller_or_shorter_performer_gives_the_same_references(scale: float) -> None:
    # Every displacement is scaled by robot / human length (Eq. 2.11), the CoM by offsets
    # normalised on the feet (Eqs. 2.2-2.10), postures are angles: a performer 0.8 or 1.25
    # times the size doing the same motion maps onto the same references.
    amc, _ = _hdm05_squat()
    motion = read_motion(amc)
    target = RobotTarget.approximate_icub()
    base = retarget_motion(motion, target).values
    assert np.allclose(retarget_motion(_scaled(motion, scale), target).values, base, atol=1e-9)


def test_mirrored_take_mirrors_the_references() -> None:
    # The performer's left and right swapped: the hands and arms swap, y, the yaws and the
    # torso roll change sign (approximate_icub is symmetric to 0.1 mm at its start).
    amc, _ = _hdm05_squat()
    motion = read_motion(amc)
    target = RobotTarget.approximate_icub()
    base = retarget_motion(motion, target).values
    mirrored = retarget_motion(_mirrored(motion), target).values
    expected = _mirror_references(base)
    assert np.allclose(mirrored - mirrored[0], expected - expected[0], atol=1e-6)


def test_a_later_calibration_frame_maps_onto_the_initial_posture() -> None:
    # Eq. 2.1 at the calibration frame: q_R = q_R^0. The offsets were unwrapped from the
    # take's first frame, so with the right upper arm twisted once round before frame 270
    # (overhead, throwing) that frame mapped to r.shoulder yaw q_R^0 + 2 pi.
    root = shared_data("hdm05", needs=("throwBasketball/HDM_dg_throwBasketball_008_120.amc",
                                       "skeletons/HDM_dg.asf"))
    motion = read_motion(root / "throwBasketball" / "HDM_dg_throwBasketball_008_120.amc")
    target = RobotTarget.approximate_icub()
    initial = target.initial_references().to_flat()
    values = retarget_motion(motion, target, frame=270).values
    postures = slice(SIGNAL_SLICES["left_arm"].start, SIGNAL_SLICES["torso"].stop)
    assert np.allclose(values[270, postures], initial[postures], atol=1e-9)
    # Still continuous in time (no 2 pi step anywhere), as from frame 0.
    from_start = retarget_motion(motion, target).values
    assert np.abs(np.diff(values[:, postures], axis=0)).max() < np.pi
    shift = (values - from_start)[:, postures]
    assert np.allclose(shift, shift[0], atol=1e-6)   # the same offsets, up to whole turns


def test_plotted_zmp_correction_does_not_depend_on_the_take_rate() -> None:
    # teleop retarget plots the CoM "after the ZMP correction (what the robot tracks)". The
    # station filters every 0.01 s; the plot ran the filter at the references' own rate, so
    # a take read at --rate-hz 2 stepped it every 0.5 s, where its smoothing (4 rad/s,
    # explicit Euler) is unstable: 8 cm from the same references sampled at 100 Hz.
    from pathlib import Path as _Path

    from retarget import ReferenceTrajectory
    from teleop.retarget_cli import corrected_com
    from teleop.takes import read_motion_file

    root = shared_data("hdm05", needs=("depositFloorR/HDM_bd_depositFloorR_001_120.amc", "skeletons/HDM_bd.asf"))
    motion = read_motion_file(_Path(root / "depositFloorR" / "HDM_bd_depositFloorR_001_120.amc"), 2.0)
    target = RobotTarget.approximate_icub()
    slow = retarget_motion(motion.slice(80, 120), target)          # 40 samples, 0.5 s apart (20 s)
    fine_times = np.arange(0.0, slow.times[-1] + 1e-9, 0.01)
    fine = ReferenceTrajectory(fine_times, slow.interpolate(fine_times))
    polygon, height = target.support_polygon, target.com_height
    at_slow = corrected_com(slow, polygon, height, 0.03)
    at_fine = corrected_com(fine, polygon, height, 0.03)
    same = np.round(slow.times / 0.01).astype(int)
    assert np.abs(at_slow - at_fine[same]).max() < 1e-3
