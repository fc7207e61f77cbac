"""What the torch and JAX front-ends share: CuPy views of device memory, streams, dtype rules.

The front-ends hand scanarray's NumPy and CuPy code *views* of the framework's own memory (no
copy), on the framework's own stream, and allocate results with the framework's allocator; this
module makes those views. Nothing here imports torch, JAX or CuPy at import time.
"""

from __future__ import annotations

import functools
import numbers

import numpy as np

from . import _api, _bound

__all__ = ["Shaped", "bound_launch", "check_flags", "cupy_view", "external_stream", "result_dtypes"]

_STREAMS: dict = {}


class _Handle:
    """A raw CUDA stream handle offered through the CUDA stream protocol (``__cuda_stream__``)."""

    __slots__ = ("ptr",)

    def __init__(self, ptr: int):
        self.ptr = ptr

    def __cuda_stream__(self):
        return (0, self.ptr)


def external_stream(ptr: int, device: int):
    """A CuPy stream for the raw stream ``ptr`` of ``device`` (memoised: a training loop asks for
    the same stream on every call): ``cupy.cuda.Stream.from_external``, which CuPy 14 has in place
    of the deprecated ``ExternalStream``, else ``ExternalStream``."""
    key = (ptr, device)
    s = _STREAMS.get(key)
    if s is None:
        import cupy

        if len(_STREAMS) >= 64:  # streams come and go with the framework's pools
            _STREAMS.clear()
        from_external = getattr(cupy.cuda.Stream, "from_external", None)
        if from_external is not None:
            with cupy.cuda.Device(device):
                s = from_external(_Handle(ptr))
        else:
            s = cupy.cuda.ExternalStream(ptr, device)
        _STREAMS[key] = s
    return s


@functools.lru_cache(maxsize=None)
def device_count() -> int:
    import cupy

    return cupy.cuda.runtime.getDeviceCount()


def bound_launch(a, b, axis, chunk, kw):
    """The raw launch, ``raw(stream_ptr, pa, pb, ph0, pout) -> bool``, that the public function just
    bound to the signature of its call on these CuPy arrays (``kw``: its keywords), or None (not
    bound: every call of it takes the full path). One visible device only: a raw launch runs in
    the calling thread's current context."""
    if device_count() > 1:
        return None
    try:
        call = _bound.CALLS.call(a, b, axis, chunk, kw["initial"], kw["reverse"], kw["dense"], kw["dtype"],
                                 kw["out"], kw["backend"], kw["method"], run=False)[0]
        return getattr(call, "raw", None)
    except Exception:  # noqa: BLE001 - an optimisation only
        return None


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
_BF16 = "bfloat16"


def result_dtypes(parts, dtype):
    """(storage, computation) dtypes of :func:`scanarray.linear_recurrence` by the contract's rules.

    ``parts``: for ``a``, ``b``, ``initial``, a NumPy dtype, ``"bfloat16"``, a Python scalar or
    None; ``dtype``: the argument (None, anything NumPy takes as a dtype, or ``"bfloat16"``).
    Storage is a NumPy dtype or ``"bfloat16"``; computation is the NumPy dtype the scan runs and
    stores in (float32 for either half type: NumPy and CuPy cannot compute with bfloat16, so a
    framework casts it). bfloat16 promotes as float16 does: alone it stays bfloat16, with float16
    it gives float32. Memoised on dtypes and scalar types (the rules never read scalar values).
    """
    key = (tuple(type(p) if isinstance(p, _api._PYTHON_SCALARS) else p for p in parts), dtype)
    try:
        return _RESULT_DTYPES[key]
    except KeyError:
        pass
    bf16 = any(isinstance(p, str) and p == _BF16 for p in parts)
    f16 = any(isinstance(p, np.dtype) and p == np.float16 for p in parts)
    stand = [np.dtype(np.float16) if isinstance(p, str) and p == _BF16 else p for p in parts]
    a, b, initial = (p if p is None or isinstance(p, _api._PYTHON_SCALARS) else _DtypeOnly(p) for p in stand)
    if b is None:
        b = _DtypeOnly(np.dtype(np.float64)) if a is None else a
    want_bf16 = isinstance(dtype, str) and dtype == _BF16
    store, work = _api._result_dtypes(a, b, initial, None if want_bf16 else dtype)
    if want_bf16:
        if store.kind == "c":
            raise TypeError(f"dtype=bfloat16 would discard the imaginary part of complex inputs ({store})")
        store = _BF16
    elif bf16 and dtype is None and store == np.float16:
        store = np.dtype(np.float32) if f16 else _BF16
    r = _RESULT_DTYPES[key] = (store, np.dtype(np.float32) if store == _BF16 else work)
    return r


def check_flags(chunk, reverse, dense):
    """``(chunk, reverse, dense)`` as the public function takes them, or its errors: the custom
    operators' schemas would otherwise give their own."""
    if isinstance(chunk, bool) or not isinstance(chunk, numbers.Integral) or chunk <= 0:
        raise (ValueError if isinstance(chunk, numbers.Integral) and not isinstance(chunk, bool) else TypeError)(
            f"chunk must be a positive int; got {chunk!r}")
    for name, flag in (("reverse", reverse), ("dense", dense)):
        if not isinstance(flag, (bool, np.bool_)):
            raise TypeError(f"{name} must be True or False; got {flag!r}")
    return int(chunk), bool(reverse), bool(dense)


class Shaped:
    """A shape standing for an array in the contract's shape checks (which read ``shape`` and
    ``ndim`` only)."""

    __slots__ = ("shape", "ndim")

    def __init__(self, shape):
        self.shape = tuple(shape)
        self.ndim = len(self.shape)
