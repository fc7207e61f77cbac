#!/usr/bin/env bash
# CI step (run by .ci/run, which runs every tools/ci_*.sh): the documentation site.
#  1. install the docs extra into the active environment;
#  2. build the site from scratch with warnings as errors; every tutorial (examples/*.py) runs;
#  3. open the built site in headless Chromium (tools/check_site.py): the API page shows the
#     signature, the tutorial and performance figures are decoded by the browser, and screenshots
#     of the home page, a tutorial and the performance page are not blank.
# Locally: bash tools/ci_docs.sh [SCREENSHOT_DIR]  (docs/screenshots to refresh the committed ones)
set -euo pipefail
cd "$(dirname "$0")/.."
shots=${1:-$(mktemp -d)}
python -m pip install -q ".[docs]"

start=$SECONDS
rm -rf docs/_build docs/_generated docs/tutorials
python -m sphinx -W --keep-going -q -b html docs docs/_build/html
echo "ci_docs: site built in $((SECONDS - start)) s"

if ! command -v chromium >/dev/null; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "ci_docs: chromium missing and not root"; exit 1
  fi
fi
python tools/check_site.py --html docs/_build/html --screenshots "$shots" 2> >(grep -v -E 'dbus|Fontconfig' >&2)
