"""Reading recordings, whether closed properly or cut short by a crash.

::

    rec = open_recording("session.mcap")
    rec.complete, rec.message_count            # False / n after a crash
    rec.channels["/references"].rate_hz
    for log_ns, refs in rec.decoded("references"): ...
    traj = rec.reference_trajectory("references", ep.start_ns, ep.stop_ns)
    states = rec.robot_states("robot_state", ep.start_ns, ep.stop_ns)   # incl. joint commands
    rec.episodes()

Times are integer nanoseconds of the recording clock (MCAP ``log_time``) throughout;
trajectories convert to seconds.
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from retarget.human import HumanMotion
from retarget.references import FLAT_SIZE, ReferenceTrajectory, RobotReferences

from .channels import DECODERS_BY_SCHEMA, EPISODES, resolve_topic
from .mcap_index import ChannelCounts, FileIndex, RecordingFormatError, build_index, iter_raw_messages
from .messages import EpisodeMarker, RobotStateSample

__all__ = ["ChannelInfo", "Episode", "RecordedMessage", "Recording", "RecordingFormatError", "RobotStateSeries",
           "open_recording"]


@dataclass
class ChannelInfo:
    """One channel of a recording.

    Attributes:
        id: MCAP channel id.
        topic: e.g. "/references".
        schema_name: e.g. "teleop.RobotReferences" ("" without a schema).
        message_encoding: e.g. "json".
        metadata: channel metadata (e.g. "rate_hz" when declared).
        count: messages recovered.
        first_ns, last_ns: log time of the first and last message [ns] (0 when empty).
        channel_ids: every MCAP channel id on this topic. MCAP allows several channels per
            topic (files of other tools, merged files); their messages are counted and read
            as this one topic, whose id, schema, encoding and metadata are the first one's.
    """

    id: int
    topic: str
    schema_name: str
    message_encoding: str
    metadata: dict[str, str]
    count: int
    first_ns: int
    last_ns: int
    channel_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        self.channel_ids = tuple(self.channel_ids) or (self.id,)

    @property
    def duration_s(self) -> float:
        return (self.last_ns - self.first_ns) * 1e-9 if self.count else 0.0

    @property
    def rate_hz(self) -> float:
        """Mean message rate [Hz] (0 with fewer than two messages)."""
        return (self.count - 1) / self.duration_s if self.count > 1 and self.duration_s > 0 else 0.0


@dataclass
class Episode:
    """One episode as found in a recording's ``/episodes`` markers.

    Attributes:
        number: episode number (as written by the recorder: 0, 1, 2... in start order).
        task: task label, "" if unlabelled.
        start_ns, stop_ns: log times of the start and stop markers [ns].
        stopped: False when the recording ended (e.g. crashed) before the stop marker;
            ``stop_ns`` is then the last log time in the recording.
    """

    number: int
    task: str
    start_ns: int
    stop_ns: int
    stopped: bool = True

    @property
    def duration_s(self) -> float:
        return (self.stop_ns - self.start_ns) * 1e-9


@dataclass
class RecordedMessage:
    """A raw message: topic, times [ns], per-channel sequence number, encoded bytes and the
    MCAP channel id it was written on (a topic may have several, see :class:`ChannelInfo`)."""

    topic: str
    log_time_ns: int
    publish_time_ns: int
    sequence: int
    data: bytes
    channel_id: int = 0


@dataclass
class RobotStateSeries:
    """The robot states of a window, one row per sample (see :meth:`Recording.robot_states`).

    Attributes:
        times: (M,) log times minus the origin [s], in order.
        joint_positions: (M, N) measured joint angles [rad].
        joint_velocities: (M, N) measured joint velocities [rad/s].
        com: (M, 3) centre of mass, stance frame [m].
        cop: (M, 2) measured centre of pressure (x, y), stance frame [m].
        joint_commands: (M, N) joint angles the whole-body controller commanded [rad], a NaN
            row for a sample without them; None when no sample has them (recordings made
            before they were recorded).
        watchdog: (M,) watchdog state per sample ("ACTIVE", "STALE"...), "" for a sample
            without one; None when no sample has one.
        compensation: (M,) compensation state per sample ("passthrough", "predicting"...),
            "" for a sample without one; None when no sample has one.
        joint_names: names of the N joints, or None when not recorded.
    """

    times: np.ndarray
    joint_positions: np.ndarray
    joint_velocities: np.ndarray
    com: np.ndarray
    cop: np.ndarray
    joint_commands: np.ndarray | None = None
    watchdog: np.ndarray | None = None
    compensation: np.ndarray | None = None
    joint_names: tuple[str, ...] | None = None

    def __len__(self) -> int:
        return len(self.times)


class _GrowingRows:
    """Rows of ``width`` floats appended one at a time into an array that doubles when
    full (amortised O(1), at most twice the final size held)."""

    def __init__(self, width: int) -> None:
        self._data: np.ndarray = np.empty((64, width))
        self._n = 0

    def append(self, row) -> None:
        if self._n == len(self._data):
            self._data = np.concatenate([self._data, np.empty_like(self._data)])
        self._data[self._n] = row
        self._n += 1

    def array(self) -> np.ndarray:
        """(n, width) the rows appended so far (a view: index it to own a copy)."""
        return self._data[:self._n]


class Recording:
    """An opened recording (see :func:`open_recording`).

    Attributes:
        path: the file.
        complete: True if the file was closed properly (has its summary and footer).
        problem: for a file cut short, what ended the readable part (None otherwise).
        discarded_bytes: bytes after the last intact record (the lost tail) [bytes].
        message_count: messages readable (= recovered, for a crashed file).
        channels: :class:`ChannelInfo` by topic.
        metadata: file metadata records as (name, key/value dict), in file order.
        on_message: called with the log time [ns] of every message read (by
            :meth:`messages` and what reads through it), or None: how a long read (an
            export of a 166 MB recording took 12 s) shows its progress.
    """

    def __init__(self, index: FileIndex) -> None:
        self._index = index
        self.on_message: Callable[[int], None] | None = None
        self.path: Path = index.path
        self.complete: bool = index.complete
        self.problem: str | None = index.problem
        self.discarded_bytes: int = index.discarded_bytes
        self.message_count: int = index.message_count
        self.metadata: list[tuple[str, dict[str, str]]] = [(m.name, dict(m.metadata)) for m in index.metadata]
        self.channels: dict[str, ChannelInfo] = {}
        for channel_id, channel in sorted(index.channels.items()):
            schema = index.schemas.get(channel.schema_id)
            counts = index.counts.get(channel_id) or ChannelCounts()
            info = self.channels.get(channel.topic)
            if info is not None:  # another channel on the same topic: one topic, all its messages
                merged = ChannelCounts(info.count, info.first_ns, info.last_ns)
                merged.add(counts.count, counts.first_ns, counts.last_ns)
                info.count, info.first_ns, info.last_ns = merged.count, merged.first_ns, merged.last_ns
                info.channel_ids += (channel_id,)
                continue
            self.channels[channel.topic] = ChannelInfo(
                channel_id, channel.topic, schema.name if schema else "", channel.message_encoding,
                dict(channel.metadata), counts.count, counts.first_ns, counts.last_ns)

    @property
    def index(self) -> FileIndex:
        """The low-level index (schemas, channel records, blocks)."""
        return self._index

    @property
    def start_ns(self) -> int:
        """Log time of the earliest message [ns] (0 for an empty recording)."""
        firsts = [c.first_ns for c in self.channels.values() if c.count]
        return min(firsts) if firsts else 0

    @property
    def end_ns(self) -> int:
        """Log time of the latest message [ns] (0 for an empty recording)."""
        lasts = [c.last_ns for c in self.channels.values() if c.count]
        return max(lasts) if lasts else 0

    @property
    def duration_s(self) -> float:
        return (self.end_ns - self.start_ns) * 1e-9

    def channel(self, name: str) -> ChannelInfo:
        """A channel by topic or short name; KeyError listing the channels if absent."""
        topic = resolve_topic(name)
        if topic not in self.channels:
            raise KeyError(f"{self.path}: no channel {topic!r} (channels: {sorted(self.channels)})")
        return self.channels[topic]

    # ---------------------------------------------------------------- messages
    def messages(self, channels: str | Iterable[str] | None = None, start_ns: int | None = None,
                 end_ns: int | None = None) -> Iterator[RecordedMessage]:
        """Raw messages with ``start_ns <= log_time < end_ns``, in file (write) order.

        Args:
            channels: one channel, several, or None for all.
        """
        if isinstance(channels, str):
            channels = [channels]
        ids = None if channels is None else [i for c in channels for i in self.channel(c).channel_ids]
        topics = {i: c.topic for c in self.channels.values() for i in c.channel_ids}
        for message in iter_raw_messages(self._index, ids, start_ns, end_ns):
            if self.on_message is not None:
                self.on_message(message.log_time)
            yield RecordedMessage(topics.get(message.channel_id, f"#{message.channel_id}"), message.log_time,
                                  message.publish_time, message.sequence, message.data, message.channel_id)

    def decoded(self, channel: str, start_ns: int | None = None,
                end_ns: int | None = None) -> Iterator[tuple[int, Any]]:
        """(log_time_ns, message) pairs of one channel, decoded by its schema.

        Channels of this package decode to their message classes (RobotReferences,
        RobotStateSample, CameraFrame, one-frame HumanMotion, dict, EpisodeMarker); other
        JSON channels to plain JSON values; anything else stays bytes.
        """
        info = self.channel(channel)
        decoders = {}  # by channel id: the channels of one topic may differ in schema
        for channel_id in info.channel_ids:
            record = self._index.channels[channel_id]
            schema = self._index.schemas.get(record.schema_id)
            decode = DECODERS_BY_SCHEMA.get(schema.name if schema else "")
            if decode is None:
                decode = json.loads if record.message_encoding == "json" else bytes
            decoders[channel_id] = decode
        for message in self.messages(info.topic, start_ns, end_ns):
            try:
                yield message.log_time_ns, decoders[message.channel_id](message.data)
            except Exception as exc:
                raise RecordingFormatError(f"{self.path}: undecodable message on {info.topic} "
                                           f"at log time {message.log_time_ns} ns ({exc})") from None

    def reference_trajectory(self, channel: str = "references", start_ns: int | None = None,
                             end_ns: int | None = None, *, time_origin_ns: int = 0,
                             use_message_time: bool = False, newest_only: bool = False,
                             label: str | None = None, source: str | None = None) -> ReferenceTrajectory:
        """The references of a channel between two log times as a :class:`ReferenceTrajectory`.

        Args:
            channel: a channel of RobotReferences ("references", "delivered", "compensated").
            start_ns, end_ns: log-time window [ns], ``start <= t < end``; None = unbounded.
            time_origin_ns: subtracted from the log times before converting to seconds, so
                0 gives absolute clock seconds and an episode start gives times from 0.
            use_message_time: use each message's own ``t`` (producer clock) [s], minus the
                origin in seconds, instead of its log time (e.g. send times of delivered
                commands).
            newest_only: drop the samples older (by their own ``t``) than one logged before
                them (see :meth:`decoded_references`): the delivered commands as the robot
                executed them, not the reordered packets' saw-tooth.
            label, source: stored in the trajectory (source defaults to the file path).

        Samples are sorted by time; of samples with equal times the last one written is
        kept. The trajectory is empty when the window holds no messages.

        The trajectory's ``valid`` is the (20,) mask of the scalars measured in *every* kept
        sample (a sample without a mask counts as all measured), or None when no kept
        sample carried one: a trajectory has one mask, and a scalar missing from some
        samples is not a measured signal over the episode.

        The values are as recorded (:meth:`ReferenceTrajectory.raw`): a NaN written as null
        stays NaN, for the caller to say where (``dataset export`` skips such an episode,
        naming its first bad frame; a plot shows the rest). Check them before learning from
        or tracking them (the constructor's checks: ``ReferenceTrajectory(t.times, t.values,
        ...)``).
        """
        times: list[float] = []
        values: list[np.ndarray] = []
        masks: list[np.ndarray | None] = []
        for log_ns, refs in self.decoded_references(channel, start_ns, end_ns, newest_only=newest_only):
            t = refs.t - time_origin_ns * 1e-9 if use_message_time else (log_ns - time_origin_ns) * 1e-9
            times.append(t)
            values.append(refs.to_flat())
            masks.append(refs.valid)
        t_arr = np.asarray(times, dtype=float)
        v_arr: np.ndarray = np.asarray(values, dtype=float).reshape(len(values), FLAT_SIZE)
        order = np.argsort(t_arr, kind="stable")
        if len(t_arr) > 1:
            keep = np.append(np.diff(t_arr[order]) > 0, True)  # last of each run of equal times
            order = order[keep]
        t_arr, v_arr = t_arr[order], v_arr[order]
        kept_masks = [masks[i] for i in order if masks[i] is not None]
        valid = np.logical_and.reduce(kept_masks, axis=0) if kept_masks else None
        return ReferenceTrajectory.raw(t_arr, v_arr, label=label, source=source or str(self.path), valid=valid)

    def decoded_references(self, channel: str = "references", start_ns: int | None = None,
                           end_ns: int | None = None, *, newest_only: bool = False,
                           newer_than: float = -math.inf) -> Iterator[tuple[int, RobotReferences]]:
        """(log time [ns], RobotReferences) of a references channel in log order (see
        :meth:`decoded`); TypeError if the channel holds something else.

        With ``newest_only``, a sample whose own ``t`` [s] is not newer than ``newer_than``
        and every sample logged before it in the window is dropped. Over a jittery link
        packets arrive out of order, and the robot station executes the newest command by
        time stamp (:meth:`PrescientCompensator.observe`): in log order, the delivered
        channel otherwise jumps back to each late packet's older pose and forward again.
        A caller reading window by window passes the newest ``t`` it has seen as
        ``newer_than``.
        """
        newest = newer_than
        for log_ns, refs in self.decoded(channel, start_ns, end_ns):
            if not hasattr(refs, "to_flat"):
                raise TypeError(f"{self.path}: channel {channel!r} does not hold robot references")
            if newest_only:
                if not refs.t > newest:
                    continue
                newest = refs.t
            yield log_ns, refs

    def robot_states(self, channel: str = "robot_state", start_ns: int | None = None, end_ns: int | None = None,
                     *, time_origin_ns: int = 0) -> RobotStateSeries:
        """The robot states of a window as arrays, in log-time order (see :class:`RobotStateSeries`).

        Args:
            channel: a channel of RobotState messages (the robot station's "robot_state").
            start_ns, end_ns: log-time window [ns], ``start <= t < end``; None = unbounded.
            time_origin_ns: subtracted from the log times before converting to seconds (an
                episode start gives times from 0, as :meth:`reference_trajectory`).

        Raises ValueError if the number of joints changes within the window, TypeError if the
        channel does not hold robot states. The series is empty when the window holds no
        messages.
        """
        # Filled sample by sample into arrays that double when full: a list of decoded
        # samples cost ~7x the final arrays (552 MB for 17 min at 100 Hz, 32 joints).
        columns: dict[str, _GrowingRows] = {}
        times = _GrowingRows(1)
        states: dict[str, list] = {"watchdog": [], "compensation": []}   # codes into `codes`
        codes: dict[str | None, int] = {None: 0}
        seen = {"commands": False, "watchdog": False, "compensation": False}
        names = None
        joints = None
        for log_ns, state in self.decoded(channel, start_ns, end_ns):
            if not isinstance(state, RobotStateSample):
                raise TypeError(f"{self.path}: channel {channel!r} does not hold robot states")
            if joints is None:
                joints = len(state.joint_positions)
                columns = {"joint_positions": _GrowingRows(joints), "joint_velocities": _GrowingRows(joints),
                           "com": _GrowingRows(3), "cop": _GrowingRows(2), "joint_commands": _GrowingRows(joints)}
            elif len(state.joint_positions) != joints:
                raise ValueError(f"{self.path}: the number of joints on {resolve_topic(channel)} changes within "
                                 f"the window ({joints} then {len(state.joint_positions)})")
            times.append((log_ns - time_origin_ns) * 1e-9)
            for name in ("joint_positions", "joint_velocities", "com", "cop"):
                columns[name].append(getattr(state, name))
            # A sample without commands: a NaN row (nothing was commanded that we know).
            columns["joint_commands"].append(np.nan if state.joint_commands is None else state.joint_commands)
            seen["commands"] |= state.joint_commands is not None
            for name in states:
                value = getattr(state, name)
                seen[name] |= value is not None
                states[name].append(codes.setdefault(value, len(codes)))
            if names is None and state.joint_names is not None:
                names = state.joint_names
        t = times.array()[:, 0].copy()
        order = np.argsort(t, kind="stable")   # log-time order (messages are nearly so already)
        labels = np.array(["" if v is None else v for v in codes], dtype=str)   # codes in insertion order

        def column(name: str, width: int) -> np.ndarray:
            return columns[name].array()[order] if columns else np.zeros((0, width))

        def state_labels(name: str) -> np.ndarray | None:
            return labels[np.asarray(states[name], dtype=int)[order]] if seen[name] else None

        return RobotStateSeries(t[order], column("joint_positions", 0), column("joint_velocities", 0),
                                column("com", 3), column("cop", 2),
                                column("joint_commands", 0) if seen["commands"] else None,
                                state_labels("watchdog"), state_labels("compensation"), names)

    def operator_motion(self, channel: str = "operator", start_ns: int | None = None,
                        end_ns: int | None = None) -> HumanMotion:
        """The operator input of a window as one :class:`HumanMotion` (log-time order).

        Frames must all have the segments of the first one. Raises ValueError if empty.
        """
        frames = [frame for _, frame in sorted(self.decoded(channel, start_ns, end_ns), key=lambda p: p[0])]
        if not frames:
            raise ValueError(f"{self.path}: no operator input on {resolve_topic(channel)} in the window")
        names = frames[0].segment_names
        for frame in frames:
            if frame.segment_names != names:
                raise ValueError(f"{self.path}: operator segments change within the window "
                                 f"({names} then {frame.segment_names})")
        com = None if frames[0].com is None else np.concatenate([f.com for f in frames])
        times = np.concatenate([f.times for f in frames])
        rate = (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 and times[-1] > times[0] else 0.0
        return HumanMotion(times, names, np.concatenate([f.positions for f in frames]),
                           np.concatenate([f.orientations for f in frames]), com,
                           source=str(self.path), rate_hz=float(rate))

    # ---------------------------------------------------------------- episodes
    def episodes(self) -> list[Episode]:
        """Episodes from the ``/episodes`` markers, by number.

        An episode whose stop marker is missing (crash) ends at the last log time and
        has ``stopped=False``. A number started twice (files of other tools) is two
        episodes: the later one is renumbered after the highest number in the file, and
        a warning says so once per file (one of them was lost without a word before).
        """
        if EPISODES not in self.channels:
            return []
        # Only our own markers: another tool's /episodes topic (another schema) decodes to
        # something else and says nothing about our episodes.
        markers: list[tuple[int, EpisodeMarker]] = sorted(
            ((t, m) for t, m in self.decoded(EPISODES) if isinstance(m, EpisodeMarker)), key=lambda p: p[0])
        episodes: dict[int, Episode] = {}      # by number, as read
        current: dict[int, Episode] = {}       # by the markers' number: the episode its stop ends
        free = max((marker.episode for _, marker in markers), default=-1) + 1
        renumbered: list[tuple[int, int]] = []
        for log_ns, marker in markers:
            if marker.event == "start":
                number = marker.episode
                if number in episodes:         # started before: keep both
                    number, free = free, free + 1
                    renumbered.append((marker.episode, number))
                episodes[number] = current[marker.episode] = Episode(number, marker.task, log_ns, self.end_ns,
                                                                     stopped=False)
            else:
                episode = current.get(marker.episode)
                if episode is None:  # stop without start: the episode began before the file
                    episode = Episode(marker.episode, marker.task, self.start_ns, log_ns)
                    episodes[marker.episode] = current[marker.episode] = episode
                episode.stop_ns, episode.stopped = log_ns, True
                episode.task = episode.task or marker.task
        if renumbered:
            _warn_renumbered(self.path, renumbered)
        return [episodes[n] for n in sorted(episodes)]

    def __repr__(self) -> str:
        state = "complete" if self.complete else f"recovered ({self.problem or 'no footer'})"
        return (f"Recording({str(self.path)!r}, {state}, {self.message_count} messages, "
                f"{len(self.channels)} channels, {self.duration_s:.2f} s)")


#: Recordings whose duplicate episode numbers were warned of (once per file and process:
#: a command reads the episodes of a file more than once).
_WARNED_RENUMBERED: set[str] = set()


def _warn_renumbered(path: Path, renumbered: list[tuple[int, int]]) -> None:
    """Say on stderr, once per file, which episodes were renumbered (see
    :meth:`Recording.episodes`): their numbers are not the file's."""
    key = str(Path(path).resolve())
    if key in _WARNED_RENUMBERED:
        return
    _WARNED_RENUMBERED.add(key)
    moves = ", ".join(f"episode {old} started again is read as episode {new}" for old, new in renumbered)
    print(f"warning: {path}: episode numbers used twice (written by another tool?): {moves}; a copy written "
          "by `teleop dataset label` keeps these numbers", file=sys.stderr)


def open_recording(path: str | os.PathLike) -> Recording:
    """Open a recording, complete or crashed (see :mod:`teleop.record.mcap_index`).

    Raises:
        FileNotFoundError: no such file.
        NotRegularFileError: a named pipe, a device or a socket (an OSError naming the file).
        RecordingFormatError: not an MCAP file, or cut short before its header ended; the
            message names the file.
    """
    return Recording(build_index(path))
