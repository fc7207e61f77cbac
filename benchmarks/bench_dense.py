"""Dense recurrences on the GPU and the CPU: every method against JAX and a per-step loop.

``h[t] = A[t] @ h[t-1] + b[t]``, ``A[t]`` n x n, float32 unless stated.

GPU (``--gpu``): for n in {4, 16, 32, 64}, T in {1024 ... 16384}, batch 1 and 16:

- multiply-adds counted from the GEMM calls each method issues
  (:func:`scanarray._dense.count_multiply_adds` wraps every ``matmul`` the
  algorithm makes; a product ``(p, k) @ (k, q)`` over a batch of ``s`` counts
  ``s p k q`` multiply-adds = ``2 s p k q`` flops), checked against the
  prediction :func:`scanarray._dense.multiply_adds`;
- time: CUDA events on CuPy's stream around one call, median over repeats
  after a warm-up (JAX: wall clock around ``block_until_ready``, median);
- ``||h_CR - h_prefix|| / ||h_prefix||`` (both float32) and the error of
  each against the float64 cyclic reduction of the same data;
- peers in the same run: ``jax.lax.associative_scan`` with a matmul combine
  (``precision=HIGHEST``, i.e. no TF32; at the target shapes also at JAX's
  default precision, TF32 products, the setting behind the issue's quoted
  figures), a per-step CuPy loop (``h = A[:, t] @ h + b[:, t]``), and the
  one-kernel ``sequential`` method.

Then the issue's two target shapes, (B=8, T=4096, n=64) and (B=64, T=1024,
n=16), float32 against JAX, timed both ways: one call at a time (as above:
host time before the launch counts while the GPU idles) and back to back
(bursts of ``BURST`` calls, one wait at the end: what a loop of calls gets;
the diagonal benchmark's convention); and on the CPU (``--cpu``) the NumPy backend's
dense path against a per-step NumPy loop at (8, 4096, 16) (float32 and
float64, time-varying and time-invariant A; ``--cpu-shape`` for other shapes),
and with ``--cpu-sweep`` over n in {4, 16, 64}, T in {1024, 4096, 16384}, B in
{1, 8, 64}: the table behind the NumPy dense ``method="auto"`` rule
(the NumPy backend's ``auto_method``).

Usage::

    XLA_PYTHON_CLIENT_PREALLOCATE=false python benchmarks/bench_dense.py --gpu --cpu --out results.md
    python benchmarks/bench_dense.py --gpu --quick
    python benchmarks/bench_dense.py --cpu --cpu-sweep --out cpu.md   # NumPy only
    python benchmarks/bench_dense.py --gpu --targets   # the target shapes, every method, against JAX
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import scanarray  # noqa: E402
from scanarray import _dense  # noqa: E402

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")


# --------------------------------------------------------------------------- timing


#: calls per burst of the back-to-back timings
BURST = 10


def gpu_burst_time(fn, reps=5):
    """Median milliseconds per call over bursts of ``BURST`` back-to-back calls (bench_gpu's timing)."""
    from bench_gpu import timed_burst  # this directory: run as benchmarks/bench_dense.py

    return timed_burst(fn, reps, burst=BURST)[0]


def host_time_us(fn, reps=200):
    """Host µs per call for ``reps`` back-to-back calls issued without waiting, and µs per call
    once the GPU has finished them."""
    import cupy

    fn()
    cupy.cuda.get_current_stream().synchronize()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    issued = (time.perf_counter() - t0) / reps * 1e6
    cupy.cuda.get_current_stream().synchronize()
    return issued, (time.perf_counter() - t0) / reps * 1e6


def gpu_time(fn, min_reps=3, max_reps=10, budget_s=0.4, warmup=1):
    """Median milliseconds of ``fn()`` by CUDA events on the current CuPy stream."""
    import cupy

    for _ in range(warmup):
        fn()
    cupy.cuda.get_current_stream().synchronize()
    times, spent = [], 0.0
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    while len(times) < max_reps and (len(times) < min_reps or spent < budget_s):
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        ms = cupy.cuda.get_elapsed_time(start, stop)
        times.append(ms)
        spent += ms / 1e3
    return statistics.median(times)


def wall_time(fn, min_reps=3, max_reps=10, budget_s=0.4, warmup=1, sync=None):
    """Median milliseconds of ``fn()`` by the wall clock (``sync(result)`` waits for it)."""
    for _ in range(warmup):
        r = fn()
        if sync:
            sync(r)
    times, spent = [], 0.0
    while len(times) < max_reps and (len(times) < min_reps or spent < budget_s):
        t0 = time.perf_counter()
        r = fn()
        if sync:
            sync(r)
        dt = time.perf_counter() - t0
        times.append(dt * 1e3)
        spent += dt
    return statistics.median(times)


# --------------------------------------------------------------------------- peers


def make_jax_scan(precision="highest"):
    """``jax.lax.associative_scan`` with a matmul combine; precision "highest" (float32 products,
    this benchmark's peer) or "default" (TF32 on tensor cores: the setting behind the issue's
    quoted JAX times, and asv's peer)."""
    import jax
    import jax.numpy as jnp

    hi = jax.lax.Precision.HIGHEST if precision == "highest" else jax.lax.Precision.DEFAULT

    def combine(earlier, later):
        A1, b1 = earlier
        A2, b2 = later
        return (jnp.matmul(A2, A1, precision=hi),
                jnp.matmul(A2, b1[..., None], precision=hi)[..., 0] + b2)

    @jax.jit
    def scan(A, b):
        return jax.lax.associative_scan(combine, (A, b), axis=1)[1]

    return scan


def jax_worker(path, todo):
    """Time the JAX peer on each ``(B, T, n, seed)`` of `todo`; append one JSON line per case to `path`.

    Runs in its own process, on host copies of the CuPy-generated data: the
    first in-process attempt (H200) hit CUDA_ERROR_ILLEGAL_ADDRESS
    in JAX after sharing CuPy buffers through DLPack, and a sticky CUDA error
    would have ended every later measurement of the run.
    """
    import json

    import cupy
    import jax

    scan, scan_default = make_jax_scan(), make_jax_scan("default")
    for B, T, n, seed in todo:
        A, b = gpu_data(B, T, n, np.float32, seed=seed)
        h64 = scanarray.linear_recurrence(A.astype(cupy.float64), b.astype(cupy.float64), dense=True,
                                          backend="cupy", method="cyclic_reduction").get()
        Ah, bh = A.get(), b.get()
        del A, b
        cupy.get_default_memory_pool().free_all_blocks()
        Aj, bj = jax.device_put(Ah), jax.device_put(bh)
        del Ah, bh
        hj = np.asarray(scan(Aj, bj).block_until_ready())
        err = float(np.linalg.norm((hj - h64).ravel()) / np.linalg.norm(h64.ravel()))
        del hj
        t = wall_time(lambda: scan(Aj, bj), sync=lambda r: r.block_until_ready(), min_reps=5, max_reps=20)
        # back to back: BURST calls, then one wait (dispatch overlaps the GPU's work, as in a loop)
        from bench_gpu import wall_burst

        t_b2b = wall_burst(lambda: scan(Aj, bj), 10, burst=BURST)[0]
        t_d = err_d = t_d_b2b = None
        if seed == 1:  # the target shapes: also at JAX's default precision (TF32 products), as quoted
            hd = np.asarray(scan_default(Aj, bj).block_until_ready())
            err_d = float(np.linalg.norm((hd - h64).ravel()) / np.linalg.norm(h64.ravel()))
            t_d = wall_time(lambda: scan_default(Aj, bj), sync=lambda r: r.block_until_ready(), min_reps=5, max_reps=20)
            t_d_b2b = wall_burst(lambda: scan_default(Aj, bj), 10, burst=BURST)[0]
        del Aj, bj
        with open(path, "a") as f:
            f.write(json.dumps({"case": [B, T, n, seed], "t_jax": t, "err_jax": err, "t_jax_b2b": t_b2b,
                                "t_jax_default": t_d, "err_jax_default": err_d, "t_jax_default_b2b": t_d_b2b}) + "\n")


def jax_pass(todo, log, timeout_s=200):
    """Run :func:`jax_worker` in child processes; a case that crashes one is recorded and skipped."""
    import json
    import subprocess
    import tempfile

    results, remaining = {}, [list(c) for c in todo]
    deadline = time.monotonic() + timeout_s
    fruitless = 0
    while remaining and time.monotonic() < deadline and fruitless < 2:
        with tempfile.NamedTemporaryFile("r", suffix=".jsonl") as tmp:
            cmd = [sys.executable, os.path.abspath(__file__), "--jax-worker", tmp.name, "--todo", json.dumps(remaining)]
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=max(1, deadline - time.monotonic()))
                rc, err = proc.returncode, proc.stderr
            except subprocess.TimeoutExpired:
                rc, err = "timeout", ""
            for line in open(tmp.name):
                r = json.loads(line)
                results[tuple(r["case"])] = (r["t_jax"], r["err_jax"])
                results[("b2b",) + tuple(r["case"])] = r.get("t_jax_b2b")
                results[("default",) + tuple(r["case"])] = (r.get("t_jax_default"), r.get("err_jax_default"),
                                                            r.get("t_jax_default_b2b"))
        before = len(remaining)
        remaining = [c for c in remaining if tuple(c) not in results]
        fruitless = fruitless + 1 if len(remaining) == before else 0
        if rc != 0 and remaining:
            bad = remaining.pop(0)
            results[tuple(bad)] = (None, None)
            tail = [ln for ln in err.strip().splitlines() if ln.strip()][-1:] or [""]
            log(f"JAX worker failed (rc={rc}) at (B, T, n, seed) = {tuple(bad)}: {tail[0][:300]}")
    return results


def cupy_loop(A, b):
    """The per-step CuPy loop users write today: T dependent batched matvecs."""
    import cupy

    T = b.shape[1]
    h = cupy.zeros((b.shape[0], b.shape[2]), b.dtype)
    H = cupy.empty_like(b)
    for t in range(T):
        h = cupy.matmul(A[:, t], h[..., None])[..., 0] + b[:, t]
        H[:, t] = h
    return H


def numpy_loop(A, b, kind="lane"):
    """The per-step NumPy loop users write today.

    ``A``: ``(B, T, n, n)`` (kind "lane"), ``(B, n, n)`` time-invariant ("const") or ``(T, n, n)``
    shared by the lanes ("shared").
    """
    T = b.shape[1]
    h = np.zeros((b.shape[0], b.shape[2]), b.dtype)
    H = np.empty_like(b)
    for t in range(T):
        At = A if kind == "const" else A[t] if kind == "shared" else A[:, t]
        h = np.matmul(At, h[..., None])[..., 0] + b[:, t]
        H[:, t] = h
    return H


# --------------------------------------------------------------------------- data


def gpu_data(B, T, n, dtype, seed=0):
    """Stable random transitions: Gaussian scaled to norm about 0.9 (||G|| ~ 2 sqrt(n))."""
    import cupy

    rs = cupy.random.RandomState(seed)
    A = (rs.standard_normal((B, T, n, n), dtype=cupy.float32) * (0.9 / (2 * np.sqrt(n) + 1))).astype(dtype)
    b = rs.standard_normal((B, T, n), dtype=cupy.float32).astype(dtype)
    return A, b


def rel(x, ref):
    import cupy

    xp = cupy.get_array_module(x)
    d = xp.linalg.norm((x.astype(xp.float64) - ref.astype(xp.float64)).ravel())
    return float(d / xp.linalg.norm(ref.astype(xp.float64).ravel()))


# --------------------------------------------------------------------------- GPU runs


def device_line():
    import cupy

    props = cupy.cuda.runtime.getDeviceProperties(0)
    return f"{props['name'].decode()} (cc {props['major']}.{props['minor']}), CuPy {cupy.__version__}"


def seed_table(ns, Ts, batches, jax_results, with_loop, log, on_row=None):
    import cupy

    rows = []
    for n in ns:
        for B in batches:
            for T in Ts:
                A, b = gpu_data(B, T, n, np.float32)
                run = {m: (lambda m=m: scanarray.linear_recurrence(A, b, dense=True, backend="cupy", method=m))
                       for m in ("cyclic_reduction", "prefix", "sequential")}
                with _dense.count_multiply_adds() as c_cr:
                    h_cr = run["cyclic_reduction"]()
                with _dense.count_multiply_adds() as c_pf:
                    h_pf = run["prefix"]()
                for name, c in (("cyclic_reduction", c_cr), ("prefix", c_pf)):
                    want = _dense.multiply_adds(name, T, n, lanes=B)["total"]
                    assert c.total == want, (name, c.total, want)
                h64 = scanarray.linear_recurrence(A.astype(cupy.float64), b.astype(cupy.float64), dense=True,
                                                  backend="cupy", method="cyclic_reduction")
                h_seq = run["sequential"]()
                row = dict(n=n, B=B, T=T, mac_cr=c_cr.total, mac_pf=c_pf.total,
                           agree=rel(h_cr, h_pf), err_cr=rel(h_cr, h64), err_pf=rel(h_pf, h64),
                           err_seq=rel(h_seq, h64))
                del h_cr, h_pf, h_seq, h64
                row["t_cr"] = gpu_time(run["cyclic_reduction"])
                row["t_pf"] = gpu_time(run["prefix"])
                row["t_seq"] = gpu_time(run["sequential"])
                row["t_loop"] = (gpu_time(lambda: cupy_loop(A, b), min_reps=1, max_reps=3, budget_s=0.3, warmup=0)
                                 if with_loop else None)
                row["t_jax"], row["err_jax"] = jax_results.get((B, T, n, 0), (None, None))
                del A, b, run
                cupy.get_default_memory_pool().free_all_blocks()
                rows.append(row)
                log(fmt_seed_row(row))
                if on_row:
                    on_row(row)
    return rows


def fmt(x, spec=".3f"):
    return "—" if x is None else format(x, spec)


SEED_HEADER = (
    "| n | B | T | MACs CR / (B T n³) | MACs prefix / (B T n³) | prefix/CR MACs | CR ms | prefix ms | "
    "speedup prefix/CR | ‖h_CR−h_prefix‖/‖h_prefix‖ | err CR | err prefix | sequential ms | CuPy loop ms | "
    "JAX assoc. scan ms | err JAX |\n|" + "---|" * 16
)


def fmt_seed_row(r):
    unit = r["B"] * r["T"] * r["n"] ** 3
    return (
        f"| {r['n']} | {r['B']} | {r['T']} | {r['mac_cr'] / unit:.3f} | {r['mac_pf'] / unit:.2f} | "
        f"{r['mac_pf'] / r['mac_cr']:.1f} | {r['t_cr']:.3f} | {r['t_pf']:.3f} | {r['t_pf'] / r['t_cr']:.2f}x | "
        f"{r['agree']:.1e} | {r['err_cr']:.1e} | {r['err_pf']:.1e} | {r['t_seq']:.3f} | {fmt(r['t_loop'], '.1f')} | "
        f"{fmt(r['t_jax'])} | {fmt(r['err_jax'], '.1e')} |"
    )


TARGETS = [(8, 4096, 64, 2.33), (64, 1024, 16, 1.07)]

def targets(jax_results, log):
    import cupy

    lines = ["| B | T | n | method | ms (median) | × vs JAX here | issue's JAX figure (H200) | err vs float64 | "
             "back-to-back ms | × vs JAX back-to-back |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    only_n = os.environ.get("BENCH_TARGET_N")  # e.g. "16": that target shape only
    methods = tuple(os.environ.get("BENCH_TARGET_METHODS", "cyclic_reduction prefix sequential chunked lookback auto")
                    .split())
    for B, T, n, quoted in TARGETS:
        if only_n and str(n) not in only_n.split():
            continue
        A, b = gpu_data(B, T, n, np.float32, seed=1)
        h64 = scanarray.linear_recurrence(A.astype(cupy.float64), b.astype(cupy.float64), dense=True,
                                          backend="cupy", method="cyclic_reduction")
        t_jax, err = jax_results.get((B, T, n, 1), (None, None))
        t_jax_b = jax_results.get(("b2b", B, T, n, 1))
        if t_jax is not None:
            lines.append(f"| {B} | {T} | {n} | jax.lax.associative_scan | {t_jax:.3f} | 1.00 | {quoted} ms | {err:.1e} | "
                         f"{fmt(t_jax_b)} | 1.00 |")
        t_d, err_d, t_d_b = jax_results.get(("default", B, T, n, 1), (None, None, None))
        if t_d is not None:
            lines.append(f"| {B} | {T} | {n} | jax.lax.associative_scan, default precision (TF32) | {t_d:.3f} | "
                         f"{t_jax / t_d if t_jax else float('nan'):.2f} | {quoted} ms | {err_d:.1e} | {fmt(t_d_b)} | "
                         f"{fmt(t_jax_b / t_d_b if (t_jax_b and t_d_b) else None, '.2f')} |")
        cases = [(m, lambda m=m: scanarray.linear_recurrence(A, b, dense=True, backend="cupy", method=m))
                 for m in methods]
        for m in ("chunked", "lookback"):  # host time of a bound call
            if m in methods:
                issued, per = host_time_us(dict(cases)[m])
                log(f"{m} host time per call (B*T*n={b.size}): {issued:.1f} us issued, {per:.1f} us per call "
                    f"back-to-back incl. GPU (200 calls)")
        # time-invariant A (one matrix per lane, never expanded): what is left without A's traffic
        A1 = cupy.ascontiguousarray(A[:, :1])
        cases.append(("sequential, A time-invariant (no A traffic; err not comparable)",
                      lambda: scanarray.linear_recurrence(A1, b, dense=True, backend="cupy", method="sequential")))
        # the fixed cost of a call (host work + launch): the same lanes and n over 8 steps
        A8, b8 = cupy.ascontiguousarray(A[:, :8]), cupy.ascontiguousarray(b[:, :8])
        t8 = gpu_time(lambda: scanarray.linear_recurrence(A8, b8, dense=True, backend="cupy", method="sequential"),
                      min_reps=5, max_reps=30)
        log(f"fixed cost at (B={B}, n={n}): sequential over T = 8 steps takes {t8:.3f} ms")
        lines.append(f"| {B} | 8 | {n} | sequential, T = 8 (fixed cost of a call) | {t8:.3f} | — | — | — |")
        for m, f in cases:
            err = rel(f(), h64)
            t = gpu_time(f, min_reps=5, max_reps=30)
            x = "—" if t_jax is None else f"{t_jax / t:.2f}"
            tb = gpu_burst_time(f) if t < 20 else None
            xb = "—" if (t_jax_b is None or tb is None) else f"{t_jax_b / tb:.2f}"
            lines.append(f"| {B} | {T} | {n} | {m} | {t:.3f} | {x} | {quoted} ms | {err:.1e} | {fmt(tb)} | {xb} |")
            log(lines[-1] + f"  ({t * 1e6 / T:.0f} ns/step)")
        del A, b, h64
        cupy.get_default_memory_pool().free_all_blocks()
    return lines


CPU_METHODS = ("auto", "sequential", "chunked", "cyclic_reduction", "prefix")


def _cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def wall_min_median(fn, min_reps=5, max_reps=15, budget_s=2.0):
    """(best, median) milliseconds of ``fn()`` after one warm-up call: the best is the figure least
    disturbed by other jobs on a shared CPU, the median shows how disturbed the run was."""
    fn()
    times, spent = [], 0.0
    while len(times) < max_reps and (len(times) < min_reps or spent < budget_s):
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        times.append(dt * 1e3)
        spent += dt
    return min(times), statistics.median(times)


A_KINDS = {"lane": "(B, T, n, n)", "const": "(B, n, n)", "shared": "(T, n, n)"}


def cpu_table(log, shapes=((8, 4096, 16),), dtypes=(np.float32, np.float64), kinds=("lane", "const"),
              methods=CPU_METHODS, max_prefix_work=2**33):
    """The NumPy backend's dense methods against the per-step NumPy loop, into a preallocated ``out``.

    `kinds` of ``A`` (:data:`A_KINDS`): per lane and time step, time-invariant per lane, or one
    time-varying sequence shared by the lanes. The prefix scan is skipped where its
    ``T n^3 log2 T`` work per lane times B exceeds `max_prefix_work`.
    """
    lines = ["| B | T | n | dtype | A | method | best ms | median ms | speedup vs loop (best) | "
             "rel. err vs float64 loop | load (1 min) |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    rng = np.random.default_rng(0)
    for B, T, n in shapes:
        for dt in dtypes:
            for c in kinds:
                a_shape = {"lane": (B, T, n, n), "const": (B, n, n), "shared": (T, n, n)}[c]
                A = (rng.standard_normal(a_shape, dtype=np.float32) * (0.9 / (2 * np.sqrt(n) + 1))).astype(dt)
                b = rng.standard_normal((B, T, n), dtype=np.float32).astype(dt)
                out = np.empty_like(b)
                ref = numpy_loop(A.astype(np.float64), b.astype(np.float64), c)
                kind = A_KINDS[c]
                A_api = A[:, None] if c == "const" else A  # (B, 1, n, n) / (T, n, n) broadcast against b

                def row(name, fn, t_loop):
                    h = fn()
                    best, med = wall_min_median(fn)
                    err = np.linalg.norm(h - ref) / np.linalg.norm(ref)
                    x = f"{t_loop / best:.2f}" if t_loop else "1.00"
                    lines.append(f"| {B} | {T} | {n} | {np.dtype(dt).name} | {kind} | {name} | {best:.2f} | "
                                 f"{med:.2f} | {x} | {err:.1e} | {os.getloadavg()[0]:.2f} |")
                    log(lines[-1])
                    return best

                t_loop = row("per-step NumPy loop", lambda: numpy_loop(A, b, c), None)
                for m in methods:
                    if m == "prefix" and B * T * n**3 * np.log2(T) > max_prefix_work:
                        continue
                    name = m if m != "auto" else "auto = " + _numpy_auto(A_api, b)
                    row(f"numpy backend, {name}", lambda m=m: scanarray.linear_recurrence(
                        A_api, b, dense=True, backend="numpy", method=m, out=out), t_loop)
                del A, A_api, b, out, ref
    return lines


def _numpy_auto(A, b):
    """The method ``method="auto"`` resolves to on the NumPy backend for these arrays."""
    from scanarray import _registry
    from scanarray._problem import Problem

    mod = _registry.load("numpy")
    a = np.broadcast_to(A, b.shape + b.shape[-1:])
    p = Problem(xp=np, kind="numpy", a=a, b=b, initial=None, out=None, dtype=b.dtype, out_dtype=b.dtype,
                reverse=False, dense=True, chunk=64, method="auto", backend="numpy")
    return mod.auto_method(p)


#: (B, T, n) of the CPU sweep behind the NumPy dense ``method="auto"`` rule (``--cpu-sweep``)
CPU_SWEEP = [(B, T, n) for n in (4, 16, 64) for T in (1024, 4096, 16384) for B in (1, 8, 64)
             if B * T * n * n * 4 <= 2**30]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpu", action="store_true")
    ap.add_argument("--cpu", action="store_true",
                    help="NumPy backend vs a per-step NumPy loop at (8, 4096, 16): float32/64, time-varying/invariant A")
    ap.add_argument("--cpu-sweep", action="store_true",
                    help="float32, time-varying A, over CPU_SWEEP shapes (the NumPy dense auto rule)")
    ap.add_argument("--cpu-shape", help="B,T,n[;B,T,n...]: --cpu at these shapes instead")
    ap.add_argument("--cpu-a", default="lane,const", help=f"--cpu: kinds of A among {', '.join(A_KINDS)}")
    ap.add_argument("--quick", action="store_true", help="n in {4, 32}, T in {1024, 4096}")
    ap.add_argument("--targets", action="store_true", help="GPU: the two target shapes only (no seed table)")
    ap.add_argument("--no-jax", action="store_true")
    ap.add_argument("--no-loop", action="store_true")
    ap.add_argument("--out", help="write the markdown tables here")
    ap.add_argument("--jax-worker", help=argparse.SUPPRESS)
    ap.add_argument("--todo", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.jax_worker:
        import json

        jax_worker(args.jax_worker, json.loads(args.todo))
        return

    def log(s):
        print(s, flush=True)

    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    parts = [f"# Dense recurrences: cyclic reduction vs prefix scan ({now})", ""]

    def save():  # after every section, so a run cut short keeps what it measured
        if args.out:
            with open(args.out, "w") as f:
                f.write("\n".join(parts) + "\n")

    if args.gpu:
        parts += [f"Device: {device_line()}; host {platform.node()}; float32 data; times are medians.", ""]
        ns, Ts = ([4, 32], [1024, 4096]) if args.quick else ([4, 16, 32, 64], [1024, 2048, 4096, 8192, 16384])
        only_n = os.environ.get("BENCH_TARGET_N")
        todo = [(B, T, n, 1) for B, T, n, _ in TARGETS if not only_n or str(n) in only_n.split()]
        if not args.targets:
            todo += [(B, T, n, 0) for n in ns for B in (1, 16) for T in Ts]
        jax_results = {} if args.no_jax else jax_pass(todo, log, timeout_s=float(os.environ.get("BENCH_JAX_S", 110)))
        parts += ["## Targets (float32)", ""] + targets(jax_results, log) + [""]
        save()
        if not args.targets:
            parts += ["## Seed experiment", "", SEED_HEADER]

            def on_row(r):
                parts.append(fmt_seed_row(r))
                save()

            seed_table(ns, Ts, [1, 16], jax_results, not args.no_loop, log, on_row)
            parts.append("")
            save()
    if args.cpu or args.cpu_sweep:
        cpu = f"CPU: {_cpu_name()}, {os.cpu_count()} cores, NumPy {np.__version__}; times: best and median of 5-15 calls"
        parts += [cpu, ""]
    if args.cpu:
        shapes = ([tuple(int(v) for v in s.split(",")) for s in args.cpu_shape.split(";")] if args.cpu_shape
                  else [(8, 4096, 16)])
        parts += [f"## CPU: NumPy backend vs per-step NumPy loop, (B, T, n) in {shapes}", ""]
        parts += cpu_table(log, shapes, kinds=tuple(args.cpu_a.split(","))) + [""]
        save()
    if args.cpu_sweep:
        parts += ["## CPU sweep: float32, time-varying A", ""]
        parts += cpu_table(log, CPU_SWEEP, dtypes=(np.float32,), kinds=("lane",),
                           methods=("auto", "sequential", "chunked", "cyclic_reduction")) + [""]
        save()
    print("\n" + "\n".join(parts))

if __name__ == "__main__":
    main()
