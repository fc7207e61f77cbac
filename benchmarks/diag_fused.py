#!/usr/bin/env python3
"""Issue 6: the chunked method's passes at (8, 4096, 64) float32, carries in their own launch or
inside the rerun's (``_cupy_dense.CHUNK_FUSED``), by CUDA events between launches (medians of 20).

With the fused launch also ``DIAG = 2``: its blocks only wait for their entering states (the
carriers' chains with no rerun traffic beside them). Alternating, ``ROUNDS`` rounds.

Usage: python benchmarks/diag_fused.py [ROUNDS]   (on the GPU)
"""

from __future__ import annotations

import statistics
import sys

import cupy
import numpy as np
from bench_dense import gpu_data

import scanarray
from scanarray.backends import _cupy_dense as cd


def phases(f, reps=20):
    res = []
    for _ in range(reps):
        cd.PHASE_EVENTS = []
        f()
        cupy.cuda.get_current_stream().synchronize()
        ev = cd.PHASE_EVENTS
        res.append([cupy.cuda.get_elapsed_time(ev[i], ev[i + 1]) * 1e3 for i in range(len(ev) - 1)])
    cd.PHASE_EVENTS = None
    return [statistics.median(c) for c in zip(*res)]


def main():
    A, b = gpu_data(8, 4096, 64, np.float32, seed=1)
    f = lambda: scanarray.linear_recurrence(A, b, dense=True, backend="cupy", method="chunked")  # noqa: E731
    print(f"{cupy.cuda.runtime.getDeviceProperties(0)['name'].decode()}; chunks {cd.chunk_shape(np.dtype('float32'), 64, 8, 4096)}")
    for r in range(int(sys.argv[1]) if len(sys.argv) > 1 else 2):
        for fused, diag, label in ((False, 0, "products | carries | rerun"), (True, 0, "products | carries+rerun"),
                                   (True, 2, "products | chains alone (DIAG=2)")):
            cd.CHUNK_FUSED, cd.DIAG = fused, diag
            p = phases(f)
            print(f"round {r} {label:36s} " + " | ".join(f"{x:7.1f}" for x in p) + f"  (sum {sum(p):.1f} us)")
    cd.CHUNK_FUSED, cd.DIAG = True, 0


if __name__ == "__main__":
    main()
