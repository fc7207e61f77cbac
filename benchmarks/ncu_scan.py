#!/usr/bin/env python3
"""Launch the CuPy backend's planned diagonal kernel on a few shapes, for Nsight Compute.

Usage on the CUDA host: ncu --clock-control none --section SpeedOfLight --section WarpStateStats \
    -k regex:rows python3 benchmarks/ncu_scan.py
Each shape runs its kernel three times (the profiler replays each launch it collects).
"""

import cupy
import numpy as np

from scanarray.backends import _cupy_scan

SHAPES = [(512, 4096), (1, 2**24), (1, 2**26)]

rng = np.random.default_rng(0)
for shape in SHAPES:
    a = cupy.asarray((0.9 + 0.1 * rng.random(shape)).astype(np.float32))
    b = cupy.asarray(rng.standard_normal(shape, dtype=np.float32))
    out = cupy.empty_like(b)
    plan = _cupy_scan.plan(a, b, out, np.dtype(np.float32), "lookback")
    for _ in range(3):
        plan.launch(cupy, a, b, out, None)
    cupy.cuda.Device().synchronize()
    print(shape, plan.name, "grid", plan.grid, flush=True)
