#!/usr/bin/env bash
# Issue 8 on the CUDA host: dask with CuPy blocks. Usage, from the repository root:
#   source tools/gpu_env.sh; bash benchmarks/run_dask_gpu.sh [one|multi]   (logs and tables under $OUT)
#   one:   CuPy-block tests, then the one-GPU benchmark (python benchmarks/bench_dask.py gpu)
#   multi: one worker per GPU, 1 then all GPUs (bench_dask.py multigpu --gpus N): the scaling figure
# dask/distributed are not installed there: carry them first (on a networked machine):
#   ../shared/gpu/wheels.sh .whl/dask dask distributed partd locket tornado tblib zict
mode=${1:-one}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/dask/*.whl 2>&1 | tail -2
export PYTHONPATH=/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/device.txt"
python3 -c "import dask, distributed, cupy; print('dask', dask.__version__, 'distributed', distributed.__version__, 'cupy', cupy.__version__)"
if [ "$mode" = "multi" ]; then
  n=$(nvidia-smi -L | wc -l)
  timeout ${BENCH_S:-400} python3 benchmarks/bench_dask.py multigpu --gpus "$n" --out "$OUT/dask_multigpu.md" > "$OUT/bench_multigpu.log" 2>&1
  echo "bench rc=$?"; grep -v INFO "$OUT/bench_multigpu.log" | tail -12
  exit 0
fi
timeout ${TEST_S:-90} python3 -m pytest tests/test_dask.py -q -p no:cacheprovider -k cupy 2>&1 \
  | grep -v INFO | tail -30 > "$OUT/pytest_dask.txt"
tail -4 "$OUT/pytest_dask.txt"
timeout ${BENCH_S:-150} python3 benchmarks/bench_dask.py gpu --out "$OUT/dask_gpu.md" > "$OUT/bench_gpu.log" 2>&1
echo "bench rc=$?"; grep -v INFO "$OUT/bench_gpu.log" | tail -12
