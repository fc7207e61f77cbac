#!/usr/bin/env python3
"""The dense ``lookback`` kernel's chunks indexed by their block or by tickets (issue 6).

``dense_lookback.cu`` gives each (lane, chunk) block its place in the scan either from
``blockIdx.x`` (as the diagonal scan's tiles do since 2026-11-28) or from a ticket of the
workspace's atomic counter (as shipped: ``_cupy_dense.LOOKBACK_TICKETS = True``), whose round
trip comes before the chunk's first load. This script times both, alternated in one process, on
the shapes the method runs (n <= 32), and checks that they give the same bits.

GPU time by CUDA events: the public call bound to its signature with ``out=``, launches queued
behind a spin kernel (``bench_gpu.queued_us``: the kernels back to back, without the host's time
between them), median of 7 bursts of 50; and back to back from an idle GPU
(``bench_gpu.timed_burst``). Rounds alternate the two orders.

Usage (on the GPU): python benchmarks/diag_dense_tiles.py [ROUNDS]
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cupy  # noqa: E402
import numpy as np  # noqa: E402
from bench_dense import device_line, gpu_data  # noqa: E402
from bench_gpu import queued_us, timed_burst  # noqa: E402

import scanarray  # noqa: E402
from scanarray.backends import _cupy_dense  # noqa: E402

# (lanes, T, n, dtype): the target shape first
SHAPES = [(64, 1024, 16, "float32"), (8, 4096, 16, "float32"), (256, 256, 8, "float32"),
          (16, 2048, 32, "float32"), (64, 1024, 16, "float64")]
ORDERS = {"block index": False, "ticket": True}


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    print(device_line())
    print("| shape | order | plan (L, W, chunks) | queued µs, rounds | back to back µs, rounds | same bits |")
    print("|---|---|---|---|---|---|")
    for B, T, n, dt in SHAPES:
        A, b = gpu_data(B, T, n, dt, seed=1)
        outs = {k: cupy.empty_like(b) for k in ORDERS}
        res = {k: ([], []) for k in ORDERS}

        def call(k):
            return lambda: scanarray.linear_recurrence(A, b, dense=True, backend="cupy", method="lookback",
                                                       out=outs[k])

        for r in range(rounds):
            for k in (ORDERS if r % 2 == 0 else reversed(list(ORDERS))):
                _cupy_dense.LOOKBACK_TICKETS = ORDERS[k]
                fn = call(k)
                fn()
                res[k][0].append(queued_us(fn))
                res[k][1].append(timed_burst(fn, 7)[0] * 1e3)
        _cupy_dense.LOOKBACK_TICKETS = True
        same = bool(cupy.array_equal(outs["block index"], outs["ticket"]))
        L, W = _cupy_dense.lookback_shape(np.dtype(dt), n, T)
        for k in ORDERS:
            q = " / ".join(f"{x:.1f}" for x in res[k][0])
            bb = " / ".join(f"{x:.1f}" for x in res[k][1])
            print(f"| ({B},{T},{n}) {dt} | {k} | ({L}, {W}, {B * -(-T // L)}) | {q} | {bb} | {same} |")


if __name__ == "__main__":
    main()
