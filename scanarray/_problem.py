"""The normalised description of one call that the public function hands a backend."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["Problem"]


@dataclass
class Problem:
    """One validated, normalised call of :func:`scanarray.linear_recurrence`.

    Everything is in the canonical layout: the time axis is last for the
    diagonal form (``a``, ``b``, ``out`` have shape ``(*lanes, T)``) and the
    one before the state for the dense form (``b``, ``out``: ``(*lanes, T,
    n)``; ``a``: ``(*lanes, T, n, n)``). ``a`` and ``b`` are *views* of the
    caller's arrays broadcast to that shape: a broadcast axis has stride 0 and
    nothing was copied or cast. Backends read them in whatever order suits
    them, cast to ``dtype`` as they read, and never write to them (``out`` may
    be the very memory of ``b``: in-place scans must read ``b[t]`` before they
    write ``h[t]``).
    """

    #: the native array module (numpy, cupy, dask.array)
    xp: Any
    #: "numpy", "cupy" or "dask"
    kind: str
    a: Any
    b: Any
    #: h[-1] (h[T] when reverse), broadcast to ``lanes`` (dense: ``lanes + (n,)``), or None for zeros
    initial: Any
    #: preallocated result view of the canonical shape and ``out_dtype`` (None for lazy backends)
    out: Any
    #: accumulation dtype (float32 for float16/bfloat16 data)
    dtype: np.dtype
    #: storage dtype of the result
    out_dtype: np.dtype
    reverse: bool
    dense: bool
    chunk: int
    method: str
    #: backend name chosen for this call
    backend: str = ""
    #: ``a`` in the canonical layout *before* broadcasting (same ndim as ``a``,
    #: length 1 where it broadcasts), for lazy backends (``writes_out=False``)
    #: that cannot read broadcasting from strides, e.g. Dask; None otherwise
    a_compact: Any = None
    #: set by a backend whose call can be repeated without the public function's work: a callable
    #: that binds the caller's arrays to a direct repeat of it (:mod:`scanarray._bound`; CuPy's
    #: launches: ``backends/cupy/_common.Binder``; numba's loop: ``numba_backend._bind``)
    bind: Any = None
    #: the transpose that made the canonical views of ``b`` and ``out`` (diagonal form: of ``a``
    #: too) from the caller's arrays broadcast to the result's shape, None for none: what a
    #: ``bind`` that remakes views replays
    perm: Any = None
    #: the fused epilogue of the adjoint (set only for backends with ``fuses_product``): ``mul`` a
    #: read-only view broadcast to the canonical shape, ``mul_out`` a writable view of it; the
    #: backend writes ``mul_out[...] = h[...] * mul[...]`` as it writes ``h``
    mul: Any = None
    mul_out: Any = None
    #: a real factor of the stored result (set only for backends with ``fuses_scale``): the
    #: backend writes ``scale * h`` where it would write ``h``, and carries ``h`` itself
    scale: Any = None

    @property
    def time_axis(self) -> int:
        return -2 if self.dense else -1

    @property
    def length(self) -> int:
        return self.b.shape[self.time_axis]

    @property
    def lanes(self) -> tuple[int, ...]:
        return tuple(self.b.shape[: self.time_axis])

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.b.shape)
