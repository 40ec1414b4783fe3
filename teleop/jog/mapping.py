r"""From the tag's pose in the camera frame to a hand target in the robot's base frame.

Reference Part B: absolute jogging *replaces* the hand pose (§B.2, §B.5), relative jogging
*adds* the input's motion to it (§B.2, §B.3). The thesis leaves the camera-to-base mapping
unspecified (§B.6 [NOT IN SOURCE]); here it is

.. math::

    p_{base} = o + s_c\,A\,p_{cam}, \qquad R_{base} = A\,(R_{cam} R_{ref}^T)\,A^T\,R_{hand,0}

with :math:`A` (3, 3) a signed axis permutation (the *axis map*), :math:`s_c` a scale and
:math:`o` (3,) an offset [m]. :math:`R_{ref}` is the tag orientation that means "hand at its
reference orientation" :math:`R_{hand,0}` (default: the tag facing the camera squarely).
:math:`A` may be a reflection (a mirror mapping); :math:`A R A^T` is a rotation either way.

Base frame = the stance frame of :mod:`teleop.robot.model` (x forward, y left, z up).

The damping factor of the absolute-jogging extension (§B.5, Eqs. 5.1-5.2) is
:func:`damp`: :math:`d = t - c`, :math:`j = c + s\,d`, orientation by slerp with the same s,
:math:`s \in [0.1, 1]`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pinocchio as pin

#: The operator faces the camera (camera: x right, y down, z towards the operator) and the
#: robot copies the operator's body: base x (forward) = towards the camera (-z_cam), base y
#: (the operator's left) = the image's right (+x_cam), base z (up) = -y_cam.
DEFAULT_AXIS_MAP = "-z,x,-y"

_AXES = {"x": 0, "y": 1, "z": 2}


def parse_axis_map(spec: str) -> np.ndarray:
    """(3, 3) signed permutation from a spec like ``"-z,x,-y"`` (base x, y, z in camera axes)."""
    parts = [p.strip().lower() for p in spec.split(",")]
    if len(parts) != 3:
        raise ValueError(f"axis map needs three comma-separated axes, got {spec!r}")
    A = np.zeros((3, 3))
    used = set()
    for row, part in enumerate(parts):
        sign = -1.0 if part.startswith("-") else 1.0
        axis = part.lstrip("+-")
        if axis not in _AXES or axis in used:
            raise ValueError(f"axis map {spec!r}: each of x, y, z exactly once (with an optional sign)")
        used.add(axis)
        A[row, _AXES[axis]] = sign
    return A


@dataclass
class HandPose:
    """A hand pose in the base frame: position (3,) [m], rotation (3, 3)."""

    position: np.ndarray
    rotation: np.ndarray

    def copy(self) -> "HandPose":
        return HandPose(self.position.copy(), self.rotation.copy())


@dataclass
class TagMapping:
    """Camera-frame tag pose -> base-frame hand pose (module docstring).

    Attributes:
        axis_map: (3, 3) A, or a spec string (see :func:`parse_axis_map`).
        scale: s_c (1 = the hand moves as far as the tag).
        offset: (3,) o [m] (absolute mode: where the camera origin lands in the base frame).
        tag_reference: (3, 3) R_ref, tag orientation meaning "hand at its reference".
    """

    axis_map: np.ndarray | str = DEFAULT_AXIS_MAP
    scale: float = 1.0
    offset: np.ndarray = field(default_factory=lambda: np.zeros(3))
    tag_reference: np.ndarray = field(default_factory=lambda: np.diag([1.0, -1.0, -1.0]))

    def __post_init__(self) -> None:
        if isinstance(self.axis_map, str):
            self.axis_map = parse_axis_map(self.axis_map)
        A = np.asarray(self.axis_map, dtype=float)
        if A.shape != (3, 3) or not np.allclose(A @ A.T, np.eye(3)):
            raise ValueError("axis map must be an orthogonal (3, 3) matrix")
        self.axis_map = A
        if not np.isfinite(self.scale) or self.scale <= 0:
            raise ValueError("scale must be > 0")
        self.offset = np.asarray(self.offset, dtype=float).reshape(3)

    @property
    def _A(self) -> np.ndarray:
        """The (3, 3) axis map A (:meth:`__post_init__` turned a spec string into it)."""
        assert isinstance(self.axis_map, np.ndarray)
        return self.axis_map

    def position(self, p_cam: np.ndarray) -> np.ndarray:
        """(3,) base-frame point of a (3,) camera-frame point [m]."""
        return self.offset + self.scale * self._A @ np.asarray(p_cam, dtype=float)

    def displacement(self, dp_cam: np.ndarray) -> np.ndarray:
        """(3,) base-frame displacement of a (3,) camera-frame displacement [m]."""
        return self.scale * self._A @ np.asarray(dp_cam, dtype=float)

    def rotation_change(self, R_from: np.ndarray, R_to: np.ndarray) -> np.ndarray:
        """(3, 3) base-frame rotation that takes tag orientation ``R_from`` to ``R_to``."""
        A = self._A
        return A @ (R_to @ R_from.T) @ A.T

    def absolute(self, p_cam: np.ndarray, R_cam: np.ndarray, hand_reference: np.ndarray) -> HandPose:
        """Absolute jogging: the hand pose the tag pose stands for."""
        return HandPose(self.position(p_cam), self.rotation_change(self.tag_reference, R_cam) @ hand_reference)

    def offset_for(self, p_cam: np.ndarray, p_base: np.ndarray) -> np.ndarray:
        """(3,) offset that maps camera point ``p_cam`` onto base point ``p_base`` (to
        calibrate the workspace: "the tag where it is now means the hand where it is now")."""
        return np.asarray(p_base, dtype=float) - self.scale * self._A @ np.asarray(p_cam, dtype=float)


class RelativeJog:
    """Relative (clutched) jogging: while engaged, the hand moves by the tag's motion since
    the clutch was pressed (§B.2: relative jogging adds an offset to the current pose).

    :meth:`engage` stores the tag pose and the hand pose at the press; :meth:`target` then
    returns ``hand_0 + A s_c (p - p_0)`` and ``A (R R_0^T) A^T R_hand_0``. Releasing the
    clutch leaves the hand where it is; pressing again re-anchors (like lifting a mouse).
    """

    def __init__(self, mapping: TagMapping) -> None:
        self.mapping = mapping
        self.anchor: tuple[np.ndarray, np.ndarray, HandPose] | None = None

    @property
    def engaged(self) -> bool:
        return self.anchor is not None

    def engage(self, p_cam: np.ndarray, R_cam: np.ndarray, hand: HandPose) -> None:
        self.anchor = (np.asarray(p_cam, dtype=float).copy(), np.asarray(R_cam, dtype=float).copy(), hand.copy())

    def release(self) -> None:
        self.anchor = None

    def target(self, p_cam: np.ndarray, R_cam: np.ndarray) -> HandPose:
        if self.anchor is None:
            raise RuntimeError("relative jogging target asked while the clutch is released")
        p0, R0, hand0 = self.anchor
        return HandPose(hand0.position + self.mapping.displacement(p_cam - p0),
                        self.mapping.rotation_change(R0, R_cam) @ hand0.rotation)


def slerp(R_from: np.ndarray, R_to: np.ndarray, s: float) -> np.ndarray:
    """(3, 3) rotation the fraction ``s`` of the geodesic from ``R_from`` to ``R_to``."""
    return R_from @ pin.exp3(s * pin.log3(R_from.T @ R_to))


def damp(current: HandPose, target: HandPose, s: float) -> HandPose:
    """Damped step towards the target (§B.5 Eqs. 5.1-5.2): d = t - c, j = c + s d, slerp by s.

    Args:
        s: damping factor in [0.1, 1]; 1 = go straight to the target, 0.5 = half the
            remaining distance each cycle (0 is excluded: the hand would never move).
    """
    if not 0.1 <= s <= 1.0:
        raise ValueError(f"damping factor must be in [0.1, 1], got {s}")
    return HandPose(current.position + s * (target.position - current.position),
                    slerp(current.rotation, target.rotation, s))
