"""Dense-specific tests: accuracy targets, broadcasting, time-invariant A, counts, growth, TF32.

The shared suite (test_contract.py) already runs every dense backend x method
against the oracle on small cases; this file holds what is particular to the
dense form: the issue's accuracy targets on contractive A (relative error
<= 1e-5 in float32, <= 1e-12 in float64 against the extended-precision
loop), batch broadcasting of A and b, that a time-invariant A is never
expanded to T copies, the multiply-add counts, systems that grow, and that
TF32 cannot silently degrade float32 on CuPy.
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

import scanarray
from scanarray import _dense, _registry
from backends import to_lib, to_numpy
from data import values
from oracle import assert_matches, dense_ref, tolerance


def _backend_params(backends=("numpy", "cupy")):
    out = []
    for name in backends:
        reason = _registry.unavailable_reason(name)
        marks = [pytest.mark.skipif(reason is not None, reason=f"{name}: {reason}")]
        if _registry.BACKENDS[name].needs_gpu:
            marks.append(pytest.mark.gpu)
        for method in _registry.BACKENDS[name].dense_methods:
            out.append(pytest.param(name, method, marks=marks, id=f"{name}-{method}"))
    return out


CASES = _backend_params()
GPU_CASES = _backend_params(("cupy",))
RTOL = {"float32": 1e-5, "complex64": 1e-5, "float64": 1e-12, "complex128": 1e-12}


def normed(rng, shape, dtype, norm=0.99):
    """Matrices ``(..., n, n)`` of spectral norm `norm` (so spectral radius <= `norm` too).

    For a time-varying A a bound on each factor's spectral radius alone does
    not make products contract; a bound on the norm does.
    """
    A = values(rng, shape, "complex128" if np.dtype(dtype).kind == "c" else "float64")
    s = np.linalg.norm(A, ord=2, axis=(-2, -1))[..., None, None]
    return (A * (norm / s)).astype(dtype)


def radius(rng, n, dtype, rho=0.99):
    """One non-normal matrix of spectral radius `rho` (its norm is larger: transient growth)."""
    A = values(rng, (n, n), "complex128" if np.dtype(dtype).kind == "c" else "float64")
    return (A * (rho / np.max(np.abs(np.linalg.eigvals(A))))).astype(dtype)


def call(backend, method, A, b, axis=-1, **kw):
    h = scanarray.linear_recurrence(
        to_lib(A, backend), to_lib(b, backend), axis, dense=True, backend=backend, method=method,
        **{k: to_lib(v, backend) if isinstance(v, np.ndarray) else v for k, v in kw.items()},
    )
    return to_numpy(h)


def rel_err(h, ref):
    ref = np.asarray(ref)
    return float(np.linalg.norm((h.astype(ref.dtype) - ref).ravel()) / np.linalg.norm(ref.ravel()))


# --------------------------------------------------------------------------- accuracy targets


def _size(backend, method, n):
    # The NumPy prefix scan does T n^3 log2 T work on the CPU: keep it short.
    return 700 if (backend, method) == ("numpy", "prefix") else 3000


@pytest.mark.parametrize("backend,method", CASES)
@pytest.mark.parametrize("n", [4, 16, 48])
@pytest.mark.parametrize("dtype", ["float32", "float64", "complex64", "complex128"])
def test_accuracy_time_varying(backend, method, n, dtype, rng):
    """Relative error within 1e-5 (single) / 1e-12 (double) of the loop, ||A[t]||_2 = 0.99."""
    T = _size(backend, method, n)
    A = normed(rng, (2, T, n, n), dtype)
    b = values(rng, (2, T, n), dtype)
    h0 = values(rng, (2, n), dtype)
    h = call(backend, method, A, b, initial=h0)
    ref, g = dense_ref(A, b, -1, initial=h0)
    assert h.dtype == np.dtype(dtype)
    assert rel_err(h, ref) <= RTOL[dtype], rel_err(h, ref)
    assert_matches(h, ref, g, tolerance(dtype, T, 64, n=n) * 4, f"{backend}/{method}")


@pytest.mark.parametrize("backend,method", CASES)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_accuracy_time_invariant_radius(backend, method, dtype, rng):
    """A single non-normal A of spectral radius 0.99 (norm above 1: transient growth)."""
    n, T = 24, 4099
    A = radius(rng, n, dtype)
    b = values(rng, (3, T, n), dtype)
    h = call(backend, method, A, b)
    ref, _ = dense_ref(A, b, -1)
    assert rel_err(h, ref) <= RTOL[dtype], rel_err(h, ref)


# --------------------------------------------------------------------------- broadcasting


@pytest.mark.parametrize("backend,method", CASES)
@pytest.mark.parametrize(
    "a_shape,b_shape",
    [
        ((3, 1, 67, 5, 5), (1, 4, 67, 5)),  # A per first lane axis, b per second
        ((67, 5, 5), (6, 67, 5)),  # one time-varying A shared by all lanes
        ((2, 1, 1, 5, 5), (2, 3, 67, 5)),  # per-lane, time-invariant
        ((5, 5), (2, 3, 67, 5)),  # one matrix for everything
        ((4, 67, 5, 5), (67, 5)),  # one b, many A
    ],
)
def test_broadcast_batch(backend, method, a_shape, b_shape, rng):
    A = normed(rng, a_shape, "float64")
    b = values(rng, b_shape, "float64")
    h = call(backend, method, A, b, axis=-1)
    ref, g = dense_ref(A, b, -1)
    assert h.shape == ref.shape == np.broadcast_shapes(a_shape[:-2], b_shape[:-1]) + (5,)
    assert_matches(h, ref, g, tolerance("float64", 67, 64, n=5) * 4, f"broadcast {a_shape} {b_shape}")


# --------------------------------------------------------------------------- time-invariant A


@pytest.mark.parametrize("method", list(_dense.METHODS))
def test_time_invariant_not_materialised_numpy(method, rng):
    """A constant (n, n) transition over T = 40000 steps allocates nothing of size T n^2."""
    n, T = 32, 40000
    A = normed(rng, (n, n), "float64")
    b = values(rng, (T, n), "float64")
    A_v = np.broadcast_to(A, (T, n, n))  # the canonical view the backend receives: stride 0
    tracemalloc.start()
    try:
        h = _dense.METHODS[method](np, A_v, b, None, np.dtype(np.float64))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    full = T * n * n * 8  # 328 MB if A were expanded
    assert peak < full / 8, f"peak {peak / 1e6:.1f} MB"
    ref, _ = dense_ref(A, b[:300], -1)
    assert rel_err(h[:300], ref) < 1e-12


@pytest.mark.gpu
@pytest.mark.parametrize("backend,method", GPU_CASES)
def test_time_invariant_not_materialised_cupy(backend, method, rng):
    """Under a memory-pool limit far below T n^2 elements the constant-A scan still runs."""
    import cupy

    n, T = 32, 40000
    A = cupy.asarray(normed(rng, (n, n), "float32"))
    b = cupy.asarray(values(rng, (T, n), "float32"))
    pool = cupy.get_default_memory_pool()
    pool.free_all_blocks()
    old = pool.get_limit()
    pool.set_limit(size=pool.used_bytes() + 12 * b.nbytes)  # one T n^2 copy alone: 32 b.nbytes
    try:
        h = scanarray.linear_recurrence(A, b, dense=True, backend=backend, method=method)
        cupy.cuda.Device().synchronize()
    finally:
        pool.set_limit(size=old)
    ref, _ = dense_ref(to_numpy(A), to_numpy(b)[:300], -1)
    assert rel_err(to_numpy(h)[:300], ref) < 1e-5


@pytest.mark.parametrize("T", [2, 3, 5, 64, 1000, 1025])
def test_time_invariant_counts(T):
    """Constant A: the products of A are one per level, not ~T."""
    n = 3
    A = np.broadcast_to(np.eye(n) * 0.5, (T, n, n))
    b = np.ones((T, n))
    for method in ("cyclic_reduction", "prefix"):
        with _dense.count_multiply_adds() as c:
            _dense.METHODS[method](np, A, b, None, np.dtype(np.float64))
        assert c.by_kind["matrix"] <= int(np.ceil(np.log2(T))) * n**3
        assert c.total == _dense.multiply_adds(method, T, n, time_invariant=True)["total"]


# --------------------------------------------------------------------------- counts


@pytest.mark.parametrize("method", list(_dense.METHODS))
@pytest.mark.parametrize("T", [1, 2, 3, 7, 8, 100, 1024])
@pytest.mark.parametrize("shared", [False, True])
def test_counts_match_prediction(method, T, shared, rng):
    n, lanes = 3, 4
    A = normed(rng, ((1,) if shared else (lanes,)) + (T, n, n), "float64")
    b = values(rng, (lanes, T, n), "float64")
    h0 = values(rng, (lanes, n), "float64")
    A_v = np.broadcast_to(A, (lanes, T, n, n))
    with _dense.count_multiply_adds() as c:
        _dense.METHODS[method](np, A_v, b, h0, np.dtype(np.float64))
    want = _dense.multiply_adds(method, T, n, lanes=lanes, a_lanes=1 if shared else lanes, initial=True)
    assert c.by_kind == {"matrix": want["matrix"], "vector": want["vector"]}


@pytest.mark.parametrize("T", [1024, 4096, 16384])
def test_work_bounds(T):
    """Cyclic reduction within 2 T n^3 multiply-adds; the prefix scan's excess grows like log2 T."""
    n = 32
    cr = _dense.multiply_adds("cyclic_reduction", T, n)["total"]
    pf = _dense.multiply_adds("prefix", T, n)["total"]
    assert cr <= 2 * T * n**3
    assert (np.log2(T) - 2) < pf / cr < np.log2(T)


# --------------------------------------------------------------------------- reverse / initial / out


@pytest.mark.parametrize("backend,method", CASES)
@pytest.mark.parametrize("reverse", [False, True])
def test_initial_reverse_out(backend, method, reverse, rng):
    n, T = 6, 131
    A = normed(rng, (2, T, n, n), "float64")
    b = values(rng, (2, T, n), "float64")
    h0 = values(rng, (2, n), "float64")
    ref, g = dense_ref(A, b, -1, initial=h0, reverse=reverse)
    tol = tolerance("float64", T, 64, n=n) * 4
    out = to_lib(np.empty_like(b), backend)
    h = scanarray.linear_recurrence(to_lib(A, backend), to_lib(b, backend), dense=True, initial=to_lib(h0, backend),
                                    reverse=reverse, out=out, backend=backend, method=method)
    assert h is out
    assert_matches(to_numpy(h), ref, g, tol, "out")
    # in place: out is b
    bb = to_lib(b.copy(), backend)
    h = scanarray.linear_recurrence(to_lib(A, backend), bb, dense=True, initial=to_lib(h0, backend),
                                    reverse=reverse, out=bb, backend=backend, method=method)
    assert h is bb
    assert_matches(to_numpy(bb), ref, g, tol, "in place")
    # two calls chained through the initial state equal one call
    k = 50
    first, second = (slice(T - k, T), slice(0, T - k)) if reverse else (slice(0, k), slice(k, T))
    h1 = call(backend, method, A[:, first], b[:, first], initial=h0, reverse=reverse)
    carry = h1[:, 0] if reverse else h1[:, -1]
    h2 = call(backend, method, A[:, second], b[:, second], initial=carry, reverse=reverse)
    both = np.concatenate([h2, h1] if reverse else [h1, h2], axis=1)
    assert_matches(both, ref, g, tol, "chained")


@pytest.mark.parametrize("method", list(_dense.METHODS))
def test_numpy_generic_out_of_dtype(method, rng):
    """``out`` of the accumulation dtype is the work array itself; another dtype gets a new one."""
    n, T = 4, 37
    A = normed(rng, (T, n, n), "float64")
    b = values(rng, (T, n), "float64")
    out = np.empty_like(b)
    h = _dense.METHODS[method](np, A, b, None, np.dtype(np.float64), out=out)
    assert h is out
    h32 = _dense.METHODS[method](np, A, b, None, np.dtype(np.float64), out=np.empty(b.shape, np.float32))
    assert h32.dtype == np.float64
    np.testing.assert_allclose(h32, out, rtol=1e-14)


# --------------------------------------------------------------------------- growing systems


@pytest.mark.parametrize("backend,method", CASES)
def test_growing_system_relative_accuracy(backend, method, rng):
    """||A|| = 1.01 over 1000 steps (growth ~2e4): the error stays relative to the growing state."""
    n, T = 8, 1000
    A = normed(rng, (2, T, n, n), "float64", norm=1.01)
    b = values(rng, (2, T, n), "float64")
    h = call(backend, method, A, b)
    ref, g = dense_ref(A, b, -1)
    assert_matches(h, ref, g, tolerance("float64", T, 64, n=n) * 4, "growing")


@pytest.mark.parametrize("backend,method", CASES)
def test_growing_overflow_never_wrong_finite(backend, method):
    """Documented behaviour when products of A overflow.

    With A = 4 I, b = 0 and h[-1] = 0 the loop gives exact zeros. The
    sequential method does too. Cyclic reduction and the prefix scan form
    products of A over 2, 4, 8, ... steps; 4^64 overflows float32, and
    ``inf * 0`` makes NaN: they may return NaN where the loop has 0 (whether
    a BLAS skips zero entries decides where). They never return a wrong
    finite number.
    """
    n, T = 2, 300
    A = np.eye(n, dtype=np.float32) * 4
    b = np.zeros((T, n), np.float32)
    with np.errstate(all="ignore"):
        h = call(backend, method, A, b)
    finite = np.isfinite(h)
    assert np.all(h[finite] == 0)
    if method == "sequential":
        assert finite.all()


# --------------------------------------------------------------------------- TF32 on CuPy


@pytest.mark.gpu
@pytest.mark.parametrize("backend,method", GPU_CASES)
@pytest.mark.parametrize("const", [False, True])
def test_tf32_cannot_degrade_float32(backend, method, const, rng):
    """With TF32 switched on everywhere CuPy looks, float32 results keep 1e-5 accuracy."""
    import cupy
    from cupy._core import _routines_linalg as linalg
    from cupy_backends.cuda.libs import cublas

    n, T = 32, 2048
    A = radius(rng, n, "float32") if const else normed(rng, (T, n, n), "float32")
    b = values(rng, (T, n), "float32")
    ref, _ = dense_ref(A, b, -1)
    handle = cupy.cuda.device.get_cublas_handle()
    old_type, old_mode = linalg.get_compute_type(np.float32), cublas.getMathMode(handle)
    tf32_device = int(cupy.cuda.Device().compute_capability) >= 80
    try:
        linalg.set_compute_type(np.float32, linalg.COMPUTE_TYPE_TF32)
        cublas.setMathMode(handle, 3)  # CUBLAS_TF32_TENSOR_OP_MATH
        if tf32_device:  # the switches really degrade a plain product: the test can fail
            x = cupy.asarray(values(rng, (256, 256), "float64"))
            exact = x @ x
            x32 = x.astype(cupy.float32)
            assert float(cupy.linalg.norm(x32 @ x32 - exact) / cupy.linalg.norm(exact)) > 1e-5
        h = scanarray.linear_recurrence(cupy.asarray(A), cupy.asarray(b), dense=True, backend=backend, method=method)
        assert linalg.get_compute_type(np.float32) == linalg.COMPUTE_TYPE_TF32  # restored
        assert cublas.getMathMode(handle) == 3
    finally:
        linalg.set_compute_type(np.float32, old_type)
        cublas.setMathMode(handle, old_mode)
    assert rel_err(to_numpy(h), ref) <= 1e-5


# --------------------------------------------------------------------------- auto choice


@pytest.mark.parametrize(
    "B,T,n,want",
    [
        (1, 1024, 4, "sequential"),  # all from the H200 table in docs/dense.md
        (64, 1024, 16, "sequential"),
        (1, 8192, 32, "prefix"),
        (1, 2048, 64, "prefix"),
        (1, 16384, 32, "cyclic_reduction"),
        (16, 1024, 32, "cyclic_reduction"),
        (8, 4096, 64, "cyclic_reduction"),
    ],
)
def test_cupy_auto_rule(B, T, n, want):
    """The CuPy dense auto rule picks the method measured fastest at these shapes (no GPU needed)."""
    from types import SimpleNamespace

    from scanarray import _config

    p = SimpleNamespace(length=T, lanes=(B,), b=SimpleNamespace(shape=(B, T, n)), dense=True)
    assert _config.cupy_auto_method(p) == want
