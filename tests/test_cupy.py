"""GPU-only tests of the CuPy diagonal kernels (methods lookback and sequential).

The shared suite (test_contract.py) already runs every layout and dtype on this
backend; these add what only a GPU scan can get wrong: look-back races
(many small tiles, repeated runs), 64-bit indexing, unaligned and reversed
views, concurrent streams. Everything is compared with the extended-precision
loop oracle. The module skips cleanly without CuPy or a CUDA device.
"""

from __future__ import annotations

import functools
import re

import numpy as np
import pytest

from data import coefficients, values
from oracle import assert_matches, recurrence_ref, tolerance

cupy = pytest.importorskip("cupy")
try:
    _ndev = cupy.cuda.runtime.getDeviceCount()
except Exception:  # no driver
    _ndev = 0
if _ndev == 0:
    pytest.skip("no CUDA device", allow_module_level=True)

import scanarray  # noqa: E402
from scanarray import _bound  # noqa: E402
from scanarray.backends.cupy import scan as _cupy_scan  # noqa: E402
from scanarray.backends.cupy.tuning import TUNING  # noqa: E402

pytestmark = pytest.mark.gpu
METHODS = ["lookback", "sequential"]


SMALL = {4: (32, 16, 1), 8: (32, 8, 1), 16: (32, 4, 1)}


@pytest.fixture
def tuned(monkeypatch):
    """``use(table)``: the CuPy diagonal scans of the test run with this tuning table (the driver's
    ``tuning`` keyword, through the public function), starting with no bound calls; returns it."""
    real = _cupy_scan.linear_recurrence

    def use(table):
        monkeypatch.setattr(_cupy_scan, "linear_recurrence", functools.partial(real, tuning=table))
        monkeypatch.setattr(_bound.CALLS, "table", {})
        return table

    return use


@pytest.fixture
def small_tiles(tuned):
    """Tiles of 32 threads (512 float32 steps) and 8-step time-major tiles: many look-backs. Rows
    of several tiles run the kernel the device gets (``rows_staged`` from compute capability 9.0,
    else ``rows_tiles``); ``long_rows_kernel`` runs both. Returns the table."""
    return tuned({**TUNING, "rows": SMALL, "rows_warp": SMALL, "rows_long": SMALL, "rows_staged": SMALL,
                  "lanes_staged": {4: (2, 4, 1), 8: (2, 4, 1), 16: (2, 2, 1)}, "rows_block": SMALL,
                  "rows_wide": {4: (64, 1)}, "lanes": {4: (2, 4, 1), 8: (2, 4, 1), 16: (2, 2, 1)},
                  "lanes_vec": {4: (2, 2, 1), 8: (2, 2, 1), 16: None}})


def _scan(a, b, axis=-1, **kw):
    kw.setdefault("backend", "cupy")
    a_d = a if np.isscalar(a) else cupy.asarray(a)
    return scanarray.linear_recurrence(a_d, cupy.asarray(b), axis, **kw)


def _check(h, a, b, axis=-1, what="", **kw):
    ref, g = recurrence_ref(a, b, axis, initial=kw.get("initial"), reverse=kw.get("reverse", False))
    assert_matches(cupy.asnumpy(h), ref, g, tolerance(h.dtype, ref.shape[axis]), what)


# --------------------------------------------------------------------------- look-back stress


@pytest.mark.parametrize("dtype", ["float32", "float64", "complex64", "complex128"])
def test_lookback_stress_repeatable(long_rows_kernel, dtype, rng):
    """Hundreds of tiles per row, 50 runs: bit-identical every time and matching the loop (a
    status is 1, 2 or 4 16-byte words by dtype, each 64-bit half carrying the flag)."""
    shape = (3, 40_000)
    a = coefficients(rng, shape, dtype, reset=0.001, high=1.0, low=0.999)  # carries across many tiles
    b = values(rng, shape, dtype)
    a_d, b_d = cupy.asarray(a), cupy.asarray(b)
    first = scanarray.linear_recurrence(a_d, b_d, backend="cupy", method="lookback")
    for _ in range(49):
        again = scanarray.linear_recurrence(a_d, b_d, backend="cupy", method="lookback")
        assert bool(cupy.array_equal(first, again)), "look-back gave different results on identical input"
    _check(first, a, b, what=f"stress {dtype}")


@pytest.fixture(params=["rows_staged", "rows_tiles"])
def long_rows_kernel(small_tiles, tuned, request):
    """Small tiles, rows of several tiles run by each long-row kernel: staged in shared memory
    (where the device has cp.async, compute capability >= 9.0 here) or held in registers."""
    _staged_or_not(tuned, small_tiles, "rows_staged", request.param == "rows_staged")
    return request.param


def _staged_or_not(tuned, table, key, staged):
    """Tiles staged in shared memory (``table[key]`` as set; skipped below compute capability 9.0,
    where they are not used) or held in registers (``key`` emptied); returns the table used."""
    if not staged:
        return tuned({**table, key: {}})
    if not _cupy_scan._staging_device(cupy):
        pytest.skip("tiles are staged in shared memory from compute capability 9.0")
    return table


def _long_rows_plan(shape, dtype, tuning):
    b = cupy.zeros(shape, dtype)
    compute = np.dtype(np.float32) if b.itemsize == 2 else np.dtype(dtype)  # half types accumulate in float32
    return _cupy_scan.plan(b, b, b, compute, "lookback", tuning=tuning)


def _l2pf_distance():
    """The L2 prefetch's distance in tiles, as scan.cu defines it (ROWS_L2_AHEAD)."""
    from scanarray.backends.cupy import _common as _cupy_common

    return int(re.search(r"constexpr int ROWS_L2_AHEAD = (\d+);", _cupy_common.read_source("scan.cu")).group(1))


@pytest.mark.parametrize(
    "case", ["float32", "float64", "complex64", "complex128", "reverse", "unaligned", "unaligned reverse",
             "float16", "float16 in float32 out", "scalar a", "lane a", "initial", "strided", "non-finite"])
def test_long_rows(long_rows_kernel, case, rng):
    """Few rows of many tiles, in both long-row kernels: every layout the staging handles
    (asynchronous copies where aligned, element by element otherwise, the last tile partial).
    More tiles than the L2 prefetch's distance (``ROWS_L2_AHEAD`` in scan.cu, 128 tiles), so each
    layout also runs the prefetch, within a row and into the next."""
    a, b, a_d, b_d, init, call = _layout_case(rng, case, (3, 50_011), low=0.999)  # odd: partial last tiles
    h = scanarray.linear_recurrence(a_d, b_d, **call)
    p = _long_rows_plan(b.shape, h.dtype, _cupy_scan.linear_recurrence.keywords["tuning"])  # (tuned's table)
    assert p.kt > 1 and f"::{long_rows_kernel}<" in p.name, (long_rows_kernel, p.name)
    assert p.grid > _l2pf_distance() + p.kt, (p.grid, p.kt)  # some tiles prefetch one in a later row
    _check(h, a, b, what=f"long rows {long_rows_kernel} {case}", initial=init, reverse=call["reverse"])
    again = scanarray.linear_recurrence(a_d, b_d, **call)
    assert bool(cupy.array_equal(h, again, equal_nan=True)), "look-back gave different results on identical input"


def _layout_case(rng, case, shape, low):
    """One layout case of the row-kernel tests: host inputs ``a, b`` for the oracle, their device
    views, the initial state (None or host values) and the keywords of the CuPy call. ``|a|`` is
    drawn from ``[low, 1)`` with rare resets, so that a wrong state carried between tiles shows."""
    nrows, T = shape
    dtype = case if case in ("float32", "float64", "complex64", "complex128") else "float32"
    a = coefficients(rng, shape, dtype, reset=0.001, high=1.0, low=low)
    b = values(rng, shape, dtype)
    kw = {"reverse": "reverse" in case, "backend": "cupy", "method": "lookback"}
    if case.startswith("float16"):
        a, b = a.astype(np.float16), b.astype(np.float16)
    if case == "float16 in float32 out":  # half storage read, float32 written
        kw["dtype"] = np.float32
    if case == "scalar a":
        a = 1.0 - (1.0 - low) / 2
    if case == "lane a":
        a = coefficients(rng, (nrows, 1), dtype, reset=0.0, high=1.0, low=low)
    init = values(rng, (nrows,), dtype) if case == "initial" else None
    if case == "non-finite":
        a[0, 7 * T // 20] = np.inf
        b[1, 12] = np.nan
        b[2, 3 * T // 20], b[2, 3 * T // 4] = np.inf, -np.inf
    a_d = a if np.isscalar(a) else cupy.asarray(a)
    b_d = cupy.asarray(b)
    if "unaligned" in case:
        a, b, a_d, b_d = a[:, 1:], b[:, 1:], a_d[:, 1:], b_d[:, 1:]
    if case == "strided":
        a, b, a_d, b_d = a[:, ::2], b[:, ::2], a_d[:, ::2], b_d[:, ::2]
    kw["initial"] = None if init is None else cupy.asarray(init)
    return a, b, a_d, b_d, init, kw


def _time_major_case(rng, case, shape):
    """Host a, b and keyword arguments of a time-major test case (time along axis 0; the case
    names a dtype, a half-precision variant, a broadcast a, initial, reverse, or non-finite
    values); |a| close to 1 carries the state across many small tiles."""
    dtype = case if case in ("float32", "float64", "complex64", "complex128") else "float32"
    lanes = shape[-1]
    a = coefficients(rng, shape, dtype, reset=0.001, high=1.0, low=0.99)
    b = values(rng, shape, dtype)
    kw = {}
    if case.startswith("float16"):
        b = b.astype(np.float16)
        if case == "float16":
            a = a.astype(np.float16)
    if case == "scalar a":
        a = 0.999
    if case == "lane a":
        a = coefficients(rng, (1, lanes), "float32", reset=0.0, high=1.0, low=0.99)
    if case == "time a":
        a = coefficients(rng, (shape[0], 1), "float32", reset=0.001, high=1.0, low=0.99)
    if case == "initial":
        kw["initial"] = values(rng, (lanes,), "float32")
    if case == "reverse":
        kw["reverse"] = True
    if case == "non-finite":
        a[700, 3] = np.inf
        b[12, 40] = np.nan
        b[300, lanes - 1], b[2000, lanes - 1] = np.inf, -np.inf
    return a, b, kw


@pytest.fixture(params=["staged", "registers", "staged, 32 lanes", "registers, 32 lanes", "registers, 8 lanes"])
def lanes_kernel(small_tiles, tuned, request):
    """Small tiles, time-major tiles staged in shared memory (compute capability >= 9.0 here) or
    held in registers, as wide as ``TUNING["lanes_narrow"]`` makes them for these few lanes (16
    lanes for 4-byte types, 8 for wider ones) or of a given width (lane groups of other lengths,
    tiles of other lengths along time)."""
    staged = request.param.startswith("staged")
    table = _staged_or_not(tuned, small_tiles, "lanes_staged", staged)
    if "lanes" in request.param:
        key, lw = ("lanes_staged" if staged else "lanes"), int(request.param.split()[1])
        tuned({**table, key: {cs: (*shape, lw) for cs, shape in table[key].items()}})
    return request.param


@pytest.mark.parametrize(
    "case", ["float32", "float64", "complex64", "complex128", "float16", "reverse", "scalar a", "lane a",
             "time a", "initial", "strided lanes", "non-finite"])
def test_time_major(lanes_kernel, case, rng):
    """Time along axis 0 with lanes contiguous, many time tiles chained per lane, both kernels;
    70 lanes: the last lane group is partial; 3001 steps: so is the last time tile."""
    a, b, kw = _time_major_case(rng, case, (3001, 70))
    if case == "strided lanes":
        b = values(rng, (3001, 140), "float32")[:, ::2]
    init = kw.get("initial")
    call = dict(kw, initial=None if init is None else cupy.asarray(init), backend="cupy", method="lookback")
    a_d = a if np.isscalar(a) else cupy.asarray(a)
    b_d = cupy.asarray(b)
    h = scanarray.linear_recurrence(a_d, b_d, 0, **call)
    _check(h, a, b, 0, what=f"time-major {lanes_kernel} {case}", initial=init, reverse=kw.get("reverse", False))
    again = scanarray.linear_recurrence(a_d, b_d, 0, **call)
    assert bool(cupy.array_equal(h, again, equal_nan=True)), "look-back gave different results on identical input"


@pytest.mark.parametrize("width", [32, 16, 8])
@pytest.mark.parametrize(
    "case", ["float32", "float64", "complex64", "float16", "float16 in float32 out", "reverse", "scalar a", "lane a",
             "time a", "initial", "outer lanes", "non-finite"])
def test_time_major_vector_lanes(small_tiles, tuned, width, case, rng):
    """Time-major lanes contiguous and aligned: lanes_vec (several lanes a thread, vector accesses),
    checked to be the kernel planned; 100 lanes: the last lane group of each width is partial; 3001
    steps: so is the last time tile."""
    tuned({**small_tiles, "lanes_vec": {cs: (2, 2, 1, width) for cs in (4, 8)} | {16: None}})
    _cupy_scan._plans.clear()
    shape = (3001, 3, 100) if case == "outer lanes" else (3001, 100)
    a, b, kw = _time_major_case(rng, case, shape)
    out_dtype = np.float32 if case == "float16 in float32 out" else None
    init = kw.get("initial")
    call = dict(kw, initial=None if init is None else cupy.asarray(init), backend="cupy", method="lookback")
    a_d = a if np.isscalar(a) else cupy.asarray(a)
    b_d = cupy.asarray(b)
    if case == "outer lanes":  # b every other row of 100 lanes on the device: the outer lane axis strided
        b_d = cupy.asarray(values(rng, (3001, 6, 100), "float32"))[:, ::2]
        b = cupy.asnumpy(b_d)
    out = None if out_dtype is None else cupy.empty(shape, out_dtype)
    h = scanarray.linear_recurrence(a_d, b_d, 0, out=out, **call)
    assert any("lanes_vec" in p.name for p in _cupy_scan._plans.values()), "lanes_vec was not planned"
    _check(h, a, b, 0, what=f"time-major vector lanes {width} {case}", initial=init, reverse=kw.get("reverse", False))
    again = scanarray.linear_recurrence(a_d, b_d, 0, out=out, **call)
    assert bool(cupy.array_equal(h, again, equal_nan=True)), "look-back gave different results on identical input"


def test_time_major_vector_lanes_fall_back(small_tiles, rng):
    """Lanes a vector cannot cover take lanes_tiles: an odd lane count, or a view starting one lane
    in (its rows misaligned); a view starting four lanes in is aligned again."""
    a = cupy.asarray(coefficients(rng, (500, 104), "float32", reset=0.001, high=1.0, low=0.99))
    b = cupy.asarray(values(rng, (500, 104), "float32"))
    for sl, kernel in ((np.s_[:, :101], "lanes_tiles"), (np.s_[:, 1:101], "lanes_tiles"), (np.s_[:, 4:], "lanes_vec")):
        h = _scan(a[sl], b[sl], 0, method="lookback")
        _check(h, cupy.asnumpy(a[sl]), cupy.asnumpy(b[sl]), 0, what=f"time-major {sl}")
        plan = _cupy_scan.plan(a[sl].T, b[sl].T, h.T, np.dtype(np.float32), "lookback", tuning=small_tiles)
        assert kernel in plan.name, (sl, plan.name)


@pytest.mark.parametrize("dtype", ["float32", "float64", "complex128"])
def test_lookback_stress_time_major(lanes_kernel, dtype, rng):
    shape = (6_000, 70)  # time along axis 0, 70 lanes: 3 lane groups, 750 time tiles
    a = coefficients(rng, shape, dtype, reset=0.001, high=1.0, low=0.99)
    b = values(rng, shape, dtype)
    first = _scan(a, b, 0, method="lookback")
    for _ in range(49):
        assert bool(cupy.array_equal(first, _scan(a, b, 0, method="lookback")))
    _check(first, a, b, 0, what="stress time-major")


@pytest.mark.parametrize("dtype", ["float32", "float64", "complex64"])
def test_lookback_stress_time_major_vector_lanes(small_tiles, dtype, rng):
    """lanes_vec (72 aligned lanes, several a thread) over thousands of small time tiles, 50 runs:
    bit-identical every time and matching the loop."""
    _cupy_scan._plans.clear()
    shape = (6_000, 72)
    a = coefficients(rng, shape, dtype, reset=0.001, high=1.0, low=0.99)
    b = values(rng, shape, dtype)
    first = _scan(a, b, 0, method="lookback")
    planned = [p for p in _cupy_scan._plans.values() if p.kt > 1]
    assert planned and all("lanes_vec" in p.name for p in planned), [p.name for p in planned]
    for _ in range(49):
        assert bool(cupy.array_equal(first, _scan(a, b, 0, method="lookback")))
    _check(first, a, b, 0, what="stress time-major vector lanes")


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("axis", [-1, 0])
def test_nonfinite_across_small_tiles(small_tiles, method, axis, rng):
    shape = (5, 3000)
    a = coefficients(rng, shape, "float64", reset=0.002, high=1.0)
    b = values(rng, shape, "float64")
    a[0, 700] = np.inf
    a[1, 5] = -np.inf
    b[2, 1500] = np.nan
    b[3, 10], b[3, 2000] = np.inf, -np.inf
    a[4, 512] = np.nan
    if axis == 0:
        a, b = np.ascontiguousarray(a.T), np.ascontiguousarray(b.T)
    h = _scan(a, b, axis, method=method)
    _check(h, a, b, axis, what=f"non-finite {method} axis={axis}")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("reverse", [False, True])
def test_many_long_rows_block_per_row(small_tiles, dtype, reverse, rng):
    """Enough rows of several tiles that each row gets a block looping along it (no look-back)."""
    shape = (300, 1500)
    a = coefficients(rng, shape, dtype, reset=0.002, high=1.0)
    b = values(rng, shape, dtype)
    a[3, 700] = np.inf
    b[5, 20] = np.nan
    b[7, 600], b[7, 900] = np.inf, -np.inf
    init = values(rng, (300,), dtype)
    h = _scan(a, b, method="lookback", initial=cupy.asarray(init), reverse=reverse)
    _check(h, a, b, what=f"block per row {dtype}", initial=init, reverse=reverse)


def _record_plans(monkeypatch):
    """The list the CuPy driver's plans of the following calls are appended to (the plans the
    calls themselves make, for their own views). Bound calls start empty: a call of a signature an
    earlier test bound (the same shapes and dtypes, other data) goes straight to its launches and
    plans nothing."""
    monkeypatch.setattr(_bound.CALLS, "table", {})
    planned = []
    plan = _cupy_scan.plan
    monkeypatch.setattr(_cupy_scan, "plan", lambda *args, **kw: planned.append(plan(*args, **kw)) or planned[-1])
    return planned


# float32 rows on the aligned vector path take rows_wide where it is on
_WIDE_CASES = ("float32", "reverse", "scalar a", "lane a", "initial", "non-finite")


@pytest.mark.parametrize("wide", ["rows_wide", "rows_block"])
@pytest.mark.parametrize(
    "case", ["float32", "float64", "complex64", "complex128", "reverse", "unaligned", "float16", "scalar a",
             "lane a", "initial", "strided", "non-finite"])
def test_block_per_row(small_tiles, tuned, monkeypatch, wide, case, rng):
    """Rows that each get a block walking along them (rows_block, or rows_wide for float32 rows on
    the aligned vector path unless it is off); |a| near 1, so the state carried from tile to tile
    matters; 1501 steps (1500 for rows_wide, whose rows start aligned): the last tile of each row
    is partial."""
    if wide == "rows_block":
        tuned({**small_tiles, "rows_wide": {}})
    elif case not in _WIDE_CASES:
        pytest.skip("rows_wide takes float32 rows on the aligned vector path only")
    # rows_wide takes rows that start 16-byte aligned (a multiple of 4 float32 steps)
    a, b, a_d, b_d, init, call = _layout_case(rng, case, (300, 1500 if wide == "rows_wide" else 1501), low=0.99)
    planned = _record_plans(monkeypatch)
    h = scanarray.linear_recurrence(a_d, b_d, **call)
    assert [p.name.split("<")[0] for p in planned] == [f"scanarray::{wide}"], [p.name for p in planned]
    _check(h, a, b, what=f"{wide} {case}", initial=init, reverse=call["reverse"])


@pytest.mark.parametrize("case", _WIDE_CASES + ("out=b",))
def test_rows_wide_default_shape(monkeypatch, case, rng):
    """rows_wide at its shipped shape (1024 threads, 4096 float32 steps a tile): 256 rows of two
    tiles and a partial third (36 steps: some threads' groups past the row's end), |a| near 1."""
    a, b, a_d, b_d, init, call = _layout_case(rng, "float32" if case == "out=b" else case, (256, 2 * 4096 + 36),
                                              low=0.999)
    if case == "out=b":
        b_d = b_d.copy()
        call["out"] = b_d
    planned = _record_plans(monkeypatch)
    h = scanarray.linear_recurrence(a_d, b_d, **call)
    assert [(p.name.split("<")[0], p.threads) for p in planned] == [("scanarray::rows_wide", 1024)], \
        [p.name for p in planned]
    if case == "out=b":
        assert h is b_d
    _check(h, a, b, what=f"rows_wide {case}", initial=init, reverse=call["reverse"])


def test_many_long_rows_block_per_row_complex(small_tiles, rng):
    shape = (300, 1500)
    a = coefficients(rng, shape, "complex128", reset=0.002, high=1.0)
    b = values(rng, shape, "complex128")
    h = _scan(a, b, method="lookback")
    _check(h, a, b, what="block per row complex128")


@pytest.mark.parametrize("method", METHODS)
def test_nonfinite_initial(small_tiles, method, rng):
    shape = (4, 2000)
    a = coefficients(rng, shape, "float32", reset=0.0, high=1.0)
    b = values(rng, shape, "float32")
    init = np.array([np.inf, -np.inf, np.nan, 1.0], np.float32)
    h = _scan(a, b, method=method, initial=cupy.asarray(init))
    _check(h, a, b, what="non-finite initial", initial=init)


# --------------------------------------------------------------------------- layouts


@pytest.mark.parametrize("wide,narrow", [("float64", "float32"), ("complex128", "complex64")])
@pytest.mark.parametrize("axis", [-1, 0])
def test_dtype_narrower_than_inputs(wide, narrow, axis, rng):
    """``dtype=`` narrower than the inputs on rows of several tiles and time-major lanes: the tiles
    staged in shared memory (rows_staged, lanes_tiles STG) are sized for the compute type, so
    wider storage keeps them in registers (it compiled to more than 48 KiB of shared memory)."""
    shape = (4, 1 << 16)
    a = coefficients(rng, shape, wide, reset=0.001, high=1.0, low=0.99)
    b = values(rng, shape, wide)
    if axis == 0:
        a, b = np.ascontiguousarray(a.T), np.ascontiguousarray(b.T)
    h = scanarray.linear_recurrence(cupy.asarray(a), cupy.asarray(b), axis=axis, dtype=narrow, backend="cupy",
                                    method="lookback")
    assert h.dtype == narrow
    ref, g = recurrence_ref(a.astype(narrow), b.astype(narrow), axis)  # values read as the dtype
    assert_matches(cupy.asnumpy(h), ref, g, tolerance(narrow, shape[1]), f"{wide} read as {narrow} axis={axis}")


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("dtype", ["float32", "float64", "complex128", "float16"])
def test_unaligned_views(method, dtype, rng):
    """Views starting one element into their buffers: no vector path for them, same results."""
    T = 4096 * 2 + 37
    big_b = values(rng, (3, T + 3), dtype)
    big_a = coefficients(rng, (3, T + 5), dtype)
    a, b = big_a[:, 2:T + 2], big_b[:, 1:T + 1]
    a_d = cupy.asarray(big_a)[:, 2:T + 2]
    b_d = cupy.asarray(big_b)[:, 1:T + 1]
    out_d = cupy.empty((3, T + 1), dtype)[:, 1:]
    h = scanarray.linear_recurrence(a_d, b_d, out=out_d, backend="cupy", method=method)
    assert h is out_d
    _check(h, a, b, what=f"unaligned {dtype}")


@pytest.mark.parametrize("T", [1, 17, 33, 64, 65, 100, 129, 256, 257, 300])
@pytest.mark.parametrize("dtype", ["float32", "float64", "complex64", "float16"])
def test_short_rows(T, dtype, rng):
    """Rows of at most 16 lanes' steps: ``rows_seg``, 32 / S rows a warp, each row's scan on its S
    lanes (every S from 1 to 16 for each dtype; longer rows a warp each, ``rows_warp``). Aligned and
    one element into the buffer (element path), both directions with an initial state, per-row
    ``a`` constant in time, scalar ``a``, non-finite values in two rows (the warp's exact replay),
    70 rows (a partial last warp). The plan must give a row the fewest lanes (a power of two)."""
    lanes = 70
    a = coefficients(rng, (lanes, T), dtype)
    b = values(rng, (lanes, T), dtype)
    init = values(rng, (lanes,), dtype)
    for reverse in (False, True):
        h = _scan(a, b, method="lookback", initial=cupy.asarray(init), reverse=reverse)
        _check(h, a, b, what=f"short rows T={T} {dtype} reverse={reverse}", initial=init, reverse=reverse)
    big_b = values(rng, (lanes, T + 1), dtype)
    b_d = cupy.asarray(big_b)[:, 1:]
    h = scanarray.linear_recurrence(cupy.asarray(a), b_d, backend="cupy", method="lookback")
    _check(h, a, big_b[:, 1:], what=f"short rows T={T} {dtype} unaligned")
    lane_a = coefficients(rng, (lanes, 1), dtype)
    _check(_scan(lane_a, b, method="lookback"), lane_a, b, what=f"short rows T={T} {dtype} per-row a")
    _check(_scan(0.9, b, method="lookback"), 0.9, b, what=f"short rows T={T} {dtype} scalar a")
    if dtype != "complex64":  # the exact replay of a warp's rows, two of them non-finite
        bn = b.copy()
        bn[3, T // 2], bn[5, 0] = np.inf, np.nan
        with np.errstate(all="ignore"):
            _check(_scan(a, bn, method="lookback"), a, bn, what=f"short rows T={T} {dtype} non-finite")
    bd = cupy.asarray(b)
    dt = np.dtype(np.float32 if dtype == "float16" else dtype)
    p = _cupy_scan.plan(cupy.asarray(a), bd, cupy.empty_like(bd), dt, "lookback")
    args = p.name.rstrip(">").split(", ")  # <TA, TB, TO, C, NT, G, NV, [S,] AC, MINB>
    G = g_max = 16 // np.dtype(dtype).itemsize
    while G > 1 and T % G:  # rows of whole groups (_cupy_scan._fit_group)
        G //= 2
    assert int(args[5]) == G, (T, p.name)
    items = G * (TUNING["rows"][dt.itemsize][1] // g_max)
    lanes_a_row = 1 << (max(1, -(-T // items)) - 1).bit_length()
    if lanes_a_row < 32:
        assert p.kind == "rows_seg" and int(args[-3]) == lanes_a_row, (T, p.name)
    else:
        assert p.kind == "rows_warp", (T, p.name)


@pytest.mark.parametrize("T", [257, 302, 1001, 3001, 20001])
@pytest.mark.parametrize("offset", [0, 1, 2])
@pytest.mark.parametrize("dtype", ["float32", "float16", "complex64"])
def test_narrow_groups(T, offset, dtype, rng):
    """Rows not aligned for 16-byte vectors (lengths that are no multiple of the group, views one or
    two elements into their buffers) read the widest groups they allow, down to one step a load,
    every load issued up front and those past a row's end masked: short rows (``rows_seg``,
    ``rows_warp``), one tile, a block a row and look-back, both directions, with an initial
    state."""
    lanes = 37 if T < 5000 else 3
    big_a = coefficients(rng, (lanes, T + offset), dtype)
    big_b = values(rng, (lanes, T + offset), dtype)
    a, b = big_a[:, offset:], big_b[:, offset:]
    a_d, b_d = cupy.asarray(big_a)[:, offset:], cupy.asarray(big_b)[:, offset:]
    init = values(rng, (lanes,), dtype)
    for reverse in (False, True):
        h = scanarray.linear_recurrence(a_d, b_d, backend="cupy", method="lookback", initial=cupy.asarray(init),
                                        reverse=reverse)
        _check(h, a, b, what=f"narrow groups T={T} +{offset} {dtype} reverse={reverse}", initial=init,
               reverse=reverse)
    dt = np.dtype(np.float32 if dtype == "float16" else dtype)
    p = _cupy_scan.plan(a_d, b_d, cupy.empty_like(b_d), dt, "lookback")
    G = 16 // np.dtype(dtype).itemsize
    while G > 1 and (T % G or offset % G):  # row strides T + offset and T (the result's)
        G //= 2
    assert p.kind.startswith("rows") and int(p.name.split(", ")[5]) == G, (T, offset, p.name)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_negative_strides(method, reverse, axis, rng):
    shape = (3, 5000, 4)
    a = coefficients(rng, shape, "float32")[::-1, ::-1, ::-1]
    b = values(rng, shape, "float32")[::-1, ::-1, ::-1]
    a_d = cupy.asarray(np.ascontiguousarray(a[::-1, ::-1, ::-1]))[::-1, ::-1, ::-1]
    b_d = cupy.asarray(np.ascontiguousarray(b[::-1, ::-1, ::-1]))[::-1, ::-1, ::-1]
    assert all(s < 0 for s in b_d.strides)
    init = values(rng, shape[:axis % 3] + shape[axis % 3 + 1:], "float32")
    h = scanarray.linear_recurrence(a_d, b_d, axis, initial=cupy.asarray(init), reverse=reverse, backend="cupy",
                                    method=method)
    _check(h, a, b, axis, what="negative strides", initial=init, reverse=reverse)


@pytest.mark.parametrize("a_kind", ["scalar", "lane", "time"])
@pytest.mark.parametrize("axis", [-1, 0])
def test_broadcast_a_long(a_kind, axis, rng):
    """Broadcast a over several tiles, both layouts."""
    shape = (4, 9000) if axis == -1 else (9000, 4)
    b = values(rng, shape, "float32")
    if a_kind == "scalar":
        a = 0.999
    elif a_kind == "lane":
        a = coefficients(rng, (4, 1) if axis == -1 else (1, 4), "float32", reset=0, high=0.999)
    else:
        a = coefficients(rng, (1, 9000) if axis == -1 else (9000, 1), "float32")
    h = _scan(a, b, axis, method="lookback")
    _check(h, a, b, axis, what=f"broadcast a {a_kind}")


def test_in_place_time_major_reverse(rng):
    shape = (7000, 33)
    a = coefficients(rng, shape, "float64")
    b = values(rng, shape, "float64")
    b_d = cupy.asarray(b)
    h = scanarray.linear_recurrence(cupy.asarray(a), b_d, 0, out=b_d, reverse=True, backend="cupy")
    assert h is b_d
    _check(b_d, a, b, 0, what="in place, reverse, time-major", reverse=True)


def test_mixed_input_dtypes(rng):
    shape = (3, 5000)
    a = coefficients(rng, shape, "float64")
    b = values(rng, shape, "complex64")
    h = _scan(a, b)
    assert h.dtype == np.complex128
    _check(h, a, b, what="float64 a, complex64 b")
    hi = _scan(a, (values(rng, shape, "float64") * 10).astype(np.int32))
    assert hi.dtype == np.float64


# --------------------------------------------------------------------------- streams


def test_several_streams_at_once(rng):
    """Scans on four non-blocking streams overlap; each matches the loop."""
    shape = (8, 300_000)
    cases = []
    for _ in range(4):
        a = coefficients(rng, shape, "float32", reset=0.0005, high=1.0)
        b = values(rng, shape, "float32")
        cases.append((a, b, cupy.asarray(a), cupy.asarray(b)))
    cupy.cuda.Device().synchronize()
    streams = [cupy.cuda.Stream(non_blocking=True) for _ in cases]
    results = []
    for _ in range(3):
        for s, (_, _, a_d, b_d) in zip(streams, cases):
            with s:
                results.append(scanarray.linear_recurrence(a_d, b_d, backend="cupy", method="lookback"))
    for s in streams:
        s.synchronize()
    for i, (a, b, _, _) in enumerate(cases):
        for r in range(3):
            assert bool(cupy.array_equal(results[i], results[r * 4 + i]))
        ref, g = recurrence_ref(a[:2], b[:2])
        assert_matches(cupy.asnumpy(results[i][:2]), ref, g, tolerance("float32", shape[1]), f"stream {i}")


def test_threads_share_plans(on_streams, rng):
    """Eight threads, each on its own stream, launch the same plans at once (the packed launch
    keeps a parameter buffer per thread): every result matches the loop."""
    shape = (6, 9000)  # rows of several tiles: look-back, workspace per stream
    data = [(coefficients(rng, shape, "float32", reset=0.001, high=1.0), values(rng, shape, "float32"))
            for _ in range(8)]
    dev = [(cupy.asarray(a), cupy.asarray(b)) for a, b in data]
    out = on_streams(lambda i: scanarray.linear_recurrence(*dev[i], backend="cupy", method="lookback"),
                     len(dev), 20)
    for i, (a, b) in enumerate(data):
        _check(out[i], a, b, what=f"thread {i}")


# --------------------------------------------------------------------------- repeated calls


@pytest.fixture
def full_path_calls(count_full_path):
    """Counts calls that went through the full path (the backend driver) rather than a launch
    bound to their signature; starts with no bound calls."""
    return count_full_path(_cupy_scan)


REPEAT_CASES = {
    "rows": dict(shape=(3, 9000), axis=-1),
    "rows reverse": dict(shape=(3, 9000), axis=-1, reverse=True),
    "one tile rows": dict(shape=(5, 4096), axis=-1),
    "one row, length-1 lane axes": dict(shape=(1, 1, 9000), axis=-1),
    "one row reverse": dict(shape=(1, 9000), axis=-1, reverse=True),
    "a length-1 lane axis between others": dict(shape=(3, 1, 9000), axis=-1),
    "time-major, one lane": dict(shape=(9000, 1), axis=0),
    "time-major": dict(shape=(9000, 5), axis=0),
    "scalar a": dict(shape=(3, 9000), axis=-1, a="scalar"),
    "lane a, axis 1 of 3": dict(shape=(2, 5000, 3), axis=1, a="lane"),
    "out given": dict(shape=(3, 9000), axis=-1, out="new"),
    "out=b in place, reverse": dict(shape=(3, 9000), axis=-1, out="b", reverse=True),
    "initial": dict(shape=(3, 9000), axis=-1, initial=True),
    "float16": dict(shape=(3, 9000), axis=-1, dtype="float16"),
    "sequential": dict(shape=(3, 700), axis=-1, method="sequential"),
}


@pytest.mark.parametrize("case", list(REPEAT_CASES))
def test_repeated_calls_bound(full_path_calls, case, rng):
    """Calls repeating a signature skip the full path and launch on their own new arrays:
    each of four calls, on fresh data at fresh addresses, matches the loop."""
    c = REPEAT_CASES[case]
    shape, axis, dtype = c["shape"], c["axis"], c.get("dtype", "float32")
    kw = dict(backend="cupy", method=c.get("method", "lookback"), reverse=c.get("reverse", False))
    keep = []  # keep every call's arrays alive: fresh addresses each time
    for i in range(4):
        if c.get("a") == "scalar":
            a = 0.99
        elif c.get("a") == "lane":
            a = coefficients(rng, tuple(1 if d == axis % len(shape) else n for d, n in enumerate(shape)), dtype,
                             reset=0, high=0.99)
        else:
            a = coefficients(rng, shape, dtype)
        b = values(rng, shape, dtype)
        a_d = a if np.isscalar(a) else cupy.asarray(a)
        b_d = cupy.asarray(b)
        init = None
        if c.get("initial"):
            init = values(rng, shape[:axis % len(shape)] + shape[axis % len(shape) + 1:], dtype)
            kw["initial"] = cupy.asarray(init)
        out = {"new": cupy.empty(shape, dtype), "b": b_d}.get(c.get("out"))
        h = scanarray.linear_recurrence(a_d, b_d, axis, out=out, **kw)
        if out is not None:
            assert h is out
        keep.append((a_d, b_d, h, kw.get("initial")))
        _check(h, a, b, axis, what=f"{case}, call {i}", initial=init, reverse=kw["reverse"])
    assert full_path_calls[0] == 1, "repeated calls of one signature went through the full path"


@pytest.mark.parametrize("case", ["rows", "one tile rows", "time-major", "scalar a"])
def test_repeated_scaled_calls_bound(full_path_calls, case, rng):
    """The vocabulary's scaled scan (``scale * h`` stored by the kernel, _vocab.scan) binds its
    signature with the factor: three calls at 0.5, then two at 2.0, on fresh data at fresh
    addresses, each matching the loop times its factor; the full path runs once per factor."""
    from scanarray import _vocab

    c = REPEAT_CASES[case]
    shape, axis = c["shape"], c["axis"]
    keep = []
    for i, scale in enumerate([0.5, 0.5, 0.5, 2.0, 2.0]):
        a = 0.99 if c.get("a") == "scalar" else coefficients(rng, shape, "float32")
        b = values(rng, shape, "float32")
        a_d = a if np.isscalar(a) else cupy.asarray(a)
        b_d = cupy.asarray(b)
        h = _vocab.scan(a_d, b_d, axis, scale=scale)
        keep.append((a_d, b_d, h))
        _check(h / scale, a, b, axis, what=f"{case}, call {i}, scale {scale}")  # (powers of two: exact)
    assert full_path_calls[0] == 2, "repeated scaled calls of one signature went through the full path"


@pytest.mark.parametrize("axis", [-1, 0])
def test_lookback_epochs_wrap(full_path_calls, monkeypatch, axis, rng):
    """A workspace's epochs wrap every few calls here (its statuses zeroed on its stream): seven
    calls, the first through the full path and the rest bound, on a stream of their own, each
    matching the loop; rows of 3 tiles and time-major tiles."""
    monkeypatch.setattr(_cupy_scan._Workspace, "epoch_limit", 3)
    shape = (3, 9000) if axis == -1 else (9000, 5)
    with cupy.cuda.Stream(non_blocking=True) as s:
        for i in range(7):
            a = coefficients(rng, shape, "float32", reset=0.001, high=1.0, low=0.999)
            b = values(rng, shape, "float32")
            h = scanarray.linear_recurrence(cupy.asarray(a), cupy.asarray(b), axis, backend="cupy",
                                            method="lookback")
            s.synchronize()
            _check(h, a, b, axis, what=f"axis {axis}, call {i}")
    assert full_path_calls[0] == 1


def test_repeated_call_with_overlapping_out(full_path_calls, rng):
    """A bound signature called with an out that overlaps a (not b) takes the full path, which
    copies a first: the result matches the loop on the original a."""
    shape = (3, 9000)
    a, b = coefficients(rng, shape, "float32"), values(rng, shape, "float32")
    a_d, b_d = cupy.asarray(a), cupy.asarray(b)
    scanarray.linear_recurrence(a_d, b_d, out=cupy.empty(shape, "float32"), backend="cupy", method="lookback")
    h = scanarray.linear_recurrence(a_d, b_d, out=a_d, backend="cupy", method="lookback")
    assert h is a_d and full_path_calls[0] == 2
    _check(h, a, b, what="out = a")


def test_repeated_call_with_other_alignment(full_path_calls, rng):
    """Same shapes and strides, views one element further into their buffers: the vector loads
    planned for the first call do not apply, so the full path plans again (and binds the
    signature to the new alignment: the third call, aligned again, takes the full path too)."""
    T = 9000
    big_a, big_b = coefficients(rng, (3, T + 1), "float32"), values(rng, (3, T + 1), "float32")
    a_d, b_d = cupy.asarray(big_a), cupy.asarray(big_b)
    for off in (0, 1, 0):
        h = scanarray.linear_recurrence(a_d[:, off:T + off], b_d[:, off:T + off], backend="cupy", method="lookback")
        _check(h, big_a[:, off:T + off], big_b[:, off:T + off], what=f"offset {off}")
    assert full_path_calls[0] == 3


def test_repeated_scalar_call_on_another_stream(full_path_calls, rng):
    """A Python-scalar a was copied to the device on the first call's stream; a call on
    another stream takes the full path (a fresh copy, ordered on that stream)."""
    shape = (3, 9000)
    b = values(rng, shape, "float32")
    b_d = cupy.asarray(b)
    scanarray.linear_recurrence(0.9, b_d, backend="cupy", method="lookback")
    with cupy.cuda.Stream(non_blocking=True) as s:
        h = scanarray.linear_recurrence(0.9, b_d, backend="cupy", method="lookback")
        s.synchronize()
    assert full_path_calls[0] == 2
    _check(h, 0.9, b, what="scalar a, other stream")


def test_repeated_scalar_call_keeps_its_constant(full_path_calls, rng):
    """The device copy of a Python-scalar a made by the first call is what later bound calls
    read: it must outlive the first call (the memory pool would hand its bytes to the next
    allocation)."""
    shape = (3, 9000)
    for i in range(3):
        b = values(rng, shape, "float64")
        junk = cupy.full((1024,), 7.0)  # reuses freed pool blocks, as any allocation would
        h = scanarray.linear_recurrence(1.0, cupy.asarray(b), backend="cupy", method="lookback")
        del junk
        _check(h, 1.0, b, what=f"a = 1.0, call {i}")
    assert full_path_calls[0] == 1


@pytest.mark.parametrize("shape", [(3, 4096), (3, 9000)])  # one-tile rows, look-back rows
def test_launch_through_cupy_call(count_full_path, shape, rng):
    """CuPy's own RawKernel call (the fallback where the packed launch does not apply: the driver's
    ``packed=False``) gets the same arguments, pointers included, for full-path and bound calls
    alike."""
    full_path_calls = count_full_path(_cupy_scan, packed=False)
    _cupy_scan._plans.clear()
    for i in range(3):
        a, b = coefficients(rng, shape, "float32"), values(rng, shape, "float32")
        h = scanarray.linear_recurrence(cupy.asarray(a), cupy.asarray(b), backend="cupy", method="lookback")
        _check(h, a, b, what=f"RawKernel call {i}")
    assert full_path_calls[0] == 1
    assert all(packed is None for p in _cupy_scan._plans.values() for _, packed in p.fns.values())


def test_repeated_call_scalar_sign_of_zero(full_path_calls, rng):
    """a = 0.0 and a = -0.0 are different signatures (they differ in the sign of zero results)."""
    b = values(rng, (2, 100), "float32")
    b_d = cupy.asarray(b)
    for a in (0.0, -0.0):
        h = scanarray.linear_recurrence(a, b_d, backend="cupy", method="lookback")
        _check(h, a, b, what=f"a = {a}")
    assert full_path_calls[0] == 2


# --------------------------------------------------------------------------- 64-bit indexing


def _free_bytes():
    free, _ = cupy.cuda.runtime.memGetInfo()
    return free


@pytest.mark.slow
def test_over_2_31_elements_one_row():
    n = 2**31 + 4099
    if _free_bytes() < 3 * 4 * n:
        pytest.skip("needs about 26 GB of free GPU memory")
    b = cupy.zeros((1, n), cupy.float32)
    b[0, 5] = 1
    b[0, 2**31 + 3] = 1
    h = scanarray.linear_recurrence(1.0, b, backend="cupy", method="lookback")
    # h is 0 before step 5, 1 up to step 2**31 + 2, 2 after: an exact count
    assert float(h[0, 4]) == 0 and float(h[0, 5]) == 1
    assert int(cupy.count_nonzero(h[0, 5:2**31 + 3] != 1)) == 0
    assert int(cupy.count_nonzero(h[0, 2**31 + 3:] != 2)) == 0
    del h
    # a = 0 everywhere: h = b exactly, so every element's index is checked
    b = cupy.arange(n, dtype=cupy.float32).reshape(1, n)
    h = scanarray.linear_recurrence(0.0, b, backend="cupy")
    assert bool(cupy.array_equal(h, b))


@pytest.mark.slow
def test_over_2_31_elements_time_major():
    T, N = 2**21 + 3, 1024
    if _free_bytes() < 3 * 4 * T * N:
        pytest.skip("needs about 26 GB of free GPU memory")
    b = cupy.ones((T, N), cupy.float32)
    h = scanarray.linear_recurrence(1.0, b, 0, backend="cupy")
    expect = cupy.arange(1, T + 1, dtype=cupy.float32)[:, None]  # exact below 2**24
    assert int(cupy.count_nonzero(h != expect)) == 0


# --------------------------------------------------------------------------- the adjoint's fused product

_FUSED_CASES = {
    # name: (shape, axis, dtype, method, reverse, tuning (None: the default table))
    "short rows": ((70, 100), -1, "float32", "lookback", False, None),
    "rows of a warp": ((9, 600), -1, "float64", "lookback", False, None),
    "one tile": ((5, 4096), -1, "float32", "lookback", True, None),
    "long rows": ((3, 20_011), -1, "complex64", "lookback", False, "small"),
    "long rows float16": ((3, 20_011), -1, "float16", "lookback", True, "small"),
    "many long rows": ((600, 2_000), -1, "float32", "lookback", False, "small"),
    "many long rows reverse": ((600, 2_001), -1, "float64", "lookback", True, "small"),
    "time-major": ((3_000, 70), 0, "float32", "lookback", False, "small"),
    "time-major vector lanes": ((3_000, 64), 0, "float64", "lookback", True, "small"),
    "sequential": ((300, 50), -1, "complex128", "sequential", False, None),
}


def _product_call(a_d, b_d, mul_d, mul_out_d, axis, method, reverse, initial=None):
    """The adjoint's entry of the public function (scanarray._vjp): ``h`` and, in ``mul_out``,
    ``h * mul``."""
    from scanarray import _api

    return _api._linear_recurrence(a_d, b_d, axis, 64, initial, reverse, False, None, None, "cupy", method,
                                   product=(mul_d, mul_out_d))


@pytest.mark.parametrize("shift", [0, 1], ids=["mul aligned", "mul one element on"])
@pytest.mark.parametrize("case", list(_FUSED_CASES))
def test_fused_product(case, shift, small_tiles, tuned, monkeypatch, rng):
    """``Problem.mul``: the diagonal kernels write ``mul_out = h * mul`` in the scan's own pass, for
    every kernel family (short rows, a warp a row, one tile, look-back rows staged or not, a block a
    row, time-major tiles and vector lanes, sequential), both directions, every dtype kind, ``mul``
    aligned as ``out`` or one element on (scalar loads, the adjoint's ``h[t-1]``). Against the
    float64 loop times ``mul``; the plan must be a fused kernel."""
    shape, axis, dtype, method, reverse, table = _FUSED_CASES[case]
    if table is None:
        tuned(TUNING)
    low = 0.999 if dtype != "float16" else 0.99
    a = coefficients(rng, shape, dtype, reset=0.001, high=1.0, low=low)
    b = values(rng, shape, dtype)
    init = values(rng, shape[:axis] + shape[axis + 1:] if axis != -1 else shape[:-1], dtype)
    n = int(np.prod(shape))
    flat = values(rng, (n + 1,), dtype)  # mul: out's strides, `shift` elements into its buffer
    mul = flat[shift:shift + n].reshape(shape)
    mul_d = cupy.asarray(flat)[shift:shift + n].reshape(shape)
    mul_out_d = cupy.full(shape, np.nan, dtype)
    fused = []
    real = _cupy_scan._epilogue
    monkeypatch.setattr(_cupy_scan, "_epilogue", lambda *x: fused.append(real(*x)) or fused[-1])
    h = _product_call(cupy.asarray(a), cupy.asarray(b), mul_d, mul_out_d, axis, method, reverse,
                      cupy.asarray(init))
    assert fused and fused[0] is not None, "the layout ran the unfused multiply"
    ref, g = recurrence_ref(a, b, axis, initial=init, reverse=reverse)
    _check(h, a, b, axis, what=f"fused {case} h", initial=init, reverse=reverse)
    m = mul.astype(np.complex128 if np.dtype(dtype).kind == "c" else np.float64)
    tol = tolerance(dtype, shape[axis]) + (2.0**-10 if dtype == "float16" else 0.0)
    assert_matches(cupy.asnumpy(mul_out_d), ref * m, g * np.abs(m), tol, f"fused {case} mul_out")


def test_fused_product_other_layouts(rng):
    """Where the kernels cannot fuse (``mul`` transposed against ``out``, another dtype, dense,
    matmulscan) the backend still writes ``mul_out = h * mul``, right after the scan."""
    shape = (40, 700)
    a = coefficients(rng, shape, "float32", low=0.99)
    b = values(rng, shape, "float32")
    ref, g = recurrence_ref(a, b)
    for what, mul_d in [("transposed", cupy.asarray(values(rng, shape[::-1], "float32")).T),
                        ("float64 mul", cupy.asarray(values(rng, shape, "float64")))]:
        mul_out_d = cupy.full(shape, np.nan, np.float32)
        h = _product_call(cupy.asarray(a), cupy.asarray(b), mul_d, mul_out_d, -1, "lookback", False)
        m = cupy.asnumpy(mul_d).astype(np.float64)
        _check(h, a, b, what=f"{what} h")
        assert_matches(cupy.asnumpy(mul_out_d), ref * m, g * np.abs(m), tolerance("float32", 700), what)
    a_shared = coefficients(rng, (1, 700), "float32", low=0.99)
    ref, g = recurrence_ref(a_shared, b)
    mul_d = cupy.asarray(values(rng, shape, "float32"))
    mul_out_d = cupy.full(shape, np.nan, np.float32)
    _product_call(cupy.asarray(a_shared), cupy.asarray(b), mul_d, mul_out_d, -1, "matmulscan", False)
    m = cupy.asnumpy(mul_d).astype(np.float64)
    assert_matches(cupy.asnumpy(mul_out_d), ref * m, g * np.abs(m), 1e-5, "matmulscan")


# --------------------------------------------------------------------------- the scaled store

_SCALE_CASES = {**{k: v for k, v in _FUSED_CASES.items() if v[2] in ("float32", "float64")},
                "sequential": ((300, 50), -1, "float64", "sequential", True, None)}


@pytest.mark.parametrize("scalar_a", [False, True], ids=["a per step", "scalar a"])
@pytest.mark.parametrize("case", list(_SCALE_CASES))
def test_scaled_store(case, scalar_a, small_tiles, tuned, monkeypatch, rng):
    """``Problem.scale``: the kernels store ``scale * h`` and carry ``h`` (the vocabulary's gains),
    for every kernel family, both directions, an initial state, ``a`` per step or a scalar;
    against the float64 loop times the scale. The plan must be a scaled kernel."""
    from scanarray import _api

    shape, axis, dtype, method, reverse, table = _SCALE_CASES[case]
    if table is None:
        tuned(TUNING)
    a = 0.999 if scalar_a else coefficients(rng, shape, dtype, reset=0.001, high=1.0, low=0.999)
    b = values(rng, shape, dtype)
    init = values(rng, shape[:axis] + shape[axis + 1:] if axis != -1 else shape[:-1], dtype)
    kinds = []
    real = _cupy_scan.plan
    monkeypatch.setattr(_cupy_scan, "plan", lambda *x, **kw: kinds.append(kw.get("fused")) or real(*x, **kw))
    scale = -0.37
    h = _api._linear_recurrence(a if scalar_a else cupy.asarray(a), cupy.asarray(b), axis, 64, cupy.asarray(init),
                                reverse, False, None, None, "cupy", method, scale=scale)
    assert kinds == ["scale"], kinds
    ref, g = recurrence_ref(np.full(shape, a, dtype) if scalar_a else a, b, axis, initial=init, reverse=reverse)
    assert_matches(cupy.asnumpy(h), scale * ref, abs(scale) * g, tolerance(dtype, shape[axis]), f"scaled {case}")


def test_scaled_store_elsewhere(rng):
    """Where the kernels do not scale as they store (float16 storage, complex, matmulscan, NumPy)
    the result is still ``scale * h``, scaled right after the scan."""
    from scanarray import _api

    for dtype, method in [("float16", "lookback"), ("complex64", "lookback"), ("float32", "matmulscan")]:
        shape = (6, 700)
        a = coefficients(rng, (1, 700) if method == "matmulscan" else shape, dtype, low=0.99)
        b = values(rng, shape, dtype)
        ref, g = recurrence_ref(a, b)
        h = _api._linear_recurrence(cupy.asarray(a), cupy.asarray(b), -1, 64, None, False, False, None, None,
                                    "cupy", method, scale=2.5)
        assert_matches(cupy.asnumpy(h), 2.5 * ref, 2.5 * g, max(tolerance(dtype, 700), 1e-5), f"{dtype} {method}")


@pytest.mark.parametrize("T", [1 << 18, 1 << 21])
def test_cuda_graph_replays_with_new_data(T, rng):
    """A look-back launch captured in a CUDA graph, replayed on new data: each replay must start
    from fresh tile statuses (a replay keeps the epoch it was captured with)."""
    a = cupy.asarray(rng.uniform(0.9, 1.0, (2, T)).astype(np.float32))
    b = cupy.empty((2, T), np.float32)
    out = cupy.empty_like(b)
    s = cupy.cuda.Stream(non_blocking=True)
    with s:
        b[...] = cupy.asarray(rng.standard_normal((2, T)).astype(np.float32))
        scanarray.linear_recurrence(a, b, out=out)  # warm-up: plans, binds, the stream's workspace
        s.synchronize()
        s.begin_capture()
        scanarray.linear_recurrence(a, b, out=out)
        graph = s.end_capture()
        for _ in range(3):
            bn = rng.standard_normal((2, T)).astype(np.float32)
            b.set(bn, stream=s)
            graph.launch(s)
            s.synchronize()
            want, g = recurrence_ref(a.get(), bn, -1)
            assert_matches(out.get(), want, g, tolerance("float32", T))


def test_cuda_graph_capture_without_workspace_is_refused(rng):
    """Capturing a look-back launch on a stream that has no workspace yet: a clear error, not an
    allocation inside the capture."""
    a = cupy.full((1, 1 << 21), 0.99, np.float32)
    b = cupy.ones((1, 1 << 21), np.float32)
    out = cupy.empty_like(b)
    scanarray.linear_recurrence(a, b, out=out)  # plans and binds on the default stream
    s = cupy.cuda.Stream(non_blocking=True)
    with s:
        s.begin_capture()
        try:
            with pytest.raises(RuntimeError, match="warm-up"):
                scanarray.linear_recurrence(a, b, out=out)
        finally:
            s.end_capture()
