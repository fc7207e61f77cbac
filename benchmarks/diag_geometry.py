#!/usr/bin/env python3
"""Why does ``rows_block`` at fpscan's geometry run at 62% of the copy where fpscan runs at 97%?

(benchmarks/results/gpu_2026-11-28.md, I.) A block per row of (2, 256, 65536) float32, 1024
threads x 4 steps (one 16-byte vector of ``a`` and of ``b`` a thread and tile), two blocks a SM,
no prefetch: this script's own minimal kernel with features switched on one at a time, timed with
the launches queued (``bench_gpu.queued_us``) next to the library's ``rows_block`` at the shipped
and at fpscan's shape and, where it is built (``tools/gpu_issue4.sh``), fpscan itself on the same
data and on the same rows arranged as (1, 512, T) and (512, 1, T) (its grid is (batch, rows)).

Variants (``-D`` flags of the minimal kernel):

- ``BASE``: 32-bit indices, the running state carried by thread 0, no non-finite check;
- ``IDX64``: 64-bit indices and row offsets, as the library's kernels;
- ``BAD``: the library's non-finite check (a flag per warp, a tile-wide vote, a branch);
- ``CARRY_ALL``: every thread reads the entering state from shared memory, as ``rows_block``;
- ``ORDER``: rows taken in fpscan's grid order (batch fastest) instead of in order;
- ``EARLY``: the next tile's vectors loaded right after this tile's stores, before the barrier;
- ``PF``: the next tile's vectors loaded at the start of this tile (more registers);
- ``STCS``: streaming stores;
- ``NORES``: no ``__restrict__`` (plain loads instead of the read-only path), as the library's kernels.

Run on the GPU from the repository root: ``python3 benchmarks/diag_geometry.py``.
"""

from __future__ import annotations

import os
import sys

import cupy
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_gpu import copy_bandwidth, make, nbytes, queued_us  # noqa: E402

import scanarray  # noqa: E402

SRC = r"""
#ifdef NORES
#define RES
#else
#define RES __restrict__
#endif
#ifdef IDX64
typedef long long idx_t;
#else
typedef int idx_t;
#endif
struct P { float A, B; };
__device__ __forceinline__ P comp(P n, P o) { return P{n.A * o.A, fmaf(n.A, o.B, n.B)}; }

template <int NT, int MINB>
__global__ void __launch_bounds__(NT, MINB)
geo(const float* RES a, const float* RES b, float* RES out, idx_t T, int half) {
  __shared__ P s_w[32];
  __shared__ float s_h[2];  // the state entering the tile, by tile parity
  __shared__ int s_bad[32];
  __shared__ int s_slow;
  const int tid = threadIdx.x, w = tid >> 5, lane = tid & 31;
#ifdef ORDER
  const idx_t row = (idx_t)(blockIdx.x & 1) * half + (blockIdx.x >> 1);
#else
  const idx_t row = blockIdx.x;
#endif
  const float4* pa = reinterpret_cast<const float4*>(a + row * T);
  const float4* pb = reinterpret_cast<const float4*>(b + row * T);
  float4* po = reinterpret_cast<float4*>(out + row * T);
  if (tid == 0) s_h[0] = 0.0f;
  int cur = 0;
#ifdef PF
  // the next tile's vectors are loaded before the barrier that ends the current tile
  float4 na = pa[tid], nb = pb[tid];
#endif
#ifdef EARLY
  // the next tile's vectors are loaded as soon as this tile is stored, into the same registers
  float4 va = pa[tid], vb = pb[tid];
#endif
  for (idx_t base = 0; base < T / 4; base += NT, cur ^= 1) {
#ifdef PF
    const float4 va = na, vb = nb;
    if (base + NT < T / 4) {
      na = pa[base + NT + tid];
      nb = pb[base + NT + tid];
    }
    if (base) __syncthreads();
#elif defined(EARLY)
    if (base) __syncthreads();
#else
    if (base) __syncthreads();
    const float4 va = pa[base + tid], vb = pb[base + tid];
#endif
    P x{va.x, vb.x};
    x = comp(P{va.y, vb.y}, x);
    x = comp(P{va.z, vb.z}, x);
    x = comp(P{va.w, vb.w}, x);
#ifndef CARRY_ALL
    // fpscan's way: thread 0 folds the entering state into its pair; nobody else reads it
    float h0v = 0.0f;
    if (tid == 0) {
      h0v = s_h[cur];
      x = comp(x, P{0.0f, h0v});
    }
#endif
#ifdef BAD
    float acc = fmaf(va.x, 0.f, fmaf(va.y, 0.f, fmaf(va.z, 0.f, fmaf(va.w, 0.f, 0.f))));
    acc = fmaf(vb.x, 0.f, fmaf(vb.y, 0.f, fmaf(vb.z, 0.f, fmaf(vb.w, 0.f, acc))));
    const int bad = __any_sync(0xffffffffu, acc != acc);
#endif
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
      P o{__shfl_up_sync(0xffffffffu, x.A, d), __shfl_up_sync(0xffffffffu, x.B, d)};
      if (lane >= d) x = comp(x, o);
    }
    if (lane == 31) {
      s_w[w] = x;
#ifdef BAD
      s_bad[w] = bad;
#endif
    }
    __syncthreads();
    if (w == 0) {
      P y = lane < NT / 32 ? s_w[lane] : P{1.f, 0.f};
#ifdef BAD
      const int tb = __any_sync(0xffffffffu, lane < NT / 32 && s_bad[lane]);
#endif
#pragma unroll
      for (int d = 1; d < 32; d <<= 1) {
        P o{__shfl_up_sync(0xffffffffu, y.A, d), __shfl_up_sync(0xffffffffu, y.B, d)};
        if (lane >= d) y = comp(y, o);
      }
      s_w[lane] = y;
#ifdef BAD
      if (lane == 0) s_slow = tb || !isfinite(s_h[cur]);
#endif
    }
    __syncthreads();
#ifdef BAD
    if (s_slow) continue;  // (the library replays here; this diagnostic's data is finite)
#endif
    P ex{__shfl_up_sync(0xffffffffu, x.A, 1), __shfl_up_sync(0xffffffffu, x.B, 1)};
    if (lane == 0) ex = P{1.f, 0.f};
    if (w > 0) ex = comp(ex, s_w[w - 1]);
#ifdef CARRY_ALL
    float s = fmaf(ex.A, s_h[cur], ex.B);
#else
    float s = tid == 0 ? h0v : ex.B;
#endif
    float4 r;
    s = fmaf(va.x, s, vb.x); r.x = s;
    s = fmaf(va.y, s, vb.y); r.y = s;
    s = fmaf(va.z, s, vb.z); r.z = s;
    s = fmaf(va.w, s, vb.w); r.w = s;
#ifdef STCS
    __stcs(po + base + tid, r);
#else
    po[base + tid] = r;
#endif
    if (tid == NT - 1) s_h[cur ^ 1] = s;
#ifdef EARLY
    if (base + NT < T / 4) {
      va = pa[base + NT + tid];
      vb = pb[base + NT + tid];
    }
#endif
  }
}
"""

# (label, -D flags, (threads, min blocks a SM))
VARIANTS = [("BASE", (), (1024, 2)), ("IDX64+BAD+CARRY_ALL", ("-DIDX64", "-DBAD", "-DCARRY_ALL"), (1024, 2)),
            ("EARLY", ("-DEARLY",), (1024, 2)), ("EARLY+IDX64+BAD+CARRY_ALL", ("-DEARLY", "-DIDX64", "-DBAD",
                                                                             "-DCARRY_ALL"), (1024, 2)),
            ("EARLY 512x4", ("-DEARLY",), (512, 4)), ("PF 512x3", ("-DPF",), (512, 3)),
            ("EARLY 768x2", ("-DEARLY",), (768, 2)),
            ("EARLY+IDX64+BAD+CARRY_ALL+NORES", ("-DEARLY", "-DIDX64", "-DBAD", "-DCARRY_ALL", "-DNORES"), (1024, 2)),
            ("NORES", ("-DNORES",), (1024, 2))]
WORK = [((2, 256, 65536), 2), ((4, 64, 262144), 1), ((2, 256, 4096), 2)]


def fpscan_ext():
    """fpscan's compiled extension (``fullscan_forward(a, b, out, reverse)`` on torch tensors), or
    None where it is not built."""
    try:
        import fpscan

        return fpscan.ops._load_extension()
    except Exception as exc:  # noqa: BLE001 - the peer is optional
        print(f"fpscan unavailable: {type(exc).__name__}: {exc}")
        return None


def reporter(lines, label, out, ref, nb, copy_bw):
    """``report(name, fn)``: times ``fn`` (which writes ``out``) with its launches queued, checks
    ``out`` against ``ref`` and appends a table row to ``lines``."""
    scale = float(cupy.abs(ref).max())

    def report(name, fn):
        out.fill(0)
        us = queued_us(fn)
        diff = float(cupy.abs(out - ref).max()) / scale
        gbs = nb / (us * 1e-6) / 1e9
        lines.append(f"| {label} | {name} | {gbs:.0f} | {100 * gbs / copy_bw:.1f} | {diff:.1e} |")
        print(lines[-1], flush=True)

    return report


def report_fpscan(report, ext, a, b, out):
    """fpscan's row of the table, on the same arrays, where it is built and takes the length."""
    if ext is None or a.shape[-1] > 65536:  # fpscan takes 32 to 65536 steps
        return
    import torch

    ta, tb, to = (torch.from_dlpack(x) for x in (a, b, out))
    report("fpscan", lambda: ext.fullscan_forward(ta, tb, to, False))


def main():
    copy_bw = copy_bandwidth(7)
    rng = np.random.default_rng(0)
    lines = [f"copy {copy_bw:.0f} GB/s; float32, kernels queued",
             "| workload | kernel | GB/s | % copy | max diff / max abs |", "|---|---|---|---|---|"]
    mods = {}
    for name, opts, (nt, minb) in VARIANTS:
        expr = f"geo<{nt}, {minb}>"
        mods[name] = (cupy.RawModule(code=SRC, options=("-std=c++17",) + opts, name_expressions=[expr])
                      .get_function(expr), np.int64 if "-DIDX64" in opts else np.int32, nt)
    ext = fpscan_ext()
    for shape, rounds in WORK:
        a_h, b_h = make(shape, -1, "float32", "full", rng)
        a, b = cupy.asarray(a_h), cupy.asarray(b_h)
        out = cupy.empty_like(b)
        nb = nbytes(a, b)
        ref = scanarray.linear_recurrence(a, b, backend="cupy", method="lookback")
        T, rows = shape[-1], shape[0] * shape[1]
        label = str(shape).replace(" ", "")

        report = reporter(lines, label, out, ref, nb, copy_bw)

        for _ in range(rounds):
            for name, (fn, idx, nt) in mods.items():
                if T % (4 * nt):
                    continue
                report(f"minimal {name}",
                       lambda fn=fn, idx=idx: fn((rows,), (nt,), (a, b, out, idx(T), np.int32(rows // 2))))
            scanarray.linear_recurrence(a, b, out=out, backend="cupy", method="lookback")
            report("library (shipped)", lambda: scanarray.linear_recurrence(a, b, out=out, backend="cupy",
                                                                          method="lookback"))
            report_fpscan(report, ext, a, b, out)
        cupy.get_default_memory_pool().free_all_blocks()
    print("\n".join(lines))


if __name__ == "__main__":
    main()
