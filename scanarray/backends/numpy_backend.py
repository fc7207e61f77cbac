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

from .. import _dense
from .._nonfinite import mend_nonfinite
from ._layout import compact, lanes_contiguous

__all__ = ["TUNING", "auto_method", "dense_auto_method", "linear_recurrence"]

#: The NumPy backend's tunables: the cost model of ``dense_auto_method``, from the dense sweep
#: of benchmarks/bench_cpu.py on a 2-core x86-64 VM with OpenBLAS (docs/guide/cpu.md, "Dense").
#: A method's cost per time step, in microseconds, is about
#:   sequential:                 step_us + lanes * mv(n)                   (a matmul and an add)
#:   cyclic_reduction / chunked: a_lanes * mm(n) + par_mv * lanes * mv(n)  (few, long calls)
#: with mv(n) = mv_us[0] + k n^2 / mv_us[1] and mm(n) = mm_us[0] + k n^3 / mm_us[1] the cost of one
#: n x n matvec / product inside a batched matmul, k the dtype's factor (float32 1, float64 2,
#: complex64 4, complex128 8), and a_lanes the number of distinct transitions (an A shared by the
#: lanes pays its products once).
TUNING = {
    "dense_step_us": 1.2,  # the Python-level cost of one step of the loop (a matmul call and an add)
    "dense_mv_us": (0.05, 2800),  # one n x n matvec in a batched matmul, float32
    "dense_mm_us": (0.1, 37000),  # one n x n product in a batched matmul, float32
    "dense_par_mv": 1.6,  # a parallel method's matvecs against the loop's (two per step, in long calls)
    # cyclic reduction beats chunked while its work arrays stay in cache: n <= 4, or an A not
    # shared by the lanes of at most this many bytes
    "dense_cr_max_bytes": 8 << 20,
}


def auto_method(problem):
    return dense_auto_method(problem) if problem.dense else "chunked"


def dense_auto_method(problem):
    """The dense method ``method="auto"`` takes: the cheapest by the cost model of ``TUNING``.

    A time-invariant ``A`` takes ``chunked``: its matvecs are GEMMs ``h @ A^T`` and it forms only
    ``A^L``. Cyclic reduction can be faster at its best, but its long GEMMs are the ones OpenBLAS
    splits over threads, and on a shared machine its time spread far more than chunked's
    (docs/guide/cpu.md).
    """
    T, n = problem.length, problem.b.shape[-1]
    if T <= 2:
        return "sequential"
    a = problem.a
    lanes, a_lanes = _dense.lane_counts(a, problem.lanes)
    if a.strides[-3] == 0:
        return "chunked"
    tune = TUNING
    dt = problem.dtype
    k = (4 if dt.kind == "c" else 1) * max(1, dt.itemsize // (8 if dt.kind == "c" else 4))
    mv = tune["dense_mv_us"][0] + k * n * n / tune["dense_mv_us"][1]
    mm = tune["dense_mm_us"][0] + k * n**3 / tune["dense_mm_us"][1]
    if a_lanes * mm + tune["dense_par_mv"] * lanes * mv >= tune["dense_step_us"] + lanes * mv:
        return "sequential"
    if n <= 4 or (a_lanes == lanes and a_lanes * T * n * n * dt.itemsize <= tune["dense_cr_max_bytes"]):
        return "cyclic_reduction"
    return "chunked"


def linear_recurrence(p):
    with np.errstate(all="ignore"):  # the block algebra meets inf * 0 where the loop would not
        if p.dense:
            h = _dense.METHODS[p.method](np, p.a, p.b, p.initial, p.dtype, reverse=p.reverse, out=p.out)
            if h is not p.out:  # computed in the accumulation dtype (float16 storage)
                np.copyto(p.out, h, casting="unsafe")
            return p.out
        a, b, out = p.a, p.b, p.out
        if p.reverse:  # views with negative strides: no flipped copies
            a, b, out = a[..., ::-1], b[..., ::-1], out[..., ::-1]
        dt = p.dtype
        h0 = None if p.initial is None else p.initial.astype(dt, copy=False)
        # The scan writes into out when out can hold its states: the accumulation dtype, and
        # memory no input is read from. Otherwise (float16 storage, out=b) it writes into a work
        # array in the accumulation dtype, so that the mend below reads the original inputs and
        # states that never passed through the storage dtype; out is written once at the end.
        direct = out.dtype == dt and not np.may_share_memory(out, b)
        work = out if direct else np.empty(out.shape, dt)
        # A block of one step would not shrink the carry scan: recurse on >= 2.
        last = scan_into(a, b, h0, work, max(p.chunk, 2), dt)
        mend_nonfinite(a, b, h0, work, last, dt)
        if not direct:
            np.copyto(out, work, casting="unsafe")
    return p.out


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

    time_major = lanes_contiguous(out)
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
    """Sequential steps ``start..stop-1``, each vectorised over lanes (fewer than 2 chunks).

    ``dtype=dt``: the inputs are cast to the accumulation dtype as they are read, before any
    arithmetic, as every other path does.
    """
    const_a = a.shape[-1] == 1
    h = np.array(np.broadcast_to(h, b.shape[:-1]), dtype=dt)
    tmp = np.empty_like(h)
    for t in range(start, stop):
        np.multiply(a[..., 0 if const_a else t], h, out=tmp, dtype=dt, casting="unsafe")
        np.add(tmp, b[..., t], out=h, dtype=dt, casting="unsafe")
        out[..., t] = h
    return h
