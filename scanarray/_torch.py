"""The PyTorch front-end: ``scanarray.linear_recurrence`` on tensors, with gradients.

Imported by :func:`scanarray.linear_recurrence` the first time a tensor arrives (never by
``import scanarray``). Tensors reach scanarray's own code as views: CPU tensors as NumPy arrays
(``Tensor.numpy()``, zero copy) for the numba/NumPy backends, CUDA tensors as CuPy arrays over the
same memory for the CuPy kernels, launched on torch's current stream (no synchronisation, no host
round trip). Results and gradients are allocated by torch (its caching allocator on the GPU).

Three ways in, one implementation (``_forward`` / ``_backward``):

- the custom ops ``torch.ops.scanarray.linear_recurrence`` and ``...linear_recurrence_vjp``
  (``torch.library.custom_op`` with ``register_fake``, ``register_autograd`` and
  ``register_vmap``): what ``torch.compile`` (one graph, no breaks) and ``torch.func`` see;
- in eager mode with gradients, a ``torch.autograd.Function`` calling the same functions (and one
  with ``setup_context`` and ``vmap`` under torch.func transforms):
  ``register_autograd``'s Python wrapper cost ~80 us a call against ~9 us for the Function
  (measured on a shared 2-core VM, torch 2.13 CPU), which a small scan cannot hide;
- in eager mode without gradients, the implementation directly.

Complex tensors follow torch's convention (conjugate Wirtinger derivatives): the adjoint runs with
``conjugate=True`` (see :mod:`scanarray._vjp`).
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np
import torch
from torch import Tensor

from . import _api, _bound, _vjp
from ._frameworks import Shaped, bound_launch, check_flags, cupy_view, device_count, external_stream, result_dtypes

__all__ = ["linear_recurrence"]

_NUMPY_OF = {
    torch.bool: np.dtype(np.bool_), torch.uint8: np.dtype(np.uint8), torch.int8: np.dtype(np.int8),
    torch.int16: np.dtype(np.int16), torch.int32: np.dtype(np.int32), torch.int64: np.dtype(np.int64),
    torch.float16: np.dtype(np.float16), torch.float32: np.dtype(np.float32),
    torch.float64: np.dtype(np.float64), torch.complex64: np.dtype(np.complex64),
    torch.complex128: np.dtype(np.complex128),
}
_TORCH_OF = {v: k for k, v in _NUMPY_OF.items()}
_PLAIN = (torch.Tensor, torch.nn.Parameter)
_SCALARS = _api._PYTHON_SCALARS
_ACCEPTED = "bool, integers, float16, bfloat16, float32, float64, complex64, complex128"
#: torch.compile calls these at trace time and keeps the result: plain Python on static metadata
_constant = getattr(torch.compiler, "assume_constant_result", lambda f: f)


# --------------------------------------------------------------------------- the public entry


def linear_recurrence(a, b, axis=-1, chunk=64, *, initial=None, reverse=False, dense=False, dtype=None,
                      out=None, backend=None, method="auto"):
    """:func:`scanarray.linear_recurrence` for torch tensors (and Python scalars): see its docstring."""
    compiling = torch.compiler.is_compiling()
    fast_key = None
    if out is None and not compiling and _peek() is None:
        fast_key = _fast_key(a, b, initial, axis, chunk, reverse, dense, dtype, backend, method)
        try:
            entry = None if fast_key is None else _FAST.get(fast_key)
        except TypeError:  # an unhashable argument: the checks will say what is wrong
            entry = fast_key = None
        if entry is not None:
            h = _repeat(entry, a, b, initial)
            if h is not None:
                return h
    plan = key = None
    if not compiling:  # what validation and the rules give depends on the signature alone: kept
        try:
            key = (_key(a), _key(b), _key(initial), _key(out), axis, chunk, reverse, dense, dtype, backend, method)
            plan = _PLANS.get(key)
        except TypeError:  # an unhashable argument: the checks will say what is wrong
            key = None
    if plan is None:
        plan = _plan(a, b, initial, out, axis, chunk, reverse, dense, dtype, backend, method, compiling)
        if key is not None:
            if len(_PLANS) >= 1024:
                _PLANS.clear()
            _PLANS[key] = plan
    store, work, bf16, args = plan
    device = b.device if isinstance(b, Tensor) else a.device if isinstance(a, Tensor) else initial.device

    if isinstance(a, _SCALARS) and not isinstance(a, complex):
        a_scalar, a = float(a), None
    else:
        a_scalar = None
        if isinstance(a, _SCALARS):  # complex: a 0-d tensor of the result dtype (a fill, no copy)
            a = torch.full((), a, dtype=work, device=device)
    if isinstance(b, _SCALARS):
        b = torch.full((), b, dtype=work, device=device)
    if isinstance(initial, _SCALARS):
        initial = torch.full((), initial, dtype=work, device=device)
    if bf16:  # NumPy and CuPy cannot compute with bfloat16: float32 copies in, a bfloat16 result out
        a, b, initial = (x.float() if x is not None and x.dtype == torch.bfloat16 else x for x in (a, b, initial))

    tensors = [x for x in (a, b, initial) if x is not None]
    # eager: plain tensors (torch.func's wrappers are plain tensors too; _Scan handles them)
    eager = not compiling and all(type(t) in _PLAIN for t in tensors)
    if out is not None:
        if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
            raise TypeError(
                "out= cannot take part in autograd (it would overwrite memory the backward pass "
                "reads): drop out=, or run under torch.no_grad() / with tensors that do not require grad"
            )
        target = out if out.dtype == work else torch.empty(out.shape, dtype=work, device=device)
        if eager and type(out) in _PLAIN and not _transformed():
            _forward(a, a_scalar, b, initial, *args, out=target)
        else:
            torch.ops.scanarray.linear_recurrence_out(a, a_scalar, b, initial, target, *args)
        if target is not out:
            out.copy_(target)
        return out
    if not eager:
        h = torch.ops.scanarray.linear_recurrence(a, a_scalar, b, initial, *args)
    elif _transformed():
        h = _ScanTransformed.apply(a, b, initial, a_scalar, args)
    else:
        bound = []
        if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
            h = _Scan.apply(a, b, initial, (a_scalar, args, bound))
        else:
            h = _forward(a, a_scalar, b, initial, *args, bound=bound)
        if fast_key is not None and (bound or device.type == "cpu") and not bf16:
            if len(_FAST) >= 1024:
                _FAST.clear()
            _FAST[fast_key] = (tuple(h.shape), tuple(h.shape) == tuple(b.shape), work, store, b.device.index,
                               bound[0] if bound else None, a_scalar, args, {})
    return h.to(store) if store != work else h


#: repeated eager calls: signature -> (result shape, b's shape?, dtypes, device index (None on a
#: CPU), bound launch (on a CPU, the call the core bound on NumPy views; None where it bound none:
#: the core's entry on NumPy views), arguments, the backward launches bound to it
#: (``_backward_bound``)); one dictionary lookup instead of the checks, plans and views of the
#: full path, with or without gradients
_FAST: dict = {}
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None) or \
    (lambda idx: torch.cuda.current_stream(idx).cuda_stream)


def _fast_key(a, b, initial, *args):
    """The signature of an eager call on plain tensors (``a`` may be a Python float or int), or
    None: shapes, strides, dtypes and devices, scalar ``a``'s value, the arguments (possibly
    unhashable: the caller's lookup fails then)."""
    if type(b) not in _PLAIN or b.is_conj() or b.is_neg():
        return None
    if type(a) in _PLAIN:
        if a.is_conj() or a.is_neg():
            return None
        ka = (a.shape, a.stride(), a.dtype, a.get_device())
    elif type(a) is float or type(a) is int:
        ka = (type(a), a, math.copysign(1.0, a))
    else:
        return None
    if initial is None:
        ki = None
    elif type(initial) in _PLAIN and not (initial.is_conj() or initial.is_neg()):
        ki = (initial.shape, initial.stride(), initial.dtype, initial.get_device())
    else:
        return None
    return (ka, b.shape, b.stride(), b.dtype, b.get_device(), b.is_cpu, ki) + args


def _repeat(entry, a, b, initial):
    """The bound launch of ``entry`` on these tensors (on a CPU, the bound call on NumPy views, or
    the core's own entry on them): h, or None for the full path (autograd, or a pointer of another
    alignment, or a bound call that declines)."""
    _, _, work, store, _, raw, a_scalar, args, _ = entry
    if a_scalar is not None:
        a = None
    if torch.is_grad_enabled() and (b.requires_grad or (a is not None and a.requires_grad)
                                    or (initial is not None and initial.requires_grad)):
        if raw is None:
            return None
        h = _Scan.apply(a, b, initial, (a_scalar, args, entry))
    elif raw is None:
        h = _forward(a, a_scalar, b, initial, *args)
    else:
        h = _launch(entry, a, b, initial)
        if h is None:
            return None
    return h if store is work else h.to(store)


def _launch(entry, a, b, initial):
    """h by the bound launch of ``entry`` (``a`` None: its scalar), or None where the bound call
    declines (a pointer of another alignment; on a CPU, tunables changed since)."""
    shape, like_b, work, _, idx, raw, a_scalar, _, _ = entry
    if idx is None:  # a CPU: the bound call skips the core's validation, which the signature fixed
        # (the signature holds no conjugate or negative views: a tensor's numpy() is its view)
        h = raw(a_scalar if a is None else (a.detach() if a.requires_grad else a).numpy(),
                (b.detach() if b.requires_grad else b).numpy(),
                None if initial is None else _numpy(initial), None)
        return None if h is None else torch.from_numpy(h)
    h = torch.empty_like(b, dtype=work) if like_b else b.new_empty(shape, dtype=work)
    if not raw(_raw_stream(idx), 0 if a is None else a.data_ptr(), b.data_ptr(),
               None if initial is None else initial.data_ptr(), h.data_ptr()):
        return None
    return h


#: call signature -> what ``_plan`` made of it
_PLANS: dict = {}


def _key(x):
    if x is None:
        return None
    if isinstance(x, _SCALARS):
        return type(x)
    return (type(x), x.dtype, x.shape, x.device)


def _plan(a, b, initial, out, axis, chunk, reverse, dense, dtype, backend, method, compiling):
    """(storage dtype, computation dtype, bfloat16 inputs?, the implementation's arguments): every
    check of the call, from the arguments' metadata only (types, dtypes, shapes, devices)."""
    device = next(x for x in (b, a, initial, out) if isinstance(x, Tensor)).device
    for x, name in ((a, "a"), (b, "b"), (initial, "initial"), (out, "out")):
        if isinstance(x, Tensor) and x.device != device:
            raise ValueError(f"{name} is on {x.device} and {_first_name(a, b, initial, out)} on {device}: "
                             "pass tensors of one device (scanarray copies nothing between devices)")
    if device.type not in ("cpu", "cuda"):
        raise TypeError(f"scanarray runs torch tensors on cpu and cuda devices; got a tensor on {device}")
    if out is not None and not isinstance(out, Tensor):
        raise TypeError(f"out must be a torch tensor like the inputs; got {type(out).__name__}")
    chunk, reverse, dense = check_flags(chunk, reverse, dense)
    store, work, bf16 = _dtypes(_dtype_of(a), _dtype_of(b), _dtype_of(initial), dtype)
    if out is not None and out.dtype != store:
        raise TypeError(f"out has dtype {out.dtype}; the result has dtype {store} (pass dtype= to choose another)")
    shapes = [() if x is None or isinstance(x, _SCALARS) else tuple(x.shape) for x in (a, b, initial)]
    if compiling:  # sizes may be symbolic: the fake implementation checks them
        axis = _axis_from_end(len(shapes[0]), len(shapes[1]), axis, dense)
    else:
        axis = _negative_axis(shapes[0], shapes[1], None if initial is None else shapes[2], axis, dense)
    return store, work, bf16, (axis, chunk, reverse, dense, work, backend, method)


def _first_name(a, b, initial, out):
    return next(n for x, n in ((b, "b"), (a, "a"), (initial, "initial"), (out, "out")) if isinstance(x, Tensor))


_peek = getattr(torch._C._functorch, "peek_interpreter_stack", lambda: None)


def _transformed():
    """Whether a torch.func transform (grad, vmap, ...) is active: its tensors are wrappers that
    only an autograd.Function with ``setup_context`` and ``vmap`` may take apart."""
    return _peek() is not None


def _plain(tensors):
    return all(type(t) in _PLAIN for t in tensors) and not _transformed()


def _dtype_of(x):
    """What the dtype rules read of an argument: a tensor's dtype, a Python scalar's type, None."""
    if x is None:
        return None
    return type(x) if isinstance(x, _SCALARS) else x.dtype


def _np_dtype(d, name):
    if d is None or d in _SCALARS:
        return None if d is None else _api._SCALAR_PROTOTYPES[d]
    n = _NUMPY_OF.get(d)
    if n is None:
        if d == torch.bfloat16:
            return "bfloat16"
        raise TypeError(f"{name} has dtype {d}, which scanarray cannot scan; accepted: {_ACCEPTED}")
    return n


@_constant
def _dtypes(da, db, di, dtype):
    """(storage, computation, bfloat16?) torch dtypes from the arguments' dtypes (or Python scalar
    types): the storage dtype by the contract's rules, the dtype the scan runs and stores in
    (float32 for bfloat16, which neither NumPy nor CuPy computes with), and whether bfloat16
    inputs must be cast."""
    if dtype is None:
        want = None
    elif dtype == torch.bfloat16 or (not isinstance(dtype, torch.dtype) and str(dtype) == "bfloat16"):
        want = "bfloat16"
    elif isinstance(dtype, torch.dtype):
        want = _NUMPY_OF.get(dtype)
        if want is None:
            raise TypeError(f"dtype={dtype} is not supported; accepted: float16, bfloat16, float32, "
                            "float64, complex64, complex128")
    else:
        want = dtype
    store, work = result_dtypes([_np_dtype(d, n) for d, n in zip((da, db, di), ("a", "b", "initial"))], want)
    store = torch.bfloat16 if isinstance(store, str) else _TORCH_OF[store]
    return store, _TORCH_OF[work], torch.bfloat16 in (da, db, di)


@_constant
def _axis_from_end(a_ndim, b_ndim, axis, dense):
    """``axis`` counted from the end, from the numbers of axes alone (under torch.compile)."""
    nd = max(b_ndim - 1, a_ndim - 2) if dense else max(b_ndim, a_ndim)
    what = f"the time/batch axes of b with {b_ndim} axes (dense)" if dense else f"the result of {nd} axes"
    return _api._normalize_axis(axis, nd, what) - nd


def _negative_axis(a_shape, b_shape, i_shape, axis, dense):
    """``axis`` validated (the contract's errors) and counted from the end, so that leading batch
    axes (``vmap``) leave it unchanged."""
    shape, lanes, ax = _api._dense_shapes(Shaped(a_shape), Shaped(b_shape), axis) if dense else \
        _api._diagonal_shapes(Shaped(a_shape), Shaped(b_shape), axis)
    if i_shape is not None and i_shape != lanes:
        _api._check_broadcast_to(Shaped(i_shape), lanes, "initial", "the result's shape with the time axis removed")
    return ax - (len(shape) - 1 if dense else len(shape))


# --------------------------------------------------------------------------- the implementation


def _result_shape(a, b, dense):
    """The result's shape from the tensors' (checked by the caller; the fake implementation's
    ``torch.broadcast_shapes`` checks it under torch.compile). Plain Python: this runs on every
    eager call, where ``torch.broadcast_shapes`` alone cost ~15 us."""
    bs = tuple(b.shape)
    if a is None:
        return bs
    if dense:
        return _broadcast(tuple(a.shape[:-2]), bs[:-1]) + bs[-1:]
    return _broadcast(tuple(a.shape), bs)


def _broadcast(s, t):
    if s == t:
        return t
    n = max(len(s), len(t))
    s, t = (1,) * (n - len(s)) + s, (1,) * (n - len(t)) + t
    return tuple(x if y == 1 else y for x, y in zip(s, t))


def _fake_shape(a, b, dense):
    if dense:
        n = b.shape[-1]
        return tuple(torch.broadcast_shapes(b.shape[:-1], a.shape[:-2])) + (n,)
    return tuple(torch.broadcast_shapes(b.shape, a.shape)) if a is not None else tuple(b.shape)


def _alloc(b, shape, dtype):
    """The result, in ``b``'s memory order where ``b`` has its shape (NumPy's order="K")."""
    if tuple(b.shape) == shape:
        return torch.empty_like(b, dtype=dtype)
    return b.new_empty(shape, dtype=dtype)


def _numpy(t):
    if t.is_conj() or t.is_neg():
        t = t.resolve_conj().resolve_neg()
    return t.detach().numpy()


def _cupy(t):
    if t.is_conj() or t.is_neg():
        t = t.resolve_conj().resolve_neg()
    size = t.element_size()
    return cupy_view(t.data_ptr(), t.shape, [s * size for s in t.stride()], _NUMPY_OF[t.dtype], t,
                     t.device.index)


class _ExitBoth:
    """Two context managers entered as one (a device, then a stream)."""

    __slots__ = ("first", "second")

    def __init__(self, first, second):
        self.first, self.second = first, second

    def __enter__(self):
        self.first.__enter__()
        self.second.__enter__()

    def __exit__(self, *exc):
        self.second.__exit__(*exc)
        self.first.__exit__(*exc)


def _on_torch_stream(device):
    """A context making CuPy's current stream (and device) torch's current ones for ``device``."""
    idx = device.index if device.index is not None else torch.cuda.current_device()
    stream = external_stream(_raw_stream(idx), idx)
    if device_count() > 1:
        import cupy

        return _ExitBoth(cupy.cuda.Device(idx), stream)
    return stream


def _forward(a, a_scalar, b, initial, axis, chunk, reverse, dense, dtype, backend, method, out=None, bound=None):
    """h = linear_recurrence(...) into a new tensor (or ``out``), on the tensors' device; appends
    to the list ``bound`` what the call was bound to (``_FAST``), if anything: a CUDA call's raw
    launch, a CPU call's bound call on NumPy views."""
    fresh = out is None
    if not b.is_cuda:  # NumPy views in; a new result is NumPy's, viewed by torch
        args = (a_scalar if a is None else _numpy(a), _numpy(b), axis, chunk,
                None if initial is None else _numpy(initial), reverse, dense, _NUMPY_OF[dtype],
                None if fresh else _numpy(out), backend, method)
        # for _FAST: the key under which the core binds the call (Problem.bind) where its backend can
        key = _bound.CALLS.call(*args, run=False)[1] if bound is not None else None
        h = _api._linear_recurrence(*args, key)
        call = None if key is None else _bound.CALLS.table.get(key)
        if call is not None:
            bound.append(call)
        return torch.from_numpy(h) if fresh else out
    if fresh:
        out = _alloc(b, _result_shape(a, b, dense), dtype)
    _forward_cuda(a, a_scalar, b, initial, axis, chunk, reverse, dense, dtype, backend, method, out, fresh, bound)
    return out


# --------------------------------------------------------------------------- repeated CUDA calls

#: per signature of a CUDA call (torch shapes, strides, dtypes, arguments): the raw launch the
#: public function bound to it (``call.raw`` of ``backends/cupy/_common.Binder``), fed torch's
#: device pointers and stream directly. CuPy views and stream contexts cost a few microseconds
#: each; a small scan's whole bound launch costs about seven on the H200 host.
_BOUND: dict = {}


def _sig(t):
    return None if t is None else (tuple(t.shape), t.stride(), t.dtype)


def _forward_cuda(a, a_scalar, b, initial, axis, chunk, reverse, dense, dtype, backend, method, out, fresh,
                  bound=None):
    """The CuPy kernels on torch's memory and stream; ``fresh``: ``out`` is a new tensor (the raw
    launch checks no overlap with the inputs: a caller's ``out`` takes the full path)."""
    dev = b.device
    lazy = any(t is not None and (t.is_conj() or t.is_neg()) for t in (a, b, initial))
    key = None if lazy else (_sig(a), a_scalar if a is None else None, _sig(b), _sig(initial), _sig(out), dev, axis,
                             chunk, reverse, dense, dtype, backend, method)
    raw = _BOUND.get(key) if key is not None and fresh else None
    if raw is not None and raw(_raw_stream(dev.index), 0 if a is None else a.data_ptr(), b.data_ptr(),
                               None if initial is None else initial.data_ptr(), out.data_ptr()):
        if bound is not None:
            bound.append(raw)
        return
    with _on_torch_stream(dev):
        ca = a_scalar if a is None else _cupy(a)
        cb, co = _cupy(b), _cupy(out)
        ci = None if initial is None else _cupy(initial)
        kw = dict(initial=ci, reverse=reverse, dense=dense, dtype=_NUMPY_OF[dtype], out=co, backend=backend,
                  method=method)
        _api.linear_recurrence(ca, cb, axis, chunk, **kw)
        raw = None if key is None else bound_launch(ca, cb, axis, chunk, kw)
    if raw is not None:
        if len(_BOUND) >= 1024:
            _BOUND.clear()
        _BOUND[key] = raw
        if bound is not None:
            bound.append(raw)


def _backward(grad, a, a_scalar, h, initial, axis, chunk, reverse, dense, backend, method, shapes, dtypes, need):
    """(grad_a, grad_b, grad_initial) tensors of ``shapes`` and ``dtypes`` (None where ``need`` is
    False): the adjoint scan of :mod:`scanarray._vjp` on views of torch's memory."""
    dev = h.device
    if need[0] and not dense and a is not None:
        outs = _backward_bound(grad, a, h, initial, axis % h.ndim, reverse, backend, method, (shapes[1], dtypes[1]),
                               need)
        if outs is not None:
            return outs
    outs = tuple(torch.empty(s, dtype=d, device=dev) if n else None for s, d, n in zip(shapes, dtypes, need))
    if not any(need):
        return outs
    cuda = dev.type == "cuda"
    view = _cupy if cuda else _numpy
    nb = h.ndim - (1 if dense else 0)
    ax = axis % nb
    if cuda:
        import cupy as xp

        ctx = _on_torch_stream(dev)
    else:
        xp, ctx = np, None
    if ctx is not None:
        ctx.__enter__()
    try:
        g_v, h_v = view(grad), view(h)
        a_v = view(a) if a is not None else None
        i_v = view(initial) if initial is not None else None
        dt = _vjp._compute_dtype(a_scalar if a is None else a_v, h_v, g_v, i_v)
        if a_v is None:
            a_v = xp.asarray(a_scalar, dtype=dt)
        _vjp.vjp_into(xp, a_v, h_v, g_v, i_v, ax, chunk, reverse, dense, True, backend, method,
                      tuple(None if o is None else view(o) for o in outs), dt, need)
    finally:
        if ctx is not None:
            ctx.__exit__(None, None, None)
    return outs


#: repeated CUDA backward passes: signature -> the backend's one-launch adjoint on raw pointers
#: (``BackendSpec.shifted_adjoint``), False where it does not take the signature
_BWD: dict = {}


def _bind_adjoint(cache, key, launch):
    """Keep the adjoint's launch for ``key`` (False: that backward takes the full path); whether it ran."""
    if len(cache) >= 1024:
        cache.clear()
    cache[key] = launch or False
    return bool(launch)


def _backward_bound(grad, a, h, initial, ax, reverse, backend, method, b_meta, need, cache=None):
    """:func:`_backward` where ``a`` and ``b`` (``b_meta``: its shape and dtype) have the result's
    shape and real dtype and ``need[0]``: one launch writing grad_b and grad_a (bound to the
    signature after its first call), then grad_initial and grad_a's first step from ``initial`` by
    torch. None for the full path. ``cache``: the launches bound to the forward's signature (which
    fixes the layouts of ``a``, ``h`` and ``initial`` and the arguments), else the signature is the
    key in ``_BWD``."""
    if type(grad) not in _PLAIN or grad.is_conj() or grad.is_neg():
        return None
    key = (grad.shape, grad.stride(), grad.dtype, grad.data_ptr() % 16, a.data_ptr() % 16, h.data_ptr() % 16, need)
    if cache is None:  # (a forward's signature holds no conjugate or negative views)
        if a.is_conj() or a.is_neg():
            return None
        cache = _BWD
        key += (_sig(a), _sig(h), _sig(initial), ax, reverse, backend, method, tuple(b_meta[0]), b_meta[1])
    launch = cache.get(key)
    if launch is False:
        return None
    dev, dt, shape = h.device, h.dtype, tuple(h.shape)
    if launch is None and (dt.is_complex or not dt.is_floating_point or tuple(a.shape) != shape
                           or tuple(b_meta[0]) != shape or a.dtype != dt or b_meta[1] != dt or grad.dtype != dt
                           or (initial is not None and initial.dtype != dt) or shape[ax] < 2
                           or h.numel() == 0):
        cache[key] = False
        return None
    ga, gb = torch.empty_like(h), torch.empty_like(h)  # (h: a new tensor, dense)
    if dev.type == "cpu":  # the loop on NumPy views (numba_backend.adjoint)
        views = [_vjp._canonical(np, _numpy(t), ax, len(shape), False) for t in (a, grad, gb, h, ga)]
        if launch is not None:
            if not launch(*views):
                return None
        elif not _bind_adjoint(cache, key, _vjp._shifted_adjoint(np, backend, method, *views, reverse)):
            return None
    else:
        ptrs = (a.data_ptr(), grad.data_ptr(), gb.data_ptr(), h.data_ptr(), ga.data_ptr())
        if launch is None or not launch(*ptrs, stream_ptr=_raw_stream(dev.index)):  # (else on torch's stream)
            with _on_torch_stream(dev):
                if launch is not None:  # its kernel launched through CuPy's call
                    launch(*ptrs)
                else:
                    import cupy

                    views = (_vjp._canonical(cupy, _cupy(t), ax, len(shape), False) for t in (a, grad, gb, h, ga))
                    if not _bind_adjoint(cache, key, _vjp._shifted_adjoint(cupy, backend, method, *views, reverse)):
                        return None
    gi = None
    if initial is not None:  # (without it, the launch wrote grad_a's first step: zero)
        first = shape[ax] - 1 if reverse else 0
        lam0 = gb.select(ax, first)
        torch.mul(lam0, initial, out=ga.select(ax, first))
        if need[2]:
            gi = a.select(ax, first) * lam0
            if gi.shape != initial.shape:
                gi = gi.sum_to_size(initial.shape)
    return ga, gb if need[1] else None, gi


# --------------------------------------------------------------------------- eager autograd


def _save(ctx, a, b, initial, a_scalar, args, h):
    ctx.save_for_backward(a, initial, h)  # the inputs and h; b only by its shape and dtype
    ctx.a_scalar, ctx.args, ctx.b_meta = a_scalar, args, (list(b.shape), b.dtype)


def _scan_backward(ctx, grad):
    a, initial, h = ctx.saved_tensors
    need = ctx.needs_input_grad
    nones = (None,) * (len(need) - 3)
    need = need[:3]
    if ctx.bwd is not None and need[0] and type(grad) in _PLAIN and _peek() is None:
        # a repeated call: the adjoint bound to its signature (CUDA launch or numba loop), no general path
        axis, _, reverse, _, _, backend, method = ctx.args
        outs = _backward_bound(grad, a, h, initial, axis % h.ndim, reverse, backend, method, ctx.b_meta, need,
                               ctx.bwd)
        if outs is not None:
            return outs + nones
    axis, chunk, reverse, dense, _, backend, method = ctx.args
    b_shape, b_dtype = ctx.b_meta
    shapes = ([] if a is None else list(a.shape), b_shape, [] if initial is None else list(initial.shape))
    if _plain([grad, h]):
        dtypes = (None if a is None else a.dtype, b_dtype, None if initial is None else initial.dtype)
        ga, gb, gi = _backward(grad, a, ctx.a_scalar, h, initial, axis, chunk, reverse, dense, backend, method,
                               shapes, dtypes, need)
    else:  # under vmap (per-example gradients): the op has the vmap rule
        ga, gb, gi = torch.ops.scanarray.linear_recurrence_vjp(
            grad, a, ctx.a_scalar, h, initial, axis, chunk, reverse, dense, backend, method, *shapes, b_dtype, *need)
    return (ga if need[0] else None, gb if need[1] else None, gi if need[2] else None) + nones


_scan_backward_once = torch.autograd.function.once_differentiable(_scan_backward)


def _backward_once(ctx, grad):
    """The backward of the eager Functions, differentiable once: with ``create_graph=True`` (grad
    mode on here) ``once_differentiable``'s wrapper, which makes a second backward an error;
    otherwise the backward itself (the wrapper's ``no_grad`` costs microseconds a call)."""
    if torch.is_grad_enabled():
        return _scan_backward_once(ctx, grad)
    return _scan_backward(ctx, grad)


class _Scan(torch.autograd.Function):
    """Eager-mode autograd (see the module docstring for why not the custom op's). The classic form,
    with ``ctx`` in ``forward``: a Function with ``setup_context`` binds its arguments through
    ``inspect.signature`` on every call (tens of microseconds)."""

    @staticmethod
    def forward(ctx, a, b, initial, call):
        """``call``: ``(a_scalar, args, entry)``, ``entry`` the ``_FAST`` entry of the call's
        signature or a list to which ``_forward`` appends what it bound."""
        a_scalar, args, entry = call
        fast = type(entry) is tuple
        h = _launch(entry, a, b, initial) if fast and entry[5] is not None else None
        if h is None:
            h = _forward(a, a_scalar, b, initial, *args, bound=None if fast else entry)
        _save(ctx, a, b, initial, a_scalar, args, h)
        # the call's backward launches, bound to the signature (_backward_bound)
        ctx.bwd = entry[8] if fast and a is not None and not args[3] else None
        return h

    backward = staticmethod(_backward_once)


class _ScanTransformed(torch.autograd.Function):
    """The same under torch.func transforms, which need ``setup_context`` and a ``vmap`` rule."""

    @staticmethod
    def forward(a, b, initial, a_scalar, args):
        return _forward(a, a_scalar, b, initial, *args)

    @staticmethod
    def setup_context(ctx, inputs, output):
        _save(ctx, *inputs, output)
        ctx.bwd = None

    backward = staticmethod(_backward_once)

    @staticmethod
    def vmap(info, in_dims, a, b, initial, a_scalar, args):
        a2, b2, i2 = _lift_all(info, in_dims[:3], a, b, initial, args[3])
        return _ScanTransformed.apply(a2, b2, i2, a_scalar, args), 0


# --------------------------------------------------------------------------- the custom ops


@torch.library.custom_op("scanarray::linear_recurrence", mutates_args=())
def _op(a: Optional[Tensor], a_scalar: Optional[float], b: Tensor, initial: Optional[Tensor], axis: int,
        chunk: int, reverse: bool, dense: bool, dtype: torch.dtype, backend: Optional[str], method: str) -> Tensor:
    """h of :func:`scanarray.linear_recurrence` (``a`` None: the Python scalar ``a_scalar``;
    ``dtype``: the result's dtype as the contract's rules give it)."""
    return _forward(a, a_scalar, b, initial, axis, chunk, reverse, dense, dtype, backend, method)


@_op.register_fake
def _op_fake(a, a_scalar, b, initial, axis, chunk, reverse, dense, dtype, backend, method):
    return _alloc(b, _fake_shape(a, b, dense), dtype)


@torch.library.custom_op("scanarray::linear_recurrence_out", mutates_args=("out",))
def _op_out(a: Optional[Tensor], a_scalar: Optional[float], b: Tensor, initial: Optional[Tensor], out: Tensor,
            axis: int, chunk: int, reverse: bool, dense: bool, dtype: torch.dtype, backend: Optional[str],
            method: str) -> None:
    """As ``scanarray::linear_recurrence``, into ``out`` (no gradient)."""
    _forward(a, a_scalar, b, initial, axis, chunk, reverse, dense, dtype, backend, method, out=out)


@_op_out.register_fake
def _op_out_fake(a, a_scalar, b, initial, out, axis, chunk, reverse, dense, dtype, backend, method):
    return None


@torch.library.custom_op("scanarray::linear_recurrence_vjp", mutates_args=())
def _vjp_op(grad: Tensor, a: Optional[Tensor], a_scalar: Optional[float], h: Tensor, initial: Optional[Tensor],
            axis: int, chunk: int, reverse: bool, dense: bool, backend: Optional[str], method: str,
            a_shape: list[int], b_shape: list[int], i_shape: list[int], b_dtype: torch.dtype,
            need_a: bool, need_b: bool, need_initial: bool) -> tuple[Tensor, Tensor, Tensor]:
    """(grad_a, grad_b, grad_initial) of ``scanarray::linear_recurrence``, in the shapes given (an
    empty tensor where not needed)."""
    need = (need_a, need_b, need_initial)
    shapes = (a_shape, b_shape, i_shape)
    dtypes = (h.dtype if a is None else a.dtype, b_dtype, h.dtype if initial is None else initial.dtype)
    outs = _backward(grad, a, a_scalar, h, initial, axis, chunk, reverse, dense, backend, method, shapes, dtypes,
                     need)
    return tuple(o if o is not None else h.new_empty(0) for o in outs)


@_vjp_op.register_fake
def _vjp_fake(grad, a, a_scalar, h, initial, axis, chunk, reverse, dense, backend, method, a_shape, b_shape,
              i_shape, b_dtype, need_a, need_b, need_initial):
    dtypes = (h.dtype if a is None else a.dtype, b_dtype, h.dtype if initial is None else initial.dtype)
    return tuple(h.new_empty(s if n else (0,), dtype=d if n else h.dtype)
                 for s, d, n in zip((a_shape, b_shape, i_shape), dtypes, (need_a, need_b, need_initial)))


def _setup_context(ctx, inputs, output):
    a, a_scalar, b, initial, axis, chunk, reverse, dense, dtype, backend, method = inputs
    ctx.save_for_backward(a, initial, output)
    ctx.a_scalar, ctx.args = a_scalar, (axis, chunk, reverse, dense, backend, method)
    ctx.b_meta = (list(b.shape), b.dtype)


def _op_backward(ctx, grad):
    a, initial, h = ctx.saved_tensors
    axis, chunk, reverse, dense, backend, method = ctx.args
    b_shape, b_dtype = ctx.b_meta
    need_a, need_b, need_i = ctx.needs_input_grad[0], ctx.needs_input_grad[2], ctx.needs_input_grad[3]
    ga, gb, gi = torch.ops.scanarray.linear_recurrence_vjp(
        grad, a, ctx.a_scalar, h, initial, axis, chunk, reverse, dense, backend, method,
        [] if a is None else list(a.shape), b_shape, [] if initial is None else list(initial.shape), b_dtype,
        bool(need_a), bool(need_b), bool(need_i))
    return (ga if need_a else None, None, gb if need_b else None, gi if need_i else None) + (None,) * 7


torch.library.register_autograd("scanarray::linear_recurrence", _op_backward, setup_context=_setup_context)


# --------------------------------------------------------------------------- vmap


def _lift(x, bdim, full, B=None):
    """``x`` with its vmapped axis first (length 1 if it has none, or ``B`` expanded), then length-1
    axes up to ``full`` logical axes: views only."""
    if x is None:
        return None
    x = x.movedim(bdim, 0) if bdim is not None else x.unsqueeze(0)
    if B is not None and x.shape[0] != B:
        x = x.expand((B,) + tuple(x.shape[1:]))
    pad = full - (x.ndim - 1)
    return x.reshape((x.shape[0],) + (1,) * pad + tuple(x.shape[1:])) if pad > 0 else x


def _logical_ndim(a, da, b, db, dense):
    """Axes of the result per example: (result ndim, full ndims of a, b, initial)."""
    la = 0 if a is None else a.ndim - (da is not None)
    lb = b.ndim - (db is not None)
    if dense:
        nbatch = max(lb - 1, la - 2)
        return nbatch + 1, nbatch + 2, nbatch + 1, nbatch
    nd = max(lb, la)
    return nd, nd, nd, nd - 1


def _lift_all(info, dims, a, b, initial, dense):
    """The vmapped axis as one more lane: a, b, initial lifted to the same number of axes."""
    da, db, di = dims
    _, fa, fb, fi = _logical_ndim(a, da, b, db, dense)
    only_initial = db is None and da is None  # the result still has a batch of B
    return (_lift(a, da, fa), _lift(b, db, fb, info.batch_size if only_initial else None),
            _lift(initial, di, fi))


@torch.library.register_vmap("scanarray::linear_recurrence")
def _op_vmap(info, in_dims, a, a_scalar, b, initial, axis, chunk, reverse, dense, dtype, backend, method):
    a2, b2, i2 = _lift_all(info, (in_dims[0], in_dims[2], in_dims[3]), a, b, initial, dense)
    return torch.ops.scanarray.linear_recurrence(a2, a_scalar, b2, i2, axis, chunk, reverse, dense, dtype, backend,
                                                 method), 0


@torch.library.register_vmap("scanarray::linear_recurrence_vjp")
def _vjp_vmap(info, in_dims, grad, a, a_scalar, h, initial, axis, chunk, reverse, dense, backend, method, a_shape,
              b_shape, i_shape, b_dtype, need_a, need_b, need_initial):
    dg, da, _, dh, di = in_dims[:5]
    B = info.batch_size
    hl = h.ndim - (dh is not None)
    fa, fb, fi = (hl + 1, hl, hl - 1) if dense else (hl, hl, hl - 1)
    g2, h2 = _lift(grad, dg, hl, B), _lift(h, dh, hl, B)
    a2, i2 = _lift(a, da, fa), _lift(initial, di, fi)
    # per-example gradients: a batch axis first, then each input's own shape (padded)
    full = [[B] + [1] * (f - len(s)) + list(s) for s, f in ((a_shape, fa), (b_shape, fb), (i_shape, fi))]
    outs = torch.ops.scanarray.linear_recurrence_vjp(g2, a2, a_scalar, h2, i2, axis, chunk, reverse, dense, backend,
                                                     method, full[0], full[1], full[2], b_dtype, need_a, need_b,
                                                     need_initial)
    res, dims = [], []
    for o, s, n in zip(outs, (a_shape, b_shape, i_shape), (need_a, need_b, need_initial)):
        res.append(o.reshape([B] + list(s)) if n else o)
        dims.append(0 if n else None)
    return tuple(res), tuple(dims)
