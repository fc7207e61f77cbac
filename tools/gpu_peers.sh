#!/bin/bash
# Starts building issue 4's peers on the CUDA host in the background, once per machine: fpscan
# from its sdist against the host's torch, accelerated-scan's wheel (its warp kernel is compiled by
# torch at import: prebuilt into TORCH_EXTENSIONS_DIR). The build's pid goes to /tmp/peers.pid;
# `bash tools/gpu_peers.sh wait [SECONDS]` waits for it. Logs under $OUT.
# Usage (repo root, after `source tools/gpu_env.sh`): bash tools/gpu_peers.sh [wait [SECONDS]]
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TORCH_EXTENSIONS_DIR=/tmp/torch_ext
if [ "$1" = wait ]; then
  [ -e /tmp/peers.pid ] && timeout "${2:-600}" tail --pid="$(cat /tmp/peers.pid)" -f /dev/null
  exit 0
fi
[ -e /tmp/site/.peers_done ] || [ -e /tmp/peers.pid ] && exit 0
( python3 -m pip install -q --no-build-isolation --no-deps --target /tmp/site .whl/sdist/fpscan-*.tar.gz > "$OUT/peer_fpscan.log" 2>&1;
  python3 -m pip install -q --no-deps --target /tmp/site .whl/sdist/accelerated_scan-*.whl > "$OUT/peer_acc.log" 2>&1;
  python3 -c "import accelerated_scan.warp" >> "$OUT/peer_acc.log" 2>&1;
  touch /tmp/site/.peers_done ) > /dev/null 2>&1 &
echo $! > /tmp/peers.pid
