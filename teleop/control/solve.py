r"""The IK-QP solves: one weighted level (Eq. 1.3) or a strict hierarchy (Eqs. 1.1-1.2).

Both work on reduced coordinates ``z`` (see ``limits.contacts.Reduction``) and on the
task rows already scaled by :math:`\sqrt{w_k}`, so a level's cost is simply
:math:`\|A z - b\|^2 + \epsilon \|z\|^2`.

Deliberate differences from the reference's iCub IK-QP, Eq. (1.16)
:math:`\sum_k w_k [(J_k v - b_k)^T C_q (J_k v - b_k) + v^T C_\epsilon v]`:

* the task metric is :math:`C_q = I` (every task row counts alike; the weights do the
  scaling), as in Eqs. (1.2)-(1.3);
* the regulariser is Eq. (1.3)'s single :math:`\epsilon\|v\|^2` per level, not one per
  task inside the weighted sum (which would be :math:`(\sum_k w_k)\, v^T C_\epsilon v`):
  the damping then stays the same when weights are changed at run time or a level gains
  a task, instead of growing with the level's total weight;
* Eq. (1.17)'s linear regulariser :math:`C \dot q` is zero (the reference gives no value);
* ``z`` are the reduced coordinates, but since the contact offset :math:`v_0` is
  orthogonal to the basis :math:`P` (see ``ContactConstraint.reduction``),
  :math:`\|v\|^2 = \|v_0\|^2 + \|z\|^2`: damping z is damping v up to a constant.
"""

from __future__ import annotations

import numpy as np

from teleop.control.qp import Constraints, nullspace_basis, solve_qp


_DAMPING_MATRICES: dict[tuple[int, float], np.ndarray] = {}


def damping_matrix(size: int, damping: float) -> np.ndarray:
    """epsilon * I, cached (adding it is 4x cheaper than writing a diagonal in place)."""
    key = (size, damping)
    matrix = _DAMPING_MATRICES.get(key)
    if matrix is None:
        matrix = _DAMPING_MATRICES[key] = damping * np.eye(size)
    return matrix


def level_qp(rows: np.ndarray, target: np.ndarray, damping: float) -> tuple[np.ndarray, np.ndarray]:
    r"""Hessian and linear term of :math:`\|A z - b\|^2 + \epsilon\|z\|^2` (halved):
    :math:`H = A^T A + \epsilon I`, :math:`f = -A^T b`."""
    hessian = rows.T @ rows
    hessian += damping_matrix(hessian.shape[0], damping)
    linear = target @ rows
    return hessian, np.negative(linear, out=linear)


class HierarchyResult:
    """Outcome of a solve.

    Attributes:
        z: the reduced velocity, or None if not even the first level could be solved.
        levels_solved: number of levels whose QP succeeded (lower ones kept the solution
            of the last successful level).
        exitflags: DAQP exit flag of each level attempted.
    """

    __slots__ = ("z", "levels_solved", "exitflags")

    def __init__(self, z: np.ndarray | None, levels_solved: int, exitflags: list[int] | None = None) -> None:
        self.z = z
        self.levels_solved = levels_solved
        self.exitflags = [] if exitflags is None else exitflags


def solve_weighted(rows: np.ndarray, target: np.ndarray, damping: float,
                   constraints: Constraints) -> HierarchyResult:
    r"""One QP: :math:`\min_z \sum_k w_k\|J_k z - b_k\|^2 + \epsilon\|z\|^2` s.t. constraints."""
    hessian, linear = level_qp(rows, target, damping)
    z, flag = solve_qp(hessian, linear, constraints)
    return HierarchyResult(z, int(z is not None), [flag])


def solve_hierarchy(levels: list[tuple[np.ndarray, np.ndarray]], damping: float,
                    constraints: Constraints, first_level_free: np.ndarray | None = None,
                    zero_rows_possible: bool = True) -> HierarchyResult:
    r"""Cascade of QPs, one per priority level (Eq. 1.2 with Eq. 1.1's "/").

    Level 1 solves :math:`\min \|A_1 z - b_1\|^2 + \epsilon\|z\|^2` under the hard
    constraints. Every later level k keeps the task values of all higher levels,
    :math:`A_j z = A_j z_{k-1}^*` for :math:`j < k`, by searching only
    :math:`z = z_{k-1}^* + Z_{k-1} w` with :math:`Z_{k-1}` an orthonormal basis of
    :math:`\ker [A_1; \dots; A_{k-1}]` (built incrementally:
    :math:`Z_k = Z_{k-1}\,\ker(A_k Z_{k-1})`). This is the equality-constrained cascade
    with the equalities eliminated, so each level's QP shrinks instead of growing, and it
    is always feasible (w = 0 satisfies everything), so a lower level can fail only
    numerically, in which case it keeps the higher levels' solution. The bases come from
    Householder QRs (see :func:`nullspace_basis`): exact, so :math:`A_j Z = 0` to machine
    precision and a lower level cannot disturb a higher one.

    ``first_level_free``: if level 1's rows are selections of coordinates of z (posture
    tasks on joints that are plain variables), the indices of the *other* coordinates.
    Level 2 then simply keeps level 1's coordinates fixed, :math:`Z_1 = I_{[:, free]}`:
    no QR, and its bounds stay simple bounds (cheaper for DAQP than general rows).
    ``zero_rows_possible=False`` (no task has a zero row) skips a check in level 1's QR.
    The later levels' projected rows :math:`A_k Z_{k-1}` are always checked: they vanish
    wherever a task repeats a direction of a higher level (e.g. a level-2 posture on a
    level-1 joint), whatever the weights, and an unchecked zero row would take an
    arbitrary direction from every level below it.
    """
    result = HierarchyResult(None, 0)
    z = None
    basis = None   # orthonormal Z_{k-1} (n, r), or None when the subspace is a selection
    free = None    # the selected coordinates in that case
    n_levels = len(levels)
    for k, (rows, target) in enumerate(levels):
        if k == 0:
            hessian, linear = level_qp(rows, target, damping)
            z, flag = solve_qp(hessian, linear, constraints)
            result.exitflags.append(flag)
            if z is None:
                return result
            if first_level_free is not None:
                free = first_level_free
                n_bounded_free = int(np.searchsorted(free, constraints.n_bounded))
            elif n_levels > 1:
                basis = nullspace_basis(rows, zero_rows_possible)
        elif free is not None:
            assert z is not None  # level 1 returns early without a solution
            projected = rows[:, free]
            hessian, linear = level_qp(projected, target - rows @ z, damping)
            linear += damping * z[free]
            w, flag = solve_qp(hessian, linear, constraints.in_coordinates(z, free, n_bounded_free))
            result.exitflags.append(flag)
            if w is None:
                break
            z = z.copy()
            z[free] += w
            if k + 1 < n_levels:
                kernel = nullspace_basis(projected)
                basis = np.zeros((len(z), kernel.shape[1]))
                basis[free] = kernel
            free = None
        else:
            # z: level 1 returns early without one; basis: the level before left its kernel.
            assert z is not None and basis is not None
            if basis.shape[1] == 0:  # the higher levels use every degree of freedom
                result.levels_solved += 1
                continue
            projected = rows @ basis
            hessian, linear = level_qp(projected, target - rows @ z, damping)
            linear += damping * (z @ basis)
            w, flag = solve_qp(hessian, linear, constraints.in_subspace(z, basis))
            result.exitflags.append(flag)
            if w is None:
                break
            z = z + basis @ w
            if k + 1 < n_levels:
                basis = basis @ nullspace_basis(projected)
        result.levels_solved += 1
    result.z = z
    return result
