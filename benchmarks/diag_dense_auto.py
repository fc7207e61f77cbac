#!/usr/bin/env python3
"""Check ``method="auto"``'s CuPy dense rule where it weighs ``chunked`` against ``sequential``
(issue 6): both methods timed one call at a time (CUDA events around the call, medians of 10,
float32, contractive random ``A``) at the shapes that fitted ``_config.DENSE_CHUNK_MMA_PER_MS``
for 32 < n <= 64, next to the method the rule picks.

Usage: python benchmarks/diag_dense_auto.py   (on the GPU; prints a Markdown table)
"""

from __future__ import annotations

import time

import cupy
import numpy as np
from bench_dense import gpu_time

import scanarray
from scanarray import _config
from scanarray._problem import Problem

SHAPES = [(64, 1024, 64), (64, 4096, 64), (16, 4096, 64), (64, 1024, 48), (8, 16384, 64), (8, 4096, 64)]


def main():
    rs = cupy.random.RandomState(1)
    print(time.strftime("diag_dense_auto %Y-%m-%d %H:%M:%S UTC", time.gmtime()))
    print("| (B, T, n) | sequential ms | chunked ms | faster | auto picks |")
    print("|---|---|---|---|---|")
    for B, T, n in SHAPES:
        A = (rs.standard_normal((B, T, n, n), dtype=cupy.float32) * float(0.9 / (2 * np.sqrt(n) + 1)))
        b = rs.standard_normal((B, T, n), dtype=cupy.float32)
        out = cupy.empty_like(b)
        ms = {}
        for m in ("sequential", "chunked"):
            ms[m] = gpu_time(lambda m=m, A=A, b=b, out=out: scanarray.linear_recurrence(
                A, b, dense=True, backend="cupy", method=m, out=out), min_reps=10, max_reps=10)
        f32 = np.dtype(np.float32)
        pick = _config.cupy_dense_auto_method(Problem(xp=cupy, kind="cupy", a=A, b=b, initial=None, out=out, dtype=f32,
                                                      out_dtype=f32, reverse=False, dense=True, chunk=0, method="auto"))
        faster = min(ms, key=ms.get)
        print(f"| ({B}, {T}, {n}) | {ms['sequential']:.3f} | {ms['chunked']:.3f} | {faster} | {pick} |", flush=True)
        A = b = out = None
        cupy.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    main()
