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


class RelayTestError(RuntimeError, ValueError):
    """The relay test did not oscillate enough to measure T_u and K_u (too few peaks, peaks
    that do not alternate, no amplitude).

    A RuntimeError for :func:`relay_test` (the joint did not oscillate), and also a ValueError:
    for :func:`ultimate_from_peaks` a series with too few peaks is bad input, and a caller that
    checks its input with ``except ValueError`` gets it too.
    """


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

    Args:
        t: (N,) sample times [s], increasing.
        y: (N,) measured angles [rad] (the error's peaks are the angle's: r is constant).
        relay_torque: relay amplitude d [N m], > 0.
        decimation, min_separation: peak detection's thresholds (:func:`detect_peaks`).
        min_peaks: peaks required (reference §3.5.2: ">= 6", the default); at least 3, the
            fewest with two same-sign peaks for T_u.

    Raises ValueError on bad input (mismatched or non-finite series, times not increasing, a
    relay torque d that is not > 0, min_peaks < 3) and :class:`RelayTestError` (also a
    ValueError) on too weak an oscillation (fewer than ``min_peaks`` peaks).
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
    if not (isinstance(min_peaks, (int, np.integer)) and min_peaks >= 3):
        # Fewer cannot hold two same-sign peaks: min_peaks = 2 failed as "peaks do not alternate".
        raise ValueError(f"{joint}: min_peaks must be a whole number >= 3, got {min_peaks!r}")
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
        warmup_s: ``TestWarmupSeconds`` [s], >= 0; the samples before it are not measured.
        duration_s: ``TestDurationSeconds`` [s], > 0; doubled (up to ``max_duration_s``)
            while fewer than 6 peaks are found.

    Raises ValueError naming the argument on bad input (checked before any simulation) and
    :class:`RelayTestError` when even ``max_duration_s`` holds too few peaks.
    """
    if joint not in rig.joints:
        raise ValueError(f"unknown joint {joint!r}; the rig tunes {list(rig.joints)}")
    # Before any simulation: duration_s = 0 (or < 0) never grew by doubling and looped for
    # ever, a NaN ended in "cannot convert float NaN to integer", and a relay torque <= 0 was
    # refused only after the whole relay run.
    checks = (("warmup_s", warmup_s, ">= 0"), ("duration_s", duration_s, "> 0"),
              ("max_duration_s", max_duration_s, "> 0"), ("start_angle_deg", start_angle_deg, ""),
              ("relay_torque", relay_torque, "> 0"), ("target", target, ""))
    for arg, value, bound in checks:
        if value is None:       # relay_torque, target: their defaults
            continue
        ok = np.isfinite(value) and (bound != "> 0" or value > 0) and (bound != ">= 0" or value >= 0)
        if not ok:
            raise ValueError(f"{joint}: {arg} must be finite{' and ' + bound if bound else ''}, got {value!r}")
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
