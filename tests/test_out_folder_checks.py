"""Output folders are checked before the work: a folder that cannot be made or written in
is refused at once (``teleop demo --out /proc/x`` ran both sessions, a minute, then failed
when writing), and the check leaves nothing behind."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from teleop.data_args import check_out_folder

UNWRITABLE = Path("/proc/teleop-test-no-such-folder/out")


def test_a_folder_to_be_made_is_checked_and_left_unmade(tmp_path):
    out = tmp_path / "a" / "b" / "c"
    check_out_folder(out)
    assert not (tmp_path / "a").exists()        # made to know it can be, then removed
    existing = tmp_path / "kept"
    existing.mkdir()
    (existing / "earlier.txt").write_text("x")
    check_out_folder(existing)
    assert sorted(os.listdir(existing)) == ["earlier.txt"]


@pytest.mark.skipif(not Path("/proc/self").exists(), reason="needs Linux's /proc, where no folder can be made")
def test_a_folder_that_cannot_be_made_is_refused_before_the_work(capsys):
    with pytest.raises(ValueError, match="--out .*: cannot write there"):
        check_out_folder(UNWRITABLE)
    from teleop.cli import main

    assert main(["demo", "--duration", "2", "--out", str(UNWRITABLE)]) != 0
    captured = capsys.readouterr()
    assert "cannot write there" in captured.err
    # Refused before the sessions: no progress bar, no summary.
    assert "session" not in captured.err and "Round trip" not in captured.out
