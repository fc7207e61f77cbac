#!/usr/bin/env bash
# Unpack the GPU host's asv results (gpu_results.tar.gz from tools/asv_gpu.sh) into benchmarks/results/asv/.
# Usage: tools/asv_gpu_collect.sh PATH/TO/gpu_results.tar.gz
# benchmarks.json is left as this checkout's own (asv rewrites it on every run); only the machine's
# folder (machine.json + one JSON per commit) is taken.
set -euo pipefail
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
tar -xzf "$1" -C "$tmp"
for d in "$tmp"/gpu-*; do
  mkdir -p "benchmarks/results/asv/$(basename "$d")"
  cp "$d"/*.json "benchmarks/results/asv/$(basename "$d")/"
  echo "collected $(basename "$d"): $(ls "$d" | grep -vc machine.json) result file(s)"
done
