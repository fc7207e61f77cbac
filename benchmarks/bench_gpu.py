#!/usr/bin/env python3
"""GPU benchmark of the CuPy diagonal scan: effective bandwidth against a copy, peers, a baseline.

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
timing both orders (:func:`paired`; the "ours first" column times ours first
only, which favours fpscan). The "queued" columns time the GPU alone
(:func:`queued_us`: calls queued behind a spin kernel), which the bursts do not
where a call's host time exceeds its kernel's (small problems).

``--baseline DIR`` times another copy of the package against this one in the
same process instead: ``DIR/scanarray_base`` (tools/gpu_bench.sh makes it from a
commit), every workload below and the dense targets through the public function
(``method="auto"``), paired and interleaved bursts, the ratio of this tree's
time to the baseline's (median over rounds; below 1: faster now).

Usage: python benchmarks/bench_gpu.py [--quick] [--out DIR] [--only SUBSTR] [--baseline DIR]
Prints the table last and writes DIR/bench_gpu.md (DIR defaults to $OUT or .).
"""

from __future__ import annotations

import argparse
import datetime
import importlib
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
from scanarray import _bound  # noqa: E402

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
    a-then-b ratios alone (it favours ``b``)."""
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


def kernel_only(a, b, out, axis, method, packed=True):
    """The launch alone (plan made once): GPU time without the public function's Python work."""
    from scanarray import _api
    from scanarray.backends.cupy import scan as _cupy_scan

    # the accumulation dtype, as the public function picks it (float32 for half-precision storage)
    dt = _api._result_dtypes(a, b, None, None)[1]
    a_arr = cupy.asarray(a, dtype=b.dtype) if np.isscalar(a) else a
    av, bv, ov = (cupy.moveaxis(cupy.broadcast_to(x, b.shape), axis, -1) for x in (a_arr, b, out))
    plan = _cupy_scan.plan(av, bv, ov, dt, method, packed=packed)

    def run():
        plan.launch(cupy, av, bv, ov, None)

    run.plan = plan
    return run


def host_overhead_us(n=200):
    """Host microseconds per call on a tiny problem: public function (its launch bound to the
    repeated signature, and the full path), backend driver, launch."""
    from scanarray._problem import Problem
    from scanarray.backends.cupy import scan as _cupy_scan

    b = cupy.ones((4, 64), cupy.float32)
    a = cupy.full((4, 64), 0.5, cupy.float32)
    out = cupy.empty_like(b)
    prob = Problem(xp=cupy, kind="cupy", a=a, b=b, initial=None, out=out, dtype=np.dtype(np.float32),
                   out_dtype=np.dtype(np.float32), reverse=False, dense=False, chunk=64, method="lookback",
                   backend="cupy")
    res = {}

    def api():
        scanarray.linear_recurrence(a, b, out=out, backend="cupy")

    for name, f, fast in (("api", api, True), ("api full path", api, False),
                          ("driver", lambda: _cupy_scan.linear_recurrence(prob), True),
                          ("launch", kernel_only(a, b, out, -1, "lookback"), True),
                          # the same launch through CuPy's RawKernel call instead of the packed parameter buffer
                          ("launch via RawKernel call", kernel_only(a, b, out, -1, "lookback", packed=False), True)):
        _bound.CALLS.enabled = fast
        for _ in range(5):
            f()
        cupy.cuda.Device().synchronize()
        t = time.perf_counter()
        for _ in range(n):
            f()
        res[name] = (time.perf_counter() - t) / n * 1e6
        cupy.cuda.Device().synchronize()
    _bound.CALLS.enabled = True
    return res


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


# dense targets of the baseline comparison: (label, (lanes, T, n), dtype); "auto" picks lookback, chunked
# (products on warpgroup MMAs), sequential (a warp a lane and a block a lane), cyclic reduction
DENSE_TARGETS = [
    ("dense (64,1024,16)", (64, 1024, 16), "float32"),
    ("dense (8,4096,64)", (8, 4096, 64), "float32"),
    ("dense (4,4096,16)", (4, 4096, 16), "float32"),
    ("dense (16,1024,128)", (16, 1024, 128), "float32"),
    ("dense f64 (64,1024,16)", (64, 1024, 16), "float64"),
]


def load_baseline(path):
    """The package ``scanarray_base`` under ``path`` (a copy of scanarray as of another commit)."""
    sys.path.insert(0, os.path.abspath(path))
    base = importlib.import_module("scanarray_base")
    assert os.path.dirname(base.__file__) != os.path.dirname(scanarray.__file__)
    return base


def compare(base, reps, log, only=None):
    """Rows ``(workload, method, new / old time, new GB/s, old GB/s)``: every workload of :data:`WORKLOADS`
    and :data:`DENSE_TARGETS` through both packages' public function (``method="auto"``), paired
    interleaved bursts (:func:`paired`: each round both orders), after checking that both agree."""
    rng = np.random.default_rng(1)
    rows = []
    cases = [(w[0], "diag", w[1:]) for w in WORKLOADS] + [(d[0], "dense", d[1:]) for d in DENSE_TARGETS]
    for label, kind, spec in cases:
        if only and not any(o in label for o in only.split(";")):
            continue
        t0 = time.perf_counter()
        try:
            if kind == "diag":
                shape, axis, dtype, a_kind = spec
                a_h, b_h = make(shape, axis, dtype, a_kind, rng)
                a = a_h if np.isscalar(a_h) else cupy.asarray(a_h)
                b = cupy.asarray(b_h)
                del a_h, b_h
                kw = dict(axis=axis)
                nb = nbytes(a, b)
            else:
                (lanes, T, n), dtype = spec
                a = cupy.asarray((rng.standard_normal((lanes, T, n, n)) * (0.9 / (2 * n**0.5 + 1))).astype(dtype))
                b = cupy.asarray(rng.standard_normal((lanes, T, n)).astype(dtype))
                kw = dict(dense=True)
                nb = a.nbytes + 2 * b.nbytes
            outs = [cupy.empty_like(b), cupy.empty_like(b)]

            def call(pkg, out):
                return lambda: pkg.linear_recurrence(a, b, out=out, backend="cupy", **kw)

            new, old = call(scanarray, outs[0]), call(base, outs[1])
            new(), old()  # compile, and bind the signature
            cupy.cuda.Device().synchronize()
            diff = float(cupy.max(cupy.abs(outs[0] - outs[1])) / max(float(cupy.max(cupy.abs(outs[1]))), 1e-30))
            if not diff <= 1e-3:
                raise RuntimeError(f"this tree and the baseline disagree: relative difference {diff:.1e}")
            ratio, _ = paired(old, new, reps)
            ms_new, _ = timed_burst(new, max(3, reps // 2))
            ms_old, _ = timed_burst(old, max(3, reps // 2))
            rows.append((label, ratio, nb / (ms_new * 1e-3) / GB, nb / (ms_old * 1e-3) / GB))
            log(f"compare {label}: new/old {ratio:.3f}, new {rows[-1][2]:.0f} GB/s, old {rows[-1][3]:.0f} GB/s, "
                f"agree to {diff:.0e} ({time.perf_counter() - t0:.0f} s)")
        except Exception:
            log(f"compare {label}: FAILED\n{traceback.format_exc()}")
            rows.append((label, float("nan"), float("nan"), float("nan")))
        cupy.get_default_memory_pool().free_all_blocks()
    return rows


def compare_table(rows, base_name):
    lines = [f"| workload | time this tree / {base_name} (median of paired bursts) | this tree GB/s | {base_name} GB/s |",
             "|---|---|---|---|"]
    lines += [f"| {w} | {r:.3f} | {gn:.0f} | {go:.0f} |" for w, r, gn, go in rows]
    worst = max((r for _, r, _, _ in rows if r == r), default=float("nan"))
    lines.append(f"\nSlowest ratio: {worst:.3f} (GB/s counts a, b read and h written; dense: A, b read, h written).")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer repetitions")
    ap.add_argument("--reps", type=int, default=0, help="repetitions per timing (median)")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--only", default=None, help="workloads whose label contains one of these ;-separated strings")
    ap.add_argument("--no-peers", action="store_true")
    ap.add_argument("--baseline", help="directory holding scanarray_base: compare this tree with it, nothing else")
    args = ap.parse_args(argv)
    reps = args.reps or (7 if args.quick else 25)
    logs = []

    def log(msg):
        print(msg, flush=True)
        logs.append(msg)

    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    device = props["name"].decode()
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    os.makedirs(args.out, exist_ok=True)
    if args.baseline:
        base = load_baseline(args.baseline)
        log(f"device: {device}; this tree {os.path.dirname(scanarray.__file__)}, baseline {os.path.dirname(base.__file__)}")
        rows = compare(base, reps, log, args.only)
        text = (f"Device: {device}; {date}; CuPy {cupy.__version__}; `python benchmarks/bench_gpu.py --baseline "
                f"{args.baseline}{' --quick' if args.quick else ''}`\n\n" + compare_table(rows, "baseline") + "\n")
        with open(os.path.join(args.out, "bench_gpu_compare.md"), "w") as fh:
            fh.write(text + "\n<!-- log\n" + "\n".join(logs) + "\n-->\n")
        print()
        print(text)
        return 0
    copy_bw = copy_bandwidth(reps)
    log(f"device: {device}; copy bandwidth (1 GiB D2D, read+write): {copy_bw:.0f} GB/s")
    host = host_overhead_us()
    host_txt = ", ".join(f"{k} {v:.0f} us" for k, v in host.items())
    log(f"host time per call (tiny problem): {host_txt}")

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
    )
    with open(os.path.join(args.out, "bench_gpu.md"), "w") as fh:
        fh.write(text + "\n<!-- log\n" + "\n".join(logs) + "\n-->\n")
    with open(os.path.join(args.out, "bench_gpu.json"), "w") as fh:
        json.dump({"device": device, "date": date, "copy_GBs": copy_bw, "rows": rows}, fh, indent=1)
    print()
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
