"""The independent oracle: a plain loop over time in extended precision, and the tolerance check.

Nothing here calls scanarray. The loop runs in ``numpy.longdouble`` (80-bit on
x86-64) or ``clongdouble``, one step at a time, vectorised only over lanes.
"""

from __future__ import annotations

import numpy as np

__all__ = ["assert_matches", "dense_ref", "loop_in", "recurrence_ref"]


def _wide(x):
    x = np.asarray(x)
    return x.astype(np.clongdouble if np.iscomplexobj(x) else np.longdouble)


def recurrence_ref(a, b, axis=-1, initial=None, reverse=False):
    """Reference ``h`` and bound ``g`` (``g[t] = |a[t]| g[t-1] + |b[t]|``, from ``|initial|``).

    ``g`` is the sum of the absolute values of every term that makes up
    ``h[t]``: rounding errors of any summation order are ``O(eps * g)``.
    """
    a, b = np.broadcast_arrays(_wide(a), _wide(b))
    a, b = np.moveaxis(a, axis, -1), np.moveaxis(b, axis, -1)
    if reverse:
        a, b = a[..., ::-1], b[..., ::-1]
    lanes, T = b.shape[:-1], b.shape[-1]
    h = np.zeros(lanes, dtype=np.result_type(a, b, np.longdouble))
    g = np.zeros(lanes, dtype=np.longdouble)
    if initial is not None:
        init = np.broadcast_to(_wide(initial), lanes)
        h = h + init
        g = g + np.abs(init)
    H = np.empty(b.shape, dtype=np.result_type(h, b, a))
    G = np.empty(b.shape, dtype=np.longdouble)
    with np.errstate(all="ignore"):
        for t in range(T):
            h = a[..., t] * h + b[..., t]
            g = np.abs(a[..., t]) * g + np.abs(b[..., t])
            H[..., t] = h
            G[..., t] = g
    if reverse:
        H, G = H[..., ::-1], G[..., ::-1]
    return np.moveaxis(H, -1, axis), np.moveaxis(G, -1, axis)


def loop_in(acc, a, b, initial=None):
    """The plain loop along the last axis computed in dtype ``acc``, inputs cast to it as read.

    The contract's own statement of the accumulation dtype (float16 storage accumulates in
    float32; ``dtype=float32`` reads float64 inputs as float32), as a user would write it:
    ``h = acc(a[t]) * h + acc(b[t])``, one step at a time, vectorised over lanes only.
    """
    acc = np.dtype(acc)
    a, b = np.broadcast_arrays(np.asarray(a), np.asarray(b))
    h = np.zeros(b.shape[:-1], acc)
    if initial is not None:
        h[...] = np.asarray(initial).astype(acc)
    H = np.empty(b.shape, acc)
    with np.errstate(all="ignore"):
        a, b = a.astype(acc), b.astype(acc)
        for t in range(b.shape[-1]):
            h = a[..., t] * h + b[..., t]
            H[..., t] = h
    return H


def dense_ref(A, b, axis=-1, initial=None, reverse=False):
    """Dense reference ``h[t] = A[t] @ h[t-1] + b[t]`` and its bound ``|A| @ g + |b|``."""
    A, b = _wide(A), _wide(b)
    n = b.shape[-1]
    batch = np.broadcast_shapes(A.shape[:-2], b.shape[:-1])
    A = np.broadcast_to(A, batch + (n, n))
    b = np.broadcast_to(b, batch + (n,))
    ax = axis % len(batch)
    A, b = np.moveaxis(A, ax, -3), np.moveaxis(b, ax, -2)
    if reverse:
        A, b = A[..., ::-1, :, :], b[..., ::-1, :]
    T = b.shape[-2]
    h = np.zeros(b.shape[:-2] + (n,), dtype=np.result_type(A, b))
    g = np.zeros(b.shape[:-2] + (n,), dtype=np.longdouble)
    if initial is not None:
        init = np.broadcast_to(_wide(initial), h.shape)
        h = h + init
        g = g + np.abs(init)
    H = np.empty(b.shape, dtype=h.dtype)
    G = np.empty(b.shape, dtype=np.longdouble)
    with np.errstate(all="ignore"):
        for t in range(T):
            h = np.einsum("...ij,...j->...i", A[..., t, :, :], h) + b[..., t, :]
            g = np.einsum("...ij,...j->...i", np.abs(A[..., t, :, :]), g) + np.abs(b[..., t, :])
            H[..., t, :] = h
            G[..., t, :] = g
    if reverse:
        H, G = H[..., ::-1, :], G[..., ::-1, :]
    return np.moveaxis(H, -2, ax), np.moveaxis(G, -2, ax)


_EPS = {
    np.dtype(np.float16): 2.0**-11, np.dtype(np.float32): 2.0**-24, np.dtype(np.float64): 2.0**-53,
    np.dtype(np.complex64): 2.0**-24, np.dtype(np.complex128): 2.0**-53,
}


def tolerance(out_dtype, T, chunk=64, n=1, factor=8.0):
    """Relative tolerance on the bound ``g`` for an output dtype and length.

    Accumulation is float32 for half types. A chunked or tree-shaped scan puts
    at most ``min(T, 2 chunk) + log2(T)`` roundings on any path; dense steps add
    ``n`` per matvec. The storage rounding of half types is added on top.
    """
    out_dtype = np.dtype(out_dtype)
    half = out_dtype.itemsize == 2
    eps = _EPS[np.dtype(np.float32)] if half else _EPS[out_dtype]
    depth = min(T, 2 * chunk) + np.log2(T + 1) + 2 * n
    tol = factor * eps * depth
    if half:
        tol += 2.0**-10  # float16/bfloat16 storage: half an ulp of |h| <= g, with margin
    return tol


def assert_matches(h, ref, g, tol, what=""):
    """Every element within ``tol * g`` of the oracle; non-finite values exactly where it has them
    (and, where ``g`` exceeds the output dtype's range, wherever the dtype overflows).

    An all-zero, shifted or half-written output fails wherever ``|ref|`` is
    larger than ``tol * g``, which random inputs make almost everywhere.
    """
    h = np.asarray(h)
    assert h.shape == ref.shape, f"{what}: shape {h.shape} != {ref.shape}"
    hw = h.astype(np.clongdouble if np.iscomplexobj(h) or np.iscomplexobj(ref) else np.longdouble)
    # Where the bound g exceeds the output dtype's range, the loop run in that dtype may itself
    # overflow (|a| > 1 growing over many steps): a non-finite result is allowed there, while the
    # extended-precision reference stays finite. A finite result is still checked.
    try:
        limit = np.finfo(h.dtype).max
        # (a result is rounded to its dtype: no closer than half its smallest subnormal step)
        floor = max(0.5 * float(np.finfo(h.dtype).smallest_subnormal), float(np.finfo(np.float64).tiny))
    except (TypeError, ValueError):
        limit, floor = np.inf, float(np.finfo(np.float64).tiny)
    may_overflow = (g > limit) & ~np.isfinite(hw)
    ref_nan = np.isnan(ref)
    bad_nan = (np.isnan(hw) != ref_nan) & ~(may_overflow & ~ref_nan)
    assert not bad_nan.any(), f"{what}: NaN at {np.argwhere(bad_nan)[:5].tolist()} differs from the loop"
    ref_inf = np.isinf(ref) & ~ref_nan
    if ref_inf.any():
        assert np.array_equal(hw[ref_inf], ref[ref_inf]), f"{what}: infinities differ from the loop"
    finite = np.isfinite(ref) & ~may_overflow
    with np.errstate(all="ignore"):
        err = np.abs(hw[finite] - ref[finite])
        allowed = tol * g[finite] + floor
    bad = ~(err <= allowed)
    if bad.any():
        i = np.argmax(np.where(bad, err / np.maximum(allowed, 1e-300), 0))
        raise AssertionError(
            f"{what}: {bad.sum()} of {bad.size} elements off; worst: got {hw[finite][i]}, "
            f"expected {ref[finite][i]}, error {err[i]:.3g} > allowed {allowed[i]:.3g}"
        )
