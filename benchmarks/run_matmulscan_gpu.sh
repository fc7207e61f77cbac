#!/usr/bin/env bash
# Issue 5 on the CUDA host, from the repository root (one device call): the matmulscan tests of
# both kernel variants, the matmulscan cases of the shared suite, then the seed experiment with ncu.
#   OUT=/some/dir bash benchmarks/run_matmulscan_gpu.sh [extra bench args]
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
source tools/gpu_env.sh
export CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/cupy_cache}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"
kernel=warp
for v in warp block; do
  timeout -s INT 70 python3 -m pytest -q -p no:cacheprovider tests/test_matmulscan.py -k "$v-" 2>&1 | tail -6 > "$OUT/test_matmulscan_$v.txt"
  echo "== matmulscan tests ($v): $(tail -1 "$OUT/test_matmulscan_$v.txt")"
done
grep -qE "failed|error|Interrupt" "$OUT/test_matmulscan_warp.txt" && kernel=block
echo "== bench kernel variant: $kernel"
timeout -s INT 50 python3 -m pytest -q -p no:cacheprovider tests/test_numba_cuda.py -m gpu -k "seed or nonfinite or 5000" 2>&1 | tail -3 > "$OUT/test_numba_cuda.txt"
echo "== numba_cuda GPU tests (subset): $(tail -1 "$OUT/test_numba_cuda.txt")"
timeout -s INT 40 python3 -m pytest -q -p no:cacheprovider tests/test_contract.py -k "matmulscan" 2>&1 | tail -3 > "$OUT/test_contract_matmulscan.txt"
echo "== contract (cupy matmulscan cases): $(tail -1 "$OUT/test_contract_matmulscan.txt")"
timeout 190 python3 benchmarks/bench_matmulscan.py --out "$OUT" --kernel "$kernel" "$@" 2>&1 | grep -vE "^seed|^big|Warning|warn\(" | tail -90
