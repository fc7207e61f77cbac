"""The CuPy backend: CUDA kernels on CuPy arrays, on the inputs' device and CuPy's current stream.

Each method lives in its own private module, imported when first used:

- ``lookback``, ``sequential``: :mod:`._cupy_scan` (single-pass scan with
  decoupled look-back, Merrill & Garland 2016; one thread per lane);
- ``matmulscan``: :mod:`._cupy_matmulscan` (tensor-core MatMulScan,
  Zouzias & McColl, arXiv 2411.17887);
- dense methods: :mod:`._cupy_dense` (cyclic reduction on ``cupy.matmul``).
"""

from __future__ import annotations

__all__ = ["auto_method", "linear_recurrence"]


def auto_method(problem):
    from ... import _config

    return _config.cupy_auto_method(problem)


def linear_recurrence(problem):
    if problem.dense:
        from . import dense as _cupy_dense

        return _cupy_dense.linear_recurrence(problem)
    if problem.method == "matmulscan":
        from . import matmulscan as _cupy_matmulscan

        return _cupy_matmulscan.linear_recurrence(problem)
    from . import scan as _cupy_scan

    return _cupy_scan.linear_recurrence(problem)
