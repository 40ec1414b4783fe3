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
        """Hold ``q0`` (n,) [rad]: the next segment starts at rest there."""
        q0 = np.array(q0, dtype=float)
        self._previous = q0.copy()   # q_{k-1}
        self._current = q0.copy()    # q_k

    def targets(self, q_next: np.ndarray, n: int, tick: float) -> tuple[np.ndarray, np.ndarray]:
        """Targets for the ``n`` physics steps that follow the command ``q_next`` (n_joints,).

        Returns ((n, n_joints) positions [rad], (n, n_joints) velocities [rad/s]) at the end of
        each physics step; ``tick`` is the control period [s].
        """
        q_next = np.asarray(q_next, dtype=float)
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
