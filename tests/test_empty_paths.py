"""No command-line path option takes an empty value: ``Path("")`` is ``.``, so an unset shell
variable (``--out "$OUT"``) made `teleop tune --out ''` write its table and plots into the
current folder, and `train ''` search it for takes. Every path argument of every
subcommand is checked by :func:`teleop.cli_types.nonempty_path` (exit code 2)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from teleop.cli import build_parser


def _path_arguments(parser: argparse.ArgumentParser, command: str = "teleop"):
    """(command, option) of every argument of ``parser`` and its subcommands whose type is
    plain ``Path``."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _path_arguments(sub, f"{command} {name}")
        elif action.type is Path:
            yield command, "/".join(action.option_strings) or action.dest


def test_no_path_argument_takes_an_empty_value():
    assert list(_path_arguments(build_parser())) == []


@pytest.mark.parametrize("argv, option", [
    (["tune", "--quick", "--setups", "2", "--out", ""], "--out"),
    (["train", ""], "data"),
    (["eval", "promp", "--train", "", "--test", "x"], "--train"),
    (["dataset", "trim", "x.mcap", "--start", "0", "--end", "1", "-o", ""], "-o/--output"),
    (["robot", "--library", "", "--duration", "0.1"], "--library"),
])
def test_an_empty_path_is_exit_2_and_nothing_is_written(argv, option, tmp_path, monkeypatch, capsys):
    from teleop.cli import main

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert f"argument {option}: the path must not be empty" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
