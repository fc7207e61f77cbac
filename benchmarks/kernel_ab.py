#!/usr/bin/env python3
"""GPU time of the CuPy diagonal kernels alone, for comparing two trees in alternating processes.

Each workload is planned once and its launches are queued behind a spin kernel
(``bench_gpu.queued_us``: the GPU's time without the host's), then reported as effective
bandwidth (bytes of ``a`` and ``b`` read and ``h`` written) against the copy bandwidth measured
in the same process. Before timing, the result's first steps on the first and last lane are
checked against a float64 (complex128) loop. The package is whatever ``scanarray`` the interpreter imports:
``tools/kernel_ab.sh`` runs this script under two trees' ``PYTHONPATH`` in turn.

Usage: python benchmarks/kernel_ab.py TAG [--set NAME] [--only SUBSTR;SUBSTR]
Prints one tab-separated line per workload: TAG, label, GB/s, % of this process's copy
bandwidth, kernel, error; and first a line TAG, "copy", GB/s. The copy's own figure varies from
process to process by a few percent (H200, 2026-11-28: 3857-4055 GB/s in four processes whose
kernels ran within 0.1% of each other), so compare kernels by GB/s, or against the median copy.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

import cupy

sys.path.insert(1, os.path.dirname(os.path.abspath(__file__)))  # bench_gpu, after the tree under test
from bench_gpu import GB, copy_bandwidth, kernel_only, lane_error, make, nbytes, queued_us  # noqa: E402

# (label, shape, axis, dtype): rows and lanes that chain tiles by look-back, in every compute dtype
SETS = {
    "lookback": [
        ("f32 one row 2**28", (1, 2**28), -1, "float32"),
        ("f32 one row 2**24", (1, 2**24), -1, "float32"),
        ("f64 one row 2**27", (1, 2**27), -1, "float64"),
        ("f64 one row 2**23", (1, 2**23), -1, "float64"),
        ("c64 one row 2**27", (1, 2**27), -1, "complex64"),
        ("c128 one row 2**26", (1, 2**26), -1, "complex128"),
        ("f32 time-major (65536,4096) ax0", (65536, 4096), 0, "float32"),
        ("f64 time-major (65536,2048) ax0", (65536, 2048), 0, "float64"),
        ("c64 time-major (65536,2048) ax0", (65536, 2048), 0, "complex64"),
        ("c128 time-major (32768,2048) ax0", (32768, 2048), 0, "complex128"),
    ],
}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tag")
    ap.add_argument("--set", default="lookback", choices=sorted(SETS))
    ap.add_argument("--only", default=None, help="workloads whose label contains one of these ;-separated strings")
    args = ap.parse_args(argv)
    copy_bw = copy_bandwidth(7)
    print(f"{args.tag}\tcopy\t{copy_bw:.0f}", flush=True)
    rng = np.random.default_rng(0)
    for label, shape, axis, dtype in SETS[args.set]:
        if args.only and not any(s in label for s in args.only.split(";")):
            continue
        a_h, b_h = make(shape, axis, dtype, "full", rng)
        a, b = cupy.asarray(a_h), cupy.asarray(b_h)
        del a_h, b_h
        out = cupy.empty_like(b)
        run = kernel_only(a, b, out, axis, "lookback")
        run()
        err = lane_error(a, b, out, steps=20000, axis=axis)
        gbs = nbytes(a, b) / (queued_us(run) * 1e-6) / GB
        kernel = run.plan.name.split("<")[0].replace("scanarray::", "")
        print(f"{args.tag}\t{label}\t{gbs:.0f}\t{100 * gbs / copy_bw:.1f}\t{kernel}\t{err:.1e}", flush=True)
        del a, b, out, run
        cupy.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    main()
