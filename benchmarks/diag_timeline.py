#!/usr/bin/env python3
"""A timeline of every look-back tile of a long row (issue 4): where a tile's life goes.

Builds the CuPy backend's ``scan.cu`` with ``-DSCANARRAY_LB_DIAG=4``: thread 0 of every tile
of ``rows_staged`` / ``rows_tiles`` stamps the global timer and its SM's clock when the block
starts, when it has its tile index, when its own groups are reduced, when all are (barrier),
when the aggregate is published, when the look-back found the entering state, when the
inclusive state is published and when its writes are issued; plus its SM, the look-back depth
and the polling rounds. Prints, per workload:

- the median and mean length of each phase (ns, from the SM clock scaled by the global timer);
- tiles resident per SM and, of those, tiles whose loads are in flight (time averages over the
  middle 80% of the kernel);
- how long after its predecessor published its inclusive state a tile found its own, and after
  everything its look-back used (the aggregates it applied, the state it started from) was
  published; when each look-back round came back.

The records go to ``$OUT/timeline_<kernel>_<steps>.npz`` (times relative to the first stamp).
It also times (kernel only, CUDA events) the shipped build (tiles take ``blockIdx.x`` as their
index, as CUB's scan does, since 2026-11-28), the timeline build, a build whose tiles take a ticket
from the atomic counter (``-DSCANARRAY_TILE_TICKETS=1``, shipped before), and with
``DIAG_OTHER_SOURCE=path`` another version of ``scan.cu``.

Results (H200, 2026-11-21 19:10 UTC, ``rows_staged``, one row of 2**28 float32; docs/gpu.md): a
tile lives ~12 us: 0.55 taking its index, 3.2 loading and reducing, 0.55 publishing its
aggregate, 5.7 looking back, 1.3 writing. The look-back's first round (the 32 nearest
predecessors) comes back 2.7 us after the tile's own aggregate, waiting for the slowest of them;
each further round ~0.45 us; the nearest known state is ~96 tiles back. Per SM, 5.8 tiles
resident: 2.2 loading, 2.0 looking back.

Usage: python benchmarks/diag_timeline.py   (on the GPU; DIAG_ONLY=";"-separated workload substrings)
"""

from __future__ import annotations

import os

import cupy
import numpy as np
from diag_lookback import time_against, variant_kernel

from scanarray import _config
from scanarray.backends import _cupy_common, _cupy_scan

GB = 1e9
SLOTS = 24
PHASES = ["start -> index", "index -> own groups reduced", "own -> all reduced (barrier)",
          "all reduced -> aggregate published", "published -> state found (look-back)",
          "found -> inclusive published", "inclusive published -> writes issued"]
#: (label, number of float32 steps, CUPY_SCAN overrides)
WORK = [("(1,1,2**28) rows_staged", 2**28, {}), ("(1,1,2**24) rows_staged", 2**24, {}),
        ("(1,1,2**28) rows_tiles", 2**28, {"rows_staged": {4: None}})]
ONLY = [x for x in os.environ.get("DIAG_ONLY", "").split(";") if x]
VARIANTS = [("shipped", ()), ("timeline build", ("-DSCANARRAY_LB_DIAG=4",)),
            ("tile index from a ticket", ("-DSCANARRAY_TILE_TICKETS=1",))]
#: DIAG_OTHER_SOURCE=path: also time that version of scan.cu (A/B in one process)
OTHER = os.environ.get("DIAG_OTHER_SOURCE")
if OTHER:
    VARIANTS.append((f"other source ({os.path.basename(OTHER)})", ("@" + OTHER,)))


def analyse(rec, nbytes):
    r = rec[rec[:, 1] > 0].astype(np.int64)
    g, c, sm = r[:, :8], r[:, 8:16], r[:, 16]
    full = (g > 0).all(axis=1)  # tiles that looked back and published (not a row's first or last)
    span = g[:, 7].max() - g[:, 0].min()
    ns_per_cycle = np.median((g[full, 7] - g[full, 0]) / np.maximum(c[full, 7] - c[full, 0], 1))
    steps = np.diff(np.unique(g[:, 1]))
    out = [(f"  {len(r)} tiles, {full.sum()} with every stamp; stamps span {span / 1e3:.1f} us "
            f"({nbytes / span:.0f} GB/s); {ns_per_cycle:.3f} ns per SM cycle; smallest step of the "
            f"global timer {steps[steps > 0].min() if (steps > 0).any() else 0} ns")]
    d = np.diff(c[full], axis=1) * ns_per_cycle
    life = (c[full, 7] - c[full, 0]) * ns_per_cycle
    out.append(f"  tile life: median {np.median(life):.0f} ns, mean {life.mean():.0f} ns")
    for i, name in enumerate(PHASES):
        out.append(f"    {name:40s} median {np.median(d[:, i]):7.0f}  mean {d[:, i].mean():7.0f}  "
                   f"p90 {np.percentile(d[:, i], 90):7.0f} ns ({100 * d[:, i].mean() / life.mean():.0f}%)")
    depth, polls = r[full, 17], r[full, 18]
    out.append(f"  look-back depth mean {depth.mean():.1f} (p10/p50/p90 {np.percentile(depth, 10):.0f}/"
               f"{np.median(depth):.0f}/{np.percentile(depth, 90):.0f}), polls mean {polls.mean():.2f}")
    # occupancy over the middle 80% of the kernel, sampled every 50 ns
    t0, t1 = g[:, 0].min() + 0.1 * span, g[:, 0].min() + 0.9 * span
    ts = np.arange(t0, t1, 50)
    res, load, look = [], [], []
    for s in np.unique(sm):
        m = sm == s
        res.append(_live(g[m, 0], g[m, 7], ts))
        load.append(_live(g[m, 1], g[m, 2], ts))
        mf = m & full
        look.append(_live(g[mf, 4], g[mf, 5], ts))
    res, load, look = (np.mean(x) for x in (res, load, look))
    no_load = np.mean([(_live(g[sm == s, 1], g[sm == s, 2], ts, count=False) == 0).mean() for s in np.unique(sm)])
    out.append(f"  per SM (middle 80%): {res:.2f} tiles resident, {load:.2f} loading, {look:.2f} looking back; "
               f"no tile loading {100 * no_load:.0f}% of the time")
    # when did a tile's predecessor publish its inclusive state, relative to this tile's find?
    idx = np.nonzero(full)[0]
    prev = idx - 1
    ok = prev >= 0
    idx, prev = idx[ok], prev[ok]
    ok = g[prev, 6] > 0
    lag = g[idx[ok], 5] - g[prev[ok], 6]
    out.append(f"  state found minus predecessor's inclusive published: median {np.median(lag):.0f} ns, "
               f"p10 {np.percentile(lag, 10):.0f}, p90 {np.percentile(lag, 90):.0f}")
    agg = g[idx[ok], 4] - g[prev[ok], 4]
    out.append(f"  aggregate published minus predecessor's: median {np.median(agg):.0f} ns, "
               f"p10 {np.percentile(agg, 10):.0f}, p90 {np.percentile(agg, 90):.0f}")
    # what the look-back waited for: the predecessors' aggregates and the state it found
    ready = np.zeros(len(g), np.int64)
    ids = np.nonzero(full)[0]
    for i in ids:
        d = r[i, 17]
        lo = max(i - d, 0)
        agg_t = g[lo:i, 4].max() if i > lo else 0
        p_t = g[i - 1 - d, 6] if i - 1 - d >= 0 else 0
        ready[i] = max(agg_t, p_t)
    w = g[ids, 5] - ready[ids]
    lb = g[ids, 5] - g[ids, 4]
    out.append(f"  look-back: state found minus the moment everything it used was published: median "
               f"{np.median(w):.0f} ns, p10 {np.percentile(w, 10):.0f}, p90 {np.percentile(w, 90):.0f} "
               f"(the look-back itself: median {np.median(lb):.0f} ns)")
    rt = r[ids][:, 19:24].astype(np.int64)
    prev_t = g[ids, 4]
    for j in range(5):
        m = rt[:, j] > 0
        if m.any():
            dt = rt[m, j] - prev_t[m]
            out.append(f"    round {j} came back {np.median(dt):.0f} ns (median; p90 {np.percentile(dt, 90):.0f}) "
                       f"after the {'aggregate' if j == 0 else 'previous round'} ({m.sum()} tiles)")
        prev_t = np.where(rt[:, j] > 0, rt[:, j], prev_t)
    return out


def _save(rec, path):
    """The records, compact: times relative to the first stamp (int32 ns / cycles), -1 where missing."""
    r = rec[rec[:, 1] > 0].astype(np.int64)
    g0 = r[:, 0].min()
    gt = np.where(r[:, list(range(8)) + list(range(19, 24))] > 0, r[:, list(range(8)) + list(range(19, 24))] - g0, -1)
    ck = np.where(r[:, 8:16] > 0, r[:, 8:16] - r[:, 8:9], -1)
    np.savez_compressed(path, gtimer=gt.astype(np.int32), clock=ck.astype(np.int32), sm=r[:, 16].astype(np.int16),
                        depth=r[:, 17].astype(np.int32), polls=r[:, 18].astype(np.int32))


def _live(begin, end, ts, count=True):
    """Number of intervals [begin, end) containing each time in ts (sorted)."""
    n = np.searchsorted(np.sort(begin), ts, side="right") - np.searchsorted(np.sort(end), ts, side="right")
    return n.mean() if count else n


def main():
    rng = np.random.default_rng(0)
    lines = ["| workload | variant | GB/s | ms |", "|---|---|---|---|"]
    notes = []
    for label, n, cfg in WORK:
        if ONLY and not any(x in label for x in ONLY):
            continue
        a = cupy.asarray((0.9 + 0.1 * rng.random((1, n))).astype(np.float32))
        b = cupy.asarray(rng.standard_normal((1, n), dtype=np.float32))
        out = cupy.empty_like(b)
        nb = a.nbytes + 2 * b.nbytes
        ref = None
        for vlabel, opts in VARIANTS:
            with variant_kernel() as use:
                for k, v in cfg.items():
                    _config.CUPY_SCAN[k] = {**_config.CUPY_SCAN[k], **v}
                plan = _cupy_scan.plan(a, b, out, np.dtype(np.float32), "lookback")
                src = [o[1:] for o in opts if o[0] == "@"]
                if src:
                    with open(src[0]) as fh:
                        code = fh.read()
                else:
                    code = _cupy_common.read_source("scan.cu")
                mod = cupy.RawModule(code=code, options=_cupy_common.compile_options(*(o for o in opts if o[0] != "@")),
                                     name_expressions=[plan.name])
                use(plan, mod)
                if "LB_DIAG=4" in " ".join(opts):
                    rec = cupy.zeros((plan.grid, SLOTS), cupy.uint64)
                    cupy.ndarray((1,), cupy.uint64, mod.get_global("scanarray_lb_tl"))[0] = rec.data.ptr
                    for _ in range(3):  # the last of three launches
                        rec.fill(0)
                        plan.launch(cupy, a, b, out, None)
                    cupy.cuda.Device().synchronize()
                    notes.append(f"{label}, {plan.name.split('<')[0]}:")
                    host = rec.get()
                    notes += analyse(host, nb)
                    _save(host, os.path.join(os.environ.get("OUT", "/tmp"), f"timeline_{plan.name.split('<')[0].split(':')[-1]}_{n}.npz"))
                    print("\n".join(notes[-20:]), flush=True)
                    del rec
                ms, ref, same = time_against(plan, a, b, out, ref)
                lines.append(f"| {label} | {vlabel} | {nb / (ms * 1e-3) / GB:.0f} | {ms:.3f} |"
                             + ("" if same else " (h differs from shipped)"))
                print(lines[-1], flush=True)
        del a, b, out, ref
        cupy.get_default_memory_pool().free_all_blocks()
    print("\n".join(notes))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
