"""Fused elementwise passes of the users' vocabulary (:mod:`scanarray.signal`, :mod:`scanarray.rl`,
:mod:`scanarray._ewm`) on CuPy arrays.

Those helpers are written against any array namespace, where an IIR section's numerator or
GAE's ``delta`` is a product, a shifted temporary and in-place sums: a pass over memory each.
On the GPU they are bound by memory traffic, so each is one :class:`cupy.ElementwiseKernel`
here, which reads its inputs once and writes its outputs once, a few elements a thread
(``ILP``). A neighbour along time is read by index arithmetic on the raw input
(``x[j - k * inner]``: CuPy indexes a raw array by the C-order index of its own shape, through
its strides, so any layout works without a copy).

Every kernel is built once per signature by CuPy and cached (memory and disk). The callers pick
these functions with :func:`scanarray._vocab.fused` and fall back to the namespace's operations
elsewhere; the counts of passes are in docs/guide/signal.md, rl.md and ewm.md.
"""

from __future__ import annotations

import functools

import numpy as np

__all__ = ["fir", "gae_terms", "not_done", "truncation_terms", "weighted_square"]

# Element j of an array of shape (outer, n_t, inner) (C order) is at (out_, t, in_), found by two
# divisions. Where the size allows, each is a multiply-high and a shift by constants the host
# computed (Granlund & Montgomery 1994, :func:`_divisor`): a division instruction sequence per
# element made these memory-bound passes compute-bound (the "gpu parts" of bench_helpers.py).
_PREAMBLE = """
__device__ __forceinline__ unsigned int sa_div(unsigned int x, unsigned int d, unsigned int m, int s) {
    return d == 1u ? x : (__umulhi(x, m) >> s);
}
__device__ __forceinline__ void sa_position(ptrdiff_t j, ptrdiff_t n_t, ptrdiff_t inner, bool small,
                                            unsigned int im, int ish, unsigned int sm, int ssh,
                                            ptrdiff_t& in_, ptrdiff_t& t, ptrdiff_t& out_) {
    if (small) {
        const unsigned int u = (unsigned int)j, ui = (unsigned int)inner, span = (unsigned int)(n_t * inner);
        const unsigned int o = sa_div(u, span, sm, ssh), r = u - o * span, q = sa_div(r, ui, im, ish);
        in_ = r - q * ui; t = q; out_ = o;
    } else {
        in_ = j % inner; t = (j / inner) % n_t; out_ = j / (inner * n_t);
    }
}
"""
# the position's arguments (_where)
_WHERE = "int64 n_t, int64 inner, bool small, uint32 im, int32 ish, uint32 sm, int32 ssh"
_POS = "sa_position(j, n_t, inner, small, im, ish, sm, ssh, in_, t, out_);"


def _divisor(d):
    """``(m, s)``: ``x // d == (x * m) >> (32 + s)`` for ``0 <= x < 2**31`` (``d == 1``: unused)."""
    if d <= 1:
        return np.uint32(0), np.int32(0)
    p = 31 + (d - 1).bit_length()
    return np.uint32(-(-(1 << p) // d)), np.int32(p - 32)


def _where(x, axis):
    """The position's arguments (``_WHERE``) for array ``x`` and time axis ``axis``."""
    n_t, inner = _geometry(x.shape, axis)
    small = x.size < 2**31
    im, is_ = _divisor(inner) if small else (np.uint32(0), np.int32(0))
    sm, ss = _divisor(n_t * inner) if small else (np.uint32(0), np.int32(0))
    return (n_t, inner, small, im, is_, sm, ss)


# Every kernel takes all its arrays raw and runs on a quarter of the elements: thread i handles
# elements i + k * q (k < ILP, q = the launch's size), reading all of them before it computes and
# writes any. One element a thread keeps too few loads in flight to stream at an H200's bandwidth
# (CuPy's own ``x * 0.1`` takes 2.4 times a copy's time there, these passes about one copy's:
# docs/guide/signal.md); each of the ILP loads is coalesced across the warp.
ILP = 4
_EACH = "#pragma unroll\n    for (int k_ = 0; k_ < " + str(ILP) + "; ++k_)"
_HEAD = f"""
    const ptrdiff_t q_ = _ind.size();
    bool ok[{ILP}];
    ptrdiff_t at[{ILP}];
"""
# position of this thread's k_-th element (clamped into the array: its loads are masked after)
_AT = """
        at[k_] = i + k_ * q_;
        ok[k_] = at[k_] < n;
        const ptrdiff_t j = ok[k_] ? at[k_] : 0;
"""


def _geometry(shape, axis):
    """(n_t, inner): the length of ``axis`` and the number of elements after it."""
    return int(shape[axis]), int(np.prod(shape[axis + 1:], dtype=np.int64))


@functools.lru_cache(maxsize=None)
def _kernel(name, params, outputs, body):
    """The :class:`cupy.ElementwiseKernel` of one of the sources below, built once."""
    import cupy

    return cupy.ElementwiseKernel(params, outputs, body, "scanarray_" + name, preamble=_PREAMBLE)


def _launch(kernel, ins, outs):
    """``kernel`` on inputs ``ins`` (but its last, the element count) writing ``outs``:
    ``ceil(n / ILP)`` threads (the kernels' ``size``). C-contiguous arrays go as 1-D views, which
    CuPy indexes by a multiply where it divides by the shape for more axes."""
    n = outs[0].size
    flat = [x.reshape(-1) if getattr(x, "ndim", 0) > 1 and x.flags.c_contiguous else x for x in (*ins, *outs)]
    kernel(*flat[:len(ins)], np.int64(n), *flat[len(ins):], size=-(-n // ILP))


def _fir_source(complex_src):
    # The sample at position j: the signal itself, or the real part of c * h, the output of a
    # complex-pole section (signal.py), whose product is never stored.
    s = "(cr * (R)src[{j}].real() - ci * (R)src[{j}].imag())" if complex_src else "(R)src[{j}]"
    return (
        "fir_complex" if complex_src else "fir",
        "raw S src, raw R zi, float64 b0_, float64 b1_, float64 b2_, float64 cr_, float64 ci_, "
        "int64 K, " + _WHERE + ", int64 n",
        "raw R v",
        _HEAD + f"""
    const R b0 = b0_, b1 = b1_, b2 = b2_, cr = cr_, ci = ci_;
    const bool where = b1 != R(0) || b2 != R(0) || K > 0;  // (one tap alone needs no position)
    R s0[{ILP}], s1[{ILP}], s2[{ILP}], z[{ILP}];
    ptrdiff_t tt[{ILP}];
    {_EACH} {{{_AT}
        ptrdiff_t in_ = 0, t = K, out_ = 0;
        if (where) {_POS}
        tt[k_] = t;
        s0[k_] = {s.format(j="j")};
        s1[k_] = b1 != R(0) && t >= 1 ? {s.format(j="j - inner")} : R(0);
        s2[k_] = b2 != R(0) && t >= 2 ? {s.format(j="j - 2 * inner")} : R(0);
        z[k_] = t < K ? zi[(out_ * K + t) * inner + in_] : R(0);  // zi: (outer, K, inner)
    }}
    {_EACH} {{
        if (!ok[k_]) continue;
        // SciPy's order of the sum; a zero tap adds nothing (not 0 * inf)
        R acc = b0 * s0[k_];
        if (b1 != R(0) && tt[k_] >= 1) acc += b1 * s1[k_];
        if (b2 != R(0) && tt[k_] >= 2) acc += b2 * s2[k_];
        if (tt[k_] < K) acc += z[k_];
        v[at[k_]] = acc;
    }}
    """,
    )


# The loop's expressions in its order (rl.py): delta = ((gamma * V') * nonterminal + r) - v,
# a = nonterminal * (gamma * lam); V' = v[t+1], or the bootstrap value after the last step.
_GAE = (
    "gae_terms",
    "raw R r, raw R v, raw D d, raw R boot, float64 g_, float64 gl_, bool has_boot, " + _WHERE + ", int64 n",
    "raw R delta, raw R a",
    _HEAD + f"""
    const R g = g_, gl = gl_;
    R rr[{ILP}], vv[{ILP}], nt[{ILP}], vn[{ILP}];
    {_EACH} {{{_AT}
        ptrdiff_t in_, t, out_;
        {_POS}
        rr[k_] = r[j];
        vv[k_] = v[j];
        nt[k_] = R(1) - (R)d[j];
        vn[k_] = t + 1 < n_t ? v[j + inner] : (has_boot ? boot[out_ * inner + in_] : R(0));
    }}
    {_EACH} {{
        if (!ok[k_]) continue;
        delta[at[k_]] = (g * vn[k_]) * nt[k_] + rr[k_] - vv[k_];
        a[at[k_]] = nt[k_] * gl;
    }}
    """,
)

# The terms of the scan with Gymnasium's truncations, the loop's expressions in its order
# (rl.py): with values, delta = ((gamma * nv) * bootstraps + r) - v, where bootstraps is
# 1 - terminated (or 1 - d without terminated); without (the returns), r + (gamma * (d * (1 -
# terminated))) * nv; a = (1 - d) * (gamma * lam). Flags read in their own dtypes.
_TRUNCATIONS = (
    "truncation_terms",
    "raw R r, raw R v, raw D d, raw R nv, raw E tm, float64 g_, float64 gl_, bool has_v, bool has_term, int64 n",
    "raw R b, raw R a",
    _HEAD + f"""
    const R g = g_, gl = gl_;
    R rr[{ILP}], vv[{ILP}], nn[{ILP}], dd[{ILP}], tt[{ILP}];
    {_EACH} {{{_AT}
        rr[k_] = r[j];
        vv[k_] = has_v ? v[j] : R(0);
        nn[k_] = nv[j];
        dd[k_] = (R)d[j];
        tt[k_] = has_term ? (R)tm[j] : R(0);
    }}
    {_EACH} {{
        if (!ok[k_]) continue;
        const R nt = R(1) - dd[k_];
        b[at[k_]] = has_v ? (g * nn[k_]) * (has_term ? R(1) - tt[k_] : nt) + rr[k_] - vv[k_]
                          : rr[k_] + (g * (dd[k_] * (R(1) - tt[k_]))) * nn[k_];
        a[at[k_]] = nt * gl;
    }}
    """,
)

# (1 - d) * gamma: rl.py's order; d read in its own dtype (bool: one byte an element)
_NOT_DONE = (
    "not_done",
    "raw D d, float64 g_, int64 n",
    "raw R a",
    _HEAD + f"""
    R nt[{ILP}];
    {_EACH} {{{_AT}
        nt[k_] = R(1) - (R)d[j];
    }}
    {_EACH} {{
        if (ok[k_]) a[at[k_]] = nt[k_] * (R)g_;
    }}
    """,
)

# _ewm.py's order: (x[t] - m[t-1]) squared, then weighted; the weight is a vector along time for
# the first K steps (the head), then one number (the tail: the weights' fixed point)
_WEIGHTED_SQUARE = (
    "weighted_square",
    "raw R x, raw R m, raw R head, float64 tail_, bool has_tail, int64 K, " + _WHERE + ", int64 n",
    "raw R e",
    _HEAD + f"""
    R xx[{ILP}], mm[{ILP}], w[{ILP}];
    ptrdiff_t tt[{ILP}];
    {_EACH} {{{_AT}
        ptrdiff_t in_, t, out_;
        {_POS}
        tt[k_] = t;
        xx[k_] = x[j];
        mm[k_] = t > 0 ? m[j - inner] : R(0);
        w[k_] = t == 0 ? R(0) : t < K ? head[t] : (has_tail ? (R)tail_ : R(1));
    }}
    {_EACH} {{
        if (!ok[k_]) continue;
        const R d = xx[k_] - mm[k_];
        e[at[k_]] = tt[k_] == 0 ? R(0) : (d * d) * w[k_];
    }}
    """,
)


def fir(src, axis, taps, zl=None, c=None, dtype=None):
    """``v[t] = taps[0] s[t] + taps[1] s[t-1] + taps[2] s[t-2]`` (``s[t < 0] = 0``) plus ``zl[k]``
    at ``t = k``, in one pass: ``s`` is ``src`` (real), or ``Re(c * src)`` for a complex ``src``.

    ``taps``: up to three real Python numbers; ``zl``: None or a list of arrays of ``src``'s
    shape without ``axis`` (``zl[k]`` enters at ``t = k``); ``dtype``: the real dtype of ``v``
    (default ``src``'s real dtype). Returns a new C-contiguous array of ``src``'s shape.
    """
    import cupy

    if len(taps) > 3:
        raise ValueError(f"fir takes up to three taps; got {len(taps)}")
    taps = [float(t) for t in taps] + [0.0] * (3 - len(taps))
    complex_src = src.dtype.kind == "c"
    rdt = np.dtype(dtype) if dtype is not None else np.finfo(src.dtype).dtype
    shape = tuple(src.shape)
    K = 0 if not zl else len(zl)
    if K:
        # (outer, K, inner): the initial values of each lane side by side (a few numbers a lane)
        zi = cupy.ascontiguousarray(cupy.stack([cupy.asarray(z, dtype=rdt) for z in zl], axis=axis))
    else:
        zi = cupy.zeros(1, dtype=rdt)
    cc = complex(1.0 if c is None else c)
    v = cupy.empty(shape, dtype=rdt)
    if not v.size:
        return v
    _launch(_kernel(*_fir_source(complex_src)),
            (src, zi, taps[0], taps[1], taps[2], cc.real, cc.imag, K, *_where(v, axis)), (v,))
    return v


def gae_terms(r, v, d, gamma, lam, boot, axis):
    """GAE's ``delta`` and its scan coefficient ``gamma * lam * (1 - d)`` in one pass: reads
    ``r``, ``v`` (and ``v[t+1]``), ``d`` (bool or numbers, read as they are) once each.

    ``r``, ``v``, ``d`` of one shape (``v`` of ``r``'s dtype); ``boot``: None or an array
    broadcastable to the lanes (the shape without ``axis``); ``gamma``, ``lam`` Python floats.
    Returns ``(delta, a)``, new C-contiguous arrays.
    """
    import cupy

    lanes = tuple(r.shape[:axis]) + tuple(r.shape[axis + 1:])
    if boot is None:
        b = r  # (never read: any array of r's dtype stands in)
    else:
        b = cupy.ascontiguousarray(cupy.broadcast_to(cupy.asarray(boot, dtype=r.dtype), lanes))
    delta = cupy.empty(r.shape, dtype=r.dtype)
    a = cupy.empty(r.shape, dtype=r.dtype)
    d = cupy.broadcast_to(d, r.shape)  # (a view: the kernel indexes d by r's positions)
    if r.size:
        _launch(_kernel(*_GAE), (r, v, d, b, float(gamma), float(gamma) * float(lam), boot is not None,
                                 *_where(r, axis)), (delta, a))
    return delta, a


def truncation_terms(r, v, d, nv, term, gamma, lam):
    """The reverse scan's ``(b, a)`` with Gymnasium's truncations in one pass: GAE's ``delta``
    (``v`` given; bootstrapping from ``nv``, except where ``term`` is set when it is given), or
    the returns' rewards plus ``gamma * nv`` at truncated steps (``v`` None, ``term`` given); and
    ``a = (1 - d) * gamma * lam``. Arrays of ``r``'s shape (``v``, ``nv`` of its dtype; the flags
    ``d`` and ``term`` read as they are); ``gamma``, ``lam`` Python floats. New C-contiguous arrays."""
    import cupy

    b = cupy.empty(r.shape, dtype=r.dtype)
    a = cupy.empty(r.shape, dtype=r.dtype)
    if r.size:
        _launch(_kernel(*_TRUNCATIONS), (r, r if v is None else v, d, nv, d if term is None else term, float(gamma),
                                         float(gamma) * float(lam), v is not None, term is not None), (b, a))
    return b, a


def not_done(d, gamma, dtype):
    """``gamma * (1 - d)`` as a new array of ``dtype``, reading ``d`` once in its own dtype."""
    import cupy

    a = cupy.empty(d.shape, dtype=dtype)
    if a.size:
        _launch(_kernel(*_NOT_DONE), (d, float(gamma)), (a,))
    return a


def weighted_square(x, m, axis, head, tail):
    """``e[t] = w[t] * (x[t] - m[t-1])**2`` with ``e[0] = 0`` in one pass: ``w`` is ``head`` (a 1-D
    array of ``x``'s dtype) for the first ``len(head)`` steps, then ``tail`` (a number, or None
    for 1). ``m`` of ``x``'s shape and dtype. Returns a new C-contiguous array."""
    import cupy

    e = cupy.empty(x.shape, dtype=x.dtype)
    if e.size:
        _launch(_kernel(*_WEIGHTED_SQUARE), (x, m, cupy.ascontiguousarray(head, dtype=x.dtype),
                                             0.0 if tail is None else float(tail), tail is not None,
                                             int(head.shape[0]), *_where(e, axis)), (e,))
    return e
