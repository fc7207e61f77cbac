"""Correctness at the edges, on every backend: in-place scans meeting infinities, float16 storage
with float32 accumulation, ``dtype=`` narrower than the inputs, warnings.

Each case is checked against an independent plain loop: in extended precision (``oracle.py``)
or, where the contract names the accumulation dtype, in that dtype (``loop_in``). The long rows
(2**17 steps) put the interesting step right at the tile, chunk and segment boundaries the
parallel algorithms cut at (powers of two from 64 to 2**16), so a carry has to cross them.
"""

from __future__ import annotations

import functools
import warnings

import numpy as np
import pytest

import scanarray
from backends import LIBRARY, cases, to_lib, to_numpy
from oracle import assert_matches, loop_in, recurrence_ref, tolerance

DIAG = cases(dense=False)
WRITERS = [c for c in DIAG if LIBRARY[c.values[0]] != "dask"]  # backends that write into out
T_LONG = 1 << 17
#: the boundaries the long rows straddle: chunks of 64, numba's segments on 2..32 threads
#: (2**17 / (4 * threads)), and the GPU's tiles
BOUNDARIES = (64, 1 << 10, 1 << 12, 1 << 14, 1 << 15, 1 << 16)


def call(backend, method, a, b, **kw):
    out = kw.pop("out", None)
    h = scanarray.linear_recurrence(to_lib(a, backend), to_lib(b, backend), out=out, backend=backend,
                                    method=method, **{k: to_lib(v, backend) if isinstance(v, np.ndarray) else v
                                                      for k, v in kw.items()})
    return to_numpy(h)


def assert_same_nonfinite(h, ref, what):
    """NaN where ``ref`` has NaN, infinities of the same sign where it has them."""
    h, ref = np.asarray(h), np.asarray(ref)
    assert np.array_equal(np.isnan(h), np.isnan(ref)), f"{what}: NaN at {np.argwhere(np.isnan(h) != np.isnan(ref))[:5]}"
    inf = np.isinf(ref)
    assert np.array_equal(np.isinf(h), inf), f"{what}: infinities at {np.argwhere(np.isinf(h) != inf)[:5]}"
    assert np.array_equal(h[inf], ref[inf]), f"{what}: signs of infinities differ"


# --------------------------------------------------------------------------- 1. in place, infinite a


@pytest.mark.parametrize("backend,method", WRITERS)
def test_in_place_infinite_a(backend, method):
    """The issue's reproducer: the mend of a chunked scan must read b, not what out=b became."""
    a = np.array([0.5, -np.inf, 0.5, 0.5])
    b = to_lib(np.ones(4), backend)
    h = scanarray.linear_recurrence(to_lib(a, backend), b, chunk=1, out=b, backend=backend, method=method)
    assert h is b
    np.testing.assert_array_equal(to_numpy(b), [1.0, -np.inf, -np.inf, -np.inf])


@functools.lru_cache(maxsize=None)
def _nonfinite_rows():
    """Rows of 2**17 steps, each with its first non-finite value at or next to a boundary."""
    rng = np.random.default_rng(38)
    rows = []
    for i, B in enumerate(BOUNDARIES):
        for d in (-1, 0, 1):
            a = rng.uniform(-0.99, 0.99, T_LONG)
            b = rng.standard_normal(T_LONG)
            t = B + d
            kind = (i + d) % 4
            if kind == 0:
                a[t] = np.inf
            elif kind == 1:
                a[t] = -np.inf
                a[t + 5] = 0.0  # a reset after the infinity: 0 * inf is NaN in the loop
            elif kind == 2:
                b[t] = np.inf
                b[t + 3] = -np.inf  # NaN or -inf, by the sign of the state
            else:
                b[t] = np.nan
            rows.append((a, b))
    a = np.stack([r[0] for r in rows])
    b = np.stack([r[1] for r in rows])
    ref, g = recurrence_ref(a, b)
    return a, b, ref, g


@pytest.mark.parametrize("backend,method", WRITERS)
def test_in_place_nonfinite_long_rows(backend, method):
    """out=b on rows whose first infinity or NaN sits at a boundary of the parallel split."""
    a, b, ref, g = _nonfinite_rows()
    b_l = to_lib(b.copy(), backend)
    h = scanarray.linear_recurrence(to_lib(a, backend), b_l, out=b_l, backend=backend, method=method)
    assert h is b_l
    assert_matches(to_numpy(b_l), ref, g, tolerance("float64", T_LONG), f"{backend}/{method} in place")
    for row in range(0, a.shape[0], 4):  # one lane at a time: the single-row (chunked) paths
        b1 = to_lib(b[row].copy(), backend)
        scanarray.linear_recurrence(to_lib(a[row], backend), b1, out=b1, backend=backend, method=method)
        assert_matches(to_numpy(b1), ref[row], g[row], tolerance("float64", T_LONG), f"row {row} in place")


def test_in_place_default_call():
    """The default call on one long row (numba's chunked path where installed): in place equals
    out of place, and both equal the loop, around the segment boundary at T // 8."""
    rng = np.random.default_rng(0)
    a = rng.uniform(-0.99, 0.99, T_LONG)
    b = rng.standard_normal(T_LONG)
    a[T_LONG // 8] = np.inf
    ref, g = recurrence_ref(a, b)
    h = scanarray.linear_recurrence(a, b)
    b2 = b.copy()
    scanarray.linear_recurrence(a, b2, out=b2)
    assert_matches(h, ref, g, tolerance("float64", T_LONG), "out of place")
    np.testing.assert_array_equal(b2, h)


# --------------------------------------------------------------------------- 2. float16 storage


#: the issue's reproducers: (a, b, the float32 loop's result stored as float16)
FLOAT16_CASES = [
    # the float32 state 1e-9 is below float16's smallest subnormal but nonzero: h[4] = +inf
    ([0.5, 1e-3, 1e-3, 1e-3, np.inf, 0.5], [1, 0, 0, 0, 0, 0]),
    # the stored 1.2e5 overflows float16; the float32 state does not: 120.05 afterwards
    ([1, 1, 1e-3, 1, 1], [6e4, 6e4, 0, 0, np.inf]),
]


@pytest.mark.parametrize("backend,method", DIAG)
@pytest.mark.parametrize("case", range(len(FLOAT16_CASES)))
def test_float16_state_is_float32(backend, method, case):
    a, b = (np.array(x, np.float16) for x in FLOAT16_CASES[case])
    expected = loop_in(np.float32, a, b).astype(np.float16)
    assert not np.isnan(expected).any()
    h = call(backend, method, a, b, chunk=1)
    assert h.dtype == np.float16
    assert_same_nonfinite(h, expected, f"{backend}/{method}")
    fin = np.isfinite(expected)
    np.testing.assert_allclose(h[fin], expected[fin], rtol=2**-10)


@functools.lru_cache(maxsize=None)
def _float16_rows():
    """Both reproducers placed so that the float32 state they carry crosses each boundary."""
    rows = []
    for B in BOUNDARIES:
        for (av, bv) in FLOAT16_CASES:
            k = len(av)
            for start in (B - 4, B - 3):  # the carried state ends a tile, or the one before does
                a = np.full(T_LONG, 0.5)
                b = np.zeros(T_LONG)
                a[start:start + k], b[start:start + k] = av, bv
                rows.append((a, b))
    a = np.stack([r[0] for r in rows]).astype(np.float16)
    b = np.stack([r[1] for r in rows]).astype(np.float16)
    return a, b, loop_in(np.float32, a, b).astype(np.float16)


@pytest.mark.parametrize("backend,method", DIAG)
def test_float16_state_across_boundaries(backend, method):
    a, b, expected = _float16_rows()
    h = call(backend, method, a, b)
    assert h.dtype == np.float16
    assert_same_nonfinite(h, expected, f"{backend}/{method}")
    fin = np.isfinite(expected)
    np.testing.assert_allclose(h[fin].astype(np.float64), expected[fin].astype(np.float64), rtol=2**-10, atol=1e-7)
    for row in (0, 5, 10):  # single rows: numba's chunked path with backend=None
        h = call(backend, method, a[row], b[row])
        assert_same_nonfinite(h, expected[row], f"{backend}/{method} row {row}")


def test_float16_default_call():
    a, b, expected = _float16_rows()
    for row in range(a.shape[0]):
        assert_same_nonfinite(scanarray.linear_recurrence(a[row], b[row]), expected[row], f"row {row}")


# --------------------------------------------------------------------------- 3. dtype= narrower than the inputs


@pytest.mark.parametrize("backend,method", DIAG)
@pytest.mark.parametrize("a", [[1e39, 0.5, 0.5], [0.5, 1e39, 1e-50, 0.5, 0.5, 0.5]])
def test_dtype_float32_reads_float32(backend, method, a):
    """``dtype=float32`` with float64 inputs: values are read as float32 (1e39 is +inf, 1e-50 is 0)."""
    a = np.array(a)
    b = np.ones_like(a)
    expected = loop_in(np.float32, a, b)
    for chunk in (1, 2, 64):
        h = call(backend, method, a, b, dtype=np.float32, chunk=chunk)
        assert h.dtype == np.float32
        assert_same_nonfinite(h, expected, f"{backend}/{method} chunk={chunk}")
        fin = np.isfinite(expected)
        np.testing.assert_allclose(h[fin], expected[fin], rtol=1e-6)


@pytest.mark.parametrize("backend,method", DIAG)
def test_dtype_float32_long(backend, method, rng):
    """The same rule on long rows of random data with values beyond float32's range."""
    shape = (3, 3000)
    a = rng.uniform(-1.0, 1.0, shape)
    b = rng.standard_normal(shape) * 1e30
    a[0, 700], a[1, 1500], b[2, 2047] = 1e-50, 1e39, -1e300
    h = call(backend, method, a, b, dtype=np.float32)
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    ref, g = recurrence_ref(a32, b32)
    assert_matches(h, ref, g, tolerance("float32", shape[1]), f"{backend}/{method}")
    assert_same_nonfinite(h, loop_in(np.float32, a, b), f"{backend}/{method}")


# --------------------------------------------------------------------------- also seen


@pytest.mark.parametrize("backend", sorted({c.values[0] for c in WRITERS if LIBRARY[c.values[0]] == "numpy"}))
def test_no_floating_point_warnings(backend):
    """Every CPU backend computes with floating-point warnings off: overflowing casts and loops
    give infinities silently, as NumPy's own reductions of such data do."""
    a = np.array([1e39, 0.5, 2.0, 0.5] * 50)
    b = np.array([1e300, -1e300, 1.0, np.inf] * 50)
    b16 = np.array([6e4, -6e4, 1.0, np.inf] * 50, np.float16)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for method in ("auto",) + scanarray.available_backends()[backend]["methods"]:
            scanarray.linear_recurrence(a, b, dtype=np.float32, backend=backend, method=method)
            scanarray.linear_recurrence(a, b, dtype=np.float16, backend=backend, method=method)
            scanarray.linear_recurrence(a, b16, backend=backend, method=method)


# --------------------------------------------------------------------------- NumPy scalars beside CuPy


@pytest.mark.gpu
def test_numpy_scalars_with_cupy_arrays():
    """``x[0]`` and ``np.float64(0.5)`` as ``a`` or ``initial`` with a CuPy ``b``: scalars, as CuPy's
    own operators take them; a 0-d NumPy array is an array and stays refused."""
    from scanarray import _registry

    if _registry.unavailable_reason("cupy") is not None:
        pytest.skip(f"cupy: {_registry.unavailable_reason('cupy')}")
    import cupy

    x = np.array([0.5, 2.0])
    b = cupy.ones((3, 5), cupy.float32)
    for a, init in [(x[0], None), (np.float64(0.5), x[1]), (0.5, np.float32(2.0)), (np.float32(0.5), 2.0)]:
        h = scanarray.linear_recurrence(a, b, initial=init)
        assert isinstance(h, cupy.ndarray)
        expected = loop_in(np.float64, np.full((3, 5), float(a)), np.ones((3, 5)), initial=0.0 if init is None else float(init))
        np.testing.assert_allclose(cupy.asnumpy(h), expected, rtol=1e-6)
    with pytest.raises(TypeError, match=r"\[\(\)\]"):
        scanarray.linear_recurrence(np.array(0.5), b)
