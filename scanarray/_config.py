"""Tunables and the ``method="auto"`` choices, in one place. Tests may patch them.

Every threshold here cites the measurement it came from (machine, date, script).
"""

from __future__ import annotations

__all__ = ["CUPY_SCAN", "cupy_auto_method", "cupy_dense_auto_method"]

#: Tile shapes of the CuPy diagonal kernels (scanarray/backends/cuda/scan.cu), keyed by the
#: compute dtype's itemsize where they depend on it. ``threads`` x ``items`` is the tile
#: length of ``rows_tiles`` (4096 steps for float32); ``lanes_warps`` x ``lanes_steps`` the
#: time length of a ``lanes_tiles`` tile (32 lanes wide). Chosen from the measurements in
#: docs/gpu.md (benchmarks/bench_gpu.py). Tests shrink them to stress the look-back.
CUPY_SCAN = {
    "threads": 256,
    "items": {4: 16, 8: 8, 16: 4},
    "lanes_warps": 8,
    "lanes_steps": {4: 16, 8: 8, 16: 4},
    "seq_threads": 128,
    # __launch_bounds__ minimum resident blocks per SM (1: let the compiler choose registers)
    "rows_min_blocks": 1,
    "lanes_min_blocks": 1,
}


def cupy_auto_method(problem):
    """The CuPy method for ``method="auto"``."""
    if problem.dense:
        return cupy_dense_auto_method(problem)
    return "lookback"


#: Dense CuPy choice (issue 6), from benchmarks/bench_dense.py on an NVIDIA H200, 2026-11-21
#: (docs/dense.md). Both batched-matmul methods pay a launch floor of about 1-3 ms (a few
#: CuPy calls per level, 10-14 levels), so the one-kernel ``sequential`` scan wins while
#: T x (its per-step latency) stays below that: T <= DENSE_SEQ_MAX_T[n bucket]. With a
#: single lane the prefix scan's slices need no copies and it beat cyclic reduction up to
#: lanes x T x n^3 = DENSE_PREFIX_MAX_WORK multiply-adds; beyond, cyclic reduction's
#: T n^3 work (against T n^3 log2 T) wins, by 9x at (B=16, T=16384, n=16).
DENSE_SEQ_MAX_T = {4: 2048, 8: 1024, 16: 0, 32: 0, 64: 0}
DENSE_PREFIX_MAX_WORK = 2**27


def cupy_dense_auto_method(problem):
    """The CuPy dense method for ``method="auto"`` (see ``DENSE_SEQ_MAX_T``)."""
    T, n = problem.length, problem.b.shape[-1]
    lanes = 1
    for s in problem.lanes:
        lanes *= s
    bucket = next((k for k in sorted(DENSE_SEQ_MAX_T) if n <= k), None)
    if bucket is not None and T <= DENSE_SEQ_MAX_T[bucket]:
        return "sequential"
    if lanes == 1 and T * n**3 <= DENSE_PREFIX_MAX_WORK:
        return "prefix"
    return "cyclic_reduction"

