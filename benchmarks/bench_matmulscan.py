"""Tensor-core MatMulScan against the scalar scans, on the shapes it exists for.

Diagonal inter-chunk scan of chunked linear RNNs: ``b (BH, G, 16, 64)`` with a
per-chunk decay ``a (BH, G, 16, 1)`` scanned along ``G``; ``G`` in {64, 128, 256},
``BH`` in {1, 512}; float32, float16 and bfloat16 (when CuPy holds it). Columns:
cupy ``matmulscan`` with radix 4, 8, 16; numba_cuda ``blelloch``; cupy
``lookback``; cupy ``sequential`` (a thread per lane, a loop over time). Then
scalar ``a`` and ``a = 1`` on ``(16, 2048, 4096)`` along the last axis against
look-back and ``cupy.cumsum``.

Every timing is one public call ``scanarray.linear_recurrence(..., out=out)``
between two CUDA events on the current stream, median of ``--reps`` after
warm-up: it includes each method's host-side launch cost, which is what a
caller pays. ``floor`` is the same measurement of an empty CuPy elementwise
kernel. Bandwidth counts ``b`` read, ``a`` read, ``h`` written once. Error is
``max |h - ref| / max |ref|`` against a float64 loop over the same
(storage-rounded) inputs, on the first 64 of the ``BH`` rows.

Run on a CUDA host (``source tools/gpu_env.sh`` first)::

    python benchmarks/bench_matmulscan.py [--quick] [--out DIR]
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import statistics
import time

import numpy as np

METHODS = [
    ("matmulscan s=4", "cupy", "matmulscan", 4),
    ("matmulscan s=8", "cupy", "matmulscan", 8),
    ("matmulscan s=16", "cupy", "matmulscan", 16),
    ("s=4 no prefetch", "cupy", "matmulscan", (4, False)),
    ("blelloch (numba_cuda)", "numba_cuda", "blelloch", None),
    ("lookback", "cupy", "lookback", None),
    ("sequential", "cupy", "sequential", None),
]


def _dtypes(cupy):
    out = [("float32", np.float32), ("float16", np.float16)]
    try:
        import ml_dtypes

        cupy.zeros(4, dtype=ml_dtypes.bfloat16) + 0  # noqa: B018 - does CuPy hold and compute bf16?
        out.append(("bfloat16", ml_dtypes.bfloat16))
    except Exception as exc:  # CuPy without bfloat16
        print(f"# bfloat16 skipped: {type(exc).__name__}: {exc}")
    return out


def _time(cupy, fn, reps, warm=3):
    """Latency of one call: events around it, host-side work included (median, µs)."""
    for _ in range(warm):
        fn()
    cupy.cuda.get_current_stream().synchronize()
    s, e = cupy.cuda.Event(), cupy.cuda.Event()
    ts = []
    for _ in range(reps):
        s.record()
        fn()
        e.record()
        e.synchronize()
        ts.append(cupy.cuda.get_elapsed_time(s, e) * 1e3)  # microseconds
    return statistics.median(ts)


_SPIN = None


def _gpu_time(cupy, fn, n=20, batches=5):
    """Device time per call (µs): a spin kernel keeps the GPU busy while the host enqueues
    ``n`` calls, so the events bracket only back-to-back device work, not Python overhead.
    Returns (median µs per call, whether the host kept ahead of the device)."""
    global _SPIN
    if _SPIN is None:
        _SPIN = cupy.RawKernel(r"""
        extern "C" __global__ void spin(long long ns) {
            unsigned long long t0, t;
            asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
            do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < (unsigned long long)ns);
        }""", "spin")
    stream = cupy.cuda.get_current_stream()
    fn()
    stream.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    host = time.perf_counter() - t
    stream.synchronize()
    spin_ns = int(2 * host * 1e9) + 1_000_000
    s, e = cupy.cuda.Event(), cupy.cuda.Event()
    ts, ahead = [], True
    for _ in range(batches):
        _SPIN((1,), (1,), (np.int64(spin_ns),))
        s.record()
        t = time.perf_counter()
        for _ in range(n):
            fn()
        ahead &= (time.perf_counter() - t) * 1e9 < spin_ns
        e.record()
        e.synchronize()
        ts.append(cupy.cuda.get_elapsed_time(s, e) * 1e3 / n)
    return statistics.median(ts), ahead


def _oracle(a, b, axis):
    """float64 loop along ``axis`` (host)."""
    a = np.moveaxis(np.asarray(a, np.float64), axis, 0)
    b = np.moveaxis(np.asarray(b, np.float64), axis, 0)
    h = np.empty(np.broadcast_shapes(a.shape, b.shape))
    acc = np.zeros(h.shape[1:])
    for t in range(h.shape[0]):
        acc = a[t] * acc + b[t]
        h[t] = acc
    return np.moveaxis(h, 0, axis)


def _call(scanarray, cupy, backend, method, radix):
    if radix is None:
        return lambda a, b, axis, out: scanarray.linear_recurrence(a, b, axis, backend=backend, method=method, out=out)
    from scanarray.backends.cupy import matmulscan as _cupy_matmulscan

    r, pf = (tuple(radix) + (None,))[:2] if isinstance(radix, tuple) else (radix, None)
    real = _cupy_matmulscan.linear_recurrence

    def f(a, b, axis, out):  # the driver's radix and prefetch keywords, through the public function
        _cupy_matmulscan.linear_recurrence = functools.partial(real, radix=r, prefetch=pf)
        try:
            return scanarray.linear_recurrence(a, b, axis, backend=backend, method=method, out=out)
        finally:
            _cupy_matmulscan.linear_recurrence = real

    return f


def _fmt(x, spec):
    return "n/a" if x is None else format(x, spec)


def seed(cupy, scanarray, args, rows, log):
    Gs = [64, 128] if args.quick else [64, 128, 256]
    BHs = [1, 64] if args.quick else [1, 64, 512]
    rng = np.random.default_rng(0)
    floor = _time(cupy, lambda: cupy.empty(1, cupy.float32).fill(0), args.reps)
    log(f"# launch floor (empty CuPy kernel, event-timed): {floor:.1f} us")
    for name, dt in _dtypes(cupy):
        for BH in BHs:
            for G in Gs:
                a_h = np.exp(-rng.uniform(0.0, 0.5, (BH, G, 16, 1))).astype(dt)
                b_h = rng.standard_normal((BH, G, 16, 64)).astype(dt)
                a_h[rng.random(a_h.shape) < 0.01] = 0  # a few exact resets
                a, b = cupy.asarray(a_h), cupy.asarray(b_h)
                out = cupy.empty_like(b)
                nb = min(BH, 64)
                ref = _oracle(a_h[:nb], b_h[:nb], 1)
                nbytes = b.nbytes * 2 + a.nbytes
                for label, backend, method, radix in METHODS:
                    row = dict(table="seed", dtype=name, BH=BH, G=G, method=label, us=None, GBs=None, err=None,
                               abserr=None, gpu_us=None, err_r=None)
                    try:
                        f = _call(scanarray, cupy, backend, method, radix)
                        f(a, b, 1, out)
                        h = out[:nb].get().astype(np.float64)
                        row["abserr"] = float(np.max(np.abs(h - ref)))
                        row["err"] = row["abserr"] / float(np.max(np.abs(ref)))
                        # beyond the unavoidable rounding of the result to its storage dtype:
                        row["err_r"] = float(np.max(np.abs(h - ref.astype(dt).astype(np.float64))) / np.max(np.abs(ref)))
                        row["us"] = _time(cupy, lambda: f(a, b, 1, out), args.reps)
                        row["gpu_us"], row["ahead"] = _gpu_time(cupy, lambda: f(a, b, 1, out))
                        row["GBs"] = nbytes / row["gpu_us"] / 1e3
                    except Exception as exc:
                        row["note"] = f"{type(exc).__name__}: {str(exc)[:200]}"
                    rows.append(row)
                    log(f"seed {name:8s} BH={BH:4d} G={G:4d} {label:22s} call {_fmt(row['us'], '8.1f')} us "
                        f"gpu {_fmt(row['gpu_us'], '8.1f')} us {_fmt(row['GBs'], '7.1f')} GB/s "
                        f"err {_fmt(row['err'], '.2e')} err_r {_fmt(row['err_r'], '.2e')} "
                        f"{'' if row.get('ahead', True) else 'HOST-BOUND'} {row.get('note', '')}")


def big(cupy, scanarray, args, rows, log):
    shape = (4, 512, 4096) if args.quick else (16, 2048, 4096)
    rng = np.random.default_rng(1)
    for name, dt in [("float32", np.float32), ("float16", np.float16)]:
        b_h = rng.standard_normal(shape).astype(dt)
        b = cupy.asarray(b_h)
        out = cupy.empty_like(b)
        sub = b_h[:1, :256]
        for kind, aval in (("a=1", 1.0), ("scalar a=0.999", 0.999)):
            ref = _oracle(np.full(sub.shape, np.float32(aval)), sub, -1)  # a Python float computes in float32 here
            cols = [(lbl, bk, m, r) for (lbl, bk, m, r) in METHODS if (bk != "cupy" or m != "sequential")
                    and "prefetch" not in lbl]
            cols.append(("sequential", "cupy", "sequential", None))
            if kind == "a=1":
                cols.append(("cupy.cumsum", None, None, None))
            for label, backend, method, radix in cols:
                row = dict(table="big", dtype=name, shape=str(shape), a=kind, method=label, us=None, GBs=None, err=None,
                           gpu_us=None)
                try:
                    if backend is None:
                        def f(a, b_, axis, o):
                            return cupy.cumsum(b_, axis=-1, out=o)
                    else:
                        f = _call(scanarray, cupy, backend, method, radix)
                    f(aval, b, -1, out)
                    h = out[:1, :256].get().astype(np.float64)
                    row["err"] = float(np.max(np.abs(h - ref)) / np.max(np.abs(ref)))
                    row["us"] = _time(cupy, lambda: f(aval, b, -1, out), max(5, args.reps // 5))
                    row["gpu_us"], row["ahead"] = _gpu_time(cupy, lambda: f(aval, b, -1, out), n=5, batches=3)
                    row["GBs"] = 2 * b.nbytes / row["gpu_us"] / 1e3
                except Exception as exc:
                    row["note"] = f"{type(exc).__name__}: {str(exc)[:200]}"
                rows.append(row)
                log(f"big  {name:8s} {kind:15s} {label:22s} call {_fmt(row['us'], '10.1f')} us gpu {_fmt(row['gpu_us'], '10.1f')} us "
                    f"{_fmt(row['GBs'], '7.1f')} GB/s err {_fmt(row['err'], '.2e')} {row.get('note', '')}")


def markdown(rows, device, date):
    lines = [f"Device: {device}; date: {date}; `python benchmarks/bench_matmulscan.py`.", ""]
    seed_rows = [r for r in rows if r["table"] == "seed"]
    labels = [m[0] for m in METHODS]
    if seed_rows:
        keys = sorted({(r["dtype"], r["BH"], r["G"]) for r in seed_rows}, key=lambda k: (k[0], k[1], k[2]))

        def table(title, cell, ratio=True):
            out = ["", title, "", "| dtype | BH | G | " + " | ".join(labels) + (" | blelloch / s=4 |" if ratio else " |"),
                   "|---" * (3 + len(labels) + (1 if ratio else 0)) + "|"]
            for k in keys:
                by = {r["method"]: r for r in seed_rows if (r["dtype"], r["BH"], r["G"]) == k}
                cells = [cell(by.get(lb)) for lb in labels]
                extra = ""
                if ratio:
                    m4, bl = by.get("matmulscan s=4"), by.get("blelloch (numba_cuda)")
                    ok = m4 and bl and m4.get("gpu_us") and bl.get("gpu_us")
                    extra = f" | {bl['gpu_us'] / m4['gpu_us']:.2f}x" if ok else " | n/a"
                out.append(f"| {k[0]} | {k[1]} | {k[2]} | " + " | ".join(cells) + extra + " |")
            return out

        lines += ["### Seed experiment: b (BH, G, 16, 64), a (BH, G, 16, 1), scan along G"]
        lines += table("Device time per call, µs (back-to-back calls, host overhead hidden), and effective GB/s "
                       "(b read + a read + h written):",
                       lambda r: "n/a" if not r or r.get("gpu_us") is None else
                       f"{r['gpu_us']:.1f} ({r['GBs']:.0f}){'' if r.get('ahead', True) else ' H'}")
        lines += table("Latency of one public call, µs (CUDA events around the call: host-side work included):",
                       lambda r: "n/a" if not r or r.get("us") is None else f"{r['us']:.1f}", ratio=False)
        lines += table("Max relative error max|h − ref| / max|ref| against a float64 loop (first 64 BH rows); "
                       "in brackets the same against the reference rounded to the storage dtype:",
                       lambda r: "n/a" if not r or r.get("err") is None else f"{r['err']:.1e} ({r['err_r']:.1e})",
                       ratio=False)
    big_rows = [r for r in rows if r["table"] == "big"]
    if big_rows:
        lines += ["", f"### Shared a on {big_rows[0]['shape']}, scan along the last axis", "",
                  "| dtype | a | method | device µs | GB/s | call µs | max rel. error |", "|---|---|---|---|---|---|---|"]
        for r in big_rows:
            lines.append(f"| {r['dtype']} | {r['a']} | {r['method']} | {_fmt(r.get('gpu_us'), '.1f')} | "
                         f"{_fmt(r['GBs'], '.0f')} | {_fmt(r['us'], '.1f')} | {_fmt(r['err'], '.1e')} |")
    notes = [r for r in rows if r.get("note")]
    if notes:
        lines += ["", "Failures:", ""] + [f"- {r['table']} {r.get('dtype')} {r.get('BH', r.get('a'))} "
                                          f"{r.get('G', '')} {r['method']}: {r['note']}" for r in notes]
    lines += ["", "H: the host could not keep ahead of the device (host-bound; the figure is an upper bound)."]
    return "\n".join(lines) + "\n"


def plot(json_path, png_path):
    """A figure from a results JSON: device time per call against G."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with open(json_path) as f:
        d = json.load(f)
    rows = [r for r in d["rows"] if r["table"] == "seed" and r.get("gpu_us")]
    dts = [dt for dt in ("float32", "float16", "bfloat16") if any(r["dtype"] == dt for r in rows)]
    bhs = sorted({r["BH"] for r in rows})
    fig, axes = plt.subplots(len(bhs), len(dts), figsize=(4.2 * len(dts), 3.3 * len(bhs)), squeeze=False)
    for i, bh in enumerate(bhs):
        for j, dt in enumerate(dts):
            ax = axes[i][j]
            for label, *_ in METHODS:
                pts = sorted((r["G"], r["gpu_us"]) for r in rows if r["dtype"] == dt and r["BH"] == bh
                             and r["method"] == label)
                if pts:
                    ax.plot(*zip(*pts), marker="o", label=label)
            ax.set_title(f"{dt}, BH={bh}", fontsize=9)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("G (chunks)")
            ax.set_ylabel("device µs per call")
            ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.suptitle(f"Inter-chunk scan b (BH, G, 16, 64), a (BH, G, 16, 1) — {d['device']}, {d['date']}", fontsize=10)
    fig.tight_layout()
    fig.savefig(png_path, dpi=110)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--no-big", action="store_true")
    ap.add_argument("--no-seed", action="store_true")
    ap.add_argument("--plot", nargs=2, metavar=("JSON", "PNG"), help="only draw the figure from a results JSON")
    args = ap.parse_args()
    if args.plot:
        plot(*args.plot)
        return
    import cupy

    import scanarray

    device = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    os.makedirs(args.out, exist_ok=True)
    logf = open(os.path.join(args.out, "bench_matmulscan.log"), "w")

    def log(msg):
        print(msg, flush=True)
        logf.write(msg + "\n")
        logf.flush()

    log(f"# {device} {date}")
    rows = []
    t = time.time()
    if not args.no_seed:
        seed(cupy, scanarray, args, rows, log)
    log(f"# seed took {time.time() - t:.0f} s")
    if not args.no_big:
        t = time.time()
        big(cupy, scanarray, args, rows, log)
        log(f"# big took {time.time() - t:.0f} s")
    with open(os.path.join(args.out, "matmulscan.json"), "w") as f:
        json.dump(dict(device=device, date=date, rows=rows), f, indent=1)
    md = markdown(rows, device, date)
    with open(os.path.join(args.out, "matmulscan.md"), "w") as f:
        f.write(md)
    print(md)


if __name__ == "__main__":
    main()
