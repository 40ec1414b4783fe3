"""Option checks found by a user walkthrough: the option that failed is the one named (netem's
--target), a port that drives the simulation opens off loopback only when asked for
(lockstep --allow-remote), numeric options are refused by argparse before anything connects
(lockstep), messages speak the command's language (no Python keywords or argument dests),
and options that do not apply to the rest of the command line are refused, not ignored.

Every test runs the real ``teleop`` entry point in-process, as tests/test_cli_bad_input_live.py.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import free_port
from teleop.cli import build_parser, main


def usage_error(capsys, argv: list[str]) -> str:
    """Run ``teleop argv``, expect argparse's usage error (exit 2); returns its message."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: "), err
    return err.strip().splitlines()[-1]


def error_line(capsys, argv: list[str], code: int = 1) -> str:
    """Run ``teleop argv``, expect it to return ``code`` with one ``teleop CMD: error: ...``
    line and no traceback; returns that line."""
    assert main(argv) == code
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if ": error: " in line]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


# ------------------------------------------------------------------ 1. netem names the option that failed
def test_netem_names_target_when_the_target_does_not_resolve(capsys):
    """`--target nohost.invalid:9001` was reported as "--listen 127.0.0.1:9010: Name or
    service not known". The --listen port is even taken here: the target is checked before
    anything is bound."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as taken:
        taken.bind(("127.0.0.1", 0))
        listen = f"127.0.0.1:{taken.getsockname()[1]}"
        line = error_line(capsys, ["netem", "--listen", listen, "--target", "nohost.invalid:9001"])
    assert line.startswith("teleop netem: error: --target nohost.invalid:9001: "), line
    assert "--listen" not in line


def test_netem_names_listen_when_the_listen_address_does_not_resolve(capsys):
    line = error_line(capsys, ["netem", "--listen", "nohost.invalid:9010", "--target", "127.0.0.1:9001"])
    assert line.startswith("teleop netem: error: --listen nohost.invalid:9010: "), line


@pytest.mark.parametrize("option, value, expected", [
    ("--listen", "0.0.0.0:0", "--listen 0.0.0.0:0: refusing to listen on non-loopback address 0.0.0.0; "
                              "give --allow-remote to expose the proxy to the network"),
    ("--target", "10.1.2.3:9001", "--target 10.1.2.3:9001: refusing to forward to non-loopback address 10.1.2.3; "
                                  "give --allow-remote to expose the proxy to the network"),
])
def test_netem_refuses_remote_addresses_in_the_commands_words(capsys, option, value, expected):
    """It said "give --allow-remote (allow_remote=True)" and "pass allow_remote=True
    (--allow-remote)": Python keywords a command's user has no use for."""
    line = error_line(capsys, ["netem", option, value])
    assert line == f"teleop netem: error: {expected}"


# ------------------------------------------------------------------ 2. lockstep serve --allow-remote
def test_lockstep_serve_refuses_a_non_loopback_host_without_allow_remote():
    """`--host 0.0.0.0` opened an unauthenticated port that drives the simulation (and waited
    for a controller: hence a process with a time limit, not main())."""
    try:
        proc = subprocess.run([sys.executable, "-m", "teleop", "lockstep", "serve", "--host", "0.0.0.0", "--port",
                               "0", "--sessions", "1"], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("lockstep serve --host 0.0.0.0 listened for a controller instead of refusing")
    assert proc.returncode == 1
    assert ("teleop lockstep serve: error: --host 0.0.0.0: refusing to listen on non-loopback address 0.0.0.0; "
            "give --allow-remote to expose the simulation to the network") in proc.stderr.splitlines()


def test_lockstep_serve_allow_remote_is_an_option_that_says_what_it_exposes(capsys):
    from teleop.sim.lockstep_cli import _check_host

    args = build_parser().parse_args(["lockstep", "serve", "--host", "0.0.0.0", "--allow-remote"])
    assert args.allow_remote
    _check_host(args)                                                    # accepted with the option
    _check_host(build_parser().parse_args(["lockstep", "serve"]))         # and loopback without it
    with pytest.raises(SystemExit):
        main(["lockstep", "serve", "--help"])
    assert "exposes the simulation to the network" in " ".join(capsys.readouterr().out.split())


def test_lockstep_serve_names_the_port_in_use(capsys):
    """Was "[Errno 98] Address already in use (while attempting to bind on address
    ('127.0.0.1', 47611))": Python's words, no option."""
    import socket

    with socket.create_server(("127.0.0.1", 0)) as taken:
        busy = taken.getsockname()[1]
        line = error_line(capsys, ["lockstep", "serve", "--port", str(busy), "--sessions", "1"])
    assert line == f"teleop lockstep serve: error: --port {busy} on 127.0.0.1: Address already in use"


def test_lockstep_serve_names_host_when_it_does_not_resolve(capsys):
    line = error_line(capsys, ["lockstep", "serve", "--host", "nohost.invalid", "--sessions", "1"])
    assert line.startswith("teleop lockstep serve: error: --host nohost.invalid: "), line


# ------------------------------------------------------------------ 3. lockstep values, before anything connects
@pytest.mark.parametrize("argv, expected", [
    (["serve", "--sessions", "0"], "argument --sessions: must be >= 1, got 0"),      # waited, then exit 0
    (["serve", "--max-steps", "0"], "argument --max-steps: must be >= 1, got 0"),    # "max_steps must be >= 1 or None"
    (["serve", "--max-steps", "-1"], "argument --max-steps: must be >= 1, got -1"),
    (["serve", "--timeout", "0"], "argument --timeout: must be in (0, 86400] s, got 0"),
    (["serve", "--timeout", "nan"], "argument --timeout: must be in (0, 86400] s, got nan"),
    # 1e12 overflowed the socket timeout when the first controller connected: the server died.
    (["serve", "--timeout", "1e12"], "argument --timeout: must be in (0, 86400] s, got 1e12"),
    (["serve", "--port", "99999"], "argument --port: port must be 0-65535, got 99999"),
])
def test_lockstep_serve_values_are_checked_by_argparse(capsys, argv, expected):
    assert usage_error(capsys, ["lockstep", *argv]) == f"teleop lockstep {argv[0]}: error: {expected}"


@pytest.mark.parametrize("argv, expected", [
    (["--amplitude", "nan"], "argument --amplitude: must be in [-1.5, 1.5] rad, got nan"),   # ERROR DISCONNECT
    (["--amplitude", "inf"], "argument --amplitude: must be in [-1.5, 1.5] rad, got inf"),
    (["--amplitude", "100"], "argument --amplitude: must be in [-1.5, 1.5] rad, got 100"),   # was "ok": true
    (["--timeout", "0"], "argument --timeout: must be in (0, 86400] s, got 0"),     # "Operation now in progress"
    (["--timeout", "-1"], "argument --timeout: must be in (0, 86400] s, got -1"),
    (["--steps", "-5"], "argument --steps: must be >= 1, got -5"),      # taken as 0
    (["--steps", "0"], "argument --steps: must be >= 1, got 0"),
    (["--port", "-1"], "argument --port: port must be 0-65535, got -1"),
])
def test_lockstep_demo_client_values_are_refused_before_it_connects(capsys, argv, expected):
    with socket.create_server(("127.0.0.1", 0)) as server:   # a server that no one may reach
        server.setblocking(False)
        port = server.getsockname()[1]
        # (--timeout 1, overridden by a later --timeout: an unchecked value waits 1 s, not 10, for a WELCOME)
        message = usage_error(capsys, ["lockstep", "demo-client", "--port", str(port), "--timeout", "1", *argv])
        assert message == f"teleop lockstep demo-client: error: {expected}"
        with pytest.raises(BlockingIOError):
            server.accept()


def test_the_demo_client_module_checks_its_values_too(capsys):
    from teleop.sim import lockstep_client

    with pytest.raises(SystemExit) as exc:
        lockstep_client.main(["--amplitude", "nan"])
    assert exc.value.code == 2
    assert "argument --amplitude: must be in [-1.5, 1.5] rad, got nan" in capsys.readouterr().err


def test_lockstep_defaults_and_good_values_are_kept():
    serve = build_parser().parse_args(["lockstep", "serve"])
    assert (serve.max_steps, serve.sessions, serve.timeout, serve.port, serve.allow_remote) == \
        (None, None, 10.0, 47500, False)
    demo = build_parser().parse_args(["lockstep", "demo-client", "--amplitude", "-0.1", "--steps", "1"])
    assert (demo.amplitude, demo.steps, demo.timeout) == (-0.1, 1, 10.0)
    assert build_parser().parse_args(["lockstep", "demo-client"]).steps is None


# ------------------------------------------------------------------ 4. messages in the command's words
def test_robot_refuses_a_remote_listen_address_without_python_keywords(capsys, secret):
    line = error_line(capsys, ["robot", "--listen", "0.0.0.0:0", "--secret-file", str(secret), "--duration", "0.1"])
    assert line == ("teleop robot: error: --listen 0.0.0.0:0: refusing to listen on non-loopback address 0.0.0.0; "
                    "give --allow-remote to expose the port")


def test_operator_refuses_a_remote_bind_address_without_python_keywords(capsys, secret):
    line = error_line(capsys, ["operator", "--bind", "0.0.0.0:0", "--robot", f"127.0.0.1:{free_port()}",
                               "--video-listen", "127.0.0.1:0", "--secret-file", str(secret), "--duration", "0.1"])
    assert line == ("teleop operator: error: --bind 0.0.0.0:0: refusing to listen on non-loopback address 0.0.0.0; "
                    "give --allow-remote to expose the port")


def _operator_input_error(argv: list[str], secret) -> str:
    """The operator's error for a bad --input (said as it exits: SystemExit's message)."""
    with pytest.raises(SystemExit) as exc:
        main(["operator", *argv, "--robot", f"127.0.0.1:{free_port()}", "--video-listen", "127.0.0.1:0",
              "--secret-file", str(secret), "--duration", "0.1"])
    return str(exc.value.code)


def test_operator_refuses_a_remote_mvn_stream_without_python_keywords(secret):
    message = _operator_input_error(["--input", "xsens-live:0.0.0.0:0"], secret)
    assert message == ("teleop operator: error: --input xsens-live:0.0.0.0:0: refusing to listen on 0.0.0.0 "
                       "(not loopback) for the MVN stream: give --allow-remote to accept a stream from another PC")


@pytest.mark.parametrize("spec", ["xsens-live:abc", "xsens-live:127.0.0.1:abc", "xsens-live:70000"])
def test_operator_says_what_a_bad_mvn_port_must_be(capsys, spec):
    """It said "bad MVN port 'abc' in 'abc': expected [HOST:]PORT", then exited 1 where --robot
    with a bad port exits 2: refused by argparse now, with the usage."""
    assert usage_error(capsys, ["operator", "--input", spec]) == \
        f"teleop operator: error: argument --source/--input: {spec}: the MVN port must be a number 1-65535"


def test_eval_names_its_missing_positional_by_its_choices(capsys):
    """"the following arguments are required: what" named a Python variable."""
    message = usage_error(capsys, ["eval", "--train", "a", "--test", "b"])
    assert message == "teleop eval: error: the following arguments are required: {promp}"


def test_bench_names_its_missing_positional_by_the_benchmarks(capsys):
    """"the following arguments are required: name"."""
    from teleop.benchmarks.cli import available

    message = usage_error(capsys, ["bench"])
    assert message == ("teleop bench: error: the following arguments are required: {"
                       + ",".join(sorted(available())) + "}")


# ------------------------------------------------------------------ 5. options that do not apply
@pytest.mark.parametrize("argv, expected", [
    (["operator", "--vr-config", "roles.json"],
     "--vr-config configures the OpenVR input: give --input openvr too (not --input synthetic)"),
    (["operator", "--input", "xsens-live", "--vr-config", "roles.json"],
     "--vr-config configures the OpenVR input: give --input openvr too (not --input xsens-live)"),
    (["operator", "--loop"], "--loop is about replaying a motion file: give --input FILE (not --input synthetic)"),
    (["operator", "--input", "openvr", "--loop"],
     "--loop is about replaying a motion file: give --input FILE (not --input openvr)"),
    (["operator", "--speed", "2"],
     "--speed is about replaying a motion file: give --input FILE (not --input synthetic)"),
    (["operator", "--input", "xsens-live:9763", "--speed", "1"],     # given, though equal to the default
     "--speed is about replaying a motion file: give --input FILE (not --input xsens-live:9763)"),
    (["operator", "--rate-hz", "50"],
     "--rate-hz is about replaying a motion file: give --input FILE (not --input synthetic)"),
    (["operator", "--port", "8090"], "--port is the web viewer's port: give --view web too"),
    (["operator", "--view", "headset", "--port", "8090"], "--port is the web viewer's port: give --view web too"),
    (["robot", "--force"], "--force overwrites an existing recording: give --record FILE too"),
    (["operator", "--force"], "--force overwrites an existing recording: give --record FILE too"),
])
def test_options_that_do_not_apply_are_refused(capsys, argv, expected):
    """They were accepted and ignored, unlike --task without --record; refused before the
    station starts (no secret, no port)."""
    line = error_line(capsys, [*argv, "--duration", "0.1"], code=2)     # the command line cannot work
    assert line == f"teleop {argv[0]}: error: {expected}"


@pytest.mark.parametrize("argv", [
    [],                                                               # defaults never trigger a refusal
    ["--input", "take.npz", "--loop", "--speed", "2", "--rate-hz", "50"],
    ["--input", "take.npz", "--speed", "1"],
    ["--input", "openvr", "--vr-config", "roles.json"],
    ["--view", "web", "--port", "0"],
    ["--record", "session.mcap", "--force"],
])
def test_options_that_apply_are_accepted(argv, tmp_path):
    from teleop.stations.cli import _check_operator_options, _check_station_files

    args = build_parser().parse_args(["operator", *argv])
    if args.record is not None:
        args.record = tmp_path / args.record
    _check_station_files(args)
    _check_operator_options(args)
    _check_station_files(build_parser().parse_args(["robot", "--record", str(tmp_path / "r.mcap"), "--force"]))


def test_netem_warns_when_its_jitter_exceeds_its_delay(capsys):
    """σ above the delay clips many delays to 0 (16 % at σ = delay); it ran without a word."""
    from conftest import free_port

    args = ["netem", "--listen", f"127.0.0.1:{free_port()}", "--target", "127.0.0.1:9", "--duration", "0.1"]
    assert main([*args, "--delay-ms", "100", "--jitter-ms", "300"]) == 0
    err = capsys.readouterr().err
    assert "warning: --jitter-ms 300 is more than the delay 100 ms: 37 % of the packets" in err
    assert main([*args, "--delay-ms", "100"]) == 0                # the thesis's 2/15: no warning
    assert "warning" not in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["robot", "--record"], ["operator", "--record"], ["record", "-o"],
                                  ["dataset", "trim", "{rec}", "-o"]])
def test_an_output_below_a_file_names_the_option_and_the_file(tmp_path, capsys, argv):
    """Was the OS's "/tmp/.../library.npz: File exists" once the station started."""
    notes = tmp_path / "library.npz"
    notes.write_text("not a folder")
    target = notes / "x.mcap"
    rec = tmp_path / "rec.mcap"
    if "{rec}" in argv:
        assert main(["record", "--duration", "0.2", "-o", str(rec)]) == 0
        capsys.readouterr()
    args = [a.format(rec=rec) for a in argv] + [str(target)]
    rc = main(args + (["--duration", "0.1"] if argv[0] in ("robot", "operator", "record") else []))
    assert rc == 1
    err = capsys.readouterr().err
    assert f"{argv[-1]} {target}: {notes} is a file, not a folder" in err and "File exists" not in err


@pytest.mark.parametrize("argv, command, extra", [(["demo", "--nosuch"], "demo", "--nosuch"),
                                                   (["dataset", "inspect", "a.mcap", "b.mcap"], "dataset inspect",
                                                    "b.mcap"),
                                                   (["lockstep", "serve", "--nosuch"], "lockstep serve", "--nosuch")])
def test_an_unknown_option_is_refused_by_the_commands_own_parser(capsys, argv, command, extra):
    """`teleop demo --nosuch` showed the top-level usage ("teleop [-h] COMMAND ..."), which
    lists none of demo's options; `dataset inspect A B` the usage of `dataset`, not of inspect."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.startswith(f"usage: teleop {command} ")
    assert err.strip().endswith(f"teleop {command}: error: unrecognized arguments: {extra}")


@pytest.mark.parametrize("argv, option", [(["robot", "--video-to", "127.0.0.1:0"], "--video-to"),
                                          (["operator", "--robot", "127.0.0.1:0"], "--robot"),
                                          (["netem", "--target", "127.0.0.1:0"], "--target")])
def test_an_address_to_send_to_cannot_have_port_0(capsys, argv, option):
    """Port 0 means "any free port" when binding; as a destination it sent the video nowhere
    (`teleop robot --video-to 127.0.0.1:0` was accepted)."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert (f"argument {option}: port 0 of 127.0.0.1:0 is no destination (it means any free port when binding): "
            "give the port the other side listens on") in capsys.readouterr().err


def test_operator_refuses_a_rate_for_a_file_that_states_its_own(capsys):
    """As `teleop retarget` does: given with a BVH or .npz, --rate-hz was silently ignored."""
    take = Path(__file__).resolve().parents[1] / "datasets" / "synthetic" / "squat" / "squat_0.npz"
    assert main(["operator", "--input", str(take), "--rate-hz", "50", "--duration", "0.1"]) == 2
    assert "--rate-hz applies to Xsens CSV and AMC files only" in capsys.readouterr().err


def test_a_number_written_with_an_underscore_is_refused(capsys):
    """Python reads --rtt 1_5 as 15: a typo for 1.5 ran a trial at a ten times longer delay
    (here refused as above the 10 s modelled, which hid the typo)."""
    assert usage_error(capsys, ["trial", "--rtt", "1_5"]).endswith(
        "argument --rtt: '1_5': write the number without '_' (e.g. 1.5)")


def test_bench_retarget_reads_the_pose_exports_only(tmp_path):
    from teleop.benchmarks.retarget_bench import xsens_takes

    for name in ("p1.csv", "p12.csv", "pose.csv", "plan.csv", "1.csv"):
        (tmp_path / name).write_text("t")
    assert [p.name for p in xsens_takes(tmp_path)] == ["p1.csv", "p12.csv"]


@pytest.mark.parametrize("command", [["demo", "--duration", "1"], ["trial", "--train", "x", "--test", "y"]])
def test_a_loss_burst_without_a_loss_is_refused_with_a_usage_message(command, tmp_path, capsys):
    """--loss-burst shapes the losses of --loss: alone it would silently change nothing."""
    assert main([*command, "--out", str(tmp_path / "out"), "--loss-burst", "3"]) == 2
    assert "--loss-burst 3 shapes the losses of --loss, which loses none" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("argv", [["robot", "--listen", "0.0.0.0:0", "--duration", "0.1"],
                                  ["operator", "--video-listen", "0.0.0.0:0", "--duration", "0.1"],
                                  ["netem", "--listen", "0.0.0.0:0"]])
def test_a_refused_remote_address_is_a_check_before_the_work_no_debug_hint(capsys, secret, argv):
    """Refused before any port opened: what to change and no more (the TELEOP_DEBUG hint
    "shows where it happened" is for errors raised from inside the work; README)."""
    assert main([*argv, "--secret-file", str(secret)] if argv[0] != "netem" else argv) == 1
    err = capsys.readouterr().err
    assert "refusing to listen on non-loopback address 0.0.0.0" in err
    assert "TELEOP_DEBUG" not in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("argv, said", [
    # A traceback (ZeroDivisionError): the motions became a few samples long, every error 0.
    (["tune", "--speed", "10000"], "argument --speed: must be in (0, 10], got 10000"),
    # Accepted, and ran for good.
    (["demo", "--duration", "1e12"], "argument --duration: must be in (0, 3600] s, got 1e12"),
    (["operator", "--jitter-buffer", "1e9"], "argument --jitter-buffer: must be in [0, 10] s, got 1e9"),
])
def test_lengths_without_an_end_are_refused(capsys, argv, said):
    assert usage_error(capsys, argv) == f"teleop {argv[0]}: error: {said}"


def test_a_test_video_of_a_million_seconds_is_refused(capsys, tmp_path):
    """30 million frames to render, accepted."""
    line = error_line(capsys, ["jog", "--make-test-video", str(tmp_path / "t.mp4"), "--duration", "1e6"], code=2)
    assert line == "teleop jog: error: --duration 1e+06 s: a test video lasts at most 600 s (replay it with --loop " \
                   "for a longer session)"
    assert not (tmp_path / "t.mp4").exists()


def test_the_tuning_target_of_a_heuristic_without_error_is_not_comparable():
    from teleop.tuning.experiment import check_target
    from teleop.tuning.report import format_setup_table

    row = {"AE-A": 0.0, "AE-S": 0.0, "OS": 0.0, "ST5": 0.1, "R50": 0.1}
    target = check_target({"Classic": dict(row), "Optimiser": dict(row)})
    assert target["ae_improvement"] is None and not target["ae_ok"] and not target["met"]
    table = format_setup_table({"setup": 1, "name": "no gravity", "rows": {}, "target": target})
    assert "target: Optimiser AE-A not comparable with the best heuristic (Classic)" in table


@pytest.mark.parametrize("argv, said", [
    (["dataset", "label", "x.mcap", "--task", "squat", "--episode", "-1"], "argument --episode: must be >= 0, got -1"),
    (["train", "datasets/synthetic", "--tasks", ""],
     "argument --tasks: give one or more comma-separated names (leave the option out for all)"),
    (["eval", "promp", "--train", "a", "--test", "b", "--test-performers", ","],
     "argument --test-performers: give one or more comma-separated names (leave the option out for all)"),
])
def test_empty_or_negative_selections_are_usage_errors(capsys, argv, said):
    """--episode -1 was "no episode -1" with exit code 1; --tasks '' kept every task."""
    assert usage_error(capsys, argv).endswith(f"error: {said}")


def test_a_joint_named_twice_in_lockstep_joints_is_a_usage_error_naming_it(capsys):
    """It said "a joint is listed twice" (no joint, no option), exit code 1 and the
    TELEOP_DEBUG hint."""
    assert main(["lockstep", "serve", "--joints", "left_arm,l_elbow", "--port", "0", "--sessions", "1"]) == 2
    err = capsys.readouterr().err
    assert "--joints left_arm,l_elbow: l_elbow named twice" in err and "TELEOP_DEBUG" not in err
