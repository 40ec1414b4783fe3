"""Python client of the lock-step protocol (docs/lockstep_protocol.md), and a demo controller.

The client is what an external controller links against: it connects, says HELLO, then
answers every STATE with exactly one COMMAND carrying the same sequence number, and checks
that the simulator's sequence numbers run 0, 1, 2, ... without gaps or repeats (the
counters of Tables 3.1/3.2 in ../shared/reference/controller_coupling_and_jogging.md, §A.4).
It needs numpy only (no pybullet): the controller side of §A.1 runs in its own process.

Run as a module it is the demo controller (``python -m teleop.sim.lockstep_client --port P``,
the same as ``teleop lockstep demo-client``): a joint-impedance controller (gravity
compensation + spring-damper, reference §A.6) that holds the arms at their home angles
while the shoulders swing in a slow sine, printing a JSON summary of the session.
"""

from __future__ import annotations

import argparse
import socket
import sys
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from teleop.cli_types import float_in_interval, port as port_number, positive_int
from teleop.json_safe import dumps
from teleop.sim.lockstep import (BYE, ERROR, HELLO, MESSAGE_NAMES, MODE_POSITION, MODE_TORQUE, STATE,
                                 VERSION, WELCOME, E_PAYLOAD, E_SEQUENCE, E_UNEXPECTED, LockstepError,
                                 SequenceError, State,
                                 decode_error, decode_json, decode_state, encode_command, encode_error,
                                 encode_json, read_frame)

#: A controller maps the latest state to (mode, (k,) values): torques [N m] for
#: MODE_TORQUE or joint targets [rad] for MODE_POSITION, for the session's controlled joints.
Controller = Callable[[State], "tuple[int, np.ndarray]"]


@dataclass
class ClientReport:
    """What the client saw: ``states`` received (first and last seq), ``commands`` sent,
    ``seq_gaps``/``seq_repeats`` (always 0 on success: any of them ends the session with a
    SequenceError), the server's BYE statistics, and the client's wall time [s]."""

    states: int = 0
    first_seq: int = -1
    last_seq: int = -1
    commands: int = 0
    seq_gaps: int = 0
    seq_repeats: int = 0
    final_time_s: float = 0.0
    server_stats: dict = field(default_factory=dict)
    wall_time_s: float = 0.0


class LockstepClient:
    """One connection to a :class:`teleop.sim.lockstep.LockstepServer`.

    Args:
        host, port: the server's address (TCP on loopback by default).
        name: a name for the server's log.
        timeout: seconds to wait for any message before giving up (socket.timeout).
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 47500, name: str = "python-client",
                 timeout: float = 10.0) -> None:
        self.sock = _connect(host, port, timeout)
        self.sock.settimeout(timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.sendall(encode_json(HELLO, {"client": name, "protocol": VERSION}))
        try:
            msg_type, _, payload = read_frame(self.sock)
        except TimeoutError:
            self.sock.close()
            # The server serves one controller at a time: it accepted this one and answers once
            # the session before it ends (it said only "timed out").
            raise TimeoutError(f"connected to {host}:{port}, but no WELCOME within {timeout:g} s: another "
                               "controller's session may be running there (one at a time)") from None
        if msg_type == ERROR:
            raise decode_error(payload)
        if msg_type != WELCOME:
            raise LockstepError(E_UNEXPECTED, f"expected WELCOME, got {MESSAGE_NAMES[msg_type]}")
        #: The server's WELCOME: dt, nq, nv, joint_names, controlled_joints, effort_limits...
        self.welcome = decode_json(payload, "WELCOME")
        joints = self.welcome.get("controlled_joints")
        if (not isinstance(joints, list)
                or not all(isinstance(j, int) and not isinstance(j, bool) and 0 <= j < 1 << 31 for j in joints)):
            raise LockstepError(E_PAYLOAD, f"WELCOME 'controlled_joints' must be a list of joint indices, "
                                           f"got {type(joints).__name__}")
        self.controlled_joints = np.array(joints, dtype=int)
        self._expected_seq = 0
        self.report = ClientReport()
        self.stats: dict | None = None

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "LockstepClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def receive_state(self) -> State | None:
        """The next STATE, checked to carry the next sequence number; None when the
        server ended the session with BYE (its statistics are then in :attr:`stats`).

        Raises:
            SequenceError: the server skipped or repeated a state (also reported back to it).
            PeerError: the server sent an ERROR.
        """
        msg_type, flags, payload = read_frame(self.sock)
        if msg_type == BYE:
            self.stats = decode_json(payload, "BYE")
            self.report.server_stats = self.stats
            return None
        if msg_type == ERROR:
            raise decode_error(payload)
        if msg_type != STATE:
            raise LockstepError(E_UNEXPECTED, f"expected STATE, got {MESSAGE_NAMES[msg_type]}")
        try:
            state = decode_state(payload, flags)
        except LockstepError as exc:
            # Told to the server too, as a sequence error is: else it logs a disconnect.
            try:
                self.sock.sendall(encode_error(exc.code, exc.detail))
            except OSError:
                pass
            raise
        r = self.report
        if state.seq != self._expected_seq:
            if state.seq > self._expected_seq:
                r.seq_gaps += 1
            else:
                r.seq_repeats += 1
            kind = "skipped" if state.seq > self._expected_seq else "repeated"
            msg = f"expected state seq {self._expected_seq}, got {state.seq} ({kind})"
            try:
                self.sock.sendall(encode_error(E_SEQUENCE, msg))
            except OSError:
                pass
            raise SequenceError(msg)
        self._expected_seq += 1
        r.states += 1
        r.first_seq = state.seq if r.first_seq < 0 else r.first_seq
        r.last_seq = state.seq
        r.final_time_s = state.t
        return state

    def send_command(self, seq: int, mode: int, values) -> None:
        """Answer state ``seq`` with (k,) values (torques [N m] or targets [rad])."""
        self.sock.sendall(encode_command(seq, mode, values))
        self.report.commands += 1

    def bye(self) -> dict:
        """End the session; returns the server's statistics (steps, sim time, RTF...)."""
        self.sock.sendall(encode_json(BYE, {}))
        while True:
            msg_type, _, payload = read_frame(self.sock)
            if msg_type == BYE:
                self.stats = decode_json(payload, "BYE")
                self.report.server_stats = self.stats
                return self.stats
            if msg_type == ERROR:
                raise decode_error(payload)

    def run(self, controller: Controller, steps: int | None = None) -> ClientReport:
        """Drive the simulation: answer each state with ``controller(state)``.

        Ends after ``steps`` commands (then says BYE), or when the server sends a final
        state / BYE (its ``max_steps``). Returns the :class:`ClientReport`.
        """
        start = time.perf_counter()
        try:
            while True:
                state = self.receive_state()
                if state is None:
                    break
                if state.final:
                    continue  # the server's BYE follows
                if steps is not None and self.report.commands >= steps:
                    self.bye()
                    break
                mode, values = controller(state)
                self.send_command(state.seq, mode, values)
        finally:
            self.report.wall_time_s = time.perf_counter() - start
        return self.report


# ------------------------------------------------------------------------ demo controller
def _connect(host: str, port: int, timeout: float) -> socket.socket:
    """A TCP connection to the server; a failure says which address and what to check."""
    hint = "is `teleop lockstep serve` running?"
    try:
        return socket.create_connection((host, port), timeout=timeout)
    except ConnectionRefusedError:
        raise ConnectionRefusedError(f"connection to {host}:{port} refused: nothing listens there ({hint})") from None
    except socket.gaierror as exc:
        raise ConnectionError(f"cannot resolve host {host!r}: {exc.strerror or exc}") from None
    except TimeoutError:   # socket.timeout is TimeoutError since Python 3.10
        raise TimeoutError(f"no answer from {host}:{port} within {timeout:g} s (is the address reachable? "
                           f"{hint})") from None
    except OSError as exc:
        raise ConnectionError(f"cannot connect to {host}:{port}: {exc.strerror or exc} ({hint})") from None


def make_demo_controller(welcome: dict, amplitude: float = 0.2, period: float = 2.0, stiffness: float = 30.0,
                         mode: str = "torque", robot="icub") -> tuple[Controller, dict]:
    """A joint-impedance controller for the demo (reference §A.6, Eq. JI of
    :mod:`teleop.control.impedance`): the controlled joints track their home angles, the
    shoulder pitches offset by ``amplitude`` [rad] x sin(2 pi t / ``period`` [s]).

    ``robot`` is the client's own RobotModel (or the name of its description); its joint
    order must match the server's WELCOME. Returns (controller, stats) where stats accumulates the tracking
    error [rad]."""
    from teleop.control.impedance import JointImpedance
    from teleop.robot.model import NQ_BASE, RobotModel

    robot = robot if isinstance(robot, RobotModel) else RobotModel(robot)
    if robot.joint_names != welcome.get("joint_names"):
        raise LockstepError(E_UNEXPECTED, "the server's joint order differs from this client's robot model")
    joints = np.array(welcome["controlled_joints"], dtype=int)
    impedance = JointImpedance(robot, joints, stiffness=stiffness)
    home = robot.home_joints()
    swing = np.array([("shoulder_pitch" in robot.joint_names[j]) for j in joints], dtype=float)
    # None until measured: a session that ends within the start-up transient tracked nothing,
    # and 0.0 would read as perfect tracking.
    stats: dict[str, float | None] = {"max_tracking_error_rad": None}

    def controller(state: State):
        desired = home[joints] + swing * amplitude * np.sin(2 * np.pi * state.t / period)
        err = float(np.max(np.abs(desired - state.q[NQ_BASE + joints])))
        if state.t > 0.5:  # after the start-up transient
            stats["max_tracking_error_rad"] = max(stats["max_tracking_error_rad"] or 0.0, err)
        if mode == "position":
            return MODE_POSITION, desired
        return MODE_TORQUE, impedance.torques(state.q, state.v, desired).tau

    return controller, stats


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m teleop.sim.lockstep_client",
                                description="Demo controller over the lock-step protocol (prints a JSON summary).")
    add_demo_arguments(p)
    return run_demo(p.parse_args(argv))


#: The longest wait for a message [s]: a day. 1e12 passed argparse and overflowed the
#: socket's timeout when the first controller connected (a traceback, the server gone).
MAX_COMMAND_TIMEOUT_S = 86400.0
#: The widest shoulder swing of the demo controller [rad] (100 rad passed and "ok": true).
MAX_AMPLITUDE_RAD = 1.5


def command_timeout(text: str) -> float:
    """``--timeout``: seconds in (0, :data:`MAX_COMMAND_TIMEOUT_S`]."""
    return float_in_interval(text, 0.0, MAX_COMMAND_TIMEOUT_S, low_open=True, unit="s")


def swing_amplitude(text: str) -> float:
    """``--amplitude``: radians in [-:data:`MAX_AMPLITUDE_RAD`, :data:`MAX_AMPLITUDE_RAD`]."""
    return float_in_interval(text, -MAX_AMPLITUDE_RAD, MAX_AMPLITUDE_RAD, unit="rad")


def add_demo_arguments(p: argparse.ArgumentParser) -> None:
    # Values are checked here, before anything connects: a bad one used to be found only once
    # connected (a NaN amplitude ended the server's session with an ERROR) or not at all.
    p.add_argument("--host", default="127.0.0.1", help="server address (default: 127.0.0.1)")
    p.add_argument("--port", type=port_number, default=47500, help="server port (default: 47500)")
    p.add_argument("--steps", type=positive_int, default=None, help="commands to send before BYE (default: until "
                   "the server ends the session)")
    p.add_argument("--mode", choices=("torque", "position"), default="torque",
                   help="joint impedance torques (default) or joint position targets")
    p.add_argument("--amplitude", type=swing_amplitude, default=0.2,
                   help=f"shoulder-pitch swing [rad], at most {MAX_AMPLITUDE_RAD:g} either way (default: 0.2)")
    p.add_argument("--timeout", type=command_timeout, default=10.0,
                   help=f"socket timeout [s], at most {MAX_COMMAND_TIMEOUT_S:g} (default: 10)")
    p.add_argument("--fault", choices=("none", "skip", "duplicate"), default="none",
                   help="for tests: at command 100 send a skipped or a duplicated sequence number")


#: The demo summary's ``error_code`` when the server went away mid-session, or fell silent
#: for ``--timeout`` (not protocol error codes: nothing was said).
E_CONNECTION_LOST = "connection_lost"
E_SERVER_SILENT = "server_silent"


def run_demo(args: argparse.Namespace) -> int:
    from teleop.robot.model import RobotModel

    # Load the model before connecting: the simulator sends state 0 at once and starts
    # its command timeout.
    robot = RobotModel()
    with LockstepClient(args.host, args.port, name=f"demo-client/{args.mode}", timeout=args.timeout) as client:
        controller, stats = make_demo_controller(client.welcome, amplitude=args.amplitude, mode=args.mode,
                                                 robot=robot)
        if args.fault != "none":
            controller = _faulty(client, controller, args.fault)
        out: dict[str, object] = {"ok": True}
        try:
            report = client.run(controller, steps=args.steps)
        except LockstepError as exc:
            report = client.report
            out = {"ok": False, "error": str(exc), "error_code": exc.code}
        except OSError as exc:
            # The server went away or fell silent mid-session (stopped, killed, a network
            # down): the summary of what ran is still printed, as the help says; before, one
            # "[Errno 104] Connection reset by peer" line and no summary.
            report = client.report
            if isinstance(exc, TimeoutError):
                out = {"ok": False, "error": f"no message from the server at {args.host}:{args.port} within "
                                             f"{args.timeout:g} s after {report.states} states",
                       "error_code": E_SERVER_SILENT}
            else:
                reason = exc.strerror or str(exc) or type(exc).__name__
                out = {"ok": False, "error": f"connection to the server at {args.host}:{args.port} lost after "
                                             f"{report.states} states: {reason}", "error_code": E_CONNECTION_LOST}
        out.update({"states": report.states, "first_seq": report.first_seq, "last_seq": report.last_seq,
                    "commands": report.commands, "seq_gaps": report.seq_gaps, "seq_repeats": report.seq_repeats,
                    "final_time_s": report.final_time_s, "client_wall_time_s": report.wall_time_s,
                    "server": report.server_stats, **stats})
    print(dumps(out))
    return 0 if out["ok"] else 1


def _faulty(client: LockstepClient, controller: Controller, fault: str) -> Controller:
    """Wrap ``client.send_command`` so that the 100th command breaks the sequence rule."""
    send = client.send_command

    def faulty_send(seq, mode, values):
        if seq == 100:
            if fault == "skip":
                return send(seq + 1, mode, values)
            send(seq, mode, values)            # the right one, then the same seq again
            return send(seq, mode, values)
        return send(seq, mode, values)

    # A deliberate per-instance patch (a test hook), which mypy forbids for methods.
    client.send_command = faulty_send  # type: ignore[method-assign]
    return controller


if __name__ == "__main__":
    sys.exit(main())
