"""Delay compensation on the robot station (thesis §5.3, pseudocode in reference §5.10).

The compensator receives the operator's references late (forward delay τ_f, measured from
their time stamps) and must output, at each control tick, the reference the robot should
execute *now* so that the video, which reaches the operator τ_b later, shows what the
operator is doing then:

    output(t) = ŷ(t + τ̂_b | observations up to t − τ_f)                        (Eq. 5.24)

Life cycle of one motion::

    PASSTHROUGH --(onset, ≥ recognition_time observed, task probable)--> BLEND_IN
    BLEND_IN    --(sigmoid blend done, Eq. 5.26)------------------------> PREDICTING
    BLEND_IN / PREDICTING --(Δσ test fires, §5.3.12)--------------------> BLEND_OUT (rejected)
    PREDICTING  --(observations show the motion ended and the operator at rest)--> BLEND_OUT
    BLEND_OUT   --(blend done, Eq. 5.27)---------------------------------> PASSTHROUGH

In PASSTHROUGH the latest delayed reference is executed as it is (no delay, no library, or
no task recognised yet). Lost or late packets need no special handling while predicting:
the prediction is computed for the current time whatever arrived, which is what the
thesis's "buffered future samples" achieve.

Output stage (second round). The robot must not jerk when the estimator changes its mind:
the prediction is passed through a belief-change smoother (:meth:`PrescientCompensator._predict`,
``smoothing_time``) and everything but exact pass-through through a per-tick rate limit
(``max_speed_cartesian`` / ``max_speed_angular``). The motion also ends when the operator
is seen at rest where the model expected motion (:meth:`PrescientCompensator._motion_over`).

All times are on the **operator's clock** (the robot station converts its own time with the
estimated clock offset); the motion time is counted from the detected onset t_0 (Eq. 5.13).
"""

from __future__ import annotations

import math
import warnings
from collections import deque
from dataclasses import dataclass, field, replace
from enum import Enum

import numpy as np

from promp.estimator import MAX_TIME_S, Estimate, EstimatorConfig, OnlineEstimator
from promp.library import TaskLibrary
from promp.onset import OnsetDetector
from promp.phase_filter import as_mask
from retarget.references import CARTESIAN_INDICES, FLAT_SIZE, HAND_INDICES, SIGNAL_SLICES
from teleop.prescient.blending import SigmoidBlend


#: Longest time [s] one tick's rate limit allows for (see PrescientCompensator._limit_rate).
MAX_RATE_LIMIT_DT = 0.1


#: A delayed sample as the estimator is fed it: (time stamp [s, operator clock], (20,) flat
#: references, (20,) mask of the measured signals or None when every signal was measured).
_Sample = tuple[float, np.ndarray, "np.ndarray | None"]


class CompensationState(str, Enum):
    PASSTHROUGH = "passthrough"
    BLEND_IN = "blend_in"
    PREDICTING = "predicting"
    BLEND_OUT = "blend_out"


@dataclass(frozen=True)
class CompensatorConfig:
    """Settings of :class:`PrescientCompensator` (the thesis leaves most of them open).

    Every setting applies alike to an operator whose input measures only some signals (a VR
    set-up: the hands and the neck; :meth:`PrescientCompensator.observe`'s ``valid``): the
    estimator is conditioned on the measured signals alone and the others are passed
    through. The hands (``onset_indices``, the Δσ test, the hands' shrinkage) must be
    measured for compensation to engage. Measured with VR versions of the 36 synthetic takes
    (head and hand trackers written as VR files; each predicted by a library learned from the
    35 other full-body takes, i.e. from mocap):
                                  hands window comp / nocomp [cm]   wrong first task   rejected
                                  1.5 s          3 s                1.5 s   3 s        1.5 s   3 s
        placeholders as measured  5.31 / 6.40    5.47 / 7.84        7       8          27      23
        mask passed (now)         2.78 / 6.34    2.65 / 8.29        0       0          5       4
    (of 36 takes; rejected: takes whose prediction the Δσ test rejected). The compensated CoM
    now stays where the operator's input put it (whole-take error 0.20 -> 0 cm at 1.5 s).
    Full-body input is unchanged to the bit.

    Attributes:
        onset_indices: signals whose speed detects motion onset and rest (the hands).
        onset_speed: speed above which the operator is moving [m/s].
        onset_min_duration: how long the speed must stay above it [s].
        recognition_time: motion time observed before compensation may engage [s]
            (the thesis: "about 1 s", for 6-7 s motions). Real takes last 1.2-3 s, i.e.
            the operator has finished (or nearly) before the robot has seen 0.8 s of the
            motion plus the forward delay, and every tick before engagement shows the
            robot a whole round trip behind. Measured with `teleop trial` (hands,
            window comp / nocomp and whole-take comp [cm]; blend scale 3; synthetic LOO
            and the HDM05 inner folds learn bk -> test dg and learn dg -> test bk, which
            contain neither the held-out performer bd nor the Xsens demos):
                                    0.8                 0.4                 0.2
                syn 1.5 s     1.74/5.63, 4.60     1.76/5.55, 4.33     1.79/5.53, 4.18
                syn 3 s       1.44/6.89, 5.10     1.58/7.08, 4.70     1.60/7.18, 4.57
                ->bk 1.5 s    5.09/9.78, 10.59    3.09/4.33, 9.91     3.68/6.62, 9.37
                ->bk 3 s      2.78/3.56, 8.72     2.79/4.10, 7.37     4.23/6.71, 6.39
                ->dg 1.5 s    4.83/5.13, 10.43    3.32/5.45, 9.61     4.08/8.97, 9.20
                ->dg 3 s      3.09/2.87, 8.66     3.99/5.61, 7.47     4.92/7.96, 6.65
            Earlier engagement lowers the whole-take error everywhere and keeps the window
            error about as it was while the window now holds the motion itself (the
            no-compensation error of the same window doubles): 0.2. The task posterior is
            nearly always 0 or 1 by then (min_task_probability 0.9 engaged the same takes).
        min_task_probability: posterior probability the best task must reach to engage.
        min_engage_phase: phase of the recognised task the delayed observations must reach
            before compensation engages. The task posterior is over-confident in the first
            tenths of a second (it treats 100 Hz samples as independent, and every task
            starts from rest): with recognition_time alone, 15 of 36 synthetic
            leave-one-out takes and 10 of 24 on each HDM05 inner fold engaged on a wrong
            task first (at 1.5 s), and the robot began the wrong motion until the filter
            changed its mind (`make demo`: the hand rose 18 cm while the operator bent
            down). The thesis engages after about 1 s of 6-7 s motions, i.e. at phase
            ~0.15. Measured with `teleop trial` at 1.5 s (synthetic LOO; HDM05 inner folds
            learn bk -> test dg, learn dg -> test bk; choice made on these only), wrong
            first task / whole-take hands [cm] / mean over takes of the largest excess of
            the compensated hand error over the uncompensated one at any single tick [cm]
            (`teleop trial`'s worst_excess_cm holds it over 0.2 s instead):
                                    0                   0.1                 0.15
                syn               15, 4.03, 4.39      0, 4.29, 3.49       0, 4.47, 3.67
                ->dg              10, 9.23, 13.3      8, 9.16, 11.0       7, 9.16, 10.4
                ->bk              10, 9.38, 9.23      2, 9.34, 7.95       1, 9.34, 7.69
            (0.2 and 0.3 lower the window error further, but only because the window then
            starts later in the motion: its no-compensation error halves too; the
            whole-take error rises at 3 s.) 0.1: the wrong engagements mostly gone for
            +0.26 cm whole-take on synthetic takes and none on HDM05. Tried instead: the
            best task unchanged over the last 0.15 s of observations (->dg still 10 wrong,
            ->bk 6): the wrong task often leads for longer.
        rest_speed: speed below which the operator is at rest [m/s].
        rest_duration: how long the operator must rest for the motion to be over [s].
        stopped_distance, stopped_overtime: an operator at rest has stopped the motion, not
            paused in it, when at the pace they had as they came to rest (the speed and
            phase estimated then) the model would since have moved the hands by more than
            ``stopped_distance`` [m], or would have finished the motion, rest_duration at
            least, ``stopped_overtime`` times over. Without this the filter fitted the rest by
            slowing its speed estimate, under which the model expected no motion: the motion
            was not over until the speed reached the grid's floor and the phase 0.9. Measured
            on the 36 synthetic takes, each learned without it and stopped at 30 / 50 / 70 %
            of the motion, 0.75 s each way (time from the stop + 0.5 s to the return to the
            delayed stream, mean / max, and how many of the 108 took over 3 s), and with
            `teleop trial` on synthetic leave-one-out (hands window at 3 s; 1.5 s unchanged):
                                        stopped           trial 3 s
                before                  4.43 / 8.16, 65   1.57
                0.096 m                 -                 1.62
                0.12 m                  2.35 / 5.26, 10   1.62
                0.128 m                 2.38 / 5.26, 11   1.57
                0.15 m                  2.44 / 5.26, 13   1.57
                overtime 2 alone        3.51 / 7.09, 61   1.57
                0.15 m + overtime 2     2.44 / 4.96, 13   1.57
            (a smaller distance also cut short demonstrated pauses of slower operators: at
            3 s, the window holds them). Xsens leave-one-out and the HDM05 inner folds (learn
            bk -> test dg, dg -> bk) are unchanged to the digit at 1.5 and 3 s. The floor is
            the forward delay, the rest_duration and the blend-out: ~1.5 s after the stop.
        min_round_trip: below this round trip [s] the delayed references pass through.
        ood_consecutive: Δσ test failures in a row that trigger the fallback (one noisy
            sample should not drop the prediction).
        ood_n_std, ood_margin: the Δσ band: n_std learned standard deviations plus a
            margin [m] (thesis: "learned variance + 5 cm"). One standard deviation learned
            from 5-8 demonstrations rejected a performer of another height on most squats
            (`teleop trial` on datasets/synthetic); two do not, and still catch a
            different motion.
        history: seconds of delayed samples kept to feed the estimator from the onset,
            which is detected only ``onset_min_duration`` after it happened.
        blend_step_scale: units of one blend step (Eq. 5.26) in multiples of the thesis's
            1 mm / 0.1 degree, one step per control tick. The thesis gives no step rate; at
            100 Hz and scale 1 a 30 degree posture gap would take 3 s to blend (300 steps;
            ``blend_max_steps`` now clips it to 1 s), longer than the motions it compensates.
            Scale 3 (first round), then, with recognition_time 0.2 (same protocol and
            folds as above, whole-take hands [cm] at 1.5 / 3 s):
            scale 3: syn 4.18 / 4.57, ->bk 9.37 / 6.39, ->dg 9.20 / 6.65; scale 6: 4.12 /
            4.51, 9.43 / 6.11, 9.21 / 6.28; scale 10: 4.09 / 4.48, 9.50 / 5.99, 9.25 / 6.13.
            6: 6 mm per tick on average, a sigmoid peak of ~1.8 m/s for the hands, inside
            max_speed_cartesian; 10 gains little more for a faster transient.
        blend_max_steps: longest blend [ticks]: 100 = 1 s at the 100 Hz control rate
            (:func:`teleop.prescient.blending.blend_steps`).
        shrunk_signals: the signals whose predicted change is shrunk by its uncertainty
            before it is executed, each with a factor k on its predictive variance: with y
            the newest delayed reference (at motion time s), p the prediction for motion
            time t, and Δ = m(t) − m(s), σ² = var(t) the model's change and predictive
            variance, the output is y + g (p − y), g = Δ² / (Δ² + k σ²), per scalar: the
            oracle shrinkage of an estimate whose noise is √k σ, so that a change the model
            is unsure of is not executed at full size, while a large, certain one is.
            CoM k = 1 (its predicted change over a round trip is smaller than the
            performers' CoM paths differ), hands k = 0.1 (most of the gain across
            performers, little cost where the library knows the operator); postures not
            shrunk. How these were chosen, and the variants measured and left out:
            docs/promp_tuning.md, ninth round.
        smoothing_time: time constant [s] with which a change of the prediction (the
            estimator's belief moved: new observations, a new speed or offset estimate) is
            passed to the output. The output follows the *new* predicted trajectory with its
            own velocity, plus the difference to the old output, which decays as
            exp(-t / smoothing_time): no lag while the belief is steady, no jump when it
            moves. 0 disables it. 0.1, 0.2 and 0.4 s gave the same window errors within
            0.1 cm (synthetic, inner folds); 0.2 s. With the filter's smooth warp estimate
            (promp.phase_filter) this took the 99.5th percentile of the per-tick hand change
            while predicting from 3.7 cm to 0.25 cm (Xsens LOO, 1.5 s).
        max_speed_cartesian, max_speed_angular: whatever happens, the compensated output
            (outside pass-through) changes by at most this speed [m/s, rad/s] per signal and
            per tick: the last guard against a jerk of the robot.
        estimator_updates_per_step, max_estimator_updates: how many of the samples observed
            since the last :meth:`PrescientCompensator.step` (one control tick) the estimator
            is conditioned on: on average at most ``estimator_updates_per_step`` per step,
            and never more than ``max_estimator_updates`` in one (a budget that grows by the
            first each step, unused, up to the second). When more are pending, those kept
            are spread evenly over their time stamps, the newest always among them; the
            others still count for everything else (the newest delayed reference, τ_f, the
            onset and rest detection, recordings) and in ``observations_coalesced``. Nothing
            bounded them before, and an update that adds evidence costs ~0.6 ms (six
            tasks): a 1000-packet queue flush after a network stall conditioned the
            estimator 1000 times in one tick (0.18 s, 18 control periods), and an operator
            sending at 1 kHz stored ten times the observations of a 100 Hz one, which every
            re-conditioning of the weight posterior goes through again (17 % of the ticks
            over 10 ms on a virtual clock). A 100 Hz operator (one sample per tick at the
            station's 100 Hz; HDM05's 120 Hz, 1.2) never exhausts 2 per step; over the
            thesis link's jitter one step took at most 14 samples (the onset replay and a
            bunch of late packets: 36 000 steps of `teleop trial` on the synthetic takes),
            hence 16, which also keeps a burst of outliers able to trip the Δσ fallback
            (``ood_consecutive``) within the tick it arrives in.
        estimator: settings of the ProMP online estimator (its Δσ test settings are taken
            from ood_n_std and ood_margin above). Its filter can down-weight signals that
            say more about the performer than about the task
            (``grid.down_weighted_signals``, by name); measured with the CoM and the neck
            ("com x", "com y", "neck pitch", "neck yaw", factor 10), hands, window comp /
            nocomp [cm]: HDM05 inner folds (learn one performer, test another) ->dg 1.5 s
            4.70/10.07 -> 4.61/10.07, 3 s 4.54 -> 4.57, ->bk 1.5 s 4.77/9.12 -> 4.07/8.98,
            3 s 3.99 -> 3.60; but held out (learn two, test the third) bd / bk / dg 1.5 s
            4.42 / 3.48 / 4.02 -> 4.43 / 3.52 / 4.06, 3 s 3.76 / 3.07 / 3.49 -> 3.83 /
            3.13 / 3.55, and Xsens leave-one-out 1.5 s 1.52 -> 1.88, 3 s 1.40 -> 1.54,
            while recognition after 1/4 rose from 0.91 / 0.89 / 0.94 to 0.94 / 0.92 / 0.94
            (promp.estimator, sixth round). The compensation error is what the product
            delivers: off by default. Likewise ``future_speed_std`` (the prediction averaged
            over the remaining motion's speed), which helps the prediction figures but not
            the executed command's (promp.estimator, eighth round): 0 here.
    """

    onset_indices: tuple[int, ...] = tuple(HAND_INDICES)
    onset_speed: float = 0.08
    onset_min_duration: float = 0.1
    recognition_time: float = 0.2
    min_task_probability: float = 0.6
    min_engage_phase: float = 0.1
    rest_speed: float = 0.03
    rest_duration: float = 0.4
    stopped_distance: float = 0.15
    stopped_overtime: float = 2.0
    min_round_trip: float = 0.04
    ood_consecutive: int = 10
    ood_n_std: float = 2.0
    ood_margin: float = 0.05
    history: float = 1.0
    blend_step_scale: float = 6.0
    blend_max_steps: int = 100
    shrunk_signals: tuple[tuple[str, float], ...] = (("com_xy", 1.0), ("left_hand", 0.1), ("right_hand", 0.1))
    smoothing_time: float = 0.2
    max_speed_cartesian: float = 2.0
    max_speed_angular: float = 4.0
    estimator_updates_per_step: int = 2
    max_estimator_updates: int = 16
    estimator: EstimatorConfig = field(default_factory=lambda: EstimatorConfig(future_speed_std=0.0))

    def __post_init__(self) -> None:
        if not 1 <= self.estimator_updates_per_step <= self.max_estimator_updates:
            raise ValueError("estimator_updates_per_step and max_estimator_updates must be 1 <= per step <= max, "
                             f"got {self.estimator_updates_per_step!r}, {self.max_estimator_updates!r}")


def _shrink_arrays(shrunk_signals: tuple[tuple[str, float], ...]) -> tuple[np.ndarray, np.ndarray]:
    """The flat indices (m,) and variance factors k (m,) of ``CompensatorConfig.shrunk_signals``.

    Raises:
        ValueError: a name that is not a signal of :data:`retarget.references.SIGNALS`, a
            signal named twice, or a factor that is not a finite number > 0.
    """
    names = [name for name, _ in shrunk_signals]
    unknown = [name for name in names if name not in SIGNAL_SLICES]
    if unknown or len(set(names)) != len(names):
        raise ValueError(f"shrunk_signals: each of {', '.join(SIGNAL_SLICES)} at most once, got {names}")
    indices, factors = [], []
    for name, factor in shrunk_signals:
        if not (math.isfinite(factor) and factor > 0):
            raise ValueError(f"shrunk_signals: {name}'s variance factor must be a finite number > 0, got {factor!r}")
        span = range(FLAT_SIZE)[SIGNAL_SLICES[name]]
        indices += list(span)
        factors += [float(factor)] * len(span)
    return np.array(indices, dtype=np.intp), np.array(factors)


@dataclass(frozen=True)
class CompensatorOutput:
    """What the compensator decided at one tick.

    Attributes:
        references: (20,) flat references to execute [m for the 9 Cartesian signals, rad
            for the postures], or None before any sample arrived.
        state: the compensation state.
        task: recognised task label (None before recognition).
        task_probability: its posterior probability.
        speed: estimated execution speed relative to the demonstrations (1 = as demonstrated).
        tau_f: measured forward delay τ_f [s] (Eq. 5.19): exponential average (weight 0.05
            per packet) of arrival − time stamp; the newest sample's age at this tick only
            if no arrival time was ever given to :meth:`PrescientCompensator.observe`.
        motion_time: motion time since the onset t_0 that the output corresponds to,
            t + τ̂_b − t_0 [s] (None before an onset).
        phase: phase of the newest observation in the recognised task (None before recognition).
    """

    references: np.ndarray | None
    state: CompensationState
    task: str | None = None
    task_probability: float = 0.0
    speed: float = 1.0
    tau_f: float = float("nan")
    motion_time: float | None = None
    phase: float | None = None


class PrescientCompensator:
    """ProMP-based compensation of a round-trip delay (see the module docstring).

    Args:
        library: the task library; None disables compensation (pass-through only).
        config: compensator settings.
        estimator_config: settings of the ProMP online estimator, used as given (the
            hand Δσ test settings of ``config`` are then not applied); default:
            ``config.estimator`` with ``ood_n_std``/``ood_margin`` on the hands.
    """

    def __init__(self, library: TaskLibrary | None, config: CompensatorConfig = CompensatorConfig(),
                 estimator_config: EstimatorConfig | None = None) -> None:
        self.library = library
        self.config = config
        if library is not None:
            est_cfg = estimator_config or replace(config.estimator, ood_indices=tuple(HAND_INDICES),
                                                  ood_n_std=config.ood_n_std,
                                                  ood_margin=config.ood_margin)
            if est_cfg.grid.down_weighted_signals and library.promps[0].signal_names is None:
                warnings.warn("the task library names no signals (saved by an older version): every signal "
                              "weighs alike in recognition; `teleop train` it again to down-weight "
                              f"{', '.join(est_cfg.grid.down_weighted_signals)}", stacklevel=2)
                est_cfg = replace(est_cfg, grid=replace(est_cfg.grid, down_weighted_signals=()))
            self.estimator: OnlineEstimator | None = OnlineEstimator(library, est_cfg)
        else:
            self.estimator = None
        self._onset = OnsetDetector(config.onset_indices, config.onset_speed, config.onset_min_duration)
        self._recent: deque[_Sample] = deque()
        self._latest_t = -np.inf
        self._latest_y: np.ndarray | None = None
        # The signals the newest delayed reference did not measure (None: it measured all):
        # the output passes them through (see observe).
        self._latest_unmeasured: np.ndarray | None = None
        self._rest_since: float | None = None
        self._prev_sample: tuple[float, np.ndarray] | None = None
        self._out_prev: tuple[float, np.ndarray] | None = None
        self._shrink_indices, self._shrink_factors = _shrink_arrays(config.shrunk_signals)
        self._max_speed = np.full(FLAT_SIZE, config.max_speed_angular)
        self._max_speed[list(CARTESIAN_INDICES)] = config.max_speed_cartesian
        self.observed_count = 0
        #: Samples observed but not conditioned on (see ``CompensatorConfig.max_estimator_updates``).
        self.observations_coalesced = 0
        self._update_budget = config.max_estimator_updates     # estimator updates the next step may make
        self.tau_f: float | None = None
        self._reset_motion()
        self.state = CompensationState.PASSTHROUGH

    @property
    def latest_delayed(self) -> np.ndarray | None:
        """(20,) newest delayed references received, or None."""
        return self._latest_y

    # ---------------------------------------------------------------- motion
    def _reset_motion(self) -> None:
        self._onset.reset()
        self._t0: float | None = None
        self._rejected = False      # Δσ fallback: no prediction until the next motion
        self._ood_run = 0
        self._ended = False
        self._blend: SigmoidBlend | None = None
        self._frozen_prediction: np.ndarray | None = None
        self._last_prediction: tuple[float, np.ndarray] | None = None
        self._last_gain: np.ndarray | None = None
        self._estimate: Estimate | None = None
        # The estimate (speed, phase) of this motion when the operator came to rest (None: no
        # estimate then): where and how fast _stopped_partway judges the model's motion.
        self._estimate_at_rest: Estimate | None = None
        # Samples of the motion observed since the last step, in arrival order, that the
        # estimator has not been conditioned on yet (see condition_observed).
        self._pending: list[_Sample] = []
        if self.estimator is not None:
            self.estimator.reset()

    # ---------------------------------------------------------------- input
    def observe(self, t_op: float, flat: np.ndarray, arrival_op: float | None = None, *,
                valid: np.ndarray | None = None) -> None:
        """A delayed sample produced at operator time ``t_op`` [s] has arrived.

        Samples may arrive out of order; every one at or after the detected onset t_0 feeds
        the estimator (those of the last ``history`` s are replayed into it when the onset is
        detected, none before) at the next :meth:`step`, which conditions it on a bounded
        number of them (``CompensatorConfig.max_estimator_updates``, all in normal use); only
        the newest by time stamp is the "delayed reference" y(t − τ_f).

        Args:
            t_op: the sample's time stamp (operator clock) [s].
            flat: (20,) flat references [m, rad].
            arrival_op: arrival time converted to the operator clock [s]; the forward delay
                τ_f = arrival − t_op (Eq. 5.19) is exponentially averaged over ~20 packets.
                A negative delay (arrival before the time stamp: an error of the clock-offset
                estimate on a short link) is averaged as measured; it only makes the
                pass-through decision (``min_round_trip``) see a shorter round trip.
            valid: (20,) booleans, True where the operator's input measured the signal
                (:attr:`retarget.references.RobotReferences.valid`, which the REFERENCES
                packet carries); None (or all True): every signal was. A VR operator (head
                and hand trackers) measures the hands and the neck only: the other signals
                hold the robot's initial references, which the operator did not command. The
                estimator is conditioned on the measured signals alone (recognition, speed
                and phase, the weight posterior and the Δσ test ignore the others), and while
                compensating the output keeps the newest delayed value of every signal that
                newest reference did not measure (pass-through per signal, under the same
                rate limit as the rest): the library's correlations would otherwise "predict"
                a torso or CoM motion the operator never made. A sample that measured no
                signal is not conditioned on. The onset and rest detection
                (``CompensatorConfig.onset_indices``, the hands) read the values as they
                are: with the hands unmeasured no onset is found, and the delayed references
                pass through.

        Raises:
            ValueError: ``flat`` is not 20 finite values, ``t_op`` or ``arrival_op`` is not
                finite, ``valid`` is not (20,) booleans (or 0 / 1), or ``t_op`` lies beyond
                +-MAX_TIME_S of the current motion's onset (a clock error). Nothing changes
                when it raises (a NaN arrival time made the averaged τ_f NaN for good; a time
                stamp the estimator refused had already become the newest delayed reference,
                which no later sample could replace).
        """
        flat = np.asarray(flat, dtype=float)
        if flat.shape != (FLAT_SIZE,) or not np.all(np.isfinite(flat)) or not np.isfinite(t_op):
            raise ValueError("a reference sample must be 20 finite values with a finite time")
        if arrival_op is not None and not np.isfinite(arrival_op):
            raise ValueError(f"the arrival time must be finite (or None), got {arrival_op!r}")
        mask = None
        if valid is not None:
            mask = as_mask(valid, FLAT_SIZE).copy()
            if mask.all():
                mask = None       # all measured: exactly as without a mask
        if self._t0 is not None and abs(float(t_op) - self._t0) > MAX_TIME_S:
            raise ValueError(f"time stamp {float(t_op):g} s is beyond +-{MAX_TIME_S:g} s of the motion onset "
                             f"{self._t0:g} s (a clock error?)")
        self.observed_count += 1
        if arrival_op is not None:
            delay = float(arrival_op) - float(t_op)
            # Exponential average over ~20 packets: jitter is the estimator's business,
            # the pass-through decision needs the typical delay.
            self.tau_f = delay if self.tau_f is None else 0.95 * self.tau_f + 0.05 * delay
        if t_op > self._latest_t:
            self._track_rest(t_op, flat)
            self._latest_t, self._latest_y = float(t_op), flat
            self._latest_unmeasured = None if mask is None else ~mask
        if self.estimator is None:
            return
        if mask is None or mask.any():     # a sample that measured nothing tells the estimator nothing
            self._recent.append((float(t_op), flat, mask))
        while self._recent and self._recent[0][0] < self._latest_t - self.config.history:
            self._recent.popleft()
        if self._t0 is None:
            onset = self._onset.push(t_op, flat)
            if onset is not None and not self._ended:
                self._t0 = onset
                self._pending += [s for s in sorted(self._recent, key=lambda s: s[0]) if s[0] >= onset]
            return
        if t_op >= self._t0 and (mask is None or mask.any()):
            self._pending.append((float(t_op), flat, mask))

    def condition_observed(self) -> None:
        """Condition the estimator on the samples observed since the last call, in arrival
        order as :meth:`observe` used to, but no more than this call's budget
        (``CompensatorConfig.estimator_updates_per_step`` / ``max_estimator_updates``): then
        on that many of them, evenly spread over their time stamps with the newest kept. A
        step's work no longer grows with the packets that arrived.

        :meth:`step` calls it; a caller that ticks without stepping (the robot station
        before its first clock exchange, when it passes the delayed commands through) calls
        it once per tick instead, or the samples of those ticks would pile up and be thinned
        at the first step."""
        cfg = self.config
        self._update_budget = min(cfg.max_estimator_updates, self._update_budget + cfg.estimator_updates_per_step)
        pending, self._pending = self._pending, []
        kept = set(range(len(pending)))
        if len(pending) > self._update_budget:
            by_time = sorted(range(len(pending)), key=lambda i: pending[i][0])
            # Counted from the newest, so that it is kept whatever the budget.
            picks = np.round(np.linspace(len(pending) - 1, 0, self._update_budget)).astype(int)
            kept = {by_time[k] for k in picks}
            self.observations_coalesced += len(pending) - len(kept)
        self._update_budget -= len(kept)
        for i, (t, y, mask) in enumerate(pending):
            if i in kept:
                self._update_estimator(t, y, mask)

    def _update_estimator(self, t_op: float, flat: np.ndarray, mask: np.ndarray | None = None) -> None:
        # observe() feeds the estimator only when there is one, from the onset on.
        assert self.estimator is not None and self._t0 is not None
        self._estimate = self.estimator.update(t_op - self._t0, flat, mask)
        if self.state in (CompensationState.BLEND_IN, CompensationState.PREDICTING):
            self._ood_run = self._ood_run + 1 if self._estimate.out_of_distribution else 0

    def _track_rest(self, t_op: float, flat: np.ndarray) -> None:
        """Detect the operator at rest (end of a motion) from the newest samples."""
        prev = self._prev_sample
        self._prev_sample = (t_op, flat)
        if prev is None or t_op <= prev[0]:
            return
        idx = list(self.config.onset_indices)
        speed = float(np.linalg.norm(flat[idx] - prev[1][idx])) / (t_op - prev[0])
        if speed < self.config.rest_speed:
            if self._rest_since is None:
                self._rest_since = prev[0]
                # Taken before the estimator sees the rest: it then slows its speed to fit it.
                self._estimate_at_rest = self._estimate
        else:
            self._rest_since = None

    def _at_rest(self) -> bool:
        return self._rest_since is not None and self._latest_t - self._rest_since >= self.config.rest_duration

    # --------------------------------------------------------------- output
    def step(self, t_op_now: float, tau_b: float) -> CompensatorOutput:
        """The references to execute now: ŷ(t + τ̂_b) once compensation engaged (Eq. 5.24).

        Args:
            t_op_now: the current time converted to the operator's clock [s]. It may step
                back (the clock-offset estimate moved): see :meth:`_limit_rate`.
            tau_b: the backward delay the video will take (incl. jitter buffer) [s], >= 0.

        Raises:
            ValueError: ``t_op_now`` is not finite, or ``tau_b`` is not finite and >= 0,
                before anything changes (a NaN time gave NaN references, for good once
                they were the rate limit's previous output; a negative τ̂_b predicted
                the past). A finite time whose motion time lies beyond +-MAX_TIME_S of the
                onset (a wild clock-offset estimate) does not raise: the motion under way is
                blended out, and none is predicted until the next one.
        """
        if not math.isfinite(t_op_now):
            raise ValueError(f"the current time t_op_now must be finite, got {t_op_now!r}")
        if not (math.isfinite(tau_b) and tau_b >= 0.0):
            raise ValueError(f"the backward delay tau_b must be a finite number of seconds >= 0, got {tau_b!r}")
        if self._latest_y is None:
            return CompensatorOutput(None, self.state)
        self.condition_observed()
        y_d = self._latest_y
        # Measured forward delay (per packet, at arrival), else the sample's age.
        tau_f = self.tau_f if self.tau_f is not None else t_op_now - self._latest_t
        if self.estimator is None:
            self._out_prev = None
            return CompensatorOutput(y_d.copy(), self.state, tau_f=tau_f)
        low_delay = tau_f + tau_b < self.config.min_round_trip
        if low_delay and self.state in (CompensationState.BLEND_IN, CompensationState.PREDICTING):
            # The delay vanished mid-motion (a faster route): nothing is left to predict, but
            # the robot must not jump back to the delayed stream: blend out as from a rejection.
            assert self._out_prev is not None   # every engaged step ends in _limit_rate
            self.state = self._start_blend_out(self._out_prev[1], rejected=True)
        if low_delay and self.state is CompensationState.PASSTHROUGH:
            self._forget_finished_motion()
            # Remember what was executed, as any pass-through tick does (_limit_rate): the
            # motion goes on being recognised meanwhile, so the first tick after the delay
            # returns may engage at once, and with no previous output that tick was not rate
            # limited: a burst of packets arriving with the delay moved the output by the
            # whole gap in one tick (0.77 rad of an arm, tests/test_compensator_adversarial.py).
            self._out_prev = (float(t_op_now), y_d.copy())
            return CompensatorOutput(y_d.copy(), self.state, tau_f=tau_f)

        motion_time = None if self._t0 is None else t_op_now + tau_b - self._t0
        # The estimator refuses (ValueError) motion times beyond +-MAX_TIME_S: t_op_now is the
        # robot's time plus the clock-offset estimate, which a peer's absurd pong stamp can put
        # 1e12 s away (found by tests/test_fuzz_live_path.py), and the robot station then died
        # mid-motion. No motion lasts that long: stop predicting it, as on a rejection.
        predictable = motion_time is None or abs(motion_time) <= MAX_TIME_S
        if not predictable and self.state in (CompensationState.BLEND_IN, CompensationState.PREDICTING):
            assert self._out_prev is not None   # every engaged step ends in _limit_rate
            self.state = self._start_blend_out(self._out_prev[1], rejected=True)
        state = self.state
        leaving: bool | None = None     # set when the blend-out starts this tick: rejected?
        if state is CompensationState.PASSTHROUGH:
            out = y_d
            if predictable and self._ready_to_engage():
                assert motion_time is not None   # _ready_to_engage() requires the onset t_0
                y_p = self._predict(motion_time)
                self._blend = SigmoidBlend(y_d, y_p, self.config.blend_step_scale,
                                           self.config.blend_max_steps)
                state = CompensationState.BLEND_IN
                out = self._blend.step(y_d, y_p)
            else:
                self._forget_finished_motion()
        elif state is CompensationState.BLEND_IN:
            # Engaged: the onset and the blend are set until the motion is reset in pass-through.
            assert motion_time is not None and self._blend is not None
            y_p = self._predict(motion_time)
            out = self._blend.step(y_d, y_p)
            if self._ood_run >= self.config.ood_consecutive:
                leaving = True
            elif self._blend.done:
                state = CompensationState.PREDICTING
        elif state is CompensationState.PREDICTING:
            assert motion_time is not None   # engaged: the onset is set
            out = self._predict(motion_time)
            if self._ood_run >= self.config.ood_consecutive:
                leaving = True
            elif self._motion_over():
                leaving = False
        else:  # BLEND_OUT: from the frozen last prediction back to the delayed stream (Eq. 5.27)
            assert self._blend is not None and self._frozen_prediction is not None   # _start_blend_out
            out = self._blend.step(self._frozen_prediction, y_d)
            if self._blend.done:
                state = CompensationState.PASSTHROUGH
        if leaving is not None:
            # Blend out from where the robot is (the last executed output), not from this
            # tick's prediction or blend step: when the rate limit lags behind it (τ̂_b jumped,
            # 0.75 -> 3 s) the robot went on towards the prediction it had just rejected, 7 ->
            # 22 cm away from the delayed reference, before coming back; and the blend's first
            # step is this tick's output, or the output went one limited step on towards the
            # prediction and the next tick back (-2 then +2 cm in 10 ms:
            # tests/test_compensator_adversarial.py).
            state = self._start_blend_out(self._executed(), rejected=leaving)
            assert self._blend is not None and self._frozen_prediction is not None
            out = self._blend.step(self._frozen_prediction, y_d)
        out = np.array(out, dtype=float)
        if self._latest_unmeasured is not None:
            # What the operator's input did not measure is passed through (see observe).
            out[self._latest_unmeasured] = y_d[self._latest_unmeasured]
        out = self._limit_rate(out, t_op_now,
                               passthrough=state is CompensationState.PASSTHROUGH
                               and self.state is CompensationState.PASSTHROUGH)
        if (state is CompensationState.PASSTHROUGH and self.state is CompensationState.BLEND_OUT
                and not np.allclose(out, y_d, rtol=0.0, atol=1e-9)):
            # The blend is over but the rate limit has not caught up with the delayed stream:
            # pass-through is exact, so entering it now would close the rest in one tick
            # (5 cm at a 0.1 m/s limit). Stay until the limited output has arrived.
            state = CompensationState.BLEND_OUT
        self.state = state
        est = self._estimate
        prob = float(est.task_probabilities[est.task_index]) if est is not None else 0.0
        return CompensatorOutput(out, state,
                                 task=est.task if est is not None else None, task_probability=prob,
                                 speed=est.speed if est is not None else 1.0, tau_f=tau_f,
                                 motion_time=motion_time, phase=est.phase if est is not None else None)

    def _executed(self) -> np.ndarray:
        """(20,) the output of the last step, where the robot is while engaged."""
        assert self._out_prev is not None   # every engaged step ends in _limit_rate
        return self._out_prev[1]

    def _limit_rate(self, out: np.ndarray, t_now: float, passthrough: bool) -> np.ndarray:
        """Bound the per-tick change of the output (not in pass-through, which is exact).

        ``t_now`` is on the operator's clock, which steps whenever the clock-offset estimate
        moves: a step back allows no change this tick (instead of skipping the bound), and
        the time allowed per tick is capped at ``MAX_RATE_LIMIT_DT`` so that a step forward
        (or a stalled station) does not open the bound either.
        """
        prev = self._out_prev
        if not passthrough and prev is not None:
            step = min(max(t_now - prev[0], 0.0), MAX_RATE_LIMIT_DT) * self._max_speed
            out = prev[1] + np.clip(out - prev[1], -step, step)
        self._out_prev = (float(t_now), out)
        return out

    def abandon_motion(self) -> None:
        """Give up the motion under way and pass the delayed references through: the
        commands stopped arriving (the robot station's watchdog went stale, and holds the
        robot still). Without it the compensator kept "predicting" the old motion for as
        long as nothing arrived (its end is only seen in observations of the operator at
        rest), and when commands resumed the watchdog blended the robot towards that stale
        prediction instead of the operator's delayed references. The next motion is timed
        from its own onset."""
        self._reset_motion()
        self._out_prev = None
        self.state = CompensationState.PASSTHROUGH

    def _forget_finished_motion(self) -> None:
        """In pass-through, once the operator rests, the motion is over: rejected, ended, or
        never engaged at all (an unknown motion, a task never probable enough). The next
        motion must be timed from its own onset, not from this one's."""
        if self._t0 is not None and self._at_rest():
            self._reset_motion()

    def _ready_to_engage(self) -> bool:
        if self._t0 is None or self._rejected or self._ended or self._estimate is None:
            return False
        est = self._estimate
        observed = self._latest_t - self._t0
        return (observed >= self.config.recognition_time
                and est.task_probabilities[est.task_index] >= self.config.min_task_probability
                and est.phase >= self.config.min_engage_phase
                and not est.out_of_distribution)

    def _motion_over(self) -> bool:
        """The delayed observations show the operator at rest and either the motion is past
        (or near) the end of its learned phase range, or the model expected the hands to be
        moving at that moment (the operator stopped early, or ended the motion elsewhere
        than the demonstrators): either way the prediction has nothing left to add.

        The second case was a failure of the phase-only rule: an HDM05 grabHighR take that
        ends holding the object forward while the demonstrators brought the hand back down
        kept being "predicted" 20 cm behind the resting operator until the end of the take.
        A pause that the demonstrations contain (a hold phase) is not mistaken for an end,
        since the model itself predicts no motion there.

        Both judge the model under the current warp, which the filter bends to fit a rest (it
        slows its speed estimate): an operator who stopped partway and stayed there looked
        like one in a long pause, and was "predicted" for seconds; :meth:`_stopped_partway`
        judges it at the pace the operator had (``CompensatorConfig.stopped_distance``).
        """
        est = self._estimate
        if est is None or not self._at_rest():
            return False
        if est.phase >= 0.9:
            return True
        assert self.estimator is not None and self._t0 is not None   # only called while predicting
        t = self._latest_t - self._t0
        dt = self.config.rest_duration
        idx = list(self.config.onset_indices)
        mean, _ = self.estimator.predict_many(np.array([t - dt, t]), full_cov=False)
        if float(np.linalg.norm(mean[1, idx] - mean[0, idx])) / dt > self.config.onset_speed:
            return True
        return self._stopped_partway()

    def _stopped_partway(self) -> bool:
        """The operator, at rest, has stopped the motion rather than paused in it: judged at
        the pace they had when they came to rest (the filter fits a rest by slowing its speed
        estimate, and under the slowed warp the model expects hardly any motion), the model
        would have moved the hands by more than ``stopped_distance`` since then, or would have
        finished the motion ``stopped_overtime`` times over."""
        before, est = self._estimate_at_rest, self._estimate
        assert self.estimator is not None and est is not None and self._rest_since is not None
        if before is None or before.task_index != est.task_index:
            return False
        warp = self.estimator.time_warp()
        rested = self._latest_t - self._rest_since
        remaining = (1.0 - before.phase) * warp.duration / before.speed     # [s] at that pace
        if rested > self.config.stopped_overtime * max(remaining, self.config.rest_duration):
            return True
        phases = np.array([before.phase, min(before.phase + before.speed * rested / warp.duration, 1.0)])
        mean, _ = self.estimator.predict_many(warp.offset + phases * warp.duration / warp.speed, full_cov=False)
        idx = list(self.config.onset_indices)
        return float(np.linalg.norm(mean[1, idx] - mean[0, idx])) > self.config.stopped_distance

    def _predict(self, motion_time: float) -> np.ndarray:
        """The prediction for ``motion_time``, belief changes smoothed, then shrunk where uncertain.

        With m_k the trajectory the current belief predicts and p the previous smoothed
        prediction (at motion time s), the smoothed prediction is
            m_k(t) + (p - m_k(s)) exp(-(t - s) / smoothing_time):
        it moves with the velocity of the current prediction, and a change of belief (the
        difference p - m_k(s) between where the old belief had put us and where the new
        one says we should be) fades in over the time constant instead of in one tick.
        Its uncertain changes are then shrunk towards the newest delayed reference
        (:meth:`_shrunk`, ``shrunk_signals``), with the gain low-passed over the same time
        constant: the gain moves with every packet (the newest observation's time jumps
        with the jitter), and unfiltered it moved the hands by up to 5 mm in a tick, more
        than the operator's fastest 3 mm. (Shrinking inside m_k instead, before the
        smoothing, lagged the output 0.2 s behind the delayed reference it pulls towards:
        held-out CoM 5.43 -> 5.83 cm at 1.5 s.)
        """
        assert self.estimator is not None and self._t0 is not None   # engaged
        tau = self.config.smoothing_time
        prev = self._last_prediction
        if prev is not None and not (tau > 0 and 0 < motion_time - prev[0] <= 0.5):
            prev = None      # nothing to smooth from
        # One call for every time needed: [the newest observation's, (the previous output's,)
        # the output's] (each call conditions and interpolates once).
        times = [self._latest_t - self._t0] + ([prev[0]] if prev is not None else []) + [motion_time]
        mean, var = self.estimator.predict_many(np.array(times), full_cov=False)
        gain = self._shrink_gain(change=mean[-1] - mean[0], variance=var[-1])
        if prev is not None:
            decay = np.exp(-(motion_time - prev[0]) / tau)
            out = mean[-1] + (prev[1] - mean[1]) * decay
            if self._last_gain is not None:
                gain = gain + (self._last_gain - gain) * decay
        else:
            out = mean[-1]
        self._last_prediction = (float(motion_time), out)
        self._last_gain = gain
        return self._shrunk(out, gain)

    def _shrink_gain(self, change: np.ndarray, variance: np.ndarray) -> np.ndarray:
        """Gains g = Δ² / (Δ² + k σ²) (m,) of the ``shrunk_signals``, from the model's predicted
        ``change`` Δ (20,) since the newest delayed reference was observed, its predictive
        ``variance`` σ² (20,) [signal units, squared] and each signal's factor k (see
        :class:`CompensatorConfig`); 1 for a signal predicted not to move with no
        uncertainty (0 / 0: nothing to shrink)."""
        idx, k = self._shrink_indices, self._shrink_factors
        delta2 = change[idx] ** 2
        noise = k * variance[idx]
        return np.divide(delta2, delta2 + noise, out=np.ones(len(idx)), where=delta2 + noise > 0)

    def _shrunk(self, prediction: np.ndarray, gain: np.ndarray) -> np.ndarray:
        """``prediction`` (20,) with the ``shrunk_signals`` moved towards the newest delayed
        reference y: y + g (prediction − y), ``gain`` g (m,) from :meth:`_shrink_gain`."""
        idx = self._shrink_indices
        if not len(idx):
            return prediction
        assert self._latest_y is not None   # a prediction follows an observation
        out = prediction.copy()
        out[idx] = self._latest_y[idx] + gain * (prediction[idx] - self._latest_y[idx])
        return out

    def _start_blend_out(self, last_prediction: np.ndarray, rejected: bool) -> CompensationState:
        self._frozen_prediction = np.array(last_prediction, dtype=float)
        assert self._latest_y is not None   # step() returns before the first sample
        self._blend = SigmoidBlend(self._frozen_prediction, self._latest_y, self.config.blend_step_scale,
                                   self.config.blend_max_steps)
        self._rejected = self._rejected or rejected
        self._ended = self._ended or not rejected
        return CompensationState.BLEND_OUT
