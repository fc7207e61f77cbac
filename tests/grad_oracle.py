"""The independent oracle for gradients: central differences of the extended-precision loop.

``h`` is affine in every single element of ``a``, ``b`` and ``initial`` (each product term of
``h[t]`` holds a given ``a[s]`` at most once), so a central difference with any step is exact up to
rounding: with the loop in ``longdouble`` and a step of 1 the oracle is exact to ~1e-18 relative. A
broadcast input's gradient is the sum of its expanded copies' gradients (the chain rule of
broadcasting), so the differences run on the expanded arrays and are summed. Nothing here calls
scanarray.
"""

from __future__ import annotations

import numpy as np

from oracle import dense_ref, recurrence_ref

__all__ = ["assert_grad_close", "fd_grads", "loop_h", "zero_the_vjp"]


def loop_h(a, b, initial=None, axis=-1, reverse=False, dense=False):
    """The extended-precision loop's ``h`` (no scanarray)."""
    if dense:
        return dense_ref(a, b, axis, initial, reverse)[0]
    return recurrence_ref(a, b, axis, initial, reverse)[0]


def _shapes(a, b, axis, dense):
    a, b = np.asarray(a), np.asarray(b)
    if dense:
        n = b.shape[-1]
        batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-1])
        shape = batch + (n,)
        ax = axis % len(batch)
        lanes = batch[:ax] + batch[ax + 1:] + (n,)
        return shape, batch + (n, n), lanes
    shape = np.broadcast_shapes(a.shape, b.shape)
    ax = axis % len(shape)
    return shape, shape, shape[:ax] + shape[ax + 1:]


def _sum_to(x, shape):
    lead = x.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(lead + i for i, n in enumerate(shape) if n == 1 and x.shape[lead + i] != 1)
    return x.sum(axis=axes).reshape(shape) if axes else x.reshape(shape)


def fd_grads(a, b, w, initial=None, axis=-1, reverse=False, dense=False, conjugate=False):
    """(grad_a, grad_b, grad_initial) of ``L = sum(w * h)`` by central differences on the loop.

    ``conjugate=False``: the transpose ``sum(w * dh/dx)`` (JAX's convention); True:
    ``sum(w * conj(dh/dx))`` (PyTorch's). A real input gets the real part. Gradients come in
    ``clongdouble``/``longdouble``, of each input's own shape.
    """
    a_in, b_in = np.asarray(a), np.asarray(b)
    shape, a_full, lanes = _shapes(a_in, b_in, axis, dense)
    wide = np.clongdouble if any(np.iscomplexobj(x) for x in (a, b, initial, w) if x is not None) else np.longdouble
    A = np.broadcast_to(a_in.astype(wide), a_full)
    B = np.broadcast_to(b_in.astype(wide), shape)
    I0 = None if initial is None else np.broadcast_to(np.asarray(initial).astype(wide), lanes)
    W = np.asarray(w).astype(wide)

    def grads_of(x, which):
        k = x.size
        # every perturbation at once: a leading axis of length k, each slice with one element moved
        E = np.eye(k, dtype=wide).reshape((k,) + x.shape)
        out = []
        for sign in (1, -1):
            # the others get the leading axis too (broadcast views)
            args = {n: None if y is None else np.broadcast_to(y[None], (k,) + y.shape)
                    for n, y in (("a", A), ("b", B), ("i", I0))}
            args[which] = x[None] + sign * E
            h = loop_h(args["a"], args["b"], args["i"], axis if axis < 0 else axis + 1, reverse, dense)
            out.append(h)
        d = (out[0] - out[1]) / 2  # dh / dx_k, for every k (leading axis)
        d = np.broadcast_to(d, (k,) + shape)
        term = d.conj() if conjugate else d
        return np.sum(W[None] * term, axis=tuple(range(1, 1 + len(shape)))).reshape(x.shape)

    def real_if(x_in, g):
        return g if np.iscomplexobj(x_in) else g.real

    ga = _sum_to(grads_of(np.array(A), "a"), a_in.shape)
    gb = _sum_to(grads_of(np.array(B), "b"), b_in.shape)
    gi = None
    if initial is not None:
        gi = real_if(initial, _sum_to(grads_of(np.array(I0), "i"), np.shape(initial)))
    return real_if(a, ga), real_if(b, gb), gi


def assert_grad_close(got, ref, rtol, what=""):
    """``max |got - ref| <= rtol * max |ref|`` (and the same shape): an all-zero, shifted or
    conjugated gradient fails wherever the reference is not itself zero."""
    got = np.asarray(got)
    ref = np.asarray(ref)
    assert got.shape == ref.shape, f"{what}: shape {got.shape} != {ref.shape}"
    scale = float(np.max(np.abs(ref))) if ref.size else 0.0
    err = float(np.max(np.abs(got.astype(ref.dtype) - ref))) if ref.size else 0.0
    assert err <= rtol * scale + 1e-300, f"{what}: max error {err:.3g} > {rtol:.1g} * {scale:.3g}"


def zero_the_vjp(monkeypatch):
    """Make scanarray's adjoint write zeros into every gradient (it still runs): for the tests that
    show a wrong gradient fails the checks. The front-ends' bound one-pass adjoints are switched
    off, so that every backward goes through ``vjp_into``."""
    import sys

    from scanarray import _vjp

    monkeypatch.setattr(_vjp, "_shifted_adjoint", lambda *args: False)
    for name, tables in (("scanarray._torch", ("_FAST", "_BWD")), ("scanarray._jax", ("_RAW",))):
        mod = sys.modules.get(name)
        for t in tables if mod is not None else ():
            monkeypatch.setattr(mod, t, {})
    real = _vjp.vjp_into

    def zero(*args, **kw):
        outs = real(*args, **kw)
        for o in outs:
            if o is not None:
                o[...] = 0
        return outs

    monkeypatch.setattr(_vjp, "vjp_into", zero)
