"""One BLAS thread for the product's processes.

The ProMP estimator and the controller multiply small matrices (a (150, 20) by (20, ~560)
product per prediction): too small for threads to help, and OpenBLAS spreads them over every
core anyway, so that each product waits for a scheduler slice as soon as another process
uses a core. `teleop bench promp` on this 2-core machine while another job ran: the robot
station's estimator step took 1.83 ms median (p90 16 ms) with OpenBLAS's default threads,
0.52 ms (p90 1.7 ms) with one thread; the library's full-covariance step 2.0 ms (p90 16 ms)
against 0.93 ms (p90 2.1 ms). An idle machine shows no difference, which is why this went
unnoticed. A user who sets a BLAS thread count in the environment keeps it.
"""

from __future__ import annotations

import os

#: Environment variables by which a user chooses the BLAS thread count (then left alone).
THREAD_COUNT_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                          "BLIS_NUM_THREADS", "VECLIB_MAXIMUM_THREADS")


def limit_blas_threads() -> bool:
    """Run the BLAS libraries numpy loaded on one thread, unless the environment sets a
    thread count. Returns whether the limit was applied. Imports numpy first: threadpoolctl
    only reaches the libraries loaded so far."""
    if any(os.environ.get(name) for name in THREAD_COUNT_VARIABLES):
        return False
    import importlib

    from threadpoolctl import threadpool_limits

    importlib.import_module("numpy")      # loads its BLAS, for threadpoolctl to find

    threadpool_limits(limits=1, user_api="blas")
    return True
