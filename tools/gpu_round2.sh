#!/bin/bash
# Issue 4: GPU tests of the CuPy diagonal kernels, then the one-tile rows / time-major sweep.
# Usage (repo root, on the CUDA host): bash tools/gpu_round2.sh
source tools/gpu_env.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
el "GPU tests of the CuPy diagonal kernels"
timeout 150 python3 -m pytest tests/test_cupy.py -q -x -n 4 --tb=short -p no:cacheprovider \
  2>&1 | tail -5 | tee "$OUT/test_cupy.log"
el "sweep"
timeout 300 python3 benchmarks/bench_gpu.py --out "$OUT" --reps 11 --no-peers --sweep-one-tile \
  --only "(2,256,4096)" 2>&1 | tee "$OUT/sweep.log" | grep -v "^|" | tail -12
grep "^| rows\|^| lanes" "$OUT/sweep.log" | sort -u
el "done"
