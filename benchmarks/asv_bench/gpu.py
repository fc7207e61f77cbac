"""GPU benchmarks: the cupy and numba_cuda backends and their GPU peers, on CuPy arrays.

Without CuPy or a CUDA device every ``setup`` raises NotImplementedError, so
on a CPU machine these classes are skipped. Inputs are drawn on the device,
compilation and CuPy's memory pool are warmed up in ``setup``, and every timed
call synchronises CuPy's current stream (torch and JAX peers wait on their own
results). Run on the GPU host with ``asv run --python=same`` and a machine
name that carries the GPU model (``tools/asv_gpu.sh``).
"""

from __future__ import annotations

import numpy as np

from . import _common as C
from . import workloads as W
from ._base import _Dense, _GpuScan


class GpuScan(_GpuScan):
    """Full-size ``a`` on the look-back issue's shapes (many rows, one long row, time-major)."""

    params = [W.GPU_IMPLS, W.pick_dtypes(["float32"], ["float32", "float64", "complex64"]),
              C.pick(W.GPU_SHAPES, W.GPU_SHAPES_FULL)]
    param_names = ["impl", "dtype", "shape"]

    def problem(self, impl, dtype, shape):
        shp, axis = C.parse_shape(shape)
        if impl.endswith("/sequential") and int(np.prod(shp)) // shp[axis] < 1024:
            # One thread per lane: a single long row would run for seconds on one thread.
            raise NotImplementedError("sequential needs many lanes")
        _no_matmulscan_fallback(impl)
        return dict(impl=impl, shape=shp, dtype=dtype, axis=axis)


def _no_matmulscan_fallback(impl):
    # matmulscan runs on tensor cores only where the decay is shared across lanes (scalar or
    # per-time a, GpuEma, GpuChunkState); with full-size a it hands the problem to lookback,
    # which would show lookback's time under matmulscan's name.
    if impl == "cupy/matmulscan":
        raise NotImplementedError("matmulscan needs a decay shared across lanes (full-size a falls back to lookback)")


class GpuEma(_GpuScan):
    """EMA: scalar ``a`` over 1e8 float64, next to cupyx's lfilter and jax.lax.associative_scan."""

    params = [W.GPU_IMPLS + W.GPU_EMA_PEERS]
    param_names = ["impl"]

    def problem(self, impl):
        if impl.endswith("/sequential"):
            raise NotImplementedError("sequential needs many lanes")
        return dict(impl=impl, shape=(W.GPU_EMA_N,), dtype="float64", a_kind="scalar")

    track_pool_bytes = None


class GpuGae(_GpuScan):
    """GAE: reverse scan with exact resets (1% zeros), time-major (256, 16384) float32, axis 0."""

    params = [W.GPU_IMPLS + ["jax.associative_scan"]]
    param_names = ["impl"]

    def problem(self, impl):
        _no_matmulscan_fallback(impl)
        return dict(impl=impl, shape=W.GAE_SHAPE, dtype="float32", axis=0, reverse=True,
                    resets=0.01)

    track_pool_bytes = None


class GpuChunkState(_GpuScan):
    """The inter-chunk state scan of chunked linear RNNs (the MatMulScan seed experiment).

    ``b`` of shape (BH, G, 16, 64) with a per-chunk decay ``a`` of shape (BH, G, 16, 1) shared by
    the 64 value lanes, scanned along G, float32: where tensor cores can do real work.
    """

    params = [["cupy/matmulscan", "cupy/lookback", "cupy/sequential", "numba_cuda/blelloch"],
              W.CHUNK_BH, W.CHUNK_G]
    param_names = ["impl", "BH", "G"]

    def problem(self, impl, BH, G):
        return dict(impl=impl, shape=(BH, G, 16, 64), a_shape=(BH, G, 16, 1), dtype="float32", axis=1)

    track_pool_bytes = None


class GpuDense(_Dense):
    """Dense transitions, (batch 8, T 4096, n) float32, n in {4, 16, 64}."""

    device = "gpu"
    timeout = 90
    params = [W.GPU_DENSE_IMPLS, W.DENSE_N]
    param_names = ["impl", "n"]

    def problem(self, impl, n):
        _no_lookback_fallback(impl, n)
        return dict(impl=impl, batch=W.GPU_DENSE_BATCH, T=W.GPU_DENSE_T, n=n, dtype="float32")


def _no_lookback_fallback(impl, n):
    # the dense lookback kernel takes n <= 32 and hands larger n to chunked, whose time would
    # show under lookback's name
    if impl == "cupy/lookback" and n > 32:
        raise NotImplementedError("dense lookback runs n <= 32 (larger n fall back to chunked)")


class GpuDenseTarget(_Dense):
    """The dense issue's target shapes, float32: (64, 1024, 16) and (8, 4096, 64)."""

    device = "gpu"
    timeout = 90
    params = [["cupy/auto", "cupy/lookback", "cupy/chunked", "jax.associative_scan"], W.GPU_DENSE_TARGETS]
    param_names = ["impl", "shape"]

    def problem(self, impl, shape):
        batch, T, n = (int(x) for x in shape.split("x"))
        _no_lookback_fallback(impl, n)
        return dict(impl=impl, batch=batch, T=T, n=n, dtype="float32")


class GpuSweep(_GpuScan):
    """Effective bandwidth against size: float32 rows of 4096 steps, full-size ``a``."""

    params = [["cupy/auto", "cupy/lookback", "numba_cuda/blelloch"] + W.GPU_SWEEP_PEERS,
              C.pick(W.GPU_SWEEP, W.GPU_SWEEP_FULL)]
    param_names = ["impl", "n"]

    def problem(self, impl, n):
        return dict(impl=impl, shape=(n // W.GPU_SWEEP_T, W.GPU_SWEEP_T), dtype="float32")

    time_scan = None
    track_relerr = None
    track_pool_bytes = None


class GpuRowLength(_GpuScan):
    """Bandwidth against row length: 2**24 elements as rows of 16 to 16384 steps, full-size ``a``,
    ``cupy/auto``, in every dtype (the short-row kernels, their tile shapes and the narrower
    groups of rows that are not aligned for 16-byte loads)."""

    params = [W.pick_dtypes(["float32", "complex128"], ["float16", "float32", "float64", "complex64", "complex128"]),
              C.pick(W.GPU_ROW_T, W.GPU_ROW_T_FULL)]
    param_names = ["dtype", "T"]

    def problem(self, dtype, T):
        return dict(impl="cupy/auto", shape=(W.GPU_ROW_N // T, T), dtype=dtype)

    time_scan = None
    track_pool_bytes = None


class MemoryCopy:
    """The device's copy bandwidth (CuPy device-to-device copy of 1 GiB, bytes read + written)."""

    version = "1"
    timeout = 120

    def setup(self):
        cupy = C.require_gpu()
        self.cupy = cupy
        self.src = cupy.ones(W.GPU_COPY_BYTES // 4, dtype=cupy.float32)
        self.dst = cupy.empty_like(self.src)
        self._copy()

    def _copy(self):
        self.dst.data.copy_from_device_async(self.src.data, self.src.nbytes)
        C.gpu_sync()

    def track_copy_gbps(self):
        return 2 * self.src.nbytes / C.best_seconds(self._copy) / 1e9

    track_copy_gbps.unit = C.GBPS
