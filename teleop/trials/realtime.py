"""``teleop trial --realtime``: the real stations through the real impairment proxy, in wall time.

The virtual-clock trial (:mod:`teleop.trials.delay_trial`) plays the compensator alone on a
modelled link. This one runs what a user runs, on loopback:

    operator station ──UDP──▶ NetemProxy (τ_f ~ N(RTT/2, 2/15 RTT/2)) ──▶ robot station
          ▲                                                              (its own process:
          └── video  ◀── NetemProxy (τ_b = RTT/2 constant) ◀── eye camera  pybullet + QP)

* the robot station (:class:`teleop.stations.robot_station.RobotStation`: compensator,
  watchdog, ZMP pre-filter, whole-body QP, simulated iCub, low-poly eye camera) runs in a
  child process, paced to the wall clock at its control rate;
* two :class:`teleop.net.netem.NetemProxy` threads impair the command link (forward
  jitter, backward constant) and the video (backward constant);
* the operator station (:class:`teleop.stations.operator_station.OperatorStation`) replays
  the test take's references at 100 Hz, receives the video through its jitter buffer and
  reports τ̂_b, which the compensator uses, exactly as in a live session.

Scoring is the virtual trial's (:class:`teleop.trials.delay_trial.TakeResult`): the
references the robot station executed at each tick, against what the operator does when
that tick's video reaches them: τ̂_b later, the age of the displayed frames the operator
reported (the proxy's RTT/2 plus the render, encode, transport and jitter-buffer time),
the same delay the compensator predicts for; RTT/2 if no report arrived. Both processes read
``time.monotonic``, one clock on one machine, so no offset enters the score.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import signal
import tempfile
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path

import numpy as np

from retarget.references import ReferenceTrajectory, RobotReferences
from teleop.net.delay import THESIS_JITTER_RATIO, DirectionModel
from teleop.trials.delay_trial import TakeResult, pad_take, score_pair

#: Compensation states that count as engaged (blend-in finished).
ENGAGED = "predicting"
#: The state of the first tick out of pass-through: its task is the one compensation began with.
BLENDING_IN = "blend_in"
#: The watchdog state of the robot station before any reference arrived (it holds its home pose).
WAITING = "WAITING"


@dataclass
class RealtimeSettings:
    """Settings of one real-time run.

    Attributes:
        lead_in: rest at the first pose before the motion [s] (see delay_trial.pad_take), at
            least: the stations need longer to settle at longer round trips
            (:func:`link_settle_s`), and the take rests until then.
        tail: time the robot keeps running after the last reference was sent [s], on top
            of the forward delay's mean + 4σ (RTT/2 · (1 + 4 jitter_ratio)).
        video_hz: eye-camera rate [Hz] (the video carries τ̂_b back to the robot).
        jitter_ratio: forward jitter std as a fraction of the one-way delay.
        loss: forward packet loss probability.
        loss_burst: mean run of consecutive forward losses [packets]; None = independent.
        startup_timeout: longest wait for the robot process to come up [s].
        robot: the robot description (``teleop trial --robot``: a name or a .toml path) that
            the stations simulate and retarget for, the one the takes were retargeted to
            (before, --robot was read for the takes and the stations ran the iCub).
    """

    lead_in: float = 1.0
    tail: float = 0.5
    video_hz: float = 10.0
    jitter_ratio: float = THESIS_JITTER_RATIO
    loss: float = 0.0
    loss_burst: float | None = None
    startup_timeout: float = 60.0
    robot: str = "icub"



@contextlib.contextmanager
def _ctrl_c_left_to_this_process():
    """Start children with SIGINT blocked: Ctrl-C reaches the terminal's whole process
    group, and a spawned child still importing printed a traceback (``spawn_main``) beside
    our "interrupted". This process stops the child itself (``stop_child``). The child
    inherits the blocked mask across exec; here a SIGINT that came meanwhile is delivered
    when the mask is restored, not lost."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)

def link_settle_s(rtt: float, jitter_ratio: float = THESIS_JITTER_RATIO) -> float:
    """Time [s] from the operator's first packet until the robot station can compensate: the
    first references reach it after RTT/2 (+ 4σ of jitter), its first clock exchange returns
    a round trip later (until then it passes the delayed references through: on two hosts
    nothing else is meaningful), and the operator's first video report, sent at 2 Hz once
    frames arrive, needs half a second more. Before, the take's motion began after the
    virtual trial's 1 s of rest, and at 1.5 s the robot could only begin compensating at
    2.25 s, 0.3 s after it had recognised the motion: a later engagement and a shorter scored
    window than the virtual trial's on the same take (Xsens p1: engaged at 2.78 s vs 2.47 s,
    no-compensation window error 1.86 vs 2.71 cm), which made the two modes' tables
    incomparable."""
    return 1.5 * rtt + 4.0 * jitter_ratio * rtt / 2.0 + 0.5


def _robot_process(secret: bytes, parent: Connection, video_to: tuple[str, int], library_path: str | None,
                   out_path: str, video_hz: float, robot_description: str = "icub") -> None:
    """Child process: one robot station on loopback, simulating ``robot_description``;
    records to ``out_path``.

    ``parent`` is this process's end of a pipe to the trial: the station's port goes up it once
    the station listens, and the stop (None) comes down it. The pipe also says when the trial
    is gone: the kernel closes the trial's end however it ends (SIGKILL, a hang-up, a crash),
    and the next tick reads EOF; the station then closes its sockets and ends without a record
    (nobody would read it). Killed trials used to leave this process ticking forever.

    Why a pipe and not the alternatives: ``os.getppid()`` changing is Unix-only, and
    ``multiprocessing.parent_process().is_alive()`` reads the same kind of EOF on
    multiprocessing's own pipe but still needs a stop channel. And nothing here waits on a
    lock the trial shares (an ``mp.Event``'s ``is_set``/``set`` or an ``mp.Value`` take a
    semaphore): a trial killed while holding one would leave this process blocked on it
    forever, at start-up or in the loop. The EOF needs every copy of the trial's end closed:
    a process forked from the trial during the take would keep it open; the trial forks none
    (and the pipe's descriptors are not inherited by programs it starts).
    """
    from promp.library import TaskLibrary
    from teleop.blas_threads import limit_blas_threads
    from teleop.net.auth import video_mac
    from teleop.net.protocol import PacketCodec
    from teleop.net.udp import UdpEndpoint
    from teleop.robot.model import RobotModel
    from teleop.sim.camera import CameraIntrinsics
    from teleop.sim.lowpoly import LowPolyEyeCamera
    from teleop.sim.scene import add_to_simulation
    from teleop.sim.simulator import Simulation
    from teleop.stations.robot_station import RobotStation, RobotStationConfig
    from teleop.video.sender import VideoSender

    limit_blas_threads()      # a spawned process: not through teleop's command line
    library = TaskLibrary.load(library_path) if library_path else None
    # Sockets and the simulation are closed however the station ends (stop, EOF, an error).
    with contextlib.ExitStack() as resources:
        endpoint = UdpEndpoint(PacketCodec(secret), ("127.0.0.1", 0))
        resources.callback(endpoint.close)
        robot = RobotModel(robot_description)
        sim = resources.enter_context(Simulation(robot, visual=False))
        scene = add_to_simulation(sim, static=True)
        camera = LowPolyEyeCamera(sim, robot, "left_eye", CameraIntrinsics(160, 120), scene=scene)
        sender = VideoSender(video_to, authenticate=video_mac(secret)[0])   # as `teleop robot` sends it
        resources.callback(sender.close)

        def send_video(image: np.ndarray, t: float) -> None:
            sender.send_image(image[:, :, ::-1], t)

        station = RobotStation(endpoint, robot, sim, library,
                               RobotStationConfig(video_hz=video_hz, compensation=library is not None),
                               video_out=send_video, render=camera.render)
        station.name_scene(scene)
        station.keep_records = True
        try:
            parent.send(endpoint.address[1])      # ready
        except OSError:                           # the trial died while this process started
            return
        start = time.monotonic()
        k = 0
        tasks: list[str] = []   # the compensator's recognised task at each tick ("" = none), like records
        while not parent.poll():                  # the stop, or EOF: the trial is gone
            station.tick()
            output = station.last_compensator_output
            assert output is not None   # tick() has just set it
            tasks.append(output.task or "")
            k += 1
            delay = start + k * station.dt - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        try:
            parent.recv()
        except (EOFError, OSError):   # EOF; or a reset, when the trial died before reading the port
            return
        write_robot_record(out_path, station.records, tasks, station.tau_b, k, time.monotonic() - start)


class _ReferenceReplay:
    """Operator input that replays a take's robot references at their own times (wall clock)."""

    def __init__(self, take: ReferenceTrajectory, start_wall: float) -> None:
        self.take = take
        self.start_wall = start_wall
        self.t0 = float(take.times[0])

    @property
    def finished(self) -> bool:
        return time.monotonic() - self.start_wall > self.take.duration

    def poll(self, now: float | None = None):
        now = time.monotonic() if now is None else now
        s = min(max(now - self.start_wall, 0.0), self.take.duration)
        flat = self.take.interpolate(np.array([s + self.t0]))[0]
        valid = None if self.take.valid is None else self.take.valid.copy()
        return now, RobotReferences.from_flat(now, flat, valid=valid)


def run_take_realtime(take: ReferenceTrajectory, rtt: float, library_path: Path | None, *, seed: int = 0,
                      settings: RealtimeSettings = RealtimeSettings()) -> TakeResult:
    """Play one take through the real stations and proxies on loopback (see module doc)."""
    from teleop.net.netem import NetemProxy
    from teleop.net.auth import video_mac
    from teleop.net.protocol import PacketCodec
    from teleop.net.secret import session_secret
    from teleop.net.udp import UdpEndpoint
    from teleop.robot.model import RobotModel
    from teleop.robot.target import robot_target
    from teleop.stations.operator_station import OperatorStation, VideoPath

    one_way = rtt / 2.0
    # The virtual trial's rest before the motion, and this run's longer one (link_settle_s):
    # the whole-take error is scored from where the virtual trial's take would start, or the
    # extra seconds of rest (near-zero error) would dilute it.
    virtual_duration = pad_take(take, settings.lead_in, rtt).duration
    take = pad_take(take, max(settings.lead_in, link_settle_s(rtt, settings.jitter_ratio)), rtt)
    extra_rest = take.duration - virtual_duration
    secret = session_secret()
    ctx = mp.get_context("spawn")
    # Every proxy, thread, socket and the child process are undone however the take ends
    # (Ctrl-C, a child that dies): an interrupted take used to leave a proxy thread running,
    # its ports bound, and the other thread crashing on its closed selector. If this process
    # is killed outright, the child ends by itself (see _robot_process).
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as resources:
        video = VideoPath(_wall_clock(), 0.0, ("127.0.0.1", 0), verify=video_mac(secret)[1])
        resources.callback(video.close)
        proxies: list = []
        threads: list[threading.Thread] = []

        def stop_proxies() -> None:
            """Stop the proxies' loops, wait for their threads, then close them."""
            for proxy in proxies:
                proxy.stop()
            for thread in threads:
                if thread.ident is not None:   # started
                    thread.join(2.0)
            for proxy in proxies:
                proxy.close()

        resources.callback(stop_proxies)
        video_proxy = NetemProxy(("127.0.0.1", 0), video.receiver.address,
                                 forward=DirectionModel.constant(one_way), backward=DirectionModel.constant(one_way),
                                 seed=seed)
        proxies.append(video_proxy)
        out_path = str(Path(tmp) / "robot.npz")
        conn, child_conn = ctx.Pipe()
        child = ctx.Process(target=_robot_process, daemon=True,
                            args=(secret, child_conn, video_proxy.listen_address,
                                  str(library_path) if library_path else None, out_path, settings.video_hz,
                                  settings.robot))
        with _ctrl_c_left_to_this_process():
            child.start()
        child_conn.close()    # the child's end is the child's alone: its death then reads as EOF here

        def stop_child() -> None:
            with contextlib.suppress(OSError):    # the child is gone already
                conn.send(None)
            if child.is_alive():
                child.terminate()
                child.join(5.0)
            conn.close()

        resources.callback(stop_child)
        # The child sends its port once it listens; its death ends the wait too (EOF).
        if not conn.poll(settings.startup_timeout):
            raise RuntimeError("the robot station process did not start in time")
        try:
            port = conn.recv()
        except EOFError:
            child.join(5.0)
            raise RuntimeError(f"the robot station process died on start-up (exit code {child.exitcode})") from None
        command_proxy = NetemProxy(("127.0.0.1", 0), ("127.0.0.1", port),
                                   forward=DirectionModel(delay=one_way, jitter=settings.jitter_ratio * one_way,
                                                          loss=settings.loss, loss_burst=settings.loss_burst),
                                   backward=DirectionModel.constant(one_way), seed=seed)
        proxies.append(command_proxy)
        threads += [threading.Thread(target=p.run, daemon=True) for p in proxies]
        for th in threads:
            th.start()
        endpoint = UdpEndpoint(PacketCodec(secret), ("127.0.0.1", 0))
        resources.callback(endpoint.close)
        start_wall = time.monotonic()
        source = _ReferenceReplay(take, start_wall)
        operator = OperatorStation(endpoint, command_proxy.listen_address, source,
                                   robot_target(RobotModel(settings.robot)), video)
        end = take.duration + one_way * (1 + 4 * settings.jitter_ratio) + settings.tail
        k = 0
        while time.monotonic() - start_wall < end:
            video.poll_socket()
            if not source.finished:
                operator.tick()
            else:
                video.play()
            k += 1
            delay = start_wall + k * 0.01 - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        with contextlib.suppress(OSError):    # a child that died is reported below
            conn.send(None)                   # stop: the child writes its record and ends
        child.join(30.0)
        if child.exitcode != 0:
            raise RuntimeError(f"the robot station process failed (exit code {child.exitcode})")
        rec = read_robot_record(out_path)
    return take_result(rec, take, rtt, library_path is not None, start_wall, whole_from=extra_rest)


def write_robot_record(path: str | Path, records: list, tasks: list[str], tau_b: float, ticks: int,
                       wall: float) -> None:
    """Write the robot process's record: per tick (``records``, the station's TickRecords, and
    ``tasks``, the compensator's recognised task or "") the time [s, time.monotonic], the
    executed references, the compensation and watchdog states and the task; then τ̂_b [s],
    the number of ticks and the wall time they took [s]."""
    np.savez(path, t=np.array([r.t for r in records]), executed=np.array([r.executed for r in records]),
             states=np.array([r.compensation for r in records]), watchdog=np.array([r.watchdog for r in records]),
             tasks=np.array(tasks, dtype=str), tau_b=np.array(tau_b), ticks=np.array(ticks), wall=np.array(wall))


def read_robot_record(path: str | Path) -> dict:
    """The robot process's record (see ``_robot_process``) as plain arrays: read whole and the
    file closed here, so the caller may delete its folder right after."""
    with np.load(path) as rec:
        return {"t": rec["t"], "executed": rec["executed"], "states": [str(s) for s in rec["states"]],
                "watchdog": [str(s) for s in rec["watchdog"]],
                "tasks": [str(s) for s in rec["tasks"]], "tau_b": float(rec["tau_b"]),
                "ticks": int(rec["ticks"]), "wall": float(rec["wall"])}


def take_result(rec: dict, take: ReferenceTrajectory, rtt: float, compensated: bool,
                start_wall: float, whole_from: float = 0.0) -> TakeResult:
    """Score one run's record (:func:`read_robot_record`) of the (padded) ``take`` played from
    ``start_wall`` [s, time.monotonic], as the virtual trial scores its runs; the task
    compensation began with is the recognised task at the first tick out of pass-through.
    ``whole_from`` [s after ``start_wall``] is where the virtual trial's padded take starts
    (this run rests longer first): the result's times count from there, as the virtual
    trial's do, so that ``engaged_at`` (``engage_after_s``, takes.csv's ``engaged_at_s``)
    and the take plots compare with the virtual run's (before, they counted the extra rest:
    a synthetic squat at 1.5 s engaged "at 4.81 s" against the virtual run's 2.58 s), and
    the whole-take errors count from there too (the ticks of the extra rest are at
    negative times).

    The operator sees a tick's video τ̂_b after it (``rec["tau_b"]``, measured from the
    operator's reports: the link's RTT/2 plus ~30 ms of rendering, coding and buffering on
    loopback); before, the score took RTT/2 and so judged the compensated run, which aims
    at the measured τ̂_b, against a moment ~30 ms too early. A station that never had a
    report records 0: RTT/2 is used then."""
    measured = float(rec["tau_b"])
    one_way = measured if np.isfinite(measured) and measured > 0.0 else rtt / 2.0
    wall = rec["t"] - start_wall        # [s] since the replay began
    times = wall - whole_from           # [s] since the virtual trial's padded take would begin
    states = rec["states"]
    t0 = float(take.times[0])
    truth = take.interpolate(np.clip(wall + one_way, 0.0, take.duration) + t0)
    engaged = [t for t, w, s in zip(times, wall, states) if s == ENGAGED and w >= 0]
    began = [task for w, s, task in zip(wall, states, rec["tasks"]) if s == BLENDING_IN and w >= 0]
    # Until the first reference arrives the station holds its home pose: nothing of the
    # operator's is executed yet: no output (NaN). (Those ticks fall in the extra rest before
    # ``whole_from``; the virtual trial shows the operator's first pose there, see run_take.)
    executed = np.array(rec["executed"], dtype=float)
    executed[[w == WAITING for w in rec["watchdog"]]] = np.nan
    result = TakeResult(rtt, compensated, engaged[0] if engaged else None, times=times,
                        executed=executed, truth=truth, states=states, take_duration=take.duration - whole_from,
                        engaged_task=(began[0] or None) if began else None, label=take.label)
    result.whole = result.errors_after(0.0)
    result.window = result.errors_after(result.engaged_at)
    result.robot_tick_hz = rec["ticks"] / rec["wall"]
    result.tau_b_scored = one_way
    return result


def _wall_clock():
    from teleop.clock import WallClock

    return WallClock()


def run_realtime_trial(args: argparse.Namespace):
    """``teleop trial --realtime``: the sweep of the virtual trial, in wall time over loopback.

    Returns (results {rtt: [(comp, nocomp)]}, summary, labels, test takes), as the virtual
    trial has them: ``teleop trial`` writes the same files from either.
    """
    from teleop.progress import progress_bar

    from teleop.takes import same_take
    from teleop.train_cli import _learn
    from teleop.trial_cli import read_trial_takes
    from teleop.trials.sweep import summarise

    labels, rtts, train, test = read_trial_takes(args)
    # (--out is made when the results are written, all at once: an interrupted run leaves no
    # empty folder.)
    settings = RealtimeSettings(loss=args.loss, loss_burst=args.loss_burst, robot=str(args.robot))
    libraries: list[Path] = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, t in enumerate(test):
            if args.leave_one_out or i == 0:
                path = Path(tmp) / f"library_{i}.npz"
                _learn([o for o in train if not args.leave_one_out or not same_take(o.path, t.path)]).save(path)
                libraries.append(path)
            else:
                libraries.append(libraries[0])
        results: dict[float, list] = {rtt: [] for rtt in rtts}
        rates = []
        jobs = [(rtt, i) for rtt in rtts for i in range(len(test))]
        for rtt, i in progress_bar(jobs, desc="real-time trials", leave=True):
            comp = run_take_realtime(test[i].trajectory, rtt, libraries[i], seed=args.seed * 100_003 + i,
                                     settings=settings)
            nocomp = run_take_realtime(test[i].trajectory, rtt, None, seed=args.seed * 100_003 + i,
                                       settings=settings)
            results[rtt].append(score_pair(comp, nocomp))
            rates += [comp.robot_tick_hz, nocomp.robot_tick_hz]
    summary = summarise(results, labels)
    summary["mode"] = "realtime"
    summary["robot_tick_hz_min"] = float(min(rates)) if rates else None
    # The backward delay each round trip was scored with (mean over its runs): RTT/2 plus
    # the video path's own time, which the reader should see next to the errors.
    for label, pairs in zip(labels, results.values()):
        delays = [r.tau_b_scored for pair in pairs for r in pair]
        summary["rtt"][label]["video_delay_s"] = float(np.mean(delays)) if delays else None
    return results, summary, labels, test
