"""Fixed contacts (both soles in double support) and their elimination from the QP."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pinocchio as pin
from scipy.linalg import lapack

from teleop.control.kinematics import Kinematics
from teleop.robot.model import NV_BASE, RobotModel


def as_slice(indices: np.ndarray) -> slice | np.ndarray:
    """A contiguous index array as a slice (cheaper views), else the array itself."""
    if len(indices) and np.array_equal(indices, np.arange(indices[0], indices[0] + len(indices))):
        return slice(int(indices[0]), int(indices[0]) + len(indices))
    return indices


@dataclass
class Reduction:
    r"""Reduced coordinates of the tangent space: :math:`v = v_0 + P z`.

    ``z = [v_F, y]``: the velocities of the *free* columns F (joints no contact depends on,
    e.g. the upper body) are kept as they are, so their bounds stay simple bounds; the
    *support* columns S (floating base and legs) are :math:`v_S = v_{0,S} + N y` with
    :math:`N` an orthonormal basis of :math:`\ker J_{c,S}`. Any ``z`` then satisfies the
    contact equations :math:`J_c v = b_c` exactly.
    """

    free: slice | np.ndarray      # tangent columns kept as decision variables, z[:n_free]
    support: slice | np.ndarray   # tangent columns parametrised as offset + basis @ y
    basis: np.ndarray             # (|S|, r) orthonormal
    offset: np.ndarray            # (|S|,) velocity of the support columns at y = 0
    n_free: int

    @property
    def size(self) -> int:
        """Number of reduced coordinates (length of z)."""
        return self.n_free + self.basis.shape[1]

    def reduce(self, matrix: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """``matrix @ P`` for a (m, nv) matrix: (m, size) (into ``out`` if given)."""
        if out is None:
            out = np.empty((matrix.shape[0], self.size))
        out[:, :self.n_free] = matrix[:, self.free]
        np.matmul(matrix[:, self.support], self.basis, out=out[:, self.n_free:])
        return out

    def apply_offset(self, matrix: np.ndarray) -> np.ndarray | float:
        """``matrix @ v_0`` for a (m, nv) matrix: (m,) (a scalar 0 where :math:`v_0 = 0`)."""
        return matrix[:, self.support] @ self.offset

    def expand(self, z: np.ndarray, nv: int) -> np.ndarray:
        """The tangent velocity v (nv,) of reduced coordinates z."""
        v = np.empty(nv)
        v[self.free] = z[:self.n_free]
        support = v[self.support]
        if isinstance(self.support, slice):  # a view: write into v directly
            np.matmul(self.basis, z[self.n_free:], out=support)
            support += self.offset
        else:
            v[self.support] = self.offset + self.basis @ z[self.n_free:]
        return v


class ContactConstraint:
    r"""Keep contact frames fixed (the soles, in double support).

    For each contact frame with held placement :math:`M^*` and current placement :math:`M`,
    in the frame's own axes (LOCAL Jacobian :math:`J_c`, body twist :math:`\nu = J_c v`):

    .. math::

        J_c v = b_c, \qquad b_c = \min(\lambda_c, 1/\Delta t) \log_6(M^{-1} M^*)

    :math:`b_c` is zero while the contact is exact; it cancels the second-order drift of
    integrating :math:`q \oplus v\,\Delta t` (which reached 1.6 mm per 10 s on the
    benchmark trajectory without correction). The default :math:`\lambda_c` = 100/s is
    dead-beat at 100 Hz (each tick removes the previous tick's drift): on violent random
    targets the worst contact error was 3.0 / 1.2 / 0.5 mm with 10 / 30 / 100 per s. The
    gain is capped at 1/dt so that a slower controller does not overshoot. (A constraint on
    the twist does not depend on the axes it is written in; LOCAL frames make the error a
    single ``log6``.)

    Two ways to impose it (see :meth:`reduction`):

    * ``"equality"``: 6 equality rows per contact in the QP;
    * ``"nullspace"``: eliminate them. :math:`J_c` only has non-zero columns on the floating
      base and the joints that carry a contact (the legs), so the elimination only touches
      those 18 columns (a QR of an 18x12 matrix) and leaves the upper-body velocities as
      plain variables with plain bounds: the QP shrinks from 38 variables + 12 equalities
      to 26 variables. Every row the QP sees (tasks, polygon and ZMP rows, leg bounds) is
      then multiplied by the basis, each tick.

    Measured on the benchmark trajectory (whole tick, median, both controllers interleaved
    in one run, three runs): in the 3-level strict mode nullspace 0.32-0.39 ms vs equality
    0.34-0.42 ms (every level's QP is smaller); in weighted mode equality 0.154-0.161 ms vs
    nullspace 0.172-0.185 ms (one QP: DAQP's 12 extra equalities cost less than the QR
    and the products). Hence ``"auto"`` in the stacks: nullspace for strict, equality for
    weighted. Both give the same command (largest difference in q over the 1000 ticks:
    8e-13 rad).
    """

    def __init__(self, robot: RobotModel, frames: tuple[str, ...] = ("left_sole", "right_sole"),
                 gain: float = 100.0) -> None:
        self.robot = robot
        self.frames = tuple(frames)
        self.frame_ids = [robot.frame_id(f) for f in self.frames]
        self.gain = float(gain)
        if not (math.isfinite(self.gain) and self.gain >= 0):  # NaN too: min(nan, 1/dt) is nan
            raise ValueError(f"contact gain must be finite and >= 0 [1/s], got {gain}")
        self.targets: list[pin.SE3] = [pin.SE3.Identity() for _ in self.frames]
        model = robot.model
        columns = set(range(NV_BASE))
        for frame_id in self.frame_ids:
            for joint_id in model.supports[model.frames[frame_id].parentJoint]:
                joint = model.joints[joint_id]
                if joint.idx_v >= 0:
                    columns.update(range(joint.idx_v, joint.idx_v + joint.nv))
        support = np.array(sorted(columns), dtype=int)
        free = np.array([c for c in range(model.nv) if c not in columns], dtype=int)
        #: Tangent columns the contacts depend on (base + legs) and the others.
        self.support_columns = support
        self.free_columns = free
        self._support = as_slice(support)
        self._free = as_slice(free)
        self.size = 6 * len(self.frames)
        n_support = len(support)
        if n_support <= self.size:
            raise ValueError("contacts leave no degree of freedom to the support columns")
        # Work buffers of the elimination (Fortran order: what LAPACK wants).
        self._jacobian_t = np.empty((n_support, self.size), order="F")
        # [x; 0 | 0; I]: multiplied by Q it gives [Q1 x | Q2] (particular solution, basis).
        self._q_input = np.zeros((n_support, 1 + n_support - self.size), order="F")
        self._q_input[self.size:, 1:] = np.eye(n_support - self.size)
        self._rhs = np.empty(self.size)
        # Per contact: its frame, where its (6, |S|) Jacobian block goes (a transposed view of
        # the QR's input) and its block of b_c (views made once).
        self._blocks = [(frame_id, self._jacobian_t[:, 6 * i:6 * i + 6].T, self._rhs[6 * i:6 * i + 6])
                        for i, frame_id in enumerate(self.frame_ids)]
        self._reduction = Reduction(self._free, self._support, np.eye(n_support)[:, self.size:],
                                    np.zeros(n_support), len(free))
        self.write_equation_into(np.zeros((self.size, robot.nv)))

    def hold(self, kin: Kinematics) -> None:
        """Fix the contacts where they are now."""
        self.targets = [pin.SE3(kin.placement(fid)) for fid in self.frame_ids]

    def _fill(self, kin: Kinematics, dt: float, blocks: list[tuple[int, np.ndarray, np.ndarray]]) -> None:
        """Each contact's J_c[:, S] into its block (6, |S|) and b_c into ``_rhs``."""
        support = self._support
        for (frame_id, jacobian, rhs), target in zip(blocks, self.targets):
            jacobian[:] = kin.local_jacobian(frame_id)[:, support]
            rhs[:] = pin.log6(kin.placement(frame_id).actInv(target)).vector
        self._rhs *= min(self.gain, 1.0 / dt)

    def write_equation_into(self, buffer: np.ndarray) -> None:
        """Make :meth:`equation` write its (6c, nv) Jacobian into ``buffer`` (e.g. rows of
        a QP's constraint matrix, which then need no copy each tick). Zeroes it: the
        columns no contact depends on stay zero."""
        if buffer.shape != (self.size, self.robot.nv):
            raise ValueError(f"the contact equation needs a ({self.size}, {self.robot.nv}) buffer, got {buffer.shape}")
        buffer[:] = 0.0
        self._equation = buffer
        self._equation_blocks = [(frame_id, buffer[6 * i:6 * i + 6, self._support], rhs)
                                 for i, (frame_id, _, rhs) in enumerate(self._blocks)]

    def equation(self, kin: Kinematics, dt: float) -> tuple[np.ndarray, np.ndarray]:
        """(6c, nv) Jacobian and (6c,) right-hand side of :math:`J_c v = b_c` (all columns).

        Work buffers, overwritten by the next call."""
        self._fill(kin, dt, self._equation_blocks)
        return self._equation, self._rhs

    def errors(self, kin: Kinematics) -> np.ndarray:
        """(c,) position error of each contact [m]."""
        return np.array([np.linalg.norm(t.translation - kin.placement(f).translation)
                         for f, t in zip(self.frame_ids, self.targets)])

    def reduction(self, kin: Kinematics, dt: float) -> Reduction:
        """Null-space parametrisation of the contact equations at the current ``q``.

        The returned object is reused (updated in place) from tick to tick.
        """
        self._fill(kin, dt, self._blocks)
        n_rows = self.size
        # QR of J_S^T = [Q1 Q2] [R; 0] (LAPACK directly: numpy.linalg.qr costs ~3x more in
        # wrappers at this size). Q2 spans ker J_S. If J_S loses rank (a stretched knee),
        # Q2 misses the extra kernel directions: conservative, and still exact.
        qr, tau, _, info = lapack.dgeqrf(self._jacobian_t)
        if info:
            raise np.linalg.LinAlgError("QR of the contact Jacobian failed")
        # Minimum-norm particular solution of J_S v_S = b_c is v_S = Q1 R^-T b_c (dtrtrs
        # reads only the upper triangle of qr). Near a singular leg it is skipped.
        x, info = lapack.dtrtrs(qr[:n_rows], self._rhs, lower=0, trans=1)
        self._q_input[:n_rows, 0] = x if info == 0 and float(x.dot(x)) < 1.0 else 0.0
        # One application of Q (dormqr) gives both Q1 x and Q2: cheaper than forming Q.
        product, _, info = lapack.dormqr("L", "N", qr, tau, self._q_input, lwork=self._q_input.shape[1])
        if info:
            raise np.linalg.LinAlgError("applying the contact QR failed")
        reduction = self._reduction
        reduction.offset = product[:, 0]
        reduction.basis = product[:, 1:]
        return reduction


class IdentityReduction(Reduction):
    """No elimination: z = v (P = I, v_0 = 0). Every coordinate counts as free: the
    simple bounds cover all of z, the base's being infinite. The products of
    :class:`Reduction` are then no-ops, and cost nothing."""

    def reduce(self, matrix: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        if out is None or out is matrix:
            return matrix
        out[:] = matrix
        return out

    def apply_offset(self, matrix: np.ndarray) -> float:
        return 0.0

    def expand(self, z: np.ndarray, nv: int) -> np.ndarray:
        return z


def identity_reduction(nv: int) -> IdentityReduction:
    """No elimination: z = v, the base's velocity unbounded."""
    return IdentityReduction(slice(0, nv), slice(0, 0), np.zeros((0, 0)), np.zeros(0), nv)
