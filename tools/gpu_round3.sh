#!/bin/bash
# Issue 4: kernel-shape sweeps timed over bursts of back-to-back launches (no host time).
# Usage (repo root, on the CUDA host): bash tools/gpu_round3.sh
source tools/gpu_env.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
timeout 400 python3 benchmarks/bench_gpu.py --out "$OUT" --reps 11 --no-peers --sweep-one-tile --sweep-prefetch \
  --only "(2,256,4096)" 2>&1 | tee "$OUT/sweep.log" | grep -v "^|" | tail -8
grep "^| rows\|^| lanes" "$OUT/sweep.log" | sort -u
