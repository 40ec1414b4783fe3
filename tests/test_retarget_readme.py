"""retarget/README.md, the package's user guide, runs as written.

Every ```python block is executed, in order, in one namespace (as one reader's session)
in a temporary working directory (the guide writes files there), with ``REPO`` the
repository's root, as the guide says; each block asserts on its own result, so a guide
that drifted from the code fails here. Also the small API fixes made while writing it.
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import numpy as np
import pytest

from retarget.references import FLAT_SIZE, InvalidReferences, ReferenceTrajectory
from tests.conftest import run_guide_examples

REPO = Path(__file__).resolve().parent.parent
README = REPO / "retarget" / "README.md"


def test_readme_examples_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    blocks = run_guide_examples(README, {"__name__": "retarget_readme", "REPO": REPO}, least=6)
    assert (tmp_path / "squat_references.npz").is_file()
    code = "".join(blocks)
    # The guide reads the committed data, never ../shared/data (absent on a user's clone),
    # and, like the package, needs nothing of the application.
    assert "shared/data" not in code
    assert not re.search(r"^\s*(from|import) (teleop|promp)\b", code, flags=re.M)


def test_references_load_names_a_file_that_is_no_npz(tmp_path: Path) -> None:
    """ReferenceTrajectory.load_npz of a text file said numpy's "This file contains pickled
    (object) data. If you trust the file you can load it unsafely using the
    `allow_pickle=` keyword argument", naming no file and suggesting an unsafe load."""
    text = tmp_path / "notes.npz"
    text.write_text("hello\n")
    with pytest.raises(InvalidReferences, match=r"notes\.npz: not a \.npz file") as info:
        ReferenceTrajectory.load_npz(text)
    assert "pickle" not in str(info.value)
    truncated = tmp_path / "truncated.npz"
    good = tmp_path / "good.npz"
    ReferenceTrajectory(np.arange(5) / 10, np.zeros((5, FLAT_SIZE)), label="wave").save_npz(good)
    truncated.write_bytes(good.read_bytes()[:40])
    with pytest.raises(InvalidReferences, match=r"truncated\.npz: not a readable \.npz file"):
        ReferenceTrajectory.load_npz(truncated)
    with pytest.raises(FileNotFoundError):             # an OSError, as before
        ReferenceTrajectory.load_npz(tmp_path / "absent.npz")
    # A file object is still read (the byte check is for paths only).
    buffer = io.BytesIO(good.read_bytes())
    assert ReferenceTrajectory.load_npz(buffer).label == "wave"


def test_references_load_names_the_file_of_a_wrong_shape(tmp_path: Path) -> None:
    """"values must be (T, 20), got (3, 7)" from load_npz named no file (teleop added it
    for takes, other callers such as `teleop info` did not)."""
    path = tmp_path / "columns.npz"
    np.savez(path, times=np.arange(3) / 50, values=np.zeros((3, 7)))
    with pytest.raises(InvalidReferences, match=r"columns\.npz: values must be \(T, 20\), got \(3, 7\)"):
        ReferenceTrajectory.load_npz(path)
    np.savez(path, times=np.arange(4) / 50, values=np.zeros((3, FLAT_SIZE)))
    with pytest.raises(InvalidReferences, match=r"columns\.npz: times and values disagree in length"):
        ReferenceTrajectory.load_npz(path)
