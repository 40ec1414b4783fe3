"""Recording outputs: a file name the dataset commands would not find is refused, and a
recorder that cannot write says which file and leaves nothing behind."""

from pathlib import Path

import pytest

from conftest import error_line
from teleop.cli import main
from teleop.record.recorder import Recorder


@pytest.mark.parametrize("command", [["record", "--duration", "0.1", "-o"],
                                     ["robot", "--duration", "0.1", "--record"],
                                     ["operator", "--duration", "0.1", "--record"]])
def test_a_recording_without_the_mcap_suffix_is_refused_before_starting(tmp_path, capsys, command):
    """`teleop dataset list/export FOLDER` find recordings by .mcap: a session recorded as
    `session` was passed over."""
    out = tmp_path / "session"
    assert main([*command, str(out)]) == 2
    option = command[-1]
    assert error_line(capsys.readouterr().err) == (
        f"{option} {out}: give a .mcap file name (`teleop dataset list/export FOLDER` "
        "find recordings by it)")
    assert not out.exists()


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (Linux)")
def test_a_recorder_that_cannot_write_its_header_names_the_file_and_spares_the_device():
    with pytest.raises(OSError) as error:
        Recorder(Path("/dev/full"))
    assert error.value.filename == "/dev/full" and "No space left" in str(error.value)
    assert Path("/dev/full").exists() and not Path("/dev/full").is_file()   # a device: never unlinked
