"""Whole-body centre of mass from segment poses, with de Leva's (1996) mass table.

Source: P. de Leva, "Adjustments to Zatsiorsky-Seluyanov's segment inertia parameters",
J. Biomechanics 29(9):1223-1230, 1996, Table 4 (males): segment masses in % of body mass
and the position of each segment's CoM in % of its length from the proximal landmark.

The de Leva landmarks are mapped onto the canonical segment origins (MVN joint centres):

====================  =====  ==================================================  =====
de Leva segment       mass%  proximal -> distal landmark  (canonical points)      CoM%
====================  =====  ==================================================  =====
head (+ neck)         6.94   cervicale C7 (neck origin) -> vertex, see below      40.24
upper trunk           15.96  suprasternale (neck origin) -> xiphoid (t12)        29.99
middle trunk          16.33  xiphoid (t12) -> omphalion (l3)                     45.02
lower trunk           11.17  omphalion (l3) -> hip centres midpoint (pelvis)     61.15
upper arm             2.71   shoulder (upper_arm) -> elbow (forearm)             57.72
forearm               1.62   elbow (forearm) -> wrist (hand)                     45.74
hand                  0.61   wrist (hand) -> 3rd metacarpal head                 79.00
thigh                 14.16  hip (upper_leg) -> knee (lower_leg)                 40.95
shank                 4.33   knee (lower_leg) -> ankle (foot)                    44.59
foot                  1.37   heel -> toe tip (approximated: ankle->ball midway)  50
====================  =====  ==================================================  =====

Distal landmarks that are not segment origins are placed along the segment axis in its
N-pose-aligned frame, proportional to a measured length: the 3rd metacarpal head at
0.32 x forearm length below the wrist (de Leva's hand/forearm length ratio 86.2/268.9)
and the head CoM 0.25 x (C7-C1 distance) above C1 (the de Leva head+neck CoM lies about
at C1 height for adults; the small offset keeps it inside the skull).
These approximations move the whole-body CoM by millimetres, well below what matters
for a ground projection used through normalised offsets.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Iterable

import numpy as np
import numpy.typing as npt

from . import quat
from .human import HumanMotion

# A rule is ("between", a, b, f): p_a + f (p_b - p_a)
#        or ("along", a, axis (3,), ref_a, ref_b, k): p_a + R_a axis * k * |p_ref_b - p_ref_a|.
# Each mass element lists alternative rules; the first whose segments are present is used.
_Rule = tuple[Any, ...]
_HEAD = [("along", "head", (0.0, 0.0, 1.0), "neck", "head", 0.25), ("between", "head", "head", 0.0)]
_UPPER_TRUNK = [("between", "neck", "t12", 0.2999), ("between", "neck", "pelvis", 0.15)]
_MIDDLE_TRUNK = [("between", "t12", "l3", 0.4502), ("between", "t8", "pelvis", 0.55)]
_LOWER_TRUNK = [("between", "l3", "pelvis", 0.6115), ("between", "t8", "pelvis", 0.85)]


def _limb(side: str) -> list[tuple[float, list[_Rule]]]:
    s = side
    return [
        (2.71, [("between", f"{s}_upper_arm", f"{s}_forearm", 0.5772)]),
        (1.62, [("between", f"{s}_forearm", f"{s}_hand", 0.4574)]),
        (0.61, [("along", f"{s}_hand", (0.0, 0.0, -1.0), f"{s}_forearm", f"{s}_hand", 0.79 * 0.32)]),
        (14.16, [("between", f"{s}_upper_leg", f"{s}_lower_leg", 0.4095)]),
        (4.33, [("between", f"{s}_lower_leg", f"{s}_foot", 0.4459)]),
        (1.37, [("between", f"{s}_foot", f"{s}_toe", 0.5), ("between", f"{s}_foot", f"{s}_foot", 0.0)]),
    ]


#: (mass % of body mass, alternative CoM rules) for every de Leva segment.
MASS_TABLE: list[tuple[float, list[_Rule]]] = [
    (6.94, _HEAD), (15.96, _UPPER_TRUNK), (16.33, _MIDDLE_TRUNK), (11.17, _LOWER_TRUNK),
    *_limb("left"), *_limb("right"),
]
assert abs(sum(m for m, _ in MASS_TABLE) - 100.0) < 1e-9


def _rule_segments(rule: _Rule) -> tuple[str, ...]:
    if rule[0] == "between":
        return rule[1], rule[2]
    return rule[1], rule[3], rule[4]


def can_compute_com(segment_names: Iterable[str]) -> bool:
    """Whether every mass element has an applicable rule for these segments."""
    present = set(segment_names)
    return all(any(set(_rule_segments(r)) <= present for r in rules) for _, rules in MASS_TABLE)


@lru_cache(maxsize=32)
def _plan(segment_names: tuple[str, ...]
          ) -> tuple[tuple[npt.NDArray[np.intp], npt.NDArray[np.intp], npt.NDArray[np.floating[Any]],
                           npt.NDArray[np.floating[Any]]],
                     tuple[npt.NDArray[np.intp], npt.NDArray[np.floating[Any]], npt.NDArray[np.floating[Any]]]]:
    """Index arrays applying the mass table to one segment set (cached per set)."""
    present = set(segment_names)
    idx = {s: i for i, s in enumerate(segment_names)}
    between, along = [], []
    for mass, rules in MASS_TABLE:
        rule = next((r for r in rules if set(_rule_segments(r)) <= present), None)
        if rule is None:
            raise KeyError(f"cannot place a CoM for a segment of mass {mass}% "
                           f"(needs one of {[_rule_segments(r) for r in rules]})")
        if rule[0] == "between":
            between.append((idx[rule[1]], idx[rule[2]], rule[3], mass / 100.0))
        else:
            along.append((idx[rule[1]], rule[2], idx[rule[3]], idx[rule[4]], rule[5], mass / 100.0))
    b = np.array(between, dtype=float).reshape(-1, 4)
    a_idx = np.array([[r[0], r[2], r[3]] for r in along], dtype=int).reshape(-1, 3)
    a_axis = np.array([np.asarray(r[1]) * r[4] for r in along], dtype=float).reshape(-1, 3)
    a_mass = np.array([r[5] for r in along], dtype=float)
    return (b[:, 0].astype(int), b[:, 1].astype(int), b[:, 2], b[:, 3]), (a_idx, a_axis, a_mass)


def segment_com_points_arrays(segment_names: tuple[str, ...], positions: npt.NDArray[np.floating[Any]],
                              orientations: npt.NDArray[np.floating[Any]]
                              ) -> tuple[npt.NDArray[np.floating[Any]], npt.NDArray[np.floating[Any]]]:
    """CoM of every de Leva segment from arrays: ((T, N, 3) points [m], (N,) mass fractions).

    Args:
        segment_names: the S segment names; positions (T, S, 3); orientations (T, S, 4).
    """
    (ia, ib, f, mb), (a_idx, a_axis, ma) = _plan(tuple(segment_names))
    pa = positions[:, ia]
    pts_b = pa + f[:, None] * (positions[:, ib] - pa)
    length = np.linalg.norm(positions[:, a_idx[:, 2]] - positions[:, a_idx[:, 1]], axis=-1, keepdims=True)
    pts_a = positions[:, a_idx[:, 0]] + quat.rotate(orientations[:, a_idx[:, 0]], a_axis) * length
    return np.concatenate([pts_b, pts_a], axis=1), np.concatenate([mb, ma])


def com_from_arrays(segment_names: tuple[str, ...], positions: npt.NDArray[np.floating[Any]],
                    orientations: npt.NDArray[np.floating[Any]]) -> npt.NDArray[np.floating[Any]]:
    """(T, 3) whole-body CoM [m] from segment arrays (any frame; the CoM follows it)."""
    pts, masses = segment_com_points_arrays(segment_names, positions, orientations)
    return np.einsum("tnk,n->tk", pts, masses)


def whole_body_com(motion: HumanMotion) -> npt.NDArray[np.floating[Any]] | None:
    """(T, 3) whole-body CoM [m] from segment poses, or None for sparse sources.

    A measured CoM (``motion.com``, e.g. from MVN) is returned as is.
    """
    if motion.com is not None:
        return motion.com
    if not can_compute_com(motion.segment_names):
        return None
    return com_from_arrays(motion.segment_names, motion.positions, motion.orientations)
