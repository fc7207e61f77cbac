#!/usr/bin/env python3
"""rows_wide against its diagnostic builds, fpscan and rows_block (kernels queued, float32).

A build of scan.cu with ``-DSCANARRAY_WIDE_NOSLOW`` (no exact replay: wrong on non-finite data, a
measure of what its code costs the fast path) and with ``-DSCANARRAY_WIDE_TOPBAR`` (the barrier
at the head of each tile that the loop had before 2026-11-28), launched with the shipped plan's
arguments. Then
rows of one tile (4096 steps): the shipped kernel against rows_wide launched on them. Two builds
timed on 2026-11-28 gained nothing and are in older trees only: read-only loads
(``-DSCANARRAY_WIDE_NC``, cf90bd9) and the next tile copied into shared memory by cp.async while
this one is scanned (``-DSCANARRAY_WIDE_STAGE``, 1742a56: 86% of the copy against 96%).

Run on the GPU after ``tools/gpu_issue4.sh`` (or its fpscan build): ``python3 benchmarks/diag_wide.py``.
"""

from __future__ import annotations

import os
import sys

import cupy
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_gpu import copy_bandwidth, make, nbytes  # noqa: E402
from diag_geometry import fpscan_ext, report_fpscan, reporter  # noqa: E402

import scanarray  # noqa: E402
from scanarray import _config  # noqa: E402
from scanarray.backends import _cupy_common, _cupy_scan  # noqa: E402

BUILDS = [("shipped", ()), ("NOSLOW", ("-DSCANARRAY_WIDE_NOSLOW",)), ("TOPBAR", ("-DSCANARRAY_WIDE_TOPBAR",))]


def main():
    copy_bw = copy_bandwidth(7)
    rng = np.random.default_rng(0)
    lines = [f"copy {copy_bw:.0f} GB/s; float32, kernels queued",
             "| workload | kernel | GB/s | % copy | max diff / max abs |", "|---|---|---|---|---|"]
    ext = fpscan_ext()
    for shape, rounds in (((2, 256, 65536), 3), ((4, 64, 262144), 2)):
        a_h, b_h = make(shape, -1, "float32", "full", rng)
        a, b = cupy.asarray(a_h), cupy.asarray(b_h)
        out = cupy.empty_like(b)
        nb = nbytes(a, b)
        ref = scanarray.linear_recurrence(a, b, backend="cupy", method="lookback")
        label = str(shape).replace(" ", "")
        a2, b2, o2 = (x.reshape(-1, shape[-1]) for x in (a, b, out))
        p = _cupy_scan.plan(a2, b2, o2, np.dtype(np.float32), "lookback")
        args = _cupy_common.raw_args(p._args(a2.data.ptr, b2.data.ptr, o2.data.ptr, None, None))
        fns = {}
        for name, opts in BUILDS:
            fns[name] = _cupy_common.get_function("scan.cu", p.name, options=opts, group=(p.name,))

        report = reporter(lines, label, out, ref, nb, copy_bw)

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
            report_fpscan(report, ext, a, b, out)
        cupy.get_default_memory_pool().free_all_blocks()
    one_tile_rows(lines, ext, copy_bw, rng)
    print("\n".join(lines))


def one_tile_rows(lines, ext, copy_bw, rng):
    """Rows of 4096 float32 steps, one tile of the shipped rows_tiles (256 threads x 16 steps):
    that kernel against rows_wide launched on the same rows (1024 threads x 4 steps, fpscan's
    geometry), which the driver does not choose there."""
    for shape in ((2, 256, 4096), (8, 1024, 4096)):
        a_h, b_h = make(shape, -1, "float32", "full", rng)
        a, b = cupy.asarray(a_h), cupy.asarray(b_h)
        out = cupy.empty_like(b)
        ref = scanarray.linear_recurrence(a, b, backend="cupy", method="lookback")
        a2, b2, o2 = (x.reshape(-1, shape[-1]) for x in (a, b, out))
        p = _cupy_scan.plan(a2, b2, o2, np.dtype(np.float32), "lookback")
        nt, minb = _config.CUPY_SCAN["rows_wide"][4]
        name = f"scanarray::rows_wide<float, float, float, float, {nt}, 4, false, {minb}, 1>"
        w = _cupy_scan._Plan(kind="rows_wide", name=name, grid=p.nlanes, threads=nt, ns=p.ns, ss=p.ss,
                             nlanes=p.nlanes, group=(name,), times=p.times)
        fw = _cupy_common.get_function("scan.cu", name, group=(name,))
        fp = _cupy_common.get_function("scan.cu", p.name, group=p.group)
        pargs = _cupy_common.raw_args(p._args(a2.data.ptr, b2.data.ptr, o2.data.ptr, None, None))
        wargs = _cupy_common.raw_args(w._args(a2.data.ptr, b2.data.ptr, o2.data.ptr, None, None))
        report = reporter(lines, str(shape).replace(" ", ""), out, ref, nbytes(a, b), copy_bw)
        for _ in range(3):
            report(f"shipped {p.name.split('<')[0].split('::')[1]}", lambda: fp((p.grid,), (p.threads,), pargs))
            report("rows_wide", lambda: fw((w.grid,), (w.threads,), wargs))
            report_fpscan(report, ext, a, b, out)
        cupy.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    main()
