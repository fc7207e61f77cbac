#!/usr/bin/env bash
# Issue 6 on the CUDA host: dense tests, then the dense benchmark. Usage:
#   source tools/gpu_env.sh; bash benchmarks/run_dense_gpu.sh [quick|full] ; logs and tables under $OUT
mode=${1:-quick}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export XLA_PYTHON_CLIENT_PREALLOCATE=false
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/device.txt"
if [ "$mode" != "bench" ]; then
  timeout ${TEST_S:-100} python3 -m pytest tests -k "${CONTRACT_K:-dense and cupy}" -q --maxfail=10 -p no:cacheprovider 2>&1 | tail -40 > "$OUT/pytest_contract.txt"
  tail -5 "$OUT/pytest_contract.txt"
  timeout ${TEST_S:-100} python3 -m pytest tests/test_dense.py -k cupy -q --maxfail=10 -p no:cacheprovider 2>&1 | tail -60 > "$OUT/pytest_dense.txt"
  tail -5 "$OUT/pytest_dense.txt"
fi
if [ "$mode" = "quick" ]; then
  timeout ${BENCH_S:-120} python3 benchmarks/bench_dense.py --gpu --quick --out "$OUT/dense_quick.md" > "$OUT/bench.log" 2>&1
else
  BENCH_JAX_S=${BENCH_JAX_S:-90} timeout ${BENCH_S:-280} python3 benchmarks/bench_dense.py --gpu --cpu --out "$OUT/dense.md" > "$OUT/bench.log" 2>&1
fi
echo "bench rc=$?"; tail -40 "$OUT/bench.log"
