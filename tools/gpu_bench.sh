#!/bin/bash
# The GPU benchmarks on the CUDA host (repo root):  bash tools/gpu_bench.sh [compare|peers|dense|all] [ARGS...]
#   compare: this tree against the baseline in .base/scanarray_base (made here by
#            tools/export_baseline.sh and carried along), every diagonal workload and the dense targets,
#            paired in one process: benchmarks/bench_gpu.py --baseline .base --quick [ARGS]
#   peers:   the diagonal table against fpscan, accelerated-scan (built from .whl/sdist/ in the
#            background while compare runs), JAX, cupyx lfilter and cupy.cumsum: bench_gpu.py [ARGS]
#   dense:   the dense target shapes, every method, against JAX: bench_dense.py --gpu --targets [ARGS]
# Output under $OUT (bench_gpu_compare.md, bench_gpu.md, bench_dense.md, the peers' build logs).
source tools/gpu_env.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
MODE=${1:-all}; shift || true
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"
export TORCH_EXTENSIONS_DIR=/tmp/torch_ext

peers_build() {  # fpscan from its sdist against the host's torch, accelerated-scan's wheel (its warp
  # kernel compiles at import, ~2 min); once per machine, in the background
  [ -e /tmp/site/.peers_done ] || [ -e /tmp/peers.pid ] && return 0
  ls .whl/sdist/* >/dev/null 2>&1 || { echo "gpu_bench: no .whl/sdist/: peers not built"; return 0; }
  ( python3 -m pip install -q --no-build-isolation --no-deps --target /tmp/site .whl/sdist/fpscan-*.tar.gz > "$OUT/peer_fpscan.log" 2>&1;
    python3 -m pip install -q --no-deps --target /tmp/site .whl/sdist/accelerated_scan-*.whl > "$OUT/peer_acc.log" 2>&1;
    python3 -c "import accelerated_scan.warp" >> "$OUT/peer_acc.log" 2>&1;
    touch /tmp/site/.peers_done ) > /dev/null 2>&1 &
  echo $! > /tmp/peers.pid
}
peers_wait() { [ -e /tmp/peers.pid ] && timeout "${1:-300}" tail --pid="$(cat /tmp/peers.pid)" -f /dev/null; true; }

case "$MODE" in compare|all) peers_build ;; esac
if [ "$MODE" = compare ] || [ "$MODE" = all ]; then
  [ -d .base/scanarray_base ] || { echo "gpu_bench: no .base/scanarray_base (bash tools/export_baseline.sh, carry .base)"; exit 1; }
  el "compare with the baseline"
  timeout ${COMPARE_TIMEOUT:-420} python3 benchmarks/bench_gpu.py --baseline .base --quick --out "$OUT" "$@" 2>&1 | tail -40
fi
if [ "$MODE" = peers ] || [ "$MODE" = all ]; then
  peers_build; el "waiting for the peers' build"; peers_wait 300
  el "peers"
  timeout ${BENCH_TIMEOUT:-420} python3 benchmarks/bench_gpu.py --quick --out "$OUT" "$@" 2>&1 | tail -40
fi
if [ "$MODE" = dense ] || [ "$MODE" = all ]; then
  el "dense targets"
  timeout ${DENSE_TIMEOUT:-420} python3 benchmarks/bench_dense.py --gpu --targets --out "$OUT/bench_dense.md" "$@" 2>&1 | tail -40
fi
el "done"
