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

All times are on the **operator's clock** (the robot station converts its own time with the
estimated clock offset); the motion time is counted from the detected onset t_0 (Eq. 5.13).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from enum import Enum

import numpy as np

from promp.estimator import EstimatorConfig, OnlineEstimator
from promp.library import TaskLibrary
from promp.onset import OnsetDetector
from retarget.references import FLAT_SIZE, HAND_INDICES
from teleop.prescient.blending import SigmoidBlend


class CompensationState(str, Enum):
    PASSTHROUGH = "passthrough"
    BLEND_IN = "blend_in"
    PREDICTING = "predicting"
    BLEND_OUT = "blend_out"


@dataclass(frozen=True)
class CompensatorConfig:
    """Settings of :class:`PrescientCompensator` (the thesis leaves most of them open).

    Attributes:
        onset_indices: signals whose speed detects motion onset and rest (the hands).
        onset_speed: speed above which the operator is moving [m/s].
        onset_min_duration: how long the speed must stay above it [s].
        recognition_time: motion time observed before compensation may engage [s]
            (the thesis: "about 1 s").
        min_task_probability: posterior probability the best task must reach to engage.
        rest_speed: speed below which the operator is at rest [m/s].
        rest_duration: how long the operator must rest for the motion to be over [s].
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
            100 Hz and scale 1 a 30 degree posture gap takes 3 s to blend, longer than
            the motions it compensates, so the default is 3 (chosen with `teleop trial`).
    """

    onset_indices: tuple[int, ...] = tuple(HAND_INDICES)
    onset_speed: float = 0.08
    onset_min_duration: float = 0.1
    recognition_time: float = 0.8
    min_task_probability: float = 0.6
    rest_speed: float = 0.03
    rest_duration: float = 0.4
    min_round_trip: float = 0.04
    ood_consecutive: int = 10
    ood_n_std: float = 2.0
    ood_margin: float = 0.05
    history: float = 1.0
    blend_step_scale: float = 3.0


@dataclass(frozen=True)
class CompensatorOutput:
    """What the compensator decided at one tick.

    Attributes:
        references: (20,) flat references to execute, or None before any sample arrived.
        state: the compensation state.
        task: recognised task label (None before recognition).
        task_probability: its posterior probability.
        speed: estimated execution speed relative to the demonstrations.
        tau_f: age of the newest received sample [s] (the measured forward delay).
        motion_time: operator motion time the output corresponds to [s] (None if idle).
    """

    references: np.ndarray | None
    state: CompensationState
    task: str | None = None
    task_probability: float = 0.0
    speed: float = 1.0
    tau_f: float = float("nan")
    motion_time: float | None = None


class PrescientCompensator:
    """ProMP-based compensation of a round-trip delay (see the module docstring).

    Args:
        library: the task library; None disables compensation (pass-through only).
        config: compensator settings.
        estimator_config: settings of the ProMP online estimator.
    """

    def __init__(self, library: TaskLibrary | None, config: CompensatorConfig = CompensatorConfig(),
                 estimator_config: EstimatorConfig | None = None) -> None:
        self.library = library
        self.config = config
        if library is not None:
            est_cfg = estimator_config or EstimatorConfig(ood_indices=tuple(HAND_INDICES),
                                                          ood_n_std=config.ood_n_std,
                                                          ood_margin=config.ood_margin)
            self.estimator: OnlineEstimator | None = OnlineEstimator(library, est_cfg)
        else:
            self.estimator = None
        self._onset = OnsetDetector(config.onset_indices, config.onset_speed, config.onset_min_duration)
        self._recent: deque[tuple[float, np.ndarray]] = deque()
        self._latest_t = -np.inf
        self._latest_y: np.ndarray | None = None
        self._rest_since: float | None = None
        self._prev_sample: tuple[float, np.ndarray] | None = None
        self.observed_count = 0
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
        self._last_prediction: np.ndarray | None = None
        self._estimate = None
        if self.estimator is not None:
            self.estimator.reset()

    # ---------------------------------------------------------------- input
    def observe(self, t_op: float, flat: np.ndarray, arrival_op: float | None = None) -> None:
        """A delayed sample produced at operator time ``t_op`` [s] has arrived.

        Samples may arrive out of order; every one feeds the estimator, only the newest
        one is the "delayed reference" y(t − τ_f).

        Args:
            t_op: the sample's time stamp (operator clock) [s].
            flat: (20,) flat references.
            arrival_op: arrival time converted to the operator clock [s]; the forward delay
                τ_f = arrival − t_op is measured from it (Eq. 5.19).
        """
        flat = np.asarray(flat, dtype=float)
        if flat.shape != (FLAT_SIZE,) or not np.all(np.isfinite(flat)) or not np.isfinite(t_op):
            raise ValueError("a reference sample must be 20 finite values with a finite time")
        self.observed_count += 1
        if arrival_op is not None:
            delay = float(arrival_op) - float(t_op)
            # Exponential average over ~20 packets: jitter is the estimator's business,
            # the pass-through decision needs the typical delay.
            self.tau_f = delay if self.tau_f is None else 0.95 * self.tau_f + 0.05 * delay
        if t_op > self._latest_t:
            self._track_rest(t_op, flat)
            self._latest_t, self._latest_y = float(t_op), flat
        if self.estimator is None:
            return
        self._recent.append((float(t_op), flat))
        while self._recent and self._recent[0][0] < self._latest_t - self.config.history:
            self._recent.popleft()
        if self._t0 is None:
            onset = self._onset.push(t_op, flat)
            if onset is not None and not self._ended:
                self._t0 = onset
                for t, y in sorted(self._recent, key=lambda s: s[0]):
                    if t >= onset:
                        self._update_estimator(t, y)
            return
        if t_op >= self._t0:
            self._update_estimator(t_op, flat)

    def _update_estimator(self, t_op: float, flat: np.ndarray) -> None:
        self._estimate = self.estimator.update(t_op - self._t0, flat)
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
            self._rest_since = prev[0] if self._rest_since is None else self._rest_since
        else:
            self._rest_since = None

    def _at_rest(self) -> bool:
        return self._rest_since is not None and self._latest_t - self._rest_since >= self.config.rest_duration

    # --------------------------------------------------------------- output
    def step(self, t_op_now: float, tau_b: float) -> CompensatorOutput:
        """The references to execute now.

        Args:
            t_op_now: the current time converted to the operator's clock [s].
            tau_b: the backward delay the video will take (incl. jitter buffer) [s].
        """
        if self._latest_y is None:
            return CompensatorOutput(None, self.state)
        y_d = self._latest_y
        # Measured forward delay (per packet, at arrival), else the sample's age.
        tau_f = self.tau_f if self.tau_f is not None else t_op_now - self._latest_t
        if self.estimator is None or tau_f + tau_b < self.config.min_round_trip:
            self.state = CompensationState.PASSTHROUGH
            return CompensatorOutput(y_d.copy(), self.state, tau_f=tau_f)

        motion_time = None if self._t0 is None else t_op_now + tau_b - self._t0
        state = self.state
        if state is CompensationState.PASSTHROUGH:
            out = y_d
            if self._ready_to_engage():
                y_p = self._predict(motion_time)
                self._blend = SigmoidBlend(y_d, y_p, self.config.blend_step_scale)
                state = CompensationState.BLEND_IN
                out = self._blend.step(y_d, y_p)
            elif self._t0 is not None and (self._rejected or self._ended) and self._at_rest():
                self._reset_motion()
        elif state is CompensationState.BLEND_IN:
            y_p = self._predict(motion_time)
            out = self._blend.step(y_d, y_p)
            if self._ood_run >= self.config.ood_consecutive:
                state, out = self._start_blend_out(y_p, rejected=True), y_p
            elif self._blend.done:
                state = CompensationState.PREDICTING
        elif state is CompensationState.PREDICTING:
            out = self._predict(motion_time)
            if self._ood_run >= self.config.ood_consecutive:
                state = self._start_blend_out(out, rejected=True)
            elif self._motion_over():
                state = self._start_blend_out(out, rejected=False)
        else:  # BLEND_OUT: from the frozen last prediction back to the delayed stream (Eq. 5.27)
            out = self._blend.step(self._frozen_prediction, y_d)
            if self._blend.done:
                state = CompensationState.PASSTHROUGH
        self.state = state
        est = self._estimate
        prob = float(est.task_probabilities[est.task_index]) if est is not None else 0.0
        return CompensatorOutput(np.array(out, dtype=float), state,
                                 task=est.task if est is not None else None, task_probability=prob,
                                 speed=est.speed if est is not None else 1.0, tau_f=tau_f,
                                 motion_time=motion_time)

    def _ready_to_engage(self) -> bool:
        if self._t0 is None or self._rejected or self._ended or self._estimate is None:
            return False
        est = self._estimate
        observed = self._latest_t - self._t0
        return (observed >= self.config.recognition_time
                and est.task_probabilities[est.task_index] >= self.config.min_task_probability
                and not est.out_of_distribution)

    def _motion_over(self) -> bool:
        """The delayed observations themselves show the motion finished: past the learned
        phase range (or near its end) and the operator at rest."""
        est = self._estimate
        return est is not None and est.phase >= 0.9 and self._at_rest()

    def _predict(self, motion_time: float) -> np.ndarray:
        mean, _ = self.estimator.predict_many(np.array([motion_time]), full_cov=False)
        self._last_prediction = mean[0]
        return mean[0]

    def _start_blend_out(self, last_prediction: np.ndarray, rejected: bool) -> CompensationState:
        self._frozen_prediction = np.array(last_prediction, dtype=float)
        self._blend = SigmoidBlend(self._frozen_prediction, self._latest_y, self.config.blend_step_scale)
        self._rejected = self._rejected or rejected
        self._ended = self._ended or not rejected
        return CompensationState.BLEND_OUT
