"""The JAX front-end: ``scanarray.linear_recurrence`` on JAX arrays, under ``jit``, ``grad`` and ``vmap``.

Imported by :func:`scanarray.linear_recurrence` the first time a JAX array (or tracer) arrives,
never by ``import scanarray``. The scan is a ``jax.custom_vjp`` function whose forward and
backward passes are ``jax.experimental.buffer_callback`` calls: XLA hands the callback its own
device buffers (inputs, and the outputs to fill in place) and, on the GPU, its compute stream.
The callback wraps them as NumPy arrays (CPU) or CuPy arrays (GPU, on
a CuPy stream made of ``ctx.stream``) and runs scanarray's backends on them: no copy, no host
round trip, no synchronisation, and the same code on both platforms. ``pure_callback`` would copy
every result on the CPU and cannot take device buffers; an XLA FFI custom call measured no
cheaper than the callback, whose cost is under JAX's own dispatch (docs/guide/frameworks.md).
``buffer_callback`` exists from JAX 0.7.

On the GPU a callback whose buffers repeat an earlier call's signature launches what that call
bound to it (the forward's kernel launch, the backward's one-launch adjoint) on XLA's device
pointers and stream, without CuPy views; where the backward is that one launch, the first step of
``grad_a`` and ``grad_initial`` (a few lanes' worth of work) are XLA operations outside it.

``vmap``: the callbacks declare ``vmap_method="expand_dims"`` (a mapped axis arrives first, an
unmapped input gets a length-1 axis there), and every input is first given the result's number of
axes (leading length-1 axes, free in XLA), so the mapped axis is simply one more lane: one call
scans the whole batch. The time ``axis`` is passed counted from the end, which leading axes do not
change.

Gradients follow JAX's convention for complex numbers (the transpose, no conjugation). Reverse
mode only: a ``custom_vjp`` function has no forward-mode derivative (``jvp``, ``jacfwd``).
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from . import _api, _vjp
from ._frameworks import Shaped, bound_launch, check_flags, cupy_view, device_count, external_stream, result_dtypes

try:
    from jax.experimental.buffer_callback import buffer_callback
except ImportError:  # pragma: no cover - JAX older than 0.7
    buffer_callback = None

__all__ = ["linear_recurrence"]

_SCALARS = _api._PYTHON_SCALARS


def linear_recurrence(a, b, axis=-1, chunk=64, *, initial=None, reverse=False, dense=False, dtype=None,
                      out=None, backend=None, method="auto"):
    """:func:`scanarray.linear_recurrence` for JAX arrays (and Python scalars): see its docstring."""
    if buffer_callback is None:
        raise ImportError(f"scanarray needs jax>=0.7 (jax.experimental.buffer_callback); found {jax.__version__}: "
                          "pip install -U \"scanarray[jax]\"")
    if out is not None:
        raise TypeError("out= is not supported for JAX arrays: they are immutable; use the returned array")
    chunk, reverse, dense = check_flags(chunk, reverse, dense)
    for x, name in ((a, "a"), (b, "b"), (initial, "initial")):
        _api._check_dtype(x, name)
    parts = [x if x is None or isinstance(x, _SCALARS) else _np_dtype(x.dtype) for x in (a, b, initial)]
    store, work = result_dtypes(parts, None if dtype is None else _np_dtype(dtype))
    store = jax.dtypes.canonicalize_dtype(jnp.bfloat16 if isinstance(store, str) else store)
    work = jax.dtypes.canonicalize_dtype(work)

    # Python scalars: a real or complex a stays a static coefficient; b and initial become arrays
    a_scalar = None
    if isinstance(a, _SCALARS):
        a_scalar, a = (complex(a) if isinstance(a, complex) else float(a)), None
    if isinstance(b, _SCALARS):
        b = jnp.full((), b, work)
    if isinstance(initial, _SCALARS):
        initial = jnp.full((), initial, work)
    # integers, booleans and half types are computed in the accumulation dtype (NumPy and CuPy
    # cannot compute with bfloat16); the casts are JAX's, so are their gradients
    a, b, initial = (None if x is None else x.astype(work) if _recast(x.dtype, work) else x for x in (a, b, initial))

    a_shape = () if a is None else tuple(a.shape)
    if dense:
        shape, lanes, ax = _api._dense_shapes(Shaped(a_shape), Shaped(tuple(b.shape)), axis)
        nb = len(shape) - 1
    else:
        shape, lanes, ax = _api._diagonal_shapes(Shaped(a_shape), Shaped(tuple(b.shape)), axis)
        nb = len(shape)
    if initial is not None and tuple(initial.shape) != lanes:
        _api._check_broadcast_to(initial, lanes, "initial", "the result's shape with the time axis removed")
    # every input with the result's number of axes: vmap's mapped axis then lines up as a lane
    a = None if a is None else _pad(a, nb + 2 if dense else nb)
    b = _pad(b, nb + 1 if dense else nb)
    initial = None if initial is None else _pad(initial, len(lanes))
    cfg = _Config(a_scalar, ax - nb, chunk, reverse, dense,
                  work.str, backend, method, tuple(b.shape), np.dtype(b.dtype).str)
    h = _scan(cfg, a, b, initial)
    return h.astype(store) if store != work else h


def _np_dtype(d):
    """A NumPy dtype, or "bfloat16" (which scanarray's rules treat apart)."""
    d = np.dtype(d)
    return "bfloat16" if d.name == "bfloat16" else d


def _recast(d, work):
    d = np.dtype(d)
    return d.kind in "biu" or d.itemsize == 2 and d != work


def _pad(x, ndim):
    return x.reshape((1,) * (ndim - x.ndim) + tuple(x.shape)) if x.ndim < ndim else x


class _Config(NamedTuple):
    """The static arguments of one scan (hashable: ``custom_vjp``'s ``nondiff_argnums``)."""

    a_scalar: Any  # a Python float or complex, or None
    axis: int  # counted from the end
    chunk: int
    reverse: bool
    dense: bool
    dtype: str  # the dtype the scan runs and stores in
    backend: Any
    method: str
    b_shape: tuple
    b_dtype: str


# --------------------------------------------------------------------------- custom_vjp


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _scan(cfg, a, b, initial):
    return _forward(cfg, a, b, initial)


def _scan_fwd(cfg, a, b, initial):
    h = _forward(cfg, a, b, initial)
    return h, (a, initial, h)  # the inputs and h: nothing else is kept for the backward pass


def _scan_bwd(cfg, res, g):
    a, initial, h = res
    return _backward(cfg, a, h, g, initial)


_scan.defvjp(_scan_fwd, _scan_bwd)


def _result_shape(cfg, a, b):
    if cfg.dense:
        n = b.shape[-1]
        return tuple(np.broadcast_shapes(tuple(b.shape[:-1]), () if a is None else tuple(a.shape[:-2]))) + (n,)
    return tuple(np.broadcast_shapes(tuple(b.shape), () if a is None else tuple(a.shape)))


def _forward(cfg, a, b, initial):
    args = tuple(x for x in (a, b, initial) if x is not None)
    return _forward_call(cfg, a is not None, initial is not None, _result_shape(cfg, a, b))(*args)


def _backward(cfg, a, h, g, initial):
    if _first_step_here(cfg, a, h):
        ga, gb, _ = _backward_call(cfg, (tuple(a.shape), np.dtype(a.dtype).str), None, True)(g, h, a)
        return _first_step(cfg, a, initial, ga, gb)
    shapes = (None if a is None else (tuple(a.shape), np.dtype(a.dtype).str),
              None if initial is None else (tuple(initial.shape), np.dtype(initial.dtype).str))
    args = (g, h) + tuple(x for x in (a, initial) if x is not None)
    return _backward_call(cfg, *shapes, False)(*args)


def _first_step_here(cfg, a, h):
    """Whether the callback computes grad_b and grad_a but the latter's first step (the backend's
    one launch where it takes the layout, :func:`_bound_adjoint`), and XLA that step and
    grad_initial: ``a`` and ``b`` of the result's shape and one real dtype."""
    dt = np.dtype(cfg.dtype)
    return (a is not None and not cfg.dense and dt.kind == "f" and tuple(a.shape) == tuple(h.shape) == cfg.b_shape
            and np.dtype(a.dtype) == dt and np.dtype(cfg.b_dtype) == dt and h.shape[cfg.axis] >= 2)


def _first_step(cfg, a, initial, ga, gb):
    """(grad_a, grad_b, grad_initial) from the callback's: grad_a at the forward's first step is
    ``grad_b * initial`` there (without one, the callback's zero stands: no XLA update of it),
    grad_initial ``a * grad_b`` there, summed to the initial state's shape."""
    if initial is None:  # the callback wrote grad_a's first step: zero
        return ga, gb, None
    ax = cfg.axis
    first = gb.shape[ax] - 1 if cfg.reverse else 0
    lam0 = jax.lax.index_in_dim(gb, first, ax)
    h0 = jnp.expand_dims(initial, ax)
    ga = jax.lax.dynamic_update_index_in_dim(ga, (lam0 * h0).astype(ga.dtype), first, ax)
    x = jax.lax.index_in_dim(a, first, ax) * lam0
    axes = tuple(i for i, (n, m) in enumerate(zip(h0.shape, x.shape)) if n == 1 and m != 1)
    gi = jnp.sum(x, axis=axes, keepdims=True).reshape(initial.shape).astype(initial.dtype)
    return ga, gb, gi


# One callable per signature: the callback is a parameter of the primitive, and JAX reuses a
# compiled computation only for equal parameters (a new partial every call would recompile
# every eager call).
@functools.lru_cache(maxsize=256)
def _forward_call(cfg, has_a, has_i, shape):
    return buffer_callback(functools.partial(_forward_callback, cfg, has_a, has_i),
                           jax.ShapeDtypeStruct(shape, np.dtype(cfg.dtype)), vmap_method="expand_dims")


@functools.lru_cache(maxsize=256)
def _backward_call(cfg, a_sig, i_sig, first_here):
    outs = (
        None if a_sig is None else jax.ShapeDtypeStruct(a_sig[0], np.dtype(a_sig[1])),
        jax.ShapeDtypeStruct(cfg.b_shape, np.dtype(cfg.b_dtype)),
        None if i_sig is None else jax.ShapeDtypeStruct(i_sig[0], np.dtype(i_sig[1])),
    )
    return buffer_callback(functools.partial(_backward_callback, cfg, a_sig is not None, i_sig is not None,
                                             first_here), outs, vmap_method="expand_dims")


# --------------------------------------------------------------------------- the callbacks


def _views(bufs):
    """NumPy or CuPy arrays over XLA's buffers, the array module, and the CuPy stream context."""
    kind, dev = bufs[0].__dlpack_device__()
    if kind == 1:  # kDLCPU
        return [None if x is None else np.asarray(x) for x in bufs], np, None
    import cupy

    views = []
    for x in bufs:
        if x is None:
            views.append(None)
            continue
        cai = x.__cuda_array_interface__
        dtype = np.dtype(cai["typestr"])
        shape = tuple(cai["shape"])
        strides = cai.get("strides") or _c_strides(shape, dtype.itemsize)
        views.append(cupy_view(cai["data"][0], shape, strides, dtype, x, dev))
    return views, cupy, dev


def _c_strides(shape, itemsize):
    strides, s = [], itemsize
    for n in reversed(shape):
        strides.append(s)
        s *= max(n, 1)
    return tuple(reversed(strides))


class _OnStream:
    """CuPy's current device and stream made XLA's for the duration of a callback."""

    def __init__(self, ctx, dev):
        self.stream = external_stream(ctx.stream, dev)
        self.dev = None
        if device_count() > 1:
            import cupy

            self.dev = cupy.cuda.Device(dev)

    def __enter__(self):
        if self.dev is not None:
            self.dev.__enter__()
        self.stream.__enter__()

    def __exit__(self, *exc):
        self.stream.__exit__(*exc)
        if self.dev is not None:
            self.dev.__exit__(*exc)


#: repeated GPU callbacks: signature -> the raw launch bound to it (forward: ``Binder.call.raw``;
#: backward: the backend's one-launch adjoint), False where there is none. XLA's buffers reach
#: it as device pointers: no CuPy views, no stream context.
_RAW: dict = {}


def _signature(bufs, *head):
    """(key, device pointers: None for a missing buffer) of XLA's buffers on the GPU, or (None,
    None) on the CPU."""
    first = next(x for x in bufs if x is not None)
    if first.__dlpack_device__()[0] == 1:  # kDLCPU
        return None, None
    cais = [None if x is None else x.__cuda_array_interface__ for x in bufs]
    ptrs = [None if c is None else c["data"][0] for c in cais]
    key = head + tuple(None if c is None else (tuple(c["shape"]), c["typestr"], c["data"][0] % 16) for c in cais)
    return key, ptrs


def _forward_callback(cfg, has_a, has_i, ctx, out, *bufs):
    it = iter(bufs)
    a = next(it) if has_a else None
    b = next(it)
    initial = next(it) if has_i else None
    key, ptrs = _signature((a, b, initial, out), "fwd", cfg)
    raw = _RAW.get(key) if key is not None else None
    if raw and raw(ctx.stream, *ptrs):
        return
    (out_v, a_v, b_v, i_v), xp, dev = _views((out, a, b, initial))
    if tuple(b_v.shape) != tuple(out_v.shape):  # b broadcast, or under vmap only initial mapped
        b_v = xp.broadcast_to(b_v, tuple(out_v.shape))
    kw = dict(initial=i_v, reverse=cfg.reverse, dense=cfg.dense, dtype=np.dtype(cfg.dtype), out=out_v,
              backend=cfg.backend, method=cfg.method)
    a_arg = cfg.a_scalar if a_v is None else a_v
    if xp is np:
        _api.linear_recurrence(a_arg, b_v, cfg.axis, cfg.chunk, **kw)
        return
    with _OnStream(ctx, dev):
        _api.linear_recurrence(a_arg, b_v, cfg.axis, cfg.chunk, **kw)
        raw = bound_launch(a_arg, b_v, cfg.axis, cfg.chunk, kw)
    if raw is not None:
        _remember(key, raw)


def _remember(key, launch):
    if len(_RAW) >= 1024:
        _RAW.clear()
    _RAW[key] = launch


def _bound_adjoint(cfg, ctx, a, g, gb, h, ga):
    """The backend's one-launch adjoint (grad_b, and grad_a but its first step) on XLA's buffers,
    bound to their signature after the first call; False where it does not take them."""
    key, ptrs = _signature((a, g, gb, h, ga), "bwd", cfg)
    if key is None:
        return False
    launch = _RAW.get(key)
    if launch is False:
        return False
    if launch is not None:
        with _OnStream(ctx, a.__dlpack_device__()[1]):
            launch(*ptrs)
        return True
    views, xp, dev = _views((a, g, gb, h, ga))
    nb = views[3].ndim
    with _OnStream(ctx, dev):
        launch = _vjp._shifted_adjoint(xp, cfg.backend, cfg.method,
                                       *(_vjp._canonical(xp, v, cfg.axis % nb, nb, False) for v in views), cfg.reverse)
    if xp is not np or not launch:  # (a CPU launch repeats on views, not pointers: not kept)
        _remember(key, launch or False)
    return bool(launch)


def _backward_callback(cfg, has_a, has_i, first_here, ctx, outs, g, h, *bufs):
    it = iter(bufs)
    a = next(it) if has_a else None
    initial = next(it) if has_i else None
    ga, gb, gi = outs
    if first_here and _bound_adjoint(cfg, ctx, a, g, gb, h, ga):
        return
    (g_v, h_v, a_v, i_v, ga_v, gb_v, gi_v), xp, dev = _views((g, h, a, initial, ga, gb, gi))
    if g_v.shape != h_v.shape:  # vmap: one of them unmapped
        shape = np.broadcast_shapes(g_v.shape, h_v.shape)
        g_v, h_v = xp.broadcast_to(g_v, shape), xp.broadcast_to(h_v, shape)

    def run():
        dt = _vjp._compute_dtype(cfg.a_scalar if a_v is None else a_v, h_v, g_v, i_v)
        av = xp.asarray(cfg.a_scalar, dtype=dt) if a_v is None else a_v
        nb = h_v.ndim - (1 if cfg.dense else 0)
        _vjp.vjp_into(xp, av, h_v, g_v, i_v, cfg.axis % nb, cfg.chunk, cfg.reverse, cfg.dense, False, cfg.backend,
                      cfg.method, (ga_v, gb_v, gi_v), dt)

    if xp is np:
        run()
        return
    with _OnStream(ctx, dev):
        run()
