#!/bin/bash
# Every GPU test of the project on the CUDA host, in one go (repo root):  bash tools/gpu_test.sh [SECONDS]
# The shared suite's CuPy/numba_cuda cases and the GPU-only test files, in $WORKERS (default 4) pytest-xdist workers;
# the CPU tests are CI's. Prints pytest's summary last; the log goes to $OUT/gpu_tests.log.
source tools/gpu_env.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
timeout "${1:-540}" python3 -m pytest tests -m "gpu and not slow" -q -n "${WORKERS:-4}" --maxfail=20 --durations=15 --tb=short -p no:cacheprovider \
  2>&1 | tee "$OUT/gpu_tests.log" | tail -40
