"""The numba.cuda Blelloch backend: kernels under numba's CUDA simulator, the backend on a GPU.

``NUMBA_ENABLE_CUDASIM=1`` must be set before numba.cuda is first imported, so the
simulator half runs in its own process: either directly

    NUMBA_ENABLE_CUDASIM=1 python -m pytest tests/test_numba_cuda.py -m "not gpu"

or, from a plain ``pytest`` run, through :func:`test_simulator_in_subprocess`,
which starts that command. The simulator tests feed NumPy arrays straight to
the kernel-level :func:`scanarray.backends.numba_cuda_backend.scan4d` (no CuPy
needed); the GPU tests go through the public function with CuPy arrays.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import numpy as np
import pytest

from data import coefficients, values
from oracle import assert_matches, recurrence_ref, tolerance

SIM = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
HAVE_NUMBA = importlib.util.find_spec("numba") is not None

sim_only = pytest.mark.skipif(not (SIM and HAVE_NUMBA), reason="needs NUMBA_ENABLE_CUDASIM=1 (run in its own process)")


# --------------------------------------------------------------------------- simulator


@pytest.mark.skipif(SIM or not HAVE_NUMBA, reason="already simulating, or numba missing")
@pytest.mark.slow  # a minute of simulated kernels: CI's slow step (tools/ci_slow.sh)
def test_simulator_in_subprocess():
    """Run this file's simulator tests in a fresh interpreter with the simulator switched on."""
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    here = os.path.dirname(os.path.abspath(__file__))
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", os.path.join(here, "test_numba_cuda.py"),
         "-m", "not gpu", "-k", "sim_"],
        env=env, cwd=os.path.dirname(here), capture_output=True, text=True, timeout=900,
    )
    tail = (res.stdout + res.stderr)[-4000:]
    assert res.returncode == 0, tail
    assert " passed" in res.stdout, tail


def _sim_scan(a, b, init=None, reverse=False, out=None, acc=None):
    from scanarray.backends import numba_cuda_backend as m

    acc = np.dtype(acc or (np.float32 if b.dtype == np.float16 else b.dtype))
    out = np.full(b.shape, np.nan, b.dtype) if out is None else out
    m.scan4d(a, b, out, init, reverse, acc=acc)
    return out


_SIM_DTYPES = ["float16", "float32", "float64", "complex64", "complex128"]


@sim_only
# the simulator's tile is 32: one partial tile, or 2 and 4 tiles (reduce, carries scanned by the
# same function recursively, scan). Every dtype takes the recursion at 2 tiles; 4 tiles (about
# 6 s a case on CI's two cores) for a 4- and a 16-byte type
@pytest.mark.parametrize("T,dtype", [(T, d) for T in (1, 33) for d in _SIM_DTYPES]
                         + [(100, "float32"), (100, "complex128")])
@pytest.mark.parametrize("reverse", [False, True])
def test_sim_tiles(T, dtype, reverse, rng):
    shape = (2, 1, 3, T)
    a = coefficients(rng, shape, dtype)
    b = values(rng, shape, dtype)
    acc = np.float32 if dtype == "float16" else dtype
    init = values(rng, (6,), acc)
    h = _sim_scan(a, b, init, reverse)
    ref, g = recurrence_ref(a, b, -1, initial=init.reshape(2, 1, 3), reverse=reverse)
    assert_matches(h, ref, g, tolerance(dtype, T, 32), f"sim {dtype} T={T} reverse={reverse}")


@sim_only
def test_sim_broadcast_a_lanes_contiguous_in_place(rng):
    """a with zero strides (shared along the last lane axis), lanes contiguous (time-major), out = b."""
    T, n = 45, 5
    base = values(rng, (T, n), "float64")  # time-major memory
    b = base.T[None, None]  # (1, 1, n, T), lane stride 1 < time stride (F-ordered: the simulator's copy)
    a_c = coefficients(rng, (1, 1, 1, T), "float64", reset=0.1)
    # A writable zero-stride view: the simulator copies every argument back to the host.
    a = np.lib.stride_tricks.as_strided(a_c, b.shape, (0, 0, 0, a_c.strides[3]))
    ref, g = recurrence_ref(a, b.copy())
    _sim_scan(a, b, out=b)
    assert_matches(b, ref, g, tolerance("float64", T, 32), "in place")
    assert np.array_equal(b[a == 0], np.asarray(b)[a == 0])


@sim_only
def test_sim_nonfinite_where_the_loop_puts_them(rng):
    shape = (1, 1, 4, 70)
    a = coefficients(rng, shape, "float64", reset=0.1)
    b = values(rng, shape, "float64")
    b[0, 0, 0, 3] = np.inf
    a[0, 0, 1, 40] = np.nan
    a[0, 0, 2, 10] = np.inf
    b[0, 0, 3, 5], b[0, 0, 3, 50] = np.inf, -np.inf
    h = _sim_scan(a, b)
    ref, g = recurrence_ref(a, b)
    assert np.isnan(ref).any()
    assert_matches(h, ref, g, tolerance("float64", 70, 32), "non-finite")


@sim_only
@pytest.mark.parametrize("start", [0, 29, 30])  # the float32 state crosses the simulator's 32-step tile
def test_sim_float16_state_is_float32(start):
    """float16 storage, float32 state (issue 38): the mend of a lane with an infinity reads the
    float32 state, not the float16 it was stored as (1e-9 stored is 0, and 0 * inf is NaN)."""
    from oracle import loop_in

    for av, bv in [([0.5, 1e-3, 1e-3, 1e-3, np.inf, 0.5], [1, 0, 0, 0, 0, 0]),
                   ([1, 1, 1e-3, 1, 1], [6e4, 6e4, 0, 0, np.inf])]:
        a = np.full((1, 1, 1, 40), 0.5, np.float16)
        b = np.zeros((1, 1, 1, 40), np.float16)
        a[..., start:start + len(av)], b[..., start:start + len(bv)] = av, bv
        expected = loop_in(np.float32, a, b).astype(np.float16)
        h = _sim_scan(a, b)
        assert h.dtype == np.float16
        np.testing.assert_array_equal(np.isnan(h), np.isnan(expected))
        np.testing.assert_array_equal(h[~np.isfinite(expected)], expected[~np.isfinite(expected)])
        fin = np.isfinite(expected)
        np.testing.assert_allclose(h[fin].astype(float), expected[fin].astype(float), rtol=2**-10, atol=1e-7)


@sim_only
@pytest.mark.parametrize("t", [31, 32, 33])
def test_sim_in_place_nonfinite(t, rng):
    """out = b with an infinity at a tile boundary: the mend reads the original b (issue 38)."""
    shape = (1, 1, 3, 100)
    a = coefficients(rng, shape, "float64")
    b = values(rng, shape, "float64")
    a[0, 0, 0, t] = np.inf
    a[0, 0, 1, t], a[0, 0, 1, t + 5] = -np.inf, 0.0
    b[0, 0, 2, t], b[0, 0, 2, t + 3] = np.inf, -np.inf
    ref, g = recurrence_ref(a, b)
    _sim_scan(a, b, out=b)
    assert_matches(b, ref, g, tolerance("float64", 100, 32), "in place")


@sim_only
def test_sim_resets_exact(rng):
    shape = (1, 1, 3, 90)
    a = coefficients(rng, shape, "float64", reset=0.2)
    b = values(rng, shape, "float64")
    h = _sim_scan(a, b)
    np.testing.assert_array_equal(h[a == 0], b[a == 0])


def test_merge_lanes():
    from scanarray.backends._layout import merge_axes

    # (BH, n, d) lanes of b (BH, G, n, d) scanned along G, a broadcast along d: no merge possible.
    shape, (sb, sa) = merge_axes([4, 16, 64], [[128 * 1024, 64, 1], [128 * 16, 1, 0]], drop_ones=True)
    assert shape == [4, 16, 64] and sb == [128 * 1024, 64, 1]
    shape, (sb,) = merge_axes([4, 1, 16, 64], [[1024, 7, 64, 1]], drop_ones=True)
    assert shape == [4 * 16 * 64] and sb == [1]
    # Without dropping, a length-1 axis merges only where its stride happens to fit.
    shape, (sb,) = merge_axes([2, 3], [[3, 1]])
    assert shape == [6] and sb == [1]


# --------------------------------------------------------------------------- GPU

def _gpu_reason():
    if SIM:
        return "simulating"
    from scanarray import _registry

    return _registry.unavailable_reason("numba_cuda")


GPU_REASON = _gpu_reason()


def _run(a, b, axis=-1, **kw):
    import cupy

    import scanarray

    to = (lambda x: cupy.asarray(x) if isinstance(x, np.ndarray) else x)
    h = scanarray.linear_recurrence(to(a), to(b), axis, backend="numba_cuda", method="blelloch",
                                    **{k: to(v) for k, v in kw.items()})
    assert isinstance(h, cupy.ndarray)
    return h.get()


@pytest.mark.gpu
@pytest.mark.skipif(GPU_REASON is not None, reason=f"numba_cuda: {GPU_REASON}")
@pytest.mark.parametrize("T", [1, 7, 512, 1024, 1025, 5000])
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "complex64", "complex128"])
@pytest.mark.parametrize("axis", [-1, 0])
def test_gpu_shapes_dtypes(T, dtype, axis, rng):
    shape = (3, T) if axis == -1 else (T, 3)
    a = coefficients(rng, shape, dtype)
    b = values(rng, shape, dtype)
    init = values(rng, (3,), "float32" if dtype == "float16" else dtype)
    for reverse in (False, True):
        h = _run(a, b, axis, initial=init, reverse=reverse)
        ref, g = recurrence_ref(a, b, axis, initial=init, reverse=reverse)
        assert_matches(h, ref, g, tolerance(dtype, T, 1024), f"{dtype} T={T} axis={axis} rev={reverse}")


@pytest.mark.gpu
@pytest.mark.skipif(GPU_REASON is not None, reason=f"numba_cuda: {GPU_REASON}")
def test_gpu_long_row_two_levels_of_carries(rng):
    T = 1024 * 1024 + 77  # 1025 tiles: the carries themselves need two tiles
    a = coefficients(rng, (1, T), "float64", reset=0.001, high=1.0)
    b = values(rng, (1, T), "float64")
    h = _run(a, b)
    ref, g = recurrence_ref(a, b)
    assert_matches(h, ref, g, tolerance("float64", T, 1024), "long row")


@pytest.mark.gpu
@pytest.mark.skipif(GPU_REASON is not None, reason=f"numba_cuda: {GPU_REASON}")
def test_gpu_seed_layout_and_in_place(rng):
    """b (BH, G, 16, 64) with a (BH, G, 16, 1) along G: the inter-chunk scan of the seed experiment."""
    import cupy

    import scanarray

    a = coefficients(rng, (3, 128, 16, 1), "float32", reset=0.02, high=1.0)
    b = values(rng, (3, 128, 16, 64), "float32")
    ref, g = recurrence_ref(a, b, 1)
    bd = cupy.asarray(b)
    h = scanarray.linear_recurrence(cupy.asarray(a), bd, 1, backend="numba_cuda", method="blelloch", out=bd)
    assert h is bd
    assert_matches(bd.get(), ref, g, tolerance("float32", 128, 1024), "seed layout in place")


@pytest.mark.gpu
@pytest.mark.skipif(GPU_REASON is not None, reason=f"numba_cuda: {GPU_REASON}")
def test_gpu_nonfinite(rng):
    shape = (5, 3000)
    a = coefficients(rng, shape, "float64", reset=0.02)
    b = values(rng, shape, "float64")
    a[0, 70] = np.nan
    b[1, 3] = np.inf
    a[3, 1500] = np.inf
    b[4, 10], b[4, 2000] = np.inf, -np.inf
    h = _run(a, b)
    ref, g = recurrence_ref(a, b)
    assert_matches(h, ref, g, tolerance("float64", shape[1], 1024), "non-finite")


# --------------------------------------------------------------------------- the auto rule measured here

def test_cupy_auto_prefers_sequential_for_many_short_lanes_closer():
    """The CuPy backend's auto rule for many short lanes closer in memory than time steps (the
    inter-chunk scan of chunked linear RNNs; docs/guide/gpu.md); shapes only."""
    from types import SimpleNamespace

    from scanarray.backends import cupy as cupy_backend

    def method(b):
        return cupy_backend.auto_method(SimpleNamespace(dense=False, b=b))

    seed = np.zeros((64, 256, 16, 64), np.float32)
    assert method(np.moveaxis(seed, 1, -1)) == "sequential"  # 65536 lanes, lanes contiguous
    assert method(np.moveaxis(seed[:1], 1, -1)) == "lookback"  # 1024 lanes
    assert method(np.zeros((70000, 512), np.float32)) == "lookback"  # time contiguous
    assert method(np.moveaxis(np.zeros((2048, 70000), np.float32), 0, -1)) == "lookback"  # T > 256
