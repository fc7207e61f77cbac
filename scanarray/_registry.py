"""The table of backends: which arrays each takes, its methods, and how to import it.

A backend is one module under :mod:`scanarray.backends` plus one entry in
``BACKENDS`` below. The module is imported the first time a call chooses it
(never at ``import scanarray``), in the manner of opt_einsum's and einops'
backend tables. A backend module exports:

``auto_method(problem) -> str``
    the method ``method="auto"`` resolves to for this problem;
``linear_recurrence(problem) -> array``
    computes the scan described by a :class:`scanarray._problem.Problem`
    whose ``method`` is already resolved, and returns the result in the
    problem's canonical layout (time axis last for the diagonal form).
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass

__all__ = ["BACKENDS", "BackendSpec", "available_backends", "fast_call", "load", "unavailable_reason"]


@dataclass(frozen=True)
class BackendSpec:
    name: str
    #: import path of the implementing module
    module: str
    #: array libraries whose arrays it takes ("numpy", "cupy", "dask")
    arrays: tuple[str, ...]
    #: valid ``method`` names for the diagonal form
    methods: tuple[str, ...]
    #: valid ``method`` names for ``dense=True``
    dense_methods: tuple[str, ...]
    #: top-level packages that must be importable
    requires: tuple[str, ...] = ()
    #: the ``pip install "scanarray[extra]"`` that brings them
    extra: str | None = None
    #: whether it needs a CUDA device at run time
    needs_gpu: bool = False
    #: whether it writes into a preallocated ``out`` (False: returns a new lazy array)
    writes_out: bool = True
    #: whether it writes ``Problem.mul_out = h * Problem.mul`` in the scan's own pass (the
    #: adjoint's ``grad_a = grad_b * h_prev``); otherwise the caller multiplies after the scan
    fuses_product: bool = False
    #: whether it writes ``Problem.scale * h`` in the scan's own pass (the vocabulary's constant
    #: gains and normalisations); otherwise the caller scales after the scan
    fuses_scale: bool = False
    #: whether its module has ``adjoint(a, g, lam, h, ga, reverse, method)``: the adjoint's scan
    #: over the whole arrays with its one-step shifts of ``a`` and ``h`` inside one launch
    #: (scanarray/_vjp.py); it returns False where it does not take the layout, else a function
    #: repeating that launch (CuPy: on raw pointers; numba: on new views of the same layout) for
    #: the torch front-end's bound backward
    shifted_adjoint: bool = False
    #: whether the public function looks up repeated calls of its arrays' signature (scanarray/_bound.py),
    #: which skip validation and planning for the work the backend bound (``Problem.bind``)
    fast_call: bool = False


# Order matters: for ``backend=None`` the first available backend that takes
# the arrays wins, so compiled backends come before the reference ones.
BACKENDS: dict[str, BackendSpec] = {
    spec.name: spec
    for spec in (
        BackendSpec(
            "numba",
            "scanarray.backends.numba_backend",
            arrays=("numpy",),
            methods=("chunked", "sequential"),
            dense_methods=("sequential", "cyclic_reduction"),
            requires=("numba",),
            extra="numba",
            fuses_scale=True,
            shifted_adjoint=True,
            fast_call=True,
        ),
        BackendSpec(
            "numpy",
            "scanarray.backends.numpy_backend",
            arrays=("numpy",),
            methods=("chunked",),
            dense_methods=("cyclic_reduction", "prefix", "sequential", "chunked"),
        ),
        BackendSpec(
            "cupy",
            "scanarray.backends.cupy",
            arrays=("cupy",),
            methods=("lookback", "sequential", "matmulscan"),
            dense_methods=("cyclic_reduction", "prefix", "sequential", "chunked", "lookback"),
            requires=("cupy",), extra="cupy", needs_gpu=True, fast_call=True, fuses_product=True,
            fuses_scale=True, shifted_adjoint=True,
        ),
        BackendSpec(
            "numba_cuda", "scanarray.backends.numba_cuda_backend", arrays=("cupy",), methods=("blelloch",),
            dense_methods=(), requires=("numba", "cupy"), extra="numba-cuda", needs_gpu=True,
        ),
        BackendSpec(
            "dask",
            "scanarray.backends.dask_backend",
            arrays=("dask",),
            methods=("blockwise",),
            dense_methods=("blockwise",),
            requires=("dask",),
            extra="dask",
            writes_out=False,
        ),
    )
}

_loaded: dict[str, object] = {}
_reasons: dict[str, str | None] = {}


def _module_exists(name: str) -> bool:
    spec = importlib.util.find_spec(name.replace("-", "_"))
    return spec is not None


def unavailable_reason(name: str) -> str | None:
    """Why backend ``name`` cannot run here, or ``None`` if it can.

    Checks installation without importing (``importlib.util.find_spec``) and,
    only for GPU backends whose packages are installed, asks CuPy for a device.
    """
    if name in _reasons:
        return _reasons[name]
    spec = BACKENDS[name]
    reason = None
    missing = [r for r in spec.requires if not _module_exists(r)]
    if missing:
        reason = (
            f"{', '.join(missing)} not installed: pip install \"scanarray[{spec.extra}]\""
        )
    elif spec.needs_gpu:
        reason = _gpu_reason()
    if reason is None:
        try:
            mod = load(name)
            check = getattr(mod, "unavailable_reason", None)
            reason = check() if check is not None else None
        except ImportError as exc:  # pragma: no cover - depends on the host
            reason = f"import failed: {exc}"
    _reasons[name] = reason
    return reason


def _gpu_reason() -> str | None:
    try:
        import cupy
    except Exception as exc:  # ImportError, or CUDA libraries missing
        return f"cupy does not import: {exc}"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # CUDARuntimeError when no driver is present
        return f"no CUDA device: {exc}"
    return None if count > 0 else "no CUDA device"


def fast_call(kind: str) -> bool:
    """Whether a backend for arrays of ``kind`` binds calls to their launches."""
    return any(spec.fast_call and kind in spec.arrays for spec in BACKENDS.values())


def load(name: str):
    """Import (once) and return the module of backend ``name``."""
    mod = _loaded.get(name)
    if mod is None:
        mod = importlib.import_module(BACKENDS[name].module)
        _loaded[name] = mod
    return mod


def available_backends() -> dict[str, dict]:
    """Report every backend, the arrays and methods it takes, and whether it runs here.

    Returns
    -------
    dict
        Maps each backend name to a dict with keys ``available`` (bool),
        ``arrays`` (array libraries it takes), ``methods`` (diagonal
        methods), ``dense_methods``, ``extra`` (the pip extra that installs
        it) and ``reason`` (why it is unavailable, or ``None``).

    Notes
    -----
    Asking may import a backend's packages (CuPy to count devices); plain
    ``import scanarray`` never does.

    Examples
    --------
    >>> import scanarray
    >>> info = scanarray.available_backends()
    >>> info["numpy"]["available"], info["numpy"]["methods"]
    (True, ('chunked',))
    """
    out = {}
    for name, spec in BACKENDS.items():
        reason = unavailable_reason(name)
        out[name] = {
            "available": reason is None,
            "arrays": spec.arrays,
            "methods": spec.methods,
            "dense_methods": spec.dense_methods,
            "extra": spec.extra,
            "reason": reason,
        }
    return out
