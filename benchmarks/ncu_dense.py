#!/usr/bin/env python3
"""Launch the CuPy dense ``lookback`` kernel at (64, 1024, 16) float32, for Nsight Compute.

Usage on the CUDA host: ncu --clock-control none -k regex:dense_lookback --launch-skip 2 \
    --launch-count 1 --section SpeedOfLight --section WarpStateStats --section InstructionStats \
    python3 benchmarks/ncu_dense.py [fma|chunked64]
Three calls (the profiler replays the one it collects); ``fma``: the FMA chunk maps instead of the
tensor-core ones; ``chunked64``: method ``chunked`` at (8, 4096, 64) instead (profile its products
pass with ``-k regex:dense_chunk_products``); ``wg=K``, ``L=K``: its ``CHUNK_MMA_WG`` (16: the
products on FP16 pieces) and chunk length.
"""

import sys

import cupy
import numpy as np

import scanarray
from scanarray.backends import _cupy_dense

if "fma" in sys.argv[1:]:
    _cupy_dense.LOOKBACK_MMA = False
for arg in sys.argv[1:]:
    if arg.startswith("wg="):
        _cupy_dense.CHUNK_MMA_WG = int(arg[3:])
    elif arg.startswith("L="):
        _cupy_dense.CHUNK_L = int(arg[2:])
method, (B, T, n) = ("chunked", (8, 4096, 64)) if "chunked64" in sys.argv[1:] else ("lookback", (64, 1024, 16))
rs = cupy.random.RandomState(1)
A = (rs.standard_normal((B, T, n, n)) * (0.9 / (2 * np.sqrt(n) + 1))).astype(cupy.float32)
b = rs.standard_normal((B, T, n), dtype=cupy.float32)
out = cupy.empty_like(b)
for _ in range(3):
    scanarray.linear_recurrence(A, b, dense=True, backend="cupy", method=method, out=out)
cupy.cuda.Device().synchronize()
print("ncu_dense: done", method, "fma" if not _cupy_dense.LOOKBACK_MMA else "mma", flush=True)
