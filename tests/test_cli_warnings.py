"""The product's own warnings are one `teleop CMD: warning: ...` line, not Python's
file:line + source-line format; other libraries' keep theirs."""

import argparse
import warnings

from teleop.cli import run_command
from teleop.takes import SkippedTakesWarning


def test_own_warnings_are_one_line_and_others_keep_pythons_format(capsys):
    def command(args):
        warnings.warn("a damaged joint-angle file is ignored", SkippedTakesWarning, stacklevel=2)
        warnings.warn("from elsewhere", DeprecationWarning, stacklevel=2)
        return 0

    with warnings.catch_warnings(record=True) as passed_on:     # the handler before ours records
        warnings.simplefilter("always")
        assert run_command(argparse.Namespace(func=command, command="retarget")) == 0
    assert capsys.readouterr().err == "teleop retarget: warning: a damaged joint-angle file is ignored\n"
    assert [w.category for w in passed_on] == [DeprecationWarning]
