"""Review mends of `teleop calibrate-sim`, `teleop tune` and `teleop lockstep`: a recording's
malformed meta 'truth' refused before any replay; options that cannot go together (tune's
setup overrides, two gains files of one row; calibrate-sim's options of the other mode) and
malformed values (an empty motion or joint list) are exit code 2; a controller's ERROR is
not answered and is logged as the controller's; checks made before any work say what to
change without the TELEOP_DEBUG hint. Fast: no fit, no tune run (both are stubbed)."""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path

import pytest

from conftest import run_cli
from teleop.sim import lockstep as ls

HINT = "TELEOP_DEBUG"
PNG = b"\x89PNG\r\n\x1a\n" + bytes(40)


def _one_error_line(err: str, command: str) -> str:
    """The message of the single ``teleop COMMAND: error: ...`` line of ``err``."""
    lines = [ln for ln in err.splitlines() if ln.startswith(f"teleop {command}: error: ")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0].split(": error: ", 1)[1]


# ------------------------------------------------------------------ calibrate-sim: meta 'truth'
TRUTH = {"latency": 0.016, "scales": {"r_elbow": {"mass_scale": 1.1, "com_scale": 0.9, "kp": 1.0, "kd": 1.2,
                                                  "viscous": 0.8, "coulomb": 1.05}}}


def _recording(path: Path, truth) -> Path:
    """A 5-sample recording of r_elbow held still, with ``truth`` as its meta 'truth'."""
    samples = 5
    content = {"time": [0.002 * i for i in range(samples)], "joint_names": ["r_elbow"],
               "commanded": [[0.5]] * samples, "measured": [[0.5]] * samples,
               "meta": {"groups": ["r_elbow"], "fixed_base": True, "base_height": 0.5, "truth": truth}}
    path.write_text(json.dumps(content))
    return path


def _spoilt(change) -> dict:
    truth = json.loads(json.dumps(TRUTH))
    change(truth)
    return truth


@pytest.mark.parametrize("truth, words", [
    (_spoilt(lambda t: t.update(latency="x")), "meta 'truth' 'latency' must be a finite number of seconds >= 0, "
                                               'got "x"'),
    (_spoilt(lambda t: t.update(latency=-0.01)), "'latency' must be a finite number of seconds >= 0, got -0.01"),
    (_spoilt(lambda t: t.update(latency=float("nan"))), "'latency' must be a finite number of seconds >= 0"),
    (_spoilt(lambda t: t.pop("latency")), "meta 'truth' lacks 'latency'"),
    ([1, 2], "meta 'truth' must be an object"),
    (None, "meta 'truth' must be an object"),
    (_spoilt(lambda t: t.update(scales=None)), "meta 'truth' 'scales' must be an object of group -> {parameter: "
                                               "scale}, got null"),
    (_spoilt(lambda t: t["scales"].update(r_elbow=[1])), "'scales' of 'r_elbow' must be an object"),
    (_spoilt(lambda t: t["scales"]["r_elbow"].update(kd=0)), "'scales' of 'r_elbow': kd must be a finite number > 0"),
    (_spoilt(lambda t: t["scales"]["r_elbow"].update(kd=True)), "kd must be a finite number > 0"),
    (_spoilt(lambda t: t["scales"]["r_elbow"].pop("viscous")), "'scales' of 'r_elbow' lacks viscous"),
    (_spoilt(lambda t: t["scales"]["r_elbow"].update(mass=1.0)), "unknown parameters ['mass']"),
], ids=["latency-text", "latency-negative", "latency-nan", "no-latency", "list", "null", "scales-null",
        "group-not-object", "scale-0", "scale-bool", "scale-missing", "scale-unknown"])
def test_a_malformed_truth_is_refused_before_any_replay(tmp_path, capsys, monkeypatch, truth, words):
    """It ended the whole fit with a TypeError / ZeroDivisionError traceback (recovery_errors),
    or said only "FILE: latency" (with the TELEOP_DEBUG hint), after minutes of replays."""
    import teleop.sim.calibration as calibration

    def no_replay(*args, **kwargs):
        raise AssertionError("a replay ran before the recording's truth was checked")

    monkeypatch.setattr(calibration, "replay", no_replay)
    path = _recording(tmp_path / "truth.json", truth)
    out = tmp_path / "cal"
    rc, stdout, err = run_cli(capsys, "calibrate-sim", "--data", path, "--out", out, "--max-evaluations", "16")
    assert rc == 1 and stdout == ""
    message = _one_error_line(err, "calibrate-sim")
    assert message.startswith(f"{path}: ") and words in message, message
    assert HINT not in err and not out.exists()


def test_a_well_formed_truth_passes_the_check(robot):
    from teleop.sim.calibration import check_truth
    from teleop.sim.recording_io import RecordingError

    check_truth(TRUTH)
    check_truth({**TRUTH, "latency": 0})      # no hidden latency: left out of the recovery errors
    check_truth({"latency": 0.01, "scales": {}})
    with pytest.raises(RecordingError, match="too large|finite number"):
        check_truth({**TRUTH, "latency": 10 ** 400})   # a float division by it overflowed
    with pytest.raises(RecordingError):
        check_truth(json.loads('{"latency": 0.01, "scales": {"r_elbow": {"kd": Infinity}}}'))


def test_a_made_test_recordings_truth_passes_the_check(tmp_path, robot):
    from teleop.sim.actuator import description_actuator_params
    from teleop.sim.calibration import check_recording, make_test_recording

    rec = make_test_recording(robot, description_actuator_params(robot), ["r_elbow"], 0.2, 1, duration=0.05)
    check_recording(robot, rec, "made")


# ------------------------------------------------------------------ calibrate-sim: the two modes' options
@pytest.mark.parametrize("argv, words", [
    (["--make-test-recording", "REC.json", "--out", "D", "--max-evaluations", "1", "--json"],
     "--max-evaluations, --out and --json are options of --data (fitting a recording), not of "
     "--make-test-recording (making a test recording): leave them out"),
    (["--make-test-recording", "REC.json", "--json"], "--json is an option of --data"),
    (["--make-test-recording", "REC.json", "--out", "D"], "--out is an option of --data"),
    (["--data", "REC.json", "--duration", "60", "--seed", "3", "--noise", "0.01"],
     "--seed, --duration and --noise are options of --make-test-recording (making a test recording), not of "
     "--data (fitting a recording): leave them out"),
    (["--data", "REC.json", "--perturb", "0.2"], "--perturb is an option of --make-test-recording"),
    (["--data", "REC.json", "--seed", "0"], "--seed is an option of --make-test-recording"),   # default value too
])
def test_an_option_of_the_other_mode_is_refused(tmp_path, capsys, argv, words):
    """They were ignored without a word (--json with --make-test-recording printed text)."""
    argv = [str(tmp_path / a) if a in ("REC.json", "D") else a for a in argv]
    rc, stdout, err = run_cli(capsys, "calibrate-sim", *argv)
    assert rc == 2 and stdout == ""
    assert words in _one_error_line(err, "calibrate-sim")
    assert "(teleop calibrate-sim --help lists the options)" in err
    assert not (tmp_path / "REC.json").exists() and not (tmp_path / "D").exists()


class _Stop(Exception):
    """Raised by a stubbed fit or recording: the options reached the work."""


@pytest.fixture
def params_file(tmp_path, robot) -> Path:
    from teleop.sim.actuator import description_actuator_params, write_actuator_params

    path = tmp_path / "nominal.toml"
    write_actuator_params(description_actuator_params(robot), path)
    return path


def test_options_of_both_modes_are_taken_by_both_and_defaults_are_set(tmp_path, monkeypatch, params_file, recording):
    """--groups, --params, --fit-kp, --force and --robot belong to both modes; each mode's
    own options get their defaults when not given."""
    import teleop.sim.calibration as calibration
    from teleop.cli import main

    calls = []

    def stub(*args, **kwargs):
        calls.append((args, kwargs))
        raise _Stop

    monkeypatch.setattr(calibration, "make_test_recording", stub)
    monkeypatch.setattr(calibration, "calibrate", stub)
    shared = ["--groups", "r_elbow", "--params", str(params_file), "--fit-kp", "--force", "--robot", "icub"]
    with pytest.raises(_Stop):
        main(["calibrate-sim", "--make-test-recording", str(tmp_path / "made.json"), *shared])
    assert calls[-1][0][3:5] == (0.2, 0) and calls[-1][1]["duration"] == 3.0 and calls[-1][1]["noise_std"] == 2e-4
    assert "kp" in calls[-1][1]["perturbed"]
    monkeypatch.chdir(tmp_path)      # the default --out, out/calibration, is checked there
    with pytest.raises(_Stop):
        main(["calibrate-sim", "--data", str(recording), *shared])
    assert calls[-1][1]["max_evaluations"] == 200 and "kp" in calls[-1][1]["fit"]


# ------------------------------------------------------------- calibrate-sim / lockstep / tune: no hint before work
def test_a_binary_params_file_is_said_so_without_the_debug_hint(tmp_path, capsys, recording):
    image = tmp_path / "img.png"
    image.write_bytes(PNG)
    rc, _, err = run_cli(capsys, "calibrate-sim", "--data", recording, "--params", image, "--out", tmp_path / "cal")
    assert rc == 1 and HINT not in err
    assert _one_error_line(err, "calibrate-sim") == (
        f"--params {image}: not a TOML or JSON text file (binary content): give an actuator parameter file, e.g. the "
        "fitted_actuator.toml a fit wrote")


@pytest.mark.parametrize("content, words", [(None, "no such file"), ('latency = "x"', "latency must be")])
def test_a_params_file_that_is_missing_or_wrong_is_said_without_the_debug_hint(tmp_path, capsys, recording, content,
                                                                               words):
    params = tmp_path / "nominal.toml"
    if content is not None:
        params.write_text(content)
    rc, _, err = run_cli(capsys, "calibrate-sim", "--data", recording, "--params", params, "--out", tmp_path / "cal")
    assert rc == 1 and HINT not in err and words in _one_error_line(err, "calibrate-sim")


@pytest.mark.parametrize("command", [["calibrate-sim", "--data", "rec.json"], ["lockstep", "serve", "--port", "0"]])
def test_an_unknown_robot_is_said_without_the_debug_hint(capsys, command):
    rc, _, err = run_cli(capsys, *command, "--robot", "foo")
    assert rc == 1 and HINT not in err
    assert _one_error_line(err, " ".join(command[:2]) if command[0] == "lockstep" else command[0]).startswith(
        "--robot foo: no robot description 'foo'")


@pytest.fixture
def no_tune_run(monkeypatch):
    import teleop.tuning.experiment as experiment

    def no_work(*args, **kwargs):
        raise AssertionError("the experiment ran before the options were checked")

    monkeypatch.setattr(experiment, "run_experiment", no_work)


@pytest.mark.parametrize("name, content, words", [("img.png", PNG, "unsupported motion format"),
                                                  ("empty.csv", b"", "empty file"),
                                                  ("fake.npz", b"hello", "not a .npz file")])
def test_tune_says_a_motion_file_it_cannot_read_without_the_debug_hint(tmp_path, capsys, no_tune_run, name, content,
                                                                       words):
    path = tmp_path / name
    path.write_bytes(content)
    rc, _, err = run_cli(capsys, "tune", "--quick", "--no-save", "--setups", "2", "--eval-motions", path)
    assert rc == 1 and HINT not in err
    message = _one_error_line(err, "tune")
    assert message.startswith(str(path)) and words in message


# ------------------------------------------------------------------ tune: exit code 2 for the command line
@pytest.mark.parametrize("argv, words", [
    (["--setups", "1", "--payload-kg", "5"], "--payload-kg changes setup 4 only, which --setups 1 does not run"),
    (["--setups", "1,2", "--limited-torque", "0.3"], "--limited-torque changes setup 3 only"),
    (["--gains", "a/mine.json", "--gains", "b/mine.json"], "--gains a/mine.json and b/mine.json would both be the "
                                                           "row 'mine': rename one"),
    (["--gains", "mine.json", "--gains", "mine.json"], "--gains mine.json is given twice: give each file once"),
])
def test_tune_options_that_cannot_go_together_exit_2(capsys, no_tune_run, argv, words):
    """They were exit code 1 (a SystemExit with the message). The two gains files need not
    exist: their rows clash whatever they hold."""
    rc, _, err = run_cli(capsys, "tune", "--quick", "--no-save", *argv)
    assert rc == 2 and words in _one_error_line(err, "tune")
    assert "(teleop tune --help lists the options)" in err


@pytest.mark.parametrize("option", ["--eval-motions", "--train-motions"])
@pytest.mark.parametrize("value", [",", "", " , "])
def test_tune_an_empty_motion_list_is_refused_by_argparse(capsys, option, value):
    from teleop.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["tune", "--quick", "--no-save", option, value])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: teleop tune")
    assert f"teleop tune: error: argument {option}: expected comma-separated motion files" in err


def test_tune_a_gains_file_with_wrong_contents_stays_exit_1(tmp_path, capsys, no_tune_run):
    gains = tmp_path / "mine.json"
    gains.write_text('{"mapping": {}}')
    rc, _, err = run_cli(capsys, "tune", "--quick", "--no-save", "--gains", gains)
    assert rc == 1 and HINT not in err and "missing joint(s)" in _one_error_line(err, "tune")


# ------------------------------------------------------------------ lockstep serve --joints
@pytest.mark.parametrize("value", [",", "", " , "])
def test_lockstep_serve_an_empty_joint_list_is_refused_by_argparse(capsys, monkeypatch, value):
    """It loaded the simulation, then said "joints must be a non-empty list of indices in
    0..31" (no option named) with the debug hint, exit code 1."""
    import teleop.robot.model as model
    from teleop.cli import main

    monkeypatch.setattr(model, "RobotModel", lambda *a, **k: pytest.fail("the robot was loaded"))
    with pytest.raises(SystemExit) as exc:
        main(["lockstep", "serve", "--joints", value, "--port", "0"])
    assert exc.value.code == 2
    assert "teleop lockstep serve: error: argument --joints: give at least one joint group or joint name" in \
        capsys.readouterr().err


def test_lockstep_serve_joint_names_are_split_and_the_default_kept():
    from teleop.cli import build_parser
    from teleop.sim.lockstep_cli import _joint_names

    assert _joint_names(" left_arm, r_elbow ,") == ["left_arm", "r_elbow"]
    assert build_parser().parse_args(["lockstep", "serve"]).joints == ["left_arm", "right_arm"]


# ------------------------------------------------------------------ lockstep serve: the controller's ERROR
@pytest.fixture(scope="module")
def fixed_sim(robot):
    from teleop.sim.simulator import Simulation

    sim = Simulation(robot, visual=False, fixed_base=True)
    yield sim
    sim.close()


def _reply(raw: socket.socket) -> bytes:
    """What the server sent before closing (b"": nothing)."""
    data = b""
    while chunk := raw.recv(4096):
        data += chunk
    return data


def test_an_error_from_the_controller_is_not_answered_and_is_logged_as_its(fixed_sim, robot):
    """It was answered with an ERROR and logged as the server's own ("ended by error: ERROR
    INTERNAL: controller crashed"; before HELLO "ERROR FRAMING: hi")."""
    joints = robot.group_indices("left_arm")
    log: list[str] = []
    replies = []
    with ls.LockstepServer(fixed_sim, joints, command_timeout=10.0) as srv:
        thread = threading.Thread(target=srv.serve_forever, kwargs={"max_sessions": 4, "log": log.append},
                                  daemon=True)
        thread.start()
        with socket.create_connection(srv.address, timeout=10) as raw:      # before the HELLO
            raw.sendall(ls.encode_error(ls.E_FRAMING, "hi"))
            replies.append(_reply(raw))
        with socket.create_connection(srv.address, timeout=10) as raw:      # in the session
            raw.sendall(ls.encode_json(ls.HELLO, {"client": "crashing", "protocol": ls.VERSION}))
            assert ls.read_frame(raw)[0] == ls.WELCOME
            assert ls.read_frame(raw)[0] == ls.STATE
            raw.sendall(ls.encode_error(ls.E_INTERNAL, "controller crashed"))
            replies.append(_reply(raw))
        with socket.create_connection(srv.address, timeout=10) as raw:      # a code this side does not know
            raw.sendall(ls.encode_error(99, "custom"))
            replies.append(_reply(raw))
        with socket.create_connection(srv.address, timeout=10) as raw:      # too short to hold its code
            raw.sendall(ls.encode(ls.ERROR, b"\x01"))
            replies.append(_reply(raw))
        thread.join(timeout=30)
    assert replies == [b"", b"", b"", b""]
    assert [r.ended_by for r in srv.reports] == ["client_error"] * 4
    assert [r.error_code for r in srv.reports] == [ls.E_FRAMING, ls.E_INTERNAL, 99, None]
    assert log[0].endswith("ended by client_error: the controller reported ERROR FRAMING: hi")
    assert log[1].startswith("session 2 (crashing): 0 steps")
    assert log[1].endswith("the controller reported ERROR INTERNAL: controller crashed")
    assert log[2].endswith("the controller reported ERROR 99: custom")
    assert log[3].endswith("the controller reported ERROR (truncated: no error code)")


def test_the_protocol_says_an_error_is_not_answered():
    text = (Path(__file__).resolve().parents[1] / "docs" / "lockstep_protocol.md").read_text()
    assert "The receiver does not answer an ERROR" in text
    assert "`the controller reported ERROR <code name" in text
