#!/usr/bin/env bash
# CI step (run by .ci/run, which runs every tools/ci_*.sh): the tests marked slow, which the
# README's test command leaves out (pyproject.toml's addopts: -m 'not slow'): the NumPy dense
# accuracy sweep at complex n = 48, the numba CUDA simulator, long parameter sweeps.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pytest -m slow -n auto -q
