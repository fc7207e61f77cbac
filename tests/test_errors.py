"""Bad input gets a clear exception naming the argument; inputs are never modified."""

from __future__ import annotations

import re

import numpy as np
import pytest

import scanarray
from scanarray import linear_recurrence

B = np.arange(12.0).reshape(3, 4)


def raises(exc, *words):
    """pytest.raises whose message must contain every word."""
    return pytest.raises(exc, match=".*".join(re.escape(w) for w in words))


def test_shapes_that_do_not_broadcast():
    with raises(ValueError, "a with shape (3, 5)", "b with shape (3, 4)", "broadcast"):
        linear_recurrence(np.ones((3, 5)), B)


@pytest.mark.parametrize("axis", [2, -3, 7])
def test_axis_out_of_range(axis):
    with pytest.raises(np.exceptions.AxisError, match=rf"axis {axis}.*\(3, 4\).*-2 <= axis < 2"):
        linear_recurrence(0.5, B, axis=axis)


def test_axis_not_an_int():
    with raises(TypeError, "axis must be an int"):
        linear_recurrence(0.5, B, axis=1.0)


def test_scalars_only_have_no_axis():
    with pytest.raises(np.exceptions.AxisError, match="no axis"):
        linear_recurrence(0.5, 1.0)


@pytest.mark.parametrize("chunk", [0, -3])
def test_chunk_not_positive(chunk):
    with raises(ValueError, "chunk", str(chunk)):
        linear_recurrence(0.5, B, chunk=chunk)


@pytest.mark.parametrize("chunk", [2.0, "64", True, None])
def test_chunk_not_an_int(chunk):
    with raises(TypeError, "chunk must be a positive int"):
        linear_recurrence(0.5, B, chunk=chunk)


def test_dense_mismatched_n():
    with raises(ValueError, "dense=True", "n = b.shape[-1] = 4", "a with shape (3, 3)"):
        linear_recurrence(np.eye(3), B, dense=True)


def test_dense_needs_state_axis():
    with raises(ValueError, "dense=True needs b of shape (..., T, n)", "(4,)"):
        linear_recurrence(np.eye(4), np.ones(4), dense=True)


def test_dense_state_axis_is_not_time():
    # b (3, 4): batch/time axes are (3,); axis=1 would be the state axis.
    with pytest.raises(np.exceptions.AxisError, match="state axis"):
        linear_recurrence(np.eye(4), B, axis=1, dense=True)


def test_dense_on_a_backend_without_dense_methods(monkeypatch):
    """A backend with no dense form must refuse, never scan the matrices as if diagonal."""
    from dataclasses import replace

    from scanarray import _registry

    spec = replace(_registry.BACKENDS["numpy"], dense_methods=())
    monkeypatch.setitem(_registry.BACKENDS, "numpy", spec)
    with raises(ValueError, "backend='numpy' has no dense methods"):
        linear_recurrence(np.eye(4), B, dense=True, backend="numpy")


def test_dense_batch_does_not_broadcast():
    with raises(ValueError, "dense=True", "(2, 4, 4)", "(3, 4)"):
        linear_recurrence(np.ones((2, 4, 4)), B, dense=True)


def test_out_wrong_shape():
    with raises(ValueError, "out has shape (4, 3)", "(3, 4)"):
        linear_recurrence(0.5, B, out=np.empty((4, 3)))


def test_out_wrong_dtype():
    with raises(TypeError, "out has dtype float32", "float64"):
        linear_recurrence(0.5, B, out=np.empty((3, 4), np.float32))


def test_out_wrong_library():
    with raises(TypeError, "out must be a numpy array", "list"):
        linear_recurrence(0.5, B, out=[[0.0] * 4] * 3)


def test_out_read_only():
    out = np.empty((3, 4))
    out.flags.writeable = False
    with raises(ValueError, "out is read-only", "writeable"):
        linear_recurrence(0.5, B, out=out)


@pytest.mark.parametrize("strides", [(0, 8), (8, 8)])
def test_out_self_overlapping(strides):
    """A broadcast or overlapping-window out would let lanes overwrite each other's results."""
    out = np.lib.stride_tricks.as_strided(np.zeros(16), (3, 4), strides)
    with raises(ValueError, "out has elements that share memory", f"strides {strides}", "distinct"):
        linear_recurrence(0.5, B, out=out)


def test_out_empty_broadcast_accepted():
    out = np.lib.stride_tricks.as_strided(np.zeros(1), (3, 0), (0, 8))
    assert linear_recurrence(0.5, np.ones((3, 0)), out=out, backend="numpy") is out


@pytest.mark.parametrize("view", ["transposed", "strided", "reversed"])
def test_out_distinct_views_accepted(view):
    """Views whose elements are distinct (any order, gaps) are fine, and are written right."""
    base = {"transposed": lambda: np.zeros((4, 3)).T, "strided": lambda: np.zeros((3, 8))[:, ::2],
            "reversed": lambda: np.zeros((3, 4))[::-1, ::-1]}[view]()
    expected = np.zeros((3, 4))
    h = np.zeros(3)
    for t in range(4):
        h = 0.5 * h + B[:, t]
        expected[:, t] = h
    got = linear_recurrence(0.5, B, out=base, backend="numpy")
    assert got is base
    np.testing.assert_allclose(base, expected, rtol=1e-15)


def test_initial_wrong_shape():
    with raises(ValueError, "initial with shape (4,)", "(3,)"):
        linear_recurrence(0.5, B, initial=np.zeros(4))


def test_unknown_backend():
    with raises(ValueError, "backend='fortran'", "valid: numba, numpy"):
        linear_recurrence(0.5, B, backend="fortran")


def test_backend_for_other_arrays():
    with raises(ValueError, "backend='cupy' takes cupy arrays, not numpy", "numpy"):
        linear_recurrence(0.5, B, backend="cupy")


def test_unknown_method():
    with raises(ValueError, "method='quantum'", "valid: auto, chunked"):
        linear_recurrence(0.5, B, backend="numpy", method="quantum")


def test_dense_method_names_dense_list():
    # "lookback" is a diagonal method of another backend ("chunked" became a NumPy dense method)
    with raises(ValueError, "dense method", "cyclic_reduction"):
        linear_recurrence(np.eye(4), B, backend="numpy", method="lookback", dense=True)


@pytest.mark.parametrize("bad", [np.array(["x", "y"]), np.array([object(), object()])])
@pytest.mark.parametrize("name", ["a", "b", "initial"])
def test_object_and_string_dtypes(bad, name):
    args = {"a": np.ones(2), "b": np.ones(2), "initial": None}
    args[name] = bad if name != "initial" else bad[:1].reshape(())
    with pytest.raises(TypeError, match=f"{name} has dtype"):
        linear_recurrence(args["a"], args["b"], initial=args["initial"])


def test_dtype_argument_checked():
    with raises(TypeError, "dtype=int32", "accepted"):
        linear_recurrence(0.5, B, dtype=np.int32)
    with raises(TypeError, "imaginary"):
        linear_recurrence(0.5j, B, dtype=np.float64)


def test_dense_flag_must_be_bool():
    with raises(TypeError, "dense must be True or False"):
        linear_recurrence(0.5, B, dense="yes")


@pytest.mark.parametrize("reverse", ["no", "False", None, 1, np.array([1, 0])])
def test_reverse_flag_must_be_bool(reverse):
    # a truthy string must not silently run a reversed scan
    with raises(TypeError, "reverse must be True or False"):
        linear_recurrence(0.5, B, reverse=reverse)


@pytest.mark.parametrize("axis", [True, np.bool_(False)])
def test_axis_not_a_bool(axis):
    with raises(TypeError, "axis must be an int"):
        linear_recurrence(0.5, B, axis=axis)


@pytest.mark.parametrize("name", ["a", "b"])
def test_none_input(name):
    args = {"a": 0.5, "b": B}
    args[name] = None
    with raises(TypeError, f"{name} must be an array", "got None"):
        linear_recurrence(args["a"], args["b"])


@pytest.mark.parametrize("name", ["b", "initial"])
def test_ragged_sequence(name):
    args = {"b": B[:2, :2], "initial": None}
    args[name] = [[1.0, 2.0], [3.0]] if name == "b" else [[1.0], [2.0, 3.0]]
    with raises(ValueError, f"{name} is a sequence NumPy cannot make a rectangular array of"):
        linear_recurrence(0.5, args["b"], initial=args["initial"])


def test_masked_array_rejected():
    """The mask would be ignored: the hidden values would enter the scan."""
    b = np.ma.masked_array([1.0, 1e30, 3.0], mask=[0, 1, 0])
    for backend in ("numpy", None):
        with raises(TypeError, "b is a masked array", "filled"):
            linear_recurrence(0.5, b, backend=backend)
    with raises(TypeError, "initial is a masked array"):
        linear_recurrence(0.5, np.ones((2, 3)), initial=np.ma.masked_array([1.0, 2.0], mask=[1, 0]))


@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")  # numpy.matrix itself warns
def test_matrix_rejected():
    with raises(TypeError, "b is a numpy.matrix", "numpy.asarray(b)"):
        linear_recurrence(0.5, np.matrix([[1.0, 2.0], [3.0, 4.0]]))


@pytest.mark.parametrize("dtype", [">f8", ">f4", ">c16"])
def test_non_native_byte_order(dtype):
    """Big-endian inputs are read as their values (a native copy), not rejected or misread."""
    rng = np.random.default_rng()
    a = rng.uniform(-1, 1, (2, 50)).astype(dtype)
    b = rng.standard_normal((2, 50)).astype(dtype)
    a0, b0 = a.copy(), b.copy()
    native = np.dtype(dtype).newbyteorder("=")
    expected = np.zeros((2, 50), native)
    h = np.zeros(2, np.float64 if native.kind == "f" else np.complex128)
    for t in range(50):
        h = a[:, t].astype(h.dtype) * h + b[:, t]
        expected[:, t] = h
    got = linear_recurrence(a, b, backend="numpy")
    assert got.dtype == native
    tol = 1e-12 if native.itemsize >= 8 else 1e-5
    np.testing.assert_allclose(got, expected, rtol=tol, atol=tol * np.abs(expected).max())
    np.testing.assert_array_equal(a, a0)
    np.testing.assert_array_equal(b, b0)


def test_not_an_array():
    with raises(TypeError, "b must be an array", "set"):
        linear_recurrence(0.5, {1.0, 2.0})


class _FakeArray:
    """An array of a library scanarray has no backend for."""

    shape = (3,)
    dtype = np.dtype(np.float64)
    __module__ = "otherlib.core"


def test_unsupported_library():
    fake = _FakeArray()
    type(fake).__module__ = "otherlib.core"
    with raises(TypeError, "no backend for otherlib arrays", "supported: numpy, cupy, dask"):
        linear_recurrence(0.5, fake)


def test_inputs_never_modified():
    rng = np.random.default_rng()
    a, b, init = rng.random((3, 200)), rng.random((3, 200)), rng.random(3)
    copies = [x.copy() for x in (a, b, init)]
    for backend in [n for n, v in scanarray.available_backends().items() if v["available"] and "numpy" in v["arrays"]]:
        linear_recurrence(a, b, initial=init, backend=backend)
        linear_recurrence(a, b, initial=init, backend=backend, reverse=True)
        for x, c in zip((a, b, init), copies):
            np.testing.assert_array_equal(x, c)


def test_out_overlapping_an_input_is_not_misread():
    """out aliasing a (not b) must not let the scan read what it overwrote."""
    rng = np.random.default_rng()
    a = rng.uniform(-1, 1, (2, 300))
    b = rng.standard_normal((2, 300))
    expected = linear_recurrence(a, b)
    got = linear_recurrence(a, b, out=a)
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)


def test_time_series_a_suggests_a_column():
    """a of shape (T,) beside b of shape (T, C) along axis 0: the fix is a[:, None], not dense=True."""
    with pytest.raises(ValueError, match=r"a\[:, None\]") as info:
        linear_recurrence(np.full(5, 0.5), np.ones((5, 3)), axis=0)
    assert "dense" not in str(info.value)
    with raises(ValueError, "a.reshape(5, 1, 1)"):
        linear_recurrence(np.full(5, 0.5), np.ones((5, 3, 2)), axis=0)


def test_dense_suggested_only_for_matching_square_matrices():
    with raises(ValueError, "3 x 3 transition matrices", "dense=True"):
        linear_recurrence(np.ones((4, 3, 3)), np.ones((5, 3)))
    with pytest.raises(ValueError) as info:
        linear_recurrence(np.ones((3, 5)), B)
    assert "dense" not in str(info.value) and "None" not in str(info.value)
    with pytest.raises(ValueError) as info:  # square, but not b's state size
        linear_recurrence(np.ones((2, 2)), np.ones((3, 3)) * np.ones((5, 1, 1)))
    assert "dense" not in str(info.value)


def test_broadcast_read_only_out_names_shared_memory():
    out = np.broadcast_to(np.zeros(4), (3, 4))
    assert not out.flags.writeable
    with raises(ValueError, "out has elements that share memory", "broadcast"):
        linear_recurrence(0.5, B, out=out)


def test_masked_out_rejected():
    """A masked out would keep (numba) or drop (NumPy) its mask where the scan writes: refused."""
    out = np.ma.masked_array(np.zeros((3, 4)), mask=np.zeros((3, 4), bool))
    for backend in ("numpy", None):
        with raises(TypeError, "out is a masked array", "out.data"):
            linear_recurrence(0.5, B, out=out, backend=backend)


def test_zero_d_numpy_array_beside_another_library_names_the_fix(monkeypatch):
    """A 0-d NumPy array is an array (host memory): beside a device array it is refused, with the
    scalar it probably meant. NumPy scalars pass (tests/test_api.py)."""
    from scanarray import _arrays

    class DevArray:  # stands in for a CuPy array: no CuPy needed
        shape = (4,)
        dtype = np.dtype("f8")

    monkeypatch.setitem(_arrays._KIND_BY_TYPE, DevArray, "cupy")
    monkeypatch.setattr(_arrays, "_native", lambda kind: np)
    with raises(TypeError, "different array libraries", "a: numpy", "b: cupy", "a[()]"):
        _arrays.inputs(np.array(0.5), DevArray(), None)
    with raises(TypeError, "different array libraries", "initial: numpy"):
        _arrays.inputs(0.5, DevArray(), np.ones(4))
