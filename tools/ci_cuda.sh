#!/usr/bin/env bash
# CI step (run by .ci/run): compile-check every CUDA kernel source for sm_90 with nvcc.
# CI has nvcc but no GPU; NVRTC compiles the same sources at run time on a CUDA host.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v nvcc >/dev/null; then
  for d in /usr/local/cuda/bin /usr/local/cuda-13.0/bin; do [ -x "$d/nvcc" ] && export PATH="$d:$PATH"; done
fi
python tools/compile_cuda.py --arch sm_90
