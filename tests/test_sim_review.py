"""Regressions found in a review of teleop/sim: calibration around the nominal (link
patterns, no latency), recordings that cannot be replayed, torques reported after a reset,
and lock-step sessions (torque mode left by a previous session, bad HELLO, timeouts)."""

from __future__ import annotations

import json
import socket
import threading

import numpy as np
import pytest

from teleop.robot.model import NQ_BASE
from teleop.sim import lockstep as ls
from teleop.sim.actuator import description_actuator_params, link_scale_for, params_from_dict
from teleop.sim.calibration import (CalibrationParameters, apply_parameters, calibrate, group_links,
                                    make_test_recording, recovery_errors, replay, rmse)
from teleop.sim.lockstep_client import LockstepClient


# ------------------------------------------------------------------------- calibration
def test_calibration_keeps_the_nominal_scales_of_link_patterns(robot):
    """A nominal ``[links."r_*"] mass_scale = 1.5`` is the starting point of the fit: the
    identity point must leave it at 1.5 (it was dropped to 1 for every link the group moves)."""
    nominal = params_from_dict({"links": {"r_*": {"mass_scale": 1.5, "com_scale": 0.8}}}, robot.joint_names,
                               robot.limits.effort)
    params = apply_parameters(robot, nominal, CalibrationParameters.nominal(0.016, ["right_arm"]))
    for link in group_links(robot, "right_arm"):
        assert link_scale_for(params.link_scales, link) == pytest.approx((1.5, 0.8)), link
    doubled = CalibrationParameters.nominal(0.016, ["right_arm"])
    doubled.scales["right_arm"]["mass_scale"] = 2.0
    params = apply_parameters(robot, nominal, doubled)
    assert link_scale_for(params.link_scales, "r_forearm") == pytest.approx((3.0, 0.8))


def test_recovery_error_of_a_hidden_latency_of_zero_is_left_out():
    truth = {"latency": 0.0, "scales": {"r_elbow": {"kd": 1.2}}}
    fitted = CalibrationParameters(0.001, {"r_elbow": {"kd": 1.2}})
    assert recovery_errors(fitted, truth, ("kd",)) == {"r_elbow.kd": pytest.approx(0.0)}


def test_calibration_of_a_nominal_without_latency_starts_from_it(robot):
    """A recording made with the nominal itself (no latency, no perturbation, no noise):
    the nominal's RMSE is 0 and the fit must report it so (it started at 10 ms), and a
    recording with a hidden latency of 0 must not end the fit in ZeroDivisionError."""
    nominal = description_actuator_params(robot)
    nominal.latency = 0.0
    rec = make_test_recording(robot, nominal, ["r_elbow"], perturb=0.0, seed=2, duration=0.3, noise_std=0.0)
    assert rmse(replay(robot, rec, nominal), rec.measured) == 0.0
    result = calibrate(robot, rec, nominal, max_evaluations=3, progress=False)
    assert result.rmse_before == pytest.approx(0.0, abs=1e-9)
    assert result.fitted.latency < 1e-6
    assert "latency" not in result.recovery_error


def _recording_json(**changes) -> dict:
    T = 5
    content = {"time": [i * 0.002 for i in range(T)], "joint_names": ["r_elbow"], "commanded": [[0.3]] * T,
               "measured": [[0.3]] * T, "meta": {"groups": ["r_elbow"]}}
    content.update(changes)
    return content


@pytest.mark.parametrize("content, fragment", [
    (_recording_json(joint_names=["r_elbow", "bogus"], commanded=[[0.3, 0]] * 5, measured=[[0.3, 0]] * 5),
     "['bogus'] are not joints"),
    (_recording_json(joint_names=["r_elbow", "r_elbow"], commanded=[[0.3, 0.3]] * 5, measured=[[0.3, 0.3]] * 5),
     "recorded more than once"),
    (_recording_json(time=[i * 0.0025 for i in range(5)]), "is not a multiple of the physics step"),
    (_recording_json(meta={"groups": ["r_elbow"], "q0": [0.0, 1.0]}), "meta 'q0' must be 32"),
    (_recording_json(meta={"groups": ["r_elbow"], "base_height": "high"}), "meta 'base_height'"),
    (_recording_json(meta={"groups": "r_elbow"}), "meta 'groups' must be a list"),
])
def test_recording_the_replay_cannot_use_is_a_clear_error_naming_the_file(tmp_path, capsys, content, fragment):
    from teleop.cli import main

    path = tmp_path / "odd_recording.json"
    path.write_text(json.dumps(content))
    assert main(["calibrate-sim", "--data", str(path), "--max-evaluations", "2", "--out", str(tmp_path / "cal"),
                 "--json"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"teleop calibrate-sim: error: {path}: ") and fragment in err
    # Found before any replay: the error alone (README), no TELEOP_DEBUG hint.
    assert len(err.splitlines()) == 1 and "TELEOP_DEBUG" not in err


def test_a_text_file_named_npz_is_not_called_pickled_data(tmp_path):
    from teleop.sim.recording_io import RecordingError, load_recording

    (tmp_path / "r.npz").write_text("time,q\n0,0\n")
    with pytest.raises(RecordingError, match=r"r\.npz: not a \.npz file"):
        load_recording(tmp_path / "r.npz")


# ---------------------------------------------------------------------------- simulator
@pytest.mark.parametrize("servo", ["pybullet", "explicit"])
def test_applied_torques_are_zero_after_a_reset(robot, servo):
    """After reset() no step has applied anything: the last step's torques (here the 3 N m a
    torque controller applied before) must not be reported as applied."""
    from teleop.sim.simulator import Simulation

    arm = robot.group_indices("left_arm")
    with Simulation(robot, visual=False, fixed_base=True, servo=servo) as sim:
        sim.set_torque_mode(True, arm)
        sim.apply_joint_torques(np.full(len(arm), 3.0), arm)
        sim.step(5)
        assert np.abs(sim.applied_joint_torques()).max() > 0.5
        sim.set_torque_mode(False)
        sim.reset()
        np.testing.assert_array_equal(sim.applied_joint_torques(), np.zeros(robot.n_joints))
        sim.step(1)
        assert np.abs(sim.applied_joint_torques()).max() > 0.0   # the servos hold the arms again


# ----------------------------------------------------------------------------- lock-step
@pytest.fixture(scope="module")
def fixed_sim(robot):
    from teleop.sim.simulator import Simulation

    sim = Simulation(robot, visual=False, fixed_base=True)
    yield sim
    sim.close()


def test_position_session_after_a_torque_session_without_reset(fixed_sim, robot):
    """reset_on_connect=False: the joints a torque session released must follow the next
    session's position commands (they stayed in torque mode and ignored them)."""
    joints = robot.group_indices("left_arm")
    with ls.LockstepServer(fixed_sim, joints, command_timeout=10.0, reset_on_connect=False) as srv:
        thread = threading.Thread(target=srv.serve_forever, kwargs={"max_sessions": 2, "log": None}, daemon=True)
        thread.start()
        with LockstepClient(port=srv.address[1], timeout=10) as client:
            client.run(lambda s: (ls.MODE_TORQUE, np.zeros(len(joints))), steps=20)
        target = []

        def bend_the_elbow(state):
            if not target:                                      # from where the arm is
                target.append(state.q[7 + joints].copy())
                target[0][3] += 0.3
            return ls.MODE_POSITION, target[0]

        with LockstepClient(port=srv.address[1], timeout=10) as client:
            report = client.run(bend_the_elbow, steps=500)
            last = client.report.last_seq
        thread.join(timeout=30)
    assert report.commands == 500 and last == 500
    assert [r.error for r in srv.reports] == [None, None]
    assert abs(fixed_sim.joint_positions()[joints[3]] - target[0][3]) < 0.02


def test_bad_hello_and_a_silent_controller_get_the_right_errors(fixed_sim, robot):
    """A HELLO whose 'protocol' is not a number is BAD_PAYLOAD (it was INTERNAL: a server
    bug); a controller that never says HELLO times out waiting for HELLO (not "command seq 0")."""
    # 1 s, not 0.3: the HELLOs sent must reach the server within it on a loaded machine too.
    with ls.LockstepServer(fixed_sim, robot.group_indices("left_arm"), command_timeout=1.0) as srv:
        thread = threading.Thread(target=srv.serve_forever, kwargs={"max_sessions": 3, "log": None}, daemon=True)
        thread.start()
        errors = []
        for payload in (b'{"protocol": "one"}', b'{"protocol": 2}', None):
            with socket.create_connection(srv.address, timeout=5) as raw:
                if payload is not None:
                    raw.sendall(ls.encode(ls.HELLO, payload))
                msg_type, _, body = ls.read_frame(raw)
                assert msg_type == ls.ERROR
                errors.append(ls.decode_error(body))
        thread.join(timeout=10)
    assert [e.code for e in errors] == [ls.E_PAYLOAD, ls.E_VERSION, ls.E_TIMEOUT]
    assert "HELLO 'protocol' must be a number" in str(errors[0])
    assert "(expected HELLO)" in str(errors[2])


def test_a_hello_without_its_protocol_is_refused(fixed_sim, robot):
    """A HELLO that does not say its protocol was taken for the server's own version: a
    client of another version ran and misread every STATE."""
    with ls.LockstepServer(fixed_sim, robot.group_indices("left_arm"), command_timeout=5.0) as srv:
        thread = threading.Thread(target=srv.serve_one, daemon=True)
        thread.start()
        with socket.create_connection(srv.address, timeout=5) as raw:
            raw.sendall(ls.encode(ls.HELLO, b'{"client": "old"}'))
            msg_type, _, body = ls.read_frame(raw)
        thread.join(timeout=10)
    assert msg_type == ls.ERROR
    error = ls.decode_error(body)
    assert error.code == ls.E_PAYLOAD and 'HELLO must say the protocol it speaks: {"protocol": 1}' in str(error)


def _command_frame(seq: int, values: np.ndarray, reserved: tuple[int, int] = (0, 0), flags: int = 0) -> bytes:
    payload = ls.COMMAND_HEAD.pack(seq, ls.MODE_POSITION, *reserved, len(values)) + values.astype("<f8").tobytes()
    return ls.encode(ls.COMMAND, payload, flags)


@pytest.mark.parametrize("reserved, flags, words", [((1, 0), 0, "reserved bytes must be 0, got 1 and 0"),
                                                    ((0, 7), 0, "reserved bytes must be 0, got 0 and 7"),
                                                    ((0, 0), 4, "header flags 0x0004, COMMAND defines none")],
                         ids=["reserved-byte", "reserved-half", "flags"])
def test_a_command_with_reserved_bytes_or_flags_set_is_refused_unapplied(fixed_sim, robot, reserved, flags, words):
    """Reserved bytes and COMMAND flags are 0 in this protocol: a value there is a client of
    another version, whose command was applied as if it were ours."""
    joints = robot.group_indices("left_arm")
    with ls.LockstepServer(fixed_sim, joints, command_timeout=5.0) as srv:
        thread = threading.Thread(target=srv.serve_one, daemon=True)
        thread.start()
        with socket.create_connection(srv.address, timeout=5) as raw:
            raw.sendall(ls.encode_json(ls.HELLO, {"client": "strict", "protocol": ls.VERSION}))
            assert ls.read_frame(raw)[0] == ls.WELCOME
            _, state_flags, state_payload = ls.read_frame(raw)
            state = ls.decode_state(state_payload, state_flags)
            home = state.q[NQ_BASE:][joints]
            raw.sendall(_command_frame(0, home))                           # a well-formed one is applied
            assert ls.read_frame(raw)[0] == ls.STATE
            raw.sendall(_command_frame(1, home, reserved, flags))
            msg_type, _, body = ls.read_frame(raw)
        thread.join(timeout=10)
    assert msg_type == ls.ERROR
    error = ls.decode_error(body)
    assert error.code == ls.E_PAYLOAD and words in str(error)
    assert srv.reports[-1].steps == 1


@pytest.mark.parametrize("timeout", [0.0, -1.0, float("nan")])
def test_a_command_timeout_that_is_not_positive_is_refused(fixed_sim, robot, timeout):
    with pytest.raises(ValueError, match="command timeout must be a positive number of seconds"):
        ls.LockstepServer(fixed_sim, robot.group_indices("left_arm"), command_timeout=timeout)


def test_serve_with_an_unknown_joint_group_is_one_line(capsys):
    from teleop.cli import main

    assert main(["lockstep", "serve", "--joints", "left_armm", "--port", "0",
                 "--sessions", "1"]) == 2   # a bad option value
    err = capsys.readouterr().err
    assert err.startswith("teleop lockstep serve: error: --joints: iCub has no joint 'left_armm' (groups: ")
    assert "Traceback" not in err
