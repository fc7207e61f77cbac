#!/usr/bin/env bash
# Run the asv suite on the offline CUDA host for the commits that tools/asv_gpu_prepare.sh exported.
# From the repository root on the host (device call with carry [".whl", ".asvsrc"]):
#   source tools/gpu_env.sh; tools/asv_gpu.sh [SECONDS]
# The newest commit (last in .asvsrc/commits.txt) runs the whole GPU suite first; the older ones
# then run the timing benchmarks ($ASV_GPU_HISTORY_BENCH) while time is left (SECONDS, default 380).
# Results already in benchmarks/results/asv/<machine>/ (an earlier call's, collected and carried back
# with the working tree) are kept and not re-run (--skip-existing-successful), so a second call
# continues where the first stopped; ASV_GPU_HEAD_BENCH='' skips the newest commit.
# Each commit's package is put first on the benchmarks' path (ASV_PYTHONPATH: asv drops PYTHONPATH),
# results go to benchmarks/results/asv/<machine>/ and are packed into $OUT/gpu_results.tar.gz after
# every commit, so a run cut short still returns what it finished.
set -uo pipefail
budget=${1:-380}
start=$(date +%s)
out=${OUT:-/tmp/asv_out}
mkdir -p "$out"
history_bench=${ASV_GPU_HISTORY_BENCH:-'^gpu\.Gpu(Scan|Ema|Gae)\.time_scan|^gpu\.GpuDense\.time_dense|^gpu\.GpuCopy'}
head_bench=${ASV_GPU_HEAD_BENCH-'^gpu\.'}

python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/asvsite .whl/asv/*.whl \
  || { echo "asv_gpu: asv wheels missing (.whl/asv)"; exit 1; }
# Peers: accelerated-scan is pure Python (Triton); fpscan compiles a CUDA extension (background, Hopper only).
ls .whl/sdist/accelerated_scan-*.whl >/dev/null 2>&1 && \
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/sdist/accelerated_scan-*.whl
if ls .whl/sdist/fpscan-*.tar.gz >/dev/null 2>&1 && [ -z "${ASV_GPU_NO_FPSCAN:-}" ]; then
  (TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=4 python3 -m pip install -q --no-index --no-deps --no-build-isolation \
     --target /tmp/fpscan-site .whl/sdist/fpscan-*.tar.gz > "$out/fpscan_build.log" 2>&1 \
   && cp -r /tmp/fpscan-site/fpscan* /tmp/site/ && echo "fpscan built" >> "$out/fpscan_build.log") &
fi

gpu=${ASV_GPU_NAME:-$(python3 -c "import cupy; print(cupy.cuda.runtime.getDeviceProperties(0)['name'].decode())")}
machine="gpu-$(echo "$gpu" | tr 'A-Z' 'a-z' | tr -cs 'a-z0-9' '-' | sed 's/-*$//')"
echo "asv_gpu: device '$gpu' -> machine $machine"
export PYTHONPATH=/tmp/asvsite
python3 -m asv machine --yes --machine "$machine" --os "$(uname -sr)" --arch "$(uname -m)" \
  --cpu "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//') + $gpu" \
  --num_cpu "$(nproc)" --ram "$(free -g | awk '/Mem:/{print $2}')GB" >/dev/null

mapfile -t commits < .asvsrc/commits.txt
n=${#commits[@]}
order=("${commits[$((n-1))]}")
for ((i=n-2; i>=0; i--)); do order+=("${commits[$i]}"); done
for h in "${order[@]}"; do
  left=$(( budget - ($(date +%s) - start) ))
  if [ "$left" -lt 40 ]; then echo "asv_gpu: ${left}s left, stopping before ${h:0:8}"; break; fi
  bench=$history_bench; [ "$h" = "${commits[$((n-1))]}" ] && bench=$head_bench
  [ -n "$bench" ] || continue
  echo "asv_gpu: commit ${h:0:8}, bench '$bench', ${left}s left"
  ASV_PYTHONPATH="$PWD/.asvsrc/$h:/tmp/site:/tmp/asvsite" timeout $((left - 15)) \
    python3 tools/asv_nogit.py .asvsrc/manifest.json "$h" run --python=same --set-commit-hash "$h" \
    --machine "$machine" --launch-method spawn --skip-existing-successful --bench "$bench" \
    > "$out/asv_${h:0:8}.log" 2>&1
  rc=$?
  echo "  rc=$rc, $(grep -c ' ok$' "$out/asv_${h:0:8}.log") benchmarks ok, $(grep -c ' failed$' "$out/asv_${h:0:8}.log") failed"
    tar -czf "$out/gpu_results.tar.gz" -C benchmarks/results/asv "$machine" benchmarks.json 2>/dev/null
done
wait
tar -czf "$out/gpu_results.tar.gz" -C benchmarks/results/asv "$machine" benchmarks.json 2>/dev/null
echo "asv_gpu: done in $(( $(date +%s) - start ))s; results for $(ls benchmarks/results/asv/$machine | grep -vc machine.json) commit(s)"
