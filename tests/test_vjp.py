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


# --------------------------------------------------------------------------- the shifted adjoint (GPU)


def _adjoint_loop(a, h, g, initial, reverse):
    """grad_a, grad_b, grad_initial of ``L = sum(g * h)`` by the float64 (complex128) loop over time
    (axis -1): the adjoint's definition, with nothing of scanarray."""
    wide = np.complex128 if any(np.iscomplexobj(x) for x in (a, h, g)) else np.float64
    a, h, g = (np.asarray(x).astype(wide) for x in (a, h, g))
    if reverse:
        a, h, g = a[..., ::-1], h[..., ::-1], g[..., ::-1]
    T = h.shape[-1]
    gb = np.empty_like(h)
    with np.errstate(all="ignore"):
        gb[..., T - 1] = g[..., T - 1]
        for t in range(T - 2, -1, -1):
            gb[..., t] = a[..., t + 1] * gb[..., t + 1] + g[..., t]
        hprev = np.concatenate([np.broadcast_to(0 if initial is None else np.asarray(initial).astype(wide),
                                                h.shape[:-1])[..., None], h[..., :-1]], axis=-1)
        ga = gb * hprev
        gi = None if initial is None else a[..., 0] * gb[..., 0]
    if reverse:
        ga, gb = ga[..., ::-1], gb[..., ::-1]
    return ga, gb, gi


def _close(got, want, dtype, name):
    tol = 2e-3 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-9
    want = np.asarray(want)
    finite = np.isfinite(want)
    scale = np.max(np.abs(want[finite]), initial=1.0)
    got = np.asarray(got).astype(want.dtype)
    # non-finite values where the loop has them, the rest within the data's scale
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=f"{name}: NaN positions")
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want), err_msg=f"{name}: inf positions")
    assert np.all(got[np.isinf(want)] == want[np.isinf(want)]), f"{name}: signs of inf"
    np.testing.assert_allclose(got[finite], want[finite], rtol=0, atol=tol * scale, err_msg=name)


def _shifted_case(cupy, rng, shape, dtype, reverse, with_initial, axis=-1, poison=None):
    """The CuPy vjp of a forward call of ``shape`` against the float64 adjoint loop; returns the
    kinds of the shifted launches planned (scan._adjoints)."""
    from scanarray.backends.cupy import scan

    real = np.dtype(dtype).type(0).real.dtype
    a = rng.uniform(-0.999, 0.999, shape).astype(real) if np.dtype(dtype).kind == "f" else \
        (rng.uniform(-0.7, 0.7, shape) + 1j * rng.uniform(-0.7, 0.7, shape)).astype(dtype)
    h = _values(rng, shape, dtype)  # any h: the adjoint is linear in it
    g = _values(rng, shape, dtype)
    i0 = _values(rng, shape[:axis % len(shape)] + shape[axis % len(shape) + 1:], dtype) if with_initial else None
    if poison is not None:
        poison(a, h)
    am, hm, gm = (np.moveaxis(x, axis, -1) for x in (a, h, g))
    want = _adjoint_loop(am, hm, gm, i0, reverse)
    scan._adjoints.clear()
    got = linear_recurrence_vjp(cupy.asarray(a), cupy.asarray(h), cupy.asarray(g), axis,
                                initial=None if i0 is None else cupy.asarray(i0), reverse=reverse)
    for x, w, name in zip(got, want, ("grad_a", "grad_b", "grad_initial")):
        if w is None:
            assert x is None
            continue
        x = cupy.asnumpy(x)
        _close(np.moveaxis(x, axis, -1) if x.ndim == len(shape) else x, w, dtype, name)
    return [e[0].plan.kind for e in scan._adjoints.values() if e]


# shape -> the kernel of the shifted scan its float32 rows take on an H200 (tuning.py)
_SHIFT_SHAPES = {
    (8, 4096): "rows_tiles",  # one tile a row, no look-back
    (8, 4095): "rows_warp",  # shorter than a tile; odd
    (8, 4097): "rows_tiles",  # two tiles, look-back (staged on sm_90); odd
    (3, 65536): "rows_tiles",  # long rows, look-back (staged)
    (64, 100): "rows_seg",  # several rows a warp
    (256, 8192): "rows_wide",  # enough long rows to fill the device
}


@pytest.mark.gpu
@pytest.mark.parametrize("shape", list(_SHIFT_SHAPES))
@pytest.mark.parametrize("dtype", ["float32", "float64", "complex64"])
@pytest.mark.parametrize("reverse", [False, True])
def test_cupy_shifted_adjoint(rng, shape, dtype, reverse):
    cupy = _cupy()
    for with_initial in (False, True):
        kinds = _shifted_case(cupy, rng, shape, dtype, reverse, with_initial)
        assert len(kinds) == 1
        if dtype == "float32":  # the launch the planner picks (float64 many rows: rows_block)
            assert kinds == [_SHIFT_SHAPES[shape]]
        elif shape == (256, 8192):
            assert kinds[0] in ("rows_block", "rows_wide")


@pytest.mark.gpu
@pytest.mark.parametrize("reverse", [False, True])
def test_cupy_shifted_adjoint_one_long_row(rng, reverse):
    cupy = _cupy()
    assert _shifted_case(cupy, rng, (1, 2**20 + 3), "float32", reverse, True) == ["rows_tiles"]


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(4096, 8), (700, 64)])
def test_cupy_adjoint_time_major_keeps_the_views(rng, shape):
    """Along axis 0 of a C-order array (lanes closer than steps) the views' path runs."""
    cupy = _cupy()
    for reverse in (False, True):
        assert _shifted_case(cupy, rng, shape, "float32", reverse, True, axis=0) == []


@pytest.mark.gpu
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("shape", [(4, 4096), (2, 5000), (4, 300)])
def test_cupy_shifted_adjoint_non_finite_edges(rng, shape, reverse):
    """Non-finite a and h at the forward's first and last steps: those the adjoint never reads
    (a at its first step but for grad_initial, h at its last) leave the gradients finite; those
    it reads give the loop's infinities and NaNs."""
    cupy = _cupy()
    first, last = (-1, 0) if reverse else (0, -1)

    def unread(a, h):
        a[..., first] = np.inf
        h[..., last] = np.nan

    def read(a, h):
        a[0, last] = np.inf
        a[1, last] = np.nan
        h[0, first] = -np.inf
        h[-1, first] = np.nan

    for poison in (unread, read):
        for dtype in ("float32", "float64"):
            assert _shifted_case(cupy, rng, shape, dtype, reverse, True, poison=poison)


@pytest.mark.gpu
def test_cupy_shifted_adjoint_misaligned_views(rng):
    """Arrays one element off 16-byte alignment, and reversed views: still the one launch, with
    the groups the alignment allows."""
    cupy = _cupy()
    from scanarray.backends.cupy import scan

    T = 4099
    a, b, g = rng.uniform(-0.9, 0.9, (4, T + 1)), rng.standard_normal((4, T + 1)), rng.standard_normal((4, T + 1))
    ca, cb, cg = (cupy.asarray(x.astype(np.float32))[:, 1:] for x in (a, b, g))
    h = linear_recurrence(ca, cb)
    scan._adjoints.clear()
    ga, gb, _ = linear_recurrence_vjp(ca, h, cg)
    want = _adjoint_loop(cupy.asnumpy(ca), cupy.asnumpy(h), cupy.asnumpy(cg), None, False)
    _close(cupy.asnumpy(ga), want[0], "float32", "grad_a")
    _close(cupy.asnumpy(gb), want[1], "float32", "grad_b")
    assert [e[0].plan.kind for e in scan._adjoints.values() if e]


@pytest.mark.gpu
@pytest.mark.parametrize("reverse", [False, True])
def test_cupy_adjoint_a_broadcast_along_lanes(rng, reverse):
    """``a`` shared by a leading lane axis (JAX's per-example gradients under vmap pass it so):
    the gradients against the loop, grad_a summed over the shared axis."""
    cupy = _cupy()
    a = rng.uniform(-0.9, 0.9, (1, 3, 4096))
    b = rng.standard_normal((4, 3, 4096))
    g = rng.standard_normal((4, 3, 4096))
    i0 = rng.standard_normal((4, 3))
    h = linear_recurrence(a, b, initial=i0, reverse=reverse)
    ga, gb, gi = scanarray.linear_recurrence_vjp(cupy.asarray(a), cupy.asarray(h), cupy.asarray(g), b=b,
                                       initial=cupy.asarray(i0), reverse=reverse)
    ref_a, ref_b, ref_i = _adjoint_loop(np.broadcast_to(a, h.shape), h, g, i0, reverse)
    _close(cupy.asnumpy(ga), ref_a.sum(axis=0, keepdims=True), "float64", "grad_a")
    _close(cupy.asnumpy(gb), ref_b, "float64", "grad_b")
    _close(cupy.asnumpy(gi), ref_i, "float64", "grad_initial")
