#!/usr/bin/env python3
"""How near memory speed can any kernel get on the long-row and time-major workloads (issue 4)?

Issue 4 measures every workload against the device's copy bandwidth, taken from a 1 GiB
device-to-device copy. This script times, in one process, kernels that move the same bytes
without the scan's dependences, so that what the look-back costs is told apart from what the
size of the problem costs:

- ``add, CuPy``: ``h = a + b`` as a CuPy elementwise kernel (reads a and b, writes h: the bytes
  of the scan);
- ``add, 16-byte``: the same with 16-byte loads and stores, one wave of blocks striding over the
  arrays (a bandwidth probe written for this script);
- ``CUB cumsum``: CuPy's CUB scan (``cupy.cuda.cub.cub_scan``, ``DeviceScan::InclusiveSum``), a
  single-pass decoupled look-back scan of one array (reads x, writes y);
- ``ours``: the planned scan kernel alone.

GB/s = bytes read + written / median time per call over bursts of 10 (CUDA events).
Usage: python benchmarks/diag_ceiling.py   (on the GPU)
"""

from __future__ import annotations

import cupy
import numpy as np
from bench_gpu import copy_bandwidth, kernel_only, timed_burst

GB = 1e9

_ADD16 = r"""
extern "C" __global__ void add16(const float4* __restrict__ a, const float4* __restrict__ b,
                                 float4* __restrict__ h, long long n4) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n4;
       i += (long long)gridDim.x * blockDim.x) {
    const float4 x = a[i], y = b[i];
    h[i] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
  }
}"""


def main():
    copy = copy_bandwidth(11)
    add = cupy.ElementwiseKernel("float32 a, float32 b", "float32 h", "h = a + b", "scanarray_diag_add")
    add16 = cupy.RawKernel(_ADD16, "add16")
    sms = cupy.cuda.Device().attributes["MultiProcessorCount"]
    rng = np.random.default_rng(0)
    lines = [f"copy bandwidth (1 GiB device-to-device, read + written): {copy:.0f} GB/s", "",
             "| elements | layout | kernel | GB/s | % copy | µs per call |", "|---|---|---|---|---|---|"]

    def row(n, layout, name, fn, nb):
        ms, _ = timed_burst(fn, 15)
        bw = nb / (ms * 1e-3) / GB
        lines.append(f"| {n} | {layout} | {name} | {bw:.0f} | {100 * bw / copy:.1f} | {ms * 1e3:.1f} |")
        print(lines[-1], flush=True)

    def measure(e):
        n = 2**e
        a = cupy.asarray(0.9 + 0.1 * rng.random(n, dtype=np.float32))
        b = cupy.asarray(rng.standard_normal(n, dtype=np.float32))
        h = cupy.empty_like(b)
        label = f"2**{e}"
        row(label, "one row", "add, CuPy", lambda: add(a, b, h), 12 * n)
        n4 = n // 4
        grid = min((n4 + 255) // 256, sms * 8)
        row(label, "one row", "add, 16-byte", lambda: add16((grid,), (256,), (a, b, h, np.int64(n4))), 12 * n)
        try:
            from cupy.cuda import cub
        except ImportError as exc:  # the CUB module is optional in CuPy builds
            print(f"CUB unavailable: {exc}")
        else:
            x = b.copy()  # the scan runs in place
            row(label, "one row", "CUB cumsum (8 bytes/element)", lambda: cub.cub_scan(x, cub.CUPY_CUB_CUMSUM), 8 * n)
        row(label, "one row", "ours (kernel alone)", kernel_only(a.reshape(1, n), b.reshape(1, n), h.reshape(1, n), -1,
                                                                 "lookback"), 12 * n)
        if e == 28:  # the time-major workload: (65536, 4096) C order along axis 0
            a2, b2, h2 = (x.reshape(65536, 4096) for x in (a, b, h))
            row(label, "time-major (65536,4096) ax0", "ours (kernel alone)", kernel_only(a2, b2, h2, 0, "lookback"),
                12 * n)

    for e in (24, 26, 28):
        measure(e)
        cupy.get_default_memory_pool().free_all_blocks()
    print("\n".join(lines))


if __name__ == "__main__":
    main()
