#!/usr/bin/env bash
# Issue 5 on the CUDA host, from the repository root: tests of both backends, then the experiment.
#   bash benchmarks/run_matmulscan_gpu.sh [tests|bench|all] [extra bench args]
set -u
mode=${1:-all}; shift || true
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
source tools/gpu_env.sh
export CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/cupy_cache}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"
python3 -c "import numba, numba.cuda as c; print('numba', numba.__version__, 'cuda', c.is_available())" 2>&1 | tail -2
if [ "$mode" != bench ]; then
  start=$SECONDS
  timeout -s INT 100 python3 -m pytest -q -x -p no:cacheprovider tests/test_matmulscan.py 2>&1 | tail -25 | tee "$OUT/test_matmulscan.txt"
  echo "== matmulscan tests $((SECONDS - start)) s"; start=$SECONDS
  timeout -s INT 70 python3 -m pytest -q -x -p no:cacheprovider tests/test_numba_cuda.py -m gpu 2>&1 | tail -25 | tee "$OUT/test_numba_cuda.txt"
  echo "== numba_cuda gpu tests $((SECONDS - start)) s"; start=$SECONDS
  timeout -s INT 40 python3 -m pytest -q -p no:cacheprovider tests/test_contract.py -k "numba_cuda or matmulscan" 2>&1 | tail -15 | tee "$OUT/test_contract.txt"
  echo "== contract $((SECONDS - start)) s"
fi
if [ "$mode" != tests ]; then
  python3 benchmarks/bench_matmulscan.py --out "$OUT" "$@" 2>&1 | tail -80
fi
