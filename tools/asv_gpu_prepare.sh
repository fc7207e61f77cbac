#!/usr/bin/env bash
# Prepare an asv run of several commits on the offline GPU host (no Git history travels there).
# Usage: tools/asv_gpu_prepare.sh COMMIT...   (oldest first; the last gets the whole suite)
# Writes .asvsrc/ (git-ignored locally through .git/info/exclude; pass it in the device call's carry):
#   .asvsrc/<hash>/scanarray/   the package as of each commit (git archive)
#   .asvsrc/commits.txt         the full hashes, in order
#   .asvsrc/manifest.json       {hash: commit date in ms}, what asv's Git plugin would report
# Then on the host: tools/asv_gpu.sh; back here: tools/asv_gpu_collect.sh FILES_AT/gpu_results.tar.gz
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 COMMIT..." >&2; exit 2; }
grep -qx '/.asvsrc/' .git/info/exclude 2>/dev/null || echo '/.asvsrc/' >> .git/info/exclude
rm -rf .asvsrc && mkdir -p .asvsrc
for c in "$@"; do
  h=$(git rev-parse --verify "$c^{commit}")
  mkdir -p ".asvsrc/$h"
  git archive "$h" scanarray | tar -x -C ".asvsrc/$h"
  echo "$h" >> .asvsrc/commits.txt
done
python3 - <<'PY'
import json, subprocess
hashes = open(".asvsrc/commits.txt").read().split()
dates = {h: int(subprocess.check_output(["git", "log", "-1", "--format=%at", h]).decode()) * 1000 for h in hashes}
json.dump(dates, open(".asvsrc/manifest.json", "w"), indent=1)
PY
du -sh .asvsrc
cat .asvsrc/commits.txt
