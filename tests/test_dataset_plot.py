"""`teleop dataset plot`: one PNG summarising a recording.

The recordings are made by the product itself: the real robot station and its recorder hooks
(:class:`teleop.stations.recording.RobotRecording`) on a virtual clock and link, with an
operator that moves the right hand, falls silent (the watchdog goes stale) and comes back;
and the operator station's recorder hooks for an operator recording. The figure's data
(:func:`teleop.record.plot.gather_plot_data`) is checked against the recording's own arrays;
the command runs through the real ``teleop`` entry point.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from retarget.references import FLAT_SIZE, SIGNAL_SLICES, RobotReferences
from teleop.cli import main
from teleop.clock import VirtualClock
from teleop.control.tracker import references_from_configuration
from teleop.net.clock_sync import answer_ping
from teleop.net.delay import LinkModel
from teleop.net.protocol import PacketCodec, VideoReport
from teleop.net.virtual import connect_virtual
from teleop.record import CameraFrame, Recorder, RobotStateSample, open_recording
from teleop.record.plot import gather_plot_data, joint_group
from teleop.stations.recording import OperatorRecording, RobotRecording
from teleop.stations.robot_station import RobotStation, RobotStationConfig

REPO_ROOT = Path(__file__).resolve().parents[1]
PERIOD_S = 0.01          # the robot station's control period [s]
TICKS = 300              # 3 s of robot session
SILENT = range(120, 170)  # ticks without commands: 0.5 s, the watchdog goes stale then resumes
VIDEO_REPORTS_FROM = 200  # the operator reports the video's delay from this tick on
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


# ------------------------------------------------------------------ recordings


@pytest.fixture(scope="module")
def station_sim(robot):
    from teleop.sim.simulator import Simulation

    sim = Simulation(robot, visual=False)
    yield sim
    sim.close()


@pytest.fixture(scope="module")
def robot_recording(tmp_path_factory, robot, station_sim) -> Path:
    """``teleop robot --record robot.mcap --task reach`` on a virtual clock, 50 ms forward delay."""
    path = tmp_path_factory.mktemp("plot") / "robot.mcap"
    clock = VirtualClock()
    operator, robot_ep = connect_virtual(PacketCodec(os.urandom(32)), LinkModel.thesis(0.05), clock, seed=5)
    recording = RobotRecording(path, clock, robot.joint_names, task="reach")
    station = RobotStation(robot_ep, robot, station_sim, None,
                           RobotStationConfig(video_hz=0, stale_timeout=0.2, resume_duration=0.3))
    home = references_from_configuration(robot, station.tracker.q).to_flat()
    try:
        for k in range(TICKS):
            clock.set(k * PERIOD_S)
            if k not in SILENT:
                refs = home.copy()
                refs[SIGNAL_SLICES["right_hand"]] += 0.08 * np.sin(np.pi * k * PERIOD_S) * np.array([1.0, 0.0, 1.0])
                operator.send(RobotReferences.from_flat(k * PERIOD_S, refs), robot_ep.address)
            record = station.tick()
            recording.after_tick(station, record)
            # The operator's side: clock pings answered (the robot measures τ_f once it knows
            # the offset) and, from 2 s on, its video reports (τ_b measured from then).
            for received in operator.poll():
                answer_ping(operator, received)
            if k >= VIDEO_REPORTS_FROM and k % 20 == 0:
                operator.send(VideoReport(jitter_buffer=0.05, backward_delay=0.1), robot_ep.address)
    finally:
        recording.close()
    return path


@pytest.fixture()
def robot_file(robot_recording, tmp_path) -> Path:
    """A private copy (a test may write next to it)."""
    return Path(shutil.copy(robot_recording, tmp_path / "robot.mcap"))


def operator_recording(path: Path) -> Path:
    """``teleop operator --record path --task wave``: 100 references at 100 Hz, one episode."""
    clock = VirtualClock()
    recording = OperatorRecording(path, clock, task="wave")
    for k in range(100):
        clock.set(k * PERIOD_S)
        flat = np.zeros(FLAT_SIZE)
        flat[SIGNAL_SLICES["left_hand"]] = [0.2, 0.1 * np.sin(k * 0.05), 0.9]
        recording.references(RobotReferences.from_flat(k * PERIOD_S, flat))
    recording.close()
    return path


def plot(*args: str) -> int:
    return main(["dataset", "plot", *map(str, args)])


def assert_png_with_content(path: Path) -> np.ndarray:
    """A PNG that decodes to a drawn figure (not one flat colour)."""
    import matplotlib.image

    assert path.read_bytes()[:8] == PNG_SIGNATURE
    image = matplotlib.image.imread(path)
    assert image.ndim == 3 and image.shape[0] > 300 and image.shape[1] > 600
    rgb = image[..., :3].reshape(-1, 3)
    assert rgb.std(axis=0).max() > 0.05
    assert len(np.unique(np.round(rgb[::7] * 255), axis=0)) > 20   # lines, bands, text: many colours
    return image


# ------------------------------------------------------------------ gathered data


def test_joints_are_the_recorded_commands_and_measurements(robot_recording):
    recording = open_recording(robot_recording)
    states = recording.robot_states(time_origin_ns=recording.start_ns)
    data = gather_plot_data(recording)

    assert data.panels == ("hands", "joints", "balance", "states", "network")
    joints = data.joints
    names = list(states.joint_names)
    drawn = [names.index(name) for name in joints.names]
    # The six joints that moved most (measured range), in joint order.
    ranges = np.ptp(states.joint_positions, axis=0)
    assert drawn == sorted(np.argsort(-ranges, kind="stable")[:6].tolist())
    np.testing.assert_allclose(joints.ranges, ranges[drawn])
    # Short enough not to be decimated: exactly the recorded arrays.
    assert joints.total == len(states) == TICKS
    np.testing.assert_array_equal(joints.times, states.times)
    np.testing.assert_array_equal(joints.measured, states.joint_positions[:, drawn])
    np.testing.assert_array_equal(joints.commanded, states.joint_commands[:, drawn])
    # RMS per group, over every joint of the group and every tick.
    error = states.joint_commands - states.joint_positions
    for group in ("legs", "torso", "arms", "neck"):
        members = [j for j, name in enumerate(names) if joint_group(name) == group]
        assert members
        assert joints.rms_by_group[group] == pytest.approx(np.sqrt(np.mean(error[:, members] ** 2)), rel=1e-12)
    assert 0 < max(joints.rms_by_group.values()) < 0.05   # the servos follow closely, not exactly

    np.testing.assert_array_equal(data.balance.values, np.hstack([states.cop, states.com[:, :2]]))
    assert data.balance.labels == ("CoP x", "CoP y", "CoM x", "CoM y")


def test_state_bands_cover_every_tick_with_its_state(robot_recording):
    recording = open_recording(robot_recording)
    states = recording.robot_states(time_origin_ns=recording.start_ns)
    data = gather_plot_data(recording)

    assert {"ACTIVE", "STALE", "RESUMING"} <= set(data.watchdog)
    assert set(data.compensation) == {"passthrough"}          # no task library: pass-through
    # A band ends where the next begins, but start + (end - start) may round 1e-16 s past end:
    # the tick that starts the next band is compared 1 ns inside the bands' edges.
    eps = 1e-9
    for bands, per_tick in ((data.watchdog, states.watchdog), (data.compensation, states.compensation)):
        for t, state in zip(states.times, per_tick):
            covering = [name for name, spans in bands.items() for start, width in spans
                        if start - eps <= t < start + width - eps]
            assert covering == [state], (t, state, covering)
    stale = sum(width for _, width in data.watchdog["STALE"])
    assert stale == pytest.approx(PERIOD_S * sum(states.watchdog == "STALE"))
    [episode] = data.episodes
    assert (episode.task, episode.start_s, episode.end_s) == ("reach", 0.0, pytest.approx(recording.duration_s))


def test_hands_and_network_delays_are_the_recorded_ones(robot_recording):
    recording = open_recording(robot_recording)
    data = gather_plot_data(recording)

    assert list(data.hands) == ["delivered", "compensated"]
    columns = np.r_[SIGNAL_SLICES["right_hand"], SIGNAL_SLICES["left_hand"]]
    for name, series in data.hands.items():
        trajectory = recording.reference_trajectory(name, time_origin_ns=recording.start_ns,
                                                    newest_only=name == "delivered")
        np.testing.assert_array_equal(series.times, trajectory.times)
        np.testing.assert_array_equal(series.values, trajectory.values[:, columns])
    # The silent operator shows in the delivered commands: no sample during the silence.
    delivered = data.hands["delivered"].times
    assert np.diff(delivered).max() > 0.4

    stats = [message for _, message in recording.decoded("network")]
    assert len(data.network) == len(stats) >= 5
    np.testing.assert_allclose(data.network.times, [(t - recording.start_ns) * 1e-9 for t, _ in
                                                    recording.decoded("network")])
    # Each delay is None (not measured) until the station measured it, then drawn as
    # reported: τ_f once the clock offset is known, τ_b (0.1 s + 0.05 s of jitter buffer)
    # from the first video report. Before that the station assumes τ_b = 0: not a measurement,
    # so not recorded as one (a flat zero line said the video had no delay).
    assert data.network.labels == ("tau_f_mean_s", "tau_b_s")
    for column, key in enumerate(data.network.labels):
        reported = np.array([np.nan if m[key] is None else m[key] for m in stats])
        np.testing.assert_array_equal(data.network.values[:, column], reported)
    tau_b = data.network.values[:, 1]
    assert np.isnan(tau_b[data.network.times < VIDEO_REPORTS_FROM * PERIOD_S]).all()
    assert np.allclose(tau_b[data.network.times > (VIDEO_REPORTS_FROM + 5) * PERIOD_S], 0.15, atol=0.02)
    assert np.isfinite(data.network.values[:, 0]).any()


def test_long_series_are_decimated_but_errors_and_bands_use_every_tick(robot_recording):
    recording = open_recording(robot_recording)
    full = gather_plot_data(recording)
    # Read 0.25 s at a time, at most 2 x 40 samples kept per series.
    small = gather_plot_data(recording, max_points=40, read_window_s=0.25)

    for series in (small.joints, small.balance, small.hands["compensated"]):
        assert 40 <= len(series.times) <= 80
    times = full.joints.times
    kept = np.searchsorted(times, small.joints.times)
    np.testing.assert_array_equal(times[kept], small.joints.times)             # samples of the recording...
    assert len(set(np.diff(kept).tolist())) == 1 and kept[0] == 0               # ...evenly spaced
    np.testing.assert_array_equal(small.joints.measured, full.joints.measured[kept])
    assert small.joints.total == TICKS and small.joints.names == full.joints.names
    assert small.joints.rms_by_group == pytest.approx(full.joints.rms_by_group, rel=1e-9)
    assert small.watchdog == full.watchdog and small.compensation == full.compensation


def test_the_tracking_error_leaves_out_the_ticks_without_commands(tmp_path):
    """Robot states recorded directly, some without joint commands (recordings made before
    they were, or a tick that commanded nothing): their NaN rows are drawn as gaps and left
    out of the RMS, which is the one over the ticks with commands only."""
    names = ("left_hip_pitch", "left_knee", "torso_yaw", "right_shoulder_pitch", "right_elbow", "neck_yaw")
    without = {3, 4, 5, 12, 13, 14, 15, 16, 17, 18}           # ticks without commands
    rng = np.random.default_rng(11)
    positions = rng.uniform(-0.5, 0.5, (20, len(names)))
    commands = positions + rng.normal(0.0, 0.02, positions.shape)
    path = tmp_path / "mixed.mcap"
    with Recorder(path, threaded=False) as rec:
        for k in range(20):
            optional = {} if k in without else {"joint_commands": commands[k]}
            rec.log_robot_state(RobotStateSample(k * PERIOD_S, positions[k], np.zeros(len(names)),
                                                 np.array([0.0, 0.0, 0.9]), np.zeros(2), names, **optional),
                                log_time_ns=k * 10_000_000)
    recording = open_recording(path)
    with_commands = [k for k in range(20) if k not in without]
    error = (commands - positions)[with_commands]
    # By hand, over the 10 ticks with commands (counting the 20 would give 1/sqrt(2) of it).
    expected = {group: np.sqrt(np.mean(error[:, [j for j, name in enumerate(names)
                                                 if joint_group(name) == group]] ** 2))
                for group in ("legs", "torso", "arms", "neck")}

    # Read at once (one window mixing both), and 30 ms at a time (windows of 3 ticks: some
    # with commands, some mixed, some without any, whose series has no commands at all).
    for data in (gather_plot_data(recording), gather_plot_data(recording, read_window_s=0.03)):
        joints = data.joints
        assert joints.total == 20 and set(joints.rms_by_group) == set(expected)
        for group, rms in expected.items():
            assert joints.rms_by_group[group] == pytest.approx(rms, rel=1e-12), group
        drawn = [names.index(name) for name in joints.names]
        assert np.isnan(joints.commanded[sorted(without)]).all()             # drawn as gaps
        np.testing.assert_array_equal(joints.commanded[with_commands], commands[with_commands][:, drawn])


def test_an_operator_recording_has_hands_and_episodes_only(tmp_path):
    recording = open_recording(operator_recording(tmp_path / "operator.mcap"))
    data = gather_plot_data(recording)
    assert data.panels == ("hands", "states")
    [series] = data.hands.values()
    assert list(data.hands) == ["references"] and len(series) == 100
    np.testing.assert_allclose(series.values[:, 3:], [[0.2, 0.1 * np.sin(k * 0.05), 0.9] for k in range(100)])
    assert [e.task for e in data.episodes] == ["wave"] and not data.watchdog


def test_gathering_needs_no_matplotlib(robot_recording):
    code = ("import sys\nfrom teleop.record import open_recording\nfrom teleop.record.plot import gather_plot_data\n"
            f"gather_plot_data(open_recording({str(robot_recording)!r}))\nprint('matplotlib' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True,
                         env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)), timeout=300)
    assert out.stdout.strip() == "False"


# ------------------------------------------------------------------ the command


def test_plot_writes_a_png_next_to_the_recording(robot_file, capsys):
    assert plot(robot_file) == 0, capsys.readouterr().err
    written = robot_file.with_suffix(".png")
    assert capsys.readouterr().out == f"{written}\n"
    assert_png_with_content(written)

    other = robot_file.parent / "figures" / "session.png"
    other.parent.mkdir()
    assert plot(robot_file, "-o", other) == 0
    assert_png_with_content(other)


def test_plot_does_not_overwrite_without_force(robot_file, capsys):
    existing = robot_file.with_suffix(".png")
    existing.write_bytes(b"someone's figure")
    assert plot(robot_file) == 1
    err = capsys.readouterr().err
    assert err.startswith("teleop dataset plot: error: ") and "--force" in err and err.count("\n") == 1
    # No -o was given: not "-o X exists".
    assert (f"{existing} exists (the plot's default file, next to the recording)" in err
            and "-o " + str(existing) not in err)
    assert existing.read_bytes() == b"someone's figure"
    assert plot(robot_file, "--force") == 0
    assert_png_with_content(existing)
    # Never over the recording itself, --force or not.
    assert plot(robot_file, "-o", robot_file, "--force") == 2     # not a .png: the command line's fault
    assert open_recording(robot_file).complete


def _text_file(folder: Path) -> Path:
    path = folder / "notes.mcap"
    path.write_text("not a recording")
    return path


def _empty_recording(folder: Path) -> Path:
    Recorder(folder / "empty.mcap", threaded=False).close()
    return folder / "empty.mcap"


def _camera_only(folder: Path) -> Path:
    """A recording with nothing the figure shows (a camera frame)."""
    with Recorder(folder / "camera.mcap", threaded=False) as rec:
        rec.log_camera_frame(CameraFrame(0.0, b"\xff\xd8 not much of a jpeg"), camera="left", log_time_ns=1)
    return folder / "camera.mcap"


@pytest.mark.parametrize("make, words", [
    (_text_file, "not an MCAP recording"),
    (lambda folder: folder, "is a folder: give one recording"),
    (_empty_recording, "holds no messages"),
    (_camera_only, "nothing to plot: no hand references, robot states"),
], ids=["not-a-recording", "folder", "empty", "nothing-plottable"])
def test_plot_errors_clearly_and_writes_nothing(tmp_path, capsys, make, words):
    target = make(tmp_path)
    assert plot(target, "-o", tmp_path / "out.png") == 1
    err = capsys.readouterr().err
    assert err.startswith("teleop dataset plot: error: ") and words in err and err.count("\n") == 1, err
    assert not (tmp_path / "out.png").exists()


def test_plot_refuses_outputs_it_cannot_write(robot_file, capsys):
    for output, words, code in ((robot_file.parent / "plot.svg", "give a .png file name", 2),   # a bad value
                                (robot_file.parent, "is a folder", 1),
                                (robot_file.parent / "missing" / "x.png", "no folder", 1)):
        assert plot(robot_file, "-o", output) == code
        assert words in capsys.readouterr().err


def test_plot_draws_the_window_asked_for(robot_file, capsys):
    recording = open_recording(robot_file)
    data = gather_plot_data(recording, start_s=0.5, end_s=1.5)
    times = data.joints.times
    assert times[0] == pytest.approx(0.5) and times[-1] == pytest.approx(1.5)   # --end is inclusive
    assert data.joints.total == 101 and (data.start_s, data.end_s) == (0.5, 1.5)
    for spans in data.watchdog.values():
        assert all(0.5 <= start and start + width <= 1.5 + PERIOD_S + 1e-9 for start, width in spans)

    out = robot_file.parent / "window.png"
    assert plot(robot_file, "--start", "0.5", "--end", "1.5", "-o", out) == 0
    assert_png_with_content(out)
    assert plot(robot_file, "--start", "2", "--end", "1", "-o", out, "--force") == 2   # options that cannot go together
    assert "--end (1.0 s) must not come before --start (2.0 s)" in capsys.readouterr().err
    assert plot(robot_file, "--start", "9", "-o", robot_file.parent / "late.png") == 1
    assert "nothing from --start 9 s on (the recording lasts 2.990 s)" in capsys.readouterr().err
    assert not (robot_file.parent / "late.png").exists()
    # One instant (it drew a figure of empty panels: every line a single point).
    for window in (("--end", "0"), ("--start", "1", "--end", "1")):
        assert plot(robot_file, *window, "-o", robot_file.parent / "instant.png") == 2   # a usage error
        assert "a plot shows a time span: give an --end after --start" in capsys.readouterr().err
    assert not (robot_file.parent / "instant.png").exists()
    with pytest.raises(SystemExit) as exc:                               # argparse, as `trim`
        plot(robot_file, "--start", "-1")
    assert exc.value.code == 2


def test_only_the_episodes_overlapping_the_window_are_gathered_clipped_to_it(robot_file, capsys):
    """Besides the recorded episode (all of the recording), one before the window, one after
    it and one that overlaps its end: the ones outside are left out, the others clipped."""
    for task, start, end in (("early", "0.0", "0.3"), ("late", "2.0", "2.9"), ("overlapping", "1.2", "2.0")):
        assert main(["dataset", "label", str(robot_file), "--task", task, "--start", start, "--end", end]) == 0
    capsys.readouterr()
    recording = open_recording(robot_file)
    assert [(e.number, e.task) for e in recording.episodes()] == [(0, "reach"), (1, "early"), (2, "late"),
                                                                  (3, "overlapping")]
    data = gather_plot_data(recording, start_s=0.5, end_s=1.5)
    assert [(e.number, e.task, e.start_s, e.end_s) for e in data.episodes] == [
        (0, "reach", 0.5, 1.5), (3, "overlapping", pytest.approx(1.2), 1.5)]
    # The whole recording: all four, as labelled.
    spans = {e.task: (e.start_s, e.end_s) for e in gather_plot_data(recording).episodes}
    assert spans == {"reach": (0.0, pytest.approx(recording.duration_s)), "early": (0.0, pytest.approx(0.3)),
                     "late": (pytest.approx(2.0), pytest.approx(2.9)), "overlapping": (pytest.approx(1.2), 2.0)}


def test_a_crashed_recording_is_plotted_as_far_as_it_is_intact(robot_file, capsys):
    crashed = robot_file.parent / "crashed.mcap"
    data = robot_file.read_bytes()
    crashed.write_bytes(data[: len(data) * 2 // 3])          # what a SIGKILL leaves: no summary, no footer
    recording = open_recording(crashed)
    assert not recording.complete
    gathered = gather_plot_data(recording)
    assert 0 < gathered.joints.total < TICKS and not gathered.complete

    assert plot(crashed) == 0, capsys.readouterr().err
    assert_png_with_content(crashed.with_suffix(".png"))


def test_episode_labels_are_fitted_to_their_bars():
    """A 100 s recording with one long episode and short ones: the short ones' labels ran
    over their neighbours' (all centred, all in full). Now: in full where the label fits,
    the number alone where that fits, nothing where not even that does."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from teleop.record.plot import EpisodeSpan, _draw_episodes

    episodes = [EpisodeSpan(0, "reach_forward", 0.0, 50.0), EpisodeSpan(1, "squat", 60.0, 63.0),
                EpisodeSpan(2, "wave", 70.0, 70.2), EpisodeSpan(3, "wave", 70.2, 70.4)]
    fig, ax = plt.subplots(figsize=(13, 2))
    try:
        ax.set_xlim(0, 100)
        _draw_episodes(ax, episodes, 0.0)
        labels = sorted(text.get_text() for text in ax.texts)
        renderer = fig.canvas.get_renderer()
        widths = {text.get_text(): text.get_window_extent(renderer).width for text in ax.texts}
        bar_px = {e.number: ax.transData.transform((e.end_s, 0))[0] - ax.transData.transform((e.start_s, 0))[0]
                  for e in episodes}
    finally:
        plt.close(fig)
    assert labels == ["#0 reach_forward", "#1"]
    assert widths["#0 reach_forward"] < bar_px[0] and widths["#1"] < bar_px[1]
