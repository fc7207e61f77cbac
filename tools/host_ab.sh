#!/usr/bin/env bash
# Host time per bound CuPy call: this tree against commit REV, in alternating processes.
# Usage (repo root, on the GPU host, after `source tools/gpu_env.sh`): bash tools/host_ab.sh REV [ROUNDS]
# Prints one table: per call, the median over rounds of benchmarks/profile_host.py --tsv (and the
# range). Needs the checkout's .git (git archive REV).
set -euo pipefail
rev=${1:?usage: tools/host_ab.sh REV [ROUNDS]}
rounds=${2:-4}
old=$(mktemp -d)
tsv=$(mktemp)
git archive "$rev" | tar -x -C "$old"
# this tree's scripts (older ones lack --tsv) run on REV's package: they put their own checkout's
# root first on sys.path, so they must sit in REV's tree
cp benchmarks/profile_host.py benchmarks/bench_dense.py benchmarks/bench_gpu.py "$old/benchmarks/"
date -u +"host_ab: $rev against this tree, $rounds rounds, start %H:%M:%S UTC"
for ((i = 0; i < rounds; i++)); do
  python3 benchmarks/profile_host.py --tsv new >> "$tsv"
  (cd "$old" && PYTHONPATH="/tmp/site:$old" python3 benchmarks/profile_host.py --tsv old >> "$tsv")
done
date -u +"host_ab: end %H:%M:%S UTC"
python3 - "$tsv" "$rev" <<'PY'
import collections, statistics, sys
d = collections.defaultdict(list)
for line in open(sys.argv[1]):
    tag, name, us = line.rstrip("\n").split("\t")
    d[name, tag].append(float(us))
print(f"| call | {sys.argv[2]} us | this tree us |\n|---|---|---|")
for name in dict.fromkeys(k[0] for k in d):
    cells = [f"{statistics.median(v):.2f} ({min(v):.2f}-{max(v):.2f})" if (v := d[name, t]) else "-" for t in ("old", "new")]
    print(f"| {name} | " + " | ".join(cells) + " |")
PY
rm -rf "$old" "$tsv"
