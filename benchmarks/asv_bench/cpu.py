"""CPU benchmarks: the numpy and numba backends on the numba issue's workloads, and their peers.

The ``impl`` parameter is backend x method (``"numba/chunked"``) or a peer
(``"scipy.lfilter"``, ``"pandas.ewm"``, ``"jax.associative_scan"``); pairs
that a commit does not have are skipped. Default sizes are small enough for a
run over several commits on two cores; ``SCANARRAY_ASV_FULL=1`` gives the
issue's sizes (``workloads.CPU_SHAPES_FULL``).
"""

from __future__ import annotations

import numpy as np

from . import _common as C
from . import workloads as W
from ._base import _CpuScan, _Dense


class CpuScan(_CpuScan):
    """Full-size ``a``: many rows, one long row, time-major along axis 0 (the numba issue's 1-3)."""

    params = [W.CPU_IMPLS, W.pick_dtypes(["float64"], ["float64", "float32"]),
              C.pick(W.CPU_SHAPES, W.CPU_SHAPES_FULL)]
    param_names = ["impl", "dtype", "shape"]

    def problem(self, impl, dtype, shape):
        shp, axis = C.parse_shape(shape)
        return dict(impl=impl, shape=shp, dtype=dtype, axis=axis)


class CpuEma(_CpuScan):
    """EMA: scalar ``a`` on one row of 2**24 float64, next to scipy's lfilter and pandas' ewm."""

    params = [W.CPU_IMPLS + W.CPU_EMA_PEERS]
    param_names = ["impl"]

    def problem(self, impl):
        return dict(impl=impl, shape=(W.CPU_EMA_N,), dtype="float64", a_kind="scalar")


class CpuGae(_CpuScan):
    """GAE: reverse scan with exact resets (1% zeros in ``a``), time-major (256, 16384) float32, axis 0."""

    params = [W.CPU_IMPLS + ["jax.associative_scan"]]
    param_names = ["impl"]

    def problem(self, impl):
        return dict(impl=impl, shape=W.GAE_SHAPE, dtype="float32", axis=0, reverse=True,
                    resets=0.01, )


class CpuDense(_Dense):
    """Dense transitions, n in {4, 16, 64}: cyclic reduction against the prefix scan and the loop."""

    params = [W.CPU_DENSE_IMPLS, W.CPU_DENSE_N]
    param_names = ["impl", "n"]

    def problem(self, impl, n):
        return dict(impl=impl, batch=W.CPU_DENSE_BATCH, T=W.CPU_DENSE_T, n=n, dtype="float64")


class CpuSweep(_CpuScan):
    """Effective bandwidth against size, one row, for the docs' plot (``tools/plot_benchmarks.py``)."""

    params = [W.CPU_IMPLS + W.CPU_EMA_PEERS, ["full", "scalar"], C.pick(W.CPU_SWEEP, W.CPU_SWEEP_FULL)]
    param_names = ["impl", "a", "n"]

    def problem(self, impl, a, n):
        return dict(impl=impl, shape=(n,), dtype="float64", a_kind=a)

    # The sweep feeds one plot: bandwidth only, no timing/error/memory duplicates.
    time_scan = None
    track_relerr = None
    peakmem_scan = None


class MemoryCopy:
    """This machine's copy bandwidth (``numpy.copyto``, bytes read + written): the plots' ceiling."""

    version = "1"
    timeout = 120

    def setup(self):
        n = C.pick(W.CPU_COPY_BYTES, W.CPU_COPY_BYTES_FULL) // 8
        self.src = np.ones(n)
        self.dst = np.empty_like(self.src)
        np.copyto(self.dst, self.src)

    def track_copy_gbps(self):
        return 2 * self.src.nbytes / C.best_seconds(lambda: np.copyto(self.dst, self.src)) / 1e9

    track_copy_gbps.unit = C.GBPS
