"""The shared suite: every registered backend x method against the oracle.

Backends join through the registry (``tests/backends.py``); nothing here names
one, except that the reference checks use the NumPy library for inputs.
"""

from __future__ import annotations

import numpy as np
import pytest

import scanarray
from backends import LIBRARY, cases, supports, to_lib, to_numpy
from data import DTYPES, LAYOUTS, coefficients, contractive, layout, make_a, values
from oracle import assert_matches, dense_ref, recurrence_ref, tolerance

CHUNK = 64
LENGTHS = [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 5, 10007]
DIAG = cases(dense=False)
DENSE = cases(dense=True)


def _expected_type(backend):
    lib = LIBRARY[backend]
    if lib == "numpy":
        return np.ndarray
    if lib == "cupy":
        import cupy

        return cupy.ndarray
    import dask.array as da

    return da.Array


def _snapshot(*xs):
    return [None if x is None or np.isscalar(x) else np.array(to_numpy(x), copy=True) for x in xs]


def _unchanged(before, *xs):
    for old, x in zip(before, xs):
        if old is not None:
            assert np.array_equal(old, to_numpy(x), equal_nan=True), "an input array was modified"


def run_case(backend, method, a, b, axis, **kw):
    """Call with the backend's arrays; check type, dtype, shape and that inputs are untouched."""
    a_l, b_l = to_lib(a, backend), to_lib(b, backend)
    init = kw.pop("initial", None)
    init_l = to_lib(init, backend)
    before = _snapshot(a_l, b_l, init_l)
    h = scanarray.linear_recurrence(a_l, b_l, axis, CHUNK, initial=init_l, backend=backend, method=method, **kw)
    assert isinstance(h, _expected_type(backend)), type(h)
    _unchanged(before, a_l, b_l, init_l)
    return to_numpy(h)


def _diagonal_cases():
    """(T, dtype, layout, axis) covering every pair of values of the four: every length with every
    layout and axis (float64); every dtype with every layout and axis, at a length of several tiles
    and at a long one; every dtype at every length. (The full product, 490 cases a backend, spent
    minutes repeating what these already exercise.)"""
    found = {(T, "float64", k, ax) for T in LENGTHS for k in LAYOUTS for ax in (-1, 0)}
    found |= {(T, d, k, ax) for T in (3 * CHUNK + 5, 10007) for d in DTYPES for k in LAYOUTS for ax in (-1, 0)}
    found |= {(T, d, "contiguous", -1) for T in LENGTHS for d in DTYPES}
    return [pytest.param(*c, id=f"{c[3]}-{c[2]}-{c[1]}-{c[0]}") for c in sorted(found, key=str)]


@pytest.mark.parametrize("backend,method", DIAG)
@pytest.mark.parametrize("T,dtype,kind,axis", _diagonal_cases())
def test_diagonal(backend, method, T, dtype, kind, axis, rng):
    if not supports(backend, method, a_layout=kind, dtype=dtype, dense=False):
        pytest.skip(f"{backend}/{method} does not take {kind} a")
    lanes = 3 if T > 1000 else 5
    shape = (lanes, T) if axis == -1 else (T, lanes)
    b = layout(values(rng, shape, dtype), kind, axis)
    a = make_a(rng, shape, dtype, kind, axis)
    h = run_case(backend, method, a, b, axis)
    assert h.shape == shape and h.dtype == np.dtype(dtype)
    ref, g = recurrence_ref(a, b, axis)
    assert_matches(h, ref, g, tolerance(dtype, T, CHUNK), f"{backend}/{method} {kind} {dtype} T={T}")


@pytest.mark.parametrize("backend,method", DIAG)
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "complex128"])
def test_initial_reverse_3d(backend, method, reverse, dtype, rng):
    """A middle time axis of a 3-d array, a broadcast initial state, both directions."""
    shape = (2, 3 * CHUNK + 7, 4)
    a = coefficients(rng, shape, dtype)
    b = values(rng, shape, dtype)
    init = values(rng, (1, 4), dtype)
    if not supports(backend, method, a_layout="contiguous", dtype=dtype, dense=False):
        pytest.skip("unsupported")
    h = run_case(backend, method, a, b, 1, initial=init, reverse=reverse)
    ref, g = recurrence_ref(a, b, 1, initial=init, reverse=reverse)
    assert_matches(h, ref, g, tolerance(dtype, shape[1], CHUNK), "initial/reverse")


@pytest.mark.parametrize("backend,method", DIAG)
def test_out_is_b_in_place(backend, method, rng):
    if LIBRARY[backend] == "dask":
        pytest.skip("dask arrays are immutable")
    shape = (4, 5 * CHUNK + 3)
    a = coefficients(rng, shape, "float64")
    b = values(rng, shape, "float64")
    ref, g = recurrence_ref(a, b)
    b_l = to_lib(b.copy(), backend)
    h = scanarray.linear_recurrence(to_lib(a, backend), b_l, out=b_l, backend=backend, method=method)
    assert h is b_l
    assert_matches(to_numpy(b_l), ref, g, tolerance("float64", shape[1]), "out=b")


@pytest.mark.parametrize("backend,method", DIAG)
def test_out_separate_and_float16_storage(backend, method, rng):
    if LIBRARY[backend] == "dask":
        pytest.skip("dask arrays are immutable")
    shape = (3, 2 * CHUNK + 1)
    a = coefficients(rng, shape, "float16")
    b = values(rng, shape, "float16")
    out = to_lib(np.full(shape, np.nan, np.float16), backend)
    h = scanarray.linear_recurrence(to_lib(a, backend), to_lib(b, backend), out=out, backend=backend, method=method)
    assert h is out
    ref, g = recurrence_ref(a, b)
    assert_matches(to_numpy(out), ref, g, tolerance("float16", shape[1]), "out float16")


@pytest.mark.parametrize("backend,method", DIAG)
def test_resets_are_exact(backend, method, rng):
    shape = (6, 7 * CHUNK + 11)
    a = coefficients(rng, shape, "float64", reset=0.2)
    b = values(rng, shape, "float64")
    h = run_case(backend, method, a, b, -1)
    zero = a == 0
    assert zero.any()
    np.testing.assert_array_equal(h[zero], b[zero])


@pytest.mark.parametrize("backend,method", DIAG)
@pytest.mark.parametrize("dtype", ["float32", "float64", "complex128"])
def test_growth(backend, method, dtype, rng):
    """|a| > 1 everywhere: the result grows geometrically and stays accurate relative to it."""
    shape = (4, 300)
    a = (coefficients(rng, shape, dtype, reset=0, high=0.1) + 1.1).astype(dtype)
    b = values(rng, shape, dtype)
    h = run_case(backend, method, a, b, -1)
    ref, g = recurrence_ref(a, b)
    assert np.abs(ref[:, -1]).max() > 1e10
    assert_matches(h, ref, g, tolerance(dtype, shape[1], CHUNK), "growth")


@pytest.mark.parametrize("backend,method", DIAG)
def test_nonfinite_where_the_loop_puts_them(backend, method, rng):
    shape = (5, 4 * CHUNK + 9)
    a = coefficients(rng, shape, "float64", reset=0.02)
    b = values(rng, shape, "float64")
    a[0, 70] = np.nan
    b[1, 3] = np.nan
    b[2, 100] = np.inf
    a[3, 150] = np.inf
    b[4, 10], b[4, 200] = np.inf, -np.inf
    h = run_case(backend, method, a, b, -1)
    ref, g = recurrence_ref(a, b)
    assert np.isnan(ref).any() and np.isinf(ref).any()
    assert_matches(h, ref, g, tolerance("float64", shape[1], CHUNK), "non-finite")


@pytest.mark.parametrize("backend,method", DIAG)
@pytest.mark.parametrize("where", ["a", "b"])
def test_nonfinite_one_row(backend, method, where, rng):
    """A 1-d row (no lane axes) whose state ends non-finite: the mend has a 0-d lane index."""
    T = 4 * CHUNK + 9
    a = coefficients(rng, (T,), "float64", reset=0.02)
    b = values(rng, (T,), "float64")
    (a if where == "a" else b)[100] = np.inf
    h = run_case(backend, method, a, b, -1)
    ref, g = recurrence_ref(a, b)
    assert not np.isfinite(ref[-1])
    assert_matches(h, ref, g, tolerance("float64", T, CHUNK), f"non-finite 1-d ({where})")


@pytest.mark.parametrize("backend,method", DIAG)
def test_length_one_and_empty(backend, method, rng):
    a = coefficients(rng, (4, 1), "float64")
    b = values(rng, (4, 1), "float64")
    init = values(rng, (4,), "float64")
    h = run_case(backend, method, a, b, -1, initial=init)
    # One step, a*init + b: two roundings in NumPy, one where a backend fuses the multiply-add, so
    # the bound scales with the terms (a result that cancels is not relative to itself).
    terms = np.abs(a[:, 0] * init) + np.abs(b[:, 0])
    err = np.abs(h[:, 0] - (a[:, 0] * init + b[:, 0]))
    np.testing.assert_array_less(err, 2 * np.finfo(np.float64).eps * terms + 1e-300)
    for shape in [(4, 0), (0, 9)]:
        h = run_case(backend, method, np.ones(shape), np.ones(shape), -1)
        assert h.shape == shape


# --------------------------------------------------------------------------- dense


@pytest.mark.parametrize("backend,method", DENSE)
@pytest.mark.parametrize("T", [0, 1, 2, 3, CHUNK + 1, 1000])
@pytest.mark.parametrize("n", [1, 3, 8])
@pytest.mark.parametrize("dtype", ["float32", "float64", "complex64", "complex128"])
def test_dense(backend, method, T, n, dtype, rng):
    shape = (2, T, n)
    A = contractive(rng, (2, T, n, n), dtype)
    b = values(rng, shape, dtype)
    init = values(rng, (2, n), dtype)
    h = run_case(backend, method, A, b, -1, initial=init, dense=True)
    assert h.shape == shape and h.dtype == np.dtype(dtype)
    ref, g = dense_ref(A, b, -1, initial=init)
    assert_matches(h, ref, g, tolerance(dtype, T, CHUNK, n=n) * 4, f"dense {backend}/{method}")


@pytest.mark.parametrize("backend,method", DENSE)
@pytest.mark.parametrize("dtype", ["float64", "complex128"])
def test_dense_nonfinite_first_step(backend, method, dtype, rng):
    """An infinite entry of A[0] with no initial state: the loop's h[0] = A[0] @ 0 + b[0] is NaN
    in that row (inf * 0), and non-finite from there on, not the finite b[0]."""
    n, T = 3, CHUNK + 5
    A = contractive(rng, (2, T, n, n), dtype)
    b = values(rng, (2, T, n), dtype)
    A[1, 0, 2, 0] = np.inf
    with np.errstate(all="ignore"):
        h = run_case(backend, method, A, b, -1, dense=True)
        ref, g = dense_ref(A, b, -1)
    assert np.isnan(ref[1, 0, 2]) and np.isfinite(ref[0]).all()
    np.testing.assert_array_equal(np.isfinite(h), np.isfinite(ref))
    assert_matches(h, ref, g, tolerance(dtype, T, CHUNK, n=n) * 4, f"dense non-finite {backend}/{method}")


@pytest.mark.parametrize("backend,method", DENSE)
@pytest.mark.parametrize("reverse", [False, True])
def test_dense_time_invariant_axis0_reverse(backend, method, reverse, rng):
    """A single (n, n) matrix for every step, time on axis 0 of b (T, lanes, n)."""
    n, T = 4, 2 * CHUNK + 3
    A = contractive(rng, (n, n), "float64")
    b = layout(values(rng, (T, 3, n), "float64"), "negative", 0)
    h = run_case(backend, method, A, b, 0, dense=True, reverse=reverse)
    ref, g = dense_ref(A, b, 0, reverse=reverse)
    assert_matches(h, ref, g, tolerance("float64", T, CHUNK, n=n) * 4, "dense time-invariant")
