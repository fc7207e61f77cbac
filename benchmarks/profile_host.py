#!/usr/bin/env python3
"""Host time per call of the public function on small CuPy problems, with and without the
launches bound to repeated signatures (``scanarray._api.FAST_CALLS``), and where the time goes.

On the CUDA host::

    python3 benchmarks/profile_host.py            # bound / full path table, cProfile (top 25)
    python3 benchmarks/profile_host.py --parts    # a bound diagonal call taken apart, step by step
    python3 benchmarks/profile_host.py --tsv TAG  # one line per bound call: TAG, call, median us
    bash tools/host_ab.sh REV                     # --tsv of this tree and of REV, alternated

Host time is measured with the launches issued and not waited for: the median over rounds of
``perf_counter`` around a burst of calls, the stream synchronised between rounds (problems
small enough that the GPU keeps up).
"""

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cupy  # noqa: E402
import numpy as np  # noqa: E402
from bench_dense import host_time_us  # noqa: E402
from bench_gpu import host_rounds_us, profile_host  # noqa: E402

import scanarray  # noqa: E402
from scanarray import _api  # noqa: E402

rs = cupy.random.RandomState(1)
A = (rs.standard_normal((2, 64, 16, 16)) * 0.1).astype(cupy.float32)
b = rs.standard_normal((2, 64, 16), dtype=cupy.float32)
out = cupy.empty_like(b)


def dense(method="lookback"):
    return lambda: scanarray.linear_recurrence(A, b, dense=True, backend="cupy", method=method, out=out)


a1 = cupy.full((4, 64), 0.5, cupy.float32)
b1 = cupy.ones((4, 64), cupy.float32)
o1 = cupy.empty_like(b1)
a2 = rs.uniform(-1, 1, (2, 256, 4096), dtype=cupy.float32)
b2 = rs.standard_normal((2, 256, 4096), dtype=cupy.float32)
o2 = cupy.empty_like(b2)
tm = rs.standard_normal((4096, 64), dtype=cupy.float32)

CASES = {
    "diagonal (4, 64), out=": lambda: scanarray.linear_recurrence(a1, b1, out=o1, backend="cupy"),
    "diagonal (4, 64), auto backend, new result": lambda: scanarray.linear_recurrence(a1, b1),
    "diagonal (2, 256, 4096) lookback, out=": lambda: scanarray.linear_recurrence(
        a2, b2, out=o2, backend="cupy", method="lookback"),
    "diagonal scalar a=0.9 (2, 256, 4096), reverse": lambda: scanarray.linear_recurrence(
        0.9, b2, reverse=True, backend="cupy"),
    "diagonal time-major (4096, 64) axis 0": lambda: scanarray.linear_recurrence(0.5, tm, axis=0),
    "dense lookback (2, 64, 16)": dense(),
    "dense sequential (2, 64, 16)": dense("sequential"),
}


def per_call_us(fn, n=200, rounds=25):
    """Median host µs per call of ``fn`` (launches issued, not waited for; see the module docstring)."""
    return statistics.median(host_rounds_us(fn, n, rounds))


def parts():
    """The bound call of "diagonal (2, 256, 4096) lookback, out=" from the outside in: the public
    function, its signature, the bound call, the packed launch, the driver's launch alone."""
    from scanarray.backends import _cupy_scan

    call = CASES["diagonal (2, 256, 4096) lookback, out="]
    _api._FAST.clear()
    for _ in range(3):
        call()
    (key, fast), = _api._FAST.items()
    plan = _cupy_scan.plan(a2, b2, o2, np.dtype(np.float32), "lookback")
    plan.launch(cupy, a2, b2, o2, None)
    dev = cupy.cuda.runtime.getDevice()
    go = plan.direct(dev)
    packed = plan.fns[dev][1]
    _, _, params = packed._buffers()
    launch, sp = cupy.cuda.driver.launchKernel, cupy.cuda.get_current_stream().ptr
    pa, pb, po = a2.data.ptr, b2.data.ptr, o2.data.ptr
    rows = {
        "public function, bound": call,
        "signature (_api._fast_key)": lambda: _api._fast_key(a2, b2, -1, key[10], None, False, False, None, o2,
                                                            "cupy", "lookback"),
        "signature lookup (_FAST.get)": lambda: _api._FAST.get(key),
        "bound call (Binder's call)": lambda: fast(a2, b2, None, o2),
        "packed launch (go)": lambda: go(sp, pa, pb, po, None),
        "driver launch alone (launchKernel)": lambda: launch(packed._fptr, plan.grid, 1, 1, plan.threads, 1, 1, 0, sp,
                                                            params, 0),
        "cupy.cuda.get_current_stream().ptr": lambda: cupy.cuda.get_current_stream().ptr,
        "cupy.empty((2, 256, 4096), float32)": lambda: cupy.empty((2, 256, 4096), cupy.float32),
    }
    print(f"kernel {plan.name}, grid {plan.grid} x {plan.threads}")
    print("| step | host us a call |\n|---|---|")
    for name, fn in rows.items():
        print(f"| {name} | {per_call_us(fn):.2f} |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--parts", action="store_true", help="a bound diagonal call taken apart")
    ap.add_argument("--tsv", metavar="TAG", help="one line per bound call: TAG, call, median host us")
    args = ap.parse_args()
    if args.parts:
        parts()
        return
    if args.tsv:
        print(f"profile_host: scanarray from {os.path.dirname(scanarray.__file__)}", file=sys.stderr)
        for name, fn in CASES.items():
            print(f"{args.tsv}\t{name}\t{per_call_us(fn):.2f}", flush=True)
        return
    print("| call | host us/call issued, bound | back to back | full path issued | back to back |")
    print("|---|---|---|---|---|")
    for name, fn in CASES.items():
        row = []
        for fast in (True, False):
            _api.FAST_CALLS = fast
            row += host_time_us(fn, reps=2000)
        _api.FAST_CALLS = True
        print(f"| {name} | " + " | ".join(f"{x:.1f}" for x in row) + " |")
    for name in ("diagonal (4, 64), out=", "diagonal (2, 256, 4096) lookback, out="):
        profile_host(print, 3000, CASES[name], name)
    _api.FAST_CALLS = False
    profile_host(print, 3000, CASES["diagonal (4, 64), out="], "full path")


if __name__ == "__main__":
    main()
