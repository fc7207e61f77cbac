#!/usr/bin/env python3
"""The look-back rows kernels' L2 prefetch (``SCANARRAY_ROWS_L2PF`` in scan.cu: a tile's first
thread asks L2 for the bytes of the tile that many tickets ahead) against a build without it
(``-DSCANARRAY_ROWS_L2PF=0``), over dtypes and row counts that take the look-back.

Kernel only (the plan's launch, CUDA events, median of 15), the two builds alternated over
rounds; the results of every build must equal the first build's bit for bit (a prefetch is a
hint: it moves no result). GB/s = bytes of a + b read + h written / time; % of the device's
copy bandwidth measured in the same process.

On the CUDA host: ``python3 benchmarks/diag_l2pf.py`` (``DIAG_ONLY="float64;complex"`` picks workloads).
"""

from __future__ import annotations

import os
import sys

import cupy
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_gpu import copy_bandwidth  # noqa: E402
from diag_lookback import timed, variant_kernel  # noqa: E402

from scanarray.backends import _cupy_common, _cupy_scan  # noqa: E402

#: (dtype, (rows, steps)): one long row of each dtype (about 1-3 GB moved), and float32 rows of
#: several tiles too few to fill the device without the look-back
WORK = [("float32", (1, 2**24)), ("float32", (1, 2**28)), ("float32", (8, 2**22)), ("float32", (64, 2**20)),
        ("float16", (1, 2**28)), ("float64", (1, 2**27)), ("complex64", (1, 2**27)), ("complex128", (1, 2**26))]
BUILDS = [("prefetch (shipped)", ()), ("no prefetch", ("-DSCANARRAY_ROWS_L2PF=0",))]
ONLY = [x for x in os.environ.get("DIAG_ONLY", "").split(";") if x]


def data(dtype, shape, rng):
    dt = np.dtype(dtype)
    real = np.float32 if dt.kind == "f" and dt.itemsize < 4 else dt.type(0).real.dtype
    a = (0.9 + 0.1 * rng.random(shape)).astype(real)
    b = rng.standard_normal(shape).astype(real)
    if dt.kind == "c":
        b = b + 1j * rng.standard_normal(shape).astype(real)
    return cupy.asarray(a.astype(dt)), cupy.asarray(b.astype(dt))


def main():
    copy_bw = copy_bandwidth(7)
    rng = np.random.default_rng(0)
    modules = {}  # (kernel, build options) -> module: each build compiled once, not every round
    lines = [f"copy {copy_bw:.0f} GB/s; kernel only, median of 15",
             "| dtype | (rows, steps) | kernel | build | GB/s | % copy | same h |", "|---|---|---|---|---|---|---|"]
    for dtype, shape in WORK:
        label = f"{dtype} {shape}"
        if ONLY and not any(x in label for x in ONLY):
            continue
        a, b = data(dtype, shape, rng)
        out = cupy.empty_like(b)
        nb = a.nbytes + 2 * b.nbytes
        ct = np.dtype(np.float32) if np.dtype(dtype).itemsize < 4 else np.dtype(dtype)
        ref = None
        for _ in range(2):
            for name, opts in BUILDS:
                with variant_kernel() as use:
                    plan = _cupy_scan.plan(a, b, out, ct, "lookback")
                    key = (plan.name, opts)
                    if key not in modules:
                        modules[key] = cupy.RawModule(code=_cupy_common.read_source("scan.cu"),
                                                      options=_cupy_common.compile_options(*opts),
                                                      name_expressions=[plan.name])
                    use(plan, modules[key])
                    out.fill(0)
                    ms = timed(lambda plan=plan: plan.launch(cupy, a, b, out, None))
                    if ref is None:
                        ref = out.copy()
                    same = bool(cupy.array_equal(out, ref, equal_nan=True))
                gbs = nb / (ms * 1e-3) / 1e9
                kern = plan.name.split("<")[0].split("::")[1]
                lines.append(f"| {dtype} | {shape} | {kern} | {name} | {gbs:.0f} | {100 * gbs / copy_bw:.1f} | {same} |")
                print(lines[-1], flush=True)
        del a, b, out, ref
        cupy.get_default_memory_pool().free_all_blocks()
    print("\n".join(lines))


if __name__ == "__main__":
    main()
