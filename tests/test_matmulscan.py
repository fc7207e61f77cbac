"""Tensor-core MatMulScan (cupy method "matmulscan") against the extended-precision oracle (GPU only).

The shared suite covers it through ``tests/backends.py`` for the layouts it takes
(``time_a``, ``scalar_a``); here: the shapes it exists for (a shared along a lane
axis, the inter-chunk scan of chunked linear RNNs), every radix, the precision
claims (float32 within 1e-5 relative error through 3xTF32), exact resets,
non-finite values, and the fallback for problems it cannot take.
"""

from __future__ import annotations

import numpy as np
import pytest

from data import coefficients, values
from oracle import assert_matches, recurrence_ref, tolerance

from scanarray import _registry

REASON = _registry.unavailable_reason("cupy")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(REASON is not None, reason=f"cupy: {REASON}")]

RADICES = [4, 8, 16]


@pytest.fixture(params=RADICES, ids=lambda s: f"s{s}")
def radix(request, monkeypatch):
    """Every radix (the driver's ``radix`` keyword, through the public function)."""
    return _with(monkeypatch, radix=request.param)["radix"]


def _with(monkeypatch, **options):
    """The matmulscan driver runs with these keyword arguments (merged into any set before)."""
    import functools

    from scanarray import _bound
    from scanarray.backends.cupy import matmulscan as _cupy_matmulscan

    fn = _cupy_matmulscan.linear_recurrence
    if isinstance(fn, functools.partial):
        options = {**fn.keywords, **options}
        fn = fn.func
    monkeypatch.setattr(_cupy_matmulscan, "linear_recurrence", functools.partial(fn, **options))
    monkeypatch.setattr(_bound.CALLS, "table", {})
    return options


def _run(a, b, axis=-1, **kw):
    import cupy

    import scanarray

    to = (lambda x: cupy.asarray(x) if isinstance(x, np.ndarray) else x)
    h = scanarray.linear_recurrence(to(a), to(b), axis, backend="cupy", method="matmulscan",
                                    **{k: to(v) for k, v in kw.items()})
    assert isinstance(h, cupy.ndarray)
    return h.get()


def _rel(h, ref):
    ref = np.asarray(ref, np.float64)
    return float(np.max(np.abs(h.astype(np.float64) - ref)) / np.max(np.abs(ref)))


def test_mma_layouts_unit(radix):
    """One 16-step chunk of 8 lanes with a = 1: h is the plain prefix sum (catches fragment-layout slips)."""
    b = np.arange(16 * 8, dtype=np.float64).reshape(16, 8) % 7 - 3
    for dt in ("float64", "float32", "float16"):
        h = _run(1.0, b.astype(dt), 0)
        np.testing.assert_array_equal(h.astype(np.float64), np.cumsum(b, axis=0))


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("G", [1, 15, 16, 17, 64, 128, 256])
def test_seed_layout(radix, dtype, G, rng):
    """b (BH, G, 16, 64), a (BH, G, 16, 1), scanned along G: the inter-chunk state of chunked RNNs."""
    a = coefficients(rng, (3, G, 16, 1), dtype, reset=0.02, high=1.0)
    b = values(rng, (3, G, 16, 64), dtype)
    h = _run(a, b, 1)
    ref, g = recurrence_ref(a, b, 1)
    assert_matches(h, ref, g, tolerance(dtype, G), f"seed {dtype} G={G} s={radix}")
    if dtype == "float32" and G >= 64:
        assert _rel(h, ref) < 1e-5  # the acceptance bound of the issue


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("kind", ["scalar", "one", "time"])
@pytest.mark.parametrize("axis", [-1, 0])
def test_shared_a_kinds(radix, dtype, kind, axis, rng):
    T, n = 1000, 37
    shape = (n, T) if axis == -1 else (T, n)
    b = values(rng, shape, dtype)
    if kind == "scalar":
        a = float(coefficients(rng, (), "float64", reset=0, high=0.999))
    elif kind == "one":
        a = 1.0
    else:
        a = coefficients(rng, (1, T) if axis == -1 else (T, 1), dtype)
    init = values(rng, (n,), "float32" if dtype == "float16" else dtype)
    for reverse in (False, True):
        h = _run(a, b, axis, initial=init, reverse=reverse)
        ref, g = recurrence_ref(a, b, axis, initial=init, reverse=reverse)
        assert_matches(h, ref, g, tolerance(dtype, T), f"{kind} {dtype} axis={axis} reverse={reverse}")


def test_bfloat16_if_cupy_has_it(radix, rng):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    import cupy

    try:
        cupy.zeros(1, dtype=ml_dtypes.bfloat16)
    except Exception as exc:
        pytest.skip(f"CuPy has no bfloat16 arrays here: {exc}")
    a = coefficients(rng, (2, 128, 16, 1), "float32", reset=0.02, high=1.0).astype(ml_dtypes.bfloat16)
    b = values(rng, (2, 128, 16, 64), "float32").astype(ml_dtypes.bfloat16)
    h = _run(a, b, 1)
    ref, g = recurrence_ref(a.astype(np.float64), b.astype(np.float64), 1)
    tol = tolerance("float16", 128) * 4  # bfloat16 storage: 2**-9 relative per element
    assert_matches(h.astype(np.float64), ref, g, tol, "bfloat16")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_resets_exact_and_negative_a(radix, dtype, rng):
    a = coefficients(rng, (2, 300, 4, 1), dtype, reset=0.2)  # negative values and zeros
    b = values(rng, (2, 300, 4, 8), dtype)
    h = _run(a, b, 1)
    zero = np.broadcast_to(a == 0, b.shape)
    assert zero.any() and (a < 0).any()
    np.testing.assert_array_equal(h[zero], b[zero])
    ref, g = recurrence_ref(a, b, 1)
    assert_matches(h, ref, g, tolerance(dtype, 300), "negative a")


def test_in_place_and_growth(radix, rng):
    import cupy

    import scanarray

    a = (coefficients(rng, (1, 300), "float64", reset=0, high=0.1) + 1.1)
    b = values(rng, (5, 300), "float64")
    ref, g = recurrence_ref(a, b)
    bd = cupy.asarray(b)
    h = scanarray.linear_recurrence(cupy.asarray(a), bd, out=bd, backend="cupy", method="matmulscan")
    assert h is bd and np.abs(ref).max() > 1e10
    assert_matches(bd.get(), ref, g, tolerance("float64", 300), "in place, growth")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_nonfinite_where_the_loop_puts_them(radix, dtype, rng):
    a = coefficients(rng, (1, 500), dtype, reset=0.02)
    b = values(rng, (6, 500), dtype)
    a[0, 300] = np.nan
    b[1, 3] = np.nan
    b[2, 100] = np.inf
    b[4, 10], b[4, 200] = np.inf, -np.inf
    h = _run(a, b)
    ref, g = recurrence_ref(a, b)
    assert np.isnan(ref).any() and np.isinf(ref).any()
    assert_matches(h, ref, g, tolerance(dtype, 500), "non-finite")
    a[0, 300] = np.inf
    h = _run(a, b)
    ref, g = recurrence_ref(a, b)
    assert_matches(h, ref, g, tolerance(dtype, 500), "non-finite a")


def test_unsupported_falls_back_or_raises(rng):
    """Per-lane a shares no matrix: the method runs look-back, and strict mode says why."""
    import cupy

    import scanarray
    from scanarray.backends.cupy import matmulscan as _cupy_matmulscan

    a = coefficients(rng, (4, 200), "float32")
    b = values(rng, (4, 200), "float32")
    h = _run(a, b)
    ref, g = recurrence_ref(a, b)
    assert_matches(h, ref, g, tolerance("float32", 200), "fallback")

    seen = {}
    original = _cupy_matmulscan.linear_recurrence

    def grab(p, *args, **kw):
        seen["reason"] = _cupy_matmulscan.unsupported_reason(p)
        with pytest.raises(ValueError, match="varies per lane"):
            original(p, strict=True)
        return p.out

    mp = pytest.MonkeyPatch()
    mp.setattr(_cupy_matmulscan, "linear_recurrence", grab)
    try:
        scanarray.linear_recurrence(cupy.asarray(a), cupy.asarray(b), backend="cupy", method="matmulscan")
    finally:
        mp.undo()
    assert "per lane" in seen["reason"]


@pytest.mark.parametrize("prefetch", [False, True])
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_prefetch_switch(radix, dtype, prefetch, rng, monkeypatch):
    """The next chunk prefetched or loaded in turn (the driver's ``prefetch``): the same results."""
    _with(monkeypatch, prefetch=prefetch)
    a = coefficients(rng, (2, 77, 4, 1), dtype, reset=0.05, high=1.0)
    b = values(rng, (2, 77, 4, 19), dtype)
    h = _run(a, b, 1)
    ref, g = recurrence_ref(a, b, 1)
    assert_matches(h, ref, g, tolerance(dtype, 77), f"prefetch={prefetch} {dtype}")
