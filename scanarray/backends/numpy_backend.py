"""The NumPy backend: the CPU reference, vectorised over blocks of ``chunk`` steps.

Diagonal form, for ``T = nb * chunk + r``:

1. copy ``a`` and ``b`` once into a blocked work layout ``(chunk, lanes, nb)``
   (or ``(chunk, nb, lanes)`` when lanes are contiguous, as in a time-major
   array), so that step ``j`` of *every* block is one contiguous slice;
2. scan all blocks at once: ``chunk`` vectorised steps give each block's local
   ``h`` (from a zero state) and running product of ``a``;
3. scan the ``nb`` block carries by the same function (recursively, so the
   Python-level work is ``O(chunk * log_chunk T)`` ufunc calls);
4. fix up: ``h = h_local + prod_a * carry_in``, and run the ``r`` leftover steps.

No Python loop ever runs over every time step. The fix-up is applied to the
first block too (with the initial state, zeros by default), so that
``inf * 0`` gives NaN exactly where the sequential loop gives it.
"""

from __future__ import annotations

import numpy as np

from .. import _config, _dense
from .._nonfinite import mend_nonfinite

__all__ = ["auto_method", "linear_recurrence"]


def auto_method(problem):
    return _config.numpy_dense_auto_method(problem) if problem.dense else "chunked"


def linear_recurrence(p):
    if p.dense:
        with np.errstate(all="ignore"):
            h = _dense.METHODS[p.method](np, p.a, p.b, p.initial, p.dtype, reverse=p.reverse, out=p.out)
        if h is not p.out:  # computed in the accumulation dtype (float16 storage)
            np.copyto(p.out, h, casting="unsafe")
        return p.out
    a, b, out = p.a, p.b, p.out
    if p.reverse:  # views with negative strides: no flipped copies
        a, b, out = a[..., ::-1], b[..., ::-1], out[..., ::-1]
    h0 = None if p.initial is None else p.initial.astype(p.dtype, copy=False)
    # A block of one step would not shrink the carry scan: recurse on >= 2.
    # Non-finite inputs produce inf*0 inside the block algebra where the loop would
    # not: results carry NaN/Inf exactly as the loop's (mended below), without warnings.
    with np.errstate(all="ignore"):
        last = scan_into(a, b, h0, out, max(p.chunk, 2), p.dtype)
        mend_nonfinite(a, b, h0, out, last, p.dtype)
    return p.out


def compact(x):
    """The smallest view of a broadcast array: stride-0 axes cut to length 1."""
    return x[tuple(slice(0, 1) if (s == 0 and n > 1) else slice(None) for s, n in zip(x.strides, x.shape))]


def _lanes_contiguous(x) -> bool:
    """Whether some lane axis of ``x (*lanes, T)`` has a smaller stride than time."""
    lane = [abs(s) for s, n in zip(x.strides[:-1], x.shape[:-1]) if n > 1]
    return bool(lane) and min(lane) < abs(x.strides[-1])


def scan_into(a, b, h0, out, c, dt):
    """Write the diagonal scan of ``a, b (*lanes, T)`` from state ``h0`` into ``out``.

    ``a`` and ``b`` may be any strided or broadcast views; ``h0`` is ``None``
    (zeros) or broadcastable to ``lanes``; ``out`` may be ``b`` itself.
    Returns the final state ``h[T-1]`` (shape ``lanes``, dtype ``dt``).
    """
    T = b.shape[-1]
    lanes = b.shape[:-1]
    a = compact(a)
    if h0 is None:
        h0 = np.zeros(lanes, dt)
    nb = T // c
    if nb < 2:
        return _steps(a, b, h0, out, 0, T, dt)

    time_major = _lanes_contiguous(out)
    n = nb * c

    def blocked(x):
        """View ``x[..., :n]`` as ``(c, *lanes, nb)``, or ``(c, nb, *lanes)`` if time-major."""
        v = np.moveaxis(x[..., :n].reshape(x.shape[:-1] + (nb, c)), -1, 0)
        return np.moveaxis(v, -1, 1) if time_major else v

    # Local scans of every block, in place in a contiguous work copy of b.
    H = np.empty(blocked(b).shape, dt)
    np.copyto(H, blocked(b), casting="unsafe")
    const_a = a.shape[-1] == 1
    if const_a:  # per-lane or scalar a: never expanded, its powers are tiny
        a_lane = a[..., 0].astype(dt)
        a_lane = a_lane[None] if time_major else a_lane[..., None]
        P = np.empty((c,) + a_lane.shape, dt)
        P[0] = a_lane
    else:
        P = np.empty(blocked(a).shape, dt)
        np.copyto(P, blocked(a), casting="unsafe")
    tmp = np.empty(np.broadcast_shapes(H.shape[1:], P.shape[1:]), dt)
    for j in range(1, c):
        np.multiply(a_lane if const_a else P[j], H[j - 1], out=tmp)
        H[j] += tmp
        if const_a:
            np.multiply(P[j - 1], a_lane, out=P[j])
        else:
            P[j] *= P[j - 1]  # running product of a within the block

    # Block carries: the inclusive scan of (prod a, local h) over blocks, shifted
    # by one so that S[k] is the state entering block k and S[nb] the last.
    S = np.empty((nb + 1,) + lanes, dt) if time_major else np.empty(lanes + (nb + 1,), dt)
    S_t = np.moveaxis(S, 0, -1) if time_major else S  # time last
    S_t[..., 0] = h0
    A_blk, H_blk = P[c - 1], H[c - 1]
    if time_major:
        A_blk, H_blk = np.moveaxis(A_blk, 0, -1), np.moveaxis(H_blk, 0, -1)
    scan_into(A_blk, H_blk, S_t[..., 0], S_t[..., 1:], c, dt)

    # Fix-up in the work layout, then one copy into out (casting to its dtype).
    carry = S[:nb] if time_major else S[..., :nb]
    for j in range(c):
        np.multiply(P[j], carry, out=tmp)
        H[j] += tmp
    np.copyto(blocked(out), H, casting="unsafe")
    last = S_t[..., nb]
    return _steps(a, b, last, out, n, T, dt) if n < T else last


def _steps(a, b, h, out, start, stop, dt):
    """Sequential steps ``start..stop-1``, each vectorised over lanes (fewer than 2 chunks)."""
    const_a = a.shape[-1] == 1
    h = np.array(np.broadcast_to(h, b.shape[:-1]), dtype=dt)
    tmp = np.empty_like(h)
    for t in range(start, stop):
        np.multiply(a[..., 0 if const_a else t], h, out=tmp, casting="unsafe")
        np.add(tmp, b[..., t], out=h, casting="unsafe")
        out[..., t] = h
    return h
