#!/bin/bash
# The dense look-back kernel's chunks indexed by their block against tickets, on the CUDA host:
# the GPU tests of that kernel (both orders), a kernel A/B (benchmarks/diag_dense_tiles.py) and
# issue 6's target shapes against JAX. Starts the peers' build (fpscan, accelerated-scan;
# tools/gpu_peers.sh) in the background first, so that a later benchmark in the same call finds them.
# Usage (repo root): bash tools/gpu_dense_tiles.sh [ROUNDS]   (logs under $OUT)
source tools/gpu_env.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 ))s $(date -u +%H:%M:%S) UTC] $*"; }
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
bash tools/gpu_peers.sh  # in the background, for a later benchmark in the same call
NX=""; python3 -c "import xdist" 2>/dev/null && NX="-n 8"
el "tests: the dense look-back kernel (chunks by block index and by ticket)"
timeout 240 python3 -m pytest tests/test_dense.py -q -k "cupy_lookback" $NX --tb=short -p no:cacheprovider \
  > "$OUT/test_dense_lookback.log" 2>&1
tail -3 "$OUT/test_dense_lookback.log"
el "diag_dense_tiles.py"
timeout 200 python3 benchmarks/diag_dense_tiles.py "${1:-3}" > "$OUT/dense_tiles.log" 2>&1
cat "$OUT/dense_tiles.log" | tail -14
el "bench_dense.py --gpu --targets"
timeout 200 python3 benchmarks/bench_dense.py --gpu --targets --out "$OUT/dense_targets.md" > "$OUT/dense_targets.log" 2>&1
tail -12 "$OUT/dense_targets.log"
el "done"
