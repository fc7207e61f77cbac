#!/bin/bash
# Look-back tiles indexed by their block (as CUB's scan) against tickets from the atomic counter,
# on the CUDA host: kernel-only A/B over the look-back workloads, then the CuPy tests.
# Usage (repo root): bash tools/gpu_tile_order.sh [ROUNDS]   (logs under $OUT)
source tools/gpu_env.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 ))s $(date -u +%H:%M:%S) UTC] $*"; }
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
el "diag_lookback: block index (shipped) / ticket / ticket waited with the block index"
( cd benchmarks && DIAG_ROUNDS=${1:-3} DIAG_ONLY="2**24;2**28;time-major;look-back tiles" \
  DIAG_VARIANTS="=shipped;tile index from a ticket;ticket waited" timeout 300 python3 diag_lookback.py ) \
  > "$OUT/tile_order.log" 2>&1
el "tests/test_cupy.py"
NX=""; python3 -c "import xdist" 2>/dev/null && NX="-n 12"
timeout 240 python3 -m pytest tests/test_cupy.py -q -m "not slow" $NX --tb=short -p no:cacheprovider > "$OUT/test_cupy.log" 2>&1
tail -3 "$OUT/test_cupy.log"
el "done"
grep "^copy" "$OUT/tile_order.log"
grep "^| " "$OUT/tile_order.log" | grep -v "^| workload" | sort -t'|' -k2,2 -s
