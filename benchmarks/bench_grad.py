#!/usr/bin/env python3
"""Forward + backward of a linear recurrence through torch and JAX, against the differentiable peers
and the eight-stream copy floor (issue 40's benchmark). One process, on one GPU.

Per shape (float32, ``a`` in [0.9, 1), last axis, contiguous), milliseconds per call of forward
and backward (``h = scan(a, b)`` then the gradients of ``a`` and ``b`` for an incoming ``g``):

- scanarray through torch, fpscan (``fpscan.pscan``), accelerated-scan (``accelerated_scan.warp``
  where its kernel takes the shape, ``.scalar``, the Triton one, on the longer rows): CUDA events
  around bursts of calls on the default stream, the libraries interleaved round by round (each
  round rotates the order), medians over rounds;
- scanarray through JAX and ``jax.lax.associative_scan``, both ``jit(vjp)``: wall clock around
  bursts ended by ``block_until_ready``, interleaved the same way;
- the floor: eight arrays' worth of bytes (forward: read a, b, write h; backward: read a, h, g, write
  the two gradients) at the device-to-device copy bandwidth measured in this process;
- scanarray's backward alone against its forward alone (through torch: both as a user's loop
  times them, and the GPU's time alone with the launches queued behind a spin kernel);
- peak device memory of one forward + backward beyond the inputs (torch's allocator and CuPy's
  pool), against the three arrays it must create (h and the two gradients).

Also the host time per call through torch against a bare scanarray call on CuPy arrays, on a small
problem. Peers are used where they import (built by ``tools/gpu_bench.sh peers``); a peer whose
gradients disagree with scanarray's is reported and not timed.

Usage: python benchmarks/bench_grad.py [--quick] [--only SUBSTR] [--out DIR]
       python benchmarks/bench_grad.py --cpu    (host overhead through torch on the CPU; no GPU)
Prints the table last and writes DIR/bench_grad.md and .json (DIR defaults to $OUT or .).
"""

from __future__ import annotations

import os

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # JAX shares the GPU with torch/CuPy
os.environ.setdefault("TORCH_EXTENSIONS_DIR", "/tmp/torch_ext")  # where tools/gpu_bench.sh builds the peers

import argparse  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402

import numpy as np  # noqa: E402

SHAPES = [
    ("(2,256,4096)", (2, 256, 4096)),
    ("(8,1024,4096)", (8, 1024, 4096)),
    ("(16,2048,4096)", (16, 2048, 4096)),
    ("(2,256,65536)", (2, 256, 65536)),
    ("(4,64,262144)", (4, 64, 262144)),
    ("1 row 2**24", (1, 1, 2**24)),
    ("1 row 2**28", (1, 1, 2**28)),
]


# --------------------------------------------------------------------------- timing


def _burst(call_ms, target_ms=5.0, most=20):
    return max(1, min(most, math.ceil(target_ms / max(call_ms, 1e-3))))


def interleaved_events(fns, reps, budget_s, target_ms=5.0):
    """Median ms per call of each of ``fns`` (name -> callable), CUDA events around bursts on the
    current stream; one burst of each per round, the order rotated every round."""
    import cupy

    names = list(fns)
    t0 = {}
    for n in names:  # warm-up, and a first estimate for the burst length
        fns[n]()
        cupy.cuda.Device().synchronize()
        s = time.perf_counter()
        fns[n]()
        cupy.cuda.Device().synchronize()
        t0[n] = (time.perf_counter() - s) * 1e3
    bursts = {n: _burst(t0[n], target_ms) for n in names}
    ev = [cupy.cuda.Event() for _ in range(len(names) + 1)]
    times = {n: [] for n in names}
    start = time.perf_counter()
    for r in range(reps):
        order = names[r % len(names):] + names[:r % len(names)]
        ev[0].record()
        for i, n in enumerate(order):
            for _ in range(bursts[n]):
                fns[n]()
            ev[i + 1].record()
        ev[-1].synchronize()
        for i, n in enumerate(order):
            times[n].append(cupy.cuda.get_elapsed_time(ev[i], ev[i + 1]) / bursts[n])
        if time.perf_counter() - start > budget_s and r >= 2:
            break
    return {n: statistics.median(v) for n, v in times.items()}


def interleaved_wall(fns, reps, budget_s, target_ms=5.0):
    """As :func:`interleaved_events` for JAX: wall clock around bursts ended by block_until_ready."""
    import jax

    names = list(fns)
    t0 = {}
    for n in names:
        jax.block_until_ready(fns[n]())
        s = time.perf_counter()
        jax.block_until_ready(fns[n]())
        t0[n] = (time.perf_counter() - s) * 1e3
    bursts = {n: _burst(t0[n], target_ms) for n in names}
    times = {n: [] for n in names}
    start = time.perf_counter()
    for r in range(reps):
        order = names[r % len(names):] + names[:r % len(names)]
        for n in order:
            s = time.perf_counter()
            for _ in range(bursts[n]):
                out = fns[n]()
            jax.block_until_ready(out)
            times[n].append((time.perf_counter() - s) * 1e3 / bursts[n])
        if time.perf_counter() - start > budget_s and r >= 2:
            break
    return {n: statistics.median(v) for n, v in times.items()}


def host_us(fns, n=200, rounds=15, sync=lambda: None):
    """Median host microseconds per call of each of ``fns``: ``perf_counter`` around ``n`` calls
    issued without waiting, rounds interleaved and the device synchronised between them."""
    names = list(fns)
    for f in fns.values():
        for _ in range(20):
            f()
    sync()
    times = {k: [] for k in names}
    for r in range(rounds):
        for k in names[r % len(names):] + names[:r % len(names)]:
            sync()
            s = time.perf_counter()
            for _ in range(n):
                fns[k]()
            times[k].append((time.perf_counter() - s) / n * 1e6)
    sync()
    return {k: statistics.median(v) for k, v in times.items()}


# --------------------------------------------------------------------------- the CPU measurement


def cpu_main(args):
    """Host overhead through torch against a bare scanarray call on NumPy arrays (no GPU)."""
    import torch

    import scanarray

    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    shape = (4, 64)
    a = rng.uniform(0.9, 1.0, shape).astype(np.float32)
    b = rng.standard_normal(shape).astype(np.float32)
    g = rng.standard_normal(shape).astype(np.float32)
    ta, tb, tg = (torch.from_numpy(x.copy()) for x in (a, b, g))
    tag, tbg = ta.clone().requires_grad_(), tb.clone().requires_grad_()
    lines = []
    for backend in ("numpy", "numba"):
        kw = {"backend": backend}

        def np_fb():
            h = scanarray.linear_recurrence(a, b, **kw)
            scanarray.linear_recurrence_vjp(a, h, g, b=b, **kw)

        def torch_fb():
            h = scanarray.linear_recurrence(tag, tbg, **kw)
            torch.autograd.grad(h, (tag, tbg), tg)

        r = host_us({
            "numpy": lambda: scanarray.linear_recurrence(a, b, **kw),
            "torch": lambda: scanarray.linear_recurrence(ta, tb, **kw),
            "torch, requires_grad": lambda: scanarray.linear_recurrence(tag, tbg, **kw),
            "numpy fwd+vjp": np_fb,
            "torch fwd+bwd": torch_fb,
        }, n=args.cpu_calls, rounds=args.cpu_rounds)
        lines.append(
            f"backend={backend}, {shape} float32, host us per call (medians of interleaved rounds): "
            + ", ".join(f"{k} {v:.1f}" for k, v in r.items())
            + f"; torch/numpy {r['torch'] / r['numpy']:.2f}x, requires_grad/numpy "
            f"{r['torch, requires_grad'] / r['numpy']:.2f}x, fwd+bwd torch/numpy {r['torch fwd+bwd'] / r['numpy fwd+vjp']:.2f}x"
        )
        print(lines[-1], flush=True)
    return 0


# --------------------------------------------------------------------------- the GPU measurement


def _rel_err(x, ref):
    import torch

    x, ref = x.double(), ref.double()
    return float(torch.max(torch.abs(x - ref)) / torch.clamp(torch.max(torch.abs(ref)), min=1e-30))


def run_shape(label, shape, ctx, reps, budget, quick, log):
    import cupy
    import torch

    import scanarray

    torch.manual_seed(0)
    dev = "cuda"
    a = (0.9 + 0.1 * torch.rand(shape, device=dev)).requires_grad_()
    b = torch.randn(shape, device=dev).requires_grad_()
    g = torch.randn(shape, device=dev)
    nbytes = b.numel() * 4
    row = {"workload": label, "elements": b.numel()}
    row["floor_ms"] = 8 * nbytes / ctx["copy_Bps"] * 1e3
    B, C, T = shape
    pow2 = T & (T - 1) == 0
    peers = ctx["peers"]

    def ours():
        h = scanarray.linear_recurrence(a, b)
        return torch.autograd.grad(h, (a, b), g)

    ref = ours()
    torch.cuda.synchronize()
    fns = {"ours": ours}
    if peers.fpscan is not None and pow2 and 32 <= T <= 65536 and C <= 65535:
        fns["fpscan"] = lambda: torch.autograd.grad(peers.fpscan.pscan(a, b), (a, b), g)
    if peers.acc_warp is not None and pow2 and 32 <= T <= 65536 and C <= 65535:
        fns["acc_warp"] = lambda: torch.autograd.grad(peers.acc_warp.scan(a, b), (a, b), g)
    elif peers.acc_triton is not None and pow2 and not (quick and T > 2**24):
        fns["acc_triton"] = lambda: torch.autograd.grad(peers.acc_triton.scan(a, b), (a, b), g)
    for name in list(fns):
        if name == "ours":
            continue
        try:
            got = fns[name]()
            torch.cuda.synchronize()
            err = max(_rel_err(x, y) for x, y in zip(got, ref))
            if not err < 1e-3:
                log(f"{label}: {name} disagrees with scanarray (gradient relative error {err:.1e}): not timed")
                del fns[name]
        except Exception as exc:
            log(f"{label}: {name} failed: {type(exc).__name__}: {str(exc)[:200]}")
            del fns[name]
    del ref
    res = interleaved_events(fns, reps, budget)
    for k, v in res.items():
        row[f"{k}_ms"] = v
    peer_ms = [res[k] for k in ("acc_warp", "acc_triton", "fpscan") if k in res]
    if peer_ms:
        row["best_peer_over_ours"] = min(peer_ms) / res["ours"]
    row["ours_over_floor"] = res["ours"] / row["floor_ms"]

    # backward alone against forward alone (through torch)
    an, bn = a.detach(), b.detach()
    h = scanarray.linear_recurrence(a, b)
    fb = interleaved_events({
        "fwd": lambda: scanarray.linear_recurrence(an, bn),
        "bwd": lambda: torch.autograd.grad(h, (a, b), g, retain_graph=True),
    }, reps, budget)
    row["fwd_ms"], row["bwd_ms"] = fb["fwd"], fb["bwd"]
    row["bwd_over_fwd"] = fb["bwd"] / fb["fwd"]
    if ctx["queued_us"] is not None and T * C * B <= 2**26:
        q_f = ctx["queued_us"](lambda: scanarray.linear_recurrence(an, bn), burst=20, reps=5)
        q_b = ctx["queued_us"](lambda: torch.autograd.grad(h, (a, b), g, retain_graph=True), burst=20, reps=5)
        row["bwd_over_fwd_gpu"] = q_b / q_f
    h = None  # its graph too: the memory measurement below starts from the inputs alone

    # peak memory of one forward + backward beyond the inputs, against h + two gradients
    pool = cupy.get_default_memory_pool()
    for name in fns:
        torch.cuda.synchronize()
        pool.free_all_blocks()
        base, c0 = torch.cuda.memory_allocated(), pool.total_bytes()
        torch.cuda.reset_peak_memory_stats()
        out = fns[name]()
        torch.cuda.synchronize()
        extra = torch.cuda.max_memory_allocated() - base + (pool.total_bytes() - c0)
        del out
        row[f"{name}_mem_x"] = extra / (3 * nbytes)

    # through JAX: scanarray against jax.lax.associative_scan, both jit(vjp)
    if ctx["jax"] is not None:
        try:
            jax = ctx["jax"]
            ja, jb, jg = (jax.dlpack.from_dlpack(x.detach()) for x in (a, b, g))
            torch.cuda.synchronize()

            def comb(x, y):
                return x[0] * y[0], y[0] * x[1] + y[1]

            f_ours = jax.jit(lambda a, b, g: jax.vjp(lambda a, b: scanarray.linear_recurrence(a, b), a, b)[1](g))
            f_assoc = jax.jit(lambda a, b, g: jax.vjp(
                lambda a, b: jax.lax.associative_scan(comb, (a, b), axis=-1)[1], a, b)[1](g))
            got, want = f_ours(ja, jb, jg), f_assoc(ja, jb, jg)
            err = max(float(jax.numpy.max(jax.numpy.abs(x - y)) / jax.numpy.max(jax.numpy.abs(y)))
                      for x, y in zip(got, want))
            row["jax_err"] = err
            del got, want
            jt = interleaved_wall({"jax_ours": lambda: f_ours(ja, jb, jg), "jax_assoc": lambda: f_assoc(ja, jb, jg)},
                                  reps, budget)
            row["jax_ours_ms"], row["jax_assoc_ms"] = jt["jax_ours"], jt["jax_assoc"]
            row["assoc_over_jax_ours"] = jt["jax_assoc"] / jt["jax_ours"]
        except Exception as exc:
            log(f"{label}: JAX failed: {type(exc).__name__}: {str(exc)[:300]}")
    return row


def host_overhead(ctx, log):
    """Host us per call on a small problem: through torch against a bare scanarray call on CuPy."""
    import cupy
    import torch

    import scanarray

    shape = (4, 64)
    ta = (0.9 + 0.1 * torch.rand(shape, device="cuda"))
    tb, tg = torch.randn(shape, device="cuda"), torch.randn(shape, device="cuda")
    tag, tbg = ta.clone().requires_grad_(), tb.clone().requires_grad_()
    ca, cb, cg = (cupy.from_dlpack(x) for x in (ta, tb, tg))

    def cupy_fb():
        h = scanarray.linear_recurrence(ca, cb)
        scanarray.linear_recurrence_vjp(ca, h, cg, b=cb)

    def torch_fb():
        h = scanarray.linear_recurrence(tag, tbg)
        torch.autograd.grad(h, (tag, tbg), tg)

    fns = {
        "cupy": lambda: scanarray.linear_recurrence(ca, cb),
        "torch": lambda: scanarray.linear_recurrence(ta, tb),
        "torch, requires_grad": lambda: scanarray.linear_recurrence(tag, tbg),
        "cupy fwd+vjp": cupy_fb,
        "torch fwd+bwd": torch_fb,
    }
    if ctx["jax"] is not None:
        jax = ctx["jax"]
        ja, jb = jax.dlpack.from_dlpack(ta), jax.dlpack.from_dlpack(tb)
        fj = jax.jit(lambda a, b: scanarray.linear_recurrence(a, b))
        fns["jax jit"] = lambda: fj(ja, jb)
    r = host_us(fns, sync=lambda: (torch.cuda.synchronize(), cupy.cuda.Device().synchronize()))
    text = (f"host us per call, {shape} float32 (medians of interleaved rounds): "
            + ", ".join(f"{k} {v:.1f}" for k, v in r.items())
            + f"; torch/cupy {r['torch'] / r['cupy']:.2f}x, requires_grad/cupy {r['torch, requires_grad'] / r['cupy']:.2f}x,"
            f" fwd+bwd torch/cupy {r['torch fwd+bwd'] / r['cupy fwd+vjp']:.2f}x")
    log(text)
    return text


COLUMNS = [
    ("floor_ms", "floor", "{:.3f}"),
    ("ours_ms", "ours/torch", "{:.3f}"),
    ("fpscan_ms", "fpscan", "{:.3f}"),
    ("acc_warp_ms", "acc warp", "{:.3f}"),
    ("acc_triton_ms", "acc triton", "{:.3f}"),
    ("best_peer_over_ours", "best peer/ours", "{:.2f}x"),
    ("ours_over_floor", "ours/floor", "{:.2f}x"),
    ("jax_ours_ms", "ours/JAX", "{:.3f}"),
    ("jax_assoc_ms", "assoc_scan", "{:.3f}"),
    ("assoc_over_jax_ours", "assoc/ours", "{:.1f}x"),
    ("bwd_over_fwd", "bwd/fwd", "{:.2f}"),
    ("bwd_over_fwd_gpu", "bwd/fwd GPU", "{:.2f}"),
    ("ours_mem_x", "mem ours", "{:.2f}x"),
    ("fpscan_mem_x", "mem fpscan", "{:.2f}x"),
    ("acc_warp_mem_x", "mem acc warp", "{:.2f}x"),
]


def table(rows):
    cols = [c for c in COLUMNS if any(c[0] in r for r in rows)]
    lines = ["| shape | " + " | ".join(c[1] for c in cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for r in rows:
        cells = [c[2].format(r[c[0]]) if c[0] in r else "-" for c in cols]
        lines.append(f"| {r['workload']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer rounds (about half a minute on an H200 once the peers are built)")
    ap.add_argument("--only", default=None, help="shapes whose label contains one of these ;-separated strings")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--cpu", action="store_true", help="host overhead through torch on the CPU only")
    ap.add_argument("--cpu-calls", type=int, default=200)
    ap.add_argument("--cpu-rounds", type=int, default=15)
    args = ap.parse_args(argv)
    if args.cpu:
        return cpu_main(args)

    import cupy
    import torch

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from bench_gpu import Peers, copy_bandwidth, queued_us

    reps, budget = (5, 2.0) if args.quick else (15, 6.0)
    logs = []

    def log(msg):
        print(msg, flush=True)
        logs.append(msg)

    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    device = props["name"].decode()
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    copy_gbs = copy_bandwidth(reps)
    log(f"device: {device}; torch {torch.__version__}, CuPy {cupy.__version__}; copy bandwidth {copy_gbs:.0f} GB/s "
        "(1 GiB device to device, bytes read + written)")
    peers = Peers(log)
    ctx = {"copy_Bps": copy_gbs * 1e9, "peers": peers, "jax": peers.jax, "queued_us": queued_us}
    host_text = host_overhead(ctx, log)
    rows = []
    t_all = time.perf_counter()
    for label, shape in SHAPES:
        if args.only and not any(o in label for o in args.only.split(";")):
            continue
        t0 = time.perf_counter()
        try:
            rows.append(run_shape(label, shape, ctx, reps, budget, args.quick, log))
            log(f"{label}: {json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in rows[-1].items()})}"
                f" ({time.perf_counter() - t0:.1f} s)")
        except Exception:
            log(f"{label}: FAILED\n{traceback.format_exc()}")
        torch.cuda.empty_cache()
        cupy.get_default_memory_pool().free_all_blocks()
    text = (
        f"Device: {device}; {date}; torch {torch.__version__}; float32, forward + backward per call (ms, "
        f"medians of interleaved rounds); floor: 8 arrays at {copy_gbs:.0f} GB/s. best peer/ours > 1: scanarray "
        "faster. bwd/fwd: the backward alone over the forward alone through torch (GPU: launches queued). "
        "peak mem: device memory one forward + backward adds beyond its inputs, over h + the two gradients.\n\n"
        + table(rows) + "\n\n" + host_text + f"\n\n(total {time.perf_counter() - t_all:.0f} s)\n"
    )
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "bench_grad.md"), "w") as fh:
        fh.write(text + "\n<!-- log\n" + "\n".join(logs) + "\n-->\n")
    with open(os.path.join(args.out, "bench_grad.json"), "w") as fh:
        json.dump({"device": device, "date": date, "copy_GBs": copy_gbs, "rows": rows, "host": host_text}, fh,
                  indent=1)
    print()
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
