"""Review of the file replay, ``teleop retarget`` and tools/eval_retarget_execute.py: each test
is a defect found in review (failed before its fix)."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import numpy as np
import pytest

from retarget.human import HumanMotion
from teleop.cli import main
from teleop.inputs.replay import RETURN_MIN_S, FileReplay, with_return_to_start
from teleop.inputs.synthetic import VirtualClock

REPO = Path(__file__).resolve().parents[1]
SQUAT = REPO / "datasets" / "synthetic" / "squat" / "squat_0.npz"


def _numbered(motion: HumanMotion) -> HumanMotion:
    """The motion with the pelvis x set to the frame number (to see which frame a poll gave)."""
    positions = motion.positions.copy()
    positions[:, motion.index("pelvis"), 0] = np.arange(len(motion))
    return HumanMotion(motion.times, motion.segment_names, positions, motion.orientations, motion.com,
                       "numbered", motion.rate_hz)


@pytest.mark.parametrize("loop", [False, True])
def test_replay_polled_at_the_frames_own_times_returns_each_frame_when_due(loop):
    """A clock that reaches a frame's time exactly (10.0 + 0.02 - 10.0 = 0.01999...) used to
    get the frame before it: the whole replay ran one frame period late (and, past the loop
    seam, skipped every other frame)."""
    motion = _numbered(HumanMotion.load_npz(SQUAT))
    played = with_return_to_start(motion) if loop else motion    # a loop returns to the start between laps
    n = len(played)
    clock = VirtualClock(10.0)
    replay = FileReplay(motion, clock=clock, loop=loop)
    frames, nows = [], []
    for _ in range(2 * n if loop else n):
        frames.append(replay.poll())
        nows.append(clock())
        clock.advance(1.0 / motion.rate_hz)
    assert all(frame is not None for frame in frames)
    pelvis_x = [pose["pelvis"][0][0] for _, pose in frames]
    expected = played.positions[:, played.index("pelvis"), 0]
    assert np.allclose(pelvis_x, np.tile(expected, 2) if loop else expected)
    assert np.allclose([t for t, _ in frames], nows, atol=1e-9)


def test_a_looped_replay_returns_to_its_first_pose_without_a_jump():
    """Looped as recorded, the pose jumped from the last frame to the first in one sample
    (the hands 36 cm on an Xsens put-aside take) and the robot was told to follow."""
    motion = HumanMotion.load_npz(SQUAT)
    shifted = motion.positions.copy()
    shifted[-20:] += np.linspace(0.0, 0.4, 20)[:, None, None] * np.array([1.0, 0.0, 0.0])   # ends 40 cm away
    motion = HumanMotion(motion.times, motion.segment_names, shifted, motion.orientations, motion.com,
                         "shifted", motion.rate_hz)
    clock = VirtualClock(0.0)
    replay = FileReplay(motion, clock=clock, loop=True)
    poses = []
    for _ in range(2 * len(motion) + 400):
        frame = replay.poll()
        if frame is not None:
            poses.append(frame[1])
        clock.advance(1.0 / motion.rate_hz)
    positions = np.array([[pose[name][0] for name in motion.segment_names] for pose in poses])     # (T, S, 3)
    steps = np.linalg.norm(np.diff(positions, axis=0), axis=-1).max(axis=1)                       # (T-1,) [m]
    recorded = np.linalg.norm(np.diff(motion.positions, axis=0), axis=-1).max()
    assert steps.max() <= max(recorded, 0.4 / (RETURN_MIN_S * motion.rate_hz) * 1.875 * 1.1)
    assert steps.max() < 0.05        # the seam was 40 cm in one sample
    orientations = np.array([[pose[name][1] for name in motion.segment_names] for pose in poses])
    assert np.allclose(np.linalg.norm(orientations, axis=-1), 1.0, atol=1e-4)   # (as recorded: 1 ± 1e-5)


def test_retarget_out_below_a_file_is_refused_before_reading(tmp_path, capsys, monkeypatch):
    """Used to read and retarget the take, then fail with '...: Not a directory'."""
    import teleop.takes

    monkeypatch.setattr(teleop.takes, "read_motion_file", lambda *a, **k: pytest.fail("read before the check"))
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    rc = main(["retarget", str(SQUAT), "--out", str(notes / "out")])
    err = capsys.readouterr().err
    assert rc == 1
    assert f"error: --out {notes / 'out'}: {notes} is a file" in err and "Traceback" not in err
    assert notes.read_text() == "mine"


# --------------------------------------------------------- tools/eval_retarget_execute.py
def _eval_tool(monkeypatch, read: bool = False):
    spec = importlib.util.spec_from_file_location("eval_retarget_execute", REPO / "tools" / "eval_retarget_execute.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "run_closed_loop", lambda *a, **k: pytest.fail("played before the check"))
    for name in () if read else ("load_take_files", "load_takes"):   # (it read with load_takes before)
        monkeypatch.setattr(module, name, lambda *a, **k: pytest.fail("read before the check"), raising=False)
    return module


@pytest.fixture
def data(tmp_path) -> Path:
    (tmp_path / "data" / "squat").mkdir(parents=True)
    shutil.copy(SQUAT, tmp_path / "data" / "squat")
    return tmp_path / "data"


def test_eval_tool_refuses_a_json_it_cannot_write_before_playing(tmp_path, capsys, monkeypatch, data):
    """Used to fail with a FileNotFoundError traceback after the first take had been played."""
    tool = _eval_tool(monkeypatch)
    with pytest.raises(SystemExit) as exit_:
        tool.main([str(data), "--json", str(tmp_path / "missing" / "rows.json")])
    assert exit_.value.code == 2
    assert (f"--json {tmp_path / 'missing' / 'rows.json'}: {tmp_path / 'missing'} is not a folder"
            in capsys.readouterr().err)
    with pytest.raises(SystemExit):
        tool.main([str(data), "--json", str(tmp_path)])
    assert "is a folder" in capsys.readouterr().err


def test_eval_tool_refuses_filters_that_select_no_take(capsys, monkeypatch, data):
    """A typo in --tasks used to print 'no takes' and exit 0, as if all went well."""
    tool = _eval_tool(monkeypatch, read=True)
    with pytest.raises(SystemExit) as exit_:
        tool.main([str(data), "--tasks", "sqat"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"no takes under {data} match --tasks sqat" in err and "tasks there: squat" in err
    with pytest.raises(SystemExit):
        tool.main([str(data / "nothing")])
    assert "no such file or folder" in capsys.readouterr().err


def test_eval_tool_summary_counts_falls_as_a_number_of_takes(monkeypatch):
    """The rows hold every figure as a float: the summary said "fell 2.0"."""
    tool = _eval_tool(monkeypatch)
    figures = {"min_cop_margin_mm": 5.0, "min_cop_margin_initial_mm": 5.0, "max_foot_slip_mm": 0.5, "hand_rms_cm": 2.0}
    rows = [{"zmp": {"fell": fell, **figures}} for fell in (1.0, 1.0, 0.0)]
    assert tool.summarise(rows, "zmp").startswith("3 takes, fell 2, ")
