"""Joint position and velocity limits, as bounds on the joint velocities of one tick."""

from __future__ import annotations

import numpy as np

from teleop.robot.model import NQ_BASE, RobotModel


class JointPositionLimit:
    r"""Keep every joint inside its position range after integrating one tick.

    Integrating :math:`q_{k+1} = q_k + \dot q\,\Delta t` must keep
    :math:`q_{min} \le q_{k+1} \le q_{max}`, hence the velocity bounds

    .. math:: \gamma \frac{q_{min} - q}{\Delta t} \le \dot q \le \gamma \frac{q_{max} - q}{\Delta t}

    With :math:`\gamma = 1` (default, the textbook bound) a joint may reach its limit in one
    tick; :math:`\gamma < 1` makes it approach the limit geometrically (pink uses 0.5).
    """

    def __init__(self, robot: RobotModel, gain: float = 1.0) -> None:
        if not 0.0 < gain <= 1.0:
            raise ValueError(f"position limit gain must be in (0, 1], got {gain}")
        self.lower = robot.limits.lower.copy()
        self.upper = robot.limits.upper.copy()
        self.gain = gain
        # Both bounds in one (2, n) buffer: one numpy call computes both (calls cost more
        # than arithmetic at this size).
        self._limits = np.vstack((self.lower, self.upper))
        self._bounds = np.empty_like(self._limits)

    def velocity_bounds(self, q: np.ndarray, dt: float) -> np.ndarray:
        """(2, n) lower (row 0) and upper (row 1) joint-velocity bounds [rad/s] at ``q``
        (a work buffer, overwritten by the next call)."""
        bounds = np.subtract(self._limits, q[NQ_BASE:], out=self._bounds)
        bounds *= self.gain / dt
        return bounds

    def clip(self, q: np.ndarray) -> np.ndarray:
        """``q`` with its joints clipped into their range (in place; returns ``q``)."""
        joints = q[NQ_BASE:]
        np.maximum(joints, self.lower, out=joints)  # faster than np.clip for small arrays
        np.minimum(joints, self.upper, out=joints)
        return q

    def violation(self, q: np.ndarray) -> float:
        """Largest excursion of a joint outside its range [rad] (0 inside)."""
        joints = q[NQ_BASE:]
        return float(max(0.0, np.max(self.lower - joints), np.max(joints - self.upper)))


class JointVelocityLimit:
    r"""Bound every joint velocity by the robot's velocity limits:
    :math:`-\dot q_{max} \le \dot q \le \dot q_{max}`.

    Args:
        scale: fraction of the description's limits to use (e.g. 0.5 for a cautious start).
    """

    def __init__(self, robot: RobotModel, scale: float = 1.0) -> None:
        if not 0.0 < scale <= 1.0:
            raise ValueError(f"velocity limit scale must be in (0, 1], got {scale}")
        self.maximum = robot.limits.velocity * scale
        self.minimum = -self.maximum


def joint_velocity_bounds(position: JointPositionLimit, velocity: JointVelocityLimit,
                          q: np.ndarray, dt: float) -> np.ndarray:
    """Intersection of both limits: (2, n) lower (row 0) and upper (row 1) bounds.

    Both bounds are clipped into the velocity range, so they stay ordered even when ``q``
    starts outside its position range (the joint is then driven back at full speed).
    """
    bounds = position.velocity_bounds(q, dt)
    np.maximum(bounds, velocity.minimum, out=bounds)
    np.minimum(bounds, velocity.maximum, out=bounds)
    return bounds
