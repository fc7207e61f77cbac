#!/usr/bin/env bash
# Issue 4, one long row on the CUDA host: Nsight Compute on rows_staged (one row of 2**28 float32)
# as shipped and in the diagnostic build without look-back (benchmarks/diag_lookback.py variants),
# so that what bounds the staged kernel's own stream shows.
#   source tools/gpu_env.sh; bash tools/gpu_ncu_rows.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
cd benchmarks || exit 1
for v in "shipped" "no look-back (wrong results)"; do
  f="$OUT/ncu_rows_$(echo "$v" | tr -c 'a-z0-9' '_' | cut -c1-20).txt"
  date -u +"ncu $v %H:%M:%S UTC"
  DIAG_ONLY="(1,1,2**28)" DIAG_VARIANTS="=$v" timeout 200 ncu --clock-control none -k regex:rows_staged \
    --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
    --section Occupancy --section LaunchStats --section SchedulerStats python3 diag_lookback.py > "$f" 2>&1
  echo "ncu rc=$?"
  grep -E "Duration|DRAM Throughput|Memory Throughput|L2 Hit Rate|L1/TEX Hit|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Achieved Occupancy|Theoretical Occupancy|Block Limit|Registers Per|Stall|Mem Busy|Max Bandwidth" "$f" | head -40
done
