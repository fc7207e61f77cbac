"""CPU benchmark of the numba and NumPy backends against this machine's copy and plain numba loops.

Run ``python benchmarks/bench_cpu.py`` (``--quick`` for smaller arrays, ``--only rows,dense`` for
some sections). It prints one markdown table; ``--out FILE`` also writes it there with the
machine, the date and the command.

Every figure is the median of interleaved repeats, each paired with its baseline measured right
before it in the same process (the copy for bandwidth-bound workloads, a plain numba loop for the
others); the ratio column is the median of the per-pair ratios, so a machine shared with other
jobs slows both members of a pair alike. Calls write into preallocated, already touched arrays.
Each section runs in a fresh process.

Sections:

``rows``
    Scalar scans at memory speed, against ``numpy.copyto`` of the same bytes (bytes of ``a`` and
    ``b`` read and ``h`` written, against bytes read and written by the copy):
    (1024, 65536) float64 rows along the last axis; time-major (65536, 1024) along axis 0.
``long``
    One row of 2**24 float64 (chunked over the threads) against a single-thread numba loop,
    full ``a`` (in [-1, 1) and in [0.5, 1)) and scalar ``a``; and ``a = 1`` (a running sum: the
    fix-up never stops early).
``filters``
    Scalar ``a`` on one row of 2**24 against ``scipy.signal.lfilter([1], [1, -a], x)`` and
    ``pandas.Series(x).ewm(alpha=1 - a, adjust=False).mean()``, results checked.
``dense``
    Dense recurrences of one trajectory against a plain numba loop written here (explicit loops
    on C-ordered arrays): time-invariant ``A`` (n = 64, T = 2**15), time-varying ``A`` (n = 16,
    T = 2**14; n = 64, T = 2**11), float64, for ``method="auto"`` and every dense method of the
    numba and NumPy backends.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time

import numpy as np

import scanarray

REPEAT = 9
MiB = 1 << 20
SECTIONS = ("rows", "long", "filters", "dense")


def _time(fn):
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def paired(fn, base, repeat=None):
    """(median time of ``fn``, median time of ``base``, median of the per-pair ratios base / fn).

    ``base`` and ``fn`` run alternately, ``base`` first in each pair, after one warm-up call each.
    """
    repeat = repeat or REPEAT
    fn()
    base()
    tf, tb = [], []
    for _ in range(repeat):
        tb.append(_time(base))
        tf.append(_time(fn))
    return statistics.median(tf), statistics.median(tb), statistics.median(b / f for b, f in zip(tb, tf))


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
    return (
        f"{cpu}, {os.cpu_count()} logical CPUs, {platform.system()}; Python {platform.python_version()}, "
        f"NumPy {np.__version__}, numba {numba.__version__} ({numba.get_num_threads()} threads)"
    )


# --------------------------------------------------------------------------- plain loops


def plain_loops():
    """The loops a user would write with numba: one row; one dense trajectory (A time-varying or not)."""
    from numba import njit

    @njit(cache=False, nogil=True)
    def row(a, b, out):
        s = 0.0
        for t in range(b.shape[0]):
            s = a[t] * s + b[t]
            out[t] = s

    @njit(cache=False, nogil=True)
    def dense(A, b, out):
        T, n = b.shape
        h = np.zeros(n)
        for t in range(T):
            M = A[t] if A.ndim == 3 else A
            for i in range(n):
                acc = b[t, i]
                for j in range(n):
                    acc += M[i, j] * h[j]
                out[t, i] = acc
            for i in range(n):
                h[i] = out[t, i]

    return row, dense


# --------------------------------------------------------------------------- sections


def rows_section(s, rng, out_rows):
    lr = scanarray.linear_recurrence
    for name, shape, axis in [("(1024, 65536) f64 rows, axis -1", (1024, 65536 // s), -1),
                              ("time-major (65536, 1024) f64, axis 0", (65536 // s, 1024), 0)]:
        a = rng.uniform(-1, 1, shape)
        b = rng.standard_normal(shape)
        out = np.zeros(shape)
        src = np.ones(3 * b.size // 2)  # the copy moves the scan's bytes: 3 arrays = 1.5 read + 1.5 written
        dst = np.zeros_like(src)
        tf, tb, r = paired(lambda: lr(a, b, axis=axis, out=out), lambda: np.copyto(dst, src))
        out_rows.append((name, tf, f"{3 * b.nbytes / tf / 1e9:.1f} GB/s", f"{r:.2f}x of the copy",
                         f"copy {1e3 * tb:.1f} ms ({2 * src.nbytes / tb / 1e9:.1f} GB/s)"))
        del a, b, out, src, dst


def long_section(s, rng, out_rows):
    lr = scanarray.linear_recurrence
    row, _ = plain_loops()
    T = 2**24 // s
    a = rng.uniform(-1, 1, T)
    b = rng.standard_normal(T)
    out = np.zeros(T)
    ref = np.zeros(T)
    row(a, b, ref)
    a_slow = rng.uniform(0.5, 1, T)  # decays slowly: its products pass through subnormal numbers
    for name, a_in, a_loop in [("one row 2**24 f64, full a", a, a), ("one row 2**24 f64, full a in [0.5, 1)", a_slow,
                                                                      a_slow),
                               ("one row 2**24 f64, scalar a = 0.9", 0.9, np.full(T, 0.9)),
                               ("one row 2**24 f64, a = 1 (running sum)", np.ones(T), np.ones(T))]:
        tf, tb, r = paired(lambda: lr(a_in, b, out=out), lambda: row(a_loop, b, ref))
        err = np.max(np.abs(out - ref)) / np.max(np.abs(ref))
        out_rows.append((name, tf, f"{3 * b.nbytes / tf / 1e9:.1f} GB/s", f"{r:.2f}x the loop",
                         f"single-thread loop {1e3 * tb:.1f} ms; max rel. diff {err:.0e}"))


def filters_section(s, rng, out_rows):
    import pandas as pd
    import scipy.signal

    lr = scanarray.linear_recurrence
    T = 2**24 // s
    av = 0.9
    x = rng.standard_normal(T)
    out = np.zeros(T)
    y = scipy.signal.lfilter([1.0], [1.0, -av], x)
    tf, tb, r = paired(lambda: lr(av, x, out=out), lambda: scipy.signal.lfilter([1.0], [1.0, -av], x), repeat=3)
    err = np.max(np.abs(out - y)) / np.max(np.abs(y))
    out_rows.append(("scalar a, one row 2**24 f64", tf, "", f"{r:.1f}x scipy.signal.lfilter",
                     f"lfilter {1e3 * tb:.0f} ms; max rel. diff {err:.0e}"))
    alpha = 1.0 - av
    series = pd.Series(x)
    bx = np.empty_like(x)

    def ewm():  # pandas' y[t] = (1 - alpha) y[t-1] + alpha x[t], y[0] = x[0]; the scaling pass timed too
        np.multiply(x, alpha, out=bx)
        return lr(av, bx, initial=x[0], out=bx)

    ewm()
    y = series.ewm(alpha=alpha, adjust=False).mean().to_numpy()
    err = np.max(np.abs(bx - y)) / np.max(np.abs(y))
    tf, tb, r = paired(ewm, lambda: series.ewm(alpha=alpha, adjust=False).mean(), repeat=3)
    out_rows.append(("ewm: b = alpha x, then the scan in place", tf, "", f"{r:.1f}x pandas ewm",
                     f"pandas {1e3 * tb:.0f} ms; max rel. diff {err:.0e}"))


def dense_section(s, rng, out_rows):
    from scanarray import _registry

    lr = scanarray.linear_recurrence
    _, loop = plain_loops()
    for name, n, T, invariant in [("dense, A (n, n), n = 64, T = 2**15", 64, 2**15 // s, True),
                                  ("dense, A (T, n, n), n = 16, T = 2**14", 16, 2**14 // s, False),
                                  ("dense, A (T, n, n), n = 64, T = 2**11", 64, 2**11 // s, False)]:
        shape = (n, n) if invariant else (T, n, n)
        A = rng.standard_normal(shape)
        A *= 0.95 / np.linalg.norm(A, ord=2, axis=(-2, -1))[..., None, None]
        b = rng.standard_normal((T, n))
        out = np.zeros((T, n))
        ref = np.zeros((T, n))
        loop(A, b, ref)
        for backend in ("numba", "numpy"):
            for method in ("auto",) + _registry.BACKENDS[backend].dense_methods:
                if backend == "numpy" and method == "prefix" and T * n**3 > 2**26:
                    continue  # T n^3 log T: minutes
                call = lambda: lr(A, b, axis=0, dense=True, out=out, backend=backend, method=method)  # noqa: E731
                tf, tb, r = paired(call, lambda: loop(A, b, ref), repeat=5)
                err = np.max(np.abs(out - ref)) / np.max(np.abs(ref))
                chosen = ""
                if method == "auto":
                    from scanarray import _api

                    chosen = f" -> {_chosen(_api, A, b, backend)}"
                out_rows.append((f"{name}: {backend} {method}{chosen}", tf, "", f"{r:.2f}x the loop",
                                 f"plain numba loop {1e3 * tb:.2f} ms; max rel. diff {err:.0e}"))


def _chosen(_api, A, b, backend):
    """The method ``auto`` resolves to for this dense call (asked of the backend's own rule)."""
    from scanarray import _registry

    seen = {}
    mod = _registry.load(backend)
    real = mod.auto_method

    def spy(p):
        seen["m"] = real(p)
        return seen["m"]

    mod.auto_method = spy
    try:
        scanarray.linear_recurrence(A, b, axis=0, dense=True, backend=backend)
    finally:
        mod.auto_method = real
    return seen["m"]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="arrays 16x smaller (a smoke run)")
    ap.add_argument("--only", default=",".join(SECTIONS), help=f"comma-separated sections of {SECTIONS}")
    ap.add_argument("--repeat", type=int, default=None, help=f"pairs per workload (default {REPEAT})")
    ap.add_argument("--out", default=None, help="also write the table, machine, date and command to this file")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.repeat:
        globals()["REPEAT"] = args.repeat
    s = 16 if args.quick else 1
    load0 = os.getloadavg()
    sections = args.only.split(",")
    rows = []
    if args.child:
        globals()[f"{sections[0]}_section"](s, np.random.default_rng(0), rows)
        print(json.dumps(rows))
        return
    for section in sections:
        # each section in a process of its own: numba's OpenMP threads, which spin a while after
        # every parallel region, and OpenBLAS's would otherwise slow the next section's calls
        cmd = [sys.executable, __file__, "--child", "--only", section] + (["--quick"] if args.quick else [])
        cmd += ["--repeat", str(REPEAT)]
        res = subprocess.run(cmd, capture_output=True, text=True, check=True)
        rows += [tuple(r) for r in json.loads(res.stdout.strip().splitlines()[-1])]
    lines = ["| workload | time (ms) | bandwidth | against the baseline (median of pairs) | notes |",
             "|---|---:|---:|---:|---|"]
    lines += [f"| {n} | {1e3 * t:.2f} | {bw} | {r} | {note} |" for n, t, bw, r, note in rows]
    table = "\n".join(lines)
    load1 = os.getloadavg()
    print(table)
    print(f"\nload average before {tuple(round(x, 1) for x in load0)}, after {tuple(round(x, 1) for x in load1)}")
    if args.out:
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        with open(args.out, "w") as f:
            f.write(f"Measured {stamp} on {machine()}, with `python benchmarks/bench_cpu.py "
                    f"{' '.join(argv if argv is not None else sys.argv[1:])}`; load average before "
                    f"{tuple(round(x, 1) for x in load0)}, after {tuple(round(x, 1) for x in load1)}.\n\n{table}\n")


if __name__ == "__main__":
    main()
