# rows_wide on the CUDA host: tests/test_cupy.py, its diagnostic builds against fpscan, the issue's
# fpscan shapes. Usage (repo root): bash tools/gpu_wide.sh [tests] [diag] [bench]
# (ONLY="shape;shape" picks bench_gpu.py's workloads; default the three that rows_wide touches)
source tools/gpu_env.sh >/dev/null
export TORCH_EXTENSIONS_DIR=/tmp/torch_ext OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s $(date -u +%H:%M:%S)] $*"; }
( python3 -c "import fpscan" 2>/dev/null || python3 -m pip install -q --no-build-isolation --no-deps --target /tmp/site .whl/sdist/fpscan-*.tar.gz > $OUT/fpscan.log 2>&1 ) &
PB=$!
NX=""; python3 -c "import xdist" 2>/dev/null && NX="-n 8"
[ $# -gt 0 ] || set -- tests diag bench
for step in "$@"; do case $step in
tests) el "tests/test_cupy.py"
  timeout 240 python3 -m pytest tests/test_cupy.py -q $NX -p no:cacheprovider --tb=short 2>&1 | tail -25 | tee $OUT/test_cupy.log ;;
diag) wait $PB; el "diag_wide"; timeout 240 python3 benchmarks/diag_wide.py 2>&1 | tail -48 ;;
bench) wait $PB; el "bench"
  timeout 330 python3 benchmarks/bench_gpu.py --out $OUT --only "${ONLY:-(2,256,65536);(4,64,262144);(2,256,4096)}" --reps 11 2>&1 | grep -E "^\| \(|^device|copy" | tail -12 ;;
esac; done
el done
