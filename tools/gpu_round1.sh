#!/bin/bash
# Issue 4, prefetching rows_block and batched look-back reads: GPU tests of the CuPy kernels,
# then the kernel-only sweep that decides their shapes (benchmarks/bench_gpu.py --sweep-prefetch).
# Usage (repo root, on the CUDA host): bash tools/gpu_prefetch.sh
source tools/gpu_env.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
el "GPU tests of the CuPy diagonal kernels (look-back stress, layouts, non-finite)"
timeout 200 python3 -m pytest tests/test_cupy.py -q -x -n 4 -m "not slow" --tb=short -p no:cacheprovider \
  2>&1 | tail -25 | tee "$OUT/test_cupy.log"
el "sweep"
timeout ${SWEEP_TIMEOUT:-300} python3 benchmarks/bench_gpu.py --out "$OUT" --reps 11 --no-peers \
  --sweep-prefetch --only "(1,1,2**24)" 2>&1 | tee "$OUT/sweep.log" | grep -v "^|" | tail -30
grep "^| rows\|^| lanes" "$OUT/sweep.log" | sort -u
el "done"
