"""Tunables and the ``method="auto"`` choices, in one place. Tests may patch them.

Every threshold here cites the measurement it came from (machine, date, script).
"""

from __future__ import annotations

import sys
import types

__all__ = ["CUPY_SCAN", "cupy_auto_method", "cupy_dense_auto_method", "numpy_dense_auto_method"]


# --------------------------------------------------------------------------- changes to tunables
# A CuPy call bound to its signature (``_cupy_common.Binder``) must notice when a tunable it was
# planned under changes (tests and sweeps patch them). Rebuilding every tunable on every call took
# 0.44 us of a diagonal call's ~8 us of host time, before the comparison (H200 host, 2026-11-22,
# benchmarks/results/host_2026-11-22.md); instead every change advances one counter, which a bound
# call compares. Changes
# are attribute assignments on the modules holding tunables (``track``; Python's documented
# module ``__class__`` assignment, reference manual 3.3.2.1) and item assignments in their dicts
# (``_Tunables``).
_GENERATION = [0]


def generation() -> int:
    """How many times a tunable has changed since import."""
    return _GENERATION[0]


def _changed():
    _GENERATION[0] += 1


def _tracked(v):
    return _Tunables(v) if type(v) is dict else v


class _Tunables(dict):
    """A dict of tunables (its dict values become ``_Tunables`` too) whose changes count in
    :func:`generation`."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        for k, v in super().items():
            if type(v) is dict:
                super().__setitem__(k, _Tunables(v))

    def __setitem__(self, k, v):
        _changed()
        super().__setitem__(k, _tracked(v))

    def __delitem__(self, k):
        _changed()
        super().__delitem__(k)

    def update(self, *args, **kw):
        for k, v in dict(*args, **kw).items():
            self[k] = v

    def __ior__(self, other):
        self.update(other)
        return self

    def setdefault(self, k, default=None):
        if k not in self:
            self[k] = default
        return self[k]

    def pop(self, *args):
        _changed()
        return super().pop(*args)

    def popitem(self):
        _changed()
        return super().popitem()

    def clear(self):
        _changed()
        super().clear()


class _TunableModule(types.ModuleType):
    """A module whose attribute assignments count in :func:`generation`."""

    def __setattr__(self, name, value):
        _changed()
        super().__setattr__(name, value)

    def __delattr__(self, name):
        _changed()
        super().__delattr__(name)


def track(module_name: str) -> None:
    """Count assignments to ``module_name``'s attributes in :func:`generation` (its tunables)."""
    sys.modules[module_name].__class__ = _TunableModule


#: Tile shapes of the CuPy diagonal kernels (scanarray/backends/cupy/cuda/scan.cu), keyed by the
#: compute dtype's itemsize. ``rows``: (threads, steps per thread, min blocks per SM) of the
#: time-contiguous kernels for rows of at most one tile (``rows_tiles`` without look-back, or
#: ``rows_warp`` for rows shorter than a tile); ``rows_long``: the same for rows of several tiles
#: (decoupled look-back); ``rows_block``: a block per long row; ``lanes``: (warps along time,
#: steps per thread, min blocks per SM) of ``lanes_tiles`` (time-major data, 32 lanes wide).
#: From the kernel-only sweeps of benchmarks/bench_gpu.py --sweep on an H200, 2026-11-21
#: (docs/gpu.md). Tests shrink them to stress the look-back.
CUPY_SCAN = {
    # 16-byte types (complex128): (128,4,5), no spills; with 6 blocks (80 registers) rows_seg and
    # rows_tiles spilled 200 / 56 bytes. Kernel queued, H200, 2026-11-22 13:14-13:18 UTC, % of the
    # copy, rows of 16 / 64 / 512 steps: 98.2 / 91.2 / 78.5 against 64.7 / 54.5 / 78.3 for (128,4,6)
    # and 90.8 / 85.3 / 71.9 for (128,4,4).
    "rows": {4: (256, 16, 4), 8: (128, 8, 6), 16: (128, 4, 5)},
    "rows_long": {4: (256, 16, 4), 8: (256, 8, 2), 16: (256, 4, 2)},
    # rows_warp (a warp per row shorter than a ``rows`` tile): its own shape, as its loop and exact
    # replay hold more registers than ``rows``' kernels (missing sizes take ``rows``'). With ``rows``'
    # shapes it spilled 84 (float32), 384 (complex64) and 2080 bytes (complex128). Kernel queued,
    # H200, 2026-11-22 13:14 and 13:18 UTC, % of the copy against ``rows``' shape in the same run:
    # float32 rows of 512 / 1024 / 2048 steps 98.2 / 96.6 / 94.2 against 91.1 / 91.9 / 89.1 (float16
    # of 1024: 85.2 against 89.1; (256,16,3) gave 98.1 / 96.7 / 94.0 and 83.1); complex64 of 256 / 512
    # 96.9 / 98.0 against 52.8 / 53.2, float64 101.0 / 100.9 against 98.6 / 97.9 ((128,8,5): 93.1 /
    # 95.0, 102.5 / 101.7; of 200-1000 steps 43-78% where (128,4,6) gave 71-91%); complex128 of 128 /
    # 256 80.7 / 80.5 against 14.7 / 14.8.
    "rows_warp": {4: (128, 16, 6), 8: (128, 4, 6), 16: (128, 2, 6)},
    # rows of several tiles on compute capability >= 9.0: ``rows_staged`` (the tile staged in shared
    # memory by asynchronous copies, so more tiles per SM wait on their look-back), this shape
    # instead of ``rows_long``; None: ``rows_long``. Kernel only, H200, 2026-11-21 16:43, 16:54 and
    # 17:12 UTC (bench_gpu.py --sweep-staged; 32 KB of a and b per block, 6 blocks per SM): one row
    # of 2**28 float32 76.3 / 76.6 / 76.4% of the copy against rows_tiles' 74.1 / 74.4 / 74.4% in
    # the same runs; 2**24 65.3 / 65.5 / 64.8 against 62.9 / 63.2 / 61.7; (2,256,65536) forced to
    # look back 83.7 / 84.2 / 84.1 against 83.1 / 83.5 / 83.9; float64 one row of 2**27 56.3% against
    # 43.0%, complex64 52.4% against 38.8%. Other shapes were slower: (128,32,5) 73.0%, (256,16,6)
    # 71.3%, (128,16,12) 69.0%, (64,32,12) 61.3% on 2**28. 16-byte types: off; one row of 2**24
    # complex128 (H200, 2026-11-22 13:18 UTC) 34.6% in registers (rows_long) against 31.3% staged
    # (128,8,6) (spilling 820 bytes), 25.0-25.2% for (128,4,6) and (128,4,4). 8-byte types staged
    # 53.1% (float64) / 49.0% (complex64) against 42.9 / 38.8 in registers. Swept again once their
    # statuses took one round trip (H200, 2026-11-28 04:09-04:12 UTC, bench_gpu.py --sweep-wide,
    # kernels queued): one row of 2**27 float64 (128,16,6) 2768 GB/s, (128,16,7) 2776, (128,16,5)
    # 2716, (64,32,6) 2588, registers 2226; complex64 2517 against 2381 and 1978; complex128 still
    # best in registers (1649 GB/s; staged (128,8,6) 1399). With the L2 prefetch of the tile 128
    # tickets ahead (scan.cu, SCANARRAY_ROWS_L2PF; H200, 2026-11-28 11:54-11:55 UTC,
    # benchmarks/diag_lookback.py, one row of 2**28 float32, kernel only) this shape stayed the best:
    # 3441-3505 GB/s against 2648-3414 for staged (128,32,4), (256,16,6), (128,16,12), (64,64,6),
    # (64,32,12) and for registers (256,16,4), (256,32,2).
    "rows_staged": {4: (128, 32, 6), 8: (128, 16, 6), 16: None},
    # rows_block keeps its next tile's loads in flight (twice the data registers): fewer blocks per
    # SM than the kernels without prefetch. Kernel-only, H200, 2026-11-21 08:08 UTC
    # (bench_gpu.py --sweep-prefetch): f32 (256,16,2) 83.2% / 87.6% of the copy on (2,256,65536) /
    # (4,64,262144) where the kernel without prefetch gave 80.7% / 86.1% (512,16,2) at 08:02;
    # 8-byte (128,8,4) 95.4% f64 / 89.3% c64 on (8,1024,4096) against 94.5% / 91.0% (128,8,6).
    # 16-byte: (128,4,4), kernel queued, H200, 2026-11-22 13:14 UTC, complex128 rows of 2048 / 16384
    # steps 64.0 / 62.4% of the copy against 58.8 / 52.9 for (128,4,3) and 43-58% for (128,2,4),
    # (64,4,6), (256,2,2).
    # f32 (128,16,3) since 10:24 UTC (bench_gpu.py --sweep-block, H200): 94.2% / 93.0% of the copy
    # on (2,256,65536) / (4,64,262144) against 89.9% / 91.2% for (256,16,2) in the same run (half
    # the threads a block, more blocks a wave: 512 rows fit one wave); (128,16,4) 93.6% / 93.1%.
    "rows_block": {4: (128, 16, 3), 8: (128, 8, 4), 16: (128, 4, 4)},
    # rows_block's rows whose groups of a, b and out are all aligned 16-byte vectors, storage as
    # wide as the compute type: ``rows_wide`` (threads, min blocks per SM; one group a thread and
    # tile, fpscan's geometry), or rows_block where None. Kernels queued, H200, 2026-11-28 08:28
    # UTC (benchmarks/diag_wide.py, GB/s): float32 (2,256,65536) 3985-3986 against rows_block's
    # 3829-3885 and fpscan's 4010-4012, (4,64,262144) 4020-4022 against 3904-3905. At 1024 threads,
    # 8- and 16-byte types spill (20-340 bytes, nvcc on this project's VM): off.
    "rows_wide": {4: (1024, 2)},
    # float32 time-major: (4,16,6) 76.7% of the copy on (65536,4096) against 72.3% for (4,16,4)
    # (H200, 2026-11-21 08:21 UTC, bench_gpu.py --sweep-one-tile; 12 bytes of spills)
    "lanes": {4: (4, 16, 6), 8: (4, 8, 4), 16: (4, 4, 4)},
    # time-major on compute capability >= 9.0: ``lanes_tiles`` with the tile staged in shared memory
    # (storage types of at least 4-byte alignment), this shape instead of ``lanes``; None: ``lanes``.
    # Kernel only, H200, 2026-11-21 16:54 and 17:12 UTC (bench_gpu.py --sweep-staged): float32
    # (65536,4096) staged 65.3-80.9% of the copy over six shapes against 84.5 / 83.8% in registers
    # (each thread stages its own lane, 4 bytes per copy): off; float64 (65536,2048) staged
    # (4,16,4) 64.7 / 64.7% against 53.3 / 53.3% for ``lanes`` (4,8,4). 16-byte types not timed: off.
    "lanes_staged": {4: None, 8: (4, 16, 4), 16: None},
    # time-major tiles of fewer lanes than a warp where lanes are few: (lanes per tile, for fewer
    # lanes than this). Lane groups are the chains of the look-back: 1024 float32 lanes make 32
    # chains of 32 lanes, 64 of 16. Kernel only, H200, 2026-11-21 (bench_gpu.py
    # --sweep-lanes-width), % of the copy, this width against 32 lanes: float32 (262144,1024)
    # 78.3 / 69.6 (22:59 UTC; 78.5 / 70.0 at 22:53), (131072,2048) 83.7 / 80.1, (1048576,256)
    # 60.0 / 51.9; float64 (65536,2048) 70.4 / 66.6, (131072,1024) 64.7 / 62.4; complex64
    # (65536,2048) 68.3 / 69.7. 8 float32 lanes (32-byte pieces of a row) were slower: 65.0-67.0%
    # where 16 gave 78.5-83.7. 4096 lanes and more keep 32: (65536,4096) 84.6 / 85.1 and
    # (16384,16384) 82.4 / 87.6 with 16. A tuple of four in "lanes" or "lanes_staged" names the
    # width itself.
    "lanes_narrow": {4: (16, 4096), 8: (8, 4096), 16: (8, 4096)},
    # time-major with lanes contiguous and 16-byte aligned: ``lanes_vec`` (Q = 16 / itemsize lanes a
    # thread, at most 4, with Q-lane vector accesses), (warps, steps, min blocks per SM[, lanes per
    # tile]; without it, as lanes_narrow gives); None: lanes_tiles. The look-back costs a tile one
    # round trip of status reads, through which it holds its registers; Q lanes a thread keep more
    # bytes in flight per register. Kernel only, H200, 2026-11-21 23:25 UTC (bench_gpu.py
    # --sweep-lanes-vec, % of the copy, against lanes_tiles in the same run): float32 (65536,4096)
    # (4,8,4) 91.4 / 91.7 against 82.6 / 82.7 ((4,6,5) 89.8, (8,4,4) 86.8, (2,8,8) 86.0, (4,4,8)
    # 80.1); (16384,16384) 92.1 against 85.7 ((4,6,5) 92.7); (262144,1024) 86.2 against 76.1;
    # float64 (65536,2048) 71.3 against 68.3 staged; complex64 (65536,2048) 70.8 against 66.9.
    # 8-byte types, 23:34 UTC (the same sweep's second half): (4,12,3) float64 (65536,2048) 84.0,
    # (32768,4096) 78.0, complex64 (65536,2048) 82.0, against 72.4, 68.5, 70.4 for lanes_tiles and
    # 75.2, 75.3, 74.2 for (4,8,4); (4,16,3) 76.6-80.6 (a few bytes of spills in each).
    "lanes_vec": {4: (4, 8, 4), 8: (4, 12, 3), 16: None},
    # rows of one ``rows`` tile that fit one wave of this shape (SMs x its min blocks): a block per
    # row looping over tiles of this shape, so that the reads of a row's next tile overlap the
    # writes of its first (a one-wave launch of one-tile rows reads everything, then writes).
    # Off (empty) since 2026-11-21 21:15 UTC: timed with the launches queued behind a spin kernel
    # (bench_gpu.py --sweep-fpscan, queued_us: the GPU's time alone), one-tile rows beat the split
    # (128, 16, 4) on (2,256,4096) float32 in three alternations, 95.8 / 97.7 / 95.8% of the copy
    # against 93.5 / 93.2 / 93.3% (H200). The split's earlier lead (59.1% against 49.2% at 10:17
    # UTC, bench_gpu.py --sweep-one-tile) was measured in bursts whose launches took longer on
    # the host than the kernels on the GPU. Tests still run it with their own shape.
    "rows_split": {},
    "seq_threads": 128,
    # rows longer than a tile use ``rows_block`` (a block per row, no look-back) when there are
    # at least this many times (SMs x rows_block min blocks) of them, else ``rows_tiles`` with
    # decoupled look-back
    "rows_block_fill": 0.45,
}

#: How a CuPy look-back tile (scan.cu's rows and time-major kernels) gets its index. False: its
#: block's index, as CUB's single-pass scan does, relying on NVIDIA GPUs starting a grid's blocks
#: in index order (so every predecessor a tile waits on has started). True: a ticket from an
#: atomic counter, which does not rely on that order but puts the counter's round trip before each
#: tile's first load: time-major float32 (65536,4096) 4-5% slower kernel only (H200, 2026-11-28
#: 15:24 UTC, benchmarks/diag_lookback.py; docs/gpu.md, "Tile index").
CUPY_TILE_TICKETS = False


def cupy_auto_method(problem):
    """The CuPy method for ``method="auto"``."""
    if problem.dense:
        return cupy_dense_auto_method(problem)
    if _many_short_lanes_closer(problem):
        return "sequential"
    if problem.b.shape[-1] <= SEQ_MAX_T_ROWS:
        return "sequential"
    return "lookback"


#: Rows this short go to one thread per lane whatever the layout. Measured on an NVIDIA H200,
#: float32, 2**24 elements as rows of T steps, through the public function back to back, since
#: short rows run ``rows_seg`` (several rows a warp; 2026-11-22 11:48 UTC,
#: benchmarks/results/gpu_2026-11-22.md, J): look-back / sequential GB/s at T = 4 2973 / 2153,
#: 8 3463 / 2003, 16 3211 / 1142, 32 3194 / 684. Rows of 1-3 steps were not measured and keep
#: the sequential kernel. (With a warp per row the line sat at 32 steps, then at 16: at 16 steps
#: 1140 sequential against 767, 2026-11-22 11:24 UTC.)
SEQ_MAX_T_ROWS = 3


#: Diagonal CuPy choice for many short lanes laid out closer in memory than time steps (issue 5:
#: the inter-chunk scan of chunked linear RNNs, b (BH, G, 16, 64) with a (BH, G, 16, 1) along G),
#: from benchmarks/bench_matmulscan.py on an NVIDIA H200, 2026-11-21 (docs/matmulscan.md,
#: benchmarks/results/matmulscan_2026-11-21.md), device time per call, float32: with 65536 lanes
#: (BH = 64) sequential took 7.7 / 24.3 / 44.5 us against look-back's 13.4 / 32.0 / 66.5 at
#: G = 64 / 128 / 256; with 524288 lanes (BH = 512) 74.6 / 149.5 / 302.3 against 95.8 / 229.2 /
#: 526.4 (float16 and bfloat16 alike); with 1024 lanes (BH = 1) look-back won (5.4 against 10.9
#: us at G = 256). tensor-core matmulscan was slower than both in every row, so auto never picks it.
SEQ_MIN_LANES = 65536
SEQ_MAX_T = 256


def _many_short_lanes_closer(problem) -> bool:
    b = problem.b
    T = b.shape[-1]
    lanes = [(n, abs(st)) for n, st in zip(b.shape[:-1], b.strides[:-1]) if n > 1]
    nlanes = 1
    for n, _ in lanes:
        nlanes *= n
    closer = bool(lanes) and min(st for _, st in lanes) < abs(b.strides[-1])
    return closer and nlanes >= SEQ_MIN_LANES and T <= SEQ_MAX_T


#: Dense CuPy choice (issue 6), from benchmarks/bench_dense.py on an NVIDIA H200, 2026-11-21
#: 08:18 UTC ("--gpu --targets --sweep"; benchmarks/results/dense_2026-11-21.md, docs/dense.md).
#: The one-kernel ``sequential`` scan costs about DENSE_FIXED_MS + T * DENSE_STEP_US[bucket]
#: microseconds whatever the lane count up to about one lane per SM (measured: 0.32 ms at
#: n = 4, T = 1024; 16.0-16.7 ms at n = 4, T = 65536 for B = 1, 16 and 256; 18.6 ms at n = 16,
#: T = 65536; 3.76 ms at n = 32, T = 8192; 5.90 ms at n = 64, T = 8192; 30.8 ms at n = 128,
#: T = 8192). It is chosen when that is below the alternative's estimate: with one lane the
#: prefix scan or cyclic reduction never took less than DENSE_ONE_LANE_MS (0.93-0.95 ms at
#: T = 1024); with several, cyclic reduction took max(DENSE_CR_FLOOR_MS, lanes * T *
#: DENSE_CR_NS[bucket] ns): 1.58 ms (n = 4, B = 16, T = 1024) ... 67.1 ms (n = 4, B = 256,
#: T = 65536, 4 ns per matrix), 9.4 ms (n = 16, B = 16, T = 65536, 9-10 ns), 3.65 ms (n = 32,
#: B = 16, T = 8192, 26 ns), 29.9 ms (n = 64, B = 16, T = 16384, 114 ns, earlier run of the
#: same script), 7.0 ms (n = 128, B = 16, T = 1024, 430 ns). n > 128: the sequential path falls
#: back to the first kernels (not measured here), never chosen.
DENSE_FIXED_MS = 0.06
DENSE_STEP_US = {4: 0.25, 16: 0.29, 32: 0.46, 64: 0.72, 128: 3.8}
DENSE_ONE_LANE_MS = 0.93
DENSE_CR_FLOOR_MS = 1.55
DENSE_CR_NS = {4: 4, 16: 10, 32: 26, 64: 114, 128: 430}
#: With one lane the prefix scan's slices are contiguous (no copies) and it beat cyclic
#: reduction while its own work, about T n^3 log2 T multiply-adds, stayed below this:
#: prefix 1.46 ms vs 1.99 at (n=32, T=8192), CR 2.31 vs 2.80 at (n=32, T=16384),
#: prefix 1.21 vs 1.69 at (n=64, T=2048), CR 1.92 vs 2.38 at (n=64, T=4096).
DENSE_PREFIX_MAX_WORK = 12 * 2**29
#: Otherwise cyclic reduction: T n^3 work against T n^3 log2 T, 2.3x (n=32, B=16, T=1024)
#: to 13x (n=32 and n=64, B=16, T=16384) faster than the prefix scan.
#: ``chunked`` (products of chunks of about sqrt(T) steps, carries, rerun: three kernels), H200,
#: 2026-11-21 08:47 UTC (tools/gpu_dense_chunked.sh; benchmarks/results/dense_chunked_2026-11-21.md):
#: 0.176 ms at (B, T, n) = (64, 1024, 16) against sequential 0.409, and 1.102 ms at (8, 4096, 64)
#: against sequential 2.502 (float32). Estimate: DENSE_FIXED_MS + 2 sqrt(T) DENSE_STEP_US (the
#: carries and rerun passes, latency-bound) + lanes T n^3 / DENSE_CHUNK_FMA_PER_MS (the products
#: pass), the rate fitted to those two rows (n = 16: 2.8e9 multiply-adds per ms, also used for
#: smaller buckets; n = 64: 9.0e9). Only where it was measured or between: 16 <= n <= 64, at least
#: DENSE_CHUNK_MIN_LANES lanes and DENSE_CHUNK_MIN_T steps (one lane, small n and n = 128 not timed).
DENSE_CHUNK_FMA_PER_MS = {4: 2.8e9, 16: 2.8e9, 32: 2.8e9, 64: 9.0e9}
#: float32 products on tensor cores (``_cupy_dense.CHUNK_MMA``, sm_80+), the products pass alone, H200,
#: 2026-11-21 (tools/gpu_dense_chunked.sh): 40.0 us at (B, T, n) = (64, 1024, 16) (13:34 UTC), 96.3 us at
#: (8, 4096, 32) and 468 us at (8, 4096, 64) (13:59 UTC, 4 blocks per SM): 6.7e9, 11.1e9 and 18.4e9
#: multiply-adds per ms. n in (32, 64] (compute capability 9.0: warpgroup MMAs, padded to 64, so
#: the estimate counts 64^3 per step there, DENSE_CHUNK_MMA_PADDED): 21.8e9, fitted to the whole
#: method's time, which the other terms underestimate as lanes grow: one call with a sync, H200,
#: 2026-11-22 01:17 UTC (benchmarks/results/dense_2026-11-22.md, G), chunked / sequential
#: (64, 1024, 64) 0.921 / 0.734 ms, (64, 4096, 64) 3.275 / 2.639, (16, 4096, 64) 0.916 / 2.566,
#: (64, 1024, 48) 0.816 / 0.672, (8, 16384, 64) 1.718 / 9.973; (8, 4096, 64) 0.510 / 2.561 at 01:07.
#: It picks the faster at all six; the products pass alone runs at 29.6e9 there, which picks
#: chunked at the three 64-lane shapes, and the earlier 18.4e9 picked it at (64, 1024, 48).
#: Refitted to 24.5e9 for the products on FP16 pieces (benchmarks/diag_dense_auto.py, H200,
#: 2026-11-22 08:21 UTC, chunked / sequential ms): (64, 1024, 64) 0.683 / 0.656, (64, 4096, 64)
#: 2.474 / 2.566 (21.8e9 picked sequential there), (16, 4096, 64) 0.675 / 2.486, (64, 1024, 48)
#: 0.651 / 0.596, (8, 16384, 64) 1.321 / 9.940, (8, 4096, 64) 0.405 / 2.504 (08:09 UTC alike).
#: The two 64-lane shapes bound it: 24.1e9 to 24.8e9 picks the faster at all six.
DENSE_CHUNK_MMA_PER_MS = {4: 6.7e9, 16: 6.7e9, 32: 11.1e9, 64: 24.5e9}
DENSE_CHUNK_MMA_PADDED = (64,)
#: Where ``chunked`` would be chosen, ``lookback`` (the same chunk products, one launch) instead for
#: n <= DENSE_LOOKBACK_MAX_N: H200, 2026-11-21 10:36 UTC (METHOD=lookback tools/gpu_dense_chunked.sh;
#: benchmarks/results/dense_lookback_2026-11-21.md), (B, T, n) = (64, 1024, 16) float32: lookback
#: 0.136 ms against chunked 0.180 and sequential 0.404. Only n = 16 was timed against chunked
#: (n = 32: lookback 0.82 ms at (8, 4096, 32) with chunks of 8 steps, chunked not timed there).
DENSE_LOOKBACK_MAX_N = 16
DENSE_CHUNK_N = (16, 64)
DENSE_CHUNK_MIN_LANES = 8
DENSE_CHUNK_MIN_T = 1024


def cupy_dense_auto_method(problem):
    """The CuPy dense method for ``method="auto"`` (see ``DENSE_STEP_US``)."""
    T, n = problem.length, problem.b.shape[-1]
    lanes = 1
    for s in problem.lanes:
        lanes *= s
    bucket = next((k for k in sorted(DENSE_STEP_US) if n <= k), None)
    if bucket is not None:
        seq_ms = DENSE_FIXED_MS + T * DENSE_STEP_US[bucket] / 1e3
        alt_ms = DENSE_ONE_LANE_MS if lanes == 1 else max(DENSE_CR_FLOOR_MS, lanes * T * DENSE_CR_NS[bucket] / 1e6)
        if (DENSE_CHUNK_N[0] <= n <= DENSE_CHUNK_N[1] and lanes >= DENSE_CHUNK_MIN_LANES
                and T >= DENSE_CHUNK_MIN_T):
            mma = problem.dtype == "float32"
            rate = (DENSE_CHUNK_MMA_PER_MS if mma else DENSE_CHUNK_FMA_PER_MS)[bucket]
            m = bucket if mma and bucket in DENSE_CHUNK_MMA_PADDED else n
            chunk_ms = DENSE_FIXED_MS + 2 * T**0.5 * DENSE_STEP_US[bucket] / 1e3 + lanes * T * m**3 / rate
            if chunk_ms < seq_ms and chunk_ms <= alt_ms:
                return "lookback" if n <= DENSE_LOOKBACK_MAX_N else "chunked"
        if seq_ms <= alt_ms:
            return "sequential"
    if lanes == 1 and T * n**3 * max(1, T.bit_length() - 1) <= DENSE_PREFIX_MAX_WORK:
        return "prefix"
    return "cyclic_reduction"


#: Dense NumPy choice (issue 6), from benchmarks/bench_dense.py --cpu-sweep and --cpu on a 2-core
#: AMD EPYC VM (NumPy 2.4.6, OpenBLAS 0.3.31), 2026-11-21 08:24-08:27 UTC, best of 5-15 calls
#: (docs/dense.md, "NumPy"; benchmarks/results/dense_cpu_2026-11-21.md), shared A (--cpu-a shared)
#: at 08:37-08:39 UTC. Per time step, a NumPy method costs about
#:   sequential:                 NUMPY_STEP_US + lanes * mv(n)                    (a matmul + an add)
#:   cyclic_reduction / chunked: a_lanes * mm(n) + NUMPY_PAR_MV * lanes * mv(n)   (few, long calls)
#: with mv(n), mm(n) the cost of one n x n matvec / product inside a batched matmul (NumPy calls
#: BLAS once per matrix): mv(n) = 0.05 + n^2 / 2800 us, mm(n) = 0.1 + n^3 / 37000 us (float32;
#: times 2 float64, 4 complex64, 8 complex128); the parallel methods' two matvecs per (lane, step)
#: cost less than two of the loop's (long calls): NUMPY_PAR_MV = 1.6. ``a_lanes`` counts A's
#: distinct transitions: an A shared by the lanes pays its products once. Shared A (T, n, n),
#: b (B, T, n), T = 4096, float32: (8, 16) chunked 6.61 ms, CR 6.96, sequential 9.15 (float64:
#: chunked 8.93, sequential 10.39, which the rule picks); (64, 16) sequential 35.4, chunked 47.1;
#: (8, 4) CR 2.68, chunked 2.93, sequential 7.08; (8, 64) sequential 20.8, chunked 50.4.
#: Measured float32, time-varying A, per step:
#: sequential 1.45 us (B = 1, n = 4), 2.2 us (B = 8, n = 16), 12.9 us (B = 64, n = 16), 13.2 us
#: (B = 8, n = 64); chunked 0.38 us (B = 1, n = 16), 3.2 us (B = 8, n = 16), 7.7 us (B = 1,
#: n = 64). So the matrix products pay off for few lanes and small n: (1, 4096, 16) CR 1.30 ms,
#: chunked 1.55, sequential 6.28; (8, 4096, 4) CR 3.58, sequential 7.11; but (8, 4096, 16)
#: sequential 9.12, chunked 13.02, CR 17.68, per-step loop 15.27; (64, 4096, 16) sequential
#: 52.75, chunked 138.7; (1, 4096, 64) sequential 11.72, chunked 31.70.
NUMPY_STEP_US = 1.2
NUMPY_PAR_MV = 1.6
#: Between the two parallel methods: cyclic reduction issues few, long calls (a few per level)
#: and wins while its work arrays stay in cache; chunked keeps its per-step arrays small.
#: Measured: n = 4, T = 4096, B = 1 / 8: CR 0.58 / 3.58 ms, chunked 0.86 / 4.35; n = 16, B = 1,
#: T = 1024 / 4096 / 16384: CR 0.41 / 1.30 / 6.61, chunked 0.52 / 1.55 / 5.36. Cyclic reduction
#: when n <= 4, or when A is not shared across lanes and its elements take at most this many
#: bytes (with a shared A at (8, 4096, 16) it took 6.96 ms against chunked's 6.61 in the run
#: above, 9.43 against 5.74 in an earlier one, 08:33 UTC).
NUMPY_CR_MAX_BYTES = 8 * 2**20
_NUMPY_MAC_FACTOR = {"f": 1, "c": 4}


def numpy_dense_auto_method(problem):
    """The NumPy dense method for ``method="auto"`` (see ``NUMPY_STEP_US``).

    A time-invariant ``A`` takes ``chunked``: its matvecs are GEMMs ``h @ A^T`` and it forms only
    ``A^L``; (8, 4096, 16) float32: 1.77 ms against the per-step loop's 12.8 and sequential's 8.1.
    Cyclic reduction was a little faster at its best in a fresh process (1.6-1.9 ms; 0.36 against
    0.67 at B = 1; 16 against 25 at B = 64), but its long GEMMs are the ones OpenBLAS splits over
    threads: with one competing process on this 2-core VM its float64 median rose to 2.6x its best
    (chunked: 1.05x); and inside the benchmark process, after the other rows, its float64 took
    58-60 ms in three runs (chunked 2.7-2.9; cause not identified).
    """
    T, n = problem.length, problem.b.shape[-1]
    if T <= 2:
        return "sequential"
    a = problem.a
    a_lanes = lanes = 1
    for size, step in zip(a.shape[:-3], a.strides[:-3]):
        a_lanes *= size if step != 0 else 1
    for size in problem.lanes:
        lanes *= size
    if a.strides[-3] == 0:
        return "chunked"
    dt = problem.dtype
    k = _NUMPY_MAC_FACTOR.get(dt.kind, 1) * max(1, dt.itemsize // (8 if dt.kind == "c" else 4))
    mv = 0.05 + k * n * n / 2800
    mm = 0.1 + k * n**3 / 37000
    if a_lanes * mm + NUMPY_PAR_MV * lanes * mv >= NUMPY_STEP_US + lanes * mv:
        return "sequential"
    if n <= 4 or (a_lanes == lanes and a_lanes * T * n * n * dt.itemsize <= NUMPY_CR_MAX_BYTES):
        return "cyclic_reduction"
    return "chunked"


for _name in ("CUPY_SCAN", "DENSE_STEP_US", "DENSE_CR_NS", "DENSE_CHUNK_FMA_PER_MS", "DENSE_CHUNK_MMA_PER_MS"):
    globals()[_name] = _Tunables(globals()[_name])
del _name
track(__name__)
