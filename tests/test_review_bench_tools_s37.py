"""Review of ``teleop bench`` and tools/ (eval_retarget_execute.py, lower_bounds.py): each test
is a defect found in review (failed before its fix). The benchmarks themselves are stubbed
where the command's part is tested: their figures take minutes on a shared machine."""

from __future__ import annotations

import importlib
import importlib.util
import json
import runpy
import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from conftest import REPO_ROOT, SYNTHETIC
from teleop.benchmarks.cli import BENCHMARKS, QUICK_LINE
from teleop.cli import main

TOOLS = REPO_ROOT / "tools"


def _strict_json(text: str):
    """``json.loads`` that refuses NaN and Infinity, as jq and browsers do."""
    def refuse(constant: str):
        raise ValueError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def _stub(monkeypatch, name: str, result: dict) -> None:
    """``teleop bench NAME`` returns ``result`` at once and prints TABLE for it."""
    module = importlib.import_module(f"teleop.benchmarks.{name}_bench")
    monkeypatch.setattr(module, "run", lambda **options: dict(result))
    monkeypatch.setattr(module, "format_table", lambda result: "TABLE")
    monkeypatch.setattr("teleop.benchmarks.cli.load_average", lambda: 0.7)


# ------------------------------------------------------------------------------ bench --json
def test_bench_json_is_strict_json_with_nulls_for_figures_not_measured(monkeypatch, capsys):
    """jog's pose error is NaN when a detector saw no tag, its command-to-motion when a step
    never reached half way: `--json` printed a bare NaN (jq: parse error), and a numpy scalar
    in a result was a TypeError traceback."""
    _stub(monkeypatch, "jog", {"pose_error_mm": float("nan"), "command_to_motion_ms": float("inf"),
                               "detection_fps": np.float64(98.5), "fell": np.bool_(False)})
    assert main(["bench", "jog", "--json"]) == 0
    result = _strict_json(capsys.readouterr().out)
    assert result["pose_error_mm"] is None and result["command_to_motion_ms"] is None
    assert result["detection_fps"] == 98.5 and result["fell"] is False


# ------------------------------------------------------------------------------ bench --quick
@pytest.mark.parametrize("name", sorted(BENCHMARKS))
def test_a_quick_run_says_so_under_its_table_and_in_its_json(name, monkeypatch, capsys):
    """A --quick run (sim: 1 s of simulation instead of 5, promp: 1 repetition instead of 5)
    printed a table like the full run's: nothing said its figures were the noisier ones, and
    only jog's and retarget's JSON carried the flag."""
    _stub(monkeypatch, name, {"figure": 1.0})
    assert main(["bench", name, "--quick"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-3:-1] == ["TABLE", QUICK_LINE] and lines[-1].startswith("machine load: ")
    assert "quick" in QUICK_LINE and "noisier" in QUICK_LINE
    assert main(["bench", name, "--quick", "--json"]) == 0
    assert _strict_json(capsys.readouterr().out)["quick"] is True
    assert main(["bench", name]) == 0                      # a full run: no such line
    assert QUICK_LINE not in capsys.readouterr().out


# ------------------------------------------------------------------------------ bench --data
def test_bench_data_empty_is_refused_before_measuring(tmp_path, monkeypatch, capsys):
    """`--data ''` (an unset shell variable) was read as `.`: the current folder's pN.csv files
    were measured, or the error named `--data .`."""
    from teleop.benchmarks import retarget_bench

    monkeypatch.setattr(retarget_bench, "run", lambda **options: pytest.fail("measured"))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "retarget", "--quick", "--data", ""])
    assert exit_.value.code == 2
    assert "argument --data: the path must not be empty" in capsys.readouterr().err


def test_bench_retarget_damaged_take_is_refused_before_measuring(tmp_path, monkeypatch, capsys):
    """A damaged pN.csv in --data stopped the run only after the synthetic motion had been
    timed (seconds), with the hint of an error from inside the work."""
    from teleop.benchmarks import retarget_bench

    monkeypatch.setattr(retarget_bench, "_throughput", lambda *a, **k: pytest.fail("measured first"))
    takes = tmp_path / "takes"
    takes.mkdir()
    (takes / "p1.csv").write_text("1,2\n3,4\n")
    assert main(["bench", "retarget", "--quick", "--data", str(takes)]) == 1
    err = capsys.readouterr().err
    assert err == (f"teleop bench: error: --data {takes}: {takes / 'p1.csv'}:1: 2 columns: an Xsens CSV has 161 "
                   "(segment poses) or 66 (joint angles)\n")


# --------------------------------------------------------------- tools/eval_retarget_execute.py
def _eval_tool():
    spec = importlib.util.spec_from_file_location("eval_retarget_execute", TOOLS / "eval_retarget_execute.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def squat_data(tmp_path) -> Path:
    (tmp_path / "data" / "squat").mkdir(parents=True)
    shutil.copy(SYNTHETIC / "squat" / "squat_0.npz", tmp_path / "data" / "squat")
    return tmp_path / "data"


@pytest.mark.parametrize("content, message", [
    ("1,2\n3,4\n", "p1.csv:1: 2 columns: an Xsens CSV has 161"),
    ("", "p1.csv: empty file"),
])
def test_eval_tool_says_which_take_is_unreadable_in_one_line(tmp_path, capsys, content, message):
    """A malformed take (a CSV of another layout, an empty file) was a MotionFormatError
    traceback out of the reader."""
    (tmp_path / "takes").mkdir()
    (tmp_path / "takes" / "p1.csv").write_text(content)
    assert _eval_tool().main([str(tmp_path / "takes")]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert f": error: {tmp_path / 'takes'}" in err and message in err


def test_eval_tool_json_is_strict_json(tmp_path, monkeypatch, capsys, squat_data):
    """The closed loop's CoP margin is NaN where no CoP was measured: --json wrote a bare NaN."""
    tool = _eval_tool()
    take = SimpleNamespace(path=Path("squat_0.npz"), label="squat", performer=None, trajectory=None)
    monkeypatch.setattr(tool, "RobotModel", lambda: None)
    monkeypatch.setattr(tool, "robot_target", lambda robot: None)
    monkeypatch.setattr(tool, "load_take_files", lambda *a, **k: [take])
    monkeypatch.setattr(tool, "run_closed_loop", lambda *a, **k: {
        "fell": True, "min_cop_margin_mm": float("nan"), "min_cop_margin_initial_mm": float("nan"),
        "max_foot_slip_mm": 3.0, "hand_rms_cm": 2.0, "statuses": {}})
    out = tmp_path / "rows.json"
    assert tool.main([str(squat_data), "--modes", "zmp", "--json", str(out)]) == 0
    rows = _strict_json(out.read_text())
    assert rows[0]["zmp"]["min_cop_margin_mm"] is None and rows[0]["zmp"]["max_foot_slip_mm"] == 3.0


def test_eval_tool_ctrl_c_is_a_line_and_exit_130(monkeypatch, capsys, squat_data):
    """Ctrl-C during a run of minutes printed a KeyboardInterrupt traceback."""
    import teleop.takes

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(teleop.takes, "load_take_files", interrupted)
    monkeypatch.setattr("teleop.robot.model.RobotModel", lambda: None)
    monkeypatch.setattr("teleop.robot.target.robot_target", lambda robot: None)
    monkeypatch.setattr(sys, "argv", ["eval_retarget_execute.py", str(squat_data)])
    with pytest.raises(SystemExit) as exit_:
        runpy.run_path(str(TOOLS / "eval_retarget_execute.py"), run_name="__main__")
    assert exit_.value.code == 130
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == "interrupted" and "Traceback" not in err


# ------------------------------------------------------------------------- tools/lower_bounds.py
def _lower_bounds():
    spec = importlib.util.spec_from_file_location("lower_bounds_tool", TOOLS / "lower_bounds.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("content, message", [
    (None, "No such file or directory"),
    ("not = [toml", "Invalid value (at line 1"),
    ("[tool.other]\nx = 1\n", "no [project] table"),
])
def test_lower_bounds_wrong_pyproject_is_a_usage_error(tmp_path, capsys, content, message):
    """A missing or malformed --pyproject was a FileNotFoundError / TOMLDecodeError / KeyError
    traceback."""
    path = tmp_path / "pyproject.toml"
    if content is not None:
        path.write_text(content)
    with pytest.raises(SystemExit) as exit_:
        _lower_bounds().main(["--pyproject", str(path)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f": error: --pyproject {path}: " in err
    assert message in err and "Traceback" not in err

