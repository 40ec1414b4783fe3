"""The session recorder: one MCAP file, many channels, one clock, crash tolerant.

Usage::

    with Recorder("session.mcap", clock_ns=sim_clock_ns) as rec:
        rec.start_episode("squat")
        rec.log_references(refs)             # each channel at its own rate
        rec.log_robot_state(state)
        rec.log_camera_frame(CameraFrame(t, jpeg_bytes), camera="head")
        rec.stop_episode()

Time
    Every message gets a ``log_time`` in nanoseconds from one clock: ``clock_ns`` (a callable
    returning integer ns, default :func:`time.time_ns`) or ``clock`` (a :mod:`teleop.clock`
    clock, ``now()`` in seconds: trials pass their virtual clock). A caller that knows better
    passes ``log_time_ns`` explicitly. ``publish_time`` defaults to the log time; for
    delayed commands pass the send time so the delay is ``log_time - publish_time``.
    Both must be integers in MCAP's range 0 <= t < 2**64 [ns]: ``log()`` checks them and
    raises ValueError, so a bad time never reaches the writer thread (where it would end
    the recording).

Not blocking the control loop
    ``log()`` only takes a checked private copy of the message (:mod:`teleop.record.snapshots`:
    bad messages fail at the call site, and the caller may reuse its arrays at once) and
    queues it, a few microseconds. A background writer thread wakes every
    ``batch_interval_s`` (0.1 s) and encodes (JSON), chunks, compresses (zstd, which runs
    without the GIL) and writes the batch, yielding the GIL after every message so a control
    loop never waits long for it. Batching matters: per-message wake-ups cost more CPU than
    the encoding itself on a busy machine (``teleop.benchmarks.record_bench``). The queue is
    bounded in messages and bytes; when full the message is *dropped and counted*, the
    caller never waits. Episode markers are never dropped. ``threaded=False`` does it all
    synchronously in ``log()`` instead (offline runs on a virtual clock, where completeness
    matters more than latency).

    The writer thread shares the GIL with the caller: when the machine is oversubscribed and
    the OS preempts the writer while it holds the GIL, a control loop in the same process
    wakes late. The benchmark reports this as tick lateness (recording vs. baseline); a
    writer *process* would remove it at the price of serialising every message.

Crash tolerance
    The writer closes the current MCAP chunk and flushes it to the operating system at
    least every ``flush_interval_s`` of wall-clock time (monotonic, whatever ``clock_ns``
    is), so a SIGKILL loses at most about that much (0.5 s by default): the kernel keeps the
    written pages. A process that exits without ``close()`` leaves the same kind of file.
    A file cut short has no summary or footer; :func:`teleop.record.reader.open_recording`
    reads it anyway and :func:`teleop.record.recovery.recover` writes a complete copy.
    Power loss: ``close()`` syncs the finished file to the disk (``os.fsync``), so a session
    that ended survives a power cut; one cut by the power mid-session loses what the OS had
    not yet written back (Linux: up to ~30 s). The flushes are not synced: two disk syncs a
    second would cost more than the recording (``teleop bench record``).

    With ``threaded=False`` there is no thread to watch the time: the flush is due after
    ``flush_interval_s`` but happens in the next ``log()`` (or episode marker, or
    ``close()``). Data logged before the process goes quiet stays in memory until then,
    and a crash during the quiet time loses it, however long that time was.

Memory over a long session
    Nothing is kept per message: the queue drains every batch, each chunk's message
    indexes are written and dropped as the chunk closes, and the counters are per channel.
    What grows is the MCAP writer's chunk index, one small record per chunk that the file's
    summary must list at the end (MCAP puts chunk indexes there only): about 0.6 KB of
    Python objects per chunk with 4-6 channels. A chunk closes at every flush (2 a second
    at the default 0.5 s) and also every ``chunk_size_bytes`` of uncompressed data (not
    reached at the stations' ~0.6 MB/s), so about 7,200 chunks an hour: **~4 MB an hour**,
    ~100 MB a day, linear and never released before ``close()``. Measured: a robot
    station's RSS rose 314.5 -> 315.3 MB over 10.5 min (~4 MB/h) while it recorded 1,368
    chunks; its file grew 709 MB/h (the operator's 721 MB/h: JSON at ~2 GB/h, zstd
    ~3:1 on it, JPEG frames stored as they came at 308 MB/h). A longer flush interval
    makes fewer chunks (and a crash loses more).

Sequence numbers
    Each channel's messages carry a ``sequence`` counting every ``log()`` call on it,
    dropped ones included, so drops show as gaps. It wraps at 2**32 (MCAP's field is 32 bits).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import numbers
import os
import queue
import stat
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcap.writer import CompressionType, Writer

from retarget.human import HumanMotion
from retarget.references import RobotReferences

from .file_lock import lock_for_writing
from .channels import (
    COMMANDS_COMPENSATED,
    COMMANDS_DELIVERED,
    EPISODE_SPEC,
    EPISODES,
    NETWORK_STATS,
    OPERATOR_INPUT,
    REFERENCES,
    ROBOT_STATE,
    ChannelSpec,
    known_topics,
    resolve_topic,
    spec_for_topic,
)
from .messages import CameraFrame, EpisodeMarker, RobotStateSample

_log = logging.getLogger(__name__)

#: Library string written in the MCAP header.
LIBRARY = "teleop.record"

#: Largest chunk (uncompressed) the recorder writes, and the copies trim, label and recover
#: write [bytes]: a reader that seeks to a moment decompresses one chunk.
CHUNK_SIZE_BYTES = 1 << 20

#: Name of the file-level metadata record describing the recording.
RECORDING_METADATA = "teleop.recording"
#: Name of the metadata record with the recorder's counters, written on close.
RECORDER_STATS_METADATA = "teleop.recorder_stats"

_COMPRESSION = {"zstd": CompressionType.ZSTD, "lz4": CompressionType.LZ4, "none": CompressionType.NONE}

# Work items of the writer thread.
_MESSAGE, _REGISTER, _STOP = 0, 1, 2

#: MCAP stores log and publish times as unsigned 64-bit integers [ns].
_TIME_LIMIT_NS = 1 << 64
#: MCAP stores sequence numbers as unsigned 32-bit integers.
_SEQUENCE_MASK = (1 << 32) - 1


class RecordingWriteError(OSError):
    """The writer thread failed (disk full, file removed...); raised by :meth:`Recorder.close`.
    An OSError: what the commands report as a user-facing error, not a traceback."""


class RecordingRemovedError(FileNotFoundError):
    """The file being recorded is no longer at its path (removed, its folder deleted, or
    replaced by another file): what is written goes nowhere anyone can read it."""


@dataclass
class RecorderStats:
    """Counters of a recorder.

    Attributes:
        logged: messages accepted by ``log()`` (queued or written).
        written: messages handed to the MCAP writer.
        dropped: per topic, messages dropped because the queue was full or the writer failed.
        failed: per topic, messages the writer could not encode (a bug; logged once per topic).
        queued_messages, queued_bytes: current backlog of the writer thread.
        flushes: chunk flushes to the operating system.
        writer_cpu_s: CPU time of the writer thread so far [s] (0 in synchronous mode).
    """

    logged: int = 0
    written: int = 0
    dropped: dict[str, int] = field(default_factory=dict)
    failed: dict[str, int] = field(default_factory=dict)
    queued_messages: int = 0
    queued_bytes: int = 0
    flushes: int = 0
    writer_cpu_s: float = 0.0

    @property
    def dropped_total(self) -> int:
        return sum(self.dropped.values())


class Recorder:
    """Writes one recording (see the module docstring for the design).

    Args:
        path: output .mcap file (parent directories are created).
        clock_ns: the recording clock, returning integer nanoseconds (default time.time_ns).
        clock: alternatively, an object whose ``now()`` returns seconds (teleop.clock).
        flush_interval_s: longest wall-clock time data stays in memory before it is flushed
            to the operating system [s]; bounds what a crash loses.
        chunk_size_bytes: a chunk is also closed when it grows past this size [bytes]; small
            chunks keep short the moments the writer holds the GIL while copying them.
        compression: chunk compression, "zstd", "lz4" or "none".
        threaded: write from a background thread (default) or synchronously in ``log()``.
        max_queued_messages, max_queued_bytes: backlog beyond which messages are dropped.
        metadata: extra key/value strings for the file's ``teleop.recording`` metadata record.
        batch_interval_s: how often the writer thread wakes up to process the queue [s].
    """

    def __init__(self, path: str | os.PathLike, *, clock_ns: Callable[[], int] | None = None, clock: Any = None,
                 flush_interval_s: float = 0.5, chunk_size_bytes: int = CHUNK_SIZE_BYTES, compression: str = "zstd",
                 threaded: bool = True, max_queued_messages: int = 10_000, max_queued_bytes: int = 64 << 20,
                 metadata: Mapping[str, str] | None = None, batch_interval_s: float = 0.1) -> None:
        if compression not in _COMPRESSION:
            raise ValueError(f"compression must be one of {sorted(_COMPRESSION)}, got {compression!r}")
        if flush_interval_s <= 0:
            raise ValueError("flush_interval_s must be positive")
        if clock is not None and clock_ns is not None:
            raise ValueError("pass clock_ns or clock, not both")
        if clock is not None:
            clock_ns = _nanoseconds_of(clock)
        clock_ns = clock_ns or time.time_ns
        clock_name = type(clock).__name__ if clock is not None else getattr(clock_ns, "__qualname__", "clock")
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._clock_ns = clock_ns
        self._flush_interval_s = float(flush_interval_s)
        self._threaded = threaded
        self._max_queued_messages = int(max_queued_messages)
        self._max_queued_bytes = int(max_queued_bytes)

        # Caller-side state, shared by the threads that log.
        self._lock = threading.Lock()
        self._specs: dict[str, ChannelSpec] = {}
        self._topic_of_name: dict[str, str] = {}
        self._sequence: dict[str, int] = defaultdict(int)
        self._stats = RecorderStats(dropped=defaultdict(int), failed=defaultdict(int))
        self._episode_lock = threading.Lock()
        self._open_episode: tuple[int, str] | None = None
        self._next_episode = 0
        self._closed = False
        self._error: BaseException | None = None

        # Writer-side state: touched only by the writer thread (or under _lock when synchronous).
        self._file = self._open_locked(self.path)
        # Which file this is: the path removed or replaced during the session is found at the
        # next flush (before, the session ended with exit code 0 and no recording anywhere).
        opened = os.fstat(self._file.fileno())
        self._identity = (opened.st_dev, opened.st_ino)
        self._writer = Writer(self._file, chunk_size=chunk_size_bytes, compression=_COMPRESSION[compression])
        self._channel_ids: dict[str, int] = {}
        self._schema_ids: dict[str, int] = {}
        self._next_flush = time.monotonic() + self._flush_interval_s

        self._writer.start(profile="", library=LIBRARY)
        info = {"created_unix_ns": str(time.time_ns()), "log_time_unit": "ns",
                "clock": clock_name,
                "flush_interval_s": repr(self._flush_interval_s)}
        info.update({str(k): str(v) for k, v in (metadata or {}).items()})
        self._writer.add_metadata(RECORDING_METADATA, info)
        # The header reaches the OS now, so even a crash in the first second leaves a file
        # that opens (as an empty recording).
        try:
            self._file.flush()
        except OSError as exc:
            # A full disk or /dev/full: nothing recorded, and an empty file left behind would
            # block the next run ("exists"). The error names the file (it said only "[Errno
            # 28] No space left on device").
            with contextlib.suppress(OSError):     # closing flushes the same bytes again
                self._file.close()
            if self.path.is_file():      # a regular file we made: not /dev/full itself
                with contextlib.suppress(OSError):
                    self.path.unlink()
            raise OSError(exc.errno, exc.strerror, str(self.path)) from None

        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._wake = threading.Event()
        self._batch_interval_s = min(batch_interval_s, self._flush_interval_s)
        self._thread: threading.Thread | None = None
        if threaded:
            self._thread = threading.Thread(target=self._writer_loop, name=f"recorder:{self.path.name}", daemon=True)
            self._thread.start()

    # ------------------------------------------------------------------ public API
    def declare_channel(self, channel: str, *, rate_hz: float | None = None,
                        metadata: Mapping[str, str] | None = None, spec: ChannelSpec | None = None) -> str:
        """Declare a channel before its first message, to attach metadata or a custom spec.

        Args:
            channel: topic or short name (see :mod:`teleop.record.channels`).
            rate_hz: nominal rate, stored as channel metadata ``rate_hz`` [Hz].
            metadata: more channel metadata (strings).
            spec: codec and schema for a topic that is not a standard one.

        Returns the topic. Declaring a channel twice is an error (MCAP channel metadata is
        written once).
        """
        topic = resolve_topic(channel)
        spec = spec or spec_for_topic(topic)
        if spec is None:
            raise KeyError(f"unknown channel {channel!r}: pass spec=, or use one of {known_topics()}")
        extra = dict(metadata or {})
        if rate_hz is not None:
            extra["rate_hz"] = repr(float(rate_hz))
        with self._lock:
            if topic in self._specs:
                raise ValueError(f"channel {topic} already declared or used")
            self._register_locked(topic, spec, extra)
        return topic

    def log(self, channel: str, message: Any, *, log_time_ns: int | None = None,
            publish_time_ns: int | None = None) -> bool:
        """Record one message; never blocks on I/O.

        Args:
            channel: topic or short name ("references", "robot_state", "camera/head"...).
            message: a message of the channel's type (see :mod:`teleop.record.channels`).
            log_time_ns: recording time [ns]; default: now on the recorder's clock.
            publish_time_ns: when the message was sent [ns]; default: the log time.

        Returns True if the message was queued (or written), False if it was dropped.
        Raises ValueError, naming the channel, for a time that is not an integer in
        [0, 2**64) ns. Episode markers go through :meth:`start_episode` / :meth:`stop_episode`.
        """
        topic = self._topic_of_name.get(channel) or self._resolve(channel)
        if topic == EPISODES:
            raise ValueError("episode markers are written by start_episode() / stop_episode()")
        spec = self._specs.get(topic) or self._auto_register(topic, channel)
        snapshot = spec.snapshot(message)
        log_ns = self._time_ns(topic, "log_time_ns", log_time_ns)
        publish_ns = log_ns if publish_time_ns is None else _checked_time_ns(topic, "publish_time_ns", publish_time_ns)
        return self._submit(topic, spec, snapshot, log_ns, publish_ns, droppable=True)

    def log_operator_input(self, motion: HumanMotion, index: int = 0, **times) -> bool:
        """Record frame ``index`` of the raw operator input (segment poses)."""
        return self.log(OPERATOR_INPUT, (motion, index), **times)

    def log_references(self, refs: RobotReferences, **times) -> bool:
        """Record retargeted references (operator side)."""
        return self.log(REFERENCES, refs, **times)

    def log_delivered_command(self, refs: RobotReferences, **times) -> bool:
        """Record references as delivered to the robot; pass ``publish_time_ns`` = send time."""
        return self.log(COMMANDS_DELIVERED, refs, **times)

    def log_compensated_command(self, refs: RobotReferences, **times) -> bool:
        """Record the delay-compensated command the robot tracks."""
        return self.log(COMMANDS_COMPENSATED, refs, **times)

    def log_robot_state(self, state: RobotStateSample | Any, **times) -> bool:
        """Record the measured robot state (any object or mapping with RobotStateSample's fields)."""
        return self.log(ROBOT_STATE, state, **times)

    def log_camera_frame(self, frame: CameraFrame, camera: str = "main", **times) -> bool:
        """Record one compressed camera frame on ``/camera/<camera>``."""
        return self.log("/camera/" + camera, frame, **times)

    def log_network_stats(self, stats: Mapping[str, Any] | Any, **times) -> bool:
        """Record network statistics (a mapping or a dataclass of numbers/strings)."""
        return self.log(NETWORK_STATS, stats, **times)

    def start_episode(self, task: str | None = None, *, log_time_ns: int | None = None) -> int:
        """Mark the start of an episode; stops the open one first. Returns the episode number."""
        if log_time_ns is not None:  # a bad time must not leave a half-started episode behind
            _checked_time_ns(EPISODES, "log_time_ns", log_time_ns)
        with self._episode_lock:
            if self._open_episode is not None:
                self._stop_episode_locked(log_time_ns)
            number = self._next_episode
            self._next_episode += 1
            self._open_episode = (number, task or "")
            self._log_marker(EpisodeMarker("start", number, task or ""), log_time_ns)
            return number

    def stop_episode(self, *, log_time_ns: int | None = None) -> int | None:
        """Mark the end of the open episode; returns its number (None if none was open)."""
        with self._episode_lock:
            return self._stop_episode_locked(log_time_ns)

    @staticmethod
    def _open_locked(path: Path):
        """``path`` opened for writing, emptied, under the lock that tells readers a recorder
        writes it (:mod:`teleop.record.file_lock`). The lock is taken before the file is
        emptied: ``open(path, "wb")`` emptied a live session's file before anything could
        refuse it."""
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o666)
        try:
            lock_for_writing(fd, path)
            if stat.S_ISREG(os.fstat(fd).st_mode):    # not a device (/dev/full in tests)
                os.ftruncate(fd, 0)
            return os.fdopen(fd, "wb")
        except BaseException:
            os.close(fd)
            raise

    @property
    def episode_open(self) -> bool:
        return self._open_episode is not None

    def stats(self) -> RecorderStats:
        """A snapshot of the counters."""
        with self._lock:
            return RecorderStats(**{**self._stats.__dict__, "dropped": dict(self._stats.dropped),
                                    "failed": dict(self._stats.failed)})

    @property
    def error(self) -> BaseException | None:
        """The writer thread's failure, if any (messages are dropped from then on)."""
        return self._error

    def close(self) -> RecorderStats:
        """Stop the open episode, write everything queued, finish the file (summary, footer).

        Raises :class:`RecordingWriteError` if writing failed. Calling it twice is harmless.
        """
        if self._closed:
            return self.stats()
        if self._open_episode is not None:
            self.stop_episode()
        with self._lock:                  # after every message a logger has numbered (see _submit)
            self._closed = True
            if self._thread is not None:
                self._queue.put((_STOP,))
        if self._thread is not None:
            self._wake.set()
            self._join_writer()
        else:
            with self._lock:
                self._finish()
        if self._error is None:
            try:
                self._check_file_is_there()     # removed since the last flush
            except RecordingRemovedError as exc:
                self._error = exc
        if isinstance(self._error, RecordingRemovedError):
            raise RecordingWriteError(f"{self.path}: {self._error.strerror}: this session's recording is "
                                      "lost") from self._error
        if self._error is not None:
            reason = getattr(self._error, "strerror", None) or self._error
            raise RecordingWriteError(f"{self.path}: recording stopped: {reason}; what was written before is in the "
                                      "file (`teleop dataset inspect` says how much)") from self._error
        return self.stats()

    def _join_writer(self) -> None:
        """Wait for the writer thread to finish the file, even through Ctrl-C / SIGTERM: the
        interpreter kills a daemon thread at exit, and one stopped in the middle of writing
        the summary leaves a file without its footer. An interruption is raised again once
        the file is complete."""
        assert self._thread is not None   # called by close() only when there is a writer thread
        interrupted: KeyboardInterrupt | None = None
        while self._thread.is_alive():
            try:
                self._thread.join()
            except KeyboardInterrupt as exc:
                interrupted = exc
        if interrupted is not None:
            raise interrupted

    def __enter__(self) -> "Recorder":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -------------------------------------------------------------- caller side
    def _time_ns(self, topic: str, what: str, value: int | None) -> int:
        """A checked log time [ns]: ``value``, or now on the recorder's clock when None."""
        if value is None:
            return _checked_time_ns(topic, f"{what} (from the recorder's clock)", self._clock_ns())
        return _checked_time_ns(topic, what, value)

    def _resolve(self, channel: str) -> str:
        topic = resolve_topic(channel)
        self._topic_of_name[channel] = topic
        return topic

    def _auto_register(self, topic: str, channel: str) -> ChannelSpec:
        spec = spec_for_topic(topic)
        if spec is None:
            raise KeyError(f"unknown channel {channel!r}: declare_channel(..., spec=) it first, "
                           f"or use one of {known_topics()}")
        with self._lock:
            if topic not in self._specs:  # another thread may have won the race
                self._register_locked(topic, spec, {})
        return self._specs[topic]

    def _register_locked(self, topic: str, spec: ChannelSpec, metadata: dict[str, str]) -> None:
        self._specs[topic] = spec
        item = (_REGISTER, topic, spec, {**spec.metadata, **metadata})
        if self._threaded:
            self._queue.put(item)
        else:
            self._handle(item)

    def _submit(self, topic: str, spec: ChannelSpec, snapshot: Any, log_ns: int, publish_ns: int,
                droppable: bool) -> bool:
        size = _approximate_size(snapshot)
        # Checked, numbered and queued under one lock: two threads logging at once queued in
        # the opposite order to their sequence numbers, and a message logged while another
        # thread closed the recorder could be queued after the writer's last drain (counted
        # as logged, never written).
        with self._lock:
            if self._closed:
                raise RuntimeError(f"{self.path}: recorder is closed")
            sequence = self._sequence[topic]
            self._sequence[topic] = (sequence + 1) & _SEQUENCE_MASK
            stats = self._stats
            if droppable and (self._error is not None or stats.queued_messages >= self._max_queued_messages
                              or stats.queued_bytes + size > self._max_queued_bytes):
                stats.dropped[topic] += 1
                return False
            stats.logged += 1
            item = (_MESSAGE, topic, log_ns, publish_ns, spec, snapshot, sequence, size)
            if not self._threaded:
                self._handle(item)
                try:
                    self._maybe_flush()
                except RecordingRemovedError as exc:   # as the writer thread does: said, then dropped
                    self._error = exc
                return True
            stats.queued_messages += 1
            stats.queued_bytes += size
            self._queue.put(item)      # a SimpleQueue: never blocks
        return True

    def _log_marker(self, marker: EpisodeMarker, log_time_ns: int | None) -> None:
        if EPISODES not in self._specs:
            with self._lock:
                if EPISODES not in self._specs:
                    self._register_locked(EPISODES, EPISODE_SPEC, {})
        log_ns = self._time_ns(EPISODES, "log_time_ns", log_time_ns)
        self._submit(EPISODES, EPISODE_SPEC, marker, log_ns, log_ns, droppable=False)

    def _stop_episode_locked(self, log_time_ns: int | None) -> int | None:
        if self._open_episode is None:
            return None
        number, task = self._open_episode
        self._log_marker(EpisodeMarker("stop", number, task), log_time_ns)
        self._open_episode = None
        return number

    # -------------------------------------------------------------- writer side
    def _writer_loop(self) -> None:
        stop = False
        while not stop:
            # Wake up per batch, not per message: fewer thread switches and warm caches
            # for the encoding. close() sets the event to end the wait at once.
            now = time.monotonic()
            if self._error is None:
                self._wake.wait(max(0.0, min(self._next_flush, now + self._batch_interval_s) - now))
            else:
                # Nothing more is written after a write error (log() drops): wait for close().
                # The flush deadline, no longer advanced, made this loop spin, starving the
                # station's control loop of the GIL (late ticks, the robot's watchdog stale).
                self._wake.wait()
            items = []
            while True:
                try:
                    items.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            done_messages = done_bytes = 0
            for item in items:
                if item[0] == _STOP:
                    stop = True
                    continue
                if item[0] == _MESSAGE:
                    done_messages += 1
                    done_bytes += item[7]
                if self._error is None:
                    try:
                        self._handle(item)
                    except BaseException as exc:  # keep draining so callers see drops, not a hang
                        self._error = exc
                # Let a control loop waiting for the GIL in now, rather than making it
                # wait out the interpreter's 5 ms switch interval behind the batch.
                time.sleep(0)
            with self._lock:
                self._stats.queued_messages -= done_messages
                self._stats.queued_bytes -= done_bytes
            if self._error is None:
                try:
                    self._maybe_flush()
                except BaseException as exc:
                    self._error = exc
        try:
            self._finish()
        except BaseException as exc:
            self._error = self._error or exc

    def _handle(self, item: tuple) -> None:
        if item[0] == _MESSAGE:
            _, topic, log_ns, publish_ns, spec, snapshot, sequence, _ = item
            try:
                data = spec.encode(snapshot)
            except Exception as exc:  # snapshots are checked, so this is a bug: report, keep recording
                if not self._stats.failed[topic]:
                    _log.error("%s: cannot encode a message on %s: %r", self.path, topic, exc)
                self._stats.failed[topic] += 1
                return
            self._writer.add_message(self._channel_ids[topic], log_time=log_ns, data=data,
                                     publish_time=publish_ns, sequence=sequence)
            self._stats.written += 1
        elif item[0] == _REGISTER:
            _, topic, spec, metadata = item
            schema_id = self._schema_ids.get(spec.schema_name)
            if schema_id is None:
                schema_id = self._writer.register_schema(spec.schema_name, "jsonschema", spec.schema_bytes)
                self._schema_ids[spec.schema_name] = schema_id
            self._channel_ids[topic] = self._writer.register_channel(topic, "json", schema_id, metadata)

    def _maybe_flush(self) -> None:
        now = time.monotonic()
        if now >= self._next_flush:
            self._writer.flush()  # closes the chunk and flushes the file object to the OS
            self._next_flush = now + self._flush_interval_s   # (first: a removed file is looked at once per flush)
            self._check_file_is_there()
            self._stats.flushes += 1
            if self._threaded:
                self._stats.writer_cpu_s = time.thread_time()

    def _check_file_is_there(self) -> None:
        """Raise :class:`RecordingRemovedError` if :attr:`path` is no longer the file written."""
        try:
            now = os.stat(self.path)
            there = (now.st_dev, now.st_ino) == self._identity
        except OSError:
            there = False
        if not there:
            raise RecordingRemovedError(errno.ENOENT, "the file was removed or replaced while recording (its folder "
                                        "deleted?)", str(self.path))

    def _finish(self) -> None:
        if self._threaded:
            self._stats.writer_cpu_s = time.thread_time()
        try:
            stats = self._stats
            self._writer.add_metadata(RECORDER_STATS_METADATA, {
                "logged": str(stats.logged), "written": str(stats.written),
                "dropped": str(sum(stats.dropped.values())), "failed": str(sum(stats.failed.values())),
                **{f"dropped:{topic}": str(n) for topic, n in stats.dropped.items()},
                "flushes": str(stats.flushes), "writer_cpu_s": f"{stats.writer_cpu_s:.6f}"})
            self._writer.finish()
            self._sync_to_disk()
        finally:
            self._file.close()

    def _sync_to_disk(self) -> None:
        """Put the finished file on the disk itself (``fsync``), not only in the OS's cache:
        a session that ended cleanly then survives a power cut a minute later (Linux writes
        dirty pages back within ~30 s, by which time the user may have pulled the plug or
        the battery). Once per recording: cheap. Not for what cannot be synced (a device
        such as /dev/null, some network or FUSE file systems: EINVAL, EROFS, ENOTSUP): the
        data has reached the OS, as before."""
        self._file.flush()
        if not stat.S_ISREG(os.fstat(self._file.fileno()).st_mode):
            return
        try:
            os.fsync(self._file.fileno())
        except OSError as exc:
            if exc.errno not in (errno.EINVAL, errno.EROFS, errno.ENOTSUP):
                raise


def _checked_time_ns(topic: str, what: str, value: Any) -> int:
    """``value`` as an MCAP time [ns]; ValueError naming the channel unless an integer in [0, 2**64)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{topic}: {what} must be an integer number of nanoseconds, got {value!r}")
    value = int(value)
    if not 0 <= value < _TIME_LIMIT_NS:
        raise ValueError(f"{topic}: {what} = {value} is outside MCAP's time range 0 <= t < 2**64 ns")
    return value


def _approximate_size(snapshot: Any) -> int:
    """Bytes a queued snapshot holds, for the queue bound (images dominate; the rest is small)."""
    if isinstance(snapshot, CameraFrame):
        return len(snapshot.data)
    if isinstance(snapshot, (bytes, bytearray)):
        return len(snapshot)
    return 1024


def _nanoseconds_of(clock: Any) -> Callable[[], int]:
    """A ``clock_ns`` callable from a clock whose ``now()`` returns seconds."""
    if not callable(getattr(clock, "now", None)):
        raise TypeError(f"clock must have a now() method returning seconds, got {type(clock).__name__}")
    return lambda: round(clock.now() * 1e9)
