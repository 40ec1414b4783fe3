"""Centre of mass ground projection inside the support polygon."""

from __future__ import annotations

import math
from typing import cast

import numpy as np
import pinocchio as pin

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
    default emits every edge, which keeps the constraint set a fixed size. If the CoM is
    already outside (:math:`s_i < 0`, e.g. after a reset),
    the bound becomes :math:`\max(s_i, -r\,\Delta t)`: move back at least at the recovery
    speed :math:`r` instead of demanding an instantaneous (infeasible) jump.

    The constraint is linearised over one tick: the integrated CoM can overshoot the shrunk
    polygon by the second-order term, a few micrometres (5 um worst on the tests' hard
    reach), far inside the margin.

    **ZMP rows** (``zmp_margin`` set; the thesis' Ch. 4-5 constraint "ZMP inside the support
    polygon", reference §4.2). The CoM rows say nothing about accelerations, and the LIP
    pre-filter (Eq. 2.15) only shapes the CoM reference: the upper body's angular momentum
    is ignored by both. Measured on HDM05 depositFloorR (bd 001), the multi-body ZMP of the
    command left the LIP ZMP of its CoM by up to 5 cm while the trunk pitched forward by
    1.1 rad in 0.8 s, and the CoP reached the heel and then the outer toe corner. With the
    centroidal momentum :math:`h = A_g(q) v` (pinocchio's centroidal map, world axes,
    about the CoM) and its rate over one tick :math:`\dot h \approx (A_g v - h^-)/\Delta t`
    (:math:`h^-` the previous command's momentum), the multi-body ZMP of the next state
    (flat ground at z = 0, vertical CoM acceleration neglected: :math:`f_z = m g`) is

    .. math::

        p = c_{xy} + \Delta t J_{c,xy} v + S (A_g v - h^-)/\Delta t, \qquad
        S = \frac{1}{m g}\begin{bmatrix} -c_z & 0 & 0 & 0 & -1 & 0 \\
                                             0 & -c_z & 0 & 1 & 0 & 0 \end{bmatrix}

    (Eq. 2.14 plus the angular-momentum term), linear in v; each edge gives
    :math:`n_i^T p \le d_i - m_z`. The bound never asks for more than the recovery
    speed over keeping the previous velocity (:math:`v = v^-`), so the rows stay
    feasible when the state is already beyond them.

    ``zmp_model="lip"`` keeps only the linear-momentum part (the linear inverted pendulum,
    Eq. 2.14): :math:`S A_g v/\Delta t` becomes
    :math:`-\frac{c_z}{g\,\Delta t} J_{c,xy} v` and :math:`S h^-/\Delta t` becomes
    :math:`-\frac{c_z}{g\,\Delta t}\dot c^-_{xy}`, so the rows are scaled CoM rows: no
    centroidal map (which, with the rows it adds, cost ~0.1 ms per tick).

    History: with linear command ramps and no acceleration bound, the centroidal rows
    (margin 3 cm) made the closed loop worse on HDM05 depositFloorR bd 003 (CoP margin
    +1.5 -> +0.6 mm, foot slip 2.2 -> 5.7 mm): bounding the *commanded* ZMP from one tick
    to the next made the command jerkier. With the joint acceleration bound and the
    spline-played commands (teleop.sim.target_spline) that no longer holds: the rows stop
    the CoM from lunging after a hold (HDM05 dg grabHighR 012: the CoP went to the heel
    edge when the CoM task resumed 19 mm from its target; with the rows it stays 19 mm
    inside). The LIP rows are not enough when the trunk swings: on HDM05 bk squat1Reps
    014 / 015 the trunk pitched back at 1.4 rad/s as the robot rose and the CoP reached
    the heel edge with LIP rows; with the centroidal rows it stayed 15.8 / 17.5 mm
    inside. Hence "centroidal" in the default stack. Cost (weighted mode, same run, loaded
    machine): +0.03 ms per tick for LIP rows, +0.085 ms for centroidal rows, of which the
    centroidal map itself is 6 us: the rest is DAQP working on rows that do bind.
    """

    def __init__(self, margin: float = 0.02, active_distance: float = float("inf"),
                 recovery_speed: float = 0.05, zmp_margin: float | None = None,
                 robot=None, zmp_model: str = "centroidal") -> None:
        if zmp_model not in ("centroidal", "lip"):
            raise ValueError(f"support polygon: zmp_model must be 'centroidal' or 'lip', got {zmp_model!r}")
        self.zmp_model = zmp_model
        # Written so that NaN fails too (NaN < 0 is False: a NaN margin passed the old
        # checks and made every bound NaN).
        if not (margin >= 0 and math.isfinite(margin)):
            raise ValueError(f"support polygon: margin must be finite and >= 0 [m], got {margin}")
        if not active_distance > 0:
            raise ValueError(f"support polygon: active_distance must be > 0 [m] (inf: every edge), "
                             f"got {active_distance}")
        if not (recovery_speed > 0 and math.isfinite(recovery_speed)):
            raise ValueError(f"support polygon: recovery_speed must be finite and > 0 [m/s], got {recovery_speed}")
        if zmp_margin is not None and not (zmp_margin >= 0 and math.isfinite(zmp_margin)):
            raise ValueError(f"support polygon: zmp_margin must be finite and >= 0 [m], got {zmp_margin}")
        if zmp_margin is not None and robot is None:
            raise ValueError("support polygon: zmp_margin >= 0 needs the robot model")
        self.zmp_margin = None if zmp_margin is None else float(zmp_margin)
        if self.zmp_margin is not None:
            self._model = robot.model
            self._data = robot.model.createData()   # the centroidal map's own passes
            self._mass = float(robot.total_mass)
            self._momentum = np.zeros(6)             # h^- of the last command
            self._velocity = np.zeros(robot.nv)      # v^- of the last command
            self._com_velocity = np.zeros(2)         # (lip) CoM velocity of the last command
            self._com_jacobian_xy: np.ndarray | None = None   # (lip) J_c,xy of the last fill
        self.margin = float(margin)
        self.active_distance = float(active_distance)
        self.recovery_speed = float(recovery_speed)
        self.vertices: np.ndarray = np.zeros((0, 2))
        self.normals = np.zeros((0, 2))
        self.offsets = np.zeros(0)

    def set_polygon(self, vertices: np.ndarray) -> None:
        """Set the (K, 2) counter-clockwise convex polygon [m]."""
        vertices = np.asarray(vertices, dtype=float)
        if vertices.ndim != 2 or vertices.shape[1] != 2 or len(vertices) < 3:
            raise ValueError("support polygon needs at least 3 (x, y) vertices")
        if not np.all(np.isfinite(vertices)):  # checked before anything is replaced
            raise ValueError(f"support polygon vertices must be finite, got {vertices.tolist()}")
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
        if self.zmp_margin is not None:
            self._zmp_offsets = self.offsets - self.zmp_margin
        self._dt: float | None = None

    def slack(self, com_xy: np.ndarray) -> np.ndarray:
        """(edges,) signed distance of the CoM to each shrunk edge [m] (> 0 inside)."""
        return self._shrunk_offsets - self.normals @ com_xy

    def margin_to_polygon(self, point_xy: np.ndarray) -> float:
        """Signed distance of a point to the (unshrunk) polygon [m]: > 0 inside."""
        return float(np.min(self.offsets - self.normals @ np.asarray(point_xy)))

    @property
    def n_edges(self) -> int:
        return len(self.normals)

    @property
    def n_rows(self) -> int:
        """Rows written by :meth:`fill`: one per edge, twice with the ZMP rows."""
        return len(self.normals) * (1 if self.zmp_margin is None else 2)

    def commanded(self, v: np.ndarray) -> None:
        """Record the velocity (nv,) commanded this tick (the ZMP rows need h^-, v^-)."""
        if self.zmp_margin is not None:
            self._velocity[:] = v
            if self.zmp_model == "lip":
                self._com_velocity = self._com_jacobian_xy @ v
            else:
                np.dot(self._centroidal_map, v, out=self._momentum)

    def linearise(self, kin: Kinematics) -> None:
        """Compute what :meth:`commanded` maps ``v`` with (the centroidal map, or the CoM
        Jacobian's (2, nv) x, y rows for ``"lip"``) at the configuration of ``kin``.
        :meth:`fill` does it every tick; the controller calls this at a reset, so that a
        :meth:`commanded` before the first tick does not fail on a map never computed."""
        if self.zmp_margin is None:
            return
        if self.zmp_model == "lip":
            self._com_jacobian_xy = kin.com_jacobian()[:2].copy()
        else:
            self._centroidal_map = pin.computeCentroidalMap(self._model, self._data, kin.q)

    def reset_motion(self) -> None:
        """The robot is at rest (after a reset)."""
        if self.zmp_margin is not None:
            self._velocity[:] = 0.0
            self._momentum = np.zeros(6)
            self._com_velocity = np.zeros(2)

    def _prepare(self, dt: float) -> None:
        r"""Per-time-step constants of :meth:`fill` (recomputed when dt or the polygon change).

        With the ZMP rows, all 2k rows are one product ``weights @ basis``: ``basis`` (4, nv)
        stacks :math:`J_{c,x}, J_{c,y}` and the centroidal map's angular rows
        :math:`A_{g,3}, A_{g,4}`, and ``weights`` (2k, 4) is

        .. math:: \begin{bmatrix} \Delta t\,N & 0 \\ (\Delta t - \ell) N &
                  s\,[\,n_y \;\; -n_x\,] \end{bmatrix}, \qquad
                  \ell = \frac{c_z}{g \Delta t}, \quad s = \frac{1}{m g \Delta t}

        (the ZMP rows of the class docstring: :math:`n^T S A_g` keeps only the angular
        rows once the linear ones are folded into :math:`-\ell J_c`). Only the
        :math:`(\Delta t - \ell) N` block changes from tick to tick (with :math:`c_z`);
        one matmul then replaces the seven numpy calls of writing the two blocks apart.
        """
        self._dt = dt
        self._normals_dt = dt * self.normals
        self._recovery_step = -self.recovery_speed * dt
        if self.zmp_margin is None:
            return
        k = self.n_edges
        self._scale = 1.0 / (self._mass * 9.81 * dt) if self.zmp_model == "centroidal" else 0.0
        weights = np.zeros((2 * k, 4))
        weights[:k, :2] = self._normals_dt
        weights[k:, 2] = self._scale * self.normals[:, 1]
        weights[k:, 3] = -self._scale * self.normals[:, 0]
        self._weights = weights
        self._basis = np.zeros((4, self._velocity.shape[0]))
        # Both slacks in one product: [offsets - m; offsets - m_z] - blockdiag(N, N) @ point.
        self._stacked_offsets = np.concatenate((self._shrunk_offsets, self._zmp_offsets))
        self._stacked_normals = np.zeros((2 * k, 4))
        self._stacked_normals[:k, :2] = self.normals
        self._stacked_normals[k:, 2:] = self.normals
        self._floor = np.full(2 * k, self._recovery_step)

    def fill(self, kin: Kinematics, dt: float, rows_out: np.ndarray, bound_out: np.ndarray) -> np.ndarray:
        r"""Write the (n_rows, nv) rows of :math:`G v \le h` into ``rows_out`` and their
        (n_rows,) bounds into ``bound_out``: one CoM row per edge, then (with ``zmp_margin``)
        one ZMP row per edge. Returns the (n_rows,) slacks [m] (> 0: inside the margin; the
        CoM rows' at v = 0, the ZMP rows' with the previous tick's velocity kept), for
        optional filtering."""
        if dt != self._dt:
            self._prepare(dt)
        com_jacobian = kin.com_jacobian()
        com = kin.com()
        if self.zmp_margin is None:
            np.matmul(self._normals_dt, com_jacobian[:2], out=rows_out)
            slack = self._shrunk_offsets - self.normals @ com[:2]
            np.maximum(slack, self._recovery_step, out=bound_out)
            return slack
        k = self.n_edges
        com_x, com_y, com_z = cast("list[float]", com.tolist())  # Python floats: numpy scalars cost more
        lever = com_z / (9.81 * dt)         # c_z / (g dt)
        weights, basis = self._weights, self._basis
        np.multiply(self.normals, dt - lever, out=weights[k:, :2])
        basis[:2] = com_jacobian[:2]
        if self.zmp_model == "lip":
            # p = c + (dt - c_z / (g dt)) Jc v + c_z / (g dt) c'^-  (LIP, Eq. 2.14)
            self._com_jacobian_xy = com_jacobian[:2]
            shift_x, shift_y = (lever * value for value in self._com_velocity.tolist())
        else:
            # p = c + [dt Jc + S Ag / dt] v - S h^- / dt (see _prepare for the rows)
            self._centroidal_map = centroidal = pin.computeCentroidalMap(self._model, self._data, kin.q)
            basis[2:] = centroidal[3:5]
            h = self._momentum.tolist()
            # -S h^-, i.e. where the ZMP would be if the momentum stayed (v = 0 this tick)
            shift_x = lever * h[0] / self._mass + self._scale * h[4]
            shift_y = lever * h[1] / self._mass - self._scale * h[3]
        np.matmul(weights, basis, out=rows_out)
        slack = self._stacked_offsets - self._stacked_normals @ (com_x, com_y, com_x + shift_x, com_y + shift_y)
        # Never demand more than the recovery speed beyond keeping v^- (the ZMP rows bound
        # the velocity change): floor = [r dt; G_zmp v^- + r dt].
        keep = rows_out[k:] @ self._velocity
        floor = self._floor
        np.add(keep, self._recovery_step, out=floor[k:])
        np.maximum(slack, floor, out=bound_out)
        slack[k:] -= keep
        return slack

    def rows(self, kin: Kinematics, dt: float) -> tuple[np.ndarray, np.ndarray]:
        """(k, nv) rows G and (k,) bounds h of :math:`G v \\le h` for the near edges (CoM
        rows only, no ZMP rows)."""
        if dt != self._dt:
            self._prepare(dt)
        slack = self._shrunk_offsets - self.normals @ kin.com()[:2]
        if self.active_distance != float("inf"):
            near = slack < self.active_distance
            return self._normals_dt[near] @ kin.com_jacobian()[:2], np.maximum(slack[near], self._recovery_step)
        return self._normals_dt @ kin.com_jacobian()[:2], np.maximum(slack, self._recovery_step)
