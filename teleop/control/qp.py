"""Dense QP and linear-algebra helpers around DAQP and LAPACK.

Solver choice, measured on this shared 2-core machine on the 1000 QPs of the benchmark
trajectory (default stack, weighted, 26 variables after eliminating the feet: 20 simple
bounds and 18 general rows; median / p99 per solve, same run):

* ``daqp.solve`` (dual active set, C): 19.6 / 41 us. Of a ~30 us call, ~22 us is DAQP's
  own setup (Cholesky of H, constraint transform) and ~2 us the active-set iterations,
  so warm starts would not help; ``daqp.Model.update`` + ``solve`` costs the same as
  ``daqp.solve`` once H changes (it does every tick); its settings (``eps_prox``,
  ``presolve``, ``eq_reduction``) do not change the setup time.
* ``quadprog.solve_qp`` (Goldfarb-Idnani): 35 / 55 us, without building its constraint
  matrix (bounds must be general rows).
* ``proxsuite.proxqp.dense`` 0.8.0 (pip-installed into the venv for this measurement only):
  132 / 197 us cold, 84 / 147 us warm-started with ``update``.
* ``qpsolvers.solve_qp(..., solver="daqp")`` adds its conversions on top of DAQP.
* DAQP's hierarchical mode (``H=None`` + ``break_points``: one call for all levels, no
  per-level damping): 80-125 us for the 3-level default stack with active bounds, and
  with the parametrisation we tried its level-2 residual was 1.09 where the true
  lexicographic optimum (an explicit equality-constrained QP) is 0.679 and our cascade
  gets 0.680 (see ``solve.solve_hierarchy``).

Hence DAQP called directly, with our own cascade. LAPACK is called through
``scipy.linalg.lapack`` because the ``numpy.linalg`` wrappers cost 10-20 us per call here
(``numpy.linalg.qr`` 39 us vs ``dgeqrf`` + ``dorgqr`` 15 us; ``numpy.linalg.solve`` 15 us vs
``dgesv`` 5 us for 6x6; an SVD of a 21x23 matrix 170 us vs a QR 10 us).
"""

from __future__ import annotations

from typing import NamedTuple

import daqp
import numpy as np
from scipy.linalg import lapack

from teleop.control.tasks.base import all_finite

#: DAQP constraint types.
INEQUALITY, EQUALITY = 0, 5
#: DAQP exit flags that mean a solution was found (1: optimal, 2: optimal with soft
#: constraints relaxed).
DAQP_SUCCESS = (1, 2)


class Constraints(NamedTuple):
    r"""Constraints on a QP variable x, in DAQP's layout.

    ``lower[:n_bounded] <= x[:n_bounded] <= upper[:n_bounded]`` (simple bounds on the
    first entries) and ``lower[n_bounded:] <= rows @ x <= upper[n_bounded:]``; rows whose
    ``sense`` is :data:`EQUALITY` must hold with equality (lower == upper).
    """

    n_bounded: int
    rows: np.ndarray   # (m, n)
    lower: np.ndarray  # (n_bounded + m,)
    upper: np.ndarray  # (n_bounded + m,)
    sense: np.ndarray  # (n_bounded + m,) int32

    def without_rows(self, start: int, stop: int) -> "Constraints":
        """A copy without the general rows ``start:stop`` (e.g. to relax one constraint)."""
        keep_rows = np.r_[0:start, stop:self.rows.shape[0]]
        keep = np.r_[0:self.n_bounded, self.n_bounded + keep_rows]
        return Constraints(self.n_bounded, self.rows[keep_rows], self.lower[keep], self.upper[keep], self.sense[keep])

    def in_coordinates(self, origin: np.ndarray, keep: np.ndarray, n_bounded_kept: int) -> "Constraints":
        """The same constraints on w = x[keep] - origin[keep], the other coordinates of x
        staying at ``origin``. ``keep`` is sorted and its first ``n_bounded_kept`` entries
        are simple-bounded coordinates (< n_bounded): they stay simple bounds."""
        bounded = keep[:n_bounded_kept]
        # Entries of lower/upper/sense kept: the kept bounds, then every general row.
        entries = np.concatenate((bounded, np.arange(self.n_bounded, len(self.lower))))
        shift = np.concatenate((origin[bounded], self.rows @ origin))
        return Constraints(n_bounded_kept, self.rows[:, keep], self.lower[entries] - shift,
                           self.upper[entries] - shift, self.sense[entries])

    def in_subspace(self, origin: np.ndarray, basis: np.ndarray) -> "Constraints":
        """The same constraints on w for x = origin + basis @ w (all become rows)."""
        nb = self.n_bounded
        rows = np.vstack((basis[:nb], self.rows @ basis))
        shift = np.concatenate((origin[:nb], self.rows @ origin))
        return Constraints(0, rows, self.lower - shift, self.upper - shift, self.sense)


def solve_qp(hessian: np.ndarray, linear: np.ndarray, constraints: Constraints) -> tuple[np.ndarray | None, int]:
    """Minimise ``0.5 x'Hx + f'x`` under ``constraints`` with DAQP.

    A fast path was tried and measured slower (same process, controllers interleaved,
    CPU time per tick on the benchmark trajectory, weighted: 0.487 ms DAQP only vs 0.664 ms
    with the unconstrained optimum tried first and 0.695 ms with up to three primal
    active-set rounds on the simple bounds): the unconstrained optimum -H^-1 f (LAPACK
    ``dposv``) was feasible on only 12 % of the ticks (36 % with the rounds), since the
    benchmark's posture targets go beyond the neck, torso and elbow limits, and every
    miss pays both.

    Returns (x, exitflag); x is None unless DAQP succeeded with a finite solution.
    """
    x, _, exitflag, _ = daqp.solve(hessian, linear, constraints.rows, constraints.upper,
                                   constraints.lower, constraints.sense)
    if exitflag not in DAQP_SUCCESS or not all_finite(x):
        return None, int(exitflag)
    return x, int(exitflag)


_KERNEL_SELECTORS: dict[tuple[int, int], np.ndarray] = {}


def nullspace_basis(matrix: np.ndarray, skip_zero_rows: bool = True) -> np.ndarray:
    """Orthonormal basis (n, n - m') of the orthogonal complement of the rows of a
    (m, n) matrix, m' being its number of non-zero rows: ``matrix @ basis == 0``.

    Householder QR of the transpose, ``matrix.T = Q [R; 0]``, then the last n - m' columns
    of Q, obtained by applying the reflectors to ``[0; I]`` (LAPACK ``dgeqrf`` + ``dormqr``:
    ~10 us here, versus ~170 us for an SVD of the same 21x23 matrix on this machine).
    Rows that are linearly dependent but non-zero each still remove one direction:
    conservative (lower priority levels lose that direction) but exact: they can never
    disturb a higher level. ``skip_zero_rows=False`` saves the check when the caller knows
    no row is zero (a zero row, e.g. a task of weight 0, must not consume a direction).
    """
    n = matrix.shape[1]
    if skip_zero_rows:
        nonzero = np.einsum("ij,ij->i", matrix, matrix) > 1e-24
        if not nonzero.all():
            matrix = matrix[nonzero]
    m = matrix.shape[0]
    if m == 0:
        return np.eye(n)
    if m >= n:
        return np.zeros((n, 0))
    qr, tau, _, info = lapack.dgeqrf(matrix.T)
    selector = _KERNEL_SELECTORS.get((n, m))
    if selector is None:  # [0; I]: Q times it is the last n - m columns of Q
        selector = np.zeros((n, n - m), order="F")
        selector[m:] = np.eye(n - m)
        _KERNEL_SELECTORS[(n, m)] = selector
    basis, _, info_q = lapack.dormqr("L", "N", qr, tau, selector, lwork=max(1, n - m))
    if info or info_q:
        raise np.linalg.LinAlgError("QR of a priority level failed")
    return basis
