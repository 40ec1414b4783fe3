"""Set-point trajectories for the tuned joints: recorded motions played back, and step tests.

Recorded motions. The reference plays a "fast dance animation" (§4.1, step 3); we play the
product's synthetic human demonstrations (``datasets/synthetic``, HumanMotion npz) or any
motion file :func:`retarget.readers` can read (Xsens, HDM05), mapped onto the left arm:

* shoulder pitch / roll from the upper arm's swing in the chest (T8) frame: flexion
  atan2(d_x, −d_z) and abduction atan2(d_y, |d_xz|) of the upper-arm direction d (HumanMotion
  frames: x forward, y left, z up). iCub signs measured on the model: a positive
  l_shoulder_pitch moves the hand backward, a positive l_shoulder_roll moves it outward, so
  pitch = −flexion, roll = +abduction;
* shoulder yaw, elbow and forearm pronation from :func:`retarget.postures.arm_angles` (the
  same signals the retargeted references carry; signs from ``icub.toml`` reference_joints);
* each joint moves by the human's change from the first frame around the robot's home
  posture, clipped 3° inside the joint limits (the human's N-pose start maps to home).

Samples are linearly interpolated to the physics rate (a stiff controller should not receive a
20 ms staircase). ``speed`` > 1 plays faster (the reference's time-stretch, inverted).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from retarget import postures, quat
from retarget.human import HumanMotion

LIMIT_MARGIN = np.radians(3.0)
#: Synthetic demonstrations that move the left arm: (evaluation, training) file names.
EVALUATION_MOTIONS = ("side_reach/side_reach_1.npz", "put_aside/put_aside_1.npz", "pick_floor/pick_floor_1.npz")
TRAINING_MOTIONS = ("side_reach/side_reach_0.npz", "put_aside/put_aside_2.npz", "pick_floor/pick_floor_2.npz")
SYNTHETIC_DIR = Path(__file__).resolve().parents[2] / "datasets" / "synthetic"


def human_left_arm_angles(motion: HumanMotion) -> np.ndarray:
    """(T, 5) anatomical left-arm angles [rad]: flexion, abduction, internal rotation,
    elbow flexion, pronation (see the module docstring)."""
    seg = {name: i for i, name in enumerate(motion.segment_names)}
    need = ("t8", "left_shoulder", "left_upper_arm", "left_forearm", "left_hand")
    missing = [s for s in need if s not in seg]
    if missing:
        raise ValueError(f"{motion.source}: motion lacks segments {missing}")
    o, p = motion.orientations, motion.positions
    d = quat.rotate(quat.conj(o[:, seg["t8"]]), p[:, seg["left_forearm"]] - p[:, seg["left_upper_arm"]])
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    flexion = np.arctan2(d[:, 0], -d[:, 2])
    abduction = np.arctan2(d[:, 1], np.hypot(d[:, 0], d[:, 2]))
    rest = postures.arm_angles(o[:, seg["left_shoulder"]], o[:, seg["left_upper_arm"]], o[:, seg["left_forearm"]],
                               o[:, seg["left_hand"]], "left")
    return np.column_stack([flexion, abduction, np.unwrap(rest, axis=0)])


#: joint = home + sign × (anatomical angle − its first value), in LEFT_ARM order.
JOINT_SIGNS = np.array([-1.0, 1.0, 1.0, 1.0, 1.0])


def arm_setpoints(motion: HumanMotion, home: np.ndarray, lower: np.ndarray, upper: np.ndarray,
                  dt: float = 0.001, speed: float = 1.0) -> np.ndarray:
    """(T, 5) left-arm set-points [rad] at the physics rate ``dt`` [s] from a human motion.

    Args:
        home, lower, upper: (5,) home angles and joint limits [rad] of LEFT_ARM.
        speed: playback speed factor (2: twice as fast).
    """
    angles = human_left_arm_angles(motion)
    joints = home + JOINT_SIGNS * (angles - angles[0])
    joints = np.clip(joints, lower + LIMIT_MARGIN, upper - LIMIT_MARGIN)
    t = (motion.times - motion.times[0]) / speed
    grid = np.arange(0.0, t[-1], dt)
    return np.column_stack([np.interp(grid, t, joints[:, j]) for j in range(joints.shape[1])])


def read_human_motion(path, rate_hz: float = 100.0) -> HumanMotion:
    """A motion file (our .npz, or any format :func:`retarget.readers.read_motion` reads;
    ``rate_hz`` for Xsens CSV files). Raises ValueError / OSError naming the file."""
    from retarget.readers import read_motion

    path = Path(path)
    if path.suffix == ".npz":
        return HumanMotion.load_npz(path)
    return read_motion(path, **({"rate_hz": rate_hz} if path.suffix == ".csv" else {}))


def load_motion_setpoints(paths, home, lower, upper, dt: float = 0.001, speed: float = 1.0,
                          max_seconds: float | None = None, rate_hz: float = 100.0) -> np.ndarray:
    """Set-points of several motion files played one after the other: (T, 5) [rad].

    Each motion starts at home (see :func:`arm_setpoints`), and each synthetic demonstration
    ends in its start pose, so the concatenation has no jumps. ``max_seconds`` trims each
    motion (for quick runs). ``rate_hz`` is the sampling rate of Xsens CSV files, which do
    not state it (the shared data's README suggests 100 Hz).
    """
    parts = []
    for path in paths:
        sp = arm_setpoints(read_human_motion(path, rate_hz), home, lower, upper, dt, speed)
        if max_seconds is not None:
            sp = sp[: int(round(max_seconds / dt))]
        parts.append(sp)
    return np.concatenate(parts)


def step_test(home: np.ndarray, lower: np.ndarray, upper: np.ndarray, dt: float = 0.001,
              step_deg: float = 45.0, pause_s: float = 2.0, lead_s: float = 0.5) -> np.ndarray:
    """The reference's step animation (§4.1, step 4): one ``step_deg`` step per joint, one
    joint after the other, with ``pause_s`` between steps, after ``lead_s`` at home.

    Each joint steps up if home + step fits inside its limits (with the margin), else down,
    and stays at the new angle. Returns (T, n) set-points [rad] at the physics rate.
    """
    if not (step_deg > 0 and pause_s > 0 and lead_s > 0):
        # A zero step has no set-point change: every step metric would silently be null.
        raise ValueError(f"step_deg, pause_s and lead_s must be > 0, got {step_deg}, {pause_s}, {lead_s}")
    n = len(home)
    step = np.radians(step_deg)
    lead, pause = int(round(lead_s / dt)), int(round(pause_s / dt))
    sp = np.tile(home, (lead + n * pause, 1))
    for j in range(n):
        sign = 1.0 if home[j] + step <= upper[j] - LIMIT_MARGIN else -1.0
        if home[j] + sign * step < lower[j] + LIMIT_MARGIN:
            raise ValueError(f"joint {j}: a {step_deg}° step does not fit inside its limits")
        sp[lead + j * pause:, j] = home[j] + sign * step
    return sp
