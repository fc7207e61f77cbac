#!/usr/bin/env bash
# Issue 6, CuPy dense method "chunked" (or METHOD=lookback), on the CUDA host (one device call):
# smoke check against a float64 NumPy loop with per-pass GPU times (chunked) or kernel time, plan
# and host time (lookback), the CuPy tests of the method, then the target shapes against JAX
# (bench_dense.py --targets; JAX in a child process of the same run). Usage:
#   source tools/gpu_env.sh; bash tools/gpu_dense_chunked.sh      # logs and tables under $OUT
#   source tools/gpu_env.sh; METHOD=lookback bash tools/gpu_dense_chunked.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export METHOD=${METHOD:-chunked}
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/device.txt"
date -u +"start %H:%M:%S UTC"
timeout ${SMOKE_S:-100} python3 - <<'PY' 2>&1 | tee "$OUT/smoke.txt"
import os, time, numpy as np, cupy, scanarray
from scanarray.backends import _cupy_dense as cd
import sys; sys.path.insert(0, "benchmarks")
from bench_dense import host_time_us, parse_variants
METHOD = os.environ["METHOD"]
def loop(A, b, h0, reverse):
    c = A.dtype.kind == "c" or b.dtype.kind == "c"
    A, b = A.astype(np.complex128 if c else np.float64), b.astype(np.complex128 if c else np.float64)
    L, T, n = b.shape
    A = np.broadcast_to(A, (L, T, n, n)); h = np.zeros((L, n), b.dtype) if h0 is None else h0.astype(b.dtype)
    H = np.empty_like(b)
    for s in range(T):
        t = T - 1 - s if reverse else s
        h = np.einsum("lij,lj->li", A[:, t], h) + b[:, t]; H[:, t] = h
    return H
rng = np.random.default_rng(0)
bad = 0
CASES = [("float32", 64, 1024, 16, False, False, True), ("float32", 8, 1000, 64, False, True, True),
         ("float32", 3, 50, 5, True, False, False), ("float64", 5, 333, 34, False, True, True),
         ("complex64", 2, 170, 16, False, False, True), ("complex128", 2, 170, 7, False, True, True),
         ("float32", 2, 200, 128, False, False, True), ("float64", 2, 200, 128, False, False, True),
         ("float32", 130, 100, 3, False, False, False), ("float64", 4, 1024, 16, True, True, True),
         ("float32", 4, 300, 64, True, False, True), ("float32", 3, 257, 40, False, False, True),
         ("float32", 2, 2000, 64, False, True, False)]
if METHOD == "lookback":  # n <= 32 (n = 64: the chunked fallback)
    CASES = [("float32", 64, 1024, 16, False, False, True), ("float32", 8, 1000, 32, False, True, True),
             ("float32", 3, 50, 5, True, False, False), ("float64", 5, 333, 13, False, True, True),
             ("complex64", 2, 170, 16, False, False, True), ("complex128", 2, 170, 7, False, True, True),
             ("float32", 130, 100, 3, False, False, False), ("float64", 4, 1024, 16, True, True, True),
             ("float32", 16, 4096, 8, False, False, True), ("float32", 2, 200, 64, False, False, True)]
for dt, L, T, n, inv, rev, h0on in CASES:
    A = rng.standard_normal((L, 1 if inv else T, n, n)) * (0.9 / (2 * np.sqrt(n) + 1))
    b = rng.standard_normal((L, T, n)); h0 = rng.standard_normal((L, n)) if h0on else None
    if dt.startswith("complex"):
        A, b = A + 0.3j * A[..., ::-1, :], b + 1j * b[..., ::-1]
        h0 = None if h0 is None else h0 + 0.5j
    A, b = A.astype(dt), b.astype(dt)
    h0 = None if h0 is None else h0.astype(dt)
    t0 = time.perf_counter()
    try:
        h = scanarray.linear_recurrence(cupy.asarray(A), cupy.asarray(b), dense=True, backend="cupy", method=METHOD,
                                        initial=None if h0 is None else cupy.asarray(h0), reverse=rev).get()
        ref = loop(A, b, h0, rev)
        err = float(np.linalg.norm(h - ref) / np.linalg.norm(ref))
    except Exception as e:  # noqa: BLE001
        err, h = float("nan"), repr(e)[:300]
    limit = 1e-5 if dt in ("float32", "complex64") else 1e-12
    ok = err <= limit
    bad += not ok
    print(f"smoke {METHOD} {dt:10s} L={L:3d} T={T:4d} n={n:3d} inv={inv:d} rev={rev:d} h0={h0on:d} err={err:.1e} "
          f"{'ok' if ok else 'FAIL'} ({time.perf_counter() - t0:.1f} s)" + ("" if ok else f" {h}"))
print("SMOKE", "ok" if bad == 0 else f"{bad} FAILED")
if METHOD == "lookback":
    # GPU time per call (events), the launch, host time per call; a few chunk shapes (L, W)
    for B, T, n, inv in ((64, 1024, 16, False), (64, 1024, 16, True), (8, 4096, 32, False)):
        rs = cupy.random.RandomState(1)
        A = (rs.standard_normal((B, 1 if inv else T, n, n)) * (0.9 / (2 * np.sqrt(n) + 1))).astype(cupy.float32)
        b = rs.standard_normal((B, T, n), dtype=cupy.float32)
        out = cupy.empty_like(b)
        # (L, W, ring, look-back depth, tensor-core maps, resident warps per SM the registers allow);
        # None: the default; LOOKBACK_VARIANTS="L,W,R,D,M,MINW;..." adds more (empty fields: None)
        variants = [(None, None, None, None, True, None), (None, None, None, None, False, None)]
        variants += parse_variants(os.environ.get("LOOKBACK_VARIANTS"), flags=(4,))
        for L, W, R, D, M, MW in variants if n == 16 and not inv else variants[:2]:
            cd.LOOKBACK_L, cd.LOOKBACK_W, cd.LOOKBACK_RING, cd.LOOKBACK_DEPTH, cd.LOOKBACK_MMA = L, W, R, D, M
            # MINW -1: one TF32 product per multiply (timing only), -2: hi rounded by cvt.rna
            cd.LOOKBACK_MINW, cd.LOOKBACK_SPLIT = (MW, None) if MW is None or MW >= 0 else (None, {-1: 0, -2: 1}[MW])
            try:
                f = lambda: scanarray.linear_recurrence(A, b, dense=True, backend="cupy", method="lookback", out=out)
                for _ in range(3):
                    f()
                cupy.cuda.Device().synchronize()
                e0, e1, ts = cupy.cuda.Event(), cupy.cuda.Event(), []
                for _ in range(20):
                    e0.record(); f(); e1.record(); e1.synchronize()
                    ts.append(cupy.cuda.get_elapsed_time(e0, e1) * 1e3)
                issued, per = host_time_us(f, reps=300)
                key = [k for k in cd._lb_plans if k[3] == b.shape and k[6:8] == (L, W) and k[9:14] == (R, D, M, cd.LOOKBACK_MINW, cd.LOOKBACK_SPLIT)][-1]
                p = cd._lb_plans[key]
                try:  # resident blocks per SM (occupancy API)
                    occ = cupy.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(p[0].ptr, p[3], p[1])
                except Exception:  # noqa: BLE001
                    occ = "?"
                print(f"lookback (B={B}, T={T}, n={n}, A {'invariant' if inv else 'varying'}) L={p[10]} W={p[3] // 32} "
                      f"ring={int(p[11][-1])} depth={D or 'default'} maps={'mma' if cd._lb_mma(np.dtype(np.float32), p[8]) else 'fma'} minw={MW}: "
                      f"{np.median(ts):.1f} us per call (events, median of 20, min {min(ts):.1f}); host {issued:.1f} us "
                      f"issued, {per:.1f} us back-to-back; grid {p[2]} block {p[3]} smem {p[1]} regs {p[0].num_regs} blocks/SM {occ}")
            except Exception as e:  # noqa: BLE001
                print(f"lookback (B={B}, T={T}, n={n}) L={L} W={W}: {e!r}"[:300])
            if n == 16 and not inv:  # where the time goes: per-tile phase timestamps
                grid = p[2]
                cd.LOOKBACK_DIAG = dg = cupy.zeros(grid * 10, cupy.int64)
                f()
                cupy.cuda.Device().synchronize()
                cd.LOOKBACK_DIAG = None
                d = dg.get().reshape(grid, 10).astype(np.float64)
                t0 = d[:, 0].min()
                ph = np.diff(d[:, [0, 1, 2, 3, 4, 5, 6, 7]], axis=1) / 1e3
                names = ["stage", "maps", "agg+publish", "poll", "apply", "hend+chain", "rerun+store"]
                print(f"  diag: makespan {(d[:, 7].max() - t0) / 1e3:.1f} us; tile start median "
                      f"{np.median(d[:, 0] - t0) / 1e3:.1f} max {(d[:, 0].max() - t0) / 1e3:.1f} us; tile life median "
                      f"{np.median(d[:, 7] - d[:, 0]) / 1e3:.1f} us; look-back depth median {np.median(d[:, 8]):.0f} "
                      f"max {d[:, 8].max():.0f}; SMs {len(np.unique(d[:, 9]))}")
                print("  phase us median/p90: " + ", ".join(f"{nm} {np.median(ph[:, i]):.2f}/{np.percentile(ph[:, i], 90):.2f}"
                                                          for i, nm in enumerate(names)))
            cd.LOOKBACK_MMA, cd.LOOKBACK_MINW, cd.LOOKBACK_SPLIT = True, None, None
    cd.LOOKBACK_L = cd.LOOKBACK_W = cd.LOOKBACK_RING = cd.LOOKBACK_DEPTH = None
    raise SystemExit(0)
# per-pass GPU time (events between the three launches), the plans, and host time per call, with
# the products on tensor cores (float32, 9 <= n <= 64, the default) and with FMAs; then variants of
# the tensor-core kernel at (8, 4096, 64): CHUNK_VARIANTS="L,D,minb,split,fresh,wg,wgopt;..." (empty
# or missing: None; wgopt: CHUNK_MMA_WG_OPT, the warpgroup kernel's DENSE_WG_OPT)
def phases(f, reps=20):
    for _ in range(3):
        f()
    cupy.cuda.Device().synchronize()
    ph = []
    for _ in range(reps):
        cd.PHASE_EVENTS = ev = []
        f()
        ev[-1].synchronize()
        ph.append([cupy.cuda.get_elapsed_time(ev[i], ev[i + 1]) for i in range(3)])
    cd.PHASE_EVENTS = None
    return np.median(np.array(ph), axis=0) * 1e3
variants = [(None,) * 7] + [v + (None,) * (7 - len(v)) for v in parse_variants(os.environ.get("CHUNK_VARIANTS"))]
runs = [(s, m, v) for s in ((8, 4096, 64, False), (64, 1024, 16, False), (8, 4096, 32, False), (64, 1024, 16, True))
        for m in (True, False) for v in (variants if (s[2] == 64 and m) else variants[:1])]
for (B, T, n, inv), mma, (VL, VD, minb, split, fresh, wg, wgopt) in runs:
    cd.CHUNK_MMA, cd.CHUNK_L, cd.CHUNK_D = mma, VL, VD
    cd.CHUNK_MMA_MINB, cd.CHUNK_MMA_SPLIT, cd.CHUNK_MMA_FRESH, cd.CHUNK_MMA_WG = minb, split, fresh, wg
    cd.CHUNK_MMA_WG_OPT = wgopt
    rs = cupy.random.RandomState(1)
    A = (rs.standard_normal((B, 1 if inv else T, n, n), dtype=cupy.float32) * float(0.9 / (2 * np.sqrt(n) + 1)))
    A = A.astype(cupy.float32)
    b = rs.standard_normal((B, T, n), dtype=cupy.float32)
    out = cupy.empty_like(b)
    f = lambda: scanarray.linear_recurrence(A, b, dense=True, backend="cupy", method="chunked", out=out)
    try:
        med = phases(f)
        issued, per = host_time_us(f, reps=300)
    except Exception as e:  # noqa: BLE001
        print(f"phases (B={B}, T={T}, n={n}) mma={mma} variant {(VL, VD, minb, split, fresh, wg, wgopt)}: {e!r}"[:300])
        continue
    L, C = cd.chunk_shape(np.dtype(np.float32), n, B, T)
    key = [k for k in cd._chunk_plans if k[1] == np.float32 and k[2] == n and k[3] == B and k[4] == C
           and k[-7:-2] == (mma, minb, split, fresh, wg) and k[7] == wgopt][-1]
    (fp, gp, bp, sp, G), carry, rerun = cd._chunk_plans[key]
    try:
        occ = cupy.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(fp.kernel.ptr, bp[0], sp)
    except Exception:  # noqa: BLE001
        occ = "?"
    print(f"phases (B={B}, T={T}, n={n}, A {'invariant' if inv else 'varying'}, L={L}, "
          f"{'tensor-core' if cd._chunk_mma_n(np.dtype(np.float32), n) else 'FMA'} products, D={VD}, minb={minb}, "
          f"split={split}, fresh={fresh}, wg={wg}, wgopt={wgopt}): products {med[0]:.1f} us, carries {med[1]:.1f} us, rerun {med[2]:.1f} us "
          f"(GPU, events, median of 20); host {issued:.1f} us issued, {per:.1f} us per call back-to-back (300 calls); "
          f"products grid {gp} block {bp} smem {sp} regs {fp.num_regs} blocks/SM {occ}")
cd.CHUNK_MMA, cd.CHUNK_L, cd.CHUNK_D = True, None, None
cd.CHUNK_MMA_MINB = cd.CHUNK_MMA_SPLIT = cd.CHUNK_MMA_FRESH = cd.CHUNK_MMA_WG = cd.CHUNK_MMA_WG_OPT = None
PY
date -u +"accuracy %H:%M:%S UTC"
# the tensor-core products' accuracy by variant, on mixed-sign and same-sign data
timeout ${ACC_S:-120} python3 benchmarks/dense_split_accuracy.py 2>&1 | tee "$OUT/accuracy.txt" | tail -30
date -u +"tests %H:%M:%S UTC"
NX=""; python3 -c "import xdist" 2>/dev/null && NX="-n 4"
# the CuPy cases of the method in the dense tests and the shared contract suite (--maxfail: one device call)
timeout ${TEST_S:-140} python3 -m pytest tests/test_dense.py tests/test_contract.py -q --maxfail=15 -k "cupy and $METHOD" $NX \
  -p no:cacheprovider -rf \
  > "$OUT/pytest_dense_$METHOD.txt" 2>&1
echo "pytest rc=$?"; grep -E "^FAILED|^E  |passed|failed|error" "$OUT/pytest_dense_$METHOD.txt" | cut -c1-300 | tail -20
date -u +"bench %H:%M:%S UTC"
BENCH_SEQ_VARIANTS=0 BENCH_JAX_S=${BENCH_JAX_S:-70} timeout ${BENCH_S:-150} python3 benchmarks/bench_dense.py --gpu --targets \
  --out "$OUT/dense_${METHOD}_targets.md" > "$OUT/bench.log" 2>&1; echo "bench rc=$?"
grep -E "host time|JAX worker" "$OUT/bench.log"
date -u +"end %H:%M:%S UTC"
grep -E "^phases|^lookback|^  |^SMOKE" "$OUT/smoke.txt" | cut -c1-300
grep -E "^\| (8|64) \| (4096|1024|8) \|" "$OUT/dense_${METHOD}_targets.md"
