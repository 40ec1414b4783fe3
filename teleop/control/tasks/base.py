"""Base class of the controller's tasks (velocity-level IK, Eq. 1.16 of the thesis)."""

from __future__ import annotations

import abc
import math
from typing import cast

import numpy as np

from teleop.control.kinematics import Kinematics


class InvalidTarget(ValueError):
    """A task target (or feed-forward) that is NaN, infinite or of the wrong shape."""


def all_finite(array: np.ndarray) -> bool:
    """True if no entry is NaN or infinite.

    The sum of the entries as Python floats is NaN or inf if any entry is; it is ~2x
    cheaper than ``x.dot(x)`` and ~6x cheaper than ``np.isfinite(x).all()`` for the small
    vectors of a tick. Only absurd finite values (> 1e300) can overflow the sum, and those
    get the exact check.
    """
    return math.isfinite(sum(cast("list[float]", array.tolist()))) or bool(np.isfinite(array).all())


def finite_vector(value, size: int, what: str, owner: str = "") -> np.ndarray:
    """``value`` as a new float (size,) array; :class:`InvalidTarget` if it cannot be one.

    The error message is ``"<owner> <what>: ..."`` (built only on error: this runs for
    every target of every tick)."""
    try:
        array = np.array(value, dtype=float)
    except (TypeError, ValueError):
        raise InvalidTarget(f"{owner} {what}: not a numeric vector ({value!r})".strip()) from None
    if array.shape != (size,):
        if array.size != size:
            raise InvalidTarget(f"{owner} {what}: expected {size} values, got {array.size}".strip())
        array = array.reshape(size)
    if not all_finite(array):
        raise InvalidTarget(f"{owner} {what}: non-finite value {array}".strip())
    return array


class Task(abc.ABC):
    r"""A kinematic task of the velocity IK.

    Every task has an error :math:`e(q) \in \mathbb{R}^k` (target minus current value),
    a Jacobian :math:`J(q) \in \mathbb{R}^{k \times n_v}` such that :math:`\dot e = -J v`
    when the target is still, and contributes to its priority level the cost

    .. math:: w \, \| J v - b \|^2, \qquad b = \dot x_{ff} + \lambda e

    where :math:`w` is the weight, :math:`\lambda` the gain [1/s] and :math:`\dot x_{ff}`
    the feed-forward velocity of the target. With the task alone, :math:`J v = b` makes
    the error decay as :math:`e^{-\lambda t}` while the feed-forward tracks a moving
    target without lag. At a control period ``dt``, ``gain * dt`` is the fraction of the
    error corrected per tick (OpenSoT's :math:`\lambda`); keep it at or below 1.

    Attributes:
        name: unique name in the stack.
        dim: k, the number of task rows.
        weight: w >= 0 (soft priority inside a level).
        gain: lambda >= 0 [1/s].
    """

    #: Bumped whenever any task's weight or gain changes, so that vectorised fills can
    #: cache per-row scales and check one integer per tick instead of every task.
    parameters_version = 0

    def __init__(self, name: str, dim: int, weight: float = 1.0, gain: float = 1.0) -> None:
        self.name = name
        self._label = f"task {name!r}"
        self.dim = dim
        self.weight = weight
        self.gain = gain
        self.feedforward = np.zeros(dim)
        self._has_feedforward = False

    # ------------------------------------------------------------- parameters
    @property
    def weight(self) -> float:
        return self._weight

    @weight.setter
    def weight(self, value: float) -> None:
        value = float(value)
        if not np.isfinite(value) or value < 0.0:
            raise ValueError(f"task {self.name!r}: weight must be finite and >= 0, got {value}")
        self._weight = value
        #: sqrt(w): the task's rows are scaled by it so that ||rows v - b||^2 = w ||J v - b||^2.
        self.sqrt_weight = math.sqrt(value)
        Task.parameters_version += 1

    @property
    def gain(self) -> float:
        return self._gain

    @gain.setter
    def gain(self, value: float) -> None:
        value = float(value)
        if not np.isfinite(value) or value < 0.0:
            raise ValueError(f"task {self.name!r}: gain must be finite and >= 0, got {value}")
        self._gain = value
        Task.parameters_version += 1

    @property
    def has_zero_rows(self) -> bool:
        """True if some of the task's weighted rows are zero (a weight of 0): the strict
        hierarchy must then not let them take a direction from the lower levels."""
        return self._weight == 0.0

    def set_feedforward(self, velocity: np.ndarray | None) -> None:
        """Set the target's velocity (same size as the error; ``None`` = zero)."""
        if velocity is None:
            if self._has_feedforward:
                self.feedforward = np.zeros(self.dim)
                self._has_feedforward = False
        else:
            self.feedforward = finite_vector(velocity, self.dim, "feed-forward", self._label)
            self._has_feedforward = bool(np.any(self.feedforward))

    # ------------------------------------------------------------------- math
    @abc.abstractmethod
    def error(self, kin: Kinematics) -> np.ndarray:
        """(k,) task error e = target - current value at the configuration of ``kin``."""

    @abc.abstractmethod
    def jacobian(self, kin: Kinematics) -> np.ndarray:
        """(k, nv) task Jacobian J (may be a view of a cached array: do not modify)."""

    @abc.abstractmethod
    def set_target_from(self, kin: Kinematics) -> None:
        """Make the current value the target (zero error), e.g. to hold a posture."""

    def fill(self, kin: Kinematics, jacobian_out: np.ndarray, b_out: np.ndarray) -> None:
        """Write the task's weighted rows sqrt(w) J and sqrt(w) b into the level's matrix
        (so that the level's cost is a plain ||A v - b||^2)."""
        np.multiply(self.jacobian(kin), self.sqrt_weight, out=jacobian_out)
        np.multiply(self.error(kin), self._gain * self.sqrt_weight, out=b_out)
        if self._has_feedforward:
            b_out += self.sqrt_weight * self.feedforward

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, weight={self.weight:g}, gain={self.gain:g})"
