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
