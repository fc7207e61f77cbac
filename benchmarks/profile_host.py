#!/usr/bin/env python3
"""Host time per call of the CuPy dense ``lookback`` and diagonal scans on tiny problems, and where
it goes (cProfile, top 25 by own time). On the CUDA host: ``python3 benchmarks/profile_host.py``."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cupy  # noqa: E402
from bench_dense import host_time_us  # noqa: E402
from bench_gpu import profile_host  # noqa: E402

import scanarray  # noqa: E402

rs = cupy.random.RandomState(1)
A = (rs.standard_normal((2, 64, 16, 16)) * 0.1).astype(cupy.float32)
b = rs.standard_normal((2, 64, 16), dtype=cupy.float32)
out = cupy.empty_like(b)


def dense():
    scanarray.linear_recurrence(A, b, dense=True, backend="cupy", method="lookback", out=out)


a1 = cupy.full((4, 64), 0.5, cupy.float32)
b1 = cupy.ones((4, 64), cupy.float32)
o1 = cupy.empty_like(b1)


def diagonal():
    scanarray.linear_recurrence(a1, b1, out=o1, backend="cupy")


for name, fn in (("dense lookback (2, 64, 16)", dense), ("diagonal (4, 64)", diagonal)):
    issued, per = host_time_us(fn, reps=2000)
    print(f"{name}: host {issued:.1f} us per call issued, {per:.1f} us per call back to back")
for name, fn in (("dense lookback (2, 64, 16)", dense), ("diagonal (4, 64)", diagonal)):
    profile_host(print, 3000, fn, name)
