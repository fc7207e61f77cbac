"""Which backend x method pairs the shared suite runs, and how data reaches each array library.

Backends join the suite by their entry in ``scanarray._registry.BACKENDS``:
every (backend, method) pair there becomes a case, skipped with the
registry's own reason where it cannot run here. Tests build inputs with NumPy,
move them with ``to_lib`` and bring results back with ``to_numpy``.
"""

from __future__ import annotations

import numpy as np
import pytest

from scanarray import _registry

__all__ = ["cases", "to_lib", "to_numpy", "LIBRARY"]

#: a backend's array library, the first in its ``arrays`` tuple
LIBRARY = {name: spec.arrays[0] for name, spec in _registry.BACKENDS.items()}

#: (backend, method) pairs that only handle a subset of problems, with a test
#: of the case's parameters; the suite skips the rest for them.
#: e.g. {("cupy", "matmulscan"): lambda case: case["a_layout"] == "scalar"}
SUPPORTS: dict = {
    # Tensor-core MatMulScan needs one decay matrix shared across lanes and real dtypes; it
    # sends everything else to "lookback", which its own cases test (tests/test_matmulscan.py).
    ("cupy", "matmulscan"): lambda case: (
        case.get("a_layout") in ("time_a", "scalar_a") and np.dtype(case.get("dtype", "float64")).kind != "c"
    ),
}


def _marks(name):
    reason = _registry.unavailable_reason(name)
    marks = [pytest.mark.skipif(reason is not None, reason=f"{name}: {reason}")]
    if _registry.BACKENDS[name].needs_gpu:
        marks.append(pytest.mark.gpu)
    return marks


def cases(dense=False):
    """``pytest.param(backend, method)`` for every registered pair, and ``auto`` where it chooses."""
    out = []
    for name, spec in _registry.BACKENDS.items():
        methods = spec.dense_methods if dense else spec.methods
        if not methods:  # no dense form: the frontend refuses (tests/test_errors.py)
            continue
        # "auto" of a one-method backend is that method: run the case once.
        for method in (("auto",) if len(methods) > 1 else ()) + tuple(methods):
            out.append(pytest.param(name, method, marks=_marks(name), id=f"{name}-{method}"))
    return out


def supports(backend, method, **case) -> bool:
    check = SUPPORTS.get((backend, method))
    return True if check is None else bool(check(case))


def to_lib(x, backend):
    """Move a NumPy array (or pass a scalar/None) to the backend's array library, layout kept."""
    if x is None or np.isscalar(x):
        return x
    lib = LIBRARY[backend]
    if lib == "numpy":
        return x
    if lib == "cupy":
        import cupy

        # Keep the strides (negative, transposed, broadcast) of the NumPy view:
        # allocate the base and view it the same way.
        return _cupy_like(cupy, x)
    if lib == "dask":
        import dask.array as da

        return da.from_array(np.ascontiguousarray(x), chunks=tuple(max(1, s // 3 + 1) for s in x.shape))
    raise AssertionError(lib)


def _cupy_like(cupy, x):
    x = np.asarray(x)
    if 0 in x.strides and x.size:
        # A broadcast NumPy view: broadcast the compact array on the device too.
        idx = tuple(slice(0, 1) if (s == 0 and n > 1) else slice(None) for s, n in zip(x.strides, x.shape))
        return cupy.broadcast_to(_cupy_like(cupy, x[idx]), x.shape)
    base = x.base if isinstance(x.base, np.ndarray) else None
    if base is not None and base.flags.c_contiguous and base.dtype == x.dtype:
        offset = x.__array_interface__["data"][0] - base.__array_interface__["data"][0]
        dev = cupy.asarray(base)
        return cupy.ndarray(x.shape, x.dtype, dev.data + offset, strides=x.strides)
    return cupy.asarray(x, order="K") if x.flags.f_contiguous else cupy.asarray(x)


def to_numpy(x):
    if hasattr(x, "compute"):
        x = x.compute()
    if hasattr(x, "get"):
        x = x.get()
    return np.asarray(x)
