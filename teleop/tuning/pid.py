"""The product's joint PID torque controller (reference Part A, §2.3.2).

Parallel form, as the reference stores gains (§2.3.2, §3.2.3):

    u(t) = K_p e(t) + K_i ∫₀ᵗ e dτ + K_d de/dt,     e = r − y   (r set-point, y measured)

plus what the reference leaves to the implementer (its §2.3.2 names none; A8 checklist item 1
asks for them): a first-order low-pass filter on the derivative, a torque limit on the output
and integral anti-windup. All quantities are SI: angles [rad], torques [N m], time [s];
K_p [N m/rad], K_i [N m/(rad s)], K_d [N m s/rad].
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class PidGains:
    """Parallel-form gains of one joint (Eq. in §2.3.2). Units: see the module docstring."""

    kp: float
    ki: float = 0.0
    kd: float = 0.0

    def __post_init__(self) -> None:
        for name in ("kp", "ki", "kd"):
            value = getattr(self, name)
            if not np.isfinite(value) or value < 0:
                raise ValueError(f"PID gain {name} must be finite and >= 0, got {value!r}")

    @classmethod
    def from_standard(cls, kp: float, ti: float | None, td: float) -> "PidGains":
        """From standard form u = K_p(e + (1/T_i)∫e + T_d ė): K_i = K_p/T_i, K_d = K_p T_d
        (the relations the reference's ``PidParameters`` implements but does not write).
        ``ti`` None (or inf) means no integral action; T_i = 0 would be an infinite K_i and is
        refused, as is a negative T_i or T_d."""
        if ti is not None and not ti > 0:
            raise ValueError(f"T_i must be > 0 (None: no integral action), got {ti!r}")
        if not td >= 0:
            raise ValueError(f"T_d must be >= 0, got {td!r}")
        return cls(kp, 0.0 if ti is None else kp / ti, kp * td)

    def to_standard(self) -> tuple[float, float | None, float]:
        """(K_p, T_i [s] or None without I, T_d [s])."""
        if self.kp == 0:
            raise ValueError("standard form needs K_p > 0")
        return self.kp, (self.kp / self.ki if self.ki else None), self.kd / self.kp

    def as_dict(self) -> dict[str, float]:
        return {"kp": float(self.kp), "ki": float(self.ki), "kd": float(self.kd)}


class PidController:
    """PID torque control of n joints at once (vectorised, one physics step per call).

    Args:
        gains: n :class:`PidGains`, one per joint.
        dt: control period [s] (the physics step: the loop runs once per step).
        torque_limit: (n,) output limits [N m]; the output is clipped to ±limit.
        derivative_filter_s: time constant T_f [s] of the first-order low-pass on de/dt
            (D(s) = K_d s / (1 + T_f s)); 0 disables the filter.

    Anti-windup is conditional integration (clamping): the integral does not grow while the
    output is saturated in the direction the error pushes, so a long saturated move (a 45°
    step with a small torque limit, §4.1 setup 3) does not leave a huge integral that
    overshoots afterwards. The integral term is also bounded to ±torque_limit.
    """

    def __init__(self, gains: list[PidGains], dt: float, torque_limit: np.ndarray,
                 derivative_filter_s: float = 0.002) -> None:
        self.n = len(gains)
        # Checked here, not in the 1 kHz loop: dt = 0 divided by zero at the second update,
        # a NaN dt or T_f ran on with NaN torques, T_f = −dt divided by zero, and a NaN torque
        # limit passed "limit <= 0" and left the output unclipped.
        if not (np.isfinite(dt) and dt > 0):
            raise ValueError(f"dt must be a finite control period > 0 [s], got {dt!r}")
        if not (np.isfinite(derivative_filter_s) and derivative_filter_s >= 0):
            raise ValueError(f"derivative_filter_s must be finite and >= 0 [s], got {derivative_filter_s!r}")
        self.dt = float(dt)
        self.torque_limit = np.broadcast_to(np.asarray(torque_limit, dtype=float), (self.n,)).copy()
        if not np.all(self.torque_limit > 0):   # also refuses NaN (+inf: no limit, allowed)
            raise ValueError(f"torque_limit must be > 0 [N m] on every joint, got {self.torque_limit.tolist()}")
        self.derivative_filter_s = float(derivative_filter_s)
        self._alpha = self.dt / (self.derivative_filter_s + self.dt)
        self.set_gains(gains)
        self.reset()

    def set_gains(self, gains: list[PidGains]) -> None:
        if len(gains) != self.n:
            raise ValueError(f"need {self.n} gains, got {len(gains)}")
        self.kp = np.array([g.kp for g in gains])
        self.ki = np.array([g.ki for g in gains])
        self.kd = np.array([g.kd for g in gains])
        # Plain-float copies for the 1 kHz loop (numpy scalars are slow to index).
        self._gains = list(zip(self.kp.tolist(), self.ki.tolist(), self.kd.tolist(), self.torque_limit.tolist()))

    @property
    def gains(self) -> list[PidGains]:
        return [PidGains(p, i, d) for p, i, d in zip(self.kp, self.ki, self.kd)]

    def reset(self) -> None:
        """Forget the integral, the filtered derivative and the previous error."""
        self.integral = [0.0] * self.n          # ∫e dτ [rad s] per joint
        self.derivative = [0.0] * self.n        # filtered de/dt [rad/s] per joint
        self.previous_error: list[float] | None = None

    def update(self, setpoint: np.ndarray, measured: np.ndarray) -> np.ndarray:
        """One control step: (n,) set-points and measured angles [rad] -> (n,) torques [N m]."""
        return np.array(self.update_fast([float(v) for v in np.asarray(setpoint, dtype=float)],
                                         [float(v) for v in np.asarray(measured, dtype=float)]))

    def update_fast(self, setpoint: list[float], measured: list[float]) -> list[float]:
        """:meth:`update` on plain lists of n floats (the 1 kHz loop's form).

        Written as a loop over Python floats: with n = 5 joints, numpy's per-call overhead
        (~20 small-array operations) costs 5-10x more than the arithmetic itself.
        """
        dt, alpha = self.dt, self._alpha
        previous = self.previous_error
        first = previous is None
        if previous is None:
            previous = [0.0] * self.n
        errors, torques = [], []
        for j in range(self.n):
            e = setpoint[j] - measured[j]
            errors.append(e)
            # Filtered derivative: first-order low-pass (backward Euler), stable for any T_f;
            # no derivative on the very first sample (no history, no kick).
            raw = 0.0 if first else (e - previous[j]) / dt
            d = self.derivative[j] + alpha * (raw - self.derivative[j])
            self.derivative[j] = d
            kp, ki, kd, limit = self._gains[j]
            pd = kp * e + kd * d
            integral = self.integral[j]
            unclipped = pd + ki * integral
            # Conditional integration (anti-windup): integrate unless the output is saturated
            # and the error pushes it further out; then keep |K_i ∫e| within the limit.
            if abs(unclipped) < limit or unclipped * e <= 0:
                integral += e * dt
                if ki > 0:
                    bound = limit / ki
                    integral = bound if integral > bound else (-bound if integral < -bound else integral)
                self.integral[j] = integral
            u = pd + ki * integral
            torques.append(limit if u > limit else (-limit if u < -limit else u))
        self.previous_error = errors
        return torques
