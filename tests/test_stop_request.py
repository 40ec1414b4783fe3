"""A stop signal whose KeyboardInterrupt is swallowed on its way (inside the import of a
compiled module, e.g. numpy.random's) is raised again by the next step of the long loops:
`teleop jog --make-test-video` rendered on to the end and exited 0 after a Ctrl-C."""

import argparse
import os
import signal

import pytest

from teleop import stop_request
from teleop.cli import run_command, sigterm_as_interrupt
from teleop.progress import progress_bar
from teleop.stations.loop_timing import run_loop


def _signal_swallowed() -> None:
    """A SIGINT whose KeyboardInterrupt a `try: ... except: pass` ate, as Cython module
    initialisation code does."""
    try:
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000):          # the handler runs between bytecodes
            pass
    except BaseException:              # noqa: BLE001 - the swallowing being reproduced
        pass
    assert stop_request.stop_pending()


def test_a_swallowed_stop_is_raised_by_the_next_progress_step():
    with sigterm_as_interrupt():
        _signal_swallowed()
        steps = []
        with pytest.raises(KeyboardInterrupt):
            for i in progress_bar(range(5), desc="work", enabled=False):
                steps.append(i)
    assert steps == []
    assert not stop_request.stop_pending()      # raised once, then forgotten


def test_a_swallowed_stop_is_raised_by_a_progress_update():
    with sigterm_as_interrupt():
        _signal_swallowed()
        with progress_bar(desc="work", total=5, enabled=False) as bar, pytest.raises(KeyboardInterrupt):
            bar.update()


def test_a_swallowed_stop_ends_the_station_loop_before_its_next_tick():
    ticks = []
    with sigterm_as_interrupt():
        _signal_swallowed()
        with pytest.raises(KeyboardInterrupt):
            run_loop(0.001, 1.0, lambda: ticks.append(1))
    assert ticks == []


def test_a_stop_caught_and_handled_does_not_interrupt_the_cleanup():
    with sigterm_as_interrupt():
        try:
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(1000):
                pass
        except KeyboardInterrupt:
            stop_request.stop_handled()   # as the stations do before closing their recordings
        assert list(progress_bar(range(3), desc="closing", enabled=False)) == [0, 1, 2]


def test_a_command_whose_stop_was_swallowed_exits_130_not_0(capsys):
    def command(args):
        _signal_swallowed()
        for _ in progress_bar(range(3), desc="work", enabled=False):
            pass
        return 0

    assert run_command(argparse.Namespace(func=command, command="demo")) == 130
    assert "interrupted" in capsys.readouterr().err
    assert not stop_request.stop_pending()


def test_an_earlier_commands_stop_does_not_stop_the_next_one():
    stop_request.request_stop()          # left over: e.g. a command that completed regardless
    ran = []

    def command(args):
        ran.extend(progress_bar(range(3), desc="work", enabled=False))
        return 0

    assert run_command(argparse.Namespace(func=command, command="demo")) == 0
    assert ran == [0, 1, 2]


def test_ctrl_c_while_the_commands_are_loaded_is_an_interruption_not_a_traceback(monkeypatch, capsys):
    """Building the parser imports every command's module (about a second): a Ctrl-C then
    printed a KeyboardInterrupt traceback and the process died by the signal."""
    import teleop.cli as cli

    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "build_parser", interrupted)
    assert cli.main(["demo"]) == 130
    assert capsys.readouterr().err == "interrupted\n"
