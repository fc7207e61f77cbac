"""linear_recurrence_vjp against central differences of the extended-precision loop (grad_oracle).

Every option of the forward call is varied: axis, initial (absent, full, broadcast, scalar), reverse,
broadcast ``a`` (Python scalar, 0-d, per lane, per step) and ``b``, the dense form, complex numbers
in both conventions, lengths around the special cases of the adjoint (T = 0, 1, 2, 3), NumPy and
Dask. The fused-product entry of the forward call is tested on its own.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import scanarray
from grad_oracle import assert_grad_close, fd_grads, zero_the_vjp
from scanarray import _api, linear_recurrence, linear_recurrence_vjp

RTOL = {np.dtype(np.float64): 1e-11, np.dtype(np.complex128): 1e-11, np.dtype(np.float32): 2e-4,
        np.dtype(np.complex64): 2e-4}


def _values(rng, shape, dtype, scale=1.0):
    x = rng.standard_normal(shape) * scale
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal(shape) * scale
    return x.astype(dtype)


def _check(a, b, w, initial=None, axis=-1, reverse=False, dense=False, conjugate=False, backend=None, dtype=None,
           method="auto"):
    h = linear_recurrence(a, b, axis, initial=initial, reverse=reverse, dense=dense, backend=backend, method=method)
    ga, gb, gi = linear_recurrence_vjp(a, h, w.astype(h.dtype) if hasattr(w, "astype") else w, axis, b=b,
                                       initial=initial, reverse=reverse, dense=dense, conjugate=conjugate,
                                       backend=backend, method=method)
    ref = fd_grads(a, b, w, initial, axis, reverse, dense, conjugate)
    rtol = RTOL[np.dtype(dtype or h.dtype)]
    for got, want, name, x in ((ga, ref[0], "a", a), (gb, ref[1], "b", b), (gi, ref[2], "initial", initial)):
        if x is None:
            assert got is None
            continue
        assert_grad_close(got, want, rtol, f"grad_{name}")
        if isinstance(x, np.ndarray) and x.dtype.kind in "fc":
            assert got.dtype == x.dtype, f"grad_{name} has dtype {got.dtype}, {name} {x.dtype}"
    return ga, gb, gi


@pytest.mark.parametrize("T", [0, 1, 2, 3, 8])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("a_kind", ["full", "scalar", "zero_d", "lane", "time"])
def test_diagonal_matches_finite_differences(rng, T, reverse, a_kind):
    shape = (3, T)
    a = {
        "full": lambda: rng.uniform(-1.1, 1.1, shape),
        "scalar": lambda: 0.8,
        "zero_d": lambda: np.array(-0.7),
        "lane": lambda: rng.uniform(-1, 1, (3, 1)),
        "time": lambda: rng.uniform(-1, 1, (T,)),
    }[a_kind]()
    b = _values(rng, shape, np.float64)
    _check(a, b, _values(rng, shape, np.float64), rng.standard_normal(3), reverse=reverse)
    _check(a, b, _values(rng, shape, np.float64), None, reverse=reverse)


@pytest.mark.parametrize("axis", [0, 1, -1, 2])
def test_any_axis_and_broadcast_b_and_initial(rng, axis):
    shape = (4, 5, 6)
    a = rng.uniform(-1, 1, shape)
    b_shape = list(shape)
    b_shape[(axis + 1) % 3] = 1  # b broadcast along a lane axis
    b = rng.standard_normal(b_shape)
    lanes = tuple(n for i, n in enumerate(shape) if i != axis % 3)
    initial = rng.standard_normal((1,) + lanes[1:])  # broadcast along the first lane axis
    _check(a, b, rng.standard_normal(shape), initial, axis=axis)
    _check(a, b, rng.standard_normal(shape), 0.5, axis=axis, reverse=True)


def test_scalar_initial_gets_scalar_gradient(rng):
    a, b, w = rng.uniform(-1, 1, (2, 5)), rng.standard_normal((2, 5)), rng.standard_normal((2, 5))
    _, _, gi = _check(a, b, w, 1.5)
    assert gi.shape == ()


@pytest.mark.parametrize("conjugate", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
def test_complex_conventions(rng, conjugate, reverse):
    # complex a with real b: grad_b is real (the real part); both conventions against the oracle
    a = _values(rng, (2, 6), np.complex128, 0.6)
    b = rng.standard_normal((2, 6))
    w = _values(rng, (2, 6), np.complex128)
    initial = _values(rng, (2,), np.complex128)
    _check(a, b, w, initial, reverse=reverse, conjugate=conjugate)
    _check(0.5 - 0.3j, _values(rng, (2, 6), np.complex128), w, None, reverse=reverse, conjugate=conjugate)


def test_the_conventions_differ_by_conjugation(rng):
    a = _values(rng, (2, 6), np.complex128, 0.6)
    b = _values(rng, (2, 6), np.complex128)
    w = _values(rng, (2, 6), np.complex128)
    h = linear_recurrence(a, b)
    jx = linear_recurrence_vjp(a, h, w)
    pt = linear_recurrence_vjp(a, h, w.conj(), conjugate=True)
    for x, y in zip(jx[:2], pt[:2]):
        np.testing.assert_allclose(x, y.conj(), rtol=1e-12)
        assert np.max(np.abs(x - y)) > 1e-3  # and they are not the same thing


@pytest.mark.parametrize("T", [1, 2, 3, 6])
@pytest.mark.parametrize("a_shape", ["full", "invariant", "per_step", "per_lane"])
@pytest.mark.parametrize("reverse", [False, True])
def test_dense_matches_finite_differences(rng, T, a_shape, reverse):
    n = 3
    shape = {"full": (2, T, n, n), "invariant": (n, n), "per_step": (T, n, n), "per_lane": (2, 1, n, n)}[a_shape]
    A = rng.uniform(-0.6, 0.6, shape)
    b = rng.standard_normal((2, T, n))
    _check(A, b, rng.standard_normal((2, T, n)), rng.standard_normal(n), reverse=reverse, dense=True)


@pytest.mark.parametrize("conjugate", [False, True])
def test_dense_complex_time_major(rng, conjugate):
    n, T = 2, 5
    A = _values(rng, (T, 1, n, n), np.complex128, 0.5)
    b = _values(rng, (T, 3, n), np.complex128)
    w = _values(rng, (T, 3, n), np.complex128)
    _check(A, b, w, _values(rng, (3, n), np.complex128), axis=0, dense=True, conjugate=conjugate)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_float32_within_float32_rounding(rng, backend):
    pytest.importorskip("numba") if backend == "numba" else None
    a = rng.uniform(-1, 1, (5, 200)).astype(np.float32)
    b = rng.standard_normal((5, 200)).astype(np.float32)
    w = rng.standard_normal((5, 200)).astype(np.float32)
    _check(a, b, w, rng.standard_normal(5).astype(np.float32), backend=backend)


def test_dask(rng):
    da = pytest.importorskip("dask.array")
    a = rng.uniform(-1, 1, (3, 11))
    b, w, initial = rng.standard_normal((3, 11)), rng.standard_normal((3, 11)), rng.standard_normal(3)
    for a_in in (a, 0.7, a[:, :1]):
        for reverse in (False, True):
            ad = a_in if np.isscalar(a_in) else da.from_array(a_in, chunks=(2, 4))
            bd, wd, idd = da.from_array(b, chunks=(2, 4)), da.from_array(w, chunks=(2, 4)), da.from_array(initial, 2)
            h = linear_recurrence(ad, bd, initial=idd, reverse=reverse)
            ga, gb, gi = linear_recurrence_vjp(ad, h, wd, initial=idd, reverse=reverse)
            assert all(isinstance(x, da.Array) for x in (ga, gb, gi))
            ref = fd_grads(a_in, b, w, initial, reverse=reverse)
            for got, want in zip((ga, gb, gi), ref):
                assert_grad_close(np.asarray(got), want, 1e-11)


def test_dense_dask(rng):
    da = pytest.importorskip("dask.array")
    A = rng.uniform(-0.5, 0.5, (7, 2, 2))
    b, w = rng.standard_normal((3, 7, 2)), rng.standard_normal((3, 7, 2))
    h = linear_recurrence(da.from_array(A, chunks=(3, 2, 2)), da.from_array(b, chunks=(2, 3, 2)), dense=True)
    grads = linear_recurrence_vjp(da.from_array(A, chunks=(3, 2, 2)), h, da.from_array(w, chunks=(2, 3, 2)),
                                  dense=True)
    for got, want in zip(grads[:2], fd_grads(A, b, w, dense=True)[:2]):
        assert_grad_close(np.asarray(got), want, 1e-11)


def _cupy():
    cupy = pytest.importorskip("cupy")
    try:
        if cupy.cuda.runtime.getDeviceCount() > 0:
            return cupy
    except Exception:  # noqa: BLE001 - no driver
        pass
    pytest.skip("no CUDA device")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "float64", "complex128"])
@pytest.mark.parametrize("a_kind", ["full", "scalar", "lane"])
def test_cupy(rng, dtype, a_kind):
    cupy = _cupy()
    T = 700  # several tiles of the adjoint scan
    a = {"full": lambda: rng.uniform(-1, 1, (3, T)), "scalar": lambda: 0.99,
         "lane": lambda: rng.uniform(-1, 1, (3, 1))}[a_kind]()
    b, w, i0 = _values(rng, (3, T), dtype), _values(rng, (3, T), dtype), _values(rng, (3,), dtype)
    a = a if np.isscalar(a) else a.astype(np.dtype(dtype).type(0).real.dtype)
    for reverse in (False, True):
        ca = a if np.isscalar(a) else cupy.asarray(a)
        h = linear_recurrence(ca, cupy.asarray(b), initial=cupy.asarray(i0), reverse=reverse)
        grads = linear_recurrence_vjp(ca, h, cupy.asarray(w), initial=cupy.asarray(i0), reverse=reverse)
        assert all(isinstance(g, cupy.ndarray) for g in grads)
        for got, want in zip(grads, fd_grads(a, b, w, i0, reverse=reverse)):
            assert_grad_close(cupy.asnumpy(got), want, 1e-4 if dtype == "float32" else 1e-10)


@pytest.mark.gpu
def test_cupy_dense(rng):
    cupy = _cupy()
    A, b, w = rng.uniform(-0.5, 0.5, (9, 3, 3)), rng.standard_normal((2, 9, 3)), rng.standard_normal((2, 9, 3))
    h = linear_recurrence(cupy.asarray(A), cupy.asarray(b), dense=True)
    grads = linear_recurrence_vjp(cupy.asarray(A), h, cupy.asarray(w), dense=True)
    for got, want in zip(grads[:2], fd_grads(A, b, w, dense=True)[:2]):
        assert_grad_close(cupy.asnumpy(got), want, 1e-10)


def test_inputs_are_not_modified(rng):
    a, b, w, i0 = (rng.standard_normal((2, 7)), rng.standard_normal((2, 7)), rng.standard_normal((2, 7)),
                   rng.standard_normal(2))
    h = linear_recurrence(a, b, initial=i0)
    copies = [x.copy() for x in (a, h, w, i0)]
    linear_recurrence_vjp(a, h, w, initial=i0, conjugate=True)
    for x, c in zip((a, h, w, i0), copies):
        np.testing.assert_array_equal(x, c)


def test_an_all_zero_gradient_fails_the_check(rng, monkeypatch):
    """The oracle check rejects a zero gradient (the scan never ran) and a shifted one."""
    a, b, w = rng.uniform(-1, 1, (2, 6)), rng.standard_normal((2, 6)), rng.standard_normal((2, 6))
    ref = fd_grads(a, b, w)
    with pytest.raises(AssertionError):
        assert_grad_close(np.zeros_like(ref[1]), ref[1], 1e-6)
    with pytest.raises(AssertionError):
        assert_grad_close(np.roll(ref[1], 1, axis=-1), ref[1], 1e-6)
    zero_the_vjp(monkeypatch)
    with pytest.raises(AssertionError):
        _check(a, b, w)


def test_fused_product_entry(rng):
    """The private entry that _vjp uses: h into out and h * mul into mul_out, in one call."""
    a, b = rng.uniform(-1, 1, (3, 9)), rng.standard_normal((3, 9))
    mul = rng.standard_normal((3, 1))  # broadcast
    out, mul_out = np.empty((3, 9)), np.empty((3, 9))
    _api._linear_recurrence(a, b, -1, 64, None, True, False, None, out, None, "auto", product=(mul, mul_out))
    ref = linear_recurrence(a, b, reverse=True)
    np.testing.assert_allclose(out, ref, rtol=1e-13)
    np.testing.assert_allclose(mul_out, ref * mul, rtol=1e-13)


def test_errors(rng):
    a, b = rng.uniform(-1, 1, (2, 5)), rng.standard_normal((2, 5))
    h = linear_recurrence(a, b)
    with pytest.raises(ValueError, match="grad has shape"):
        linear_recurrence_vjp(a, h, np.ones((2, 4)))
    with pytest.raises(ValueError, match="a with shape"):
        linear_recurrence_vjp(np.ones((3, 5)), h, h)
    with pytest.raises(ValueError, match="initial"):
        linear_recurrence_vjp(a, h, h, initial=np.ones(3))
    with pytest.raises(ValueError, match="b with shape"):
        linear_recurrence_vjp(a, h, h, b=np.ones((3, 5)))
    with pytest.raises(np.exceptions.AxisError):
        linear_recurrence_vjp(a, h, h, axis=2)
    with pytest.raises(TypeError, match="must be an array"):
        linear_recurrence_vjp(a, 1.0, h)
    with pytest.raises(ValueError, match="dense=True"):
        linear_recurrence_vjp(a, h, h, dense=True)
    da = pytest.importorskip("dask.array")
    with pytest.raises(TypeError, match="grad is a"):
        linear_recurrence_vjp(a, h, da.from_array(h))


def test_import_imports_no_framework():
    """``import scanarray`` and NumPy calls, the VJP included, import neither torch nor JAX (nor
    their front-ends): they come in with the first tensor or JAX array."""
    code = (
        "import sys, numpy as np, scanarray;"
        "h = scanarray.linear_recurrence(0.5, np.ones(4), backend='numpy');"
        "scanarray.linear_recurrence_vjp(0.5, h, np.ones(4), backend='numpy');"
        "print(','.join(m for m in ('torch', 'jax', 'jaxlib', 'scanarray._torch', 'scanarray._jax') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"imported {out.stdout.strip()}"


def test_exported():
    assert "linear_recurrence_vjp" in scanarray.__all__
