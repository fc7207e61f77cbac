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
from llvmlite import ir
from numba import njit, prange, types
from numba.core import cgutils
from numba.extending import intrinsic

__all__ = ["chunked", "chunked_fixup", "dense_sequential", "sequential_blocks", "sequential_rows"]

_OPTS = dict(cache=True, nogil=True, error_model="numpy")


@njit(parallel=True, **_OPTS)
def sequential_rows(a, b, out, h):
    """One lane per iteration, its state in a register: for time-contiguous lanes.

    Each lane is the plain loop, so results (non-finite ones included) are
    exactly the sequential loop's; lanes are spread over numba's threads.
    """
    L, T = out.shape
    for l in prange(L):
        h[l] = _scan(a[l], b[l], out[l], 0, T, h[l])


@njit(parallel=True, **_OPTS)
def sequential_blocks(a, b, out, h, lb):
    """Blocks of ``lb`` lanes stepped together through time, on ``(T, lanes)`` views.

    For time-major arrays (a ``(T, N)`` C-order array scanned along axis 0):
    step ``t`` of a block is one contiguous run of each of ``a``, ``b`` and
    ``out``, read in place with no transposing copy; the ``lb`` recurrences
    of a block are independent, so the inner loop has no dependency chain
    and (for C-contiguous rows) vectorises. ``a`` and ``b`` here are the
    transposed canonical views, ``(T, lanes)``.
    """
    T, L = out.shape
    nblk = (L + lb - 1) // lb
    for k in prange(nblk):
        l0 = k * lb
        n = min(L, l0 + lb) - l0
        s = h[l0:l0 + n].copy()
        for t in range(T):
            ar = a[t, l0:l0 + n]
            br = b[t, l0:l0 + n]
            orow = out[t, l0:l0 + n]
            for j in range(n):
                v = ar[j] * s[j] + br[j]
                s[j] = v
                orow[j] = v
        h[l0:l0 + n] = s


@njit(**_OPTS)
def _scan(a, b, out, t0, t1, s):
    for t in range(t0, t1):
        s = a[t] * s + b[t]
        out[t] = s
    return s


@njit(**_OPTS)
def _reduce(a, b, t0, t1, p, s):
    for t in range(t0, t1):
        s = a[t] * s + b[t]
        p = a[t] * p
    return p, s


@njit(**_OPTS)
def _split(bnd, s0, n, nseg):
    """Bounds of ``nseg`` near-equal segments of the ``n`` steps from ``s0`` (``bnd``: nseg + 1)."""
    for i in range(nseg + 1):
        bnd[i] = s0 + (n * i) // nseg


@njit(**_OPTS)
def _quad(bnd, i):
    """Starts of segments i..i+3 and the length ``m`` they all have (the interleaved part)."""
    u0, u1, u2, u3 = bnd[i], bnd[i + 1], bnd[i + 2], bnd[i + 3]
    return u0, u1, u2, u3, min(min(u1 - u0, u2 - u1), min(u3 - u2, bnd[i + 4] - u3))


@njit(parallel=True, **_OPTS)
def chunked(a, b, out, h, ng, sb, unit):
    """Reduce-then-scan along time in superblocks, so that few long lanes use every thread.

    The driver takes this for a time-invariant ``a`` with ``|a|`` near or
    above 1, where :func:`chunked_fixup` would rewrite every later segment.

    Each lane is cut into superblocks of ``sb`` steps, each superblock into
    ``4 * ng`` segments. Pass 1 reduces every segment to its aggregate
    ``(P, H)`` = (product of ``a``, state from zero), reading ``a`` and
    ``b``; a short serial scan of the aggregates gives each segment's
    incoming state; pass 2 rescans every segment from it -- the plain loop
    again, so each segment's values are the loop's given its carry. With
    superblocks small enough for the cache, pass 2 reads ``a`` and ``b``
    from L2/L3 and memory sees the loop's 3 streams instead of 5 (the
    driver's ``SUPERBLOCK`` weighs this against two parallel regions per
    superblock). Threads take
    groups of 4 segments and step them interleaved: 4 (pass 1: 8)
    independent dependency chains hide the latency of the multiply-add that
    bounds a single loop. The final state is the last segment's rescan.
    ``unit`` is ``[1]`` in the accumulation dtype (typed constants). Rows
    are indexed as 1-d views: 2-d strided indexing in the interleaved loops
    cost more than the latency they hide, and segments are sliced so that
    the loop index starts at 0 (indexing ``ar[u0 + j]`` with an offset read
    from an array measured 2x slower: numba's negative-index wraparound
    check cannot be proven away).
    """
    L, T = out.shape
    nseg = 4 * ng
    P = np.empty(nseg, h.dtype)
    H = np.empty(nseg, h.dtype)
    C = np.empty(nseg + 1, h.dtype)
    bnd = np.empty(nseg + 1, np.int64)
    for l in range(L):
        ar = a[l]
        br = b[l]
        orow = out[l]
        c = h[l]
        for s0 in range(0, T, sb):
            n = min(T, s0 + sb) - s0
            _split(bnd, s0, n, nseg)
            for g in prange(ng):
                i = 4 * g
                u0, u1, u2, u3, m = _quad(bnd, i)
                one = unit[0]
                zero = one - one
                p0 = p1 = p2 = p3 = one
                q0 = q1 = q2 = q3 = zero
                a0, a1, a2, a3 = ar[u0:u0 + m], ar[u1:u1 + m], ar[u2:u2 + m], ar[u3:u3 + m]
                b0, b1, b2, b3 = br[u0:u0 + m], br[u1:u1 + m], br[u2:u2 + m], br[u3:u3 + m]
                for j in range(m):
                    x0 = a0[j]
                    x1 = a1[j]
                    x2 = a2[j]
                    x3 = a3[j]
                    q0 = x0 * q0 + b0[j]
                    q1 = x1 * q1 + b1[j]
                    q2 = x2 * q2 + b2[j]
                    q3 = x3 * q3 + b3[j]
                    p0 = x0 * p0
                    p1 = x1 * p1
                    p2 = x2 * p2
                    p3 = x3 * p3
                P[i], H[i] = _reduce(ar, br, u0 + m, u1, p0, q0)
                P[i + 1], H[i + 1] = _reduce(ar, br, u1 + m, u2, p1, q1)
                P[i + 2], H[i + 2] = _reduce(ar, br, u2 + m, u3, p2, q2)
                P[i + 3], H[i + 3] = _reduce(ar, br, u3 + m, bnd[i + 4], p3, q3)
            C[0] = c
            for i in range(nseg - 1):
                C[i + 1] = P[i] * C[i] + H[i]
            for g in prange(ng):
                i = 4 * g
                u0, u1, u2, u3, m = _quad(bnd, i)
                q0 = C[i]
                q1 = C[i + 1]
                q2 = C[i + 2]
                q3 = C[i + 3]
                a0, a1, a2, a3 = ar[u0:u0 + m], ar[u1:u1 + m], ar[u2:u2 + m], ar[u3:u3 + m]
                b0, b1, b2, b3 = br[u0:u0 + m], br[u1:u1 + m], br[u2:u2 + m], br[u3:u3 + m]
                o0, o1, o2, o3 = orow[u0:u0 + m], orow[u1:u1 + m], orow[u2:u2 + m], orow[u3:u3 + m]
                for j in range(m):
                    q0 = a0[j] * q0 + b0[j]
                    q1 = a1[j] * q1 + b1[j]
                    q2 = a2[j] * q2 + b2[j]
                    q3 = a3[j] * q3 + b3[j]
                    o0[j] = q0
                    o1[j] = q1
                    o2[j] = q2
                    o3[j] = q3
                _scan(ar, br, orow, u0 + m, u1, q0)
                _scan(ar, br, orow, u1 + m, u2, q1)
                _scan(ar, br, orow, u2 + m, u3, q2)
                q3 = _scan(ar, br, orow, u3 + m, bnd[i + 4], q3)
                if g == ng - 1:
                    C[nseg] = q3
            c = C[nseg]
        h[l] = c


@njit(**_OPTS)
def _scan_prod(a, b, out, t0, t1, p, s):
    for t in range(t0, t1):
        x = a[t]
        s = x * s + b[t]
        out[t] = s
        p = x * p
    return p, s


@njit(**_OPTS)
def _fixup(a, out, t0, t1, w, tiny):
    """``out[t] += w_t`` with ``w_t = a[t] * w_{t-1}``, from ``t0`` until ``|w|`` drops below ``tiny``.

    ``w_t`` is the carry's share of the state, ``(a[t0] ... a[t]) * w``. Once
    both parts of ``w`` are below the smallest normal number it is noise
    beyond the last bit of any normal-sized state (the loop itself loses the
    carry to rounding far earlier); it cannot reach exactly 0 in general,
    since ``a * w`` rounds back to the smallest subnormal for ``|a| > 1/2``.
    NaN and infinities compare false and are propagated to the end.
    """
    for t in range(t0, t1):
        w = a[t] * w
        if abs(w.real) < tiny and abs(w.imag) < tiny:
            return
        out[t] += w


@intrinsic
def _nt_store(typingctx, arr, idx, val):
    """``arr[idx] = val`` as a non-temporal store (``!nontemporal``: ``movnti``/``movntsd`` on x86).

    A plain store first reads its cache line from memory (write-allocate):
    writing ``out`` costs two units of traffic. A non-temporal store writes
    the line without reading it; consecutive ones fill whole lines in the
    write-combining buffers. For rows far larger than the cache, which the
    next step has to re-read from memory anyway.
    """
    if not (isinstance(arr, types.Array) and isinstance(idx, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        aty = sig.args[0]
        ary = context.make_array(aty)(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, aty, ary, [args[1]], wraparound=False)
        val = context.cast(builder, args[2], sig.args[2], aty.dtype)
        st = builder.store(val, ptr)
        st.set_metadata("nontemporal", builder.module.add_metadata([ir.Constant(ir.IntType(32), 1)]))
        return context.get_dummy_value()

    return types.void(arr, idx, val), codegen


@intrinsic
def _store_fence(typingctx):
    """A full fence: non-temporal stores are weakly ordered; other threads read ``out`` next."""

    def codegen(context, builder, sig, args):
        builder.fence("seq_cst")
        return context.get_dummy_value()

    return types.void(), codegen


#: steps of a burst: each segment's states are collected in an L1 buffer and
#: written with non-temporal stores as one run of 512 bytes (float64), so the
#: write-combining buffers see whole lines even with 4 segments interleaved
#: (non-temporal stores straight from the interleaved loop were 2.5x slower)
BURST = 64


@njit(**_OPTS)
def _stream(src, dst):
    for k in range(src.shape[0]):
        _nt_store(dst, k, src[k])


@njit(fastmath={"contract"}, **_OPTS)
def _local4(a0, a1, a2, a3, b0, b1, b2, b3, o0, o1, o2, o3, m, p0, p1, p2, p3, q0, q1, q2, q3):
    """Four segments' local scans interleaved, written to ``o*``; returns the products of ``a`` and last states.

    ``contract`` lets LLVM fuse ``x * q + b`` into one FMA (one rounding
    instead of two; the latency of the chain drops from a multiply plus an add).
    """
    for j in range(m):
        x0 = a0[j]
        x1 = a1[j]
        x2 = a2[j]
        x3 = a3[j]
        q0 = x0 * q0 + b0[j]
        q1 = x1 * q1 + b1[j]
        q2 = x2 * q2 + b2[j]
        q3 = x3 * q3 + b3[j]
        o0[j] = q0
        o1[j] = q1
        o2[j] = q2
        o3[j] = q3
        p0 = x0 * p0
        p1 = x1 * p1
        p2 = x2 * p2
        p3 = x3 * p3
    return p0, p1, p2, p3, q0, q1, q2, q3


@njit(fastmath={"contract"}, **_OPTS)
def _local4_const(x, b0, b1, b2, b3, o0, o1, o2, o3, m, q0, q1, q2, q3):
    """:func:`_local4` for a time-invariant ``a = x`` (the products are ``x ** m``)."""
    for j in range(m):
        q0 = x * q0 + b0[j]
        q1 = x * q1 + b1[j]
        q2 = x * q2 + b2[j]
        q3 = x * q3 + b3[j]
        o0[j] = q0
        o1[j] = q1
        o2[j] = q2
        o3[j] = q3
    return q0, q1, q2, q3


@njit(**_OPTS)
def _local4_nt(a0, a1, a2, a3, b0, b1, b2, b3, o0, o1, o2, o3, m, p0, p1, p2, p3, q0, q1, q2, q3, buf):
    """:func:`_local4` in bursts of ``BURST`` steps through ``buf (4, BURST)``, written out non-temporally."""
    r0, r1, r2, r3 = buf[0], buf[1], buf[2], buf[3]
    mb = m - m % BURST
    for j in range(0, mb, BURST):
        e = j + BURST
        p0, p1, p2, p3, q0, q1, q2, q3 = _local4(
            a0[j:e], a1[j:e], a2[j:e], a3[j:e], b0[j:e], b1[j:e], b2[j:e], b3[j:e],
            r0, r1, r2, r3, BURST, p0, p1, p2, p3, q0, q1, q2, q3)
        _stream(r0, o0[j:e])
        _stream(r1, o1[j:e])
        _stream(r2, o2[j:e])
        _stream(r3, o3[j:e])
    return _local4(a0[mb:], a1[mb:], a2[mb:], a3[mb:], b0[mb:], b1[mb:], b2[mb:], b3[mb:],
                   o0[mb:], o1[mb:], o2[mb:], o3[mb:], m - mb, p0, p1, p2, p3, q0, q1, q2, q3)


@njit(**_OPTS)
def _local4_const_nt(x, b0, b1, b2, b3, o0, o1, o2, o3, m, q0, q1, q2, q3, buf):
    """:func:`_local4_const` in bursts, as :func:`_local4_nt`."""
    r0, r1, r2, r3 = buf[0], buf[1], buf[2], buf[3]
    mb = m - m % BURST
    for j in range(0, mb, BURST):
        e = j + BURST
        q0, q1, q2, q3 = _local4_const(x, b0[j:e], b1[j:e], b2[j:e], b3[j:e], r0, r1, r2, r3, BURST, q0, q1, q2, q3)
        _stream(r0, o0[j:e])
        _stream(r1, o1[j:e])
        _stream(r2, o2[j:e])
        _stream(r3, o3[j:e])
    return _local4_const(x, b0[mb:], b1[mb:], b2[mb:], b3[mb:], o0[mb:], o1[mb:], o2[mb:], o3[mb:],
                         m - mb, q0, q1, q2, q3)


@njit(parallel=True, **_OPTS)
def chunked_fixup(a, b, out, h, ng, sb, unit, tiny, nt):
    """Scan-then-fix-up along time in superblocks: ``out`` written once, then patched where the carry matters.

    Each superblock of ``sb`` steps is cut into ``4 * ng`` segments; thread
    ``g`` takes segments ``4g .. 4g+3`` and steps them interleaved (4
    independent dependency chains, as in :func:`chunked`). Pass 1 scans every
    segment from state 0 -- the first from the true incoming state, so it is
    final -- writing the local states straight into ``out`` and keeping the
    aggregate ``(P, H)`` = (product of ``a``, last local state). A serial
    scan of the aggregates gives each segment's carry ``C``. Pass 2 adds the
    carry's share, ``out[t] += (a[u] ... a[t]) * C``, to every later segment,
    and stops where that share falls below the smallest normal number
    (:func:`_fixup`): for ``|a| < 1`` after a few thousand steps. Memory then
    sees one read of ``a`` and ``b`` and one write of ``out`` (3 streams;
    reduce-then-scan moves 5); where the share never decays (``|a| >= 1``
    throughout) pass 2 re-reads ``a`` and ``out`` and writes ``out`` in full:
    6 streams. ``h`` gets the last written state of the lane. ``unit`` is
    ``[1]`` in the accumulation dtype, ``tiny`` the smallest normal number of
    its real part (``[tiny]``). ``nt``: pass 1 writes ``out`` with
    non-temporal stores in bursts (:func:`_nt_store`; real dtypes with
    contiguous rows far larger than the cache: the driver decides).
    """
    L, T = out.shape
    nseg = 4 * ng
    P = np.empty(nseg, h.dtype)
    H = np.empty(nseg, h.dtype)
    C = np.empty(nseg, h.dtype)
    bnd = np.empty(nseg + 1, np.int64)
    small = tiny[0]
    for l in range(L):
        ar = a[l]
        br = b[l]
        orow = out[l]
        c = h[l]
        for s0 in range(0, T, sb):
            n = min(T, s0 + sb) - s0
            _split(bnd, s0, n, nseg)
            for g in prange(ng):
                i = 4 * g
                u0, u1, u2, u3, m = _quad(bnd, i)
                zero = unit[0] - unit[0]
                q0 = c if i == 0 else zero
                b0, b1, b2, b3 = br[u0:u0 + m], br[u1:u1 + m], br[u2:u2 + m], br[u3:u3 + m]
                o0, o1, o2, o3 = orow[u0:u0 + m], orow[u1:u1 + m], orow[u2:u2 + m], orow[u3:u3 + m]
                one = unit[0]
                if ar.strides[0] == 0:
                    # time-invariant a (scalar or per lane): a register, not a load per step
                    # (single thread, 2**23 steps: 6.2 ms against 7.1 ms for the stride-0 view)
                    x = ar[0]
                    if nt:
                        q0, q1, q2, q3 = _local4_const_nt(x, b0, b1, b2, b3, o0, o1, o2, o3, m, q0, zero, zero, zero,
                                                          np.empty((4, BURST), h.dtype))
                        _store_fence()
                    else:
                        q0, q1, q2, q3 = _local4_const(x, b0, b1, b2, b3, o0, o1, o2, o3, m, q0, zero, zero, zero)
                    P[i], H[i] = _scan_prod(ar, br, orow, u0 + m, u1, x ** m, q0)
                    P[i + 1], H[i + 1] = _scan_prod(ar, br, orow, u1 + m, u2, x ** m, q1)
                    P[i + 2], H[i + 2] = _scan_prod(ar, br, orow, u2 + m, u3, x ** m, q2)
                    P[i + 3], H[i + 3] = _scan_prod(ar, br, orow, u3 + m, bnd[i + 4], x ** m, q3)
                else:
                    a0, a1, a2, a3 = ar[u0:u0 + m], ar[u1:u1 + m], ar[u2:u2 + m], ar[u3:u3 + m]
                    if nt:
                        p0, p1, p2, p3, q0, q1, q2, q3 = _local4_nt(
                            a0, a1, a2, a3, b0, b1, b2, b3, o0, o1, o2, o3, m, one, one, one, one,
                            q0, zero, zero, zero, np.empty((4, BURST), h.dtype))
                        _store_fence()
                    else:
                        p0, p1, p2, p3, q0, q1, q2, q3 = _local4(
                            a0, a1, a2, a3, b0, b1, b2, b3, o0, o1, o2, o3, m, one, one, one, one,
                            q0, zero, zero, zero)
                    P[i], H[i] = _scan_prod(ar, br, orow, u0 + m, u1, p0, q0)
                    P[i + 1], H[i + 1] = _scan_prod(ar, br, orow, u1 + m, u2, p1, q1)
                    P[i + 2], H[i + 2] = _scan_prod(ar, br, orow, u2 + m, u3, p2, q2)
                    P[i + 3], H[i + 3] = _scan_prod(ar, br, orow, u3 + m, bnd[i + 4], p3, q3)
            # C[i]: the state entering segment i; segment 0 started from it and is final
            C[0] = c
            if nseg > 1:
                C[1] = H[0]
            for i in range(1, nseg - 1):
                C[i + 1] = P[i] * C[i] + H[i]
            for g in prange(ng):
                for i in range(max(1, 4 * g), 4 * g + 4):
                    _fixup(ar, orow, bnd[i], bnd[i + 1], C[i], small)
            if n > 0:
                c = orow[s0 + n - 1]
        h[l] = c


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
