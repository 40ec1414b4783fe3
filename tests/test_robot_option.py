"""A --robot that names no robot description is said alike by every command that takes it:
as --robot's, with the error line alone (exit code 1). retarget, train, eval and trial said
the description's error without naming the option, with the TELEOP_DEBUG hint meant for
errors from inside the work; calibrate-sim and lockstep each caught it themselves."""

from __future__ import annotations

import pytest

from conftest import SYNTHETIC, run_cli


@pytest.mark.parametrize("argv", [
    ["retarget", str(SYNTHETIC / "squat" / "squat_0.npz"), "--out", "{tmp}/out"],
    ["train", str(SYNTHETIC), "-o", "{tmp}/lib.npz"],
    ["calibrate-sim", "--make-test-recording", "{tmp}/test.npz"],
])
def test_an_unknown_robot_is_said_as_the_robot_options(argv, tmp_path, capsys):
    argv = [a.format(tmp=tmp_path) for a in argv]
    rc, _, err = run_cli(capsys, *argv, "--robot", "no_such_robot")
    assert rc == 1
    assert err.strip().splitlines() == [f"teleop {argv[0]}: error: --robot no_such_robot: no robot description "
                                        "'no_such_robot' (available: icub; or the path of a description .toml)"]
    assert list(tmp_path.iterdir()) == []
