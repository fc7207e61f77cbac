#!/usr/bin/env python3
"""Host time per call of the public function on small CuPy problems, with and without the
launches bound to repeated signatures (``scanarray._api.FAST_CALLS``), and where the time goes
(cProfile, top 25 by own time). On the CUDA host: ``python3 benchmarks/profile_host.py``."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cupy  # noqa: E402
from bench_dense import host_time_us  # noqa: E402
from bench_gpu import profile_host  # noqa: E402

import scanarray  # noqa: E402
from scanarray import _api  # noqa: E402

rs = cupy.random.RandomState(1)
A = (rs.standard_normal((2, 64, 16, 16)) * 0.1).astype(cupy.float32)
b = rs.standard_normal((2, 64, 16), dtype=cupy.float32)
out = cupy.empty_like(b)


def dense():
    scanarray.linear_recurrence(A, b, dense=True, backend="cupy", method="lookback", out=out)


a1 = cupy.full((4, 64), 0.5, cupy.float32)
b1 = cupy.ones((4, 64), cupy.float32)
o1 = cupy.empty_like(b1)
a2 = rs.uniform(-1, 1, (2, 256, 4096), dtype=cupy.float32)
b2 = rs.standard_normal((2, 256, 4096), dtype=cupy.float32)
o2 = cupy.empty_like(b2)
tm = rs.standard_normal((4096, 64), dtype=cupy.float32)

CASES = {
    "diagonal (4, 64), out=": lambda: scanarray.linear_recurrence(a1, b1, out=o1, backend="cupy"),
    "diagonal (4, 64), auto backend, new result": lambda: scanarray.linear_recurrence(a1, b1),
    "diagonal (2, 256, 4096) lookback, out=": lambda: scanarray.linear_recurrence(
        a2, b2, out=o2, backend="cupy", method="lookback"),
    "diagonal scalar a=0.9 (2, 256, 4096), reverse": lambda: scanarray.linear_recurrence(
        0.9, b2, reverse=True, backend="cupy"),
    "diagonal time-major (4096, 64) axis 0": lambda: scanarray.linear_recurrence(0.5, tm, axis=0),
    "dense lookback (2, 64, 16)": dense,
}

if __name__ == "__main__":
    print("| call | host us/call issued, bound | back to back | full path issued | back to back |")
    print("|---|---|---|---|---|")
    for name, fn in CASES.items():
        row = []
        for fast in (True, False):
            _api.FAST_CALLS = fast
            row += host_time_us(fn, reps=2000)
        _api.FAST_CALLS = True
        print(f"| {name} | " + " | ".join(f"{x:.1f}" for x in row) + " |")
    for name in ("diagonal (4, 64), out=", "diagonal (2, 256, 4096) lookback, out="):
        profile_host(print, 3000, CASES[name], name)
    _api.FAST_CALLS = False
    profile_host(print, 3000, CASES["diagonal (4, 64), out="], "full path")
