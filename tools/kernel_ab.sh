#!/usr/bin/env bash
# GPU time of the CuPy kernels alone: this tree against another tree's package, in alternating
# processes (benchmarks/kernel_ab.py under each tree's PYTHONPATH in turn).
# Usage (repo root, on the GPU host, after `source tools/gpu_env.sh`):
#   bash tools/kernel_ab.sh OLD_TREE [ROUNDS] [kernel_ab.py options]
# OLD_TREE: a directory holding the other `scanarray` package (e.g. `git archive REV | tar -x -C DIR`
# made before the device call, as the device's .git may not hold this session's commits).
# Prints one table: per workload, the median GB/s over the rounds (and the range), new/old, and both
# against the median copy bandwidth of all the processes.
set -euo pipefail
old=$(cd "${1:?usage: tools/kernel_ab.sh OLD_TREE [ROUNDS] [options]}" && pwd)
rounds=${2:-2}
shift $(($# < 2 ? $# : 2))
tsv=$(mktemp)
date -u +"kernel_ab: $old against this tree, $rounds rounds, start %H:%M:%S UTC"
for ((i = 0; i < rounds; i++)); do
  python3 benchmarks/kernel_ab.py new "$@" | tee -a "$tsv"
  PYTHONPATH="/tmp/site:$old" python3 benchmarks/kernel_ab.py old "$@" | tee -a "$tsv"
done
date -u +"kernel_ab: end %H:%M:%S UTC"
python3 - "$tsv" <<'PY'
import collections, statistics, sys
gbs, info, copy = collections.defaultdict(list), {}, []
for line in open(sys.argv[1]):
    f = line.rstrip("\n").split("\t")
    if f[1] == "copy":
        copy.append(float(f[2]))
        continue
    tag, label, g, _, kernel, err = f
    gbs[label, tag].append(float(g))
    info[label, tag] = (kernel, err)
c = statistics.median(copy)
print(f"copy bandwidth: median {c:.0f} GB/s over {len(copy)} processes ({min(copy):.0f}-{max(copy):.0f})")
print("| workload | old GB/s | new GB/s | new/old | old % copy | new % copy | kernel (old, new) | error (old, new) |")
print("|---|---|---|---|---|---|---|---|")
for label in dict.fromkeys(k[0] for k in gbs):
    o, n = gbs[label, "old"], gbs[label, "new"]
    mo, mn = (statistics.median(v) if v else float("nan") for v in (o, n))
    rng = [f"{statistics.median(v):.0f} ({min(v):.0f}-{max(v):.0f})" if v else "-" for v in (o, n)]
    k = [info.get((label, t), ("-", "-")) for t in ("old", "new")]
    print(f"| {label} | {rng[0]} | {rng[1]} | {mn / mo:.3f} | {100 * mo / c:.1f} | {100 * mn / c:.1f} | "
          f"{k[0][0]}, {k[1][0]} | {k[0][1]}, {k[1][1]} |")
PY
rm -f "$tsv"
