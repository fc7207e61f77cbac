"""Dispatch, dtype rules, imports, and the honesty of the tolerance check itself."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import scanarray
from oracle import assert_matches, recurrence_ref, tolerance
from scanarray import linear_recurrence


def test_import_pulls_no_heavy_library():
    code = (
        "import sys, scanarray, numpy as np; scanarray.linear_recurrence(0.5, np.ones(3), backend='numpy');"
        "heavy = [m for m in ('numba', 'cupy', 'dask', 'torch', 'jax') if m in sys.modules];"
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"import scanarray imported {out.stdout.strip()}"


def test_available_backends_reports_every_backend():
    info = scanarray.available_backends()
    assert {"numpy", "numba", "cupy", "numba_cuda", "dask"} <= set(info)
    assert info["numpy"]["available"] and info["numpy"]["reason"] is None
    for name, entry in info.items():
        assert set(entry) >= {"available", "arrays", "methods", "dense_methods", "reason"}
        assert entry["available"] == (entry["reason"] is None), name
        if not entry["available"]:
            assert isinstance(entry["reason"], str) and entry["reason"], name


@pytest.mark.parametrize(
    "a,b,expected",
    [
        (0.9, np.float32, np.float32),  # weak Python float
        (np.float64(0.9), np.float32, np.float64),  # a NumPy scalar is strong
        (2, np.float16, np.float16),
        (0.5j, np.float32, np.complex64),
        (0.5, np.int32, np.float64),  # integers compute in the default float
        (True, np.bool_, np.float64),
        (np.complex64(1), np.float64, np.complex128),
    ],
)
def test_dtype_rules(a, b, expected):
    h = linear_recurrence(a, np.ones(5, b), backend="numpy")
    assert h.dtype == expected


def test_float16_accumulates_in_float32():
    # 4096 steps of +1 in float16 stops at 2048; float32 accumulation reaches 4096.
    h = linear_recurrence(1.0, np.ones(4096, np.float16), backend="numpy")
    assert h.dtype == np.float16 and h[-1] == 4096


def test_dtype_argument_sets_accumulation():
    b = np.full(10, 0.1, np.float32)
    h = linear_recurrence(1.0, b, dtype=np.float64, backend="numpy")
    assert h.dtype == np.float64
    np.testing.assert_allclose(h[-1], 10 * np.float64(np.float32(0.1)), rtol=1e-15)


def test_lists_are_accepted():
    np.testing.assert_allclose(linear_recurrence([1.0, 0.5], [1.0, 1.0]), [1.0, 1.5])


def test_mixed_libraries_raise():
    class Fake:
        shape, dtype = (2,), np.dtype("f8")

    Fake.__module__ = "torch"
    with pytest.raises(TypeError, match="different array libraries"):
        linear_recurrence(np.ones(2), Fake())


def test_output_keeps_the_memory_order_of_b():
    b = np.asfortranarray(np.ones((100, 3)))
    h = linear_recurrence(0.5, b, axis=0, backend="numpy")
    assert h.flags.f_contiguous


def test_scalar_a_is_not_materialised(monkeypatch):
    """A Python scalar a reaches the backend as a broadcast view with all strides 0."""
    from scanarray.backends import numpy_backend

    seen = {}
    real = numpy_backend.linear_recurrence

    def spy(p):
        seen["strides"] = p.a.strides
        return real(p)

    monkeypatch.setattr(numpy_backend, "linear_recurrence", spy)
    linear_recurrence(0.9, np.ones((4, 1000)), backend="numpy")
    assert seen["strides"] == (0, 0)


# ------------------------------------------------------------------ the checker fails wrong outputs


@pytest.fixture
def case():
    rng = np.random.default_rng()
    a = rng.uniform(-1.05, 1.05, (4, 500))
    b = rng.standard_normal((4, 500))
    ref, g = recurrence_ref(a, b)
    return a, b, ref, g, tolerance("float32", 500)


@pytest.mark.parametrize(
    "corrupt",
    [
        lambda h: np.zeros_like(h),
        lambda h: np.roll(h, 1, axis=-1),
        lambda h: np.concatenate([h[:, :250], np.zeros_like(h[:, 250:])], axis=1),
        lambda h: np.where(np.arange(h.shape[1]) % 97 == 0, h * 1.01, h),
        lambda h: np.where(np.arange(h.shape[1]) == 300, np.nan, h),
    ],
    ids=["all-zero", "shifted-by-one", "half-written", "sparse-1%-errors", "stray-NaN"],
)
def test_checker_rejects_wrong_outputs(case, corrupt):
    a, b, ref, g, tol = case
    good = ref.astype(np.float32)
    assert_matches(good, ref, g, tol, "exact")  # the right answer in float32 passes
    with pytest.raises(AssertionError):
        assert_matches(corrupt(good), ref, g, tol, "corrupted")


# ------------------------------------------------------------------ how arguments of libraries meet


def test_numpy_scalars_beside_a_device_library(monkeypatch):
    """NumPy scalars (``x[0]``, ``np.float64(0.5)``) beside CuPy arrays stay scalars: no array
    crosses between host and device. Resolved here with a stand-in for CuPy's array type; the
    GPU test (tests/test_edges.py) runs the call on CuPy."""
    import types

    from scanarray import _arrays

    class DevArray:
        shape = (4,)
        dtype = np.dtype("f4")

    fake = types.SimpleNamespace(__name__="cupy")
    monkeypatch.setitem(_arrays._KIND_BY_TYPE, DevArray, "cupy")
    monkeypatch.setattr(_arrays, "_native", lambda kind: fake if kind == "cupy" else np)
    x = np.arange(3.0)
    b = DevArray()
    a, b2, init, kind, xp = _arrays.inputs(x[0], b, np.float32(2))
    assert (kind, xp) == ("cupy", fake) and b2 is b
    assert type(a) is np.float64 and type(init) is np.float32  # still scalars: converted as values later
    assert _arrays.is_scalar(a) and _arrays.is_scalar(init)
    # NumPy scalars are strong in promotion, as in NumPy: float64 beside float32 data
    from scanarray import _api

    assert _api._result_dtypes(a, b, init, None) == (np.dtype("f8"), np.dtype("f8"))


def test_array_like_objects_are_read_as_numpy():
    """Objects with ``__array__`` (pandas, xarray) are read as NumPy reads them; the result is an ndarray."""
    pd = pytest.importorskip("pandas")
    x = np.array([1.0, 2.0, 3.0, 4.0])
    expected = linear_recurrence(0.5, x)
    for a, b in [(0.5, pd.Series(x)), (pd.Series(np.full(4, 0.5)), x), (0.5, pd.Series(x, dtype="float32"))]:
        h = linear_recurrence(a, b)
        assert type(h) is np.ndarray
        np.testing.assert_allclose(h, expected, rtol=1e-6)
    frame = pd.DataFrame({"u": x, "v": 2 * x})
    h = linear_recurrence(0.5, frame, axis=0)
    assert type(h) is np.ndarray and h.shape == (4, 2)
    np.testing.assert_allclose(h[:, 1], 2 * expected)


def test_xarray_data_arrays_are_read_as_numpy():
    xr = pytest.importorskip("xarray")
    x = xr.DataArray(np.ones((2, 5)), dims=("channel", "time"))
    h = linear_recurrence(0.5, x)
    assert type(h) is np.ndarray
    np.testing.assert_allclose(h[0], 2 - 0.5 ** np.arange(5))
