#!/usr/bin/env bash
# Issue 6, CuPy dense "lookback" with tensor-core maps, on the CUDA host (one device call): Nsight
# Compute on the (64, 1024, 16) float32 kernel (occupancy, issue, instructions) unless NCU=0, then
# tools/gpu_dense_chunked.sh (smoke, variants with phase stamps, the method's tests, targets vs JAX).
#   source tools/gpu_env.sh; LOOKBACK_VARIANTS="64,2,4,,1,24;..." bash tools/gpu_dense_ncu.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
if [ "${NCU:-1}" != 0 ]; then
  date -u +"ncu %H:%M:%S UTC"
  timeout 150 ncu --clock-control none -k regex:dense_lookback --launch-skip 2 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section InstructionStats --section SchedulerStats \
    --section Occupancy python3 benchmarks/ncu_dense.py > "$OUT/ncu_mma.txt" 2>&1; echo "ncu rc=$?"
  grep -E "Duration|Issue Slots Busy|Executed Instructions  |No Eligible|Warp Cycles Per Issued|Achieved Occupancy|Theoretical Occupancy|Block Limit (Reg|Shared)|DRAM Throughput" "$OUT/ncu_mma.txt"
fi
SMOKE_S=${SMOKE_S:-300} TEST_S=${TEST_S:-200} BENCH_S=${BENCH_S:-200} METHOD=lookback BENCH_TARGET_N=16 \
  BENCH_TARGET_METHODS="${BENCH_TARGET_METHODS:-lookback}" BENCH_CHUNK_VARIANTS=0 bash tools/gpu_dense_chunked.sh > "$OUT/dense.txt" 2>&1
grep -E "pytest rc|passed|failed|SMOKE|FAIL" "$OUT/dense.txt" | head
grep -E "^lookback \(B=64, T=1024, n=16, A varying|^  |^\| 64 \| 1024" "$OUT/dense.txt" | awk '!seen[$0]++' | cut -c1-330
