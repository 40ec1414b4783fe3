"""Lock-step coupling of the simulation with an external controller over a socket.

Reference: ../shared/reference/controller_coupling_and_jogging.md, Part A, §A.3-§A.5
(Lohmann 2022, §3.2-§3.4). The robot's real controller runs unchanged in its own process
(any language) and the simulator replaces the robot: each 1 ms physics step waits for the
controller's command for *that* step, so no step is lost or reused (§A.5) and the results
do not depend on how fast either side runs (§A.3: 1 kHz in simulation time, not real
time). The simulator starts the exchange by sending the first state (§A.5), and the
sequence counters of both directions (``telemetry_counter`` / ``command_counter`` of
Tables 3.1/3.2, widened here to 64 bits) make a skipped or repeated packet an error
instead of silent data reuse.

The wire protocol is specified in docs/lockstep_protocol.md; this module holds its codec
(shared with :mod:`teleop.sim.lockstep_client`, no pybullet needed for that part) and the
server :class:`LockstepServer`.

Why a single thread here where the thesis needs a reader thread and a condition
variable (§A.5 pseudo-code): Gazebo calls the plugin from its own physics loop, so the
plugin must park that loop until a reader thread has the packet. Here the server owns
the loop, so "wait for ``readyForStep``" is simply a blocking ``recv`` between sending
state k and stepping: the alternation is strict by construction, and the three timing
cases of §A.5 collapse into one.

Where it deliberately differs from the reference:

* no free-running start (§A.5: Gazebo steps freely until Simulink's first packet): every
  step here, the first included, waits for its command, and the robot is reset at rest
  before STATE 0, so a session is reproducible from its first step;
* STATE k carries t = k * dt exactly (each step counts as dt however long it took, §A.3);
* one ``mode`` per COMMAND for all controlled joints, not Table 3.2's per-joint ``control``
  array, and only 0 (position) and 1 (torque): Table 3.2's "0 or 4 = position" is the
  real drives' code, and 4 here is refused (BAD_PAYLOAD), not read as position;
* position mode (Table 3.3's state space) drives the simulator's own joint position
  servos, whose gains are the simulator's: the ``zr_kp`` / D gains of Table 3.2 and
  §4.2.1 are not sent (the controller is ours, not DLR's), and the synchronisation and
  real-robot-only fields of Tables 3.1/3.2 (``have_command``, ``state``, ``datacontainer``,
  ``speed``) have no counterpart.
"""

from __future__ import annotations

import json
import math
import socket
import struct
import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from teleop import json_input

if TYPE_CHECKING:
    from teleop.sim.simulator import Simulation

# --------------------------------------------------------------------------- wire format
MAGIC = b"LKSP"
VERSION = 1
#: Frame header: magic (4s), version (B), message type (B), flags (H), payload length (I).
HEADER = struct.Struct("<4sBBHI")
#: Largest payload accepted [bytes]; anything longer is treated as a framing error.
MAX_PAYLOAD = 1 << 20

# Message types.
HELLO, WELCOME, STATE, COMMAND, ERROR, BYE = 1, 2, 3, 4, 5, 6
MESSAGE_NAMES = {HELLO: "HELLO", WELCOME: "WELCOME", STATE: "STATE", COMMAND: "COMMAND", ERROR: "ERROR", BYE: "BYE"}

# Header flags.
FLAG_FINAL = 0x0001       # STATE: the last state of the session; do not answer it
FLAG_SATURATED = 0x0002   # STATE: some commanded torque was clipped to its effort limit
#: Every flag a STATE may carry; any other bit is meant for another protocol.
STATE_FLAGS = FLAG_FINAL | FLAG_SATURATED

#: STATE payload head: seq (Q), simulation time [s] (d), nq (I), nv (I), n_joints (I);
#: then q (nq f64), v (nv f64), applied joint torques (n_joints f64).
STATE_HEAD = struct.Struct("<QdIII")
#: COMMAND payload head: seq (Q), mode (B), reserved (B, 0), reserved (H, 0), count (I);
#: then ``count`` f64 values for the session's controlled joints.
COMMAND_HEAD = struct.Struct("<QBBHI")
#: ERROR payload head: error code (H); then a UTF-8 message.
ERROR_HEAD = struct.Struct("<H")

# Command modes (Table 3.2's ``control``: 1 = torque control, 0 = position control).
MODE_POSITION, MODE_TORQUE = 0, 1
MODE_NAMES = {MODE_POSITION: "position", MODE_TORQUE: "torque"}

# Error codes.
E_FRAMING, E_VERSION, E_UNEXPECTED, E_SEQUENCE, E_PAYLOAD, E_TIMEOUT, E_INTERNAL, E_STOPPED = 1, 2, 3, 4, 5, 6, 7, 8
ERROR_NAMES = {E_FRAMING: "FRAMING", E_VERSION: "VERSION", E_UNEXPECTED: "UNEXPECTED_MESSAGE",
               E_SEQUENCE: "SEQUENCE", E_PAYLOAD: "BAD_PAYLOAD", E_TIMEOUT: "TIMEOUT", E_INTERNAL: "INTERNAL",
               E_STOPPED: "STOPPED"}


class LockstepError(RuntimeError):
    """A protocol violation or a failed exchange. ``code`` is one of the E_* codes."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"{ERROR_NAMES.get(code, code)}: {message}")
        self.code = code
        self.detail = message


class SequenceError(LockstepError):
    """A message carried the wrong sequence number (skipped, duplicated or stale)."""

    def __init__(self, message: str) -> None:
        super().__init__(E_SEQUENCE, message)


class PeerError(LockstepError):
    """The peer sent an ERROR message (``truncated``: one too short to hold its code, whose
    ``code`` is then BAD_PAYLOAD, this side's verdict on it)."""

    def __init__(self, code: int, message: str, truncated: bool = False) -> None:
        super().__init__(code, message)
        self.truncated = truncated


def encode(msg_type: int, payload: bytes = b"", flags: int = 0) -> bytes:
    """One frame: header + payload."""
    return HEADER.pack(MAGIC, VERSION, msg_type, flags, len(payload)) + payload


def _recv_exact(sock: socket.socket, n: int, deadline: float | None = None) -> bytes:
    """``n`` bytes from ``sock``; with ``deadline`` (a ``time.monotonic()`` instant), a
    :class:`socket.timeout` once it has passed, however the bytes trickle in (the socket's
    own timeout restarts at every byte: one byte per 3 s held a 5 s timeout for ever)."""
    buf = bytearray()
    while len(buf) < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise socket.timeout(f"timed out ({len(buf)} of {n} bytes read)")
            sock.settimeout(left)
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError(f"peer closed the connection ({len(buf)} of {n} bytes read)")
        buf += chunk
    return bytes(buf)


def read_frame(sock: socket.socket, timeout: float | None = None) -> tuple[int, int, bytes]:
    """Read one frame; returns (type, flags, payload). Raises :class:`LockstepError`
    (E_FRAMING / E_VERSION) on a malformed header, ConnectionError when the peer left, and
    :class:`socket.timeout` when the whole frame has not come within ``timeout`` [s] (None:
    the socket's own timeout, per read)."""
    if timeout is None:
        return _read_frame(sock, None)
    previous = sock.gettimeout()     # put back: the replies that follow are sent under it
    try:
        return _read_frame(sock, time.monotonic() + timeout)
    finally:
        sock.settimeout(previous)


def _read_frame(sock: socket.socket, deadline: float | None) -> tuple[int, int, bytes]:
    head = _recv_exact(sock, HEADER.size, deadline)
    magic, version, msg_type, flags, length = HEADER.unpack(head)
    if magic != MAGIC:
        raise LockstepError(E_FRAMING, f"bad magic {magic!r} (expected {MAGIC!r}): not a lock-step frame")
    if version != VERSION:
        raise LockstepError(E_VERSION, f"protocol version {version}, this side speaks {VERSION}")
    if msg_type not in MESSAGE_NAMES:
        raise LockstepError(E_FRAMING, f"unknown message type {msg_type}")
    if length > MAX_PAYLOAD:
        raise LockstepError(E_FRAMING, f"payload of {length} bytes exceeds {MAX_PAYLOAD}")
    return msg_type, flags, _recv_exact(sock, length, deadline) if length else b""


def encode_json(msg_type: int, obj: dict) -> bytes:
    return encode(msg_type, json.dumps(obj).encode("utf-8"))


def decode_json(payload: bytes, what: str) -> dict:
    try:
        obj = json_input.loads(payload) if payload else {}
    except ValueError as exc:
        raise LockstepError(E_PAYLOAD, f"{what} payload is not UTF-8 JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise LockstepError(E_PAYLOAD, f"{what} payload must be a JSON object")
    return obj


def encode_error(code: int, message: str) -> bytes:
    return encode(ERROR, ERROR_HEAD.pack(code) + message.encode("utf-8"))


def decode_error(payload: bytes) -> PeerError:
    if len(payload) < ERROR_HEAD.size:
        return PeerError(E_PAYLOAD, "peer sent a truncated ERROR", truncated=True)
    (code,) = ERROR_HEAD.unpack_from(payload)
    return PeerError(code, payload[ERROR_HEAD.size:].decode("utf-8", errors="replace"))


@dataclass
class State:
    """A decoded STATE: ``seq``; simulation time ``t`` [s]; ``q`` (nq,) and ``v`` (nv,) in
    the pinocchio layout of RobotModel; ``tau`` (n_joints,) applied joint torques [N m];
    ``final``: no command may answer it; ``saturated``: torques were clipped last step."""

    seq: int
    t: float
    q: np.ndarray
    v: np.ndarray
    tau: np.ndarray
    final: bool = False
    saturated: bool = False


def encode_state(seq: int, t: float, q: np.ndarray, v: np.ndarray, tau: np.ndarray, flags: int = 0) -> bytes:
    arrays = np.concatenate([q, v, tau]).astype("<f8")
    return encode(STATE, STATE_HEAD.pack(seq, t, len(q), len(v), len(tau)) + arrays.tobytes(), flags)


def decode_state(payload: bytes, flags: int) -> State:
    if flags & ~STATE_FLAGS:
        # Reading it as a plain state would drop what the bit says (a later FINAL-like
        # meaning would have the client answer a state it must not).
        raise LockstepError(E_PAYLOAD, f"STATE has header flags 0x{flags:04x}, of which only "
                                       f"0x{STATE_FLAGS:04x} are defined: a server speaking another protocol?")
    if len(payload) < STATE_HEAD.size:
        raise LockstepError(E_PAYLOAD, f"STATE payload of {len(payload)} bytes is shorter than its head")
    seq, t, nq, nv, n = STATE_HEAD.unpack_from(payload)
    expected = STATE_HEAD.size + 8 * (nq + nv + n)
    if len(payload) != expected:
        raise LockstepError(E_PAYLOAD, f"STATE payload is {len(payload)} bytes, its head announces {expected}")
    values = np.frombuffer(payload, dtype="<f8", offset=STATE_HEAD.size)
    return State(seq, t, values[:nq].copy(), values[nq:nq + nv].copy(), values[nq + nv:].copy(),
                 bool(flags & FLAG_FINAL), bool(flags & FLAG_SATURATED))


def encode_command(seq: int, mode: int, values: np.ndarray) -> bytes:
    values = np.asarray(values, dtype="<f8")
    return encode(COMMAND, COMMAND_HEAD.pack(seq, mode, 0, 0, len(values)) + values.tobytes())


def decode_command(payload: bytes) -> tuple[int, int, np.ndarray]:
    """(seq, mode, values (count,)); raises E_PAYLOAD on a size mismatch or unknown mode."""
    if len(payload) < COMMAND_HEAD.size:
        raise LockstepError(E_PAYLOAD, f"COMMAND payload of {len(payload)} bytes is shorter than its head")
    seq, mode, reserved_byte, reserved_half, count = COMMAND_HEAD.unpack_from(payload)
    if reserved_byte or reserved_half:
        # Zero now, so that a later version may give them a meaning: a value here is a
        # client written for another protocol, whose command this server would misread.
        raise LockstepError(E_PAYLOAD, f"COMMAND reserved bytes must be 0, got {reserved_byte} and {reserved_half}")
    if len(payload) != COMMAND_HEAD.size + 8 * count:
        raise LockstepError(E_PAYLOAD, f"COMMAND payload is {len(payload)} bytes, its head announces "
                                       f"{COMMAND_HEAD.size + 8 * count}")
    if mode not in MODE_NAMES:
        raise LockstepError(E_PAYLOAD, f"unknown command mode {mode} (0 = position, 1 = torque)")
    return seq, mode, np.frombuffer(payload, dtype="<f8", offset=COMMAND_HEAD.size).copy()


# ------------------------------------------------------------------------------ server
@dataclass
class SessionReport:
    """What one controller session did.

    Attributes:
        client: the name the client gave in HELLO.
        steps: physics steps taken = commands applied (each exactly once).
        states_sent: STATE messages sent (steps + 1: the simulator speaks first).
        last_command_seq: sequence number of the last applied command (-1: none).
        sim_time_s: simulated time covered [s]; wall_time_s: wall-clock time [s];
        rtf: real-time factor sim_time_s / wall_time_s (§A.12 reports it per scenario);
        physics_s: wall time spent in physics steps, wait_s: waiting for commands [s].
        saturated_steps: steps in which a torque was clipped to its effort limit.
        error: None, or "CODE: message" of the error that ended the session (the
            controller's own with ``ended_by`` "client_error").
        ended_by: "client" (BYE), "max_steps", "error" (the server's: it sent the ERROR),
            "client_error" (the controller sent an ERROR: not answered), "disconnect" or
            "stopped" (the server was stopped mid-session: it sent ERROR STOPPED).
    """

    client: str = ""
    steps: int = 0
    states_sent: int = 0
    last_command_seq: int = -1
    sim_time_s: float = 0.0
    wall_time_s: float = 0.0
    rtf: float = 0.0
    physics_s: float = 0.0
    wait_s: float = 0.0
    saturated_steps: int = 0
    error: str | None = None
    error_code: int | None = None
    ended_by: str = ""
    mode_counts: dict = field(default_factory=lambda: {"position": 0, "torque": 0})

    def as_dict(self) -> dict:
        return asdict(self)


class LockstepServer:
    """Serves a :class:`Simulation` to one external controller at a time, in lock step.

    Args:
        sim: the simulation (its ``dt`` is the step; 1 ms for the 1 kHz of §A.3).
        joints: (k,) model joint indices the controller commands (torques or positions);
            the other joints keep the simulator's position servos at their reset angles.
        host, port: where to listen (loopback by default; port 0 picks a free port).
        max_steps: end each session after this many steps (None: until the client says BYE).
        command_timeout: seconds to wait for a command before ending the session with a
            TIMEOUT error (a dead controller must not hang the simulator forever).
        reset_on_connect: put the robot back to its home posture at rest for every new
            session, so sessions are reproducible.
        clip_torques: clip commanded torques to the description's effort limits (a real
            drive saturates; the simulator applies whatever it is given).
    """

    def __init__(self, sim: "Simulation", joints, host: str = "127.0.0.1", port: int = 0,
                 max_steps: int | None = None, command_timeout: float = 10.0, reset_on_connect: bool = True,
                 clip_torques: bool = True) -> None:
        from teleop.sim.pybullet_module import pb  # the server needs the simulator; the codec above does not

        self._pb = pb
        self.sim = sim
        self.joints = np.asarray(joints, dtype=int)
        n = sim.robot.n_joints
        if self.joints.ndim != 1 or len(self.joints) == 0 or np.any(self.joints < 0) or np.any(self.joints >= n):
            raise ValueError(f"joints must be a non-empty list of indices in 0..{n - 1}")
        if len(np.unique(self.joints)) != len(self.joints):
            raise ValueError("a joint is listed twice")
        if max_steps is not None and max_steps < 1:
            raise ValueError("max_steps must be >= 1 or None")
        self.max_steps = max_steps
        self.command_timeout = float(command_timeout)
        # As a socket timeout, 0 makes every read fail at once (each session ended as a
        # "disconnect": Resource temporarily unavailable) and a negative one is refused by
        # the first connection, which stopped the server: refuse them here, before serving.
        if not (math.isfinite(self.command_timeout) and self.command_timeout > 0):
            raise ValueError(f"command timeout must be a positive number of seconds, got {command_timeout!r}")
        self.reset_on_connect = reset_on_connect
        self.clip_torques = clip_torques
        self._listener = socket.create_server((host, port))
        self._listener.settimeout(None)
        self.reports: list[SessionReport] = []

    @property
    def address(self) -> tuple[str, int]:
        """(host, port) the server listens on."""
        return self._listener.getsockname()[:2]

    def close(self) -> None:
        self._listener.close()

    def __enter__(self) -> "LockstepServer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def serve_forever(self, max_sessions: int | None = None, log=print) -> None:
        """Accept controllers one after the other; each session's report goes to ``log``.
        A failed session (malformed data, timeout, crash of the controller) is reported
        and the server waits for the next one: the simulator never dies silently."""
        served = 0
        while max_sessions is None or served < max_sessions:
            try:
                report = self.serve_one()
            except KeyboardInterrupt:
                # Stopped: the session cut short is reported too (its ERROR went to the controller).
                if log is not None and self.reports and self.reports[-1].ended_by == "stopped":
                    log(self._describe(served + 1, self.reports[-1]))
                raise
            served += 1
            if log is not None:
                log(self._describe(served, report))

    @staticmethod
    def _describe(number: int, report: "SessionReport") -> str:
        """One line of session ``number``'s report, as ``serve_forever`` logs it."""
        status = ("ok" if report.error is None else f"the controller reported ERROR {report.error}"
                  if report.ended_by == "client_error" else f"ERROR {report.error}")
        return (f"session {number} ({report.client or 'unknown client'}): {report.steps} steps, "
                f"{report.sim_time_s:.3f} s simulated in {report.wall_time_s:.3f} s, RTF {report.rtf:.2f}, "
                f"ended by {report.ended_by}: {status}")

    def serve_one(self, accept_timeout: float | None = None) -> SessionReport:
        """Accept one controller and run its session to the end; returns its report."""
        self._listener.settimeout(accept_timeout)
        conn, _ = self._listener.accept()
        conn.settimeout(self.command_timeout)
        # Small frames in strict alternation: Nagle's algorithm would hold each one back.
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        report = SessionReport()
        self._awaiting = "HELLO"
        try:
            self._session(conn, report)
        except PeerError as exc:
            # The controller's own error, before or after its HELLO: said as its, and not
            # answered (the sender of an ERROR closes the connection: docs/lockstep_protocol.md).
            report.ended_by = "client_error"
            if exc.truncated:
                report.error = "(truncated: no error code)"
            else:
                report.error, report.error_code = str(exc), exc.code
        except LockstepError as exc:
            report.error, report.error_code, report.ended_by = str(exc), exc.code, "error"
            self._send_quietly(conn, encode_error(exc.code, exc.detail))
        except socket.timeout:
            msg = f"no message from the controller within {self.command_timeout:g} s (expected {self._awaiting})"
            report.error, report.error_code, report.ended_by = f"TIMEOUT: {msg}", E_TIMEOUT, "error"
            self._send_quietly(conn, encode_error(E_TIMEOUT, msg))
        except (ConnectionError, OSError) as exc:
            report.error, report.ended_by = f"DISCONNECT: {exc}", "disconnect"
        except Exception as exc:  # a bug here must reach the controller and the log, not vanish
            report.error, report.error_code, report.ended_by = f"INTERNAL: {exc!r}", E_INTERNAL, "error"
            self._send_quietly(conn, encode_error(E_INTERNAL, repr(exc)))
        except KeyboardInterrupt:
            # The simulator stopped (Ctrl-C, SIGTERM) mid-session: the controller is told so,
            # where a bare closed connection could not be told from a crash.
            msg = "the simulator was stopped (Ctrl-C or SIGTERM)"
            report.error, report.error_code, report.ended_by = f"STOPPED: {msg}", E_STOPPED, "stopped"
            self._send_quietly(conn, encode_error(E_STOPPED, msg))
            raise
        finally:
            conn.close()
            if report.wall_time_s > 0:
                report.rtf = report.sim_time_s / report.wall_time_s
            self.reports.append(report)
        return report

    @staticmethod
    def _send_quietly(conn: socket.socket, data: bytes) -> None:
        try:
            conn.sendall(data)
        except OSError:
            pass

    # ------------------------------------------------------------------ one session
    def _handshake(self, conn: socket.socket, report: SessionReport) -> None:
        msg_type, _, payload = read_frame(conn, self.command_timeout)
        if msg_type == ERROR:
            raise decode_error(payload)
        if msg_type != HELLO:
            raise LockstepError(E_UNEXPECTED, f"expected HELLO, got {MESSAGE_NAMES[msg_type]}")
        hello = decode_json(payload, "HELLO")
        report.client = str(hello.get("client", ""))
        if "protocol" not in hello:
            # Assuming the server's own version would let a client of another version run,
            # misreading every STATE; the HELLO must say which one it speaks.
            raise LockstepError(E_PAYLOAD, f"HELLO must say the protocol it speaks: {{\"protocol\": {VERSION}}}")
        protocol = hello["protocol"]
        if isinstance(protocol, bool) or not isinstance(protocol, (int, float)):
            raise LockstepError(E_PAYLOAD, f"HELLO 'protocol' must be a number, got {protocol!r}")
        if protocol != VERSION:
            raise LockstepError(E_VERSION, f"client speaks protocol {protocol}, server {VERSION}")
        robot = self.sim.robot
        welcome = {
            "protocol": VERSION,
            "robot": robot.description.name,
            "dt": self.sim.dt,
            "nq": robot.nq,
            "nv": robot.nv,
            "joint_names": robot.joint_names,
            "controlled_joints": [int(i) for i in self.joints],
            "controlled_joint_names": [robot.joint_names[i] for i in self.joints],
            "effort_limits": [float(robot.limits.effort[i]) for i in self.joints],
            "max_steps": self.max_steps,
            "command_timeout_s": self.command_timeout,
            "modes": {"position": MODE_POSITION, "torque": MODE_TORQUE},
        }
        conn.sendall(encode_json(WELCOME, welcome))

    def _applied_torques(self) -> np.ndarray:
        """(n_joints,) torque each joint's motor applied in the last step [N m]: the servo's
        (pybullet's motors or the explicit servo, Simulation.applied_joint_torques) for
        servoed joints, our (clipped) command for torque joints."""
        tau = self.sim.applied_joint_torques()
        if self._torque_on:
            tau[self.joints] = self._last_torque
        return tau

    def _session(self, conn: socket.socket, report: SessionReport) -> None:
        sim = self.sim
        self._handshake(conn, report)
        if self.reset_on_connect:
            sim.set_torque_mode(False)
            sim.reset()
        else:
            # A previous session may have left them in torque mode: this one starts on the
            # position servos (holding where they are), as _torque_on says.
            sim.set_torque_mode(False, self.joints)
        self._torque_on = False
        self._last_torque: np.ndarray = np.zeros(len(self.joints))
        targets = sim.joint_positions()
        limit = sim.robot.limits.effort[self.joints]
        k = len(self.joints)
        seq = 0
        flags = 0
        start = time.perf_counter()
        t0_sim = sim.t
        try:
            while True:
                st = sim.state()
                final = self.max_steps is not None and seq >= self.max_steps
                # t = seq * dt (one physics step per command, §A.3), not st.t - t0_sim: that
                # difference carries the rounding of the steps taken before the session (1e-15 s
                # off after 12345 of them), so a controller reading t (the demo's sine) got other
                # bits in every session and reset sessions were not reproducible.
                conn.sendall(encode_state(seq, seq * sim.dt, st.q, st.v, self._applied_torques(),
                                          flags | (FLAG_FINAL if final else 0)))
                report.states_sent += 1
                if final:
                    report.ended_by = "max_steps"
                    conn.sendall(encode_json(BYE, self._stats(report, start)))
                    return
                t_wait = time.perf_counter()
                self._awaiting = f"command seq {seq}"
                msg_type, msg_flags, payload = read_frame(conn, self.command_timeout)   # lock step: physics waits here
                report.wait_s += time.perf_counter() - t_wait
                if msg_type == BYE:
                    report.ended_by = "client"
                    conn.sendall(encode_json(BYE, self._stats(report, start)))
                    return
                if msg_type == ERROR:
                    raise decode_error(payload)
                if msg_type != COMMAND:
                    raise LockstepError(E_UNEXPECTED, f"expected COMMAND seq {seq}, got {MESSAGE_NAMES[msg_type]}")
                if msg_flags:   # COMMAND defines no flag: one set is meant for another protocol
                    raise LockstepError(E_PAYLOAD, f"COMMAND seq {seq} has header flags 0x{msg_flags:04x}, "
                                                   "COMMAND defines none (0)")
                cmd_seq, mode, values = decode_command(payload)
                if cmd_seq != seq:
                    kind = "skipped ahead" if cmd_seq > seq else "duplicated or stale"
                    raise SequenceError(f"expected command seq {seq} (answering state {seq}), got {cmd_seq}: "
                                        f"{kind}; {report.steps} steps were applied")
                if len(values) != k:
                    raise LockstepError(E_PAYLOAD, f"command seq {seq} has {len(values)} values, this session "
                                                   f"controls {k} joints")
                if not np.all(np.isfinite(values)):
                    raise LockstepError(E_PAYLOAD, f"command seq {seq} contains non-finite values")
                flags = 0
                if mode == MODE_TORQUE:
                    if not self._torque_on:
                        sim.set_torque_mode(True, self.joints)
                        self._torque_on = True
                    tau = np.clip(values, -limit, limit) if self.clip_torques else values
                    if np.any(tau != values):
                        flags |= FLAG_SATURATED
                        report.saturated_steps += 1
                    sim.apply_joint_torques(tau, self.joints)
                    self._last_torque = tau
                else:
                    if self._torque_on:
                        sim.set_torque_mode(False, self.joints)
                        self._torque_on = False
                    targets[self.joints] = values
                    sim.set_joint_targets(targets)
                report.mode_counts[MODE_NAMES[mode]] += 1
                t_phys = time.perf_counter()
                sim.step()
                report.physics_s += time.perf_counter() - t_phys
                report.steps += 1
                report.last_command_seq = cmd_seq
                seq += 1
        finally:
            report.sim_time_s = sim.t - t0_sim
            report.wall_time_s = time.perf_counter() - start

    def _stats(self, report: SessionReport, start: float) -> dict:
        wall = time.perf_counter() - start
        sim_time = report.steps * self.sim.dt
        return {"steps": report.steps, "sim_time_s": sim_time, "wall_time_s": wall,
                "rtf": sim_time / wall if wall > 0 else math.nan, "physics_s": report.physics_s,
                "wait_s": report.wait_s, "saturated_steps": report.saturated_steps,
                "last_command_seq": report.last_command_seq}
