#!/usr/bin/env bash
# Issue 6: the chunked method's carries inside the rerun's launch (CHUNK_FUSED) against their own
# launch, on the CUDA host: the new test, the (8, 4096, 64) target against JAX (both variants in one
# process, ROUNDS processes), then the CuPy chunked tests. Usage, from the repository root:
#   source tools/gpu_env.sh; bash tools/gpu_fused.sh [ROUNDS]     # logs and tables under $OUT
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/device.txt"
date -u +"new test %H:%M:%S UTC"
timeout ${NEW_S:-120} python3 -m pytest tests/test_dense.py -k "chunked_carries_in_rerun" -q -x -p no:cacheprovider \
  -rf > "$OUT/pytest_new.txt" 2>&1
echo "new test rc=$?"; tail -3 "$OUT/pytest_new.txt"
for r in $(seq 1 "${1:-2}"); do
  date -u +"targets round $r %H:%M:%S UTC"
  BENCH_TARGET_N=64 BENCH_TARGET_METHODS=chunked BENCH_SEQ_VARIANTS=0 BENCH_CHUNK_VARIANTS=fused \
    BENCH_JAX_S=${BENCH_JAX_S:-80} timeout ${BENCH_S:-150} python3 benchmarks/bench_dense.py --gpu --targets \
    --out "$OUT/targets_$r.md" > "$OUT/bench_$r.log" 2>&1
  echo "bench rc=$?"
  grep -E "^\| 8 \| 4096 \| 64 \| (jax|chunked)" "$OUT/targets_$r.md"
done
[ "${TESTS:-1}" = 0 ] && exit 0
date -u +"chunked tests %H:%M:%S UTC"
timeout ${TEST_S:-200} python3 -m pytest tests/test_dense.py -k "cupy and chunked" -q -p no:cacheprovider -rf \
  > "$OUT/pytest_chunked.txt" 2>&1
echo "pytest rc=$?"; grep -E "^FAILED|passed|failed" "$OUT/pytest_chunked.txt" | cut -c1-220 | tail -15
date -u +"end %H:%M:%S UTC"
