source tools/gpu_env.sh >/dev/null
export TORCH_EXTENSIONS_DIR=/tmp/torch_ext OUT=${OUT:-/tmp/out}
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 ))s $(date -u +%H:%M:%S)] $*"; }
( python3 -c "import fpscan" 2>/dev/null || python3 -m pip install -q --no-build-isolation --no-deps --target /tmp/site .whl/sdist/fpscan-*.tar.gz > $OUT/fpscan.log 2>&1 ) &
PB=$!
NX=""; python3 -c "import xdist" 2>/dev/null && NX="-n 8"
el "tests/test_cupy.py"
timeout 240 python3 -m pytest tests/test_cupy.py -q $NX -p no:cacheprovider --tb=short 2>&1 | tail -25 | tee $OUT/test_cupy.log
wait $PB
el "bench"
timeout 200 python3 benchmarks/bench_gpu.py --out $OUT --only "(2,256,65536);(4,64,262144);(2,256,4096)" --reps 11 2>&1 | grep -E "^\| \(|^device|copy" | tail -8
el done
