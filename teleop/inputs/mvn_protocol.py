"""Xsens MVN real-time network streaming protocol: datagram encoder and decoder.

Implemented from Xsens' "MVN real-time network streaming Protocol Specification"
(revision N, September 2018). Pure functions and small classes, no sockets: the UDP
receiver is :mod:`teleop.inputs.xsens_live`, the streaming tool :mod:`teleop.inputs.mvn_cli`.

Datagram (all numbers big-endian, "network byte order")::

    header, 24 bytes
      6 s   ID string "MXTP" + two ASCII digits: the message type ("02" = b"\\x30\\x32")
      u32   sample counter      +1 per sample sent (not a time: the sender may skip frames)
      u8    datagram counter    index 0..127 of this datagram within the sample; the top
                                bit (0x80) marks the last one (a one-datagram sample: 0x80)
      u8    number of items     items in *this* datagram
      u32   time code           ms since MVN's clock started (start of the recording)
      u8    character ID        0 in a single-person set-up
      u8    number of body segments (23; MVN >= 2019, 0 from older senders)
      u8    number of props (0-4)
      u8    number of finger tracking segments (0 or 40)
      2 B   reserved
      u16   payload size        bytes after the header (0 from older senders)
    payload: items of the message type

Message types handled (items):

====  ==========================  ============================================================
01    pose, Euler                 i32 segment ID, 3 f32 position, 3 f32 rotation [deg]; Y up
02    pose, quaternion            i32 segment ID, 3 f32 position, 4 f32 quaternion (w, x, y, z); Z up
03    point positions             i32 point ID (256 * segment ID + local point), 3 f32 position; Y up
12    character meta data         text "tag:value" lines (name, xmid, color)
13    character scale             segment origins and points in the ideal T-pose (see spec 2.6.2)
20    joint angles                i32 parent point ID, i32 child point ID, 3 f32 angles
24    centre of mass              3 f32 position; Z up
25    time code                   12-character string "HH:MM:SS.mmm"
====  ==========================  ============================================================

Units and axes (made explicit here because the product uses metres and N-pose frames):

* positions: the specification (2.5.6) says **centimetres**; :class:`MvnCodec` converts
  with ``position_unit_m`` (0.01 by default; pass 1.0 for a sender that streams metres);
* Z-up messages (02, 13, 20, 24) use MVN's world: x forward, y left, z up, as the
  product does. Types 01 and 03 are Y-up; they are decoded but not turned into poses
  (the specification does not state the Euler order of type 01);
* quaternions are world_from_segment in MVN's segment frames, which are world-aligned in
  the **T-pose** ("ideal T-pose where all segment orientations are identity", 2.6.2);
  the product's frames are world-aligned in the N-pose. The codec re-expresses the three
  arm segments of each side (rotation of +-90 degrees about x, as the file readers do, see
  :mod:`retarget.readers.mvn`) on decoding, and back on encoding;
* joint angles (type 20): the specification gives no unit; MVN reports joint angles in
  degrees and the codec passes them through unchanged.

Plausibility: a decoded position must be finite and within :data:`MAX_POSITION_M` of MVN's
origin. Type 01, 02 and 03 items that are not are skipped (counted in
:attr:`MvnMessage.ignored_items`, the far ones also in ``implausible_items`` with the reason);
a type-24 centre of mass that is not raises :class:`MvnFormatError` (reasons "bad_content",
"implausible_com"). :func:`implausible_pose` also checks that a pose's segments are not
farther apart than a body (:data:`MAX_SEGMENT_SPAN_M`); the live source
(:mod:`teleop.inputs.xsens_live`) drops such poses whole.

Segment IDs are 1..23 in MVN order (index + 1): Pelvis=1 ... LeftToe=23, mapped to the
names of :data:`retarget.human.SEGMENTS`; props (24-27) and finger segments are counted and
ignored.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from retarget import quat
from retarget.human import SEGMENTS

MAGIC = b"MXTP"
DEFAULT_PORT = 9763                       # spec 2.3: "9" = X, "6" = M, "3" = E
HEADER = struct.Struct(">6sIBBIBBBB2xH")  # 24 bytes
LAST_DATAGRAM = 0x80

POSE_EULER = "01"
POSE_QUATERNION = "02"
POINTS = "03"
CHARACTER_META = "12"
CHARACTER_SCALE = "13"
JOINT_ANGLES = "20"
CENTER_OF_MASS = "24"
TIME_CODE = "25"

#: Fixed item sizes [bytes] of the message types with fixed-size items.
ITEM_SIZE = {POSE_EULER: 28, POSE_QUATERNION: 32, POINTS: 16, "05": 32, "21": 40, "22": 44, "23": 44,
             JOINT_ANGLES: 20, CENTER_OF_MASS: 12}
#: What the message types carry (the Network Streamer's names, spec 2.5-2.6).
MESSAGE_NAMES = {POSE_EULER: "pose, Euler angles", POSE_QUATERNION: "pose, quaternions", POINTS: "points",
                 "05": "tag positions", CHARACTER_META: "meta data", CHARACTER_SCALE: "scale information",
                 JOINT_ANGLES: "joint angles", "21": "linear segment kinematics",
                 "22": "angular segment kinematics", "23": "motion tracker kinematics",
                 CENTER_OF_MASS: "centre of mass", TIME_CODE: "time code"}
#: Every message type of the specification (others are counted as unknown).
KNOWN_TYPES = frozenset(ITEM_SIZE) | {CHARACTER_META, CHARACTER_SCALE, TIME_CODE}

_EULER_ITEM = struct.Struct(">i3f3f")
_QUAT_ITEM = struct.Struct(">i3f4f")
_POINT_ITEM = struct.Struct(">i3f")
_JOINT_ITEM = struct.Struct(">ii3f")
_COM_ITEM = struct.Struct(">3f")
_SCALE_POINT = struct.Struct(">I3f")

#: Largest magnitude a 32-bit float holds: the protocol's positions, quaternions and angles
#: are all big-endian float32 (spec 2.5); a value beyond it cannot be put on the wire.
FLOAT32_MAX = float(np.finfo(np.float32).max)

#: Farthest a decoded position may be from MVN's origin [m]; a segment, point or centre of
#: mass beyond it is not a body in a capture volume but a garbage or forged value (1e30 m is
#: finite and fits the wire's float32). Not tight on purpose: MVN's global position is
#: integrated from inertial data and drifts over a long session (about 1-2 % of the distance
#: walked), and an operator may walk a hall or a field, so a few hundred metres of drift
#: must still pass. 10 km is beyond any of that, and where float32 positions in centimetres
#: (the wire's unit, spec 2.5.6) stop resolving a millimetre (a spacing of 1.2 mm above
#: 2^20 cm = 10.5 km): a pose there could not be tracked to the precision of a hand anyway.
MAX_POSITION_M = 10_000.0
#: Farthest apart two segment origins of one character may be in one pose [m]. The tallest
#: person on record was 2.72 m; arms raised overhead, the wrist-to-toe distance (MVN's
#: hand and toe origins are at the wrist and the ball of the foot, not the finger or toe
#: tips) is about 1.2 x stature, 3.3 m. 4 m leaves room for MVN's fit errors (a segment
#: length off, a magnetic disturbance) while refusing what is no human: segments of two
#: people mixed, a unit read 100 times too large (a 1.7 m body spanning 170 m), garbage.
#: Not used by :meth:`MvnCodec.decode` (a partial pose may be any stray segments): see
#: :func:`implausible_pose` and :mod:`teleop.inputs.xsens_live`.
MAX_SEGMENT_SPAN_M = 4.0

#: MVN segment ID (1..23) -> canonical segment name, and back.
SEGMENT_BY_ID: dict[int, str] = {i + 1: name for i, name in enumerate(SEGMENTS)}
ID_BY_SEGMENT: dict[str, int] = {name: i for i, name in SEGMENT_BY_ID.items()}

#: MVN's 22 joints (the order of the Xsens joint-angle exports): joint k connects segment
#: ID PARENT[k] to segment ID k + 2 (its child), e.g. jL5S1 = Pelvis(1) -> L5(2).
JOINT_NAMES: tuple[str, ...] = (
    "jL5S1", "jL4L3", "jL1T12", "jT9T8", "jT1C7", "jC1Head",
    "jRightT4Shoulder", "jRightShoulder", "jRightElbow", "jRightWrist",
    "jLeftT4Shoulder", "jLeftShoulder", "jLeftElbow", "jLeftWrist",
    "jRightHip", "jRightKnee", "jRightAnkle", "jRightBallFoot",
    "jLeftHip", "jLeftKnee", "jLeftAnkle", "jLeftBallFoot",
)
JOINT_PARENT_ID: tuple[int, ...] = (1, 2, 3, 4, 5, 6, 5, 8, 9, 10, 5, 12, 13, 14, 1, 16, 17, 18, 1, 20, 21, 22)

# T-pose arm frame -> N-pose arm frame, per arm segment (see retarget/readers/mvn.py: the
# right arm hangs by +90 degrees about x from the T-pose, the left by -90 degrees).
_ARM_FIX = {name: quat.about_x(np.pi / 2 if name.startswith("right") else -np.pi / 2)
            for name in ("right_upper_arm", "right_forearm", "right_hand",
                         "left_upper_arm", "left_forearm", "left_hand")}


class MvnFormatError(ValueError):
    """A datagram that is not a well-formed MVN datagram (the message says why)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class MvnHeader:
    """The 24-byte datagram header, decoded (see the module docstring)."""

    message_type: str
    sample_counter: int
    datagram_index: int
    last: bool
    item_count: int
    time_code_ms: int
    character_id: int
    body_segments: int = 23
    props: int = 0
    finger_segments: int = 0
    payload_size: int = 0


@dataclass
class MvnMessage:
    """One sample of one message type, reassembled from its datagrams and decoded.

    Attributes:
        header: header of the first datagram (item_count: items over all datagrams).
        data: decoded content, by type: 02 -> {segment: (position (3,) [m],
            quaternion (4,) N-pose frames)}; 01 -> {segment ID: (position (3,) [m], Euler
            (3,) [deg])} (Y up, raw); 03 -> {point ID: position (3,) [m]} (Y up);
            12 -> {tag: value}; 13 -> :class:`CharacterScale`; 20 -> list of
            :class:`JointAngle`; 24 -> CoM (3,) [m]; 25 -> "HH:MM:SS.mmm"; others -> bytes.
        ignored_items: items skipped: type 02 props, finger segments, unknown segment IDs,
            non-finite positions, quaternion norms outside (0.5, 2); types 01 and 03
            non-finite values; and, of types 01, 02 and 03, positions farther than
            :data:`MAX_POSITION_M` from the origin (also counted in ``implausible_items``).
        implausible_items: of ``ignored_items``, those skipped as finite but absurd (farther
            than :data:`MAX_POSITION_M` from the origin).
        implausible: why the first of those was skipped (e.g. "segment pelvis is 1e+30 m
            from MVN's origin, more than 10000 m"), or None.
    """

    header: MvnHeader
    data: Any                       # its type depends on header.message_type (above)
    ignored_items: int = 0
    implausible_items: int = 0
    implausible: str | None = None
    #: Type 02: the body segments whose item was skipped for its values (non-finite, a
    #: quaternion norm outside (0.5, 2)): a segment the suit sent but lost to a glitch, not
    #: one it does not have (the live source passes them on as NaN, as a file gives them).
    lost_segments: tuple[str, ...] = ()


@dataclass(frozen=True)
class JointAngle:
    """One joint of a type-20 message: point IDs (256 * segment ID + local point) and angles."""

    parent_point: int
    child_point: int
    angles: tuple[float, float, float]

    @property
    def parent_segment(self) -> int:
        return self.parent_point // 256

    @property
    def child_segment(self) -> int:
        return self.child_point // 256


@dataclass
class CharacterScale:
    """Type-13 content: segment origins [m] and named points [m] in the ideal T-pose.

    Attributes:
        segments: [(name, origin (3,))] in global space.
        points: [(segment ID, point ID, name, flags, position (3,) relative to the segment origin)].
    """

    segments: list[tuple[str, np.ndarray]] = field(default_factory=list)
    points: list[tuple[int, int, str, int, np.ndarray]] = field(default_factory=list)


def parse_header(datagram: bytes) -> MvnHeader:
    """Decode and check the header. Raises :class:`MvnFormatError` (reason "foreign",
    "truncated", "bad_type" or "bad_size")."""
    if len(datagram) < 4 or datagram[:4] != MAGIC:
        raise MvnFormatError("foreign", f"not an MVN datagram (starts with {bytes(datagram[:6])!r})")
    if len(datagram) < HEADER.size:
        raise MvnFormatError("truncated", f"datagram of {len(datagram)} bytes is shorter than the "
                                          f"{HEADER.size}-byte header")
    ident, sample, counter, items, time_code, character, segments, props, fingers, size = HEADER.unpack_from(datagram)
    digits = ident[4:6]
    if not (48 <= digits[0] <= 57 and 48 <= digits[1] <= 57):
        raise MvnFormatError("bad_type", f"message type {digits!r} is not two ASCII digits")
    payload = len(datagram) - HEADER.size
    # Senders older than MVN 2019 leave the payload size 0: the datagram length decides.
    if size and size != payload:
        reason = "truncated" if payload < size else "bad_size"
        raise MvnFormatError(reason, f"payload is {payload} bytes, the header announces {size}")
    message_type = digits.decode("ascii")
    item_size = ITEM_SIZE.get(message_type)
    if item_size is not None and payload != items * item_size:
        reason = "truncated" if payload < items * item_size else "bad_size"
        raise MvnFormatError(reason, f"type {message_type}: {items} items of {item_size} bytes need "
                                     f"{items * item_size} bytes, got {payload}")
    return MvnHeader(message_type, sample, counter & 0x7F, bool(counter & LAST_DATAGRAM), items, time_code,
                     character, segments, props, fingers, payload)


def _pack(item: struct.Struct, what: str, *values) -> bytes:
    """``item.pack(*values)``; a value beyond the protocol's 32-bit floats raises ValueError
    naming ``what`` (struct says only "float too large to pack with f format", and only as
    OverflowError, which callers that check input as ValueError let through as a traceback)."""
    try:
        return item.pack(*values)
    except OverflowError:                 # a float beyond float32 (struct.error: other faults)
        finite = [abs(float(v)) for v in values if np.isfinite(v)]
        largest = max(finite, default=float("nan"))
        raise ValueError(f"{what}: {largest:g} (in wire units) is beyond the MVN protocol's 32-bit floats "
                         f"(at most {FLOAT32_MAX:.3g})") from None


# --------------------------------------------------------------------- strings
def _pack_string(text: str) -> bytes:
    raw = text.encode("utf-8")
    return struct.pack(">i", len(raw)) + raw           # spec 2.5.12: i32 length, no terminator


def _unpack_string(buffer: bytes, offset: int) -> tuple[str, int]:
    if offset + 4 > len(buffer):
        raise MvnFormatError("truncated", "string length runs past the end of the payload")
    (n,) = struct.unpack_from(">i", buffer, offset)
    if n < 0 or offset + 4 + n > len(buffer):
        raise MvnFormatError("truncated", f"string of {n} bytes runs past the end of the payload")
    return bytes(buffer[offset + 4:offset + 4 + n]).decode("utf-8", "replace"), offset + 4 + n


# ----------------------------------------------------------------------- codec
def _too_far(what: str, position: np.ndarray) -> str | None:
    """Why ``position`` [m] is implausible (farther than :data:`MAX_POSITION_M` from the
    origin), or None."""
    distance = float(np.linalg.norm(position))
    if distance <= MAX_POSITION_M:
        return None
    return f"{what} is {distance:.3g} m from MVN's origin, more than {MAX_POSITION_M:g} m"


def implausible_pose(pose: dict) -> str | None:
    """Why a decoded type-02 ``pose`` ({segment: (position [m], quaternion)}) is not one
    person's, or None: a segment farther than :data:`MAX_POSITION_M` from the origin, or
    two segments farther than :data:`MAX_SEGMENT_SPAN_M` apart."""
    if not pose:
        return None
    names = list(pose)
    positions = np.array([pose[name][0] for name in names], dtype=float)
    for name, position in zip(names, positions):
        reason = _too_far(f"segment {name}", position)
        if reason:
            return reason
    gaps = np.linalg.norm(positions[:, None] - positions[None], axis=-1)
    i, j = np.unravel_index(int(np.argmax(gaps)), gaps.shape)
    if gaps[i, j] > MAX_SEGMENT_SPAN_M:
        return (f"segments {names[i]} and {names[j]} are {gaps[i, j]:.3g} m apart, more than a human body spans "
                f"({MAX_SEGMENT_SPAN_M:g} m)")
    return None


class _SkippedItems:
    """The items of one pose or point message skipped so far, and why (the counts of
    :class:`MvnMessage`): non-finite values, and positions beyond :data:`MAX_POSITION_M`."""

    def __init__(self, unit_m: float) -> None:
        self.unit_m = unit_m
        self.ignored = 0                   # all skipped items
        self.far = 0                       # of which too far from the origin
        self.why: str | None = None        # the first of those, said

    def position(self, what: str, values, also_finite=()) -> np.ndarray | None:
        """``values`` (3,) in wire units as metres, or None (counted) if it or ``also_finite``
        holds a non-finite value or it is farther than :data:`MAX_POSITION_M`."""
        if not (np.all(np.isfinite(values)) and np.all(np.isfinite(also_finite))):
            self.ignored += 1
            return None
        position = np.array(values, dtype=float) * self.unit_m
        reason = _too_far(what, position)
        if reason:                         # finite but absurd: garbage too
            self.ignored, self.far, self.why = self.ignored + 1, self.far + 1, self.why or reason
            return None
        return position

    def counts(self) -> tuple[int, int, str | None]:
        """(ignored_items, implausible_items, implausible) of :class:`MvnMessage`."""
        return self.ignored, self.far, self.why


class MvnCodec:
    """Encodes and decodes MVN datagrams with explicit units.

    Args:
        position_unit_m: metres per position unit on the wire (spec: cm -> 0.01).
        character_id: character ID written by the encoder.
        max_datagram_bytes: largest datagram the encoder writes (a sample that does not fit
            is split over several datagrams at item boundaries, spec 2.4.1.3).
    """

    def __init__(self, position_unit_m: float = 0.01, character_id: int = 0, max_datagram_bytes: int = 1472) -> None:
        if position_unit_m <= 0:
            raise ValueError("position_unit_m must be positive")
        if max_datagram_bytes < HEADER.size + 44:
            raise ValueError(f"max_datagram_bytes must be at least {HEADER.size + 44}")
        self.unit = float(position_unit_m)
        self.character_id = int(character_id)
        self.max_datagram_bytes = int(max_datagram_bytes)

    # ------------------------------------------------------------- encoding
    def _datagrams(self, message_type: str, sample_counter: int, time_code_ms: int, items: list[bytes],
                   body_segments: int = 23) -> list[bytes]:
        """Header + items, split into datagrams of at most ``max_datagram_bytes``."""
        room = self.max_datagram_bytes - HEADER.size
        groups: list[list[bytes]] = [[]]
        for item in items:
            if len(item) > room:
                raise ValueError(f"an item of {len(item)} bytes does not fit in one datagram")
            if sum(map(len, groups[-1])) + len(item) > room:
                groups.append([])
            groups[-1].append(item)
        if len(groups) > 128:
            raise ValueError("a sample needs more than 128 datagrams")
        out = []
        for k, group in enumerate(groups):
            payload = b"".join(group)
            counter = k | (LAST_DATAGRAM if k == len(groups) - 1 else 0)
            header = HEADER.pack(MAGIC + message_type.encode("ascii"), sample_counter & 0xFFFFFFFF, counter,
                                 len(group), int(time_code_ms) & 0xFFFFFFFF, self.character_id, body_segments,
                                 0, 0, len(payload))
            out.append(header + payload)
        return out

    def encode_pose(self, sample_counter: int, time_code_ms: int, pose: dict) -> list[bytes]:
        """Type 02 from a pose {segment: (position (3,) [m], quaternion (4,) N-pose frames)}.

        Raises ValueError for a value the protocol's 32-bit floats cannot hold (a position of
        1e300 m), naming the segment."""
        items = []
        for name in SEGMENTS:                         # spec 2.5.1: body segments in ID order
            if name not in pose:
                continue
            position, q = pose[name]
            q = np.asarray(q, dtype=float)
            if name in _ARM_FIX:                      # N-pose frame -> MVN's T-pose frame
                q = quat.mul(q, _ARM_FIX[name])
            p = np.asarray(position, dtype=float) / self.unit
            items.append(_pack(_QUAT_ITEM, f"segment {name}", ID_BY_SEGMENT[name], *p, *q))
        return self._datagrams(POSE_QUATERNION, sample_counter, time_code_ms, items)

    def encode_pose_euler(self, sample_counter: int, time_code_ms: int,
                          items: dict[int, tuple[np.ndarray, np.ndarray]]) -> list[bytes]:
        """Type 01 from raw {segment ID: (position (3,) [m] Y up, Euler (3,) [deg])}."""
        packed = [_pack(_EULER_ITEM, f"segment ID {sid}", sid, *(np.asarray(p, float) / self.unit), *e)
                  for sid, (p, e) in sorted(items.items())]
        return self._datagrams(POSE_EULER, sample_counter, time_code_ms, packed)

    def encode_points(self, sample_counter: int, time_code_ms: int, points: dict[int, np.ndarray]) -> list[bytes]:
        """Type 03 from {point ID: position (3,) [m] Y up}."""
        packed = [_pack(_POINT_ITEM, f"point {pid}", pid, *(np.asarray(p, float) / self.unit))
                  for pid, p in sorted(points.items())]
        return self._datagrams(POINTS, sample_counter, time_code_ms, packed)

    def encode_joint_angles(self, sample_counter: int, time_code_ms: int, angles_deg: np.ndarray) -> list[bytes]:
        """Type 20 from the 22 MVN joints' angles (22, 3) [deg] (one row of an Xsens N.csv).

        Point IDs are 256 * segment ID + local point ID; the local point IDs of the joint
        connection points are documented only in the MVN user manual, which this code does
        not have, so local point 0 is written and a receiver identifies a joint by its
        (parent, child) segment IDs.
        """
        angles = np.asarray(angles_deg, dtype=float).reshape(len(JOINT_NAMES), 3)
        packed = [_pack(_JOINT_ITEM, JOINT_NAMES[k], 256 * parent, 256 * (k + 2), *angles[k])
                  for k, parent in enumerate(JOINT_PARENT_ID)]
        return self._datagrams(JOINT_ANGLES, sample_counter, time_code_ms, packed)

    def encode_center_of_mass(self, sample_counter: int, time_code_ms: int, com: np.ndarray) -> list[bytes]:
        """Type 24 from the CoM (3,) [m]."""
        return self._datagrams(CENTER_OF_MASS, sample_counter, time_code_ms,
                               [_pack(_COM_ITEM, "centre of mass", *(np.asarray(com, float) / self.unit))])

    def encode_meta(self, sample_counter: int, time_code_ms: int, tags: dict[str, str]) -> list[bytes]:
        """Type 12 from {tag: value} (name, xmid, color...), one string item."""
        text = "".join(f"{k}:{v}\n" for k, v in tags.items())
        return self._datagrams(CHARACTER_META, sample_counter, time_code_ms, [_pack_string(text)])

    def encode_scale(self, sample_counter: int, time_code_ms: int, scale: CharacterScale) -> list[bytes]:
        """Type 13 (one datagram holding the segments and the points)."""
        parts = [struct.pack(">I", len(scale.segments))]
        for name, origin in scale.segments:
            origin = np.asarray(origin, float) / self.unit
            parts += [_pack_string(name), _pack(_COM_ITEM, f"scale segment {name}", *origin)]
        parts.append(struct.pack(">I", len(scale.points)))
        for segment_id, point_id, name, flags, position in scale.points:
            parts += [struct.pack(">HH", segment_id, point_id), _pack_string(name),
                      _pack(_SCALE_POINT, f"scale point {name}", flags, *(np.asarray(position, float) / self.unit))]
        return self._datagrams(CHARACTER_SCALE, sample_counter, time_code_ms, [b"".join(parts)])

    def encode_time_code(self, sample_counter: int, time_code_ms: int) -> list[bytes]:
        """Type 25: the time code as "HH:MM:SS.mmm" (12 bytes)."""
        ms = int(time_code_ms)
        text = f"{ms // 3_600_000 % 100:02d}:{ms // 60_000 % 60:02d}:{ms // 1000 % 60:02d}.{ms % 1000:03d}"
        return self._datagrams(TIME_CODE, sample_counter, time_code_ms, [text.encode("ascii")])

    # ------------------------------------------------------------- decoding
    def decode(self, header: MvnHeader, payload: bytes) -> MvnMessage:
        """Decode a (reassembled) payload; raises :class:`MvnFormatError` on bad content."""
        t, n = header.message_type, header.item_count
        if t == POSE_QUATERNION:
            pose, skipped, lost = {}, _SkippedItems(self.unit), []
            for k in range(n):
                sid, x, y, z, qw, qx, qy, qz = _QUAT_ITEM.unpack_from(payload, 32 * k)
                name = SEGMENT_BY_ID.get(sid)
                q = np.array([qw, qx, qy, qz])
                norm = float(np.linalg.norm(q))
                if name is None or not (0.5 < norm < 2.0):
                    skipped.ignored += 1               # props, fingers, or garbage values
                    if name is not None:
                        lost.append(name)
                    continue
                far = skipped.far
                position = skipped.position(f"segment {name}", (x, y, z))
                if position is None:
                    if skipped.far == far:             # non-finite (a far one drops the pose whole)
                        lost.append(name)
                    continue
                q = q / norm
                if name in _ARM_FIX:                   # MVN T-pose arm frame -> N-pose frame
                    q = quat.mul(q, quat.conj(_ARM_FIX[name]))
                pose[name] = (position, q)
            return MvnMessage(header, pose, *skipped.counts(), lost_segments=tuple(lost))
        if t == POSE_EULER:
            items, skipped = {}, _SkippedItems(self.unit)
            for k in range(n):
                sid, *v = _EULER_ITEM.unpack_from(payload, 28 * k)
                position = skipped.position(f"segment ID {sid}", v[:3], also_finite=v[3:])
                if position is not None:
                    items[sid] = (position, np.array(v[3:]))
            return MvnMessage(header, items, *skipped.counts())
        if t == POINTS:
            points, skipped = {}, _SkippedItems(self.unit)
            for k in range(n):
                pid, *v = _POINT_ITEM.unpack_from(payload, 16 * k)
                position = skipped.position(f"point {pid}", v)
                if position is not None:
                    points[pid] = position
            return MvnMessage(header, points, *skipped.counts())
        if t == JOINT_ANGLES:
            return MvnMessage(header, [JointAngle(a, b, (x, y, z))
                                       for a, b, x, y, z in (_JOINT_ITEM.unpack_from(payload, 20 * k)
                                                             for k in range(n))])
        if t == CENTER_OF_MASS:
            if n < 1:
                raise MvnFormatError("bad_size", "centre-of-mass message without an item")
            com = np.array(_COM_ITEM.unpack_from(payload, 0)) * self.unit
            if not np.all(np.isfinite(com)):
                raise MvnFormatError("bad_content", "non-finite centre of mass")
            reason = _too_far("the centre of mass", com)
            if reason:
                raise MvnFormatError("implausible_com", reason)
            return MvnMessage(header, com)
        if t == CHARACTER_META:
            text = bytes(payload)
            if len(text) >= 4 and struct.unpack_from(">i", text)[0] == len(text) - 4:
                text = text[4:]                        # length-prefixed string (spec 2.5.12)
            tags = {}
            for line in text.decode("utf-8", "replace").splitlines():
                if ":" in line:                        # unknown tags kept, malformed lines skipped
                    key, value = line.split(":", 1)
                    tags[key.strip()] = value.strip()
            return MvnMessage(header, tags)
        if t == CHARACTER_SCALE:
            return MvnMessage(header, self._decode_scale(bytes(payload)))
        if t == TIME_CODE:
            raw = bytes(payload)
            if len(raw) == 16 and struct.unpack_from(">i", raw)[0] == 12:
                raw = raw[4:]
            return MvnMessage(header, raw[:12].decode("ascii", "replace"))
        return MvnMessage(header, bytes(payload))

    def _decode_scale(self, payload: bytes) -> CharacterScale:
        scale, offset = CharacterScale(), 0

        def take(fmt: str):
            nonlocal offset
            size = struct.calcsize(fmt)
            if offset + size > len(payload):
                raise MvnFormatError("truncated", "scale message runs past the end of the payload")
            values = struct.unpack_from(fmt, payload, offset)
            offset += size
            return values

        (count,) = take(">I")
        for _ in range(count):
            name, offset = _unpack_string(payload, offset)
            scale.segments.append((name, np.array(take(">3f")) * self.unit))
        (count,) = take(">I")
        for _ in range(count):
            segment_id, point_id = take(">HH")
            name, offset = _unpack_string(payload, offset)
            flags, *position = take(">I3f")
            scale.points.append((segment_id, point_id, name, flags, np.array(position) * self.unit))
        return scale


class Reassembler:
    """Collects the datagrams of one sample (same origin, character, type and sample counter).

    ``add(header, payload, origin)`` returns ``(header, payload)`` of the whole sample once
    its last datagram and every index before it have arrived, else None. ``origin`` (the
    sender's address) keeps two senders' samples apart: two MVN instances both count their
    samples from 0, and parts of different streams must never be joined. At most
    ``max_pending`` samples wait; older ones are discarded and counted in ``incomplete``
    (a lost datagram must not hold memory forever).
    """

    def __init__(self, max_pending: int = 8) -> None:
        self.max_pending = max_pending
        self._pending: dict[tuple[object, int, str, int], dict] = {}
        self.incomplete = 0

    def add(self, header: MvnHeader, payload: bytes, origin: object = None) -> tuple[MvnHeader, bytes] | None:
        if header.datagram_index == 0 and header.last:
            return header, payload                    # the usual case: one datagram per sample
        key = (origin, header.character_id, header.message_type, header.sample_counter)
        entry = self._pending.setdefault(key, {"parts": {}, "last": None})
        entry["parts"][header.datagram_index] = (header, payload)
        if header.last:
            entry["last"] = header.datagram_index
        last = entry["last"]
        if last is not None and all(i in entry["parts"] for i in range(last + 1)):
            del self._pending[key]
            parts = [entry["parts"][i] for i in range(last + 1)]
            first = parts[0][0]
            items = sum(h.item_count for h, _ in parts)
            data = b"".join(p for _, p in parts)
            return MvnHeader(first.message_type, first.sample_counter, 0, True, items, first.time_code_ms,
                             first.character_id, first.body_segments, first.props, first.finger_segments,
                             len(data)), data
        while len(self._pending) > self.max_pending:
            self._pending.pop(next(iter(self._pending)))
            self.incomplete += 1
        return None
