"""Convex support polygons on the ground: hull, inward margin, projection.

Points are (x, y) in metres in any ground frame. Polygons are (K, 2) vertex arrays in
counter-clockwise order.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt


def convex_hull(points: npt.NDArray[np.floating[Any]]) -> npt.NDArray[np.floating[Any]]:
    """(K, 2) counter-clockwise convex hull of (N, 2) points (Andrew's monotone chain).

    Collinear points are dropped. Fewer than three distinct points give a degenerate hull
    (a point or a segment), which callers treat as such.
    """
    pts = np.unique(np.asarray(points, dtype=float).reshape(-1, 2), axis=0)
    if len(pts) <= 2:
        return pts

    def cross(o: npt.NDArray[np.floating[Any]], a: npt.NDArray[np.floating[Any]],
              b: npt.NDArray[np.floating[Any]]) -> float:
        return (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0])

    lower: list[npt.NDArray[np.floating[Any]]] = []
    for p in pts:
        while len(lower) >= 2 and cross(lower[-2], lower[-1], p) <= 1e-15:
            lower.pop()
        lower.append(p)
    upper: list[npt.NDArray[np.floating[Any]]] = []
    for p in pts[::-1]:
        while len(upper) >= 2 and cross(upper[-2], upper[-1], p) <= 1e-15:
            upper.pop()
        upper.append(p)
    return np.array(lower[:-1] + upper[:-1])


#: Edges shorter than this [m] are a vertex given twice, not a side of the polygon.
MIN_EDGE_M = 1e-9


def halfplanes(poly: npt.NDArray[np.floating[Any]]
               ) -> tuple[npt.NDArray[np.floating[Any]], npt.NDArray[np.floating[Any]]]:
    """Outward unit normals (K, 2) and offsets (K,) with poly = {p : n_k . p <= b_k}.

    Edges shorter than :data:`MIN_EDGE_M` are left out: :func:`clip` can emit a vertex twice
    (a corner on the clipping line), whose zero-length edge has no normal (NaN), and a NaN
    half-plane made every point "outside"."""
    poly = np.asarray(poly, dtype=float)
    edges = np.roll(poly, -1, axis=0) - poly
    short = np.linalg.norm(edges, axis=1) < MIN_EDGE_M
    if short.any() and not short.all():
        poly = poly[~short]
        edges = np.roll(poly, -1, axis=0) - poly
    normals = np.stack([edges[:, 1], -edges[:, 0]], axis=1)   # right of a CCW edge = outside
    normals /= np.linalg.norm(normals, axis=1, keepdims=True)
    return normals, np.sum(normals * poly, axis=1)


def shrink(poly: npt.NDArray[np.floating[Any]], margin: float) -> npt.NDArray[np.floating[Any]]:
    """The polygon moved inwards by ``margin`` [m] on every edge (CCW, convex).

    Vertices are the intersections of consecutive offset edges. A short edge can vanish
    while the rest of the polygon remains (the corner edges of the hull of two rotated
    feet): the result is then the exact intersection of the offset half-planes. If the
    margin eats the whole polygon, it collapses to its vertex centroid.
    """
    poly = np.asarray(poly, dtype=float)
    if margin <= 0 or len(poly) < 3:
        return poly
    n, b = halfplanes(poly)
    b = b - margin
    k = len(poly)
    out = np.empty_like(poly)
    for i in range(k):
        # Vertex i joins edge i-1 and edge i.
        a_mat = np.array([n[i - 1], n[i]])
        det = np.linalg.det(a_mat)
        if abs(det) < 1e-12:
            return np.mean(poly, axis=0, keepdims=True)
        out[i] = np.linalg.solve(a_mat, np.array([b[i - 1], b[i]]))
    # An edge that reversed direction vanished under the margin: consecutive offset edges
    # no longer meet at the vertices, so intersect the half-planes exactly; only an empty
    # (or degenerate) intersection means the margin is larger than the polygon allows.
    e_old = np.roll(poly, -1, axis=0) - poly
    e_new: npt.NDArray[np.floating[Any]] = np.roll(out, -1, axis=0) - out
    if np.any(np.sum(e_old * e_new, axis=1) <= 0):
        out = clip(poly, n, b)
        out = convex_hull(out) if len(out) else out
        if len(out) < 3:
            return np.mean(poly, axis=0, keepdims=True)
    return out


def contains(poly: npt.NDArray[np.floating[Any]], p: npt.NDArray[np.floating[Any]], tol: float = 1e-9) -> bool:
    """Whether point p (2,) is inside the convex CCW polygon (boundary included)."""
    poly = np.asarray(poly, dtype=float)
    if len(poly) < 3:
        return bool(np.linalg.norm(project(poly, p) - p) <= tol)
    n, b = halfplanes(poly)
    return bool(np.all(n @ np.asarray(p, dtype=float) <= b + tol))


def project(poly: npt.NDArray[np.floating[Any]], p: npt.NDArray[np.floating[Any]]) -> npt.NDArray[np.floating[Any]]:
    """Closest point (2,) of the convex polygon (or point/segment) to p (2,)."""
    poly = np.asarray(poly, dtype=float)
    p = np.asarray(p, dtype=float)
    if len(poly) == 1:
        return poly[0].copy()
    if len(poly) >= 3:
        n, b = halfplanes(poly)
        if np.all(n @ p <= b):
            return p.copy()
    a = poly
    d = np.roll(poly, -1, axis=0) - poly if len(poly) >= 3 else (poly[1:] - poly[:1])
    a = a[: len(d)]
    t = np.clip(np.sum((p - a) * d, axis=1) / np.maximum(np.sum(d * d, axis=1), 1e-300), 0.0, 1.0)
    candidates = a + t[:, None] * d
    return candidates[np.argmin(np.sum((candidates - p) ** 2, axis=1))]


def clip(poly: npt.NDArray[np.floating[Any]], normals: npt.NDArray[np.floating[Any]],
         offsets: npt.NDArray[np.floating[Any]]) -> npt.NDArray[np.floating[Any]]:
    """The convex polygon intersected with the half-planes n_k . p <= b_k.

    Sutherland-Hodgman clipping, one half-plane at a time. Returns (K', 2) vertices in
    counter-clockwise order; an empty intersection gives a (0, 2) array.
    """
    out = np.asarray(poly, dtype=float)
    for n, b in zip(np.asarray(normals, dtype=float), np.asarray(offsets, dtype=float)):
        if len(out) == 0:
            break
        d = out @ n - b                                   # > 0 outside
        nxt = np.roll(out, -1, axis=0)
        d_nxt = np.roll(d, -1)
        kept = []
        for p, q, dp, dq in zip(out, nxt, d, d_nxt):
            if dp <= 0:
                kept.append(p)
            if (dp < 0 < dq) or (dq < 0 < dp):
                kept.append(p + (q - p) * (dp / (dp - dq)))
        out = np.array(kept).reshape(-1, 2)
    return out
