"""The robot station: delayed references in, whole-body control of the robot, video out.

One :meth:`RobotStation.tick` per control period (100 Hz by default):

1. take what the network delivered: references (→ compensator and watchdog), clock pings
   and pongs, the operator's video report (→ τ̂_b). The operator is whoever sent the first
   authenticated references; another sender takes its place only once it has been silent
   for ``stale_timeout`` (a restarted operator station), with a fresh clock estimate and
   compensator. The operator's own newer references from a new address (a restarted proxy
   between the stations, a NAT that rebound its port) only move it there. Authenticated
   references that no operator can mean (a hand kilometres away, a 50 rad torso, a sample
   time far from its packet's send time) are refused and counted (:meth:`RobotStation.implausibility`);
2. the compensator decides the references to execute now (prediction at t + τ̂_b, or the
   delayed references passed through). Until the first clock exchange has measured the
   operator's clock the delayed references pass through: on two hosts neither τ_f nor
   τ̂_b means anything before that;
3. the stale-command watchdog overrides them: it holds the last executed references when
   commands stop arriving and blends back smoothly when they resume;
4. the ZMP/LIP correction moves the CoM reference so that its ZMP stays in the support
   polygon (Eq. 2.15 run as a pure pre-filter on its own CoM state, not the measured CoM:
   see ``zmp_correction`` below);
5. the whole-body QP computes the joint command; the simulation advances;
6. at the video rate the eye camera renders a frame for the operator.

The station works with any endpoint that has ``send``/``poll``/``clock`` (UDP on loopback
or a network, or the virtual link of trials and the demo): the code path is the same.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pinocchio as pin

from promp.library import TaskLibrary
from retarget.envelope import ReferenceEnvelope
from retarget.references import CARTESIAN_INDICES, POSTURE_INDICES, SIGNAL_SLICES, RobotReferences
from retarget.zmp import ZmpPrefilter
from teleop.control.controller import SolveStatus
from teleop.control.tracker import ReferenceTracker, references_from_configuration
from teleop.net.clock_sync import ClockOffsetEstimator, ClockSyncClient, answer_ping
from teleop.net.protocol import Feedback, PacketType, VideoReport, format_address, sample_time_problem
from teleop.net.watchdog import HOLDING_STATES, StaleCommandWatchdog, WatchdogState
from teleop.prescient.compensator import (CompensationState, CompensatorConfig, CompensatorOutput,
                                          PrescientCompensator)
from teleop.robot.model import NQ_BASE, NV_BASE, RobotModel
from teleop.robot.target import robot_target
from teleop.sim.simulator import Simulation
from teleop.sim.target_spline import TickInterpolator
from teleop.stations.smoothing import CriticallyDampedFilter

#: The CoM ground projection (x, y) in the flat references, which the ZMP pre-filter corrects.
_COM_XY = SIGNAL_SLICES["com_xy"]


def _negated(offset: float | None) -> float:
    """-offset, or NaN (the protocol's "not known yet") for None."""
    return float("nan") if offset is None else -float(offset)


#: Compensation state codes carried by FEEDBACK packets.
STATE_CODES = {state: i for i, state in enumerate(CompensationState)}


@dataclass
class RobotStationConfig:
    """Settings of the robot station.

    Attributes:
        control_hz: whole-body controller rate [Hz].
        physics_steps: simulation steps per control tick (1 kHz physics at 100 Hz control).
        video_hz: eye-camera frame rate [Hz] (0: no video).
        stale_timeout: after this long without a command arriving the robot holds its pose
            [s] (a gap between arrivals, not a command's age: with seconds of delay every
            command is old, and its age is the compensator's business); an operator that
            has been silent this long may also be replaced by a new one (a restarted
            operator station, on another port).
        resume_duration: shortest blend back to commands after a stale period [s] (longer when
            the commands are far from the held pose: :func:`resume_duration_for`).
        resume_after: newer commands in a row (each within ``stale_timeout`` of the one
            before) that end a hold (see :class:`teleop.net.watchdog.StaleCommandWatchdog`).
            With 1, over a jittery link (300 ms, 20 % loss) the last command an operator
            sent before it stopped or was killed often arrived alone, after the hold had
            begun: the robot said "the operator's commands are back", blended towards that
            stale pose and held again 0.5 s later (at the end of two of three 30 s review
            sessions). 3 delays a true resume by 20 ms.
        compensation: predict the operator's commands when a task library is given.
        default_tau_b: backward delay [s] assumed until the operator reports one.
        feedback_hz: rate of FEEDBACK packets to the operator [Hz].
        feedforward: differentiate the references into feed-forward task velocities.
        zmp_correction: bound the ZMP of the CoM reference with Eq. 2.15 run as a pure
            pre-filter (retarget.zmp.ZmpPrefilter). The thesis leaves open which CoM state
            the correction starts from; feeding back the measured CoM (or the controller's
            commanded CoM) made 3 of 3 (2 of 3) twelve-second synthetic-operator sessions
            fall, a positive feedback loop around a position-controlled robot; as a
            pre-filter, 0 of 3.
        zmp_margin: distance kept between the ZMP of the corrected reference and the edges
            of the support polygon [m]; the thin iCub soles rock on their edges well before
            the ZMP reaches them, so the margin is wider than the controller's CoM margin.
        smoothing_hz: cut-off of the reference filter (see teleop/stations/smoothing.py);
            0 disables it.
        clock_ping_interval: time between the clock exchanges with the operator [s].
        clock_window: exchanges the clock offset's median is taken over. Over the thesis
            link (σ = 100 ms of jitter one way) one exchange reads the offset ±50 ms; the
            median of 16 exchanges 0.5 s apart was still 14 ms off (RMS over 40 seeded
            40 s links; at worst 34 ms), an error τ_f and τ̂_b carry with opposite signs (a
            README two-proxy session: τ̂_b 0.780 s for a video delay of 0.765 s, τ_f
            0.739 s for 0.750 s). 128 exchanges 0.25 s apart: 5 ms (at worst 14 ms), and
            the 32 s window still follows a 50 ppm clock drift within 1 ms; a clock that
            steps (NTP correcting a host) is followed after half the window, 16 s, and
            exactly once the whole window has turned over (~100 ms off at +18 s, ~15 ms
            at +28 s after a 0.5 s step: tests/test_net_adversarial.py).
    """

    control_hz: float = 100.0
    physics_steps: int = 10
    video_hz: float = 10.0
    stale_timeout: float = 0.5
    resume_duration: float = 1.0
    resume_after: int = 3
    zmp_correction: bool = True
    compensation: bool = True
    default_tau_b: float = 0.0
    feedback_hz: float = 10.0
    feedforward: bool = True
    smoothing_hz: float = 4.0
    zmp_margin: float = 0.03
    clock_ping_interval: float = 0.25
    clock_window: int = 128
    compensator: CompensatorConfig = field(default_factory=CompensatorConfig)

    def __post_init__(self) -> None:
        # The compensator refuses a negative or NaN τ̂_b at every tick: say it once, here.
        if not (math.isfinite(self.default_tau_b) and self.default_tau_b >= 0.0):
            raise ValueError(f"default_tau_b must be a finite delay >= 0 [s], got {self.default_tau_b!r}")
        # A zero rate divided by zero in the station's first tick (the control period, the
        # FEEDBACK interval), not where the value was given.
        for name in ("control_hz", "feedback_hz", "stale_timeout", "clock_ping_interval"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0.0):
                raise ValueError(f"{name} must be finite and > 0, got {value!r}")
        if not (math.isfinite(self.video_hz) and self.video_hz >= 0.0):
            raise ValueError(f"video_hz must be finite and >= 0 (0: no video), got {self.video_hz!r}")
        if self.physics_steps < 1 or self.clock_window < 1:
            raise ValueError(f"physics_steps and clock_window must be >= 1, got {self.physics_steps}, "
                             f"{self.clock_window}")
        if self.resume_after < 1:
            raise ValueError(f"resume_after must be >= 1, got {self.resume_after}")


#: Peak speeds of the resume blend, Cartesian references [m/s] and postures [rad/s]: about
#: a third of the hands' and the trunk's velocity limits, so that the robot, which tracks
#: a command at its limit with some overshoot, never rushes back to a far pose.
RESUME_PEAK_SPEED_M_S = 0.3
RESUME_PEAK_SPEED_RAD_S = 0.6
#: Peak of the minimum-jerk profile's derivative (10u^3 - 15u^4 + 6u^5 at u = 1/2).
_MINIMUM_JERK_PEAK = 1.875


def clock_offset_estimator(config: RobotStationConfig) -> ClockOffsetEstimator:
    """The robot's estimate of the operator's clock offset: the median over
    ``config.clock_window`` exchanges. Not NTP's min-RTT filter, which reads 88 ms off
    under the thesis's one-way jitter (teleop/net/clock_sync.py)."""
    return ClockOffsetEstimator(window=config.clock_window, method="median")


def resume_duration_for(hold: np.ndarray, commanded: np.ndarray, minimum: float) -> float:
    """Length [s] of the minimum-jerk blend from the held references to the commanded ones,
    both (20,) [m, rad]: at least ``minimum``, and long enough that no reference moves faster
    than the resume peak speeds. Resuming at a fixed 1 s towards an operator caught in the
    middle of picking from the floor swung the torso 1 rad and dropped the waist 25 cm in a
    second; the robot ended on its toe edges for 190 ms (a real-network trial)."""
    gap = np.abs(np.asarray(commanded, float) - np.asarray(hold, float))
    gap = np.where(np.isfinite(gap), gap, 0.0)
    cartesian = float(gap[list(CARTESIAN_INDICES)].max()) / RESUME_PEAK_SPEED_M_S
    postures = float(gap[list(POSTURE_INDICES)].max()) / RESUME_PEAK_SPEED_RAD_S
    return max(float(minimum), _MINIMUM_JERK_PEAK * max(cartesian, postures))


@dataclass
class TickRecord:
    """What happened in one tick (for telemetry, the recorder and the demo's plots)."""

    t: float
    executed: np.ndarray          # (20,) references sent to the controller
    delayed: np.ndarray | None    # (20,) newest delayed references received
    measured_hands: np.ndarray    # (2, 3) measured left/right hand positions [m]
    measured_com: np.ndarray      # (3,) measured CoM [m]
    cop: np.ndarray               # (2,) measured centre of pressure [m]
    compensation: str
    watchdog: str
    status: str


class RobotStation:
    """See the module docstring.

    Args:
        endpoint: network endpoint towards the operator.
        robot: robot model.
        sim: the simulated robot (its clock must be the endpoint's clock in lock-step use).
        library: ProMP task library for compensation (None: pass-through).
        config: station settings.
        video_out: called with (image (H, W, 3) RGB uint8, capture time) at the video rate.
        render: called with the measured configuration q to produce the eye image.
    """

    def __init__(self, endpoint, robot: RobotModel, sim: Simulation, library: TaskLibrary | None = None,
                 config: RobotStationConfig | None = None,
                 video_out: Callable[[np.ndarray, float], object] | None = None,
                 render: Callable[[np.ndarray], np.ndarray] | None = None) -> None:
        self.endpoint = endpoint
        self.robot = robot
        self.sim = sim
        self.config = config or RobotStationConfig()
        cfg = self.config
        self.dt = 1.0 / cfg.control_hz
        self.compensator = PrescientCompensator(library if cfg.compensation else None, cfg.compensator)
        self.watchdog = StaleCommandWatchdog(endpoint.clock, timeout=cfg.stale_timeout,
                                             resume_duration=cfg.resume_duration, resume_after=cfg.resume_after)
        self.tracker = ReferenceTracker(robot, dt=self.dt, feedforward=cfg.feedforward)
        self.zmp = ZmpPrefilter(dt=self.dt, margin=cfg.zmp_margin) if cfg.zmp_correction else None
        self.smoother = CriticallyDampedFilter(cfg.smoothing_hz, self.dt) if cfg.smoothing_hz > 0 else None
        self.video_out, self.render = video_out, render
        self.clock_estimator = clock_offset_estimator(self.config)
        self.clock_sync: ClockSyncClient | None = None
        self.operator: tuple | None = None
        self._operator_source: int | None = None   # the operator's packet source id
        self.operators_attached = 0
        #: Where the operator's commands came from before they came from a new address, and
        #: that address, as "host:port" each (None: they never moved). See _move_operator.
        self.operator_moved: tuple[str, str] | None = None
        self.operator_moves = 0
        self.foreign_references = 0    # references from another sender while the operator is active
        #: The first sender refused while another operator was active, as "host:port" (None: none yet).
        self.first_foreign_sender: str | None = None
        self.implausible_references = 0   # references refused by :meth:`implausibility`
        #: Control ticks by the whole-body controller's status (SolveStatus values: "ok",
        #: "relaxed", "held", "rejected_target").
        self.controller_status_ticks: dict[str, int] = {}
        #: The first tick the controller held its command (no solve, or references it refused
        #: as out of the workspace), as "t = 12.30 s: <the controller's message>" (None: never).
        self.first_controller_hold: str | None = None
        #: The first of them, as "host:port: what is implausible" (None: none yet).
        self.first_implausible: str | None = None
        self._coalesced_earlier = 0       # coalesced_references of the compensators of earlier operators
        self._last_ref_arrival = -np.inf
        #: The references taken as the operator's commands in the last tick, as (references,
        #: arrival time on the station's clock [s]), in arrival order: what a recording holds
        #: as delivered (refused and implausible packets are not commands).
        self.taken_references: list[tuple[RobotReferences, float]] = []
        # The operator's last video report, arrival on its clock minus capture on ours, plus
        # its jitter buffer [s]: τ̂_b once the clock offset is known (see tau_b).
        self._video_age_raw: float | None = None
        self._data = robot.model.createData()
        # Double support with fixed feet: the support polygon of the stance it starts in.
        self.support_polygon, self._com_height = robot.double_support(self.tracker.q)
        # On a model of its own: robot_target moves its robot to the home posture.
        self.envelope = ReferenceEnvelope.for_target(robot_target(RobotModel(robot.description)))
        if self.zmp is not None:
            self._settle_at_home()
        self.home = references_from_configuration(robot, self.tracker.q).to_flat()
        self.hold = self.home.copy()
        self.last_executed = self.home.copy()
        self.nonfinite_commands = 0    # ticks whose command held NaN / inf and was replaced by a hold
        self._next_video = -np.inf     # any clock origin (a virtual clock may be negative)
        self._next_feedback = -np.inf
        self._last_seq = 0
        self._last_ref_time = float("nan")
        self._delays: deque[float] = deque(maxlen=100)
        self.records: list[TickRecord] = []
        self.keep_records = False
        self.last_compensator_output: CompensatorOutput | None = None
        sim.reset(self.tracker.q)
        # Commands reach the 1 kHz servos as a quadratic B-spline (continuous velocity).
        self._joint_targets = TickInterpolator(self.tracker.q[NQ_BASE:])
        self._last_joint_command = self.tracker.q[NQ_BASE:].copy()
        # What the robot did, for the status lines and the robustness checks: the largest
        # measured |joint velocity| / its limit, and when a body part other than the feet
        # first touched the ground (a fall), on the station clock.
        self.max_joint_speed_ratio = 0.0
        self.fell_at: float | None = None
        # Contacts with the scene (a hand on the table): they push the joints beyond the
        # speeds the controller commands, which would otherwise look like a controller fault.
        self.scene_contact_ticks = 0
        self.first_scene_contact: str | None = None      # "r_hand touched the table 6.27 s into the session"
        self._first_tick_at: float | None = None          # station clock [s] of the first tick
        self._scene_names: dict[int, str] = {}

    def name_scene(self, scene) -> None:
        """Name the bodies of ``scene`` (a :class:`teleop.sim.scene.SimulatedScene`) in what
        the station says of the robot's contacts with them (else "body N")."""
        self._scene_names = {body: obj.name for body, obj in zip(scene.body_ids, scene.objects)}

    def _note_scene_contacts(self, now: float) -> None:
        touching = self.sim.touching()
        if not touching:
            return
        self.scene_contact_ticks += 1
        if self.first_scene_contact is None:
            body, link = touching[0]
            # Counted from the first tick: a real-time station's clock is the host's
            # monotonic one, whose reading (hours since boot) locates nothing for a user.
            since = now - (self._first_tick_at if self._first_tick_at is not None else now)
            self.first_scene_contact = (f"{link} touched the {self._scene_names.get(body, f'body {body}')} "
                                        f"{since:.2f} s into the session")

    def _settle_at_home(self, max_ticks: int = 500, tolerance: float = 1e-6) -> None:
        """Start from the posture the controller holds at home, not from the description's.

        The home posture's CoM lies 8.7 mm behind the region the ZMP pre-filter keeps the
        CoM reference in (the support polygon shrunk by its com_margin), so the first ticks
        pulled the CoM forward: the robot leant over, the wrists swung 19 deg at 0.58 of
        their speed limit and the CoP swung by 8 cm as every station started. Here the
        controller alone (no simulation) tracks the pre-filtered home references until its
        joints stop moving (< ``tolerance`` rad per tick, at most ``max_ticks``), and
        restarts there; the simulation is reset to that posture."""
        home = references_from_configuration(self.robot, self.tracker.q).to_flat()
        settling = ZmpPrefilter(dt=self.dt, margin=self.config.zmp_margin)
        waist = SIGNAL_SLICES["waist_height"].start
        q = self.tracker.q.copy()
        for k in range(max_ticks):
            target = home.copy()
            target[_COM_XY] = settling.step(home[_COM_XY], self._com_height, self.support_polygon)
            target[waist] = settling.waist_height(home[waist], self.tracker.waist_range)
            q_next, *_ = self.tracker.step(RobotReferences.from_flat(k * self.dt, target))
            moved = float(np.max(np.abs(q_next[NQ_BASE:] - q[NQ_BASE:])))
            q = q_next.copy()
            if moved < tolerance:
                break
        self.tracker.reset(q)

    # ---------------------------------------------------------------- clocks
    def operator_time(self, t_robot: float) -> float:
        """Robot-clock time expressed on the operator's clock (0 offset until measured)."""
        offset = self.clock_estimator.offset
        return t_robot + (offset if offset is not None else 0.0)

    @property
    def tau_b(self) -> float:
        """τ̂_b [s]: how old the images the operator sees are, from its video reports.

        The operator measures a frame's age as its arrival on the operator's clock minus its
        capture on ours, i.e. the true age plus the clock offset (operator − robot), which
        is removed here; ``default_tau_b`` until both a report and the offset are known.
        """
        age_raw, offset = self._video_age_raw, self.clock_estimator.offset
        if age_raw is None or offset is None:   # not self.tau_b_measured
            return self.config.default_tau_b
        return max(0.0, age_raw - offset)

    @property
    def tau_b_measured(self) -> bool:
        """Whether :attr:`tau_b` comes from the operator's video reports (not the default)."""
        return self._video_age_raw is not None and self.clock_estimator.offset is not None

    @property
    def coalesced_references(self) -> int:
        """Commands taken (executed, recorded, timed) but not conditioned on by the estimator:
        more arrived in one tick than its budget allows
        (``CompensatorConfig.estimator_updates_per_step``, ``max_estimator_updates``), e.g. a
        queue flushed after a network stall or an operator sending too fast."""
        return self._coalesced_earlier + self.compensator.observations_coalesced

    @property
    def last_joint_command(self) -> np.ndarray:
        """(N,) joint angles the whole-body controller commanded in the last tick [rad], in the
        order of the measured joints (``sim.state().q[NQ_BASE:]``); the home posture before the
        first tick. A copy: the station's own is not the caller's to change."""
        return self._last_joint_command.copy()

    def _attach_operator(self, peer) -> None:
        """Take ``peer`` as the operator: a clock estimate of its own and, for a replacement
        (a restarted operator station), a fresh compensator and counters."""
        if self.operator is not None:
            self._coalesced_earlier += self.compensator.observations_coalesced
            self.compensator = PrescientCompensator(self.compensator.library, self.config.compensator)
            self._last_seq, self._last_ref_time = 0, float("nan")
            self._delays.clear()
            self._video_age_raw = None
        self.operator = peer
        self.operators_attached += 1
        self.clock_estimator = clock_offset_estimator(self.config)
        self.clock_sync = ClockSyncClient(self.endpoint, peer, interval=self.config.clock_ping_interval,
                                          estimator=self.clock_estimator)

    def _is_operators_moved(self, packet, refs: RobotReferences) -> bool:
        """Whether references from a new address are the current operator's (its source id)
        and newer than what it sent: the same operator station reached by a new path (a
        restarted ``teleop netem`` forwards from a new port, a NAT may rebind). Its clock is
        the same, and so are the clock estimate, τ̂_b and the motion being predicted; taken
        as a new operator, they were all thrown away and the robot passed the delayed
        commands through for ~2 s. Only the operator can sign newer references (the MAC),
        so this is no door for a replayer (see :meth:`_is_operators_past`)."""
        return (self.operator is not None and packet.source_id == self._operator_source
                and refs.t > self._last_ref_time)

    def _move_operator(self, peer) -> None:
        """Send the FEEDBACK and clock pings to ``peer`` from now on, keeping all else."""
        self.operator_moved = (format_address(self.operator), format_address(peer))
        self.operator_moves += 1
        self.operator = peer
        if self.clock_sync is not None:
            self.clock_sync.peer = peer      # pings still out to the old address are forgotten in time

    def _is_operators_past(self, packet, refs: RobotReferences) -> bool:
        """Whether references from a new address are the current operator's own (its source
        id) and no newer than what it sent: not a restarted operator (a new source id) nor
        one whose address changed (newer samples), but captured packets the network never
        delivered, replayed from elsewhere while the operator is silent. Taken, they made
        the replayer the operator and the robot executed seconds-old commands."""
        return (self.operator is not None and packet.source_id == self._operator_source
                and not refs.t > self._last_ref_time)

    def _refuse_foreign(self, received) -> None:
        """Count references refused as not the operator's commands (the first sender kept for
        the station's one warning)."""
        self.foreign_references += 1
        if self.first_foreign_sender is None:
            self.first_foreign_sender = format_address(received.peer)

    def _is_operator_restarted(self, refs: RobotReferences) -> bool:
        """Whether references from the operator's address under a new source id come from the
        operator station restarted there (a fixed --bind, a proxy that keeps its socket): its
        samples are newer than the last taken (the operator's clock goes on). Not taken as a
        new operator, its sequence numbers, restarted at 1, stayed below the old session's,
        none counted as a command, and the robot held its pose until they passed the old
        ones (as long as the first session had lasted). Older samples under a new source id
        are an earlier session's packets replayed, and refused."""
        return not refs.t <= self._last_ref_time      # NaN (no command taken yet): restarted

    def implausibility(self, received) -> str | None:
        """Why the authenticated references packet ``received`` cannot be a command, or None:
        a sample time far from its packet's send time (:func:`sample_time_problem`), or values
        outside the robot's :class:`ReferenceEnvelope`. The protocol has already refused
        non-finite values; these are finite but absurd (a client bug, a unit mistake), and
        tracked they swung the torso to its limits at 0.9 of the joints' speed limits."""
        packet = received.packet
        refs: RobotReferences = packet.message
        return sample_time_problem(refs.t, packet.send_time) or self.envelope.violation(refs.to_flat())

    def refuses(self, received) -> bool:
        """Whether references ``received`` come from a second sender while the operator is
        active (refused: two operators at once, keep the first)."""
        return (received.peer != self.operator and self.operator is not None
                and received.arrival_time - self._last_ref_arrival <= self.config.stale_timeout
                and not self._is_operators_moved(received.packet, received.packet.message))

    # ------------------------------------------------------------------ tick
    def _receive(self) -> None:
        self.taken_references = []
        for received in self.endpoint.poll():
            if answer_ping(self.endpoint, received):
                continue
            if self.clock_sync is not None and self.clock_sync.handle(received):
                continue
            packet = received.packet
            if packet.packet_type == PacketType.REFERENCES:
                refs: RobotReferences = packet.message
                problem = self.implausibility(received)
                if problem is not None:
                    # Not taken, not even as a sign of life: an operator sending only these
                    # lets the watchdog go stale, and the robot holds its pose.
                    self.implausible_references += 1
                    if self.first_implausible is None:
                        self.first_implausible = f"{format_address(received.peer)}: {problem}"
                    continue
                if received.peer != self.operator:
                    if self._is_operators_moved(packet, refs):
                        self._move_operator(received.peer)
                    elif self.refuses(received) or self._is_operators_past(packet, refs):
                        self._refuse_foreign(received)    # two operators at once: keep the first
                        continue
                    else:
                        self._attach_operator(received.peer)
                        self._operator_source = packet.source_id
                elif packet.source_id != self._operator_source:
                    if not self._is_operator_restarted(refs):
                        self._refuse_foreign(received)    # an earlier session's packets, replayed
                        continue
                    self._attach_operator(received.peer)
                    self._operator_source = packet.source_id
                self._last_ref_arrival = received.arrival_time
                self.taken_references.append((refs, received.arrival_time))
                offset = self.clock_estimator.offset
                # Before the first clock exchange an arrival time cannot be put on the
                # operator's clock: the sample still feeds the estimator, not τ_f.
                arrival_op = None if offset is None else received.arrival_time + offset
                # The signals the operator's input did not measure (VR: all but the hands and
                # the neck) are neither conditioned on nor predicted (see observe).
                self.compensator.observe(refs.t, refs.to_flat(), arrival_op, valid=refs.valid)
                if arrival_op is not None:
                    self._delays.append(arrival_op - refs.t)
                if packet.seq > self._last_seq:
                    # Only a newer command keeps the watchdog from going stale: an older one
                    # (reordered, or authentic packets the network lost replayed by someone
                    # who captured them) says nothing about the operator being there now.
                    self.watchdog.command_received(received.arrival_time)
                    self._last_seq, self._last_ref_time = packet.seq, refs.t
            elif packet.packet_type == PacketType.VIDEO_REPORT and received.peer == self.operator:
                report: VideoReport = packet.message
                if np.isfinite(report.effective_backward_delay):
                    self._video_age_raw = float(report.effective_backward_delay)

    def tick(self) -> TickRecord:
        """Run one control period (see the module docstring)."""
        now = self.endpoint.clock.now()
        if self._first_tick_at is None:
            self._first_tick_at = now
        self._receive()
        if self.clock_sync is not None:
            self.clock_sync.tick()
        if self.clock_estimator.offset is None:
            self.compensator.condition_observed()    # the estimator keeps up, as when stepping
            latest = self.compensator.latest_delayed
            out = CompensatorOutput(None if latest is None else latest.copy(), CompensationState.PASSTHROUGH)
        else:
            out = self.compensator.step(self.operator_time(now), self.tau_b)
        self.last_compensator_output = out   # for the recorder (teleop/stations/recording.py)
        commanded = out.references if out.references is not None else self.last_executed
        status = self.watchdog.update()
        if status.went_stale:
            self.hold = self.last_executed.copy()
            # Nothing arrives to predict from: what resumes is passed through (see abandon_motion).
            self.compensator.abandon_motion()
        if status.state == WatchdogState.RESUMING and (status.changed or status.went_stale):
            # The blend's length is set by how far it goes (see resume_duration_for), from the
            # hold it starts at: also when one update went stale and resumed at once (a burst
            # after an outage in mid-resume), which leaves the state as it was (``changed``
            # False) but the hold new; the old length could break the resume's speed limits.
            self.watchdog.resume_duration = resume_duration_for(self.hold, commanded, self.config.resume_duration)
        if status.state in HOLDING_STATES:
            executed = self.hold
        elif status.state == WatchdogState.RESUMING:
            executed = (1.0 - status.blend) * self.hold + status.blend * commanded
        else:
            executed = commanded
        executed = np.array(executed, dtype=float)
        if not np.all(np.isfinite(executed)):
            # Arrivals and predictions are checked, so this is a bug upstream: hold the last
            # executed pose (finite) rather than let a NaN reach the balance filter, which
            # refuses it, or the smoother, which would keep it.
            self.nonfinite_commands += 1
            executed = self.last_executed.copy()
        if self.smoother is not None:
            executed = self.smoother.step(executed)

        to_track = executed.copy()
        if self.zmp is not None:
            to_track[_COM_XY] = self.zmp.step(executed[_COM_XY], self._com_height, self.support_polygon)
            waist = SIGNAL_SLICES["waist_height"].start
            to_track[waist] = self.zmp.waist_height(executed[waist], self.tracker.waist_range)
        q_command, _, solve_status, _ = self.tracker.step(RobotReferences.from_flat(now, to_track))
        self.controller_status_ticks[solve_status.value] = self.controller_status_ticks.get(solve_status.value, 0) + 1
        if self.first_controller_hold is None and solve_status in (SolveStatus.HELD, SolveStatus.REJECTED_TARGET):
            # Kept for the station's one warning: the tracker rewrites its message every tick.
            self.first_controller_hold = f"t = {now:.2f} s: {self.tracker.status_message}"
        self.sim.step_through(*self._joint_targets.targets(q_command[NQ_BASE:], self.config.physics_steps, self.dt))
        self._last_joint_command = q_command[NQ_BASE:].copy()
        self.last_executed = executed

        measured = self.sim.state()
        speed = float(np.max(np.abs(measured.v[NV_BASE:]) / self.robot.limits.velocity))
        self.max_joint_speed_ratio = max(self.max_joint_speed_ratio, speed)
        if self.fell_at is None and self.sim.other_contacts() > 0:
            self.fell_at = now
        self._note_scene_contacts(now)
        if (self.video_out is not None and self.render is not None and self.config.video_hz > 0
                and now >= self._next_video):
            # On a fixed grid, not "now + period": a tick lands up to a control period after
            # the frame was due, and counting from it lost that much every frame (9.5 Hz for
            # 10). A station that fell far behind restarts the grid instead of bursting.
            period = 1.0 / self.config.video_hz
            self._next_video = self._next_video + period if now - self._next_video < period else now + period
            self.video_out(self.render(measured.q), now)
        # Measure with the station's own pinocchio data: the controller owns robot.data.
        pin.framesForwardKinematics(self.robot.model, self._data, measured.q)
        hands = np.stack([self._data.oMf[self.robot.frame_id(f"{side}_hand")].translation
                          for side in ("left", "right")])
        record = TickRecord(now, executed, self.compensator.latest_delayed,
                            hands, pin.centerOfMass(self.robot.model, self._data, measured.q),
                            self.sim.measured_cop(), out.state.value, status.state.name, solve_status.value)
        if self.operator is not None and now >= self._next_feedback:
            self._next_feedback = now + 1.0 / self.config.feedback_hz
            self._send_feedback(out.state, status.state, record.measured_com,
                                measured_q=measured.q, commanded_q=q_command)
        if self.keep_records:
            self.records.append(record)
        return record

    def _send_feedback(self, comp_state: CompensationState, watchdog_state: WatchdogState, com: np.ndarray,
                       measured_q: np.ndarray | None = None, commanded_q: np.ndarray | None = None) -> None:
        # measured_q / commanded_q ((nq,) each) let the operator's 3D view draw the robot's
        # actual pose and the predicted (compensated) pose it is being driven to.
        delays = np.array(self._delays) if self._delays else np.array([np.nan])
        stats = self.endpoint.stats.summary()
        feedback = Feedback(
            last_ref_seq=self._last_seq, last_ref_time=self._last_ref_time,
            forward_delay=float(np.mean(delays)), forward_delay_std=float(np.std(delays)),
            clock_offset=_negated(self.clock_estimator.offset), watchdog_state=int(watchdog_state),
            compensation_state=STATE_CODES[comp_state],
            packets_accepted=int(stats.get("accepted_references", 0)) & 0xFFFFFFFF,
            packets_dropped=int(sum(v for k, v in stats.items() if k.startswith("dropped_"))) & 0xFFFFFFFF,
            executed=self.last_executed.copy(), measured_com_xy=com[:2].copy(),
            measured_q=None if measured_q is None else np.array(measured_q, dtype=float),
            commanded_q=None if commanded_q is None else np.array(commanded_q, dtype=float))
        self.endpoint.send(feedback, self.operator)

    def telemetry(self) -> dict:
        """Per-stage figures: controller timing, delays, network counters, states, the largest
        measured joint speed as a fraction of its limit, and whether the robot fell.

        ``tau_f_mean_s`` is None until a packet measured it; ``tau_b_s`` is the backward delay
        compensation uses, ``default_tau_b`` until the operator reported one
        (``tau_b_measured`` False).
        """
        return {"controller_timing_ms": self.tracker.controller.timing_stats(),
                "tau_f_mean_s": float(np.mean(self._delays)) if self._delays else None,
                "tau_b_s": self.tau_b, "tau_b_measured": self.tau_b_measured,
                "compensation": self.compensator.state.value,
                "network": self.endpoint.stats.summary(),
                "max_joint_speed_ratio": self.max_joint_speed_ratio, "fell": self.fell_at is not None,
                "scene_contact_s": self.scene_contact_ticks * self.dt, "first_scene_contact": self.first_scene_contact,
                "refused_other_operator": self.foreign_references,
                "refused_implausible": self.implausible_references,
                "coalesced_references": self.coalesced_references,
                "nonfinite_commands_held": self.nonfinite_commands,
                "controller_status_ticks": dict(self.controller_status_ticks)}
