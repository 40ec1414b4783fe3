r"""Joint position targets for every physics step, from commands that arrive once per control tick.

The whole-body controller commands joint positions :math:`q_k` at 100 Hz; the simulated
servos run at 1 kHz. How the ten targets in between are chosen matters to balance:

* held as a step: the stiff servos jump every 10 ms and the robot hops and slides (56 mm
  of foot slip on an 8 cm squat);
* ramped linearly (``"linear"``): the velocity is continuous within a tick but jumps at
  every tick, by up to the controller's acceleration bound times 10 ms, and the stiff
  servos put that jump through in one physics step (an acceleration ten times the bound).
  Measured on HDM05 dg grabHighR 012 after a held stretch: both toes unloaded in the first
  tick of motion and the centre of pressure went from mid-foot to the heel edge;
* a uniform quadratic B-spline (``"spline"``, the default) with the commands as control
  points. Segment k runs from :math:`m_{k-1} = (q_{k-1}+q_k)/2` to
  :math:`m_k = (q_k+q_{k+1})/2`:

  .. math:: q(s) = (1-s)^2 m_{k-1} + 2s(1-s)\,q_k + s^2 m_k, \quad s \in [0, 1]

  Its velocity runs linearly from :math:`(q_k - q_{k-1})/\Delta t` to
  :math:`(q_{k+1} - q_k)/\Delta t` (continuous), so the acceleration is constant within a tick and
  equal to the controller's own velocity change per tick (bounded by its acceleration
  limit). The curve stays inside the convex hull of the commands, hence inside the joint
  limits. The price is half a tick of latency (5 ms at 100 Hz): the segment played after
  :math:`q_{k+1}` is known ends at the midpoint :math:`m_k`.

Reference (pid_tuning_and_sim_to_real.md, B5) holds the command q_bar for 16 physics steps
(a zero-order hold at 62.5 Hz). We interpolate instead [not in the reference], for the
reasons above: our servos are stiffer than an AX-18 and a held step makes the robot hop.
"""

from __future__ import annotations

import numpy as np

INTERPOLATIONS = ("spline", "linear")


class TickInterpolator:
    """Physics-step targets between control-tick commands (see the module docstring).

    Args:
        q0: (n,) joint positions the robot holds at the start [rad].
        kind: "spline" (quadratic B-spline, C1) or "linear" (ramp, C0).
    """

    def __init__(self, q0: np.ndarray, kind: str = "spline") -> None:
        if kind not in INTERPOLATIONS:
            raise ValueError(f"interpolation must be one of {INTERPOLATIONS}, got {kind!r}")
        self.kind = kind
        self.reset(q0)

    def reset(self, q0: np.ndarray) -> None:
        """Hold ``q0`` (n,) [rad]: the next segment starts at rest there. ValueError for a
        q0 that is not a finite 1-D array."""
        q0 = np.array(q0, dtype=float)
        if q0.ndim != 1 or not np.all(np.isfinite(q0)):
            raise ValueError(f"q0 must be a finite 1-D array of joint angles [rad], got shape {q0.shape}")
        self._previous = q0.copy()   # q_{k-1}
        self._current = q0.copy()    # q_k

    def targets(self, q_next: np.ndarray, n: int, tick: float) -> tuple[np.ndarray, np.ndarray]:
        """Targets for the ``n`` physics steps that follow the command ``q_next`` (n_joints,).

        Returns ((n, n_joints) positions [rad], (n, n_joints) velocities [rad/s]) at the end of
        each physics step; ``tick`` is the control period [s].

        Raises ValueError (the interpolator unchanged) for a q_next of another shape than
        q0 or not finite, ``n`` < 0 or (for n > 0) ``tick`` not a finite number > 0. n = 0
        gives empty arrays (``Simulation.step_ramped`` over no step) and still takes the command.
        """
        q_next = np.asarray(q_next, dtype=float)
        if q_next.shape != self._current.shape or not np.all(np.isfinite(q_next)):
            raise ValueError(f"q_next must be {self._current.shape[0]} finite joint angles [rad] (the shape of q0), "
                             f"got shape {q_next.shape}")
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
            raise ValueError(f"n (physics steps per tick) must be an integer >= 0, got {n!r}")
        if n > 0 and (isinstance(tick, bool) or not isinstance(tick, (int, float, np.floating))
                      or not np.isfinite(tick) or tick <= 0):
            raise ValueError(f"tick (control period) must be a finite number of seconds > 0, got {tick!r}")
        if n == 0:
            self._previous, self._current = self._current, q_next.copy()
            empty = np.zeros((0, len(q_next)))
            return empty, empty.copy()
        s = (np.arange(1, n + 1) / n)[:, None]
        if self.kind == "linear":
            start = self._current
            positions = start + (q_next - start) * s
            velocities = np.broadcast_to((q_next - start) / tick, positions.shape).copy()
        else:
            start = 0.5 * (self._previous + self._current)
            end = 0.5 * (self._current + q_next)
            control = self._current
            positions = (1 - s) ** 2 * start + 2 * s * (1 - s) * control + s ** 2 * end
            velocities = (2 * (1 - s) * (control - start) + 2 * s * (end - control)) / tick
        self._previous, self._current = self._current, q_next.copy()
        return positions, velocities
