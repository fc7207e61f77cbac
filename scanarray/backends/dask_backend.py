"""The Dask backend: a lazy scan over a chunked array, blocks on NumPy or CuPy.

The recurrence ``h[t] = a[t] * h[t-1] + b[t]`` is associative in the pairs
``(a, b)`` (Blelloch 1990), so a series cut into time blocks is scanned in
three lazy stages, the classic "reduce, scan the partials, re-scan" shape of a
distributed prefix sum:

1. **summaries** (``blockwise``): each block is reduced to the map it applies
   to the state entering it: for finite data the affine pair ``(prod a, local
   h from a zero state)``, for the dense form ``(A[L-1] ... A[0], local h)``;
2. **carries**: an exclusive scan of the small ``(lanes, n_blocks)`` summaries
   gives the state entering every block. Up to ``CHAIN`` blocks it is a chain
   of one small task per block (block ``k`` waits only for summaries ``< k``,
   so the scheduler can scan and release blocks in order); up to ``GROUP``
   blocks one task per lane block gathers them all; beyond that the summaries
   are composed in groups of ``GROUP`` and the group aggregates are scanned
   recursively (a tree of depth ``log_GROUP(n_blocks)``), so no task gathers
   more than ``GROUP`` summaries;
3. **blocks** (``blockwise``): each block is scanned again by scanarray on the
   block's own array library (``backend=None``: numba or NumPy on the CPU,
   CuPy on the GPU) with ``initial`` = its carry.

Only summaries cross between blocks: block ``k`` of the result depends on
block ``k`` of the inputs and on the carry task, never on another block's
data, and the graph grows linearly with the number of blocks. Nothing is
computed inside the call.

Non-finite values. The affine pair is not enough for the sequential loop's
NaN/Inf placement (``inf * x + inf * y`` is not ``inf * (x + y)``), so a real
diagonal summary also records what the loop does once its state is
non-finite (``Fp``, ``Fm``: the exit state from ``+inf`` and ``-inf``; NaN
stays NaN), and, for a block holding a non-finite ``a`` or ``b``, the
affine prefix ``(P, Q)`` up to the first such step ``t*``, the values
``a[t*], b[t*]``, and the exit state after ``t*`` (``Gp``, ``Gm``). With the
carries exact, stage 3 runs the inner backend, which follows the loop within
the block. Complex infinities have directions and dense states mix
components, so for those the carries after the first non-finite block are the
affine composition's (the values within the first such block are the loop's).
"""

from __future__ import annotations

import numpy as np

__all__ = ["CHAIN", "GROUP", "auto_method", "linear_recurrence"]

#: up to this many blocks the carries are a chain of one small task per block
CHAIN = 64
#: the most summaries one carry task gathers; more blocks than this use the tree
GROUP = 256

# Layout of a real diagonal summary (last axis), see the module docstring.
_P, _Q, _AS, _BS, _GP, _GM, _FP, _FM = range(8)


def auto_method(problem):
    return "blockwise"


def unavailable_reason():
    return None


# --------------------------------------------------------------------------- graph


def linear_recurrence(p):
    """Build the lazy scan of a :class:`scanarray._problem.Problem` with Dask arrays."""
    import dask
    import dask.array as da
    from dask.array.utils import meta_from_array

    b = p.b
    a = _block_library(p.a_compact if p.a_compact is not None else p.a, b, "a")
    ndim = b.ndim
    nl = ndim - (2 if p.dense else 1)  # lane axes come first
    if 0 in p.shape:
        return b.astype(p.out_dtype)

    # --- agree on chunks: b's where it is full, a's where only a is ---------
    chunks = list(b.chunks)
    for d in range(ndim):
        if len(b.chunks[d]) == 1 and a.shape[d] == b.shape[d] and len(a.chunks[d]) > 1:
            chunks[d] = a.chunks[d]  # b broadcast along d, a is not: follow a
    if p.dense:
        chunks[-1] = (b.shape[-1],)  # the state is never split
    b = b.rechunk(tuple(chunks))
    # `a` keeps its length-1 (broadcast) axes whole; its full axes follow b.
    a_chunks = [
        (1,) if a.shape[d] == 1 and b.shape[d] != 1 else chunks[d] for d in range(ndim)
    ]
    if p.dense:
        a_chunks.append((a.shape[-1],))
    a = a.rechunk(tuple(a_chunks))

    h0 = p.initial
    if h0 is not None:
        h0 = _block_library(h0, b, "initial")
        h0 = h0.rechunk(tuple(chunks[:nl]) + (((b.shape[-1],),) if p.dense else ()))

    lanes = tuple(f"l{i}" for i in range(nl))
    if p.dense:
        b_ind, a_ind = lanes + ("t", "i"), lanes + ("t", "i", "j")
    else:
        b_ind, a_ind = lanes + ("t",), lanes + ("t",)
    blk_meta = b._meta
    dt = np.dtype(p.dtype)

    # --- 1. summaries: one small record per block ---------------------------
    if p.dense:
        n = b.shape[-1]
        s_ind, s_new = lanes + ("t", "i", "z"), {"z": n + 1}
    else:
        s_ind, s_new = lanes + ("t", "z"), {"z": _width(dt)}
    S = da.blockwise(
        _summary, s_ind,
        b, b_ind, a, a_ind,
        dense=p.dense, dt=dt, chunk=p.chunk, reverse=p.reverse,
        new_axes=s_new, adjust_chunks={"t": 1}, align_arrays=False, concatenate=True,
        meta=meta_from_array(blk_meta, len(s_ind), dt), token="scan-summary",
    )

    # --- 2. carries: exclusive scan of the summaries over the blocks --------
    C = _carries(da, S, h0, p, lanes, meta_from_array(blk_meta, nl + 1 + p.dense, dt))

    # --- 3. every block again, from its carry --------------------------------
    if dask.config.get("scanarray.dask.recompute_inputs", False):
        # Out of core: read (or generate) each input block again for stage 3
        # rather than holding every block in memory from stage 1 until its
        # carry is known. Doubles the upstream work; bounds memory by blocks in flight.
        from dask.graph_manipulation import clone

        a, b = clone(a, b)
    c_ind = lanes + (("t", "i") if p.dense else ("t",))
    return da.blockwise(
        _block, b_ind,
        b, b_ind, a, a_ind, C, c_ind,
        dense=p.dense, out_dtype=np.dtype(p.out_dtype), chunk=p.chunk, reverse=p.reverse,
        adjust_chunks={ind: chunks[d] for d, ind in enumerate(b_ind)},
        align_arrays=False, concatenate=True,
        meta=meta_from_array(blk_meta, ndim, p.out_dtype), token="scan-block",
    )


def _block_library(x, b, name):
    """``x`` with blocks of ``b``'s library (NumPy or CuPy).

    The frontend turns a Python scalar into a 0-d dask array with NumPy blocks
    whatever ``b``'s blocks are; such a one-element array moves to the device
    here (a weak scalar, as with plain CuPy). Anything larger would be mixing
    array libraries behind the user's back: a TypeError, as for plain arrays.
    """
    from dask.array.utils import meta_from_array

    kx, kb = _lib_name(x._meta), _lib_name(b._meta)
    if kx == kb:
        return x
    if x.size == 1 and kx == "numpy" and kb == "cupy":
        import cupy

        return x.map_blocks(cupy.asarray, dtype=x.dtype, meta=meta_from_array(b._meta, x.ndim, x.dtype))
    raise TypeError(
        f"{name} is a dask array of {kx} blocks and b of {kb} blocks; pass blocks of one library: "
        "scanarray never copies between host and device behind your back"
    )


def _lib_name(meta):
    return type(meta).__module__.split(".")[0]


def _width(dt):
    return 2 if dt.kind == "c" else 8


def _carries(da, S, h0, p, lanes, meta):
    """The state entering every block: ``(*lanes, n_blocks[, n])``, one chunk per block.

    A chain of tasks up to ``CHAIN`` blocks, one gathering task up to
    ``GROUP``; beyond that, groups of ``GROUP`` consecutive blocks are composed
    into one summary each, their carries found recursively, and each group's
    blocks scanned from its carry, so at most ``GROUP`` summaries meet in one task.
    """
    nl = len(lanes)
    nt = S.shape[nl]
    s_ind = lanes + (("t", "i", "z") if p.dense else ("t", "z"))
    c_ind = lanes + (("t", "i") if p.dense else ("t",))
    h_ind = lanes + (("i",) if p.dense else ())
    kw = dict(dense=p.dense, reverse=p.reverse)
    if nt <= min(CHAIN, GROUP):
        return _carry_chain(da, S, h0, p, nl, meta)
    if nt <= GROUP:
        S1 = S.rechunk({nl: nt})
        args = (S1, s_ind) + (() if h0 is None else (h0, h_ind))
        C = da.blockwise(
            _carry_task, c_ind, *args, **kw,
            adjust_chunks={"t": nt}, align_arrays=False, concatenate=True,
            meta=meta, token="scan-carry",
        )
        return C.rechunk({nl: 1})
    Sg = S.rechunk({nl: GROUP})
    agg = da.blockwise(
        _compose_task, s_ind, Sg, s_ind, **kw,
        adjust_chunks={"t": 1}, align_arrays=False, concatenate=True,
        meta=S._meta, token="scan-compose",
    )
    Cg = _carries(da, agg, h0, p, lanes, meta)
    C = da.blockwise(
        _carry_task, c_ind, Sg, s_ind, Cg, c_ind, **kw,
        adjust_chunks={"t": Sg.chunks[nl]}, align_arrays=False, concatenate=True,
        meta=meta, token="scan-carry",
    )
    return C.rechunk({nl: 1})


def _carry_chain(da, S, h0, p, nl, meta):
    """Carries as a chain of small tasks: ``c[k+1] = apply(S[k], c[k])``, one per block.

    The block scan ``k`` then waits only for the summaries before it, so the
    scheduler can finish and release input blocks in order instead of holding
    every block until the last summary is known.
    """
    from dask.base import tokenize
    from dask.highlevelgraph import HighLevelGraph

    nt = S.shape[nl]
    name = "scan-carry-" + tokenize(S, h0, p.reverse, "chain")
    trail = (0,) if p.dense else ()  # the state axis of a dense carry (one chunk)
    strail = (0, 0) if p.dense else (0,)
    order = list(_order(nt, p.reverse))
    dsk = {}
    for li in np.ndindex(*S.numblocks[:nl]):
        first = order[0]
        h0_key = None if h0 is None else (h0.name,) + li + trail
        dsk[(name,) + li + (first,) + trail] = (_carry_first, (S.name,) + li + (first,) + strail, h0_key, p.dense)
        for prev, k in zip(order, order[1:]):
            dsk[(name,) + li + (k,) + trail] = (
                _carry_next, (S.name,) + li + (prev,) + strail, (name,) + li + (prev,) + trail, p.dense,
            )
    deps = [S] if h0 is None else [S, h0]
    graph = HighLevelGraph.from_collections(name, dsk, dependencies=deps)
    chunks = S.chunks[:nl] + ((1,) * nt,) + (((S.shape[-2],),) if p.dense else ())
    return da.Array(graph, name, chunks, meta=meta)


def _carry_first(s, h0, dense):
    """The carry entering the first block in scan order: ``h0`` (or zeros), with a time axis."""
    xp = _xp(s)
    shape = s.shape[:-3] + s.shape[-2:-1] if dense else s.shape[:-2]
    c = xp.zeros(shape, s.dtype) if h0 is None else xp.broadcast_to(h0.astype(s.dtype), shape)
    return xp.ascontiguousarray(c[..., None, :] if dense else c[..., None])


def _carry_next(s, c, dense):
    """The carry entering the next block: the previous block's summary applied to its carry."""
    xp = _xp(s)
    with np.errstate(all="ignore"):
        if dense:
            return _apply(xp, s[..., 0, :, :], c[..., 0, :], dense)[..., None, :]
        return _apply(xp, s[..., 0, :], c[..., 0], dense)[..., None]


# --------------------------------------------------------------------------- block functions


def _xp(x):
    """The native module of a block (NumPy or CuPy), imported only if it is CuPy."""
    from array_api_compat import is_cupy_array

    if is_cupy_array(x):
        import cupy

        return cupy
    return np


def _scan(a, b, **kw):
    from .._api import linear_recurrence

    return linear_recurrence(a, b, **kw)


def _summary(b, a, *, dense, dt, chunk, reverse):
    """Stage 1 on one block: its summary record, with a length-1 time axis."""
    xp = _xp(b)
    t = -2 if dense else -1
    if reverse:  # the block read backwards is a forward block: no copies
        a, b = xp.flip(a, axis=t - 1 if dense else t), xp.flip(b, axis=t)
    # inputs are read in the accumulation dtype, as every backend reads them: the summary's tests
    # for zeros, signs and infinities see what the scan sees (1e-50 is a reset in float32)
    a, b = a.astype(dt, copy=False), b.astype(dt, copy=False)
    with np.errstate(all="ignore"):
        if dense:
            return _summary_dense(xp, a, b, dt, chunk)[..., None, :, :]
        return _summary_diag(xp, a, b, dt, chunk)[..., None, :]


def _summary_dense(xp, A, b, dt, chunk):
    L = b.shape[-2]
    h = _scan(A, b, axis=-1, chunk=chunk, dense=True, dtype=dt)[..., -1, :]
    A = A.astype(dt, copy=False)
    if A.shape[-3] == 1:  # time-invariant: A^L by squaring, never expanded
        P = _matpow(xp, A[..., 0, :, :], L)
    else:
        P = A
        while P.shape[-3] > 1:  # later @ earlier, pairwise: log2(L) batched matmuls
            m = P.shape[-3] // 2
            Pn = xp.matmul(P[..., 1:2 * m:2, :, :], P[..., 0:2 * m:2, :, :])
            if P.shape[-3] % 2:
                Pn = xp.concatenate([Pn, P[..., -1:, :, :]], axis=-3)
            P = Pn
        P = P[..., 0, :, :]
    P = xp.broadcast_to(P, h.shape + (h.shape[-1],))
    return xp.concatenate([P, h[..., None]], axis=-1)


def _matpow(xp, M, k):
    """``M^k`` (k >= 1) of a stack of matrices by squaring: ``2 log2 k`` batched matmuls."""
    result = None
    while True:
        if k & 1:
            result = M if result is None else xp.matmul(M, result)
        k >>= 1
        if not k:
            return result
        M = xp.matmul(M, M)


def _summary_diag(xp, a, b, dt, chunk):
    L = b.shape[-1]
    lanes = b.shape[:-1]
    h = _scan(a, b, axis=-1, chunk=chunk, dtype=dt)
    H = h[..., -1]
    const = a.shape[-1] == 1
    if const:  # per-lane or scalar a: its power, never expanded
        A = xp.power(a[..., 0].astype(dt), L)
    else:
        A = xp.prod(a, axis=-1, dtype=dt)
    A = xp.broadcast_to(A, lanes)
    if dt.kind == "c":
        return xp.stack([A, H], axis=-1)
    inf = dt.type(np.inf)
    S = xp.empty(lanes + (8,), dt)
    S[..., _P], S[..., _Q], S[..., _AS], S[..., _BS] = A, H, 1, 0
    S[..., _GP], S[..., _GM] = inf, -inf
    # From +-inf through finite data the loop keeps an infinity whose sign is
    # that of prod(a), unless some a is exactly 0 (0 * inf = NaN). A finite,
    # nonzero A tells both; A == 0 may be an underflow, so look at a itself.
    S[..., _FP], S[..., _FM] = A * inf, A * -inf
    fin = xp.isfinite(A) & xp.isfinite(H)  # (both finite) <=> data finite, no overflow
    under = fin & (A == 0)
    if bool(under.any()):
        if const:
            zero = a[..., 0] == 0
            neg = (a[..., 0].real < 0) & (L % 2 == 1)
        else:
            zero = xp.any(a == 0, axis=-1)
            neg = xp.sum(a < 0, axis=-1) % 2 == 1
        Fp = xp.where(xp.broadcast_to(zero, lanes), dt.type(np.nan), xp.where(neg, -inf, inf))
        S[..., _FP] = xp.where(under, Fp, S[..., _FP])
        S[..., _FM] = xp.where(under, -Fp, S[..., _FM])
    if not bool(fin.all()):
        _nonfinite_lanes(xp, a, b, h, S, ~fin, dt, chunk)
    return S


def _nonfinite_lanes(xp, a, b, h, S, bad, dt, chunk):
    """Exact maps for lanes whose block holds a non-finite value (or overflows). Rare."""
    lanes, L = b.shape[:-1], b.shape[-1]
    nl = int(np.prod(lanes)) if lanes else 1
    idx = xp.nonzero(bad.reshape(nl))[0]
    a_s = xp.broadcast_to(a, lanes + (a.shape[-1],)).reshape(nl, a.shape[-1])[idx]
    a_s = xp.broadcast_to(a_s, (idx.shape[0], L)).astype(dt)
    b_s = b.reshape(nl, L)[idx].astype(dt)
    h_s = h.reshape(nl, L)[idx]
    inf = dt.type(np.inf)
    Sf = S.reshape(nl, 8)

    def last(a_, b_, init):
        # a Python float: weak, and of no array library (a NumPy scalar with CuPy blocks would be mixing)
        return _scan(a_, b_, axis=-1, chunk=chunk, dtype=dt, initial=float(init))[..., -1]

    rec = xp.empty((idx.shape[0], 8), dt)
    rec[:, _FP] = last(a_s, b_s, inf)
    rec[:, _FM] = last(a_s, b_s, -inf)
    nonfin = ~xp.isfinite(a_s) | ~xp.isfinite(b_s)
    has = xp.any(nonfin, axis=-1)
    ts = xp.argmax(nonfin, axis=-1)  # t*: the first non-finite a or b
    rows = xp.arange(idx.shape[0])
    prev = xp.maximum(ts - 1, 0)
    P = xp.where(ts > 0, xp.cumprod(a_s, axis=-1)[rows, prev], dt.type(1))
    Q = xp.where(ts > 0, h_s[rows, prev], dt.type(0))
    # After t* the state is non-finite: the exit from it, with the steps up to
    # t* made identities (a = 1, b = 0) so that one scan serves every lane.
    upto = xp.arange(L)[None, :] <= ts[:, None]
    a_m, b_m = xp.where(upto, dt.type(1), a_s), xp.where(upto, dt.type(0), b_s)
    rec[:, _P] = xp.where(has, P, Sf[idx, _P])
    rec[:, _Q] = xp.where(has, Q, Sf[idx, _Q])
    rec[:, _AS] = xp.where(has, a_s[rows, ts], dt.type(1))
    rec[:, _BS] = xp.where(has, b_s[rows, ts], dt.type(0))
    rec[:, _GP] = xp.where(has, last(a_m, b_m, inf), inf)
    rec[:, _GM] = xp.where(has, last(a_m, b_m, -inf), -inf)
    Sf[idx] = rec


def _block(b, a, c, *, dense, out_dtype, chunk, reverse):
    """Stage 3 on one block: its scan from the carry ``c`` (length-1 time axis)."""
    init = c[..., 0, :] if dense else c[..., 0]
    return _scan(a, b, axis=-1, chunk=chunk, initial=init, reverse=reverse, dense=dense, dtype=out_dtype)


# --------------------------------------------------------------------------- summary algebra


def _apply(xp, s, c, dense):
    """The state leaving a block with summary ``s`` given the state ``c`` entering it."""
    if dense:
        n = s.shape[-2]
        return xp.matmul(s[..., :n], c[..., None])[..., 0] + s[..., n]
    if s.shape[-1] == 2:  # complex: the affine map
        return s[..., 0] * c + s[..., 1]
    v = s[..., _AS] * (s[..., _P] * c + s[..., _Q]) + s[..., _BS]
    v = xp.where(xp.isfinite(v), v, _inf_map(xp, s[..., _GP], s[..., _GM], v))
    return xp.where(xp.isfinite(c), v, _inf_map(xp, s[..., _FP], s[..., _FM], c))


def _inf_map(xp, plus, minus, v):
    """Where a non-finite state ``v`` goes: NaN stays NaN, +-inf go to ``plus``/``minus``."""
    return xp.where(xp.isnan(v), v, xp.where(v > 0, plus, minus))


def _compose(xp, s1, s2, dense):
    """The summary of a block with summary ``s1`` followed by one with ``s2``."""
    if dense:
        n = s1.shape[-2]
        A = xp.matmul(s2[..., :n], s1[..., :n])
        h = xp.matmul(s2[..., :n], s1[..., n:]) + s2[..., n:]
        return xp.concatenate([A, h], axis=-1)
    if s1.shape[-1] == 2:
        return xp.stack([s2[..., 0] * s1[..., 0], s2[..., 0] * s1[..., 1] + s2[..., 1]], axis=-1)
    out = xp.empty(xp.broadcast_shapes(s1.shape, s2.shape), s1.dtype)
    # A finite path through s1 (no t*) continues into s2: the affine parts
    # compose and s2's t* (if any) is the composite's. Once s1 has met its t*
    # the state is non-finite and only s2's maps of infinities apply.
    has1 = ~xp.isfinite(s1[..., _AS]) | ~xp.isfinite(s1[..., _BS])
    out[..., _P] = xp.where(has1, s1[..., _P], s2[..., _P] * s1[..., _P])
    out[..., _Q] = xp.where(has1, s1[..., _Q], s2[..., _P] * s1[..., _Q] + s2[..., _Q])
    for k in (_AS, _BS):
        out[..., k] = xp.where(has1, s1[..., k], s2[..., k])
    for k in (_GP, _GM):
        out[..., k] = xp.where(has1, _inf_map(xp, s2[..., _FP], s2[..., _FM], s1[..., k]), s2[..., k])
    for k in (_FP, _FM):
        out[..., k] = _inf_map(xp, s2[..., _FP], s2[..., _FM], s1[..., k])
    return out


def _identity(xp, like, dense):
    shape = like.shape[:-2] + like.shape[-1:] if not dense else like.shape[:-3] + like.shape[-2:]
    if dense:
        n = like.shape[-2]
        s = xp.zeros(shape, like.dtype)
        s[..., :n] = xp.eye(n, dtype=like.dtype)
        return s
    if like.shape[-1] == 2:
        s = xp.zeros(shape, like.dtype)
        s[..., 0] = 1
        return s
    s = xp.zeros(shape, like.dtype)
    s[..., _P] = s[..., _AS] = 1
    s[..., _GP] = s[..., _FP] = np.inf
    s[..., _GM] = s[..., _FM] = -np.inf
    return s


def _order(K, reverse):
    return range(K - 1, -1, -1) if reverse else range(K)


def _carry_task(S, h0=None, *, dense, reverse):
    """Stage 2 in one task: the state entering each of the blocks summarised in ``S``.

    ``S`` is ``(*lanes, K, w)`` (dense ``(*lanes, K, n, n+1)``), ``h0`` the state
    entering the first block in scan order (``None``: zeros; a length-1 time
    axis when it is a group's carry). Returns ``(*lanes, K)`` (dense ``(..., K, n)``).
    """
    xp = _xp(S)
    ax = -3 if dense else -2
    K = S.shape[ax]
    shape = S.shape[:ax] + ((S.shape[-2],) if dense else ())
    if h0 is None:
        c = xp.zeros(shape, S.dtype)
    else:
        if h0.ndim == len(shape) + 1:  # a group carry: drop its time axis
            h0 = h0[..., 0, :] if dense else h0[..., 0]
        c = xp.broadcast_to(h0.astype(S.dtype), shape)
    out = xp.empty(S.shape[:ax] + (K,) + shape[len(S.shape[:ax]):], S.dtype)
    with np.errstate(all="ignore"):
        for k in _order(K, reverse):
            if dense:
                out[..., k, :] = c
                c = _apply(xp, S[..., k, :, :], c, dense)
            else:
                out[..., k] = c
                c = _apply(xp, S[..., k, :], c, dense)
    return out


def _compose_task(S, *, dense, reverse):
    """All summaries of ``S`` (scan order) composed into one, with a length-1 time axis."""
    xp = _xp(S)
    ax = -3 if dense else -2
    acc = _identity(xp, S, dense)
    with np.errstate(all="ignore"):
        for k in _order(S.shape[ax], reverse):
            acc = _compose(xp, acc, S[..., k, :, :] if dense else S[..., k, :], dense)
    return acc[..., None, :, :] if dense else acc[..., None, :]
