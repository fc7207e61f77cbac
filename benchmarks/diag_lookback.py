#!/usr/bin/env python3
"""Where the look-back kernel's time goes on long rows (issue 4): time variants that leave a stage out.

Builds the CuPy backend's kernels from ``scan.cu`` with ``-DSCANARRAY_LB_DIAG=n`` (see the
kernel source) and times the planned kernel alone:

- 0: the kernel as shipped;
- 1: no look-back (tiles publish but never wait: wrong results, the cost of waiting removed;
  rows and time-major);
- 2: as shipped, plus histograms of the look-back depth (tiles between a tile and the nearest
  predecessor that knew its state) and of the polling cycles (time-major: of the rounds of
  status reads, and of the reads that found a predecessor without its aggregate);
- 3: look-back without the serial application of the predecessors' aggregates (wrong results
  in general; with this data, a in [0.9, 1), the product of a over a 4096-step tile underflows
  to 0 in float32, so the state entering a tile does not matter and h comes out the same);
- tile index from a ticket (``-DSCANARRAY_TILE_TICKETS=1``): tiles take their index from the
  workspace's atomic counter, as shipped until 2026-11-28, instead of the block's index (as CUB's
  scan does, shipped since); ``=2``: the ticket is taken and waited for, but the tile is the
  block's index (so the two differ only in the tiles' order). The ``=2`` build timed on
  2026-11-28 at 14:34 UTC (then ``SCANARRAY_TILE_BY_BLOCK=2``) never read its ticket, so the
  compiler dropped its store and no thread waited: it timed the block index, not the wait;
- L2 prefetch (``-DSCANARRAY_ROWS_L2PF=n``; shipped with 128, 0 turns it off): a tile's first
  thread asks L2 for the bytes of the tile n tiles ahead (rows_wide prefetching its own next
  tiles, ``SCANARRAY_WIDE_L2PF``, was timed in the tree of 3f4d952 and is gone).

Timed on 2026-11-28 (13:00-13:17 UTC) and gone, all slower or no faster on one long row
(benchmarks/results/gpu_2026-11-28.md, W; their builds are in the trees named there): L2
eviction hints on h's stores, the a / b copies and the prefetch (``SCANARRAY_ST_CS``,
``SCANARRAY_LD_EF``, ``SCANARRAY_PF_EL``, tree of ebac297), the look-back's first rounds read
at once (``SCANARRAY_LB_SPEC``, tree of 293d142) and the first wave of tiles prefetching the
next wave (``SCANARRAY_ROWS_L2PF_FIRST=n``: tiles with a ticket below n also prefetched
the tile n tickets ahead; not committed). Timed on 2026-11-28 (14:36-14:51 UTC) and gone, no
faster time-major (gpu_2026-11-28.md, Z; tree of 0a42c06): ``lanes_vec`` with persistent blocks
holding the tickets of their next one or two tiles (``CUPY_SCAN["lanes_vec_persist"]``), or
taking tiles in a static round robin (tree of 224e56b), and tiles by block index made safe by
started flags and a chain computing an unstarted predecessor's state (tree of ea8a97a,
``CUPY_SCAN["lanes_vec_block_index"]``, ``-DSCANARRAY_LB_FORCE_CHAIN``).
``DIAG_ROUNDS=n`` runs the variants n times, alternating, on each workload.

Results of the investigation (H200, 2026-11-21, docs/gpu.md): without look-back one row of
2**28 float32 runs at 4266 GB/s (100% of the copy) against 3026 with it; the nearest
predecessor that knows its state is on average 80 tiles back; neither a back-off in the spin
loop (20-400 ns) nor reading 2 or 4 rounds of statuses at once sped it up (the latter spills).

GB/s = bytes of a + b read + h written / median time (CUDA events).
Usage: [DIAG_ONLY="time-major"] [DIAG_VARIANTS="shipped;other"] python benchmarks/diag_lookback.py
"""

from __future__ import annotations

import contextlib
import os

import cupy
import numpy as np

from bench_gpu import copy_bandwidth, timed_burst  # noqa: E402  (this directory: run as benchmarks/diag_lookback.py)
from scanarray import _config
from scanarray.backends import _cupy_common, _cupy_scan

GB = 1e9
#: (label, shape, CUPY_SCAN overrides); a shape (T, N) named "time-major" is scanned along axis 0
WORK = [("(1,1,2**24)", (1, 2**24), {}), ("(1,1,2**28)", (1, 2**28), {}),
        ("(2,256,65536) look-back tiles", (512, 65536), {"rows_block_fill": 1e9}),
        ("time-major (65536,4096) ax0", (65536, 4096), {}), ("time-major (16384,16384) ax0", (16384, 16384), {}),
        ("time-major (262144,1024) ax0", (262144, 1024), {}),
        ("(2,256,65536) default plan", (512, 65536), {}), ("(8,1024,4096) one-tile rows", (8192, 4096), {})]
#: DIAG_ONLY / DIAG_VARIANTS: ;-separated substrings of the workload / variant labels to run
#: ("=label": that label exactly)
ONLY = [x for x in os.environ.get("DIAG_ONLY", "").split(";") if x]
WHICH = [x for x in os.environ.get("DIAG_VARIANTS", "").split(";") if x]


def timed(fn, reps=15):
    return timed_burst(fn, reps, burst=1, budget_s=60)[0]


def time_against(plan, a, b, out, ref):
    """Kernel-only ms of ``plan`` on ``a, b`` into ``out``; ``ref``: the first variant's h (None:
    this is the first, kept); and whether this variant's h equals it."""
    ms = timed(lambda: plan.launch(cupy, a, b, out, None))
    if ref is None:
        ref = out.copy()
    return ms, ref, bool(cupy.array_equal(out, ref))


#: DIAG_L2PF: ;-separated prefetch distances (tickets) for rows_tiles / rows_staged; DIAG_L2PF_SHAPES:
#: those timed with the other tile shapes below (float32 long rows; rows_staged None: rows_tiles)
PF_ROWS = [int(x) for x in os.environ.get("DIAG_L2PF", "32;128;512").split(";") if x]
PF_ROWS_SHAPES = [int(x) for x in os.environ.get("DIAG_L2PF_SHAPES", "").split(";") if x]
PF_SHAPES = [("registers (256,16,4)", {"rows_staged": None}),
             ("registers (256,32,2)", {"rows_staged": None, "rows_long": (256, 32, 2)}),
             ("staged (128,32,4)", {"rows_staged": (128, 32, 4)}),
             ("staged (128,16,12)", {"rows_staged": (128, 16, 12)}),
             ("staged (256,16,6)", {"rows_staged": (256, 16, 6)}),
             ("staged (64,64,6)", {"rows_staged": (64, 64, 6)}),
             ("staged (64,32,12)", {"rows_staged": (64, 32, 12)}),
             ("staged (128,28,7)", {"rows_staged": (128, 28, 7)}),
             ("staged (128,24,8)", {"rows_staged": (128, 24, 8)})]
PF_SHAPES = [x for x in PF_SHAPES if not os.environ.get("DIAG_L2PF_ONLY") or
             any(k in x[0] for k in os.environ["DIAG_L2PF_ONLY"].split(";"))]

VARIANTS = [  # (label, compile definitions, {CUPY_SCAN key: its float32 entry} or None)
    ("shipped", {}, None),
    ("no look-back (wrong results)", {"SCANARRAY_LB_DIAG": 1}, None),
    ("no serial apply (wrong results)", {"SCANARRAY_LB_DIAG": 3}, None),
    ("tile index from a ticket", {"SCANARRAY_TILE_TICKETS": 1}, None),
    ("ticket waited, tile index = blockIdx.x", {"SCANARRAY_TILE_TICKETS": 2}, None),
] + [
    # the bytes of the tile some tiles ahead asked into L2 (prefetch_l2)
    (f"L2 prefetch, rows {n}", {"SCANARRAY_ROWS_L2PF": n}, None) for n in PF_ROWS
] + [
    (f"L2 prefetch, rows {n}, {label}", {"SCANARRAY_ROWS_L2PF": n}, over)
    for n in PF_ROWS_SHAPES for label, over in PF_SHAPES
] + [
    ("histograms, shipped", {"SCANARRAY_LB_DIAG": 2}, None),
    ("histograms, L2 prefetch, rows 128", {"SCANARRAY_LB_DIAG": 2, "SCANARRAY_ROWS_L2PF": 128}, None),
    ("no look-back (wrong results), L2 prefetch, rows 128", {"SCANARRAY_LB_DIAG": 1, "SCANARRAY_ROWS_L2PF": 128},
     None),
]
# A/B against another version of the kernel source: DIAG_OTHER_SOURCE=path (compiled in place of
# scan.cu, with and without histograms).
OTHER = os.environ.get("DIAG_OTHER_SOURCE")
if OTHER:
    VARIANTS += [("other source", {"@source": OTHER}, None),
                 ("histograms, other source", {"@source": OTHER, "SCANARRAY_LB_DIAG": 2}, None)]


@contextlib.contextmanager
def variant_kernel():
    """One variant: ``use(plan, module)`` makes ``plan`` launch ``module``'s kernel; on exit the
    plan forgets it and ``CUPY_SCAN``, which a variant may change, is restored."""
    saved = {k: (dict(v) if isinstance(v, dict) else v) for k, v in _config.CUPY_SCAN.items()}
    real_get = _cupy_common.get_function
    used = []

    def use(plan, mod):
        plan.fns.clear()  # plans keep their compiled kernel: take this variant's
        used.append(plan)
        _cupy_common.get_function = lambda src, name, options=(), group=(), _m=mod: _m.get_function(name)

    try:
        yield use
    finally:
        for plan in used:
            plan.fns.clear()
        _cupy_common.get_function = real_get
        for k, v in saved.items():
            _config.CUPY_SCAN[k] = dict(v) if isinstance(v, dict) else v


#: DIAG_ROUNDS: how many times the variants run, alternating, on each workload (drift shows)
ROUNDS = int(os.environ.get("DIAG_ROUNDS", "1"))


def main():
    rng = np.random.default_rng(0)
    modules = {}
    copy_bw = copy_bandwidth(7)
    lines = [f"copy {copy_bw:.0f} GB/s (1 GiB device-to-device, read + written); kernel only, median of 15",
             "| workload | variant | GB/s | % copy | ms | same h as shipped |", "|---|---|---|---|---|---|"]
    hists = []
    for label, shape, cfg in WORK:
        if ONLY and not any(x in label for x in ONLY):
            continue
        a = cupy.asarray((0.9 + 0.1 * rng.random(shape)).astype(np.float32))
        b = cupy.asarray(rng.standard_normal(shape, dtype=np.float32))
        out = cupy.empty_like(b)
        if label.startswith("time-major"):  # canonical views (lanes, T): time is axis 0 of the data
            a, b, out = a.T, b.T, out.T
        ref = None
        nb = a.nbytes + 2 * b.nbytes
        for vlabel, defs, over in [v for _ in range(ROUNDS) for v in VARIANTS]:
            if WHICH and not any(x[1:] == vlabel if x[0] == "=" else x in vlabel for x in WHICH):
                continue
            with variant_kernel() as use:
                _config.CUPY_SCAN.update(cfg)
                for k, v in (over or {}).items():
                    _config.CUPY_SCAN[k] = {**_config.CUPY_SCAN[k], 4: v}
                plan = _cupy_scan.plan(a, b, out, np.dtype(np.float32), "lookback")
                key = (plan.name, tuple(sorted(defs.items())))
                if key not in modules:
                    opts = _cupy_common.compile_options(*(f"-D{k}={v}" for k, v in defs.items() if k[0] != "@"))
                    if "@source" in defs:
                        with open(defs["@source"]) as fh:
                            code = fh.read()
                    else:
                        code = _cupy_common.read_source("scan.cu")
                    modules[key] = cupy.RawModule(code=code, options=opts, name_expressions=[plan.name])
                mod = modules[key]
                use(plan, mod)
                if defs.get("SCANARRAY_LB_DIAG") == 2:
                    diag = cupy.ndarray((512,), cupy.uint64, mod.get_global("scanarray_lb_diag"))
                    diag.fill(0)
                    plan.launch(cupy, a, b, out, None)
                    cupy.cuda.Device().synchronize()
                    h = diag.get()
                    depth, polls = h[:256], h[256:]
                    if label.startswith("time-major"):  # lanes_tiles: depth 0-16, rounds at 128 + n
                        depth, rounds = h[:128], h[128:256]
                        print(f"{label}: look-back rounds 1/2/3/4: {'/'.join(str(x) for x in rounds[1:5])}")
                    tiles = depth.sum()
                    mean = float((np.arange(len(depth)) * depth).sum() / max(tiles, 1))
                    nz = np.nonzero(depth)[0]
                    hists.append(f"{label}: {tiles} tiles looked back; depth mean {mean:.1f}, "
                                 f"max {nz.max() if len(nz) else 0}, depth 0/1/2-7/8-31/32+: {depth[0]}/{depth[1]}/"
                                 f"{depth[2:8].sum()}/{depth[8:32].sum()}/{depth[32:].sum()}; polls 0/1/2/3+: "
                                 f"{polls[0]}/{polls[1]}/{polls[2]}/{polls[3:].sum()}")
                    print(hists[-1], flush=True)
                ms, ref, same = time_against(plan, a, b, out, ref)
                kern = plan.name.split("<")[1].split(",")[4:7]
                bw = nb / (ms * 1e-3) / GB
                lines.append(f"| {label} | {vlabel} ({','.join(kern)}) | {bw:.0f} | {100 * bw / copy_bw:.1f} | {ms:.3f} "
                             f"| {same} |")
                print(lines[-1], flush=True)
        del a, b, out, ref
        cupy.get_default_memory_pool().free_all_blocks()
    print("\n".join(lines))
    print("\n".join(hists))


if __name__ == "__main__":
    main()
