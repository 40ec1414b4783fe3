"""Regression tests from a review of teleop/net: secret file errors, clock samples, netem CLI messages."""

import argparse
import math
from pathlib import Path

import pytest

from teleop.clock import VirtualClock
from teleop.net import secret as secret_mod
from teleop.net.cli import models_from_args, register
from teleop.net.clock_sync import ClockOffsetEstimator, ClockSyncClient
from teleop.net.delay import DirectionModel, LinkModel
from teleop.net.protocol import ClockPong, PacketCodec
from teleop.net.secret import session_secret
from teleop.net.virtual import connect_virtual


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    monkeypatch.delenv(secret_mod.ENV_VAR, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    return tmp_path


def test_unusable_secret_paths_are_secret_errors_not_tracebacks(clean_env):
    # The station CLI turns SecretError into a one-line message; an OSError escaped as a
    # traceback: a directory given as --secret-file, or a config dir that cannot be created.
    folder = clean_env / "keys"
    folder.mkdir(mode=0o700)
    with pytest.raises(secret_mod.SecretError, match="cannot read secret file"):
        secret_mod.load_secret(folder)


@pytest.mark.skipif(not hasattr(__import__("os"), "mkfifo"), reason="needs named pipes (POSIX)")
def test_a_pipe_given_as_the_secret_file_is_refused_not_waited_on(clean_env):
    # Reading a FIFO blocks until a writer opens it: the station hung without a word.
    import os

    fifo = clean_env / "secret.fifo"
    os.mkfifo(fifo, 0o600)
    with pytest.raises(secret_mod.SecretError, match="is not a regular file"):
        secret_mod.load_secret(fifo)


def test_uncreatable_default_secret_is_a_secret_error(clean_env, monkeypatch):
    blocker = clean_env / "not-a-dir"
    blocker.write_text("a file where the config directory should be")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(blocker))
    with pytest.raises(secret_mod.SecretError, match="cannot create secret file"):
        secret_mod.load_secret(create_default=True)


@pytest.mark.parametrize("t2", [math.nan, math.inf])
def test_non_finite_clock_exchanges_are_rejected(t2):
    estimator = ClockOffsetEstimator(method="median")
    assert estimator.add(0.0, t2, 1.0, 2.0) is None
    assert estimator.rejected == 1 and estimator.offset is None


def test_a_pong_with_a_nan_receive_time_does_not_poison_the_offset():
    clock = VirtualClock()
    robot, operator = connect_virtual(PacketCodec(session_secret()), LinkModel(), clock)
    client = ClockSyncClient(robot, operator.address, estimator=ClockOffsetEstimator(method="median"))
    assert client.ping()
    (ping,) = operator.poll()
    operator.send(ClockPong(ping.packet.message.exchange_id, ping.packet.send_time, math.nan), robot.address)
    (pong,) = robot.poll()
    assert client.handle(pong)
    assert client.estimator.offset is None and client.estimator.rejected == 1


@pytest.mark.parametrize("argv, option", [
    (["--delay-ms", "20000"], "--delay-ms"),
    (["--back-delay-ms", "20000"], "--back-delay-ms"),
])
def test_netem_cli_names_the_option_when_a_delay_exceeds_the_cap(argv, option):
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["netem", *argv])
    with pytest.raises(ValueError, match=f"{option} 20000 exceeds --max-delay-ms 10000"):
        models_from_args(args)


def test_direction_model_cap_error_gives_the_values():
    with pytest.raises(ValueError, match=r"max_delay \(10 s\) must be ≥ delay \(12.5 s\)"):
        DirectionModel(delay=12.5, max_delay=10.0)


def test_a_round_trip_over_twenty_seconds_has_room_under_the_default_cap():
    """`teleop trial --rtt 30` was refused mid-sweep by the fixed 10 s cap on one packet's delay."""
    import math

    from teleop.net.delay import DEFAULT_MAX_DELAY, DirectionModel

    assert DirectionModel(delay=0.75).max_delay == DEFAULT_MAX_DELAY
    long = DirectionModel(delay=15.0)
    assert long.max_delay == pytest.approx(15.0 + 6 * long.sigma)
    assert DirectionModel(delay=15.0, jitter=0.0, max_delay=20.0).max_delay == 20.0
    with pytest.raises(ValueError, match="must be ≥ delay"):
        DirectionModel(delay=15.0, max_delay=10.0)
    for bad in ({"delay": math.nan}, {"jitter": math.nan}, {"loss": math.nan}, {"max_delay": math.inf}):
        with pytest.raises(ValueError, match="finite"):
            DirectionModel(**bad)


def test_a_trial_with_a_thirty_second_round_trip_runs():
    import numpy as np

    from retarget.references import FLAT_SIZE, ReferenceTrajectory
    from teleop.trials.delay_trial import run_take

    times = np.arange(0.0, 2.0, 0.01)
    take = ReferenceTrajectory(times, np.zeros((len(times), FLAT_SIZE)), label="still")
    result = run_take(take, 30.0, None, compensate=False)
    assert np.isfinite(result.whole["hand_cm"])


def test_a_pong_from_another_peer_is_not_paired_with_our_ping():
    import dataclasses

    clock = VirtualClock()
    robot, operator = connect_virtual(PacketCodec(session_secret()), LinkModel(), clock)
    client = ClockSyncClient(robot, operator.address, estimator=ClockOffsetEstimator(method="median"))
    assert client.ping()
    (ping,) = operator.poll()
    operator.send(ClockPong(ping.packet.message.exchange_id, ping.packet.send_time, 5.0), robot.address)
    (pong,) = robot.poll()
    assert client.handle(dataclasses.replace(pong, peer=("10.0.0.9", 7000)))   # consumed...
    assert client.estimator.offset is None                                    # ...not counted
    assert client.handle(pong) and client.estimator.offset is not None        # ours still pairs


def test_the_secret_tool_parses_its_options(tmp_path, capsys):
    """`python -m teleop.net.secret --help` wrote a secret file named "--help" (the error
    messages suggest running the tool)."""
    from teleop.net.secret import main, read_secret_file

    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0 and "usage: python -m teleop.net.secret" in capsys.readouterr().out
    assert not (Path.cwd() / "--help").exists()
    target = tmp_path / "station" / "secret"
    assert main([str(target)]) == 0
    assert capsys.readouterr().out.strip() == str(target)
    assert len(read_secret_file(target)) >= 32
