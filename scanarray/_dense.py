"""Dense recurrences ``h[t] = A[t] @ h[t-1] + b[t]`` written once against an array namespace.

The functions take the native module ``xp`` (NumPy or CuPy) and canonical
views: ``A (..., T, n, n)`` and ``b (..., T, n)``, possibly broadcast (stride 0),
and return ``h (..., T, n)`` of the accumulation dtype -- written into ``out``
when the caller passes a result array of that dtype, else a new array. Every
product is one batched ``xp.matmul``, so the same code runs on the CPU and on
the GPU.

Methods
-------
``cyclic_reduction``
    Hockney (1965), Heller (1976): eliminate every other state with one batched
    product per halving level, recurse on half, back-substitute. About
    ``T n^3`` multiply-adds for the transition products and ``2 T n^2`` for the
    vectors.
``prefix``
    Hillis & Steele (1986) scan of the pairs ``(A, b)`` with the composition
    ``(A2, b2) o (A1, b1) = (A2 A1, A2 b1 + b2)``: ``log2 T`` levels of about
    ``T n^3`` each. The baseline cyclic reduction is measured against.
``sequential``
    One batched matvec per time step (``T`` calls): the least work and, for
    short sequences, the fewest operations to launch.
``chunked``
    Split the time axis into chunks of length ``L`` (about ``sqrt(T)``) and
    step through all chunks of all lanes at once: ``L`` steps give each
    chunk's state from zero and its transition product, ``T / L`` small steps
    carry the states across chunks, and ``L`` more steps rerun every chunk
    from its true entering state. ``T n^3 + 2 T n^2`` multiply-adds, but only
    about ``3 L + T / L`` Python-level steps: on NumPy, where each batched
    call of small matrices costs microseconds, this beats the ``T`` steps of
    ``sequential`` for few lanes and small ``n``.

A time-invariant transition (``A`` broadcast along time: stride 0, which
:func:`compact` turns into a time axis of length 1) is never expanded to
``T`` copies: cyclic reduction squares it once per level, the prefix scan
needs only its powers ``A^(2^k)`` (every step of level ``k`` uses the same
power), and every matvec with it becomes one GEMM ``h @ A^T`` over all steps.

Counting
--------
Inside ``with count_multiply_adds() as c:`` every product these functions
issue adds its multiply-adds to ``c.total`` (and per kind to ``c.by_kind``):
a product ``(p, k) @ (k, q)`` repeated over a broadcast batch of ``s``
counts ``s * p * k * q`` multiply-adds (one multiply and one add, i.e. two
floating-point operations). :func:`multiply_adds` predicts the same number
from the shapes alone, without running anything.
"""

from __future__ import annotations

import contextlib
import itertools

from ._arrays import same_view as _same_view
from .backends._layout import compact

__all__ = [
    "METHODS",
    "chunk_length",
    "chunked",
    "compact",
    "count_multiply_adds",
    "cyclic_reduction",
    "lane_counts",
    "multiply_adds",
    "prefix",
    "sequential",
]


def lane_counts(a, lanes):
    """``(lanes, a_lanes)``: the number of lanes of the result (``lanes`` is its lane shape) and
    of distinct transitions among them (the lanes of the canonical ``A (*lanes, T, n, n)`` along
    which it does not broadcast): what the backends' cost models charge products to."""
    n_lanes = a_lanes = 1
    for size, step in zip(a.shape[:-3], a.strides[:-3]):
        a_lanes *= size if step != 0 else 1
    for size in lanes:
        n_lanes *= size
    return n_lanes, a_lanes


# --------------------------------------------------------------------------- counting


class MultiplyAddCount:
    """Multiply-adds issued by the products of one or more calls (see the module notes)."""

    def __init__(self):
        self.total = 0
        self.by_kind = {"matrix": 0, "vector": 0}
        self.calls = 0

    def __repr__(self):
        return f"MultiplyAddCount(total={self.total}, by_kind={self.by_kind}, calls={self.calls})"


_counters: list[MultiplyAddCount] = []


@contextlib.contextmanager
def count_multiply_adds():
    """Count the multiply-adds of every product issued inside the block.

    Yields
    ------
    MultiplyAddCount
        ``total``, ``by_kind`` (``"matrix"``: transition products,
        ``"vector"``: products with states) and ``calls`` (products issued).
    """
    c = MultiplyAddCount()
    _counters.append(c)
    try:
        yield c
    finally:
        _counters.remove(c)


def _batch(*shapes):
    """The number of items of the broadcast batch shapes (NumPy rules), without NumPy."""
    nd = max(len(s) for s in shapes)
    size = 1
    for i in range(nd):
        dims = [s[i - nd + len(s)] for s in shapes if i - nd + len(s) >= 0]
        size *= max(dims) if 0 not in dims else 0
    return size


def _record(kind, a_shape, b_shape, steps=1):
    """Count a product ``a_shape @ b_shape``, issued `steps` times (a loop records once, before it runs)."""
    if _counters:
        p, k = a_shape[-2:]
        q = b_shape[-1]
        n = steps * _batch(a_shape[:-2], b_shape[:-2]) * p * k * q
        for c in _counters:
            c.total += n
            c.by_kind[kind] += n
            c.calls += steps


def _matmul(xp, X, Y):
    """``X @ Y`` for transition products, counted."""
    _record("matrix", X.shape, Y.shape)
    return xp.matmul(X, Y)


def _matvec(xp, A, v):
    """``A[t] @ v[t]`` for every step: ``A (..., TA, n, n)``, ``v (..., m, n)`` -> ``(..., m, n)``.

    ``TA`` is ``m``, or 1 for a time-invariant ``A``: then all ``m`` steps are
    one GEMM ``v @ A^T`` (per lane batch of ``A``) instead of ``m``
    matrix-vector products against a broadcast, which on CuPy would also
    build an array of ``m`` pointers to the same matrix.
    """
    if A.shape[-3] == 1 and v.shape[-2] != 1:
        At = xp.swapaxes(A[..., 0, :, :], -1, -2)
        _record("vector", v.shape, At.shape)
        return xp.matmul(v, At)
    _record("vector", A.shape, v.shape[:-1] + (v.shape[-1], 1))
    return xp.matmul(A, v[..., None])[..., 0]


# --------------------------------------------------------------------------- common steps


def _prepare(xp, A, b, h0, dt, reverse, out):
    """Cast (without expanding broadcast axes), flip views for ``reverse``, fold ``h0`` into ``b[0]``.

    Returns ``(A, H, result)``: ``H`` is the work array holding ``b`` (a view
    of ``out`` when ``out`` has the accumulation dtype, so the scan is done in
    the result's own memory), ``result`` the unflipped array to return.
    """
    A = compact(A)
    if reverse:
        A = A[..., ::-1, :, :]
        b = b[..., ::-1, :]
    A = A.astype(dt, copy=False)
    if out is not None and out.dtype == dt:
        result = out
        H = out[..., ::-1, :] if reverse else out
        if not _same_view(H, b):  # out may be b itself (in place): nothing to copy then
            H[...] = b
    else:
        H = b.astype(dt, copy=True)  # owned: the algorithms work in place in it
        result = H[..., ::-1, :] if reverse else H
    if h0 is not None:
        # h[0] = A[0] h0 + b[0]: the recurrence from a zero state on the corrected b.
        h0 = xp.broadcast_to(h0.astype(dt, copy=False), H.shape[:-2] + H.shape[-1:])
        H[..., 0, :] += _matvec(xp, A[..., 0:1, :, :], h0[..., None, :])[..., 0, :]
    elif H.shape[-2] > 0:
        # The zero state still meets A[0]: the loop's h[0] = A[0] @ 0 + b[0] is NaN in a row of
        # A[0] holding an infinity or NaN (inf * 0), which starting from b[0] would miss.
        # Elementwise rather than a matvec: a BLAS may skip the zero entries of the vector.
        H[..., 0, :] += (A[..., 0, :, :] * dt.type(0)).sum(axis=-1)
    return A, H, result


def _pairs(xp, A, m):
    """``(A[0::2], A[1:2m:2])`` (every even step, the odd steps paired); a time-invariant A stays itself.

    On CuPy the halves are made contiguous once: ``cupy.matmul`` copies a
    strided operand at every use, and each half is used two or three times
    (product, matvec, back-substitution). NumPy's matmul reads the strided
    views directly; copying them first measured 2x slower there ((8, 4096, 16)
    float32 on a 2-core x86-64 VM).
    """
    if A.shape[-3] == 1:
        return A, A
    even, odd = A[..., 0::2, :, :], A[..., 1:2 * m:2, :, :]
    if getattr(xp, "__name__", "") != "numpy":
        even, odd = xp.ascontiguousarray(even), xp.ascontiguousarray(odd)
    return even, odd


# --------------------------------------------------------------------------- cyclic reduction


def _cr(xp, A, H):
    """Cyclic reduction in place in ``H`` (Hockney 1965; Heller 1976).

    Eliminate every even state: for pairs (2j, 2j+1) the combined step is
    ``(A[2j+1] A[2j], A[2j+1] b[2j] + b[2j+1])``; recurse on the ``T // 2`` odd
    states, then recover the even ones with one batched matvec. Only the
    vectors are back-substituted, so the products of ``A`` are formed once:
    ``T/2 + T/4 + ... < T`` products of ``n x n`` matrices in all.
    """
    T = H.shape[-2]
    if T == 1:
        return H
    m = T // 2
    A_even, A_odd = _pairs(xp, A, m)
    const = A.shape[-3] == 1
    A2 = _matmul(xp, A_odd, A_even if const else A_even[..., :m, :, :]) if m > 1 else None  # last level: none
    B2 = _matvec(xp, A_odd, H[..., 0:2 * m:2, :])
    B2 += H[..., 1:2 * m:2, :]
    H_odd = _cr(xp, A2, B2) if m > 1 else B2
    del A2
    H[..., 1:2 * m:2, :] = H_odd
    if T > 2:
        # h[2j] = A[2j] h[2j-1] + b[2j] for j >= 1 (h[0] = b[0] already).
        A_rest = A if const else A_even[..., 1:, :, :]
        k = (T - 1) // 2
        H[..., 2::2, :] += _matvec(xp, A_rest, H_odd[..., :k, :])
    return H


def cyclic_reduction(xp, A, b, h0, dt, reverse=False, out=None):
    """Dense scan by cyclic reduction: one batched matmul per halving level.

    Parameters
    ----------
    xp : module
        ``numpy`` or ``cupy``.
    A, b : arrays
        Canonical views ``(..., T, n, n)`` and ``(..., T, n)``; broadcast axes
        (stride 0) are read in place, never expanded.
    h0 : array or None
        ``h[-1]`` (``h[T]`` when `reverse`), broadcastable to ``(..., n)``.
    dt : dtype
        Accumulation dtype.
    reverse : bool
        ``h[t] = A[t] @ h[t+1] + b[t]``.
    out : array, optional
        Canonical result view; used as the work array when its dtype is `dt`
        (it may be `b` itself).

    Returns
    -------
    array
        ``h`` of shape ``b.shape``, dtype `dt` (`out` when it was used).
    """
    A, H, result = _prepare(xp, A, b, h0, dt, reverse, out)
    _cr(xp, A, H)
    return result


# --------------------------------------------------------------------------- prefix


def prefix(xp, A, b, h0, dt, reverse=False, out=None):
    """Dense scan by a Hillis-Steele prefix of (A, b) pairs: about ``T n^3 log2 T`` work.

    Level ``d = 1, 2, 4, ...`` composes every pair with the one ``d`` steps
    earlier: ``(A, b)[t] <- (A[t] A[t-d], A[t] b[t-d] + b[t])``. The matrix
    products of the last level are skipped (nothing reads them). A
    time-invariant ``A`` needs only its powers: before level ``d`` the
    transition part at every ``t >= d`` is ``A^d``, so the level is one GEMM
    with ``A^d`` and one squaring; nothing of size ``T n^2`` is allocated.
    Parameters as :func:`cyclic_reduction`.
    """
    A, H, result = _prepare(xp, A, b, h0, dt, reverse, out)
    T = H.shape[-2]
    if A.shape[-3] == 1:
        P = A  # A^d, time length 1
        d = 1
        while d < T:
            H[..., d:, :] += _matvec(xp, P, H[..., :-d, :])
            if 2 * d < T:
                P = _matmul(xp, P, P)
            d *= 2
        return result
    P = A.copy()
    d = 1
    while d < T:
        # Right-hand sides read the old values: both products before either store.
        B_new = _matvec(xp, P[..., d:, :, :], H[..., :-d, :])
        if 2 * d < T:
            P_new = _matmul(xp, P[..., d:, :, :], P[..., :-d, :, :])
            P[..., d:, :, :] = P_new
            del P_new
        H[..., d:, :] += B_new
        d *= 2
    return result


# --------------------------------------------------------------------------- sequential


def _steps(xp, A, H, start, stop, Ht=None):
    """``H[t] += A[t] @ H[t-1]`` for ``t`` in ``start..stop-1``, in place, one batched matvec per step.

    The per-step views come from iterating over time-leading views (made in C,
    not by Python indexing) and every product is written into one preallocated
    buffer: on NumPy a step then costs one ``matmul`` and one in-place add, no
    allocation. `Ht` is ``H`` with time moved first, if the caller has one
    (:func:`_time_major`).
    """
    if stop <= start:
        return
    Ht = xp.moveaxis(H, -2, 0) if Ht is None else Ht
    Ht = Ht[..., None]  # (T, *lanes, n, 1)
    tmp = xp.empty(Ht.shape[1:], H.dtype)
    a = A[..., 0, :, :]
    mats = itertools.repeat(a, stop - start) if A.shape[-3] == 1 else xp.moveaxis(A, -3, 0)[start:stop]
    _record("vector", a.shape, tmp.shape, steps=stop - start)
    matmul, add = xp.matmul, xp.add
    for m, prev, h in zip(mats, Ht[start - 1:stop - 1], Ht[start:stop]):
        matmul(m, prev, out=tmp)
        add(h, tmp, out=h)


def _time_major(xp, H):
    """``(Ht, done)``: ``H (..., T, n)`` with time first, in a C-contiguous array, and how to write it back.

    One step's lanes are then one contiguous block: on NumPy a step of the
    loop costs a quarter less than on the strided view of a lane-major
    result, the copies in and out included ((8, 4096, 16) float32 on a 2-core
    VM).
    """
    Ht = xp.moveaxis(H, -2, 0)
    if Ht.flags.c_contiguous:
        return Ht, lambda: None
    W = xp.ascontiguousarray(Ht)

    def done():
        Ht[...] = W

    return W, done


def sequential(xp, A, b, h0, dt, reverse=False, out=None):
    """Dense scan one step at a time: ``T - 1`` batched matvecs, each over all lanes.

    The least work (``T n^2`` multiply-adds per lane) and no temporary of
    size ``T n^2``, but ``T`` dependent calls: for short sequences, or for many
    lanes. Parameters as :func:`cyclic_reduction`.
    """
    A, H, result = _prepare(xp, A, b, h0, dt, reverse, out)
    T = H.shape[-2]
    if T > 1:
        Ht, done = _time_major(xp, H)
        _steps(xp, A, H, 1, T, Ht)
        done()
    return result


# --------------------------------------------------------------------------- chunked


#: Chunk lengths of :func:`chunked` are odd: with ``L`` a multiple of a large power of two the
#: matrices one step reads (``L n^2`` elements apart) fall into the same cache sets: a matvec
#: of (8, 4096, 16) float32 took 77 ns a (lane, chunk) item at L = 63 against 92-147 at L = 64.
CHUNK_FACTOR = 1.0


def chunk_length(T):
    """The chunk length :func:`chunked` uses by default: about ``sqrt(T)``, odd.

    The Python-level steps are about ``3 L + T / L`` (chunk 0, then ``L``
    steps of phase 1 and of phase 3, ``T / L`` of phase 2), fewest at
    ``L = sqrt(T / 3)``; but phase 2 and chunk 0 steps are cheap (a batch of
    lanes only), so a longer chunk costs less than it counts.
    """
    L = max(3, round(CHUNK_FACTOR * T ** 0.5))
    return L | 1


def _split(x, axis, K, L):
    """View the length ``K * L`` axis `axis` of `x` as two axes ``(K, L)`` (never a copy)."""
    ax = axis % x.ndim
    v = x.reshape(x.shape[:ax] + (K, L) + x.shape[ax + 1:])
    if K > 1 and L > 1 and v.strides[ax + 1] != x.strides[ax]:  # pragma: no cover - splitting an axis is a view
        raise AssertionError("reshape copied")
    return v


def _power(xp, A, k):
    """``A^k`` (``k >= 1``) by repeated squaring: ``bit_length(k) - 1 + popcount(k) - 1`` products."""
    result, base = None, A
    while True:
        if k & 1:
            result = base if result is None else _matmul(xp, base, result)
        k >>= 1
        if not k:
            return result
        base = _matmul(xp, base, base)


def _power_products(k):
    return (k.bit_length() - 1) + (k.bit_count() - 1)


def chunked(xp, A, b, h0, dt, reverse=False, out=None, chunk=None):
    """Dense scan over chunks: about ``3 L + T / L`` vectorised steps instead of ``T``.

    With ``T = r0 + K L`` (``1 <= r0 <= L``), chunk 0 holds steps
    ``0 .. r0-1`` and chunks ``1 .. K`` hold ``L`` steps each.

    0. Chunk 0 starts from a zero state (``initial`` is folded into ``b[0]``):
       its ``r0`` steps are the true states, stepped over lanes.
    1. For chunks ``1 .. K-1`` at once (``L - 1`` steps, each one batched matvec
       and one batched product over every (lane, chunk) pair): the state at
       the chunk's end from a zero entering state, and the chunk's transition
       product ``P_c = A[last] ... A[first]``. Chunk ``K``'s are never read.
       A time-invariant ``A`` has ``P_c = A^L`` for every chunk, formed by
       squaring; nothing of size ``T n^2`` is allocated.
    2. ``K - 1`` steps over lanes carry the entering states:
       ``s[c+1] = P_c s[c] + local_end[c]``, ``s[1] = h[r0 - 1]``.
    3. ``L`` steps rerun chunks ``1 .. K`` at once from their entering
       states, writing ``h`` (no per-step products are stored).

    The idea is the two-level scan of Blelloch (1990, ch. 1: "Prefix sums and
    their applications", CMU-CS-90-190) with one block per chunk, applied to
    the affine maps ``h -> A h + b``, as the NumPy backend's diagonal scan
    does for scalars. Parameters as :func:`cyclic_reduction`; `chunk` is
    ``L`` (default :func:`chunk_length`). Fewer than 3 chunks after chunk 0
    would not save steps: then it steps sequentially.

    Like cyclic reduction it forms products of ``A`` over ``L`` steps: where
    they overflow it may return NaN where the loop has a finite value, never
    a wrong finite number (docs/guide/dense.md, "Growing systems").
    """
    A, H, result = _prepare(xp, A, b, h0, dt, reverse, out)
    T, n = H.shape[-2], H.shape[-1]
    L = chunk_length(T) if chunk is None else max(1, int(chunk))
    K = (T - 1) // L
    if K < 3:
        if T > 1:
            Ht, done = _time_major(xp, H)
            _steps(xp, A, H, 1, T, Ht)
            done()
        return result
    r0 = T - K * L
    if r0 > 1:  # chunk 0
        Ht, done = _time_major(xp, H[..., :r0, :])
        _steps(xp, A, H, 1, r0, Ht)
        done()

    lanes = H.shape[:-2]
    # Step-major work layout (L, *lanes, K, n): one step of every chunk is one contiguous block.
    Ht, done = _time_major(xp, _split(H[..., r0:, :], -2, K, L))
    Hp = Ht[..., :K - 1, :]  # chunks 1 .. K-1: the ones phase 1 needs
    const = A.shape[-3] == 1
    if const:
        A0 = A[..., 0, :, :]
        A0T = xp.swapaxes(A0, -1, -2)  # states as rows: one GEMM h @ A^T per step
    else:
        At = xp.moveaxis(_split(A[..., r0:, :, :], -3, K, L), -3, 0)  # (L, *a_lanes, K, n, n)

    # 1. local end states and chunk products of chunks 1 .. K-1
    loc = Hp[0].copy()  # the state after the chunk's first step, from zero: b
    tv = xp.empty_like(loc)
    if const:
        _record("vector", loc.shape, A0T.shape, steps=L - 1)
        for bj in Hp[1:]:
            xp.matmul(loc, A0T, out=tv)
            xp.add(tv, bj, out=loc)
        P = _power(xp, A0, L)  # (*a_lanes, n, n): the same for every chunk
        Pt = itertools.repeat(P, K - 1)
    else:
        Ap = At[..., :K - 1, :, :]
        P = Ap[0]
        bufs = [xp.empty(P.shape, dt) for _ in range(min(2, L - 1))]  # ping-pong: matmul cannot work in place
        _record("vector", P.shape, loc.shape + (1,), steps=L - 1)
        _record("matrix", P.shape, P.shape, steps=L - 1)
        for j, (a, bj) in enumerate(zip(Ap[1:], Hp[1:])):
            xp.matmul(a, loc[..., None], out=tv[..., None])
            xp.add(tv, bj, out=loc)
            Q = bufs[j % 2]
            xp.matmul(a, P, out=Q)
            P = Q
        Pt = xp.moveaxis(P, -3, 0)  # (K-1, *a_lanes, n, n)

    # 2. entering states of chunks 1 .. K, stepped over lanes (chunk-major: every product is
    # written into a contiguous block, which CuPy's matmul needs for `out`)
    St = xp.empty((K,) + lanes + (n, 1), dt)
    St[0] = H[..., r0 - 1, :, None]
    Lt = xp.moveaxis(loc, -2, 0)[..., None]
    _record("vector", P.shape if const else P.shape[:-3] + P.shape[-2:], St.shape[1:], steps=K - 1)
    for p_c, l_c, s_prev, s in zip(Pt, Lt, St[:-1], St[1:]):
        xp.matmul(p_c, s_prev, out=s)
        s += l_c
    S = xp.moveaxis(St[..., 0], 0, -2)  # (*lanes, K, n)

    # 3. rerun chunks 1 .. K from their entering states, in place in H
    tv = xp.empty(lanes + (K, n), dt)
    prev = S
    if const:
        _record("vector", S.shape, A0T.shape, steps=L)
        for h in Ht:
            xp.matmul(prev, A0T, out=tv)
            h += tv
            prev = h
    else:
        _record("vector", At.shape[1:], S.shape + (1,), steps=L)
        for a, h in zip(At, Ht):
            xp.matmul(a, prev[..., None], out=tv[..., None])
            h += tv
            prev = h
    done()
    return result


METHODS = {"cyclic_reduction": cyclic_reduction, "prefix": prefix, "sequential": sequential, "chunked": chunked}


# --------------------------------------------------------------------------- predicted counts


def multiply_adds(method, T, n, lanes=1, a_lanes=None, time_invariant=False, initial=False, chunk=None):
    """Multiply-adds that `method` issues for one call, predicted from the shapes.

    Parameters
    ----------
    method : str
        ``"cyclic_reduction"``, ``"prefix"``, ``"sequential"`` or ``"chunked"``.
    T, n : int
        Sequence length and state size.
    lanes : int
        Number of independent sequences (the broadcast batch of ``b``).
    a_lanes : int, optional
        Number of distinct transition sequences (``A``'s own batch, 1 when
        ``A`` is shared across lanes); default `lanes`.
    time_invariant : bool
        ``A`` is constant along time.
    initial : bool
        An initial state is given (one extra matvec per lane).
    chunk : int, optional
        ``chunked``'s chunk length ``L`` (default :func:`chunk_length`).

    Returns
    -------
    dict
        ``{"matrix": ..., "vector": ..., "total": ...}``; equal to what
        :func:`count_multiply_adds` records for the same call (tested).

    Notes
    -----
    With ``L`` lanes, time-varying ``A`` and ``T`` a power of two:
    cyclic reduction issues ``L (T - 2) n^3`` for the products (``T/2 + T/4
    + ... + 2``: the last level needs none) and ``L (2 T - log2 T - 2) n^2``
    for the vectors; the prefix scan issues
    ``L n^3 (T (log2 T - 1) - T/2 + 1)`` and ``L n^2 (T log2 T - T + 1)``.
    ``chunked`` with ``T = r0 + K L`` issues ``(K - 1)(L - 1) n^3`` per
    transition lane (``bit_length(L) + popcount(L) - 2`` products for a
    time-invariant ``A``) and ``(r0 - 1 + (K - 1) L + K L) n^2`` per lane,
    about ``T n^3 + 2 T n^2``.
    In floating-point operations double every figure.
    """
    a_lanes = lanes if a_lanes is None else a_lanes
    mat = vec = 0
    n2, n3 = n * n, n ** 3
    if initial and T > 0:
        vec += lanes * n2
    if T <= 1:
        return {"matrix": 0, "vector": vec, "total": vec}
    if method == "sequential":
        vec += lanes * (T - 1) * n2
    elif method == "cyclic_reduction":
        t = T
        while t > 1:
            m = t // 2
            if m > 1:
                mat += a_lanes * (1 if time_invariant else m) * n3
            vec += lanes * m * n2
            if t > 2:
                vec += lanes * ((t - 1) // 2) * n2
            t = m
    elif method == "chunked":
        L = chunk_length(T) if chunk is None else max(1, int(chunk))
        K = (T - 1) // L
        if K < 3:
            vec += lanes * (T - 1) * n2
        else:
            r0 = T - K * L
            vec += lanes * ((r0 - 1) + (K - 1) * (L - 1) + (K - 1) + K * L) * n2
            mat += a_lanes * (_power_products(L) if time_invariant else (K - 1) * (L - 1)) * n3
    elif method == "prefix":
        d = 1
        while d < T:
            vec += lanes * (T - d) * n2
            if 2 * d < T:
                mat += a_lanes * (1 if time_invariant else (T - d)) * n3
            d *= 2
    else:
        raise ValueError(f"unknown dense method {method!r}")
    return {"matrix": mat, "vector": vec, "total": mat + vec}
