#!/usr/bin/env python3
"""Host time of one kernel launch through CuPy's ``driver.launchKernel``: the parameters passed
as ``kernelParams`` (one pointer per argument, what ``_cupy_common.PackedLauncher`` does) or as
one buffer through ``extra`` (``CU_LAUNCH_PARAM_BUFFER_POINTER``, its exact size), for the
bound (2, 256, 4096) float32 scan (about 30 arguments) and for a kernel of one argument; the
scan launched through ctypes (libcuda's ``cuLaunchKernel`` without CuPy) and on a non-blocking
stream; the public call; and, where torch is importable, torch's launch path (a one-element add)
and fpscan's whole call on the same arrays.

Median over rounds of ``perf_counter`` around 500 launches issued and not waited for, the stream
synchronised between rounds, the two ways alternated. The scan's output is checked against the
public function's after the ``extra`` launches. On the CUDA host: ``python3 benchmarks/diag_launch.py``.
"""

from __future__ import annotations

import ctypes
import os
import statistics
import sys

import cupy
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_gpu import host_rounds_us  # noqa: E402

import scanarray  # noqa: E402
from scanarray.backends import _cupy_scan  # noqa: E402


def extra_array(buf, size):
    """``extra`` for cuLaunchKernel: BUFFER_POINTER, &buf, BUFFER_SIZE, &size, END."""
    size_box = np.array([size], np.uint64)
    ext = np.array([1, buf.ctypes.data, 2, size_box.ctypes.data, 0], np.uint64)
    return ext, size_box


def main():
    launch = cupy.cuda.driver.launchKernel
    sp = cupy.cuda.get_current_stream().ptr
    rs = cupy.random.RandomState(1)
    a = rs.uniform(-1, 1, (2, 256, 4096), dtype=cupy.float32)
    b = rs.standard_normal((2, 256, 4096), dtype=cupy.float32)
    out = cupy.empty_like(b)
    ref = scanarray.linear_recurrence(a, b, backend="cupy", method="lookback")
    a2, b2, o2 = (x.reshape(-1, 4096) for x in (a, b, out))
    plan = _cupy_scan.plan(a2, b2, o2, np.dtype(np.float32), "lookback")
    plan.launch(cupy, a2, b2, o2, None)
    dev = cupy.cuda.runtime.getDevice()
    packed = plan.fns[dev][1]
    args = plan._args(a2.data.ptr, b2.data.ptr, o2.data.ptr, None, None)
    exact = packed._offsets[-1] + int(np.dtype(packed._pieces[-1][-1]).itemsize)
    buf, _, params = packed._new_buffers()
    packed._pack(buf, 0, *args)
    ext, keep = extra_array(buf, int(exact))
    ext_ptr = int(ext.ctypes.data)
    fptr, grid, threads = packed._fptr, plan.grid, plan.threads

    def via_params():
        launch(fptr, grid, 1, 1, threads, 1, 1, 0, sp, params, 0)

    def via_extra():
        launch(fptr, grid, 1, 1, threads, 1, 1, 0, sp, 0, ext_ptr)

    out.fill(0)
    via_extra()
    cupy.cuda.Device().synchronize()
    err = float(cupy.abs(out - ref).max() / cupy.abs(ref).max())

    k1 = cupy.RawKernel(r'extern "C" __global__ void one(float* p) { if (threadIdx.x == 0) p[0] = 1.f; }', "one")
    k1((1,), (32,), (out,))
    f1 = int(k1.kernel.ptr)
    buf1 = np.zeros(8, np.uint8)
    buf1.view(np.uint64)[0] = out.data.ptr
    par1 = np.array([buf1.ctypes.data], np.uint64)
    par1_ptr = int(par1.ctypes.data)
    ext1, keep1 = extra_array(buf1, 8)
    ext1_ptr = int(ext1.ctypes.data)

    def one_params():
        launch(f1, 1, 1, 1, 32, 1, 1, 0, sp, par1_ptr, 0)

    def one_extra():
        launch(f1, 1, 1, 1, 32, 1, 1, 0, sp, 0, ext1_ptr)

    cases = {f"scan {plan.name.split('<')[0]} ({len(args)} arguments, {int(exact)} bytes), kernelParams": via_params,
             "scan, extra (one buffer)": via_extra, "one-argument kernel, kernelParams": one_params,
             "one-argument kernel, extra": one_extra}
    # The same launch without CuPy's wrapper: libcuda's cuLaunchKernel through ctypes.
    lib = ctypes.CDLL("libcuda.so.1")
    cu_launch = lib.cuLaunchKernel
    cu_launch.restype = ctypes.c_int
    cu_launch.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
    ct_args = (fptr, grid, 1, 1, threads, 1, 1, 0, sp or None, params, None)
    assert cu_launch(*ct_args) == 0
    cases["scan, ctypes cuLaunchKernel"] = lambda: cu_launch(*ct_args)
    # The public call, bound to its signature, in the same process.
    cases["scan, public call (bound, out=)"] = lambda: scanarray.linear_recurrence(
        a, b, out=out, backend="cupy", method="lookback")
    # Peers' launch paths where torch is importable: a one-element in-place add (the dispatcher
    # and cudaLaunchKernel) and fpscan's whole call on the same arrays.
    try:
        import torch
        from diag_geometry import fpscan_ext

        tx = torch.zeros(1, device="cuda")
        cases["torch: x.add_(1) on one element"] = lambda: tx.add_(1.0)
        ext = fpscan_ext()
        if ext is not None:
            ta, tb, to = (torch.from_dlpack(x) for x in (a, b, out))
            cases["fpscan: whole call on the same arrays"] = lambda: ext.fullscan_forward(ta, tb, to, False)
    except ImportError:
        pass
    res = {k: [] for k in cases}
    # The scan on a stream of its own (non-blocking) rather than the legacy default stream.
    nbs = cupy.cuda.Stream(non_blocking=True)
    nb_key = "scan, kernelParams, on a non-blocking stream"
    res[nb_key] = []

    def on_nbs():
        launch(fptr, grid, 1, 1, threads, 1, 1, 0, nbs.ptr, params, 0)

    for _ in range(4):  # alternate
        for k, fn in cases.items():
            res[k] += host_rounds_us(fn, n=500, rounds=15)
        with nbs:
            res[nb_key] += host_rounds_us(on_nbs, n=500, rounds=15)
    cupy.cuda.Device().synchronize()
    print(f"scan through extra: max error / max |ref| = {err:.1e}")
    print("| launch | host us a call, median (min-max of rounds) |\n|---|---|")
    for k, v in res.items():
        print(f"| {k} | {statistics.median(v):.2f} ({min(v):.2f}-{max(v):.2f}) |")
    del keep, keep1


if __name__ == "__main__":
    main()
