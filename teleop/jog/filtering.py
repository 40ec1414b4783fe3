r"""Filtering the tag pose: One-Euro filters for position and orientation, orientation gated
by its own measured noise, and hold-last-target when the tag is lost.

The reference (Part B, §B.6, §B.9.3) reports that the AprilTag orientation "was too noisy
and sometimes caused unexpected motion", so orientation control had to be disabled, and
that the position was noisy too. Here:

* position: a One-Euro filter (Casiez, Roussel & Vogel, CHI 2012): an exponential
  smoother whose cutoff rises with speed, :math:`f_c = f_{c,min} + \beta |\dot{\hat x}|`,
  :math:`\alpha = 1 / (1 + \tau / T_e)`, :math:`\tau = 1 / (2\pi f_c)`; slow motion is
  smoothed hard (jitter removed), fast motion passes with little lag;
* orientation: the same filter on SO(3): the raw rotation is approached by the fraction
  :math:`\alpha` of the geodesic, :math:`\hat R \leftarrow \hat R \exp(\alpha \log(\hat R^T R))`;
* gating: the orientation's noise level :math:`\sigma_\theta` is the running RMS of the
  angle between the raw and filtered orientations. Orientation is *used* only while
  :math:`\sigma_\theta` is below ``max_noise_deg`` (with hysteresis); single samples
  further than ``outlier_sigmas`` sigma (e.g. the IPPE planar-ambiguity flip of a tag seen
  face-on) are rejected. A flip comes and goes; a real turn stays: rejected samples that
  agree with each other (within ``min_outlier_deg``) for ``turn_confirm_s`` restart the
  orientation filter at the new orientation, so a quick turn of the tag (or the tag seen
  again turned) cannot lock the orientation out. When gated, the last trusted orientation
  is held;
* position only: a measurement without a rotation updates the position; the orientation
  is held (untrusted until a rotation has been seen);
* tag lost: :meth:`PoseFilter.update` with ``None`` keeps the last output (the jogging
  target is held, §B.6 [Note]); after ``reset_after_s`` without the tag the filter
  restarts, so that reacquiring the tag elsewhere does not drag the target across.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import pinocchio as pin


def _alpha(cutoff_hz: float, dt: float) -> float:
    tau = 1.0 / (2.0 * math.pi * cutoff_hz)
    return 1.0 / (1.0 + tau / dt)


class OneEuroFilter:
    """One-Euro filter of a (k,) vector signal; the cutoff follows the speed's norm.

    Args:
        min_cutoff_hz: cutoff at rest [Hz] (lower: less jitter, more lag at low speed).
        beta: speed coefficient [Hz per (unit/s)] (higher: less lag when moving).
        d_cutoff_hz: cutoff of the speed estimate [Hz].
    """

    def __init__(self, min_cutoff_hz: float = 1.0, beta: float = 10.0, d_cutoff_hz: float = 1.0) -> None:
        self.min_cutoff_hz, self.beta, self.d_cutoff_hz = float(min_cutoff_hz), float(beta), float(d_cutoff_hz)
        self.reset()

    def reset(self) -> None:
        self.x: np.ndarray | None = None
        self.dx: np.ndarray | None = None
        self.t: float | None = None

    def __call__(self, t: float, x: np.ndarray) -> np.ndarray:
        """Filter sample ``x`` (k,) taken at time ``t`` [s]; returns the (k,) estimate."""
        x = np.asarray(x, dtype=float)
        if self.x is None or self.t is None or t <= self.t:
            if self.x is None or self.t is None:
                self.x, self.dx, self.t = x.copy(), np.zeros_like(x), float(t)
            return self.x.copy()
        dt = t - self.t
        self.t = float(t)
        dx = (x - self.x) / dt
        self.dx = self.dx + _alpha(self.d_cutoff_hz, dt) * (dx - self.dx)
        cutoff = self.min_cutoff_hz + self.beta * float(np.linalg.norm(self.dx))
        self.x = self.x + _alpha(cutoff, dt) * (x - self.x)
        return self.x.copy()


class OrientationOneEuroFilter:
    """One-Euro filter on SO(3): slerp towards the raw rotation by the filter's alpha.

    Args: as :class:`OneEuroFilter`, with the speed in rad/s.
    """

    def __init__(self, min_cutoff_hz: float = 1.0, beta: float = 2.0, d_cutoff_hz: float = 1.0) -> None:
        self.min_cutoff_hz, self.beta, self.d_cutoff_hz = float(min_cutoff_hz), float(beta), float(d_cutoff_hz)
        self.reset()

    def reset(self) -> None:
        self.R: np.ndarray | None = None
        self.speed = 0.0
        self.t: float | None = None

    def __call__(self, t: float, R: np.ndarray) -> np.ndarray:
        """Filter the (3, 3) rotation ``R`` taken at ``t`` [s]; returns the (3, 3) estimate."""
        if self.R is None or self.t is None:
            self.R, self.t = np.array(R, dtype=float), float(t)
            return self.R.copy()
        if t <= self.t:
            return self.R.copy()
        dt = t - self.t
        self.t = float(t)
        delta = pin.log3(self.R.T @ R)  # body-frame rotation vector to the sample
        self.speed += _alpha(self.d_cutoff_hz, dt) * (float(np.linalg.norm(delta)) / dt - self.speed)
        cutoff = self.min_cutoff_hz + self.beta * self.speed
        self.R = self.R @ pin.exp3(_alpha(cutoff, dt) * delta)
        return self.R.copy()


@dataclass
class FilteredPose:
    """Output of :class:`PoseFilter`.

    Attributes:
        t: time of the last measurement used [s].
        position: (3,) filtered position [m]; rotation: (3, 3) trusted orientation.
        orientation_valid: True while the orientation passes its noise gate.
        orientation_noise_deg: running RMS orientation noise [deg].
        position_noise_mm: running RMS of raw minus filtered position [mm].
        fresh: True if this output includes a measurement of this call; False when held.
        age_s: time since the last measurement [s].
    """

    t: float
    position: np.ndarray
    rotation: np.ndarray
    orientation_valid: bool
    orientation_noise_deg: float
    position_noise_mm: float
    fresh: bool
    age_s: float


class PoseFilter:
    """Tag pose filter: One-Euro position, gated One-Euro orientation, hold on loss.

    Args:
        position: position filter (default: 1 Hz at rest, beta 20 Hz/(m/s), speed estimate
            cut at 3 Hz). Measured in `teleop bench jog`'s closed loop (pupil detector),
            (beta, speed cutoff) = (10, 1 Hz) / (20, 1) / (10, 3) / (20, 3): command to 50 %
            of a 1 cm hand step 53.7 / 52.6 / 50.5 / 50.0 ms (with the arm acceleration bound of
            the time, 20 rad/s^2; see :func:`teleop.jog.session.jog_stack`); figure-eight RMS 2.14 / - /
            1.57 / 1.30 mm with a tracking delay of 14.5 / - / 4.5 / 2.5 ms; goal jitter with
            the tag still 0.013 / - / 0.018 / 0.019 mm RMS. A 1 Hz speed estimate let a step
            through only after two or three frames.
        orientation: orientation filter.
        max_noise_deg: orientation is trusted while its RMS noise is below this [deg]
            (and re-trusted below 0.7 times this: hysteresis).
        outlier_sigmas: a raw orientation further than this many RMS noise levels (and
            more than ``min_outlier_deg``) from the filtered one is rejected as an outlier.
        noise_time_constant_s: time constant of the running noise estimates [s].
        reset_after_s: restart the filters when the tag was lost for longer than this [s].
        turn_confirm_s: rejected orientations that agree with each other for this long are a
            real turn, not outliers: the orientation filter restarts there [s].
    """

    def __init__(self, position: OneEuroFilter | None = None, orientation: OrientationOneEuroFilter | None = None,
                 max_noise_deg: float = 3.0, outlier_sigmas: float = 5.0, min_outlier_deg: float = 15.0,
                 noise_time_constant_s: float = 0.5, reset_after_s: float = 1.0,
                 turn_confirm_s: float = 0.3) -> None:
        self.position_filter = position or OneEuroFilter(1.0, 20.0, 3.0)
        self.orientation_filter = orientation or OrientationOneEuroFilter(1.0, 2.0, 1.0)
        self.max_noise_deg = float(max_noise_deg)
        self.outlier_sigmas = float(outlier_sigmas)
        self.min_outlier_deg = float(min_outlier_deg)
        self.noise_time_constant_s = float(noise_time_constant_s)
        self.reset_after_s = float(reset_after_s)
        self.turn_confirm_s = float(turn_confirm_s)
        self.reset()

    def reset(self) -> None:
        self.position_filter.reset()
        self.orientation_filter.reset()
        self.last: FilteredPose | None = None
        self._rot_var = 0.0      # running mean square of the raw-vs-filtered angle [rad^2]
        self._pos_var = 0.0      # same for position [m^2]
        self._orientation_valid = False
        self._trusted_R: np.ndarray | None = None
        self._rejected_since: tuple[float, np.ndarray] | None = None   # (t, R) of a run of rejections
        self.outliers = 0
        self.turns_confirmed = 0

    def update(self, t: float, position: np.ndarray | None = None,
               rotation: np.ndarray | None = None) -> FilteredPose | None:
        """Feed one measurement (position (3,) [m], rotation (3, 3) or None for position only)
        at ``t`` [s], or ``position=None`` when the tag was not seen. Returns the current
        estimate (None before the first sighting). A measurement not newer than the last one
        used is dropped (reference §B.3 A): the estimate is returned unchanged, not fresh."""
        if position is None:
            if self.last is None:
                return None
            age = t - self.last.t
            if age > self.reset_after_s:
                held = self.last
                self.reset()
                self.last = held  # keep holding the target; the filters restart on reacquisition
            self.last = FilteredPose(self.last.t, self.last.position, self.last.rotation, self.last.orientation_valid,
                                     self.last.orientation_noise_deg, self.last.position_noise_mm, False, age)
            return self.last
        if self.last is not None and t <= self.last.t:
            # Not newer than the last measurement used: dropped, as jog_control drops a
            # message older than the last one (reference §B.3 A). Taken, it left the
            # estimate as it was but stamped it with its older time: the jogging tick then
            # extrapolated the goal over that larger age (8.5 mm ahead for one sample
            # 33 ms stale of a tag moving at 0.1 m/s).
            return replace(self.last, fresh=False, age_s=0.0)
        position = np.asarray(position, dtype=float)
        previous_t = self.position_filter.t
        dt = 0.0 if previous_t is None else max(t - previous_t, 0.0)
        k = 1.0 - math.exp(-dt / self.noise_time_constant_s) if dt > 0 else 0.0
        if rotation is None:
            R_f = self.orientation_filter.R if self.orientation_filter.R is not None else np.eye(3)
        else:
            R_f = self._orientation(t, np.asarray(rotation, dtype=float), k)
        p_f = self.position_filter(t, position)
        self._pos_var += k * (float(np.sum((position - p_f) ** 2)) - self._pos_var)
        noise_deg = math.degrees(math.sqrt(self._rot_var))
        # Gate with hysteresis; before any noise estimate exists (first samples) trust nothing.
        warmed_up = previous_t is not None and self.orientation_filter.R is not None
        if self._orientation_valid and noise_deg > self.max_noise_deg:
            self._orientation_valid = False
        elif not self._orientation_valid and warmed_up and noise_deg < 0.7 * self.max_noise_deg:
            self._orientation_valid = True
        if self._orientation_valid or self._trusted_R is None:
            self._trusted_R = R_f.copy()
        self.last = FilteredPose(float(t), p_f, self._trusted_R.copy(), self._orientation_valid, noise_deg,
                                 1e3 * math.sqrt(self._pos_var), True, 0.0)
        return self.last

    def _orientation(self, t: float, rotation: np.ndarray, k: float) -> np.ndarray:
        """Outlier test of a raw (3, 3) rotation against the filtered one, then the filter;
        updates the noise level (``k``: this sample's weight in it). Returns the filtered R."""
        R_prev = self.orientation_filter.R
        accept = True
        if R_prev is not None:
            angle = float(np.linalg.norm(pin.log3(R_prev.T @ rotation)))
            limit = max(self.outlier_sigmas * math.sqrt(self._rot_var), math.radians(self.min_outlier_deg))
            if angle > limit:
                accept = self._confirmed_turn(t, rotation)
                self.outliers += not accept
        if not accept:
            # An outlier is noise too: it counts in the noise level, so a stream of flips closes the gate.
            self._rot_var += k * (math.radians(self.min_outlier_deg) ** 2 - self._rot_var)
            # Only a sample tested against R_prev is rejected, and a rejection leaves the filter as it was.
            assert R_prev is not None
            return R_prev
        self._rejected_since = None
        R_f = self.orientation_filter(t, rotation)
        residual = float(np.linalg.norm(pin.log3(R_f.T @ rotation)))
        self._rot_var += k * (residual ** 2 - self._rot_var)
        return R_f

    def _confirmed_turn(self, t: float, rotation: np.ndarray) -> bool:
        """A rejected rotation: True (and the orientation filter restarted at it) once the
        rejected samples have agreed with each other for ``turn_confirm_s``."""
        run = self._rejected_since
        if run is None or float(np.linalg.norm(pin.log3(run[1].T @ rotation))) > math.radians(self.min_outlier_deg):
            self._rejected_since = (t, rotation)      # a new run (or the first rejection)
            return False
        if t - run[0] < self.turn_confirm_s:
            return False
        self.orientation_filter.reset()
        self.turns_confirmed += 1
        return True
