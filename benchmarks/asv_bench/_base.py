"""The base classes every benchmark class of the suite derives from.

A subclass declares ``params``/``param_names`` and a ``problem(*params)``
method returning the inputs; the base builds the call with
:func:`._impls.build`, warms it up in ``setup`` (compilation, caches,
CuPy's memory pool) and provides the measurements:

``time_scan``
    the call (GPU calls synchronise the stream inside it);
``track_gbps``
    effective bandwidth, bytes of ``a`` and ``b`` read plus ``h`` written over
    the best of a few timed calls;
``track_relerr``
    ‖h − ref‖ / ‖ref‖ against a float64 loop over a window of time;
``peakmem_scan`` (CPU classes) and ``track_pool_bytes`` (GPU classes)
    host peak RSS, and the bytes CuPy's pool hands out during one call.

``version`` is fixed so that editing a class's code does not orphan the
results already committed for earlier commits; bump it when a change makes
old and new numbers incomparable (different data, different byte count).
"""

from __future__ import annotations

import numpy as np

from . import _common as C
from ._impls import build, runs_on


class _Timed:
    """asv's timing settings, shared by every class (``benchmarks/asv_bench/_common.py``)."""

    version = "1"
    timeout = C.TIMING["timeout"]
    repeat = C.TIMING["repeat"]
    warmup_time = C.TIMING["warmup_time"]
    min_run_count = C.TIMING["min_run_count"]
    #: "cpu" or "gpu": where the class's data lives
    device = "cpu"

    def teardown(self, *params):
        # Free device memory between parameter sets of one process.
        self.__dict__.clear()
        if self.device == "gpu":
            try:
                import cupy

                cupy.get_default_memory_pool().free_all_blocks()
            except Exception:
                pass


class _Scan(_Timed):
    """A diagonal scan ``h[t] = a[t] h[t-1] + b[t]`` of one workload per parameter set."""

    def problem(self, *params):
        """Return ``dict(impl=, shape=, dtype=, axis=, reverse=, a_kind=, resets=)``."""
        raise NotImplementedError

    def setup(self, *params):
        p = self.problem(*params)
        self.p = p
        gpu = self.device == "gpu"
        if not runs_on(p["impl"], self.device):
            raise NotImplementedError(f"{p['impl']} does not run on the {self.device}")
        if gpu:
            C.require_gpu()
        a, b = C.diagonal_data(p["shape"], p["dtype"], p.get("a_kind", "full"),
                               resets=p.get("resets", 0.0), device=self.device,
                               a_shape=p.get("a_shape"))
        self.a, self.b = a, b
        self.run = build(p["impl"], a, b, axis=p.get("axis", -1),
                         reverse=p.get("reverse", False), device=self.device)
        h = C.warm(self.run, p["impl"])
        self.nbytes = C.nbytes_moved(a, b, b)  # h has b's shape and, here, b's dtype
        self.h = h

    def time_scan(self, *params):
        self.run()

    def track_gbps(self, *params):
        return self.nbytes / C.best_seconds(self.run) / 1e9

    track_gbps.unit = C.GBPS

    def track_relerr(self, *params):
        p = self.p
        index, ref = C.oracle_window(self.a, self.b, axis=p.get("axis", -1),
                                     reverse=p.get("reverse", False))
        return C.relative_error(self.h, index, ref, axis=p.get("axis", -1))

    track_relerr.unit = C.RELERR


class _CpuScan(_Scan):
    device = "cpu"

    def peakmem_scan(self, *params):
        self.run()


class _GpuScan(_Scan):
    device = "gpu"
    # A GPU call takes milliseconds; a minute means a hung kernel, and the device budget is small.
    timeout = 90

    def track_pool_bytes(self, *params):
        return C.PoolPeak().measure(self.run)

    track_pool_bytes.unit = C.BYTES


class _Dense(_Timed):
    """``h[t] = A[t] @ h[t-1] + b[t]`` on (batch, T, n, n) transitions."""

    def problem(self, *params):
        """Return ``dict(impl=, batch=, T=, n=, dtype=)``."""
        raise NotImplementedError

    def setup(self, *params):
        p = self.problem(*params)
        gpu = self.device == "gpu"
        if not runs_on(p["impl"], self.device):
            raise NotImplementedError(f"{p['impl']} does not run on the {self.device}")
        if gpu:
            C.require_gpu()
        A, b = C.dense_data(p["batch"], p["T"], p["n"], p["dtype"], device=self.device)
        self.A, self.b = A, b
        self.run = build(p["impl"], A, b, axis=1, device=self.device, dense=True)
        self.h = C.warm(self.run, p["impl"])

    def time_dense(self, *params):
        self.run()

    def track_relerr(self, *params):
        ref = C.dense_oracle(self.A, self.b, steps=1024)
        return C.dense_relative_error(self.h, ref)

    track_relerr.unit = C.RELERR


def shape_elements(label):
    shape, _ = C.parse_shape(label)
    return int(np.prod(shape))
