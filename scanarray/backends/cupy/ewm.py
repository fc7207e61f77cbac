"""The one-pass EWM mean kernel (``cuda/ewm.cu``): :func:`scanarray.ewm_mean` of a CuPy array with
``adjust=True`` and no ``times``.

One launch reads the data once and writes the mean once; NaN and ``ignore_na`` are handled in the
kernel, so the host never looks at the data (the general path's NaN probe waits for the device).
``min_periods > 1`` adds a count of the observations and a masked store. Data whose steps are
contiguous (rows) takes the ``rows`` kernel, time-major data (lanes closer in memory than steps)
the ``lanes`` kernel; either reads any strides.
"""

from __future__ import annotations

import numpy as np

from ... import _dtypes
from .._layout import element_strides, merge_axes
from . import _common
from .tuning import TUNING

__all__ = ["applies", "instantiations", "mean"]

_REAL = ("float32", "float64")


def applies(x) -> bool:
    """Whether the kernel computes this mean: a real float32/float64 CuPy array, at most 2**31 - 1
    steps (the kernel counts them in 32-bit integers)."""
    return x.dtype.name in _REAL and max(x.shape, default=0) < 2**31 - 1


def _names(dtype, tuning):
    ct = _dtypes.ctype(dtype)
    item = np.dtype(dtype).itemsize
    shapes = {"rows": tuning["ewm_rows"][item], "lanes": tuning["ewm_lanes"][item]}
    return {(kind, ig): f"scanarray::ewm::{kind}<{ct}, {ct}, {a}, {b}, {m}, {str(ig).lower()}>"
            for kind, (a, b, m) in shapes.items() for ig in (False, True)}


def instantiations(dtype=None, tuning=TUNING):
    """Every kernel the driver can name, for ``dtype`` (default: both real dtypes; for
    tools/compile_cuda.py)."""
    return [n for d in ((dtype,) if dtype else _REAL) for n in _names(d, tuning).values()]


def _kernel(dtype, kind, ignore_na, tuning):
    names = _names(dtype, tuning)
    return _common.get_function("ewm.cu", names[(kind, ignore_na)], group=tuple(names.values()))


def mean(x, axis, g, ignore_na, min_periods, tuning=TUNING):
    """pandas' ``ewm(adjust=True, ignore_na=...).mean()`` of CuPy array ``x`` (float32 or float64,
    ``applies``) along ``axis``, with decay ``g = 1 - alpha`` and ``min_periods >= 1``: a new
    array of ``x``'s shape and dtype."""
    import cupy

    from .scan import _workspace

    y = cupy.empty_like(x)
    if x.size == 0:
        return y
    xm, ym = cupy.moveaxis(x, axis, -1), cupy.moveaxis(y, axis, -1)
    T = xm.shape[-1]
    sx, sy = element_strides(xm), element_strides(ym)
    lanes, (lx, ly) = merge_axes(list(xm.shape[:-1]), [sx[:-1], sy[:-1]], drop_ones=True)
    if len(lanes) > 1:  # lane axes that no one stride walks: one copy makes them rows
        return cupy.moveaxis(mean(cupy.ascontiguousarray(xm), -1, g, ignore_na, min_periods, tuning), -1, axis)
    L = lanes[0] if lanes else 1
    lsx, lsy = (lx[0], ly[0]) if lanes else (0, 0)
    tsx, tsy = sx[-1], sy[-1]
    item = x.dtype.itemsize
    C = np.float32 if item == 4 else np.float64
    rec = 8 * item  # TileStatus<Agg<C>>::BYTES (cuda/lookback.cuh): 16 bytes for 8 of Agg's four numbers
    if L > 1 and abs(lsx) < abs(tsx):
        nw, items, _ = tuning["ewm_lanes"][item]
        kt = -(-T // (nw * items))
        groups = -(-L // 32)
        fn = _kernel(x.dtype.name, "lanes", bool(ignore_na), tuning)
        ws = _workspace(cupy, rec, groups * kt * 32)
        with ws.launching():
            _common.launch(cupy, fn, groups * kt, nw * 32,
                           (xm, ym, np.int64(T), np.int64(L), np.int64(lsx), np.int64(tsx), np.int64(lsy),
                            np.int64(tsy), np.int32(kt), C(g), ws.ptr, np.uint32(ws.epoch)))
    else:
        nt, items, _ = tuning["ewm_rows"][item]
        kt = -(-T // (nt * items))
        fn = _kernel(x.dtype.name, "rows", bool(ignore_na), tuning)
        ws = _workspace(cupy, rec, L * kt)
        with ws.launching():
            _common.launch(cupy, fn, L * kt, nt, (xm, ym, np.int64(T), np.int64(lsx), np.int64(tsx), np.int64(lsy),
                                                  np.int64(tsy), np.int32(kt), C(g), ws.ptr, np.uint32(ws.epoch)))
    if min_periods > 1:
        seen = cupy.cumsum(~cupy.isnan(x), axis=axis, dtype=np.int32)
        cupy.copyto(y, np.nan, where=seen < min_periods)
    return y
