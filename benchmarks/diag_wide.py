#!/usr/bin/env python3
"""rows_wide against its diagnostic builds, fpscan and rows_block (kernels queued, float32).

Builds of scan.cu with ``-DSCANARRAY_WIDE_NC`` (a and b through the read-only path) and
``-DSCANARRAY_WIDE_NOSLOW`` (no exact replay: wrong on non-finite data, a measure of what its
code costs the fast path), launched with the shipped plan's arguments. Run on the GPU after
``tools/gpu_issue4.sh`` (or its fpscan build): ``python3 benchmarks/diag_wide.py``.
"""

from __future__ import annotations

import os
import sys

import cupy
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_gpu import copy_bandwidth, make, nbytes, queued_us  # noqa: E402

import scanarray  # noqa: E402
from scanarray import _config  # noqa: E402
from scanarray.backends import _cupy_common, _cupy_scan  # noqa: E402

BUILDS = [("shipped", ()), ("NC", ("-DSCANARRAY_WIDE_NC",)), ("NOSLOW", ("-DSCANARRAY_WIDE_NOSLOW",)),
          ("NC+NOSLOW", ("-DSCANARRAY_WIDE_NC", "-DSCANARRAY_WIDE_NOSLOW"))]


def main():
    copy_bw = copy_bandwidth(7)
    rng = np.random.default_rng(0)
    lines = [f"copy {copy_bw:.0f} GB/s; float32, kernels queued",
             "| workload | kernel | GB/s | % copy | max diff / max abs |", "|---|---|---|---|---|"]
    try:
        import fpscan
        import torch

        ext = fpscan.ops._load_extension()
    except Exception as exc:  # noqa: BLE001 - the peer is optional
        print(f"fpscan unavailable: {type(exc).__name__}: {exc}")
        ext = None
    for shape, rounds in (((2, 256, 65536), 3), ((4, 64, 262144), 2)):
        a_h, b_h = make(shape, -1, "float32", "full", rng)
        a, b = cupy.asarray(a_h), cupy.asarray(b_h)
        out = cupy.empty_like(b)
        nb = nbytes(a, b)
        ref = scanarray.linear_recurrence(a, b, backend="cupy", method="lookback")
        scale = float(cupy.abs(ref).max())
        label = str(shape).replace(" ", "")
        a2, b2, o2 = (x.reshape(-1, shape[-1]) for x in (a, b, out))
        p = _cupy_scan.plan(a2, b2, o2, np.dtype(np.float32), "lookback")
        args = _cupy_common.raw_args(p._args(a2.data.ptr, b2.data.ptr, o2.data.ptr, None, None))
        fns = {}
        for name, opts in BUILDS:
            fns[name] = _cupy_common.get_function("scan.cu", p.name, options=opts, group=(p.name,))

        def report(name, fn):
            out.fill(0)
            us = queued_us(fn)
            diff = float(cupy.abs(out - ref).max()) / scale
            gbs = nb / (us * 1e-6) / 1e9
            lines.append(f"| {label} | {name} | {gbs:.0f} | {100 * gbs / copy_bw:.1f} | {diff:.1e} |")
            print(lines[-1], flush=True)

        for _ in range(rounds):
            for name, fn in fns.items():
                report(f"{p.name.split('<')[0].split('::')[1]} {name}",
                       lambda fn=fn: fn((p.grid,), (p.threads,), args))
            saved = _config.CUPY_SCAN["rows_wide"]
            _config.CUPY_SCAN["rows_wide"] = {}
            try:
                scanarray.linear_recurrence(a, b, out=out, backend="cupy", method="lookback")
                report("rows_block (rows_wide off)", lambda: scanarray.linear_recurrence(
                    a, b, out=out, backend="cupy", method="lookback"))
            finally:
                _config.CUPY_SCAN["rows_wide"] = saved
            if ext is not None and shape[-1] <= 65536:
                ta, tb, to = (torch.from_dlpack(x) for x in (a, b, out))
                report("fpscan", lambda ta=ta, tb=tb, to=to: ext.fullscan_forward(ta, tb, to, False))
        cupy.get_default_memory_pool().free_all_blocks()
    print("\n".join(lines))


if __name__ == "__main__":
    main()
