"""One ``teleop jog`` session: camera frames -> tag detection -> the jogging controller -> the
simulated robot (and the web viewer), on the virtual clock for video files or on the wall clock
for live sources; and the session's summary.
"""

from __future__ import annotations

import math
import queue
import sys
import threading
import time
from typing import TYPE_CHECKING

from teleop.stop_request import raise_if_stop_lost, stop_handled

if TYPE_CHECKING:
    import numpy as np

    from teleop.jog.session import TickReport


#: Seconds without a camera frame after which `teleop jog` says the camera stalled.
CAMERA_STALL_S = 2.0

#: The share of its starting height by which the robot's base may sink before the session
#: counts as one where the robot did not keep its balance (its summary says "SANK", an error
#: line and exit code 1 follow, as after a fall; a fall is a base below half its height, or
#: the robot touching anything but its soles). Measured with the test video: jogging within
#: reach moves the base by at most 4 mm; goals that go low and beyond reach (--scale 3 to 6)
#: make the whole-body controller bend the legs by 3 to 8 cm (at most 13 %), which is how it
#: reaches down; goals swept 1.6 m round (--scale 20) made it crouch by 26 cm (42 %), and
#: the controller's stale velocities after a collision stop (now fixed) by 29 cm (46 %), as
#: the robot "kept its balance". 25 % (15 cm on the iCub) is twice the deepest reaching
#: crouch measured, and half-way to a fall.
SINK_FRACTION = 0.25


def followed_tag(detections: list, followed_id: int | None) -> tuple:
    """(the detection of the tag followed or None, its id): the tag ``followed_id``, or the
    first one seen when no tag is followed yet. The detectors list several tags in no fixed
    order, so taking the first in each frame made the hand jump between tags."""
    if followed_id is None and detections:
        followed_id = detections[0].tag_id
    return next((d for d in detections if d.tag_id == followed_id), None), followed_id


class JogRun:
    """One ``teleop jog`` session: detector, jogging controller, simulated robot, viewer."""

    def __init__(self, args, mapping, explicit_offset: bool, calibration, detector, clutch_mode: str) -> None:
        from teleop.jog.session import JogController, JogSettings, SimulatedRobot
        from teleop.robot.model import RobotModel

        self.args = args
        self.calibration = calibration
        self.detector = detector
        self.explicit_offset = explicit_offset
        self.robot = RobotModel()
        self.settings = JogSettings(hand=args.hand, mode=args.mode, damping=args.damping, mapping=mapping,
                                    orientation=not args.no_orientation,
                                    collision_checks=not args.no_collision_checks)
        self.jog = JogController(self.robot, self.settings)
        self.sim = SimulatedRobot(self.robot, self.jog.q, control_dt=self.settings.control_dt)
        self.base_height0 = float(self.sim.sim.state().q[2])
        self.clutch = clutch_mode == "held"
        self.clutch_mode = clutch_mode
        self.clutch_toggled = False     # ever engaged with Enter (--clutch enter)
        self.view = None
        if args.view == "web":
            from teleop.jog.web import JogWebView

            try:
                self.view = JogWebView(self.robot, port=args.port).start()
            except OSError as exc:   # name the option, as `teleop operator` does
                raise OSError(f"--port {args.port}: {exc.strerror or exc}") from None
            print(f"jog viewer: {self.view.url}", file=sys.stderr)
        self.frames = 0
        self.detected = 0
        self.followed_id: int | None = args.tag_id    # the tag the hand follows (see _accept)
        self.detect_ms: list[float] = []
        self.aligned = explicit_offset or args.mode == "relative"
        self.hand_start = self.jog.hand_pose(self.jog.q).position.copy()
        self.sim_hand_start = self.sim.hand_position(args.hand).copy()
        self.min_base_height = self.base_height0
        self.fell = False
        self.fell_at: float | None = None     # control time of the fall [s]
        self.sank_at: float | None = None     # control time the base first sank by SINK_FRACTION [s]
        #: Why the session ended early (the camera stopped delivering frames, the detector
        #: failed), said after the summary; None if it did not.
        self.error: str | None = None
        self.unposed = 0                 # frames in which a tag was found but its pose could not be solved
        self.goal_start: np.ndarray | None = None
        self.last_report: TickReport | None = None
        self.sim_time = 0.0
        self.goal_ticks = 0              # control ticks with a hand goal
        self.orientation_ticks = 0       # ... whose goal orientation was the tag's
        self.hand_to_goal_max = 0.0      # [m], committed hand to goal after each tick's step
        self.reach_warned = False

    # -------------------------------------------------------------- per frame
    def measure_frame(self, t_frame: float, image) -> list:
        """Detect in one (H, W, 3) BGR frame taken at ``t_frame`` [s]; queue the measurement."""
        started = time.perf_counter()
        detections = self.detector.detect(image)
        self._accept(t_frame, detections, (time.perf_counter() - started) * 1e3, self._unposed_in_last())
        return detections

    def _unposed_in_last(self) -> int:
        """Tags found in the detector's last frame whose pose could not be solved."""
        return int(getattr(self.detector, "last_unposed", 0))

    def _accept(self, t_frame: float, detections: list, took_ms: float, unposed: int = 0) -> None:
        """A frame's detections become a measurement for the controller: of the tag being
        followed (the first one seen, unless --tag-id chose it), never of another tag in view:
        the detectors list several tags in no fixed order, and the hand would jump between them.
        ``unposed``: tags found in the frame whose pose could not be solved (counted when no
        tag was followed in it: the summary says why the tag went unseen)."""
        self.detect_ms.append(took_ms)
        self.frames += 1
        d, self.followed_id = followed_tag(detections, self.followed_id)
        if d is None and unposed:
            self.unposed += 1
        if d is not None:
            self.detected += 1
            if not self.aligned:
                # Absolute mode without --offset: the tag's pose when first seen means the
                # hand's pose now (no jump at start-up).
                self.jog.align_absolute(d.t)
                self.settings.mapping.tag_reference = d.R.copy()
                self.jog.reference_pending = True   # replaced by the first trusted orientation
                self.aligned = True
        self.jog.measure(t_frame, None if d is None else d.t, None if d is None else d.R)

    def control_tick(self, t: float) -> None:
        report = self.jog.tick(t, clutch=self.clutch)
        self.sim.send(report.q)
        self.last_report = report
        if report.goal is not None:
            if self.goal_start is None:
                self.goal_start = report.goal.position.copy()
            self.goal_ticks += 1
            self.orientation_ticks += report.orientation_followed
            if report.hand_to_goal_m is not None:   # measured on every tick with a goal
                self.hand_to_goal_max = max(self.hand_to_goal_max, report.hand_to_goal_m)
        if report.status.startswith("out of reach") and not self.reach_warned and report.hand_to_goal_m is not None:
            self._warn_out_of_reach(t, report.hand_to_goal_m)
        z = float(self.sim.sim.state().q[2])
        self.min_base_height = min(self.min_base_height, z)
        if (z < 0.5 * self.base_height0 or self.sim.sim.other_contacts() > 0) and not self.fell:
            self.fell, self.fell_at = True, t
        if z < (1.0 - SINK_FRACTION) * self.base_height0 and self.sank_at is None:
            self.sank_at = t

    def _warn_out_of_reach(self, t: float, hand_to_goal_m: float) -> None:
        """Said once, when it first happens (live, the operator can still react); the
        summary counts the ticks."""
        self.reach_warned = True
        if self.args.mode == "relative":
            remedy = "release the clutch, bring the tag back and engage it again"
        elif self.explicit_offset:   # the goal is where --offset and --scale put it
            remedy = "check --offset and --scale"
        else:
            remedy = "move the tag back towards where it was first seen"
        short = f"{hand_to_goal_m:.1f} m" if hand_to_goal_m >= 1.0 else f"{hand_to_goal_m * 1e3:.0f} mm"
        print(f"teleop jog: warning: at {t:.2f} s the hand's goal went out of the arm's reach: the hand stays "
              f"{short} short of it (more than {self.settings.reach_tolerance_m * 1e3:g} mm is 'out of reach' in "
              f"the summary's statuses); {remedy}", file=sys.stderr)

    def publish(self, image, detections) -> None:
        if self.view is None:
            return
        from teleop.jog.detection import draw_detections

        drawn = None if image is None else draw_detections(image, detections, self.calibration,
                                                           0.5 * self.args.tag_size)
        r = self.last_report
        stats = {"frames": self.frames, "detected": self.detected, "mode": self.args.mode,
                 "clutch": self.clutch, "status": r.status if r else "starting",
                 "detect_ms": self.detect_ms[-1] if self.detect_ms else None,
                 "orientation_valid": bool(r and r.filtered and r.filtered.orientation_valid),
                 "orientation_followed": bool(r and r.orientation_followed)}
        self.view.publish(drawn, self.sim.sim.state().q, self.jog.q, stats)

    # -------------------------------------------------------------- loops
    def run(self, camera, first, realtime: bool) -> dict:
        started = time.monotonic()
        if self.clutch_mode == "enter" and self.args.mode == "relative":
            print("relative mode: press Enter to engage / release the clutch", file=sys.stderr)
            threading.Thread(target=self._read_enter, daemon=True, name="jog-clutch").start()
        try:
            if realtime:
                t_end = self._run_realtime(camera, first)
            else:
                t_end = self._run_virtual(camera, first)
        except KeyboardInterrupt:
            stop_handled()
            # Stopped: a file played on the virtual clock got as far as the simulation did
            # (the wall time was reported as its "virtual time" before).
            t_end = time.monotonic() - started if realtime else self.sim_time
        return self.summary(t_end, time.monotonic() - started, realtime)

    def _read_enter(self) -> None:
        for _ in sys.stdin:
            self.clutch = not self.clutch
            self.clutch_toggled = True
            print(f"clutch {'engaged' if self.clutch else 'released'}", file=sys.stderr)
        # Standard input ended (not a terminal: </dev/null, a finished pipe): nothing can
        # toggle the clutch any more, which the run otherwise never said.
        print(f"teleop jog: warning: standard input ended: the clutch stays {'engaged' if self.clutch else 'released'} "
              "(--clutch held engages it for the whole run)", file=sys.stderr)

    def _run_virtual(self, camera, first) -> float:
        """Every frame of the file, frame k at t = k / fps; control ticks in between."""
        fps = camera.fps if camera.fps and camera.fps > 0 else 30.0
        dt = self.settings.control_dt
        duration = self.args.duration
        k, tick, item = 0, 0, first
        while item is not None:
            raise_if_stop_lost()
            t_frame = k / fps
            if duration is not None and t_frame >= duration:
                break
            detections = self.measure_frame(t_frame, item[1])
            while tick * dt < (k + 1) / fps and (duration is None or tick * dt < duration):
                self.control_tick(tick * dt)
                tick += 1
                self.sim_time += dt
            if self.fell:
                break
            self.publish(item[1], detections)
            k += 1
            item = camera.read()
        camera.close()
        return tick * dt

    def _run_realtime(self, camera, first) -> float:
        """Wall-clock loop: camera thread -> detection thread -> 100 Hz control loop."""
        from teleop.jog.camera import LatestFrameGrabber

        # Control and measurement times are both wall-clock times since t0, so the filter's
        # ages and the velocity extrapolation are right even when the simulation (about
        # 10 ms of pybullet per 10 ms control period on this iCub) cannot keep up: the
        # robot then lags, which the summary's real-time factor reports.
        t0 = time.monotonic()
        grabber = LatestFrameGrabber(camera).start()
        measurements: queue.Queue = queue.Queue()
        stop = threading.Event()

        def detect_loop() -> None:
            # (``first``, read while the robot was being loaded, is stale: not used.)
            last = 0
            while not stop.is_set():
                latest = grabber.latest()
                if latest is None or latest[0] == last:
                    if grabber.finished or grabber.error is not None:
                        measurements.put(None)
                        return
                    time.sleep(0.001)
                    continue
                number, t_frame, image = latest
                last = number
                measurements.put((t_frame - t0, image))

        # Detecting in the control thread would stall the 100 Hz loop for a whole detection
        # (~10 ms); a worker thread does it instead (OpenCV and the AprilTag C library
        # release the GIL while they work).
        detected: queue.Queue = queue.Queue()

        def detection_worker() -> None:
            while not stop.is_set():
                try:
                    item = measurements.get(timeout=0.1)
                except queue.Empty:  # look at ``stop`` again
                    continue
                if item is None:
                    detected.put(None)
                    return
                t_frame, image = item
                # Only the newest frame matters: skip frames that queued up meanwhile.
                while not measurements.empty():
                    newer = measurements.get()
                    if newer is None:
                        detected.put(None)
                        return
                    t_frame, image = newer
                started = time.perf_counter()
                try:
                    detections = self.detector.detect(image)
                except Exception as exc:  # noqa: BLE001 - handed to the control loop, which stops on it
                    # A dead worker would leave the loop holding the target forever and
                    # blaming the camera ("no frame for 2 s"): say what failed instead.
                    detected.put(exc)
                    return
                detected.put((t_frame, image, detections, (time.perf_counter() - started) * 1e3,
                              self._unposed_in_last()))

        threads = [threading.Thread(target=detect_loop, daemon=True, name="jog-frames"),
                   threading.Thread(target=detection_worker, daemon=True, name="jog-detect")]
        for thread in threads:
            thread.start()
        dt = self.settings.control_dt
        tick = 0
        finished = False
        t = 0.0
        last_frame_t, stalled = 0.0, False
        try:
            while not finished and not self.fell:
                raise_if_stop_lost()
                t = time.monotonic() - t0
                if self.args.duration is not None and t >= self.args.duration:
                    break
                if grabber.error is not None:
                    # The session ends here, and its summary is still said (before, this
                    # discarded it): a webcam unplugged, a stream gone.
                    self.error = str(grabber.error)
                    break
                while True:
                    try:
                        item = detected.get_nowait()
                    except queue.Empty:
                        break
                    if item is None:
                        finished = True
                        break
                    if isinstance(item, Exception):
                        self.error = f"tag detection failed: {type(item).__name__}: {item}"
                        finished = True
                        break
                    t_frame, image, detections, took_ms, unposed = item
                    self._consume(t_frame, image, detections, took_ms, unposed)
                    last_frame_t = t
                # A stream that stops sending raises nothing for OpenCV's 30 s: the target
                # is held meanwhile (the filter's tag-lost rule); say so, and when it resumes.
                if not stalled and t - last_frame_t > CAMERA_STALL_S:
                    stalled = True
                    print(f"teleop jog: the camera has delivered no frame for {CAMERA_STALL_S:g} s: holding the "
                          "hand's target", file=sys.stderr)
                elif stalled and t - last_frame_t <= CAMERA_STALL_S:
                    stalled = False
                    print("teleop jog: the camera delivers frames again", file=sys.stderr)
                self.control_tick(t)
                tick += 1
                self.sim_time += dt
                # Next tick on the next control period boundary (none skipped, none doubled).
                time.sleep(max(0.0, t0 + (math.floor(t / dt) + 1) * dt - time.monotonic()))
        finally:
            stop.set()
            grabber.stop()
        if self.error is None and grabber.error is not None:
            # (The frame and detection threads may have passed the end on before the check
            # above saw the error.)
            self.error = str(grabber.error)
        return t

    def _consume(self, t_frame: float, image, detections, took_ms: float, unposed: int = 0) -> None:
        """A detection made in the worker thread enters the controller (control thread)."""
        self._accept(t_frame, detections, took_ms, unposed)
        self.publish(image, detections)

    # -------------------------------------------------------------- results
    def summary(self, t_end: float, wall_s: float, realtime: bool) -> dict:
        import numpy as np

        hand = self.jog.hand_pose(self.jog.q).position
        sim_hand = self.sim.hand_position(self.args.hand)
        goal = self.jog.goal.position if self.jog.goal is not None else None
        r = self.last_report

        def mm(v) -> float | None:
            return None if v is None else float(np.linalg.norm(v) * 1e3)

        return {
            "camera": str(self.args.camera), "mode": self.args.mode, "realtime": realtime,
            "detector": self.detector.backend, "duration_s": float(t_end), "wall_s": float(wall_s),
            "simulated_s": float(self.sim_time),
            # Simulated time per wall-clock time of the loop (< 1: the simulation lagged).
            "realtime_factor": float(self.sim_time / t_end) if realtime and t_end > 0 else None,
            "frames": self.frames, "frames_with_tag": self.detected,
            "detect_ms_mean": float(np.mean(self.detect_ms)) if self.detect_ms else None,
            "hand_start": self.hand_start.tolist(), "hand_end": hand.tolist(),
            "sim_hand_start": self.sim_hand_start.tolist(), "sim_hand_end": sim_hand.tolist(),
            "goal_start": None if self.goal_start is None else self.goal_start.tolist(),
            "goal_end": None if goal is None else goal.tolist(),
            "hand_moved_mm": mm(sim_hand - self.sim_hand_start),
            "goal_moved_mm": None if goal is None or self.goal_start is None else mm(goal - self.goal_start),
            "hand_to_goal_mm": None if goal is None else mm(sim_hand - goal),
            # The committed hand's distance to the goal after each tick's step, at most, and
            # how far short of its goal a hand may stay before the tick is "out of reach".
            "hand_to_goal_max_mm": self.hand_to_goal_max * 1e3 if self.goal_ticks else None,
            "reach_tolerance_mm": self.settings.reach_tolerance_m * 1e3,
            "statuses": dict(self.jog.counts), "last_status": r.status if r else None,
            # What the hand did (False throughout with --no-orientation), and the filter's
            # orientation noise gate at the end (open or not, whether or not it was followed).
            "orientation_followed": bool(r and r.orientation_followed),
            "orientation_ticks": self.orientation_ticks, "goal_ticks": self.goal_ticks,
            "orientation_enabled": self.settings.orientation,
            "orientation_valid": bool(r and r.filtered and r.filtered.orientation_valid),
            "base_height_start_m": self.base_height0, "base_height_min_m": self.min_base_height,
            "fell": bool(self.fell), "fell_at_s": self.fell_at,
            # The base sank by more than SINK_FRACTION of its height (and when, first).
            "sank": self.sank_at is not None, "sank_at_s": self.sank_at, "sink_fraction": SINK_FRACTION,
            # Frames in which a tag was found but its pose could not be solved (none followed).
            "frames_tag_unposed": self.unposed,
            "error": self.error,
            "clutch_never_engaged": bool(self.args.mode == "relative" and self.clutch_mode == "enter"
                                         and not self.clutch_toggled and not self.clutch),
        }

    def close(self) -> None:
        if self.view is not None:
            self.view.stop()
        self.jog.close()
        self.sim.close()


def format_summary(s: dict) -> str:
    def f(v, fmt="{:.1f}"):
        return "-" if v is None else fmt.format(v)

    if not s["orientation_enabled"]:
        orientation = "no (--no-orientation)"
    elif not s["goal_ticks"] and s.get("clutch_never_engaged"):
        orientation = "no (the clutch was never engaged)"
    elif not s["goal_ticks"] and not s["frames_with_tag"] and s.get("frames_tag_unposed"):
        orientation = "no (the tag's pose could not be solved)"
    elif not s["goal_ticks"] and not s["frames_with_tag"]:
        orientation = "no (no tag seen)"
    elif not s["goal_ticks"] and s["mode"] == "relative":
        # Seen, but the clutch was never engaged while it was (released again before a tick,
        # or engaged only while the tag was out of view): "no tag seen" contradicted the
        # line above it.
        orientation = "no (the clutch was not engaged while the tag was seen)"
    elif not s["goal_ticks"]:
        orientation = "no (the hand was given no goal)"
    elif not s["orientation_ticks"]:
        orientation = "no (the tag's orientation never passed its noise gate)"
    else:
        orientation = f"yes, in {s['orientation_ticks']} of {s['goal_ticks']} control ticks"
    lines = [f"teleop jog: {s['camera']} ({s['mode']}, detector {s['detector']}, "
             f"{'wall-clock' if s['realtime'] else 'virtual'} time {s['duration_s']:.2f} s, {s['wall_s']:.1f} s wall"
             + (f", simulation real-time factor {s['realtime_factor']:.2f}" if s['realtime_factor'] else "") + ")",
             f"frames {s['frames']}, tag seen in {s['frames_with_tag']}"
             + (f", found but its pose not solved in {s['frames_tag_unposed']}" if s.get("frames_tag_unposed") else "")
             + f", detection {f(s['detect_ms_mean'], '{:.1f}')} ms/frame",
             f"goal moved {f(s['goal_moved_mm'])} mm, simulated hand moved {f(s['hand_moved_mm'])} mm, "
             f"hand-to-goal at the end {f(s['hand_to_goal_mm'])} mm (commanded hand: at most "
             f"{f(s['hand_to_goal_max_mm'])} mm; out of reach beyond {s['reach_tolerance_mm']:g} mm)",
             f"statuses {', '.join(f'{name} {n}' for name, n in s['statuses'].items())}; "
             f"orientation followed: {orientation}",
             balance_line(s)]
    return "\n".join(lines)


def balance_line(s: dict) -> str:
    """The summary's last line: fell, sank (by more than ``sink_fraction`` of the base's
    starting height) or kept its balance, with the base's height and how far it went down."""
    start, low = s["base_height_start_m"], s["base_height_min_m"]
    heights = f"base height {start:.3f} m, min {low:.3f} m"
    if s["fell"]:
        return f"robot FELL ({heights})"
    drop = start - low
    if s.get("sank"):
        return (f"robot stayed up but SANK: its base went {drop * 100:.0f} cm down ({heights}; "
                f"{drop / start:.0%} of its height, more than {s['sink_fraction']:.0%})")
    if drop >= 0.01:   # said: bending the legs to reach down is allowed, but not hidden
        return f"robot kept its balance ({heights}: {drop * 100:.1f} cm down, {drop / start:.0%} of its height)"
    return f"robot kept its balance ({heights})"
