#!/bin/bash
# Copies the scanarray package as of commit REV (default 744226c, before the clean-up of issue 39)
# into .base/scanarray_base (git-ignored), renamed so that it imports beside this tree:
#   bash tools/export_baseline.sh [REV]; python benchmarks/bench_gpu.py --baseline .base
# The device gets the working tree without .git: run this here and carry .base along.
set -euo pipefail
cd "$(dirname "$0")/.."
REV=${1:-744226c}
rm -rf .base
mkdir -p .base
git archive "$REV" scanarray | tar -x -C .base
mv .base/scanarray .base/scanarray_base
# the package imports itself relatively, except the backend table's module paths
sed -i 's/"scanarray\.backends\./"scanarray_base.backends./' .base/scanarray_base/_registry.py
echo "baseline $(git rev-parse --short "$REV") -> .base/scanarray_base"
