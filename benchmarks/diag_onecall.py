#!/usr/bin/env python3
"""Where one call's time goes beyond the kernel's (issue 4): the public function timed one call
at a time against its kernel launched alone, one at a time and back to back, and the host's own
time per call (no synchronisation), on the issue's long-row and time-major workloads.

Usage: python benchmarks/diag_onecall.py   (on the GPU)
"""

from __future__ import annotations

import statistics
import time

import cupy
import numpy as np
from bench_gpu import kernel_only, make, timed, timed_burst

import scanarray

WORK = [("(1,1,2**24)", (1, 1, 2**24), -1), ("(1,1,2**28)", (1, 1, 2**28), -1),
        ("time-major (65536,4096)", (65536, 4096), 0), ("(8,1024,4096)", (8, 1024, 4096), -1)]


def host_us(fn, n=30):
    """Median host microseconds of fn() (launches only: the GPU is kept busy behind them)."""
    fn()
    cupy.cuda.Device().synchronize()
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1e6)
    cupy.cuda.Device().synchronize()
    return statistics.median(out)


def main():
    rng = np.random.default_rng(0)
    lines = [("| workload | kernel | public, one call | kernel, one call | public, back to back | kernel, back to back "
              "| host per public call | host per kernel launch |"), "|---|---|---|---|---|---|---|---|"]
    for label, shape, axis in WORK:
        a_h, b_h = make(shape, axis, "float32", "full", rng)
        a, b = cupy.asarray(a_h), cupy.asarray(b_h)
        out = cupy.empty_like(b)

        def pub():
            scanarray.linear_recurrence(a, b, axis, out=out, backend="cupy", method="lookback")

        run = kernel_only(a, b, out, axis, "lookback")
        t = [timed(pub, 15)[0], timed(run, 15)[0], timed_burst(pub, 15)[0], timed_burst(run, 15)[0]]
        h = [host_us(pub), host_us(run)]
        kern = run.plan.name.split("<")[0].split("::")[-1]
        lines.append(f"| {label} | {kern} | " + " | ".join(f"{1e3 * x:.1f} us" for x in t) + " | "
                     + " | ".join(f"{x:.1f} us" for x in h) + " |")
        print(lines[-1], flush=True)
        del a, b, out
        cupy.get_default_memory_pool().free_all_blocks()
    print("\n".join(lines))


if __name__ == "__main__":
    main()
