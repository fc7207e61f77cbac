"""The array kinds scanarray takes, and how arguments of different kinds meet.

This is the one module that knows array libraries by name. It tells an argument's kind from
its type without importing any library to find out (array-api-compat's ``is_*_array`` look in
``sys.modules``), memoised per type, and applies the contract's coercion rules once, so that the
public function sees arguments of one library:

- Python scalars stay scalars (weak in dtype promotion); lists and tuples become NumPy arrays,
  and so do objects that offer ``__array__`` (a pandas Series, an xarray DataArray), as NumPy
  and SciPy read them.
- NumPy scalars (``np.float64(0.5)``, ``x[0]``) are scalars beside any library, as CuPy's own
  operators treat them (strong in promotion: they carry a dtype). A 0-d NumPy *array* is an array:
  beside CuPy arrays it would be host memory mixed with device memory, which is refused.
- NumPy arrays beside Dask arrays become Dask arrays of one block, as Dask's own operations
  treat NumPy operands.
- NumPy and Dask arrays of non-native byte order are read through native copies (Dask: lazily,
  block by block): big-endian data from FITS, HDF5 or netCDF files scans as its values.
- Anything else mixing libraries is a ``TypeError``: nothing is copied between host and device
  behind the caller's back.
"""

from __future__ import annotations

import importlib

import numpy as np

__all__ = ["KINDS", "PYTHON_SCALARS", "as_input", "check_out", "inputs", "is_array", "is_scalar", "kind_of", "library", "same_view",
           "scalar_array"]

#: array libraries with a backend, in the words of the error messages
KINDS = ("numpy", "cupy", "dask")
#: what the error messages list: the kinds, and torch and JAX through their front-ends
SUPPORTED = KINDS + ("torch", "jax")
PYTHON_SCALARS = (bool, int, float, complex)
#: the native module of each kind
_MODULES = {"numpy": "numpy", "cupy": "cupy", "dask": "dask.array"}

#: type -> its kind ("numpy", "cupy", "dask"), or None for types of no supported library
_KIND_BY_TYPE: dict = {}
#: (types of a, b, initial) -> their kind, its native module, and each argument's kind
_NAMESPACES: dict = {}


def is_array(x) -> bool:
    """Whether ``x`` looks like an array (it has a shape and a dtype)."""
    return hasattr(x, "shape") and hasattr(x, "dtype")


def is_scalar(x) -> bool:
    """A Python scalar or a NumPy scalar: converted to a 0-d array of the inputs' library."""
    return isinstance(x, PYTHON_SCALARS) or isinstance(x, np.generic)


def kind_of(x):
    """``"numpy"``, ``"cupy"`` or ``"dask"`` for an array of a supported library, else None."""
    t = type(x)
    try:
        return _KIND_BY_TYPE[t]
    except KeyError:
        pass
    from array_api_compat import is_cupy_array, is_dask_array

    kind = None
    if isinstance(x, np.ndarray):  # subclasses included (masked arrays are refused later, by name)
        kind = "numpy"
    elif is_cupy_array(x):
        kind = "cupy"
    elif is_dask_array(x):
        kind = "dask"
    _KIND_BY_TYPE[t] = kind
    return kind


def library(x) -> str:
    """The array library of ``x`` by name, for messages (no library is imported to find out)."""
    if isinstance(x, np.generic):
        return "numpy"
    kind = kind_of(x)
    return kind if kind is not None else type(x).__module__.split(".")[0]


def as_input(x, name):
    """``x`` as an array of a supported library, a scalar, or a TypeError naming ``name``."""
    if is_scalar(x):
        return x
    kind = kind_of(x)
    if kind is not None:
        if kind in ("numpy", "dask") and not x.dtype.isnative:
            # the kernels read native order: NumPy copies now, Dask converts each block as it reads it
            return x.astype(x.dtype.newbyteorder("="))
        return x
    if isinstance(x, (list, tuple)):
        try:
            return np.asarray(x)
        except ValueError as exc:  # ragged nesting
            raise ValueError(
                f"{name} is a sequence NumPy cannot make a rectangular array of ({exc}); "
                "pass equal-length nested sequences or an array"
            ) from None
    if hasattr(x, "__array__") and not hasattr(x, "__array_namespace__"):
        # pandas and xarray objects: read as NumPy reads them (a view where it can be one)
        return as_input(np.asarray(x), name)
    if is_array(x):
        return x  # an array of a library without a backend: inputs() names it
    raise TypeError(
        f"{name} must be an array (NumPy, CuPy, Dask, or anything numpy.asarray takes), a Python "
        f"or NumPy scalar, or a sequence; got {'None' if x is None else type(x).__name__}"
    )


def inputs(a, b, initial):
    """``(a, b, initial, kind, xp)``: the arguments after the coercion rules of this module's
    docstring, the kind they share and its native module (``numpy``, ``cupy``, ``dask.array``)."""
    a = as_input(a, "a")
    b = as_input(b, "b")
    if initial is not None:
        initial = as_input(initial, "initial")
    key = (type(a), type(b), type(initial))
    hit = _NAMESPACES.get(key)
    if hit is None:
        hit = _NAMESPACES[key] = _resolve((("a", a), ("b", b), ("initial", initial)))
    kind, xp, kinds = hit
    if kind == "dask":
        # NumPy operands join as one block each, as in Dask's own operations
        a, b, initial = (
            _one_block(xp, np.asarray(x)) if k == "numpy" or isinstance(x, np.generic) else x
            for x, k in zip((a, b, initial), kinds)
        )
    elif kind == "numpy" and (isinstance(a, np.generic) or isinstance(b, np.generic) or isinstance(initial, np.generic)):
        # NumPy scalars become 0-d arrays of their own dtype (beside CuPy they stay scalars:
        # scalar_array converts them as it converts Python scalars)
        a, b, initial = (np.asarray(x) if isinstance(x, np.generic) else x for x in (a, b, initial))
    return a, b, initial, kind, xp


def _one_block(xp, x):
    # name=False: no hashing of the data for a graph key (a random one instead)
    return xp.from_array(x, chunks=tuple(x.shape) or (), name=False)


def _resolve(named):
    """``(kind, native module, kind of each argument)`` for one combination of argument types
    (memoised by the caller): scalars have no kind; mixed libraries are refused here."""
    kinds = tuple(None if x is None or is_scalar(x) else kind_of(x) for _, x in named)
    for n, x in named:
        _refuse_subclass(x, n)
    if any(k is None and x is not None and not is_scalar(x) for (_, x), k in zip(named, kinds)):
        _refuse(named)  # an array of a library without a backend
    present = {k for k in kinds if k is not None}
    if not present:  # scalars only (NumPy scalars among them): NumPy
        return "numpy", np, kinds
    if present == {"numpy", "dask"}:
        present = {"dask"}
    if len(present) > 1:
        _mixed(named)
    kind = present.pop()
    return kind, _native(kind), kinds


def _native(kind):
    """The native module of a kind (imported now: an array of it exists, so its library is loaded)."""
    return np if kind == "numpy" else importlib.import_module(_MODULES[kind])


def _refuse_subclass(x, name):
    """NumPy subclasses whose meaning a plain array would lose."""
    if isinstance(x, np.ndarray) and type(x) is not np.ndarray:
        if isinstance(x, np.ma.MaskedArray):
            raise TypeError(
                f"{name} is a masked array; scanarray would read its masked values as data. "
                f"Pass {name}.filled(value) (an ndarray) with the value masked steps should take"
            )
        if isinstance(x, np.matrix):
            raise TypeError(f"{name} is a numpy.matrix; pass numpy.asarray({name}) (scanarray returns ndarrays)")


def _refuse(named):
    """The TypeError for arrays of a library without a backend, alone or beside others."""
    libs = {library(x) for _, x in named if x is not None and not is_scalar(x)}
    if len(libs) > 1:
        _mixed(named)
    raise TypeError(
        f"scanarray has no backend for {libs.pop()} arrays; supported: {', '.join(SUPPORTED)} "
        "(convert with DLPack, e.g. numpy.from_dlpack or cupy.from_dlpack)"
    )


def _mixed(named):
    described = ", ".join(f"{n}: {library(x)}" for n, x in named if x is not None and not is_scalar(x))
    zero_d = [n for n, x in named if isinstance(x, np.ndarray) and x.ndim == 0]
    hint = f" ({zero_d[0]} is a 0-d NumPy array: pass a scalar, {zero_d[0]}[()])" if zero_d else ""
    raise TypeError(
        f"inputs come from different array libraries ({described}); pass arrays of one library{hint}: "
        "scanarray never copies between host and device behind your back"
    )


def check_out(out, kind):
    """Refuse an ``out`` that is not an array of ``kind``, or is a masked array (whose mask the
    scan would not update)."""
    if kind_of(out) != kind:
        got = library(out) if is_array(out) else type(out).__name__
        raise TypeError(f"out must be a {kind} array like the inputs; got {got}")
    if isinstance(out, np.ma.MaskedArray):
        raise TypeError("out is a masked array; its mask would not be updated: pass out.data (an ndarray)")


def scalar_array(xp, kind, x, dtype, arrays):
    """The scalar ``x`` (Python or NumPy) as a 0-d array of ``dtype`` in the inputs' library.

    A scalar crosses to a device as a value, as CuPy's own operators take it. For Dask, the
    array has the block type (NumPy or CuPy) of the first of ``arrays``.
    """
    if kind == "dask":
        return xp.asarray(x, dtype=dtype, like=next(y._meta for y in arrays if y is not None and not is_scalar(y)))
    return xp.asarray(x, dtype=dtype)


def same_view(x, y) -> bool:
    """Whether ``x`` and ``y`` are the same elements of the same memory (shape, strides, address)."""
    if x.shape != y.shape or x.strides != y.strides or x.dtype != y.dtype:
        return False
    ix = getattr(x, "__cuda_array_interface__", None) or x.__array_interface__
    iy = getattr(y, "__cuda_array_interface__", None) or y.__array_interface__
    return ix["data"][0] == iy["data"][0]
