"""The adjoint of :func:`scanarray.linear_recurrence`: gradients for ``a``, ``b`` and ``initial``.

For ``h[t] = a[t] * h[t-1] + b[t]`` (``h[-1] = initial``) and an incoming gradient ``g = dL/dh``,
the gradient of ``b`` is itself a linear recurrence, run the other way with ``a`` shifted by one
step, and the others follow from it (the adjoint method; e.g. Martin & Cundy, "Parallelizing
linear recurrent neural nets over sequence length", ICLR 2018, section 2.2)::

    gb[t] = a[t+1] * gb[t+1] + g[t]        (gb[T-1] = g[T-1])
    ga[t] = gb[t] * h[t-1]                 (h[-1] = initial)
    gi    = a[0] * gb[0]

Dense form: ``gb[t] = A[t+1]^T gb[t+1] + g[t]``, ``gA[t] = gb[t] h[t-1]^T``, ``gi = A[0]^T gb[0]``.

No shifted copy is made. Where the backend can (``BackendSpec.shifted_adjoint``: the CuPy
kernels on rows), one launch scans all ``T`` steps of the caller's arrays as they lie, the
kernels reading each step's ``a[t+1]`` and ``h[t-1]`` one step away, and writes ``gb`` and ``ga``
(but ``ga[0]``, which needs ``initial``). Elsewhere the scan covers steps ``1 .. T-2``: its
coefficients are the view ``a[2:]``, its inputs ``g[1:-1]``, its initial state ``g[T-1]``, and
``ga[1:-1] = gb[1:-1] * h[:-2]`` is the scan's fused product (``Problem.mul``), all views of one
time range; steps ``0`` and ``T-1`` are lane-sized operations. ``reverse=True`` mirrors every
index.

Complex numbers: the formulas above are the transpose of the linear map (JAX's convention).
PyTorch's (conjugate Wirtinger) gradients are their conjugates applied to the conjugated
incoming gradient: ``conjugate=True`` computes those.
"""

from __future__ import annotations

import numpy as np

from . import _api, _registry
from ._frameworks import Shaped, check_flags

__all__ = ["linear_recurrence_vjp"]

_LETTERS = "abcdefghijklmnopqrstuvwx"


def linear_recurrence_vjp(a, h, grad, axis=-1, chunk=64, *, b=None, initial=None, reverse=False, dense=False,
                          conjugate=False, backend=None, method="auto"):
    r"""Gradients of :func:`linear_recurrence` for ``a``, ``b`` and ``initial`` (its VJP).

    Given the forward call's `a`, its result ``h = linear_recurrence(a, b, axis, initial=initial,
    reverse=reverse, dense=dense)`` and the gradient ``grad = dL/dh`` of some loss, returns
    ``dL/da``, ``dL/db`` and ``dL/dinitial``. The gradient for `b` is itself a linear recurrence,
    run the other way with `a` shifted by one step, and ``dL/da[t] = dL/db[t] * h[t-1]``; the same
    backends run it (NumPy, CuPy, Dask), and no shifted copy of any input is made. This is what the
    PyTorch and JAX front-ends call in their backward passes.

    Parameters
    ----------
    a : array_like or scalar
        The forward call's coefficients (any shape that broadcast there, a Python scalar).
    h : array
        The forward call's result.
    grad : array
        The gradient of the loss with respect to `h`: same shape as `h`.
    axis, chunk, reverse, dense, backend, method
        As in the forward call (`chunk`, `backend` and `method` choose how the adjoint scan runs).
    b : array, scalar or None, optional
        The forward call's `b`, of which only the shape and dtype are read (anything with
        ``shape`` and ``dtype`` will do): the gradient for `b` is summed over the axes along which
        `b` was broadcast. None: `b` had the result's shape.
    initial : array_like, optional
        The forward call's `initial` (None: it was zeros).
    conjugate : bool, optional
        For complex data: False gives the transpose of the linear map (JAX's convention), True
        its conjugate (PyTorch's). Real data: no difference.

    Returns
    -------
    grad_a, grad_b, grad_initial : arrays
        Each of its input's shape (a Python scalar or 0-d `a` gets a 0-d gradient) and dtype (the
        computation's dtype for Python scalars and integers; the real part for a real input of a
        complex recurrence). `grad_initial` is None when `initial` is None.

    Raises
    ------
    TypeError
        Mixed array libraries, unsupported dtypes.
    ValueError
        `grad` not of `h`'s shape, `a`, `b` or `initial` that do not broadcast to it.
    numpy.exceptions.AxisError
        `axis` out of range.

    See Also
    --------
    linear_recurrence : the forward scan.

    Notes
    -----
    With ``h[-1] = initial`` (``h[T]`` when `reverse`) the gradients are::

        grad_b[t] = a[t+1] * grad_b[t+1] + grad[t]      (grad_b[T-1] = grad[T-1])
        grad_a[t] = grad_b[t] * h[t-1]
        grad_initial = a[0] * grad_b[0]

    and for ``dense=True`` ``grad_b[t] = A[t+1]^T grad_b[t+1] + grad[t]``, ``grad_A[t] =
    grad_b[t] h[t-1]^T``, ``grad_initial = A[0]^T grad_b[0]``. On backends that fuse it, the
    product ``grad_b * h[t-1]`` is written in the scan's own pass.

    Examples
    --------
    The gradient of ``L = sum(w * h)`` agrees with finite differences:

    >>> import numpy as np
    >>> from scanarray import linear_recurrence, linear_recurrence_vjp
    >>> a = np.array([0.5, -0.8, 0.9]); b = np.array([1.0, 2.0, -1.0]); w = np.array([1.0, 2.0, 3.0])
    >>> h = linear_recurrence(a, b, initial=0.3)
    >>> ga, gb, gi = linear_recurrence_vjp(a, h, w, initial=0.3)
    >>> gb
    array([-2.76,  4.7 ,  3.  ])
    >>> eps = 1e-6  # h is affine in each a[t]: a one-sided difference is exact up to rounding
    >>> fd = (np.sum(w * linear_recurrence(a + [eps, 0, 0], b, initial=0.3)) - np.sum(w * h)) / eps
    >>> bool(np.isclose(ga[0], fd)), round(float(gi), 12)
    (True, -1.38)

    A scalar coefficient gets a scalar gradient:

    >>> ga, gb, _ = linear_recurrence_vjp(0.5, linear_recurrence(0.5, b), w)
    >>> ga.shape
    ()
    """
    a = _api._as_input(a, "a")
    h = _api._as_input(h, "h")
    grad = _api._as_input(grad, "grad")
    if initial is not None:
        initial = _api._as_input(initial, "initial")
    for x, name in ((h, "h"), (grad, "grad")):
        if not _api._is_array(x):
            raise TypeError(f"{name} must be an array (the forward result and its gradient); got {type(x).__name__}")
    kind, xp = _api._namespace(a, h, initial)
    try:
        kind_g = _api._namespace(grad, h, None)[0]
    except TypeError:
        kind_g = None
    if kind_g != kind:
        raise TypeError(f"grad is a {_api._library(grad)} array and h a {kind} array; pass arrays of one library")
    for x, name in ((a, "a"), (h, "h"), (grad, "grad"), (initial, "initial")):
        _api._check_dtype(x, name)
    chunk, reverse, dense = check_flags(chunk, reverse, dense)
    if not isinstance(conjugate, (bool, np.bool_)):
        raise TypeError(f"conjugate must be True or False; got {conjugate!r}")
    shape = tuple(h.shape)
    if tuple(grad.shape) != shape:
        raise ValueError(f"grad has shape {tuple(grad.shape)}; it must have h's shape {shape}")
    axis, a_shape, lanes = _check_shapes(a, shape, axis, dense)
    if initial is not None:
        _api._check_broadcast_to(_shaped(initial), lanes, "initial", "the result's shape with the time axis removed")
    b_shape, b_dtype = _b_info(b, shape)

    dt = _compute_dtype(a, h, grad, initial)
    if isinstance(a, _api._PYTHON_SCALARS):
        a = xp.asarray(a, dtype=dt, **_like(kind, h))
    if isinstance(initial, _api._PYTHON_SCALARS):
        initial = xp.asarray(initial, dtype=dt, **_like(kind, h))
    dtypes = (_grad_dtype(a, dt), b_dtype if b_dtype is not None else dt,
              None if initial is None else _grad_dtype(initial, dt))
    if kind == "dask":
        return _vjp_lazy(xp, a, h, grad, initial, axis, chunk, reverse, dense, bool(conjugate),
                         backend, method, dt, (a_shape, b_shape, None if initial is None else tuple(initial.shape)),
                         dtypes)
    outs = (xp.empty(a_shape, dtypes[0]), xp.empty(b_shape, dtypes[1]),
            None if initial is None else xp.empty(tuple(initial.shape), dtypes[2]))
    vjp_into(xp, a, h, grad, initial, axis, chunk, reverse, dense, bool(conjugate), backend, method,
             outs, dt)
    return outs


# --------------------------------------------------------------------------- validation


def _shaped(x):
    return x if _api._is_array(x) else np.asarray(x)


def _check_shapes(a, shape, axis, dense):
    """(axis normalised, a's shape, the lanes' shape), or the error naming what does not fit."""
    a_shape = tuple(np.shape(a)) if not _api._is_array(a) else tuple(a.shape)
    if dense:
        if len(shape) < 2:
            raise ValueError(f"dense=True: h must have shape (..., T, n); got {shape}")
        batch, n = shape[:-1], shape[-1]
        axis = _api._normalize_axis(axis, len(batch), f"the time/batch axes {batch} of h with shape {shape}")
        if len(a_shape) < 2 or a_shape[-2:] != (n, n):
            raise ValueError(f"dense=True: a must have shape (..., {n}, {n}); got {a_shape}")
        _api._check_broadcast_to(Shaped(a_shape[:-2]), batch, "a (all but its last two axes)",
                                 "the batch shape of h")
        return axis, a_shape, batch[:axis] + batch[axis + 1:] + (n,)
    axis = _api._normalize_axis(axis, len(shape), f"h of shape {shape}")
    _api._check_broadcast_to(Shaped(a_shape), shape, "a", "the shape of h")
    return axis, a_shape, shape[:axis] + shape[axis + 1:]


def _b_info(b, shape):
    """(shape, dtype or None) of the forward call's ``b`` as far as given."""
    if b is None:
        return shape, None
    if isinstance(b, _api._PYTHON_SCALARS):
        return (), None
    if not (hasattr(b, "shape") and hasattr(b, "dtype")):
        raise TypeError(f"b must be the forward call's b (or anything with its shape and dtype); got {type(b).__name__}")
    b_shape = tuple(b.shape)
    _api._check_broadcast_to(Shaped(b_shape), shape, "b", "the shape of h")
    try:
        b_dtype = np.dtype(b.dtype)
    except TypeError:  # a framework's dtype object: the caller casts
        b_dtype = None
    return b_shape, (b_dtype if b_dtype is not None and b_dtype.kind in "fc" else None)


_DTYPES: dict = {}


def _compute_dtype(a, h, grad, initial):
    """The accumulation dtype of the adjoint: the promoted dtype of everything it reads (memoised
    on the dtypes and scalar types: the frameworks' backward passes ask on every call)."""
    key = tuple(type(x) if isinstance(x, _api._PYTHON_SCALARS) else x.dtype for x in (a, h, grad, initial)
                if x is not None)
    dt = _DTYPES.get(key)
    if dt is None:
        parts = [_api._SCALAR_PROTOTYPES[k] if k in _api._SCALAR_PROTOTYPES else k for k in key]
        dt = _DTYPES[key] = _api._promote(parts, None)[1]
    return dt


def _grad_dtype(x, dt):
    """A gradient is stored in its input's dtype when that is inexact (real part for a real input
    of a complex recurrence), else in the computation's dtype."""
    if isinstance(x, _api._PYTHON_SCALARS) or x is None:
        return dt
    d = np.dtype(x.dtype)
    return d if d.kind in "fc" or d.name == "bfloat16" or d == np.float16 else dt


def _like(kind, h):
    return {"like": h._meta} if kind == "dask" else {}


# --------------------------------------------------------------------------- the arrays' algebra


class _Time:
    """Views along the time axis of canonical arrays, in the logical order of the forward scan.

    Canonical: time last (``b``-like arrays, diagonal), or before the state (dense), or before the
    matrix (dense ``A``). ``reverse`` maps logical step ``p`` to ``T - 1 - p``, so the adjoint code
    reads as for a forward scan.
    """

    def __init__(self, T, reverse, dense):
        self.T, self.reverse, self.dense = T, reverse, dense

    def span(self, start, stop):
        """The slice of logical steps ``start .. stop-1``."""
        if self.reverse:
            return slice(self.T - stop, self.T - start)
        return slice(start, stop)

    def step(self, p):
        return self.T - 1 - p if self.reverse else p

    def vec(self, x, s):
        """``x[..., s]`` (diagonal) or ``x[..., s, :]`` (dense vectors)."""
        return x[..., s, :] if self.dense else x[..., s]

    def coef(self, x, s):
        """The coefficients at ``s`` (an index or a slice); a broadcast time axis (length 1) gives
        the same coefficient at every step."""
        ta = -3 if self.dense else -1
        if x.shape[ta] == 1:
            s = 0 if isinstance(s, int) else slice(None)
        return x[..., s, :, :] if self.dense else x[..., s]


def _canonical(xp, x, axis, ndim, dense, matrix=False):
    """``x`` given leading length-1 axes up to ``ndim`` time and lane axes (plus its state or matrix
    axes), its time axis moved to the canonical place: views only."""
    full = ndim + (2 if matrix else 1 if dense else 0)
    if x.ndim < full:
        x = xp.reshape(x, (1,) * (full - x.ndim) + tuple(x.shape))
    to = -3 if matrix else -2 if dense else -1
    if axis % x.ndim == to % x.ndim:  # already there (moveaxis costs microseconds even then)
        return x
    return xp.moveaxis(x, axis, to)


def _contract(xp, x, y, keep, outer):
    """``sum(x * y)`` (``outer``: ``sum(x[..., :, None] * y[..., None, :])``) over the batch axes whose
    ``keep`` is False, keeping them with length 1: a broadcast input's gradient without a full-size
    temporary."""
    nb = len(keep)
    letters = _LETTERS[:nb]
    kept = "".join(c for c, k in zip(letters, keep) if k)
    if outer:
        sub = f"{letters}y,{letters}z->{kept}yz"
    else:
        sub = f"{letters},{letters}->{kept}"
    r = xp.einsum(sub, x, y)
    tail = r.shape[len(kept):]
    return xp.reshape(r, tuple(x.shape[i] if k else 1 for i, k in enumerate(keep)) + tuple(tail))


def _sum_to(xp, x, shape):
    """``x`` summed over the axes along which an array of ``shape`` was broadcast to ``x.shape``."""
    shape = tuple(shape)
    if tuple(x.shape) == shape:
        return x
    lead = x.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(lead + i for i, n in enumerate(shape) if n == 1 and x.shape[lead + i] != 1)
    r = xp.sum(x, axis=axes) if axes else x
    return xp.reshape(r, shape)


def _store(out, x):
    """``out[...] = x`` (the real part where ``out`` is real and ``x`` complex)."""
    if out.dtype.kind != "c" and x.dtype.kind == "c":
        x = x.real
    if out.ndim == 0:
        out[()] = x
    else:
        out[...] = x


def _mm_t(xp, A, v):
    """``A^T @ v`` for stacks of matrices ``A (..., n, n)`` and vectors ``v (..., n)``."""
    return xp.matmul(xp.swapaxes(A, -1, -2), v[..., None])[..., 0]


def vjp_into(xp, a, h, grad, initial, axis, chunk, reverse, dense, conjugate, backend, method, outs, dt,
             need=(True, True, True)):
    """Write the gradients into ``outs = (ga, gb, gi)``, NumPy or CuPy arrays (None where not wanted).

    The caller validated everything: arrays of one library (``a`` and ``initial`` arrays, not
    scalars, of shapes that broadcast in the forward call), ``axis`` normalised, ``dt`` the
    computation's dtype. Each gradient is summed to its output's shape, which may also carry a
    leading batch axis its input lacks (per-example gradients under ``vmap``). Full-size
    temporaries are made only for a gradient whose input was broadcast or whose dtype differs
    from ``dt``: ``grad_b`` and ``grad_a`` of full-size inputs are written where they belong.
    """
    ga_out, gb_out, gi_out = outs
    need_a = need[0] and ga_out is not None
    need_i = need[2] and gi_out is not None and initial is not None
    shape = tuple(h.shape)
    ndim = len(shape) - (1 if dense else 0)  # time and lane axes
    t_ax = -2 if dense else -1
    T = shape[axis]
    tm = _Time(T, reverse, dense)
    conj = conjugate and np.dtype(dt).kind == "c"

    hc = _canonical(xp, h, axis, ndim, dense)
    g = xp.conj(grad) if conj else grad  # PyTorch's convention: the conjugate of transpose(conj(grad))
    gc = _canonical(xp, g, axis, ndim, dense)
    ac = _canonical(xp, a, axis, ndim, dense, matrix=dense)
    lanes_c = hc.shape[:t_ax] + (hc.shape[-1:] if dense else ())
    h0 = None if initial is None else xp.broadcast_to(initial, lanes_c)

    # grad_b (the adjoint state) is always computed: in place when b had the full shape and dtype
    if gb_out is not None and tuple(gb_out.shape) == shape and gb_out.dtype == dt:
        lam = gb_out
    else:
        lam = xp.empty(shape, dt)
    lc = _canonical(xp, lam, axis, ndim, dense)
    # grad_a of a full-size diagonal a is the scan's fused product
    ga_c = _canonical(xp, ga_out, axis, ndim, dense, matrix=dense) if need_a else None
    fused = need_a and not dense and tuple(ga_c.shape) == tuple(hc.shape)
    if fused:
        gac = ga_c if ga_out.dtype == dt else xp.empty(hc.shape, dt)

    if T == 0:
        for o in outs:
            if o is not None:
                o[...] = 0
        return outs

    first, last = tm.step(0), tm.step(T - 1)
    lam_last = tm.vec(lc, last)
    # one launch over the whole arrays where the backend shifts inside its kernels
    shifted = fused and T >= 2 and _shifted_adjoint(xp, backend, method, ac, gc, lc, hc, gac, reverse)
    if not shifted:
        lam_last[...] = tm.vec(gc, last)
    if T >= 3 and not shifted:
        coef = tm.coef(ac, tm.span(2, T))
        if dense:
            coef = xp.swapaxes(coef, -1, -2)
        mid = tm.span(1, T - 1)
        product = (tm.vec(hc, tm.span(0, T - 2)), tm.vec(gac, mid)) if fused else None
        # axis -1 is the time axis of the canonical views in both forms
        _api._linear_recurrence(coef, tm.vec(gc, mid), -1, chunk, lam_last, not reverse, dense, dt,
                                tm.vec(lc, mid), backend, method, product=product)
    lam0 = tm.vec(lc, first)
    if T >= 2 and not shifted:
        a1, lam1 = tm.coef(ac, tm.step(1)), tm.vec(lc, tm.step(1))
        if dense:
            lam0[...] = _mm_t(xp, a1, lam1) + tm.vec(gc, first)
        else:
            xp.multiply(a1, lam1, out=lam0)
            lam0 += tm.vec(gc, first)

    if need_a:
        # (the shifted launch wrote grad_a's first step, zero, where there is no initial state)
        hprev0 = h0 if h0 is not None or (fused and shifted) else xp.zeros(lanes_c, dt)
        if fused:
            if T >= 2 and not shifted:
                xp.multiply(lam_last, tm.vec(hc, tm.step(T - 2)), out=tm.vec(gac, last))
            if hprev0 is not None:
                xp.multiply(lam0, hprev0, out=tm.vec(gac, first))
            if gac is not ga_c:
                _store(ga_c, gac)
        else:
            ga = _grad_a(xp, tuple(ga_c.shape), lc, hc, hprev0, tm, dense, dt,
                         ga_c if ga_out.dtype == dt else None)
            if ga is not ga_c:
                _store(ga_c, ga)
    if gb_out is not None and need[1] and lam is not gb_out:
        _store(gb_out, _sum_to(xp, lam, gb_out.shape))
    if need_i:
        a0 = tm.coef(ac, first)
        gi = _mm_t(xp, a0, lam0) if dense else a0 * lam0
        _store(gi_out, _sum_to(xp, gi, gi_out.shape))
    if conj:
        for o, wanted in zip(outs, (need_a, need[1], need_i)):
            if wanted and o is not None and o.dtype.kind == "c":
                xp.conj(o, out=o)
    return outs


_ADJOINT: dict = {}


def _shifted_adjoint(xp, backend, method, ac, gc, lc, hc, gac, reverse):
    """Whether the backend ran the whole adjoint scan in one launch (``BackendSpec.shifted_adjoint``):
    ``lc`` (grad_b) and ``gac`` (grad_a) at every step, zero at the forward's first step for grad_a
    (its term from an initial state is the caller's). True
    as the backend's launch on raw pointers (see ``BackendSpec.shifted_adjoint``), else False."""
    key = (xp, backend)
    mod = _ADJOINT.get(key, 0)
    if mod == 0:
        try:
            spec = _api._choose_backend(backend, "cupy" if xp.__name__ == "cupy" else "numpy")
        except (ImportError, ValueError):
            spec = None  # the scan's own call raises what applies
        mod = _ADJOINT[key] = _registry.load(spec.name) if spec is not None and spec.shifted_adjoint else None
    return mod is not None and mod.adjoint(ac, gc, lc, hc, gac, reverse, method)


def _grad_a(xp, target, lc, hc, hprev0, tm, dense, dt, dest):
    """grad_a in the canonical layout of shape ``target``: ``gb[t] * h[t-1]`` (dense: ``gb[t]
    h[t-1]^T``) summed over the axes of length 1 in ``target`` (those ``a`` was broadcast along),
    without full-size temporaries beyond the gradient itself; into ``dest`` where given."""
    T = tm.T
    keep = tuple(n != 1 for n in (target[:-2] if dense else target))  # batch axes, time last
    rest, prev, first = tm.span(1, T), tm.span(0, T - 1), tm.step(0)
    if keep[-1]:  # a time-varying a: each step's gradient summed over the lanes a was broadcast along
        out = dest if dest is not None else xp.empty(target, dt)
        o_rest, o_first = (out[..., rest, :, :], out[..., first, :, :]) if dense else (out[..., rest], out[..., first])
        if T >= 2:
            x, y = tm.vec(lc, rest), tm.vec(hc, prev)
            if all(keep):  # nothing to sum: the product straight into the gradient
                if dense:
                    xp.multiply(x[..., :, None], y[..., None, :], out=o_rest)
                else:
                    xp.multiply(x, y, out=o_rest)
            else:
                o_rest[...] = _contract(xp, x, y, keep, dense)
        o_first[...] = _contract(xp, tm.vec(lc, first), hprev0, keep[:-1], dense)
        return out
    # a time-invariant a: the steps are summed too
    total = _contract(xp, tm.vec(lc, first), hprev0, keep[:-1], dense)
    if T >= 2:
        steps = _contract(xp, tm.vec(lc, rest), tm.vec(hc, prev), keep, dense)
        total = total + (steps[..., 0, :, :] if dense else steps[..., 0])
    return total[..., None, :, :] if dense else total[..., None]


def _vjp_lazy(xp, a, h, grad, initial, axis, chunk, reverse, dense, conjugate, backend, method, dt, shapes, dtypes):
    """The adjoint on Dask arrays: the same algebra, as lazy expressions (Dask has no ``out=``)."""
    a_shape, b_shape, i_shape = shapes
    shape = tuple(h.shape)
    ndim = len(shape) - (1 if dense else 0)
    T = shape[axis]
    tm = _Time(T, reverse, dense)
    conj = conjugate and np.dtype(dt).kind == "c"
    g = xp.conj(grad) if conj else grad
    hc = _canonical(xp, h.astype(dt), axis, ndim, dense)
    gc = _canonical(xp, g.astype(dt), axis, ndim, dense)
    ac = _canonical(xp, a.astype(dt), axis, ndim, dense, matrix=dense)
    t_ax = -2 if dense else -1
    lanes_c = hc.shape[:t_ax] + (hc.shape[-1:] if dense else ())
    h0 = xp.zeros(lanes_c, dt, chunks=-1) if initial is None else xp.broadcast_to(initial.astype(dt), lanes_c)

    def cat(xs):
        return xp.concatenate([x for x in xs], axis=t_ax) if len(xs) > 1 else xs[0]

    def one(x):  # a lane-sized array with a time axis of length 1
        return x[..., None, :] if dense else x[..., None]

    if T == 0:
        lam = xp.zeros(hc.shape, dt)
    else:
        lam_last = tm.vec(gc, tm.step(T - 1))
        if T >= 2:
            coef = tm.coef(ac, tm.span(1, T))
            if dense:
                coef = xp.swapaxes(coef, -1, -2)
            head = _api._linear_recurrence(coef, tm.vec(gc, tm.span(0, T - 1)), -1, chunk, lam_last, not reverse,
                                           dense, dt, None, backend, method)
            lam = cat([one(lam_last), head] if reverse else [head, one(lam_last)])
        else:
            lam = one(lam_last)
    if T == 0:
        hprev = xp.zeros(hc.shape, dt)
    else:
        hp = tm.vec(hc, tm.span(0, T - 1))
        hprev = cat(([hp] if T >= 2 else []) + [one(h0)]) if reverse else cat([one(h0)] + ([hp] if T >= 2 else []))
    if dense:
        ga_full = lam[..., :, None] * hprev[..., None, :]
    else:
        ga_full = lam * hprev
    ga_full = xp.moveaxis(ga_full, -3 if dense else -1, axis)
    ga = _sum_to(xp, ga_full, a_shape)
    lam_o = xp.moveaxis(lam, t_ax, axis)
    gb = _sum_to(xp, lam_o, b_shape)
    gi = None
    if initial is not None:
        if T == 0:
            gi = xp.zeros(i_shape, dt)
        else:
            a0 = tm.coef(ac, tm.step(0))
            lam0 = tm.vec(lam, tm.step(0))
            gi = _sum_to(xp, _mm_t(xp, a0, lam0) if dense else a0 * lam0, i_shape)
    res = []
    for x, d in zip((ga, gb, gi), dtypes):
        if x is None:
            res.append(None)
            continue
        if conj and np.dtype(d).kind == "c":
            x = xp.conj(x)
        if np.dtype(d).kind != "c" and np.dtype(x.dtype).kind == "c":
            x = x.real
        res.append(x.astype(d))
    return tuple(res)
