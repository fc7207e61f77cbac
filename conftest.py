"""Collection rules for the doctests under scanarray/ (tests/ has its own conftest)."""

import importlib.util

# GPU backend modules document GPU examples; collect them only where CuPy is installed.
collect_ignore_glob = []
if importlib.util.find_spec("cupy") is None:
    collect_ignore_glob += ["scanarray/backends/cupy/*.py", "scanarray/backends/numba_cuda*.py"]
if importlib.util.find_spec("dask") is None:
    collect_ignore_glob += ["scanarray/backends/dask*.py"]
# The framework front-ends import their framework (optional extras).
if importlib.util.find_spec("torch") is None:
    collect_ignore_glob += ["scanarray/_torch.py"]
if importlib.util.find_spec("jax") is None:
    collect_ignore_glob += ["scanarray/_jax.py"]
