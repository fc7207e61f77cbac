#!/usr/bin/env python3
"""GPU benchmark of the CuPy diagonal scan (issue 4): effective bandwidth against a copy.

Effective bandwidth = bytes of ``a`` read + ``b`` read + ``h`` written, divided by
the median time per call over bursts of back-to-back calls (CUDA events around
the burst, on the legacy default stream, which torch shares; JAX: wall clock
around a burst ended by ``block_until_ready``): what the GPU sustains when a
program calls repeatedly, every library measured the same way. One column also
gives our public function timed one call at a time (events around the single
call), which adds the host time before the launch. The reference is CuPy's
device-to-device copy of 1 GiB (bytes read + written). Peers run in the same
process where they import: fpscan, accelerated-scan (warp CUDA kernel and
Triton kernel), ``jax.lax.associative_scan``, ``cupyx.scipy.signal.lfilter``
(scalar ``a`` only), ``cupy.cumsum`` (a prefix sum, not the recurrence: a
lower bound on what CuPy's own scan machinery costs). fpscan is compared by
the median over paired (interleaved) bursts of its time over ours, each round
timing both orders (:func:`paired`; the "ours first" column is the order this
script used alone before 2026-11-28, which favours fpscan). The
"queued" columns time the GPU alone (:func:`queued_us`: calls queued behind a
spin kernel), which the bursts do not where a call's host time exceeds its
kernel's (small problems).

Usage: python benchmarks/bench_gpu.py [--quick] [--out DIR] [--only SUBSTR]
Prints the table last and writes DIR/bench_gpu.md (DIR defaults to $OUT or .).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import time
import traceback

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import numpy as np  # noqa: E402

import cupy  # noqa: E402

import scanarray  # noqa: E402

GB = 1e9

# (label, shape, axis, dtype, a kind)
WORKLOADS = [
    ("(2,256,4096)", (2, 256, 4096), -1, "float32", "full"),
    ("(2,256,65536)", (2, 256, 65536), -1, "float32", "full"),
    ("(8,1024,4096)", (8, 1024, 4096), -1, "float32", "full"),
    ("(16,2048,4096)", (16, 2048, 4096), -1, "float32", "full"),
    ("(4,64,262144)", (4, 64, 262144), -1, "float32", "full"),
    ("(1,1,2**24)", (1, 1, 2**24), -1, "float32", "full"),
    ("(1,1,2**28)", (1, 1, 2**28), -1, "float32", "full"),
    ("time-major (65536,4096) ax0", (65536, 4096), 0, "float32", "full"),
    ("f64 (8,1024,4096)", (8, 1024, 4096), -1, "float64", "full"),
    ("c64 (8,1024,4096)", (8, 1024, 4096), -1, "complex64", "full"),
    ("scalar a (16,2048,4096)", (16, 2048, 4096), -1, "float32", "scalar"),
    # not in the list: where method="auto" might prefer one thread per lane
    ("short rows (1,2**20,16)", (1, 2**20, 16), -1, "float32", "full"),
    ("short rows (1,2**18,64)", (1, 2**18, 64), -1, "float32", "full"),
    ("time-major short (64,2**20) ax0", (64, 2**20), 0, "float32", "full"),
]


def timed(fn, reps, budget_s=1.5):
    """Median milliseconds of ``fn()`` over up to ``reps`` single calls (after one warm-up)."""
    return timed_burst(fn, reps, burst=1, budget_s=budget_s)


def timed_burst(fn, reps, burst=10, budget_s=1.5):
    """Median milliseconds per call over bursts of ``burst`` back-to-back calls.

    Events around the whole burst: the host prepares call i+1 while the GPU runs call i, as in
    a user's loop, so this is the throughput of repeated calls. :func:`timed` (events around
    one call) also counts the host time before the launch, during which the GPU idles.
    """
    fn()
    cupy.cuda.Device().synchronize()
    out = []
    start = time.perf_counter()
    e0, e1 = cupy.cuda.Event(), cupy.cuda.Event()
    for _ in range(reps):
        e0.record()
        for _ in range(burst):
            fn()
        e1.record()
        e1.synchronize()
        out.append(cupy.cuda.get_elapsed_time(e0, e1) / burst)
        if time.perf_counter() - start > budget_s and len(out) >= 3:
            break
    return statistics.median(out), out


_SPIN = None


def queued_us(fn, burst=50, reps=7, hold_cycles=2_000_000):
    """Median GPU microseconds per call of ``burst`` calls queued behind a spin kernel (~1 ms, while
    the host enqueues them): the kernels back to back without the host's time between them, which
    :func:`timed_burst` counts where a call's host time exceeds its kernel's."""
    global _SPIN
    if _SPIN is None:
        _SPIN = cupy.RawKernel(r"""
extern "C" __global__ void spin(long long cycles) {
  long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}""", "spin")
    fn()
    cupy.cuda.Device().synchronize()
    e0, e1 = cupy.cuda.Event(), cupy.cuda.Event()
    out = []
    for _ in range(reps):
        _SPIN((1,), (1,), (np.int64(hold_cycles),))
        e0.record()
        for _ in range(burst):
            fn()
        e1.record()
        e1.synchronize()
        out.append(cupy.cuda.get_elapsed_time(e0, e1) * 1e3 / burst)
    return statistics.median(out)


def host_rounds_us(fn, n=200, rounds=25):
    """Host µs a call of ``fn`` in each of ``rounds`` rounds: ``perf_counter`` around ``n`` calls
    issued and not waited for, the stream synchronised between rounds (problems small enough
    that the GPU keeps up)."""
    s = cupy.cuda.get_current_stream()
    for _ in range(3):
        fn()
    out = []
    for _ in range(rounds):
        s.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        out.append((time.perf_counter() - t0) / n * 1e6)
    s.synchronize()
    return out


def wall_burst(fn, reps, burst=10, budget_s=3.0):
    """Median wall-clock milliseconds per call over bursts; ``fn`` returns a JAX array."""
    fn().block_until_ready()
    out = []
    start = time.perf_counter()
    for _ in range(reps):
        t = time.perf_counter()
        for _ in range(burst):
            r = fn()
        r.block_until_ready()
        out.append((time.perf_counter() - t) * 1e3 / burst)
        if time.perf_counter() - start > budget_s and len(out) >= 3:
            break
    return statistics.median(out), out


def paired(fn_a, fn_b, reps, budget_s=2.0, burst=10):
    """Time(b) / time(a) over interleaved bursts, the order alternated: ``(symmetric, a_first)``.

    Each burst is timed from an idle GPU, so the function that goes first in a pair also pays
    its first call's host time, which the second's burst hides behind the first's kernels. Each
    round therefore times both orders, a then b and b then a; ``symmetric`` is the median over
    rounds of the geometric mean of the two orders' ratios. ``a_first`` is the median of the
    a-then-b ratios alone, the figure this script gave before 2026-11-28 (it favours ``b``)."""
    fn_a(), fn_b()
    cupy.cuda.Device().synchronize()
    e = [cupy.cuda.Event() for _ in range(3)]
    both, first = [], []
    start = time.perf_counter()

    def run(fn):
        for _ in range(burst):
            fn()

    def pair(f0, f1):
        e[0].record(); run(f0); e[1].record(); run(f1); e[2].record()  # noqa: E702
        e[2].synchronize()
        return cupy.cuda.get_elapsed_time(e[0], e[1]), cupy.cuda.get_elapsed_time(e[1], e[2])

    for _ in range(reps):
        ta, tb = pair(fn_a, fn_b)
        tb2, ta2 = pair(fn_b, fn_a)
        first.append(tb / ta)
        both.append(((tb / ta) * (tb2 / ta2)) ** 0.5)
        if time.perf_counter() - start > budget_s and len(both) >= 3:
            break
    return statistics.median(both), statistics.median(first)


def copy_bandwidth(reps):
    n = 2**30 // 4
    src = cupy.ones(n, cupy.float32)
    dst = cupy.empty_like(src)
    ms, _ = timed(lambda: cupy.copyto(dst, src), reps)
    return 2 * 2**30 / (ms * 1e-3) / GB


def make(shape, axis, dtype, a_kind, rng):
    dt = np.dtype(dtype)
    real = np.float32 if dt == np.complex64 else (np.float64 if dt == np.complex128 else dt)
    b = rng.standard_normal(shape, dtype=real)
    if dt.kind == "c":
        b = b + 1j * rng.standard_normal(shape, dtype=real)
    b = b.astype(dt)
    if a_kind == "scalar":
        a = 0.999
    else:
        a = (0.9 + 0.1 * rng.random(shape, dtype=real)).astype(dt)
    return a, b


def nbytes(a, b):
    return (0 if np.isscalar(a) else a.nbytes) + 2 * b.nbytes


def kernel_only(a, b, out, axis, method):
    """The launch alone (plan made once): GPU time without the public function's Python work."""
    from scanarray import _api
    from scanarray.backends.cupy import scan as _cupy_scan

    # the accumulation dtype, as the public function picks it (float32 for half-precision storage)
    dt = _api._result_dtypes(a, b, None, None)[1]
    a_arr = cupy.asarray(a, dtype=b.dtype) if np.isscalar(a) else a
    av, bv, ov = (cupy.moveaxis(cupy.broadcast_to(x, b.shape), axis, -1) for x in (a_arr, b, out))
    plan = _cupy_scan.plan(av, bv, ov, dt, method)

    def run():
        plan.launch(cupy, av, bv, ov, None)

    run.plan = plan
    return run


def host_overhead_us(n=200):
    """Host microseconds per call on a tiny problem: public function (its launch bound to the
    repeated signature, and the full path), backend driver, launch."""
    from scanarray import _api
    from scanarray._problem import Problem
    from scanarray.backends.cupy import scan as _cupy_scan

    b = cupy.ones((4, 64), cupy.float32)
    a = cupy.full((4, 64), 0.5, cupy.float32)
    out = cupy.empty_like(b)
    prob = Problem(xp=cupy, kind="cupy", a=a, b=b, initial=None, out=out, dtype=np.dtype(np.float32),
                   out_dtype=np.dtype(np.float32), reverse=False, dense=False, chunk=64, method="lookback",
                   backend="cupy")
    launch = kernel_only(a, b, out, -1, "lookback")
    res = {}

    def api():
        scanarray.linear_recurrence(a, b, out=out, backend="cupy")

    for name, f, fast in (("api", api, True), ("api full path", api, False),
                          ("driver", lambda: _cupy_scan.linear_recurrence(prob), True), ("launch", launch, True)):
        _api.FAST_CALLS = fast
        for _ in range(5):
            f()
        cupy.cuda.Device().synchronize()
        t = time.perf_counter()
        for _ in range(n):
            f()
        res[name] = (time.perf_counter() - t) / n * 1e6
        cupy.cuda.Device().synchronize()
    _api.FAST_CALLS = True
    # the same launch through CuPy's RawKernel call instead of the packed parameter buffer
    from scanarray.backends.cupy import _common as _cupy_common

    _cupy_common.PACKED_LAUNCH = False
    launch.plan.fns.clear()
    try:
        for _ in range(5):
            launch()
        t = time.perf_counter()
        for _ in range(n):
            launch()
        res["launch via RawKernel call"] = (time.perf_counter() - t) / n * 1e6
        cupy.cuda.Device().synchronize()
    finally:
        _cupy_common.PACKED_LAUNCH = True
        launch.plan.fns.clear()
    return res


SWEEP_ROWS = [  # threads, steps per thread, min blocks per SM (rows and rows_long alike)
    (256, 16, 4), (512, 16, 2), (1024, 16, 1), (256, 32, 2), (128, 16, 8),
]
SWEEP_ROWS_8B = [(256, 8, 2), (256, 8, 4), (512, 8, 1), (128, 8, 6), (256, 4, 4)]
SWEEP_LANES = [  # warps along time, steps per thread, min blocks per SM
    (8, 8, 4), (16, 8, 2), (8, 16, 2), (4, 16, 4),
]
# (threads, steps, min blocks, rows_block_fill): a block per row (no look-back) or look-back tiles
SWEEP_MANY_LONG = [(256, 16, 4, 0.45), (256, 16, 4, 1e9), (512, 16, 2, 0.45), (512, 16, 2, 1e9),
                   (128, 16, 8, 0.2)]
SWEEP_WORK = [
    ("(16,2048,4096)", (16, 2048, 4096), -1, "float32", SWEEP_ROWS),
    ("(8,1024,4096)", (8, 1024, 4096), -1, "float32", SWEEP_ROWS),
    ("(2,256,65536)", (2, 256, 65536), -1, "float32", SWEEP_MANY_LONG),
    ("(4,64,262144)", (4, 64, 262144), -1, "float32", SWEEP_MANY_LONG),
    ("(1,1,2**28)", (1, 1, 2**28), -1, "float32", SWEEP_ROWS),
    ("(1,1,2**24)", (1, 1, 2**24), -1, "float32", SWEEP_ROWS),
    ("f64 (8,1024,4096)", (8, 1024, 4096), -1, "float64", SWEEP_ROWS_8B),
    ("c64 (8,1024,4096)", (8, 1024, 4096), -1, "complex64", SWEEP_ROWS_8B),
    ("time-major (65536,4096)", (65536, 4096), 0, "float32", SWEEP_LANES),
]


def profile_host(log, n=3000, call=None, what="tiny problem"):
    """The public function's host time on a tiny problem (or ``call``), by function (cProfile, top 25)."""
    import cProfile
    import io
    import pstats

    if call is None:
        b = cupy.ones((4, 64), cupy.float32)
        a = cupy.full((4, 64), 0.5, cupy.float32)
        out = cupy.empty_like(b)

        def call():
            scanarray.linear_recurrence(a, b, out=out, backend="cupy")

    for _ in range(20):
        call()
    cupy.cuda.Device().synchronize()
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(n):
        call()
    pr.disable()
    cupy.cuda.Device().synchronize()
    buf = io.StringIO()
    pstats.Stats(pr, stream=buf).sort_stats("tottime").print_stats(25)
    log(f"host profile of {n} public calls ({what}):\n{buf.getvalue()}")


# prefetching rows_block and batched look-back reads: the shapes that decide them
_LONG = [{"rows_long": c} for c in ((256, 16, 4), (256, 16, 3), (512, 16, 2), (128, 16, 8), (256, 8, 6))]
# (rows_wide off: aligned float32 rows would take it instead of rows_block)
_BLOCK = [{"rows_block": c, "rows_block_fill": f, "rows_wide": None} for c, f in
          (((512, 16, 2), 0.45), ((256, 16, 2), 0.45), ((512, 8, 2), 0.45), ((256, 8, 4), 0.45),
           ((1024, 8, 1), 0.45), ((256, 16, 2), 0.2), ((128, 16, 4), 0.45), ((128, 16, 3), 0.45),
           ((128, 32, 2), 0.45))] + [{"rows_block_fill": 1e9}]
_BLOCK8 = [{"rows_block": c} for c in ((128, 8, 6), (128, 8, 4), (256, 8, 2), (256, 4, 4))]
SWEEP_PREFETCH = [
    ("(1,1,2**28)", (1, 1, 2**28), -1, "float32", _LONG),
    ("(1,1,2**24)", (1, 1, 2**24), -1, "float32", _LONG),
    ("(2,256,65536)", (2, 256, 65536), -1, "float32", _BLOCK),
    ("(4,64,262144)", (4, 64, 262144), -1, "float32", _BLOCK),
    ("f64 (8,1024,4096)", (8, 1024, 4096), -1, "float64", _BLOCK8),
    ("c64 (8,1024,4096)", (8, 1024, 4096), -1, "complex64", _BLOCK8),
    ("time-major (65536,4096)", (65536, 4096), 0, "float32", [{"lanes": c} for c in ((4, 16, 4), (8, 8, 4))]),
]

# rows of exactly one tile (rows_tiles without look-back) and time-major tiles
_ROWS1 = [{"rows": c} for c in ((256, 16, 4), (512, 8, 4), (1024, 4, 2), (512, 8, 3), (128, 32, 4), (256, 16, 3))]
_LANES = [{"lanes": c} for c in ((4, 16, 4), (4, 16, 6), (4, 32, 2), (8, 16, 2), (8, 8, 4), (16, 4, 2))]
_LANES_FEW_WARPS = [{"lanes": c} for c in ((4, 16, 6), (2, 16, 12), (2, 16, 8), (2, 32, 6), (2, 32, 4), (1, 32, 12),
                                           (3, 16, 8))]
# rows of 4096 split into tiles of a block looping along its row: reads of the next tile overlap
# the writes of the current one, which a one-wave launch of one-tile rows cannot do
_ROWS_SPLIT = [{"rows": r, "rows_block": b} for r, b in
               (((256, 8, 4), (256, 8, 4)), ((128, 16, 8), (128, 16, 4)), ((256, 4, 4), (256, 4, 4)),
                ((256, 8, 4), (128, 8, 8)))]
# (2,256,4096): fpscan's shape for 4096 steps (one block of 1024 threads x 4 steps per row, two
# blocks per SM) against block-per-row splits of several tile lengths (rows_split None: off)
SWEEP_SMALL = [
    ("(2,256,4096)", (2, 256, 4096), -1, "float32",
     [{}, {"rows": (1024, 4, 2), "rows_split": None}, {"rows": (512, 8, 2), "rows_split": None},
      {"rows": (256, 16, 4), "rows_split": None}, {"rows_split": (256, 8, 4)}]),
    ("(8,1024,4096)", (8, 1024, 4096), -1, "float32", [{}, {"rows": (1024, 4, 2)}, {"rows": (512, 8, 2)}]),
]
# rows of several tiles: the tile staged in shared memory (rows_staged) against held in registers
# (rows_staged None: rows_tiles with rows_long's shape)
_STAGED = [{"rows_staged": c} for c in (None, (128, 32, 6), (128, 32, 5), (128, 16, 12), (256, 16, 6), (64, 32, 12))]
SWEEP_STAGED = [
    ("(1,1,2**28)", (1, 1, 2**28), -1, "float32", _STAGED),
    ("(1,1,2**24)", (1, 1, 2**24), -1, "float32", _STAGED),
    ("(2,256,65536) look-back", (2, 256, 65536), -1, "float32",
     [{"rows_block_fill": 1e9, **v} for v in _STAGED[:3]]),
    ("f64 (1,1,2**27)", (1, 1, 2**27), -1, "float64", [{"rows_staged": c} for c in (None, (128, 16, 6), (128, 8, 12))]),
    ("c64 (1,1,2**27)", (1, 1, 2**27), -1, "complex64", [{"rows_staged": c} for c in (None, (128, 16, 6))]),
    ("time-major (65536,4096)", (65536, 4096), 0, "float32",
     [{"lanes_staged": c} for c in (None, (4, 16, 8), (4, 16, 9), (4, 16, 10), (8, 16, 4), (4, 32, 4), (2, 16, 16))]),
    ("f64 time-major (65536,2048)", (65536, 2048), 0, "float64",
     [{"lanes_staged": c} for c in (None, (4, 8, 8), (4, 16, 4))]),
]
# one long row of 8- and 16-byte types once a status is one round trip of loads whatever its size
# (2026-11-28): staged tile shapes and the register kernel (rows_staged None: rows_long's shape)
SWEEP_WIDE = [
    ("f64 (1,1,2**27)", (1, 1, 2**27), -1, "float64",
     [{"rows_staged": c} for c in ((128, 16, 6), (128, 16, 5), (128, 16, 7), (128, 32, 3), (256, 16, 3), (64, 32, 6),
                                   None)]),
    ("c64 (1,1,2**27)", (1, 1, 2**27), -1, "complex64",
     [{"rows_staged": c} for c in ((128, 16, 6), (128, 32, 3), (256, 16, 3), (128, 16, 5), None)]),
    ("c128 (1,1,2**26)", (1, 1, 2**26), -1, "complex128",
     [{"rows_staged": None}, {"rows_staged": None, "rows_long": (128, 4, 4)}, {"rows_staged": None, "rows_long": (256, 8, 1)},
      {"rows_staged": (128, 8, 6)}, {"rows_staged": (128, 4, 12)}, {"rows_staged": (64, 8, 12)}]),
]
# fpscan's shapes, kernels timed queued (queued_us): rows_block's tile shapes on (2,256,65536),
# one-tile rows (rows_split None) and block-per-row splits on (2,256,4096)
# (the first sweep, 21:14 UTC, timed each once; this one alternates the close candidates three times)
SWEEP_FPSCAN = [
    ("(2,256,65536)", (2, 256, 65536), -1, "float32", [{"rows_block": c} for c in ((128, 16, 3), (256, 4, 4)) * 3]),
    ("(4,64,262144)", (4, 64, 262144), -1, "float32", [{"rows_block": c} for c in ((128, 16, 3), (256, 4, 4)) * 3]),
    ("(2,256,4096)", (2, 256, 4096), -1, "float32", [{}, {"rows_split": None}] * 3),
]
# time-major tiles narrower than a warp (lanes per tile, a shape's 4th element; three elements: the
# width CUPY_SCAN["lanes_narrow"] gives): more lane groups, so more chains of tiles along time
# (8-byte types: staged)
SWEEP_LANES_WIDTH = [
    ("time-major (65536,4096)", (65536, 4096), 0, "float32",
     [{"lanes": c} for c in ((4, 16, 6), (4, 16, 6, 16), (4, 16, 7), (4, 12, 8), (4, 16, 6))]),
    ("time-major (131072,2048)", (131072, 2048), 0, "float32",
     [{"lanes": c} for c in ((4, 16, 6), (4, 16, 6, 32), (4, 16, 6, 8))]),
    ("time-major (262144,1024)", (262144, 1024), 0, "float32", [{"lanes": c} for c in ((4, 16, 6), (4, 16, 6, 32))]),
    ("time-major (1048576,256)", (1048576, 256), 0, "float32",
     [{"lanes": c} for c in ((4, 16, 6), (4, 16, 6, 32), (4, 16, 6, 8))]),
    ("f64 time-major (65536,2048)", (65536, 2048), 0, "float64",
     [{"lanes_staged": c} for c in ((4, 16, 4), (4, 16, 4, 32), (4, 16, 4, 16))]),
    ("f64 time-major (131072,1024)", (131072, 1024), 0, "float64",
     [{"lanes_staged": c} for c in ((4, 16, 4), (4, 16, 4, 32))]),
    ("c64 time-major (65536,2048)", (65536, 2048), 0, "complex64",
     [{"lanes_staged": c} for c in ((4, 16, 4), (4, 16, 4, 32))]),
]
# fpscan's two smaller shapes, wider: block-per-row and one-tile-row shapes timed queued, each list
# twice (alternated), 2026-11-21 23:10 UTC
SWEEP_FPSCAN_WIDE = [
    ("(2,256,65536)", (2, 256, 65536), -1, "float32",
     [{"rows_block": c} for c in ((128, 16, 3), (128, 16, 4), (128, 8, 4), (256, 16, 2), (128, 32, 2), (256, 8, 3))] * 2),
    ("(2,256,4096)", (2, 256, 4096), -1, "float32",
     [{"rows": c} for c in ((256, 16, 4), (512, 8, 2), (256, 16, 2), (128, 32, 4), (512, 8, 3), (1024, 4, 1))] * 2),
]
# fpscan's 65536-step shape with fpscan-like blocks (2026-11-28): wider blocks, fewer items a
# thread, more warps an SM, against the shipped (128, 16, 3); alternated twice, kernels queued
_BLOCK_WIDE = [(128, 16, 3), (512, 8, 2), (256, 8, 4), (512, 4, 4), (1024, 4, 2), (256, 16, 2)]
SWEEP_BLOCK_WIDE = [
    ("(2,256,65536)", (2, 256, 65536), -1, "float32", [{"rows_block": c, "rows_wide": None} for c in _BLOCK_WIDE]
     * 2),
    ("(4,64,262144)", (4, 64, 262144), -1, "float32", [{"rows_block": c, "rows_wide": None} for c in _BLOCK_WIDE]),
]
# time-major lanes contiguous and aligned: lanes_vec (several lanes a thread) against lanes_tiles
# (lanes_vec None); shapes (warps, steps, min blocks per SM[, lanes per tile])
_LVEC = [None, (4, 8, 4), (4, 6, 5), (8, 4, 4), (4, 4, 8), (2, 8, 8), (4, 8, 4), None]
SWEEP_LANES_VEC = [
    ("time-major (65536,4096)", (65536, 4096), 0, "float32", [{"lanes_vec": c} for c in _LVEC]),
    ("time-major (16384,16384)", (16384, 16384), 0, "float32", [{"lanes_vec": c} for c in (None, (4, 8, 4), (4, 6, 5))]),
    ("time-major (262144,1024)", (262144, 1024), 0, "float32",
     [{"lanes_vec": c} for c in (None, (4, 8, 4), (4, 6, 5), (4, 8, 4, 32))]),
    ("f64 time-major (65536,2048)", (65536, 2048), 0, "float64",
     [{"lanes_vec": c} for c in (None, (4, 8, 4), (4, 16, 3), (4, 8, 6), (4, 12, 3), (4, 16, 3))]),
    ("c64 time-major (65536,2048)", (65536, 2048), 0, "complex64",
     [{"lanes_vec": c} for c in (None, (4, 8, 4), (4, 16, 3), (4, 12, 3), (4, 8, 4))]),
    ("f64 time-major (32768,4096)", (32768, 4096), 0, "float64",
     [{"lanes_vec": c} for c in (None, (4, 8, 4), (4, 16, 3), (4, 12, 3))]),
]
SWEEP_ONE_TILE = [
    ("(2,256,4096)", (2, 256, 4096), -1, "float32", _ROWS1 + _ROWS_SPLIT),
    ("(8,1024,4096)", (8, 1024, 4096), -1, "float32", _ROWS1),
    ("time-major (65536,4096)", (65536, 4096), 0, "float32", _LANES),
]


def sweep(copy_bw, log, reps, work=None, queued=False):
    """Kernel-only GB/s of tile-shape variants on the workloads they decide (``queued``: timed by
    :func:`queued_us`, for kernels shorter than a launch's host time)."""
    from scanarray import _config

    saved = {k: (dict(v) if isinstance(v, dict) else v) for k, v in _config.CUPY_SCAN.items()}
    rng = np.random.default_rng(1)
    lines = ["| kernel | config | workload | GB/s | % copy | max diff / max abs of the first variant |",
             "|---|---|---|---|---|---|"]
    try:
        for label, shape, axis, dtype, variants in work or SWEEP_WORK:
            a_h, b_h = make(shape, axis, dtype, "full", rng)
            a, b = cupy.asarray(a_h), cupy.asarray(b_h)
            out = cupy.empty_like(b)
            nb = nbytes(a, b)
            size = np.dtype(dtype).itemsize
            first = None  # the first variant's result: a sanity check of the others (tests use the oracle)
            for v in variants:
                for k, val in saved.items():
                    _config.CUPY_SCAN[k] = dict(val) if isinstance(val, dict) else val
                # a variant of rows_long's shape means the register kernel (rows_staged off)
                long_regs = not isinstance(v, dict) or ("rows_long" in v and "rows_staged" not in v)
                if long_regs and axis != 0:
                    _config.CUPY_SCAN["rows_staged"][size] = None
                if isinstance(v, dict):  # {CUPY_SCAN key: shape for this dtype size, or value}
                    for k, val in v.items():
                        if isinstance(_config.CUPY_SCAN[k], dict):
                            _config.CUPY_SCAN[k][size] = val
                        else:
                            _config.CUPY_SCAN[k] = val
                else:
                    keys = ("lanes",) if axis == 0 else ("rows", "rows_long")
                    for k in keys:
                        _config.CUPY_SCAN[k][size] = tuple(v[:3])
                    if len(v) > 3:
                        _config.CUPY_SCAN["rows_block_fill"] = v[3]
                try:
                    run = kernel_only(a, b, out, axis, "lookback")
                    ms = queued_us(run) * 1e-3 if queued else timed_burst(run, reps)[0]
                    gbs = nb / (ms * 1e-3) / GB
                    kern = run.plan.name.split("<")[0].split("::")[-1]
                    if first is None:
                        first, diff = out.copy(), 0.0
                    else:
                        diff = float(cupy.abs(out - first).max() / cupy.abs(first).max())
                    lines.append(f"| {kern} | {v} | {label} | {gbs:.0f} | {100 * gbs / copy_bw:.1f} | {diff:.1e} |")
                    log(lines[-1])
                except Exception as exc:
                    log(f"sweep {label} {v}: {type(exc).__name__}: {str(exc)[:300]}")
            del a, b, out, first
            cupy.get_default_memory_pool().free_all_blocks()
    finally:
        for k, val in saved.items():
            _config.CUPY_SCAN[k] = val
    return "\n".join(lines)


# --------------------------------------------------------------------------- peers


class Peers:
    def __init__(self, log):
        self.log = log
        self.torch = self._try("torch", lambda: __import__("torch"))
        self.fpscan = self._try("fpscan", self._fpscan)
        self.acc_warp = self._try("accelerated_scan.warp", lambda: __import__("accelerated_scan.warp").warp)
        self.acc_triton = self._try("accelerated_scan.scalar", lambda: __import__("accelerated_scan.scalar").scalar)
        self.jax = self._try("jax", self._jax)
        self.lfilter = self._try("cupyx lfilter", self._lfilter)

    def _try(self, name, f):
        try:
            m = f()
            self.log(f"peer {name}: available")
            return m
        except Exception as exc:  # report, carry on without the peer
            self.log(f"peer {name}: unavailable ({type(exc).__name__}: {str(exc).splitlines()[0][:200]})")
            return None

    def _fpscan(self):
        import fpscan

        fpscan.ops._load_extension()
        return fpscan

    def _jax(self):
        import jax

        assert any(d.platform == "gpu" for d in jax.devices()), "no JAX GPU device"
        return jax

    def _lfilter(self):
        from cupyx.scipy.signal import lfilter

        return lfilter

    def tt(self, x):
        return self.torch.from_dlpack(x)


def lane_error(a, b, h, steps=65536, axis=-1):
    """Max |h - loop| / max |loop| over the first ``steps`` steps of the first and last lanes of
    ``b``'s shape along ``axis`` (``a`` broadcast to it), the loop on the host in float64, or
    complex128 for complex data (NaN where ``h`` holds one)."""
    A, B, H = (cupy.moveaxis(cupy.broadcast_to(cupy.asarray(x), b.shape), axis, -1) for x in (a, b, h))
    T = B.shape[-1]
    n = min(T, steps)
    wide = np.complex128 if any(x.dtype.kind == "c" for x in (A, B, H)) else np.float64
    A, B, H = (cupy.asnumpy(x.reshape(-1, T)[[0, -1], :n]).astype(wide) for x in (A, B, H))
    ref = np.empty_like(B)
    s = np.zeros(2, wide)
    for t in range(n):
        s = A[:, t] * s + B[:, t]
        ref[:, t] = s
    return float(np.max(np.abs(H - ref)) / max(float(np.max(np.abs(ref))), 1e-30))


def checked(run, result, what, a, b, tol=1e-3):
    """Run a library once into ``result`` (filled with NaN first; ``run`` may return a new array
    instead) and check it against the float64 loop (:func:`lane_error`): a peer whose launch fails
    silently (fpscan and accelerated-scan do not check theirs: more than 65535 rows exceed a grid's
    y dimension) must not be timed as if it ran."""
    result.fill(np.nan)
    r = run()
    got = result if r is None else cupy.from_dlpack(r)
    cupy.cuda.Device().synchronize()
    err = lane_error(a, b, got)
    if not err <= tol:
        raise RuntimeError(f"{what} gave a wrong result (relative error {err:.1e} on the first and last rows)")


def run_workload(label, shape, axis, dtype, a_kind, peers, copy_bw, rng, reps, log):
    a_h, b_h = make(shape, axis, dtype, a_kind, rng)
    a = a_h if np.isscalar(a_h) else cupy.asarray(a_h)
    b = cupy.asarray(b_h)
    del a_h, b_h
    out = cupy.empty_like(b)
    nb = nbytes(a, b)
    row = {"workload": label, "elements": int(b.size), "dtype": dtype}

    def ours(method):
        return lambda: scanarray.linear_recurrence(a, b, axis, out=out, backend="cupy", method=method)

    ms, _ = timed(ours("lookback"), reps)
    row["lookback_GBs"] = nb / (ms * 1e-3) / GB
    ms_b, _ = timed_burst(ours("lookback"), reps)
    row["b2b_GBs"] = nb / (ms_b * 1e-3) / GB
    row["b2b_pct_copy"] = 100 * row["b2b_GBs"] / copy_bw
    ms_k, _ = timed_burst(kernel_only(a, b, out, axis, "lookback"), reps)
    row["kernel_GBs"] = nb / (ms_k * 1e-3) / GB
    row["kernel_pct_copy"] = 100 * row["kernel_GBs"] / copy_bw
    # the GPU alone (launches queued ahead of it): for kernels shorter than a launch's host time
    row["kernel_q_GBs"] = nb / (queued_us(kernel_only(a, b, out, axis, "lookback")) * 1e-6) / GB
    row["plan"] = kernel_only(a, b, out, axis, "lookback").plan.name.split("<")[0].split("::")[-1]
    row["lookback_pct_copy"] = 100 * row["lookback_GBs"] / copy_bw
    row["lookback_Gelem_s"] = b.size / (ms * 1e-3) / 1e9
    lanes = b.size // shape[axis]
    if lanes >= 4096:
        ms_s, _ = timed_burst(ours("sequential"), max(3, reps // 4))
        row["sequential_GBs"] = nb / (ms_s * 1e-3) / GB

    contiguous_last = axis in (-1, len(shape) - 1) and len(shape) == 3
    T = shape[axis]
    # fpscan and accelerated-scan's warp kernel launch a grid of (batch, rows): more than 65535 rows
    # (a grid's y limit) fail without an error, and the failed launch's error then surfaces in the
    # next library to check one (JAX failed so, H200, 2026-11-22 11:12 and 11:15 UTC)
    fp_shape = T & (T - 1) == 0 and shape[1] <= 65535
    full_a = not np.isscalar(a)
    if contiguous_last and full_a and dtype in ("float32", "float64"):
        checked(ours("lookback"), out, "scanarray", a, b)  # the table's own figures, checked too
    if peers.torch is not None and contiguous_last and full_a and dtype == "float32":
        ta, tb = peers.tt(a), peers.tt(b)
        to = peers.tt(out)
        if peers.fpscan is not None and fp_shape and 32 <= T <= 65536:
            try:
                ext = peers.fpscan.ops._load_extension()

                def fp():
                    ext.fullscan_forward(ta, tb, to, False)

                checked(fp, out, "fpscan", a, b)
                ms_f, _ = timed_burst(fp, reps)
                row["fpscan_GBs"] = nb / (ms_f * 1e-3) / GB
                row["fpscan_q_GBs"] = nb / (queued_us(fp) * 1e-6) / GB
                row["ours_over_fpscan"], row["ours_first_over_fpscan"] = paired(ours("lookback"), fp, reps)
                row["kernel_over_fpscan"], _ = paired(kernel_only(a, b, out, axis, "lookback"), fp, reps)
            except Exception as exc:
                log(f"{label}: fpscan failed: {exc}")
        if peers.acc_warp is not None and fp_shape and 32 <= T <= 65536:
            try:
                checked(lambda: peers.acc_warp.warpscan_forward(ta, tb, to, False), out, "accelerated-scan warp", a, b)
                ms_w, _ = timed_burst(lambda: peers.acc_warp.warpscan_forward(ta, tb, to, False), reps)
                row["acc_warp_GBs"] = nb / (ms_w * 1e-3) / GB
            except Exception as exc:
                log(f"{label}: accelerated-scan warp failed: {exc}")
        if peers.acc_triton is not None:
            try:
                checked(lambda: peers.acc_triton.scan(ta, tb), out, "accelerated-scan triton", a, b)
                ms_t, _ = timed_burst(lambda: peers.acc_triton.scan(ta, tb), max(3, reps // 4), burst=2, budget_s=3)
                row["acc_triton_GBs"] = nb / (ms_t * 1e-3) / GB
            except Exception as exc:
                log(f"{label}: accelerated-scan triton failed: {str(exc)[:200]}")
    if peers.jax is not None and dtype in ("float32", "float64", "complex64"):
        try:
            jax = peers.jax
            jnp = jax.numpy

            def comb(x, y):
                return x[0] * y[0], y[0] * x[1] + y[1]

            jb = jax.dlpack.from_dlpack(b)
            ja = jnp.full((), a, jb.dtype) if np.isscalar(a) else jax.dlpack.from_dlpack(a)
            ja = jnp.broadcast_to(ja, jb.shape)
            f = jax.jit(lambda x, y: jax.lax.associative_scan(comb, (x, y), axis=axis)[1])
            ms_j, _ = wall_burst(lambda: f(ja, jb), max(3, reps // 2))
            row["jax_GBs"] = nb / (ms_j * 1e-3) / GB
        except Exception as exc:
            log(f"{label}: jax failed: {str(exc)[:200]}")
    if peers.lfilter is not None and np.isscalar(a):
        try:
            num = cupy.asarray([1.0], dtype=b.dtype)
            den = cupy.asarray([1.0, -a], dtype=b.dtype)
            ms_l, _ = timed_burst(lambda: peers.lfilter(num, den, b, axis=axis), max(3, reps // 4), burst=2,
                                  budget_s=3)
            row["lfilter_GBs"] = nb / (ms_l * 1e-3) / GB
        except Exception as exc:
            log(f"{label}: lfilter failed: {str(exc)[:200]}")
    try:
        ms_c, _ = timed_burst(lambda: cupy.cumsum(b, axis=axis, out=out), max(3, reps // 2))
        row["cumsum_GBs"] = 2 * b.nbytes / (ms_c * 1e-3) / GB
    except Exception as exc:
        log(f"{label}: cumsum failed: {exc}")
    return row


COLS = [
    ("workload", "workload", "{}"),
    ("lookback_GBs", "ours, one call GB/s", "{:.0f}"),
    ("lookback_pct_copy", "% copy", "{:.1f}"),
    ("b2b_GBs", "ours back-to-back GB/s", "{:.0f}"),
    ("b2b_pct_copy", "% copy", "{:.1f}"),
    ("kernel_GBs", "kernel only GB/s", "{:.0f}"),
    ("kernel_pct_copy", "% copy", "{:.1f}"),
    ("kernel_q_GBs", "kernel queued GB/s", "{:.0f}"),
    ("plan", "kernel", "{}"),
    ("sequential_GBs", "sequential GB/s", "{:.0f}"),
    ("fpscan_GBs", "fpscan GB/s", "{:.0f}"),
    ("ours_over_fpscan", "ours/fpscan (paired)", "{:.2f}x"),
    ("ours_first_over_fpscan", "ours/fpscan (paired, ours first)", "{:.2f}x"),
    ("kernel_over_fpscan", "kernel/fpscan (paired)", "{:.2f}x"),
    ("fpscan_q_GBs", "fpscan queued GB/s", "{:.0f}"),
    ("acc_warp_GBs", "acc-scan warp", "{:.0f}"),
    ("acc_triton_GBs", "acc-scan triton", "{:.0f}"),
    ("jax_GBs", "jax assoc_scan", "{:.0f}"),
    ("lfilter_GBs", "cupyx lfilter", "{:.0f}"),
    ("cumsum_GBs", "cupy.cumsum", "{:.0f}"),
]


def table(rows):
    head = "| " + " | ".join(c[1] for c in COLS) + " |"
    sep = "|" + "|".join("---" for _ in COLS) + "|"
    lines = [head, sep]
    for r in rows:
        cells = [fmt.format(r[k]) if k in r else "–" for k, _, fmt in COLS]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer repetitions")
    ap.add_argument("--reps", type=int, default=0, help="repetitions per timing (median)")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--only", default=None, help="workloads whose label contains one of these ;-separated strings")
    ap.add_argument("--no-peers", action="store_true")
    ap.add_argument("--sweep", action="store_true", help="tile-shape sweep first (kernel-only timings)")
    ap.add_argument("--sweep-one-tile", action="store_true", help="one-tile rows and time-major sweep")
    ap.add_argument("--sweep-small", action="store_true", help="(2,256,4096): fpscan-like one-tile rows and splits")
    ap.add_argument("--sweep-prefetch", action="store_true", help="prefetch/look-back sweep (kernel only)")
    ap.add_argument("--sweep-block", action="store_true", help="block-per-row tile shapes (kernel only)")
    ap.add_argument("--sweep-lanes", action="store_true", help="time-major tile shapes, few warps (kernel only)")
    ap.add_argument("--sweep-lanes-width", action="store_true", help="time-major tiles of 32, 16 or 8 lanes")
    ap.add_argument("--sweep-fpscan-wide", action="store_true", help="fpscan's smaller shapes, more tile shapes, queued")
    ap.add_argument("--sweep-lanes-vec", action="store_true", help="time-major: several lanes a thread")
    ap.add_argument("--sweep-fpscan", action="store_true", help="fpscan's shapes, kernels timed queued")
    ap.add_argument("--sweep-block-wide", action="store_true", help="(2,256,65536), (4,64,262144): fpscan-like rows_block shapes, queued")
    ap.add_argument("--sweep-staged", action="store_true", help="long rows: tiles staged in shared memory (kernel only)")
    ap.add_argument("--sweep-long", action="store_true", help="look-back tile shapes on one long row (kernel only)")
    ap.add_argument("--sweep-wide", action="store_true", help="one long row of 8- and 16-byte types (kernel queued)")
    ap.add_argument("--profile", action="store_true", help="cProfile of the public function's host time")
    args = ap.parse_args(argv)
    reps = args.reps or (7 if args.quick else 25)
    logs = []

    def log(msg):
        print(msg, flush=True)
        logs.append(msg)

    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    device = props["name"].decode()
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    copy_bw = copy_bandwidth(reps)
    log(f"device: {device}; copy bandwidth (1 GiB D2D, read+write): {copy_bw:.0f} GB/s")
    host = host_overhead_us()
    host_txt = ", ".join(f"{k} {v:.0f} us" for k, v in host.items())
    log(f"host time per call (tiny problem): {host_txt}")
    if args.profile:
        profile_host(log)
    sweep_text = sweep(copy_bw, log, reps) if args.sweep else ""
    if args.sweep_one_tile:
        sweep_text += "\n\n" + sweep(copy_bw, log, reps, SWEEP_ONE_TILE)
    if args.sweep_small:
        sweep_text += "\n\n" + sweep(copy_bw, log, reps, SWEEP_SMALL)
    if args.sweep_staged:
        sweep_text += "\n\n" + sweep(copy_bw, log, reps, SWEEP_STAGED)
    if args.sweep_prefetch:
        sweep_text += "\n\n" + sweep(copy_bw, log, reps, SWEEP_PREFETCH)
    if args.sweep_wide:
        sweep_text += "\n\n" + sweep(copy_bw, log, reps, SWEEP_WIDE, queued=True)
    if args.sweep_long:
        sweep_text += "\n\n" + sweep(copy_bw, log, reps, SWEEP_PREFETCH[:2])
    if args.sweep_lanes:
        sweep_text += "\n\n" + sweep(copy_bw, log, reps, [("time-major (65536,4096)", (65536, 4096), 0, "float32",
                                                              _LANES_FEW_WARPS)])
    if args.sweep_block:
        sweep_text += "\n\n" + sweep(copy_bw, log, reps, SWEEP_PREFETCH[2:4])
    if args.sweep_lanes_width:
        sweep_text += "\n\n" + sweep(copy_bw, log, reps, SWEEP_LANES_WIDTH)
    if args.sweep_fpscan_wide:
        sweep_text += "\n\n" + sweep(copy_bw, log, reps, SWEEP_FPSCAN_WIDE, queued=True)
    if args.sweep_lanes_vec:
        sweep_text += "\n\n" + sweep(copy_bw, log, reps, SWEEP_LANES_VEC)
    if args.sweep_fpscan:
        sweep_text += "\n\n" + sweep(copy_bw, log, reps, SWEEP_FPSCAN, queued=True)
    if args.sweep_block_wide:
        sweep_text += "\n\n" + sweep(copy_bw, log, reps, SWEEP_BLOCK_WIDE, queued=True)

    peers = Peers(log) if not args.no_peers else None
    if peers is None:
        peers = Peers.__new__(Peers)
        peers.torch = peers.fpscan = peers.acc_warp = peers.acc_triton = peers.jax = peers.lfilter = None
    rng = np.random.default_rng(0)
    rows = []
    for w in WORKLOADS:
        if args.only and not any(o in w[0] for o in args.only.split(";")):
            continue
        try:
            t0 = time.perf_counter()
            rows.append(run_workload(*w, peers, copy_bw, rng, reps, log))
            cupy.get_default_memory_pool().free_all_blocks()
            log(f"{w[0]}: {json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in rows[-1].items()})}"
                f" ({time.perf_counter() - t0:.1f} s)")
        except Exception:
            log(f"{w[0]}: FAILED\n{traceback.format_exc()}")
    full = {r["workload"]: r for r in rows}
    notes = []
    s, f = full.get("scalar a (16,2048,4096)"), full.get("(16,2048,4096)")
    if s and f:
        notes.append(f"scalar a / full a, elements per second: {s['lookback_Gelem_s'] / f['lookback_Gelem_s']:.2f}x "
                     f"through the public function, {s['kernel_GBs'] / 8 / (f['kernel_GBs'] / 12):.2f}x kernel only")
    text = (
        f"Device: {device}; {date}; CuPy {cupy.__version__}; copy bandwidth {copy_bw:.0f} GB/s "
        f"(1 GiB device-to-device, bytes read + written). GB/s = bytes of a + b read + h written / median time.\n\n"
        + table(rows) + "\n\n" + "\n".join(notes) + "\n"
        + f"\nHost time per call on a tiny problem (public function, bound to its repeated signature / its full path / backend driver / kernel launch): {host_txt}.\n"
        + (f"\nTile-shape sweep (kernel-only):\n\n{sweep_text}\n" if sweep_text else "")
    )
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "bench_gpu.md"), "w") as fh:
        fh.write(text + "\n<!-- log\n" + "\n".join(logs) + "\n-->\n")
    with open(os.path.join(args.out, "bench_gpu.json"), "w") as fh:
        json.dump({"device": device, "date": date, "copy_GBs": copy_bw, "rows": rows}, fh, indent=1)
    print()
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
