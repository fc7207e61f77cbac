"""What the torch and JAX front-ends share: CuPy views of device memory, streams, dtype rules.

The front-ends hand scanarray's NumPy and CuPy code *views* of the framework's own memory (no
copy), on the framework's own stream, and allocate results with the framework's allocator; this
module makes those views. Nothing here imports torch, JAX or CuPy at import time.
"""

from __future__ import annotations

import functools

import numpy as np

from . import _api

__all__ = ["cupy_view", "external_stream", "result_dtypes"]

_STREAMS: dict = {}


def external_stream(ptr: int, device: int):
    """``cupy.cuda.ExternalStream`` for the raw stream ``ptr`` of ``device`` (memoised: a training
    loop asks for the same stream on every call)."""
    key = (ptr, device)
    s = _STREAMS.get(key)
    if s is None:
        import cupy

        if len(_STREAMS) >= 64:  # streams come and go with the framework's pools
            _STREAMS.clear()
        s = _STREAMS[key] = cupy.cuda.ExternalStream(ptr, device)
    return s


@functools.lru_cache(maxsize=None)
def device_count() -> int:
    import cupy

    return cupy.cuda.runtime.getDeviceCount()


def cupy_view(ptr: int, shape, strides, dtype, owner, device: int):
    """A CuPy array over device memory it does not own: ``strides`` in bytes; ``owner`` is kept
    alive by the view. No copy, no synchronisation (DLPack import would also negotiate streams)."""
    import cupy

    dtype = np.dtype(dtype)
    shape = tuple(shape)
    if 0 in shape:
        return cupy.empty(shape, dtype)
    extent = dtype.itemsize + sum((n - 1) * abs(s) for n, s in zip(shape, strides))
    mem = cupy.cuda.UnownedMemory(ptr, extent, owner, device)
    return cupy.ndarray(shape, dtype, cupy.cuda.MemoryPointer(mem, 0), tuple(strides))


class _DtypeOnly:
    """Stands for an array in the contract's dtype rules (which read ``.dtype`` only)."""

    __slots__ = ("dtype",)

    def __init__(self, dtype):
        self.dtype = dtype


_RESULT_DTYPES: dict = {}


def result_dtypes(parts, dtype):
    """(storage, accumulation) dtypes of :func:`scanarray.linear_recurrence` for ``parts``: NumPy
    dtypes of the arrays, Python scalars or None, and the ``dtype`` argument (a NumPy dtype or
    None). Memoised on the dtypes and scalar types only (the rules never read scalar values)."""
    key = (tuple(type(p) if isinstance(p, _api._PYTHON_SCALARS) else p for p in parts), dtype)
    try:
        return _RESULT_DTYPES[key]
    except KeyError:
        pass
    a, b, initial = (p if p is None or isinstance(p, _api._PYTHON_SCALARS) else _DtypeOnly(p) for p in parts)
    if b is None:
        b = _DtypeOnly(np.dtype(np.float64)) if a is None else a
    r = _RESULT_DTYPES[key] = _api._result_dtypes(a, b, initial, dtype)
    return r
