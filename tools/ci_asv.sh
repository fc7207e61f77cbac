#!/usr/bin/env bash
# CI step (run by .ci/run, which runs every tools/ci_*.sh): the asv suite and its dashboard, no GPU.
#  1. asv check: every benchmark imports and is well-formed;
#  2. a quick smoke run of the CPU benchmarks on tiny sizes (SCANARRAY_ASV_SMOKE=1) in this
#     environment (--python=same; nothing is saved), failing on any benchmark error;
#  3. asv publish of the committed results (benchmarks/results/asv, CPU and GPU machines) and
#     tools/render_dashboard.py: headless Chromium opens the dashboard and asserts that the graphs
#     show data points.
# Expects the active Python to have scanarray installed (.ci/run's environment); installs asv into it.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q "asv>=0.6.4"

# Two throw-away configurations (asv resolves paths from the config file's folder: all absolute):
# the smoke run writes its machine file into a temporary results directory, so the committed one
# stays clean; publishing reads the committed results. A checkout without a main branch (CI on
# another ref) publishes what is reachable from HEAD.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python - "$tmp" <<'PY'
import json, os, subprocess, sys
import json5
tmp = sys.argv[1]
c = json5.load(open("asv.conf.json"))
if subprocess.run(["git", "rev-parse", "--verify", "-q", "main"], capture_output=True).returncode:
    c["branches"] = ["HEAD"]
for k in ("repo", "benchmark_dir", "env_dir", "results_dir", "html_dir"):
    c[k] = os.path.abspath(c[k])
json.dump(c, open(os.path.join(tmp, "publish.json"), "w"))
c.update(results_dir=os.path.join(tmp, "results"), html_dir=os.path.join(tmp, "html"))
json.dump(c, open(os.path.join(tmp, "smoke.json"), "w"))
PY
conf=$tmp/smoke.json

python -m asv machine --yes --machine ci-smoke >/dev/null
python -m asv check --config "$conf" --python=same

# forkserver: CPU only here (no CUDA is ever initialised), and a fork per benchmark is much
# cheaper than the configured spawn; the GPU classes skip in setup without a device.
SCANARRAY_ASV_SMOKE=1 python -m asv run --config "$conf" --python=same --quick --machine ci-smoke \
  --launch-method forkserver --show-stderr --durations 5 --bench '^cpu\.' 2>&1 | tee /tmp/asv_smoke.log | tail -n 12
if grep -q ' failed$' /tmp/asv_smoke.log; then
  grep -B2 -A20 ' failed$' /tmp/asv_smoke.log | head -n 80
  echo "ci_asv: benchmarks failed"; exit 1
fi

python -m asv publish --config "$tmp/publish.json"
if ! command -v chromium >/dev/null; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "ci_asv: chromium missing and not root"; exit 1
  fi
fi
tools/asv_www_deps.sh .asv/www-deps
python tools/render_dashboard.py --html .asv/html --deps .asv/www-deps 2> >(grep -v -E 'dbus|Fontconfig' >&2)
