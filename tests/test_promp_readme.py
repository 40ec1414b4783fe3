"""promp/README.md, the library's user guide, runs as written.

Every ```python block is executed, in order, in one namespace (as one reader's session)
in a temporary working directory (the guide saves files); each block asserts on its own
result, so a guide that drifted from the code fails here. Also the small API fixes made
while writing it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from promp.basis import RBFBasis, min_n_basis
from promp.learning import Demonstration, learn_promp
from tests.conftest import python_blocks, run_guide_examples

README = Path(__file__).resolve().parent.parent / "promp" / "README.md"


def test_python_blocks_are_found() -> None:
    sample = "x\n```python\na = 1\n```\ntext\n```\nnot python\n```\n```python\nb = 2\n```\n"
    assert python_blocks(sample) == ["a = 1\n", "b = 2\n"]


def test_readme_examples_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    run_guide_examples(README, {"__name__": "promp_readme"}, least=8)
    assert (tmp_path / "tasks.npz").is_file()


@pytest.mark.parametrize("kwargs", [{"n_basis": 3}, {"n_basis": 5, "width_factor": 2.0},
                                    {"n_basis": 6, "margin_factor": 3.0}])
def test_too_few_basis_functions_says_how_many(kwargs: dict[str, Any]) -> None:
    """RBFBasis(3) said only "margin_factor * width_factor too large for n_basis": not the
    values, nor the smallest count that works (the guide tells users to pick a count)."""
    width, margin = kwargs.get("width_factor", 1.0), kwargs.get("margin_factor", 1.0)
    least = min_n_basis(width, margin)
    with pytest.raises(ValueError, match=rf"n_basis >= {least}\b") as info:
        RBFBasis(**kwargs)
    assert f"n_basis={kwargs['n_basis']}" in str(info.value)
    RBFBasis(**{**kwargs, "n_basis": least})     # the count it names works


def test_wrong_number_of_signal_names_says_both_counts() -> None:
    """learn_promp(signal_names=...) of the wrong length said only "signal_names must have
    one name per signal", not how many names were given for how many signals."""
    t = np.linspace(0.0, 1.0, 50)
    demos = [Demonstration(t, np.column_stack([t * a, t ** 2])) for a in (1.0, 1.1, 0.9)]
    with pytest.raises(ValueError, match=r"one name per signal: got 1 for 2 signals"):
        learn_promp(demos, signal_names=["hand x"])
    assert learn_promp(demos, signal_names=["hand x", "hand z"]).signal_names == ("hand x", "hand z")
