"""The public function: validation, dtype rules, dispatch. Backends trust what leaves here."""

from __future__ import annotations

import functools
import numbers
import operator

import numpy as np

from . import _arrays, _bound, _dtypes, _registry
from ._problem import Problem

__all__ = ["linear_recurrence"]

_PYTHON_SCALARS = _arrays.PYTHON_SCALARS


def linear_recurrence(
    a,
    b,
    axis=-1,
    chunk=64,
    *,
    initial=None,
    reverse=False,
    dense=False,
    dtype=None,
    out=None,
    backend=None,
    method="auto",
):
    r"""Compute the linear recurrence ``h[t] = a[t] * h[t-1] + b[t]`` along one axis.

    The diagonal form multiplies elementwise; with ``dense=True`` each step
    is a matrix-vector product ``h[t] = A[t] @ h[t-1] + b[t]``. The result is
    an array of the same library (NumPy, CuPy, Dask) and device as the inputs.
    PyTorch tensors and JAX arrays work too, with gradients
    (docs/guide/frameworks.md).

    Parameters
    ----------
    a : array_like or scalar
        Coefficients. Diagonal form: broadcastable against `b` (a Python
        scalar, a per-lane array with a length-1 time axis, or a full array);
        a broadcast `a` is read in place, never expanded. Dense form: shape
        ``(..., n, n)`` broadcastable to ``b.shape[:-1] + (n, n)``; a
        time-invariant matrix of shape ``(n, n)`` is fine.
    b : array_like
        Inputs. Dense form: shape ``(..., n)``, the last axis is the state.
        Arrays of one library: NumPy, CuPy or Dask; anything ``numpy.asarray``
        takes (sequences, a pandas Series) is read as NumPy. NumPy scalars
        (``x[0]``) mix with any library, NumPy arrays with Dask arrays (as
        one block each).
    axis : int, optional
        The time axis. Negative values count from the end. In the dense form
        it indexes ``b.shape[:-1]``, so the default -1 is the axis just before
        the state axis, and the state axis can never be the time axis.
    chunk : int, optional
        Time-tile length of chunked algorithms. Changes speed, never results
        (beyond rounding).
    initial : array_like, optional
        ``h[-1]`` (``h[T]`` when `reverse`), broadcastable to the result's shape
        with the time axis removed. Default zeros.
    reverse : bool, optional
        Scan backwards: ``h[t] = a[t] * h[t+1] + b[t]`` (discounted returns,
        GAE, backward passes). No flipped copies are made.
    dense : bool, optional
        Use the dense (matrix) form. Without it the call is diagonal; shapes
        are never guessed.
    dtype : dtype, optional
        Accumulation and output dtype. Default: the promoted dtype of `a`,
        `b` and `initial`, with Python scalars weak (float32 data with
        ``a=0.9`` stays float32). float16 and bfloat16 accumulate in float32
        and are stored in their own dtype; integer and bool inputs compute in
        float64.
    out : array, optional
        Where to write the result: exactly the result's shape and dtype, of
        the inputs' array library. May be `b` itself (in place).
    backend : str, optional
        ``None`` picks by array type and what is installed (see
        :func:`available_backends`); a name forces that backend.
    method : str, optional
        ``"auto"`` or an algorithm the backend offers (``"chunked"``,
        ``"lookback"``, ``"cyclic_reduction"``...).

    Returns
    -------
    h : array
        The recurrence, of the broadcast shape of `a` and `b` (dense: of `b`'s
        broadcast batch shape), in the library of the inputs; `out` if given.

    Raises
    ------
    TypeError
        Mixed array libraries, an array library without a backend, dtypes
        that are neither numeric nor boolean, an `out` of the wrong dtype.
    ValueError
        Shapes that do not broadcast, a bad `chunk`, unknown `backend` or
        `method`, `out` or `initial` of the wrong shape.
    numpy.exceptions.AxisError
        `axis` out of range.
    ImportError
        A forced `backend` whose packages are not installed.

    See Also
    --------
    available_backends : what runs here and why not.
    linear_recurrence_vjp : the gradients of this function.
    scipy.signal.lfilter : ``lfilter([1], [1, -a], b)`` is the scalar-`a` case.

    Notes
    -----
    The recurrence is associative in the pairs ``(a, b)``: composing step
    ``(a1, b1)`` then ``(a2, b2)`` gives ``(a2 * a1, a2 * b1 + b2)``, which is
    what chunked and parallel scans exploit [1]_. ``a = 0`` is an exact reset
    for finite states (an infinite or NaN state times 0 is NaN, as in the
    loop), and non-finite values land where a sequential loop puts them: no
    backend rewrites the scan in log space or divides by ``a``. Inputs are
    converted to the accumulation dtype as they are read (``dtype=float32``
    reads ``1e39`` as ``inf``); float16 and bfloat16 results are accumulated
    in float32, and the carried state never passes through the storage dtype. The one exception is
    ``dense=True`` with a parallel method (``cyclic_reduction``, ``prefix``,
    ``chunked``, ``lookback``): matrix products associate the steps
    differently, so an element may be NaN where the loop gives an infinity or
    the reverse, and transition products that overflow can give NaN where the
    loop stays finite; ``method="sequential"`` follows the loop exactly
    (docs/guide/dense.md, "Growing systems").

    With ``dense=True`` on CuPy, the float32 chunk products of ``"lookback"``
    and ``"chunked"`` run on tensor cores as three TF32 products per multiply,
    which keeps float32-sized errors (7e-8 on mixed-sign data); on
    non-negative systems close to spectral radius 1 the tensor core's
    rounding toward zero adds up to about 2e-6 (radius 0.99) or 1.5e-5
    (0.999), where ``method="sequential"`` stays at 7e-8 (docs/guide/dense.md).

    On CuPy, a call that repeats an earlier call's signature (shapes, strides,
    dtypes and the other arguments; new data and addresses are fine) goes
    straight to the launch planned for it, after checking devices, alignment
    and overlaps: about 7 µs of host time per call instead of about 40 on
    the H200 host measured (docs/guide/gpu.md).

    References
    ----------
    .. [1] G. E. Blelloch, "Prefix sums and their applications", CMU-CS-90-190, 1990.

    Examples
    --------
    An exponential moving average and discounted returns with an episode reset:

    >>> import numpy as np
    >>> from scanarray import linear_recurrence
    >>> linear_recurrence(0.5, np.array([1.0, 1.0, 1.0, 1.0]))
    array([1.   , 1.5  , 1.75 , 1.875])
    >>> rewards = np.array([1.0, 0.0, 2.0, 1.0])
    >>> not_done = np.array([0.9, 0.0, 0.9, 0.9])  # gamma, zero where an episode ends
    >>> linear_recurrence(not_done, rewards, reverse=True)
    array([1. , 0. , 2.9, 1. ])

    Along the first axis of a time-major array, starting from a given state:

    >>> x = np.ones((3, 2), dtype=np.float32)
    >>> linear_recurrence(1.0, x, axis=0, initial=np.array([10.0, 20.0], np.float32))
    array([[11., 21.],
           [12., 22.],
           [13., 23.]], dtype=float32)

    A dense (matrix) recurrence: a rotation applied step by step.

    >>> R = np.array([[0.0, -1.0], [1.0, 0.0]])
    >>> linear_recurrence(R, np.array([[1.0, 0.0], [0.0, 0.0], [0.0, 0.0]]), dense=True)
    array([[ 1.,  0.],
           [ 0.,  1.],
           [-1.,  0.]])
    """
    # --- a repeated call: the launches bound to its signature (_bound.py) ------------
    key = None
    bound = _BOUND.get(type(b))
    if bound is not None:
        result, key = bound.call(a, b, axis, chunk, initial, reverse, dense, dtype, out, backend, method)
        if result is not None:
            return result

    # --- torch and JAX arrays: their front-ends (imported only when such an array arrives) ---
    frontend = _frontend(a, b, initial, out)
    if frontend is not None:
        return frontend.linear_recurrence(a, b, axis, chunk, initial=initial, reverse=reverse, dense=dense,
                                          dtype=dtype, out=out, backend=backend, method=method)
    return _linear_recurrence(a, b, axis, chunk, initial, reverse, dense, dtype, out, backend, method, key)


def _linear_recurrence(a, b, axis, chunk, initial, reverse, dense, dtype, out, backend, method, key=None, *,
                       product=None, scale=None):
    """The public function's work on NumPy, CuPy and Dask arrays (``key``: the signature to bind).

    ``product=(mul, mul_out)`` is the adjoint's entry (:mod:`scanarray._vjp`): ``mul_out`` of the
    result's shape and dtype also receives ``h * mul`` (``mul`` broadcastable to the result), in the
    scan's own pass where the backend ``fuses_product``, else right after it. Backends that write
    ``out`` only (not Dask). ``scale`` (a real Python float; the vocabulary's entry,
    :func:`scanarray._vocab.scan`): the result is ``scale * h``, in the scan's own pass where the
    backend ``fuses_scale``, else right after it. Calls with ``product`` are never bound to a signature;
    a ``key`` with ``scale`` holds it (:meth:`scanarray._bound.BoundCalls.call`).
    """
    # --- what kind of arrays, and which namespace (the rules of _arrays) -----
    a_arg, b_arg, initial_arg = a, b, initial
    a, b, initial, kind, xp = _arrays.inputs(a, b, initial)
    if type(b) not in _SEEN_B:
        _note_b_type(type(b), kind)

    # --- dtypes ----------------------------------------------------------------
    _check_dtype(a, "a")
    _check_dtype(b, "b")
    _check_dtype(initial, "initial")
    out_dtype, compute_dtype = _result_dtypes(a, b, initial, dtype)

    # --- scalar parameters -----------------------------------------------------
    if isinstance(chunk, bool) or not isinstance(chunk, numbers.Integral):
        raise TypeError(f"chunk must be a positive int; got {chunk!r} of type {type(chunk).__name__}")
    chunk = int(chunk)
    if chunk <= 0:
        raise ValueError(f"chunk must be a positive int; got {chunk}")
    if not isinstance(dense, (bool, np.bool_)):
        raise TypeError(f"dense must be True or False; got {dense!r}")
    if not isinstance(reverse, (bool, np.bool_)):
        raise TypeError(f"reverse must be True or False; got {reverse!r}")
    dense, reverse = bool(dense), bool(reverse)

    # Scalars (Python's, and NumPy's beside CuPy) become 0-d arrays of the compute dtype in the
    # inputs' library (for Dask, with the inputs' block type: NumPy or CuPy blocks).
    is_scalar = _arrays.is_scalar
    if is_scalar(a) or is_scalar(b) or is_scalar(initial):
        a, b, initial = (
            _arrays.scalar_array(xp, kind, x, compute_dtype, (a, b, initial)) if is_scalar(x) else x
            for x in (a, b, initial)
        )

    # --- shapes ----------------------------------------------------------------
    if dense:
        shape, lanes_shape, axis = _dense_shapes(a, b, axis)
    else:
        shape, lanes_shape, axis = _diagonal_shapes(a, b, axis)
    if initial is not None and tuple(initial.shape) != lanes_shape:
        _check_broadcast_to(initial, lanes_shape, "initial",
                            "the result's shape with the time axis removed")

    # --- backend and method ----------------------------------------------------
    spec = _choose_backend(backend, kind)
    mod = _registry.load(spec.name)
    valid = spec.dense_methods if dense else spec.methods
    if dense and not valid:
        takers = [s.name for s in _registry.BACKENDS.values() if kind in s.arrays and s.dense_methods]
        raise ValueError(
            f"backend={spec.name!r} has no dense methods; for dense=True with {kind} arrays use "
            f"one of: {', '.join(takers)}"
        )
    if not isinstance(method, str) or (method != "auto" and method not in valid):
        form = "dense" if dense else "diagonal"
        raise ValueError(
            f"method={method!r} is not a {form} method of backend {spec.name!r}; "
            f"valid: {', '.join(('auto',) + tuple(valid))}"
        )

    # --- out -------------------------------------------------------------------
    if out is not None:
        _check_out(out, kind, shape, out_dtype, spec)

    # --- canonical views: broadcast (stride 0, no copy), time axis moved -------
    # Every step is skipped when it would be the identity: this runs on every
    # call, and on CuPy each array operation costs microseconds of host time
    # during which the GPU may idle.
    t_ax = -2 if dense else -1
    ndim = len(shape)
    perm = _to_canonical(ndim, axis, ndim + t_ax)
    if dense:
        a_full = shape[:-1] + (shape[-1],) * 2
        a_v = _view(xp, a, a_full, _to_canonical(ndim + 1, axis, ndim - 2))
    else:
        a_v = _view(xp, a, shape, perm)
    b_v = _view(xp, b, shape, perm)
    h0 = None if initial is None else _view(xp, initial, lanes_shape, None)

    result = out
    if spec.writes_out:
        if out is None:
            # Keep b's memory order for the result (NumPy's order="K"), so a
            # time-major input gives a time-major output.
            full_b = tuple(b.shape) == shape and getattr(b, "ndim", 0) > 0
            if full_b and not (kind == "cupy" and b.flags.c_contiguous):
                alloc = functools.partial(xp.empty_like, dtype=out_dtype)
            else:  # C order either way; CuPy's empty does less Python work than empty_like
                alloc = lambda _b: xp.empty(shape, dtype=out_dtype)  # noqa: E731
            result = alloc(b)
        else:
            # In-place is only defined for out=b exactly; any other overlap with
            # an input would let the scan read what it already overwrote.
            views = a_v, b_v, h0
            a_v, b_v, h0 = _unalias(xp, out, b, a_v, b_v, h0)
            if any(x is not y for x, y in zip((a_v, b_v, h0), views)):
                key = None  # copies were made: nothing to bind
        out_v = _view(xp, result, shape, perm)
    else:
        out_v = None

    a_c = None
    if not spec.writes_out:
        # Lazy arrays carry no strides to tell broadcast axes: hand the backend
        # `a` with its own (length-1) axes, in the canonical layout.
        a_c = xp.reshape(a, (1,) * (len(a_v.shape) - a.ndim) + tuple(a.shape))
        a_c = xp.moveaxis(a_c, axis, -3 if dense else -1)
    problem = Problem(
        xp=xp, kind=kind, a=a_v, b=b_v, initial=h0, out=out_v,
        dtype=compute_dtype, out_dtype=out_dtype, reverse=reverse, dense=dense,
        chunk=chunk, method=method, backend=spec.name, a_compact=a_c, perm=perm,
        **(_epilogue(xp, product, shape, perm) if product is not None and spec.fuses_product else {}),
        scale=scale if spec.fuses_scale else None,
    )
    if problem.method == "auto":
        problem.method = mod.auto_method(problem)
    if 0 in shape:  # nothing to compute: an empty time axis or no lanes
        return result if spec.writes_out else xp.moveaxis(mod.linear_recurrence(problem), t_ax, axis)
    canonical = mod.linear_recurrence(problem)
    if product is not None and problem.mul is None:  # the backend does not fuse: one more pass
        xp.multiply(result, product[0], out=product[1])
    if scale is not None and problem.scale is None:
        if not spec.writes_out:
            return xp.moveaxis(canonical, t_ax, axis) * scale
        result *= scale
    if key is not None and problem.bind is not None and b is b_arg and initial is initial_arg and (
            a is a_arg or isinstance(a_arg, _PYTHON_SCALARS)):
        # Only the caller's own arrays are bound (a Python scalar a: its 0-d array, the same
        # value under the key), never copies (of non-native byte order) a repeat would not make.
        # A bound call allocates its result as this one did (alloc: None when out was given).
        _bound.CALLS.store(key, problem.bind(a, a is not a_arg, b, initial, result, alloc if out is None else None))
    if spec.writes_out:
        return result
    return xp.moveaxis(canonical, t_ax, axis)


# --------------------------------------------------------------------------- front-ends

#: (types of a, b, initial, out) -> the module of their framework's front-end, or None
_FRONTENDS: dict = {}


def _frontend(a, b, initial, out):
    """The front-end module for torch or JAX arguments, None for anything else (memoised per types)."""
    key = (type(a), type(b), type(initial), type(out))
    try:
        return _FRONTENDS[key]
    except KeyError:
        pass
    names = (("a", a), ("b", b), ("initial", initial), ("out", out))
    found = {n: _framework(x) for n, x in names}
    frameworks = {f for f in found.values() if f is not None}
    module = None
    if frameworks:
        others = {n: found[n] or _library(x) for n, x in names
                  if x is not None and not isinstance(x, _PYTHON_SCALARS) and found[n] not in frameworks}
        if len(frameworks) > 1 or others:
            named = ", ".join(f"{n}: {found[n] or _library(x) if _is_array(x) else type(x).__name__}"
                              for n, x in names if x is not None and not isinstance(x, _PYTHON_SCALARS))
            raise TypeError(
                f"inputs come from different array libraries ({named}); pass arrays of one library "
                "(Python scalars mix with any): scanarray never converts between frameworks behind your back"
            )
        # import statements, not importlib: torch.compile traces them (a first call may be compiled)
        if frameworks.pop() == "torch":
            from . import _torch as module
        else:
            from . import _jax as module
    _FRONTENDS[key] = module
    return module


def _framework(x):
    """"torch" or "jax" if ``x`` is one of their arrays (tracers included), else None.

    Asks only frameworks already imported (``sys.modules``), as array-api-compat does: an array of
    a framework cannot exist before the framework is imported, so nothing is imported to find out.
    """
    import sys

    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        return "torch"
    jax = sys.modules.get("jax")
    if jax is not None and isinstance(x, getattr(jax, "Array", ())):
        return "jax"
    return None


def _epilogue(xp, product, shape, perm):
    """``Problem.mul`` and ``Problem.mul_out``: the canonical views of ``product=(mul, mul_out)``."""
    mul, mul_out = product
    return {"mul": _view(xp, mul, shape, perm), "mul_out": _view(xp, mul_out, shape, perm)}


# --------------------------------------------------------------------------- helpers


def _to_canonical(ndim, axis, target):
    """The permutation moving ``axis`` to position ``target``, or None when it stays put."""
    if axis == target:
        return None
    rest = [i for i in range(ndim) if i != axis]
    rest.insert(target, axis)
    return tuple(rest)


def _view(xp, x, shape, perm):
    """``x`` broadcast to ``shape`` (stride 0, no copy) and transposed by ``perm``: views only."""
    if tuple(x.shape) != shape:
        x = xp.broadcast_to(x, shape)
    return x if perm is None else x.transpose(perm)


# Names the adjoint's and the front-ends' modules read (the logic lives in _arrays).
_is_array = _arrays.is_array
_library = _arrays.library
_as_input = _arrays.as_input


def _namespace(a, b, initial):
    """(kind, native module) of arguments already passed through ``_as_input``."""
    return _arrays.inputs(a, b, initial)[3:]


#: types of ``b`` seen, and those whose calls a backend binds to their launches (``_bound``)
_SEEN_B: set = set()
_BOUND: dict = {}


def _note_b_type(t, kind):
    _SEEN_B.add(t)
    if _registry.fast_call(kind):
        _BOUND[t] = _bound.CALLS


def _check_dtype(x, name):
    if x is None or isinstance(x, _PYTHON_SCALARS):
        return
    dt = x.dtype
    if dt in _READABLE:
        return
    dt = np.dtype(dt)
    if dt.kind in "biu" or _dtypes.lookup(dt) is not None:
        _READABLE.add(dt)
        return
    raise TypeError(f"{name} has dtype {dt}, which scanarray cannot scan; accepted: bool, integer, {_dtypes.ACCEPTED}")


#: input dtypes seen to be readable (bool, integers and the table's storage dtypes)
_READABLE: set = set()


_DTYPE_CACHE: dict = {}
_SCALAR_PROTOTYPES = {bool: False, int: 0, float: 0.0, complex: 0j}


def _result_dtypes(a, b, initial, dtype):
    """(storage dtype, accumulation dtype) by the contract's rules, memoised per input dtypes."""
    # NEP 50 promotion of a Python scalar depends on its type, not its value.
    key = tuple(type(x) if isinstance(x, _PYTHON_SCALARS) else x.dtype for x in (a, b, initial) if x is not None)
    try:
        key = (key, dtype)
        return _DTYPE_CACHE[key]
    except KeyError:
        parts = [_SCALAR_PROTOTYPES[k] if k in _SCALAR_PROTOTYPES else k for k in key[0]]
        _DTYPE_CACHE[key] = result = _promote(parts, dtype)
        return result
    except TypeError:  # an unhashable dtype= argument: let _promote explain
        return _promote([_SCALAR_PROTOTYPES.get(k, k) if isinstance(k, type) else k for k in key[0]], dtype)


def _promote(parts, dtype):
    promoted = np.result_type(*parts)  # NEP 50: Python scalars are weak
    if promoted.kind in "biu":
        promoted = np.dtype(np.float64)
    if dtype is None:
        out_dtype = promoted
    else:
        try:
            out_dtype = np.dtype(dtype)
        except TypeError as exc:
            raise TypeError(f"dtype={dtype!r} is not a dtype; accepted: {_dtypes.ACCEPTED}") from exc
        if _dtypes.lookup(out_dtype) is None:
            raise TypeError(f"dtype={out_dtype} cannot hold a recurrence; accepted: {_dtypes.ACCEPTED}")
        if promoted.kind == "c" and out_dtype.kind != "c":
            raise TypeError(
                f"dtype={out_dtype} would discard the imaginary part of complex inputs "
                f"({promoted}); use a complex dtype"
            )
    row = _dtypes.lookup(out_dtype)
    if row is None:
        raise TypeError(f"dtype {out_dtype} is not supported; accepted: {_dtypes.ACCEPTED}")
    if not out_dtype.isnative:
        out_dtype = out_dtype.newbyteorder("=")
    return out_dtype, np.dtype(row.accumulate)


def _normalize_axis(axis, ndim, what):
    if isinstance(axis, (bool, np.bool_)):
        raise TypeError(f"axis must be an int; got {axis!r}")
    try:
        axis = operator.index(axis)
    except TypeError:
        raise TypeError(f"axis must be an int; got {axis!r}") from None
    if not -ndim <= axis < ndim:
        raise np.exceptions.AxisError(
            f"axis {axis} is out of bounds for {what}; accepted: {-ndim} <= axis < {ndim}"
            if ndim else f"axis {axis}: {what} has no axis to scan along (pass an array, not scalars)"
        )
    return axis % ndim


def _diagonal_shapes(a, b, axis):
    shape = tuple(b.shape)
    a_shape = tuple(a.shape)
    try:
        if a_shape != shape and a_shape:
            shape = tuple(np.broadcast_shapes(a_shape, shape))
    except ValueError:
        raise ValueError(
            f"a with shape {a_shape} and b with shape {shape} do not broadcast together "
            f"(NumPy broadcasting rules){_broadcast_hint(a_shape, shape, axis)}"
        ) from None
    axis = _normalize_axis(axis, len(shape), f"the result of shape {shape}")
    return shape, shape[:axis] + shape[axis + 1:], axis


def _broadcast_hint(a_shape, b_shape, axis):
    """What the caller probably meant by an ``a`` that does not broadcast against ``b``."""
    try:
        ax = operator.index(axis) % len(b_shape) if b_shape else None
    except TypeError:
        ax = None
    if ax is not None and len(a_shape) == 1 and a_shape[0] == b_shape[ax] and ax < len(b_shape) - 1:
        # one coefficient per time step, the time axis not last: align it with b's time axis
        trail = len(b_shape) - 1 - ax
        fix = "a[:, None]" if trail == 1 else f"a.reshape({a_shape[0]}{', 1' * trail})"
        return f"; a holds one value per step of axis {axis} (length {a_shape[0]}): pass {fix}"
    n = b_shape[-1] if b_shape else None
    if len(a_shape) >= 2 and a_shape[-2:] == (n, n):
        return f"; if a holds {n} x {n} transition matrices (h[t] = a[t] @ h[t-1] + b[t]), pass dense=True"
    return ""


def _dense_shapes(a, b, axis):
    if b.ndim < 2:
        raise ValueError(
            f"dense=True needs b of shape (..., T, n) with a time axis and a state axis; "
            f"got b with shape {tuple(b.shape)}"
        )
    n = b.shape[-1]
    if a.ndim < 2 or tuple(a.shape[-2:]) != (n, n):
        raise ValueError(
            f"dense=True needs a of shape (..., n, n) with n = b.shape[-1] = {n}; "
            f"got a with shape {tuple(a.shape)}"
        )
    try:
        batch = tuple(np.broadcast_shapes(tuple(a.shape[:-2]), tuple(b.shape[:-1])))
    except ValueError:
        raise ValueError(
            f"dense=True: the leading axes of a {tuple(a.shape)} (all but the last two) and of "
            f"b {tuple(b.shape)} (all but the last) do not broadcast together"
        ) from None
    axis = _normalize_axis(
        axis, len(batch),
        f"the time/batch axes {batch} of b with shape {tuple(b.shape)} "
        "(with dense=True the state axis, b's last, cannot be the time axis)",
    )
    shape = batch + (n,)
    return shape, batch[:axis] + batch[axis + 1:] + (n,), axis


def _check_broadcast_to(x, target, name, what):
    try:
        ok = tuple(np.broadcast_shapes(tuple(x.shape), target)) == tuple(target)
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(
            f"{name} with shape {tuple(x.shape)} does not broadcast to {tuple(target)}, {what}"
        )


def _choose_backend(backend, kind):
    backends = _registry.BACKENDS
    if backend is None:
        for spec in backends.values():
            if kind in spec.arrays and _registry.unavailable_reason(spec.name) is None:
                return spec
        reasons = "; ".join(
            f"{s.name}: {_registry.unavailable_reason(s.name)}" for s in backends.values() if kind in s.arrays
        )
        raise ImportError(f"no backend for {kind} arrays can run here ({reasons})")
    if not isinstance(backend, str) or backend not in backends:
        raise ValueError(f"backend={backend!r} is unknown; valid: {', '.join(backends)}")
    spec = backends[backend]
    if kind not in spec.arrays:
        takers = [s.name for s in backends.values() if kind in s.arrays]
        raise ValueError(
            f"backend={backend!r} takes {', '.join(spec.arrays)} arrays, not {kind}; "
            f"for {kind} arrays use one of: {', '.join(takers)}"
        )
    reason = _registry.unavailable_reason(backend)
    if reason is not None:
        raise ImportError(f"backend={backend!r} cannot run here: {reason}")
    return spec


def _check_out(out, kind, shape, out_dtype, spec):
    _arrays.check_out(out, kind)
    if not spec.writes_out:
        raise TypeError(f"out= is not supported by backend {spec.name!r}: its arrays are immutable")
    if tuple(out.shape) != shape:
        raise ValueError(f"out has shape {tuple(out.shape)}; the result has shape {shape}")
    if np.dtype(out.dtype) != out_dtype:
        raise TypeError(
            f"out has dtype {np.dtype(out.dtype)}; the result has dtype {out_dtype} "
            "(pass dtype= to choose another)"
        )
    if _self_overlapping(out.shape, out.strides, out.itemsize):
        raise ValueError(
            f"out has elements that share memory (shape {tuple(out.shape)}, strides {tuple(out.strides)}: "
            "a broadcast or self-overlapping view); pass an array whose elements are distinct"
        )
    flags = getattr(out, "flags", None)
    if flags is not None and not getattr(flags, "writeable", True):
        raise ValueError("out is read-only; pass a writeable array")


def _self_overlapping(shape, strides, itemsize):
    """Whether a view may map two indices to overlapping bytes: false for every layout whose axes,
    sorted by stride, each step past the extent of the ones before (all C, F, sliced and
    transposed arrays), true for stride-0 broadcasts and overlapping windows."""
    if 0 in shape:
        return False  # no elements
    span = itemsize
    for st, n in sorted((abs(st), n) for st, n in zip(strides, shape) if n > 1):
        if st < span:
            return True
        span += st * (n - 1)
    return False


def _unalias(xp, out, b, a_v, b_v, h0):
    """Copy any input that overlaps ``out`` other than ``out is b`` exactly."""
    overlaps = xp.may_share_memory
    if _is_array(b) and overlaps(out, b) and not _arrays.same_view(out, b):
        b_v = b_v.copy()
    if overlaps(out, a_v):
        a_v = a_v.copy()
    if h0 is not None and overlaps(out, h0):
        h0 = h0.copy()
    return a_v, b_v, h0
