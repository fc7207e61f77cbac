"""Random inputs in every layout the shared suite covers."""

from __future__ import annotations

import numpy as np

__all__ = ["DTYPES", "LAYOUTS", "coefficients", "contractive", "layout", "make_a", "values"]

DTYPES = ["float16", "float32", "float64", "complex64", "complex128"]
#: how the arrays sit in memory; the broadcast ones describe ``a``
LAYOUTS = ["contiguous", "transposed", "negative", "strided", "lane_a", "time_a", "scalar_a"]


def values(rng, shape, dtype, scale=1.0):
    dtype = np.dtype(dtype)
    x = rng.standard_normal(shape) * scale
    if dtype.kind == "c":
        x = x + 1j * rng.standard_normal(shape) * scale
    return x.astype(dtype)


def coefficients(rng, shape, dtype, reset=0.05, high=1.05, low=0.0):
    """Decays with sign changes, a few exact resets (a = 0) and a few growths (|a| > 1).

    ``low`` > 0 keeps ``|a|`` in ``[low, high]``: with ``low`` near 1 a state carries across
    thousands of steps, so a wrong carry between tiles shows (with ``|a|`` spread over
    ``[0, 1]`` the product over a tile of hundreds of steps is 0 and hides it)."""
    dtype = np.dtype(dtype)
    if low > 0:
        r = rng.uniform(low, high, shape) * rng.choice([-1.0, 1.0], shape)
    else:
        r = rng.uniform(-high, high, shape)
    if dtype.kind == "c":
        r = np.abs(r) * np.exp(1j * rng.uniform(-np.pi, np.pi, shape))
    r = np.where(rng.random(shape) < reset, 0, r)
    return r.astype(dtype)


def layout(x, kind, axis):
    """A view of the values ``x`` laid out as ``kind`` (``x`` is C-ordered; values kept)."""
    if kind in ("contiguous", "lane_a", "time_a", "scalar_a") or x.ndim == 0:
        return np.ascontiguousarray(x)
    if kind == "transposed":  # reversed memory order of the axes, same logical array
        return np.asfortranarray(x)
    if kind == "negative":  # negative strides along every axis
        flipped = np.ascontiguousarray(x[(slice(None, None, -1),) * x.ndim])
        return flipped[(slice(None, None, -1),) * x.ndim]
    if kind == "strided":  # every other element of a larger buffer
        big = np.zeros(tuple(2 * s for s in x.shape), x.dtype)
        view = big[(slice(None, None, 2),) * x.ndim]
        view[...] = x
        return view
    raise AssertionError(kind)


def make_a(rng, shape, dtype, kind, axis):
    """``a`` for a layout: full, per-lane (time length 1), per-time (lanes 1) or a Python scalar."""
    if kind == "scalar_a":
        # Constant in time: keep |a| < 1 so that long rows do not overflow.
        v = coefficients(rng, (), "complex128" if np.dtype(dtype).kind == "c" else "float64", reset=0, high=0.99)
        return complex(v) if np.iscomplexobj(v) else float(v)
    if kind == "lane_a":
        s = list(shape)
        s[axis] = 1
        return coefficients(rng, tuple(s), dtype, reset=0, high=0.99)
    if kind == "time_a":
        s = [1] * len(shape)
        s[axis] = shape[axis]
        return coefficients(rng, tuple(s), dtype)
    return layout(coefficients(rng, shape, dtype), kind, axis)


def contractive(rng, shape, dtype, radius=0.95):
    """Random matrices ``(..., n, n)`` scaled to spectral norm ``radius`` (stable systems)."""
    A = values(rng, shape, "complex128" if np.dtype(dtype).kind == "c" else "float64")
    norms = np.linalg.norm(A, ord=2, axis=(-2, -1))[..., None, None]
    return (A * (radius / np.maximum(norms, 1e-300))).astype(dtype)
