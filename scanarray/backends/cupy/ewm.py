"""The one-pass EWM kernels (``cuda/ewm.cu``): :func:`scanarray.ewm_mean` and
:func:`scanarray.ewm_var` of a CuPy array with ``adjust=True`` and no ``times``.

One launch reads the data once and writes the statistic once; NaN and ``ignore_na`` are handled in the
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

__all__ = ["applies", "instantiations", "mean", "var"]

_REAL = ("float32", "float64")


def applies(x) -> bool:
    """Whether the kernels take this array: a real float32/float64 CuPy array, at most 2**31 - 1
    steps (the kernels count them in 32-bit integers)."""
    return x.dtype.name in _REAL and max(x.shape, default=0) < 2**31 - 1


# the statistics' policies (cuda/ewm.cu), by their flags (ignore_na, bias)
_STATS = {"mean": "Mean<{ct}, {ig}>", "var": "Var<{ct}, {ig}, {bias}>"}


def _names(dtype, stat, tuning):
    ct = _dtypes.ctype(dtype)
    item = np.dtype(dtype).itemsize
    out = {}
    for kind in ("rows", "lanes"):
        a, b, m = tuning[f"ewm_{stat}_{kind}"][item]
        for ig in (False, True):
            for bias in ((False, True) if stat == "var" else (False,)):
                op = _STATS[stat].format(ct=ct, ig=str(ig).lower(), bias=str(bias).lower())
                out[(kind, ig, bias)] = f"scanarray::ewm::{kind}<{ct}, scanarray::ewm::{op}, {a}, {b}, {m}>"
    return out


def instantiations(dtype=None, tuning=TUNING):
    """Every kernel the driver can name, for ``dtype`` (default: both real dtypes; for
    tools/compile_cuda.py)."""
    return [n for d in ((dtype,) if dtype else _REAL) for stat in _STATS for n in _names(d, stat, tuning).values()]


def mean(x, axis, g, ignore_na, min_periods, tuning=TUNING):
    """pandas' ``ewm(adjust=True, ignore_na=...).mean()`` of CuPy array ``x`` (float32 or float64,
    ``applies``) along ``axis``, with decay ``g = 1 - alpha`` and ``min_periods >= 1``: a new
    array of ``x``'s shape and dtype."""
    return _run(x, axis, "mean", g, 0.0, ignore_na, False, min_periods, tuning)


def var(x, axis, g, ignore_na, min_periods, bias, tiny, tuning=TUNING):
    """pandas' ``ewm(adjust=True, ignore_na=...).var(bias=...)`` of ``x`` (as :func:`mean`); where
    pandas' ``S**2`` falls below ``tiny`` its own ``S**2 - S2`` decides, as in ``_ewm._Ewm.var``."""
    return _run(x, axis, "var", g, tiny, ignore_na, bias, min_periods, tuning)


def _run(x, axis, stat, g, tiny, ignore_na, bias, min_periods, tuning):
    import cupy

    from .scan import _workspace

    y = cupy.empty_like(x)
    if x.size == 0:
        return y
    xm, ym = cupy.moveaxis(x, axis, -1), cupy.moveaxis(y, axis, -1)
    T = xm.shape[-1]
    sx, sy = element_strides(xm), element_strides(ym)
    lanes, (lx, ly) = merge_axes(list(xm.shape[:-1]), [sx[:-1], sy[:-1]], drop_ones=True)
    L = lanes[0] if lanes else 1
    lsx, lsy = (lx[0], ly[0]) if lanes else (0, 0)
    tsx, tsy = sx[-1], sy[-1]
    time_major = L > 1 and T > 1 and abs(lsx) < abs(tsx)  # (one step: any strides are contiguous)
    item = x.dtype.itemsize
    if len(lanes) > 1 or (stat == "var" and time_major and L < tuning["ewm_var_lanes_min"][item]):
        # lane axes that no one stride walks, or few time-major lanes (Var's look-back from tile to
        # tile is slow on them): one copy makes them rows
        y = _run(cupy.ascontiguousarray(xm), -1, stat, g, tiny, ignore_na, bias, min_periods, tuning)
        return cupy.moveaxis(y, -1, axis)
    C = np.float32 if item == 4 else np.float64
    # TileStatus<A, true>::BYTES (cuda/lookback.cuh): twice the aggregate, of 4 (mean) or 8 numbers
    rec = 2 * item * (4 if stat == "mean" else 8)
    names = _names(x.dtype.name, stat, tuning)
    key = (bool(ignore_na), bool(bias))
    if time_major:
        nw, items, _ = tuning[f"ewm_{stat}_lanes"][item]
        kt = -(-T // (nw * items))
        groups = -(-L // 32)
        fn = _common.get_function("ewm.cu", names[("lanes",) + key], group=tuple(names.values()))
        ws = _workspace(cupy, rec, groups * kt * 32)
        with ws.launching():
            _common.launch(cupy, fn, groups * kt, nw * 32,
                           (xm, ym, np.int64(T), np.int64(L), np.int64(lsx), np.int64(tsx), np.int64(lsy),
                            np.int64(tsy), np.int32(kt), C(g), C(tiny), ws.ptr, np.uint32(ws.epoch)))
    else:
        nt, items, _ = tuning[f"ewm_{stat}_rows"][item]
        kt = -(-T // (nt * items))
        fn = _common.get_function("ewm.cu", names[("rows",) + key], group=tuple(names.values()))
        ws = _workspace(cupy, rec, L * kt)
        with ws.launching():
            _common.launch(cupy, fn, L * kt, nt, (xm, ym, np.int64(T), np.int64(lsx), np.int64(tsx), np.int64(lsy),
                                                  np.int64(tsy), np.int32(kt), C(g), C(tiny), ws.ptr,
                                                  np.uint32(ws.epoch)))
    if min_periods > 1:
        seen = cupy.cumsum(~cupy.isnan(x), axis=axis, dtype=np.int32)
        cupy.copyto(y, np.nan, where=seen < min_periods)
    return y
