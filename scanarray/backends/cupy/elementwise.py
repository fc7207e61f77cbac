"""Fused elementwise passes of the users' vocabulary (:mod:`scanarray.signal`, :mod:`scanarray.rl`,
:mod:`scanarray._ewm`) on CuPy arrays.

Those helpers are written against any array namespace, where an IIR section's numerator or
GAE's ``delta`` is a product, a shifted temporary and in-place sums: a pass over memory each.
On the GPU they are bound by memory traffic, so each is one :class:`cupy.ElementwiseKernel`
here, which reads its inputs once and writes its outputs once. A neighbour along time is read
by index arithmetic on the raw input (``x[i - k * inner]``: CuPy indexes a raw array by the
C-order index of its own shape, through its strides, so any layout works without a copy).

Every kernel is built once per signature by CuPy and cached (memory and disk). The callers pick
these functions with :func:`scanarray._vocab.fused` and fall back to the namespace's operations
elsewhere; the counts of passes are in docs/guide/signal.md, rl.md and ewm.md.
"""

from __future__ import annotations

import functools

import numpy as np

__all__ = ["fir", "gae_terms", "not_done", "weighted_square"]

# Element i of an array of shape (outer, n_t, inner) (C order) is at (out_, t, in_). In 32-bit
# arithmetic where the size allows: a 64-bit division costs the GPU several times a 32-bit one,
# enough to make these memory-bound passes compute-bound (the "gpu parts" of bench_helpers.py).
_POSITION = """
    ptrdiff_t in_, t, out_;
    if (small) {
        const unsigned int u = (unsigned int)i, ui = (unsigned int)inner, un = (unsigned int)n_t, q = u / ui;
        in_ = u - q * ui; t = q % un; out_ = q / un;
    } else {
        in_ = i % inner; t = (i / inner) % n_t; out_ = i / (inner * n_t);
    }
"""


def _small(x):
    """Whether every index of ``x`` fits the 32-bit arithmetic of ``_POSITION``."""
    return x.size < 2**32


def _geometry(shape, axis):
    """(n_t, inner): the length of ``axis`` and the number of elements after it."""
    return int(shape[axis]), int(np.prod(shape[axis + 1:], dtype=np.int64))


@functools.lru_cache(maxsize=None)
def _kernel(name, params, outputs, body):
    """The :class:`cupy.ElementwiseKernel` of one of the sources below, built once."""
    import cupy

    return cupy.ElementwiseKernel(params, outputs, body, "scanarray_" + name)


def _fir_source(complex_src):
    # The sample at position j: the signal itself, or the real part of c * h, the output of a
    # complex-pole section (signal.py), whose product is never stored.
    s = "(cr * (R)src[{j}].real() - ci * (R)src[{j}].imag())" if complex_src else "(R)src[{j}]"
    return (
        "fir_complex" if complex_src else "fir",
        "raw S src, raw R zi, float64 b0_, float64 b1_, float64 b2_, float64 cr_, float64 ci_, "
        "int64 n_t, int64 inner, int64 K, bool small",
        "R v",
        _POSITION + f"""
        const R b0 = b0_, b1 = b1_, b2 = b2_, cr = cr_, ci = ci_;
        // SciPy's order of the sum; a zero tap adds nothing (not 0 * inf)
        R acc = b0 * {s.format(j="i")};
        if (b1 != R(0) && t >= 1) acc += b1 * {s.format(j="i - inner")};
        if (b2 != R(0) && t >= 2) acc += b2 * {s.format(j="i - 2 * inner")};
        if (t < K) acc += zi[(out_ * K + t) * inner + in_];  // zi: (outer, K, inner)
        v = acc;
        """,
    )


# The loop's expressions in its order (rl.py): delta = ((gamma * V') * nonterminal + r) - v,
# a = nonterminal * (gamma * lam); V' = v[t+1], or the bootstrap value after the last step.
_GAE = (
    "gae_terms",
    "R r, raw R v, D d, raw R boot, float64 g_, float64 gl_, int64 n_t, int64 inner, bool has_boot, bool small",
    "R delta, R a",
    _POSITION + """
    const R g = g_, gl = gl_;
    const R nt = R(1) - (R)d;
    const R vn = t + 1 < n_t ? v[i + inner] : (has_boot ? boot[out_ * inner + in_] : R(0));
    delta = (g * vn) * nt + r - v[i];
    a = nt * gl;
    """,
)

# (1 - d) * gamma: rl.py's order; d read in its own dtype (bool: one byte an element)
_NOT_DONE = ("not_done", "D d, float64 g_", "R a", "a = (R(1) - (R)d) * (R)g_")

# _ewm.py's order: (x[t] - m[t-1]) squared, then weighted; the weight is a vector along time for
# the first K steps (the head), then one number (the tail: the weights' fixed point)
_WEIGHTED_SQUARE = (
    "weighted_square",
    "R x, raw R m, raw R head, float64 tail_, bool has_tail, int64 n_t, int64 inner, int64 K, bool small",
    "R e",
    _POSITION + """
    if (t == 0) {
        e = R(0);
    } else {
        const R d = x - m[i - inner];
        e = (d * d) * (t < K ? head[t] : (has_tail ? (R)tail_ : R(1)));
    }
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
    T, inner = _geometry(shape, axis)
    K = 0 if not zl else len(zl)
    if not (K or complex_src or taps[1] or taps[2]) and src.dtype == rdt:
        # one tap: CuPy's own product, without the index arithmetic of the neighbours
        return cupy.multiply(src, taps[0], out=cupy.empty(shape, dtype=rdt))
    if K:
        # (outer, K, inner): the initial values of each lane side by side (a few numbers a lane)
        zi = cupy.ascontiguousarray(cupy.stack([cupy.asarray(z, dtype=rdt) for z in zl], axis=axis))
    else:
        zi = cupy.zeros(1, dtype=rdt)
    cc = complex(1.0 if c is None else c)
    v = cupy.empty(shape, dtype=rdt)
    if not v.size:
        return v
    _kernel(*_fir_source(complex_src))(src, zi, taps[0], taps[1], taps[2], cc.real, cc.imag, T, inner, K, _small(v), v)
    return v


def gae_terms(r, v, d, gamma, lam, boot, axis):
    """GAE's ``delta`` and its scan coefficient ``gamma * lam * (1 - d)`` in one pass: reads
    ``r``, ``v`` (and ``v[t+1]``), ``d`` (bool or numbers, read as they are) once each.

    ``r``, ``v``, ``d`` of one shape (``v`` of ``r``'s dtype); ``boot``: None or an array
    broadcastable to the lanes (the shape without ``axis``); ``gamma``, ``lam`` Python floats.
    Returns ``(delta, a)``, new C-contiguous arrays.
    """
    import cupy

    n_t, inner = _geometry(r.shape, axis)
    lanes = tuple(r.shape[:axis]) + tuple(r.shape[axis + 1:])
    if boot is None:
        b = cupy.zeros(1, dtype=r.dtype)
    else:
        b = cupy.ascontiguousarray(cupy.broadcast_to(cupy.asarray(boot, dtype=r.dtype), lanes))
    delta = cupy.empty(r.shape, dtype=r.dtype)
    a = cupy.empty(r.shape, dtype=r.dtype)
    if r.size:
        _kernel(*_GAE)(r, v, d, b, float(gamma), float(gamma) * float(lam), n_t, inner, boot is not None, _small(r),
                       delta, a)
    return delta, a


def not_done(d, gamma, dtype):
    """``gamma * (1 - d)`` as a new array of ``dtype``, reading ``d`` once in its own dtype."""
    import cupy

    a = cupy.empty(d.shape, dtype=dtype)
    if a.size:
        _kernel(*_NOT_DONE)(d, float(gamma), a)
    return a


def weighted_square(x, m, axis, head, tail):
    """``e[t] = w[t] * (x[t] - m[t-1])**2`` with ``e[0] = 0`` in one pass: ``w`` is ``head`` (a 1-D
    array of ``x``'s dtype) for the first ``len(head)`` steps, then ``tail`` (a number, or None
    for 1). ``m`` of ``x``'s shape and dtype. Returns a new C-contiguous array."""
    import cupy

    n_t, inner = _geometry(x.shape, axis)
    e = cupy.empty(x.shape, dtype=x.dtype)
    if e.size:
        _kernel(*_WEIGHTED_SQUARE)(x, m, cupy.ascontiguousarray(head, dtype=x.dtype), 0.0 if tail is None else
                                  float(tail), tail is not None, n_t, inner, int(head.shape[0]), _small(e), e)
    return e
