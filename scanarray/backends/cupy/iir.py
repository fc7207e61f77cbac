"""The cascade kernel (``cuda/iir.cu``): :func:`scanarray.signal.sosfilt` of a CuPy signal.

Each thread of the kernel runs a section sample by sample over a chunk of the signal; the state
crosses chunks, warps and blocks through the powers of its one-step transition, which this module
forms on the host (float64, cached per filter) and uploads once per device. A section is one
launch of one pass, each block's incoming state found by decoupled look-back: one read and one
write of the signal, where the diagonal method pays a numerator pass and a complex scan, reading
and writing complex numbers (docs/guide/signal.md, "Methods and their accuracy" and "Speed").

The state is kept in the modal form of each section (the diagonal method's): the section's last
two inputs, and its poles as one complex state or two cascaded real ones. The direct forms'
transitions grow through a transient before they decay when poles crowd z = 1, and carrying
their state by powers cost up to 1e-8 of the output in float64 on the designs of
``tests/test_signal.py``; the modal form keeps the diagonal method's 1e-10.
"""

from __future__ import annotations

import functools
import math
import threading

import numpy as np

from ... import _dtypes
from . import _common
from .tuning import TUNING

__all__ = ["instantiations", "sosfilt"]

_REAL = ("float32", "float64")


def instantiations(dtype=None, tuning=TUNING):
    """Every kernel (cuda/iir.cu) the driver can name, for ``dtype`` (default: both real dtypes;
    for tools/compile_cuda.py)."""
    return [f"scanarray::iir::iir_pass<{_dtypes.ctype(name)}, 1, {threads}, {chunk}>"
            for name in ((dtype,) if dtype else _REAL) for threads, chunk in [tuning["iir"][np.dtype(name).itemsize]]]


def _uniform(bn, an):
    """A section's ten coefficients (cuda/iir.cu, ``COEF``): ``v = b0 u + b1 u[t-1] + b2 u[t-2]``,
    then the poles ``n0 = m00 s0 + m01 s1 + v``, ``n1 = m11 s1 + m10 s0 + k n0`` and the output
    ``c0 n0 + c1 n1``: a complex pair ``p`` as ``h = p h + v``, ``y = Re(c h)`` with
    ``c = 2p / (p - conj(p))``; two real poles as ``g1 = p1 g1 + v``, ``y = g2 = p2 g2 + g1``; one
    real pole; none (``y = v``). The same split of the poles as :func:`scanarray.signal._section`."""
    b0, b1, b2 = (list(bn) + [0.0, 0.0])[:3]
    a1, a2 = (list(an) + [0.0, 0.0])[1:3]
    m00 = m01 = m10 = m11 = k = c1 = 0.0
    c0 = 1.0
    if a2 != 0.0:
        disc = a1 * a1 - 4.0 * a2
        if disc < 0.0:
            p = complex(-a1 / 2.0, math.sqrt(-disc) / 2.0)
            c = p / (p - p.conjugate()) * 2.0
            m00, m01, m10, m11 = p.real, -p.imag, p.imag, p.real
            c0, c1 = c.real, -c.imag
        else:
            sq = math.sqrt(disc)
            p1 = (-a1 - math.copysign(sq, a1)) / 2.0
            m00, m11, k, c0, c1 = p1, a2 / p1, 1.0, 0.0, 1.0
    elif a1 != 0.0:
        m00 = -a1
    return (b0, b1, b2, m00, m01, m10, m11, k, c0, c1)


def _run(coefs, xs, x1, x2, s, inj=(), ys=None):
    """The kernel's ``step`` over samples ``xs`` from state ``s`` (float64, each argument with a
    trailing axis of independent columns), ``inj[t][q]`` added to section ``q``'s numerator at
    step ``t``: the state after the last sample (the outputs appended to list ``ys``)."""
    s = s.copy()
    for t, u in enumerate(xs):
        d1, d2 = x1, x2
        x2, x1 = x1, u
        for q, (b0, b1, b2, m00, m01, m10, m11, k, c0, c1) in enumerate(coefs):
            o = 4 * q
            if q > 0:
                d1, d2 = s[o - 2].copy(), s[o - 1].copy()
                s[o - 1], s[o - 2] = d1, u
            v = b0 * u + b1 * d1 + b2 * d2
            if t < len(inj):
                v = v + inj[t][q]
            n0 = m00 * s[o] + m01 * s[o + 1] + v
            n1 = m11 * s[o + 1] + m10 * s[o] + k * n0
            s[o], s[o + 1] = n0, n1
            u = c0 * n0 + c1 * n1
        if ys is not None:
            ys.append(u)
    return s


@functools.lru_cache(maxsize=128)
def _table(coefs, threads, chunk):
    """The kernel's ``tab`` (float64 whatever the signal's type: the carries are): the
    coefficients; the state's transitions over 1, 2, 4, 8, 16 chunks, a warp's 32 and a block's
    span (``A^k`` by squaring the one-step transition); ``G``, a chunk's zero-state end state as a
    linear map of its samples and the two before it (N x (chunk + 2)); ``Z``, the end state of a
    row's first chunk from the initial delays injected at t = 0, 1 (N x 2 sections)."""
    ns = len(coefs)
    n = 4 * ns - 2
    zero = np.zeros(n)
    A = _run(coefs, [zero], zero, zero, np.eye(n))
    mats = [np.linalg.matrix_power(A, chunk)]
    for _ in range(5):
        mats.append(mats[-1] @ mats[-1])
    mats.append(np.linalg.matrix_power(mats[5], threads // 32))
    m = chunk + 2
    unit = np.eye(m)
    G = _run(coefs, list(unit[:chunk]), unit[chunk], unit[chunk + 1], np.zeros((n, m)))
    unit = np.eye(2 * ns)  # column 2 q + t: a unit injection into section q at step t
    zeros = np.zeros(2 * ns)
    inj = [[unit[2 * q + t] for q in range(ns)] for t in (0, 1)]
    Z = _run(coefs, [zeros] * chunk, zeros, zeros, np.zeros((n, 2 * ns)), inj)
    return np.concatenate([np.asarray(coefs, np.float64).ravel()] + [x.ravel() for x in mats + [G, Z]])


_lock = threading.Lock()
_device_tables: dict = {}


def _on_device(cupy, make, *key):
    """``make(*key)`` (a host table) on the current device, uploaded once (a few kilobytes)."""
    full = (cupy.cuda.Device().id, make) + key
    tab = _device_tables.get(full)
    if tab is None:
        tab = cupy.asarray(make(*key))
        with _lock:
            if len(_device_tables) >= 256:
                _device_tables.clear()
            _device_tables[full] = tab
    return tab


def _kernel(dtype, tuning):
    threads, chunk = tuning["iir"][np.dtype(dtype).itemsize]
    name = instantiations(dtype, tuning)[0]
    return _common.get_function("iir.cu", name), threads, chunk


def sosfilt(x, sections, zi, tuning=TUNING):
    """``(y, zf)``: the cascade ``sections`` (normalised ``(b, a)`` lists of real numbers) over
    the last axis of CuPy array ``x`` (float32 or float64, two samples or more:
    ``scanarray.signal._gpu_cascade_applies``); ``zi`` None or of shape ``(rows, n_sections, 2)`` for
    ``x`` seen as ``(rows, L)``, SciPy's initial delays, with ``zf`` the same (else None).
    ``y`` is a new C-contiguous array of ``x``'s shape. ``tuning``: the backend's table (its block
    shapes). One launch a section, in order."""
    import cupy

    shape, L = x.shape, x.shape[-1]
    dt = x.dtype
    x2 = x.reshape(-1, L)
    if x2.strides[-1] != dt.itemsize:
        x2 = cupy.ascontiguousarray(x2)
    rows = x2.shape[0]
    zf = None if zi is None else cupy.empty((rows, len(sections), 2), dt)
    from .scan import _workspace

    kernel, threads, chunk = _kernel(dt.name, tuning)
    nb = -(-L // (threads * chunk))
    rs_y = np.int64(L)
    for q, section in enumerate(sections):
        coefs = (_uniform(*section),)
        tab = _on_device(cupy, _table, coefs, threads, chunk)
        y2 = cupy.empty((rows, L), dt)
        zq = tails = None
        if zi is not None:
            zq = cupy.ascontiguousarray(zi[:, q:q + 1].astype(dt, copy=False))
            tails = cupy.empty((rows, 1, 2), dt)
        ws = _workspace(cupy, 32, rows * nb)  # a status of 2 float64 numbers: 32 bytes (cuda/lookback.cuh)
        with ws.launching():  # (pointers as ints: one packed launcher whether zi is given or not)
            _common.launch(cupy, kernel, rows * nb, threads, (
                x2.data.ptr, y2.data.ptr, np.int64(x2.strides[0] // dt.itemsize), rs_y, np.int64(L), np.int32(nb),
                tab.data.ptr, 0 if zq is None else zq.data.ptr, 0 if tails is None else tails.data.ptr, ws.ptr,
                np.uint32(ws.epoch)))
        if zi is not None:
            _final_delays(cupy, [section], tails, y2, zf[:, q:q + 1])
        x2 = y2
    return x2.reshape(shape), zf


def _final_delays(xp, group, tails, y2, out):
    """SciPy's final delays of each section from its last two inputs (``tails``) and outputs (the
    next section's inputs, the last one's from ``y2``): ``z1 = b1 u1 + b2 u2 - a1 y1 - a2 y2``,
    ``z2 = b2 u1 - a2 y1``, with the coefficients as Python numbers (no copy to the device)."""
    ys = xp.concatenate([tails[:, 1:], y2[:, None, -1:-3:-1]], axis=1)  # (rows, ns, 2): y at L-1, L-2
    for q, (bn, an) in enumerate(group):
        _, b1, b2 = (list(bn) + [0.0, 0.0])[:3]
        _, a1, a2 = (list(an) + [0.0, 0.0])[:3]
        u1, u2, y1, y2_ = tails[:, q, 0], tails[:, q, 1], ys[:, q, 0], ys[:, q, 1]
        out[:, q, 0] = b1 * u1 + b2 * u2 - a1 * y1 - a2 * y2_
        out[:, q, 1] = b2 * u1 - a2 * y1
