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
complete pose not returned yet (:meth:`XsensLiveSource.frames_until`: all of them).
Anything else on the port -- foreign datagrams, truncated
or inconsistent ones, other senders, other characters, unknown message types -- is dropped
and counted in :attr:`XsensLiveSource.stats`; it never raises. When no pose comes,
:meth:`XsensLiveSource.pose_stream_hint` says why from what arrived since the last pose (the
operator station prints it: e.g. a streamer set to Euler angles instead of quaternions).

One stream is followed: the sender (address and port) and the character ID of the first
*complete* pose (a whole body: every segment of the full-body chain, :func:`_complete`; MVN
sends all 23, spec 2.5.1) -- not whatever datagram came first, which
may be a stray or empty message. Two senders on one port (two MVN instances, or a
`teleop stream-mvn` left running) would otherwise be interleaved sample by sample: the
robot commanded to jump between two people's hands every tick. The other sender's datagrams
are dropped (``dropped_other_sender``) and said once (``notify``); when the followed sender
has given no usable pose for ``SENDER_SILENCE_S`` while another sends complete poses, the
other is followed (MVN restarted, streaming from another port) and that is said too.

Position unit: the protocol specification (2.5.6) says centimetres, while MVN's user manual
and Xsens's knowledge base say the quaternion stream's positions are in metres. By default
(``position_unit_m=None``) the first complete pose whose span (between its farthest
segments) is a human's, ``HUMAN_SPAN_M``, in one of the two units decides: the units are a
factor of 100 apart and a body spans 0.3-3 m in any posture, so only one reading fits. A
partial pose (two stray segments) or a degenerate one (all segments at one point) decides
nothing. Poses before the decision are read as centimetres.

Timestamps: a frame's time is MVN's time code mapped onto the caller's clock,
``t = time_code + offset`` with ``offset`` the smallest ``arrival - time_code`` seen so far
(the least-delayed sample), so network jitter does not enter the timestamps. Two clocks
never run at exactly the same rate: if MVN's runs slow, ``arrival - time_code`` grows and a
plain minimum would stay at its first value, so the timestamps would fall behind arrival by
the accumulated drift (0.18 s after an hour at 50 ppm). The minimum therefore ages: between
samples it may rise by ``DRIFT_ALLOWANCE_PPM`` of the elapsed time code (a quartz clock
drifts 10-100 ppm), i.e. ``offset = min(offset + allowance x elapsed, arrival - time_code)``,
which follows either drift and adds at most allowance x (time since the least-delayed
sample) of jitter (0.2 ms per second). The offset is re-estimated:

* when a sample arrives ``OFFSET_JUMP_S`` or more later than the offset says (the time code
  stalled: MVN's playback paused, then went on). If the next sample is on time by the old
  offset, the late one was a network stall and the old offset is kept;
* when the time code goes back by 1 s or more, or goes back after ``OFFSET_JUMP_S`` or more
  without a sample (MVN, or the sender, restarted its clock), or keeps running behind the
  newest code for ``STALE_RUN_RESTART`` samples in a row (playback scrubbed back). A single
  sample less than 1 s older than the newest one, within ``OFFSET_JUMP_S`` of it, is taken as
  reordered by the network and dropped (``dropped_stale_sample``);
* a single sample whose time code puts it more than ``AHEAD_LIMIT_S`` ahead of its arrival is
  dropped (``dropped_ahead_sample``) instead of becoming the newest time code, which would
  have made every real sample of the next second "older" and dropped them all; a second one
  in a row is a real jump forward (playback scrubbed forward) and taken.

Implausible poses: a pose with a segment farther than ``MAX_POSITION_M`` (10 km) from MVN's
origin, or two segments farther than ``MAX_SEGMENT_SPAN_M`` (4 m) apart, is finite but no
person's (garbage, a forger, a wrong position unit, two characters mixed): it is dropped
whole (``dropped_implausible_pose``), with the reason kept in
:attr:`XsensLiveSource.implausible` and said by :meth:`XsensLiveSource.pose_stream_hint`,
instead of being passed on for the operator station's reach check to withhold. The span is
checked in the unit in use (after the unit is decided; before, read as centimetres, so that a
stream in metres is never refused for it; after a sender switch, in the previous stream's unit
until the new stream's first complete pose decides its own, so a centimetre stream following
one in metres has its incomplete poses refused until then). A centre of mass (24) that is non-finite or
beyond ``MAX_POSITION_M`` is dropped too (``dropped_bad_content``,
``dropped_implausible_com``). See :mod:`teleop.inputs.mvn_protocol` for why these bounds.

A frame is returned only if its time is later than the previous frame's (else
``dropped_duplicate``): a stalled time code gives the same time again, and a recording of
the session with two frames at one time cannot be replayed (`teleop retarget` refuses
"sample times must increase").
"""

from __future__ import annotations

import socket
import sys
import time
from collections import Counter, deque
from typing import Callable

import numpy as np

from retarget.calibration import FULL_BODY_SEGMENTS
from teleop.inputs.base import Frame
from teleop.inputs.mvn_protocol import (
    CENTER_OF_MASS,
    CHARACTER_META,
    CHARACTER_SCALE,
    DEFAULT_PORT,
    JOINT_ANGLES,
    KNOWN_TYPES,
    MAX_POSITION_M,
    MAX_SEGMENT_SPAN_M,
    MESSAGE_NAMES,
    POSE_QUATERNION,
    TIME_CODE,
    MvnCodec,
    MvnFormatError,
    Reassembler,
    implausible_pose,
    parse_header,
)

_LOOPBACK = ("127.0.0.1", "localhost", "::1")
#: Span [m] between the farthest segments of a human body in any posture (curled up on the
#: floor to arms spread lying down): a complete pose decides the position unit only if its
#: span falls in this range in exactly one of centimetres and metres (module docstring).
HUMAN_SPAN_M = (0.3, 3.0)
#: Rate [ppm] at which the clock-offset minimum may rise between samples (module docstring):
#: above the drift of two quartz clocks, far below any network jitter.
DRIFT_ALLOWANCE_PPM = 200.0
#: A sample arriving this much later than the offset predicts [s] means the time code stalled
#: (paused playback): the offset is re-estimated instead of aged. Also the pause after which a
#: time code that went back means a restarted sender, not a sample reordered by the network.
OFFSET_JUMP_S = 1.0
#: A sample whose time code puts it this far ahead of its arrival [s] is not believed alone:
#: the offset is the least delay seen, so a real sample is never ahead by more than the
#: drift allowance; 0.2 s is far above that and below a jump anybody would scrub.
AHEAD_LIMIT_S = 0.2
#: Samples in a row behind the newest time code, each newer than the one before, that mean
#: the time code went back (MVN's playback scrubbed back), not samples reordered by the network
#: (a reordered sample comes alone, among newer ones).
STALE_RUN_RESTART = 3
#: The followed sender has given no usable pose for this long [s] while another sender's
#: complete poses arrive: the other one is followed from then on (MVN restarted, now streaming
#: from another port). Short enough that a restart is followed before the operator station
#: warns that no pose comes (3 s), long enough that two live senders do not take turns.
SENDER_SILENCE_S = 2.0
#: The character meta data tags kept (spec 2.6.1: name, xmid, color); others are counted
#: (``ignored_meta_tags``) and dropped, so that a flood of meta messages cannot grow memory.
META_TAGS = ("name", "xmid", "color")
#: Longest meta data value kept [characters] (a name, a 10-character xmid, a colour).
META_VALUE_MAX = 256
#: Drop reasons of datagrams that are MVN's but damaged or cut on the way.
_DAMAGED = ("truncated", "bad_size", "incomplete", "bad_content")
#: Most poses kept for :meth:`XsensLiveSource.frames_until` between two calls: a second of a
#: 240 Hz stream (the caller sends only the newest few of a backlog anyway).
PENDING_FRAMES = 256


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


def format_address(sender) -> str:
    """``host:port`` of a datagram's sender (``[host]:port`` for IPv6); "an unknown sender"
    for None (datagrams handed in directly, not read from the socket)."""
    if sender is None:
        return "an unknown sender"
    host, port = sender[0], sender[1]
    return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"


def _tell_operator(message: str) -> None:
    """The default ``notify``: one line on stderr, as the operator station's own messages.
    A gone stderr (a hung-up terminal) must not stop the input: nothing is said then."""
    try:
        print(f"[operator] {message}", file=sys.stderr)
    except (OSError, ValueError):
        pass


def _complete(pose: dict) -> bool:
    """Whether a decoded pose is a whole body: it holds every segment of the full-body chain
    the retargeting measures (:data:`retarget.calibration.FULL_BODY_SEGMENTS`: pelvis, t8,
    head, arms, legs). MVN sends all 23 (spec 2.5.1), but `teleop stream-mvn` of a BVH or
    HDM05 take sends the 22 its skeleton has (no L5): with "all 23" such a stream never
    counted as complete, so its sender was never followed, and two of them on one port were
    interleaved sample by sample (the robot's hands jumping between two people every tick),
    and its position unit never decided (a stream in metres read as centimetres). A stray
    partial pose (a few segments) still decides nothing."""
    return all(name in pose for name in FULL_BODY_SEGMENTS)


class XsensLiveSource:
    """Receives the MVN network stream on a UDP port.

    Args:
        bind: (host, port) to listen on; port 0 picks a free port (see :attr:`address`).
        character_id: accept only this character (None: the character of the first complete pose).
        position_unit_m: metres per position unit on the wire (spec: cm -> 0.01; MVN's manual:
            m -> 1.0); None: found from the first complete pose of a human span (module docstring).
        clock: the caller's clock [s] (time.monotonic by default).
        allow_remote: listening on a non-loopback address must be asked for explicitly.
        receive_buffer_bytes: socket receive buffer [bytes] (bursts of a 240 Hz stream).
        notify: called with one line when a second sender is ignored or followed instead of
            the first (default: printed on stderr as the operator station's messages): a
            session that follows the wrong person must not look like a quiet one.

    Attributes:
        stats: Counter of "datagrams", "samples" (frames produced), "messages_<type>",
            "ignored_items", "ignored_meta_tags", "receive_errors", "sender_switches" and drops
            by reason, keyed "dropped_<reason>" ("foreign", "truncated", "bad_size",
            "bad_type", "unknown_type", "other_sender", "other_character", "stale_sample",
            "ahead_sample", "duplicate", "incomplete", "bad_content", "implausible_pose",
            "implausible_com"; module docstring).
        implausible: why the newest implausible pose or centre of mass was dropped, or None.
        com: newest centre of mass (3,) [m] (type 24), or None. Exposed for the caller;
            not part of the frames :meth:`poll` returns (see the module docstring).
        joint_angles: newest joint angles (list of JointAngle, type 20), or None; likewise.
        meta: character meta data (type 12) {tag: value}, the tags of ``META_TAGS`` only.
        scale: newest character scale (type 13), or None.
        time_code: newest type-25 time code string, or None.
        position_unit_m: the unit in use [m per wire unit] (None until a pose decides).
        sender: address of the sender followed, or None before the first complete pose.
    """

    def __init__(self, bind: tuple[str, int] = ("127.0.0.1", DEFAULT_PORT), *, character_id: int | None = None,
                 position_unit_m: float | None = None, clock: Callable[[], float] = time.monotonic,
                 allow_remote: bool = False, receive_buffer_bytes: int = 1 << 20,
                 notify: Callable[[str], None] | None = None) -> None:
        host, port = bind
        if host not in _LOOPBACK and not allow_remote:
            raise ValueError(f"refusing to listen on {host} (not loopback) for the MVN stream: give --allow-remote "
                             "(allow_remote=True) to accept a stream from another PC")
        self.position_unit_m = position_unit_m
        self._unit_given = position_unit_m is not None
        self.codec = MvnCodec(0.01 if position_unit_m is None else position_unit_m)
        self.character_id = character_id
        self._character_given = character_id is not None
        self._clock = clock
        self._notify = notify or _tell_operator
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
        # What arrived since the last frame or the last hint (pose_stream_hint says what is
        # wrong *now*, not what went wrong an hour ago), and which of the two that was.
        self._recent: Counter = Counter()
        self._recent_since = "start"
        # (sender, sample counter, time code) of the newest frame: the messages MVN sends with
        # it (CoM, joint angles, meta data) belong to that pose, not to "what came since".
        self._last_pose_key: tuple | None = None
        self._in_last_sample = False
        self.com: np.ndarray | None = None
        self.joint_angles = None
        self.meta: dict[str, str] = {}
        self.scale = None
        self.time_code: str | None = None
        self.implausible: str | None = None
        self._implausible_pose: str | None = None      # the newest pose's reason (for the hint)
        # (sender, character) each of the above came from: those a stray stream left before
        # the first complete pose are forgotten when the stream followed is chosen.
        self._aux_origin: dict[str, tuple] = {}
        # The stream followed (module docstring): its sender and when it last gave a usable
        # pose; the last other sender and character seen (for the hints), and whether the
        # other sender was said (once per stream followed).
        self.sender = None
        self._sender_locked = False
        self._sender_pose_at = 0.0
        self._other_sender = None
        self._other_sender_said = False
        self._other_character: int | None = None
        self._newest: Frame | None = None
        # Poses not returned yet, oldest first (bounded: a caller that stalls keeps the newest).
        self._pending: deque[Frame] = deque(maxlen=PENDING_FRAMES)
        self._reset_timing(None)

    def _reset_timing(self, origin) -> None:
        """Forget the clock offset: a new time line (another sender or character, a restart)."""
        self._timing_origin = origin
        self._offset: float | None = None
        self._offset_before_jump: float | None = None   # the aged offset a one-sample jump replaced
        self._last_time_code: int | None = None
        self._last_arrival: float | None = None
        self._ahead_pending = False
        self._stale_run = 0
        self._stale_code: int | None = None

    @property
    def address(self) -> tuple[str, int]:
        return self._sock.getsockname()[:2]

    def _count(self, key: str, n: int = 1) -> None:
        self.stats[key] += n
        if not self._in_last_sample:
            self._recent[key] += n

    # ------------------------------------------------------------------ input
    def handle_datagram(self, datagram: bytes, arrival: float, sender=None) -> None:
        """Take one datagram from ``sender`` (its address; the socket gives it, tests may
        leave it None); never raises on bad input."""
        try:
            header = parse_header(datagram)
        except MvnFormatError as exc:
            self._in_last_sample = False
            self._count("datagrams")
            self._count(f"dropped_{exc.reason}")
            return
        self._in_last_sample = (sender, header.sample_counter, header.time_code_ms) == self._last_pose_key
        self._count("datagrams")
        if header.message_type not in KNOWN_TYPES:
            self._count("dropped_unknown_type")
            return
        # Another sender than the one followed: dropped while the followed one gives poses;
        # after SENDER_SILENCE_S without, a candidate that its first complete pose makes followed.
        candidate = self._sender_locked and sender != self.sender
        if candidate and arrival - self._sender_pose_at <= SENDER_SILENCE_S:
            self._drop_other_sender(sender)
            return
        if (self.character_id is not None and header.character_id != self.character_id
                and (self._character_given or not candidate)):
            self._count("dropped_other_character")
            self._other_character = header.character_id
            return
        whole = self._reassembler.add(header, memoryview(datagram)[24:].tobytes(), origin=sender)
        lost = self._reassembler.incomplete - self.stats["dropped_incomplete"]
        if lost:
            self._count("dropped_incomplete", lost)
        if whole is None:
            return
        header, payload = whole
        try:
            message = self.codec.decode(header, payload)
        except MvnFormatError as exc:                 # inconsistent or absurd content: drop it
            if exc.reason.startswith("implausible"):
                self.implausible = str(exc)
                self._count(f"dropped_{exc.reason}")
            else:
                self._count("dropped_bad_content")
            return
        except (ValueError, UnicodeError):            # inconsistent content: drop it
            self._count("dropped_bad_content")
            return
        if candidate:
            if header.message_type != POSE_QUATERNION or not _complete(message.data):
                self._drop_other_sender(sender)       # not what makes a stream worth switching to
                return
            self._switch_sender(sender, header.character_id, arrival)
        self._count(f"messages_{header.message_type}")
        origin = (sender, header.character_id)
        if message.ignored_items and header.message_type != POSE_QUATERNION:
            self._count("ignored_items", message.ignored_items)   # types 01, 03: not used, but counted
        if header.message_type == POSE_QUATERNION:
            self._take_pose(header, message, arrival, sender)
        elif header.message_type == CENTER_OF_MASS:
            self._keep("com", message.data, origin)
        elif header.message_type == JOINT_ANGLES:
            self._keep("joint_angles", message.data, origin)
        elif header.message_type == CHARACTER_META:
            # Known tags only, values capped: MVN sends a few short tags (spec 2.6.1), and a
            # sender of endless tags must not grow memory without bound.
            tags = {key: value[:META_VALUE_MAX] for key, value in message.data.items() if key in META_TAGS}
            if len(tags) < len(message.data):
                self._count("ignored_meta_tags", len(message.data) - len(tags))
            self.meta.update(tags)                    # tags may come a few at a time (spec 2.6.1)
            self._aux_origin["meta"] = origin
        elif header.message_type == CHARACTER_SCALE:
            self._keep("scale", message.data, origin)
        elif header.message_type == TIME_CODE:
            self._keep("time_code", message.data, origin)

    def _keep(self, attribute: str, value, origin: tuple) -> None:
        setattr(self, attribute, value)
        self._aux_origin[attribute] = origin

    def _forget_aux(self, keep_origin=None) -> None:
        """Forget the CoM, joint angles, meta data... that did not come from ``keep_origin``."""
        for attribute, origin in list(self._aux_origin.items()):
            if origin != keep_origin:
                setattr(self, attribute, {} if attribute == "meta" else None)
                del self._aux_origin[attribute]

    def _drop_other_sender(self, sender) -> None:
        self._count("dropped_other_sender")
        self._other_sender = sender
        if not self._other_sender_said:
            self._other_sender_said = True
            self._notify(f"warning: a second MVN stream from {format_address(sender)} is ignored; the first, from "
                         f"{format_address(self.sender)}, is followed (stop the one not wanted: the other is "
                         f"followed once the first has sent no pose for {SENDER_SILENCE_S:g} s)")

    def _lock(self, sender, character_id: int) -> None:
        """Follow ``sender``'s ``character_id`` (the first complete pose came from them)."""
        self.sender, self._sender_locked = sender, True
        if not self._character_given:
            self.character_id = character_id
        self._forget_aux((sender, character_id))

    def _switch_sender(self, sender, character_id: int, arrival: float) -> None:
        """Follow ``sender`` instead of the silent one: a new stream, with its own clock,
        character and possibly unit."""
        silent_for = arrival - self._sender_pose_at
        self._notify(f"the MVN stream from {format_address(self.sender)} has sent no usable pose for "
                     f"{silent_for:.1f} s: now following the one from {format_address(sender)}")
        self._count("sender_switches")
        self._forget_aux(None)
        if not self._unit_given:
            self.position_unit_m = None       # decided again, from the new stream's poses
        self._lock(sender, character_id)
        self._sender_pose_at = arrival
        self._other_sender_said = False
        self._reset_timing(None)

    def _take_pose(self, header, message, arrival: float, sender) -> None:
        pose = message.data
        if message.ignored_items:
            self._count("ignored_items", message.ignored_items)
        if message.implausible_items:
            # A segment at an absurd distance: the datagram is garbage, not a pose missing
            # one segment (dropped whole, as one with segments too far apart below).
            self._drop_implausible(message.implausible)
            return
        if not pose:
            self._count("dropped_bad_content")
            return
        complete = _complete(pose)
        if self.position_unit_m is None and complete:
            pose = self._detect_unit(pose)
        # Checked in the unit in use, before an implausible pose can lock the sender.
        problem = implausible_pose(pose)
        if problem:
            self._drop_implausible(problem)
            return
        if complete and not self._sender_locked:
            self._lock(sender, header.character_id)
            self._sender_pose_at = arrival
        origin = (sender, header.character_id)
        if origin != self._timing_origin:              # another stream's clock (before the lock)
            self._reset_timing(origin)
        t = self._frame_time(header.time_code_ms, arrival)
        if t is None:
            return
        if self._newest is not None and t <= self._newest[0]:
            # Same time as the frame before (the time code stood still, MVN paused) or earlier:
            # never emitted, a recording of the session must replay with increasing times.
            self._count("dropped_duplicate")
            return
        if message.lost_segments:
            # A segment MVN sent with garbage values (NaN, a zero quaternion) goes on as NaN,
            # not left out: a pose without it looked like one of a source that never has it,
            # and the operator station calibrated on it as on a sparse body (proportions
            # instead of measured lengths, the CoM mapped absolutely: 2 cm off at the start)
            # for the whole session. With NaN it is held as a glitch, as a file's NaN is.
            lost = (np.full(3, np.nan), np.full(4, np.nan))
            pose = {**pose, **{name: lost for name in message.lost_segments if name not in pose}}
        self._newest = (t, pose)
        self._pending.append(self._newest)
        self._last_pose_key = (sender, header.sample_counter, header.time_code_ms)
        self._count("samples")
        if self._sender_locked and sender == self.sender:
            self._sender_pose_at = arrival
        self._recent, self._recent_since = Counter(), "pose"

    def _drop_implausible(self, reason: str | None) -> None:
        self.implausible = self._implausible_pose = reason
        self._count("dropped_implausible_pose")

    def _frame_time(self, code: int, arrival: float) -> float | None:
        """The caller's-clock time of a sample of time code ``code`` [ms] that arrived at
        ``arrival``, updating the offset (module docstring); None if it is dropped."""
        last = self._last_time_code
        if last is not None and code < last:
            assert self._last_arrival is not None     # set with _last_time_code
            reordered = last - code < 1000 and arrival - self._last_arrival < OFFSET_JUMP_S
            if reordered:
                # Behind the newest code: reordered by the network, unless such samples keep
                # coming, each newer than the one before -- the time code went back.
                in_run = self._stale_code is not None and code > self._stale_code
                self._stale_run = self._stale_run + 1 if in_run else 1
                self._stale_code = code
                if self._stale_run < STALE_RUN_RESTART:
                    self._count("dropped_stale_sample")
                    return None
            self._reset_timing(self._timing_origin)    # MVN's clock restarted or went back
        sample_offset = arrival - code / 1000.0
        if self._offset is None:
            self._offset = sample_offset
        else:
            assert self._last_time_code is not None   # set with _offset (both reset together)
            allowance = DRIFT_ALLOWANCE_PPM * 1e-6 * (code - self._last_time_code) / 1000.0
            aged = self._offset + allowance
            before = None if self._offset_before_jump is None else self._offset_before_jump + allowance
            # Ahead of its arrival by both the offset and the one a jump just replaced: a
            # lone such sample (a stray, a spoof) must not become the newest time code.
            ahead = code / 1000.0 + (aged if before is None else min(aged, before)) - arrival
            if ahead > AHEAD_LIMIT_S and not self._ahead_pending:
                self._ahead_pending = True
                self._count("dropped_ahead_sample")
                return None
            self._ahead_pending = False
            # A sample a second or more later than the time code says (MVN's playback paused
            # and resumed, its time code stalled): re-estimated, or every later time would lag
            # its arrival by the pause (and the robot station refuses samples 10 s old). A
            # network stall that delayed this sample is undone by the next on-time one: the
            # offset it replaced is kept for one sample.
            if sample_offset - aged >= OFFSET_JUMP_S:
                self._offset, self._offset_before_jump = sample_offset, aged
            else:
                self._offset = min(aged, sample_offset)
                self._offset_before_jump = None
        self._stale_run, self._stale_code = 0, None
        self._last_time_code, self._last_arrival = code, arrival
        return code / 1000.0 + self._offset

    def _detect_unit(self, pose: dict) -> dict:
        """Decide the stream's position unit from a complete ``pose`` (decoded with the
        codec's current unit) and return it in metres; a pose whose span is not a human's in
        either unit decides nothing and is returned as it is (module docstring)."""
        positions = np.array([p for p, _ in pose.values()]) / self.codec.unit    # wire units
        span = float(np.max(np.linalg.norm(positions[:, None] - positions[None], axis=-1)))
        low, high = HUMAN_SPAN_M
        fits = [unit for unit in (0.01, 1.0) if low <= span * unit <= high]
        if len(fits) != 1:
            return pose
        factor = fits[0] / self.codec.unit
        self.position_unit_m = self.codec.unit = fits[0]
        if factor == 1.0:
            return pose
        if self.com is not None:          # a CoM that came before the first pose: same wire unit
            self.com = self.com * factor
            if float(np.linalg.norm(self.com)) > MAX_POSITION_M:   # plausible only in the wrong unit
                self.com = None
        if self.scale is not None:
            self.scale.segments = [(name, origin * factor) for name, origin in self.scale.segments]
            self.scale.points = [(*point[:4], point[4] * factor) for point in self.scale.points]
        return {name: (p * factor, q) for name, (p, q) in pose.items()}

    def receive(self, max_datagrams: int = 1024) -> int:
        """Drain the socket (non-blocking); returns the number of datagrams read."""
        n = 0
        while n < max_datagrams:
            try:
                datagram, sender = self._sock.recvfrom(65535)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:          # e.g. ICMP errors surfacing on the socket: nothing to read
                self._count("receive_errors")
                break
            self.handle_datagram(datagram, self._clock(), sender)
            n += 1
        return n

    def pose_stream_hint(self) -> str:
        """Why no pose has come for a while, and what to do, from what arrived since the last
        pose or the last hint (a user-facing warning; the counts start again after it):
        nothing on the port, the stream stopped, a second sender or another character that is
        not followed, MVN datagrams damaged or cut on the way, poses that are no person's
        (implausible: the reason of the newest), poses that could not be used,
        MVN messages of other types only (the streamer set to Euler angles or points instead
        of quaternions), or datagrams that are not MVN's."""
        recent, since = self._recent, self._recent_since
        self._recent, self._recent_since = Counter(), "hint"
        if not self.stats["datagrams"]:
            return "is MVN's network streamer (or `teleop stream-mvn`) sending to this port?"
        if not recent["datagrams"]:
            if since == "pose":
                return ("the stream stopped: nothing has arrived on this port since its last pose (was MVN's network "
                        "streamer, or `teleop stream-mvn`, stopped?)")
            return ("nothing has arrived on this port since the last warning: is MVN's network streamer (or "
                    "`teleop stream-mvn`) sending to this port?")
        dropped = ", ".join(f"{k[len('dropped_'):]} {n}" for k, n in sorted(recent.items())
                            if k.startswith("dropped_") and n) or "none"
        seen = sorted(key[len("messages_"):] for key, n in recent.items() if key.startswith("messages_") and n)
        if recent["dropped_other_sender"]:
            return (f"the MVN stream followed, from {format_address(self.sender)}, sends no usable pose, and the one "
                    f"from {format_address(self._other_sender)} is ignored (dropped: {dropped}): that one is followed "
                    f"once it sends complete poses (a whole body, \"Position + Orientation (Quaternion)\"); or "
                    f"restart the one followed")
        if recent["dropped_other_character"]:
            return (f"MVN streams character {self._other_character}, but character {self.character_id} is followed "
                    f"(its complete pose came first) and sends no usable pose (dropped: {dropped}): stream one "
                    f"character only, or restart the operator station to follow character {self._other_character}")
        if recent["dropped_implausible_pose"]:
            return (f"MVN's poses arrive but are no person's: {self._implausible_pose} (dropped: {dropped}); is the "
                    f"position unit right ({self._unit_text()}), is the streamer sending one character, is MVN's "
                    f"tracking lost (re-calibrate)? Poses farther than {MAX_POSITION_M:g} m from MVN's origin or with "
                    f"segments more than {MAX_SEGMENT_SPAN_M:g} m apart are not used")
        if POSE_QUATERNION in seen:
            drops = {k for k, n in recent.items() if k.startswith("dropped_") and n}
            if drops == {"dropped_duplicate"}:
                return (f"MVN's poses arrive with a time code that stands still (dropped: {dropped}): is MVN's "
                        "playback paused? The robot holds its pose until it goes on")
            return f"MVN's poses arrive but none could be used (dropped: {dropped})"
        if any(recent[f"dropped_{reason}"] for reason in _DAMAGED):
            return (f"MVN datagrams arrive damaged or cut (dropped: {dropped}): is something between MVN and this "
                    "computer shortening them (a VPN or tunnel with a small MTU, a proxy), or is the sender not "
                    "MVN's network streamer?")
        if seen:
            names = ", ".join(f"{t} ({MESSAGE_NAMES.get(t, 'type ' + t)})" for t in seen)
            return (f"MVN sends message types {names} but no {POSE_QUATERNION} ({MESSAGE_NAMES[POSE_QUATERNION]}): "
                    f"tick \"Position + Orientation (Quaternion)\" in MVN's Network Streamer")
        return f"datagrams arrive on this port but are not an MVN stream (dropped: {dropped})"

    def _unit_text(self) -> str:
        if self.position_unit_m is None:
            return "not decided yet: read as centimetres"
        how = "given" if self._unit_given else "found from the first human-sized pose"
        return f"{self.position_unit_m:g} m per unit, {how}"

    # --------------------------------------------------------------- interface
    def poll(self, now: float | None = None) -> Frame | None:
        """The newest complete pose not returned yet (see the module docstring), or None."""
        frames = self.frames_until(now)
        return frames[-1] if frames else None

    def frames_until(self, now: float | None = None) -> list[Frame]:
        """Every complete pose received and not returned yet, oldest first (at most the last
        :data:`PENDING_FRAMES`). The operator station takes them all (thinned), and records
        them: taking only the newest per tick of a 100 Hz stream into the 100 Hz loop lost
        a pose whenever two arrived between two ticks (`stream-mvn` of a recording: 70-77
        poses a second sent, and recorded)."""
        self.receive()
        frames = list(self._pending)
        self._pending.clear()
        return frames

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> "XsensLiveSource":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
