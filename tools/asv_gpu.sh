#!/usr/bin/env bash
# Run the asv suite on the offline CUDA host for the commits that tools/asv_gpu_prepare.sh exported.
# From the repository root on the host (device call with carry [".whl", ".asvsrc"]):
#   source tools/gpu_env.sh; tools/asv_gpu.sh [SECONDS]
# Jobs come from .asvsrc/jobs.txt, one "COMMIT BENCH_REGEX" a line, run in order while time is
# left (SECONDS, default 380); without it: the newest commit runs the whole GPU suite, then each
# older commit (newest first) the timing benchmarks. Every job is its own `asv run`, so results
# are saved job by job (asv writes a commit's results only when its run ends) and a job never
# starts with less than a minute left. Results already in benchmarks/results/asv/<machine>/ (an
# earlier call's, collected and carried back with the working tree) are kept and not re-run
# (--skip-existing-successful). Each commit's package comes first on the benchmarks' path
# (ASV_PYTHONPATH: asv drops PYTHONPATH). Results are packed into $OUT/gpu_results.tar.gz after
# every job, so a call cut short still returns what it finished.
set -uo pipefail
budget=${1:-380}
start=$(date +%s)
out=${OUT:-/tmp/asv_out}
mkdir -p "$out"

# numba.cuda needs NumPy < 2.5 (tools/gpu_env.sh puts 2.4 in /tmp/site), but asv's benchmark
# processes drop PYTHONPATH entries from sys.path (the first H200 run imported NumPy 2.5 and every
# numba_cuda benchmark failed on np.row_stack): install it into the host's own environment, which
# is bare on every call. Without PYTHONPATH: tools/gpu_env.sh puts /tmp/site (NumPy 2.4) on it, and
# pip then finds 2.4 "already satisfied" and leaves the host's 2.5 in place (every numba_cuda
# benchmark of the H200 runs until 2026-11-22 failed that way).
ls .whl/numpy-2.4*.whl >/dev/null 2>&1 && env -u PYTHONPATH python3 -m pip install -q --no-index --no-deps .whl/numpy-2.4*.whl
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/asvsite .whl/asv/*.whl \
  || { echo "asv_gpu: asv wheels missing (.whl/asv)"; exit 1; }
# Peers: accelerated-scan is pure Python (Triton); fpscan compiles a CUDA extension (background, sm_90 only).
ls .whl/sdist/accelerated_scan-*.whl >/dev/null 2>&1 && \
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/sdist/accelerated_scan-*.whl
if ls .whl/sdist/fpscan-*.tar.gz >/dev/null 2>&1 && [ -z "${ASV_GPU_NO_FPSCAN:-}" ]; then
  (TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=4 python3 -m pip install -q --no-index --no-deps --no-build-isolation \
     --target /tmp/fpscan-site .whl/sdist/fpscan-*.tar.gz > "$out/fpscan_build.log" 2>&1 \
   && cp -r /tmp/fpscan-site/fpscan* /tmp/site/ && echo "fpscan built at $(( $(date +%s) - start ))s" >> "$out/fpscan_build.log") &
fi

gpu=${ASV_GPU_NAME:-$(python3 -c "import cupy; print(cupy.cuda.runtime.getDeviceProperties(0)['name'].decode())")}
machine="gpu-$(echo "$gpu" | tr 'A-Z' 'a-z' | tr -cs 'a-z0-9' '-' | sed 's/-*$//')"
echo "asv_gpu: device '$gpu' -> machine $machine"
export PYTHONPATH=/tmp/asvsite
python3 -m asv machine --yes --machine "$machine" --os "$(uname -sr)" --arch "$(uname -m)" \
  --cpu "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//') + $gpu" \
  --num_cpu "$(nproc)" --ram "$(free -g | awk '/Mem:/{print $2}')GB" >/dev/null

jobs=.asvsrc/jobs.txt
if [ ! -s "$jobs" ]; then
  jobs=$(mktemp)
  mapfile -t commits < .asvsrc/commits.txt
  n=${#commits[@]}
  echo "${commits[$((n-1))]} ^gpu\\." > "$jobs"
  for ((i=n-2; i>=0; i--)); do
    echo "${commits[$i]} ^gpu\\.Gpu(Scan|Gae)\\.time_scan|^gpu\\.MemoryCopy" >> "$jobs"
  done
fi

k=0
while read -r h bench; do
  [ -n "$h" ] || continue
  k=$((k + 1))
  left=$(( budget - ($(date +%s) - start) ))
  if [ "$left" -lt 60 ]; then echo "asv_gpu: ${left}s left, not starting job $k (${h:0:8} $bench)"; continue; fi
  t0=$(date +%s)
  log="$out/asv_${k}_${h:0:8}.log"
  ASV_PYTHONPATH="$PWD/.asvsrc/$h:/tmp/site:/tmp/asvsite" timeout $((left - 10)) \
    python3 tools/asv_nogit.py .asvsrc/manifest.json "$h" run --python=same --set-commit-hash "$h" \
    --machine "$machine" --launch-method spawn --skip-existing-successful --bench "$bench" \
    < /dev/null > "$log" 2>&1
  rc=$?
  echo "job $k ${h:0:8} '$bench': rc=$rc, $(( $(date +%s) - t0 ))s, $(grep -c ' ok$' "$log") ok," \
       "$(grep -c ' failed$' "$log") failed, $(grep -c 'asv: skipped' "$log") skipped combos"
  tar -czf "$out/gpu_results.tar.gz" -C benchmarks/results/asv "$machine" 2>/dev/null
done < "$jobs"
wait
tar -czf "$out/gpu_results.tar.gz" -C benchmarks/results/asv "$machine" 2>/dev/null
# Logs of all jobs in one file (at most 8 files come back).
for f in "$out"/asv_*_*.log; do echo "===== $f"; cat "$f"; done > "$out/asv_jobs.log" 2>/dev/null && rm -f "$out"/asv_*_*.log
echo "asv_gpu: done in $(( $(date +%s) - start ))s"
