"""The README, followed from top to bottom as a new user: what a walk through it found.

`teleop train` "takes `--basis` 4 to 200", but on the product's own demonstrations 200 (and
anything above 162) ends in an error: the count is bounded by the samples of each take's
moving part too. The README now says so, with the figure for `datasets/synthetic`; these
tests keep that figure true."""

from __future__ import annotations

import re

from conftest import REPO_ROOT, SYNTHETIC, error_line, run_cli


def _readme() -> str:
    return " ".join((REPO_ROOT / "README.md").read_text(encoding="utf-8").split())


def test_readme_states_the_basis_bound_of_the_synthetic_demonstrations():
    match = re.search(r"takes `--basis` 4 to 200 \(at most the samples of each take's moving part: a take with "
                      r"fewer is named, and `datasets/synthetic` takes up to (\d+)\)", _readme())
    assert match, "the README no longer states the bound --basis has on a take's samples"
    assert int(match.group(1)) == 162


def test_train_on_the_synthetic_demonstrations_refuses_one_basis_function_more_than_the_readme_says(
        tmp_path, capsys):
    out = tmp_path / "library.npz"
    rc, _, err = run_cli(capsys, "train", SYNTHETIC, "--basis", "163", "-o", out)
    assert rc == 1
    line = error_line(err)
    assert line.startswith("--basis 163: take ") and "give --basis 162 or fewer" in line, line
    assert not out.exists()
