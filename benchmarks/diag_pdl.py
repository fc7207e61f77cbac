"""Programmatic dependent launch (Hopper PDL) on back-to-back diagonal scans (issue 4): GPU time.

Builds the planned kernel of each shape from ``scan.cu`` with two PTX instructions at the top of
every block: ``griddepcontrol.launch_dependents`` (the next kernel in the stream may start its
blocks once all of this kernel's have started) and ``griddepcontrol.wait`` (this block waits
until the previous kernel has finished and its writes are visible; a no-op when the launch did
not ask for PDL). It times, with the launches queued behind a spin kernel (the GPU's time
alone), bursts of 50 calls of:

- the shipped kernel and launch;
- the PDL build launched as usual (``cuLaunchKernel``): the instructions' own cost;
- the PDL build launched with ``CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION``
  through ``cuLaunchKernelEx``, which CuPy 14 does not wrap (``ctypes``).

Each variant's result is compared bit for bit with the shipped kernel's.

Result (H200, 2026-11-22 about 04:41 UTC, benchmarks/results/host_2026-11-22.md, H): the PDL launch
takes (2, 256, 4096) from 6.2 to 5.3 us a call, (8, 1024, 4096) 95.7 -> 93.7, one row of 2**24
73.7 -> 71.5, (2, 256, 65536) 105.4 -> 104.6, but (4, 64, 262144) 206.9 -> 222.6 us; not
adopted (the ctypes launch costs more host time than it saves on the host-bound small shapes).

Usage: python benchmarks/diag_pdl.py
"""

from __future__ import annotations

import ctypes
import os
import sys

import cupy
import numpy as np

from scanarray.backends import _cupy_common as C
from scanarray.backends import _cupy_scan

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_gpu import queued_us  # noqa: E402

SHAPES = [(2, 256, 65536), (2, 256, 4096), (8, 1024, 4096), (4, 64, 262144), (1, 1, 2**24)]
PDL = ('asm volatile("griddepcontrol.launch_dependents;" ::: "memory");\n'
       '  asm volatile("griddepcontrol.wait;" ::: "memory");\n')
# CUlaunchConfig (56 bytes: 7 unsigned, pad, stream, attrs, numAttrs) and one CUlaunchAttribute
# (72 bytes: id, pad, 64-byte value) as laid out in cuda.h (CUDA 13)
_PROGRAMMATIC_STREAM_SERIALIZATION = 6


def pdl_source():
    """scan.cu with the two instructions at the top of rows_block, rows_tiles and rows_staged."""
    src = C.read_source("scan.cu")
    head = "int vec_a, int vec_b, int vec_o, SCAN_LANE_PARAMS) {\n  constexpr int NW = NT / 32;\n  static_assert(NW <= 32"
    assert src.count(head) == 1
    src = src.replace(head, head.replace("SCAN_LANE_PARAMS) {\n", "SCAN_LANE_PARAMS) {\n  " + PDL))
    for call in ("rows_tile<TA, TB, TO, C, NT, G, NV, AC, LB, false>(", "rows_tile<TA, TB, TO, C, NT, G, NV, AC, true, true>("):
        assert src.count("  " + call) == 1, call
        src = src.replace("  " + call, "  " + PDL + "  " + call)
    return src


class PdlLaunch:
    """``cuLaunchKernelEx`` with programmatic stream serialization, through ctypes."""

    def __init__(self):
        self.fn = ctypes.CDLL("libcuda.so.1").cuLaunchKernelEx
        self.fn.argtypes = [ctypes.c_void_p] * 4
        self.fn.restype = ctypes.c_int
        self.attr = np.zeros(72, np.uint8)
        self.attr[:4].view(np.uint32)[0] = _PROGRAMMATIC_STREAM_SERIALIZATION
        self.attr[8:12].view(np.int32)[0] = 1
        self.cfg = np.zeros(56, np.uint8)

    def __call__(self, fptr, grid, threads, stream_ptr, params):
        self.cfg[:28].view(np.uint32)[:] = (grid, 1, 1, threads, 1, 1, 0)
        self.cfg[32:48].view(np.uint64)[:] = (stream_ptr, self.attr.ctypes.data)
        self.cfg[48:52].view(np.uint32)[0] = 1
        status = self.fn(self.cfg.ctypes.data, fptr, params, None)
        if status != 0:
            raise RuntimeError(f"cuLaunchKernelEx failed with CUresult {status}")


def variants(shape, src, pdl, stream):
    """``(plan, result, buffers to keep alive, {name: call})`` for one float32 shape along its last axis."""
    rs = cupy.random.RandomState(1)
    a = rs.uniform(-1, 1, shape, dtype=cupy.float32).reshape(-1, shape[-1])
    b = rs.standard_normal(shape, dtype=cupy.float32).reshape(-1, shape[-1])
    o = cupy.empty_like(b)
    plan = _cupy_scan.plan(a, b, o, np.dtype(np.float32), "lookback")
    fn = cupy.RawModule(code=src, options=C.compile_options(), name_expressions=[plan.name]).get_function(plan.name)
    ptrs = (a.data.ptr, b.data.ptr, o.data.ptr, None)
    pk = C.PackedLauncher.create(fn, plan._args(*ptrs, None))
    buf, params_arr, params = pk._new_buffers()  # params_arr: the pointers params addresses, kept alive

    def launcher(go):
        def call():
            if plan.kt > 1:  # a look-back launch: this stream's workspace, as the shipped launch takes it
                ws = _cupy_scan._workspace(cupy, plan.rec_size, plan.slots)
                with ws.launching(plan.grid):
                    pk._pack(buf, 0, *plan._args(*ptrs, ws))
                    go()
            else:
                pk._pack(buf, 0, *plan._args(*ptrs, None))
                go()
        return call

    plain = launcher(lambda: cupy.cuda.driver.launchKernel(pk._fptr, plan.grid, 1, 1, plan.threads, 1, 1, 0,
                                                           stream.ptr, params, 0))
    ex = launcher(lambda: pdl(pk._fptr, plan.grid, plan.threads, stream.ptr, params))
    keep = (buf, params_arr)
    return plan, o, keep, {"shipped": lambda: plan.launch(cupy, a, b, o, None), "PDL build, plain launch": plain,
                     "PDL build, PDL launch": ex}


def main():
    src, pdl = pdl_source(), PdlLaunch()
    stream = cupy.cuda.get_current_stream()
    print("| shape | kernel | shipped us | PDL build, plain launch | PDL build, PDL launch | bit-identical |")
    print("|---|---|---|---|---|---|")
    for shape in SHAPES:
        plan, o, _keep, calls = variants(shape, src, pdl, stream)
        ref = None
        times, same = {}, True
        for _ in range(2):  # two alternations; the best of each
            for name, call in calls.items():
                o.fill(0)
                call()
                stream.synchronize()
                ref = o.copy() if ref is None else ref
                same &= bool((o == ref).all())
                times[name] = min(times.get(name, 1e9), queued_us(call))
        print(f"| {shape} | {plan.kind} {plan.grid}x{plan.threads} | " +
              " | ".join(f"{t:.1f}" for t in times.values()) + f" | {same} |", flush=True)


if __name__ == "__main__":
    main()
