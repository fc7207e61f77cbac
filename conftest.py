"""Collection rules for the doctests under scanarray/ (tests/ has its own conftest)."""

import importlib.util
import os

# pytest-xdist runs a worker per core, each with numba's thread pool: OpenMP threads that spin
# after every parallel region would take the cores from the other workers (small calls then took
# milliseconds instead of microseconds). Passive waiting, for the tests only; set before numba loads.
os.environ.setdefault("OMP_WAIT_POLICY", "passive")

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
