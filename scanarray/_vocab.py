"""What the users' vocabulary (EWM, IIR filters, RL returns) shares: namespaces, axes, labels.

The helpers in :mod:`scanarray._ewm`, :mod:`scanarray.signal` and :mod:`scanarray.rl` are
written against the array namespace of their inputs (``array_api_compat``), with elementwise
operations and calls of :func:`scanarray.linear_recurrence` only, so one implementation serves
NumPy, CuPy, Dask and the torch/JAX front-ends (gradients included). Nothing here imports an
array library that the caller's arrays do not already come from.
"""

from __future__ import annotations

import contextlib
import functools
import numbers
import sys

import numpy as np

_SCALARS = (bool, int, float, complex, np.generic)


def is_array(x) -> bool:
    return hasattr(x, "shape") and hasattr(x, "dtype") and not isinstance(x, np.generic)


def as_array(x, name):
    """Arrays pass through; Python scalars and sequences become NumPy arrays; pandas and
    xarray objects have been unwrapped by the caller (:func:`unwrap`)."""
    if is_array(x):
        return x
    if isinstance(x, _SCALARS) or isinstance(x, (list, tuple)):
        try:
            return np.asarray(x)
        except ValueError as exc:
            raise ValueError(f"{name} is a sequence NumPy cannot make a rectangular array of ({exc})") from None
    raise TypeError(
        f"{name} must be an array (NumPy, CuPy, Dask, torch, JAX), a scalar or a sequence; "
        f"got {type(x).__name__}"
    )


def namespace(*xs):
    """The array-API namespace of the arrays among ``xs`` (NumPy's when there are none)."""
    from array_api_compat import array_namespace

    arrays = [x for x in xs if is_array(x)]
    if not arrays:
        return array_namespace(np.empty(0))
    try:
        return array_namespace(*arrays)
    except TypeError as exc:
        kinds = sorted({type(x).__module__.split(".")[0] for x in arrays})
        raise TypeError(
            f"inputs come from different array libraries ({', '.join(kinds)}); pass arrays of one "
            "library: scanarray never copies between host and device behind your back"
        ) from exc


def is_numpy(x) -> bool:
    return type(x) is np.ndarray


def is_eager_buffer(x) -> bool:
    """NumPy or CuPy: arrays whose values can be inspected cheaply and that ops may write in place.

    Only these take the data-dependent fast paths (a look at whether there are NaNs): a Dask
    array would compute its graph to answer, a JAX tracer cannot answer, a torch tensor may be
    part of an autograd graph that in-place writes would break.
    """
    if type(x) is np.ndarray:
        return True
    cupy = sys.modules.get("cupy")
    return cupy is not None and isinstance(x, cupy.ndarray)


def fused(x):
    """The fused elementwise passes of :mod:`scanarray.backends.cupy.elementwise` when ``x`` is a
    CuPy array, else None (the caller composes the namespace's operations, a pass each)."""
    cupy = sys.modules.get("cupy")
    if cupy is None or not isinstance(x, cupy.ndarray):
        return None
    from .backends.cupy import elementwise

    return elementwise


def ewm_kernel(x, stat="mean", adjust=True, quirk=False):
    """A one-pass kernel of pandas' EWM statistic ``stat`` that takes ``x``, else None: for a
    float32/float64 NumPy array where numba is installed, numba's (``numba_backend.ewm_mean``, with
    ``adjust`` and ``quirk`` bound, and ``ewm_var``, which takes them); for the adjust=True mean and
    variance of a CuPy array, :mod:`scanarray.backends.cupy.ewm`'s (the same calls)."""
    if type(x) is np.ndarray:
        from . import _registry

        if x.dtype.name not in ("float32", "float64") or _registry.unavailable_reason("numba") is not None:
            return None
        from .backends import numba_backend

        if stat == "mean":
            return functools.partial(numba_backend.ewm_mean, adjust=adjust, quirk=quirk)
        return getattr(numba_backend, f"ewm_{stat}")
    cupy = sys.modules.get("cupy")
    if cupy is None or not isinstance(x, cupy.ndarray) or not adjust:
        return None
    from .backends.cupy import ewm

    if not ewm.applies(x):
        return None
    if stat == "mean":
        return ewm.mean
    return lambda x, axis, g, nw, ignore_na, adjust, minp, bias, tiny: ewm.var(x, axis, g, ignore_na, minp, bias, tiny)


def gae_kernel(x):
    """A one-pass GAE (and discounted returns: no values, ``lam = 1``) that takes ``x``, else
    None: numba's (``numba_backend.gae``) for a NumPy array where numba is installed,
    :mod:`scanarray.backends.cupy.rl`'s for a CuPy array (each returns None for the layouts and
    dtypes it does not take)."""
    if type(x) is np.ndarray:
        from . import _registry

        if _registry.unavailable_reason("numba") is not None:
            return None
        from .backends import numba_backend

        return numba_backend.gae
    cupy = sys.modules.get("cupy")
    if cupy is None or not isinstance(x, cupy.ndarray):
        return None
    from .backends.cupy import rl

    return rl.gae


def ewm_loop_first(x, axis, stat):
    """Whether numba's one-pass loop of EWM statistic ``stat`` (:func:`ewm_kernel`'s) takes NumPy
    array ``x`` (time along ``axis``) before the NaN-free path's scans are tried: small data, and
    for the variance lanes that give every thread one (``numba_backend.ewm_loop_first``)."""
    from .backends import numba_backend

    return numba_backend.ewm_loop_first(stat, x.size, x.size // max(x.shape[axis], 1))


def scan(a, b, axis, *, initial=None, scale=None, out=None):
    """``scale * linear_recurrence(a, b, axis=axis, initial=initial, out=out)`` (``scale`` a real
    Python number or None). On NumPy and CuPy arrays through the core's entry that takes the
    factor (``Problem.scale``): the CuPy kernels, and the numba backend's sequential kernels,
    apply it as they store, so a filter's gain or an EWM's normalisation costs no pass of its
    own; elsewhere the public call and a product (a new array for Dask, torch and JAX, whose
    autograd and tracing need it so)."""
    from . import _api

    if scale is not None and is_eager_buffer(b):
        key, bound = None, _api._BOUND.get(type(b))
        if bound is not None:  # a repeated signature: its bound launch (scanarray._bound)
            result, key = bound.call(a, b, axis, 64, initial, False, False, None, out, None, "auto", scale=scale)
            if result is not None:
                return result
        return _api._linear_recurrence(a, b, axis, 64, initial, False, False, None, out, None, "auto", key,
                                       scale=scale)
    h = _api.linear_recurrence(a, b, axis=axis, initial=initial, out=out)
    return h if scale is None else h * scale


def tensors_as_arrays(fn=None, *, host=()):
    """``fn`` where torch tensors that need no gradient run as views of their memory, NumPy's on a
    CPU and CuPy's on a GPU (CuPy then runs on torch's current stream), and its arrays come back
    as tensors viewing the results. ``host``: the names of parameters that may hold NumPy arrays
    beside tensors (a filter's coefficients), by position or keyword.

    torch tensors otherwise take the generic path: torch's elementwise operations around the scans,
    which keeps autograd, ``torch.compile`` and ``torch.func`` working, but runs the vocabulary
    several times slower than on NumPy or CuPy arrays (no NaN-free shortcuts and no fused kernels,
    a pass per operation). Tensors that want a gradient, wrapped or subclassed tensors, traced
    calls, tensors on several devices, dtypes NumPy lacks, integer data (whose default float
    differs: float32 in torch), GPU tensors without CuPy or given as host coefficients, and calls
    mixing array libraries keep that path.
    """
    if fn is None:
        return functools.partial(tensors_as_arrays, host=host)
    import inspect

    names = list(inspect.signature(fn).parameters)
    positions = frozenset(names.index(h) for h in host)

    @functools.wraps(fn)
    def call(*args, **kwargs):
        torch = sys.modules.get("torch")
        if torch is not None:
            views = _array_views(torch, args, kwargs, positions, host)
            if views is not None:
                args, kwargs, context = views
                with context:  # (CuPy's results handed to torch on torch's stream)
                    return _as_tensors(torch, fn(*args, **kwargs))
        return fn(*args, **kwargs)

    return call


def _array_views(torch, args, kwargs, positions=frozenset(), host=()):
    """(args, kwargs, context) with every torch tensor a NumPy view (CPU) or a CuPy view (CUDA;
    ``context`` makes torch's current stream CuPy's), or None where the torch path applies."""
    values = list(args) + list(kwargs.values())
    tensors = [v for v in values if isinstance(v, torch.Tensor)]
    if not tensors:
        return None
    others = [v for i, v in enumerate(args) if i not in positions] + [v for k, v in kwargs.items() if k not in host]
    if any(is_array(v) and not isinstance(v, torch.Tensor) for v in others):
        return None
    if any(isinstance(v, (list, tuple)) and any(isinstance(u, torch.Tensor) for u in v) for v in values):
        return None
    peek = getattr(torch._C._functorch, "peek_interpreter_stack", lambda: None)  # torch.func transforms
    if torch.compiler.is_compiling() or peek() is not None:
        return None
    grad = torch.is_grad_enabled()
    floating = False
    for t in tensors:
        if type(t) not in (torch.Tensor, torch.nn.Parameter) or (grad and t.requires_grad):
            return None
        if t.dtype.is_floating_point or t.dtype.is_complex:
            if t.dtype == torch.bfloat16:  # (NumPy has no bfloat16)
                return None
            floating = True
        elif t.dtype != torch.bool:
            return None
    device = tensors[0].device
    if not floating or any(t.device != device for t in tensors):
        return None
    if device.type == "cpu":
        def view(v):
            return v.detach().resolve_conj().resolve_neg().numpy() if isinstance(v, torch.Tensor) else v

        context = contextlib.nullcontext()
    elif device.type == "cuda":
        from . import _registry

        on_host = [v for i, v in enumerate(args) if i in positions] + [kwargs.get(h) for h in host]
        if any(isinstance(v, torch.Tensor) for v in on_host) or _registry.unavailable_reason("cupy") is not None:
            return None
        from . import _torch

        def view(v):
            return _torch._cupy(v) if isinstance(v, torch.Tensor) else v

        context = _torch._on_torch_stream(device)
    else:
        return None
    return [view(v) for v in args], {k: view(v) for k, v in kwargs.items()}, context


def _as_tensors(torch, out):
    if isinstance(out, np.ndarray):
        return torch.from_numpy(out if out.flags.writeable else out.copy())
    cupy = sys.modules.get("cupy")
    if cupy is not None and isinstance(out, cupy.ndarray):
        return torch.from_dlpack(out)
    if isinstance(out, tuple):
        return tuple(_as_tensors(torch, o) for o in out)
    if isinstance(out, list):
        return [_as_tensors(torch, o) for o in out]
    return out


def float_dtype(xp, *xs):
    """The floating dtype results are computed in: the promoted dtype of the arrays, integers
    and bools as the default float (float64; float32 where the library's default is float32)."""
    arrays = [x for x in xs if is_array(x)]
    dt = xp.result_type(*[x.dtype for x in arrays]) if arrays else xp.float64
    if xp.isdtype(dt, ("real floating", "complex floating")):
        return dt
    return xp.asarray(0.0).dtype if _default_float_is_32(xp) else xp.float64


def _default_float_is_32(xp) -> bool:
    name = getattr(xp, "__name__", "")
    return "jax" in name or "torch" in name


def check_dtype(x, name, accept=("real floating", "integral", "bool"), what="real numbers"):
    from array_api_compat import array_namespace

    xp = array_namespace(x)
    if not xp.isdtype(x.dtype, accept):
        raise TypeError(f"{name} has dtype {x.dtype}; accepted: {what} (bool, integer or floating dtypes)")


def normalize_axis(axis, ndim, name, shape):
    from ._api import _normalize_axis

    return _normalize_axis(axis, ndim, f"{name} of shape {tuple(shape)}")


def check_scalar(value, name, lo=None, hi=None):
    """A real Python/NumPy scalar within [lo, hi]; returns a float."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number; got {value!r} of type {type(value).__name__}")
    v = float(value)
    if v != v or (lo is not None and v < lo) or (hi is not None and v > hi):
        raise ValueError(f"{name} must be in [{'-inf' if lo is None else lo}, {'inf' if hi is None else hi}]; "
                         f"got {value!r}")
    return v


def along(x, sl, axis):
    """``x[..., sl, ...]`` with ``sl`` on ``axis``."""
    return x[(slice(None),) * axis + (sl,)]


def shift(xp, x, axis, fill, forward=True):
    """``y[t] = x[t-1]`` (forward) or ``x[t+1]`` along ``axis``, with ``fill`` (an array of x's
    shape without the axis, or a scalar) entering at the start (forward) or the end."""
    T = x.shape[axis]
    edge_shape = tuple(x.shape[:axis]) + (1,) + tuple(x.shape[axis + 1:])
    if is_array(fill):
        edge = xp.reshape(xp.broadcast_to(fill, edge_shape[:axis] + edge_shape[axis + 1:]), edge_shape)
        edge = xp.astype(edge, x.dtype)
    else:
        edge = xp.full(edge_shape, fill, dtype=x.dtype, **device_of(xp, x))
    if T == 0:
        return x
    if forward:
        return xp.concat([edge, along(x, slice(0, T - 1), axis)], axis=axis)
    return xp.concat([along(x, slice(1, T), axis), edge], axis=axis)


def shift_forward(xp, x, axis, fill):
    return shift(xp, x, axis, fill, forward=True)


def shift_backward(xp, x, axis, fill):
    return shift(xp, x, axis, fill, forward=False)


def device_of(xp, x):
    """``{"device": ...}`` for creation functions, or ``{}`` where the library takes none."""
    from array_api_compat import device, is_dask_array, is_numpy_array

    if is_numpy_array(x) or is_dask_array(x):
        return {}
    return {"device": device(x)}


def time_vector(xp, v, axis, ndim):
    """A 1-D array along time reshaped to broadcast along ``axis`` of an ``ndim``-d array."""
    return xp.reshape(v, (v.shape[0],) + (1,) * (ndim - axis - 1))


def exact_method(x):
    """``linear_recurrence`` keywords that make a NumPy scan the plain loop, bit for bit.

    numba's ``sequential`` kernels evaluate ``a[t] * h + b[t]`` with one rounding per operation
    (no FMA contraction), as a Python or NumPy loop does; its ``chunked`` method (taken by
    ``"auto"`` for few long lanes) and the other backends' parallel scans reassociate.
    """
    if not is_numpy(x):
        return {}
    from . import _registry

    if _registry.unavailable_reason("numba") is None:
        return {"backend": "numba", "method": "sequential"}
    return {}


# --------------------------------------------------------------------------- labelled inputs


class Labels:
    """How to put a pandas/xarray object's labels back on a result computed from its values."""

    def __init__(self, kind, obj):
        self.kind, self.obj = kind, obj

    def wrap(self, values, name=None):
        if self.kind is None:
            return values
        if self.kind == "series":
            import pandas as pd

            return pd.Series(np.asarray(values), index=self.obj.index, name=self.obj.name if name is None else name)
        if self.kind == "frame":
            import pandas as pd

            return pd.DataFrame(np.asarray(values), index=self.obj.index, columns=self.obj.columns)
        # xarray.DataArray: same dims and coords, the array type of the input's data kept
        return self.obj.copy(data=values)


def unwrap(x, name):
    """(array, Labels): the values of a pandas Series/DataFrame or xarray DataArray, or ``x``.

    Duck-typed: nothing is imported to recognise these objects.
    """
    mod = type(x).__module__.split(".")[0]
    if mod == "pandas" and hasattr(x, "index"):
        kind = "frame" if hasattr(x, "columns") else "series"
        values = x.to_numpy(dtype=np.float64, na_value=np.nan)
        return values, Labels(kind, x)
    if mod == "xarray" and hasattr(x, "dims") and hasattr(x, "data"):
        return x.data, Labels("dataarray", x)
    return x, Labels(None, None)
