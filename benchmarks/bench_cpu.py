"""CPU benchmark of the numba backend against this machine's copy bandwidth and against SciPy/pandas.

Run ``python benchmarks/bench_cpu.py`` (``--quick`` for smaller arrays). It
prints a markdown table and writes it, with the machine and the date, to
``docs/benchmarks/cpu.md``.

Effective bandwidth = (bytes of ``a`` read + ``b`` read + ``h`` written) / time
(a scalar ``a`` counts 0 bytes), next to the copy bandwidth of the same run:
``numpy.copyto`` of a 512 MiB array, counted as bytes read + bytes written.
Every timing is the best of ``REPEAT`` calls into a preallocated, already
touched ``out`` (so page faults of a fresh result are not timed; the copy is
timed the same way). Workloads (issue 3):

1. (1024, 65536) float64, full-size ``a``, along the last axis;
2. one row of 2**24 float64, full ``a``: the chunked path against a
   single-thread numba loop;
3. time-major (65536, 1024) float64 along axis 0 (lanes contiguous): read in
   place, against the transposing-copy strategy;
4. scalar ``a`` on one row of 2**24 float64 against
   ``scipy.signal.lfilter([1], [1, -a], x)`` and
   ``pandas.Series(x).ewm(alpha=1 - a, adjust=False).mean()``; results checked.

Workloads 2 and 4 also time both chunked schemes of the numba backend
(scan-then-fix-up, the default, and reduce-then-scan, forced through
``numba_backend.CHUNKED_SCHEME``) on decaying ``a`` and on ``a = 1`` (a
running sum, where the fix-up never stops early), and workload 4 the ewm with
the scan written in place (``out=b``).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

import scanarray

REPEAT = 7
MiB = 1 << 20


def best(fn, repeat=REPEAT):
    fn()  # warm-up: compilation, page faults
    ts = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return min(ts)


def gbs(nbytes, t):
    return nbytes / t / 1e9


def machine():
    import numba

    cpu = platform.processor() or "?"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = "?"
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemTotal"):
                mem = f"{int(line.split()[1]) / 2**20:.0f} GiB"
                break
    except OSError:
        pass
    return (
        f"{cpu}, {os.cpu_count()} logical CPUs, {mem} RAM, {platform.system()} {platform.release()}; "
        f"Python {platform.python_version()}, NumPy {np.__version__}, numba {numba.__version__} "
        f"({numba.get_num_threads()} threads, layer {numba.threading_layer()})"
    )


def single_thread_loop():
    from numba import njit

    @njit(cache=False, nogil=True)
    def loop(a, b, out):
        s = 0.0
        for t in range(b.shape[0]):
            s = a[t] * s + b[t]
            out[t] = s

    return loop


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="arrays 16x smaller (a smoke run)")
    ap.add_argument("--no-write", action="store_true", help="do not write docs/benchmarks/cpu.md")
    ap.add_argument("--doc", default=None, help="where to write the markdown (default docs/benchmarks/cpu.md)")
    ap.add_argument("--repeat", type=int, default=None, help=f"best of how many calls (default {REPEAT})")
    args = ap.parse_args(argv)
    if args.repeat:
        globals()["REPEAT"] = args.repeat
    s = 16 if args.quick else 1
    load0 = os.getloadavg()
    rng = np.random.default_rng(0)
    rows = []

    def row(name, nbytes, t, ref=None, note=""):
        rows.append((name, t, gbs(nbytes, t) if nbytes else None, ref, note))

    # --- copy bandwidth -----------------------------------------------------
    src = np.ones(512 * MiB // 8 // s)
    dst = np.empty_like(src)
    dst[...] = 0
    t_copy = best(lambda: np.copyto(dst, src))
    copy_bw = gbs(2 * src.nbytes, t_copy)
    del src, dst
    rows.append(("copy: numpy.copyto 512 MiB" if s == 1 else f"copy: numpy.copyto {512 // s} MiB",
                 t_copy, copy_bw, None, "read + write"))

    lr = scanarray.linear_recurrence

    # --- 1. (1024, 65536) full a --------------------------------------------
    shape = (1024, 65536 // s)
    a = rng.uniform(-1, 1, shape)
    b = rng.standard_normal(shape)
    out = np.zeros(shape)
    t1 = best(lambda: lr(a, b, out=out))
    row(f"1. {shape} f64, full a, axis -1", 3 * b.nbytes, t1, t1, "auto: sequential, lanes in parallel")
    del a, b, out

    # --- 2. one row of 2**24, full a ---------------------------------------
    T = 2**24 // s
    a = rng.uniform(-1, 1, T)
    b = rng.standard_normal(T)
    out = np.zeros(T)
    loop = single_thread_loop()
    t_loop = best(lambda: loop(a, b, out))
    ref_loop = out.copy()
    t2 = best(lambda: lr(a, b, out=out))
    err = np.max(np.abs(out - ref_loop)) / np.max(np.abs(ref_loop))
    row(f"2. one row 2**{int(np.log2(T))} f64, full a", 3 * b.nbytes, t2, t2, f"auto: chunked (scan-then-fix-up); max rel. diff to loop {err:.1e}")
    row("   single-thread numba loop (baseline)", 3 * b.nbytes, t_loop, t2)
    t2s = best(lambda: lr(a, b, out=out, method="sequential"))
    row("   method='sequential' (one lane, one thread)", 3 * b.nbytes, t2s, t2)
    from scanarray.backends import numba_backend as nb

    def forced(scheme, fn, superblock=None):
        """Time ``fn`` with the chunked scheme (and superblock length) forced."""
        saved = nb.CHUNKED_SCHEME, nb.SUPERBLOCK
        nb.CHUNKED_SCHEME = scheme
        nb.SUPERBLOCK = superblock or nb.SUPERBLOCK
        try:
            return best(fn)
        finally:
            nb.CHUNKED_SCHEME, nb.SUPERBLOCK = saved

    t2r = forced("reduce", lambda: lr(a, b, out=out, method="chunked"))
    row("   chunked, reduce-then-scan (forced; 5 streams)", 3 * b.nbytes, t2r, t2)
    # cache-blocked: pass 2 reads a and b from L3 (not the default: docs/numba.md)
    t2p = forced("reduce", lambda: lr(a, b, out=out, method="chunked"), 1 << 20)
    row("   chunked, reduce-then-scan, superblocks of 2**20 steps", 3 * b.nbytes, t2p, t2)
    # |a| >= 1 throughout (a running sum): the carry never fades, the fix-up runs to the end
    ones = np.ones(T)
    t2f1 = forced("fixup", lambda: lr(ones, b, out=out, method="chunked"))
    row("   a = 1 everywhere (full array): scan-then-fix-up, fix-up in full", 3 * b.nbytes, t2f1, t2f1,
        "auto takes this for time-varying a")
    t2r1 = forced("reduce", lambda: lr(ones, b, out=out, method="chunked"))
    row("   a = 1 everywhere (full array): reduce-then-scan", 3 * b.nbytes, t2r1, t2f1)
    del a, b, out, ref_loop, ones

    # --- 3. time-major (65536, 1024) along axis 0 ---------------------------
    shape = (65536 // s, 1024)
    a = rng.uniform(-1, 1, shape)
    b = rng.standard_normal(shape)
    out = np.zeros(shape)
    t3 = best(lambda: lr(a, b, axis=0, out=out))
    row(f"3. time-major {shape} f64 along axis 0", 3 * b.nbytes, t3, t3, "auto: in place, blocks of lanes")
    ref3 = out.copy()
    aT, bT, oT = np.empty(shape[::-1]), np.empty(shape[::-1]), np.empty(shape[::-1])

    def transposing():
        # the other strategy: transpose into lane-major copies, scan rows, transpose back
        np.copyto(aT, a.T)
        np.copyto(bT, b.T)
        lr(aT, bT, out=oT)
        np.copyto(out, oT.T)

    t3c = best(transposing, repeat=2)
    assert np.array_equal(out, ref3)
    row("   transposing copy + row scan + copy back", 3 * b.nbytes, t3c, t3)
    del a, b, out, aT, bT, oT, ref3

    # --- 4. scalar a on one row: scipy.signal.lfilter, pandas ewm ------------
    import pandas as pd
    import scipy
    import scipy.signal

    T = 2**24 // s
    av = 0.9
    x = rng.standard_normal(T)
    out = np.zeros(T)
    t4 = best(lambda: lr(av, x, out=out))
    row(f"4. scalar a, one row 2**{int(np.log2(T))} f64", 2 * x.nbytes, t4, t4, "auto: chunked, scan-then-fix-up")
    t4r = forced("reduce", lambda: lr(av, x, out=out))
    row("   chunked, reduce-then-scan (forced)", 2 * x.nbytes, t4r, t4)
    t4r1 = best(lambda: lr(1.0, x, out=out))
    row("   scalar a = 1 (running sum)", 2 * x.nbytes, t4r1, t4r1, "auto: reduce-then-scan (|a| >= 1)")
    t4f1 = forced("fixup", lambda: lr(1.0, x, out=out))
    row("   scalar a = 1, scan-then-fix-up (forced; fix-up in full)", 2 * x.nbytes, t4f1, t4r1)
    lr(av, x, out=out)
    y_lf = scipy.signal.lfilter([1.0], [1.0, -av], x)
    t_lf = best(lambda: scipy.signal.lfilter([1.0], [1.0, -av], x), repeat=3)
    err_lf = np.max(np.abs(out - y_lf)) / np.max(np.abs(y_lf))
    row(f"   scipy {scipy.__version__} signal.lfilter([1], [1, -a])", 2 * x.nbytes, t_lf, t4,
        f"same result: max rel. diff {err_lf:.1e}")
    # pandas: y[t] = (1 - alpha) y[t-1] + alpha x[t], y[0] = x[0]; with a = 1 - alpha that is
    # the recurrence on b = alpha * x from initial = x[0] (h[0] = a x0 + alpha x0 = x0).
    # The scaling is inside the timed call, so scanarray does this extra pass too.
    alpha = 1.0 - av
    series = pd.Series(x)
    y_pd = series.ewm(alpha=alpha, adjust=False).mean().to_numpy()
    t_pd = best(lambda: series.ewm(alpha=alpha, adjust=False).mean(), repeat=3)
    bx = np.empty_like(x)

    def ewm():
        np.multiply(x, alpha, out=bx)
        return lr(av, bx, initial=x[0], out=out)

    t4e = best(ewm)
    err_pd = np.max(np.abs(out - y_pd)) / np.max(np.abs(y_pd))
    row("   scanarray as ewm: b = alpha*x (timed), initial = x[0]", 2 * x.nbytes, t4e, t4e,
        f"same result as pandas: max rel. diff {err_pd:.1e}")
    row(f"   pandas {pd.__version__} Series.ewm(alpha=1-a, adjust=False).mean()", 2 * x.nbytes, t_pd, t4e)

    def ewm_in_place():
        np.multiply(x, alpha, out=bx)
        return lr(av, bx, initial=x[0], out=bx)

    t4i = best(ewm_in_place)
    assert np.max(np.abs(bx - y_pd)) <= 1e-12 * np.max(np.abs(y_pd))
    row("   scanarray as ewm, scan in place (out=b: no second buffer)", 2 * x.nbytes, t4i, t4i,
        f"pandas / this: {t_pd / t4i:.2f}x")

    # --- table ---------------------------------------------------------------
    lines = [
        "| workload | time (ms) | effective GB/s | % of copy | speed-up of scanarray | notes |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for name, t, bw, ref, note in rows:
        pct = f"{100 * bw / copy_bw:.0f}%" if bw is not None else ""
        sp = f"{t / ref:.2f}x" if ref is not None and ref != t else ""
        lines.append(f"| {name} | {1e3 * t:.1f} | {bw:.1f} | {pct} | {sp} | {note} |")
    table = "\n".join(lines)
    load1 = os.getloadavg()
    print(table)
    print(f"\nload average (1, 5, 15 min) before: {load0}, after: {load1}")

    if not args.no_write and not args.quick:
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        doc = Path(args.doc) if args.doc else Path(__file__).resolve().parents[1] / "docs" / "benchmarks" / "cpu.md"
        doc.parent.mkdir(parents=True, exist_ok=True)
        doc.write_text(
            "# CPU benchmark (numba backend)\n\n"
            f"Measured {stamp} with `python benchmarks/bench_cpu.py`.\n\n"
            f"Machine: {machine()}.\n\n"
            f"Load average (1, 5, 15 min) before the run {tuple(round(x, 1) for x in load0)}, after "
            f"{tuple(round(x, 1) for x in load1)} (this run itself adds up to ~1; above that other jobs shared "
            "the cores, and parallel rows are pessimistic).\n\n"
            "Effective bandwidth = (bytes of `a` read + `b` read + `h` written) / time; a scalar `a` "
            "counts 0 bytes. Copy bandwidth = (bytes read + written) / time of `numpy.copyto`, same run. "
            f"Best of {REPEAT} calls (3 for SciPy and pandas) into a preallocated `out`. "
            "'speed-up of scanarray' = that row's time / scanarray's time on the same workload.\n\n"
            + table + "\n"
        )
        print(f"\nwritten to {doc}", file=sys.stderr)


if __name__ == "__main__":
    main()
