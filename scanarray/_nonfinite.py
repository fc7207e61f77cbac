"""Make non-finite results of a chunked scan equal to those of the sequential loop.

A chunked scan writes ``h[t] = h_local[t] + P[t] * carry`` where the loop
computes ``a[t] * (h[t-1]) + b[t]``. The two agree on finite data but not when
``a`` holds an infinity: ``inf*x + inf*y`` is NaN where ``inf*(x + y)`` is an
infinity. Once the loop's state is non-finite it stays non-finite (an infinity
only changes sign or becomes NaN, and NaN absorbs), and the first non-finite
state sits at the same step in both. So a lane needs mending only if its last
state is non-finite, and from its first non-finite step on the loop's values
follow from signs alone:

    h[t] = sign(a[t]) * h[t-1]         (an infinity, a[t] nonzero)
    h[t] = NaN                         (a[t] = 0 or NaN, b[t] NaN, or b[t] the opposite infinity)

which is one cumulative product, vectorised. Complex lanes, where infinities
carry a direction, replay the loop from that step.
"""

from __future__ import annotations

import numpy as np

__all__ = ["mend_nonfinite", "mend_nonfinite_on"]


def mend_nonfinite(a, b, h0, out, last, dt):
    """Mend lanes of ``out (*lanes, T)`` whose final state ``last`` is non-finite (NumPy arrays).

    The mend replays the loop from the first non-finite step, so it reads the inputs there and
    the state before: ``a`` and ``b`` must still be the caller's inputs (not an ``out`` that was
    ``b``), and ``out`` must hold the states in the accumulation dtype ``dt`` (not float16
    storage, where a float32 state of 1e-9 reads back as 0). A caller that scans in place or
    stores another dtype scans into a work array of ``dt`` and mends that.
    """
    with np.errstate(all="ignore"):
        bad = ~np.isfinite(np.broadcast_to(last, out.shape[:-1]))
        if not bad.any():
            return
        a = np.broadcast_to(a, out.shape)
        b = np.broadcast_to(b, out.shape)
        # argwhere, not nonzero: a single row has no lane axes (0-d `bad`, lane index ())
        for lane in map(tuple, np.argwhere(bad)):
            _mend_lane(a[lane], b[lane], None if h0 is None else np.broadcast_to(h0, bad.shape)[lane], out[lane], dt)


def mend_nonfinite_on(xp, a, b, h0, out, dt):
    """:func:`mend_nonfinite` for arrays of any library with ``.get()`` (CuPy) or NumPy, with the
    same requirements on ``a``, ``b`` and ``out``.

    On a device this costs one reduction over the lanes' last states and one
    synchronisation to read its verdict; the lanes that need mending (rare:
    only those whose last state is non-finite) are mended on the host and
    written back.
    """
    if out.shape[-1] == 0:
        return
    if xp is np:
        mend_nonfinite(a, b, h0, out, out[..., -1], dt)
        return
    bad = ~xp.isfinite(out[..., -1])
    if not bool(bad.any()):
        return
    h0 = None if h0 is None else xp.broadcast_to(h0, out.shape[:-1])
    with np.errstate(all="ignore"):
        # flat indices, unravelled on the host: a single row has no lane axes (lane index ())
        for k in xp.nonzero(bad.reshape(-1))[0].tolist():
            lane = tuple(int(i) for i in np.unravel_index(k, bad.shape))
            row = out[lane].get()
            _mend_lane(a[lane].get(), b[lane].get(), None if h0 is None else h0[lane].get(), row, dt)
            out[lane] = xp.asarray(row)


def _mend_lane(a, b, h0, out, dt):
    finite = np.isfinite(out)
    s = int(np.argmin(finite))  # first non-finite step of the chunked result
    prev = (dt.type(0) if h0 is None else dt.type(h0)) if s == 0 else dt.type(out[s - 1])
    h = dt.type(a[s]) * prev + dt.type(b[s])
    out[s] = h
    if s + 1 == out.shape[0]:
        return
    a_r = a[s + 1:].astype(dt)
    b_r = b[s + 1:].astype(dt)
    if dt.kind == "c":
        # Infinities of complex numbers have directions: replay the loop (rare).
        for t in range(a_r.shape[0]):
            h = a_r[t] * h + b_r[t]
            out[s + 1 + t] = h
        return
    sign = np.cumprod(np.sign(a_r)) * np.sign(h)  # 0 or NaN once a = 0 or NaN
    event = np.isnan(b_r) | (np.isinf(b_r) & (np.sign(b_r) != sign)) | ~(np.abs(sign) == 1)
    val = sign * np.inf
    val[np.logical_or.accumulate(event)] = np.nan
    out[s + 1:] = val
