"""Relay auto-tuning (reference §3.5.2, Fig. 3.15): T_u and K_u of one joint.

1. Zero the joint's gains; the other joints keep theirs.
2. Apply ±d (``RelayConstantForce``, default the joint's torque limit: "start with the joint's
   maximum force") with the sign of the error e = r − y, every physics step.
3. Start ``RelayStartAngle`` away from the target r (``RelayTargetAngle``, default the joint's
   home angle, inside its limits) and warm up for ``TestWarmupSeconds``.
4. Measure for ``TestDurationSeconds`` and detect the peaks of the measured angle (§3.3.3);
   at least 6 are required (more is more accurate).
5. T_u = mean distance between consecutive same-sign peaks; a = half the mean peak-to-peak
   amplitude of the measured angle; K_u = 4d/(πa) (describing function of an ideal relay,
   [not in source]: the thesis only says "amplitude between positive and negative peaks").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from teleop.tuning.peaks import detect_peaks
from teleop.tuning.rig import ArmRig, Relay

MIN_PEAKS = 6


class RelayTestError(RuntimeError):
    """The relay test did not oscillate enough to measure T_u and K_u."""


@dataclass
class RelayResult:
    """T_u [s], K_u [N m/rad], relay torque d [N m], amplitude a [rad] and the peak count."""

    joint: str
    tu: float
    ku: float
    amplitude_torque: float
    amplitude_angle: float
    n_peaks: int


def ultimate_from_peaks(t: np.ndarray, y: np.ndarray, relay_torque: float, decimation: int = 2,
                        min_separation: int = 4, min_peaks: int = MIN_PEAKS, joint: str = "") -> RelayResult:
    """T_u and K_u from a relay oscillation: (N,) times [s] and measured angles [rad].

    Raises ValueError on bad input (mismatched or non-finite series, times not increasing, a
    relay torque d that is not > 0) and :class:`RelayTestError` on too weak an oscillation.
    """
    t = np.asarray(t, dtype=float)
    y = np.asarray(y, dtype=float)
    if t.ndim != 1 or t.shape != y.shape:
        raise ValueError(f"{joint}: times and angles must be equal-length 1-D arrays, got {t.shape} and {y.shape}")
    if not (np.all(np.isfinite(t)) and np.all(np.isfinite(y))):
        raise ValueError(f"{joint}: relay samples must be finite (NaN or inf found)")
    if np.any(np.diff(t) <= 0):
        raise ValueError(f"{joint}: relay sample times are not increasing")
    if not (np.isfinite(relay_torque) and relay_torque > 0):
        raise ValueError(f"{joint}: the relay torque d must be > 0, got {relay_torque!r}")
    peaks = detect_peaks(y, decimation, min_separation)
    if len(peaks.index) < min_peaks:
        raise RelayTestError(f"{joint}: relay test found {len(peaks.index)} peaks, needs >= {min_peaks} "
                             "(lengthen the measurement or raise the relay torque)")
    periods: list[float] = []
    for sign in (1, -1):
        times = t[peaks.index[peaks.sign == sign]]
        periods.extend(np.diff(times))
    maxima = peaks.value[peaks.sign == 1]
    minima = peaks.value[peaks.sign == -1]
    if not periods or not len(maxima) or not len(minima):
        raise RelayTestError(f"{joint}: relay peaks do not alternate")
    amplitude = 0.5 * (np.mean(maxima) - np.mean(minima))
    if amplitude <= 0:
        raise RelayTestError(f"{joint}: relay oscillation has no amplitude")
    ku = 4.0 * relay_torque / (np.pi * amplitude)
    return RelayResult(joint, float(np.mean(periods)), float(ku), float(relay_torque), float(amplitude),
                       len(peaks.index))


def relay_test(rig: ArmRig, joint: str, gains, relay_torque: float | None = None,
               start_angle_deg: float = 10.0, target: float | None = None,
               warmup_s: float = 0.3, duration_s: float = 0.9, max_duration_s: float = 4.0) -> RelayResult:
    """Run the relay test of one of ``rig``'s joints (the other joints use ``gains``).

    Args:
        gains: current gains of all of the rig's joints (n :class:`PidGains`).
        relay_torque: d [N m] (default: the joint's torque limit in this setup).
        start_angle_deg: ``RelayStartAngle``, offset of the start from the target [deg].
        target: ``RelayTargetAngle`` [rad] (default: home).
    """
    if joint not in rig.joints:
        raise ValueError(f"unknown joint {joint!r}; the rig tunes {list(rig.joints)}")
    j = rig.joints.index(joint)
    d = float(rig.torque_limit[j] if relay_torque is None else relay_torque)
    setpoint = rig.home[rig.idx].copy()
    if target is not None:
        setpoint[j] = target
    # Too few peaks (a slow joint): measure longer, up to max_duration_s, rather than fail.
    while True:
        steps = int(round((warmup_s + duration_s) / rig.dt))
        rec = rig.run(np.tile(setpoint, (steps, 1)), list(gains), motion=f"relay {joint}", record_every=1,
                      relay=Relay(j, d, np.radians(start_angle_deg)))
        trace = rec.traces[joint]
        keep = trace.t >= warmup_s
        try:
            return ultimate_from_peaks(trace.t[keep], np.radians(trace.measured[keep]), d, joint=joint)
        except RelayTestError:
            if duration_s * 2 > max_duration_s:
                raise
            duration_s *= 2
