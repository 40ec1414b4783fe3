"""CoM ground projection retargeting with normalised offsets (thesis §2.2.2, Eqs. 2.2-2.10).

The human CoM projection is located relative to the human's feet by two normalised
offsets, and the same offsets are replayed on the robot's feet:

* along the feet line L->R (Eq. 2.2): o = (c - L).(R - L) / |R - L|^2, o = 0 on the left
  foot centre, 1 on the right foot centre;
* across it (Eq. 2.8): o' = (c - B).(A - B) / |A - B|^2, o' = 0 on the heel edge B,
  1 on the toe edge A;
* robot (Eqs. 2.3, 2.9, 2.10): c_R = L_R + o (R_R - L_R) + (B_R + o' (A_R - B_R) - O_R).

Vector form (the reference's [NOTE]; the slope-intercept form of Eqs. 2.5-2.7 is singular
for side-by-side feet): e_par = (R - L)/|R - L|, e_perp = e_par rotated by +90 degrees
(toe-ward when L is the left foot), O = (L + R)/2, A = O + e_perp max_k e_perp.(P_k - O),
B = O + e_perp min_k e_perp.(P_k - O), where P_k are the sole corners of both feet. Taking
the extreme corner rather than a single toe/heel point per foot (the thesis' T*, H*) gives
the exact extent of the double-support polygon across the feet line; with zero-width feet
the two coincide. Offsets are not clamped (as in the thesis): the ZMP stage enforces
feasibility.

Everything is vectorised: points (..., 2) with any leading shape (frames).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

_EPS = 1e-9
#: Shortest feet line |R - L|, and shallowest polygon depth |A - B| across it [m], that
#: Eqs. 2.2 and 2.8 can divide by: a person's or a robot's feet are centimetres apart and
#: their soles centimetres long, so anything below a millimetre is corrupt input.
MIN_LENGTH_M = 1e-3


@dataclass
class FeetFrame:
    """The feet-line frame of Eqs. 2.4-2.7 in vector form (all (..., 2) [m])."""

    left: npt.NDArray[np.floating[Any]]      #: L, left foot centre
    right: npt.NDArray[np.floating[Any]]     #: R, right foot centre
    origin: npt.NDArray[np.floating[Any]]    #: O = (L + R) / 2
    toe_edge: npt.NDArray[np.floating[Any]]  #: A, on the perpendicular through O, at the front of the polygon
    heel_edge: npt.NDArray[np.floating[Any]]  #: B, on the perpendicular through O, at the back of the polygon


def feet_frame(left_center: npt.NDArray[np.floating[Any]], right_center: npt.NDArray[np.floating[Any]],
               corners: npt.NDArray[np.floating[Any]]) -> FeetFrame:
    """Build the feet-line frame.

    Args:
        left_center, right_center: (..., 2) foot centres L and R [m].
        corners: (..., K, 2) sole corners of both feet [m] (K = 8 for two rectangles).

    Raises:
        ValueError: the foot centres closer than :data:`MIN_LENGTH_M` (no feet line: Eq. 2.2
            divides by |R - L|^2), or the corners spanning less than that across the feet
            line (Eq. 2.8 divides by |A - B|^2); with leading (frame) dimensions the first
            such frame is named. NaN inputs (a lost tracker) give NaN, as elsewhere.
    """
    left = np.asarray(left_center, dtype=float)
    right = np.asarray(right_center, dtype=float)
    corners = np.asarray(corners, dtype=float)
    d = right - left
    n = np.linalg.norm(d, axis=-1, keepdims=True)
    _check_length(n[..., 0], "the left and right foot centres are {:.3g} m apart{}: no feet line for the "
                  "CoM offsets of Eq. 2.2 (feet on top of each other?)")
    e_par = d / np.maximum(n, _EPS)
    e_perp = np.stack([-e_par[..., 1], e_par[..., 0]], axis=-1)
    origin = 0.5 * (left + right)
    along = np.einsum("...kj,...j->...k", corners - origin[..., None, :], e_perp)
    top, bottom = along.max(axis=-1, keepdims=True), along.min(axis=-1, keepdims=True)
    _check_length((top - bottom)[..., 0], "the sole corners span a depth of {:.3g} m across the feet line{}: "
                  "no heel-to-toe extent for the CoM offsets of Eq. 2.8")
    toe = origin + e_perp * top
    heel = origin + e_perp * bottom
    return FeetFrame(left, right, origin, toe, heel)


def _check_length(length: npt.NDArray[np.floating[Any]], message: str) -> None:
    """ValueError with ``message`` (formatted with the length and the frame) if a finite
    ``length`` (...,) is below :data:`MIN_LENGTH_M`."""
    short = np.isfinite(length) & (length < MIN_LENGTH_M)
    if np.any(short):
        where = tuple(int(i) for i in np.argwhere(short)[0])
        at = "" if not where else f" at frame {where[0] if len(where) == 1 else where}"
        raise ValueError(message.format(float(length[where]), at))


def _ratio(p: npt.NDArray[np.floating[Any]], start: npt.NDArray[np.floating[Any]], end: npt.NDArray[np.floating[Any]]
           ) -> npt.NDArray[np.floating[Any]]:
    d = end - start
    return np.sum((p - start) * d, axis=-1) / np.maximum(np.sum(d * d, axis=-1), _EPS)


def normalized_offsets(com_xy: npt.NDArray[np.floating[Any]], frame: FeetFrame
                       ) -> tuple[npt.NDArray[np.floating[Any]], npt.NDArray[np.floating[Any]]]:
    """(o, o') of Eqs. 2.2 and 2.8 for CoM projections (..., 2); each (...,)."""
    com_xy = np.asarray(com_xy, dtype=float)
    return _ratio(com_xy, frame.left, frame.right), _ratio(com_xy, frame.heel_edge, frame.toe_edge)


def apply_offsets(o: npt.NDArray[np.floating[Any]], o_perp: npt.NDArray[np.floating[Any]],
                  frame: FeetFrame) -> npt.NDArray[np.floating[Any]]:
    """Robot CoM projection (..., 2) from the offsets (Eqs. 2.3, 2.9, 2.10)."""
    o = np.asarray(o, dtype=float)[..., None]
    o_perp = np.asarray(o_perp, dtype=float)[..., None]
    along = frame.left + o * (frame.right - frame.left)                              # Eq. 2.3
    across = frame.heel_edge + o_perp * (frame.toe_edge - frame.heel_edge)            # Eq. 2.9
    return along + (across - frame.origin)                                            # Eq. 2.10


def retarget_com(com_xy_human: npt.NDArray[np.floating[Any]], human: FeetFrame,
                 robot: FeetFrame) -> npt.NDArray[np.floating[Any]]:
    """Map human CoM projections (T, 2) to the robot's feet (T, 2) [m]."""
    o, o_perp = normalized_offsets(com_xy_human, human)
    return apply_offsets(o, o_perp, robot)
