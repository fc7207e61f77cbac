#!/bin/bash
# Issue 4, persistent look-back kernel: stress/correctness tests, host-time profile, kernel sweep.
# Usage (repo root, on the CUDA host): bash tools/gpu_persist.sh
source tools/gpu_env.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
el "targeted GPU tests (look-back stress, persistent kernel on 3 blocks, layouts, non-finite)"
timeout 200 python3 -m pytest tests/test_cupy.py -q -x -n 4 -m "not slow" --tb=short -p no:cacheprovider \
  2>&1 | tail -25 | tee "$OUT/test_cupy.log"
el "sweep + host profile"
timeout ${SWEEP_TIMEOUT:-300} python3 benchmarks/bench_gpu.py --out "$OUT" --reps 11 --no-peers --profile \
  --sweep-persist --only "(1,1,2**24)" 2>&1 | tee "$OUT/sweep.log" | grep -v "^|" | tail -60
grep "^| rows\|^| kernel" "$OUT/sweep.log" | sort -u
el "done"
