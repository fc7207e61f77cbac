"""Tunables and the ``method="auto"`` choices, in one place. Tests may patch them.

Every threshold here cites the measurement it came from (machine, date, script).
"""

from __future__ import annotations

__all__ = ["CUPY_SCAN", "cupy_auto_method"]

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
}


def cupy_auto_method(problem):
    """The CuPy method for ``method="auto"``."""
    if problem.dense:
        return "cyclic_reduction"
    return "lookback"
