"""numba-specific checks beyond the shared suite: each kernel path, lazy compilation, caching, no copies.

The shared suite (``test_contract.py``) runs the numba backend through the
registry; here the tunables that choose between kernel paths are patched so
that every path -- superblocks with remainders, several lane blocks of the
time-major kernel, lanes that cannot be merged -- runs on small arrays,
always against the extended-precision loop oracle.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import tracemalloc

import numpy as np
import pytest

import scanarray
from data import coefficients, contractive, values
from oracle import assert_matches, dense_ref, recurrence_ref, tolerance

pytest.importorskip("numba")
nb = pytest.importorskip("scanarray.backends.numba_backend")


def lr(*args, **kw):
    return scanarray.linear_recurrence(*args, backend="numba", **kw)


@pytest.fixture
def small_superblocks(monkeypatch):
    """Superblocks of 101 steps: many superblocks, segments of unequal length, a short last one."""
    monkeypatch.setattr(nb, "SUPERBLOCK", 101)
    monkeypatch.setattr(nb, "SEGMENT_GROUPS", 2)


@pytest.mark.parametrize("dtype", ["float32", "float64", "complex64", "complex128", "float16"])
@pytest.mark.parametrize("a_kind", ["full", "scalar", "lane", "time"])
@pytest.mark.parametrize("reverse", [False, True])
def test_chunked_superblocks(small_superblocks, dtype, a_kind, reverse, rng):
    shape = (2, 1000 + 7)
    b = values(rng, shape, dtype)
    if a_kind == "full":
        a = coefficients(rng, shape, dtype)
    elif a_kind == "scalar":
        a = 0.97
    elif a_kind == "lane":
        a = coefficients(rng, (2, 1), dtype, reset=0, high=0.99)
    else:
        a = coefficients(rng, (1, shape[1]), dtype)
    init = values(rng, (2,), dtype)
    h = lr(a, b, initial=init, reverse=reverse, method="chunked")
    ref, g = recurrence_ref(a, b, initial=init, reverse=reverse)
    assert h.dtype == np.dtype(dtype)
    assert_matches(h, ref, g, tolerance(dtype, shape[1], 64), f"chunked {a_kind} {dtype}")


@pytest.mark.parametrize("T", [1, 3, 7, 101, 102, 405])
def test_chunked_lengths_around_superblocks(small_superblocks, T, rng):
    """Lengths below, at and past a superblock: segments of 0 or 1 steps must still chain the carry."""
    a = coefficients(rng, (1, T), "float64")
    b = values(rng, (1, T), "float64")
    h = lr(a, b, method="chunked")
    ref, g = recurrence_ref(a, b)
    assert_matches(h, ref, g, tolerance("float64", T, 64), f"T={T}")


def test_chunked_nonfinite_mended(small_superblocks, rng):
    """Infinities crossing segment carries land where the sequential loop puts them."""
    shape = (3, 1000)
    a = coefficients(rng, shape, "float64", reset=0.0, high=0.9)
    b = values(rng, shape, "float64")
    a[0, 150] = np.inf  # inf enters a carry: P * inf + H may differ from the loop
    b[1, 303] = np.nan
    b[2, 10], b[2, 640] = np.inf, -np.inf  # NaN or -inf at 640, by the sign of h[639]
    a[0, 700] = 0.0  # a reset after inf: 0 * inf is NaN in the loop
    h = lr(a, b, method="chunked")
    ref, g = recurrence_ref(a, b)
    assert np.isinf(ref).any() and np.isnan(ref).any()
    assert_matches(h, ref, g, tolerance("float64", shape[1], 64), "non-finite chunked")


def test_chunked_in_place(small_superblocks, rng):
    a = coefficients(rng, (1, 999), "float64")
    b = values(rng, (1, 999), "float64")
    ref, g = recurrence_ref(a, b)
    h = lr(a, b, out=b, method="chunked")
    assert h is b
    assert_matches(b, ref, g, tolerance("float64", 999, 64), "chunked in place")


@pytest.mark.parametrize("a_kind", ["full", "scalar", "lane", "time"])
@pytest.mark.parametrize("in_place", [False, True])
def test_time_major_lane_blocks(monkeypatch, a_kind, in_place, rng):
    """(T, N) C-order along axis 0 in several lane blocks (the last one partial), in place or not."""
    monkeypatch.setattr(nb, "MIN_ROW_BYTES", 8 * 8)  # blocks of >= 8 float64 lanes
    T, N = 300, 45
    b = values(rng, (T, N), "float64")
    a = {
        "full": lambda: coefficients(rng, (T, N), "float64"),
        "scalar": lambda: -0.9,
        "lane": lambda: coefficients(rng, (1, N), "float64", reset=0, high=0.99),
        "time": lambda: coefficients(rng, (T, 1), "float64"),
    }[a_kind]()
    init = values(rng, (N,), "float64")
    ref, g = recurrence_ref(a, b, 0, initial=init)
    assert nb._lane_block(np.moveaxis(b, 0, -1)) < N
    if in_place:
        h = lr(a, b, 0, initial=init, out=b, method="sequential")
        assert h is b
    else:
        h = lr(a, b, 0, initial=init, method="sequential")
        assert h.flags.c_contiguous  # the result keeps b's time-major order
    assert_matches(h, ref, g, tolerance("float64", T, 64), f"time-major {a_kind}")


def test_unmergeable_lanes_and_4d(rng):
    """Lanes whose axes cannot be merged into one (a transposed 4-d array) take the per-outer-lane loop."""
    x = values(rng, (3, 4, 5, 130), "complex64").transpose(2, 0, 3, 1)  # (5, 3, 130, 4)
    a = coefficients(rng, (5, 1, 130, 4), "complex64")
    for method in ("sequential", "chunked"):
        h = lr(a, x, 2, method=method, reverse=True)
        ref, g = recurrence_ref(a, x, 2, reverse=True)
        assert h.shape == x.shape
        assert_matches(h, ref, g, tolerance("complex64", 130, 64), f"4-d {method}")


def test_integer_and_mixed_inputs(rng):
    """Inputs numba does not compute with directly (int, a narrower dtype than asked) are cast."""
    b = rng.integers(-5, 5, (3, 200))
    a = np.float32(0.5)
    h = lr(a, b, dtype=np.float64)
    ref, g = recurrence_ref(0.5, b)
    assert h.dtype == np.float64
    assert_matches(h, ref, g, tolerance("float64", 200, 64), "int b")
    h = lr(coefficients(rng, (3, 200), "float64"), b.astype(np.float64), dtype=np.float32)
    assert h.dtype == np.float32


def test_auto_method(monkeypatch):
    monkeypatch.setattr(nb, "_threads", lambda: 4)
    long_row = np.zeros((2, nb.CHUNKED_MIN_LENGTH))
    p = scanarray._problem.Problem(
        xp=np, kind="numpy", a=long_row, b=long_row, initial=None, out=long_row, dtype=np.dtype("f8"),
        out_dtype=np.dtype("f8"), reverse=False, dense=False, chunk=64, method="auto",
    )
    assert nb.auto_method(p) == "chunked"  # 2 lanes < 4 threads
    p.a = p.b = p.out = np.zeros((4, nb.CHUNKED_MIN_LENGTH))
    assert nb.auto_method(p) == "sequential"
    p.a = p.b = p.out = np.zeros((1, 100))
    assert nb.auto_method(p) == "sequential"  # too short to split


def test_scalar_a_is_not_materialised():
    """A scalar ``a`` reaches the kernel as a stride-0 view: no allocation of the row's size."""
    T = 1 << 20
    b = np.ones(T)
    out = np.empty(T)
    lr(0.5, b[:1000], out=out[:1000])  # compile outside the traced region
    lr(0.5, b[:1000], out=out[:1000], method="chunked")
    for method in ("sequential", "chunked"):
        tracemalloc.start()
        lr(0.5, b, out=out, method=method)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert peak < T * 8 // 8, f"{method}: {peak} bytes allocated for a {T * 8}-byte row"
    np.testing.assert_allclose(out[-1], 2.0)


@pytest.mark.parametrize("method", ["sequential", "cyclic_reduction"])
def test_dense_lanes_broadcast_a(method, rng):
    """Dense: 2 lane axes, a per-lane time-invariant A broadcast over time, in-place b, reverse."""
    n, T = 3, 77
    A = contractive(rng, (2, 1, 1, n, n), "float64")
    b = values(rng, (2, 4, T, n), "float64")
    ref, g = dense_ref(A, b, 2, reverse=True)
    h = lr(A, b, 2, dense=True, reverse=True, out=b, method=method)
    assert h is b
    assert_matches(b, ref, g, tolerance("float64", T, 64, n=n) * 4, f"dense {method}")


def test_import_compiles_nothing():
    """``import scanarray`` imports no numba; loading the backend compiles no kernel; kernels cache."""
    code = textwrap.dedent(
        """
        import sys
        import scanarray
        assert "numba" not in sys.modules
        from scanarray.backends import numba_backend
        assert "numba" not in sys.modules  # kernels are imported on first use
        k = numba_backend._k()
        for name in ("sequential_rows", "sequential_blocks", "chunked", "dense_sequential"):
            f = getattr(k, name)
            assert f.signatures == [], name
            assert type(f._cache).__name__ != "NullCache", name  # cache=True
        """
    )
    subprocess.run([sys.executable, "-c", code], check=True)
