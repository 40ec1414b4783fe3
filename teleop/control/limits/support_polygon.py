"""Centre of mass ground projection inside the support polygon."""

from __future__ import annotations

import numpy as np

from teleop.control.kinematics import Kinematics


class SupportPolygonConstraint:
    r"""Keep the CoM ground projection inside the support polygon, shrunk by a margin.

    The polygon is the convex hull of the active soles' corners (counter-clockwise, from
    ``RobotModel.support_polygon``). Each edge :math:`i` gives a half-plane
    :math:`n_i^T x \le d_i` (outward unit normal :math:`n_i`). Requiring the CoM after one
    tick, :math:`c_{xy} + J_{c,xy} v \Delta t`, to stay a margin :math:`m` inside gives one
    linear inequality per edge:

    .. math:: \Delta t \, n_i^T J_{c,xy} v \;\le\; d_i - m - n_i^T c_{xy} \;=\; s_i

    Optionally only edges with slack :math:`s_i` below ``active_distance`` are emitted (the
    CoM cannot cross several centimetres in one tick, so far edges cannot be active).
    Measured on the benchmark trajectory (same run), filtering the iCub's 6 edges down to
    the 1-2 within 5 cm makes no measurable difference (weighted 0.244 vs 0.247 ms,
    strict 0.372 vs 0.382 ms median): DAQP barely notices 4 more inactive rows. The
    default emits every edge, which keeps the constraint set a fixed size. If the CoM is already outside (:math:`s_i < 0`, e.g. after a reset),
    the bound becomes :math:`\max(s_i, -r\,\Delta t)`: move back at least at the recovery
    speed :math:`r` instead of demanding an instantaneous (infeasible) jump.

    The constraint is linearised over one tick: the integrated CoM can overshoot the shrunk
    polygon by the second-order term, a few micrometres (5 um worst on the tests' hard
    reach), far inside the margin.
    """

    def __init__(self, margin: float = 0.02, active_distance: float = float("inf"),
                 recovery_speed: float = 0.05) -> None:
        if margin < 0 or active_distance <= 0 or recovery_speed <= 0:
            raise ValueError("support polygon: margin >= 0, active_distance > 0 and recovery_speed > 0")
        self.margin = float(margin)
        self.active_distance = float(active_distance)
        self.recovery_speed = float(recovery_speed)
        self.vertices = np.zeros((0, 2))
        self.normals = np.zeros((0, 2))
        self.offsets = np.zeros(0)

    def set_polygon(self, vertices: np.ndarray) -> None:
        """Set the (K, 2) counter-clockwise convex polygon [m]."""
        vertices = np.asarray(vertices, dtype=float)
        if vertices.ndim != 2 or vertices.shape[1] != 2 or len(vertices) < 3:
            raise ValueError("support polygon needs at least 3 (x, y) vertices")
        edges = np.roll(vertices, -1, axis=0) - vertices
        lengths = np.linalg.norm(edges, axis=1)
        # Hull points that are nearly collinear (sole corners at slightly different
        # heights) leave sub-millimetre edges whose normals are meaningless: drop them.
        keep = lengths > 1e-3
        edges, starts, lengths = edges[keep], vertices[keep], lengths[keep]
        # Outward normal of a counter-clockwise edge (dx, dy) is (dy, -dx).
        normals = np.column_stack((edges[:, 1], -edges[:, 0])) / lengths[:, None]
        self.vertices = vertices
        self.normals = normals
        self.offsets = np.einsum("ij,ij->i", normals, starts)
        self._shrunk_offsets = self.offsets - self.margin
        self._dt = None

    def slack(self, com_xy: np.ndarray) -> np.ndarray:
        """(edges,) signed distance of the CoM to each shrunk edge [m] (> 0 inside)."""
        return self._shrunk_offsets - self.normals @ com_xy

    def margin_to_polygon(self, point_xy: np.ndarray) -> float:
        """Signed distance of a point to the (unshrunk) polygon [m]: > 0 inside."""
        return float(np.min(self.offsets - self.normals @ np.asarray(point_xy)))

    @property
    def n_edges(self) -> int:
        return len(self.normals)

    def fill(self, kin: Kinematics, dt: float, rows_out: np.ndarray, bound_out: np.ndarray) -> np.ndarray:
        r"""Write every edge's row of :math:`G v \le h` into ``rows_out`` (edges, nv) and
        ``bound_out`` (edges,); returns the (edges,) slack (for optional filtering)."""
        if dt != self._dt:
            self._dt = dt
            self._normals_dt = dt * self.normals
            self._recovery_step = -self.recovery_speed * dt
        np.matmul(self._normals_dt, kin.com_jacobian()[:2], out=rows_out)
        slack = self._shrunk_offsets - self.normals @ kin.com()[:2]
        np.maximum(slack, self._recovery_step, out=bound_out)
        return slack

    def rows(self, kin: Kinematics, dt: float) -> tuple[np.ndarray, np.ndarray]:
        """(k, nv) rows G and (k,) bounds h of :math:`G v \\le h` for the near edges."""
        if dt != self._dt:
            self._dt = dt
            self._normals_dt = dt * self.normals
            self._recovery_step = -self.recovery_speed * dt
        slack = self._shrunk_offsets - self.normals @ kin.com()[:2]
        if self.active_distance != float("inf"):
            near = slack < self.active_distance
            return self._normals_dt[near] @ kin.com_jacobian()[:2], np.maximum(slack[near], self._recovery_step)
        return self._normals_dt @ kin.com_jacobian()[:2], np.maximum(slack, self._recovery_step)
