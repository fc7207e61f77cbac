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
    monkeypatch.setitem(nb.TUNING, "superblock", 101)
    monkeypatch.setitem(nb.TUNING, "segment_groups", 2)


@pytest.fixture(params=["fixup", "reduce"])
def scheme(request, monkeypatch):
    """Each chunked scheme forced: scan-then-fix-up, reduce-then-scan."""
    monkeypatch.setitem(nb.TUNING, "scheme", request.param)
    return request.param


@pytest.mark.parametrize("dtype", ["float32", "float64", "complex64", "complex128", "float16"])
@pytest.mark.parametrize("a_kind", ["full", "scalar", "lane", "time"])
@pytest.mark.parametrize("reverse", [False, True])
def test_chunked_superblocks(small_superblocks, scheme, dtype, a_kind, reverse, rng):
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
def test_chunked_lengths_around_superblocks(small_superblocks, scheme, T, rng):
    """Lengths below, at and past a superblock: segments of 0 or 1 steps must still chain the carry."""
    a = coefficients(rng, (1, T), "float64")
    b = values(rng, (1, T), "float64")
    h = lr(a, b, method="chunked")
    ref, g = recurrence_ref(a, b)
    assert_matches(h, ref, g, tolerance("float64", T, 64), f"T={T}")


def test_chunked_nonfinite_mended(small_superblocks, scheme, rng):
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


def test_chunked_in_place(small_superblocks, scheme, rng):
    a = coefficients(rng, (1, 999), "float64")
    b = values(rng, (1, 999), "float64")
    ref, g = recurrence_ref(a, b)
    h = lr(a, b, out=b, method="chunked")
    assert h is b
    assert_matches(b, ref, g, tolerance("float64", 999, 64), "chunked in place")


def _nonfinite_case(rng, T, lanes=8):
    """Rows with infinities and NaN scattered (boundaries of small segments are hit often), resets
    after some of them, and an initial state that is itself infinite on one row."""
    a = coefficients(rng, (lanes, T), "float64", reset=0.0, low=0.5, high=1.0)
    b = values(rng, (lanes, T), "float64")
    for lane in range(1, lanes):
        t = int(rng.integers(0, T - 8))
        kind = lane % 4
        if kind == 0:
            a[lane, t] = np.inf
        elif kind == 1:
            a[lane, t], a[lane, t + 7] = -np.inf, 0.0
        elif kind == 2:
            b[lane, t], b[lane, t + 3] = np.inf, -np.inf
        else:
            b[lane, t] = np.nan
    init = values(rng, (lanes,), "float64")
    init[0] = np.inf
    return a, b, init


@pytest.mark.parametrize("in_place", [False, True])
def test_chunked_nonfinite_at_boundaries(small_superblocks, scheme, in_place, rng):
    """Many short segments: the first non-finite value of each row lands in, at or after a
    segment boundary; out=b keeps the values the loop needs (they are read before overwritten)."""
    a, b, init = _nonfinite_case(rng, 1000)
    ref, g = recurrence_ref(a, b, initial=init)
    for row in range(a.shape[0]):  # one row at a time: the chunked kernel splits its time axis
        bb = b[row].copy()
        h = lr(a[row], bb, initial=init[row], method="chunked", out=bb if in_place else None)
        assert_matches(h, ref[row], g[row], tolerance("float64", 1000, 64), f"row {row}")


# --------------------------------------------------------------------------- scan-then-fix-up


@pytest.fixture(params=["stores", "non-temporal"])
def fixup(request, monkeypatch):
    """Scan-then-fix-up forced; one superblock of 16 segments (2 groups of 4 per thread on 2 threads).

    Pass 1 with plain stores, and with the non-temporal bursts that large
    rows take (``nt_min_bytes`` lowered so that small rows take them too).
    """
    monkeypatch.setitem(nb.TUNING, "scheme", "fixup")
    monkeypatch.setattr(nb, "_threads", lambda: 2)
    monkeypatch.setitem(nb.TUNING, "segment_groups", 2)
    monkeypatch.setitem(nb.TUNING, "nt_min_bytes", 0 if request.param == "non-temporal" else 1 << 62)
    return request.param


def _check_fixup(a, b, what, initial=None, reverse=False, dtype="float64"):
    h = lr(a, b, initial=initial, reverse=reverse, method="chunked")
    ref, g = recurrence_ref(a, b, initial=initial, reverse=reverse)
    assert_matches(h, ref, g, tolerance(dtype, b.shape[-1], 64), what)
    return h, ref


@pytest.mark.parametrize("dtype", ["float64", "float32", "complex128", "complex64"])
def test_fixup_stops_where_the_carry_vanishes(dtype):
    """The fix-up adds ``(a ... a) * C`` until both parts fall below the smallest normal number.

    ``|a| = 0.9`` (also as a rotation for complex): ``0.9**k`` from ``C = 1``
    drops below ``tiny`` after ``k = log(tiny) / log(0.9)`` steps and never
    reaches exactly 0 (``0.9 * 5e-324`` rounds back to ``5e-324``); past
    that step ``out`` is left alone.
    """
    k = nb._k()
    dt = np.dtype(dtype)
    x = dt.type(0.9j if dt.kind == "c" else 0.9)
    T = 20000
    a = np.broadcast_to(x, (T,))
    out = np.zeros(T, dt)
    tiny = np.finfo(dt).tiny
    k._fixup(a, out, 0, T, dt.type(1), np.array([tiny]).astype(out.real.dtype)[0])
    n = np.count_nonzero(out)
    expect = int(np.ceil(np.log(tiny) / np.log(0.9)))
    assert abs(n - expect) <= 2, (n, expect)
    assert not out[n:].any()
    w = np.abs(out[:n])  # the carry's share, as the loop from C = 1 with b = 0 gives it
    ref = 0.9 ** np.arange(1, n + 1, dtype=np.longdouble)
    assert np.all(np.abs(w - ref) <= 1e-3 * ref + 4 * tiny)


@pytest.mark.parametrize("reverse", [False, True])
def test_fixup_underflow_then_long_tail(fixup, reverse, rng):
    """Every segment: a short stretch of small ``a`` (the carry's share underflows), then a long tail at 0.999.

    The fix-up stops in the first stretch; the tail, whose values still carry
    what came before the stretch in the loop only below rounding, must match.
    """
    T = 16 * 500
    a = np.full((2, T), 0.999)
    for s in range(0, T, 500):
        a[:, s:s + 160] = rng.uniform(-0.02, 0.02, (2, 160))  # 0.02**160 < 1e-271: below tiny with |C| <= 1e37
    b = values(rng, (2, T), "float64")
    _check_fixup(a, b, "underflow then tail", initial=values(rng, (2,), "float64"), reverse=reverse)


def test_fixup_resets(fixup, rng):
    """``a = 0`` right after a segment boundary and inside segments: the carry's share is exactly 0."""
    T = 16 * 300 + 5
    a = coefficients(rng, (3, T), "float64", reset=0.2)
    a[:, ::300] = 0.0
    b = values(rng, (3, T), "float64")
    _check_fixup(a, b, "resets", initial=values(rng, (3,), "float64"))


@pytest.mark.parametrize("dtype", ["float64", "complex128"])
@pytest.mark.parametrize("a_kind", ["full", "scalar"])
def test_fixup_growing_a_runs_to_the_end(fixup, dtype, a_kind, rng):
    """``|a| >= 1``: the share never decays, so every later segment is fixed up to its last step."""
    T = 16 * 200 + 3
    if a_kind == "scalar":
        a = 1.0005 if dtype == "float64" else complex(np.exp(0.3j))  # growth; a pure rotation
    else:
        a = rng.uniform(1.0, 1.001, (2, T)) * (np.exp(1j * rng.uniform(-np.pi, np.pi, (2, T))) if dtype == "complex128" else 1)
        a = a.astype(dtype)
    b = values(rng, (2, T), dtype)
    _, ref = _check_fixup(a, b, f"|a| >= 1 {a_kind}", initial=values(rng, (2,), dtype), dtype=dtype)
    assert np.all(np.isfinite(ref))


@pytest.mark.parametrize("T", [1, 2, 15, 16, 17, 31, 33, 64, 250, 1601, 16 * 64 * 3 + 17])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_fixup_segment_boundaries(fixup, T, dtype, rng):
    """Lengths around the 16 segments and the 64-step bursts: empty segments, one step, uneven remainders."""
    a = coefficients(rng, (2, T), dtype)
    b = values(rng, (2, T), dtype)
    _check_fixup(a, b, f"T={T}", initial=values(rng, (2,), dtype), dtype=dtype)
    _check_fixup(a, b, f"T={T} reverse", reverse=True, dtype=dtype)
    _check_fixup(a[:, :1], b, f"T={T} per-lane a", dtype=dtype)


@pytest.mark.parametrize("in_place", [False, True])
def test_fixup_nonfinite_at_boundaries(fixup, in_place, rng):
    """Scan-then-fix-up with 16 segments, bursts written only while finite, the loop replayed
    from where they stop; in place the replay reads b where pass 1 left it."""
    T = 16 * 200 + 7
    a, b, init = _nonfinite_case(rng, T)
    ref, g = recurrence_ref(a, b, initial=init)
    for row in range(a.shape[0]):
        bb = b[row].copy()
        h = lr(a[row], bb, initial=init[row], method="chunked", out=bb if in_place else None)
        assert_matches(h, ref[row], g[row], tolerance("float64", T, 64), f"row {row}")
    # a burst-aligned infinity right at a segment start, and one in a segment's last step
    a1 = np.full(T, 0.9)
    b1 = np.ones(T)
    a1[200 * 5], b1[200 * 9 - 1] = np.inf, np.nan
    ref, g = recurrence_ref(a1, b1)
    assert_matches(lr(a1, b1, method="chunked"), ref, g, tolerance("float64", T, 64), "aligned")


def test_fixup_in_place(fixup, rng):
    """``out=b`` through the fix-up (no non-temporal stores then: the lines are in cache)."""
    T = 16 * 200 + 9
    a = coefficients(rng, (1, T), "float64")
    b = values(rng, (1, T), "float64")
    ref, g = recurrence_ref(a, b)
    assert not nb._non_temporal(b, b)
    h = lr(a, b, out=b, method="chunked")
    assert h is b
    assert_matches(b, ref, g, tolerance("float64", T, 64), "fix-up in place")


def test_non_temporal_choice(monkeypatch):
    """Non-temporal stores only for long contiguous real rows that are not ``b``."""
    monkeypatch.setitem(nb.TUNING, "nt_min_bytes", 1024)
    x, y = np.zeros((1, 256)), np.zeros((1, 256))
    assert nb._non_temporal(x, y)
    assert not nb._non_temporal(x[:, :100], y[:, :100])  # too short
    assert not nb._non_temporal(x, x)  # in place
    assert not nb._non_temporal(x, np.zeros((1, 512))[:, ::2])  # strided
    assert not nb._non_temporal(x, np.zeros((1, 256), complex))


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
def test_fixup_complex(fixup, dtype, rng):
    """Complex ``a`` with ``|a|`` near 1 (slow decay, the share rotates): both parts are tested against ``tiny``."""
    T = 16 * 400
    a = (rng.uniform(0.9, 0.97, (2, T)) * np.exp(1j * rng.uniform(-np.pi, np.pi, (2, T)))).astype(dtype)
    b = values(rng, (2, T), dtype)
    _check_fixup(a, b, "complex", initial=values(rng, (2,), dtype), dtype=dtype)
    _check_fixup(a[:, :1], b, "complex, per-lane a", reverse=True, dtype=dtype)


def test_fixup_nonfinite_in_a_later_segment(fixup, rng):
    """NaN/Inf after the fix-up of a segment stopped, and inside a running fix-up: mended to the loop's values."""
    T = 16 * 300
    a = coefficients(rng, (4, T), "float64", reset=0.0, high=0.9)
    b = values(rng, (4, T), "float64")
    a[0, 5 * 300 + 250] = np.inf  # late in a segment: its fix-up has stopped long before
    a[1, 7 * 300 + 1] = np.inf  # right after a boundary: inside the running fix-up
    b[2, 9 * 300 + 100] = np.nan
    b[3, 3 * 300 + 10], b[3, 12 * 300 + 5] = np.inf, -np.inf
    a[0, 9 * 300] = 0.0  # a reset after the infinity: 0 * inf is NaN in the loop
    _, ref = _check_fixup(a, b, "non-finite", initial=values(rng, (4,), "float64"))
    assert np.isinf(ref).any() and np.isnan(ref).any()


def test_fixup_pays():
    """Time-invariant ``a``: the fix-up only where its bounded length is short; ``|a| >= 1`` or NaN reduce."""
    T = 1 << 24
    assert nb._fixup_pays(np.broadcast_to(np.array([[0.9], [-0.5]]), (2, T)), T, 8)
    assert nb._fixup_pays(np.broadcast_to(np.array([[0.0]]), (1, T)), T, 8)
    assert not nb._fixup_pays(np.broadcast_to(np.array([[0.9], [1.0]]), (2, T)), T, 8)
    assert not nb._fixup_pays(np.broadcast_to(np.array([[np.nan]]), (1, T)), T, 8)
    assert not nb._fixup_pays(np.broadcast_to(np.array([[0.9999]]), (1, T)), T, 8)  # ~1.4e7 steps > half a segment
    assert nb._fixup_pays(np.broadcast_to(np.array([[0.99 * np.exp(1j)]]), (1, T)), T, 8)
    assert nb._fixup_pays(np.ones((1, T)), T, 8)  # time-varying: always (decided by measurement)


@pytest.mark.parametrize("a_kind", ["full", "scalar", "lane", "time"])
@pytest.mark.parametrize("in_place", [False, True])
def test_time_major_lane_blocks(monkeypatch, a_kind, in_place, rng):
    """(T, N) C-order along axis 0 in several lane blocks (the last one partial), in place or not."""
    monkeypatch.setitem(nb.TUNING, "min_row_bytes", 8 * 8)  # blocks of >= 8 float64 lanes
    T, N = 301, 45  # odd: the last step after the pairs of steps
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
    long_row = np.zeros((2, nb.TUNING["chunked_min_length"]))
    p = scanarray._problem.Problem(
        xp=np, kind="numpy", a=long_row, b=long_row, initial=None, out=long_row, dtype=np.dtype("f8"),
        out_dtype=np.dtype("f8"), reverse=False, dense=False, chunk=64, method="auto",
    )
    assert nb.auto_method(p) == "chunked"  # 2 lanes < 4 threads
    p.a = p.b = p.out = np.zeros((4, nb.TUNING["chunked_min_length"]))
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
    """``import scanarray`` imports no numba; loading the backend compiles no kernel; a call compiles
    one variant per kernel and accumulation dtype, whatever the layouts, and caches it."""
    code = textwrap.dedent(
        """
        import sys
        import numpy as np
        import scanarray
        assert "numba" not in sys.modules
        from scanarray.backends import numba_backend
        assert "numba" not in sys.modules  # kernels are imported on first use
        k = numba_backend._k()
        assert k._COMPILED == {}
        x = np.ones((4, 50))
        for a, b in [(x, x), (0.5, x.T.copy().T), (x[:, :1], x[::-1]), (np.float32(0.5), x[:, ::2])]:
            scanarray.linear_recurrence(a, b, backend="numba")
        f = k._COMPILED["sequential_rows", np.dtype("float64"), False, None]  # small: the serial variant
        assert len(f.signatures) == 1, f.signatures
        assert type(f._cache).__name__ != "NullCache"  # cache=True
        """
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("n", [5, 12, 37])
@pytest.mark.parametrize("a_kind", ["invariant", "varying", "per-lane invariant"])
@pytest.mark.parametrize("dtype", ["float64", "complex64"])
def test_dense_sequential_row_blocks(n, a_kind, dtype, rng):
    """The compiled dense loop: a time-invariant A applied a column at a time, a time-varying one
    8 rows at a time and then row by row (n = 37 = 4 * 8 + 5), on two lanes."""
    T = 40
    shape = {"invariant": (n, n), "varying": (2, T, n, n), "per-lane invariant": (2, 1, n, n)}[a_kind]
    A = contractive(rng, shape, dtype)
    b = values(rng, (2, T, n), dtype)
    init = values(rng, (2, n), dtype)
    h = lr(A, b, dense=True, initial=init, method="sequential")
    ref, g = dense_ref(A, b, initial=init)
    assert_matches(h, ref, g, tolerance(dtype, T, 64, n=n) * 4, f"dense {a_kind} n={n}")


@pytest.mark.parametrize("a_kind", ["invariant", "varying"])
def test_dense_auto_by_cost(monkeypatch, a_kind):
    """Dense auto compares the two methods' modelled costs: the compiled loop where it is cheaper
    (every size measured), cyclic reduction where its constants would make it so."""
    from types import SimpleNamespace

    B, T, n = 4, 4096, 64
    strides = (0, 0, 8 * n, 8) if a_kind == "invariant" else (T * n * n * 8, n * n * 8, 8 * n, 8)
    a = SimpleNamespace(shape=(B, T, n, n), strides=strides)
    p = SimpleNamespace(dense=True, length=T, lanes=(B,), a=a, b=SimpleNamespace(shape=(B, T, n)))
    for n_ in (2, 16, 64, 256):
        p.b.shape = (B, T, n_)
        assert nb.auto_method(p) == "sequential"
    monkeypatch.setitem(nb.TUNING, "dense_cr_ns", (1e-3, 1e-3, 1e-3, 1e-6))
    assert nb.auto_method(p) == "cyclic_reduction"


@pytest.mark.parametrize("a_kind", ["full", "scalar", "lane", "time"])
@pytest.mark.parametrize("in_place", [False, True])
def test_rows_in_groups_of_four(monkeypatch, a_kind, in_place, rng):
    """Time-contiguous rows stepped four at a time, 37 = 9 * 4 + 1 of them (the last one alone),
    in place or not; each row is the plain loop."""
    monkeypatch.setitem(nb.TUNING, "rows_four_min_groups", 1)
    L, T = 37, 300
    b = values(rng, (L, T), "float64")
    a = {"full": lambda: coefficients(rng, (L, T), "float64"), "scalar": lambda: 0.9,
         "lane": lambda: coefficients(rng, (L, 1), "float64", reset=0, high=0.99),
         "time": lambda: coefficients(rng, (1, T), "float64")}[a_kind]()
    init = values(rng, (L,), "float64")
    ref, g = recurrence_ref(a, b, initial=init)
    h = lr(a, b, initial=init, out=b if in_place else None, method="sequential")
    assert_matches(h, ref, g, tolerance("float64", T, 64), f"rows of four, {a_kind}")


def test_serial_and_parallel_variants_cache_apart(tmp_path):
    """numba's disk cache is keyed on a function's name and signature, not on ``parallel``: a
    kernel's serial variant (single-iteration calls) compiled first once served as the parallel
    one in every later process, and the rows ran on one thread. Each variant must load itself."""
    code = textwrap.dedent("""
        import sys, numpy as np
        from scanarray.backends import _numba_kernels as k
        for name in sys.argv[1:]:
            serial = k.compiled(name, np.dtype("float64"), False)
            parallel = k.compiled(name, np.dtype("float64"), True)
            assert serial.targetoptions.get("parallel") is not True, name
            assert parallel.targetoptions["parallel"] is True, name
            assert serial.py_func.__qualname__ != parallel.py_func.__qualname__, name
        print("ok")
    """)
    env = {**__import__("os").environ, "NUMBA_CACHE_DIR": str(tmp_path)}
    res = subprocess.run([sys.executable, "-c", code, "sequential_rows"], capture_output=True, text=True, env=env, timeout=600)
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr[-2000:]


# --------------------------------------------------------------------------- the scaled result

_SCALED = {
    # name: (shape, axis, dtype, method)
    "time-major blocks": ((300, 37), 0, "float64", "sequential"),
    "time-major blocks float32": ((301, 40), 0, "float32", "sequential"),
    "time-major blocks float16": ((200, 9), 0, "float16", "sequential"),
    "time-major complex": ((120, 6), 0, "complex128", "sequential"),
    "rows": ((9, 500), -1, "float64", "sequential"),
    "rows in fours float32": ((67, 300), -1, "float32", "sequential"),
    "rows complex": ((5, 200), -1, "complex128", "sequential"),
    "chunked": ((2, 5000), -1, "float64", "chunked"),
    "dense": ((3, 40, 2), -1, "float64", "sequential"),
}


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("case", list(_SCALED))
def test_scaled_result(case, reverse, rng):
    """``Problem.scale`` (the vocabulary's gains, ``_vocab.scan``): the result is ``scale * h``,
    stored by the sequential kernels as they write (real dtypes) and multiplied after the scan
    elsewhere; against the float64 loop times the scale, with an initial state."""
    from scanarray import _api

    shape, axis, dtype, method = _SCALED[case]
    dense = case == "dense"
    if dense:
        a = 0.5 * rng.standard_normal((shape[1], 2, 2))
        b = rng.standard_normal(shape)
        h = _api._linear_recurrence(a, b, axis, 64, None, reverse, True, None, None, "numba", method, scale=-0.3)
        ref, g = dense_ref(a, b, axis, reverse=reverse)
        assert_matches(h, -0.3 * ref, 0.3 * g, tolerance("float64", shape[1]), "scaled dense")
        return
    a = coefficients(rng, shape, dtype, low=0.9)
    b = values(rng, shape, dtype)
    lanes = tuple(n for i, n in enumerate(shape) if i != axis % len(shape))
    init = values(rng, lanes, dtype)
    h = _api._linear_recurrence(a, b, axis, 64, init, reverse, False, None, None, "numba", method, scale=-0.3)
    assert h.dtype == np.dtype(dtype)
    ref, g = recurrence_ref(a, b, axis, initial=init, reverse=reverse)
    assert_matches(h, -0.3 * ref, 0.3 * g, tolerance(dtype, shape[axis]) + (2.0**-10 if dtype == "float16" else 0.0),
                   f"scaled {case}")


def _bind_numpy(a, b, axis=-1, initial=None, reverse=False, dtype=None, out=None, scale=None):
    """The call the core binds to this signature when handed its key (as the torch front-end
    does for CPU tensors), or None: bare NumPy calls are never looked up."""
    from scanarray import _api, _bound

    key = _bound.CALLS.call(a, b, axis, 64, initial, reverse, False, dtype, out, "numba", "auto", run=False,
                            scale=scale)[1]
    assert key is not None
    _api._linear_recurrence(a, b, axis, 64, initial, reverse, False, dtype, out, "numba", "auto", key, scale=scale)
    return _bound.CALLS.table.get(key)


_BOUND_CASES = {
    # shape, axis, dtype, a's shape (None: a Python float), initial?, scale, bound?
    "rows": ((4, 64), -1, "float32", (4, 64), False, None, True),
    "time-major, initial": ((300, 6), 0, "float64", (300, 6), True, None, True),
    "lanes merged, per-lane a": ((2, 3, 50), -1, "float64", (2, 3, 1), True, None, True),
    "scalar a, scaled": ((5, 70), -1, "float32", None, False, -0.3, True),
    "complex, scaled": ((5, 70), -1, "complex128", (5, 70), False, -0.3, True),
    "float16 (cast)": ((4, 64), -1, "float16", (4, 64), False, None, False),
    "chunked": ((1, 1 << 17), -1, "float64", None, False, None, False),
}


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("case", list(_BOUND_CASES))
def test_bound_sequential_loop(case, reverse, monkeypatch, rng):
    """``Problem.bind`` of the sequential loop: a repeat on new arrays of the signature gives the
    float64 loop's result (the scale, an initial state, reversed and broadcast views included);
    casts and chunked calls are not bound."""
    from scanarray import _bound

    monkeypatch.setattr(_bound.CALLS, "table", {})
    shape, axis, dtype, a_shape, with_initial, scale, binds = _BOUND_CASES[case]
    if case == "chunked" and nb._threads() < 2:
        pytest.skip("one numba thread: auto never takes chunked")
    lanes = tuple(n for i, n in enumerate(shape) if i != axis % len(shape))

    def args():
        a = 0.95 if a_shape is None else coefficients(rng, a_shape, dtype, low=0.9)
        return a, values(rng, shape, dtype), values(rng, lanes, dtype) if with_initial else None

    a, b, init = args()
    call = _bind_numpy(a, b, axis, init, reverse, scale=scale)
    assert (call is not None) == binds
    if call is None:
        return
    for _ in range(2):
        a, b, init = args()
        h = call(a, b, init, None)
        assert h.dtype == np.dtype(dtype) and h.shape == shape
        ref, g = recurrence_ref(a, b, axis, initial=init, reverse=reverse)
        s = 1.0 if scale is None else scale
        assert_matches(h, s * ref, abs(s) * g, tolerance(dtype, shape[axis]), case)


def test_bound_only_the_callers_own_arrays(monkeypatch, rng):
    """Where the core reads a copy of the caller's array (non-native byte order) or writes a given
    ``out``, nothing is bound: a repeat would read the caller's memory through other views."""
    from scanarray import _bound

    monkeypatch.setattr(_bound.CALLS, "table", {})
    a, b = coefficients(rng, (3, 40), "float64", low=0.9), values(rng, (3, 40), "float64")
    assert _bind_numpy(a.astype(">f8"), b) is None
    assert _bind_numpy(a, b.astype(">f8")) is None
    assert _bind_numpy(a, b, out=np.empty_like(b)) is None
    assert _bind_numpy(a, b) is not None


def test_repeated_public_calls_bound(monkeypatch, rng):
    """Bare NumPy calls look their signature up (``BackendSpec.fast_call``): repeats on new data,
    interleaved with calls of other signatures (strides, dtype, a scalar ``a`` of another value,
    reverse), each give the float64 loop's result, and only a signature's first call takes the
    full path."""
    from scanarray import _api, _bound

    monkeypatch.setattr(_bound.CALLS, "table", {})
    full = []
    inner = _api._linear_recurrence
    monkeypatch.setattr(_api, "_linear_recurrence", lambda *args, **kw: full.append(args[:2]) or inner(*args, **kw))
    base = values(rng, (6, 80), "float64")
    cases = [  # (a, b maker, kwargs)
        (lambda: coefficients(rng, (6, 80), "float64", low=0.9), lambda: values(rng, (6, 80), "float64"), {}),
        (lambda: 0.9, lambda: values(rng, (80, 6), "float32"), {"axis": 0}),
        (lambda: 0.5, lambda: values(rng, (80, 6), "float32"), {"axis": 0}),
        (lambda: coefficients(rng, (6, 1), "float64", low=0.9), lambda: values(rng, (6, 80), "float64"),
         {"reverse": True, "initial": base[:, 0]}),
        (lambda: coefficients(rng, (6, 80), "float64", low=0.9), lambda: values(rng, (6, 160), "float64")[:, ::2], {}),
    ]
    for rep in range(3):
        for make_a, make_b, kw in cases:
            a, b = make_a(), make_b()
            h = scanarray.linear_recurrence(a, b, **kw)
            ref, g = recurrence_ref(a, b, kw.get("axis", -1), initial=kw.get("initial"), reverse=kw.get("reverse", False))
            assert_matches(h, ref, g, tolerance(b.dtype.name, b.shape[kw.get("axis", -1)]), f"case {kw}, repeat {rep}")
        assert len(full) == len(cases)  # every repeat was served by its signature's bound loop


@pytest.mark.parametrize("method", ["auto", "sequential"])
def test_results_freed_without_the_garbage_collector(method):
    """No reference cycle holds a call's arrays (a binding keeps none of them): a result is freed
    as soon as its caller drops it, first call and repeats alike. (A cycle once kept every
    result of a sequential call alive until the collector ran: each call then faulted in new
    memory, several times slower.)"""
    import gc
    import weakref

    a, b = np.full((3, 5000), 0.9), np.ones((3, 5000))
    gc.collect()
    gc.disable()
    try:
        for _ in range(3):
            h = scanarray.linear_recurrence(a, b, backend="numba", method=method)
            r = weakref.ref(h)
            del h
            assert r() is None
    finally:
        gc.enable()


def test_fault_in_while_a_one_core_loop_writes(monkeypatch, rng):
    # a loop on one core writing a new result while another thread faults its pages in
    # (MADV_POPULATE_WRITE): the EWM and filter loops' results as the oracles give them
    pd = pytest.importorskip("pandas")
    signal = pytest.importorskip("scipy.signal")
    from scanarray.signal import lfilter, sosfilt

    madvise = nb._populate_write()
    if madvise is None or nb._threads() < 2:
        pytest.skip("no MADV_POPULATE_WRITE here, or one thread")
    calls = []

    def counted(*args):
        calls.append(args[1])
        return madvise(*args)

    monkeypatch.setattr(nb, "_populate_write", lambda: counted)
    monkeypatch.setitem(nb.TUNING, "fault_in_min_bytes", 1)
    x = rng.standard_normal(200_000)
    xn = x.copy()
    xn[rng.random(x.size) < 0.05] = np.nan

    def close(got, want):  # relative to the data's scale (a mean crossing zero has no digits there)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12 * np.nanmax(np.abs(want)))

    close(scanarray.ewm_mean(xn, alpha=0.05), pd.Series(xn).ewm(alpha=0.05).mean().to_numpy())
    cols = np.ascontiguousarray(np.stack([xn, x], axis=1))  # time-major, one block of lanes
    close(scanarray.ewm_var(cols, alpha=0.05, axis=0), pd.DataFrame(cols).ewm(alpha=0.05).var().to_numpy())
    sos = signal.butter(4, 0.05, output="sos")
    np.testing.assert_allclose(sosfilt(sos, x), signal.sosfilt(sos, x), rtol=0, atol=1e-12)
    b, a = signal.butter(2, 0.05)
    np.testing.assert_allclose(lfilter(b, a, x), signal.lfilter(b, a, x), rtol=0, atol=1e-12)
    assert len(calls) >= 4 and min(calls) >= x.nbytes
