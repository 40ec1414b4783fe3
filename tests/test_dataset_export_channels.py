"""``teleop dataset export`` of one recording's channels into one folder.

A robot station's recording holds its commands twice, as delivered and as compensated;
both export to ``OUTDIR/<task>/<recording>_<episode>.npz``. Exporting one, then the other
into the same folder replaced the first export with the second without a word (the
overwrite check only compared recordings). The files now record their channel: another
channel's export of the same episode is refused unless --force, saying which channel the
file holds; re-exporting the same channel replaces its own files as before.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from retarget.references import ReferenceTrajectory
from teleop.record import open_recording
from teleop.record.channels import COMMANDS_COMPENSATED, COMMANDS_DELIVERED
from tests.conftest import error_line, run_cli
from tests.test_record_robot_commands import robot_session


@pytest.fixture(scope="module")
def labelled_robot_recording(robot, tmp_path_factory):
    """A robot station's recording (``robot_session``: 200 ticks), labelled 'squat' whole;
    made once, copied by each test."""
    from teleop.cli import main
    from teleop.sim.simulator import Simulation

    path = tmp_path_factory.mktemp("robot") / "robot.mcap"
    sim = Simulation(robot, visual=False)
    try:
        robot_session(path, robot, sim)
    finally:
        sim.close()
    assert main(["dataset", "label", str(path), "--task", "squat"]) == 0
    return path


@pytest.fixture()
def session(labelled_robot_recording, tmp_path):
    return shutil.copy(labelled_robot_recording, tmp_path / "robot.mcap")


def _channel(path) -> str:
    with np.load(path, allow_pickle=False) as data:
        return str(data["channel"])


def test_another_channel_of_the_same_recording_is_not_replaced_without_force(session, tmp_path, capsys):
    recording = open_recording(session)
    delivered = sum(1 for _ in recording.decoded("delivered"))
    compensated = sum(1 for _ in recording.decoded("compensated"))
    assert delivered != compensated                   # the two exports can be told apart
    out = tmp_path / "D"
    exported = out / "squat" / "robot_0.npz"

    rc, stdout, _ = run_cli(capsys, "dataset", "export", session, "--channel", "delivered", "-o", out)
    assert rc == 0 and stdout.splitlines()[0] == str(exported)
    assert _channel(exported) == COMMANDS_DELIVERED and len(ReferenceTrajectory.load_npz(exported)) == delivered
    before = exported.read_bytes()

    rc, stdout, err = run_cli(capsys, "dataset", "export", session, "--channel", "compensated", "-o", out)
    assert rc == 1 and stdout == ""
    assert error_line(err) == (
        f"1 file(s) in {out} hold episodes of this recording exported from another channel and would be "
        f"replaced with its {COMMANDS_COMPENSATED}: {exported} (holds {COMMANDS_DELIVERED}); export to another -o to "
        "keep both (teleop train learns from every file of a folder: one channel per folder), or pass --force "
        "to replace them")
    assert exported.read_bytes() == before            # nothing written
    assert sorted(p.name for p in exported.parent.iterdir()) == ["robot_0.npz"]

    # Another folder keeps both.
    rc, _, _ = run_cli(capsys, "dataset", "export", session, "--channel", "compensated", "-o", tmp_path / "C")
    assert rc == 0 and _channel(tmp_path / "C" / "squat" / "robot_0.npz") == COMMANDS_COMPENSATED
    assert exported.read_bytes() == before

    # --force replaces it.
    rc, stdout, _ = run_cli(capsys, "dataset", "export", session, "--channel", "compensated", "-o", out, "--force")
    assert rc == 0 and stdout.splitlines()[0] == str(exported)
    assert _channel(exported) == COMMANDS_COMPENSATED
    assert len(ReferenceTrajectory.load_npz(exported)) == compensated


def test_re_exporting_the_same_channel_replaces_its_own_files(session, tmp_path, capsys):
    """As before: the same recording and channel (however spelt) needs no --force."""
    out = tmp_path / "D"
    exported = out / "squat" / "robot_0.npz"
    assert run_cli(capsys, "dataset", "export", session, "--channel", "delivered", "-o", out)[0] == 0
    exported.write_bytes(b"")                         # a replaced file is a new one
    rc, stdout, err = run_cli(capsys, "dataset", "export", session, "--channel", "/commands/delivered", "-o", out)
    assert rc == 0, err
    assert stdout.splitlines()[0] == str(exported) and _channel(exported) == COMMANDS_DELIVERED


def test_exports_that_do_not_name_their_channel(session, tmp_path, capsys):
    """Files exported before the channel was recorded: from a recording with one references
    channel they can only hold that one (re-exported without --force); from a robot
    recording (delivered and compensated) the channel is unknown, so they are kept."""
    out = tmp_path / "D"
    exported = out / "squat" / "robot_0.npz"
    assert run_cli(capsys, "dataset", "export", session, "--channel", "delivered", "-o", out)[0] == 0
    with np.load(exported, allow_pickle=False) as data:
        arrays = {key: data[key] for key in data.files if key != "channel"}
    np.savez_compressed(exported, **arrays)
    before = exported.read_bytes()

    rc, _, err = run_cli(capsys, "dataset", "export", session, "--channel", "delivered", "-o", out)
    assert rc == 1 and f"{exported} (holds a channel it does not name: an earlier export)" in error_line(err)
    assert exported.read_bytes() == before
    assert run_cli(capsys, "dataset", "export", session, "--channel", "delivered", "-o", out, "--force")[0] == 0

    # An operator recording holds /references alone: its unnamed exports are of that channel.
    from tests.test_record_dataset import write_session

    operator = write_session(tmp_path / "operator.mcap", episodes=(("squat", 0, 50),), n=60)
    assert run_cli(capsys, "dataset", "export", operator, "-o", out)[0] == 0
    legacy = out / "squat" / "operator_0.npz"
    with np.load(legacy, allow_pickle=False) as data:
        arrays = {key: data[key] for key in data.files if key != "channel"}
    np.savez_compressed(legacy, **arrays)
    rc, _, err = run_cli(capsys, "dataset", "export", operator, "-o", out)
    assert rc == 0, err
    # Asking it for a channel it does not hold skips its episodes, rather than refusing over
    # a file that would not be replaced.
    rc, _, err = run_cli(capsys, "dataset", "export", operator, "--channel", "delivered", "-o", out)
    assert rc == 1 and "skipped operator.mcap#episode0: no channel /commands/delivered" in err
    assert _channel(legacy) == "/references"
