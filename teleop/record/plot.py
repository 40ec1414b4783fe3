"""One PNG summarising a recording: how the robot tracked, and where the link failed.

::

    data = gather_plot_data(open_recording("robot.mcap"), start_s=2.0, end_s=8.0)
    data.panels                     # ("hands", "joints", "balance", "states", "network")
    draw_plot(data, "robot.png")

Gathering (:func:`gather_plot_data`, numpy only) is kept apart from drawing
(:func:`draw_plot`, matplotlib with the headless Agg backend), so that what a figure shows
can be tested without rendering it. The panels, stacked on one time axis (seconds from the
recording's first message), are those the recording has data for:

hands
    right and left hand reference positions (x, y, z) [m]: ``/references`` (an operator
    recording), ``/commands/delivered`` (dashed) and ``/commands/compensated`` (solid) (a
    robot recording).
joints
    commanded vs measured angles of the joints that moved most (largest range of motion of
    the measured angle in the window, at most 6), and the RMS tracking error (commanded -
    measured) per joint group over every tick with commands.
balance
    measured centre of pressure and centre of mass (x, y), stance frame.
states
    the robot station's watchdog and compensation states per tick, and the episodes (task
    labels), as coloured bands.
network
    delays the stations report in ``/network/stats`` (robot: ``tau_f_mean_s``, ``tau_b_s``;
    operator: ``video_tau_b_s``, ``video_backward_delay_mean_s``).

Memory stays bounded however long the recording: channels are read ``READ_WINDOW_S`` at a
time, and each drawn series keeps every k-th sample (k a power of two, doubled whenever
more than ``2 * max_points`` samples are kept), so between ``max_points`` and
``2 * max_points`` samples are drawn (all of them when there are fewer). What is computed
from the samples (ranges of motion, RMS errors, state bands) uses every sample.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import numpy as np

from retarget.references import SIGNAL_SLICES
from teleop.output_set import write_outputs_together
from teleop.progress import progress_bar

from .channels import COMMANDS_COMPENSATED, COMMANDS_DELIVERED, NETWORK_STATS, REFERENCES, ROBOT_STATE
from .codecs import NETWORK_SCHEMA_NAME, REFERENCES_SCHEMA_NAME, ROBOT_STATE_SCHEMA_NAME
from .labels import printable_label
from .reader import ChannelInfo, Recording

#: Samples drawn per series at least (when there are more); at most twice as many.
MAX_POINTS = 2000
#: Channels are read this much at a time [s] (bounds the decoded messages held at once).
READ_WINDOW_S = 30.0
#: At most this many joints are drawn (the ones that moved most).
MAX_JOINTS = 6

#: Reference channels of the hands panel, in drawing order: (topic, short name).
HAND_CHANNELS: tuple[tuple[str, str], ...] = (
    (REFERENCES, "references"), (COMMANDS_DELIVERED, "delivered"), (COMMANDS_COMPENSATED, "compensated"))
#: Columns of a hands series.
HAND_LABELS: tuple[str, ...] = ("right x", "right y", "right z", "left x", "left y", "left z")
#: Columns of the balance series.
BALANCE_LABELS: tuple[str, ...] = ("CoP x", "CoP y", "CoM x", "CoM y")
#: Delays the stations write in /network/stats (see teleop.stations.recording): key -> label.
NETWORK_DELAYS: dict[str, str] = {
    "tau_f_mean_s": "τ_f forward delay (mean)",
    "tau_b_s": "τ_b backward delay",
    # Without a jitter buffer the age at display is the delays' median: below their mean
    # when a few frames come late, which read as a contradiction unlabelled.
    "video_tau_b_s": "τ_b video age at display (median, + jitter buffer)",
    "video_backward_delay_mean_s": "video backward delay (mean)",
}
#: Joint groups of the tracking error, by a word in the joint name (first match).
JOINT_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("legs", ("hip", "knee", "ankle")),
    ("torso", ("torso", "waist")),
    ("arms", ("shoulder", "elbow", "wrist", "hand")),
    ("neck", ("neck", "head")),
)


# ---------------------------------------------------------------------- the data


@dataclass
class Series:
    """A time series, possibly decimated (see the module docstring).

    Attributes:
        times: (M,) seconds from the recording's first message, increasing.
        values: (M, K) samples (units: see the panel), NaN where a sample lacks a value.
        labels: names of the K columns.
        total: samples in the window before decimation (M <= total).
    """

    times: np.ndarray
    values: np.ndarray
    labels: tuple[str, ...]
    total: int

    def __len__(self) -> int:
        return len(self.times)


@dataclass
class JointTracking:
    """Commanded vs measured angles of the joints drawn.

    Attributes:
        times: (M,) seconds from the recording's first message.
        measured: (M, J) measured angles of the J joints drawn [rad].
        commanded: (M, J) commanded angles [rad] (NaN for a tick without commands), or None
            when the recording has no joint commands.
        names: names of the J joints drawn (those with the largest measured range of motion).
        ranges: (J,) range of motion of each drawn joint over the window [rad].
        rms_by_group: RMS of commanded - measured over every tick with commands and every
            joint of a group (all joints, not only those drawn), by group name [rad];
            empty without commands.
        total: robot state samples in the window (M <= total).
    """

    times: np.ndarray
    measured: np.ndarray
    commanded: np.ndarray | None
    names: tuple[str, ...]
    ranges: np.ndarray
    rms_by_group: dict[str, float]
    total: int


#: (start, width) of a band [s].
Span = tuple[float, float]


@dataclass
class EpisodeSpan:
    """An episode clipped to the window: start/end [s from the first message], label."""

    number: int
    task: str
    start_s: float
    end_s: float
    stopped: bool = True


@dataclass
class PlotData:
    """Everything a recording's figure shows (see :func:`gather_plot_data`).

    Attributes:
        name: file name of the recording.
        duration_s: the whole recording's duration [s].
        start_s, end_s: the window drawn [s from the first message].
        complete: False for a recording cut short (read as far as intact).
        counts: messages per topic (the whole recording).
        hands: hand reference series by channel short name ("references", "delivered",
            "compensated"), (M, 6) with columns :data:`HAND_LABELS` [m].
        joints: commanded vs measured joints, or None without robot states.
        balance: (M, 4) series with columns :data:`BALANCE_LABELS` [m], or None.
        watchdog, compensation: bands of each state (state -> spans in time order); a
            tick's band reaches the next tick (the last one: one more tick period); empty
            when not recorded.
        episodes: episodes overlapping the window, clipped to it.
        network: delays (M, K) [s] with columns from :data:`NETWORK_DELAYS` (NaN where a
            message did not report one), or None without any.
    """

    name: str
    duration_s: float
    start_s: float
    end_s: float
    complete: bool = True
    counts: dict[str, int] = field(default_factory=dict)
    hands: dict[str, Series] = field(default_factory=dict)
    joints: JointTracking | None = None
    balance: Series | None = None
    watchdog: dict[str, list[Span]] = field(default_factory=dict)
    compensation: dict[str, list[Span]] = field(default_factory=dict)
    episodes: list[EpisodeSpan] = field(default_factory=list)
    network: Series | None = None

    @property
    def panels(self) -> tuple[str, ...]:
        """The panels with data, in drawing order (empty: nothing to plot)."""
        have = {"hands": bool(self.hands), "joints": self.joints is not None, "balance": self.balance is not None,
                "states": bool(self.watchdog or self.compensation or self.episodes),
                "network": self.network is not None}
        return tuple(name for name, present in have.items() if present)


# ---------------------------------------------------------------------- bounded reading


class Decimator:
    """Keeps every ``stride``-th row of a stream, between ``max_points`` and twice as many.

    Rows arrive in blocks (:meth:`add`); once more than ``2 * max_points`` are kept, every
    other one is dropped and the stride doubles, so memory is bounded without knowing the
    stream's length in advance, and kept rows stay evenly spaced in sample count.
    """

    def __init__(self, max_points: int = MAX_POINTS) -> None:
        if max_points < 1:
            raise ValueError(f"max_points must be at least 1, got {max_points}")
        self.max_points = max_points
        self.stride = 1
        self.total = 0                              # rows seen
        self._times: list[np.ndarray] = []
        self._rows: list[np.ndarray] = []
        self._kept = 0

    def add(self, times: np.ndarray, rows: np.ndarray) -> None:
        """Add (m,) times and (m, K) rows (one block of the stream, in order)."""
        keep = (self.total + np.arange(len(times))) % self.stride == 0
        self.total += len(times)
        if keep.any():
            self._times.append(np.asarray(times, dtype=float)[keep])
            self._rows.append(np.asarray(rows, dtype=float)[keep])
            self._kept += int(keep.sum())
        while self._kept > 2 * self.max_points:
            times_kept, rows_kept = self.result()
            # Kept rows are the multiples of the stride: the even ones are the multiples of twice it.
            self._times, self._rows = [times_kept[::2]], [rows_kept[::2]]
            self._kept = len(self._times[0])
            self.stride *= 2

    def result(self) -> tuple[np.ndarray, np.ndarray]:
        """(M,) times and (M, K) rows kept (M = 0 when nothing came)."""
        if not self._times:
            return np.empty(0), np.empty((0, 0))
        return np.concatenate(self._times), np.concatenate(self._rows)


class StateBands:
    """Bands of a per-tick state: a run of ticks in one state is one band, from its first
    tick to the first tick of the next run (the last run: one tick period past its last
    tick). Ticks without a state ("") make no band."""

    def __init__(self) -> None:
        self.spans: dict[str, list[Span]] = {}
        self._state: str | None = None
        self._start = self._last = self._period = 0.0

    def add(self, times: np.ndarray, states: np.ndarray) -> None:
        """Add (m,) tick times [s] and their (m,) states, in time order."""
        for t, state in zip(cast("list[float]", times.tolist()), states.tolist()):
            if self._state is not None and t > self._last:
                self._period = t - self._last
            if state != self._state:
                self._close(t)
                self._state, self._start = state, t
            self._last = t

    def finish(self) -> dict[str, list[Span]]:
        self._close(self._last + self._period)
        self._state = None
        return self.spans

    def _close(self, end: float) -> None:
        if self._state:                                 # None (nothing yet) or "" (not recorded): no band
            self.spans.setdefault(self._state, []).append((self._start, end - self._start))


def _windows(info: ChannelInfo, start_ns: int | None, end_ns: int | None,
             window_ns: int, bar=None) -> Iterator[tuple[int, int]]:
    """[lo, hi) log-time windows of at most ``window_ns`` covering the channel's messages in
    [start_ns, end_ns) (nothing for an empty channel); ``bar`` (a progress bar) advances by
    one as each window has been read."""
    if not info.count:
        return
    lo = info.first_ns if start_ns is None else max(start_ns, info.first_ns)
    hi = info.last_ns + 1 if end_ns is None else min(end_ns, info.last_ns + 1)
    while lo < hi:
        yield lo, min(lo + window_ns, hi)
        lo += window_ns
        if bar is not None:
            bar.update(1)


def _ours(recording: Recording, topic: str, schema_name: str) -> ChannelInfo | None:
    """The channel if it holds messages of our schema (another tool's topic of the same name
    would not decode to what a panel needs: it is left out, not an error)."""
    info = recording.channels.get(topic)
    return info if info is not None and info.count and info.schema_name == schema_name else None


# ---------------------------------------------------------------------- gathering


def gather_plot_data(recording: Recording, start_s: float | None = None, end_s: float | None = None, *,
                     max_points: int = MAX_POINTS, max_joints: int = MAX_JOINTS,
                     read_window_s: float = READ_WINDOW_S, progress: bool = False) -> PlotData:
    """The series of every panel of a recording's figure (no matplotlib needed).

    Args:
        recording: an opened recording (complete or cut short).
        start_s, end_s: window in seconds from the first message, end inclusive (as
            ``teleop dataset trim``); None = from the start / to the end.
        max_points: decimation of the drawn series (see the module docstring).
        max_joints: joints drawn at most.
        read_window_s: channels are read this many seconds at a time.
        progress: show a progress bar on stderr, a step per window read, when there is
            more than one (a 166 MB recording took 20 s to plot, without a word).

    Raises ValueError if ``end_s < start_s`` or either is not finite; RecordingFormatError
    for an undecodable message.
    """
    if any(value is not None and not math.isfinite(value) for value in (start_s, end_s)):
        raise ValueError(f"the window ({start_s} s .. {end_s} s) must be finite")   # round(inf): OverflowError
    if start_s is not None and end_s is not None and end_s < start_s:
        raise ValueError(f"--end ({end_s} s) must not come before --start ({start_s} s)")
    origin = recording.start_ns
    start_ns = None if start_s is None else origin + round(start_s * 1e9)
    end_ns = None if end_s is None else origin + round(end_s * 1e9) + 1    # inclusive end
    window_ns = max(1, round(read_window_s * 1e9))
    data = PlotData(recording.path.name, recording.duration_s, start_s or 0.0,
                    min(end_s, recording.duration_s) if end_s is not None else recording.duration_s,
                    recording.complete, {topic: info.count for topic, info in recording.channels.items()})
    read = [info for info in (*(_ours(recording, topic, REFERENCES_SCHEMA_NAME) for topic, _ in HAND_CHANNELS),
                              _ours(recording, ROBOT_STATE, ROBOT_STATE_SCHEMA_NAME),
                              _ours(recording, NETWORK_STATS, NETWORK_SCHEMA_NAME)) if info is not None]
    windows = sum(1 for info in read for _ in _windows(info, start_ns, end_ns, window_ns))
    # A bar only for more than one window: one is read before a bar would tell anything, and a
    # short plot's stderr keeps its messages alone.
    with progress_bar(total=windows, desc="reading the recording", enabled=progress and windows > 1) as bar:
        args = (recording, start_ns, end_ns, window_ns, max_points)
        data.hands = {name: series for topic, name in HAND_CHANNELS
                      if (series := _hand_series(*args, topic, bar=bar)) is not None}
        _gather_robot_states(data, *args, max_joints, bar=bar)
        data.network = _network_series(*args, bar=bar)
    data.episodes = _episode_spans(recording, data.start_s, data.end_s)
    return data


def _hand_series(recording: Recording, start_ns, end_ns, window_ns: int, max_points: int,
                 topic: str, bar=None) -> Series | None:
    """(M, 6) right then left hand positions [m] of a references channel at their log times,
    or None. The delivered commands as the robot executed them: the newest by time stamp
    (see :meth:`Recording.decoded_references`), not each late packet's older pose."""
    info = _ours(recording, topic, REFERENCES_SCHEMA_NAME)
    if info is None:
        return None
    columns = np.r_[SIGNAL_SLICES["right_hand"], SIGNAL_SLICES["left_hand"]]
    decimator = Decimator(max_points)
    newest = -math.inf
    for lo, hi in _windows(info, start_ns, end_ns, window_ns, bar):
        times, rows = [], []
        for log_ns, refs in recording.decoded_references(topic, lo, hi, newest_only=topic == COMMANDS_DELIVERED,
                                                         newer_than=newest):
            times.append((log_ns - recording.start_ns) * 1e-9)
            rows.append(refs.to_flat()[columns])
            newest = max(newest, refs.t)
        if times:
            decimator.add(np.array(times), np.array(rows))
    kept_times, values = decimator.result()
    return Series(kept_times, values, HAND_LABELS, decimator.total) if len(kept_times) else None


def joint_group(name: str) -> str:
    """Group of a joint for the tracking error ("legs", "torso", "arms", "neck", "other")."""
    lowered = name.lower()
    return next((group for group, words in JOINT_GROUPS if any(w in lowered for w in words)), "other")


class _TrackingStats:
    """Per joint, over every tick: measured range and sum of squared tracking errors."""

    def __init__(self, joints: int) -> None:
        self.low: np.ndarray = np.full(joints, np.inf)
        self.high: np.ndarray = np.full(joints, -np.inf)
        self.squared = np.zeros(joints)
        self.ticks = np.zeros(joints, dtype=int)

    def add(self, measured: np.ndarray, commanded: np.ndarray | None) -> None:
        self.low = np.minimum(self.low, measured.min(axis=0))
        self.high = np.maximum(self.high, measured.max(axis=0))
        if commanded is not None:
            error = commanded - measured
            finite = np.isfinite(error)                 # a tick without commands: NaN row
            self.squared += np.square(np.where(finite, error, 0.0)).sum(axis=0)
            self.ticks += finite.sum(axis=0)

    def rms_by_group(self, names: tuple[str, ...]) -> dict[str, float]:
        groups: dict[str, list[int]] = {}
        for j, name in enumerate(names):
            groups.setdefault(joint_group(name), []).append(j)
        return {group: float(np.sqrt(self.squared[js].sum() / self.ticks[js].sum()))
                for group, js in groups.items() if self.ticks[js].sum()}


def _gather_robot_states(data: PlotData, recording: Recording, start_ns, end_ns, window_ns: int,
                         max_points: int, max_joints: int, bar=None) -> None:
    """Fill ``joints``, ``balance``, ``watchdog`` and ``compensation`` from /robot/state."""
    info = _ours(recording, ROBOT_STATE, ROBOT_STATE_SCHEMA_NAME)
    if info is None:
        return
    decimator = Decimator(max_points)                   # one row: measured, commanded, CoP, CoM
    watchdog, compensation = StateBands(), StateBands()
    stats: _TrackingStats | None = None
    joints, names, has_commands = 0, None, False
    for lo, hi in _windows(info, start_ns, end_ns, window_ns, bar):
        series = recording.robot_states(ROBOT_STATE, lo, hi, time_origin_ns=recording.start_ns)
        if not len(series):
            continue
        if stats is None:
            joints = series.joint_positions.shape[1]
            stats = _TrackingStats(joints)
        elif series.joint_positions.shape[1] != joints:  # robot_states checks within a window only
            raise ValueError(f"{recording.path}: the number of joints on {ROBOT_STATE} changes within the window "
                             f"({joints} then {series.joint_positions.shape[1]})")
        names = names or series.joint_names
        has_commands = has_commands or series.joint_commands is not None
        commanded = series.joint_commands if series.joint_commands is not None else \
            np.full_like(series.joint_positions, np.nan)
        stats.add(series.joint_positions, series.joint_commands)
        decimator.add(series.times, np.hstack([series.joint_positions, commanded, series.cop, series.com[:, :2]]))
        for bands, states in ((watchdog, series.watchdog), (compensation, series.compensation)):
            if states is not None:
                bands.add(series.times, states)
    if stats is None:
        return
    times, rows = decimator.result()
    names = tuple(names) if names is not None and len(names) == joints else tuple(f"joint {j}" for j in range(joints))
    ranges = np.where(np.isfinite(stats.high - stats.low), stats.high - stats.low, 0.0)
    drawn = np.sort(np.argsort(-ranges, kind="stable")[:max_joints])   # the most moving, in joint order
    data.joints = JointTracking(times, rows[:, drawn], rows[:, joints + drawn] if has_commands else None,
                                tuple(names[j] for j in drawn), ranges[drawn],
                                stats.rms_by_group(names), decimator.total)
    data.balance = Series(times, rows[:, 2 * joints:], BALANCE_LABELS, decimator.total)
    data.watchdog, data.compensation = watchdog.finish(), compensation.finish()


def _network_series(recording: Recording, start_ns, end_ns, window_ns: int, max_points: int,
                    bar=None) -> Series | None:
    """The delays of :data:`NETWORK_DELAYS` reported in /network/stats [s], or None."""
    info = _ours(recording, NETWORK_STATS, NETWORK_SCHEMA_NAME)
    if info is None:
        return None
    keys = list(NETWORK_DELAYS)
    decimator = Decimator(max_points)
    for lo, hi in _windows(info, start_ns, end_ns, window_ns, bar):
        times, rows = [], []
        for log_ns, stats in recording.decoded(NETWORK_STATS, lo, hi):
            if isinstance(stats, dict):
                times.append((log_ns - recording.start_ns) * 1e-9)
                rows.append([_seconds(stats.get(key)) for key in keys])
        if times:
            order = np.argsort(times, kind="stable")    # file order; the panel wants time order
            decimator.add(np.asarray(times)[order], np.asarray(rows, dtype=float)[order])
    kept_times, values = decimator.result()
    if not len(kept_times):
        return None
    reported = np.isfinite(values).any(axis=0)         # only the delays some message reported
    if not reported.any():
        return None
    return Series(kept_times, values[:, reported], tuple(k for k, r in zip(keys, reported) if r), decimator.total)


def _seconds(value) -> float:
    """A reported delay [s]; NaN for a missing one (None: not measured yet) or a non-number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return math.nan
    return float(value)


def _episode_spans(recording: Recording, start_s: float, end_s: float) -> list[EpisodeSpan]:
    origin = recording.start_ns
    spans = []
    for episode in recording.episodes():
        lo, hi = (episode.start_ns - origin) * 1e-9, (episode.stop_ns - origin) * 1e-9
        if hi < start_s or lo > end_s:
            continue
        spans.append(EpisodeSpan(episode.number, episode.task, max(lo, start_s), min(hi, end_s), episode.stopped))
    return spans


# ---------------------------------------------------------------------- drawing

#: Colours of known states (others get the next colour of the cycle).
STATE_COLOURS: dict[str, str] = {
    "WAITING": "#bbbbbb", "ACTIVE": "#4caf50", "STALE": "#e53935", "RESUMING": "#fb8c00",
    "passthrough": "#90caf9", "blend_in": "#fdd835", "predicting": "#8e24aa", "blend_out": "#26c6da",
}
#: Line style of each hands channel (delivered commands dashed, what the robot tracked solid).
HAND_STYLES: dict[str, str] = {"references": "-", "delivered": "--", "compensated": "-"}
#: Relative height of each panel.
PANEL_HEIGHTS: dict[str, float] = {"hands": 2.0, "joints": 1.4, "balance": 1.0, "states": 0.7, "network": 0.8}
XYZ_COLOURS = ("C0", "C1", "C2")


def draw_plot(data: PlotData, path: str | os.PathLike, *, dpi: int = 100) -> Path:
    """Draw the panels of ``data`` (see :func:`gather_plot_data`) into a PNG file.

    Raises ValueError if there is nothing to draw.
    """
    import matplotlib

    matplotlib.use("Agg")                               # headless: no display needed
    import matplotlib.pyplot as plt

    panels = data.panels
    if not panels:
        raise ValueError(f"{data.name}: nothing to plot")
    rows = [p for name in panels for p in ((name + ":right", name + ":left") if name == "hands" else (name,))]
    heights = [PANEL_HEIGHTS[row.split(":")[0]] / (2 if ":" in row else 1) for row in rows]
    fig, grid = plt.subplots(len(rows), 1, figsize=(13, 1.0 + 1.6 * sum(heights)), sharex=True,
                             gridspec_kw={"height_ratios": heights}, layout="constrained", squeeze=False)
    axes = dict(zip(rows, grid[:, 0]))
    try:
        # The time axis first: the episode labels are fitted to their bars' widths on it.
        axes[rows[-1]].set_xlim(data.start_s, max(data.end_s, data.start_s + 1e-3))
        if "hands" in panels:
            _draw_hands(axes["hands:right"], axes["hands:left"], data.hands)
        if data.joints is not None:
            _draw_joints(axes["joints"], data.joints)
        if data.balance is not None:
            _draw_balance(axes["balance"], data.balance)
        if "states" in panels:
            _draw_states(axes["states"], data)
        if data.network is not None:
            _draw_network(axes["network"], data.network)
        for name, ax in axes.items():
            if name != "states":
                for episode in data.episodes:           # where each episode is, on every panel
                    ax.axvspan(episode.start_s, episode.end_s, color="k", alpha=0.05, lw=0)
                ax.grid(alpha=0.3)
        axes[rows[-1]].set_xlabel("time from the recording's first message [s]")
        fig.suptitle(title(data), fontsize=10)
        path = Path(path)
        # Beside the file, then renamed over it: a failed write (a full disk) left a
        # truncated image in place of the one it replaced.
        write_outputs_together({path: lambda tmp: fig.savefig(tmp, format="png", dpi=dpi)})
    finally:
        plt.close(fig)
    return path


def title(data: PlotData) -> str:
    """File, duration (and window), state, and messages per topic in brief."""
    window = "" if (data.start_s == 0 and data.end_s == data.duration_s) else \
        f", window {data.start_s:.2f}–{data.end_s:.2f} s"
    state = "" if data.complete else " (cut short: read as far as intact)"
    counts = "  ".join(f"{topic.lstrip('/')} {count}" for topic, count in data.counts.items())
    return f"{data.name}: {data.duration_s:.2f} s{window}{state}\nmessages in the file: {counts}"


def _legend(ax, **kwargs) -> None:
    ax.legend(loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=7, frameon=False, **kwargs)


def _draw_hands(right, left, hands: dict[str, Series]) -> None:
    from matplotlib.lines import Line2D

    styles = dict(HAND_STYLES)
    if "references" in hands and "compensated" in hands:   # both solid otherwise
        styles["references"] = ":"
    for ax, side, offset in ((right, "right", 0), (left, "left", 3)):
        for name, series in hands.items():
            for axis in range(3):
                # cm, as every other figure of the product draws positions.
                ax.plot(series.times, 100.0 * series.values[:, offset + axis], styles[name], color=XYZ_COLOURS[axis],
                        lw=1)
        ax.set_ylabel(f"{side} hand [cm]")
    # Colour says the axis, the line style the channel: the channels' keys are grey, as no
    # line of that colour is drawn (a black "references" key looked like a missing line).
    # With one channel there is one style, and no style key: it said nothing.
    handles = [Line2D([], [], color=c, label=a) for c, a in zip(XYZ_COLOURS, "xyz")]
    if len(hands) > 1:
        handles += [Line2D([], [], color="0.5", ls=styles[name], label=f"{name} (line style)") for name in hands]
    _legend(right, handles=handles)
    right.set_title("hand references (stance frame)", fontsize=9, loc="left")


def _draw_joints(ax, joints: JointTracking) -> None:
    for j, name in enumerate(joints.names):
        colour = f"C{j % 10}"
        ax.plot(joints.times, np.degrees(joints.measured[:, j]), "-", color=colour, lw=1, label=name)
        if joints.commanded is not None:
            ax.plot(joints.times, np.degrees(joints.commanded[:, j]), "--", color=colour, lw=1)
    ax.set_ylabel("joint [deg]")
    _legend(ax)
    if joints.commanded is None:
        what = "measured joints that moved most (no joint commands recorded)"
    else:
        rms = ", ".join(f"{group} {np.degrees(value):.2f}°" for group, value in joints.rms_by_group.items()) \
            or "none (no tick with commands)"
        what = f"measured (solid) vs commanded (dashed), joints that moved most; tracking error RMS: {rms}"
    ax.set_title(what, fontsize=9, loc="left")


def _draw_balance(ax, balance: Series) -> None:
    for k, (label, style) in enumerate(zip(balance.labels, ("-", "-", "--", "--"))):
        ax.plot(balance.times, 100 * balance.values[:, k], style, color=XYZ_COLOURS[k % 2], lw=1, label=label)
    ax.set_ylabel("balance [cm]")
    _legend(ax)
    ax.set_title("measured centre of pressure and centre of mass (stance frame)", fontsize=9, loc="left")


def _draw_states(ax, data: PlotData) -> None:
    """One row of bands per recorded state, top to bottom, then the episodes with their labels."""
    from matplotlib.patches import Patch

    rows = [(name, bands) for name, bands in (("watchdog", data.watchdog), ("compensation", data.compensation))
            if bands] + ([("episodes", None)] if data.episodes else [])
    extra = iter(f"C{k}" for k in range(10))
    handles = []
    for k, (_name, bands) in enumerate(rows):
        y = len(rows) - 1 - k
        if bands is None:
            _draw_episodes(ax, data.episodes, y)
            continue
        for state, spans in bands.items():
            colour = STATE_COLOURS.get(state) or next(extra, "grey")
            ax.broken_barh(spans, (y - 0.4, 0.8), facecolors=colour)
            handles.append(Patch(color=colour, label=state))
    ax.set_yticks(range(len(rows)), [name for name, _ in reversed(rows)], fontsize=8)
    ax.set_ylim(-0.6, len(rows) - 0.4)
    if handles:
        _legend(ax, handles=handles, ncol=2)


def _draw_episodes(ax, episodes: list[EpisodeSpan], y: float) -> None:
    """Each episode a bar with its number and task inside: in full where it fits, else its
    number alone, else nothing (short episodes' labels overran and covered each other)."""
    renderer = ax.figure.canvas.get_renderer()
    for episode in episodes:
        ax.broken_barh([(episode.start_s, episode.end_s - episode.start_s)], (y - 0.4, 0.8), facecolors="#e0e0e0",
                       edgecolors="k", lw=0.5)
        left, right = (ax.transData.transform((t, y))[0] for t in (episode.start_s, episode.end_s))
        # Escaped: a control character in a label (a file of another tool) is no glyph.
        task = printable_label(episode.task) if episode.task else "(unlabelled)"
        full = f"#{episode.number} {task}" + ("" if episode.stopped else " (no stop)")
        for text in (full, f"#{episode.number}"):
            label = ax.text((episode.start_s + episode.end_s) / 2, y, text, ha="center", va="center", fontsize=7,
                            clip_on=True)
            # 20 % to spare: the constrained layout narrows the axes a little when it is drawn.
            if 1.2 * label.get_window_extent(renderer).width <= right - left:
                break
            label.remove()


def _draw_network(ax, network: Series) -> None:
    for k, key in enumerate(network.labels):
        ax.plot(network.times, 1000 * network.values[:, k], ".-", lw=1, ms=3, label=NETWORK_DELAYS.get(key, key))
    ax.set_ylabel("delay [ms]")
    _legend(ax)
    ax.set_title("delays reported in /network/stats", fontsize=9, loc="left")
