"""Lock-step coupling (docs/lockstep_protocol.md; reference §A.5): strict alternation,
sequence counters, and clear errors on skipped/duplicated sequence numbers and bad data."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from teleop.sim import lockstep as ls
from teleop.sim.lockstep_client import LockstepClient

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def fixed_sim(robot):
    from teleop.sim.simulator import Simulation

    sim = Simulation(robot, visual=False, fixed_base=True)
    yield sim
    sim.close()


@pytest.fixture()
def server(fixed_sim, robot):
    """A server for both arms, run for one session in a background thread."""
    joints = np.concatenate([robot.group_indices("left_arm"), robot.group_indices("right_arm")])
    servers = []

    def start(max_steps=None, timeout=30.0):
        srv = ls.LockstepServer(fixed_sim, joints, max_steps=max_steps, command_timeout=timeout)
        thread = threading.Thread(target=srv.serve_one, daemon=True)
        thread.start()
        servers.append((srv, thread))
        return srv, thread

    yield start
    for srv, thread in servers:
        thread.join(timeout=30)
        srv.close()


def _run_client_process(port: int, *extra: str) -> dict:
    """The demo controller in a separate process; returns its JSON summary."""
    cmd = [sys.executable, "-m", "teleop.sim.lockstep_client", "--port", str(port), "--timeout", "30", *extra]
    out = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=240,
                         env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    assert lines, f"client printed no summary; stderr:\n{out.stderr}"
    return json.loads(lines[-1])


def test_codec_round_trip():
    q, v, tau = np.arange(39.0), -np.arange(38.0), np.full(32, 0.5)
    frame = ls.encode_state(7, 0.007, q, v, tau, ls.FLAG_FINAL)
    head = ls.HEADER.unpack(frame[:ls.HEADER.size])
    assert head == (b"LKSP", 1, ls.STATE, ls.FLAG_FINAL, len(frame) - 12)
    state = ls.decode_state(frame[12:], head[3])
    assert state.seq == 7 and state.final and not state.saturated
    np.testing.assert_array_equal(state.q, q)
    np.testing.assert_array_equal(state.v, v)
    np.testing.assert_array_equal(state.tau, tau)
    seq, mode, values = ls.decode_command(ls.encode_command(41, ls.MODE_TORQUE, [1.0, -2.0])[12:])
    assert (seq, mode, values.tolist()) == (41, ls.MODE_TORQUE, [1.0, -2.0])
    with pytest.raises(ls.LockstepError, match="BAD_PAYLOAD"):
        ls.decode_command(ls.encode_command(1, ls.MODE_TORQUE, [1.0, 2.0])[12:-8])   # truncated
    with pytest.raises(ls.LockstepError, match="unknown command mode"):
        ls.decode_command(ls.COMMAND_HEAD.pack(1, 9, 0, 0, 0))


def test_a_state_with_an_undefined_flag_is_refused():
    """A flag this client does not know may change what the state means: refused, not ignored."""
    frame = ls.encode_state(3, 0.003, np.zeros(3), np.zeros(2), np.zeros(1), ls.FLAG_SATURATED | 0x0100)
    with pytest.raises(ls.LockstepError, match=r"BAD_PAYLOAD.*0x0102.*0x0003"):
        ls.decode_state(frame[12:], ls.HEADER.unpack(frame[:12])[3])
    assert ls.decode_state(frame[12:], ls.FLAG_SATURATED).saturated


def test_ten_thousand_steps_with_a_controller_in_another_process(server):
    """10,000 strictly alternating steps: every state seq 0..10000 seen once, every
    command seq 0..9999 applied once, 10 s of simulated time."""
    srv, thread = server(max_steps=10_000)
    summary = _run_client_process(srv.address[1])
    thread.join(timeout=60)
    report = srv.reports[-1]
    assert summary["ok"], summary
    assert (summary["states"], summary["first_seq"], summary["last_seq"]) == (10_001, 0, 10_000)
    assert summary["commands"] == 10_000
    assert summary["seq_gaps"] == 0 and summary["seq_repeats"] == 0
    assert summary["final_time_s"] == pytest.approx(10.0, abs=1e-9)
    assert report.error is None and report.ended_by == "max_steps"
    assert report.steps == 10_000 and report.states_sent == 10_001 and report.last_command_seq == 9_999
    assert report.mode_counts == {"position": 0, "torque": 10_000}
    assert report.sim_time_s == pytest.approx(10.0, abs=1e-6)
    assert report.rtf > 0 and summary["server"]["steps"] == 10_000
    # The external controller really controls the arms: the shoulder swing (0.2 rad) is
    # tracked through torques computed in the other process.
    assert summary["max_tracking_error_rad"] < 0.15


def test_the_demo_clients_tracking_error_is_null_until_measured(robot):
    """A session that ends within the start-up transient (0.5 s) tracked nothing: it reported
    max_tracking_error_rad 0.0, which reads as perfect tracking."""
    from teleop.robot.model import NQ_BASE
    from teleop.sim.lockstep_client import make_demo_controller

    joints = [i for i, name in enumerate(robot.joint_names) if "shoulder_pitch" in name]
    welcome = {"joint_names": robot.joint_names, "controlled_joints": joints}
    controller, stats = make_demo_controller(welcome, robot=robot)
    q = np.zeros(robot.model.nq)
    q[NQ_BASE:] = robot.home_joints()
    state = ls.State(0, 0.1, q, np.zeros(robot.model.nv), np.zeros(len(robot.joint_names)))
    controller(state)
    assert stats["max_tracking_error_rad"] is None
    controller(ls.State(1, 1.5, q, state.v, state.tau))     # the swing's trough: 0.2 rad off home
    assert stats["max_tracking_error_rad"] == pytest.approx(0.2, abs=1e-9)


@pytest.mark.parametrize("fault, applied, words", [("skip", 100, ["expected command seq 100", "got 101", "skipped"]),
                                                   ("duplicate", 101, ["expected command seq 101", "got 100",
                                                                       "duplicated"])])
def test_skipped_or_duplicated_command_is_detected_and_reported(server, fault, applied, words):
    srv, thread = server()
    summary = _run_client_process(srv.address[1], "--fault", fault)
    thread.join(timeout=30)
    report = srv.reports[-1]
    assert report.error_code == ls.E_SEQUENCE and report.ended_by == "error"
    assert report.steps == applied            # nothing applied after the bad command
    for w in words:
        assert w in report.error
    assert not summary["ok"] and summary["error_code"] == ls.E_SEQUENCE
    assert "expected command seq" in summary["error"]   # the controller was told why


def _last_reply_of_a_client_served(states: list[bytes], expected, match: str) -> tuple:
    """A (fake) simulator welcomes a LockstepClient and sends ``states``, reading a COMMAND
    after each but the last; the client must raise ``expected`` matching ``match``. Returns
    the client, and the frame (type, flags, payload) it sent after the last state."""
    listener = socket.create_server(("127.0.0.1", 0))
    received = {}

    def fake_simulator():
        conn, _ = listener.accept()
        ls.read_frame(conn)                                      # HELLO
        conn.sendall(ls.encode_json(ls.WELCOME, {"controlled_joints": [0]}))
        for state in states:
            conn.sendall(state)
            received["reply"] = ls.read_frame(conn)              # a COMMAND, then the last: the ERROR
        conn.close()

    thread = threading.Thread(target=fake_simulator, daemon=True)
    thread.start()
    with LockstepClient(port=listener.getsockname()[1], timeout=5) as client:
        with pytest.raises(expected, match=match):
            client.run(lambda s: (ls.MODE_TORQUE, np.zeros(1)))
    thread.join(timeout=5)
    listener.close()
    return client, received["reply"]


def test_client_detects_a_skipped_state():
    """A (fake) simulator that skips state 1: the client raises SequenceError and tells it."""
    states = [ls.encode_state(seq, seq * 0.001, np.zeros(8), np.zeros(7), np.zeros(1)) for seq in (0, 2)]
    client, (msg_type, _, payload) = _last_reply_of_a_client_served(states, ls.SequenceError,
                                                                    "expected state seq 1, got 2")
    assert client.report.seq_gaps == 1
    assert msg_type == ls.ERROR and ls.decode_error(payload).code == ls.E_SEQUENCE


def test_client_tells_the_server_why_it_refuses_a_state():
    """A STATE with a flag the protocol does not define: the client raises and tells the
    server BAD_PAYLOAD (the server logged a disconnect)."""
    states = [ls.encode_state(0, 0.0, np.zeros(8), np.zeros(7), np.zeros(1), 0x0100)]
    _, (msg_type, _, payload) = _last_reply_of_a_client_served(states, ls.LockstepError,
                                                               "BAD_PAYLOAD: STATE has header flags 0x0100")
    assert msg_type == ls.ERROR and ls.decode_error(payload).code == ls.E_PAYLOAD


def test_malformed_frame_gets_a_clear_error_and_the_server_survives(fixed_sim, robot):
    joints = robot.group_indices("left_arm")
    with ls.LockstepServer(fixed_sim, joints, command_timeout=5.0) as srv:
        thread = threading.Thread(target=srv.serve_forever, kwargs={"max_sessions": 3, "log": None}, daemon=True)
        thread.start()
        # 1. garbage instead of HELLO
        with socket.create_connection(srv.address, timeout=5) as raw:
            raw.sendall(b"GET / HTTP/1.1\r\n\r\n")
            msg_type, _, payload = ls.read_frame(raw)
        err = ls.decode_error(payload)
        assert msg_type == ls.ERROR and err.code == ls.E_FRAMING and "bad magic" in str(err)
        # 2. a command with the wrong number of values, then 3. a good session on the same server
        with LockstepClient(port=srv.address[1], timeout=5) as client:
            state = client.receive_state()
            client.send_command(state.seq, ls.MODE_TORQUE, np.zeros(3))
            with pytest.raises(ls.PeerError, match="has 3 values, this session controls 7 joints"):
                client.receive_state()
        with LockstepClient(port=srv.address[1], timeout=5) as client:
            hold = lambda s: (ls.MODE_POSITION, s.q[7 + joints])  # noqa: E731
            report = client.run(hold, steps=50)
            assert report.commands == 50 and client.stats["steps"] == 50
        thread.join(timeout=30)
    assert [r.error_code for r in srv.reports] == [ls.E_FRAMING, ls.E_PAYLOAD, None]
    assert srv.reports[2].mode_counts["position"] == 50


def test_non_finite_command_is_rejected(server):
    srv, thread = server()
    with LockstepClient(port=srv.address[1], timeout=5) as client:
        state = client.receive_state()
        client.send_command(state.seq, ls.MODE_TORQUE, np.full(14, np.nan))
        with pytest.raises(ls.PeerError, match="non-finite"):
            client.receive_state()
    thread.join(timeout=10)
    assert srv.reports[-1].steps == 0


def test_a_silent_controller_times_out_with_a_clear_error(server):
    # 1 s, not 0.3: the timeout also covers the HELLO, which a loaded machine may delay.
    srv, thread = server(timeout=1.0)
    with LockstepClient(port=srv.address[1], timeout=5) as client:
        assert client.receive_state().seq == 0
        with pytest.raises(ls.PeerError, match="TIMEOUT: no message from the controller within 1 s"):
            client.receive_state()                      # we never answered state 0
    thread.join(timeout=10)
    assert srv.reports[-1].error_code == ls.E_TIMEOUT and srv.reports[-1].steps == 0


def test_demo_client_without_a_server_names_the_address(capsys):
    """Nothing listening: one line naming the refused address and what to start."""
    from teleop.cli import main

    with socket.socket() as bound:          # bound, not listening: connections to it are refused
        bound.bind(("127.0.0.1", 0))
        port = bound.getsockname()[1]
        assert main(["lockstep", "demo-client", "--port", str(port)]) == 1
    err = capsys.readouterr().err
    assert f"teleop lockstep demo-client: error: connection to 127.0.0.1:{port} refused" in err
    assert "is `teleop lockstep serve` running?" in err
    assert "Errno" not in err


def test_demo_client_prints_its_summary_when_the_server_goes_away(capsys, robot):
    """A server stopped mid-session: the summary of what ran and why it ended (before: one
    "[Errno 104] Connection reset by peer" line, no summary, though the help promises one)."""
    from teleop.cli import main

    listener = socket.create_server(("127.0.0.1", 0))
    joints = [int(j) for j in robot.group_indices("left_arm")]

    def server_that_stops():
        conn, _ = listener.accept()
        ls.read_frame(conn)                                      # HELLO
        conn.sendall(ls.encode_json(ls.WELCOME, {"controlled_joints": joints, "joint_names": robot.joint_names}))
        q, v = robot.home_configuration(), np.zeros(robot.model.nv)
        for seq in range(3):
            conn.sendall(ls.encode_state(seq, 0.001 * seq, q, v, np.zeros(len(joints))))
            ls.read_frame(conn)                                  # COMMAND seq
        conn.close()                                             # gone, without a BYE

    thread = threading.Thread(target=server_that_stops, daemon=True)
    thread.start()
    port = listener.getsockname()[1]
    try:
        assert main(["lockstep", "demo-client", "--port", str(port), "--timeout", "5"]) == 1
    finally:
        thread.join(timeout=5)
        listener.close()
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["ok"] is False and summary["error_code"] == "connection_lost"
    assert summary["error"].startswith(f"connection to the server at 127.0.0.1:{port} lost after 3 states")
    assert (summary["states"], summary["commands"], summary["last_seq"]) == (3, 3, 2)


HOSTILE_JSON = [b"[" * 100000 + b"]" * 100000,           # nesting deeper than the recursion limit
                b'{"protocol": ' + b"1" * 5000 + b"}"]    # more digits than int() accepts


@pytest.mark.parametrize("payload", HOSTILE_JSON, ids=["deep", "5000-digit-int"])
def test_hostile_json_is_a_bad_payload(payload):
    with pytest.raises(ls.LockstepError, match="BAD_PAYLOAD") as info:
        ls.decode_json(payload, "HELLO")
    assert info.value.code == ls.E_PAYLOAD and "\n" not in str(info.value)


@pytest.mark.parametrize("payload", HOSTILE_JSON, ids=["deep", "5000-digit-int"])
def test_server_answers_hostile_hello_json_with_bad_payload(server, payload):
    srv, thread = server()
    with socket.create_connection(srv.address, timeout=10) as raw:
        raw.sendall(ls.encode(ls.HELLO, payload))
        msg_type, _, reply = ls.read_frame(raw)
    thread.join(timeout=30)
    assert msg_type == ls.ERROR and ls.decode_error(reply).code == ls.E_PAYLOAD
    assert [r.error_code for r in srv.reports] == [ls.E_PAYLOAD]


@pytest.mark.parametrize("welcome", [b'{"protocol": 1}', b'{"protocol": 1, "controlled_joints": "abc"}',
                                     *HOSTILE_JSON], ids=["no-joints", "bad-joints", "deep", "5000-digit-int"])
def test_client_rejects_a_bad_welcome_with_bad_payload(welcome):
    listener = socket.create_server(("127.0.0.1", 0))

    def fake_server():
        conn, _ = listener.accept()
        with conn:
            ls.read_frame(conn)
            conn.sendall(ls.encode(ls.WELCOME, welcome))

    thread = threading.Thread(target=fake_server, daemon=True)
    thread.start()
    try:
        with pytest.raises(ls.LockstepError, match="BAD_PAYLOAD") as info:
            LockstepClient(port=listener.getsockname()[1], timeout=10)
        assert info.value.code == ls.E_PAYLOAD
    finally:
        thread.join(timeout=10)
        listener.close()


def test_a_controller_trickling_bytes_times_out_per_command(server):
    """The socket's timeout restarts at every byte: one byte per 0.3 s held a 1 s command
    timeout for as long as the controller liked, and every other controller waited."""
    import time

    srv, thread = server(timeout=1.0)
    sock = socket.create_connection(srv.address, timeout=5)
    try:
        frame = ls.encode_json(ls.HELLO, {"client": "slow", "protocol": ls.VERSION})
        start = time.monotonic()
        for byte in frame[:12]:                       # a header byte every 0.3 s: never a whole frame
            sock.sendall(bytes([byte]))
            time.sleep(0.3)
            if not thread.is_alive():
                break
        thread.join(timeout=10)
        # Ended ~1 s in; restarted at every byte, the timeout ended it 1 s after the last of
        # them (4.6 s): the bound between leaves a loaded machine 2.5 s.
        assert time.monotonic() - start < 3.5
    finally:
        sock.close()
    assert srv.reports[-1].error_code == ls.E_TIMEOUT


def test_a_second_controller_is_told_why_no_welcome_comes(server):
    """The server serves one controller at a time; the second's demo-client said only
    "timed out"."""
    srv, thread = server(timeout=5.0)
    with LockstepClient(port=srv.address[1], timeout=5):
        with pytest.raises(TimeoutError, match="no WELCOME within 0.5 s: another controller's session may be"):
            LockstepClient(port=srv.address[1], timeout=0.5)


def test_a_server_stopped_mid_session_tells_the_controller_and_reports_the_session():
    """Ctrl-C (or SIGTERM) of `teleop lockstep serve` while a controller is connected: the
    controller gets ERROR STOPPED, where a bare closed connection looked like a crash, and
    the server's log has the session cut short (ended by stopped) before "interrupted"."""
    import os
    import signal
    import time

    proc = subprocess.Popen([sys.executable, "-m", "teleop", "lockstep", "serve", "--port", "0",
                             "--joints", "r_elbow", "--timeout", "60"], cwd=REPO,
                            env={**os.environ, "PYTHONPATH": str(REPO)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        banner = proc.stdout.readline()
        assert "waiting for a controller" in banner, banner + proc.stderr.read()
        port = int(banner.split(" on ")[1].split(":")[1].split(":")[0])
        with LockstepClient(port=port, timeout=60.0) as client:
            for _ in range(5):
                state = client.receive_state()
                client.send_command(state.seq, ls.MODE_POSITION, np.array([0.3]))
            deadline = time.monotonic() + 60     # a guard against hanging, not a timing check
            proc.send_signal(signal.SIGINT)
            with pytest.raises(ls.PeerError, match="STOPPED") as exc:
                while time.monotonic() < deadline:
                    state = client.receive_state()
                    client.send_command(state.seq, ls.MODE_POSITION, np.array([0.3]))
            assert exc.value.code == ls.E_STOPPED
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert "ended by stopped: ERROR STOPPED: the simulator was stopped (Ctrl-C or SIGTERM)" in out, out
    assert err.strip().splitlines()[-1] == "interrupted"
