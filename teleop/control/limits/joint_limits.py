"""Joint position, velocity and acceleration limits, as bounds on the joint velocities of one tick."""

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
    starts outside its position range (the joint must then move back at least at
    min(gain * excursion / dt, its velocity limit)).
    """
    bounds = position.velocity_bounds(q, dt)
    np.maximum(bounds, velocity.minimum, out=bounds)
    np.minimum(bounds, velocity.maximum, out=bounds)
    return bounds


class JointAccelerationLimit:
    r"""Bound how much each joint velocity may change in one tick:
    :math:`\dot q_{k-1} - \ddot q_{max}\Delta t \le \dot q_k \le \dot q_{k-1} + \ddot q_{max}\Delta t`.

    Why: a velocity-level IK's solution jumps when an inequality becomes active or
    inactive (a joint leaving its position limit, the CoM leaving the polygon's margin);
    the simulated (and a real) position-controlled robot follows that step with a torque
    impulse whose reaction goes straight into the centre of pressure. Measured on HDM05
    dg squat1Reps 028: the knees and hips went from 0 to 80 deg/s in one tick as the ankles
    came off their limit at the bottom of the squat, and the CoP flicked from the heel edge to
    the toe edge within 40 ms. The position bounds take precedence (a joint about to
    reach its limit must stop, however hard), so the bounds always stay ordered.

    Args:
        maximum: joint acceleration bound [rad/s^2]: a scalar, an (n,) array, or
            ``{"default": a, "<joint group>": a, ...}`` (groups of the robot description;
            joints in no listed group get the default, or no bound without one).
    """

    def __init__(self, robot: RobotModel, maximum: float | np.ndarray | dict[str, float]) -> None:
        if isinstance(maximum, dict):
            per_joint = np.full(robot.n_joints, float(maximum.get("default", np.inf)))
            for group, value in maximum.items():
                if group != "default":
                    per_joint[robot.group_indices(group)] = float(value)
            maximum = per_joint
        self.maximum = np.broadcast_to(np.asarray(maximum, dtype=float), (robot.n_joints,)).copy()
        if not np.all(self.maximum > 0):
            raise ValueError("joint acceleration limits must be > 0")
        self.previous = np.zeros(robot.n_joints)   # [rad/s], the last commanded joint velocities
        self._dt: float | None = None
        self._window = np.empty((2, robot.n_joints))

    def reset(self) -> None:
        """Start from rest (after a reset or a held tick)."""
        self.previous[:] = 0.0

    def commanded(self, joint_velocities: np.ndarray) -> None:
        """Record the (n,) joint velocities commanded this tick [rad/s]."""
        self.previous[:] = joint_velocities

    def restrict(self, bounds: np.ndarray, dt: float) -> np.ndarray:
        """Intersect (2, n) velocity ``bounds`` (in place) with this tick's acceleration
        window, keeping the position/velocity bounds where the two conflict: the window's
        ends are clipped into the bounds, so they stay ordered."""
        if dt != self._dt:  # the window's half-widths, per row: (2, n) [-a dt; +a dt]
            self._dt = dt
            self._steps = np.stack((-self.maximum * dt, self.maximum * dt))
        # Three ufunc calls on (2, n) buffers: np.stack + np.clip cost ~4x more per tick.
        window = np.add(self.previous, self._steps, out=self._window)
        np.maximum(window, bounds[0], out=window)
        np.minimum(window, bounds[1], out=bounds)
        return bounds
