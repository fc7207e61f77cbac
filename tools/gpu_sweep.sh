#!/bin/bash
# Issue 4 on the CUDA host: GPU tests of the CuPy diagonal kernels, then kernel-only tile-shape
# sweeps of benchmarks/bench_gpu.py (timed over bursts of back-to-back launches).
# Usage (repo root): bash tools/gpu_sweep.sh [SWEEP FLAGS]   (default: --sweep-one-tile --sweep-prefetch;
# also --sweep). The table goes to $OUT/sweep.log; the sweep lines are printed sorted, last.
source tools/gpu_env.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
[ $# -gt 0 ] || set -- --sweep-one-tile --sweep-prefetch
timeout 200 python3 -m pytest tests/test_cupy.py -q -x -n 4 -m "not slow" --tb=short -p no:cacheprovider \
  2>&1 | tail -3 | tee "$OUT/test_cupy.log"
timeout 400 python3 benchmarks/bench_gpu.py --out "$OUT" --reps 11 --no-peers "$@" --only "(2,256,4096)" \
  2>&1 | tee "$OUT/sweep.log" | grep -v "^|" | tail -8
grep "^| rows\|^| lanes" "$OUT/sweep.log" | sort -u
