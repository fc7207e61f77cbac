#!/usr/bin/env bash
# CI step (run by .ci/run after the main tests): the PyTorch and JAX front-ends. torch and JAX are
# optional extras (scanarray[torch], scanarray[jax]), so the README's install leaves them out and
# its test run skips their tests; here they are installed into the CI environment (the CPU build of
# torch) and those tests run: values, gradcheck / check_grads, torch.compile, torch.func, jit/vmap,
# and the users' vocabulary on tensors.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q "torch==2.13.0" "jax[cpu]>=0.7"
python -c "import torch, jax; print('torch', torch.__version__, 'jax', jax.__version__)"
python -m pytest -q -n 2 -p no:randomly tests/test_vjp.py tests/test_torch.py tests/test_jax.py \
  tests/test_vocab_torch_cpu.py
# the vocabulary's torch and JAX cases (values against pandas, SciPy and the RL loop; gradients)
python -m pytest -q -n 2 -p no:randomly tests/test_ewm.py tests/test_signal.py tests/test_rl.py -k "torch or jax"
