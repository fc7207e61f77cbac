"""The dask backend on a multi-process LocalCluster: results, graph shape, laziness, meta.

Results are compared with the extended-precision loop oracle (``oracle.py``),
never with another backend. The graph checks read ``__dask_graph__()`` and its
dependencies: the graph grows linearly with the number of blocks, and a
result block depends on its own input block and on the carries, whose only
route to the data goes through the per-block summaries.
"""

from __future__ import annotations

import numpy as np
import pytest

da = pytest.importorskip("dask.array")
dask = pytest.importorskip("dask")
distributed = pytest.importorskip("distributed")

import scanarray  # noqa: E402
from scanarray.backends import dask_backend  # noqa: E402
from data import coefficients, contractive, values  # noqa: E402
from oracle import assert_matches, dense_ref, recurrence_ref, tolerance  # noqa: E402


@pytest.fixture(scope="module")
def client():
    """Two worker processes, one thread each: blocks really travel between processes."""
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
        memory_limit="2GiB",
    ) as cluster, distributed.Client(cluster) as c:
        yield c


def _tol(dtype, T, chunk=64):
    # The block boundary adds one composition per block on the carry path.
    return tolerance(dtype, T, chunk) * 2


# --------------------------------------------------------------------------- results on the cluster


def _compute(h, request, on_cluster):
    """``h`` computed on the two-process cluster, or in this process (the graph is the same;
    the cluster adds only pickling and transfers, which a few cases of each test exercise)."""
    if on_cluster:
        return request.getfixturevalue("client").compute(h).result()
    return h.compute(scheduler="sync")


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "complex64", "complex128"])
@pytest.mark.parametrize("reverse", [False, True])
def test_matches_oracle(dtype, reverse, rng, request):
    """Every dtype, both directions; float64 both ways and float16 forward on the cluster."""
    shape = (3, 7, 1500)
    a = coefficients(rng, shape, dtype)
    b = values(rng, shape, dtype)
    init = values(rng, (3, 7), dtype)
    # chunked along every axis, time included; a and b chunked differently
    h = scanarray.linear_recurrence(
        da.from_array(a, chunks=(2, 3, 211)), da.from_array(b, chunks=(1, 4, 137)),
        initial=da.from_array(init, chunks=(2, 7)), reverse=reverse,
    )
    assert isinstance(h, da.Array) and h.dtype == np.dtype(dtype)
    out = _compute(h, request, dtype == "float64" or (dtype == "float16" and not reverse))
    assert type(out) is np.ndarray
    ref, g = recurrence_ref(a, b, initial=init, reverse=reverse)
    assert_matches(out, ref, g, _tol(dtype, shape[-1]), f"dask {dtype} reverse={reverse}")


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("a_kind", ["scalar", "lane", "time", "python"])
def test_axes_and_broadcast_a(axis, a_kind, rng, request):
    """Every time axis with every broadcast a; two of them on the cluster."""
    shape = [40, 30, 20]
    shape[axis] = 900
    shape = tuple(shape)
    b = values(rng, shape, "float32")
    if a_kind == "python":
        a_np, a_in = 0.97, 0.97
    else:
        a_shape = {"scalar": (), "lane": tuple(1 if i == axis % 3 else s for i, s in enumerate(shape)),
                   "time": tuple(s if i == axis % 3 else 1 for i, s in enumerate(shape))}[a_kind]
        a_np = coefficients(rng, a_shape, "float32", reset=0.0, high=0.99)
        a_in = da.from_array(a_np, chunks=tuple(max(1, s // 2) for s in a_shape))
    b_in = da.from_array(b, chunks=tuple(max(1, s // 4) for s in shape))
    h = scanarray.linear_recurrence(a_in, b_in, axis=axis)
    ref, g = recurrence_ref(a_np, b, axis=axis)
    out = _compute(h, request, (axis, a_kind) in ((-1, "lane"), (0, "python")))
    assert_matches(out, ref, g, _tol("float32", 900), f"axis={axis} a={a_kind}")


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("invariant", [False, True])
def test_dense_on_cluster(client, reverse, invariant, rng):
    n, T = 3, 700
    A = contractive(rng, (n, n) if invariant else (4, T, n, n), "float64")
    b = values(rng, (4, T, n), "float64")
    init = values(rng, (4, n), "float64")
    A_d = da.from_array(A, chunks=(n, n) if invariant else (2, 97, n, n))
    h = scanarray.linear_recurrence(
        A_d, da.from_array(b, chunks=(3, 64, n)), dense=True, reverse=reverse,
        initial=da.from_array(init),
    )
    ref, g = dense_ref(A, b, initial=init, reverse=reverse)
    assert_matches(client.compute(h).result(), ref, g, tolerance("float64", T, n=n) * 8, "dense")


# --------------------------------------------------------------------------- non-finite carries


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_nonfinite_across_many_blocks(dtype, rng):
    """NaN/Inf anywhere (block edges included) land where the loop puts them, carries included."""
    T, L = 2000, 50
    a = coefficients(rng, (8, T), dtype, reset=0.002, high=1.02)
    b = values(rng, (8, T), dtype)
    picks = [(0, 0, "a", np.inf), (1, L, "a", -np.inf), (2, L - 1, "b", np.inf), (3, 777, "a", np.nan),
             (4, 10, "b", -np.inf), (4, 4 * L, "b", np.inf), (5, 3 * L + 7, "a", np.inf),
             (6, 31, "b", np.nan), (7, 5 * L, "a", -np.inf)]
    for lane, t, which, v in picks:
        (a if which == "a" else b)[lane, t] = v
    for reverse in (False, True):
        h = scanarray.linear_recurrence(da.from_array(a, chunks=(3, L)), da.from_array(b, chunks=(3, L)),
                                        reverse=reverse)
        ref, g = recurrence_ref(a, b, reverse=reverse)
        assert np.isnan(ref).any() and np.isinf(ref).any()
        assert_matches(h.compute(scheduler="sync"), ref, g, _tol(dtype, T), f"non-finite reverse={reverse}")


@pytest.mark.parametrize("a_value", [0.5, -0.5])
def test_infinity_through_blocks_whose_product_underflows(a_value, rng):
    """prod(a) of a block underflows to 0 but no a is 0: an entering infinity survives it."""
    T = 6000
    b = values(rng, (2, T), "float64")
    b[0, 5] = np.inf
    b[1, 1500] = -np.inf
    a = np.full((2, T), a_value)
    a[1, 4500] = 0.0  # ...and an exact zero turns it into NaN
    for a_in in (a_value, da.from_array(a, chunks=(1, 1200))):
        h = scanarray.linear_recurrence(a_in, da.from_array(b, chunks=(1, 1200)))
        ref, g = recurrence_ref(a_value if np.isscalar(a_in) else a, b)
        assert_matches(h.compute(scheduler="sync"), ref, g, _tol("float64", T), "underflow")


@pytest.mark.parametrize("chunk", [1, 2, 3, 4])
def test_dtype_float32_reads_float32(chunk):
    """dtype=float32 with float64 inputs: every block reads float32 (1e39 is +inf, 1e-50 a reset),
    summaries included, as a float32 loop does."""
    from oracle import loop_in

    a = np.array([0.5, 1e39, 1e-50, 0.5, 0.5, 0.5])
    b = np.ones(6)
    h = scanarray.linear_recurrence(da.from_array(a, chunks=chunk), da.from_array(b, chunks=chunk), dtype=np.float32)
    expected = loop_in(np.float32, a, b)
    np.testing.assert_array_equal(h.compute(scheduler="sync"), expected)  # 1, inf, then NaN


@pytest.mark.parametrize("dtype", [">f8", ">f4", ">c16", "<f8"])
def test_non_native_byte_order(dtype, rng):
    """Big-endian blocks (FITS, HDF5, netCDF files) are read through native copies, lazily."""
    x = rng.uniform(-1, 1, (3, 500)).astype(dtype)
    y = rng.standard_normal((3, 500)).astype(dtype)
    h = scanarray.linear_recurrence(da.from_array(x, chunks=(2, 128)), da.from_array(y, chunks=(2, 128)))
    assert h.dtype == np.dtype(dtype).newbyteorder("=")
    ref, g = recurrence_ref(x, y)
    assert_matches(h.compute(scheduler="sync"), ref, g, _tol(np.dtype(dtype).newbyteorder("="), 500), "big-endian")
    ones = scanarray.linear_recurrence(0.5, da.from_array(np.ones(8, dtype)))
    np.testing.assert_allclose(ones.compute(), 2 - 0.5 ** np.arange(8))


def test_numpy_operands_join_as_one_block(rng):
    """NumPy arrays and scalars beside Dask arrays: accepted as Dask's own operations accept
    them, each a single block; the result is a Dask array of b's chunks."""
    a = coefficients(rng, (4, 300), "float64")
    b = values(rng, (4, 300), "float64")
    init = values(rng, (4,), "float64")
    b_d = da.from_array(b, chunks=(2, 70))
    ref, g = recurrence_ref(a, b, initial=init)
    for a_in, init_in in [(a, init), (da.from_array(a, chunks=(3, 100)), init), (a, da.from_array(init))]:
        h = scanarray.linear_recurrence(a_in, b_d, initial=init_in)
        assert isinstance(h, da.Array) and h.chunks == b_d.chunks
        assert_matches(h.compute(scheduler="sync"), ref, g, _tol("float64", 300), "numpy operands")
    h = scanarray.linear_recurrence(np.float64(0.5), b_d, initial=a[:, 0][0])  # NumPy scalars
    ref, g = recurrence_ref(0.5, b, initial=a[0, 0])
    assert_matches(h.compute(scheduler="sync"), ref, g, _tol("float64", 300), "numpy scalars")
    # a NumPy b beside a Dask a makes the call a Dask one too
    h = scanarray.linear_recurrence(da.from_array(a, chunks=(2, 100)), b)
    assert isinstance(h, da.Array)


#: (CHAIN, GROUP): a chain of carry tasks, one gathering task, trees over either
SHAPES = [(64, 256), (0, 256), (64, 3), (0, 3)]
SHAPE_IDS = ["chain", "gather", "tree-chain", "tree-gather"]


@pytest.mark.parametrize("chain,group", SHAPES, ids=SHAPE_IDS)
def test_carry_shapes(monkeypatch, chain, group, rng):
    """Every shape of the carry stage: chain, one gather, trees of groups (more blocks than GROUP)."""
    monkeypatch.setattr(dask_backend, "CHAIN", chain)
    monkeypatch.setattr(dask_backend, "GROUP", group)
    T = 2600
    a = coefficients(rng, (4, T), "float64", reset=0.01)
    b = values(rng, (4, T), "float64")
    a[1, 333], b[2, 1000], a[3, 2100] = np.inf, np.nan, -np.inf
    for reverse in (False, True):
        h = scanarray.linear_recurrence(da.from_array(a, chunks=(2, 100)), da.from_array(b, chunks=(2, 100)),
                                        reverse=reverse, initial=da.from_array(np.arange(4.0)))
        ref, g = recurrence_ref(a, b, initial=np.arange(4.0), reverse=reverse)
        assert_matches(h.compute(scheduler="sync"), ref, g, _tol("float64", T), f"tree reverse={reverse}")
    A = contractive(rng, (T, 2, 2), "float64")
    bd = values(rng, (T, 2), "float64")
    h = scanarray.linear_recurrence(da.from_array(A, chunks=(100, 2, 2)), da.from_array(bd, chunks=(100, 2)),
                                    axis=0, dense=True)
    ref, g = dense_ref(A, bd, axis=0)
    assert_matches(h.compute(scheduler="sync"), ref, g, tolerance("float64", T, n=2) * 8, "tree dense")


# --------------------------------------------------------------------------- laziness and graph


def _ema(n_blocks, L=100, lanes=1, **kw):
    b = da.ones((lanes, n_blocks * L), chunks=(lanes, L))
    a = da.full((lanes, n_blocks * L), 0.9, chunks=(lanes, L))
    return scanarray.linear_recurrence(a, b, **kw), a, b


def test_nothing_computed_inside_the_call(monkeypatch):
    calls = []

    def count(f):
        def wrapped(*args, **kw):
            calls.append(f.__name__)
            return f(*args, **kw)
        return wrapped

    for name in ("_summary", "_carry_task", "_carry_first", "_carry_next", "_compose_task", "_block"):
        monkeypatch.setattr(dask_backend, name, count(getattr(dask_backend, name)))

    def trap(*args, **kwargs):
        raise AssertionError("something was computed inside linear_recurrence")

    with dask.config.set(scheduler=trap):
        h, _, _ = _ema(40, initial=da.zeros((1,)))
        monkeypatch.setattr(dask_backend, "GROUP", 4)
        _ema(40, reverse=True)
        scanarray.linear_recurrence(da.eye(2, chunks=1), da.ones((50, 2), chunks=(10, 1)), axis=0, dense=True)
    assert calls == []
    h.compute(scheduler="sync")
    assert {"_summary", "_carry_first", "_carry_next", "_block"} <= set(calls)


@pytest.mark.parametrize("chain,group", SHAPES, ids=SHAPE_IDS)
def test_graph_grows_linearly(monkeypatch, chain, group):
    monkeypatch.setattr(dask_backend, "CHAIN", chain)
    monkeypatch.setattr(dask_backend, "GROUP", group)
    sizes, edges = [], []
    for n in (8, 16, 32, 64, 128):
        h, a, b = _ema(n, lanes=2)
        graph = h.__dask_graph__()
        deps = graph.get_all_dependencies()
        own = set(deps) - set(a.__dask_graph__()) - set(b.__dask_graph__())
        sizes.append(len(own))
        edges.append(sum(len(deps[k]) for k in own))
    ns = np.array([8, 16, 32, 64, 128])
    per_task, per_edge = np.array(sizes) / ns, np.array(edges) / ns
    # Tasks per block stay bounded as n grows 16-fold (n log n would add ~4 per
    # block): summary, carry split, block scan, rechunk shares, the tree's
    # geometric 1/GROUP + 1/GROUP^2... and three no-op transposes (the frontend's
    # moveaxis, fused away by dask's optimiser at compute).
    assert per_task.max() <= 10 and per_task[-1] - per_task[0] <= 1.5, sizes
    assert per_edge.max() <= 16 and per_edge[-1] - per_edge[0] <= 2, edges


def _name(key):
    return key[0] if isinstance(key, tuple) else key


@pytest.mark.parametrize("chain,group", SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize("reverse", [False, True])
def test_blocks_depend_only_on_summaries(monkeypatch, chain, group, reverse):
    monkeypatch.setattr(dask_backend, "CHAIN", chain)
    monkeypatch.setattr(dask_backend, "GROUP", group)
    n = 12
    h, a, b = _ema(n, lanes=3, reverse=reverse)
    deps = h.__dask_graph__().get_all_dependencies()
    source = set(a.__dask_graph__()) | set(b.__dask_graph__())

    def is_summary(k):
        return _name(k).startswith("scan-summary")

    memo = {}

    def touches_data(k):
        """Whether ``k`` reaches input data by a path that avoids every summary."""
        if k not in memo:
            memo[k] = k in source or any(touches_data(d) for d in deps[k] if not is_summary(d))
        return memo[k]

    summaries = [k for k in deps if is_summary(k)]
    assert len(summaries) == n
    for s in summaries:  # a summary reads its own block of a and b, nothing else
        assert {d[1:] for d in deps[s]} == {s[1:-1]}, deps[s]
    blocks = [k for k in deps if _name(k).startswith("scan-block")]
    assert len(blocks) == n
    for key in blocks:
        direct = deps[key]
        # the only data a result block reads is its own block; everything else
        # it needs (the carry) reaches the data through summaries only
        assert {d[1:] for d in direct if touches_data(d)} == {key[1:]}, (key, direct)
        assert any(not touches_data(d) for d in direct), direct


def test_broadcast_a_is_never_expanded(monkeypatch):
    """Block functions receive a scalar/per-lane ``a`` with its length-1 axes, not a full block."""
    shapes = []

    def spy(real):
        def f(b, a, *rest, **kw):
            shapes.append((a.shape, b.shape))
            return real(b, a, *rest, **kw)
        return f

    for name in ("_summary", "_block"):
        monkeypatch.setattr(dask_backend, name, spy(getattr(dask_backend, name)))
    b = da.ones((6, 1000), chunks=(3, 100))
    for a in (0.9, da.from_array(np.float64(0.9)), da.full((6, 1), 0.9, chunks=(2, 1))):
        shapes.clear()
        h = scanarray.linear_recurrence(a, b)
        h.compute(scheduler="sync")
        # 20 blocks and 18 summaries (the last block's summary is culled: nothing follows it)
        assert len(shapes) == 20 + 18 and all(sa[-1] == 1 for sa, _ in shapes), shapes


def test_meta_and_chunks_preserved():
    b = da.ones((4, 1000), chunks=(2, 250), dtype=np.float32)
    h = scanarray.linear_recurrence(0.5, b, axis=-1)
    assert type(h._meta) is np.ndarray and h.dtype == np.float32 and h.chunks == b.chunks
    ht = scanarray.linear_recurrence(0.5, b.T, axis=0)
    assert ht.chunks == b.T.chunks
    with pytest.raises(TypeError, match="out="):
        scanarray.linear_recurrence(0.5, b, out=b)


def test_cupy_blocks_stay_cupy():
    cupy = pytest.importorskip("cupy")
    try:
        cupy.cuda.runtime.getDeviceCount()
    except Exception:
        pytest.skip("no CUDA device")
    rng = np.random.default_rng(1)
    a = coefficients(rng, (3, 3000), "float32")
    b = values(rng, (3, 3000), "float32")
    a[1, 1234] = np.inf
    h = scanarray.linear_recurrence(
        da.from_array(cupy.asarray(a), chunks=(2, 500)), da.from_array(cupy.asarray(b), chunks=(2, 700)),
        reverse=True,
    )
    assert isinstance(h._meta, cupy.ndarray)
    out = h.compute(scheduler="sync")
    assert isinstance(out, cupy.ndarray)
    ref, g = recurrence_ref(a, b, reverse=True)
    assert_matches(cupy.asnumpy(out), ref, g, _tol("float32", 3000), "cupy blocks")
    # Python scalars (the frontend makes them 0-d NumPy-block dask arrays) with CuPy blocks
    h = scanarray.linear_recurrence(0.9, da.from_array(cupy.asarray(b), chunks=(2, 700)), initial=1.5)
    assert isinstance(h._meta, cupy.ndarray)
    ref, g = recurrence_ref(0.9, b, initial=1.5)
    assert_matches(cupy.asnumpy(h.compute(scheduler="sync")), ref, g, _tol("float32", 3000), "cupy, scalar a")
    with pytest.raises(TypeError, match="blocks"):
        scanarray.linear_recurrence(da.from_array(a, chunks=(2, 500)), da.from_array(cupy.asarray(b), chunks=(2, 700)))
    # dense, time-invariant and time-varying A, on CuPy blocks
    for A in (contractive(rng, (3, 3), "float64"), contractive(rng, (2, 900, 3, 3), "float64")):
        bd = values(rng, (2, 900, 3), "float64")
        A_d = da.from_array(cupy.asarray(A), chunks=A.shape if A.ndim == 2 else (1, 200, 3, 3))
        h = scanarray.linear_recurrence(A_d, da.from_array(cupy.asarray(bd), chunks=(1, 250, 3)), dense=True)
        assert isinstance(h._meta, cupy.ndarray)
        ref, g = dense_ref(A, bd)
        assert_matches(cupy.asnumpy(h.compute(scheduler="sync")), ref, g, tolerance("float64", 900, n=3) * 8,
                       "cupy dense")


def test_docs_example():
    """The file-to-file example of docs/guide/dask.md runs as written (memory-mapped .npy, threads)."""
    import pathlib
    import re

    text = (pathlib.Path(__file__).parent.parent / "docs" / "guide" / "dask.md").read_text()
    blocks = [blk for blk in re.findall(r"```python\n(.*?)```", text, re.S) if "open_memmap" in blk]
    assert len(blocks) == 1
    exec(compile(blocks[0], "docs/guide/dask.md", "exec"), {})


# --------------------------------------------------------------------------- any chunking


from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@st.composite
def _chunked_case(draw):
    lanes = draw(st.integers(1, 4))
    T = draw(st.integers(1, 160))
    axis = draw(st.sampled_from([0, 1]))
    shape = (T, lanes) if axis == 0 else (lanes, T)
    a_full = draw(st.booleans())
    chunks = [tuple(draw(st.integers(1, max(1, s))) for s in shape) for _ in range(2)]
    seed = draw(st.integers(0, 2**32 - 1))
    spikes = draw(st.lists(st.tuples(st.integers(0, T - 1), st.sampled_from([np.inf, -np.inf, np.nan]),
                                     st.booleans()), max_size=3))
    return shape, axis, a_full, chunks, seed, spikes, draw(st.booleans()), draw(st.booleans())


@given(_chunked_case())
def test_any_chunking_matches_the_loop(case):
    """Random shapes, chunkings of a and b (different), axes, reverse, initial, NaN/Inf spikes."""
    shape, axis, a_full, (ca, cb), seed, spikes, reverse, with_init = case
    rng = np.random.default_rng(seed)
    a = coefficients(rng, shape if a_full else (1, 1), "float64", reset=0.05)
    b = values(rng, shape, "float64")
    for t, v, on_a in spikes:
        idx = (t, 0) if axis == 0 else (0, t)
        if on_a and a_full:
            a[idx] = v
        else:
            b[idx] = v
    lanes = shape[1 - axis]
    init = values(rng, (lanes,), "float64") if with_init else None
    h = scanarray.linear_recurrence(
        da.from_array(a, chunks=ca if a_full else (1, 1)), da.from_array(b, chunks=cb), axis=axis,
        reverse=reverse, initial=None if init is None else da.from_array(init, chunks=max(1, lanes // 2)),
    )
    ref, g = recurrence_ref(a, b, axis=axis, initial=init, reverse=reverse)
    assert_matches(h.compute(scheduler="sync"), ref, g, _tol("float64", shape[axis]), f"chunks a={ca} b={cb}")
