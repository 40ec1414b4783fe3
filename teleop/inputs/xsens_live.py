"""Xsens MVN live: the MVN real-time network stream (UDP) as a :class:`~teleop.inputs.base.PoseSource`.

In MVN Analyze/Animate: Options > Preferences > Network Streamer, add this computer's
address and port (default 9763), UDP, and tick "Position + Orientation (Quaternion)"
(type 02, the only type the frames carry). "Center of Mass" (24) and "Joint Angles" (20)
are parsed when present and kept as :attr:`XsensLiveSource.com` and ``joint_angles``, but
a frame is ``(t, pose)`` only: retargeting a live stream uses the CoM it estimates from
the segments, not MVN's.

:meth:`XsensLiveSource.poll` drains the socket without blocking, reassembles samples that
span several datagrams, decodes them (:mod:`teleop.inputs.mvn_protocol`: positions to metres, MVN's
T-pose arm frames -> N-pose frames, segment IDs 1..23 -> names) and returns the newest
complete pose not returned yet. Anything else on the port -- foreign datagrams, truncated
or inconsistent ones, other characters, unknown message types -- is dropped and counted in
:attr:`XsensLiveSource.stats`; it never raises. When no pose comes,
:meth:`XsensLiveSource.pose_stream_hint` says why from what did (the operator station
prints it: e.g. a streamer set to Euler angles instead of quaternions).

Position unit: the protocol specification (2.5.6) says centimetres, while MVN's user manual
and Xsens's knowledge base say the quaternion stream's positions are in metres. By default
(``position_unit_m=None``) the first pose decides: a human body spans well over 0.5 m
between its farthest segments in any posture, so a span under ``AUTO_UNIT_SPAN_M`` read as
centimetres means the sender streams metres (a factor of 100 apart, never ambiguous).

Timestamps: a frame's time is MVN's time code mapped onto the caller's clock,
``t = time_code + offset`` with ``offset`` the smallest ``arrival - time_code`` seen so far
(the least-delayed sample), so network jitter does not enter the timestamps. Two clocks
never run at exactly the same rate: if MVN's runs slow, ``arrival - time_code`` grows and a
plain minimum would stay at its first value, so the timestamps would fall behind arrival by
the accumulated drift (0.18 s after an hour at 50 ppm). The minimum therefore ages: between
samples it may rise by ``DRIFT_ALLOWANCE_PPM`` of the elapsed time code (a quartz clock
drifts 10-100 ppm), i.e. ``offset = min(offset + allowance x elapsed, arrival - time_code)``,
which follows either drift and adds at most allowance x (time since the least-delayed
sample) of jitter (0.2 ms per second). The offset is re-estimated when the time code jumps
back by 1 s or more (MVN restarted its clock), or when a sample arrives ``OFFSET_JUMP_S`` or
more later than the offset says (the time code stalled: MVN's playback paused, then went
on); a sample less than 1 s older than the newest one is taken as reordered by the network
and dropped (``dropped_stale_sample``).
"""

from __future__ import annotations

import socket
import time
from collections import Counter
from typing import Callable

import numpy as np

from teleop.inputs.base import Frame
from teleop.inputs.mvn_protocol import (
    CENTER_OF_MASS,
    CHARACTER_META,
    CHARACTER_SCALE,
    DEFAULT_PORT,
    JOINT_ANGLES,
    KNOWN_TYPES,
    MESSAGE_NAMES,
    POSE_QUATERNION,
    TIME_CODE,
    MvnCodec,
    MvnFormatError,
    Reassembler,
    parse_header,
)

_LOOPBACK = ("127.0.0.1", "localhost", "::1")
#: Span [m] between a pose's farthest segments, read as centimetres, below which the stream
#: is taken to be in metres (see the module docstring): a body read from a metre stream as
#: centimetres spans ~0.02 m, one read from a centimetre stream ~1-2 m.
AUTO_UNIT_SPAN_M = 0.1
#: Rate [ppm] at which the clock-offset minimum may rise between samples (module docstring):
#: above the drift of two quartz clocks, far below any network jitter.
DRIFT_ALLOWANCE_PPM = 200.0
#: A sample arriving this much later than the offset predicts [s] means the time code stalled
#: (paused playback): the offset is re-estimated instead of aged.
OFFSET_JUMP_S = 1.0


def parse_bind(text: str) -> tuple[str, int]:
    """"9763", "0.0.0.0:9763" or "" (-> 127.0.0.1:9763) as (host, port); ValueError if bad."""
    host, _, port = text.rpartition(":") if ":" in text else ("", "", text)
    try:
        number = int(port) if port else DEFAULT_PORT
        if not 0 <= number <= 65535:   # 0 (any free port: tests) is accepted, not advertised
            raise ValueError
    except ValueError:
        # Without the text: the caller names it ("--input xsens-live:abc: the MVN port ...").
        raise ValueError("the MVN port must be a number 1-65535") from None
    return host or "127.0.0.1", number


class XsensLiveSource:
    """Receives the MVN network stream on a UDP port.

    Args:
        bind: (host, port) to listen on; port 0 picks a free port (see :attr:`address`).
        character_id: accept only this character (None: the first one heard).
        position_unit_m: metres per position unit on the wire (spec: cm -> 0.01; MVN's manual:
            m -> 1.0); None: found from the first pose (module docstring).
        clock: the caller's clock [s] (time.monotonic by default).
        allow_remote: listening on a non-loopback address must be asked for explicitly.
        receive_buffer_bytes: socket receive buffer [bytes] (bursts of a 240 Hz stream).

    Attributes:
        stats: Counter of "datagrams", "samples", "messages_<type>", "ignored_items",
            "receive_errors" and drops by reason, keyed "dropped_<reason>" ("foreign",
            "truncated", "bad_size", "bad_type", "unknown_type", "other_character",
            "stale_sample", "incomplete", "bad_content").
        com: newest centre of mass (3,) [m] (type 24), or None. Exposed for the caller;
            not part of the frames :meth:`poll` returns (see the module docstring).
        joint_angles: newest joint angles (list of JointAngle, type 20), or None; likewise.
        meta: character meta data (type 12) {tag: value}.
        scale: newest character scale (type 13), or None.
        time_code: newest type-25 time code string, or None.
        position_unit_m: the unit in use [m per wire unit] (None until the first pose decides).
    """

    def __init__(self, bind: tuple[str, int] = ("127.0.0.1", DEFAULT_PORT), *, character_id: int | None = None,
                 position_unit_m: float | None = None, clock: Callable[[], float] = time.monotonic,
                 allow_remote: bool = False, receive_buffer_bytes: int = 1 << 20) -> None:
        host, port = bind
        if host not in _LOOPBACK and not allow_remote:
            raise ValueError(f"refusing to listen on {host} (not loopback) for the MVN stream: give --allow-remote "
                             "(allow_remote=True) to accept a stream from another PC")
        self.position_unit_m = position_unit_m
        self.codec = MvnCodec(0.01 if position_unit_m is None else position_unit_m)
        self.character_id = character_id
        self._clock = clock
        self._sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_DGRAM)
        try:
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer_bytes)
            self._sock.bind((host, port))
        except OSError as exc:
            self._sock.close()
            raise OSError(f"cannot listen for the MVN stream on {host}:{port}: {exc.strerror or exc}") from None
        self._sock.setblocking(False)
        self._reassembler = Reassembler()
        self.stats: Counter = Counter()
        self._datagrams_at_last_sample = 0   # how many datagrams had come with the newest pose
        self.com: np.ndarray | None = None
        self.joint_angles = None
        self.meta: dict[str, str] = {}
        self.scale = None
        self.time_code: str | None = None
        self._offset: float | None = None
        self._last_time_code: int | None = None
        self._newest: Frame | None = None
        self._newest_sample: int | None = None
        self._returned = True

    @property
    def address(self) -> tuple[str, int]:
        return self._sock.getsockname()[:2]

    # ------------------------------------------------------------------ input
    def handle_datagram(self, datagram: bytes, arrival: float) -> None:
        """Take one datagram (from the socket, or directly in tests); never raises on bad input."""
        self.stats["datagrams"] += 1
        try:
            header = parse_header(datagram)
        except MvnFormatError as exc:
            self.stats[f"dropped_{exc.reason}"] += 1
            return
        if header.message_type not in KNOWN_TYPES:
            self.stats["dropped_unknown_type"] += 1
            return
        if self.character_id is None:
            self.character_id = header.character_id
        elif header.character_id != self.character_id:
            self.stats["dropped_other_character"] += 1
            return
        whole = self._reassembler.add(header, memoryview(datagram)[24:].tobytes())
        self.stats["dropped_incomplete"] = self._reassembler.incomplete
        if whole is None:
            return
        header, payload = whole
        try:
            message = self.codec.decode(header, payload)
        except (MvnFormatError, ValueError, UnicodeError):   # inconsistent content: drop it
            self.stats["dropped_bad_content"] += 1
            return
        self.stats[f"messages_{header.message_type}"] += 1
        if header.message_type == POSE_QUATERNION:
            self._take_pose(header, message.data, message.ignored_items, arrival)
        elif header.message_type == CENTER_OF_MASS:
            self.com = message.data
        elif header.message_type == JOINT_ANGLES:
            self.joint_angles = message.data
        elif header.message_type == CHARACTER_META:
            self.meta.update(message.data)        # tags may come a few at a time (spec 2.6.1)
        elif header.message_type == CHARACTER_SCALE:
            self.scale = message.data
        elif header.message_type == TIME_CODE:
            self.time_code = message.data

    def _take_pose(self, header, pose: dict, ignored: int, arrival: float) -> None:
        self.stats["ignored_items"] += ignored
        if not pose:
            self.stats["dropped_bad_content"] += 1
            return
        if self.position_unit_m is None:
            pose = self._detect_unit(pose)
        code = header.time_code_ms
        if self._last_time_code is not None and code < self._last_time_code:
            if self._last_time_code - code < 1000:     # reordered by the network: older than what we have
                self.stats["dropped_stale_sample"] += 1
                return
            self._offset = None                         # MVN's clock restarted
        sample_offset = arrival - code / 1000.0
        if self._offset is None:
            self._offset = sample_offset
        else:
            aged = self._offset + DRIFT_ALLOWANCE_PPM * 1e-6 * (code - self._last_time_code) / 1000.0
            # A sample a second or more later than the time code says (MVN's playback paused
            # and resumed, its time code stalled): re-estimated, or every later time would lag
            # its arrival by the pause (and the robot station refuses samples 10 s old). A
            # network stall that delayed this sample is undone by the next on-time one (min).
            jumped = sample_offset - aged >= OFFSET_JUMP_S
            self._offset = sample_offset if jumped else min(aged, sample_offset)
        self._last_time_code = code
        self._newest = (code / 1000.0 + self._offset, pose)
        self._newest_sample = header.sample_counter
        self._returned = False
        self.stats["samples"] += 1
        self._datagrams_at_last_sample = self.stats["datagrams"]

    def _detect_unit(self, pose: dict) -> dict:
        """Decide the stream's position unit from ``pose`` (decoded as centimetres) and
        return the pose in metres; a pose of fewer than two segments cannot tell."""
        positions = np.array([p for p, _ in pose.values()])
        if len(positions) < 2:
            return pose
        span = float(np.max(np.linalg.norm(positions[:, None] - positions[None], axis=-1)))
        if span >= AUTO_UNIT_SPAN_M:
            self.position_unit_m = 0.01
            return pose
        self.position_unit_m = self.codec.unit = 1.0
        factor = 1.0 / 0.01
        if self.com is not None:          # a CoM that came before the first pose
            self.com = self.com * factor
        return {name: (p * factor, q) for name, (p, q) in pose.items()}

    def receive(self, max_datagrams: int = 1024) -> int:
        """Drain the socket (non-blocking); returns the number of datagrams read."""
        n = 0
        while n < max_datagrams:
            try:
                datagram = self._sock.recv(65535)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:          # e.g. ICMP errors surfacing on the socket: nothing to read
                self.stats["receive_errors"] += 1
                break
            self.handle_datagram(datagram, self._clock())
            n += 1
        return n

    def pose_stream_hint(self) -> str:
        """Why no pose has come for a while, from what did arrive (for a user-facing
        warning): nothing on the port, the stream stopped after poses came, datagrams that
        are not MVN's, or MVN messages of other types only (the streamer set to Euler angles
        or points instead of quaternions)."""
        if not self.stats["datagrams"]:
            return "is MVN's network streamer (or `teleop stream-mvn`) sending to this port?"
        if self.stats["samples"] and self.stats["datagrams"] == self._datagrams_at_last_sample:
            return ("the stream stopped: nothing has arrived on this port since its last pose (was MVN's network "
                    "streamer, or `teleop stream-mvn`, stopped?)")
        seen = sorted(key[len("messages_"):] for key, n in self.stats.items() if key.startswith("messages_") and n)
        dropped = ", ".join(f"{k[len('dropped_'):]} {n}" for k, n in sorted(self.stats.items())
                            if k.startswith("dropped_") and n)
        if POSE_QUATERNION in seen:
            return f"MVN's poses arrive but none could be used (dropped: {dropped or 'none'})"
        if seen:
            names = ", ".join(f"{t} ({MESSAGE_NAMES.get(t, 'type ' + t)})" for t in seen)
            return (f"MVN sends message types {names} but no {POSE_QUATERNION} ({MESSAGE_NAMES[POSE_QUATERNION]}): "
                    f"tick \"Position + Orientation (Quaternion)\" in MVN's Network Streamer")
        return f"datagrams arrive on this port but are not an MVN stream (dropped: {dropped or 'none'})"

    # --------------------------------------------------------------- interface
    def poll(self, now: float | None = None) -> Frame | None:
        """The newest complete pose not returned yet (see the module docstring), or None."""
        self.receive()
        if self._returned or self._newest is None:
            return None
        self._returned = True
        return self._newest

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> "XsensLiveSource":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
