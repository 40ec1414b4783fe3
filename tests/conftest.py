"""Shared fixtures: the robot model and a simulation (built once per module: loading the
iCub meshes takes about a second), and the location of the real recorded data."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"


def shared_data(*parts: str) -> Path:
    """Path inside ../shared/data, or skip the test when it is absent (a fresh clone)."""
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} not found: real-data test skipped (a fresh clone has no ../shared/data)")
    return path


@pytest.fixture(scope="session")
def robot():
    from teleop.robot.model import RobotModel

    return RobotModel()


@pytest.fixture(scope="module")
def sim(robot):
    from teleop.sim.simulator import Simulation

    simulation = Simulation(robot)
    yield simulation
    simulation.close()
