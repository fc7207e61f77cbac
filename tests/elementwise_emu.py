"""A NumPy model of :mod:`scanarray.backends.cupy.elementwise`, kernel by kernel, for machines
without a GPU: the same index arithmetic on the logical C-order index ``i`` (``t``, ``in_``,
``out_``), the same reads of the raw inputs (a flat C-order copy), the same arithmetic in the
output's dtype. The tests route the vocabulary's fused hooks to it (``_vocab.fused``) so that the
plumbing around the kernels (which pass, which neighbour, zi, zf, the tails) is checked against
the oracles on a CPU, and the GPU tests then check the kernels themselves.
"""

from __future__ import annotations

import numpy as np


def _position(shape, axis):
    n_t = int(shape[axis])
    inner = int(np.prod(shape[axis + 1:], dtype=np.int64))
    i = np.arange(int(np.prod(shape, dtype=np.int64)))
    return i, i % inner, (i // inner) % n_t, i // (inner * n_t), n_t, inner


def _flat(x):
    return np.ascontiguousarray(x).reshape(-1)


def fir(src, axis, taps, zl=None, c=None, dtype=None):
    taps = [float(t) for t in taps] + [0.0] * (3 - len(taps))
    cplx = src.dtype.kind == "c"
    R = np.dtype(dtype) if dtype is not None else (src.real.dtype if cplx else src.dtype)
    i, in_, t, out_, n_t, inner = _position(src.shape, axis)
    cc = complex(1.0 if c is None else c)
    cr, ci = R.type(cc.real), R.type(cc.imag)
    s = _flat(src)

    def sample(j):
        v = s[j]
        return cr * v.real.astype(R) - ci * v.imag.astype(R) if cplx else v.astype(R)

    b = [R.type(x) for x in taps]
    acc = b[0] * sample(i)
    for k in (1, 2):
        if b[k] != 0:
            m = t >= k
            acc[m] += b[k] * sample(i[m] - k * inner)
    K = 0 if not zl else len(zl)
    if K:
        zi = _flat(np.stack([np.asarray(z, dtype=R) for z in zl], axis=axis))
        m = t < K
        acc[m] += zi[(out_[m] * K + t[m]) * inner + in_[m]]
    return acc.reshape(src.shape)


def gae_terms(r, v, d, gamma, lam, boot, axis):
    R = r.dtype
    i, in_, t, out_, n_t, inner = _position(r.shape, axis)
    g, gl = R.type(gamma), R.type(float(gamma) * float(lam))
    vf, rf = _flat(v), _flat(np.broadcast_to(r, r.shape))
    nt = R.type(1) - _flat(np.broadcast_to(d, r.shape)).astype(R)
    lanes = tuple(r.shape[:axis]) + tuple(r.shape[axis + 1:])
    bf = np.zeros(1, R) if boot is None else _flat(np.broadcast_to(np.asarray(boot, dtype=R), lanes))
    vn = np.zeros(i.shape, R)
    inside = t + 1 < n_t
    vn[inside] = vf[i[inside] + inner]
    if boot is not None:
        vn[~inside] = bf[out_[~inside] * inner + in_[~inside]]
    delta = (g * vn) * nt + rf - vf
    return delta.reshape(r.shape), (nt * gl).reshape(r.shape)


def truncation_terms(r, v, d, nv, term, gamma, lam):
    R = r.dtype
    g, gl = R.type(gamma), R.type(float(gamma) * float(lam))
    rf, nf = _flat(r), _flat(nv)
    df = _flat(d).astype(R)
    tf = np.zeros_like(rf) if term is None else _flat(term).astype(R)
    nt = R.type(1) - df
    if v is None:
        b = rf + (g * (df * (R.type(1) - tf))) * nf
    else:
        b = (g * nf) * (nt if term is None else R.type(1) - tf) + rf - _flat(v)
    return b.reshape(r.shape), (nt * gl).reshape(r.shape)


def not_done(d, gamma, dtype):
    R = np.dtype(dtype)
    return (R.type(1) - np.asarray(d).astype(R)) * R.type(gamma)


def weighted_square(x, m, axis, head, tail):
    R = x.dtype
    i, in_, t, out_, n_t, inner = _position(x.shape, axis)
    xf, mf, hf = _flat(x), _flat(m), _flat(np.asarray(head, dtype=R))
    K = hf.shape[0]
    w = np.full(i.shape, R.type(1) if tail is None else R.type(tail))
    w[t < K] = hf[t[t < K]]
    e = np.zeros(i.shape, R)
    m_ = t > 0
    d = xf[i[m_]] - mf[i[m_] - inner]
    e[m_] = (d * d) * w[m_]
    return e.reshape(x.shape)
