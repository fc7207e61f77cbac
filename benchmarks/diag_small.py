#!/usr/bin/env python3
"""Small calls against fpscan (issue 4): is the GPU or the host the limit of repeated calls?

For each workload, per call: the host's own time (launches only), the GPU's time when the
launches queue up ahead of it (a spin kernel holds the GPU while the host enqueues the burst,
so the events time the kernels back to back, without the host), and bursts timed as
``bench_gpu.py`` does (events around calls issued as fast as the host can). Ours is the public
function with ``out=`` (bound to its signature after the first call) and its plan's kernel
launched alone; fpscan is its extension's forward call. Run on the GPU, after
``tools/gpu_issue4.sh`` has built fpscan: ``python3 benchmarks/diag_small.py``.
"""

from __future__ import annotations

import cupy
import numpy as np
from bench_gpu import kernel_only, make, nbytes, queued_us, timed_burst
from diag_onecall import host_us

import scanarray

WORK = [("(2,256,4096)", (2, 256, 4096)), ("(8,1024,4096)", (8, 1024, 4096)), ("(2,256,65536)", (2, 256, 65536))]

def main():
    rng = np.random.default_rng(0)
    try:
        import fpscan
        import torch

        ext = fpscan.ops._load_extension()
    except Exception as exc:  # noqa: BLE001 - report and go on without the peer
        print(f"fpscan unavailable: {type(exc).__name__}: {exc}")
        ext = None
    lines = ["| workload | call | host µs per call | GPU µs per call (queued) | burst µs per call | burst GB/s |",
             "|---|---|---|---|---|---|"]
    for label, shape in WORK:
        a_h, b_h = make(shape, -1, "float32", "full", rng)
        a, b = cupy.asarray(a_h), cupy.asarray(b_h)
        out = cupy.empty_like(b)
        nb = nbytes(a, b)
        calls = [("ours, public", lambda a=a, b=b, out=out: scanarray.linear_recurrence(
            a, b, -1, out=out, backend="cupy", method="lookback")),
                 ("ours, kernel alone", kernel_only(a, b, out, -1, "lookback"))]
        if ext is not None:
            ta, tb, to = (torch.from_dlpack(x) for x in (a, b, out))
            calls.append(("fpscan", lambda ta=ta, tb=tb, to=to: ext.fullscan_forward(ta, tb, to, False)))
        for name, fn in calls:
            h = host_us(fn, n=200)
            g = queued_us(fn)
            ms, _ = timed_burst(fn, 15)
            lines.append(f"| {label} | {name} | {h:.2f} | {g:.2f} | {ms * 1e3:.2f} | {nb / (ms * 1e-3) / 1e9:.0f} |")
            print(lines[-1], flush=True)
        del a, b, out, calls
        cupy.get_default_memory_pool().free_all_blocks()
    print("\n".join(lines))


if __name__ == "__main__":
    main()
