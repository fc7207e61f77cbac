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

import functools
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


@functools.lru_cache(maxsize=None)
def _accuracy_case(n, dtype):
    """Inputs and the extended-precision loop of the accuracy tests, drawn once per session and
    size and shared by every method (the oracle's T-step loop is most of such a test's time;
    a shorter T reads a prefix of it)."""
    seed = np.random.SeedSequence().entropy % 2**32
    rng = np.random.default_rng(seed)
    A = normed(rng, (2, 3000, n, n), dtype)
    b = values(rng, (2, 3000, n), dtype)
    h0 = values(rng, (2, n), dtype)
    return seed, A, b, h0, dense_ref(A, b, -1, initial=h0)


#: (dtype, n): every dtype at n = 4 and 16, the real ones at 48; complex at 48 (minutes of
#: complex batched products on two cores) in the slow step
ACCURACY_SIZES = [(d, n) for d in ("float32", "float64", "complex64", "complex128") for n in (4, 16)] + [
    ("float32", 48), ("float64", 48),
    pytest.param("complex64", 48, marks=pytest.mark.slow), pytest.param("complex128", 48, marks=pytest.mark.slow),
]


@pytest.mark.parametrize("backend,method", CASES)
@pytest.mark.parametrize("dtype,n", ACCURACY_SIZES)
def test_accuracy_time_varying(backend, method, n, dtype):
    """Relative error within 1e-5 (single) / 1e-12 (double) of the loop, ||A[t]||_2 = 0.99."""
    T = _size(backend, method, n)
    seed, A, b, h0, (ref, g) = _accuracy_case(n, dtype)
    print(f"seed={seed}")
    A, b, ref, g = A[:, :T], b[:, :T], ref[:, :T], g[:, :T]
    h = call(backend, method, A, b, initial=h0)
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
    for method in ("cyclic_reduction", "prefix", "chunked"):
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


# --------------------------------------------------------------------------- chunked (NumPy)


@pytest.mark.parametrize("chunk", [1, 2, 3, 5])
@pytest.mark.parametrize("T", [1, 2, 3, 4, 6, 9, 10, 11, 15, 16, 17, 26])
@pytest.mark.parametrize("const", [False, True])
def test_chunked_every_split(chunk, T, const, rng):
    """Every split of T into chunk 0 (1..L steps) and K chunks of L, K below and above 3, against the oracle."""
    n = 3
    A = normed(rng, (2, 1) + ((1,) if const else (T,)) + (n, n), "float64")
    b = values(rng, (2, 3, T, n), "float64")
    h0 = values(rng, (2, 3, n), "float64")
    shape = (2, 3, T)
    A_v, b_v = np.broadcast_to(A, shape + (n, n)), np.broadcast_to(b, shape + (n,))
    for reverse in (False, True):
        with _dense.count_multiply_adds() as c:
            h = _dense.chunked(np, A_v, b_v, h0, np.dtype(np.float64), reverse=reverse, chunk=chunk)
        ref, g = dense_ref(A_v, b_v, -1, initial=h0, reverse=reverse)
        assert_matches(h, ref, g, tolerance("float64", T, 64, n=n) * 4, f"chunk={chunk} T={T} reverse={reverse}")
        want = _dense.multiply_adds("chunked", T, n, lanes=6, a_lanes=2, time_invariant=const, initial=True,
                                    chunk=chunk)
        assert c.by_kind == {"matrix": want["matrix"], "vector": want["vector"]}


@pytest.mark.parametrize("dtype", ["float32", "complex64", "complex128"])
@pytest.mark.parametrize("n", [1, 7])
def test_chunked_dtypes_in_place(dtype, n, rng):
    """T not a multiple of L, n = 1, every dtype, in place (out is b), through the public function."""
    T = 1000  # chunk_length(1000) = 33: chunk 0 has 10 steps, then 30 chunks of 33
    A = normed(rng, (4, T, n, n), dtype)
    b = values(rng, (4, T, n), dtype)
    ref, g = dense_ref(A, b, -1)
    bb = b.copy()
    h = scanarray.linear_recurrence(A, bb, dense=True, backend="numpy", method="chunked", out=bb)
    assert h is bb
    assert rel_err(bb, ref) <= RTOL[dtype]
    assert_matches(bb, ref, g, tolerance(dtype, T, 64, n=n) * 4, "chunked in place")


@pytest.mark.parametrize("kind", ["nan_b", "inf_b", "inf_A", "nan_A"])
def test_chunked_nonfinite_where_the_loop_has_them(kind, rng):
    """One NaN/Inf in A or b: chunked is non-finite exactly where the loop is, and agrees elsewhere.

    (Whether an element is NaN or an infinity may differ: products are associated differently.)
    """
    B, T, n = 3, 200, 4
    for _ in range(12):
        A = normed(rng, (B, T, n, n), "float64", norm=0.9)
        b = values(rng, (B, T, n), "float64")
        lane, t, i, j = rng.integers(B), rng.integers(T), rng.integers(n), rng.integers(n)
        if kind.endswith("_b"):
            b[lane, t, i] = np.nan if kind == "nan_b" else np.inf
        else:
            A[lane, t, i, j] = np.nan if kind == "nan_A" else np.inf
        with np.errstate(all="ignore"):
            h = _dense.chunked(np, A, b, None, np.dtype(np.float64), chunk=13)
            ref, g = dense_ref(A, b, -1)
        fin = np.isfinite(ref)
        np.testing.assert_array_equal(np.isfinite(h), fin)
        assert np.all(np.abs(h[fin] - ref[fin]) <= 1e-12 * (1 + g[fin]))


def test_chunked_float16_storage(rng):
    """float16 data: computed in float32, written into the float16 result."""
    n, T = 4, 500
    A = normed(rng, (2, T, n, n), "float32").astype(np.float16)
    b = values(rng, (2, T, n), "float32").astype(np.float16)
    h = scanarray.linear_recurrence(A, b, dense=True, backend="numpy", method="chunked")
    assert h.dtype == np.float16
    ref, _ = dense_ref(A.astype(np.float64), b.astype(np.float64), -1)
    assert rel_err(h.astype(np.float64), ref) < 2e-3


def test_chunked_products_not_stored(rng):
    """Time-varying A: the work buffers hold two chunk products, not one product per step."""
    n, T, B = 16, 4096, 2
    A = normed(rng, (B, T, n, n), "float64")
    b = values(rng, (B, T, n), "float64")
    tracemalloc.start()
    try:
        h = _dense.chunked(np, A, b, None, np.dtype(np.float64))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < A.nbytes / 8 + 3 * b.nbytes, f"peak {peak / 1e6:.1f} MB"
    ref, _ = dense_ref(A[:, :300], b[:, :300], -1)
    assert rel_err(h[:, :300], ref) < 1e-12


@pytest.mark.parametrize(
    "B,T,n,dtype,a_kind,want",
    [
        # all measured on a 2-core VM (NumPy)
        (8, 4096, 16, "float32", "lane", "sequential"),
        (8, 4096, 16, "float64", "lane", "sequential"),
        (64, 4096, 16, "float32", "lane", "sequential"),
        (8, 4096, 64, "float32", "lane", "sequential"),
        (1, 4096, 64, "float32", "lane", "sequential"),
        (1, 4096, 16, "float32", "lane", "cyclic_reduction"),
        (8, 4096, 4, "float32", "lane", "cyclic_reduction"),
        (1, 16384, 16, "float32", "lane", "chunked"),
        (8, 4096, 16, "float32", "const", "chunked"),
        (64, 4096, 16, "float64", "const", "chunked"),
        (8, 2, 16, "float32", "lane", "sequential"),
        (8, 4096, 16, "float32", "shared", "chunked"),
        (64, 4096, 16, "float32", "shared", "sequential"),
        (8, 4096, 4, "float32", "shared", "cyclic_reduction"),
        (8, 4096, 64, "float32", "shared", "sequential"),
    ],
)
def test_numpy_auto_rule(B, T, n, dtype, a_kind, want):
    """The NumPy dense auto rule picks the method measured fastest (or the robust one) at these shapes."""
    from types import SimpleNamespace

    from scanarray.backends import numpy_backend

    item = np.dtype(dtype).itemsize
    per = n * n * item
    strides = {"lane": (T * per, per), "shared": (0, per), "const": (per, 0)}[a_kind]
    a = SimpleNamespace(shape=(B, T, n, n), strides=strides + (n * item, item))
    p = SimpleNamespace(length=T, lanes=(B,), a=a, b=SimpleNamespace(shape=(B, T, n)), dtype=np.dtype(dtype),
                        dense=True)
    assert numpy_backend.dense_auto_method(p) == want


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
        (1, 1024, 4, "sequential"),  # all measured on the H200
        (4, 4096, 16, "sequential"),  # chunked only from 8 lanes (measured at 8 and 64)
        (64, 1024, 16, "lookback"),  # 0.136 ms against chunked 0.180, sequential 0.40, CR 1.56, prefix 5.1
        (1, 8192, 32, "prefix"),  # 1.46 against sequential 3.76
        (1, 2048, 64, "prefix"),
        (1, 16384, 32, "cyclic_reduction"),
        (16, 1024, 32, "chunked"),  # estimate 0.28 against sequential 0.53, CR 1.59 (chunked not timed)
        (16, 8192, 32, "chunked"),  # estimate 1.7 against CR 3.65, sequential 3.78 (chunked not timed)
        (256, 65536, 4, "sequential"),  # 16.7 against CR 67.1
        (1, 1024, 128, "cyclic_reduction"),  # 1.58 against sequential 3.92
        (16, 1024, 128, "sequential"),  # 3.91 against CR 7.03
        (8, 4096, 64, "chunked"),  # 0.83 (1.10 with FMA products) against sequential 2.50-2.64, CR 3.98
    ],
)
def test_cupy_auto_rule(B, T, n, want):
    """The CuPy dense auto rule picks the method measured fastest at these shapes (no GPU needed)."""
    from types import SimpleNamespace

    from scanarray.backends import cupy as cupy_backend

    p = SimpleNamespace(length=T, lanes=(B,), b=SimpleNamespace(shape=(B, T, n)), dense=True,
                        dtype=np.dtype(np.float32))
    assert cupy_backend.auto_method(p) == want


# --------------------------------------------------------------------------- CuPy sequential kernels

_CUPY_SKIP = pytest.mark.skipif(_registry.unavailable_reason("cupy") is not None,
                                reason=f"cupy: {_registry.unavailable_reason('cupy')}")
# the latency-bound kernels: A through a cp.async ring or registers (the state through shared memory;
# with a block per lane the outputs too, written every 32 steps)
_LATENCY_KERNELS = ["ring", "regs"]


@pytest.fixture
def cupy_dense(monkeypatch):
    """``use(method, **options)``: the CuPy dense method's function (``dense.sequential``, ...) runs
    with these keyword arguments in the test, through the public function, starting with no bound
    calls."""
    from scanarray import _bound
    from scanarray.backends.cupy import dense as _cupy_dense

    def use(method, **options):
        monkeypatch.setattr(_cupy_dense, method, functools.partial(getattr(_cupy_dense, method), **options))
        monkeypatch.setattr(_bound.CALLS, "table", {})

    return use


@pytest.fixture
def cupy_kernel(cupy_dense):
    """Select the CuPy sequential kernel (and optionally its depth) for the test."""
    return lambda kernel, stages=None: cupy_dense("sequential", kernel=kernel, stages=stages)


def _seq_case(rng, dtype, lanes, T, n, a_shape=None, initial=True):
    A = normed(rng, (a_shape if a_shape is not None else (lanes, T)) + (n, n), dtype)
    b = values(rng, (lanes, T, n), dtype)
    h0 = values(rng, (lanes, n), dtype) if initial else None
    return A, b, h0


def _check_cupy(method, A, b, h0, dtype, reverse=False, what=""):
    """CuPy dense ``method`` against the extended-precision loop oracle."""
    kw = {"initial": h0} if h0 is not None else {}
    h = call("cupy", method, A, b, reverse=reverse, **kw)
    ref, g = dense_ref(A, b, -1, initial=h0, reverse=reverse)
    T, n = b.shape[-2], b.shape[-1]
    assert h.dtype == np.dtype(dtype)
    assert rel_err(h, ref) <= RTOL[dtype], (what, rel_err(h, ref))
    assert_matches(h, ref, g, tolerance(dtype, T, 64, n=n) * 4, what)


def _check_seq(*args, **kw):
    _check_cupy("sequential", *args, **kw)


@pytest.mark.gpu
@_CUPY_SKIP
@pytest.mark.parametrize("kernel", _LATENCY_KERNELS)
@pytest.mark.parametrize("n", [1, 2, 3, 5, 16, 17, 31, 32, 33, 64, 65, 128])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_cupy_sequential_kernel_sizes(cupy_kernel, kernel, n, dtype, rng):
    """Warp-per-lane (n <= 32) and block-per-lane kernels, n powers of two and not (padded columns)."""
    cupy_kernel(kernel)
    A, b, h0 = _seq_case(rng, dtype, 3, 37, n)
    _check_seq(A, b, h0, dtype, what=f"{kernel} n={n}")


@pytest.mark.gpu
@_CUPY_SKIP
@pytest.mark.parametrize("kernel", _LATENCY_KERNELS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("n", [4, 12, 64])
@pytest.mark.parametrize("T", [1, 17, 300])
@pytest.mark.parametrize("reverse", [False, True])
def test_cupy_sequential_kernel_options(cupy_kernel, kernel, dtype, n, T, reverse, rng):
    """Every dtype, T below / at / above the steps in flight (and the 32-step output ring), reverse,
    with and without initial."""
    cupy_kernel(kernel)
    A, b, h0 = _seq_case(rng, dtype, 2, T, n)
    _check_seq(A, b, h0, dtype, reverse, f"{kernel} {dtype} n={n} T={T}")
    _check_seq(A, b, None, dtype, reverse, f"{kernel} {dtype} n={n} T={T} no initial")


@pytest.mark.gpu
@_CUPY_SKIP
@pytest.mark.parametrize("kernel", ["ring", "regs"])
@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
@pytest.mark.parametrize("n", [4, 12, 64])
@pytest.mark.parametrize("T", [1, 300])
@pytest.mark.parametrize("reverse", [False, True])
def test_cupy_sequential_kernel_complex(cupy_kernel, kernel, dtype, n, T, reverse, rng):
    """Complex dtypes: shuffled and copied in 4-byte words."""
    cupy_kernel(kernel)
    A, b, h0 = _seq_case(rng, dtype, 2, T, n)
    _check_seq(A, b, h0, dtype, reverse, f"{kernel} {dtype} n={n} T={T}")
    _check_seq(A[:, :1], b, None, dtype, reverse, f"{kernel} {dtype} n={n} T={T} invariant, no initial")


@pytest.mark.gpu
@_CUPY_SKIP
@pytest.mark.parametrize("kernel", _LATENCY_KERNELS)
@pytest.mark.parametrize("n", [5, 16, 64])
@pytest.mark.parametrize("a_shape", ["invariant", "shared", "invariant per lane"])
@pytest.mark.parametrize("dtype", ["float32"])
def test_cupy_sequential_kernel_broadcast_a(cupy_kernel, kernel, n, a_shape, dtype, rng):
    """A time-invariant (read once, a_time = 0) or shared by every lane (a_lane = 0)."""
    cupy_kernel(kernel)
    T, lanes = 45, 3
    shape = {"invariant": (), "shared": (T,), "invariant per lane": (lanes, 1)}[a_shape]
    A, b, h0 = _seq_case(rng, dtype, lanes, T, n, a_shape=shape)
    _check_seq(A, b, h0, dtype, False, f"{kernel} {a_shape} n={n}")
    _check_seq(A, b, h0, dtype, True, f"{kernel} {a_shape} n={n} reverse")


@pytest.mark.gpu
@_CUPY_SKIP
@pytest.mark.parametrize("kernel", _LATENCY_KERNELS)
@pytest.mark.parametrize("n", [3, 16, 40])
def test_cupy_sequential_kernel_lanes_per_block(cupy_kernel, kernel, n, rng):
    """Lane counts around the switch to 4 lanes per block (more lanes than SMs) and partial blocks."""
    import cupy

    cupy_kernel(kernel)
    sms = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["multiProcessorCount"]
    for lanes in (1, sms, sms + 1, 4 * sms + 3):
        A, b, h0 = _seq_case(rng, "float32", lanes, 6, n)
        _check_seq(A, b, h0, "float32", False, f"{kernel} lanes={lanes} n={n}")


@pytest.mark.gpu
@_CUPY_SKIP
@pytest.mark.parametrize("kernel,stages", [("ring", 2), ("ring", 4), ("regs", 2), ("regs", 4)])
@pytest.mark.parametrize("n", [16, 64])
def test_cupy_sequential_kernel_shallow(cupy_kernel, kernel, stages, n, rng):
    """Few steps in flight: the ring's slots and the register buffers are reused many times."""
    cupy_kernel(kernel, stages)
    for T in (1, stages - 1, stages, stages + 1, 103):
        if T >= 1:
            A, b, h0 = _seq_case(rng, "float32", 2, T, n)
            _check_seq(A, b, h0, "float32", T % 2 == 1, f"{kernel} D={stages} T={T}")


@pytest.mark.gpu
@_CUPY_SKIP
@pytest.mark.parametrize("kernel", ["ring", "regs", "staged", "direct"])
@pytest.mark.parametrize("n", [8, 16, 64])
def test_cupy_sequential_kernel_unaligned(cupy_kernel, kernel, n, rng):
    """A and b at an odd element offset: 16-byte copies are not possible, element copies are used."""
    import cupy

    cupy_kernel(kernel)
    T, lanes = 29, 2
    A, b, h0 = _seq_case(rng, "float32", lanes, T, n)
    Ab = cupy.empty(A.size + 1, A.dtype)[1:].reshape(A.shape)
    Ab[...] = cupy.asarray(A)
    bb = cupy.empty(b.size + 1, b.dtype)[1:].reshape(b.shape)
    bb[...] = cupy.asarray(b)
    h = scanarray.linear_recurrence(Ab, bb, dense=True, initial=cupy.asarray(h0), backend="cupy", method="sequential")
    ref, g = dense_ref(A, b, -1, initial=h0)
    assert rel_err(to_numpy(h), ref) <= RTOL["float32"]
    assert_matches(to_numpy(h), ref, g, tolerance("float32", T, 64, n=n) * 4, f"{kernel} unaligned")


@pytest.mark.gpu
@_CUPY_SKIP
@pytest.mark.parametrize("kernel", _LATENCY_KERNELS)
@pytest.mark.parametrize("n", [3, 5, 64])
def test_cupy_sequential_kernel_nonfinite(cupy_kernel, kernel, n):
    """An infinite state spreads as in the loop; padded columns (n not a power of two) add no NaN."""
    cupy_kernel(kernel)
    T = 6
    A = np.broadcast_to(np.eye(n, dtype=np.float32) * 0.5, (T, n, n)).copy()
    b = np.zeros((1, T, n), np.float32)
    b[0, 2, 0] = np.inf
    with np.errstate(all="ignore"):
        h = call("cupy", "sequential", A, b)
        ref, _ = dense_ref(A, b, -1)
    assert np.array_equal(np.isnan(h), np.isnan(ref)) and np.array_equal(np.isinf(h), np.isinf(ref))
    assert np.array_equal(h[np.isfinite(h)], ref[np.isfinite(ref)].astype(np.float32))


# --------------------------------------------------------------------------- CuPy chunked


@pytest.fixture
def cupy_chunk(cupy_dense):
    """Set the CuPy chunked method's chunk length, tile, depth, minimum chunk count, tensor-core and
    warpgroup products for the test."""
    def select(L=None, R=None, D=None, minimum=1, mma=True, warpgroup=True):
        cupy_dense("chunked", length=L, tile=R, depth=D, chunk_min=minimum, mma=mma, warpgroup=warpgroup)

    return select


def _check_chunked(*args, **kw):
    _check_cupy("chunked", *args, **kw)


@pytest.mark.gpu
@_CUPY_SKIP
@pytest.mark.parametrize("n", [1, 3, 16, 17, 33, 64])
@pytest.mark.parametrize("T", [1, 31, 32, 33, 1000, 1024])
def test_cupy_chunked_sizes(cupy_chunk, n, T, rng):
    """L = 32: one short chunk, one chunk, a short last chunk (T = L + 1, 1000), exact chunks (1024)."""
    cupy_chunk(L=32)
    A, b, h0 = _seq_case(rng, "float32", 2, T, n)
    _check_chunked(A, b, h0, "float32", T % 2 == 1, f"chunked n={n} T={T}")


@pytest.mark.gpu
@_CUPY_SKIP
@pytest.mark.parametrize("dtype", ["float32", "float64", "complex64", "complex128"])
@pytest.mark.parametrize("n", [3, 16, 33])
@pytest.mark.parametrize("reverse", [False, True])
def test_cupy_chunked_dtypes(cupy_chunk, dtype, n, reverse, rng):
    """Every dtype, with and without initial, default chunk length (T = 1000: 32 chunks, last of 8)."""
    cupy_chunk(minimum=3)
    A, b, h0 = _seq_case(rng, dtype, 3, 1000, n)
    _check_chunked(A, b, h0, dtype, reverse, f"chunked {dtype} n={n}")
    _check_chunked(A, b, None, dtype, reverse, f"chunked {dtype} n={n} no initial")


@pytest.mark.gpu
@_CUPY_SKIP
@pytest.mark.parametrize("n", [5, 16, 64])
@pytest.mark.parametrize("a_shape", ["invariant", "shared", "invariant per lane"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_cupy_chunked_broadcast_a(cupy_chunk, n, a_shape, dtype, rng):
    """A time-invariant (a_time = 0), shared by every lane (a_lane = 0) or both, read in place."""
    cupy_chunk(L=20)
    T, lanes = 300, 3
    shape = {"invariant": (), "shared": (T,), "invariant per lane": (lanes, 1)}[a_shape]
    A, b, h0 = _seq_case(rng, dtype, lanes, T, n, a_shape=shape)
    _check_chunked(A, b, h0, dtype, False, f"chunked {a_shape} n={n}")
    _check_chunked(A, b, h0, dtype, True, f"chunked {a_shape} n={n} reverse")


@pytest.mark.gpu
@_CUPY_SKIP
@pytest.mark.parametrize("lanes", [1, 64])
@pytest.mark.parametrize("n", [4, 16])
def test_cupy_chunked_lanes(cupy_chunk, lanes, n, rng):
    """One lane (few groups: one per block) and 64 lanes (many groups per block)."""
    cupy_chunk(minimum=3)
    A, b, h0 = _seq_case(rng, "float32", lanes, 1024, n)
    _check_chunked(A, b, h0, "float32", False, f"chunked lanes={lanes} n={n}")


@pytest.mark.gpu
@_CUPY_SKIP
@pytest.mark.parametrize("R", [1, 2, 4, 8])
@pytest.mark.parametrize("D", [2, 4])
@pytest.mark.parametrize("n", [2, 17, 33, 128])
def test_cupy_chunked_tiles(cupy_chunk, R, D, n, rng):
    """Every register tile and ring depth of the products kernel (n padded to R; R > n included)."""
    cupy_chunk(L=16, R=R, D=D)
    A, b, h0 = _seq_case(rng, "float32", 2, 100, n)
    _check_chunked(A, b, h0, "float32", R == 2, f"chunked R={R} D={D} n={n}")


@pytest.mark.gpu
@_CUPY_SKIP
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("n", [8, 16])
def test_cupy_chunked_in_place_unaligned(cupy_chunk, dtype, n, rng):
    """out=b (in place) and A, b at an odd element offset (element copies instead of 16-byte ones)."""
    import cupy

    cupy_chunk(L=16)
    T, lanes = 200, 2
    A, b, h0 = _seq_case(rng, dtype, lanes, T, n)
    ref, g = dense_ref(A, b, -1, initial=h0)
    bb = cupy.asarray(b)
    h = scanarray.linear_recurrence(cupy.asarray(A), bb, dense=True, initial=cupy.asarray(h0), backend="cupy",
                                    method="chunked", out=bb)
    assert h is bb or h.data.ptr == bb.data.ptr
    assert_matches(to_numpy(bb), ref, g, tolerance(dtype, T, 64, n=n) * 4, "chunked in place")
    Ab = cupy.empty(A.size + 1, A.dtype)[1:].reshape(A.shape)
    Ab[...] = cupy.asarray(A)
    bu = cupy.empty(b.size + 1, b.dtype)[1:].reshape(b.shape)
    bu[...] = cupy.asarray(b)
    h = scanarray.linear_recurrence(Ab, bu, dense=True, initial=cupy.asarray(h0), backend="cupy", method="chunked")
    assert rel_err(to_numpy(h), ref) <= RTOL[dtype]
    assert_matches(to_numpy(h), ref, g, tolerance(dtype, T, 64, n=n) * 4, "chunked unaligned")


@pytest.mark.gpu
@_CUPY_SKIP
@pytest.mark.parametrize("mma", [True, False])
@pytest.mark.parametrize("n", [9, 31, 48, 64])
@pytest.mark.parametrize("a_shape", ["varying", "invariant", "shared"])
@pytest.mark.parametrize("D", [None, 2, 3])
def test_cupy_chunked_products_kinds(cupy_chunk, mma, n, a_shape, D, rng):
    """Both products kernels (tensor cores in 3xTF32 for float32 9 <= n <= 64, FMAs) on every padding
    (n = 9, 31, 48: element copies into zero-padded tiles; 64: 16-byte copies), time-varying,
    time-invariant and lane-shared A, every ring depth, both directions, short last chunk (mma.sync:
    the warpgroup products are tested on their own)."""
    cupy_chunk(L=24, D=D, mma=mma, warpgroup=False)
    _check_products_case(rng, n, a_shape, f"chunked mma={mma} n={n} {a_shape} D={D}")


def _check_products_case(rng, n, a_shape, what):
    """chunked at (3, 100, n) float32 with A time-varying, time-invariant or lane-shared, forward with
    an initial state and reversed without."""
    T, lanes = 100, 3
    shape = {"varying": None, "invariant": (lanes, 1), "shared": (T,)}[a_shape]
    A, b, h0 = _seq_case(rng, "float32", lanes, T, n, a_shape=shape)
    _check_chunked(A, b, h0, "float32", False, what)
    _check_chunked(A, b, None, "float32", True, what + " reverse")


def _nonnegative_case(rng, lanes, T, n):
    """float32 non-negative transitions with row sums 0.99 (spectral radius 0.99), positive inputs
    and initial state: every product term has one sign, so one-sided rounding adds up."""
    A = rng.random((lanes, T, n, n))
    A *= 0.99 / A.sum(axis=-1, keepdims=True)
    b = rng.random((lanes, T, n))
    h0 = rng.random((lanes, n))
    return A.astype(np.float32), b.astype(np.float32), h0.astype(np.float32)


@pytest.mark.gpu
@_CUPY_SKIP
@pytest.mark.parametrize("mma", [True, False])
@pytest.mark.parametrize("n", [16, 64])
def test_cupy_chunked_nonnegative_no_bias(cupy_chunk, mma, n, rng):
    """Non-negative transitions (row sums 0.99) and positive inputs, as the lookback test of the same
    name: a one-sided rounding in the chunk products (the tensor core's accumulation) adds up over a
    chunk instead of averaging out; float32's 1e-5 must hold with both products kernels."""
    cupy_chunk(minimum=3, mma=mma)
    A, b, h0 = _nonnegative_case(rng, 4, 1024, n)
    _check_chunked(A, b, h0, "float32", False, f"chunked non-negative mma={mma} n={n}")


def _warpgroup_or_skip():
    import cupy

    if int(cupy.cuda.Device().compute_capability) != 90:
        pytest.skip("warpgroup MMA products: compute capability 9.0 (sm_90a code) only")


# shared bytes of the products kernel on FP16 pieces (two buffers of B's hi and lo pieces, a ring
# of 2 steps of A and b, e and 2^sigma double-buffered)
_H16_SHARED = (2 * 64 * 64 + 2 * 64 * 64 + 2 * 64 + 4 * 64) * 4


def _badly_scaled_case(rng, lanes, T, n, spread):
    """A similarity transform S A S^-1 of contractive transitions, S = diag(10^u), u spread evenly
    over [-spread, spread]: the spectrum stays (radius <= 0.99), but entries span 10^(4 spread)
    within a row and a column, and the state 10^(2 spread); b and h0 scaled alike."""
    A, b, h0 = _seq_case(rng, "float64", lanes, T, n)
    s = 10.0 ** np.linspace(-spread, spread, n)
    A = A * s[:, None] / s[None, :]
    return A.astype(np.float32), (b * s).astype(np.float32), (h0 * s).astype(np.float32)


@pytest.mark.gpu
@_CUPY_SKIP
@pytest.mark.parametrize("n", [33, 47, 64])
def test_cupy_chunked_fp16_pieces(cupy_chunk, monkeypatch, n, rng):
    """The products on warpgroup MMAs in FP16 pieces (the default on sm_90a): time-varying,
    time-invariant and lane-shared A with zero padding, both directions; same-sign data (float32's
    1e-5 with the tensor core's truncating accumulation); entries far outside FP16's range (A scaled
    by 2^-40; rows and columns scaled by 10^-3 .. 10^3, so entries up to 10^5 and down to 10^-7,
    some rows scaled and some not), which the power-of-two row scales must bring into it. The plan
    must hold that kernel."""
    from scanarray.backends.cupy import dense as _cupy_dense

    _warpgroup_or_skip()
    cupy_chunk(L=24)
    # only this test's plans (the cache also holds those of earlier tests, FMA products among them)
    monkeypatch.setattr(_cupy_dense, "_chunk_plans", {})
    for a_shape in ("varying", "invariant", "shared"):
        _check_products_case(rng, n, a_shape, f"chunked fp16 n={n} {a_shape}")
    A, b, h0 = _nonnegative_case(rng, 3, 512, n)
    _check_chunked(A, b, h0, "float32", False, f"chunked fp16 non-negative n={n}")
    A, b, h0 = _seq_case(rng, "float32", 3, 100, n)
    # A's entries near 2^-43, far under FP16's smallest subnormal; b at 2^40
    As = A * np.float32(2.0**-40)
    _check_chunked(As, b * np.float32(2.0**40), h0, "float32", False, f"chunked fp16 n={n} tiny A")
    A, b, h0 = _badly_scaled_case(rng, 3, 100, n, 3.0)
    _check_chunked(A, b, h0, "float32", True, f"chunked fp16 n={n} badly scaled")
    plans = [p for k, p in _cupy_dense._chunk_plans.items() if k[2] == n and k[-1] and p]
    assert plans and all(p[0][3] == _H16_SHARED for p in plans)


@pytest.mark.gpu
@_CUPY_SKIP
def test_cupy_chunked_whole_waves(rng):
    """With the warpgroup products, chunks fill whole waves: 16 lanes of 1024 steps would make 512
    blocks of 32 steps, over one wave of an H200's 396; they become one wave of at most 396."""
    import cupy

    from scanarray.backends.cupy import dense as _cupy_dense

    _warpgroup_or_skip()
    lanes, T, n = 16, 1024, 64
    L, C = _cupy_dense.chunk_shape(np.dtype(np.float32), n, lanes, T)
    slots = _cupy_dense._wave_slots(cupy.cuda.runtime.getDevice(), 64, None)
    assert C == -(-T // L) and (L, C) != (32, 32)
    assert slots // 2 < lanes * C <= slots
    A, b, h0 = _seq_case(rng, "float32", lanes, T, n, a_shape=(lanes, 1))
    _check_chunked(A, b, h0, "float32", False, "chunked whole waves")


@pytest.mark.gpu
@_CUPY_SKIP
def test_cupy_chunked_plans_share_kernels(rng):
    """Plans of different shapes share a compiled products kernel with different shared memory:
    a smaller plan must not lower the kernel's limit under a larger one's (float64 n = 16 with 64
    lanes, then n = 32 with 8 lanes, then the first again: CUDA_ERROR_INVALID_VALUE on the H200
    before the limit only ever grew)."""
    for lanes, T, n in ((64, 1024, 16), (8, 2048, 32), (64, 1024, 16)):
        A, b, h0 = _seq_case(rng, "float64", lanes, T, n)
        _check_chunked(A, b, h0, "float64", False, f"chunked float64 lanes={lanes} n={n}")


@pytest.mark.gpu
@_CUPY_SKIP
def test_cupy_chunked_nonfinite_no_wrong_finite(cupy_chunk):
    """An infinite b: wherever the loop's state is not finite the result is not finite either
    (the chunk products may turn inf into NaN, docs/guide/dense.md), and finite entries match."""
    cupy_chunk(L=4)
    T, n = 40, 3
    A = np.broadcast_to(np.eye(n, dtype=np.float32) * 0.5, (T, n, n)).copy()
    b = np.ones((1, T, n), np.float32)
    b[0, 9, 0] = np.inf
    with np.errstate(all="ignore"):
        h = call("cupy", "chunked", A, b)
        ref, _ = dense_ref(A, b, -1)
    ref = np.asarray(ref, np.float64)
    assert not np.isfinite(h[~np.isfinite(ref)]).any()
    fin = np.isfinite(h)
    assert np.allclose(h[fin], ref[fin], rtol=1e-5)


# --------------------------------------------------------------------------- CuPy lookback


@pytest.fixture
def cupy_lookback(cupy_dense):
    """Set the CuPy lookback method's chunk length, warps per block, chunk-map kind (tensor cores or
    FMAs, float32 n <= 16) and ring depth for the test."""
    def select(L=None, W=None, mma=True, ring=None):
        cupy_dense("lookback", length=L, warps=W, mma=mma, ring=ring)

    return select


def _check_lookback(*args, **kw):
    _check_cupy("lookback", *args, **kw)


@pytest.mark.gpu
@_CUPY_SKIP
@pytest.mark.parametrize("n", [1, 3, 4, 5, 8, 16, 17, 32, 33])
@pytest.mark.parametrize("T", [1, 7, 8, 9, 100, 1024])
def test_cupy_lookback_sizes(cupy_lookback, n, T, rng):
    """L = 8: one short chunk, one chunk, a short last chunk, many chunks; n padded to 4, 8, 16, 32
    (and n = 33: the chunked method)."""
    cupy_lookback(L=8)
    A, b, h0 = _seq_case(rng, "float32", 2, T, n)
    _check_lookback(A, b, h0, "float32", T % 2 == 1, f"lookback n={n} T={T}")


@pytest.mark.gpu
@_CUPY_SKIP
@pytest.mark.parametrize("dtype", ["float32", "float64", "complex64", "complex128"])
@pytest.mark.parametrize("n", [3, 16, 32])
@pytest.mark.parametrize("reverse", [False, True])
def test_cupy_lookback_dtypes(dtype, n, reverse, rng):
    """Every dtype, with and without initial, default shape (T = 1000; complex128 n = 32: chunked)."""
    A, b, h0 = _seq_case(rng, dtype, 3, 1000, n)
    _check_lookback(A, b, h0, dtype, reverse, f"lookback {dtype} n={n}")
    _check_lookback(A, b, None, dtype, reverse, f"lookback {dtype} n={n} no initial")


@pytest.mark.gpu
@_CUPY_SKIP
@pytest.mark.parametrize("W", [1, 2, 4, 8])
@pytest.mark.parametrize("L", [2, 5, 16, 40])
@pytest.mark.parametrize("n, mma", [(4, True), (13, True), (16, True), (16, False)])
def test_cupy_lookback_warps(cupy_lookback, W, L, n, mma, rng):
    """Every warp count per block, with sub-chunks of one step, short and empty ones (W > L);
    float32 n = 16 (and n = 13, padded) with the tensor-core chunk maps and with the FMA ones."""
    cupy_lookback(L=L, W=W, mma=mma)
    A, b, h0 = _seq_case(rng, "float32", 3, 301, n)
    _check_lookback(A, b, h0, "float32", L == 5, f"lookback L={L} W={W} n={n} mma={mma}")


@pytest.mark.gpu
@_CUPY_SKIP
@pytest.mark.parametrize("n", [5, 16])
@pytest.mark.parametrize("a_shape", ["invariant", "shared", "invariant per lane"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_cupy_lookback_broadcast_a(cupy_lookback, n, a_shape, dtype, rng):
    """A time-invariant (staged once per block), shared by every lane, or both, read in place."""
    cupy_lookback(L=20)
    T, lanes = 300, 3
    shape = {"invariant": (), "shared": (T,), "invariant per lane": (lanes, 1)}[a_shape]
    A, b, h0 = _seq_case(rng, dtype, lanes, T, n, a_shape=shape)
    _check_lookback(A, b, h0, dtype, False, f"lookback {a_shape} n={n}")
    _check_lookback(A, b, h0, dtype, True, f"lookback {a_shape} n={n} reverse")


@pytest.mark.gpu
@_CUPY_SKIP
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("n", [8, 16])
def test_cupy_lookback_in_place_unaligned_out(cupy_lookback, dtype, n, rng):
    """out=b (in place); A and b at an odd element offset (element copies); a strided out."""
    import cupy

    cupy_lookback(L=16)
    T, lanes = 200, 2
    A, b, h0 = _seq_case(rng, dtype, lanes, T, n)
    ref, g = dense_ref(A, b, -1, initial=h0)
    tol = tolerance(dtype, T, 64, n=n) * 4
    bb = cupy.asarray(b)
    h = scanarray.linear_recurrence(cupy.asarray(A), bb, dense=True, initial=cupy.asarray(h0), backend="cupy",
                                    method="lookback", out=bb)
    assert h is bb or h.data.ptr == bb.data.ptr
    assert_matches(to_numpy(bb), ref, g, tol, "lookback in place")
    Ab = cupy.empty(A.size + 1, A.dtype)[1:].reshape(A.shape)
    Ab[...] = cupy.asarray(A)
    bu = cupy.empty(b.size + 1, b.dtype)[1:].reshape(b.shape)
    bu[...] = cupy.asarray(b)
    h = scanarray.linear_recurrence(Ab, bu, dense=True, initial=cupy.asarray(h0), backend="cupy", method="lookback")
    assert rel_err(to_numpy(h), ref) <= RTOL[dtype]
    assert_matches(to_numpy(h), ref, g, tol, "lookback unaligned")
    out = cupy.zeros((lanes, T, 2 * n), dtype)[..., ::2]  # not contiguous: through a temporary
    scanarray.linear_recurrence(cupy.asarray(A), cupy.asarray(b), dense=True, initial=cupy.asarray(h0),
                                backend="cupy", method="lookback", out=out)
    assert rel_err(to_numpy(out), ref) <= RTOL[dtype]


@pytest.mark.gpu
@_CUPY_SKIP
@pytest.mark.parametrize("ring", [1, 2, 4, 8])
@pytest.mark.parametrize("n", [5, 16])
@pytest.mark.parametrize("reverse", [False, True])
def test_cupy_lookback_ring(cupy_lookback, ring, n, reverse, rng):
    """A[t] streamed through every ring depth (shorter than, equal to, longer than a sub-chunk of
    8 steps (n = 5) or 16 (n = 16, tensor-core maps); a short last chunk), 16-byte and element
    copies (n = 5)."""
    cupy_lookback(L=32, W=2, ring=ring)
    A, b, h0 = _seq_case(rng, "float32", 3, 301, n)
    _check_lookback(A, b, h0, "float32", reverse, f"lookback ring={ring} n={n}")


@pytest.mark.gpu
@_CUPY_SKIP
@pytest.mark.parametrize("W", [1, 2])
def test_cupy_lookback_stress_identical(cupy_lookback, W, rng):
    """Many small chunks (L = 2: 500 per lane, look-backs past the 32-status window), 20 runs:
    bit-identical results whatever the timing, matching the oracle."""
    import cupy

    cupy_lookback(L=2, W=W)
    A, b, h0 = _seq_case(rng, "float32", 16, 1000, 16)
    Ad, bd, hd = cupy.asarray(A), cupy.asarray(b), cupy.asarray(h0)
    runs = [to_numpy(scanarray.linear_recurrence(Ad, bd, dense=True, initial=hd, backend="cupy",
                                                 method="lookback")) for _ in range(20)]
    ref, g = dense_ref(A, b, -1, initial=h0)
    assert rel_err(runs[0], ref) <= RTOL["float32"]
    assert_matches(runs[0], ref, g, tolerance("float32", 1000, 64, n=16) * 4, "lookback stress")
    for r in runs[1:]:
        assert np.array_equal(r, runs[0])


@pytest.mark.gpu
@_CUPY_SKIP
@pytest.mark.parametrize("mma", [True, False])
def test_cupy_lookback_nonnegative_no_bias(cupy_lookback, mma, rng):
    """Non-negative transitions (row sums 0.99, spectral radius 0.99: a Leslie-type, slowly
    mixing system) and positive inputs: every product term has one sign, so any one-sided
    rounding (the tensor core's accumulation, a truncated TF32 piece) accumulates over a chunk's
    steps instead of averaging out; float32's 1e-5 must hold anyway, with both kinds of maps."""
    cupy_lookback(mma=mma)
    A, b, h0 = _nonnegative_case(rng, 4, 1024, 16)
    _check_lookback(A, b, h0, "float32", False, f"lookback non-negative mma={mma}")
    h = call("cupy", "lookback", A, b, initial=h0)
    ref, _ = dense_ref(A, b, -1, initial=h0)
    # The drift (mean signed relative error) as measured on the H200 (benchmarks/dense_split_accuracy.py):
    # FMA maps -5e-9; tensor-core maps -1.6e-6 (-2.7e-6 with one accumulation chain per tile), the
    # tensor core's own accumulation rounding toward zero; an unrounded lo operand (-3e-6 more) or a
    # truncated hi (-1.7e-5) would fail here.
    bias = float(np.mean((h.astype(np.float64) - np.asarray(ref, np.float64)) / np.asarray(ref, np.float64)))
    assert abs(bias) < (5e-6 if mma else 2e-7), bias


@pytest.mark.gpu
@_CUPY_SKIP
@pytest.mark.parametrize("where", ["b inf", "A nan", "A inf"])
@pytest.mark.parametrize("n", [3, 16])
def test_cupy_lookback_nonfinite_as_the_loop(cupy_lookback, where, n):
    """One non-finite value: its chunk and every later one replay the loop from the exact entering
    state, so NaN and inf land exactly where the loop puts them (finite entries match)."""
    cupy_lookback(L=4, W=2)
    T = 40
    A = np.broadcast_to(np.eye(n, dtype=np.float32) * 0.5, (2, T, n, n)).copy()
    b = np.ones((2, T, n), np.float32)
    if where == "b inf":
        b[0, 9, 0] = np.inf
    elif where == "A nan":
        A[0, 13, 1, 1] = np.nan
    else:
        A[1, 22, 0, n - 1] = np.inf
    with np.errstate(all="ignore"):
        h = call("cupy", "lookback", A, b)
        ref, _ = dense_ref(A, b, -1)
    ref = np.asarray(ref, np.float64)
    assert np.array_equal(np.isnan(h), np.isnan(ref)) and np.array_equal(np.isinf(h), np.isinf(ref))
    fin = np.isfinite(ref)
    assert np.allclose(h[fin], ref[fin], rtol=1e-5)


# --------------------------------------------------------------------------- repeated CuPy calls


@pytest.fixture
def dense_full_path_calls(count_full_path):
    """Counts dense CuPy calls that went through the full path rather than the launches bound to
    their signature; starts with no bound calls."""
    from scanarray.backends.cupy import dense as _cupy_dense

    return count_full_path(_cupy_dense)


# (lanes, T, n, method, options); A "varying" (lanes, T, n, n), "invariant" (n, n), "shared"
# (T, n, n); out "new" (given), "b" (in place)
DENSE_REPEAT_CASES = {
    "lookback": (4, 300, 16, "lookback", {}),
    "lookback one chunk": (3, 8, 16, "lookback", {}),
    "lookback h0 reverse": (4, 300, 12, "lookback", {"initial": True, "reverse": True}),
    "lookback invariant A, out given": (4, 300, 16, "lookback", {"a": "invariant", "out": "new"}),
    "lookback shared A, in place": (4, 300, 8, "lookback", {"a": "shared", "out": "b"}),
    "chunked": (4, 300, 64, "chunked", {}),
    "chunked h0 reverse": (4, 300, 40, "chunked", {"initial": True, "reverse": True}),
    "chunked invariant A, in place": (4, 300, 16, "chunked", {"a": "invariant", "out": "b"}),
    "sequential": (3, 50, 8, "sequential", {"initial": True}),
    "sequential n = 100": (2, 20, 100, "sequential", {}),
    "auto": (3, 40, 4, "auto", {}),
}


def _repeat_inputs(rng, lanes, T, n, opts, dtype="float32"):
    A = normed(rng, {"invariant": (), "shared": (T,)}.get(opts.get("a"), (lanes, T)) + (n, n), dtype)
    b = values(rng, (lanes, T, n), dtype)
    h0 = values(rng, (lanes, n), dtype) if opts.get("initial") else None
    return A, b, h0


def _check_dense(h, A, b, h0, reverse, dtype, what):
    ref, g = dense_ref(A, b, -1, initial=h0, reverse=reverse)
    h = to_numpy(h)
    assert rel_err(h, ref) <= RTOL[dtype], (what, rel_err(h, ref))
    assert_matches(h, ref, g, tolerance(dtype, b.shape[-2], 64, n=b.shape[-1]) * 4, what)


@pytest.mark.gpu
@_CUPY_SKIP
@pytest.mark.parametrize("case", list(DENSE_REPEAT_CASES))
def test_cupy_dense_repeated_calls_bound(dense_full_path_calls, case, rng):
    """Dense calls repeating a signature skip the full path and launch on their own new arrays:
    each of four calls, on fresh data at fresh addresses, matches the loop."""
    import cupy

    lanes, T, n, method, opts = DENSE_REPEAT_CASES[case]
    reverse = opts.get("reverse", False)
    keep = []  # every call's arrays stay alive: fresh addresses each time
    for i in range(4):
        A, b, h0 = _repeat_inputs(rng, lanes, T, n, opts)
        A_d, b_d = cupy.asarray(A), cupy.asarray(b)
        h0_d = None if h0 is None else cupy.asarray(h0)
        out = {"new": cupy.empty(b.shape, b.dtype), "b": b_d}.get(opts.get("out"))
        h = scanarray.linear_recurrence(A_d, b_d, dense=True, backend="cupy", method=method, initial=h0_d,
                                        reverse=reverse, out=out)
        if out is not None:
            assert h is out
        keep.append((A_d, b_d, h0_d, h))
        _check_dense(h, A, b, h0, reverse, "float32", f"{case}, call {i}")
    assert dense_full_path_calls[0] == 1, "repeated calls of one signature went through the full path"


@pytest.mark.gpu
@_CUPY_SKIP
def test_cupy_dense_repeated_calls_on_streams(dense_full_path_calls, rng):
    """Bound look-back calls on two streams of their own (each its own workspace) alternate with
    calls on the default stream; all match the loop, and only the first took the full path."""
    import cupy

    streams = [cupy.cuda.Stream(non_blocking=True) for _ in range(2)]
    for i in range(6):
        A, b, _ = _repeat_inputs(rng, 4, 300, 16, {})
        s = streams[i % 2] if i % 3 else cupy.cuda.Stream.null
        with s:
            h = scanarray.linear_recurrence(cupy.asarray(A), cupy.asarray(b), dense=True, backend="cupy",
                                            method="lookback")
            s.synchronize()
        _check_dense(h, A, b, None, False, "float32", f"call {i}")
    assert dense_full_path_calls[0] == 1


@pytest.mark.gpu
@_CUPY_SKIP
@pytest.mark.parametrize("method", ["lookback", "chunked"])
def test_cupy_dense_bound_calls_from_threads(dense_full_path_calls, on_streams, method, rng):
    """Six threads, each on its own stream, repeat one bound signature at once (parameter buffers
    per thread, a workspace or scratch buffer per stream): every result matches the loop."""
    import cupy

    lanes, T, n = 4, 300, 16
    data = [_repeat_inputs(rng, lanes, T, n, {}) for _ in range(6)]
    dev = [(cupy.asarray(A), cupy.asarray(b)) for A, b, _ in data]
    scanarray.linear_recurrence(*dev[0], dense=True, backend="cupy", method=method)  # binds
    out = on_streams(lambda i: scanarray.linear_recurrence(*dev[i], dense=True, backend="cupy", method=method),
                     len(dev), 10)
    assert dense_full_path_calls[0] == 1
    for i, (A, b, _) in enumerate(data):
        _check_dense(out[i], A, b, None, False, "float32", f"thread {i}")


@pytest.mark.gpu
@_CUPY_SKIP
@pytest.mark.parametrize("method", ["lookback", "chunked"])
def test_cupy_dense_repeated_call_with_overlapping_out(dense_full_path_calls, method, rng):
    """A bound signature called with an out that lies in A's memory takes the full path, which
    copies A first: the result matches the loop on the original A."""
    import cupy

    lanes, T, n = 4, 300, 16
    A, b, _ = _repeat_inputs(rng, lanes, T, n, {})
    A_d, b_d = cupy.asarray(A), cupy.asarray(b)
    scanarray.linear_recurrence(A_d, b_d, dense=True, backend="cupy", method=method, out=cupy.empty(b.shape, b.dtype))
    out = A_d.reshape(-1)[: b.size].reshape(b.shape)  # the first call's out's layout, over A
    h = scanarray.linear_recurrence(A_d, b_d, dense=True, backend="cupy", method=method, out=out)
    assert h is out and dense_full_path_calls[0] == 2
    _check_dense(h, A, b, None, False, "float32", f"{method}, out over A")


@pytest.mark.gpu
@_CUPY_SKIP
def test_cupy_dense_repeated_call_with_other_alignment(dense_full_path_calls, rng):
    """Same shapes and strides, A one element further into its buffer: the 16-byte copies planned
    for the first call do not apply, so the full path plans again (three calls, three plans)."""
    import cupy

    lanes, T, n = 4, 300, 16
    big = np.zeros(lanes * T * n * n + 1, np.float32)
    b = values(rng, (lanes, T, n), "float32")
    for off in (0, 1, 0):
        A = normed(rng, (lanes, T, n, n), "float32")
        big[off: off + A.size] = A.ravel()
        A_d = cupy.asarray(big)[off: off + A.size].reshape(A.shape)
        h = scanarray.linear_recurrence(A_d, cupy.asarray(b), dense=True, backend="cupy", method="lookback")
        _check_dense(h, A, b, None, False, "float32", f"offset {off}")
    assert dense_full_path_calls[0] == 3


@pytest.mark.gpu
@_CUPY_SKIP
def test_cupy_dense_copied_inputs_not_bound(dense_full_path_calls, rng):
    """Where the full path reads copies (here of a transposed A and of an initial state broadcast
    over lanes), nothing is bound: every call takes the full path."""
    import cupy

    lanes, T, n = 4, 300, 16
    for i in range(3):
        A, b, _ = _repeat_inputs(rng, lanes, T, n, {})
        h0 = values(rng, (n,), "float32")
        A_t = cupy.asarray(np.ascontiguousarray(np.swapaxes(A, -1, -2)))
        h = scanarray.linear_recurrence(cupy.swapaxes(A_t, -1, -2), cupy.asarray(b), dense=True, backend="cupy",
                                        method="lookback", initial=cupy.asarray(h0))
        _check_dense(h, A, b, np.broadcast_to(h0, (lanes, n)), False, "float32", f"call {i}")
    assert dense_full_path_calls[0] == 3
