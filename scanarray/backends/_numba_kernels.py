"""The compiled loops of the numba backend (private; the driver is :mod:`.numba_backend`).

Every kernel takes the canonical 2-d views ``(lanes, T)`` of the diagonal
form, in whatever strides the caller's memory has: numba reads non-contiguous
and stride-0 (broadcast) arrays through their strides, so a scalar, per-lane
or per-time ``a`` is passed as a broadcast view of its compact array and is
never expanded. ``h`` carries the state: it holds ``h[-1]`` on entry and
``h[T-1]`` on exit. ``out`` may be ``b`` itself: every kernel reads ``b[l, t]``
before it writes ``out[l, t]``.

Nothing is compiled at import: ``njit`` without signatures compiles on the
first call for each combination of argument types, and ``cache=True`` stores
the machine code next to this file (in ``__pycache__``) for later processes.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

__all__ = ["chunked", "dense_sequential", "sequential_blocks", "sequential_rows"]

_OPTS = dict(cache=True, nogil=True, error_model="numpy")


@njit(parallel=True, **_OPTS)
def sequential_rows(a, b, out, h):
    """One lane per iteration, its state in a register: for time-contiguous lanes.

    Each lane is the plain loop, so results (non-finite ones included) are
    exactly the sequential loop's; lanes are spread over numba's threads.
    """
    L, T = out.shape
    for l in prange(L):
        s = h[l]
        for t in range(T):
            s = a[l, t] * s + b[l, t]
            out[l, t] = s
        h[l] = s


@njit(parallel=True, **_OPTS)
def sequential_blocks(a, b, out, h, lb):
    """Blocks of ``lb`` lanes stepped together through time: for time-major arrays.

    When lanes are the contiguous axis (a ``(T, N)`` C-order array scanned
    along axis 0), step ``t`` of a block is one contiguous run of memory in
    ``a``, ``b`` and ``out``: the loop streams rows in place, with no
    transposing copy, and the ``lb`` independent recurrences of a block
    overlap their latencies.
    """
    L, T = out.shape
    nblk = (L + lb - 1) // lb
    for k in prange(nblk):
        l0 = k * lb
        n = min(L, l0 + lb) - l0
        s = h[l0:l0 + n].copy()
        for t in range(T):
            for j in range(n):
                v = a[l0 + j, t] * s[j] + b[l0 + j, t]
                s[j] = v
                out[l0 + j, t] = v
        h[l0:l0 + n] = s


@njit(**_OPTS)
def _scan(a, b, out, l, t0, t1, s):
    for t in range(t0, t1):
        s = a[l, t] * s + b[l, t]
        out[l, t] = s
    return s


@njit(parallel=True, **_OPTS)
def chunked(a, b, out, h, bounds, wstart, P, H, C):
    """Reduce-then-scan along time, so that few long lanes use every thread.

    Chunk 0 (``bounds[0]:bounds[1]``) starts from the known state ``h`` and is
    scanned at once by worker 0 while workers ``w >= 1`` reduce chunks
    ``wstart[w]:wstart[w+1]`` to their aggregates ``(P, H)`` = (product of
    ``a``, local state from zero) -- reading ``a`` and ``b`` but writing
    nothing. A short serial scan of the aggregates gives each chunk's incoming
    state ``C``; then every chunk but the first is rescanned from it, in
    parallel. Traffic is 5 streams (2 to reduce, 3 to rescan) instead of the
    loop's 3, paid back once more than one core works; rescanning (rather than
    fixing up ``h_local + P * carry``) keeps each chunk the plain loop.
    ``P`` must hold ones and ``H`` zeros on entry (``(lanes, K + 1)``).
    """
    L, T = out.shape
    nw = wstart.shape[0] - 1
    K = bounds.shape[0] - 2  # chunks 1..K are reduced then rescanned
    for job in prange(L * nw):
        l = job // nw
        w = job % nw
        if w == 0:
            C[l, 1] = _scan(a, b, out, l, bounds[0], bounds[1], h[l])
        else:
            for k in range(wstart[w], wstart[w + 1]):
                p = P[l, k]
                s = H[l, k]
                for t in range(bounds[k], bounds[k + 1]):
                    s = a[l, t] * s + b[l, t]
                    p = a[l, t] * p
                P[l, k] = p
                H[l, k] = s
    for l in range(L):
        c = C[l, 1]
        for k in range(1, K + 1):
            C[l, k] = c
            c = P[l, k] * c + H[l, k]
        h[l] = c
    for job in prange(L * K):
        l = job // K
        k = job % K + 1
        s = _scan(a, b, out, l, bounds[k], bounds[k + 1], C[l, k])
        if k == K:
            h[l] = s  # the exact final state, not the aggregate's rounding


@njit(parallel=True, **_OPTS)
def dense_sequential(A, b, out, h):
    """``h[t] = A[t] @ h[t-1] + b[t]`` step by step, one lane per iteration.

    ``A (L, T, n, n)`` may be broadcast (stride 0 along time for a
    time-invariant matrix); ``T n^2`` multiply-adds per lane against cyclic
    reduction's ``~T n^3``.
    """
    L, T, n = out.shape
    for l in prange(L):
        s = h[l].copy()
        v = np.empty_like(s)
        for t in range(T):
            for i in range(n):
                acc = b[l, t, i]
                for j in range(n):
                    acc += A[l, t, i, j] * s[j]
                v[i] = acc
            for i in range(n):
                s[i] = v[i]
                out[l, t, i] = v[i]
        h[l] = s
