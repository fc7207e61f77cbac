#!/bin/bash
# Issue 4 on the CUDA host: build peers in the background, smoke, tests, benchmark.
# Usage (repo root, on the GPU host): bash tools/gpu_issue4.sh [tests|bench|all] [BENCH_ARGS...]
source tools/gpu_env.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
MODE=${1:-all}; shift || true
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"
bash tools/gpu_peers.sh  # fpscan and accelerated-scan, built in the background
export TORCH_EXTENSIONS_DIR=/tmp/torch_ext
el "smoke"
timeout 120 python3 - <<'PY' 2>&1 | tail -30
import time, numpy as np, cupy, scanarray
from scanarray.backends.cupy import scan as _cupy_scan
rng = np.random.default_rng(0)
for shape, axis in [((3, 10007), -1), ((5, 100), -1), ((10007, 3), 0), ((1, 2**22), -1)]:
    a = rng.uniform(-1, 1, shape).astype(np.float32); b = rng.standard_normal(shape).astype(np.float32)
    for m in ("lookback", "sequential"):
        t = time.time()
        try:
            h = scanarray.linear_recurrence(cupy.asarray(a), cupy.asarray(b), axis, backend="cupy", method=m).get()
        except Exception as e:
            import traceback; traceback.print_exc(); continue
        aa, bb = np.moveaxis(a, axis, -1).astype(np.float64), np.moveaxis(b, axis, -1).astype(np.float64)
        ref = np.zeros(aa.shape); s = np.zeros(aa.shape[:-1])
        for i in range(min(aa.shape[-1], 20000)):
            s = aa[..., i] * s + bb[..., i]; ref[..., i] = s
        n = min(aa.shape[-1], 20000)
        err = np.abs(np.moveaxis(h, axis, -1)[..., :n] - ref[..., :n]).max()
        print(shape, axis, m, "max err", err, f"{time.time()-t:.1f}s", flush=True)
PY
NX=""; python3 -c "import xdist" 2>/dev/null && NX="-n 4"
[ "$MODE" = bench ] || {
el "tests/test_cupy.py"
timeout 150 python3 -m pytest tests/test_cupy.py -q -m "not slow" $NX --tb=short -p no:cacheprovider 2>&1 | tail -40 | tee "$OUT/test_cupy.log"
el "slow tests (over 2**31 elements)"
timeout 90 python3 -m pytest tests/test_cupy.py -q -m slow --tb=short -p no:cacheprovider 2>&1 | tail -15 | tee "$OUT/test_slow.log"
el "shared suite -k cupy"
timeout 170 python3 -m pytest tests -k "cupy and not dense" -q $NX --maxfail=10 --tb=line -p no:cacheprovider 2>&1 | tail -30 | tee "$OUT/test_shared.log"
}
el "waiting for peer builds"; bash tools/gpu_peers.sh wait ${PEERS_WAIT:-300}  # the build takes ~125 s
tail -3 "$OUT/peer_fpscan.log" "$OUT/peer_acc.log" 2>/dev/null
[ "$MODE" = tests ] || { el "benchmark"; timeout ${BENCH_TIMEOUT:-240} python3 benchmarks/bench_gpu.py --out "$OUT" "$@" 2>&1 | tail -60; }
el "done"
