"""Vectorised rotation maths on unit quaternions (w, x, y, z) and 3x3 matrices.

Every function accepts arrays with any number of leading (batch) dimensions, so one call
handles a whole motion: quaternions are (..., 4), vectors (..., 3), matrices (..., 3, 3).
A quaternion q rotates vectors from a child frame into its parent frame (world_from_child),
and composition reads like matrices: ``mul(q_ab, q_bc) = q_ac``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

IDENTITY = np.array([1.0, 0.0, 0.0, 0.0])


def normalize(q: npt.NDArray[np.floating[Any]]) -> npt.NDArray[np.floating[Any]]:
    """Unit quaternions (..., 4); a zero quaternion becomes the identity."""
    q = np.asarray(q, dtype=float)
    n = np.linalg.norm(q, axis=-1, keepdims=True)
    out = np.where(n > 1e-12, q / np.where(n > 1e-12, n, 1.0), IDENTITY)
    return out


def conj(q: npt.NDArray[np.floating[Any]]) -> npt.NDArray[np.floating[Any]]:
    """Inverse of unit quaternions (..., 4)."""
    q = np.asarray(q, dtype=float)
    return q * np.array([1.0, -1.0, -1.0, -1.0])


def mul(a: npt.NDArray[np.floating[Any]], b: npt.NDArray[np.floating[Any]]) -> npt.NDArray[np.floating[Any]]:
    """Hamilton product a*b (..., 4); broadcasts."""
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    # Component-wise into a preallocated array: no axis juggling or stacking, so a single
    # frame (the streaming path) costs a few microseconds, and batches stay vectorised.
    aw, ax, ay, az = a[..., 0], a[..., 1], a[..., 2], a[..., 3]
    bw, bx, by, bz = b[..., 0], b[..., 1], b[..., 2], b[..., 3]
    w: npt.NDArray[np.floating[Any]] = aw * bw - ax * bx - ay * by - az * bz
    out = np.empty(w.shape + (4,))
    out[..., 0] = w
    out[..., 1] = aw * bx + ax * bw + ay * bz - az * by
    out[..., 2] = aw * by - ax * bz + ay * bw + az * bx
    out[..., 3] = aw * bz + ax * by - ay * bx + az * bw
    return out


def _cross(u: npt.NDArray[np.floating[Any]], v: npt.NDArray[np.floating[Any]]) -> npt.NDArray[np.floating[Any]]:
    ux, uy, uz = u[..., 0], u[..., 1], u[..., 2]
    vx, vy, vz = v[..., 0], v[..., 1], v[..., 2]
    x: npt.NDArray[np.floating[Any]] = uy * vz - uz * vy
    out = np.empty(x.shape + (3,))
    out[..., 0] = x
    out[..., 1] = uz * vx - ux * vz
    out[..., 2] = ux * vy - uy * vx
    return out


def rotate(q: npt.NDArray[np.floating[Any]], v: npt.NDArray[np.floating[Any]]) -> npt.NDArray[np.floating[Any]]:
    """Rotate vectors v (..., 3) by unit quaternions q (..., 4); broadcasts."""
    q = np.asarray(q, dtype=float)
    v = np.asarray(v, dtype=float)
    w = q[..., :1]
    u = q[..., 1:]
    # v' = v + 2w (u x v) + 2 u x (u x v): cheaper than building matrices.
    t = 2.0 * _cross(u, v)
    return v + w * t + _cross(u, t)


def to_matrix(q: npt.NDArray[np.floating[Any]]) -> npt.NDArray[np.floating[Any]]:
    """Rotation matrices (..., 3, 3) of unit quaternions (..., 4)."""
    q = np.asarray(q, dtype=float)
    w, x, y, z = q[..., 0], q[..., 1], q[..., 2], q[..., 3]
    return np.stack([
        np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)], axis=-1),
        np.stack([2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)], axis=-1),
        np.stack([2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)], axis=-1),
    ], axis=-2)


def from_matrix(m: npt.NDArray[np.floating[Any]]) -> npt.NDArray[np.floating[Any]]:
    """Unit quaternions (..., 4) with w >= 0 from rotation matrices (..., 3, 3).

    Uses the largest of the four candidate denominators, so it is accurate for every
    rotation (Shepperd's method).
    """
    m = np.asarray(m, dtype=float)
    batch = m.shape[:-2]
    m = m.reshape(-1, 3, 3)
    tr = m[:, 0, 0] + m[:, 1, 1] + m[:, 2, 2]
    cand = np.stack([tr, m[:, 0, 0], m[:, 1, 1], m[:, 2, 2]], axis=-1)
    k = np.argmax(cand, axis=-1)
    # Case w largest.
    s = np.sqrt(np.maximum(1.0 + tr, 1e-300)) * 2
    q0 = np.stack([0.25 * s, (m[:, 2, 1] - m[:, 1, 2]) / s, (m[:, 0, 2] - m[:, 2, 0]) / s,
                   (m[:, 1, 0] - m[:, 0, 1]) / s], axis=-1)
    s = np.sqrt(np.maximum(1.0 + m[:, 0, 0] - m[:, 1, 1] - m[:, 2, 2], 1e-300)) * 2
    q1 = np.stack([(m[:, 2, 1] - m[:, 1, 2]) / s, 0.25 * s, (m[:, 0, 1] + m[:, 1, 0]) / s,
                   (m[:, 0, 2] + m[:, 2, 0]) / s], axis=-1)
    s = np.sqrt(np.maximum(1.0 + m[:, 1, 1] - m[:, 0, 0] - m[:, 2, 2], 1e-300)) * 2
    q2 = np.stack([(m[:, 0, 2] - m[:, 2, 0]) / s, (m[:, 0, 1] + m[:, 1, 0]) / s, 0.25 * s,
                   (m[:, 1, 2] + m[:, 2, 1]) / s], axis=-1)
    s = np.sqrt(np.maximum(1.0 + m[:, 2, 2] - m[:, 0, 0] - m[:, 1, 1], 1e-300)) * 2
    q3 = np.stack([(m[:, 1, 0] - m[:, 0, 1]) / s, (m[:, 0, 2] + m[:, 2, 0]) / s,
                   (m[:, 1, 2] + m[:, 2, 1]) / s, 0.25 * s], axis=-1)
    q = np.choose(k[:, None], [q0, q1, q2, q3])
    q = np.where(q[:, :1] < 0, -q, q)
    return normalize(q).reshape(*batch, 4)


def from_axis_angle(axis: npt.NDArray[np.floating[Any]], angle: npt.NDArray[np.floating[Any]] | float
                    ) -> npt.NDArray[np.floating[Any]]:
    """Quaternions (..., 4) rotating by ``angle`` [rad] about unit ``axis`` (..., 3)."""
    axis = np.asarray(axis, dtype=float)
    angle = np.asarray(angle, dtype=float)[..., None]
    axis = axis / np.linalg.norm(axis, axis=-1, keepdims=True)
    return np.concatenate([np.cos(angle / 2), np.sin(angle / 2) * axis], axis=-1)


def about_x(angle: npt.NDArray[np.floating[Any]] | float) -> npt.NDArray[np.floating[Any]]:
    return from_axis_angle(np.array([1.0, 0.0, 0.0]), angle)


def about_y(angle: npt.NDArray[np.floating[Any]] | float) -> npt.NDArray[np.floating[Any]]:
    return from_axis_angle(np.array([0.0, 1.0, 0.0]), angle)


def about_z(angle: npt.NDArray[np.floating[Any]] | float) -> npt.NDArray[np.floating[Any]]:
    return from_axis_angle(np.array([0.0, 0.0, 1.0]), angle)


def between(a: npt.NDArray[np.floating[Any]], b: npt.NDArray[np.floating[Any]]) -> npt.NDArray[np.floating[Any]]:
    """Smallest rotation (..., 4) taking direction a (..., 3) onto direction b (..., 3).

    For exactly opposite directions the axis is any perpendicular one (chosen
    deterministically); callers never need that case (bones are never reversed between a
    rest pose and the N-pose).
    """
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    a = a / np.linalg.norm(a, axis=-1, keepdims=True)
    b = b / np.linalg.norm(b, axis=-1, keepdims=True)
    w = 1.0 + np.sum(a * b, axis=-1, keepdims=True)
    xyz = _cross(a, b)
    opposite = w[..., 0] < 1e-9
    if np.any(opposite):
        helper = np.where(np.abs(a[..., :1]) < 0.9, np.array([1.0, 0.0, 0.0]), np.array([0.0, 1.0, 0.0]))
        perp = _cross(a, np.broadcast_to(helper, a.shape))
        xyz = np.where(opposite[..., None], perp, xyz)
        w = np.where(opposite[..., None], 0.0, w)
    return normalize(np.concatenate([w, xyz], axis=-1))


def twist_angle(q: npt.NDArray[np.floating[Any]], axis: npt.NDArray[np.floating[Any]]) -> npt.NDArray[np.floating[Any]]:
    """Twist angle [rad] in (-pi, pi] of rotations q (..., 4) about unit ``axis`` (3,).

    Swing-twist decomposition q = swing * twist, twist about ``axis`` expressed in the
    frame q rotates from (the child frame), swing about an axis perpendicular to it. The
    angle is well defined unless the swing is 180 degrees (the child axis reversed).
    """
    q = np.asarray(q, dtype=float)
    proj = q[..., 1:] @ np.asarray(axis, dtype=float)
    return wrap(2.0 * np.arctan2(proj, q[..., 0]))


def euler_yxz(q: npt.NDArray[np.floating[Any]]) -> npt.NDArray[np.floating[Any]]:
    """Intrinsic Y-X'-Z'' angles (..., 3) = (about y, about x, about z) [rad].

    q = Ry(a) * Rx(b) * Rz(c): the order of a pitch-roll-yaw joint chain (iCub torso and
    neck). Singular only at b = +-90 degrees (a roll of 90 degrees), which a spine or a
    neck never reaches.
    """
    m = to_matrix(q)
    a = np.arctan2(m[..., 0, 2], m[..., 2, 2])
    b = np.arcsin(np.clip(-m[..., 1, 2], -1.0, 1.0))
    c = np.arctan2(m[..., 1, 0], m[..., 1, 1])
    return np.stack([a, b, c], axis=-1)


def from_euler_yxz(angles: npt.NDArray[np.floating[Any]]) -> npt.NDArray[np.floating[Any]]:
    """Inverse of :func:`euler_yxz`: (..., 3) angles [rad] -> quaternions (..., 4)."""
    angles = np.asarray(angles, dtype=float)
    return mul(mul(about_y(angles[..., 0]), about_x(angles[..., 1])), about_z(angles[..., 2]))


def yaw_of(q: npt.NDArray[np.floating[Any]]) -> npt.NDArray[np.floating[Any]]:
    """Heading angle [rad] of the frames' x axes projected on the ground (z-up world)."""
    x = rotate(q, np.array([1.0, 0.0, 0.0]))
    return np.arctan2(x[..., 1], x[..., 0])


def wrap(angle: npt.NDArray[np.floating[Any]]) -> npt.NDArray[np.floating[Any]]:
    """Angles wrapped to (-pi, pi]."""
    return -((-np.asarray(angle, dtype=float) + np.pi) % (2 * np.pi) - np.pi)


def unwrap_angles(angles: npt.NDArray[np.floating[Any]], previous: npt.NDArray[np.floating[Any]] | None = None
                  ) -> npt.NDArray[np.floating[Any]]:
    """Angles (T, K) [rad] made continuous along time, NaN samples skipped.

    Each column's consecutive finite samples never differ by more than pi: a step past
    +-pi is taken as the angle carrying on past it (a twist measured across the wrap of
    ``atan2``), not as a jump of 2 pi. ``previous`` (K,) is the value the column had just
    before the first row (streaming, one frame at a time); without it, or where it is NaN,
    the column starts at its first finite sample as given.
    """
    angles = np.asarray(angles, dtype=float)
    flat = angles.reshape(len(angles), -1)
    before = np.full(flat.shape[1], np.nan) if previous is None else np.asarray(previous, float).ravel()
    if len(flat) == 1:
        # One streamed frame (the hot path): the step from the previous value, wrapped.
        step = flat[0] - before
        return np.where(np.isfinite(step), before + wrap(step), flat[0]).reshape(angles.shape)
    if len(flat) and np.isfinite(flat).all():
        # The common case, vectorised: a missing previous value is the first row itself.
        start = np.where(np.isfinite(before), before, flat[0])
        return np.unwrap(np.vstack([start, flat]), axis=0)[1:].reshape(angles.shape)
    flat = flat.copy()
    for k in range(flat.shape[1]):
        rows = np.flatnonzero(np.isfinite(flat[:, k]))
        if not len(rows):
            continue
        series = flat[rows, k]
        if np.isfinite(before[k]):
            series = np.concatenate([[before[k]], series])
        flat[rows, k] = np.unwrap(series)[-len(rows):]
    return flat.reshape(angles.shape)


def make_continuous(q: npt.NDArray[np.floating[Any]], axis: int = 0) -> npt.NDArray[np.floating[Any]]:
    """Flip signs along ``axis`` so consecutive quaternions are in the same hemisphere."""
    q = np.array(q, dtype=float, copy=True)
    q = np.moveaxis(q, axis, 0)
    if len(q) > 1:
        dots = np.sum(q[1:] * q[:-1], axis=-1)
        flips = np.cumprod(np.where(dots < 0, -1.0, 1.0), axis=0)
        q[1:] *= flips[..., None]
    return np.moveaxis(q, 0, axis)
