"""The main job on the embedded default: the whole loop, in one process, on a virtual clock.

operator station (synthetic operator of a performer never trained on → retargeting →
references) → delayed link (thesis delay model) → robot station (ProMP compensation → ZMP
correction → whole-body QP → simulated iCub) → eye camera → JPEG → delayed video link →
jitter buffer → "display". The ProMP library is learned at start from the product's own
synthetic demonstrations in ``datasets/synthetic``. The same session is run twice, with and
without compensation, so the summary shows what compensation buys.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from retarget.references import HAND_INDICES
from teleop.json_safe import dumps
from teleop.progress import progress_bar
from teleop.sim.simulator import ACTUATOR_ENV

DATASET = Path(__file__).resolve().parents[1] / "datasets" / "synthetic"


@dataclass
class DemoSettings:
    """Settings of the demo.

    Attributes:
        duration: simulated session length [s], at least: a motion under way then is
            finished, and the session ends once the operator has rested for a round trip
            plus ``settle`` (so the robot, a round trip behind, is at rest too), or at
            ``duration + max_overrun``.
        rtt: round-trip delay [s] (τ_f ~ N(rtt/2, 2/15 rtt/2), τ_b = rtt/2).
        seed: seed of the operator and of the link.
        performer: synthetic performer id (≥ 3: not in the training data).
        video_hz: eye-camera rate [Hz].
        camera_size: (width, height) of the eye camera [px].
        loss: packet loss probability of the command link (operator → robot) and of the
            video (robot → operator).
        loss_burst: mean run of consecutive losses [packets] on both (Gilbert model, see
            :class:`teleop.net.delay.DirectionModel`); None = independent losses.
        jitter: forward jitter std [s]; None = the thesis's model (2/15 of the one-way delay).
        robot_clock_offset: the robot station's clock minus the operator's [s], as between
            two hosts (the stations measure it over the link).
    """

    duration: float = 20.0
    rtt: float = 1.5
    seed: int = 7
    performer: int = 5
    video_hz: float = 5.0
    camera_size: tuple[int, int] = (320, 240)
    loss: float = 0.0
    loss_burst: float | None = None
    jitter: float | None = None
    robot_clock_offset: float = 0.0
    dataset: Path = field(default_factory=lambda: DATASET)
    settle: float = 0.5
    max_overrun: float = 15.0


@dataclass
class SessionLog:
    """Time series of one session (all (K, ...) arrays at the control ticks)."""

    times: list = field(default_factory=list)
    operator: list = field(default_factory=list)      # (20,) operator's current references
    executed: list = field(default_factory=list)      # (20,) references the robot executed
    hands: list = field(default_factory=list)         # (2, 3) measured hands
    cop: list = field(default_factory=list)           # (2,)
    states: list = field(default_factory=list)
    frames: list = field(default_factory=list)        # (display time, capture time, jpeg bytes)
    telemetry: dict = field(default_factory=dict)
    fell: bool = False
    actuator_on: bool = False   # the simulation ran an actuator model (teleop.sim.actuator)
    max_foot_slip_mm: float = 0.0
    min_cop_margin_mm: float = float("inf")
    max_joint_speed_ratio: float = 0.0    # max over ticks and joints of |measured velocity| / limit
    max_command_speed_ratio: float = 0.0  # the same for the commanded joint velocity (QP output)
    nonfinite_ticks: int = 0              # ticks whose executed references held a NaN or inf
    scene_contact_s: float = 0.0          # time the robot touched the scene (pushed joints)


def train_library(dataset: Path):
    """Learn the task library from the product's own synthetic demonstrations."""
    from teleop.prescient.training import learn_library
    from teleop.robot.model import RobotModel
    from teleop.robot.target import robot_target
    from teleop.takes import load_takes

    takes = load_takes(dataset, robot_target(RobotModel()), progress=False)
    return learn_library([t.trajectory for t in takes]), len(takes)


def _robot_figures(log: SessionLog) -> dict:
    """What one session's robot did: fell, foot slip [mm], the CoP's smallest margin to the
    edges of the feet [mm] (negative: outside), fastest joint speed / its limit."""
    return {"fell": log.fell, "max_foot_slip_mm": log.max_foot_slip_mm, "min_cop_margin_mm": log.min_cop_margin_mm,
            "max_joint_speed_ratio": log.max_joint_speed_ratio, "scene_contact_s": log.scene_contact_s}


def run_session(settings: DemoSettings, library, *, with_video: bool, progress: bool) -> SessionLog:
    """One session of the full loop on a virtual clock."""
    from retarget.polygon import contains, project
    from teleop.clock import VirtualClock
    from teleop.inputs.synthetic import SyntheticOperator
    from teleop.net.delay import DirectionModel, LinkModel, THESIS_JITTER_RATIO, VirtualLink
    from teleop.net.protocol import PacketCodec
    from teleop.net.secret import session_secret
    from teleop.net.virtual import connect_virtual
    from teleop.robot.model import RobotModel
    from teleop.robot.target import robot_target
    from teleop.sim.camera import CameraIntrinsics
    from teleop.sim.lowpoly import LowPolyEyeCamera
    from teleop.sim.scene import add_to_simulation
    from teleop.sim.simulator import Simulation
    from teleop.stations.operator_station import OperatorStation, VideoPath
    from teleop.stations.robot_station import RobotStation, RobotStationConfig
    from teleop.video import wire
    from teleop.video.codec import JpegCodec

    one_way = settings.rtt / 2.0
    clock = VirtualClock(0.0)
    jitter = THESIS_JITTER_RATIO * one_way if settings.jitter is None else settings.jitter
    lossy: dict[str, Any] = dict(loss=settings.loss, loss_burst=settings.loss_burst)
    link = LinkModel(forward=DirectionModel(delay=one_way, jitter=jitter, **lossy),
                     backward=DirectionModel.constant(one_way))
    operator_ep, robot_ep = connect_virtual(PacketCodec(session_secret()), link, clock, seed=settings.seed,
                                            robot_clock_offset=settings.robot_clock_offset)
    robot = RobotModel()
    log = SessionLog()
    video_link = VirtualLink(DirectionModel.constant(one_way, **lossy), seed=settings.seed, direction="video")
    codec = JpegCodec()
    frames_sent_s: list[float] = []   # when each frame was sent (virtual clock) [s]; its index is its id

    def on_display(frame, now):
        log.frames.append((now, frame.timing.capture_s, frame.payload))

    video = VideoPath(clock, on_display=on_display) if with_video else None

    def send_video(image: np.ndarray, capture_s: float) -> None:
        payload = codec.encode(image[:, :, ::-1])  # the codec takes OpenCV's BGR order
        frame_id = len(frames_sent_s)
        frames_sent_s.append(clock.now())
        for datagram in wire.packetize(payload, stream_id=0, frame_id=frame_id, codec=1, capture_s=capture_s,
                                       available_s=capture_s, encode_end_s=capture_s, send_clock=robot_ep.clock.now,
                                       fec_group=wire.DEFAULT_FEC_GROUP):   # as `teleop robot` sends it
            video_link.push(clock.now(), datagram)

    with Simulation(robot, visual=False) as sim, \
            SyntheticOperator(seed=settings.seed, performer=settings.performer, clock=clock.now) as source:
        log.actuator_on = sim.actuator is not None
        scene = add_to_simulation(sim, static=True)
        camera = LowPolyEyeCamera(sim, robot, "left_eye", CameraIntrinsics(*settings.camera_size),
                                  scene=scene) if with_video else None
        config = RobotStationConfig(video_hz=settings.video_hz if with_video else 0.0, compensation=library is not None)
        station = RobotStation(robot_ep, robot, sim, library, config,
                               video_out=send_video if with_video else None,
                               render=camera.render if camera is not None else None)
        station.name_scene(scene)
        operator = OperatorStation(operator_ep, robot_ep.address, source, robot_target(robot), video)
        polygon = station.support_polygon
        soles0 = {s: sim.link_position(robot.description.frames[f"{s}_sole"]) for s in ("left", "right")}
        n_ticks = int(round(settings.duration / station.dt))
        max_ticks = int(round((settings.duration + settings.max_overrun) / station.dt))
        last_moving = 0.0    # operator time of the last tick the operator was in a motion
        prev_command = None
        desc = "session" + (" (compensated)" if library else " (delayed)")
        bar = progress_bar(total=n_ticks, desc=desc, enabled=progress)
        for k in range(max_ticks):
            clock.set(k * station.dt)
            operator.tick()     # starts the operator's stream at the first tick
            if source.task_at(clock.now()) != "rest":
                last_moving = clock.now()
            elif k >= n_ticks and clock.now() - last_moving >= settings.rtt + settings.settle:
                break
            if k == n_ticks:    # past --duration: no new task; say why the session goes on
                source.wind_down()
                bar.set_description(desc + ", finishing the motion under way")
            bar.update(1)
            if video is not None:
                for delivery in video_link.pop(clock.now()):
                    video.handle(delivery.data, delivery.t_deliver)
            record = station.tick()
            if operator.current is None:
                continue
            log.times.append(record.t)
            log.operator.append(operator.current.to_flat())
            log.executed.append(record.executed)
            log.hands.append(record.measured_hands)
            log.cop.append(record.cop)
            log.states.append(record.compensation)
            if not np.all(np.isfinite(record.executed)):
                log.nonfinite_ticks += 1
            command = station.last_joint_command
            if prev_command is not None:
                command_speed = np.abs(command - prev_command) / station.dt / robot.limits.velocity
                log.max_command_speed_ratio = max(log.max_command_speed_ratio, float(np.max(command_speed)))
            prev_command = command
            for side, p0 in soles0.items():
                # Horizontal: the compliant floor lets the soles sink ~2 mm, which is not slip.
                slip = np.linalg.norm((sim.link_position(robot.description.frames[f"{side}_sole"]) - p0)[:2])
                log.max_foot_slip_mm = max(log.max_foot_slip_mm, 1000.0 * float(slip))
            if np.all(np.isfinite(record.cop)):
                inside = contains(polygon, record.cop)
                margin = _distance_to_edges(polygon, record.cop) if inside else \
                    -float(np.linalg.norm(project(polygon, record.cop) - record.cop))
                log.min_cop_margin_mm = min(log.min_cop_margin_mm, 1000.0 * margin)
        bar.close()
        log.telemetry = station.telemetry()
        log.telemetry["commands_lost"] = operator_ep.datagrams_lost()
        # The station watches the measured joint speeds and falls every tick.
        log.max_joint_speed_ratio = station.max_joint_speed_ratio
        log.scene_contact_s = station.scene_contact_ticks * station.dt
        log.fell = station.fell_at is not None
        if video is not None:
            # Frames sent in the last one-way delay were still on their way when the session ended.
            arrived_by_end = sum(t <= clock.now() - one_way for t in frames_sent_s)
            log.telemetry["video"] = {"frames_due": arrived_by_end, "frames_displayed": video.displayed,
                                      "datagrams_lost": video_link.stats.lost, **video.buffer.report()}
            video.close()
    return log


def _distance_to_edges(polygon: np.ndarray, p: np.ndarray) -> float:
    edges = np.roll(polygon, -1, axis=0) - polygon
    normals = np.stack([edges[:, 1], -edges[:, 0]], axis=1) / np.linalg.norm(edges, axis=1, keepdims=True)
    return float(np.min(np.abs(np.sum((p - polygon) * normals, axis=1))))


def seen_error_cm(log: SessionLog, tau_b: float, predicting: np.ndarray | None = None) -> dict:
    """What the operator sees (the robot's measured hands, τ_b later) vs what they do.

    The frame captured at robot time t is seen at t + τ_b, when the operator's hands are
    at operator(t + τ_b). Per-axis RMS averaged over axes and hands [cm], over the ticks
    where the operator moves (hands faster than 5 cm/s), where delay matters, and over all
    ticks. ``predicting``: (K,) booleans, the ticks where the compensated session's robot
    executed predictions (state "predicting"), for ``predicting_cm``: the error over them,
    which is what compensation changes (``teleop trial``'s window); the rest of a motion,
    before the robot has seen enough of it to recognise it, is a round trip late either way.
    """
    t = np.asarray(log.times)
    operator = np.asarray(log.operator)
    hands_ref = operator[:, list(HAND_INDICES)]
    seen_at = t + tau_b
    keep = seen_at <= t[-1]
    truth = np.stack([np.interp(seen_at[keep], t, hands_ref[:, j]) for j in range(6)], axis=1)
    measured = np.asarray(log.hands).reshape(len(t), 6)[keep]
    speed = np.linalg.norm(np.gradient(hands_ref, t, axis=0), axis=1)[keep]
    moving = speed > 0.05
    err = measured - truth

    def rms_cm(rows: np.ndarray) -> float | None:
        return 100.0 * float(np.mean(np.sqrt(np.mean(err[rows] ** 2, axis=0)))) if rows.any() else None

    out = {"moving_cm": rms_cm(moving), "all_cm": rms_cm(np.ones(len(err), dtype=bool))}
    if predicting is not None:
        out["predicting_cm"] = rms_cm(np.asarray(predicting, dtype=bool)[keep])
    return out


def frames_in_motion(log: SessionLog, count: int = 6, min_speed: float = 0.05) -> list:
    """``count`` of the session's displayed frames, spread evenly over those captured while
    the operator's hands moved faster than ``min_speed`` [m/s] (all frames if none was):
    the frames worth looking at. The last ones, kept before, showed the robot at rest after
    the session, its eye on the horizon. Items as in ``log.frames``."""
    frames = sorted(log.frames, key=lambda frame: frame[1])
    if len(log.times) >= 2 and frames:
        t = np.asarray(log.times)
        hands = np.asarray(log.operator)[:, list(HAND_INDICES)]
        speed = np.max(np.linalg.norm(np.gradient(hands, t, axis=0).reshape(len(t), 2, 3), axis=2), axis=1)
        moving = [frame for frame in frames if np.interp(frame[1], t, speed) > min_speed]
        frames = moving or frames
    if len(frames) <= count:
        return frames
    return [frames[int(i)] for i in np.linspace(0, len(frames) - 1, count).round()]


def plot_session(logs: dict[str, SessionLog], tau_b: float, path: Path, headline: str = "") -> Path:
    """demo.png: the operator's right hand x and z [cm] against operator time [s], and the
    robot's as the operator sees it (τ_b later) in each session; ``headline`` under the title."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 1, figsize=(9, 5.5), dpi=110, sharex=True)
    first = next(iter(logs.values()))
    t = np.asarray(first.times)
    operator = np.asarray(first.operator)
    for ax, j, name in ((axes[0], 6, "right hand x"), (axes[1], 8, "right hand z")):
        ax.plot(t, 100 * operator[:, j], "k-", lw=2, label="operator (what they do)")
        for label, log in logs.items():
            tt = np.asarray(log.times)
            seen = np.asarray(log.hands)[:, 1, j - 6]
            ax.plot(tt + tau_b, 100 * seen, label=f"robot as seen by the operator, {label}")
        ax.set_ylabel(f"{name} [cm]")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    axes[1].set_xlabel("operator time [s]")
    fig.suptitle("Prescient teleoperation demo: the delayed video vs the operator's present motion"
                 + (f"\n{headline}" if headline else ""), fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def run_demo(out_dir: Path, settings: DemoSettings | None = None, progress: bool = True) -> dict:
    """Run the demo, write its outputs into ``out_dir`` and return the summary."""
    from teleop.prescient.compensator import CompensationState

    settings = settings or DemoSettings()
    out_dir = Path(out_dir)
    started = time.perf_counter()
    library, n_demos = train_library(settings.dataset)
    logs = {"compensated": run_session(settings, library, with_video=True, progress=progress),
            "delayed": run_session(settings, None, with_video=False, progress=progress)}
    tau_b = settings.rtt / 2.0
    comp, delayed = logs["compensated"], logs["delayed"]
    frames = {out_dir / "frames" / f"frame_{i}_captured_{captured:.2f}s_shown_{shown:.2f}s.jpg": jpeg
              for i, (shown, captured, jpeg) in enumerate(frames_in_motion(comp))}
    # The frames of an earlier run into the same folder have other names (their times): out
    # with them, or the folder mixes two sessions' "last frames".
    stale = [old for old in (out_dir / "frames").glob("frame_*_captured_*s_shown_*s.jpg") if old not in frames]
    # Both sessions run on the same virtual clock and operator: tick k is the same moment.
    predicting = np.array([state == CompensationState.PREDICTING.value for state in comp.states])
    same_ticks = len(delayed.times) == len(comp.times)
    seen_comp = seen_error_cm(comp, tau_b, predicting)
    seen_delayed = seen_error_cm(delayed, tau_b, predicting if same_ticks else None)
    headline = f"round trip {settings.rtt:g} s"
    if seen_comp["moving_cm"] is not None and seen_delayed["moving_cm"] is not None:   # None: it never moved
        headline += (f": the hands seen are off by {seen_comp['moving_cm']:.1f} cm with compensation, "
                     f"{seen_delayed['moving_cm']:.1f} cm without (RMS while moving)")
    states = {s: comp.states.count(s) for s in sorted(set(comp.states))}
    summary = {
        "round_trip_s": settings.rtt,
        "link": {"loss": settings.loss, "loss_burst": settings.loss_burst,
                 "commands_lost": comp.telemetry.get("commands_lost")},
        "duration_s": round(comp.times[-1] - comp.times[0], 2) if comp.times else 0.0,
        "library": {"tasks": library.labels, "demonstrations": n_demos},
        "robot": {"fell": comp.fell or delayed.fell,
                  # Whether the simulation ran an actuator model, and whose (it changes the physics).
                  "actuator": _actuator_label(comp.actuator_on),
                  "max_foot_slip_mm": max(comp.max_foot_slip_mm, delayed.max_foot_slip_mm),
                  "min_cop_margin_mm": min(comp.min_cop_margin_mm, delayed.min_cop_margin_mm),
                  "max_joint_speed_ratio": max(comp.max_joint_speed_ratio, delayed.max_joint_speed_ratio),
                  "scene_contact_s": max(comp.scene_contact_s, delayed.scene_contact_s),
                  # The worst of the two runs above; each run's own here, to say which it was.
                  "sessions": {"compensated": _robot_figures(comp), "delayed": _robot_figures(delayed)}},
        "seen_hand_error_cm": {"compensated": seen_comp, "delayed": seen_delayed},
        "compensation_ticks": states,
        "controller_timing_ms": comp.telemetry.get("controller_timing_ms"),
        "tau_f_mean_s": comp.telemetry.get("tau_f_mean_s"),
        "tau_b_reported_s": comp.telemetry.get("tau_b_s"),
        "video": {k: v for k, v in comp.telemetry.get("video", {}).items() if not isinstance(v, (list, dict))},
        "wall_time_s": time.perf_counter() - started,
        "outputs": {"summary": str(out_dir / "summary.json"), "plot": str(out_dir / "demo.png"),
                    "frames": str(out_dir / "frames")},
    }
    # As one set (teleop.output_set): the frames, demo.png and summary.json were written one
    # after another in place, the old frames deleted first, so a Ctrl-C or a full disk while
    # writing left a cut summary.json, or new frames beside an earlier run's summary and plot.
    # The folders too are made only now: an interrupted demo leaves none behind.
    from teleop.output_set import write_outputs_together

    writers: dict[Path, Any] = {path: (lambda tmp, jpeg=jpeg: tmp.write_bytes(jpeg)) for path, jpeg in frames.items()}
    writers[out_dir / "demo.png"] = lambda tmp: plot_session(logs, tau_b, tmp, headline)
    writers[out_dir / "summary.json"] = lambda tmp: tmp.write_text(dumps(summary, indent=1, default=_json_default))
    write_outputs_together(writers, remove=stale)
    return summary


def _actuator_label(on: bool) -> str:
    """Whether the simulation ran an actuator model, and whose parameters: "off", "on (FILE)"
    for $TELEOP_SIM_ACTUATOR=FILE, else the robot description's (it said "on (on)")."""
    if not on:
        return "off"
    chosen = os.environ.get(ACTUATOR_ENV, "").strip()
    if chosen and chosen.lower() not in ("on", "1", "true"):
        return f"on ({chosen})"
    return "on (the robot description's [sim.actuator])"


def _json_default(value):
    if isinstance(value, (np.floating, np.integer)):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return str(value)
